//! `tern waiting`: the deliveries scheduled for a later attempt, per endpoint, with the
//! attempt number and due time of each, and the totals. Read from the ledger's waiting
//! list ([`tern_core::waiting`]: queue delays and Step Functions waits alike, and deliveries
//! held back by an open circuit, a pause or a rate limit), never from SQS or Step Functions.
//! Each endpoint's state comes from its health record: while its circuit is open or its
//! receiver's pause lasts, nothing goes before the next probe or the pause's end, whatever
//! the due time; while its rate limit has slots given out ahead, everything waiting is sent
//! by the end of them ([`WaitingEndpoint::held_until`]).

use std::io::Write;

use chrono::{DateTime, Utc};
use serde::Serialize;
use tern_core::decision::{Gate, gate};
use tern_core::health::{EndpointHealth, HealthPolicy, HealthState, HealthStore};
use tern_core::operational::redact_url;
use tern_core::ports::EndpointStore;
use tern_core::waiting::{WaitingList, WaitingRead, WaitingScope};
use tern_core::{Endpoint, EndpointId, EventId, TenantId};

use crate::OpsError;
use crate::health::when;

/// Most waiting-list entries one question reads: 200,000 (about 20 MB of index entries,
/// some 2,500 eventually consistent read units). Beyond it, counts are lower bounds and
/// [`WaitingReport::complete`] is false.
pub const MAX_READ: usize = crate::health::MAX_WAITING_READ;

/// Deliveries listed per endpoint unless asked otherwise (`--max`): the soonest 20.
pub const DEFAULT_PER_ENDPOINT: usize = 20;

/// One waiting delivery, as shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaitingView {
    /// The event (`tern attempts <event_id> --tenant <tenant_id>` shows its history).
    pub event_id: EventId,
    /// The attempt it waits for (1-based, within its budget).
    pub attempt: u32,
    /// When it was scheduled for (UTC, real time).
    pub due_at: DateTime<Utc>,
}

/// One endpoint's waiting deliveries.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitingEndpoint {
    /// Tenant.
    pub tenant_id: TenantId,
    /// Endpoint.
    pub endpoint_id: EndpointId,
    /// Its URL without the query string; `null` when the endpoint no longer exists.
    pub url: Option<String>,
    /// Its state (`healthy`, `degraded`, `paused`, `open`, `disabled`); `null` when the
    /// endpoint no longer exists (its deliveries dead-letter `endpoint_deleted` when due).
    pub state: Option<HealthState>,
    /// How many deliveries wait.
    pub waiting: u64,
    /// The soonest due time.
    pub next_due_at: Option<DateTime<Utc>>,
    /// While the circuit is open or the receiver's pause lasts: nothing is sent before
    /// this (the next probe, or the pause's end), whatever the due times say. For a rate
    /// limit with slots given out ahead: the end of those slots (each delivery holding one
    /// is sent by then).
    pub held_until: Option<DateTime<Utc>>,
    /// What holds them: `open circuit`, `paused by the receiver` or
    /// [`RATE_LIMIT_HOLD`].
    pub held_by: Option<&'static str>,
    /// The soonest ones, soonest first (at most the `--max` asked).
    pub deliveries: Vec<WaitingView>,
}

/// Messages in the delivery queue (SQS's approximate counts): a total beside the list,
/// read with one `GetQueueAttributes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct QueueDepth {
    /// Visible: due now, waiting for a sender (`ApproximateNumberOfMessages`).
    pub visible: u64,
    /// Still inside a queue delay (`ApproximateNumberOfMessagesDelayed`).
    pub delayed: u64,
    /// Being processed by a sender (`ApproximateNumberOfMessagesNotVisible`).
    pub in_flight: u64,
}

/// `tern waiting --json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitingReport {
    /// Endpoints with waiting deliveries, soonest due first.
    pub endpoints: Vec<WaitingEndpoint>,
    /// Waiting deliveries in all (those listed and those not).
    pub total: u64,
    /// False when the list was read only up to [`MAX_READ`] entries: counts are lower
    /// bounds.
    pub complete: bool,
    /// The delivery queue's counts, when they were read (the CLI reads them; `null`
    /// otherwise).
    pub queue: Option<QueueDepth>,
    /// When the list was read.
    pub read_at: DateTime<Utc>,
}

