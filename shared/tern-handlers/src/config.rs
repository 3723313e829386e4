//! Configuration: every setting a function reads, typed, read once at start from the
//! environment (the names the infra sets; see `infra/settings.json` for the values).

use std::time::Duration;

use tern_core::RetrySchedule;
use tern_core::event::{DEFAULT_MAX_PAYLOAD_BYTES, MAX_CONFIGURABLE_PAYLOAD_BYTES};
use tern_core::health::HealthPolicy;
use tern_core::retry::{DEFAULT_RETRY_AFTER_CEILING_SECONDS, MAX_SCHEDULE_DELAY_SECONDS};

/// A setting is missing or invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A required variable is not set.
    #[error("environment variable {0} is required")]
    Missing(&'static str),
    /// A variable is set to something unusable.
    #[error("environment variable {name} is invalid: {reason}")]
    Invalid {
        /// Variable name.
        name: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// Reads variables through a lookup function, so tests and local mode can configure
/// without touching the process environment.
pub struct Env<'a>(pub &'a dyn Fn(&str) -> Option<String>);

impl Env<'_> {
    /// The process environment.
    pub fn process() -> Env<'static> {
        Env(&|k| std::env::var(k).ok())
    }

    fn get(&self, name: &'static str) -> Option<String> {
        (self.0)(name).filter(|v| !v.trim().is_empty())
    }

    fn required(&self, name: &'static str) -> Result<String, ConfigError> {
        self.get(name).ok_or(ConfigError::Missing(name))
    }

    fn parsed<T: std::str::FromStr>(&self, name: &'static str, default: T) -> Result<T, ConfigError>
    where
        T::Err: std::fmt::Display,
    {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v.trim().parse().map_err(|e: T::Err| ConfigError::Invalid {
                name,
                reason: e.to_string(),
            }),
        }
    }
}

/// Namespace of the CloudWatch metrics (EMF), `TERN_METRICS_NAMESPACE`, default `Tern`.
fn metrics_namespace(env: &Env<'_>) -> String {
    env.get("TERN_METRICS_NAMESPACE")
        .unwrap_or_else(|| "Tern".to_owned())
}

/// Relay function settings.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// `TERN_ENDPOINTS_TABLE`.
    pub endpoints_table: String,
    /// `TERN_DELIVERY_QUEUE_URL`.
    pub delivery_queue_url: String,
    /// `TERN_RELAY_FAILURE_QUEUE_URL`: poison records go here.
    pub relay_failure_queue_url: String,
    /// `TERN_ATTEMPTS_TABLE`: where a large fan-out cut short by the deadline records how
    /// far it got (`tern_aws::fanout`).
    pub attempts_table: String,
    /// `TERN_MAX_PAYLOAD_BYTES`, bytes, default 262,144; at most
    /// [`MAX_CONFIGURABLE_PAYLOAD_BYTES`] (392 KiB: the outbox item must fit DynamoDB's
    /// 400 KB item limit, and the delivery message the SQS 1 MiB limit).
    pub max_payload_bytes: usize,
    /// `TERN_ATTEMPT_LOG_TTL_DAYS`, days, default 30: the ledger's TTL, which a large
    /// fan-out's record outlives (`tern_aws::fanout::RECORD_MARGIN_DAYS`).
    pub attempt_log_ttl_days: u32,
    /// `TERN_METRICS_NAMESPACE`.
    pub metrics_namespace: String,
}

impl RelayConfig {
    /// Reads the relay settings.
    ///
    /// # Errors
    /// [`ConfigError`] naming the variable.
    pub fn from_env(env: &Env<'_>) -> Result<Self, ConfigError> {
        Ok(Self {
            endpoints_table: env.required("TERN_ENDPOINTS_TABLE")?,
            delivery_queue_url: env.required("TERN_DELIVERY_QUEUE_URL")?,
            relay_failure_queue_url: env.required("TERN_RELAY_FAILURE_QUEUE_URL")?,
            attempts_table: env.required("TERN_ATTEMPTS_TABLE")?,
            max_payload_bytes: max_payload(env)?,
            attempt_log_ttl_days: env.parsed("TERN_ATTEMPT_LOG_TTL_DAYS", 30)?,
            metrics_namespace: metrics_namespace(env),
        })
    }
}

/// Default rows the PostgreSQL relay claims per batch: 100. Its memory is bounded by this
/// times the payload limit (25.6 MiB at 256 KiB), as the stream relay's is by its batch.
pub const PG_RELAY_DEFAULT_BATCH_ROWS: u32 = 100;

