//! Newtypes for the identifiers that cross Tern's boundaries.
//!
//! Every id is validated on construction so that a malformed id can never reach a
//! signature (Standard Webhooks forbids `.` in `webhook-id`, spec §"Signature scheme"),
//! a DynamoDB key or a log line.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Longest id accepted, in bytes. Keeps DynamoDB keys (limit 2048 bytes for a partition
/// key) and HTTP header values small.
pub const MAX_ID_LEN: usize = 128;

/// Why a string is not a valid id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// The id is empty.
    #[error("{kind} is empty")]
    Empty {
        /// Which id (event id, endpoint id, ...).
        kind: &'static str,
    },
    /// The id is longer than [`MAX_ID_LEN`] bytes.
    #[error("{kind} is {len} bytes long; the limit is {MAX_ID_LEN}")]
    TooLong {
        /// Which id.
        kind: &'static str,
        /// Its length in bytes.
        len: usize,
    },
    /// The id holds a character outside `[A-Za-z0-9_-]`.
    #[error("{kind} may only hold ASCII letters, digits, '_' and '-'; found {found:?}")]
    BadCharacter {
        /// Which id.
        kind: &'static str,
        /// The first offending character.
        found: char,
    },
}

fn validate(kind: &'static str, value: &str) -> Result<(), IdError> {
    if value.is_empty() {
        return Err(IdError::Empty { kind });
    }
    if value.len() > MAX_ID_LEN {
        return Err(IdError::TooLong {
            kind,
            len: value.len(),
        });
    }
    if let Some(found) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(IdError::BadCharacter { kind, found });
    }
    Ok(())
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Prefix of ids made by [`Self::generate`].
            pub const PREFIX: &'static str = $prefix;

            /// Validates `value`: 1 to [`MAX_ID_LEN`] bytes of `[A-Za-z0-9_-]`.
            ///
            /// # Errors
            /// [`IdError`] naming the first rule broken.
            pub fn new(value: impl Into<String>) -> Result<Self, IdError> {
                let value = value.into();
                validate($kind, &value)?;
                Ok(Self(value))
            }

            /// A new, time-ordered unique id: the prefix and a UUIDv7 in hex.
            pub fn generate() -> Self {
                Self(format!("{}{}", $prefix, uuid::Uuid::now_v7().simple()))
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.pad(&self.0)
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(value: String) -> Result<Self, Self::Error> {
                Self::new(value)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::new(s)
            }
        }
    };
}

id_type!(
    /// Unique, immutable id of one event. Sent as `webhook-id` and `Idempotency-Key` on
    /// every attempt and replay, so receivers can dedupe on it.
    EventId,
    "event id",
    "evt_"
);
id_type!(
    /// Id of a registered endpoint (a receiver URL with its secrets and subscriptions).
    EndpointId,
    "endpoint id",
    "ep_"
);
id_type!(
    /// Id of the tenant (the application) that owns events and endpoints. An event is
    /// delivered only to endpoints of its own tenant.
    TenantId,
    "tenant id",
    "tnt_"
);

/// Id of one delivery: an (event, endpoint) pair. Deterministic, so a duplicate stream
/// record or SQS message maps to the same delivery.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DeliveryId(String);

impl DeliveryId {
    /// The delivery id of `event` to `endpoint`: `"<event id>.<endpoint id>"`. The dot
    /// cannot occur inside either id, so the pair is recoverable.
    pub fn of(event: &EventId, endpoint: &EndpointId) -> Self {
        Self(format!("{event}.{endpoint}"))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DeliveryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_dots_and_empty() {
        assert!(matches!(
            EventId::new("a.b"),
            Err(IdError::BadCharacter { found: '.', .. })
        ));
        assert!(matches!(EventId::new(""), Err(IdError::Empty { .. })));
        assert!(matches!(
            EventId::new("x".repeat(129)),
            Err(IdError::TooLong { len: 129, .. })
        ));
    }

    #[test]
    fn generated_ids_are_valid_and_distinct() {
        let a = EventId::generate();
        let b = EventId::generate();
        assert_ne!(a, b);
        assert!(a.as_str().starts_with("evt_"));
        assert_eq!(EventId::new(a.as_str()).unwrap(), a);
    }
}
