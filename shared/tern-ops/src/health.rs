//! `tern endpoints health`: each endpoint's state, success rates over the window (1 h by
//! default) and 24 h, attempts in the window, since when it fails, when its circuit opened,
//! last success, last failure (status and what the receiver answered), next probe or the
//! end of its pause, and its waiting deliveries with the next due time, from the endpoints
//! and health tables and the ledger's waiting list ([`tern_core::waiting`]).

use std::io::Write;

use chrono::{DateTime, Utc};
use serde::Serialize;
use tern_core::health::{EndpointHealth, HealthPolicy, HealthState, HealthStore, LastFailure};
use tern_core::operational::redact_url;
use tern_core::ports::EndpointStore;
use tern_core::waiting::{WaitingList, WaitingRead, WaitingScope};
use tern_core::{Endpoint, EndpointId, TenantId};

use crate::OpsError;

/// One endpoint's health, as shown (and as `--json` prints it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HealthRow {
    /// Tenant.
    pub tenant_id: TenantId,
    /// Endpoint.
    pub endpoint_id: EndpointId,
    /// URL without its query string.
    pub url: String,
    /// `healthy`, `degraded`, `paused`, `open` or `disabled`.
    pub state: HealthState,
    /// Successes / attempts over the window, 0.0..=1.0; `null` without attempts.
    pub success_rate_window: Option<f64>,
    /// Successes / attempts over 24 h.
    pub success_rate_24h: Option<f64>,
    /// Attempts in the window.
    pub attempts_window: u64,
    /// Attempts in 24 h.
    pub attempts_24h: u64,
    /// The window, in seconds.
    pub window_seconds: u64,
    /// Failed attempts since the last success.
    pub consecutive_failures: u64,
    /// When the current run of failures began: the start of the first failed attempt
    /// after the last success; `null` while the last counted attempt succeeded.
    pub failing_since: Option<DateTime<Utc>>,
    /// While the circuit is open: when it opened.
    pub circuit_opened_at: Option<DateTime<Utc>>,
    /// Last successful attempt.
    pub last_success_at: Option<DateTime<Utc>>,
    /// Last failed attempt: its time, status or error class, error text and the start of
    /// what the receiver answered (`excerpt`).
    pub last_failure: Option<LastFailure>,
    /// While the circuit is open: when the next probe may go (`null` for a disabled
    /// endpoint: nothing is sent to it, not even a probe).
    pub next_probe_at: Option<DateTime<Utc>>,
    /// While the receiver's pause lasts (it answered 429, or 503 with `Retry-After`):
    /// when it ends (`null` for a disabled endpoint).
    pub paused_until: Option<DateTime<Utc>>,
    /// Deliveries waiting for a later attempt (retries scheduled, and deliveries held back
    /// by the circuit or the pause), from the waiting list; `null` when it was not read.
    pub waiting: Option<u64>,
    /// When the soonest of them is due (real time, UTC).
    pub next_due_at: Option<DateTime<Utc>>,
    /// Since when the success rate has been below the disable threshold: the endpoint is
    /// auto-disabled if it is still below one window after this.
    pub below_since: Option<DateTime<Utc>>,
    /// `true` when a change was decided but its operational event is not published yet
    /// (SNS or the outbox failed); the next batch for the endpoint publishes it.
    pub report_pending: bool,
    /// Why it is disabled, when it is.
    pub disabled_reason: Option<String>,
    /// The pace its receiver taught by pushing back (adaptive pacing,
    /// `tern_core::pacing`): requests per second, when it last changed, and whether it is
    /// still in slow start; `null` while the endpoint has none.
    pub pace: Option<tern_core::pacing::Pace>,
}

