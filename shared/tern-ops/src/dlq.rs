//! The DLQ as an operator sees it: each message read as a dead letter, and dead letters
//! grouped by endpoint and reason ("which endpoint is failing, and why?"). Lists read the
//! tenants' dead-letter records ([`read_record`], [`tern_core::dead_letters`]), never the
//! shared queue, so a list never hides a dead letter from another reader; views of
//! messages read from the queue ([`view`], for `tern dlq --show`) render the same way.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use tern_core::dead_letters::{DeadLetterQuery, RecordedDeadLetter};
use tern_core::ports::{DeliveryLedger, EndpointStore, PortError, ReceivedMessage};
use tern_core::{DeliveryId, DeliveryMessage, EndpointId, TenantId};

/// Group reason of a message SQS moved to the DLQ itself after `maxReceiveCount` receives
/// (a crash, a panic, an AWS outage): it carries no dead-letter record.
pub const REASON_SQS_REDRIVE: &str = "sqs_redrive";

/// Group reason of a message that is not a delivery message at all.
pub const REASON_UNREADABLE: &str = "unreadable";

/// Characters of a payload kept in a sample.
pub const SAMPLE_CHARS: usize = 500;

/// One DLQ message, read. Field names are the `--json` contract of `tern dlq --list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadLetterView {
    /// SQS message id (`tern dlq --show <message-id>`).
    pub message_id: String,
    /// `<event id>.<endpoint id>`, when readable.
    pub delivery_id: Option<String>,
    /// Event id (the `webhook-id`).
    pub event_id: Option<String>,
    /// Event type.
    pub event_type: Option<String>,
    /// Tenant.
    pub tenant_id: Option<String>,
    /// Endpoint.
    pub endpoint_id: Option<String>,
    /// Dead-letter reason (`exhausted`, `gone`, ...), [`REASON_SQS_REDRIVE`] or
    /// [`REASON_UNREADABLE`].
    pub reason: String,
    /// HTTP status of the last attempt.
    pub last_status: Option<u16>,
    /// Error of the last attempt.
    pub last_error: Option<String>,
    /// Attempts made in the budget that ended here.
    pub attempts: Option<u32>,
    /// When it was dead-lettered (UTC); `None` for a message SQS moved itself.
    pub dead_lettered_at: Option<DateTime<Utc>>,
    /// Replays so far.
    pub replay_count: Option<u32>,
    /// The payload (or the unreadable body), cut to [`SAMPLE_CHARS`] characters.
    pub payload_sample: String,
    /// True when the sample was cut.
    pub payload_truncated: bool,
}

fn sample(text: &str) -> (String, bool) {
    let mut chars = text.chars();
    let kept: String = chars.by_ref().take(SAMPLE_CHARS).collect();
    (kept, chars.next().is_some())
}

/// Reads one DLQ message. Never fails: an unreadable body is a view with reason
/// [`REASON_UNREADABLE`] and the body as its sample.
pub fn view(message: &ReceivedMessage) -> DeadLetterView {
    match DeliveryMessage::parse(&message.body) {
        Ok(d) => {
            let record = d.dead_letter.as_ref();
            let (payload_sample, payload_truncated) = sample(d.event.payload.as_str());
            DeadLetterView {
                message_id: message.message_id.clone(),
                delivery_id: Some(d.delivery_id.to_string()),
                event_id: Some(d.event.id.to_string()),
                event_type: Some(d.event.event_type.to_string()),
                tenant_id: Some(d.event.tenant_id.to_string()),
                endpoint_id: Some(d.endpoint_id.to_string()),
                reason: record
                    .map_or_else(|| REASON_SQS_REDRIVE.to_owned(), |r| r.reason.to_string()),
                last_status: record.map_or(d.last_status, |r| r.last_status),
                last_error: record.map_or_else(|| d.last_error.clone(), |r| r.last_error.clone()),
                attempts: Some(record.map_or(d.attempt, |r| r.attempts)),
                dead_lettered_at: record.map(|r| r.at),
                replay_count: Some(d.replay_count),
                payload_sample,
                payload_truncated,
            }
        }
        Err(_) => {
            let (payload_sample, payload_truncated) = sample(&message.body);
            DeadLetterView {
                message_id: message.message_id.clone(),
                delivery_id: None,
                event_id: None,
                event_type: None,
                tenant_id: None,
                endpoint_id: None,
                reason: REASON_UNREADABLE.to_owned(),
                last_status: None,
                last_error: None,
                attempts: None,
                dead_lettered_at: None,
                replay_count: None,
                payload_sample,
                payload_truncated,
            }
        }
    }
}