/// What [`WaitingEndpoint::held_by`] says of a rate limit with slots given out ahead.
pub const RATE_LIMIT_HOLD: &str = "rate limit: slots given out up to then";

/// What holds an endpoint's deliveries now, if anything: (until, by what).
fn held(
    record: Option<&EndpointHealth>,
    policy: &HealthPolicy,
    time_scale: f64,
    now: DateTime<Utc>,
) -> Option<(DateTime<Utc>, &'static str)> {
    let record = record?;
    match gate(Some(record), &policy.timings(time_scale), now) {
        Gate::Wait { until, .. } if record.paused(now) => Some((until, "paused by the receiver")),
        Gate::Wait { until, .. } => Some((until, "open circuit")),
        // Slots given out ahead: every delivery held for one is sent by this time.
        Gate::Send | Gate::ProbeDue { .. } => record
            .rate_tat
            .filter(|t| *t > now + chrono::Duration::seconds(1))
            .map(|t| (t, RATE_LIMIT_HOLD)),
    }
}

/// Builds the report from one read of the list, the endpoints and their health records,
/// listing at most `per_endpoint` deliveries of each endpoint (all are counted).
pub fn report(
    read: &WaitingRead,
    endpoints: &[Endpoint],
    records: &[EndpointHealth],
    policy: &HealthPolicy,
    time_scale: f64,
    per_endpoint: usize,
    now: DateTime<Utc>,
) -> WaitingReport {
    let mut out: Vec<WaitingEndpoint> = Vec::new();
    for d in &read.entries {
        let i = match out
            .iter()
            .position(|e| e.tenant_id == d.tenant_id && e.endpoint_id == d.endpoint_id)
        {
            Some(i) => i,
            None => {
                let endpoint = endpoints
                    .iter()
                    .find(|e| e.tenant_id == d.tenant_id && e.id == d.endpoint_id);
                let record = records
                    .iter()
                    .find(|r| r.tenant_id == d.tenant_id && r.endpoint_id == d.endpoint_id);
                let hold = endpoint
                    .filter(|e| e.enabled)
                    .and_then(|_| held(record, policy, time_scale, now));
                out.push(WaitingEndpoint {
                    tenant_id: d.tenant_id.clone(),
                    endpoint_id: d.endpoint_id.clone(),
                    url: endpoint.map(|e| redact_url(&e.url)),
                    state: endpoint.map(|e| {
                        record.map_or(
                            if e.enabled {
                                HealthState::Healthy
                            } else {
                                HealthState::Disabled
                            },
                            |r| r.state(e.enabled, policy, now),
                        )
                    }),
                    waiting: 0,
                    next_due_at: None,
                    held_until: hold.map(|(t, _)| t),
                    held_by: hold.map(|(_, why)| why),
                    deliveries: Vec::new(),
                });
                out.len() - 1
            }
        };
        let e = &mut out[i];
        e.waiting += 1;
        e.next_due_at = Some(e.next_due_at.map_or(d.due_at, |t| t.min(d.due_at)));
        if e.deliveries.len() < per_endpoint {
            e.deliveries.push(WaitingView {
                event_id: d.event_id.clone(),
                attempt: d.attempt,
                due_at: d.due_at,
            });
        }
    }
    for e in &mut out {
        e.deliveries
            .sort_by(|a, b| (a.due_at, &a.event_id).cmp(&(b.due_at, &b.event_id)));
    }
    out.sort_by(|a, b| {
        (a.next_due_at, &a.tenant_id, &a.endpoint_id).cmp(&(
            b.next_due_at,
            &b.tenant_id,
            &b.endpoint_id,
        ))
    });
    WaitingReport {
        total: out.iter().map(|e| e.waiting).sum(),
        endpoints: out,
        complete: read.complete,
        queue: None,
        read_at: now,
    }
}

