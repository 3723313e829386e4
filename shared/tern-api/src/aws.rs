//! The API on AWS (and in local mode, on moto): its settings from the environment and its
//! dependencies, built once per process with `tern-aws`' bounded clients.
//!
//! Variables of the `api` function: `TERN_ENDPOINTS_TABLE`, `TERN_ATTEMPTS_TABLE`,
//! `TERN_OUTBOX_TABLE`, `TERN_HEALTH_TABLE`, `TERN_DELIVERY_QUEUE_URL`, `TERN_DLQ_URL`,
//! `TERN_PORTAL_TABLE` (the table of the API's short-lived records: portal link uses,
//! rate-limit windows and `Idempotency-Key` records) (required); `TERN_MAX_PAYLOAD_BYTES`, `TERN_ATTEMPT_TIMEOUT_MS`, `TERN_HTTPS_ONLY`,
//! `TERN_ALLOW_DESTINATIONS`, `TERN_NAT64`, `TERN_HEALTH_*`, `TERN_ATTEMPT_LOG_TTL_DAYS`,
//! `TERN_OUTBOX_TTL_DAYS`, `TERN_SECRETS_KEY_ID` (optional, the other functions' defaults).
//! The customer portal's pages are on when `TERN_PORTAL_KEY_SECRET` (the key ring's
//! secret, a name or an ARN) is set too; its other settings are
//! [`crate::portal::PortalSettings::from_env`]'s.

use std::sync::Arc;

use aws_config::SdkConfig;
use tern_aws::{DynamoEndpointStore, DynamoEventStore, DynamoHealthStore, DynamoLedger, SqsQueue};
use tern_handlers::config::{
    ConfigError, DestinationSettings, Env, RelayConfig, SenderPolicy, health_policy,
};
use tern_handlers::replay::ReplayDeps;
use tern_http::client::ClientBuildError;
use tern_http::{ClientOptions, DeliveryClient, DnsResolver, HostLookup};

use crate::{ApiDeps, ApiSettings};

/// The API function's settings.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// `TERN_ENDPOINTS_TABLE`.
    pub endpoints_table: String,
    /// `TERN_ATTEMPTS_TABLE`.
    pub attempts_table: String,
    /// `TERN_OUTBOX_TABLE`: where a publish writes.
    pub outbox_table: String,
    /// `TERN_HEALTH_TABLE`.
    pub health_table: String,
    /// `TERN_DELIVERY_QUEUE_URL`: where resends and replays go.
    pub delivery_queue_url: String,
    /// `TERN_DLQ_URL`.
    pub dlq_url: String,
    /// `TERN_PORTAL_TABLE`: the API's short-lived records, each with a TTL: portal link
    /// uses and rate-limit windows, and the records of `Idempotency-Key`s
    /// ([`crate::idempotency`], under `idem#`). Deployed by both stacks and local mode.
    pub records_table: String,
    /// `TERN_ATTEMPT_LOG_TTL_DAYS`, days, default 30.
    pub attempt_log_ttl_days: u32,
    /// `TERN_OUTBOX_TTL_DAYS`, days, default 7 (`tern_outbox::DEFAULT_TTL_DAYS`).
    pub outbox_ttl_days: i64,
    /// `TERN_SECRETS_KEY_ID`: the KMS key that seals endpoint secrets at rest, and the
    /// answers an `Idempotency-Key` keeps that may hold one; `None` keeps both as plain
    /// text.
    pub secrets_key_id: Option<String>,
    /// The rest of what the routes apply.
    pub settings: ApiSettings,
    /// The customer portal: its table, its key secret and settings, when configured.
    pub portal: Option<PortalConfig>,
}

/// The customer portal's settings.
#[derive(Debug, Clone)]
pub struct PortalConfig {
    /// `TERN_PORTAL_TABLE`: link uses and rate-limit counters ([`ApiConfig::records_table`]).
    pub table: String,
    /// `TERN_PORTAL_KEY_SECRET`: the Secrets Manager secret of the key ring.
    pub key_secret: String,
    /// The rest.
    pub settings: crate::portal::PortalSettings,
}

