//! [`KmsDataKeys`]: the stack's KMS key as the key service of endpoint secrets at rest
//! (`tern_core::sealed`).
//!
//! - The keyring's epoch keys ([`EpochKeys`], format `tern2`): `GenerateDataKey`
//!   (`AES_256`) once per epoch, when the first writer of a deployment or a rotation makes
//!   it, and `Decrypt` once per epoch per process per cache lifetime
//!   ([`crate::keyring::DynamoKeyring`] keeps the keys), with the context
//!   `{"tern:keyring": "endpoint-secrets", "tern:epoch": "<n>"}`.
//! - The per-write data keys of values sealed before the keyring ([`DataKeys`], format
//!   `tern1`): `Decrypt` with the endpoint's context, each unwrapped key kept here for
//!   [`KmsDataKeys::ttl`]. Nothing makes new ones (`generate` stays for the format's tests
//!   and tools).
//!
//! The numbers are in docs/cost.md.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_sdk_kms::Client;
use aws_sdk_kms::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_kms::primitives::Blob;
use aws_sdk_kms::types::DataKeySpec;
use tern_core::sealed::{DataKey, DataKeys, Epoch, EpochKeys, PlainKey, SealContext, SealError};

/// Most unwrapped data keys one process keeps: 10,000 (32 bytes each plus the wrapped
/// key, a few MB at most). Past it the expired ones go, then all: the next reads unwrap
/// again, which costs KMS requests and nothing else.
pub const MAX_CACHED_KEYS: usize = 10_000;

/// KMS error codes that mean the wrapped key is not for this context, or altered (KMS
/// API reference, `Decrypt`).
const WRONG_KEY_CODES: &[&str] = &["InvalidCiphertextException", "IncorrectKeyException"];

/// KMS error codes that mean the deployment refuses: retrying alone does not help.
const REFUSING_CODES: &[&str] = &[
    "AccessDeniedException",
    "DisabledException",
    "KMSInvalidStateException",
    "NotFoundException",
    "InvalidKeyUsageException",
];

type CacheKey = (Vec<u8>, SealContext);

/// Epoch keys and data keys from KMS; unwrapped `tern1` data keys kept in memory for a
/// time.
#[derive(Debug)]
pub struct KmsDataKeys {
    client: Client,
    key_id: String,
    ttl: Duration,
    cache: Mutex<HashMap<CacheKey, (PlainKey, Instant)>>,
    generate_calls: AtomicU64,
    decrypt_calls: AtomicU64,
}

impl KmsDataKeys {
    /// Data keys under `key_id` (a key id, ARN, alias name or alias ARN), unwrapped keys
    /// kept for `ttl`. Build `client` from a config passed through
    /// [`crate::budget::bounded`]: each call then has its deadline and bounded retries.
    pub fn new(client: Client, key_id: impl Into<String>, ttl: Duration) -> Self {
        Self {
            client,
            key_id: key_id.into(),
            ttl,
            cache: Mutex::new(HashMap::new()),
            generate_calls: AtomicU64::new(0),
            decrypt_calls: AtomicU64::new(0),
        }
    }

    /// How long an unwrapped key is kept (a `tern1` data key here, an epoch key by the
    /// keyring).
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// `(GenerateDataKey, Decrypt)` calls made so far by this process (for the cost
    /// benchmark and tests).
    pub fn calls(&self) -> (u64, u64) {
        (
            self.generate_calls.load(Ordering::Relaxed),
            self.decrypt_calls.load(Ordering::Relaxed),
        )
    }

    fn cached(&self, key: &CacheKey) -> Option<PlainKey> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .get(key)
            .filter(|(_, at)| at.elapsed() < self.ttl)
            .map(|(k, _)| k.clone())
    }

    fn remember(&self, key: CacheKey, plain: PlainKey) {
        if self.ttl.is_zero() {
            return;
        }
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= MAX_CACHED_KEYS {
            cache.retain(|_, (_, at)| at.elapsed() < self.ttl);
            if cache.len() >= MAX_CACHED_KEYS {
                cache.clear();
            }
        }
        cache.insert(key, (plain, Instant::now()));
    }
}

fn seal_error<E, R>(err: SdkError<E, R>) -> SealError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let code = err.code().unwrap_or_default().to_owned();
    let text = match &err {
        SdkError::ServiceError(se) => format!(
            "{}: {}",
            se.err().code().unwrap_or("unknown"),
            se.err().message().unwrap_or("")
        ),
        other => aws_sdk_kms::error::DisplayErrorContext(other).to_string(),
    };
    if WRONG_KEY_CODES.contains(&code.as_str()) {
        SealError::WrongEndpoint
    } else if REFUSING_CODES.contains(&code.as_str()) {
        SealError::Refused(text)
    } else {
        SealError::Unavailable(text)
    }
}