/// Reads the list for `scope` and the endpoints' records, and builds the report (one read
/// of the list: a Query of the ledger's waiting index for one endpoint, a Scan of it
/// otherwise; one read of the endpoints and of the health records).
///
/// # Errors
/// A store error as [`OpsError`].
#[allow(clippy::too_many_arguments)]
pub async fn read(
    list: &dyn WaitingList,
    endpoints: &dyn EndpointStore,
    health: &dyn HealthStore,
    scope: &WaitingScope,
    policy: &HealthPolicy,
    time_scale: f64,
    per_endpoint: usize,
    now: DateTime<Utc>,
) -> Result<WaitingReport, OpsError> {
    let entries = list.waiting(scope, MAX_READ).await?;
    let (known, records) = match scope {
        WaitingScope::All => (endpoints.list_all().await?, health.list(None).await?),
        WaitingScope::Tenant(t) => (
            endpoints.list_for_tenant(t).await?,
            health.list(Some(t)).await?,
        ),
        WaitingScope::Endpoint(t, e) => (
            endpoints.get(t, e).await?.into_iter().collect(),
            health.get(t, e).await?.into_iter().collect(),
        ),
    };
    Ok(report(
        &entries,
        &known,
        &records,
        policy,
        time_scale,
        per_endpoint,
        now,
    ))
}