/// Most rows one claim may take: 1,000 (256 MiB of payloads at the 256 KiB limit, a
/// 512 MiB function's budget).
pub const PG_RELAY_MAX_BATCH_ROWS: u32 = 1000;

/// Default pause between two polls of an empty outbox, milliseconds: 250 (the seed's
/// "every 100 ms-1 s"; a full batch is followed by the next at once).
pub const PG_RELAY_DEFAULT_POLL_MS: u64 = 250;

/// Default time a published row is kept before the relay deletes it, hours: 168 (7 days,
/// the DynamoDB outbox's TTL, `tern_outbox::DEFAULT_TTL_DAYS`).
pub const PG_RELAY_DEFAULT_RETENTION_HOURS: u64 = 168;

/// The PostgreSQL relay's settings (`functions/relay-pg`): the stream relay's, plus the
/// database and the polling.
#[derive(Clone)]
pub struct PgRelayConfig {
    /// What the fan-out needs, as for the stream relay ([`RelayConfig`]).
    pub relay: RelayConfig,
    /// `TERN_OUTBOX_DATABASE_URL`: the libpq connection string or URL of the database
    /// holding `tern_outbox` (a secret: never logged).
    pub database_url: String,
    /// `TERN_OUTBOX_DATABASE_CA_FILE`: a PEM bundle of the roots the database's
    /// certificate is verified against (Amazon RDS's `global-bundle.pem` for RDS, Aurora
    /// and RDS Proxy); unset, Mozilla's roots. Whether TLS is required is the URL's
    /// `sslmode` (`require`).
    pub database_ca_file: Option<String>,
    /// `TERN_PG_RELAY_BATCH_ROWS`, rows per claim, 1-[`PG_RELAY_MAX_BATCH_ROWS`], default
    /// [`PG_RELAY_DEFAULT_BATCH_ROWS`].
    pub batch_rows: u32,
    /// `TERN_PG_RELAY_POLL_MS`, milliseconds between polls of an empty outbox, 100-1000,
    /// default [`PG_RELAY_DEFAULT_POLL_MS`].
    pub poll_ms: u64,
    /// `TERN_OUTBOX_RETENTION_HOURS`, hours a published row is kept, 1-87,600 (10 years,
    /// `tern_outbox::MAX_TTL_DAYS`), default [`PG_RELAY_DEFAULT_RETENTION_HOURS`].
    pub retention_hours: u64,
}

impl std::fmt::Debug for PgRelayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The connection string may hold a password.
        f.debug_struct("PgRelayConfig")
            .field("relay", &self.relay)
            .field("database_url", &"<redacted>")
            .field("database_ca_file", &self.database_ca_file)
            .field("batch_rows", &self.batch_rows)
            .field("poll_ms", &self.poll_ms)
            .field("retention_hours", &self.retention_hours)
            .finish()
    }
}

impl PgRelayConfig {
    /// Reads the PostgreSQL relay's settings.
    ///
    /// # Errors
    /// [`ConfigError`] naming the variable.
    pub fn from_env(env: &Env<'_>) -> Result<Self, ConfigError> {
        let ranged = |name: &'static str, default: u64, lo: u64, hi: u64| {
            let v: u64 = env.parsed(name, default)?;
            if (lo..=hi).contains(&v) {
                Ok(v)
            } else {
                Err(ConfigError::Invalid {
                    name,
                    reason: format!("{v} is outside {lo}-{hi}"),
                })
            }
        };
        Ok(Self {
            relay: RelayConfig::from_env(env)?,
            database_url: env.required("TERN_OUTBOX_DATABASE_URL")?,
            database_ca_file: env.get("TERN_OUTBOX_DATABASE_CA_FILE"),
            batch_rows: ranged(
                "TERN_PG_RELAY_BATCH_ROWS",
                PG_RELAY_DEFAULT_BATCH_ROWS.into(),
                1,
                PG_RELAY_MAX_BATCH_ROWS.into(),
            )? as u32,
            poll_ms: ranged("TERN_PG_RELAY_POLL_MS", PG_RELAY_DEFAULT_POLL_MS, 100, 1000)?,
            retention_hours: ranged(
                "TERN_OUTBOX_RETENTION_HOURS",
                PG_RELAY_DEFAULT_RETENTION_HOURS,
                1,
                87_600,
            )?,
        })
    }
}

