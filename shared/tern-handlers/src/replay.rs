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

use std::collections::HashSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tern_core::drain::{Drain, DrainRule, DrainStop};
use tern_core::ports::{DrainableQueue, MessageQueue, PortError, QueueEntry, ReceivedMessage};
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
    /// `queue_empty` (consecutive long polls found nothing). `None` after an error.
    #[serde(default)]
    pub stopped: Option<DrainStop>,
}

/// What the replay needs.
pub struct ReplayDeps {
    /// The DLQ.
    pub dlq: Arc<dyn DrainableQueue>,
    /// The delivery queue.
    pub delivery_queue: Arc<dyn MessageQueue>,
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

/// Whether a delivery message passes `filters` (every set field must match): what a run
/// would replay. Public so tools can preview a replay (`tern replay` checks the target
/// endpoints before it moves anything).
pub fn filters_match(filters: &ReplayFilters, message: &DeliveryMessage) -> bool {
    matches(filters, message)
}

/// Drains the DLQ once. Messages left in place are made visible again at the end.
///
/// # Errors
/// [`PortError`] when the queues cannot be reached; messages already moved stay moved.
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
    let mut left: Vec<ReceivedMessage> = Vec::new();
    let result = drain(deps, &request, max, &mut summary, &mut left, metrics).await;
    for m in &left {
        if let Err(e) = deps.dlq.release(&m.receipt_handle).await {
            tracing::warn!(error = %e, message_id = %m.message_id, "could not release; it reappears after its visibility timeout");
        }
    }
    result.map(|()| summary)
}

async fn drain(
    deps: &ReplayDeps,
    request: &ReplayRequest,
    max: u32,
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
    while let Some(batch) = drain.next_batch().await? {
        for m in batch {
            summary.examined += 1;
            let Ok(parsed) = DeliveryMessage::parse(&m.body) else {
                summary.unreadable += 1;
                left.push(m);
                continue;
            };
            if !matches(&request.filters, &parsed) {
                summary.skipped += 1;
                left.push(m);
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
            if request.dry_run {
                left.push(m);
                continue;
            }
            let replayed = parsed.replayed();
            deps.delivery_queue
                .send(&QueueEntry {
                    id: "replay".into(),
                    body: replayed.to_body(),
                    delay_seconds: 0,
                    attributes: vec![],
                    group_id: Some(replayed.group_id()),
                })
                .await?;
            // Deleted after the send: a crash in between leaves a copy in the DLQ, and the
            // sender's ledger drops the second replay of the same budget.
            deps.dlq.delete(&m.receipt_handle).await?;
            summary.replayed += 1;
            metrics.update(|c| c.replayed += 1);
        }
    }
    summary.stopped = drain.stopped();
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
}
