//! The replay function: drains the DLQ back into the delivery queue, optionally filtered,
//! optionally as a dry run. A replayed delivery starts a fresh attempt budget and keeps
//! its `webhook-id` (the event id); its replay count goes up by one.
//!
//! One run replays each delivery at most once. A delivery whose endpoint still refuses it
//! comes back to the DLQ as a new message within a second (a bounce); a run that read it
//! again would send it round and round until its time or message budget ran out. So a
//! run remembers the deliveries it replayed and leaves any later copy in the DLQ
//! ([`ReplaySummary::already_replayed`]). Every tool replays through this function: the
//! replay Lambda, `tern replay` and the console.
//!
//! The DLQ is shared by every tenant, so a run never holds what it does not take: a
//! message that does not match the filters (another tenant's, say) is made visible again
//! at once (`ChangeMessageVisibility` 0), not at the end of the run. A run with a tenant
//! filter and the ledger ([`ReplayDeps::ledger`]) first reads the tenant's dead-letter
//! record ([`tern_core::dead_letters`]): it knows which dead letters it looks for
//! ([`ReplaySummary::recorded`]), stops once it has found them all, and its dry run reads
//! only the record (it never receives a message).

use std::collections::HashSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tern_core::dead_letters::{DeadLetterQuery, RecordedDeadLetter};
use tern_core::drain::{Drain, DrainRule, DrainStop};
use tern_core::ports::{
    DeliveryLedger, DrainableQueue, MessageQueue, PortError, QueueEntry, ReceivedMessage,
};
use tern_core::{
    DeadLetterReason, DeliveryId, DeliveryMessage, EndpointId, EventId, EventType, TenantId,
};

use crate::metrics::Metrics;

/// Default most messages examined in one run.
pub const DEFAULT_MAX_MESSAGES: u32 = 1000;

/// Default time budget of one run, in seconds: 240. No new receive starts after it, so a
/// run ends well inside the replay function's timeout (300 s, `infra/settings.json`) even
/// with a last receive's long poll and AWS call deadlines (`tern_aws::budget`) on top.
pub const DEFAULT_MAX_SECONDS: u32 = 240;

/// Seconds a message examined by a run stays hidden from other readers while the run
/// goes on. Longer than the replay function's timeout (300 s), so one run never sees
/// the same message twice.
pub const DRAIN_VISIBILITY_SECONDS: i32 = 330;

/// Which dead-lettered deliveries to replay. Every set field must match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayFilters {
    /// Only this endpoint.
    #[serde(default)]
    pub endpoint_id: Option<EndpointId>,
    /// Only this event type.
    #[serde(default)]
    pub event_type: Option<EventType>,
    /// Only this dead-letter reason (`exhausted`, `gone`, ...). Messages that SQS itself
    /// redrove (no dead-letter record) match no reason filter.
    #[serde(default)]
    pub reason: Option<DeadLetterReason>,
    /// Only this tenant's deliveries.
    #[serde(default)]
    pub tenant_id: Option<TenantId>,
    /// Only this event's deliveries (the `webhook-id`).
    #[serde(default)]
    pub event_id: Option<EventId>,
    /// Only deliveries dead-lettered at or after this time (RFC 3339, UTC): "what failed
    /// during the outage". Messages SQS itself redrove (no dead-letter record, so no
    /// dead-letter time) match no time filter.
    #[serde(default)]
    pub dead_lettered_since: Option<DateTime<Utc>>,
    /// Only deliveries dead-lettered before this time (RFC 3339, UTC; exclusive).
    /// Messages SQS itself redrove match no time filter.
    #[serde(default)]
    pub dead_lettered_until: Option<DateTime<Utc>>,
}

/// The replay function's input.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    /// Count what would be replayed, change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Most messages to examine; default [`DEFAULT_MAX_MESSAGES`].
    #[serde(default)]
    pub max_messages: Option<u32>,
    /// Time budget in seconds; default [`DEFAULT_MAX_SECONDS`], at most that.
    #[serde(default)]
    pub max_seconds: Option<u32>,
    /// Filters.
    #[serde(default)]
    pub filters: ReplayFilters,
}

