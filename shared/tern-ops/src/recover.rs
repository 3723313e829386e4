//! Recovering an endpoint after its receiver's outage: every delivery to it that failed in
//! a time window and has not succeeded since is sent again.
//!
//! Two kinds, and where each is found:
//! - **dead-lettered** in the window: in the DLQ; replayed with the replay function's
//!   filters (this tenant, this endpoint, dead-lettered in the window), as `tern replay`
//!   does: a fresh budget, the same `webhook-id`.
//! - **still waiting**: a delivery whose attempt failed in the window and whose next
//!   attempt is scheduled (the ledger's pair state is `retrying`: neither delivered nor
//!   dead-lettered since). Its retry sits in the delivery queue or a Step Functions wait,
//!   where it cannot be reached; it is resent now instead ([`crate::resend`]), and the
//!   queued retry, whose claim key is lower, is dropped as a duplicate when it comes due.
//!   Found through the endpoint log (attempts with outcome `retry` in the window).
//!
//! A delivery that was never attempted (queued, or held back by an open circuit before
//! its first attempt) has not failed and is not touched: it goes when the endpoint's
//! circuit lets it. The endpoint must be enabled (or `enable` asks to enable it first, as
//! `tern endpoints enable` does: its health record is reset, the circuit closed).

use chrono::{DateTime, Utc};
use serde::Serialize;
use tern_core::delivery_log::{EndpointLogQuery, MAX_LOG_PAGE, OutcomeFilter};
use tern_core::health::HealthStore;
use tern_core::ports::{DeliveryState, PortError};
use tern_core::{EndpointId, EventId, TenantId};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::replay::{ReplayDeps, ReplayFilters, ReplayRequest, ReplaySummary};

use crate::resend::{ResendDeps, ResendError, Resent, resend_event, tenant_event};

/// Time budget of the DLQ replay of one recover call, in seconds: 10. The API answers
/// behind API Gateway's 30 s integration timeout (HTTP API quota); a DLQ too large for
/// one call reports `stopped: time_budget`, and the call is made again.
pub const RECOVER_REPLAY_SECONDS: u32 = 10;

/// Most waiting deliveries one recover call resends: 100 (`complete` is false when more
/// may remain: call again).
pub const MAX_RECOVER_DELIVERIES: usize = 100;

/// Most endpoint log pages ([`MAX_LOG_PAGE`] attempts each) one recover call reads: 5.
pub const MAX_RECOVER_LOG_PAGES: usize = 5;

/// Time budget of the resends of one recover call, in seconds: 8 (each resend is three AWS
/// calls of `tern-aws`' budget; with the replay's 10 s the call answers within API
/// Gateway's 30 s). Deliveries left when it is spent make `complete` false: call again.
pub const RECOVER_WAITING_SECONDS: u64 = 8;

/// What to recover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoverRequest {
    /// Failures at or after this time.
    pub since: DateTime<Utc>,
    /// Failures before this time (exclusive).
    pub until: DateTime<Utc>,
    /// Enable the endpoint first when it is disabled (else a disabled endpoint is refused).
    pub enable: bool,
}

/// The waiting deliveries a recover found and resent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WaitingReport {
    /// Attempts with outcome `retry` read from the endpoint log in the window.
    pub attempts_examined: usize,
    /// Distinct deliveries among them still waiting (pair state `retrying`).
    pub still_waiting: usize,
    /// The resends made.
    pub resent: Vec<Resent>,
    /// Events still waiting whose payload the outbox no longer keeps (past its TTL): not
    /// resent; their queued retries go on.
    pub not_resendable: Vec<String>,
    /// False when the window held more than one call handles: call again.
    pub complete: bool,
}

/// What a recover did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecoverReport {
    /// The endpoint.
    pub endpoint_id: String,
    /// The window's start.
    pub since: DateTime<Utc>,
    /// The window's end (exclusive).
    pub until: DateTime<Utc>,
    /// True when this call enabled the endpoint.
    pub enabled: bool,
    /// The DLQ replay: dead letters of this endpoint dead-lettered in the window.
    pub dead_letters: ReplaySummary,
    /// The deliveries still waiting that were resent.
    pub waiting: WaitingReport,
}

/// Why a recover was refused.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    /// No such endpoint in this tenant.
    #[error("endpoint {0} not found")]
    EndpointNotFound(EndpointId),
    /// The endpoint is disabled and `enable` was not asked.
    #[error("endpoint {0} is disabled; enable it first (or ask the recover to)")]
    EndpointDisabled(EndpointId),
    /// The window is empty or reversed.
    #[error("the window is empty: since must be before until")]
    EmptyWindow,
    /// An AWS call failed.
    #[error(transparent)]
    Port(#[from] PortError),
}

/// What a recover reads and writes.
pub struct RecoverDeps<'a> {
    /// The stores and queue of a resend.
    pub resend: ResendDeps<'a>,
    /// The endpoint health records (reset when `enable` enables the endpoint).
    pub health: Option<&'a dyn HealthStore>,
    /// The DLQ and the delivery queue, for the replay.
    pub replay: &'a ReplayDeps,
}

