//! The DLQ and the relay-failure queue read whole for `tern audit`, and indexed by the
//! pairs their messages hold.
//!
//! SQS has no way to list a queue: reading is receiving. Each message is hidden while the
//! read goes on (so none is read twice) and made visible again at the end, one
//! `ChangeMessageVisibility` each. Meanwhile a replay or another reader does not see them.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use tern_core::drain::{Drain, DrainRule, DrainStop};
use tern_core::ports::{DrainableQueue, PortError, ReceivedMessage};

use super::classify::{DlqHit, ParkedHit, ParkedMatch};
use crate::dlq;
use crate::relay_failures;

/// How long reading one queue may take before the audit goes on with what it read: 5 min.
/// SQS answers a receive of 10 messages in tens of milliseconds, so this reads tens of
/// thousands of messages; the messages stay hidden this long plus a minute at most.
pub const QUEUE_READ_BUDGET: Duration = Duration::from_secs(300);

/// Seconds the relay's on-failure window is widened on each side when matching an event's
/// creation time: 300. The event's `created_at` comes from the application's clock before
/// its transaction commits; the stream's arrival times are whole seconds of another clock.
pub const WINDOW_SLACK_SECONDS: i64 = 300;

/// One queue, read.
#[derive(Debug, Clone, Default)]
pub struct QueueRead {
    /// The messages, each once.
    pub messages: Vec<ReceivedMessage>,
    /// True when the queue answered empty at the end: every message was read (messages
    /// another reader held hidden meanwhile excepted).
    pub complete: bool,
}