/// The replay function's output.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplaySummary {
    /// True for a dry run.
    pub dry_run: bool,
    /// Messages read from the DLQ.
    pub examined: u32,
    /// Messages that matched the filters.
    pub matched: u32,
    /// Messages moved to the delivery queue (0 in a dry run).
    pub replayed: u32,
    /// Messages left in the DLQ because they did not match.
    pub skipped: u32,
    /// Messages left in the DLQ because they are not delivery messages (`malformed_message`).
    pub unreadable: u32,
    /// Messages left in the DLQ because this run already replayed their delivery: it came
    /// back (its endpoint still refuses it), or the DLQ held two copies of it.
    #[serde(default)]
    pub already_replayed: u32,
    /// Delivery ids replayed (or that would be, in a dry run), at most 100.
    pub delivery_ids: Vec<String>,
    /// Why the run ended: `max_reached`, `time_budget` (messages may remain: run again) or
    /// `queue_empty` (consecutive long polls found nothing new, or, for a tenant's run,
    /// every dead letter its record listed was found; a dry run from the record: every
    /// entry was read). `None` after an error.
    #[serde(default)]
    pub stopped: Option<DrainStop>,
    /// A tenant's run with the ledger: the dead letters matching the filters that the
    /// tenant's dead-letter record lists (what the run looks for; `matched` counts those
    /// it found in the DLQ, plus any matching message the record does not hold, such as one
    /// SQS moved to the DLQ itself). In a dry run from the record, `examined` counts the
    /// record's entries read and `matched` those that match. `None` without the record.
    #[serde(default)]
    pub recorded: Option<u32>,
}

/// What the replay needs.
pub struct ReplayDeps {
    /// The DLQ.
    pub dlq: Arc<dyn DrainableQueue>,
    /// The delivery queue.
    pub delivery_queue: Arc<dyn MessageQueue>,
    /// The ledger holding the tenants' dead-letter records: a tenant's dry run reads the
    /// record instead of the DLQ, and a replayed dead letter's entry is removed. `None`
    /// (tests, tools without the attempts table): every run reads the DLQ.
    pub ledger: Option<Arc<dyn DeliveryLedger>>,
}

fn matches(filters: &ReplayFilters, m: &DeliveryMessage) -> bool {
    filters
        .endpoint_id
        .as_ref()
        .is_none_or(|e| *e == m.endpoint_id)
        && filters
            .event_type
            .as_ref()
            .is_none_or(|t| *t == m.event.event_type)
        && filters
            .reason
            .is_none_or(|r| m.dead_letter.as_ref().is_some_and(|d| d.reason == r))
        && filters
            .tenant_id
            .as_ref()
            .is_none_or(|t| *t == m.event.tenant_id)
        && filters.event_id.as_ref().is_none_or(|e| *e == m.event.id)
        && filters
            .dead_lettered_since
            .is_none_or(|t| m.dead_letter.as_ref().is_some_and(|d| d.at >= t))
        && filters
            .dead_lettered_until
            .is_none_or(|t| m.dead_letter.as_ref().is_some_and(|d| d.at < t))
}

/// Whether a recorded dead letter passes `filters`, as its message would
/// ([`filters_match`]).
pub fn record_matches(filters: &ReplayFilters, r: &RecordedDeadLetter) -> bool {
    filters
        .endpoint_id
        .as_ref()
        .is_none_or(|e| *e == r.endpoint_id)
        && filters
            .event_type
            .as_ref()
            .is_none_or(|t| t.as_str() == r.event_type)
        && filters.reason.is_none_or(|x| x == r.reason)
        && filters.tenant_id.as_ref().is_none_or(|t| *t == r.tenant_id)
        && filters.event_id.as_ref().is_none_or(|e| *e == r.event_id)
        && filters
            .dead_lettered_since
            .is_none_or(|t| r.dead_lettered_at >= t)
        && filters
            .dead_lettered_until
            .is_none_or(|t| r.dead_lettered_at < t)
}

