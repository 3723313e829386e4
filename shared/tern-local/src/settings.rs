//! `infra/settings.json`, compiled in: the same numbers the CDK app and SAM template use.

use serde::Deserialize;

/// The settings file's text.
pub const SETTINGS_JSON: &str = include_str!("../../../infra/settings.json");
/// The delayed-delivery state machine definition.
pub const DELAY_STATE_MACHINE_ASL: &str =
    include_str!("../../../infra/statemachine/delayed-delivery.asl.json");

/// The parts of `infra/settings.json` local mode uses.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InfraSettings {
    /// Table keys (local mode reads the health table's; the others are created as coded).
    pub tables: Tables,
    /// Per-endpoint health settings.
    pub health: Health,
    /// Function settings.
    pub functions: Functions,
    /// Queues.
    pub queues: Queues,
    /// Event source mappings.
    pub event_sources: EventSources,
    /// Delivery defaults.
    pub delivery: Delivery,
}

/// Table definitions.
#[derive(Debug, Clone, Deserialize)]
pub struct Tables {
    /// The health table.
    pub health: HealthTable,
    /// The attempts table (local mode reads its waiting index).
    pub attempts: AttemptsTable,
    /// The customer portal's table.
    pub portal: TtlTable,
}

/// A table with one string partition key and a TTL attribute.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TtlTable {
    /// Partition key attribute.
    pub partition_key: String,
    /// TTL attribute (Unix seconds).
    pub ttl_attribute: String,
}

/// The attempts table's settings local mode reads.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttemptsTable {
    /// The sparse index of waiting deliveries (`tern_aws::waiting`).
    pub waiting_index: WaitingIndex,
}

/// `tables.attempts.waitingIndex`: a global secondary index, string partition key and
/// number sort key.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitingIndex {
    /// Index name.
    pub name: String,
    /// Partition key attribute (string).
    pub partition_key: String,
    /// Sort key attribute (number).
    pub sort_key: String,
    /// Non-key attributes projected into the index.
    pub projected_attributes: Vec<String>,
}

/// `tables.health`: one string partition key and a KEYS_ONLY index of a tenant's items.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthTable {
    /// Partition key attribute (`<tenant>#<endpoint>`).
    pub partition_key: String,
    /// The tenant index (`tern_aws::health::TENANT_INDEX`).
    pub tenant_index: TenantIndex,
}

/// `tables.health.tenantIndex`: a KEYS_ONLY global secondary index, string keys.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantIndex {
    /// Index name.
    pub name: String,
    /// Partition key attribute.
    pub partition_key: String,
    /// Sort key attribute.
    pub sort_key: String,
}

/// Per-endpoint health (`health` in settings.json), passed to the sender as
/// `TERN_HEALTH_*`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// Consecutive failed attempts that open the circuit.
    pub failure_threshold: u32,
    /// Seconds between probes of an open endpoint.
    pub probe_interval_seconds: u64,
    /// Rolling window of the success rate, seconds.
    pub window_seconds: u64,
    /// Disable below this success rate over the window, percent.
    pub disable_below_percent: u32,
    /// Report degraded below this success rate over the window, percent.
    pub degraded_below_percent: u32,
    /// Fewest attempts in the window before the rate can disable.
    pub min_attempts: u64,
    /// Longest pause a receiver's backpressure puts on its endpoint, seconds.
    pub max_pause_seconds: u64,
}

impl Health {
    /// The sender's environment variables for these settings.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "TERN_HEALTH_FAILURE_THRESHOLD",
                self.failure_threshold.to_string(),
            ),
            (
                "TERN_HEALTH_PROBE_INTERVAL_SECONDS",
                self.probe_interval_seconds.to_string(),
            ),
            (
                "TERN_HEALTH_WINDOW_SECONDS",
                self.window_seconds.to_string(),
            ),
            (
                "TERN_HEALTH_DISABLE_BELOW_PERCENT",
                self.disable_below_percent.to_string(),
            ),
            (
                "TERN_HEALTH_DEGRADED_BELOW_PERCENT",
                self.degraded_below_percent.to_string(),
            ),
            ("TERN_HEALTH_MIN_ATTEMPTS", self.min_attempts.to_string()),
            (
                "TERN_HEALTH_MAX_PAUSE_SECONDS",
                self.max_pause_seconds.to_string(),
            ),
        ]
    }
}

/// Function settings.
#[derive(Debug, Clone, Deserialize)]
pub struct Functions {
    /// The relay function.
    pub relay: FunctionSettings,
    /// The sender function.
    pub sender: FunctionSettings,
}

/// One function's settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FunctionSettings {
    /// Lambda timeout, seconds.
    pub timeout_seconds: u64,
}

/// Queue settings.
#[derive(Debug, Clone, Deserialize)]
pub struct Queues {
    /// Delivery queue.
    pub delivery: DeliveryQueue,
}

/// Delivery queue settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryQueue {
    /// Seconds.
    pub visibility_timeout_seconds: i32,
    /// Receives before SQS moves a message to the DLQ.
    pub max_receive_count: i32,
    /// Seconds.
    pub message_retention_seconds: i32,
}

/// Event source mapping settings.
#[derive(Debug, Clone, Deserialize)]
pub struct EventSources {
    /// Stream -> relay.
    pub relay: RelaySource,
    /// Queue -> sender.
    pub sender: SenderSource,
}