impl HealthRow {
    /// The row for `endpoint` with its record (`None`: never attempted, or reset).
    pub fn of(
        endpoint: &Endpoint,
        health: Option<&EndpointHealth>,
        policy: &HealthPolicy,
        now: DateTime<Utc>,
    ) -> Self {
        let empty = EndpointHealth::empty(
            endpoint.tenant_id.clone(),
            endpoint.id.clone(),
            policy.timings(1.0).bucket_seconds(),
        );
        let h = health.unwrap_or(&empty);
        let window = h.window_rate(now);
        let day = h.long_rate(now);
        Self {
            tenant_id: endpoint.tenant_id.clone(),
            endpoint_id: endpoint.id.clone(),
            url: redact_url(&endpoint.url),
            state: h.state(endpoint.enabled, policy, now),
            success_rate_window: window.ratio(),
            success_rate_24h: day.ratio(),
            attempts_window: window.attempts,
            attempts_24h: day.attempts,
            window_seconds: policy.window_seconds,
            consecutive_failures: h.consecutive_failures,
            failing_since: h.failing_since,
            circuit_opened_at: h.opened_at,
            last_success_at: h.last_success_at,
            last_failure: h.last_failure.clone(),
            // A disabled endpoint is sent nothing: no probe, no end of a pause to wait for.
            next_probe_at: h
                .next_probe_at
                .filter(|_| h.opened_at.is_some() && endpoint.enabled),
            paused_until: h.paused_until.filter(|_| h.paused(now) && endpoint.enabled),
            waiting: None,
            next_due_at: None,
            below_since: h.below_since,
            report_pending: h.pending_report.is_some(),
            disabled_reason: endpoint.disabled_reason.clone(),
            pace: h.pace,
        }
    }
}

/// Most waiting-list entries [`health_rows_waiting`] reads: 200,000 (about 20 MB of index,
/// some 2,500 eventually consistent read units). Beyond it the counts are lower bounds
/// and [`HealthReport::waiting_complete`] says so.
pub const MAX_WAITING_READ: usize = 200_000;

/// `tern endpoints health --json`: the rows, and whether the waiting counts are whole.
#[derive(Debug, Clone, Serialize)]
pub struct HealthReport {
    /// One row per endpoint, worst first.
    pub endpoints: Vec<HealthRow>,
    /// False when the waiting list was read only up to [`MAX_WAITING_READ`] entries:
    /// the waiting counts are then lower bounds.
    pub waiting_complete: bool,
}

/// The rows of every endpoint of `tenant` (every endpoint when `None`), worst first, with
/// their waiting deliveries from `waiting` (one read of the list: a Scan of the ledger's
/// waiting index, which holds only waiting deliveries).
///
/// # Errors
/// A store error as [`OpsError`].
pub async fn health_rows_waiting(
    endpoints: &dyn EndpointStore,
    health: &dyn HealthStore,
    waiting: &dyn WaitingList,
    tenant: Option<&TenantId>,
    policy: &HealthPolicy,
    now: DateTime<Utc>,
) -> Result<HealthReport, OpsError> {
    let scope = tenant.map_or(WaitingScope::All, |t| WaitingScope::Tenant(t.clone()));
    let read = waiting.waiting(&scope, MAX_WAITING_READ).await?;
    let mut rows = health_rows(endpoints, health, tenant, policy, now).await?;
    add_waiting(&mut rows, &read);
    Ok(HealthReport {
        endpoints: rows,
        waiting_complete: read.complete,
    })
}

/// Sets each row's waiting count and next due time from `read`.
pub fn add_waiting(rows: &mut [HealthRow], read: &WaitingRead) {
    for row in rows {
        let mine = read
            .entries
            .iter()
            .filter(|d| d.tenant_id == row.tenant_id && d.endpoint_id == row.endpoint_id);
        let (count, next) = mine.fold((0u64, None::<DateTime<Utc>>), |(n, next), d| {
            (n + 1, Some(next.map_or(d.due_at, |t| t.min(d.due_at))))
        });
        row.waiting = Some(count);
        row.next_due_at = next;
    }
}

/// The rows of every endpoint of `tenant` (every endpoint when `None`), worst first
/// (disabled, open, paused, degraded, healthy), then by tenant and id; without the waiting
/// counts ([`health_rows_waiting`] adds them).
///
/// # Errors
/// A store error as [`OpsError`].
pub async fn health_rows(
    endpoints: &dyn EndpointStore,
    health: &dyn HealthStore,
    tenant: Option<&TenantId>,
    policy: &HealthPolicy,
    now: DateTime<Utc>,
) -> Result<Vec<HealthRow>, OpsError> {
    let list = match tenant {
        Some(t) => endpoints.list_for_tenant(t).await?,
        None => endpoints.list_all().await?,
    };
    let records = health.list(tenant).await?;
    let mut rows: Vec<HealthRow> = list
        .iter()
        .map(|e| {
            let record = records
                .iter()
                .find(|r| r.tenant_id == e.tenant_id && r.endpoint_id == e.id);
            HealthRow::of(e, record, policy, now)
        })
        .collect();
    let rank = |s: HealthState| match s {
        HealthState::Disabled => 0,
        HealthState::Open => 1,
        HealthState::Paused => 2,
        HealthState::Degraded => 3,
        HealthState::Healthy => 4,
    };
    rows.sort_by(|a, b| {
        (rank(a.state), &a.tenant_id, &a.endpoint_id).cmp(&(
            rank(b.state),
            &b.tenant_id,
            &b.endpoint_id,
        ))
    });
    Ok(rows)
}

