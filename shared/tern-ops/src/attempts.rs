//! `tern attempts`: an event's attempt history as an operator reads it. Each try with its
//! response excerpt and, for a retry, when the next attempt is due (in the deployment's
//! time scale: the log stores the logical wait); a last row for each budget that ended in
//! the DLQ, `endpoint_disabled` and replays' included. Times are UTC. Pure functions over
//! the ledger's rows.

use std::io::Write;

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use tern_core::ports::AttemptRecord;

/// Characters of a response excerpt shown in the table (`--json` has the whole excerpt
/// as stored: the sender keeps at most a few hundred bytes).
pub const TABLE_EXCERPT_CHARS: usize = 60;

/// Prefix of an attempt outcome that dead-lettered the delivery (`dead_letter:<reason>`).
pub const DEAD_LETTER_OUTCOME_PREFIX: &str = "dead_letter:";

/// One try, as `tern attempts --json` prints it (field names are stable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttemptView {
    /// Endpoint.
    pub endpoint_id: String,
    /// Replays before this budget (0: the first budget).
    pub replay_count: u32,
    /// 1-based attempt number within the budget.
    pub attempt: u32,
    /// 0 for the first try of this attempt; n for the n-th takeover after a lost lease.
    pub takeover: u32,
    /// When the try started (UTC, RFC 3339).
    pub started_at: DateTime<Utc>,
    /// Start to end of the response (or the error), milliseconds.
    pub latency_ms: u64,
    /// HTTP status, when the receiver answered.
    pub status: Option<u16>,
    /// `delivered`, `retry`, `dead_letter:<reason>` or `abandoned`.
    pub outcome: String,
    /// Error text, when there was no usable answer.
    pub error: Option<String>,
    /// First bytes of the response body, as stored.
    pub response_excerpt: Option<String>,
    /// True when the body was longer than the excerpt.
    pub excerpt_truncated: bool,
    /// `Location` of a 3xx answer (never followed).
    pub location: Option<String>,
    /// Wait before the next attempt, seconds (a retry only).
    pub next_wait_seconds: Option<u64>,
    /// When the next attempt is due (UTC): the end of this try plus the wait in real time
    /// (`next_wait_seconds` times the deployment's time scale, rounded up to whole seconds,
    /// as the sender waits). The sender re-enqueues right after the try, so this is
    /// accurate to the re-enqueue's latency.
    pub next_attempt_due_at: Option<DateTime<Utc>>,
}

/// A budget that ended in the DLQ, as the last row of its endpoint's attempts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadLetterRow {
    /// Endpoint.
    pub endpoint_id: String,
    /// Replays before the budget that ended here.
    pub replay_count: u32,
    /// Dead-letter reason (`exhausted`, `gone`, ...).
    pub reason: String,
    /// When it was dead-lettered (UTC): the end of the last try.
    pub dead_lettered_at: DateTime<Utc>,
    /// True when a later budget (a replay) exists: it left the DLQ since.
    pub replayed_since: bool,
}

/// `tern attempts --json`: the whole answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttemptsReport {
    /// The event asked for.
    pub event_id: String,
    /// Only this endpoint's attempts, when `--endpoint` was given.
    pub endpoint_id: Option<String>,
    /// Every try, oldest first.
    pub attempts: Vec<AttemptView>,
    /// Budgets that ended in the DLQ, oldest first.
    pub dead_letters: Vec<DeadLetterRow>,
}

fn ended_at(r: &AttemptRecord) -> DateTime<Utc> {
    r.started_at + Duration::milliseconds(i64::try_from(r.latency_ms).unwrap_or(i64::MAX / 2))
}

/// When the attempt after `r` is due, for a retry: its end plus its wait at `time_scale`
/// (`TERN_TIME_SCALE`, 1 in production), as the sender waited. `None` for any other
/// outcome.
pub fn next_attempt_due_at(r: &AttemptRecord, time_scale: f64) -> Option<DateTime<Utc>> {
    match (r.outcome.as_str(), r.next_wait_seconds) {
        ("retry", Some(wait)) => Some(
            ended_at(r)
                + Duration::seconds(
                    i64::try_from(tern_core::retry::real_wait_seconds(wait, time_scale))
                        .unwrap_or(i64::MAX / 2),
                ),
        ),
        _ => None,
    }
}

/// Builds the report from the ledger's rows (any order), keeping only `endpoint` when given,
/// for a deployment in real time (time scale 1: production).
pub fn report(event_id: &str, endpoint: Option<&str>, rows: &[AttemptRecord]) -> AttemptsReport {
    report_scaled(event_id, endpoint, rows, 1.0)
}