/// A recorded dead letter as a view. It names no SQS message (the record keys dead letters
/// by pair): `message_id` is its delivery id, `<event id>.<endpoint id>`.
pub fn recorded_view(r: &RecordedDeadLetter) -> DeadLetterView {
    let delivery = DeliveryId::of(&r.event_id, &r.endpoint_id).to_string();
    DeadLetterView {
        message_id: delivery.clone(),
        delivery_id: Some(delivery),
        event_id: Some(r.event_id.to_string()),
        event_type: Some(r.event_type.clone()),
        tenant_id: Some(r.tenant_id.to_string()),
        endpoint_id: Some(r.endpoint_id.to_string()),
        reason: r.reason.to_string(),
        last_status: r.last_status,
        last_error: r.last_error.clone(),
        attempts: Some(r.attempts),
        dead_lettered_at: Some(r.dead_lettered_at),
        replay_count: Some(r.replay_count),
        payload_sample: r.payload_sample.clone(),
        payload_truncated: r.payload_truncated,
    }
}

/// What [`read_record`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordRead {
    /// The dead letters still in the DLQ, by tenant, endpoint and event; at most `max`.
    pub entries: Vec<RecordedDeadLetter>,
    /// Record entries read (before dropping pairs delivered or replayed since).
    pub read: usize,
    /// True when every entry was read (none left past `max`).
    pub complete: bool,
}

/// Dead letters from the tenants' records ([`tern_core::dead_letters`]), never from the
/// DLQ: of `tenant`, or (`None`, the operator) of every tenant that has an endpoint in the
/// registry (one `list_all` of the registry, then one read of each tenant's record), only
/// `endpoint`'s when given; at most `max` in all.
///
/// # Errors
/// The ledger or the registry could not be read.
pub async fn read_record(
    ledger: &dyn DeliveryLedger,
    endpoints: &dyn EndpointStore,
    tenant: Option<&TenantId>,
    endpoint: Option<&EndpointId>,
    max: usize,
) -> Result<RecordRead, PortError> {
    let tenants: Vec<TenantId> = match tenant {
        Some(t) => vec![t.clone()],
        None => {
            let mut all: Vec<TenantId> = endpoints
                .list_all()
                .await?
                .into_iter()
                .map(|e| e.tenant_id)
                .collect();
            all.sort();
            all.dedup();
            all
        }
    };
    let mut out = RecordRead {
        complete: true,
        ..RecordRead::default()
    };
    for t in tenants {
        let left = max.saturating_sub(out.entries.len());
        if left == 0 {
            out.complete = false;
            break;
        }
        let read = ledger
            .dead_letters(&DeadLetterQuery {
                tenant: t,
                endpoint: endpoint.cloned(),
                max: left,
            })
            .await?;
        out.read += read.read;
        out.complete &= read.complete;
        out.entries.extend(read.entries);
    }
    Ok(out)
}

/// Dead letters of one endpoint with one reason. Field names are the `--json` contract of
/// `tern dlq`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadLetterGroup {
    /// Tenant (`None` for unreadable messages).
    pub tenant_id: Option<String>,
    /// Endpoint (`None` for unreadable messages).
    pub endpoint_id: Option<String>,
    /// Reason, as in [`DeadLetterView::reason`].
    pub reason: String,
    /// Messages in the group.
    pub count: usize,
    /// Oldest dead-letter time in the group (UTC).
    pub oldest: Option<DateTime<Utc>>,
    /// Newest dead-letter time in the group (UTC).
    pub newest: Option<DateTime<Utc>>,
    /// Last status of the newest dead letter.
    pub last_status: Option<u16>,
    /// Last error of the newest dead letter.
    pub last_error: Option<String>,
    /// One message of the group (the newest), to inspect before replaying.
    pub sample: DeadLetterView,
}