fn max_payload(env: &Env<'_>) -> Result<usize, ConfigError> {
    let v = env.parsed("TERN_MAX_PAYLOAD_BYTES", DEFAULT_MAX_PAYLOAD_BYTES)?;
    if v == 0 || v > MAX_CONFIGURABLE_PAYLOAD_BYTES {
        return Err(ConfigError::Invalid {
            name: "TERN_MAX_PAYLOAD_BYTES",
            reason: format!("{v} is outside 1..={MAX_CONFIGURABLE_PAYLOAD_BYTES} bytes"),
        });
    }
    Ok(v)
}

/// Sender function settings.
#[derive(Debug, Clone)]
pub struct SenderConfig {
    /// `TERN_ENDPOINTS_TABLE`.
    pub endpoints_table: String,
    /// `TERN_ATTEMPTS_TABLE`: the delivery ledger and attempt log.
    pub attempts_table: String,
    /// `TERN_DELIVERY_QUEUE_URL`.
    pub delivery_queue_url: String,
    /// `TERN_DLQ_URL`.
    pub dlq_url: String,
    /// `TERN_DELAY_STATE_MACHINE_ARN`: the Step Functions machine for waits over 900 s.
    /// Without it, such waits are carried by chained queue delays (and a warning is logged).
    pub delay_state_machine_arn: Option<String>,
    /// Delivery policy.
    pub policy: SenderPolicy,
    /// `TERN_HTTPS_ONLY`, default `true`: refuse `http://` endpoints.
    pub https_only: bool,
    /// `TERN_ALLOW_DESTINATIONS`: comma-separated CIDRs the SSRF guard lets through
    /// (local mode: `127.0.0.1/32`). Default none.
    pub allow_destinations: Vec<ipnet::IpNet>,
    /// `TERN_NAT64`, default `false`: judge a NAT64 address (`64:ff9b::/96`) by the IPv4
    /// it embeds ([`tern_http::DestinationPolicy::nat64`]).
    pub nat64: bool,
    /// `TERN_ATTEMPT_LOG_TTL_DAYS`, days, default 30.
    pub attempt_log_ttl_days: u32,
    /// `TERN_METRICS_NAMESPACE`.
    pub metrics_namespace: String,
    /// `TERN_ENDPOINT_CACHE_SECONDS`, seconds, default
    /// [`crate::endpoint_cache::DEFAULT_ENDPOINT_CACHE_SECONDS`] (30), at most
    /// [`crate::endpoint_cache::MAX_ENDPOINT_CACHE_SECONDS`] (300), 0 = off: how long a
    /// warm sender serves an endpoint from memory, i.e. the longest a disable or rotation
    /// made elsewhere takes to reach it.
    pub endpoint_cache: Duration,
    /// `TERN_HEALTH_TABLE`: one health record per endpoint (rolling-window counters and
    /// the circuit).
    pub health_table: String,
    /// The failure model's thresholds: `TERN_HEALTH_FAILURE_THRESHOLD` (attempts, default
    /// 5), `TERN_HEALTH_PROBE_INTERVAL_SECONDS` (seconds, 60), `TERN_HEALTH_WINDOW_SECONDS`
    /// (seconds, 3,600), `TERN_HEALTH_DISABLE_BELOW_PERCENT` (50),
    /// `TERN_HEALTH_DEGRADED_BELOW_PERCENT` (95), `TERN_HEALTH_MIN_ATTEMPTS` (20),
    /// `TERN_HEALTH_MAX_PAUSE_SECONDS` (seconds, 3,600).
    pub health: HealthPolicy,
    /// `TERN_HEALTH_CACHE_SECONDS`, seconds, default
    /// [`crate::health::DEFAULT_HEALTH_CACHE_SECONDS`] (5), at most 60: how long a warm
    /// sender serves an endpoint's health record from memory (times `TERN_TIME_SCALE`).
    pub health_cache: Duration,
    /// Where health changes are reported ([`OperationalConfig`]).
    pub operational: OperationalConfig,
    /// `TERN_SECRETS_KEY_ID`: the KMS key (id, ARN or alias) that seals endpoint secrets
    /// at rest (`tern_core::sealed`); `None` reads and writes them as plain text (a
    /// deployment before the key existed). Both stacks set it.
    pub secrets_key_id: Option<String>,
}