/// A tenant's recorded dead letters matching `filters` (at most `max`), and whether the
/// record was read whole.
///
/// # Errors
/// The ledger's [`PortError`].
pub async fn recorded(
    ledger: &dyn DeliveryLedger,
    tenant: &TenantId,
    filters: &ReplayFilters,
    max: usize,
) -> Result<(Vec<RecordedDeadLetter>, usize, bool), PortError> {
    let read = ledger
        .dead_letters(&DeadLetterQuery {
            tenant: tenant.clone(),
            endpoint: filters.endpoint_id.clone(),
            max,
        })
        .await?;
    let entries = read
        .entries
        .into_iter()
        .filter(|r| record_matches(filters, r))
        .collect();
    Ok((entries, read.read, read.complete))
}

/// Whether a delivery message passes `filters` (every set field must match): what a run
/// would replay. Public so tools can preview a replay (`tern replay` checks the target
/// endpoints before it moves anything).
pub fn filters_match(filters: &ReplayFilters, message: &DeliveryMessage) -> bool {
    matches(filters, message)
}

/// Drains the DLQ once (a tenant's dry run with the ledger reads only its record).
/// Messages that do not match are made visible again at once; matched ones a dry run
/// counts, and copies of a delivery already replayed, at the end.
///
/// # Errors
/// [`PortError`] when the queues (or the record) cannot be reached; messages already
/// moved stay moved.
pub async fn handle(
    deps: &ReplayDeps,
    request: ReplayRequest,
    metrics: &Metrics,
) -> Result<ReplaySummary, PortError> {
    let max = request.max_messages.unwrap_or(DEFAULT_MAX_MESSAGES);
    let mut summary = ReplaySummary {
        dry_run: request.dry_run,
        ..ReplaySummary::default()
    };
    // A tenant's run knows from its record what it looks for.
    let expected = match (&deps.ledger, &request.filters.tenant_id) {
        (Some(ledger), Some(tenant)) => {
            let (entries, read, complete) = recorded(
                ledger.as_ref(),
                tenant,
                &request.filters,
                usize::try_from(max).unwrap_or(usize::MAX),
            )
            .await?;
            summary.recorded = Some(u32::try_from(entries.len()).unwrap_or(u32::MAX));
            if request.dry_run {
                summary.examined = u32::try_from(read).unwrap_or(u32::MAX);
                summary.matched = u32::try_from(entries.len()).unwrap_or(u32::MAX);
                summary.delivery_ids = entries
                    .iter()
                    .take(100)
                    .map(|r| DeliveryId::of(&r.event_id, &r.endpoint_id).to_string())
                    .collect();
                summary.stopped = Some(if complete {
                    DrainStop::QueueEmpty
                } else {
                    DrainStop::MaxReached
                });
                return Ok(summary);
            }
            Some(
                entries
                    .iter()
                    .map(|r| DeliveryId::of(&r.event_id, &r.endpoint_id))
                    .collect::<HashSet<_>>(),
            )
        }
        _ => None,
    };
    let mut left: Vec<ReceivedMessage> = Vec::new();
    let result = drain(
        deps,
        &request,
        max,
        expected,
        &mut summary,
        &mut left,
        metrics,
    )
    .await;
    for m in &left {
        if let Err(e) = deps.dlq.release(&m.receipt_handle).await {
            tracing::warn!(error = %e, message_id = %m.message_id, "could not release; it reappears after its visibility timeout");
        }
    }
    result.map(|()| summary)
}

/// Makes a message this run does not take visible again at once; one that cannot be
/// released now is tried again at the end.
async fn release_now(deps: &ReplayDeps, m: ReceivedMessage, left: &mut Vec<ReceivedMessage>) {
    if deps.dlq.release(&m.receipt_handle).await.is_err() {
        left.push(m);
    }
}