/// Groups dead letters by (tenant, endpoint, reason), largest group first (then by endpoint
/// and reason, so the order is stable).
pub fn group(views: &[DeadLetterView]) -> Vec<DeadLetterGroup> {
    type Key = (Option<String>, Option<String>, String);
    let mut groups: BTreeMap<Key, Vec<&DeadLetterView>> = BTreeMap::new();
    for v in views {
        groups
            .entry((v.tenant_id.clone(), v.endpoint_id.clone(), v.reason.clone()))
            .or_default()
            .push(v);
    }
    let mut out: Vec<DeadLetterGroup> = groups
        .into_iter()
        .map(|((tenant_id, endpoint_id, reason), members)| {
            let newest_member = members
                .iter()
                .copied()
                .max_by_key(|v| v.dead_lettered_at)
                .unwrap_or(members[0]);
            DeadLetterGroup {
                tenant_id,
                endpoint_id,
                reason,
                count: members.len(),
                oldest: members.iter().filter_map(|v| v.dead_lettered_at).min(),
                newest: members.iter().filter_map(|v| v.dead_lettered_at).max(),
                last_status: newest_member.last_status,
                last_error: newest_member.last_error.clone(),
                sample: newest_member.clone(),
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.endpoint_id.cmp(&b.endpoint_id))
            .then_with(|| a.reason.cmp(&b.reason))
    });
    out
}

/// One DLQ message whole, as `tern dlq --show <message-id> --json` prints it: the view
/// and the full payload (never cut).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadLetterDetail {
    /// The message, read.
    #[serde(flatten)]
    pub view: DeadLetterView,
    /// The whole payload text (or the whole body, when unreadable).
    pub payload: String,
}

/// Reads one DLQ message with its whole payload.
pub fn detail(message: &ReceivedMessage) -> DeadLetterDetail {
    let payload = DeliveryMessage::parse(&message.body).map_or_else(
        |_| message.body.clone(),
        |d| d.event.payload.as_str().to_owned(),
    );
    DeadLetterDetail {
        view: view(message),
        payload,
    }
}

/// `tern dlq --json` (grouped) and `tern dlq --list --json`: what was read, of how many.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DlqReport<T> {
    /// Messages in the DLQ before reading (SQS `ApproximateNumberOfMessages` plus
    /// `...NotVisible`: approximate, as SQS says).
    pub total: u64,
    /// Messages read and shown (at most `--max`).
    pub shown: usize,
    /// Groups (`tern dlq`) or dead letters (`tern dlq --list`).
    pub items: Vec<T>,
}

fn utc(t: Option<DateTime<Utc>>) -> String {
    t.map_or_else(
        || "-".into(),
        |t| t.format("%Y-%m-%d %H:%M:%SZ").to_string(),
    )
}

fn one_line(text: &str, chars: usize) -> String {
    text.chars()
        .take(chars)
        .collect::<String>()
        .replace(['\n', '\r'], " ")
}

/// The closing line of `tern dlq`: "3 of 3 dead letters shown" or, when `--max` cut the
/// read, "1 of 3 dead letters shown (raise --max to see more)"; none is ever removed.
pub fn shown_line(shown: usize, total: u64) -> String {
    let cut = (shown as u64) < total;
    format!(
        "{shown} of {} dead letters shown{}; none removed.",
        total.max(shown as u64),
        if cut {
            " (raise --max to see more)"
        } else {
            ""
        }
    )
}

