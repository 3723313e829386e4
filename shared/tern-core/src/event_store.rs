//! The outbox as a port: publishing an event by writing its outbox item (the same stream ->
//! relay path as an application's transactional write), and reading one back.

use async_trait::async_trait;

use crate::event::Event;
use crate::ids::{EventId, TenantId};
use crate::ports::PortError;

/// What a publish did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    /// The outbox item was written: the relay delivers the event.
    Created,
    /// The tenant's outbox item with this event id was there already; here it is, as stored. The
    /// caller decides whether it is the same event (an idempotent retry) or a conflict.
    Existing(Event),
    /// An item with this id is there and is not a readable Tern event (an application's
    /// own item in a shared table): a conflict.
    Taken,
}

/// The outbox table, for publishing without a transaction of one's own.
#[async_trait]
pub trait EventStore: Send + Sync {
    /// Writes `event`'s outbox item unless its tenant has one with its id (one
    /// conditional write on the tenant-scoped key, [`crate::outbox::outbox_key`]; the
    /// existing item comes back with the refusal, no second read). Another tenant's
    /// event with the same id neither blocks it nor is told of.
    async fn publish(&self, event: &Event) -> Result<Published, PortError>;

    /// `tenant`'s event with this id while the outbox keeps it (its TTL, 7 days by
    /// default), read consistently; `None` when it has none (never written, expired, or
    /// only another tenant's). An item written before schema version 2 (keyed by the bare
    /// id) is found too, when it is `tenant`'s.
    async fn get(&self, tenant: &TenantId, id: &EventId) -> Result<Option<Event>, PortError>;
}

/// True when `stored` is the event a publish of `event_type` and `payload` with the same id
/// would have written: same tenant, same type, and the payload's exact text. Time is not
/// compared (a retry comes later).
pub fn same_event(
    stored: &Event,
    tenant: &crate::TenantId,
    event_type: &str,
    payload: &str,
) -> bool {
    stored.tenant_id == *tenant
        && stored.event_type.as_str() == event_type
        && stored.payload.as_str() == payload
}
