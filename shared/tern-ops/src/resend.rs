//! A manual resend of one event to one endpoint, delivered before or not: the same event
//! (same `webhook-id`) in a fresh attempt budget, recorded as a replay (its replay count is
//! one above the pair's latest claim, so its claim outranks every earlier message of the
//! pair, and the ledger lets it past a delivered mark: `DeliveryMessage::resend`). It goes
//! through the delivery queue like any delivery: the endpoint's circuit, schedule and
//! deadline apply.

use serde::Serialize;
use tern_core::event_store::EventStore;
use tern_core::ports::{DeliveryLedger, EndpointStore, MessageQueue, PortError, QueueEntry};
use tern_core::{DeliveryMessage, Endpoint, EndpointId, Event, EventId, TenantId};

/// A resend put on the delivery queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resent {
    /// The event.
    pub event_id: String,
    /// The endpoint.
    pub endpoint_id: String,
    /// Replay count of the resend's budget (its attempt rows carry it).
    pub replay_count: u32,
    /// The pair's state before the resend: `delivered`, `retrying`, `dead_lettered`,
    /// `in_flight` (an attempt is being made) or `none` (never attempted).
    pub previous_state: String,
}

/// Why a resend was refused.
#[derive(Debug, thiserror::Error)]
pub enum ResendError {
    /// No such endpoint in this tenant.
    #[error("endpoint {0} not found")]
    EndpointNotFound(EndpointId),
    /// No such event of this tenant in the outbox (never published, another tenant's, or
    /// past the outbox's TTL: its payload is gone).
    #[error("event {0} not found (the outbox keeps events 7 days by default)")]
    EventNotFound(EventId),
    /// The endpoint does not subscribe to the event's type.
    #[error("endpoint {endpoint} does not subscribe to event type {event_type}")]
    NotSubscribed {
        /// The endpoint.
        endpoint: EndpointId,
        /// The event's type.
        event_type: String,
    },
    /// The endpoint is disabled: the resend would be dead-lettered at once.
    #[error("endpoint {0} is disabled; enable it first")]
    EndpointDisabled(EndpointId),
    /// An AWS call failed.
    #[error(transparent)]
    Port(#[from] PortError),
}

/// The stores a resend reads and the queue it writes.
pub struct ResendDeps<'a> {
    /// The outbox (the event's payload).
    pub events: &'a dyn EventStore,
    /// The ledger (the pair's latest claim).
    pub ledger: &'a dyn DeliveryLedger,
    /// Endpoints.
    pub endpoints: &'a dyn EndpointStore,
    /// The delivery queue.
    pub delivery_queue: &'a dyn MessageQueue,
}

/// The event `id` of `tenant` while the outbox keeps it.
///
/// # Errors
/// [`ResendError::EventNotFound`] or a store error.
pub async fn tenant_event(
    events: &dyn EventStore,
    tenant: &TenantId,
    id: &EventId,
) -> Result<Event, ResendError> {
    events
        .get(tenant, id)
        .await?
        .ok_or_else(|| ResendError::EventNotFound(id.clone()))
}

/// Resends `event_id` to `endpoint_id`, both of `tenant`.
///
/// # Errors
/// [`ResendError`].
pub async fn resend(
    deps: &ResendDeps<'_>,
    tenant: &TenantId,
    event_id: &EventId,
    endpoint_id: &EndpointId,
) -> Result<Resent, ResendError> {
    let endpoint = deps
        .endpoints
        .get(tenant, endpoint_id)
        .await?
        .ok_or_else(|| ResendError::EndpointNotFound(endpoint_id.clone()))?;
    let event = tenant_event(deps.events, tenant, event_id).await?;
    resend_event(deps, &endpoint, event).await
}

/// Resends `event` to `endpoint` (the caller checked that both are the tenant's).
///
/// # Errors
/// [`ResendError::NotSubscribed`], [`ResendError::EndpointDisabled`] or a store error.
pub async fn resend_event(
    deps: &ResendDeps<'_>,
    endpoint: &Endpoint,
    event: Event,
) -> Result<Resent, ResendError> {
    if !endpoint.subscribes(&event) {
        return Err(ResendError::NotSubscribed {
            endpoint: endpoint.id.clone(),
            event_type: event.event_type.to_string(),
        });
    }
    if !endpoint.enabled {
        return Err(ResendError::EndpointDisabled(endpoint.id.clone()));
    }
    let state = deps
        .ledger
        .pair_state(&event.tenant_id, &event.id, &endpoint.id)
        .await?;
    // A pair never claimed may still have its first message queued (replay count 0):
    // the resend takes 1, so one of the two is sent and the other is a duplicate.
    let replay_count = state.as_ref().map_or(1, |s| s.next_replay_count());
    let previous_state = match &state {
        None => "none".to_owned(),
        Some(s) => s.state.map_or_else(
            || "in_flight".to_owned(),
            |d| {
                serde_json::to_value(d)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            },
        ),
    };
    // In the pair's own ledger layout (an older build's pair stays unsharded), so the
    // resend's claim meets the pair's earlier ones and outranks them.
    let message = DeliveryMessage::resend(event, endpoint.id.clone(), replay_count);
    let message = match &state {
        Some(s) => message.in_layout(s.ledger),
        None => message,
    };
    deps.delivery_queue
        .send(&QueueEntry {
            id: "resend".into(),
            body: message.to_body(),
            delay_seconds: 0,
            attributes: vec![],
            group_id: Some(message.group_id()),
        })
        .await?;
    Ok(Resent {
        event_id: message.event.id.to_string(),
        endpoint_id: endpoint.id.to_string(),
        replay_count: message.replay_count,
        previous_state,
    })
}
