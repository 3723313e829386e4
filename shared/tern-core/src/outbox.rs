//! The outbox record: the attributes of an outbox item in the outbox table. The outbox
//! writer (`tern-outbox`) produces them and the relay reads them back from the stream.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::event::{Event, EventType, Payload, PayloadError};
use crate::ids::{EventId, IdError, TenantId};

/// Value of [`OutboxRecord::tern_record`] that marks an item as a Tern outbox item.
/// Items without it (the application's own items, if it shares the table) are ignored.
pub const OUTBOX_RECORD_KIND: &str = "outbox_event";

/// Schema version of outbox items this build writes and reads.
pub const OUTBOX_SCHEMA_VERSION: u32 = 1;

/// Name of the attribute that holds [`OUTBOX_RECORD_KIND`].
pub const KIND_ATTRIBUTE: &str = "tern_record";

/// An outbox item as stored. Attribute names are the field names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxRecord {
    /// Partition key: the event id.
    pub event_id: String,
    /// Always [`OUTBOX_RECORD_KIND`].
    pub tern_record: String,
    /// Always [`OUTBOX_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Event type.
    pub event_type: String,
    /// Tenant id.
    pub tenant_id: String,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// The payload's exact JSON text, stored as a string attribute.
    pub payload: String,
    /// TTL attribute: Unix seconds after which DynamoDB deletes the item.
    pub expires_at: i64,
}

/// Why an outbox item cannot become an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutboxError {
    /// Wrong schema version.
    #[error(
        "outbox schema version {0} is not supported (this build reads {OUTBOX_SCHEMA_VERSION})"
    )]
    Version(u32),
    /// Bad id.
    #[error(transparent)]
    Id(#[from] IdError),
    /// Bad payload or event type.
    #[error(transparent)]
    Payload(#[from] PayloadError),
    /// `created_at` is not RFC 3339.
    #[error("created_at {0:?} is not an RFC 3339 time")]
    CreatedAt(String),
}

impl OutboxRecord {
    /// The record for `event`, expiring `ttl` after its creation.
    pub fn from_event(event: &Event, ttl: chrono::Duration) -> Self {
        Self {
            event_id: event.id.to_string(),
            tern_record: OUTBOX_RECORD_KIND.to_owned(),
            schema_version: OUTBOX_SCHEMA_VERSION,
            event_type: event.event_type.to_string(),
            tenant_id: event.tenant_id.to_string(),
            created_at: event
                .created_at
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            payload: event.payload.as_str().to_owned(),
            expires_at: (event.created_at + ttl).timestamp(),
        }
    }

    /// The event, validated again (the table may have been written by other code).
    ///
    /// # Errors
    /// [`OutboxError`].
    pub fn into_event(self, max_payload_bytes: usize) -> Result<Event, OutboxError> {
        if self.schema_version != OUTBOX_SCHEMA_VERSION {
            return Err(OutboxError::Version(self.schema_version));
        }
        let created_at = DateTime::parse_from_rfc3339(&self.created_at)
            .map_err(|_| OutboxError::CreatedAt(self.created_at.clone()))?
            .with_timezone(&Utc);
        Ok(Event {
            id: EventId::new(self.event_id)?,
            event_type: EventType::new(self.event_type)?,
            tenant_id: TenantId::new(self.tenant_id)?,
            created_at,
            payload: Payload::parse(self.payload, max_payload_bytes)?,
        })
    }
}
