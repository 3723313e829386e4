//! The event an application publishes: what goes into the outbox and, unchanged, into
//! every delivery message made from it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::ids::{EventId, TenantId};
use crate::trace_context::TraceContext;

/// Default largest payload, in bytes: 256 KiB, the cap the design sets (DESIGN.md §3)
/// and the classic SQS message limit.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 256 * 1024;

/// The SQS message size limit, in bytes: 1 MiB (`MaximumMessageSize` at most 1,048,576).
pub const SQS_MESSAGE_LIMIT_BYTES: usize = 1_048_576;

/// The DynamoDB item size limit, in bytes: 400 KB (409,600 bytes, attribute names and
/// values together). An outbox item holds the payload as one string attribute.
pub const DYNAMODB_ITEM_LIMIT_BYTES: usize = 400 * 1024;

/// Largest payload limit that may be configured, in bytes: 392 KiB (401,408 bytes).
///
/// The tighter of the two stores a payload passes through decides: the outbox item must
/// fit DynamoDB's 400 KB item limit with its other attributes (8 KiB kept for them: ids,
/// type, times), which is also well below the SQS 1 MiB message limit with the delivery
/// message's envelope and dead-letter record around the payload.
pub const MAX_CONFIGURABLE_PAYLOAD_BYTES: usize = DYNAMODB_ITEM_LIMIT_BYTES - 8 * 1024;

/// Longest event type, in bytes.
pub const MAX_EVENT_TYPE_LEN: usize = 128;

/// Why a payload or event type is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// The payload is not valid JSON.
    #[error("payload is not valid JSON: {0}")]
    NotJson(String),
    /// The payload is JSON but not an object (`{...}`).
    #[error("payload must be a JSON object, found {found}")]
    NotAnObject {
        /// What was found instead (`array`, `string`, ...).
        found: &'static str,
    },
    /// The payload is larger than the limit.
    #[error(
        "payload is {size} bytes; the limit is {limit} bytes. Send a reference instead: put \
         the full data where the receiver can fetch it (for example an S3 object behind a \
         presigned URL, or your own API) and publish a small payload such as \
         {{\"id\":\"...\",\"url\":\"https://...\"}}"
    )]
    TooLarge {
        /// Payload size in bytes.
        size: usize,
        /// The configured limit in bytes.
        limit: usize,
    },
    /// The payload has whitespace before its opening `{` or after its closing `}`.
    #[error(
        "payload must start with '{{' and end with '}}' with no surrounding whitespace, so its bytes survive every hop unchanged"
    )]
    Padded,
    /// The payload holds a raw character SQS refuses in a message body (U+FFFE or U+FFFF,
    /// outside the allowed `#x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD |
    /// #x10000-#x10FFFF`). Its `\u` escape is accepted and delivered as written.
    #[error(
        "payload holds the raw character U+{code_point:04X} at byte {offset}, which SQS cannot \
         carry; write it as the JSON escape \\u{code_point:04X} instead"
    )]
    UnsendableCharacter {
        /// The character's code point.
        code_point: u32,
        /// Its byte offset in the payload.
        offset: usize,
    },
    /// The event type is empty, too long or holds characters outside `[A-Za-z0-9._:-]`.
    #[error(
        "event type {0:?} is invalid: 1-128 characters of ASCII letters, digits, '.', '_', ':' or '-'"
    )]
    BadEventType(String),
}

/// An event type such as `order.paid`. Endpoints subscribe to types.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct EventType(String);

impl EventType {
    /// Validates an event type: 1-128 bytes of `[A-Za-z0-9._:-]`.
    ///
    /// # Errors
    /// [`PayloadError::BadEventType`].
    pub fn new(value: impl Into<String>) -> Result<Self, PayloadError> {
        let value = value.into();
        let ok = !value.is_empty()
            && value.len() <= MAX_EVENT_TYPE_LEN
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'));
        if ok {
            Ok(Self(value))
        } else {
            Err(PayloadError::BadEventType(value))
        }
    }

    /// The type as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(&self.0)
    }
}

impl TryFrom<String> for EventType {
    type Error = PayloadError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl From<EventType> for String {
    fn from(t: EventType) -> String {
        t.0
    }
}

/// A validated payload: the exact JSON text the application wrote, a JSON object, within
/// the size limit. The bytes are kept verbatim (key order, number spelling, escapes,
/// Unicode) and become the HTTP body unchanged.
///
/// Deserializing (from a delivery message) checks the same shape rules with the largest
/// configurable limit, [`MAX_CONFIGURABLE_PAYLOAD_BYTES`], so a hand-made queue message
/// cannot smuggle in a payload the outbox writer would refuse.
#[derive(Debug, Clone, Serialize)]
#[serde(transparent)]
pub struct Payload(Box<RawValue>);

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        Payload::check(raw, MAX_CONFIGURABLE_PAYLOAD_BYTES).map_err(serde::de::Error::custom)
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}
impl Eq for Payload {}

impl Payload {
    /// Validates `text` as a JSON object of at most `limit` bytes.
    ///
    /// # Errors
    /// [`PayloadError::TooLarge`] (its message says how to send a reference URL instead),
    /// [`PayloadError::Padded`], [`PayloadError::NotJson`], [`PayloadError::NotAnObject`]
    /// or [`PayloadError::UnsendableCharacter`].
    pub fn parse(text: impl Into<String>, limit: usize) -> Result<Self, PayloadError> {
        let text = text.into();
        if text.len() > limit {
            return Err(PayloadError::TooLarge {
                size: text.len(),
                limit,
            });
        }
        // Leading/trailing whitespace would be stripped by RawValue on the way through a
        // queue; refusing it keeps "bytes in == bytes out" true without exceptions.
        let padded = |b: Option<&u8>| b.is_some_and(u8::is_ascii_whitespace);
        if padded(text.as_bytes().first()) || padded(text.as_bytes().last()) {
            return Err(PayloadError::Padded);
        }
        let raw = RawValue::from_string(text).map_err(|e| PayloadError::NotJson(e.to_string()))?;
        Self::check(raw, limit)
    }