/// Prints the report: per endpoint a line with its state, count, next due time and what
/// holds it, then its deliveries (due time, attempt, event); then the totals.
///
/// # Errors
/// Writing to `out`.
pub fn print(out: &mut dyn Write, r: &WaitingReport) -> std::io::Result<()> {
    if r.endpoints.is_empty() {
        writeln!(
            out,
            "nothing is waiting: no delivery is scheduled for a later attempt"
        )?;
    }
    for e in &r.endpoints {
        let state = e
            .state
            .map_or_else(|| "deleted".to_owned(), |s| s.to_string());
        let hold = match (e.held_until, e.held_by) {
            (Some(t), Some(by)) => format!("; held until {} ({by})", when(Some(t))),
            _ => String::new(),
        };
        writeln!(
            out,
            "{} (tenant {}, {state}): {} waiting, next due {}{hold}",
            e.endpoint_id,
            e.tenant_id,
            e.waiting,
            when(e.next_due_at),
        )?;
        writeln!(out, "  {:<21} {:>7}  EVENT", "DUE (UTC)", "ATTEMPT")?;
        for d in &e.deliveries {
            writeln!(
                out,
                "  {:<21} {:>7}  {}",
                when(Some(d.due_at)),
                d.attempt,
                d.event_id
            )?;
        }
        let more = e.waiting.saturating_sub(e.deliveries.len() as u64);
        if more > 0 {
            writeln!(out, "  ... and {more} more (raise --max to list them)")?;
        }
    }
    let bound = if r.complete { "" } else { "at least " };
    write!(
        out,
        "total: {bound}{} waiting for {} endpoint{}",
        r.total,
        r.endpoints.len(),
        if r.endpoints.len() == 1 { "" } else { "s" }
    )?;
    if let Some(q) = r.queue {
        write!(
            out,
            "; delivery queue (SQS, approximate): {} due now, {} in a queue delay, {} being sent",
            q.visible, q.delayed, q.in_flight
        )?;
    }
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_core::Secret;
    use tern_core::waiting::WaitingDelivery;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn endpoint(id: &str, enabled: bool) -> Endpoint {
        let mut e = Endpoint::new(
            EndpointId::new(id).unwrap(),
            TenantId::new("tnt_a").unwrap(),
            "https://hooks.example/in?token=secret",
            vec!["*".into()],
            Secret::generate(),
            t("2026-12-01T00:00:00Z"),
        );
        e.enabled = enabled;
        e
    }

    fn waiting(endpoint: &str, event: &str, attempt: u32, due: &str) -> WaitingDelivery {
        WaitingDelivery {
            tenant_id: TenantId::new("tnt_a").unwrap(),
            endpoint_id: EndpointId::new(endpoint).unwrap(),
            event_id: EventId::new(event).unwrap(),
            attempt,
            due_at: t(due),
        }
    }

    #[test]
    fn per_endpoint_counts_next_due_and_what_holds_them() {
        let now = t("2026-12-01T02:00:00Z");
        let read = WaitingRead {
            entries: vec![
                waiting("ep_open", "evt_1", 3, "2026-12-01T01:59:00Z"),
                waiting("ep_open", "evt_2", 2, "2026-12-01T02:05:00Z"),
                waiting("ep_paused", "evt_3", 2, "2026-12-01T03:00:00Z"),
                waiting("ep_gone", "evt_4", 1, "2026-12-01T02:10:00Z"),
            ],
            complete: true,
        };
        let mut open = EndpointHealth::empty(
            TenantId::new("tnt_a").unwrap(),
            EndpointId::new("ep_open").unwrap(),
            600,
        );
        open.opened_at = Some(t("2026-12-01T01:50:00Z"));
        open.next_probe_at = Some(t("2026-12-01T02:01:00Z"));
        let mut paused = EndpointHealth::empty(
            TenantId::new("tnt_a").unwrap(),
            EndpointId::new("ep_paused").unwrap(),
            600,
        );
        paused.paused_until = Some(t("2026-12-01T02:59:00Z"));
        // A rate-limited endpoint whose schedule runs two minutes ahead.
        let mut limited = EndpointHealth::empty(
            TenantId::new("tnt_a").unwrap(),
            EndpointId::new("ep_limited").unwrap(),
            600,
        );
        limited.rate_tat = Some(t("2026-12-01T02:02:00Z"));
        let mut read = read;
        read.entries
            .push(waiting("ep_limited", "evt_5", 1, "2026-12-01T02:01:30Z"));
        let r = report(
            &read,
            &[
                endpoint("ep_open", true),
                endpoint("ep_paused", true),
                endpoint("ep_limited", true),
            ],
            &[open, paused, limited],
            &HealthPolicy::default(),
            1.0,
            1,
            now,
        );
        assert_eq!(r.total, 5);
        assert!(r.complete);
        let ids: Vec<&str> = r.endpoints.iter().map(|e| e.endpoint_id.as_str()).collect();
        assert_eq!(
            ids,
            ["ep_open", "ep_limited", "ep_gone", "ep_paused"],
            "soonest due first"
        );
        let limited = &r.endpoints[1];
        assert_eq!(
            (limited.state, limited.held_by, limited.held_until),
            (
                Some(HealthState::Healthy),
                Some(RATE_LIMIT_HOLD),
                Some(t("2026-12-01T02:02:00Z"))
            )
        );
        let open = &r.endpoints[0];
        assert_eq!(
            (open.waiting, open.state, open.held_by),
            (2, Some(HealthState::Open), Some("open circuit"))
        );
        assert_eq!(open.held_until, Some(t("2026-12-01T02:01:00Z")));
        assert_eq!(open.deliveries.len(), 1, "--max 1 lists one, counts all");
        assert_eq!(open.deliveries[0].attempt, 3);
        let gone = &r.endpoints[2];
        assert_eq!((gone.state, gone.url.as_deref()), (None, None));
        let paused = &r.endpoints[3];
        assert_eq!(paused.held_by, Some("paused by the receiver"));
        assert_eq!(paused.url.as_deref(), Some("https://hooks.example/in?…"));

        let mut text = Vec::new();
        print(&mut text, &r).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.contains("ep_open (tenant tnt_a, open): 2 waiting, next due 2026-12-01 01:59:00Z; held until 2026-12-01 02:01:00Z (open circuit)"),
            "{text}"
        );
        assert!(text.contains("... and 1 more"), "{text}");
        assert!(text.contains("ep_gone (tenant tnt_a, deleted)"), "{text}");
        assert!(
            text.trim_end()
                .ends_with("total: 5 waiting for 4 endpoints"),
            "{text}"
        );
    }

    #[test]
    fn an_empty_list_says_so_and_a_cut_read_is_a_lower_bound() {
        let r = report(
            &WaitingRead {
                entries: vec![],
                complete: false,
            },
            &[],
            &[],
            &HealthPolicy::default(),
            1.0,
            20,
            Utc::now(),
        );
        let mut text = Vec::new();
        print(&mut text, &r).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.starts_with("nothing is waiting"), "{text}");
        assert!(text.contains("total: at least 0"), "{text}");
    }
}
