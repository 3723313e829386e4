//! The customer portal's AWS side: its table (link uses and rate-limit counters, each item
//! with a TTL) and its key ring in Secrets Manager.
//!
//! The table's key is one string, `pk` (`infra/settings.json`, `tables.portal`):
//! - `link#<session id>`: the link of that session was used; written once with
//!   `attribute_not_exists(pk)`, so a second use finds it and is refused.
//! - `rl#<scope>#<window start>`: the uses of a rate-limited action in one window, an
//!   `ADD` with the condition `n < limit`, so every instance of the function shares it.
//!
//! Both carry `expires_at` (Unix seconds), the table's TTL attribute: DynamoDB deletes them
//! some time after (typically within days; the code never relies on the deletion).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use tern_core::portal::{KeyRing, PortalKey, PortalKeySource, PortalLedger};
use tern_core::ports::PortError;

use crate::error::port_error;

/// The portal's table.
#[derive(Clone, Debug)]
pub struct DynamoPortalLedger {
    client: Client,
    table: String,
}

impl DynamoPortalLedger {
    /// The ledger in `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// Margin kept after a link's end before its use record may go, seconds: 3600 (clock
/// skew between instances never makes a used link look unused).
const LINK_RECORD_MARGIN_SECONDS: i64 = 3600;

#[async_trait]
impl PortalLedger for DynamoPortalLedger {
    async fn claim_link(
        &self,
        session_id: &str,
        expires_at: DateTime<Utc>,
    ) -> Result<bool, PortError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .item("pk", s(format!("link#{session_id}")))
            .item(
                "expires_at",
                n(expires_at.timestamp() + LINK_RECORD_MARGIN_SECONDS),
            )
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|se| se.is_conditional_check_failed_exception()) =>
            {
                Ok(false)
            }
            Err(e) => Err(port_error(e)),
        }
    }

    async fn link_used(&self, session_id: &str) -> Result<bool, PortError> {
        let answer = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", s(format!("link#{session_id}")))
            .consistent_read(true)
            .projection_expression("pk")
            .send()
            .await
            .map_err(port_error)?;
        Ok(answer.item().is_some())
    }

    async fn take(
        &self,
        scope: &str,
        limit: u32,
        window_seconds: u32,
        now: DateTime<Utc>,
    ) -> Result<bool, PortError> {
        let window = i64::from(window_seconds.max(1));
        let start = now.timestamp().div_euclid(window) * window;
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(format!("rl#{scope}#{start}")))
            .update_expression("ADD n :one SET expires_at = :exp")
            .condition_expression("attribute_not_exists(n) OR n < :limit")
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":limit", n(limit))
            .expression_attribute_values(":exp", n(start + window + 60))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|se| se.is_conditional_check_failed_exception()) =>
            {
                Ok(false)
            }
            Err(e) => Err(port_error(e)),
        }
    }
}

/// How long a function instance keeps the key ring before reading it again, seconds: 300.
/// A rotation reaches every instance within this; the previous key keeps verifying, so
/// nothing signed meanwhile breaks.
pub const KEY_CACHE_SECONDS: u64 = 300;

/// The key ring in a Secrets Manager secret (its `SecretString`), read at most once per
/// [`KEY_CACHE_SECONDS`] per instance.
pub struct SecretsManagerKeys {
    client: aws_sdk_secretsmanager::Client,
    secret_id: String,
    cache: Mutex<Option<(Instant, KeyRing)>>,
}

impl std::fmt::Debug for SecretsManagerKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretsManagerKeys")
            .field("secret_id", &self.secret_id)
            .finish_non_exhaustive()
    }
}

impl SecretsManagerKeys {
    /// The ring in secret `secret_id` (a name or an ARN).
    pub fn new(client: aws_sdk_secretsmanager::Client, secret_id: impl Into<String>) -> Self {
        Self {
            client,
            secret_id: secret_id.into(),
            cache: Mutex::new(None),
        }
    }

