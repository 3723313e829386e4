//! The outbox writer for application code.
//!
//! Write your business change and a Tern outbox item in one DynamoDB
//! `TransactWriteItems`: both commit or neither does, so an event exists exactly when its
//! business fact does. This crate builds the outbox `Put` for you; you add it to your own
//! transaction.
//!
//! ```no_run
//! # async fn demo(client: aws_sdk_dynamodb::Client, order_put: aws_sdk_dynamodb::types::TransactWriteItem) -> Result<(), Box<dyn std::error::Error>> {
//! let writer = tern_outbox::OutboxWriter::new("tern-outbox");
//! let event = writer.prepare("order.paid", "tnt_acme", r#"{"order_id":"o_1","amount":4200}"#)?;
//! client
//!     .transact_write_items()
//!     .transact_items(order_put)
//!     .transact_items(event.transact_item()?)
//!     .send()
//!     .await?;
//! println!("published {}", event.event.id);
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

#[cfg(feature = "postgres")]
pub mod postgres;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
use chrono::{DateTime, Datelike, Utc};
use tern_core::event::DEFAULT_MAX_PAYLOAD_BYTES;
use tern_core::outbox::OutboxRecord;
use tern_core::{EventType, Payload, TenantId};

/// A W3C trace context (`traceparent`, `tracestate`) an event carries
/// ([`PreparedEvent::with_trace_context`]).
pub use tern_core::TraceContext;

/// Why a `traceparent` or `tracestate` is refused. Held by [`OutboxWriteError::Trace`].
pub use tern_core::TraceContextError;

/// An event as Tern delivers it: id, type, tenant, creation time (UTC) and the payload's
/// exact JSON text. [`PreparedEvent::event`] is one; re-exported so your crate needs no
/// dependency on `tern-core`.
pub use tern_core::Event;

/// An event id: the `webhook-id` receivers see and dedupe on. [`EventId::new`] checks
/// your own id (1-128 characters of `[A-Za-z0-9_-]`, see `tern_core::ids`) for
/// [`OutboxWriter::prepare_with_id`]; [`EventId::generate`] makes a new `evt_` id.
pub use tern_core::EventId;

/// Why a payload or event type is refused (not a JSON object, above the payload limit,
/// a bad event type); the message says what to do. Held by [`OutboxWriteError::Payload`].
pub use tern_core::PayloadError;

/// Why an event id or tenant id is refused. Returned by [`EventId::new`] and held by
/// [`OutboxWriteError::Id`].
pub use tern_core::ids::IdError;

/// Default time an outbox item stays in the table before DynamoDB's TTL removes it: 7
/// days (the stream keeps records 24 h; the rest is for audits and relay replays).
pub const DEFAULT_TTL_DAYS: i64 = 7;

/// Longest outbox TTL accepted, in days (10 years).
pub const MAX_TTL_DAYS: i64 = 3650;