/// Stream mapping.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RelaySource {
    /// Records per invocation.
    pub batch_size: i32,
    /// Retries of a failing batch before it goes to the failure destination.
    pub maximum_retry_attempts: u32,
}

/// Queue mapping.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SenderSource {
    /// Messages per invocation (at most 10).
    pub batch_size: i32,
    /// Concurrent invocations.
    pub maximum_concurrency: u32,
}

/// Delivery defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    /// Seconds.
    pub retry_schedule: Vec<u64>,
    /// Milliseconds.
    pub attempt_timeout_ms: u64,
    /// Bytes.
    pub max_payload_bytes: usize,
    /// Days.
    pub attempt_log_ttl_days: u32,
    /// Name prefix of the client certificate secrets (mutual TLS), the one the sender's
    /// IAM policy allows.
    pub mtls_secret_prefix: String,
}

/// The parsed settings. The file is part of the build, so a parse failure is a bug
/// caught by this crate's tests.
pub fn infra_settings() -> InfraSettings {
    serde_json::from_str(SETTINGS_JSON)
        .unwrap_or_else(|e| panic!("infra/settings.json does not parse: {e}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn settings_parse() {
        let s = super::infra_settings();
        assert!(s.event_sources.sender.batch_size <= 10);
        let asl: serde_json::Value = serde_json::from_str(super::DELAY_STATE_MACHINE_ASL).unwrap();
        assert_eq!(
            asl["States"]["Enqueue"]["Resource"],
            "arn:aws:states:::sqs:sendMessage"
        );
        assert_eq!(asl["States"]["Wait"]["SecondsPath"], "$.wait_seconds");
    }

    /// The waiting index the stacks and local mode create is the one the ledger writes and
    /// reads (one source: settings.json; the names in code are checked against it).
    #[test]
    fn the_waiting_index_is_the_ledgers() {
        let w = super::infra_settings().tables.attempts.waiting_index;
        assert_eq!(w.name, tern_aws::waiting::WAITING_INDEX);
        assert_eq!(w.partition_key, tern_aws::waiting::WAIT_ENDPOINT);
        assert_eq!(w.sort_key, tern_aws::waiting::WAIT_DUE);
        assert_eq!(
            w.projected_attributes,
            vec![tern_aws::waiting::WAIT_ATTEMPT.to_owned()]
        );
    }

    /// The secrets an endpoint may name for mutual TLS are the ones the stacks let the
    /// sender read (one source: settings.json).
    #[test]
    fn the_mtls_secret_prefix_is_the_models() {
        assert_eq!(
            super::infra_settings().delivery.mtls_secret_prefix,
            tern_core::client_certificate::MTLS_SECRET_PREFIX
        );
    }

    #[test]
    fn health_settings_reach_the_sender_env() {
        let s = super::infra_settings();
        assert_eq!(s.tables.health.partition_key, tern_aws::health::HEALTH_KEY);
        let index = &s.tables.health.tenant_index;
        assert_eq!(
            (
                index.name.as_str(),
                index.partition_key.as_str(),
                index.sort_key.as_str()
            ),
            (tern_aws::health::TENANT_INDEX, "tenant_id", "endpoint_id")
        );
        let env = s.health.env();
        let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("TERN_HEALTH_FAILURE_THRESHOLD"), Some("5"));
        assert_eq!(get("TERN_HEALTH_PROBE_INTERVAL_SECONDS"), Some("60"));
        assert_eq!(get("TERN_HEALTH_WINDOW_SECONDS"), Some("3600"));
        assert_eq!(get("TERN_HEALTH_DISABLE_BELOW_PERCENT"), Some("50"));
        assert_eq!(get("TERN_HEALTH_DEGRADED_BELOW_PERCENT"), Some("95"));
        assert_eq!(get("TERN_HEALTH_MIN_ATTEMPTS"), Some("20"));
        assert_eq!(get("TERN_HEALTH_MAX_PAUSE_SECONDS"), Some("3600"));
    }

    /// The timing chain the design depends on (DESIGN.md §6): the longest attempt deadline
    /// is well below the sender's timeout; a claim's lease ends before SQS would show the
    /// message again; the visibility timeout is at least 6 x the sender's timeout.
    #[test]
    fn deadlines_leases_and_visibility_fit_together() {
        let s = super::infra_settings();
        let sender_timeout_ms = s.functions.sender.timeout_seconds * 1000;
        let longest_attempt_ms = tern_core::endpoint::MAX_TIMEOUT_MS;
        assert!(
            longest_attempt_ms * 2 <= sender_timeout_ms,
            "attempt deadline must be well below the sender timeout"
        );
        assert!(s.delivery.attempt_timeout_ms <= longest_attempt_ms);
        let lease_seconds = longest_attempt_ms / 1000
            + u64::try_from(tern_handlers::sender::LEASE_MARGIN_SECONDS).unwrap();
        let visibility = u64::try_from(s.queues.delivery.visibility_timeout_seconds).unwrap();
        assert!(
            lease_seconds < visibility,
            "a crashed holder's lease must expire before redelivery"
        );
        assert!(
            visibility >= 6 * s.functions.sender.timeout_seconds,
            "visibility timeout >= 6 x sender timeout"
        );
    }
}
