//! A per-instance cache of endpoints in front of the endpoint registry, so a warm sender
//! does not read DynamoDB for every delivery.
//!
//! - An endpoint read from the store is served from memory for [`CachedEndpoints::ttl`]
//!   (default [`DEFAULT_ENDPOINT_CACHE_SECONDS`]); after that the next delivery reads it
//!   again. So a disable, an enable, an update or a secret rotation made **elsewhere**
//!   (another sender instance, the `tern` CLI, your own code) reaches a warm instance
//!   within that time.
//! - A change made **through this cache** (a 410 seen by this instance disables the
//!   endpoint; any write of this process) applies to this instance at once: a disable
//!   replaces the cached entry by a disabled copy, even when the store write failed (the
//!   receiver said it is gone, so nothing more is sent to it from here), and every other
//!   write drops the entry, so the next read is the store's.
//! - A missing endpoint is not cached: deleting one is rare and its deliveries
//!   dead-letter, so each of them reads the store.
//! - A read that started before a local change never refills the cache with what it
//!   read (a generation counter), so a disable cannot be undone by a read in flight.
//! - Lists (`list_for_tenant`, `list_all`) are not cached.
//! - [`EndpointStore::get_current`] reads the store past the cache (and refreshes the
//!   entry): the sender asks it before dead-lettering a delivery as `endpoint_disabled`,
//!   so an endpoint enabled elsewhere within the TTL is not refused on a stale copy. The
//!   one exception is a disable through this cache that the store did not take (it was
//!   unavailable): the store would say "enabled", the receiver said it is gone, and the
//!   cached disabled copy answers until the TTL ends.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::Utc;
use tern_core::endpoint::{EndpointSecret, EndpointUpdate};
use tern_core::ports::{EndpointStore, PortError};
use tern_core::signing_key::EndpointSigningKey;
use tern_core::{Endpoint, EndpointId, TenantId};

/// How long a warm sender serves an endpoint from memory, in seconds, unless
/// `TERN_ENDPOINT_CACHE_SECONDS` says otherwise: the longest a disable or rotation made
/// elsewhere waits before this instance sees it. 30 s is short next to the shortest retry
/// wait (60 s) and a rotation's overlap (24 h by default), and saves one consistent read
/// per delivery when an endpoint receives more than one delivery per 30 s per instance.
/// Like every wait, it is multiplied by `TERN_TIME_SCALE` (local mode's `--time-scale`):
/// [`crate::config::SenderConfig::endpoint_cache_ttl`].
pub const DEFAULT_ENDPOINT_CACHE_SECONDS: u64 = 30;

/// Most `TERN_ENDPOINT_CACHE_SECONDS` may be, in seconds: a disable made elsewhere must
/// apply within minutes, not hours.
pub const MAX_ENDPOINT_CACHE_SECONDS: u64 = 300;

type Key = (TenantId, EndpointId);

/// One cached endpoint.
struct Entry {
    /// When it was read or last changed here.
    at: Instant,
    endpoint: Endpoint,
    /// A disable made through this cache that the store did not take: the store still
    /// says enabled, so [`EndpointStore::get_current`] answers from here until the TTL.
    unsynced_disable: bool,
}

/// An [`EndpointStore`] that serves `get` from memory for `ttl` and passes everything
/// else to the store it wraps (see the module documentation for the rules).
pub struct CachedEndpoints {
    inner: Arc<dyn EndpointStore>,
    ttl: Duration,
    entries: Mutex<HashMap<Key, Entry>>,
    /// Bumped by every local change; a read fills the cache only when no change happened
    /// while it was in flight.
    generation: AtomicU64,
}

impl CachedEndpoints {
    /// Caches `inner`'s endpoints for `ttl`. A zero `ttl` turns the cache off (every `get`
    /// reads the store).
    pub fn new(inner: Arc<dyn EndpointStore>, ttl: Duration) -> Self {
        Self {
            inner,
            ttl,
            entries: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
        }
    }