/// Reads the `TERN_HEALTH_*` thresholds.
///
/// # Errors
/// [`ConfigError::Invalid`] naming the variable, for a value that does not parse or is out
/// of [`HealthPolicy::validate`]'s ranges.
pub fn health_policy(env: &Env<'_>) -> Result<HealthPolicy, ConfigError> {
    let d = HealthPolicy::default();
    let percent = |name: &'static str, default: f64| -> Result<f64, ConfigError> {
        let v: f64 = env.parsed(name, default * 100.0)?;
        if !(0.0..=100.0).contains(&v) {
            return Err(ConfigError::Invalid {
                name,
                reason: format!("{v} is not a percentage (0 to 100)"),
            });
        }
        Ok(v / 100.0)
    };
    let policy = HealthPolicy {
        failure_threshold: env.parsed("TERN_HEALTH_FAILURE_THRESHOLD", d.failure_threshold)?,
        probe_interval_seconds: env.parsed(
            "TERN_HEALTH_PROBE_INTERVAL_SECONDS",
            d.probe_interval_seconds,
        )?,
        window_seconds: env.parsed("TERN_HEALTH_WINDOW_SECONDS", d.window_seconds)?,
        disable_below: percent("TERN_HEALTH_DISABLE_BELOW_PERCENT", d.disable_below)?,
        degraded_below: percent("TERN_HEALTH_DEGRADED_BELOW_PERCENT", d.degraded_below)?,
        min_attempts: env.parsed("TERN_HEALTH_MIN_ATTEMPTS", d.min_attempts)?,
        max_pause_seconds: env.parsed("TERN_HEALTH_MAX_PAUSE_SECONDS", d.max_pause_seconds)?,
    };
    policy.validate().map_err(|e| ConfigError::Invalid {
        name: "TERN_HEALTH_*",
        reason: e.to_string(),
    })?;
    Ok(policy)
}

fn health_cache(env: &Env<'_>) -> Result<Duration, ConfigError> {
    let v: u64 = env.parsed(
        "TERN_HEALTH_CACHE_SECONDS",
        crate::health::DEFAULT_HEALTH_CACHE_SECONDS,
    )?;
    if v > 60 {
        return Err(ConfigError::Invalid {
            name: "TERN_HEALTH_CACHE_SECONDS",
            reason: format!("{v} s is over the 60 s limit"),
        });
    }
    Ok(Duration::from_secs(v))
}

/// How the sender retries. Shared by the Lambda and local mode.
#[derive(Debug, Clone)]
pub struct SenderPolicy {
    /// `TERN_RETRY_SCHEDULE`: comma-separated seconds or a preset (`default`, `short`).
    pub schedule: RetrySchedule,
    /// `TERN_ATTEMPT_TIMEOUT_MS`, milliseconds, default 15,000: total deadline of one
    /// attempt unless the endpoint sets its own.
    pub attempt_timeout: Duration,
    /// `TERN_RETRY_AFTER_CEILING_SECONDS`, seconds, default 86,400 (24 h), at most
    /// 604,800 (7 days): most a receiver's `Retry-After` (on 429 or 503, delta-seconds or
    /// HTTP-date) can push the next attempt out. A `Retry-After` shorter than the
    /// scheduled wait is ignored; an unparseable one falls back to the schedule.
    pub retry_after_ceiling_seconds: u64,
    /// `TERN_TIME_SCALE`, default 1.0: multiplies every real wait. Local mode and tests
    /// only (0.001 plays a 24 h schedule out in about 90 s). Values outside (0, 1] mean 1.
    pub time_scale: f64,
}

impl Default for SenderPolicy {
    fn default() -> Self {
        Self {
            schedule: RetrySchedule::standard(),
            attempt_timeout: Duration::from_millis(15_000),
            retry_after_ceiling_seconds: DEFAULT_RETRY_AFTER_CEILING_SECONDS,
            time_scale: 1.0,
        }
    }
}