    /// The rules every payload obeys, whatever its source: size, object, characters SQS
    /// can carry. (Padding cannot occur in a `RawValue` taken from a larger document.)
    fn check(raw: Box<RawValue>, limit: usize) -> Result<Self, PayloadError> {
        let size = raw.get().len();
        if size > limit {
            return Err(PayloadError::TooLarge { size, limit });
        }
        // SQS refuses U+FFFE and U+FFFF in a body (moto does not, so local mode would not
        // show it): refused here, at the writer, instead of failing in the relay.
        if let Some((offset, c)) = raw
            .get()
            .char_indices()
            .find(|(_, c)| matches!(c, '\u{FFFE}' | '\u{FFFF}'))
        {
            return Err(PayloadError::UnsendableCharacter {
                code_point: u32::from(c),
                offset,
            });
        }
        match raw.get().as_bytes().first() {
            Some(b'{') => Ok(Self(raw)),
            Some(b'[') => Err(PayloadError::NotAnObject { found: "array" }),
            Some(b'"') => Err(PayloadError::NotAnObject { found: "string" }),
            Some(b't' | b'f') => Err(PayloadError::NotAnObject { found: "boolean" }),
            Some(b'n') => Err(PayloadError::NotAnObject { found: "null" }),
            Some(_) => Err(PayloadError::NotAnObject { found: "number" }),
            None => Err(PayloadError::NotJson("empty".into())),
        }
    }

    /// The exact JSON text.
    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.0.get().len()
    }

    /// Always false: a payload is at least `{}`.
    pub fn is_empty(&self) -> bool {
        self.0.get().is_empty()
    }
}

/// One event as the application published it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Unique id, sent as `webhook-id`.
    pub id: EventId,
    /// Event type, matched against endpoint subscriptions.
    #[serde(rename = "type")]
    pub event_type: EventType,
    /// The tenant (application) the event belongs to.
    pub tenant_id: TenantId,
    /// When the application wrote the event (RFC 3339, UTC).
    pub created_at: DateTime<Utc>,
    /// The exact JSON text of the payload.
    pub payload: Payload,
    /// The W3C trace context (`traceparent`, `tracestate`) of the code that wrote the
    /// event, when it had one: Tern's spans for this event join that trace. Absent, the
    /// relay's fan-out span starts a trace of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceContext>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_kept_verbatim() {
        let text = r#"{"b":1,"a":2,"n":1e2,"s":"\u00e9"}"#;
        let p = Payload::parse(text, 1024).unwrap();
        assert_eq!(p.as_str(), text);
        let wrapped = serde_json::to_string(&p).unwrap();
        assert_eq!(wrapped, text);
        let back: Payload = serde_json::from_str(&wrapped).unwrap();
        assert_eq!(back.as_str(), text);
    }

    #[test]
    fn payload_rules() {
        assert!(matches!(
            Payload::parse("[1]", 10),
            Err(PayloadError::NotAnObject { found: "array" })
        ));
        assert!(matches!(
            Payload::parse("{", 10),
            Err(PayloadError::NotJson(_))
        ));
        assert!(matches!(
            Payload::parse(" {}", 10),
            Err(PayloadError::Padded)
        ));
        assert!(matches!(
            Payload::parse("{}\n", 10),
            Err(PayloadError::Padded)
        ));
        let err = Payload::parse(format!("{{\"a\":\"{}\"}}", "x".repeat(100)), 50).unwrap_err();
        assert!(matches!(err, PayloadError::TooLarge { limit: 50, .. }));
        assert!(err.to_string().contains("url"));
    }

    #[test]
    fn unsendable_characters_refused_but_escapes_kept() {
        let raw = "{\"a\":\"\u{FFFF}\"}";
        assert_eq!(
            Payload::parse(raw, 100),
            Err(PayloadError::UnsendableCharacter {
                code_point: 0xFFFF,
                offset: 6
            })
        );
        let escaped = r#"{"a":"\uffff","b":"\u0007"}"#;
        assert_eq!(Payload::parse(escaped, 100).unwrap().as_str(), escaped);
    }

    #[test]
    fn deserializing_checks_the_shape() {
        #[derive(Deserialize)]
        struct W {
            p: Payload,
        }
        let w: W = serde_json::from_str(r#"{"p": {"a":1} }"#).unwrap();
        assert_eq!(w.p.as_str(), r#"{"a":1}"#);
        assert!(serde_json::from_str::<W>(r#"{"p":[1]}"#).is_err());
        assert!(serde_json::from_str::<W>(r#"{"p":"x"}"#).is_err());
    }

    // The configurable limit fits both stores a payload passes through.
    const _: () = assert!(MAX_CONFIGURABLE_PAYLOAD_BYTES < DYNAMODB_ITEM_LIMIT_BYTES);
    const _: () = assert!(MAX_CONFIGURABLE_PAYLOAD_BYTES < SQS_MESSAGE_LIMIT_BYTES);

    #[test]
    fn event_type_rules() {
        assert!(EventType::new("order.paid").is_ok());
        assert!(EventType::new("").is_err());
        assert!(EventType::new("a b").is_err());
    }
}
