//! Operator commands: endpoints, attempt history, DLQ inspection, replay. They talk to
//! whatever AWS the SDK configuration points at (moto in local mode, a real account
//! otherwise), with table and queue names from the same `TERN_*` variables the functions read.

use std::io::Write;

use chrono::Utc;
use tern_core::drain::{Drain, DrainRule};
use tern_core::ports::{DeliveryLedger, DrainableQueue, EndpointStore, PortError, ReceivedMessage};
use tern_core::{DeliveryMessage, Endpoint, EndpointId, EventId, RetrySchedule, Secret, TenantId};
use tern_http::{DestinationPolicy, HostLookup};

/// An operator command failed.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// A required variable is not set.
    #[error(
        "environment variable {0} is required (source .tern/local.env for local mode, or set it to your stack's output)"
    )]
    Missing(&'static str),
    /// Bad input.
    #[error("{0}")]
    Invalid(String),
    /// AWS call failed.
    #[error(transparent)]
    Port(#[from] tern_core::ports::PortError),
}

/// Reads a required variable.
///
/// # Errors
/// [`OpsError::Missing`].
pub fn var(name: &'static str) -> Result<String, OpsError> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .ok_or(OpsError::Missing(name))
}

/// What `tern endpoints add` takes.
#[derive(Debug, Clone)]
pub struct NewEndpoint {
    /// Tenant.
    pub tenant: String,
    /// URL.
    pub url: String,
    /// Subscribed event types (`*` for all).
    pub event_types: Vec<String>,
    /// Attempt budget.
    pub max_attempts: Option<u32>,
    /// Attempt deadline, milliseconds.
    pub timeout_ms: Option<u64>,
    /// Schedule: preset name or comma-separated seconds.
    pub schedule: Option<String>,
    /// Operator note.
    pub description: Option<String>,
    /// Existing secret to use (else a new one is generated).
    pub secret: Option<String>,
}

/// Validates and stores a new endpoint; returns it (with its secret, to show once). The URL
/// is checked with the sender's destination policy (resolved once; every address must be
/// allowed), so an endpoint the sender would refuse is refused here already.
///
/// # Errors
/// [`OpsError::Invalid`] with the reason, or a store error.
pub async fn add_endpoint(
    store: &dyn EndpointStore,
    new: NewEndpoint,
    policy: &DestinationPolicy,
    lookup: &dyn HostLookup,
) -> Result<Endpoint, OpsError> {
    let bad = |e: &dyn std::fmt::Display| OpsError::Invalid(e.to_string());
    tern_http::check_endpoint_url(&new.url, policy, lookup)
        .await
        .map_err(|e| bad(&e))?;
    let secret = match new.secret {
        Some(s) => Secret::parse(&s).map_err(|e| bad(&e))?,
        None => Secret::generate(),
    };
    let event_types = if new.event_types.is_empty() {
        vec!["*".into()]
    } else {
        new.event_types
    };
    let mut endpoint = Endpoint::new(
        EndpointId::generate(),
        TenantId::new(new.tenant).map_err(|e| bad(&e))?,
        new.url,
        event_types,
        secret,
        Utc::now(),
    );
    endpoint.timeout_ms = new.timeout_ms;
    endpoint.schedule = new
        .schedule
        .map(|s| RetrySchedule::parse(&s))
        .transpose()
        .map_err(|e| bad(&e))?;
    endpoint.max_attempts = new.max_attempts;
    endpoint.description = new.description;
    endpoint.validate().map_err(|e| bad(&e))?;
    store.put(&endpoint).await?;
    Ok(endpoint)
}

/// Prints endpoints as a table.
pub fn print_endpoints(out: &mut dyn Write, endpoints: &[Endpoint]) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<38} {:<14} {:<8} {:<24} URL",
        "ENDPOINT", "TENANT", "ENABLED", "EVENT TYPES"
    )?;
    for e in endpoints {
        writeln!(
            out,
            "{:<38} {:<14} {:<8} {:<24} {}{}",
            e.id,
            e.tenant_id,
            e.enabled,
            e.event_types.join(","),
            e.url,
            e.disabled_reason
                .as_deref()
                .map(|r| format!("  ({r})"))
                .unwrap_or_default()
        )?;
    }
    Ok(())
}

/// Rotates an endpoint's secret: the new one signs at once, the old one keeps signing
/// for `overlap_hours`. Returns the new secret.
///
/// # Errors
/// Not found, or a store error.
pub async fn rotate_secret(
    store: &dyn EndpointStore,
    tenant: &TenantId,
    id: &EndpointId,
    overlap_hours: i64,
) -> Result<Secret, OpsError> {
    let mut endpoint = store
        .get(tenant, id)
        .await?
        .ok_or_else(|| OpsError::Invalid(format!("endpoint {id} of tenant {tenant} not found")))?;
    let secret = Secret::generate();
    let overlap = chrono::Duration::try_hours(overlap_hours).ok_or_else(|| {
        OpsError::Invalid(tern_core::endpoint::EndpointError::BadOverlap.to_string())
    })?;
    endpoint
        .rotate_secret(secret.clone(), Utc::now(), overlap)
        .map_err(|e| OpsError::Invalid(e.to_string()))?;
    // Only the secrets are written: a disable that lands meanwhile (a 410) stays.
    store.set_secrets(tenant, id, &endpoint.secrets).await?;
    Ok(secret)
}

