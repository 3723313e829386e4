//! The outbox record: the attributes of an outbox item in the outbox table. The outbox
//! writer (`tern-outbox`) produces them and the relay reads them back from the stream.
//!
//! **Version 2** (this build writes it) keys an item by its tenant and its id: the table's
//! partition key attribute, still named `event_id` so that a table deployed for version 1
//! serves both, holds [`outbox_key`] = `<tenant_id>#<event id>`. The same id in two
//! tenants is two items, two events, each delivered; a conditional put
//! (`attribute_not_exists(event_id)`) can only collide with the caller's own tenant.
//!
//! **Version 1** items (written by builders before version 2) hold the bare event id as
//! their key. They are still read, as the same event: an upgrade can leave them in the
//! table and in the stream. Their ids were global: a version 1 writer's condition sees
//! only other version 1 items, so while writers of both versions run, one event written
//! once by each is two items with the same `webhook-id` (receivers dedupe on it).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::event::{Event, EventType, Payload, PayloadError};
use crate::ids::{EventId, IdError, TenantId};
use crate::trace_context::{TraceContext, TraceContextError};

/// Value of [`OutboxRecord::tern_record`] that marks an item as a Tern outbox item.
/// Items without it (the application's own items, if it shares the table) are ignored.
pub const OUTBOX_RECORD_KIND: &str = "outbox_event";

/// Schema version of outbox items this build writes: 2, keyed by tenant and id
/// (`clients/outbox/outbox-item.v2.schema.json`).
pub const OUTBOX_SCHEMA_VERSION: u32 = 2;

/// The earlier schema version this build still reads: 1, keyed by the bare event id
/// (`clients/outbox/outbox-item.v1.schema.json`).
pub const OUTBOX_SCHEMA_VERSION_V1: u32 = 1;

/// Name of the attribute that holds [`OUTBOX_RECORD_KIND`].
pub const KIND_ATTRIBUTE: &str = "tern_record";

/// Name of the outbox table's partition key attribute (both versions).
pub const KEY_ATTRIBUTE: &str = "event_id";

/// What separates the tenant from the event id in a version 2 key. Neither id may hold
/// it (`[A-Za-z0-9_-]`, [`crate::ids`]), so a key splits one way only.
pub const KEY_SEPARATOR: char = '#';

/// The outbox table's key of `tenant`'s event `id` (version 2): `<tenant_id>#<event id>`,
/// at most 257 bytes (two ids of at most 128), far below DynamoDB's 2,048-byte partition
/// key limit.
pub fn outbox_key(tenant: &TenantId, id: &EventId) -> String {
    format!("{tenant}{KEY_SEPARATOR}{id}")
}

/// The event id an outbox table key names, for a reader that has only the key and the
/// item's `tenant_id` (a projected scan): `<tenant_id>#<event id>` (version 2) or the
/// bare id (version 1; ids hold no `#`).
///
/// # Errors
/// [`OutboxError::Key`] for a version 2 key of another tenant, [`OutboxError::Id`] for a
/// bad id.
pub fn event_id_in_key(key: &str, tenant: &str) -> Result<EventId, OutboxError> {
    match key.split_once(KEY_SEPARATOR) {
        Some((own, id)) if own == tenant => Ok(EventId::new(id)?),
        Some(_) => Err(OutboxError::Key {
            key: key.to_owned(),
            tenant: tenant.to_owned(),
        }),
        None => Ok(EventId::new(key)?),
    }
}

/// The event id part of an outbox key of either version: what follows the `#` of a
/// version 2 key, the whole of a version 1 key. For naming an item in a report or a log;
/// [`event_id_in_key`] also checks the tenant.
pub fn event_id_part(key: &str) -> &str {
    key.split_once(KEY_SEPARATOR).map_or(key, |(_, id)| id)
}

/// An outbox item as stored. Attribute names are the field names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxRecord {
    /// Partition key ([`KEY_ATTRIBUTE`]): [`outbox_key`] from version 2; the bare event
    /// id in version 1.
    pub event_id: String,
    /// Always [`OUTBOX_RECORD_KIND`].
    pub tern_record: String,
    /// [`OUTBOX_SCHEMA_VERSION`] when written by this build; [`OUTBOX_SCHEMA_VERSION_V1`]
    /// is read too.
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
    /// The W3C `traceparent` of the code that wrote the event, if any (optional in
    /// version 2: an item without it starts its own trace, and a relay of an earlier
    /// build ignores it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The W3C `tracestate` that goes with [`Self::traceparent`], if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

