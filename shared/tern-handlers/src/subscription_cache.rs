//! The relay's cache of each tenant's endpoints, exact at every batch.
//!
//! The relay needs, for every event, the endpoints of its tenant that subscribe to it. It
//! used to read the tenant's whole endpoint list (a `Query` of the tenant's partition, about
//! 8 read units for 100 endpoints) for every batch holding an event of that tenant: at
//! 10,000 deliveries/s that put the endpoints table at 150 % of its default read quota
//! (docs/scale.md). This cache keeps each tenant's list in a warm relay and checks it with
//! one small strongly consistent `GetItem` per tenant per batch
//! ([`EndpointStore::subscriptions_version`], 1 read unit).
//!
//! **Why it is exact.** Every write that can change which endpoints a tenant has or what
//! they subscribe to (create, replace, update, delete) changes the tenant's subscriptions
//! version in the same DynamoDB transaction (`tern_aws::endpoints`). A list is kept under
//! the version read **before** it, and it is read strongly consistent: so it holds every
//! change that version counts (and maybe later ones). A change acknowledged before an
//! event's outbox item was written changed the version before the relay reads it for that
//! event's batch (strongly consistent), so the relay sees a version that differs from the
//! kept one and reads the list again. A change made meanwhile by a concurrent writer is one
//! the event could not have waited for, as without the cache.
//!
//! What the version does not count cannot change the relay's answer: disabling and enabling
//! an endpoint (the relay sends to disabled endpoints too; the sender reads the current
//! state and dead-letters `endpoint_disabled`), a secret or signing key rotation (the relay
//! reads no secret).
//!
//! A backstop for writes that do not change the version (a writer of an older build still
//! running during the deploy that brings the version, an edit made by hand in the DynamoDB
//! console): a kept list is read again after [`MAX_AGE`] whatever the version says.
//!
//! Memory is bounded: at most [`MAX_CACHED_ENDPOINTS`] endpoints are kept, the tenants
//! least recently used going first; a tenant with more endpoints than that is never kept
//! (it is read for each batch, as before). A store that keeps no version
//! ([`EndpointStore::subscriptions_version`] answers `None`) is read for each batch.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tern_core::endpoint::{EndpointSecret, EndpointUpdate};
use tern_core::ports::{EndpointPage, EndpointStore, PortError};
use tern_core::signing_key::EndpointSigningKey;
use tern_core::{Endpoint, EndpointId, TenantId};

/// Most endpoints one relay instance keeps, over all tenants: 20,000. The relay's store
/// reads endpoints without their secrets (a few hundred bytes each), so this is a few MB of
/// the relay's 256 MB.
pub const MAX_CACHED_ENDPOINTS: usize = 20_000;

/// Longest a kept list is used without reading it again, whatever the version says:
/// 300 s. Only writes that do not change the version (see the module's docs) wait for it;
/// at 100 tenants and 80 warm relays (the 10,000/s target) it costs about 27 `Query` calls
/// a second over the deployment.
pub const MAX_AGE: Duration = Duration::from_secs(300);

/// One tenant's kept list.
struct Entry {
    /// The subscriptions version read before the list.
    version: u64,
    /// When the list was read.
    read_at: Instant,
    /// Last use, for eviction (a counter: larger is more recent).
    used: u64,
    endpoints: Arc<Vec<Endpoint>>,
}

#[derive(Default)]
struct Entries {
    tenants: HashMap<TenantId, Entry>,
    /// Endpoints held over all tenants.
    held: usize,
    clock: u64,
}

/// How the cache answered, since it was made (for tests and logs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheCounts {
    /// Lists served from memory after the version said they are current.
    pub hits: u64,
    /// Lists read from the store.
    pub reads: u64,
}

/// An [`EndpointStore`] whose `list_for_tenant` is served from memory while the tenant's
/// subscriptions version is unchanged; every other call goes to the store.
pub struct SubscriptionCache {
    inner: Arc<dyn EndpointStore>,
    entries: Mutex<Entries>,
    max_endpoints: usize,
    max_age: Duration,
    hits: AtomicU64,
    reads: AtomicU64,
}

impl SubscriptionCache {
    /// A cache in front of `inner`, with [`MAX_CACHED_ENDPOINTS`] and [`MAX_AGE`].
    pub fn new(inner: Arc<dyn EndpointStore>) -> Self {
        Self::with_limits(inner, MAX_CACHED_ENDPOINTS, MAX_AGE)
    }