impl KmsDataKeys {
    /// `GenerateDataKey` (`AES_256`) with `context`.
    async fn generate_with(
        &self,
        context: &[(&'static str, String)],
    ) -> Result<DataKey, SealError> {
        self.generate_calls.fetch_add(1, Ordering::Relaxed);
        let mut request = self
            .client
            .generate_data_key()
            .key_id(&self.key_id)
            .key_spec(DataKeySpec::Aes256);
        for (k, v) in context {
            request = request.encryption_context(*k, v);
        }
        let out = request.send().await.map_err(seal_error)?;
        let plain = out.plaintext.ok_or(SealError::Malformed(
            "GenerateDataKey returned no plaintext",
        ))?;
        let wrapped = out
            .ciphertext_blob
            .ok_or(SealError::Malformed(
                "GenerateDataKey returned no ciphertext",
            ))?
            .into_inner();
        Ok(DataKey {
            plain: PlainKey::from_slice(plain.as_ref())?,
            wrapped,
        })
    }

    /// `Decrypt` of `wrapped` with `context`.
    async fn decrypt_with(
        &self,
        wrapped: &[u8],
        context: &[(&'static str, String)],
    ) -> Result<PlainKey, SealError> {
        self.decrypt_calls.fetch_add(1, Ordering::Relaxed);
        // The key id is named so a blob made under another key is refused by KMS rather
        // than decrypted with whatever key it names (KMS best practice for symmetric keys).
        let mut request = self
            .client
            .decrypt()
            .key_id(&self.key_id)
            .ciphertext_blob(Blob::new(wrapped));
        for (k, v) in context {
            request = request.encryption_context(*k, v);
        }
        let out = request.send().await.map_err(seal_error)?;
        PlainKey::from_slice(
            out.plaintext
                .ok_or(SealError::Malformed("Decrypt returned no plaintext"))?
                .as_ref(),
        )
    }
}

#[async_trait]
impl DataKeys for KmsDataKeys {
    async fn generate(&self, context: &SealContext) -> Result<DataKey, SealError> {
        self.generate_with(&context.pairs()).await
    }

    async fn unwrap(&self, wrapped: &[u8], context: &SealContext) -> Result<PlainKey, SealError> {
        // Cached by wrapped key and context: a wrapped key copied to another endpoint
        // never meets its plaintext from this cache.
        let cache_key = (wrapped.to_vec(), context.clone());
        if let Some(plain) = self.cached(&cache_key) {
            return Ok(plain);
        }
        let plain = self.decrypt_with(wrapped, &context.pairs()).await?;
        self.remember(cache_key, plain.clone());
        Ok(plain)
    }
}

#[async_trait]
impl EpochKeys for KmsDataKeys {
    async fn generate_epoch(&self, epoch: Epoch) -> Result<DataKey, SealError> {
        self.generate_with(&epoch.context_pairs()).await
    }

    async fn unwrap_epoch(&self, wrapped: &[u8], epoch: Epoch) -> Result<PlainKey, SealError> {
        // Not cached here: the keyring keeps the unwrapped epoch keys.
        self.decrypt_with(wrapped, &epoch.context_pairs())
            .await
            .map_err(|e| match e {
                SealError::WrongEndpoint => SealError::KeyringAltered(epoch),
                other => other,
            })
    }

    fn key_ttl(&self) -> Duration {
        self.ttl
    }
}

/// How a process that opens endpoint secrets keeps them: sealed with `key_id` (unwrapped
/// epoch keys and `tern1` data keys kept for `ttl`, in seconds as a [`Duration`]) when a
/// key is configured, plain text when not. The endpoint store adds the keyring
/// ([`crate::DynamoEndpointStore::with_secrets`]). `aws` should come through
/// [`crate::budget::bounded`].
pub fn secrets_at_rest(
    aws: &aws_config::SdkConfig,
    key_id: Option<&str>,
    ttl: Duration,
) -> crate::SecretsAtRest {
    match key_id {
        Some(key) => crate::SecretsAtRest::Sealed(std::sync::Arc::new(KmsDataKeys::new(
            Client::new(aws),
            key,
            ttl,
        ))),
        None => crate::SecretsAtRest::Plain,
    }
}