    /// How long an endpoint is served from memory.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn key(tenant: &TenantId, id: &EndpointId) -> Key {
        (tenant.clone(), id.clone())
    }

    /// Drops the entry: the next `get` reads the store.
    fn forget(&self, tenant: &TenantId, id: &EndpointId) {
        let mut entries = self.entries();
        self.generation.fetch_add(1, Ordering::SeqCst);
        entries.remove(&Self::key(tenant, id));
    }

    /// Replaces a cached entry by a disabled copy carrying `reason`, fresh for `ttl`;
    /// `unsynced` when the store did not take the disable.
    fn mark_disabled(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        reason: Option<&str>,
        unsynced: bool,
    ) {
        let mut entries = self.entries();
        self.generation.fetch_add(1, Ordering::SeqCst);
        if let Some(Entry {
            at,
            endpoint,
            unsynced_disable,
        }) = entries.get_mut(&Self::key(tenant, id))
        {
            *unsynced_disable = unsynced;
            if endpoint.enabled {
                endpoint.enabled = false;
                endpoint.disabled_at = Some(Utc::now());
            }
            if let Some(reason) = reason {
                endpoint.disabled_reason = Some(reason.to_owned());
            } else if endpoint.disabled_reason.is_none() {
                endpoint.disabled_reason = Some("disabled".to_owned());
            }
            *at = Instant::now();
        }
    }

    /// After a disable through this cache: the endpoint is disabled here at once, whatever
    /// the store answered, unless it does not exist.
    fn after_disable(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        reason: Option<&str>,
        result: &Result<(), PortError>,
    ) {
        match result {
            Err(PortError::Rejected(_)) => self.forget(tenant, id),
            Ok(()) => self.mark_disabled(tenant, id, reason, false),
            Err(PortError::Unavailable(_)) => self.mark_disabled(tenant, id, reason, true),
        }
    }

    /// Reads the store and fills the cache with what it read, unless a local change
    /// landed meanwhile: then the local change answers.
    async fn read_through(&self, key: Key) -> Result<Option<Endpoint>, PortError> {
        let generation = self.generation.load(Ordering::SeqCst);
        let read = self.inner.get(&key.0, &key.1).await?;
        let mut entries = self.entries();
        if self.generation.load(Ordering::SeqCst) == generation {
            match &read {
                Some(endpoint) if !self.ttl.is_zero() => {
                    entries.insert(
                        key,
                        Entry {
                            at: Instant::now(),
                            endpoint: endpoint.clone(),
                            unsynced_disable: false,
                        },
                    );
                }
                _ => {
                    entries.remove(&key);
                }
            }
        } else if let Some(entry) = entries.get(&key)
            && entry.at.elapsed() < self.ttl
        {
            // A local change landed while this read was in flight: it wins.
            return Ok(Some(entry.endpoint.clone()));
        }
        Ok(read)
    }
}

#[async_trait]
impl EndpointStore for CachedEndpoints {
    async fn get(&self, tenant: &TenantId, id: &EndpointId) -> Result<Option<Endpoint>, PortError> {
        let key = Self::key(tenant, id);
        if let Some(entry) = self.entries().get(&key)
            && entry.at.elapsed() < self.ttl
        {
            return Ok(Some(entry.endpoint.clone()));
        }
        self.read_through(key).await
    }

    async fn get_current(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
    ) -> Result<Option<Endpoint>, PortError> {
        let key = Self::key(tenant, id);
        if let Some(entry) = self.entries().get(&key)
            && entry.unsynced_disable
            && entry.at.elapsed() < self.ttl
        {
            return Ok(Some(entry.endpoint.clone()));
        }
        self.read_through(key).await
    }

    async fn list_for_tenant(&self, tenant: &TenantId) -> Result<Vec<Endpoint>, PortError> {
        self.inner.list_for_tenant(tenant).await
    }

    async fn list_all(&self) -> Result<Vec<Endpoint>, PortError> {
        self.inner.list_all().await
    }

    async fn put(&self, endpoint: &Endpoint) -> Result<(), PortError> {
        let result = self.inner.put(endpoint).await;
        self.forget(&endpoint.tenant_id, &endpoint.id);
        result
    }

    async fn disable(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        reason: &str,
    ) -> Result<(), PortError> {
        let result = self.inner.disable(tenant, id, reason).await;
        self.after_disable(tenant, id, Some(reason), &result);
        result
    }

    async fn disable_keeping_reason(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        reason: &str,
    ) -> Result<(), PortError> {
        let result = self.inner.disable_keeping_reason(tenant, id, reason).await;
        // The store decides which reason stays; the next read brings it.
        match &result {
            Err(PortError::Unavailable(_)) => self.mark_disabled(tenant, id, Some(reason), true),
            Ok(()) | Err(PortError::Rejected(_)) => self.forget(tenant, id),
        }
        result
    }

    async fn enable(&self, tenant: &TenantId, id: &EndpointId) -> Result<(), PortError> {
        let result = self.inner.enable(tenant, id).await;
        self.forget(tenant, id);
        result
    }

