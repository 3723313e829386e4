//! Delivery metrics, written as CloudWatch Embedded Metric Format (EMF): one JSON line
//! per handler invocation on stdout, which Lambda ships to CloudWatch Logs and
//! CloudWatch turns into metrics (no PutMetricData call, no extra latency).
//!
//! Names and units are a contract with the alarms and dashboard in `infra/`. The format
//! is the EMF specification (CloudWatch user guide, "Embedded metric format
//! specification"); it is small enough that a dependency would add more than it saves.

use std::sync::Mutex;

use serde_json::{Map, Value, json};

/// Dimension name and value on every metric.
pub const SERVICE_DIMENSION: (&str, &str) = ("Service", "tern");

/// Counters of one invocation.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counts {
    /// HTTP attempts made.
    pub attempts: u64,
    /// Attempts answered 2xx.
    pub attempts_succeeded: u64,
    /// Attempts that failed (any other outcome).
    pub attempts_failed: u64,
    /// Failed attempts whose failure was on our side, not the receiver's
    /// (`tern_core::ErrorClass::is_ours`: `dns_temporary`, `local_resource`,
    /// `tls_config`): retried and never charged to the endpoint's health. Also counted in
    /// `attempts_failed`.
    pub our_failures: u64,
    /// Retries queued or scheduled.
    pub retries: u64,
    /// Deliveries dead-lettered.
    pub dead_letters: u64,
    /// Messages not sent because the pair was delivered or the attempt already claimed.
    pub duplicates: u64,
    /// Outbox events the relay turned into deliveries (or found no subscriber for).
    pub events_relayed: u64,
    /// Delivery messages the relay put on the queue.
    pub deliveries_enqueued: u64,
    /// Messages the replay function moved back to the delivery queue.
    pub replayed: u64,
    /// Stream records that can only come from a misconfigured stream or table (an INSERT
    /// without `NewImage`: a `KEYS_ONLY` or `OLD_IMAGE` stream). Each is also parked in
    /// the relay-failure queue; the `RelayMisconfigured` alarm fires on any.
    pub relay_misconfigured: u64,
    /// Items the relay parked in its failure queue: unreadable records, misconfigured
    /// records, and delivery messages SQS refused (sender fault).
    pub relay_parked: u64,
    /// Delivery entries the relay sent again after a transient per-entry or per-call
    /// failure of `SendMessageBatch`, within one invocation.
    pub relay_send_retries: u64,
    /// Due deliveries held back by an open circuit, a receiver's pause or a rate limit and
    /// put back on the queue without spending an attempt.
    pub deferred: u64,
    /// Of the deferred deliveries, those the endpoint's rate limit held back (a slot more
    /// than a second away, or none yet).
    pub rate_limited: u64,
    /// Deliveries that reached their POST more than half an interval after their
    /// rate-limit slot (`tern_core::rate_limit::late_after`: the claim before them took
    /// longer than `tern_core::rate_limit::CLAIM_LEAD_MS`): none is sent on that slot; each
    /// takes a new one, or is not sent by this invocation.
    pub rate_late: u64,
    /// Probes sent to endpoints with an open circuit.
    pub probes: u64,
    /// Circuits this invocation opened.
    pub circuits_opened: u64,
    /// Circuits this invocation closed (a probe succeeded).
    pub circuits_closed: u64,
    /// Endpoints this invocation disabled for a low success rate.
    pub endpoints_auto_disabled: u64,
    /// Operational events published (`endpoint.degraded`, `.disabled`, `.recovered`).
    pub operational_events: u64,
    /// Delivered or finish markers still not written when their retry window closed
    /// (`crate::markers`): each may let a later copy of its message be POSTed again.
    /// The `MarkersLost` alarm fires on any.
    pub markers_lost: u64,
    /// Operational events whose publish failed: kept on the endpoint's health record and
    /// published again by a later batch that touches the endpoint.
    pub operational_events_unpublished: u64,
    /// Attempts the receiver answered with backpressure (429, or 503 with `Retry-After`):
    /// not counted against the endpoint's health.
    pub backpressure: u64,
    /// Pauses this invocation put on endpoints because their receivers pushed back.
    pub endpoints_paused: u64,
    /// Changes of endpoints' learnt paces this invocation made (`tern_core::pacing`).
    pub pace_changes: u64,
    /// Tries made again without spending an attempt (pushed back, or our failure): the
    /// same attempt back on the queue.
    pub requeued: u64,
    /// Messages put back on the queue after a failure of ours (a throttled or failed AWS
    /// call) as a new message with a short delay (`tern_core::put_back`), instead of a
    /// batch failure that waits out the visibility timeout.
    pub put_back: u64,
    /// Messages whose put-back SQS did not take (refused, throttled or timed out), made
    /// visible again after the put-back's short delay by `ChangeMessageVisibility` on the
    /// original instead (`crate::sender`): batch failures that come back in seconds, not
    /// after the visibility timeout; each receive counts towards the redrive's
    /// `maxReceiveCount`. Also counted in `batch_failures`.
    pub put_back_by_visibility: u64,
    /// Messages of our failures that could be neither put back nor hidden for a short
    /// delay (both SQS calls failed, or the invocation's deadline cut them off): each waits
    /// out the delivery queue's visibility timeout (360 s) in flight. The `PutBackFailed`
    /// alarm fires on a sustained rate (`infra/`, docs/operating.md). Also counted in
    /// `batch_failures`.
    pub put_back_failed: u64,
    /// Messages left to SQS as batch failures: a panic, a message not started for want of
    /// time, a rejected read, a delivery past its retry window, and the two above. Each
    /// but the ones hidden for a short delay waits out the visibility timeout; every one
    /// counts towards the redrive's `maxReceiveCount`.
    pub batch_failures: u64,
    /// Errors of the PostgreSQL relay's run (a connection refused, a claim, mark or commit
    /// that failed or timed out): the rows stay unpublished and are claimed again. The
    /// relay-pg function returns normally after them, so Lambda's `Errors` does not count
    /// them; the `RelayPgDatabaseErrors` alarm fires on any.
    pub outbox_relay_errors: u64,
    /// The PostgreSQL outbox's lag when the relay's run ended: the age of its oldest
    /// unpublished, unparked row, in whole seconds rounded up (0: none). `None` when it
    /// was not read. Emitted as `OutboxLag` (unit Seconds); the `RelayPgLag` alarm fires
    /// above `alarms.pgRelayLagSeconds` (infra/settings.json).
    pub outbox_lag_seconds: Option<u64>,
    /// Attempt latencies, in milliseconds.
    pub latencies_ms: Vec<u64>,
}

