//! [`DynamoKeyring`]: the keyring of endpoint secrets (format `tern2`,
//! `tern_core::sealed`), its epoch keys kept wrapped by KMS in the endpoints table.
//!
//! Where: the endpoints table, partition [`KEYRING_PARTITION`] (`#keyring`, which no
//! tenant can name: tenant ids are `[A-Za-z0-9_-]`), one item per epoch with sort key
//! `epoch#<10-digit epoch>`. Every process that reads or writes endpoint secrets already
//! reads that table (no new resource, no new permission in either stack, and local mode on
//! moto has it too), a tenant's `Query` never meets the partition, and the store's scans
//! skip it ([`is_keyring_item`]). The table alone gives nothing: each item holds its key as
//! KMS wrapped it (`CiphertextBlob`), which opens only with `kms:Decrypt` under the
//! epoch's encryption context.
//!
//! Cost: a process unwraps each epoch's key once per [`EpochKeys::key_ttl`] (the sender:
//! 1 hour), whatever the number of endpoints: one `GetItem` and one `Decrypt`. A writer
//! (the API, `tern`) also looks up the newest epoch with one `Query` (at most every
//! [`CURRENT_EPOCH_CHECK_SECONDS`]). The first writer of a deployment makes epoch 1
//! (one `GenerateDataKey` and a conditional `PutItem`; a concurrent one that loses the
//! race reads the winner's); [`DynamoKeyring::rotate`] makes the next.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use tern_core::clock::{MonotonicClock, SystemClock};
use tern_core::sealed::{Epoch, EpochKey, KeyService, Keyring, PlainKey, SealContext, SealError};

/// Partition key (`tenant_id`) of the keyring's items in the endpoints table. Not a valid
/// tenant id, so no tenant's request can read or write it.
pub const KEYRING_PARTITION: &str = "#keyring";

/// Sort key prefix of an epoch's item.
const EPOCH_SORT_PREFIX: &str = "epoch#";

/// How often a writer looks for a newer epoch than the one it seals under, in seconds:
/// 300. A rotation reaches every warm writer within 5 minutes; until then they seal under
/// the previous epoch, which stays readable.
pub const CURRENT_EPOCH_CHECK_SECONDS: u64 = 300;

/// The sort key of `epoch`'s item: `epoch#0000000001` (zero-padded, so the newest sorts
/// last).
pub fn epoch_sort_key(epoch: Epoch) -> String {
    format!("{EPOCH_SORT_PREFIX}{:010}", epoch.get())
}

/// True for an item of the keyring (not an endpoint).
pub fn is_keyring_item(item: &HashMap<String, AttributeValue>) -> bool {
    matches!(item.get("tenant_id"), Some(AttributeValue::S(t)) if t == KEYRING_PARTITION)
}

/// What is cached, and when it was learnt.
#[derive(Default)]
struct Cached {
    epochs: HashMap<Epoch, (EpochKey, Instant)>,
    current: Option<(Epoch, Instant)>,
}

/// The keyring of endpoint secrets in the endpoints table, epoch keys from `keys` (KMS),
/// unwrapped ones kept for `keys.key_ttl()`.
pub struct DynamoKeyring {
    keys: Arc<dyn KeyService>,
    client: Client,
    table: String,
    clock: Arc<dyn MonotonicClock>,
    cached: Mutex<Cached>,
    /// One load at a time, so a cold process with a batch of endpoints in flight
    /// unwraps each epoch key once, not once per endpoint.
    loading: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for DynamoKeyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoKeyring")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

fn unavailable(what: &str, e: impl std::error::Error + 'static) -> SealError {
    SealError::Unavailable(format!("keyring {what}: {}", DisplayErrorContext(e)))
}

impl DynamoKeyring {
    /// The keyring in endpoints table `table`, epoch keys wrapped and unwrapped by `keys`.
    /// Build `client` from a config passed through [`crate::budget::bounded`].
    pub fn new(keys: Arc<dyn KeyService>, client: Client, table: impl Into<String>) -> Self {
        Self {
            keys,
            client,
            table: table.into(),
            clock: Arc::new(SystemClock),
            cached: Mutex::new(Cached::default()),
            loading: tokio::sync::Mutex::new(()),
        }
    }

