//! Publishing an event without a transaction of one's own: the outbox item is written
//! alone (one conditional put), and the event takes the same stream -> relay path as one
//! an application writes in its transaction. Idempotent on the event id.

use chrono::{SubsecRound, Utc};
use tern_core::event_store::{EventStore, Published, same_event};
use tern_core::ids::IdError;
use tern_core::ports::PortError;
use tern_core::{Event, EventId, EventType, Payload, PayloadError, TenantId, TraceContext};

/// What a publish did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishOutcome {
    /// A new event: written to the outbox, the relay delivers it.
    Created(Event),
    /// The same event (same id, tenant, type and payload text) was published before:
    /// nothing written, the original returned.
    Repeated(Event),
}

impl PublishOutcome {
    /// The event, new or original.
    pub fn event(&self) -> &Event {
        match self {
            Self::Created(e) | Self::Repeated(e) => e,
        }
    }
}

/// Why a publish was refused.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The event type or the payload is invalid (not a JSON object, too large, ...).
    #[error(transparent)]
    Payload(#[from] PayloadError),
    /// The event id is invalid.
    #[error(transparent)]
    Id(#[from] IdError),
    /// The event id is taken by a different event: another type or payload, or another
    /// tenant's event (event ids are unique across the deployment: choose unguessable
    /// ones). Which of these is not said.
    #[error(
        "event id {0} is already used by a different event; an idempotent retry must send the same type and payload"
    )]
    Conflict(EventId),
    /// The outbox could not be reached.
    #[error(transparent)]
    Port(#[from] PortError),
}

/// Publishes an event of `tenant` with the id given (or a new `evt_` id), the type, the
/// caller's W3C trace context if it has one (Tern's spans of the event join that trace),
/// and the payload's exact JSON text (a JSON object of at most `max_payload_bytes`, the relay's
/// `TERN_MAX_PAYLOAD_BYTES`). Publishing the same id again with the same type and payload
/// returns the original event ([`PublishOutcome::Repeated`]) while the outbox keeps it
/// (its TTL, 7 days by default); after that the id can be used again.
///
/// # Errors
/// [`PublishError`].
pub async fn publish(
    store: &dyn EventStore,
    tenant: &TenantId,
    id: Option<EventId>,
    event_type: &str,
    payload: &str,
    max_payload_bytes: usize,
    trace: Option<TraceContext>,
) -> Result<PublishOutcome, PublishError> {
    let event = Event {
        id: id.unwrap_or_else(EventId::generate),
        event_type: EventType::new(event_type)?,
        tenant_id: tenant.clone(),
        // The outbox item keeps milliseconds (`OutboxRecord::from_event`): the answer says
        // the time receivers will see and a repeat returns.
        created_at: Utc::now().trunc_subsecs(3),
        payload: Payload::parse(payload, max_payload_bytes)?,
        trace,
    };
    match store.publish(&event).await? {
        Published::Created => Ok(PublishOutcome::Created(event)),
        Published::Existing(stored) if same_event(&stored, tenant, event_type, payload) => {
            Ok(PublishOutcome::Repeated(stored))
        }
        Published::Existing(_) | Published::Taken => Err(PublishError::Conflict(event.id)),
    }
}