impl SenderPolicy {
    /// Reads the policy variables.
    ///
    /// # Errors
    /// [`ConfigError`].
    pub fn from_env(env: &Env<'_>) -> Result<Self, ConfigError> {
        let schedule = match env.get("TERN_RETRY_SCHEDULE") {
            None => RetrySchedule::standard(),
            Some(s) => RetrySchedule::parse(&s).map_err(|e| ConfigError::Invalid {
                name: "TERN_RETRY_SCHEDULE",
                reason: e.to_string(),
            })?,
        };
        let timeout_ms: u64 = env.parsed("TERN_ATTEMPT_TIMEOUT_MS", 15_000)?;
        if !(tern_core::endpoint::MIN_TIMEOUT_MS..=tern_core::endpoint::MAX_TIMEOUT_MS)
            .contains(&timeout_ms)
        {
            return Err(ConfigError::Invalid {
                name: "TERN_ATTEMPT_TIMEOUT_MS",
                reason: format!(
                    "{timeout_ms} ms is outside {}..={} ms",
                    tern_core::endpoint::MIN_TIMEOUT_MS,
                    tern_core::endpoint::MAX_TIMEOUT_MS
                ),
            });
        }
        let time_scale: f64 = env.parsed("TERN_TIME_SCALE", 1.0)?;
        let ceiling: u64 = env.parsed(
            "TERN_RETRY_AFTER_CEILING_SECONDS",
            DEFAULT_RETRY_AFTER_CEILING_SECONDS,
        )?;
        // The ceiling bounds a Step Functions wait; past the longest schedule entry it
        // would only let a receiver park deliveries for weeks.
        if !(1..=MAX_SCHEDULE_DELAY_SECONDS).contains(&ceiling) {
            return Err(ConfigError::Invalid {
                name: "TERN_RETRY_AFTER_CEILING_SECONDS",
                reason: format!("{ceiling} s is outside 1..={MAX_SCHEDULE_DELAY_SECONDS} s"),
            });
        }
        Ok(Self {
            schedule,
            attempt_timeout: Duration::from_millis(timeout_ms),
            retry_after_ceiling_seconds: ceiling,
            time_scale: if time_scale.is_finite() && time_scale > 0.0 && time_scale <= 1.0 {
                time_scale
            } else {
                1.0
            },
        })
    }
}

impl SenderConfig {
    /// How long the sender serves an endpoint from memory, in real time: `endpoint_cache`
    /// multiplied by `TERN_TIME_SCALE`, like every wait (local mode at `--time-scale 0.001`
    /// keeps an endpoint 30 ms, so a disable or an enable made elsewhere reaches it as
    /// soon, in scaled time, as it would in AWS).
    pub fn endpoint_cache_ttl(&self) -> Duration {
        self.endpoint_cache.mul_f64(self.policy.time_scale)
    }

    /// Reads the sender settings.
    ///
    /// # Errors
    /// [`ConfigError`] naming the variable.
    pub fn from_env(env: &Env<'_>) -> Result<Self, ConfigError> {
        let destinations = DestinationSettings::from_env(env)?;
        Ok(Self {
            endpoints_table: env.required("TERN_ENDPOINTS_TABLE")?,
            attempts_table: env.required("TERN_ATTEMPTS_TABLE")?,
            delivery_queue_url: env.required("TERN_DELIVERY_QUEUE_URL")?,
            dlq_url: env.required("TERN_DLQ_URL")?,
            delay_state_machine_arn: env.get("TERN_DELAY_STATE_MACHINE_ARN"),
            policy: SenderPolicy::from_env(env)?,
            https_only: destinations.https_only,
            allow_destinations: destinations.allow,
            nat64: destinations.nat64,
            attempt_log_ttl_days: env.parsed("TERN_ATTEMPT_LOG_TTL_DAYS", 30)?,
            metrics_namespace: metrics_namespace(env),
            endpoint_cache: endpoint_cache(env)?,
            health_table: env.required("TERN_HEALTH_TABLE")?,
            health: health_policy(env)?,
            health_cache: health_cache(env)?,
            operational: OperationalConfig::from_env(env)?,
            secrets_key_id: env.get("TERN_SECRETS_KEY_ID"),
        })
    }
}

/// Where the sender may connect: read by the sender and by `tern endpoints add`, which
/// checks a new endpoint's URL with the same policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestinationSettings {
    /// `TERN_HTTPS_ONLY`, default `true`.
    pub https_only: bool,
    /// `TERN_ALLOW_DESTINATIONS`, comma-separated CIDRs, default none.
    pub allow: Vec<ipnet::IpNet>,
    /// `TERN_NAT64`, default `false`: for a sender in an IPv6-only or DNS64 network,
    /// where an IPv4-only receiver resolves to `64:ff9b::<IPv4>` (RFC 6052, RFC 6147),
    /// judge such an address by the IPv4 it embeds instead of refusing it.
    pub nat64: bool,
}