/// Builds the report from the ledger's rows (any order), keeping only `endpoint` when given;
/// due times at `time_scale` (`TERN_TIME_SCALE`: local mode's `--time-scale`, 1 in
/// production), as the sender waited.
pub fn report_scaled(
    event_id: &str,
    endpoint: Option<&str>,
    rows: &[AttemptRecord],
    time_scale: f64,
) -> AttemptsReport {
    let mut rows: Vec<&AttemptRecord> = rows
        .iter()
        .filter(|r| endpoint.is_none_or(|e| r.endpoint_id.as_str() == e))
        .collect();
    rows.sort_by_key(|r| r.started_at);
    let attempts = rows
        .iter()
        .map(|r| AttemptView {
            endpoint_id: r.endpoint_id.to_string(),
            replay_count: r.replay_count,
            attempt: r.attempt,
            takeover: r.takeover,
            started_at: r.started_at,
            latency_ms: r.latency_ms,
            status: r.status,
            outcome: r.outcome.clone(),
            error: r.error.clone(),
            response_excerpt: r.response_excerpt.clone(),
            excerpt_truncated: r.excerpt_truncated,
            location: r.location.clone(),
            next_wait_seconds: r.next_wait_seconds,
            next_attempt_due_at: next_attempt_due_at(r, time_scale),
        })
        .collect();
    let dead_letters = rows
        .iter()
        .filter_map(|r| {
            let reason = r.outcome.strip_prefix(DEAD_LETTER_OUTCOME_PREFIX)?;
            Some(DeadLetterRow {
                endpoint_id: r.endpoint_id.to_string(),
                replay_count: r.replay_count,
                reason: reason.to_owned(),
                dead_lettered_at: ended_at(r),
                replayed_since: rows
                    .iter()
                    .any(|l| l.endpoint_id == r.endpoint_id && l.replay_count > r.replay_count),
            })
        })
        .collect();
    AttemptsReport {
        event_id: event_id.to_owned(),
        endpoint_id: endpoint.map(str::to_owned),
        attempts,
        dead_letters,
    }
}

/// What a try's ERROR / RESPONSE cell says: for an HTTP answer, what the receiver answered
/// (the start of its response body: its status is in the STATUS column), or the redirect
/// it asked for; for a try without an answer, the error; `-` for neither. At most `max`
/// characters (`…` when cut), on one line.
pub fn detail(a: &AttemptView, max: usize) -> String {
    let excerpt = a.response_excerpt.as_deref().filter(|x| !x.is_empty());
    let text = match (a.status, a.location.is_some(), excerpt, a.error.as_deref()) {
        // A 3xx: where it pointed (never followed) says more than its body.
        (Some(_), true, _, Some(e)) => e.to_owned(),
        (Some(_), _, Some(x), _) => x.to_owned(),
        (_, _, _, Some(e)) => e.to_owned(),
        (_, _, Some(x), None) => x.to_owned(),
        (_, _, None, None) => return "-".to_owned(),
    };
    let mut shown = crate::text::cut(&text, max);
    // An excerpt the sender already cut is marked too (once).
    let cut_here = text.chars().count() > max;
    if !cut_here && excerpt.is_some_and(|x| x == text) && a.excerpt_truncated {
        shown.push('…');
    }
    shown.replace(['\n', '\r'], " ")
}

/// A time as the tables print it: UTC, marked `Z`, milliseconds.
pub fn utc(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S%.3fZ").to_string()
}

