//! `tern endpoints health`: each endpoint's state, success rates over the window (1 h by
//! default) and 24 h, attempts in the window, last success, last failure and next probe,
//! from the endpoints and health tables.

use std::io::Write;

use chrono::{DateTime, Utc};
use serde::Serialize;
use tern_core::health::{EndpointHealth, HealthPolicy, HealthState, HealthStore, LastFailure};
use tern_core::operational::redact_url;
use tern_core::ports::EndpointStore;
use tern_core::{Endpoint, EndpointId, TenantId};

use crate::OpsError;

/// One endpoint's health, as shown (and as `--json` prints it).
#[derive(Debug, Clone, Serialize)]
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
    /// Last successful attempt.
    pub last_success_at: Option<DateTime<Utc>>,
    /// Last failed attempt.
    pub last_failure: Option<LastFailure>,
    /// While the circuit is open: when the next probe may go.
    pub next_probe_at: Option<DateTime<Utc>>,
    /// While the receiver's pause lasts (it answered 429, or 503 with `Retry-After`):
    /// when it ends.
    pub paused_until: Option<DateTime<Utc>>,
    /// Since when the success rate has been below the disable threshold: the endpoint is
    /// auto-disabled if it is still below one window after this.
    pub below_since: Option<DateTime<Utc>>,
    /// `true` when a change was decided but its operational event is not published yet
    /// (SNS or the outbox failed); the next batch for the endpoint publishes it.
    pub report_pending: bool,
    /// Why it is disabled, when it is.
    pub disabled_reason: Option<String>,
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
            last_success_at: h.last_success_at,
            last_failure: h.last_failure.clone(),
            next_probe_at: h.next_probe_at.filter(|_| h.opened_at.is_some()),
            paused_until: h.paused_until.filter(|_| h.paused(now)),
            below_since: h.below_since,
            report_pending: h.pending_report.is_some(),
            disabled_reason: endpoint.disabled_reason.clone(),
        }
    }
}

/// The rows of every endpoint of `tenant` (every endpoint when `None`), worst first
/// (disabled, open, paused, degraded, healthy), then by tenant and id.
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

fn when(t: Option<DateTime<Utc>>) -> String {
    t.map_or_else(
        || "-".into(),
        |t| t.format("%Y-%m-%d %H:%M:%SZ").to_string(),
    )
}

/// Prints the rows as a table (one line per endpoint).
///
/// # Errors
/// Writing to `out`.
pub fn print_health(out: &mut dyn Write, rows: &[HealthRow]) -> std::io::Result<()> {
    if rows.is_empty() {
        return writeln!(out, "no endpoints");
    }
    let header = format!(
        "{:<10} {:<16} {:<35} {:>8} {:>8} {:>8} {:<21} {:<32} {}",
        "STATE",
        "TENANT",
        "ENDPOINT",
        "RATE 1H",
        "RATE 24H",
        "TRIES 1H",
        "LAST SUCCESS",
        "LAST FAILURE",
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
            "{:<10} {:<16} {:<35} {:>8} {:>8} {:>8} {:<21} {:<32} {}",
            r.state.to_string(),
            r.tenant_id.as_str(),
            r.endpoint_id.as_str(),
            rate(r.success_rate_window),
            rate(r.success_rate_24h),
            r.attempts_window,
            when(r.last_success_at),
            failure,
            when(r.paused_until.or(r.next_probe_at)),
        );
        writeln!(out, "{}", line.trim_end())?;
        if let Some(reason) = &r.disabled_reason {
            writeln!(out, "           disabled: {reason}")?;
        }
    }
    Ok(())
}