/// Why an event cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum OutboxWriteError {
    /// The payload is not a JSON object, is too large, or the event type is invalid.
    #[error(transparent)]
    Payload(#[from] PayloadError),
    /// The event id or tenant id is invalid.
    #[error(transparent)]
    Id(#[from] IdError),
    /// `created_at` is outside the years 0001-9999: RFC 3339 (§5.6, `date-fullyear` is
    /// four digits) cannot write it, so the relay could not read the item back.
    #[error("created_at {0} is outside the years 0001-9999 that RFC 3339 can write")]
    CreatedAt(String),
    /// The `traceparent` or `tracestate` given is not what W3C Trace Context allows.
    #[error(transparent)]
    Trace(#[from] TraceContextError),
    /// The item could not be encoded for DynamoDB.
    #[error("outbox item cannot be encoded: {0}")]
    Encode(String),
}

impl OutboxWriteError {
    /// The stable code of this error, the same in every outbox builder (Rust, TypeScript,
    /// Python; `clients/outbox/README.md`): `bad_event_id`, `bad_tenant_id`,
    /// `bad_event_type`, `bad_created_at`, `payload_not_json`, `payload_not_object`,
    /// `payload_too_large`, `payload_padded`, `payload_unsendable_character`,
    /// `bad_traceparent`, `bad_tracestate`, or `encode` (not expected for valid events).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Id(
                IdError::Empty { kind }
                | IdError::TooLong { kind, .. }
                | IdError::BadCharacter { kind, .. },
            ) => {
                if *kind == "tenant id" {
                    "bad_tenant_id"
                } else {
                    "bad_event_id"
                }
            }
            Self::Payload(p) => match p {
                PayloadError::NotJson(_) => "payload_not_json",
                PayloadError::NotAnObject { .. } => "payload_not_object",
                PayloadError::TooLarge { .. } => "payload_too_large",
                PayloadError::Padded => "payload_padded",
                PayloadError::UnsendableCharacter { .. } => "payload_unsendable_character",
                PayloadError::BadEventType(_) => "bad_event_type",
            },
            Self::CreatedAt(_) => "bad_created_at",
            Self::Trace(
                TraceContextError::TraceStateLength(_)
                | TraceContextError::TraceStateMembers(_)
                | TraceContextError::TraceStateMember(_),
            ) => "bad_tracestate",
            Self::Trace(_) => "bad_traceparent",
            Self::Encode(_) => "encode",
        }
    }
}

/// Builds outbox items for one outbox table.
#[derive(Debug, Clone)]
pub struct OutboxWriter {
    table: String,
    max_payload_bytes: usize,
    ttl: chrono::Duration,
}

/// An event ready to be written: the validated event and its outbox record.
#[derive(Debug, Clone)]
pub struct PreparedEvent {
    /// The event (its `id` is the `webhook-id` receivers will see).
    pub event: Event,
    table: String,
    record: OutboxRecord,
}

impl OutboxWriter {
    /// A writer for `table` with the default 256 KiB payload limit and 7-day TTL.
    pub fn new(table: impl Into<String>) -> Self {
        Self {
            table: table.into(),
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            ttl: chrono::Duration::days(DEFAULT_TTL_DAYS),
        }
    }

    /// Sets the payload limit, in bytes. Must match the relay's `TERN_MAX_PAYLOAD_BYTES`.
    #[must_use]
    pub fn with_max_payload_bytes(mut self, bytes: usize) -> Self {
        self.max_payload_bytes = bytes;
        self
    }

    /// Sets how long outbox items are kept, in days, clamped to 1..=[`MAX_TTL_DAYS`] (the
    /// relay needs an item for at least the stream's 24 h retention).
    #[must_use]
    pub fn with_ttl_days(mut self, days: i64) -> Self {
        self.ttl = chrono::Duration::days(days.clamp(1, MAX_TTL_DAYS));
        self
    }

    /// Validates an event with a new id.
    ///
    /// `payload` is the exact JSON text to deliver: a JSON object of at most the payload
    /// limit. It is sent byte for byte as written.
    ///
    /// # Errors
    /// [`OutboxWriteError::Payload`] for a payload that is not a JSON object or is too
    /// large (the message says how to send a reference URL instead), or a bad event type;
    /// [`OutboxWriteError::Id`] for a bad tenant id.
    pub fn prepare(
        &self,
        event_type: &str,
        tenant_id: &str,
        payload: impl Into<String>,
    ) -> Result<PreparedEvent, OutboxWriteError> {
        self.prepare_with_id(EventId::generate(), event_type, tenant_id, payload)
    }

    /// Like [`Self::prepare`] with your own event id (for example one derived from the
    /// business key, so a retried request cannot publish twice: the second put fails
    /// its condition).
    ///
    /// # Errors
    /// As [`Self::prepare`].
    pub fn prepare_with_id(
        &self,
        id: EventId,
        event_type: &str,
        tenant_id: &str,
        payload: impl Into<String>,
    ) -> Result<PreparedEvent, OutboxWriteError> {
        self.prepare_at(id, event_type, tenant_id, Utc::now(), payload)
    }