/// How long the API keeps an unwrapped key of endpoint secrets, in seconds: 3,600 (the
/// keyring's epoch key, which opens every endpoint's `tern2` values, and each `tern1` data
/// key still read). It reads an endpoint on every request that names one (no endpoint
/// cache), so without this each would cost a KMS `Decrypt`; with it, about one an hour per
/// epoch per warm instance. A revocation of the KMS key reaches it within the hour.
pub const API_DATA_KEY_TTL_SECONDS: u64 = 3_600;

/// Why the settings were refused.
#[derive(Debug, thiserror::Error)]
pub enum ApiConfigError {
    /// A variable is missing or invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A portal setting is invalid.
    #[error(transparent)]
    Portal(#[from] crate::portal::PortalConfigError),
    /// A number does not parse.
    #[error("{name}: {reason}")]
    Invalid {
        /// Variable.
        name: &'static str,
        /// Why.
        reason: String,
    },
}

impl ApiConfig {
    /// Reads the settings through `get` (the process environment in the Lambda).
    ///
    /// # Errors
    /// [`ApiConfigError`] naming the variable.
    pub fn from_env(get: &dyn Fn(&str) -> Option<String>) -> Result<Self, ApiConfigError> {
        let env = Env(get);
        let required = |name: &'static str| {
            get(name)
                .filter(|v| !v.trim().is_empty())
                .ok_or(ConfigError::Missing(name))
        };
        let number = |name: &'static str, default: i64| -> Result<i64, ApiConfigError> {
            get(name)
                .filter(|v| !v.trim().is_empty())
                .map_or(Ok(default), |v| {
                    v.trim()
                        .parse()
                        .map_err(|e: std::num::ParseIntError| ApiConfigError::Invalid {
                            name,
                            reason: e.to_string(),
                        })
                })
        };
        // The relay's payload limit and the sender's attempt deadline, read as they do.
        let max_payload_bytes = relay_payload_limit(get)?;
        let policy = SenderPolicy::from_env(&env)?;
        let set = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        let records_table = required("TERN_PORTAL_TABLE")?;
        let portal = match set("TERN_PORTAL_KEY_SECRET") {
            Some(key_secret) => Some(PortalConfig {
                table: records_table.clone(),
                key_secret,
                settings: crate::portal::PortalSettings::from_env(get)?,
            }),
            None => None,
        };
        Ok(Self {
            portal,
            endpoints_table: required("TERN_ENDPOINTS_TABLE")?,
            attempts_table: required("TERN_ATTEMPTS_TABLE")?,
            outbox_table: required("TERN_OUTBOX_TABLE")?,
            health_table: required("TERN_HEALTH_TABLE")?,
            delivery_queue_url: required("TERN_DELIVERY_QUEUE_URL")?,
            dlq_url: required("TERN_DLQ_URL")?,
            records_table,
            attempt_log_ttl_days: u32::try_from(
                number("TERN_ATTEMPT_LOG_TTL_DAYS", 30)?.clamp(1, 3650),
            )
            .unwrap_or(30),
            outbox_ttl_days: number("TERN_OUTBOX_TTL_DAYS", tern_outbox::DEFAULT_TTL_DAYS)?,
            secrets_key_id: get("TERN_SECRETS_KEY_ID").filter(|v| !v.trim().is_empty()),
            settings: ApiSettings {
                destinations: DestinationSettings::from_env(&env)?.policy(),
                max_payload_bytes,
                health: health_policy(&env)?,
                attempt_timeout: policy.attempt_timeout,
                time_scale: policy.time_scale,
            },
        })
    }
}