    /// The same keyring, its cache lifetimes read from `clock` (tests move it).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn MonotonicClock>) -> Self {
        self.clock = clock;
        self
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cached> {
        self.cached
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn ttl(&self) -> Duration {
        self.keys.key_ttl()
    }

    fn cached_epoch(&self, epoch: Epoch) -> Option<EpochKey> {
        let now = self.clock.now();
        self.cache()
            .epochs
            .get(&epoch)
            .filter(|(_, at)| now.saturating_duration_since(*at) < self.ttl())
            .map(|(k, _)| k.clone())
    }

    fn cached_current(&self) -> Option<Epoch> {
        let now = self.clock.now();
        let check = self
            .ttl()
            .min(Duration::from_secs(CURRENT_EPOCH_CHECK_SECONDS));
        self.cache()
            .current
            .filter(|(_, at)| now.saturating_duration_since(*at) < check)
            .map(|(e, _)| e)
    }

    fn remember(&self, key: &EpochKey) {
        let now = self.clock.now();
        let ttl = self.ttl();
        let mut cache = self.cache();
        // Expired keys go; the map holds at most one entry per epoch in use.
        cache
            .epochs
            .retain(|_, (_, at)| now.saturating_duration_since(*at) < ttl);
        if !ttl.is_zero() {
            cache.epochs.insert(key.epoch(), (key.clone(), now));
        }
    }

    fn remember_current(&self, epoch: Epoch) {
        let now = self.clock.now();
        self.cache().current = Some((epoch, now));
    }

    /// The item of `epoch`, read strongly consistent (a writer may have just made it).
    async fn epoch_item(
        &self,
        epoch: Epoch,
    ) -> Result<Option<HashMap<String, AttributeValue>>, SealError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("tenant_id", AttributeValue::S(KEYRING_PARTITION.into()))
            .key("endpoint_id", AttributeValue::S(epoch_sort_key(epoch)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable("read", e))?;
        Ok(out.item)
    }

    /// The newest epoch's item, if any.
    async fn newest_item(
        &self,
    ) -> Result<Option<(Epoch, HashMap<String, AttributeValue>)>, SealError> {
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("tenant_id = :k AND begins_with(endpoint_id, :p)")
            .expression_attribute_values(":k", AttributeValue::S(KEYRING_PARTITION.into()))
            .expression_attribute_values(":p", AttributeValue::S(EPOCH_SORT_PREFIX.into()))
            .scan_index_forward(false)
            .limit(1)
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable("read", e))?;
        let Some(item) = out.items.unwrap_or_default().into_iter().next() else {
            return Ok(None);
        };
        let epoch = match item.get("endpoint_id") {
            Some(AttributeValue::S(sort)) => sort
                .strip_prefix(EPOCH_SORT_PREFIX)
                .and_then(|n| n.parse::<u32>().ok())
                .ok_or(SealError::Malformed("keyring item with a bad epoch"))
                .and_then(Epoch::new)?,
            _ => return Err(SealError::Malformed("keyring item without a sort key")),
        };
        Ok(Some((epoch, item)))
    }

    /// Unwraps the key an epoch's item holds.
    async fn unwrap_item(
        &self,
        epoch: Epoch,
        item: &HashMap<String, AttributeValue>,
    ) -> Result<EpochKey, SealError> {
        let Some(AttributeValue::B(wrapped)) = item.get("wrapped_key") else {
            return Err(SealError::KeyringAltered(epoch));
        };
        let plain = self.keys.unwrap_epoch(wrapped.as_ref(), epoch).await?;
        Ok(EpochKey::new(epoch, plain))
    }

    /// The key of `epoch` from the table; the loading lock is held.
    async fn load(&self, epoch: Epoch) -> Result<EpochKey, SealError> {
        let item = self
            .epoch_item(epoch)
            .await?
            .ok_or(SealError::UnknownEpoch(epoch))?;
        let key = self.unwrap_item(epoch, &item).await?;
        self.remember(&key);
        Ok(key)
    }