/// Prints the report as a table (headers say UTC), one row per try and one last row per
/// dead-lettered budget, each endpoint's rows together in time order.
///
/// # Errors
/// A write error.
pub fn print_report(out: &mut dyn Write, r: &AttemptsReport) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<25} {:<38} {:>6} {:>11} {:>6} {:>8}  {:<30} {:<25} ERROR / RESPONSE",
        "TIME (UTC)",
        "ENDPOINT",
        "REPLAY",
        "ATTEMPT",
        "STATUS",
        "LATENCY",
        "OUTCOME",
        "NEXT DUE (UTC)"
    )?;
    enum Row<'a> {
        Try(&'a AttemptView),
        Dead(&'a DeadLetterRow),
    }
    let mut rows: Vec<(DateTime<Utc>, u8, Row)> = r
        .attempts
        .iter()
        .map(|a| (a.started_at, 0, Row::Try(a)))
        .chain(
            r.dead_letters
                .iter()
                .map(|d| (d.dead_lettered_at, 1, Row::Dead(d))),
        )
        .collect();
    rows.sort_by_key(|(t, order, _)| (*t, *order));
    for (_, _, row) in rows {
        match row {
            Row::Try(a) => {
                let detail = detail(a, TABLE_EXCERPT_CHARS);
                let attempt = if a.takeover == 0 {
                    a.attempt.to_string()
                } else {
                    format!("{} takeover {}", a.attempt, a.takeover)
                };
                writeln!(
                    out,
                    "{:<25} {:<38} {:>6} {:>11} {:>6} {:>6}ms  {:<30} {:<25} {}",
                    utc(a.started_at),
                    a.endpoint_id,
                    a.replay_count,
                    attempt,
                    a.status.map_or_else(|| "-".into(), |s| s.to_string()),
                    a.latency_ms,
                    a.outcome,
                    a.next_attempt_due_at.map_or_else(|| "-".into(), utc),
                    detail
                )?;
            }
            Row::Dead(d) => writeln!(
                out,
                "{:<25} {:<38} {:>6} {:>11} {:>6} {:>8}  {:<30} {:<25} {}",
                utc(d.dead_lettered_at),
                d.endpoint_id,
                d.replay_count,
                "-",
                "-",
                "-",
                format!("in DLQ: {}", d.reason),
                "-",
                if d.replayed_since {
                    "dead-lettered; replayed since".to_owned()
                } else {
                    format!(
                        "dead-lettered; `tern replay --event {}` once fixed",
                        r.event_id
                    )
                }
            )?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_core::{EndpointId, EventId};

    fn row(attempt: u32, second: u32, outcome: &str, wait: Option<u64>) -> AttemptRecord {
        AttemptRecord {
            event_id: EventId::new("evt_1").unwrap(),
            endpoint_id: EndpointId::new("ep_1").unwrap(),
            replay_count: 0,
            attempt,
            takeover: 0,
            started_at: format!("2026-11-30T10:00:{second:02}Z").parse().unwrap(),
            latency_ms: 250,
            status: Some(503),
            error_class: None,
            error: None,
            location: None,
            response_excerpt: Some("upstream down".into()),
            excerpt_truncated: false,
            outcome: outcome.into(),
            next_wait_seconds: wait,
        }
    }

    #[test]
    fn next_due_and_dead_letter_row() {
        let rows = [
            row(2, 10, "dead_letter:exhausted", None),
            row(1, 0, "retry", Some(5)),
        ];
        let r = report("evt_1", None, &rows);
        assert_eq!(r.attempts[0].attempt, 1, "oldest first");
        assert_eq!(
            r.attempts[0].next_attempt_due_at.unwrap().to_rfc3339(),
            "2026-11-30T10:00:05.250+00:00"
        );
        assert_eq!(r.attempts[1].next_attempt_due_at, None);
        assert_eq!(r.dead_letters.len(), 1);
        assert_eq!(r.dead_letters[0].reason, "exhausted");
        let mut text = Vec::new();
        print_report(&mut text, &r).unwrap();
        let text = String::from_utf8(text).unwrap();
        let last = text.lines().last().unwrap();
        assert!(
            last.contains("in DLQ: exhausted") && last.contains("2026-11-30 10:00:10.250Z"),
            "{text}"
        );
        assert!(text.lines().next().unwrap().contains("TIME (UTC)"));
        assert!(report("evt_1", Some("ep_2"), &rows).attempts.is_empty());
    }

    /// Issue 17: the sender records an HTTP failure with the error `http status 503` and
    /// what the receiver answered as the excerpt; the table showed the error, so the
    /// ERROR / RESPONSE column never said what the receiver answered.
    #[test]
    fn an_http_failure_shows_what_the_receiver_answered() {
        let mut r = row(1, 0, "retry", Some(60));
        r.error = Some("http status 503".into());
        r.response_excerpt = Some("down for maintenance until 04:00\nsee status page".into());
        let mut text = Vec::new();
        print_report(&mut text, &report("evt_1", None, &[r.clone()])).unwrap();
        let text = String::from_utf8(text).unwrap();
        let line = text.lines().nth(1).unwrap();
        assert!(
            line.contains("down for maintenance until 04:00 see status page"),
            "{text}"
        );
        // A try without an answer shows its error; a redirect where it pointed.
        let mut timeout = r.clone();
        (timeout.status, timeout.response_excerpt) = (None, None);
        timeout.error = Some("timeout: no response within 15000 ms".into());
        let mut redirect = r.clone();
        redirect.status = Some(302);
        redirect.location = Some("https://elsewhere.example/".into());
        redirect.error = Some("redirect to https://elsewhere.example/ (not followed)".into());
        let views = report("evt_1", None, &[timeout, redirect]).attempts;
        assert_eq!(
            detail(&views[0], 60),
            "timeout: no response within 15000 ms"
        );
        assert_eq!(
            detail(&views[1], 60),
            "redirect to https://elsewhere.example/ (not followed)"
        );
        // Cut to the column, marked.
        r.response_excerpt = Some("x".repeat(100));
        let views = report("evt_1", None, &[r]).attempts;
        assert_eq!(detail(&views[0], 10), format!("{}…", "x".repeat(10)));
    }

    /// Issue 17: in local mode the log's wait is logical (60 s at `--time-scale 0.01` is a
    /// real 0.6 s, waited as 1 s); NEXT DUE said 60 s.
    #[test]
    fn next_due_follows_the_time_scale() {
        let rows = [row(1, 0, "retry", Some(60))];
        let r = report_scaled("evt_1", None, &rows, 0.01);
        assert_eq!(
            r.attempts[0].next_attempt_due_at.unwrap().to_rfc3339(),
            "2026-11-30T10:00:01.250+00:00"
        );
        let r = report_scaled("evt_1", None, &rows, 0.5);
        assert_eq!(
            r.attempts[0].next_attempt_due_at.unwrap().to_rfc3339(),
            "2026-11-30T10:00:30.250+00:00"
        );
    }
}