/// `TERN_MAX_PAYLOAD_BYTES` as the relay reads it (its checks included), without the
/// relay's other required variables.
fn relay_payload_limit(get: &dyn Fn(&str) -> Option<String>) -> Result<usize, ConfigError> {
    let with_names = |k: &str| match k {
        "TERN_ENDPOINTS_TABLE" | "TERN_DELIVERY_QUEUE_URL" | "TERN_RELAY_FAILURE_QUEUE_URL" => {
            Some("-".to_owned())
        }
        other => get(other),
    };
    Ok(RelayConfig::from_env(&Env(&with_names))?.max_payload_bytes)
}

/// The routes' dependencies on AWS. `lookup` is the resolver behind the SSRF guard
/// (`None`: the system's, with its TTL cache).
///
/// # Errors
/// [`ClientBuildError`] when the HTTP client (for test sends) cannot start.
pub fn api_deps(
    config: &ApiConfig,
    aws: &SdkConfig,
    lookup: Option<Arc<dyn HostLookup>>,
) -> Result<ApiDeps, ClientBuildError> {
    let aws = &tern_aws::budget::bounded(aws);
    let ddb = aws_sdk_dynamodb::Client::new(aws);
    let sqs = aws_sdk_sqs::Client::new(aws);
    let portal = config.portal.as_ref().map(|p| {
        Arc::new(crate::portal::PortalDeps {
            keys: Arc::new(tern_aws::portal::SecretsManagerKeys::new(
                aws_sdk_secretsmanager::Client::new(aws),
                &p.key_secret,
            )),
            ledger: Arc::new(tern_aws::portal::DynamoPortalLedger::new(
                ddb.clone(),
                &p.table,
            )),
            settings: p.settings.clone(),
        })
    });
    let lookup = lookup.unwrap_or_else(|| Arc::new(DnsResolver::system()));
    let client = DeliveryClient::new(ClientOptions {
        policy: config.settings.destinations.clone(),
        lookup: lookup.clone(),
        ..ClientOptions::default()
    })?
    // A test send to an endpoint with a client certificate (mutual TLS) offers it, read
    // from Secrets Manager as the sender reads it.
    .with_certificate_secrets(Arc::new(
        tern_aws::certificates::SecretsManagerCertificates::new(
            aws_sdk_secretsmanager::Client::new(aws),
        ),
    ));
    let ledger = Arc::new(DynamoLedger::new(
        ddb.clone(),
        &config.attempts_table,
        config.attempt_log_ttl_days,
    ));
    // One key service (and one cache of unwrapped keys) for endpoint secrets and kept
    // answers.
    let secrets = tern_aws::kms::secrets_at_rest(
        aws,
        config.secrets_key_id.as_deref(),
        std::time::Duration::from_secs(API_DATA_KEY_TTL_SECONDS),
    );
    let endpoints =
        DynamoEndpointStore::new(ddb.clone(), &config.endpoints_table).with_secrets(secrets);
    // Kept answers are sealed under the same keyring as endpoint secrets (one epoch key
    // per process, no KMS request per answer).
    let keyring: Option<Arc<dyn tern_core::sealed::Keyring>> = match endpoints.keyring() {
        Some(k) => Some(k.clone()),
        None => None,
    };
    Ok(ApiDeps {
        idempotency: Arc::new(tern_aws::DynamoIdempotencyStore::new(
            ddb.clone(),
            &config.records_table,
            keyring,
        )),
        endpoints: Arc::new(endpoints),
        ledger: ledger.clone(),
        events: Arc::new(DynamoEventStore::new(
            ddb.clone(),
            &config.outbox_table,
            config.outbox_ttl_days,
        )),
        health: Arc::new(DynamoHealthStore::new(ddb, &config.health_table)),
        waiting: ledger.clone(),
        queues: Arc::new(ReplayDeps {
            dlq: Arc::new(SqsQueue::new(sqs.clone(), &config.dlq_url)),
            delivery_queue: Arc::new(SqsQueue::new(sqs, &config.delivery_queue_url)),
            ledger: Some(ledger.clone() as Arc<dyn tern_core::ports::DeliveryLedger>),
        }),
        client,
        lookup,
        settings: Arc::new(config.settings.clone()),
        portal,
    })
}