fn rate(r: Option<f64>) -> String {
    r.map_or_else(|| "-".into(), |r| format!("{:.1} %", r * 100.0))
}

/// `2026-12-01 02:17:21Z`, or `-`.
pub fn when(t: Option<DateTime<Utc>>) -> String {
    t.map_or_else(
        || "-".into(),
        |t| t.format("%Y-%m-%d %H:%M:%SZ").to_string(),
    )
}

/// Characters of the last failure's excerpt the table shows (`--json` has it whole, as
/// stored: at most [`tern_core::health::LAST_EXCERPT_BYTES`] bytes).
pub const TABLE_EXCERPT_CHARS: usize = 80;

/// The last failure in words: `status 503: "down for maintenance"`, `timeout: ...`.
pub fn failure_text(f: &LastFailure, max: usize) -> String {
    let quote = |x: &str| {
        let one_line = x.replace(['\n', '\r'], " ");
        format!("\"{}\"", crate::text::cut(&one_line, max))
    };
    match (
        f.status,
        f.excerpt.as_deref().filter(|x| !x.is_empty()),
        &f.error,
    ) {
        (Some(s), Some(x), _) => format!("status {s}: {}", quote(x)),
        (Some(s), None, _) => format!("status {s}"),
        (None, _, Some(e)) => quote(e),
        (None, _, None) => f.summary(),
    }
}

/// Prints the rows as a table: one line per endpoint, then indented lines with what the
/// line has no room for (why it is disabled, when the failures began and the circuit
/// opened, the last failure with what the receiver answered). `waiting_complete` false
/// marks the waiting counts as lower bounds.
///
/// # Errors
/// Writing to `out`.
pub fn print_health_report(out: &mut dyn Write, report: &HealthReport) -> std::io::Result<()> {
    print_health(out, &report.endpoints)?;
    if !report.waiting_complete {
        writeln!(
            out,
            "waiting counts are lower bounds: the waiting list was read up to {MAX_WAITING_READ} entries"
        )?;
    }
    Ok(())
}