    /// A cache keeping at most `max_endpoints` endpoints, each list at most `max_age`.
    pub fn with_limits(
        inner: Arc<dyn EndpointStore>,
        max_endpoints: usize,
        max_age: Duration,
    ) -> Self {
        Self {
            inner,
            entries: Mutex::new(Entries::default()),
            max_endpoints,
            max_age,
            hits: AtomicU64::new(0),
            reads: AtomicU64::new(0),
        }
    }

    /// How it answered so far.
    pub fn counts(&self) -> CacheCounts {
        CacheCounts {
            hits: self.hits.load(Ordering::Relaxed),
            reads: self.reads.load(Ordering::Relaxed),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        // A panic while holding the lock leaves the map consistent (every change is one
        // insert or remove), so a poisoned lock is still usable.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The kept list of `tenant` if it was read under `version` less than `max_age` ago.
    fn kept(&self, tenant: &TenantId, version: u64) -> Option<Arc<Vec<Endpoint>>> {
        let mut entries = self.entries();
        entries.clock += 1;
        let now = entries.clock;
        let entry = entries.tenants.get_mut(tenant)?;
        if entry.version != version || entry.read_at.elapsed() >= self.max_age {
            return None;
        }
        entry.used = now;
        Some(entry.endpoints.clone())
    }

    /// Keeps `endpoints` of `tenant` under `version`, making room by dropping the least
    /// recently used tenants; a list larger than the whole cache is not kept.
    fn keep(&self, tenant: &TenantId, version: u64, read_at: Instant, endpoints: Vec<Endpoint>) {
        let mut entries = self.entries();
        if let Some(old) = entries.tenants.remove(tenant) {
            entries.held -= old.endpoints.len();
        }
        if endpoints.len() > self.max_endpoints {
            return;
        }
        while entries.held + endpoints.len() > self.max_endpoints {
            let Some(oldest) = entries
                .tenants
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(t, _)| t.clone())
            else {
                break;
            };
            if let Some(gone) = entries.tenants.remove(&oldest) {
                entries.held -= gone.endpoints.len();
            }
        }
        entries.clock += 1;
        let used = entries.clock;
        entries.held += endpoints.len();
        entries.tenants.insert(
            tenant.clone(),
            Entry {
                version,
                read_at,
                used,
                endpoints: Arc::new(endpoints),
            },
        );
    }
}

#[async_trait]
impl EndpointStore for SubscriptionCache {
    async fn get(&self, tenant: &TenantId, id: &EndpointId) -> Result<Option<Endpoint>, PortError> {
        self.inner.get(tenant, id).await
    }

    async fn get_current(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
    ) -> Result<Option<Endpoint>, PortError> {
        self.inner.get_current(tenant, id).await
    }

    /// The tenant's endpoints: the kept list while the tenant's subscriptions version is
    /// the one it was read under (one strongly consistent `GetItem`), else a strongly
    /// consistent read of the list, kept under the version read before it.
    async fn list_for_tenant(&self, tenant: &TenantId) -> Result<Vec<Endpoint>, PortError> {
        let Some(version) = self.inner.subscriptions_version(tenant).await? else {
            self.reads.fetch_add(1, Ordering::Relaxed);
            return self.inner.list_for_tenant(tenant).await;
        };
        if let Some(kept) = self.kept(tenant, version) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(kept.as_ref().clone());
        }
        // The time is taken before the read, so MAX_AGE counts from before it.
        let read_at = Instant::now();
        self.reads.fetch_add(1, Ordering::Relaxed);
        let endpoints = self.inner.list_for_tenant_current(tenant).await?;
        self.keep(tenant, version, read_at, endpoints.clone());
        Ok(endpoints)
    }

    async fn list_for_tenant_current(&self, tenant: &TenantId) -> Result<Vec<Endpoint>, PortError> {
        self.inner.list_for_tenant_current(tenant).await
    }

    async fn subscriptions_version(&self, tenant: &TenantId) -> Result<Option<u64>, PortError> {
        self.inner.subscriptions_version(tenant).await
    }

    async fn list_all(&self) -> Result<Vec<Endpoint>, PortError> {
        self.inner.list_all().await
    }

    async fn list_page(
        &self,
        tenant: &TenantId,
        after: Option<&EndpointId>,
        limit: usize,
        enabled: Option<bool>,
    ) -> Result<EndpointPage, PortError> {
        self.inner.list_page(tenant, after, limit, enabled).await
    }

    async fn put(&self, endpoint: &Endpoint) -> Result<(), PortError> {
        self.inner.put(endpoint).await
    }

    async fn create(&self, endpoint: &Endpoint) -> Result<Option<Endpoint>, PortError> {
        self.inner.create(endpoint).await
    }