    /// Like [`Self::prepare_with_id`] with the event's creation time given (for example
    /// the business change's own time, or a fixed time in a test). The item keeps it to
    /// the millisecond (`created_at`, RFC 3339, truncated) and expires the TTL after its
    /// whole second (`expires_at`, Unix seconds, rounded down).
    ///
    /// # Errors
    /// As [`Self::prepare`], and [`OutboxWriteError::CreatedAt`] for a time outside the
    /// years 0001-9999.
    pub fn prepare_at(
        &self,
        id: EventId,
        event_type: &str,
        tenant_id: &str,
        created_at: DateTime<Utc>,
        payload: impl Into<String>,
    ) -> Result<PreparedEvent, OutboxWriteError> {
        let event_type = EventType::new(event_type)?;
        let tenant_id = TenantId::new(tenant_id)?;
        if !(1..=9999).contains(&created_at.year()) {
            return Err(OutboxWriteError::CreatedAt(created_at.to_rfc3339()));
        }
        let event = Event {
            id,
            event_type,
            tenant_id,
            created_at,
            payload: Payload::parse(payload, self.max_payload_bytes)?,
            trace: None,
        };
        let record = OutboxRecord::from_event(&event, self.ttl);
        Ok(PreparedEvent {
            event,
            table: self.table.clone(),
            record,
        })
    }
}

impl PreparedEvent {
    /// The same event carrying the W3C trace context of the code that writes it: the
    /// `traceparent` (`00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`) and optional
    /// `tracestate` of your current span, as your OpenTelemetry propagator would send them
    /// in headers. Tern's spans of this event (the relay's fan-out, each attempt, the dead
    /// letter, a replay) then belong to your trace. With `tracing-opentelemetry`, take them
    /// from `tracing::Span::current().context()`; with the `opentelemetry` feature,
    /// [`Self::with_current_trace_context`] does it.
    ///
    /// # Errors
    /// [`OutboxWriteError::Trace`] (code `bad_traceparent` or `bad_tracestate`) for a value
    /// W3C Trace Context refuses: version other than `00`, wrong length, uppercase hex, an
    /// all-zero id, or a `tracestate` beyond 512 characters or 32 members.
    pub fn with_trace_context(
        mut self,
        traceparent: &str,
        tracestate: Option<&str>,
    ) -> Result<Self, OutboxWriteError> {
        let trace = TraceContext::parse(traceparent, tracestate)?;
        self.record.traceparent = Some(trace.traceparent().to_string());
        self.record.tracestate = trace.tracestate().map(str::to_owned);
        self.event.trace = Some(trace);
        Ok(self)
    }

    /// The same event carrying the trace context of the current OpenTelemetry span
    /// (`opentelemetry::Context::current()`), when there is a valid one; unchanged
    /// otherwise. Needs the `opentelemetry` feature.
    #[cfg(feature = "opentelemetry")]
    #[must_use]
    pub fn with_current_trace_context(self) -> Self {
        use opentelemetry::trace::TraceContextExt;
        let context = opentelemetry::Context::current();
        let span = context.span();
        let span = span.span_context();
        if !span.is_valid() {
            return self;
        }
        let traceparent = format!(
            "00-{}-{}-{:02x}",
            span.trace_id(),
            span.span_id(),
            span.trace_flags().to_u8()
        );
        let tracestate = span.trace_state().header();
        let tracestate = (!tracestate.is_empty()).then_some(tracestate);
        let fallback = self.clone();
        self.with_trace_context(&traceparent, tracestate.as_deref())
            .unwrap_or(fallback)
    }

    /// The conditional `Put` of the outbox item: it fails when an item with the same
    /// event id exists, so an event id is never reused.
    ///
    /// # Errors
    /// [`OutboxWriteError::Encode`] (not expected for valid events).
    pub fn put(&self) -> Result<Put, OutboxWriteError> {
        let item = serde_dynamo::to_item(&self.record)
            .map_err(|e| OutboxWriteError::Encode(e.to_string()))?;
        Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(event_id)")
            .build()
            .map_err(|e| OutboxWriteError::Encode(e.to_string()))
    }