/// Why an outbox item cannot become an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutboxError {
    /// Wrong schema version.
    #[error(
        "outbox schema version {0} is not supported (this build reads {OUTBOX_SCHEMA_VERSION_V1} and {OUTBOX_SCHEMA_VERSION})"
    )]
    Version(u32),
    /// A version 2 key that is not `<tenant_id>#<event id>` of the item's own tenant.
    #[error(
        "outbox key {key:?} is not <tenant_id>#<event id> for the item's tenant_id {tenant:?} (schema version 2)"
    )]
    Key {
        /// The `event_id` attribute as stored.
        key: String,
        /// The `tenant_id` attribute as stored.
        tenant: String,
    },
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
            event_id: outbox_key(&event.tenant_id, &event.id),
            tern_record: OUTBOX_RECORD_KIND.to_owned(),
            schema_version: OUTBOX_SCHEMA_VERSION,
            event_type: event.event_type.to_string(),
            tenant_id: event.tenant_id.to_string(),
            created_at: event
                .created_at
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            payload: event.payload.as_str().to_owned(),
            expires_at: (event.created_at + ttl).timestamp(),
            traceparent: event.trace.as_ref().map(|t| t.traceparent().to_string()),
            tracestate: event
                .trace
                .as_ref()
                .and_then(|t| t.tracestate().map(str::to_owned)),
        }
    }

    /// The item's trace context, checked: `Ok(None)` without a `traceparent`. The relay
    /// ignores a bad one (logged) rather than refuse the event: a trace is worth less than
    /// a delivery.
    ///
    /// # Errors
    /// [`TraceContextError`] for a `traceparent` or `tracestate` W3C Trace Context refuses.
    pub fn trace_context(&self) -> Result<Option<TraceContext>, TraceContextError> {
        match &self.traceparent {
            None => Ok(None),
            Some(parent) => TraceContext::parse(parent, self.tracestate.as_deref()).map(Some),
        }
    }

    /// The event, validated again (the table may have been written by other code). A
    /// trace context that W3C Trace Context refuses is dropped, not an error
    /// ([`Self::trace_context`] says why; the relay logs it).
    ///
    /// # Errors
    /// [`OutboxError`].
    pub fn into_event(self, max_payload_bytes: usize) -> Result<Event, OutboxError> {
        let trace = self.trace_context().ok().flatten();
        let id = match self.schema_version {
            OUTBOX_SCHEMA_VERSION => match self.event_id.split_once(KEY_SEPARATOR) {
                Some((tenant, id)) if tenant == self.tenant_id => id.to_owned(),
                _ => {
                    return Err(OutboxError::Key {
                        key: self.event_id,
                        tenant: self.tenant_id,
                    });
                }
            },
            OUTBOX_SCHEMA_VERSION_V1 => self.event_id,
            other => return Err(OutboxError::Version(other)),
        };
        let created_at = DateTime::parse_from_rfc3339(&self.created_at)
            .map_err(|_| OutboxError::CreatedAt(self.created_at.clone()))?
            .with_timezone(&Utc);
        Ok(Event {
            id: EventId::new(id)?,
            event_type: EventType::new(self.event_type)?,
            tenant_id: TenantId::new(self.tenant_id)?,
            created_at,
            payload: Payload::parse(self.payload, max_payload_bytes)?,
            trace,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(tenant: &str, id: &str) -> Event {
        Event {
            id: EventId::new(id).unwrap(),
            event_type: EventType::new("order.paid").unwrap(),
            tenant_id: TenantId::new(tenant).unwrap(),
            created_at: DateTime::parse_from_rfc3339("2026-12-01T10:00:00.123Z")
                .unwrap()
                .with_timezone(&Utc),
            payload: Payload::parse(r#"{"a":1}"#, 1024).unwrap(),
            trace: None,
        }
    }

    #[test]
    fn version_2_keys_the_item_by_tenant_and_id_and_reads_back_the_same_event() {
        let e = event("tnt_a", "evt_order_o_1_paid");
        let record = OutboxRecord::from_event(&e, chrono::Duration::days(7));
        assert_eq!(record.event_id, "tnt_a#evt_order_o_1_paid");
        assert_eq!(record.schema_version, 2);
        let other = OutboxRecord::from_event(
            &event("tnt_b", "evt_order_o_1_paid"),
            chrono::Duration::days(7),
        );
        assert_ne!(record.event_id, other.event_id, "two tenants, two keys");
        assert_eq!(record.into_event(1024).unwrap(), e);
    }

    #[test]
    fn the_event_id_part_of_a_key_of_either_version() {
        assert_eq!(event_id_part("tnt_a#evt_1"), "evt_1");
        assert_eq!(event_id_part("evt_1"), "evt_1");
    }

    #[test]
    fn a_version_1_item_keyed_by_the_bare_id_reads_as_the_same_event() {
        let e = event("tnt_a", "evt_1");
        let mut record = OutboxRecord::from_event(&e, chrono::Duration::days(7));
        record.schema_version = 1;
        record.event_id = "evt_1".into();
        assert_eq!(record.into_event(1024).unwrap(), e);
    }

    #[test]
    fn a_version_2_key_of_another_tenant_or_without_its_tenant_is_refused() {
        let e = event("tnt_a", "evt_1");
        for key in ["tnt_b#evt_1", "evt_1", "tnt_a#", "#evt_1", "tnt_a#evt#1"] {
            let mut record = OutboxRecord::from_event(&e, chrono::Duration::days(7));
            record.event_id = key.into();
            let err = record.into_event(1024).unwrap_err();
            assert!(
                matches!(err, OutboxError::Key { .. } | OutboxError::Id(_)),
                "{key}: {err:?}"
            );
        }
        let mut record = OutboxRecord::from_event(&e, chrono::Duration::days(7));
        record.schema_version = 3;
        assert_eq!(record.into_event(1024), Err(OutboxError::Version(3)));
    }

    #[test]
    fn the_trace_context_round_trips_and_a_bad_one_is_dropped_not_refused() {
        let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let mut e = event("tnt_a", "evt_1");
        e.trace = Some(TraceContext::parse(traceparent, Some("rojo=1")).unwrap());
        let record = OutboxRecord::from_event(&e, chrono::Duration::days(7));
        assert_eq!(record.traceparent.as_deref(), Some(traceparent));
        assert_eq!(record.tracestate.as_deref(), Some("rojo=1"));
        assert_eq!(record.clone().into_event(1024).unwrap(), e);

        // Written by other code: an uppercase traceparent is not W3C Trace Context. The
        // event is delivered all the same, without it.
        let mut bad = record;
        bad.traceparent = Some(traceparent.to_uppercase());
        assert_eq!(bad.trace_context(), Err(TraceContextError::Format));
        let delivered = bad.into_event(1024).unwrap();
        assert_eq!(delivered.trace, None);
        assert_eq!(delivered.id, e.id);
    }
}