/// Prints an event's attempt history.
///
/// # Errors
/// A ledger error.
pub async fn print_history(
    out: &mut dyn Write,
    ledger: &dyn DeliveryLedger,
    event: &EventId,
) -> Result<(), OpsError> {
    let history = ledger.history(event).await?;
    let w = |e: std::io::Error| OpsError::Invalid(e.to_string());
    if history.is_empty() {
        writeln!(out, "no attempts recorded for {event}").map_err(w)?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<24} {:<38} {:>6} {:>7} {:>6} {:>8}  {:<22} ERROR / RESPONSE",
        "TIME", "ENDPOINT", "REPLAY", "ATTEMPT", "STATUS", "LATENCY", "OUTCOME"
    )
    .map_err(w)?;
    for r in history {
        let detail = r
            .error
            .clone()
            .or_else(|| {
                r.response_excerpt.clone().map(|x| {
                    format!(
                        "{}{}",
                        x.chars().take(60).collect::<String>(),
                        if r.excerpt_truncated { "…" } else { "" }
                    )
                })
            })
            .unwrap_or_default();
        writeln!(
            out,
            "{:<24} {:<38} {:>6} {:>7} {:>6} {:>6}ms  {:<22} {}",
            r.started_at.format("%Y-%m-%dT%H:%M:%S%.3f"),
            r.endpoint_id,
            r.replay_count,
            r.attempt,
            r.status
                .map(|s| s.to_string())
                .unwrap_or_else(|| "-".into()),
            r.latency_ms,
            r.outcome,
            detail.replace('\n', " ")
        )
        .map_err(w)?;
    }
    Ok(())
}

/// How long [`peek`] keeps reading before it shows what it has: 20 s.
pub const PEEK_TIME_BUDGET: std::time::Duration = std::time::Duration::from_secs(20);

/// Reads up to `max` messages of a queue without removing them: each is hidden while
/// the read goes on (so none is read twice), then made visible again.
///
/// # Errors
/// A queue error; messages read so far are released first.
pub async fn peek(
    queue: &dyn DrainableQueue,
    max: usize,
) -> Result<Vec<ReceivedMessage>, PortError> {
    let mut seen = Vec::new();
    let mut result = Ok(());
    // Long polls, stopping on consecutive empty answers: a short poll may miss messages.
    let rule = DrainRule {
        wait_seconds: DrainRule::WAIT_SECONDS,
        empty_polls_to_stop: DrainRule::EMPTY_POLLS_TO_STOP,
        time_budget: PEEK_TIME_BUDGET,
        visibility_seconds: 30,
    };
    let mut drain = Drain::new(queue, rule, max);
    loop {
        match drain.next_batch().await {
            Ok(Some(batch)) => seen.extend(batch),
            Ok(None) => break,
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    for m in &seen {
        queue.release(&m.receipt_handle).await?;
    }
    result.map(|()| seen)
}

/// Prints up to `max` DLQ messages (payload and dead-letter record) without removing them.
///
/// # Errors
/// A queue error.
pub async fn peek_dlq(
    out: &mut dyn Write,
    dlq: &dyn DrainableQueue,
    max: u32,
) -> Result<u32, OpsError> {
    let w = |e: std::io::Error| OpsError::Invalid(e.to_string());
    let seen = peek(dlq, max as usize).await?;
    for m in &seen {
        match DeliveryMessage::parse(&m.body) {
            Ok(d) => {
                let dl = d.dead_letter.as_ref();
                writeln!(
                    out,
                    "{}  endpoint={} type={} reason={} attempts={} last_status={} last_error={}\n  payload: {}",
                    d.delivery_id,
                    d.endpoint_id,
                    d.event.event_type,
                    dl.map_or("sqs_redrive".into(), |r| r.reason.to_string()),
                    dl.map_or(d.attempt, |r| r.attempts),
                    dl.and_then(|r| r.last_status).map_or("-".into(), |s| s.to_string()),
                    dl.and_then(|r| r.last_error.clone()).unwrap_or_else(|| "-".into()),
                    d.event.payload.as_str().chars().take(200).collect::<String>()
                )
                .map_err(w)?;
            }
            Err(e) => writeln!(
                out,
                "{}  unreadable ({e}): {}",
                m.message_id,
                m.body.chars().take(200).collect::<String>()
            )
            .map_err(w)?,
        }
    }
    Ok(u32::try_from(seen.len()).unwrap_or(u32::MAX))
}