/// Prints the rows as a table (one line per endpoint, and detail lines under it).
///
/// # Errors
/// Writing to `out`.
pub fn print_health(out: &mut dyn Write, rows: &[HealthRow]) -> std::io::Result<()> {
    if rows.is_empty() {
        return writeln!(out, "no endpoints");
    }
    let header = format!(
        "{:<10} {:<16} {:<35} {:>8} {:>8} {:>8} {:<21} {:<32} {:<21} {:>7} {:<21} {}",
        "STATE",
        "TENANT",
        "ENDPOINT",
        "RATE 1H",
        "RATE 24H",
        "TRIES 1H",
        "LAST SUCCESS",
        "LAST FAILURE",
        "FAILING SINCE",
        "WAITING",
        "NEXT DUE",
        "NEXT PROBE / PAUSED UNTIL"
    );
    writeln!(out, "{}", header.trim_end())?;
    for r in rows {
        let failure = r.last_failure.as_ref().map_or_else(
            || "-".into(),
            |f| {
                format!(
                    "{} {}",
                    when(Some(f.at)),
                    f.summary().trim_start_matches("last ")
                )
            },
        );
        let line = format!(
            "{:<10} {:<16} {:<35} {:>8} {:>8} {:>8} {:<21} {:<32} {:<21} {:>7} {:<21} {}",
            r.state.to_string(),
            r.tenant_id.as_str(),
            r.endpoint_id.as_str(),
            rate(r.success_rate_window),
            rate(r.success_rate_24h),
            r.attempts_window,
            when(r.last_success_at),
            failure,
            when(r.failing_since),
            r.waiting.map_or_else(|| "-".into(), |n| n.to_string()),
            when(r.next_due_at),
            when(r.paused_until.or(r.next_probe_at)),
        );
        writeln!(out, "{}", line.trim_end())?;
        if let Some(reason) = &r.disabled_reason {
            writeln!(out, "           disabled: {reason}")?;
        }
        if let Some(t) = r.circuit_opened_at {
            writeln!(out, "           circuit opened: {}", when(Some(t)))?;
        }
        if let Some(f) = &r.last_failure {
            writeln!(
                out,
                "           last failure: {}",
                failure_text(f, TABLE_EXCERPT_CHARS)
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_core::Secret;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn down(enabled: bool) -> (Endpoint, EndpointHealth) {
        let mut e = Endpoint::new(
            EndpointId::new("ep_down").unwrap(),
            TenantId::new("tnt_a").unwrap(),
            "https://hooks.example/in",
            vec!["*".into()],
            Secret::generate(),
            t("2026-12-01T00:00:00Z"),
        );
        e.enabled = enabled;
        if !enabled {
            e.disabled_reason = Some("auto_disabled: 0 % success over 1 h, last status 503".into());
        }
        let mut h = EndpointHealth::empty(e.tenant_id.clone(), e.id.clone(), 600);
        h.failing_since = Some(t("2026-12-01T01:00:00Z"));
        h.opened_at = Some(t("2026-12-01T01:00:05Z"));
        h.next_probe_at = Some(t("2026-12-01T02:01:00Z"));
        h.consecutive_failures = 40;
        h.last_failure = Some(LastFailure {
            at: t("2026-12-01T01:59:00Z"),
            status: Some(503),
            error_class: None,
            error: Some("http status 503".into()),
            excerpt: Some("down for maintenance\nuntil 04:00".into()),
        });
        (e, h)
    }

    /// Issue 17: since when it fails and when its circuit opened are on the row; a
    /// disabled endpoint shows no next probe (nothing is sent to it), where it showed one
    /// in the past.
    #[test]
    fn rows_say_since_when_and_a_disabled_endpoint_has_no_next_probe() {
        let now = t("2026-12-01T02:00:00Z");
        let policy = HealthPolicy::default();
        let (e, h) = down(true);
        let row = HealthRow::of(&e, Some(&h), &policy, now);
        assert_eq!(row.state, HealthState::Open);
        assert_eq!(row.failing_since, Some(t("2026-12-01T01:00:00Z")));
        assert_eq!(row.circuit_opened_at, Some(t("2026-12-01T01:00:05Z")));
        assert_eq!(row.next_probe_at, Some(t("2026-12-01T02:01:00Z")));
        let (e, h) = down(false);
        let row = HealthRow::of(&e, Some(&h), &policy, now);
        assert_eq!(row.state, HealthState::Disabled);
        assert_eq!((row.next_probe_at, row.paused_until), (None, None));

        let mut rows = vec![row];
        add_waiting(
            &mut rows,
            &WaitingRead {
                entries: vec![tern_core::waiting::WaitingDelivery {
                    tenant_id: e.tenant_id.clone(),
                    endpoint_id: e.id.clone(),
                    event_id: tern_core::EventId::new("evt_1").unwrap(),
                    attempt: 4,
                    due_at: t("2026-12-01T02:30:00Z"),
                }],
                complete: true,
            },
        );
        assert_eq!(rows[0].waiting, Some(1));
        assert_eq!(rows[0].next_due_at, Some(t("2026-12-01T02:30:00Z")));
        let mut out = Vec::new();
        print_health(&mut out, &rows).unwrap();
        let text = String::from_utf8(out).unwrap();
        let line = text.lines().nth(1).unwrap();
        assert!(
            line.contains("2026-12-01 01:00:00Z") && line.contains("2026-12-01 02:30:00Z"),
            "{text}"
        );
        assert!(
            text.contains("last failure: status 503: \"down for maintenance until 04:00\""),
            "{text}"
        );
        assert!(text.contains("disabled: auto_disabled"), "{text}");
        assert!(
            text.contains("circuit opened: 2026-12-01 01:00:05Z"),
            "{text}"
        );
    }
}