/// Reads up to `max` messages of `queue` within `budget`, then makes them visible again.
///
/// # Errors
/// A queue error; messages read so far are released first.
pub async fn read_whole(
    queue: &dyn DrainableQueue,
    max: usize,
    budget: Duration,
) -> Result<QueueRead, PortError> {
    let rule = DrainRule {
        wait_seconds: DrainRule::WAIT_SECONDS,
        empty_polls_to_stop: DrainRule::EMPTY_POLLS_TO_STOP,
        time_budget: budget,
        // Hidden for the whole read and a minute more: a message that came back during
        // the read would be read twice and, worse, its first handle would no longer work.
        visibility_seconds: i32::try_from(budget.as_secs() + 60).unwrap_or(i32::MAX),
    };
    let mut drain = Drain::new(queue, rule, max);
    let mut seen: Vec<ReceivedMessage> = Vec::new();
    let mut failed = None;
    loop {
        match drain.next_batch().await {
            Ok(Some(batch)) => seen.extend(batch),
            Ok(None) => break,
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    for m in &seen {
        queue.release(&m.receipt_handle).await?;
    }
    if let Some(e) = failed {
        return Err(e);
    }
    let mut ids = std::collections::HashSet::new();
    seen.retain(|m| ids.insert(m.message_id.clone()));
    Ok(QueueRead {
        messages: seen,
        complete: drain.stopped() == Some(DrainStop::QueueEmpty),
    })
}

/// The DLQ's messages by (event id, endpoint id); of several for one pair, the latest
/// budget's. Returns also how many messages name no pair (unreadable bodies).
pub fn dlq_index(messages: &[ReceivedMessage]) -> (HashMap<(String, String), DlqHit>, usize) {
    let mut index: HashMap<(String, String), DlqHit> = HashMap::new();
    let mut unreadable = 0;
    for m in messages {
        let v = dlq::view(m);
        let (Some(event), Some(endpoint)) = (v.event_id, v.endpoint_id) else {
            unreadable += 1;
            continue;
        };
        let hit = DlqHit {
            message_id: v.message_id,
            reason: v.reason,
            at: v.dead_lettered_at,
            replay_count: v.replay_count,
        };
        index
            .entry((event, endpoint))
            .and_modify(|h| {
                if hit.replay_count > h.replay_count {
                    *h = hit.clone();
                }
            })
            .or_insert(hit);
    }
    (index, unreadable)
}

/// What the relay-failure queue covers: pairs by event (and endpoint, when one delivery
/// was refused), and the time windows of stream batches the mapping gave up on.
#[derive(Debug, Clone, Default)]
pub struct ParkedIndex {
    by_event: HashMap<(String, Option<String>), ParkedHit>,
    windows: Vec<(DateTime<Utc>, DateTime<Utc>, ParkedHit)>,
    /// Parked messages that name no event and no time window.
    pub unmatched: usize,
}

impl ParkedIndex {
    /// Indexes the relay-failure queue's messages.
    pub fn of(messages: &[ReceivedMessage]) -> Self {
        let mut index = Self::default();
        for m in messages {
            let v = relay_failures::view(m);
            let hit = |matched| ParkedHit {
                message_id: v.message_id.clone(),
                reason: v.reason.clone(),
                matched,
            };
            if let Some(event) = &v.tern_event_id {
                let matched = if v.endpoint_id.is_some() {
                    ParkedMatch::Endpoint
                } else {
                    ParkedMatch::Event
                };
                index
                    .by_event
                    .insert((event.clone(), v.endpoint_id.clone()), hit(matched));
            } else if let Some((from, to)) = batch_window(&m.body) {
                index.windows.push((from, to, hit(ParkedMatch::Window)));
            } else {
                index.unmatched += 1;
            }
        }
        index
    }

    /// The message that covers the pair, the most precise first.
    pub fn find(
        &self,
        event: &str,
        endpoint: &str,
        created_at: DateTime<Utc>,
    ) -> Option<&ParkedHit> {
        self.by_event
            .get(&(event.to_owned(), Some(endpoint.to_owned())))
            .or_else(|| self.by_event.get(&(event.to_owned(), None)))
            .or_else(|| {
                self.windows
                    .iter()
                    .find(|(from, to, _)| (*from..=*to).contains(&created_at))
                    .map(|(_, _, hit)| hit)
            })
    }
}

/// The arrival window of a stream batch the mapping gave up on (Lambda's on-failure
/// record, `DDBStreamBatchInfo`), widened by [`WINDOW_SLACK_SECONDS`]; `None` when the
/// body is not one or lacks the arrival times.
fn batch_window(body: &str) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
    let v: Value = serde_json::from_str(body).ok()?;
    let info = v.get("DDBStreamBatchInfo")?;
    let time = |key: &str| {
        info.get(key)
            .and_then(Value::as_str)
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc))
    };
    let slack = chrono::Duration::seconds(WINDOW_SLACK_SECONDS);
    Some((
        time("approximateArrivalOfFirstRecord")? - slack,
        time("approximateArrivalOfLastRecord")? + slack,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(id: &str, body: &str) -> ReceivedMessage {
        ReceivedMessage {
            message_id: id.into(),
            receipt_handle: id.into(),
            body: body.into(),
            attributes: vec![],
        }
    }

    #[test]
    fn parked_messages_cover_a_pair_an_event_or_a_window() {
        let index = ParkedIndex::of(&[
            msg(
                "p1",
                r#"{"reason":"refused","tern_event_id":"evt_1","endpoint_id":"ep_1"}"#,
            ),
            msg(
                "p2",
                r#"{"reason":"bad payload","keys":{"event_id":{"S":"evt_2"}}}"#,
            ),
            msg(
                "p3",
                r#"{"DDBStreamBatchInfo":{"shardId":"s","startSequenceNumber":"1","endSequenceNumber":"2",
                    "approximateArrivalOfFirstRecord":"2026-12-01T10:00:00Z",
                    "approximateArrivalOfLastRecord":"2026-12-01T10:00:05Z","streamArn":"a"}}"#,
            ),
            msg("p4", r#"{"DDBStreamBatchInfo":{"shardId":"s"}}"#),
        ]);
        let t = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        let noon = t("2026-12-01T12:00:00Z");
        assert_eq!(index.find("evt_1", "ep_1", noon).unwrap().message_id, "p1");
        assert!(index.find("evt_1", "ep_2", noon).is_none());
        let whole = index.find("evt_2", "ep_9", noon).unwrap();
        assert_eq!(
            (whole.message_id.as_str(), whole.matched),
            ("p2", ParkedMatch::Event)
        );
        let w = index
            .find("evt_3", "ep_1", t("2026-12-01T10:04:00Z"))
            .unwrap();
        assert_eq!(w.matched, ParkedMatch::Window);
        assert!(
            index
                .find("evt_3", "ep_1", t("2026-12-01T10:06:00Z"))
                .is_none()
        );
        assert_eq!(index.unmatched, 1);
    }
}