impl DestinationSettings {
    /// Reads the three variables.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for a value that is not a boolean (`true` / `false`) or a
    /// CIDR list.
    pub fn from_env(env: &Env<'_>) -> Result<Self, ConfigError> {
        Ok(Self {
            https_only: env.parsed("TERN_HTTPS_ONLY", true)?,
            nat64: env.parsed("TERN_NAT64", false)?,
            allow: env
                .get("TERN_ALLOW_DESTINATIONS")
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| {
                    s.parse().map_err(|e| ConfigError::Invalid {
                        name: "TERN_ALLOW_DESTINATIONS",
                        reason: format!("{s:?}: {e}"),
                    })
                })
                .collect::<Result<_, _>>()?,
        })
    }

    /// The SSRF guard's policy these settings describe.
    pub fn policy(&self) -> tern_http::DestinationPolicy {
        tern_http::DestinationPolicy {
            https_only: self.https_only,
            allow: self.allow.clone(),
            nat64: self.nat64,
        }
    }
}

/// Replay function settings.
#[derive(Debug, Clone)]
pub struct ReplayConfig {
    /// `TERN_DLQ_URL`.
    pub dlq_url: String,
    /// `TERN_DELIVERY_QUEUE_URL`.
    pub delivery_queue_url: String,
    /// `TERN_METRICS_NAMESPACE`.
    pub metrics_namespace: String,
    /// `TERN_ATTEMPTS_TABLE`, optional: the per-tenant dead-letter record. With it, a
    /// tenant's dry run reads only the record and a replay removes the entries it moved;
    /// without it (a stack from before December 2026) every run reads the DLQ.
    pub attempts_table: Option<String>,
}

impl ReplayConfig {
    /// Reads the replay settings.
    ///
    /// # Errors
    /// [`ConfigError`] naming the variable.
    pub fn from_env(env: &Env<'_>) -> Result<Self, ConfigError> {
        Ok(Self {
            dlq_url: env.required("TERN_DLQ_URL")?,
            delivery_queue_url: env.required("TERN_DELIVERY_QUEUE_URL")?,
            metrics_namespace: metrics_namespace(env),
            attempts_table: env.get("TERN_ATTEMPTS_TABLE"),
        })
    }
}