async fn drain(
    deps: &ReplayDeps,
    request: &ReplayRequest,
    max: u32,
    mut expected: Option<HashSet<DeliveryId>>,
    summary: &mut ReplaySummary,
    left: &mut Vec<ReceivedMessage>,
    metrics: &Metrics,
) -> Result<(), PortError> {
    let rule = DrainRule {
        wait_seconds: DrainRule::WAIT_SECONDS,
        empty_polls_to_stop: DrainRule::EMPTY_POLLS_TO_STOP,
        time_budget: Duration::from_secs(u64::from(
            request
                .max_seconds
                .unwrap_or(DEFAULT_MAX_SECONDS)
                .min(DEFAULT_MAX_SECONDS),
        )),
        visibility_seconds: DRAIN_VISIBILITY_SECONDS,
    };
    let mut drain = Drain::new(
        deps.dlq.as_ref(),
        rule,
        usize::try_from(max).unwrap_or(usize::MAX),
    );
    // The deliveries this run replayed (or would, in a dry run): at most `max` ids.
    let mut replayed: HashSet<DeliveryId> = HashSet::new();
    // Messages made visible again at once come back to later receives: each is counted
    // once, and batches of only such messages, [`DrainRule::EMPTY_POLLS_TO_STOP`] in a row,
    // end the run as an empty queue would (it went round the queue).
    let mut released: HashSet<String> = HashSet::new();
    let mut repeats_in_row = 0;
    let mut stopped = None;
    while let Some(batch) = drain.next_batch().await? {
        let mut new = false;
        for m in batch {
            // Found all it looked for: the rest of the batch goes back at once.
            if stopped.is_some() || released.contains(&m.message_id) {
                release_now(deps, m, left).await;
                continue;
            }
            new = true;
            summary.examined += 1;
            let Ok(parsed) = DeliveryMessage::parse(&m.body) else {
                summary.unreadable += 1;
                released.insert(m.message_id.clone());
                release_now(deps, m, left).await;
                continue;
            };
            if !matches(&request.filters, &parsed) {
                summary.skipped += 1;
                released.insert(m.message_id.clone());
                release_now(deps, m, left).await;
                continue;
            }
            if !replayed.insert(parsed.delivery_id.clone()) {
                summary.already_replayed += 1;
                left.push(m);
                continue;
            }
            summary.matched += 1;
            if summary.delivery_ids.len() < 100 {
                summary.delivery_ids.push(parsed.delivery_id.to_string());
            }
            if let Some(expected) = expected.as_mut() {
                expected.remove(&parsed.delivery_id);
            }
            if request.dry_run {
                left.push(m);
            } else {
                let mut replayed = parsed.replayed();
                if let Some(span) = crate::telemetry::budget_span("replay", &replayed) {
                    replayed.previous_attempt = Some(span);
                }
                deps.delivery_queue
                    .send(&QueueEntry {
                        id: "replay".into(),
                        body: replayed.to_body(),
                        delay_seconds: 0,
                        attributes: vec![],
                        group_id: Some(replayed.group_id()),
                    })
                    .await?;
                // Deleted after the send: a crash in between leaves a copy in the DLQ, and
                // the sender's ledger drops the second replay of the same budget.
                deps.dlq.delete(&m.receipt_handle).await?;
                summary.replayed += 1;
                metrics.update(|c| c.replayed += 1);
                // Out of the record: lists show what is still in the DLQ. A failure is
                // for people: readers drop a pair whose later budget was claimed.
                if let Some(ledger) = &deps.ledger
                    && let Err(e) = ledger.remove_dead_letter(&parsed).await
                {
                    tracing::warn!(error = %e, delivery_id = %parsed.delivery_id, "replayed dead letter left in the record");
                }
            }
            if expected.as_ref().is_some_and(HashSet::is_empty) {
                stopped = Some(DrainStop::QueueEmpty);
            }
        }
        if stopped.is_some() {
            break;
        }
        repeats_in_row = if new { 0 } else { repeats_in_row + 1 };
        if repeats_in_row >= DrainRule::EMPTY_POLLS_TO_STOP {
            stopped = Some(DrainStop::QueueEmpty);
            break;
        }
    }
    summary.stopped = stopped.or(drain.stopped());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_shape() {
        let r: ReplayRequest = serde_json::from_str(
            r#"{"dry_run":true,"filters":{"reason":"exhausted","endpoint_id":"ep_1"}}"#,
        )
        .unwrap();
        assert!(r.dry_run);
        assert_eq!(r.filters.reason, Some(DeadLetterReason::Exhausted));
        assert!(serde_json::from_str::<ReplayRequest>(r#"{"filter":{}}"#).is_err());
        assert!(serde_json::from_str::<ReplayRequest>(r#"{"filters":{"reason":"nope"}}"#).is_err());
        let empty: ReplayRequest = serde_json::from_str("{}").unwrap();
        assert_eq!(empty, ReplayRequest::default());
        let r: ReplayRequest = serde_json::from_str(
            r#"{"filters":{"tenant_id":"tnt_a","event_id":"evt_1","dead_lettered_since":"2026-11-30T10:00:00Z","dead_lettered_until":"2026-11-30T11:00:00Z"}}"#,
        )
        .unwrap();
        assert_eq!(r.filters.tenant_id.unwrap().as_str(), "tnt_a");
        assert_eq!(r.filters.event_id.unwrap().as_str(), "evt_1");
        assert_eq!(
            r.filters.dead_lettered_since.unwrap().to_rfc3339(),
            "2026-11-30T10:00:00+00:00"
        );
    }

    fn dead_letter(tenant: &str, event: &str, at: Option<&str>) -> DeliveryMessage {
        let event: tern_core::Event = serde_json::from_value(serde_json::json!({
            "id": event, "type": "order.paid", "tenant_id": tenant,
            "created_at": "2026-11-30T00:00:00Z", "payload": {"n": 1},
        }))
        .unwrap();
        let m = DeliveryMessage::first(event, EndpointId::new("ep_1").unwrap());
        match at {
            Some(at) => m.dead_lettered(tern_core::DeadLetter {
                reason: DeadLetterReason::Exhausted,
                last_status: Some(503),
                last_error: None,
                attempts: 7,
                at: at.parse().unwrap(),
            }),
            None => m,
        }
    }

    #[test]
    fn tenant_event_and_dead_letter_time_filters() {
        let outage = ReplayFilters {
            dead_lettered_since: Some("2026-11-30T10:00:00Z".parse().unwrap()),
            dead_lettered_until: Some("2026-11-30T11:00:00Z".parse().unwrap()),
            ..ReplayFilters::default()
        };
        let at = |t: &str| dead_letter("tnt_a", "evt_1", Some(t));
        assert!(
            filters_match(&outage, &at("2026-11-30T10:00:00Z")),
            "since is inclusive"
        );
        assert!(filters_match(&outage, &at("2026-11-30T10:59:59Z")));
        assert!(
            !filters_match(&outage, &at("2026-11-30T11:00:00Z")),
            "until is exclusive"
        );
        assert!(!filters_match(&outage, &at("2026-11-30T09:59:59Z")));
        assert!(
            !filters_match(&outage, &dead_letter("tnt_a", "evt_1", None)),
            "no dead-letter time"
        );

        let tenant = ReplayFilters {
            tenant_id: Some(TenantId::new("tnt_a").unwrap()),
            ..ReplayFilters::default()
        };
        assert!(filters_match(&tenant, &dead_letter("tnt_a", "evt_1", None)));
        assert!(!filters_match(
            &tenant,
            &dead_letter("tnt_b", "evt_1", None)
        ));
        let event = ReplayFilters {
            event_id: Some(EventId::new("evt_2").unwrap()),
            ..ReplayFilters::default()
        };
        assert!(filters_match(&event, &dead_letter("tnt_a", "evt_2", None)));
        assert!(!filters_match(&event, &dead_letter("tnt_a", "evt_1", None)));
    }

    /// A DLQ of fixed messages that logs every call: receives hand out each visible message
    /// (hidden until released or deleted).
    struct LoggedDlq {
        messages: Vec<(String, String)>,
        hidden: std::sync::Mutex<HashSet<String>>,
        log: std::sync::Mutex<Vec<String>>,
    }

    #[async_trait::async_trait]
    impl DrainableQueue for LoggedDlq {
        async fn receive(
            &self,
            max: i32,
            _visibility: i32,
            _wait: i32,
        ) -> Result<Vec<ReceivedMessage>, PortError> {
            let mut hidden = self.hidden.lock().unwrap();
            let batch: Vec<ReceivedMessage> = self
                .messages
                .iter()
                .filter(|(id, _)| !hidden.contains(id))
                .take(usize::try_from(max).unwrap())
                .map(|(id, body)| ReceivedMessage {
                    message_id: id.clone(),
                    receipt_handle: id.clone(),
                    body: body.clone(),
                    attributes: vec![],
                })
                .collect();
            for m in &batch {
                hidden.insert(m.message_id.clone());
            }
            self.log
                .lock()
                .unwrap()
                .push(format!("receive {}", batch.len()));
            Ok(batch)
        }
        async fn delete(&self, handle: &str) -> Result<(), PortError> {
            self.log.lock().unwrap().push(format!("delete {handle}"));
            Ok(())
        }
        async fn release(&self, handle: &str) -> Result<(), PortError> {
            self.hidden.lock().unwrap().remove(handle);
            self.log.lock().unwrap().push(format!("release {handle}"));
            Ok(())
        }
    }

    struct NullQueue;

    #[async_trait::async_trait]
    impl MessageQueue for NullQueue {
        async fn send_batch(
            &self,
            entries: &[QueueEntry],
        ) -> Result<Vec<Result<(), PortError>>, PortError> {
            Ok(entries.iter().map(|_| Ok(())).collect())
        }
        async fn send(&self, _: &QueueEntry) -> Result<(), PortError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn another_tenants_message_is_made_visible_again_at_once_and_counted_once() {
        let body = |tenant: &str, event: &str| {
            dead_letter(tenant, event, Some("2026-11-30T10:00:00Z")).to_body()
        };
        let dlq = Arc::new(LoggedDlq {
            messages: vec![
                ("b1".into(), body("tnt_b", "evt_b1")),
                ("a1".into(), body("tnt_a", "evt_a1")),
                ("b2".into(), body("tnt_b", "evt_b2")),
            ],
            hidden: std::sync::Mutex::new(HashSet::new()),
            log: std::sync::Mutex::new(Vec::new()),
        });
        let deps = ReplayDeps {
            dlq: dlq.clone(),
            delivery_queue: Arc::new(NullQueue),
            ledger: None,
        };
        let request = ReplayRequest {
            filters: ReplayFilters {
                tenant_id: Some(TenantId::new("tnt_a").unwrap()),
                ..ReplayFilters::default()
            },
            max_seconds: Some(5),
            ..ReplayRequest::default()
        };
        let metrics = Metrics::new("Tern", crate::metrics::MetricsSink::Discard);
        let summary = handle(&deps, request, &metrics).await.unwrap();
        assert_eq!(
            (
                summary.examined,
                summary.matched,
                summary.replayed,
                summary.skipped
            ),
            (3, 1, 1, 2),
            "B's two counted once each, however often they come back"
        );
        assert_eq!(summary.stopped, Some(DrainStop::QueueEmpty));
        let log = dlq.log.lock().unwrap().clone();
        // B's messages go back within the batch that received them, before the next receive.
        let first_receive_end = log
            .iter()
            .skip(1)
            .position(|l| l.starts_with("receive"))
            .unwrap()
            + 1;
        let first_batch = &log[..first_receive_end];
        assert!(first_batch.contains(&"release b1".to_owned()), "{log:?}");
        assert!(first_batch.contains(&"release b2".to_owned()), "{log:?}");
        assert!(first_batch.contains(&"delete a1".to_owned()), "{log:?}");
    }
}