/// Prints groups as a table: which endpoint fails and why, with counts and dead-letter
/// times (UTC).
///
/// # Errors
/// A write error.
pub fn print_groups(
    out: &mut dyn std::io::Write,
    groups: &[DeadLetterGroup],
    shown: usize,
    total: u64,
) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<38} {:<16} {:<20} {:>5} {:<21} {:<21} {:>6}  LAST ERROR",
        "ENDPOINT", "TENANT", "REASON", "COUNT", "OLDEST (UTC)", "NEWEST (UTC)", "STATUS"
    )?;
    for g in groups {
        writeln!(
            out,
            "{:<38} {:<16} {:<20} {:>5} {:<21} {:<21} {:>6}  {}",
            g.endpoint_id.as_deref().unwrap_or("-"),
            g.tenant_id.as_deref().unwrap_or("-"),
            g.reason,
            g.count,
            utc(g.oldest),
            utc(g.newest),
            g.last_status.map_or_else(|| "-".into(), |s| s.to_string()),
            one_line(g.last_error.as_deref().unwrap_or("-"), 80)
        )?;
    }
    writeln!(out, "{}", shown_line(shown, total))
}

/// Prints dead letters one per line (`tern dlq --list`).
///
/// # Errors
/// A write error.
pub fn print_list(
    out: &mut dyn std::io::Write,
    views: &[DeadLetterView],
    total: u64,
) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<38} {:<38} {:<38} {:<20} {:<21} {:>6}  PAYLOAD",
        "MESSAGE", "EVENT", "ENDPOINT", "REASON", "DEAD-LETTERED (UTC)", "STATUS"
    )?;
    for v in views {
        writeln!(
            out,
            "{:<38} {:<38} {:<38} {:<20} {:<21} {:>6}  {}",
            v.message_id,
            v.event_id.as_deref().unwrap_or("-"),
            v.endpoint_id.as_deref().unwrap_or("-"),
            v.reason,
            utc(v.dead_lettered_at),
            v.last_status.map_or_else(|| "-".into(), |s| s.to_string()),
            one_line(&v.payload_sample, 60)
        )?;
    }
    writeln!(out, "{}", shown_line(views.len(), total))
}