fn endpoint_cache(env: &Env<'_>) -> Result<Duration, ConfigError> {
    use crate::endpoint_cache::{DEFAULT_ENDPOINT_CACHE_SECONDS, MAX_ENDPOINT_CACHE_SECONDS};
    let seconds: u64 = env.parsed(
        "TERN_ENDPOINT_CACHE_SECONDS",
        DEFAULT_ENDPOINT_CACHE_SECONDS,
    )?;
    if seconds > MAX_ENDPOINT_CACHE_SECONDS {
        return Err(ConfigError::Invalid {
            name: "TERN_ENDPOINT_CACHE_SECONDS",
            reason: format!("{seconds} s is outside 0..={MAX_ENDPOINT_CACHE_SECONDS} s"),
        });
    }
    Ok(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_postgres_relay_reads_its_database_and_range_checks_its_polling() {
        let base = |k: &str| match k {
            "TERN_ENDPOINTS_TABLE"
            | "TERN_DELIVERY_QUEUE_URL"
            | "TERN_RELAY_FAILURE_QUEUE_URL"
            | "TERN_ATTEMPTS_TABLE" => Some("x".to_owned()),
            "TERN_OUTBOX_DATABASE_URL" => Some("postgresql://u:secret@db/app".to_owned()),
            _ => None,
        };
        let c = PgRelayConfig::from_env(&Env(&base)).unwrap();
        assert_eq!(
            (c.batch_rows, c.poll_ms, c.retention_hours),
            (100, 250, 168)
        );
        assert_eq!(c.database_ca_file, None);
        assert!(
            !format!("{c:?}").contains("secret"),
            "the URL is never printed"
        );
        let without_url = |k: &str| (k != "TERN_OUTBOX_DATABASE_URL").then(|| base(k)).flatten();
        assert!(matches!(
            PgRelayConfig::from_env(&Env(&without_url)),
            Err(ConfigError::Missing("TERN_OUTBOX_DATABASE_URL"))
        ));
        for (name, value, ok) in [
            ("TERN_PG_RELAY_BATCH_ROWS", "1000", true),
            ("TERN_PG_RELAY_BATCH_ROWS", "1001", false),
            ("TERN_PG_RELAY_BATCH_ROWS", "0", false),
            ("TERN_PG_RELAY_POLL_MS", "100", true),
            ("TERN_PG_RELAY_POLL_MS", "99", false),
            ("TERN_PG_RELAY_POLL_MS", "1001", false),
            ("TERN_OUTBOX_RETENTION_HOURS", "0", false),
            ("TERN_OUTBOX_RETENTION_HOURS", "87600", true),
        ] {
            let vars = |k: &str| {
                if k == name {
                    Some(value.to_owned())
                } else {
                    base(k)
                }
            };
            assert_eq!(
                PgRelayConfig::from_env(&Env(&vars)).is_ok(),
                ok,
                "{name}={value}"
            );
        }
    }

    #[test]
    fn health_thresholds_read_as_percentages_and_are_range_checked() {
        let vars = |k: &str| match k {
            "TERN_HEALTH_FAILURE_THRESHOLD" => Some("3".to_owned()),
            "TERN_HEALTH_DISABLE_BELOW_PERCENT" => Some("40".to_owned()),
            "TERN_HEALTH_MAX_PAUSE_SECONDS" => Some("600".to_owned()),
            _ => None,
        };
        let p = health_policy(&Env(&vars)).unwrap();
        assert_eq!(p.failure_threshold, 3);
        assert_eq!(p.max_pause_seconds, 600);
        assert!((p.disable_below - 0.40).abs() < 1e-12);
        assert!((p.degraded_below - 0.95).abs() < 1e-12);
        assert_eq!(p.probe_interval_seconds, 60);
        for (name, value) in [
            ("TERN_HEALTH_DISABLE_BELOW_PERCENT", "120"),
            ("TERN_HEALTH_PROBE_INTERVAL_SECONDS", "0"),
            ("TERN_HEALTH_DEGRADED_BELOW_PERCENT", "30"),
            ("TERN_HEALTH_MIN_ATTEMPTS", "many"),
            ("TERN_HEALTH_MAX_PAUSE_SECONDS", "0"),
            ("TERN_HEALTH_MAX_PAUSE_SECONDS", "86401"),
        ] {
            let bad = |k: &str| (k == name).then(|| value.to_owned());
            assert!(
                matches!(health_policy(&Env(&bad)), Err(ConfigError::Invalid { .. })),
                "{name}={value}"
            );
        }
    }

    #[test]
    fn reads_and_validates() {
        let vars = |k: &str| match k {
            "TERN_ENDPOINTS_TABLE" => Some("e".to_owned()),
            "TERN_ATTEMPTS_TABLE" => Some("a".to_owned()),
            "TERN_DELIVERY_QUEUE_URL" => Some("q".to_owned()),
            "TERN_DLQ_URL" => Some("d".to_owned()),
            "TERN_HEALTH_TABLE" => Some("h".to_owned()),
            "TERN_RETRY_SCHEDULE" => Some("short".to_owned()),
            "TERN_ALLOW_DESTINATIONS" => Some("127.0.0.1/32, ::1/128".to_owned()),
            _ => None,
        };
        let c = SenderConfig::from_env(&Env(&vars)).unwrap();
        assert_eq!(c.policy.schedule, RetrySchedule::short());
        assert!(c.https_only);
        assert_eq!(c.allow_destinations.len(), 2);
        let missing = RelayConfig::from_env(&Env(&|_| None)).unwrap_err();
        assert_eq!(missing, ConfigError::Missing("TERN_ENDPOINTS_TABLE"));
        let bad = |k: &str| (k == "TERN_ATTEMPT_TIMEOUT_MS").then(|| "99".to_owned());
        assert!(matches!(
            SenderPolicy::from_env(&Env(&bad)),
            Err(ConfigError::Invalid { .. })
        ));
    }

    #[test]
    fn nat64_is_off_by_default_and_only_a_boolean_turns_it_on() {
        let read = |v: Option<&'static str>| {
            let vars = move |k: &str| (k == "TERN_NAT64").then(|| v.map(str::to_owned)).flatten();
            DestinationSettings::from_env(&Env(&vars))
        };
        assert!(!read(None).unwrap().nat64);
        assert!(!read(None).unwrap().policy().nat64);
        assert!(read(Some("true")).unwrap().policy().nat64);
        assert!(!read(Some("false")).unwrap().nat64);
        for bad in ["yes", "1", "on", "64:ff9b::/96"] {
            assert!(
                matches!(
                    read(Some(bad)),
                    Err(ConfigError::Invalid {
                        name: "TERN_NAT64",
                        ..
                    })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn retry_after_ceiling_is_bounded() {
        assert_eq!(
            SenderPolicy::from_env(&Env(&|_| None))
                .unwrap()
                .retry_after_ceiling_seconds,
            86_400
        );
        let set = |v: &'static str| {
            move |k: &str| (k == "TERN_RETRY_AFTER_CEILING_SECONDS").then(|| v.to_owned())
        };
        assert_eq!(
            SenderPolicy::from_env(&Env(&set("3600")))
                .unwrap()
                .retry_after_ceiling_seconds,
            3600
        );
        for bad in ["0", "604801", "abc"] {
            assert!(SenderPolicy::from_env(&Env(&set(bad))).is_err(), "{bad}");
        }
    }

    #[test]
    fn endpoint_cache_defaults_to_30_s_can_be_off_and_is_bounded() {
        let with = |cache: Option<&'static str>| {
            move |k: &str| match k {
                "TERN_ENDPOINTS_TABLE"
                | "TERN_ATTEMPTS_TABLE"
                | "TERN_DELIVERY_QUEUE_URL"
                | "TERN_HEALTH_TABLE"
                | "TERN_DLQ_URL" => Some("x".to_owned()),
                "TERN_ENDPOINT_CACHE_SECONDS" => cache.map(str::to_owned),
                _ => None,
            }
        };
        let read = |cache| SenderConfig::from_env(&Env(&with(cache))).map(|c| c.endpoint_cache);
        assert_eq!(read(None), Ok(Duration::from_secs(30)));
        assert_eq!(read(Some("0")), Ok(Duration::ZERO));
        assert_eq!(read(Some("300")), Ok(Duration::from_secs(300)));
        for bad in ["301", "-1", "soon"] {
            assert!(
                matches!(
                    read(Some(bad)),
                    Err(ConfigError::Invalid {
                        name: "TERN_ENDPOINT_CACHE_SECONDS",
                        ..
                    })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_endpoint_cache_ttl_scales_with_time() {
        let scaled = |scale: &'static str| {
            let vars = move |k: &str| match k {
                "TERN_ENDPOINTS_TABLE"
                | "TERN_ATTEMPTS_TABLE"
                | "TERN_DELIVERY_QUEUE_URL"
                | "TERN_HEALTH_TABLE"
                | "TERN_DLQ_URL" => Some("x".to_owned()),
                "TERN_TIME_SCALE" => Some(scale.to_owned()),
                _ => None,
            };
            SenderConfig::from_env(&Env(&vars))
                .unwrap()
                .endpoint_cache_ttl()
        };
        assert_eq!(scaled("1"), Duration::from_secs(30));
        assert_eq!(scaled("0.001"), Duration::from_millis(30));
    }
}

/// Where the sender reports endpoint health changes (operational events). Both optional:
/// without either, changes are only logged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperationalConfig {
    /// `TERN_OPERATIONAL_TOPIC_ARN`: the operational-events SNS topic.
    pub topic_arn: Option<String>,
    /// `TERN_OUTBOX_TABLE`: the outbox table, where each event is also written as a Tern
    /// event (`tern.endpoint.disabled`, ...) for the tenant's own endpoints.
    pub outbox_table: Option<String>,
}

impl OperationalConfig {
    /// Reads the two variables; a blank value counts as unset.
    ///
    /// # Errors
    /// None today; the `Result` keeps the shape of the other configs' `from_env`.
    pub fn from_env(env: &Env<'_>) -> Result<Self, ConfigError> {
        Ok(Self {
            topic_arn: env.get("TERN_OPERATIONAL_TOPIC_ARN"),
            outbox_table: env.get("TERN_OUTBOX_TABLE"),
        })
    }
}

#[cfg(test)]
mod operational_tests {
    use super::*;

    #[test]
    fn operational_sinks_are_optional() {
        assert_eq!(
            OperationalConfig::from_env(&Env(&|_| None)),
            Ok(OperationalConfig::default())
        );
        let vars = |k: &str| match k {
            "TERN_OPERATIONAL_TOPIC_ARN" => Some("arn:aws:sns:eu-west-1:1:ops".to_owned()),
            "TERN_OUTBOX_TABLE" => Some(" ".to_owned()),
            _ => None,
        };
        let c = OperationalConfig::from_env(&Env(&vars)).unwrap();
        assert_eq!(c.topic_arn.as_deref(), Some("arn:aws:sns:eu-west-1:1:ops"));
        assert_eq!(c.outbox_table, None);
    }
}