    async fn delete(&self, tenant: &TenantId, id: &EndpointId) -> Result<(), PortError> {
        let result = self.inner.delete(tenant, id).await;
        self.forget(tenant, id);
        result
    }

    async fn update(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        update: &EndpointUpdate,
    ) -> Result<(), PortError> {
        let result = self.inner.update(tenant, id, update).await;
        self.forget(tenant, id);
        result
    }

    async fn set_secrets(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        secrets: &[EndpointSecret],
    ) -> Result<(), PortError> {
        let result = self.inner.set_secrets(tenant, id, secrets).await;
        self.forget(tenant, id);
        result
    }

    async fn set_signing_keys(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        keys: &[EndpointSigningKey],
    ) -> Result<(), PortError> {
        let result = self.inner.set_signing_keys(tenant, id, keys).await;
        self.forget(tenant, id);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A one-endpoint store that counts reads and can fail writes.
    struct One {
        endpoint: Mutex<Option<Endpoint>>,
        reads: AtomicUsize,
        fail_writes: bool,
    }

    impl One {
        fn new(endpoint: Endpoint, fail_writes: bool) -> Arc<Self> {
            Arc::new(Self {
                endpoint: Mutex::new(Some(endpoint)),
                reads: AtomicUsize::new(0),
                fail_writes,
            })
        }
        fn reads(&self) -> usize {
            self.reads.load(Ordering::SeqCst)
        }
        fn write(&self, f: impl FnOnce(&mut Endpoint)) -> Result<(), PortError> {
            if self.fail_writes {
                return Err(PortError::Unavailable("throttled".into()));
            }
            let mut g = self.endpoint.lock().unwrap();
            let e = g
                .as_mut()
                .ok_or_else(|| PortError::Rejected("no such endpoint".into()))?;
            f(e);
            Ok(())
        }
    }

    #[async_trait]
    impl EndpointStore for One {
        async fn get(&self, _: &TenantId, _: &EndpointId) -> Result<Option<Endpoint>, PortError> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            Ok(self.endpoint.lock().unwrap().clone())
        }
        async fn list_for_tenant(&self, _: &TenantId) -> Result<Vec<Endpoint>, PortError> {
            Ok(self.endpoint.lock().unwrap().clone().into_iter().collect())
        }
        async fn list_all(&self) -> Result<Vec<Endpoint>, PortError> {
            Ok(self.endpoint.lock().unwrap().clone().into_iter().collect())
        }
        async fn put(&self, endpoint: &Endpoint) -> Result<(), PortError> {
            *self.endpoint.lock().unwrap() = Some(endpoint.clone());
            Ok(())
        }
        async fn disable(&self, _: &TenantId, _: &EndpointId, r: &str) -> Result<(), PortError> {
            self.write(|e| {
                e.enabled = false;
                e.disabled_reason = Some(r.to_owned());
            })
        }
        async fn set_secrets(
            &self,
            _: &TenantId,
            _: &EndpointId,
            s: &[EndpointSecret],
        ) -> Result<(), PortError> {
            self.write(|e| e.secrets = s.to_vec())
        }
    }

    fn endpoint() -> Endpoint {
        Endpoint::new(
            EndpointId::new("ep_cache").unwrap(),
            TenantId::new("tnt_cache").unwrap(),
            "https://example.com/hook",
            vec!["*".into()],
            tern_core::Secret::generate(),
            Utc::now(),
        )
    }

    #[tokio::test]
    async fn a_warm_entry_is_served_without_a_read_until_it_expires() {
        let e = endpoint();
        let store = One::new(e.clone(), false);
        let cache = CachedEndpoints::new(store.clone(), Duration::from_secs(30));
        for _ in 0..5 {
            assert_eq!(
                cache.get(&e.tenant_id, &e.id).await.unwrap(),
                Some(e.clone())
            );
        }
        assert_eq!(store.reads(), 1);

        let short = CachedEndpoints::new(store.clone(), Duration::from_millis(1));
        short.get(&e.tenant_id, &e.id).await.unwrap();
        std::thread::sleep(Duration::from_millis(5));
        short.get(&e.tenant_id, &e.id).await.unwrap();
        assert_eq!(store.reads(), 3, "an expired entry is read again");

        let off = CachedEndpoints::new(store.clone(), Duration::ZERO);
        off.get(&e.tenant_id, &e.id).await.unwrap();
        off.get(&e.tenant_id, &e.id).await.unwrap();
        assert_eq!(store.reads(), 5, "ttl 0 turns the cache off");
    }