/// Where metrics go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsSink {
    /// Print EMF lines on stdout (Lambda).
    Stdout,
    /// Drop them (local mode keeps its own report).
    Discard,
}

/// A per-invocation metrics recorder, safe to share between concurrent message tasks.
#[derive(Debug)]
pub struct Metrics {
    namespace: String,
    sink: MetricsSink,
    counts: Mutex<Counts>,
}

impl Metrics {
    /// A recorder for one invocation.
    pub fn new(namespace: &str, sink: MetricsSink) -> Self {
        Self {
            namespace: namespace.to_owned(),
            sink,
            counts: Mutex::new(Counts::default()),
        }
    }

    /// Changes the counters.
    pub fn update(&self, f: impl FnOnce(&mut Counts)) {
        let mut guard = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut guard);
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> Counts {
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The EMF document for the counters, or `None` when nothing happened.
    pub fn emf(&self, timestamp_ms: i64) -> Option<Value> {
        let c = self.snapshot();
        let counters = [
            ("Attempts", c.attempts),
            ("AttemptsSucceeded", c.attempts_succeeded),
            ("AttemptsFailed", c.attempts_failed),
            ("OurFailures", c.our_failures),
            ("Retries", c.retries),
            ("DeadLetters", c.dead_letters),
            ("Duplicates", c.duplicates),
            ("EventsRelayed", c.events_relayed),
            ("DeliveriesEnqueued", c.deliveries_enqueued),
            ("Replayed", c.replayed),
            ("RelayMisconfigured", c.relay_misconfigured),
            ("RelayParked", c.relay_parked),
            ("RelaySendRetries", c.relay_send_retries),
            ("Deferred", c.deferred),
            ("RateLimited", c.rate_limited),
            ("RateLimitLate", c.rate_late),
            ("Probes", c.probes),
            ("CircuitsOpened", c.circuits_opened),
            ("CircuitsClosed", c.circuits_closed),
            ("EndpointsAutoDisabled", c.endpoints_auto_disabled),
            ("OperationalEvents", c.operational_events),
            ("MarkersLost", c.markers_lost),
            (
                "OperationalEventsUnpublished",
                c.operational_events_unpublished,
            ),
            ("Backpressure", c.backpressure),
            ("EndpointsPaused", c.endpoints_paused),
            ("PaceChanges", c.pace_changes),
            ("Requeued", c.requeued),
            ("PutBack", c.put_back),
            ("PutBackByVisibility", c.put_back_by_visibility),
            ("PutBackFailed", c.put_back_failed),
            ("BatchFailures", c.batch_failures),
            ("OutboxRelayErrors", c.outbox_relay_errors),
        ];
        let mut doc = Map::new();
        let mut defs = Vec::new();
        for (name, value) in counters.into_iter().filter(|(_, v)| *v > 0) {
            doc.insert(name.into(), json!(value));
            defs.push(json!({"Name": name, "Unit": "Count"}));
        }
        if !c.latencies_ms.is_empty() {
            // EMF takes an array of values for one metric: CloudWatch keeps each, so p50
            // and p95 are exact.
            doc.insert("AttemptLatency".into(), json!(c.latencies_ms));
            defs.push(json!({"Name": "AttemptLatency", "Unit": "Milliseconds"}));
        }
        if let Some(lag) = c.outbox_lag_seconds {
            // A gauge, 0 included: the lag alarm treats a missing value as the relay not running.
            doc.insert("OutboxLag".into(), json!(lag));
            defs.push(json!({"Name": "OutboxLag", "Unit": "Seconds"}));
        }
        if defs.is_empty() {
            return None;
        }
        doc.insert(SERVICE_DIMENSION.0.into(), json!(SERVICE_DIMENSION.1));
        doc.insert(
            "_aws".into(),
            json!({
                "Timestamp": timestamp_ms,
                "CloudWatchMetrics": [{
                    "Namespace": self.namespace,
                    "Dimensions": [[SERVICE_DIMENSION.0]],
                    "Metrics": defs,
                }]
            }),
        );
        Some(Value::Object(doc))
    }

    /// Writes the EMF line to the sink.
    pub fn flush(&self) {
        if self.sink == MetricsSink::Stdout
            && let Some(doc) = self.emf(chrono::Utc::now().timestamp_millis())
        {
            println!("{doc}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emf_shape() {
        let m = Metrics::new("Tern", MetricsSink::Discard);
        assert!(m.emf(0).is_none());
        m.update(|c| {
            c.attempts += 2;
            c.attempts_succeeded += 1;
            c.latencies_ms.extend([5, 7]);
        });
        let doc = m.emf(1).unwrap();
        assert_eq!(doc["Attempts"], 2);
        assert_eq!(doc["AttemptLatency"], json!([5, 7]));
        assert_eq!(doc["Service"], "tern");
        let defs = &doc["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(defs["Namespace"], "Tern");
        assert_eq!(defs["Metrics"].as_array().unwrap().len(), 3);
    }

    #[test]
    fn outbox_lag_is_a_gauge_with_zero() {
        let m = Metrics::new("Tern", MetricsSink::Discard);
        m.update(|c| c.outbox_lag_seconds = Some(0));
        let doc = m.emf(1).expect("a lag of 0 is still emitted");
        assert_eq!(doc["OutboxLag"], 0);
        let defs = &doc["_aws"]["CloudWatchMetrics"][0]["Metrics"];
        assert_eq!(defs, &json!([{"Name": "OutboxLag", "Unit": "Seconds"}]));
        m.update(|c| {
            c.outbox_lag_seconds = Some(301);
            c.outbox_relay_errors += 2;
        });
        let doc = m.emf(1).unwrap();
        assert_eq!(
            (doc["OutboxLag"].clone(), doc["OutboxRelayErrors"].clone()),
            (json!(301), json!(2))
        );
    }
}