    /// The `Put` wrapped for `TransactWriteItems`.
    ///
    /// # Errors
    /// As [`Self::put`].
    pub fn transact_item(&self) -> Result<TransactWriteItem, OutboxWriteError> {
        Ok(TransactWriteItem::builder().put(self.put()?).build())
    }
}

/// Why a payload argument could not be read ([`payload_argument`]).
#[derive(Debug, thiserror::Error)]
pub enum PayloadArgumentError {
    /// `@<path>` names a file that cannot be read.
    #[error("cannot read the payload file {path}: {source}")]
    File {
        /// The path as given after `@` (absolute, or relative to the working directory).
        path: String,
        /// Why (not found, permission denied, not UTF-8...).
        source: std::io::Error,
    },
    /// `@` without a path.
    #[error("'@' needs a file path after it, like @payload.json or @/tmp/payload.json")]
    EmptyPath,
}

/// The payload a command-line argument stands for: the argument itself, or for
/// `@<path>` the text of that file (an absolute path, or one relative to the working
/// directory) without the line break an editor ends a file with (a payload must end
/// with its `}`: [`PayloadError`]). Used by the `publish` example; handy for your own
/// tools.
///
/// # Errors
/// [`PayloadArgumentError`], whose message names the path and the reason.
pub fn payload_argument(arg: &str) -> Result<String, PayloadArgumentError> {
    let Some(path) = arg.strip_prefix('@') else {
        return Ok(arg.to_owned());
    };
    if path.is_empty() {
        return Err(PayloadArgumentError::EmptyPath);
    }
    let mut text = std::fs::read_to_string(path).map_err(|source| PayloadArgumentError::File {
        path: path.to_owned(),
        source,
    })?;
    // Only the final line break(s): anything else stays as written, byte for byte.
    while text.ends_with('\n') || text.ends_with('\r') {
        text.pop();
    }
    Ok(text)
}

/// True when a `TransactWriteItems` failed because the item at `index` (0-based, in the
/// order you added them) failed its condition: for the outbox item, the event id
/// already exists.
pub fn failed_condition_at(err: &SdkError<TransactWriteItemsError>, index: usize) -> bool {
    match err.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(e)) => e
            .cancellation_reasons()
            .get(index)
            .and_then(|r| r.code())
            .is_some_and(|c| c == "ConditionalCheckFailed"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepares_a_conditional_put() {
        let w = OutboxWriter::new("outbox");
        let p = w
            .prepare("order.paid", "tnt_a", r#"{"b":1,"a":2}"#)
            .unwrap();
        let put = p.put().unwrap();
        assert_eq!(put.table_name(), "outbox");
        assert_eq!(
            put.condition_expression(),
            Some("attribute_not_exists(event_id)")
        );
        let item = put.item();
        assert_eq!(item["payload"].as_s().unwrap(), r#"{"b":1,"a":2}"#);
        assert_eq!(item["tern_record"].as_s().unwrap(), "outbox_event");
        assert!(item["expires_at"].as_n().is_ok());
    }

    #[test]
    fn refuses_bad_events() {
        let w = OutboxWriter::new("outbox").with_max_payload_bytes(16);
        assert!(matches!(
            w.prepare("order.paid", "tnt_a", "[1]"),
            Err(OutboxWriteError::Payload(_))
        ));
        assert!(matches!(
            w.prepare("order.paid", "tnt_a", "not json"),
            Err(OutboxWriteError::Payload(_))
        ));
        let big = w
            .prepare("order.paid", "tnt_a", r#"{"a":"0123456789abcdef"}"#)
            .unwrap_err();
        assert!(big.to_string().contains("reference"), "{big}");
        assert!(matches!(
            w.prepare("bad type!", "tnt_a", "{}"),
            Err(OutboxWriteError::Payload(_))
        ));
        assert!(matches!(
            w.prepare("a.b", "tnt.a", "{}"),
            Err(OutboxWriteError::Id(_))
        ));
    }
}