    async fn read(&self) -> Result<KeyRing, PortError> {
        let out = self
            .client
            .get_secret_value()
            .secret_id(&self.secret_id)
            .send()
            .await
            .map_err(|e| key_secret_error(&self.secret_id, e))?;
        let text = out.secret_string().ok_or_else(|| {
            PortError::Rejected("the portal key secret has no SecretString".into())
        })?;
        KeyRing::from_secret_text(text).map_err(|e| PortError::Rejected(e.to_string()))
    }

    /// Creates the secret with one new key when it does not exist (local mode; the stacks
    /// create theirs). Returns the ring.
    ///
    /// # Errors
    /// [`PortError`] from Secrets Manager.
    pub async fn ensure(&self) -> Result<KeyRing, PortError> {
        if let Ok(ring) = self.read().await {
            return Ok(ring);
        }
        let ring = KeyRing::new(vec![new_key(Utc::now())?])
            .map_err(|e| PortError::Rejected(e.to_string()))?;
        self.client
            .create_secret()
            .name(&self.secret_id)
            .description("Tern customer portal: HMAC keys of portal links and sessions")
            .secret_string(ring.to_secret_text())
            .send()
            .await
            .map_err(port_error)?;
        Ok(ring)
    }

    /// Rotates the key: a new key signs from now on, the current one keeps verifying
    /// (`tern_core::portal::KEYS_KEPT`). Returns the new key's id.
    ///
    /// # Errors
    /// [`PortError`] from Secrets Manager.
    pub async fn rotate(&self) -> Result<String, PortError> {
        let ring = self.read().await?;
        let next = ring.rotated(new_key(Utc::now())?);
        self.client
            .put_secret_value()
            .secret_id(&self.secret_id)
            .secret_string(next.to_secret_text())
            .send()
            .await
            .map_err(port_error)?;
        if let Ok(mut cache) = self.cache.lock() {
            *cache = None;
        }
        Ok(next.current().id.clone())
    }
}

/// Secrets Manager codes that no retry changes: the key ring's secret is missing, being
/// deleted, or may not be read (a deployment problem: `TERN_PORTAL_KEY_SECRET`, the role).
const KEY_SECRET_REFUSED: &[&str] = &[
    "ResourceNotFoundException",
    "AccessDeniedException",
    "InvalidRequestException",
    "DecryptionFailure",
];

/// A failed read of the key ring: [`PortError::Rejected`] naming the secret for the codes
/// in [`KEY_SECRET_REFUSED`], otherwise what [`port_error`] says (throttling and network
/// errors are worth retrying).
fn key_secret_error<E, R>(
    secret_id: &str,
    err: aws_sdk_secretsmanager::error::SdkError<E, R>,
) -> PortError
where
    E: aws_sdk_secretsmanager::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    use aws_sdk_secretsmanager::error::ProvideErrorMetadata as _;
    match err.code() {
        Some(code) if KEY_SECRET_REFUSED.contains(&code) => PortError::Rejected(format!(
            "the portal key secret {secret_id:?} cannot be read ({code}: {}); check \
             TERN_PORTAL_KEY_SECRET and that the secret exists",
            err.message().unwrap_or("")
        )),
        _ => port_error(err),
    }
}

/// A new key named after its creation time and 4 random hex digits
/// (`k<unix seconds>-<hex>`: two rotations in one second still get two names).
fn new_key(now: DateTime<Utc>) -> Result<PortalKey, PortError> {
    let salt: u16 = rand::random();
    PortalKey::generate(format!("k{}-{salt:04x}", now.timestamp()))
        .map_err(|e| PortError::Rejected(e.to_string()))
}

#[async_trait]
impl PortalKeySource for SecretsManagerKeys {
    async fn ring(&self) -> Result<KeyRing, PortError> {
        let fresh = Duration::from_secs(KEY_CACHE_SECONDS);
        if let Ok(cache) = self.cache.lock()
            && let Some((at, ring)) = cache.as_ref()
            && at.elapsed() < fresh
        {
            return Ok(ring.clone());
        }
        let ring = self.read().await?;
        if let Ok(mut cache) = self.cache.lock() {
            *cache = Some((Instant::now(), ring.clone()));
        }
        Ok(ring)
    }
}