/// Prints one dead letter whole (`tern dlq --show <message-id>`).
///
/// # Errors
/// A write error.
pub fn print_detail(out: &mut dyn std::io::Write, d: &DeadLetterDetail) -> std::io::Result<()> {
    let v = &d.view;
    let opt = |o: &Option<String>| o.clone().unwrap_or_else(|| "-".into());
    writeln!(out, "message:          {}", v.message_id)?;
    writeln!(out, "event:            {}", opt(&v.event_id))?;
    writeln!(out, "event type:       {}", opt(&v.event_type))?;
    writeln!(out, "tenant:           {}", opt(&v.tenant_id))?;
    writeln!(out, "endpoint:         {}", opt(&v.endpoint_id))?;
    writeln!(out, "reason:           {}", v.reason)?;
    writeln!(out, "dead-lettered at: {} (UTC)", utc(v.dead_lettered_at))?;
    writeln!(
        out,
        "attempts:         {}",
        v.attempts.map_or_else(|| "-".into(), |a| a.to_string())
    )?;
    writeln!(
        out,
        "last status:      {}",
        v.last_status.map_or_else(|| "-".into(), |s| s.to_string())
    )?;
    writeln!(out, "last error:       {}", opt(&v.last_error))?;
    writeln!(
        out,
        "replays so far:   {}",
        v.replay_count.map_or_else(|| "-".into(), |r| r.to_string())
    )?;
    writeln!(out, "payload ({} bytes):", d.payload.len())?;
    writeln!(out, "{}", d.payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_core::{DeadLetter, DeadLetterReason, EndpointId, Event};

    fn message(
        id: &str,
        endpoint: &str,
        reason: Option<DeadLetterReason>,
        minute: u32,
    ) -> ReceivedMessage {
        let event: Event = serde_json::from_value(serde_json::json!({
            "id": format!("evt_{id}"), "type": "order.paid", "tenant_id": "tnt_a",
            "created_at": "2026-11-30T00:00:00Z", "payload": {"id": id},
        }))
        .unwrap();
        let mut m = DeliveryMessage::first(event, EndpointId::new(endpoint).unwrap());
        if let Some(reason) = reason {
            m = m.dead_lettered(DeadLetter {
                reason,
                last_status: Some(500 + u16::try_from(minute).unwrap()),
                last_error: Some(format!("http status {}", 500 + minute)),
                attempts: 7,
                at: format!("2026-11-30T10:{minute:02}:00Z").parse().unwrap(),
            });
        }
        ReceivedMessage {
            message_id: format!("m_{id}"),
            receipt_handle: format!("r_{id}"),
            body: m.to_body(),
            attributes: vec![],
        }
    }

    #[test]
    fn groups_by_endpoint_and_reason_largest_first() {
        let messages = [
            message("1", "ep_a", Some(DeadLetterReason::Exhausted), 1),
            message("2", "ep_a", Some(DeadLetterReason::Exhausted), 3),
            message("3", "ep_a", Some(DeadLetterReason::Gone), 2),
            message("4", "ep_b", None, 0),
            ReceivedMessage {
                message_id: "m_junk".into(),
                receipt_handle: "r".into(),
                body: "</table><img src=x onerror=alert(1)>".into(),
                attributes: vec![],
            },
        ];
        let views: Vec<_> = messages.iter().map(view).collect();
        let groups = group(&views);
        assert_eq!(groups.len(), 4);
        let first = &groups[0];
        assert_eq!(
            (
                first.endpoint_id.as_deref(),
                first.reason.as_str(),
                first.count
            ),
            (Some("ep_a"), "exhausted", 2)
        );
        assert_eq!(
            first.oldest.unwrap().to_rfc3339(),
            "2026-11-30T10:01:00+00:00"
        );
        assert_eq!(
            first.newest.unwrap().to_rfc3339(),
            "2026-11-30T10:03:00+00:00"
        );
        assert_eq!(first.last_status, Some(503), "the newest one's status");
        assert_eq!(first.sample.event_id.as_deref(), Some("evt_2"));
        let redriven = groups
            .iter()
            .find(|g| g.reason == REASON_SQS_REDRIVE)
            .unwrap();
        assert_eq!(redriven.endpoint_id.as_deref(), Some("ep_b"));
        assert_eq!(redriven.oldest, None);
        let junk = groups
            .iter()
            .find(|g| g.reason == REASON_UNREADABLE)
            .unwrap();
        assert_eq!(
            junk.sample.payload_sample,
            "</table><img src=x onerror=alert(1)>"
        );
    }

    #[test]
    fn shown_line_says_when_cut() {
        assert_eq!(
            shown_line(1, 3),
            "1 of 3 dead letters shown (raise --max to see more); none removed."
        );
        assert_eq!(shown_line(3, 3), "3 of 3 dead letters shown; none removed.");
        // SQS's count is approximate: never "4 of 3".
        assert_eq!(shown_line(4, 3), "4 of 4 dead letters shown; none removed.");
        let big = "y".repeat(SAMPLE_CHARS * 2);
        let d = detail(&message("9", "ep_a", Some(DeadLetterReason::Gone), 5));
        assert_eq!(d.view.event_id.as_deref(), Some("evt_9"));
        let m = ReceivedMessage {
            message_id: "m".into(),
            receipt_handle: "r".into(),
            body: big.clone(),
            attributes: vec![],
        };
        assert_eq!(detail(&m).payload, big, "--show is never cut");
    }

    #[test]
    fn samples_are_cut() {
        let body = "x".repeat(SAMPLE_CHARS + 10);
        let v = view(&ReceivedMessage {
            message_id: "m".into(),
            receipt_handle: "r".into(),
            body,
            attributes: vec![],
        });
        assert_eq!(v.payload_sample.chars().count(), SAMPLE_CHARS);
        assert!(v.payload_truncated);
    }
}