    #[tokio::test]
    async fn a_disable_through_the_cache_applies_at_once_even_when_the_store_write_fails() {
        for fail_writes in [false, true] {
            let e = endpoint();
            let store = One::new(e.clone(), fail_writes);
            let cache = CachedEndpoints::new(store.clone(), Duration::from_secs(30));
            assert!(
                cache
                    .get(&e.tenant_id, &e.id)
                    .await
                    .unwrap()
                    .unwrap()
                    .enabled
            );
            let _ = cache.disable(&e.tenant_id, &e.id, "gone: 410").await;
            let seen = cache.get(&e.tenant_id, &e.id).await.unwrap().unwrap();
            assert!(!seen.enabled, "fail_writes={fail_writes}");
            assert_eq!(seen.disabled_reason.as_deref(), Some("gone: 410"));
        }
    }

    #[tokio::test]
    async fn a_rotation_through_the_cache_is_read_back_at_once() {
        let e = endpoint();
        let store = One::new(e.clone(), false);
        let cache = CachedEndpoints::new(store.clone(), Duration::from_secs(30));
        cache.get(&e.tenant_id, &e.id).await.unwrap();
        let mut rotated = e.clone();
        rotated
            .rotate_secret(
                tern_core::Secret::generate(),
                Utc::now(),
                chrono::Duration::hours(1),
            )
            .unwrap();
        cache
            .set_secrets(&e.tenant_id, &e.id, &rotated.secrets)
            .await
            .unwrap();
        let seen = cache.get(&e.tenant_id, &e.id).await.unwrap().unwrap();
        assert_eq!(seen.secrets, rotated.secrets);
        assert_eq!(store.reads(), 2);
    }

    #[tokio::test]
    async fn a_change_made_elsewhere_is_seen_after_the_ttl_not_before() {
        let e = endpoint();
        let store = One::new(e.clone(), false);
        let cache = CachedEndpoints::new(store.clone(), Duration::from_secs(30));
        cache.get(&e.tenant_id, &e.id).await.unwrap();
        // Another instance disables it, straight in the store.
        store
            .disable(&e.tenant_id, &e.id, "operator")
            .await
            .unwrap();
        assert!(
            cache
                .get(&e.tenant_id, &e.id)
                .await
                .unwrap()
                .unwrap()
                .enabled
        );
        let fresh = CachedEndpoints::new(store.clone(), Duration::from_secs(30));
        assert!(
            !fresh
                .get(&e.tenant_id, &e.id)
                .await
                .unwrap()
                .unwrap()
                .enabled
        );
    }

    #[tokio::test]
    async fn a_current_read_sees_an_enable_made_elsewhere_and_refreshes_the_entry() {
        let mut e = endpoint();
        e.enabled = false;
        e.disabled_reason = Some("operator".into());
        let store = One::new(e.clone(), false);
        let cache = CachedEndpoints::new(store.clone(), Duration::from_secs(30));
        assert!(
            !cache
                .get(&e.tenant_id, &e.id)
                .await
                .unwrap()
                .unwrap()
                .enabled
        );
        // `tern endpoints enable`, straight in the store.
        store.endpoint.lock().unwrap().as_mut().unwrap().enabled = true;
        assert!(
            !cache
                .get(&e.tenant_id, &e.id)
                .await
                .unwrap()
                .unwrap()
                .enabled,
            "the cached copy is stale until the TTL"
        );
        let current = cache.get_current(&e.tenant_id, &e.id).await.unwrap();
        assert!(current.unwrap().enabled);
        let reads = store.reads();
        assert!(
            cache
                .get(&e.tenant_id, &e.id)
                .await
                .unwrap()
                .unwrap()
                .enabled,
            "the current read refreshed the entry"
        );
        assert_eq!(store.reads(), reads);
    }

    #[tokio::test]
    async fn a_disable_the_store_did_not_take_still_answers_a_current_read() {
        let e = endpoint();
        let store = One::new(e.clone(), true);
        let cache = CachedEndpoints::new(store.clone(), Duration::from_secs(30));
        cache.get(&e.tenant_id, &e.id).await.unwrap();
        let _ = cache.disable(&e.tenant_id, &e.id, "gone: 410").await;
        let reads = store.reads();
        let current = cache.get_current(&e.tenant_id, &e.id).await.unwrap();
        assert!(!current.unwrap().enabled, "the receiver said gone");
        assert_eq!(store.reads(), reads, "the store would say enabled");
    }
}