    async fn disable(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        reason: &str,
    ) -> Result<(), PortError> {
        self.inner.disable(tenant, id, reason).await
    }

    async fn disable_keeping_reason(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        reason: &str,
    ) -> Result<(), PortError> {
        self.inner.disable_keeping_reason(tenant, id, reason).await
    }

    async fn enable(&self, tenant: &TenantId, id: &EndpointId) -> Result<(), PortError> {
        self.inner.enable(tenant, id).await
    }

    async fn delete(&self, tenant: &TenantId, id: &EndpointId) -> Result<(), PortError> {
        self.inner.delete(tenant, id).await
    }

    async fn update(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        update: &EndpointUpdate,
    ) -> Result<(), PortError> {
        self.inner.update(tenant, id, update).await
    }

    async fn set_secrets(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        secrets: &[EndpointSecret],
    ) -> Result<(), PortError> {
        self.inner.set_secrets(tenant, id, secrets).await
    }

    async fn set_signing_keys(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        keys: &[EndpointSigningKey],
    ) -> Result<(), PortError> {
        self.inner.set_signing_keys(tenant, id, keys).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use tern_core::Secret;

    /// A store whose tenants have a version and a list, counting the reads of each. A
    /// write landing during a list read is simulated by `bump_during_list`.
    #[derive(Default)]
    struct Store {
        endpoints: Mutex<Vec<Endpoint>>,
        versions: Mutex<HashMap<TenantId, u64>>,
        versionless: bool,
        bump_during_list: std::sync::atomic::AtomicBool,
        lists: AtomicU64,
        version_reads: AtomicU64,
    }

    fn endpoint(tenant: &str, id: &str) -> Endpoint {
        Endpoint::new(
            EndpointId::new(id).unwrap(),
            TenantId::new(tenant).unwrap(),
            "https://receiver.test/hook",
            vec!["*".into()],
            Secret::generate(),
            Utc::now(),
        )
    }

    fn tenant(t: &str) -> TenantId {
        TenantId::new(t).unwrap()
    }

    impl Store {
        fn with(endpoints: &[(&str, &str)]) -> Arc<Self> {
            let store = Self::default();
            *store.endpoints.lock().unwrap() =
                endpoints.iter().map(|(t, id)| endpoint(t, id)).collect();
            Arc::new(store)
        }
        /// A write: the endpoint added and the tenant's version changed together.
        fn add(&self, t: &str, id: &str) {
            self.endpoints.lock().unwrap().push(endpoint(t, id));
            *self.versions.lock().unwrap().entry(tenant(t)).or_default() += 1;
        }
        fn lists(&self) -> u64 {
            self.lists.load(Ordering::SeqCst)
        }
    }

    #[async_trait]
    impl EndpointStore for Store {
        async fn get(&self, _: &TenantId, _: &EndpointId) -> Result<Option<Endpoint>, PortError> {
            Ok(None)
        }
        async fn list_for_tenant(&self, t: &TenantId) -> Result<Vec<Endpoint>, PortError> {
            self.lists.fetch_add(1, Ordering::SeqCst);
            let list = self
                .endpoints
                .lock()
                .unwrap()
                .iter()
                .filter(|e| &e.tenant_id == t)
                .cloned()
                .collect();
            if self.bump_during_list.swap(false, Ordering::SeqCst) {
                *self.versions.lock().unwrap().entry(t.clone()).or_default() += 1;
            }
            Ok(list)
        }
        async fn subscriptions_version(&self, t: &TenantId) -> Result<Option<u64>, PortError> {
            self.version_reads.fetch_add(1, Ordering::SeqCst);
            if self.versionless {
                return Ok(None);
            }
            Ok(Some(
                self.versions.lock().unwrap().get(t).copied().unwrap_or(0),
            ))
        }
        async fn list_all(&self) -> Result<Vec<Endpoint>, PortError> {
            Ok(self.endpoints.lock().unwrap().clone())
        }
        async fn put(&self, e: &Endpoint) -> Result<(), PortError> {
            self.add(e.tenant_id.as_str(), e.id.as_str());
            Ok(())
        }
        async fn disable(&self, _: &TenantId, _: &EndpointId, _: &str) -> Result<(), PortError> {
            Ok(())
        }
        async fn set_secrets(
            &self,
            _: &TenantId,
            _: &EndpointId,
            _: &[EndpointSecret],
        ) -> Result<(), PortError> {
            Ok(())
        }
    }

    fn ids(list: &[Endpoint]) -> Vec<&str> {
        let mut ids: Vec<&str> = list.iter().map(|e| e.id.as_str()).collect();
        ids.sort_unstable();
        ids
    }

    #[tokio::test]
    async fn the_list_is_kept_while_the_version_is_unchanged_and_read_again_after_a_write() {
        let store = Store::with(&[("tnt_a", "ep_1")]);
        let cache = SubscriptionCache::new(store.clone());
        let a = tenant("tnt_a");
        assert_eq!(ids(&cache.list_for_tenant(&a).await.unwrap()), ["ep_1"]);
        assert_eq!(ids(&cache.list_for_tenant(&a).await.unwrap()), ["ep_1"]);
        assert_eq!(store.lists(), 1, "the second call is served from memory");
        assert_eq!(
            store.version_reads.load(Ordering::SeqCst),
            2,
            "one version read per call"
        );
        store.add("tnt_a", "ep_2");
        assert_eq!(
            ids(&cache.list_for_tenant(&a).await.unwrap()),
            ["ep_1", "ep_2"]
        );
        assert_eq!(store.lists(), 2);
        assert_eq!(cache.counts(), CacheCounts { hits: 1, reads: 2 });
    }

    #[tokio::test]
    async fn a_list_is_kept_under_the_version_read_before_it() {
        // A write lands while the list is read: the list may hold it, but it is kept under
        // the version before, so the next call reads again instead of trusting it.
        let store = Store::with(&[("tnt_a", "ep_1")]);
        let cache = SubscriptionCache::new(store.clone());
        let a = tenant("tnt_a");
        store.bump_during_list.store(true, Ordering::SeqCst);
        cache.list_for_tenant(&a).await.unwrap();
        cache.list_for_tenant(&a).await.unwrap();
        assert_eq!(store.lists(), 2);
        cache.list_for_tenant(&a).await.unwrap();
        assert_eq!(store.lists(), 2);
    }

    #[tokio::test]
    async fn a_store_without_versions_is_read_every_time() {
        let store = Arc::new(Store {
            versionless: true,
            ..Store::default()
        });
        store.add("tnt_a", "ep_1");
        let cache = SubscriptionCache::new(store.clone());
        for _ in 0..3 {
            cache.list_for_tenant(&tenant("tnt_a")).await.unwrap();
        }
        assert_eq!(store.lists(), 3);
    }

    #[tokio::test]
    async fn a_kept_list_is_read_again_after_max_age() {
        let store = Store::with(&[("tnt_a", "ep_1")]);
        let cache = SubscriptionCache::with_limits(store.clone(), 100, Duration::ZERO);
        cache.list_for_tenant(&tenant("tnt_a")).await.unwrap();
        cache.list_for_tenant(&tenant("tnt_a")).await.unwrap();
        assert_eq!(store.lists(), 2);
    }

    #[tokio::test]
    async fn memory_is_bounded_least_recently_used_tenants_go_first() {
        let store = Store::with(&[
            ("tnt_a", "ep_a1"),
            ("tnt_a", "ep_a2"),
            ("tnt_b", "ep_b1"),
            ("tnt_b", "ep_b2"),
            ("tnt_c", "ep_c1"),
            ("tnt_big", "ep_1"),
            ("tnt_big", "ep_2"),
            ("tnt_big", "ep_3"),
            ("tnt_big", "ep_4"),
            ("tnt_big", "ep_5"),
        ]);
        let cache = SubscriptionCache::with_limits(store.clone(), 4, MAX_AGE);
        let (a, b, c, big) = (
            tenant("tnt_a"),
            tenant("tnt_b"),
            tenant("tnt_c"),
            tenant("tnt_big"),
        );
        cache.list_for_tenant(&a).await.unwrap();
        cache.list_for_tenant(&b).await.unwrap();
        cache.list_for_tenant(&a).await.unwrap(); // a is now the more recent
        assert_eq!(store.lists(), 2);
        cache.list_for_tenant(&c).await.unwrap(); // 5 > 4: b goes
        assert_eq!(store.lists(), 3);
        cache.list_for_tenant(&a).await.unwrap();
        assert_eq!(store.lists(), 3, "a stayed");
        cache.list_for_tenant(&b).await.unwrap();
        assert_eq!(store.lists(), 4, "b was dropped");
        assert!(cache.entries().held <= 4);
        // Larger than the whole cache: read every time, nothing else dropped for it.
        let held = cache.entries().held;
        assert_eq!(cache.list_for_tenant(&big).await.unwrap().len(), 5);
        cache.list_for_tenant(&big).await.unwrap();
        assert_eq!(store.lists(), 6);
        assert_eq!(cache.entries().held, held);
    }
}