/// Recovers `endpoint_id` of `tenant` over the request's window.
///
/// # Errors
/// [`RecoverError`]; a delivery whose resend fails for its own reason is counted, not an
/// error.
pub async fn recover(
    deps: &RecoverDeps<'_>,
    tenant: &TenantId,
    endpoint_id: &EndpointId,
    request: &RecoverRequest,
) -> Result<RecoverReport, RecoverError> {
    if request.since >= request.until {
        return Err(RecoverError::EmptyWindow);
    }
    let endpoints = deps.resend.endpoints;
    let mut endpoint = endpoints
        .get(tenant, endpoint_id)
        .await?
        .ok_or_else(|| RecoverError::EndpointNotFound(endpoint_id.clone()))?;
    let mut enabled = false;
    if !endpoint.enabled {
        if !request.enable {
            return Err(RecoverError::EndpointDisabled(endpoint_id.clone()));
        }
        endpoint = crate::enable_endpoint(endpoints, deps.health, Some(tenant), endpoint_id)
            .await
            .map_err(|e| match e {
                crate::OpsError::Port(p) => RecoverError::Port(p),
                _ => RecoverError::EndpointNotFound(endpoint_id.clone()),
            })?;
        enabled = true;
    }
    let metrics = Metrics::new("Tern", MetricsSink::Discard);
    let dead_letters = tern_handlers::replay::handle(
        deps.replay,
        ReplayRequest {
            dry_run: false,
            max_messages: Some(tern_handlers::replay::DEFAULT_MAX_MESSAGES),
            max_seconds: Some(RECOVER_REPLAY_SECONDS),
            filters: ReplayFilters {
                tenant_id: Some(tenant.clone()),
                endpoint_id: Some(endpoint_id.clone()),
                dead_lettered_since: Some(request.since),
                dead_lettered_until: Some(request.until),
                ..ReplayFilters::default()
            },
        },
        &metrics,
    )
    .await?;
    let waiting = resend_waiting(deps, tenant, &endpoint, request).await?;
    Ok(RecoverReport {
        endpoint_id: endpoint_id.to_string(),
        since: request.since,
        until: request.until,
        enabled,
        dead_letters,
        waiting,
    })
}

async fn resend_waiting(
    deps: &RecoverDeps<'_>,
    tenant: &TenantId,
    endpoint: &tern_core::Endpoint,
    request: &RecoverRequest,
) -> Result<WaitingReport, RecoverError> {
    let ledger = deps.resend.ledger;
    let mut report = WaitingReport::default();
    let mut candidates: Vec<EventId> = Vec::new();
    let mut before = None;
    for _ in 0..MAX_RECOVER_LOG_PAGES {
        let page = ledger
            .endpoint_log(&EndpointLogQuery {
                endpoint_id: endpoint.id.clone(),
                since: Some(request.since),
                until: Some(request.until),
                outcome: Some(OutcomeFilter::Retry),
                limit: MAX_LOG_PAGE,
                before,
            })
            .await?;
        report.attempts_examined += page.entries.len();
        for e in page.entries {
            if !candidates.contains(&e.event_id) {
                candidates.push(e.event_id);
            }
        }
        match page.next {
            None => {
                report.complete = true;
                break;
            }
            Some(_) if candidates.len() >= MAX_RECOVER_DELIVERIES => break,
            Some(next) => before = Some(next),
        }
    }
    if candidates.len() > MAX_RECOVER_DELIVERIES {
        candidates.truncate(MAX_RECOVER_DELIVERIES);
        report.complete = false;
    }
    let budget_end =
        std::time::Instant::now() + std::time::Duration::from_secs(RECOVER_WAITING_SECONDS);
    for event_id in candidates {
        if std::time::Instant::now() >= budget_end {
            report.complete = false;
            break;
        }
        let waiting = ledger
            .pair_state(tenant, &event_id, &endpoint.id)
            .await?
            .is_some_and(|s| s.state == Some(DeliveryState::Retrying));
        if !waiting {
            continue;
        }
        report.still_waiting += 1;
        let event = match tenant_event(deps.resend.events, tenant, &event_id).await {
            Ok(e) => e,
            Err(ResendError::EventNotFound(id)) => {
                report.not_resendable.push(id.to_string());
                continue;
            }
            Err(e) => return Err(port_of(e)),
        };
        match resend_event(&deps.resend, endpoint, event).await {
            Ok(r) => report.resent.push(r),
            // Unsubscribed since: its queued retries go on as they are.
            Err(ResendError::NotSubscribed { .. }) => {
                report.not_resendable.push(event_id.to_string());
            }
            Err(e) => return Err(port_of(e)),
        }
    }
    Ok(report)
}

fn port_of(e: ResendError) -> RecoverError {
    match e {
        ResendError::Port(p) => RecoverError::Port(p),
        ResendError::EndpointDisabled(id) => RecoverError::EndpointDisabled(id),
        ResendError::EndpointNotFound(id) => RecoverError::EndpointNotFound(id),
        other => RecoverError::Port(PortError::Rejected(other.to_string())),
    }
}