    /// Makes `epoch` (a fresh key from KMS, its wrapped form put in the table unless the
    /// epoch exists). `Ok(None)` when another writer made it first. The loading lock is
    /// held.
    async fn create(&self, epoch: Epoch) -> Result<Option<EpochKey>, SealError> {
        let made = self.keys.generate_epoch(epoch).await?;
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item("tenant_id", AttributeValue::S(KEYRING_PARTITION.into()))
            .item("endpoint_id", AttributeValue::S(epoch_sort_key(epoch)))
            .item("epoch", AttributeValue::N(epoch.get().to_string()))
            .item("wrapped_key", AttributeValue::B(Blob::new(made.wrapped)))
            .item(
                "format",
                AttributeValue::S(tern_core::sealed::EPOCH_SEALED_PREFIX.into()),
            )
            .item(
                "created_at",
                AttributeValue::S(chrono::Utc::now().to_rfc3339()),
            )
            .condition_expression("attribute_not_exists(endpoint_id)")
            .send()
            .await;
        match put {
            Ok(_) => {
                let key = EpochKey::new(epoch, made.plain);
                self.remember(&key);
                Ok(Some(key))
            }
            Err(e)
                if matches!(
                    e.as_service_error(),
                    Some(PutItemError::ConditionalCheckFailedException(_))
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(unavailable("write", e)),
        }
    }

    /// Starts a new epoch: new values are sealed under it (by this process at once, by
    /// other warm writers within [`CURRENT_EPOCH_CHECK_SECONDS`]); values of older epochs
    /// still open, and `tern endpoints encrypt-secrets` re-seals them under it. Two
    /// rotations at once make one epoch. Returns the epoch now current.
    ///
    /// # Errors
    /// The key service's or the table's [`SealError`].
    pub async fn rotate(&self) -> Result<Epoch, SealError> {
        let _loading = self.loading.lock().await;
        let next = match self.newest_item().await? {
            Some((newest, _)) => newest.next()?,
            None => Epoch::FIRST,
        };
        let epoch = match self.create(next).await? {
            Some(key) => key.epoch(),
            // Another rotation made it meanwhile: that one is the new epoch.
            None => next,
        };
        self.remember_current(epoch);
        Ok(epoch)
    }
}

#[async_trait]
impl Keyring for DynamoKeyring {
    async fn current(&self) -> Result<EpochKey, SealError> {
        if let Some(epoch) = self.cached_current() {
            return self.epoch(epoch).await;
        }
        let _loading = self.loading.lock().await;
        if let Some(epoch) = self.cached_current()
            && let Some(key) = self.cached_epoch(epoch)
        {
            return Ok(key);
        }
        let key = match self.newest_item().await? {
            Some((epoch, item)) => match self.cached_epoch(epoch) {
                Some(key) => key,
                None => {
                    let key = self.unwrap_item(epoch, &item).await?;
                    self.remember(&key);
                    key
                }
            },
            // A deployment's first secret: make epoch 1, or read it if another writer
            // made it meanwhile.
            None => match self.create(Epoch::FIRST).await? {
                Some(key) => key,
                None => self.load(Epoch::FIRST).await?,
            },
        };
        self.remember_current(key.epoch());
        Ok(key)
    }

    async fn epoch(&self, epoch: Epoch) -> Result<EpochKey, SealError> {
        if let Some(key) = self.cached_epoch(epoch) {
            return Ok(key);
        }
        let _loading = self.loading.lock().await;
        if let Some(key) = self.cached_epoch(epoch) {
            return Ok(key);
        }
        self.load(epoch).await
    }

    async fn data_key(&self, wrapped: &[u8], context: &SealContext) -> Result<PlainKey, SealError> {
        self.keys.unwrap(wrapped, context).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_items_sort_by_epoch_and_are_told_from_endpoints() {
        let nine = epoch_sort_key(Epoch::new(9).unwrap());
        let ten = epoch_sort_key(Epoch::new(10).unwrap());
        assert_eq!(nine, "epoch#0000000009");
        assert!(nine < ten, "the newest sorts last");
        assert!(
            tern_core::TenantId::new(KEYRING_PARTITION).is_err(),
            "no tenant can name the keyring's partition"
        );
        let keyring = HashMap::from([(
            "tenant_id".to_owned(),
            AttributeValue::S(KEYRING_PARTITION.into()),
        )]);
        let endpoint = HashMap::from([("tenant_id".to_owned(), AttributeValue::S("tnt_a".into()))]);
        assert!(is_keyring_item(&keyring));
        assert!(!is_keyring_item(&endpoint));
    }
}
