//! Tern's delivery domain. No AWS crate in here: the envelope and delivery message, Standard
//! Webhooks signing, the request a receiver gets (body and headers), the retry policy,
//! outcome classification, endpoints (with their custom headers, their authentication to
//! the receiver and their Ed25519 keys), and the ports the handlers use to reach the outside
//! world.

#![warn(missing_docs)]

pub mod client_certificate;
pub mod clock;
pub mod custom_headers;
pub mod dead_letters;
pub mod decision;
pub mod delivery_log;
pub mod drain;
pub mod endpoint;
pub mod event;
pub mod event_store;
pub mod fanout;
pub mod health;
pub mod idempotency;
pub mod ids;
pub mod in_memory;
pub mod message;
pub mod operational;
pub mod outbox;
pub mod outcome;
pub mod pacing;
pub mod portal;
pub mod ports;
pub mod put_back;
pub mod rate_limit;
pub mod receiver_auth;
pub mod request;
pub mod retry;
pub mod sealed;
pub mod secret_value;
pub mod signing;
pub mod signing_key;
pub mod spread;
pub mod sqs_text;
pub mod trace;
pub mod trace_context;
pub mod waiting;

pub use endpoint::{Endpoint, EndpointSecret};
pub use event::{Event, EventType, Payload, PayloadError};
pub use ids::{DeliveryId, EndpointId, EventId, TenantId};
pub use message::{DeadLetter, DeadLetterReason, DeliveryMessage};
pub use outcome::{AttemptResult, ErrorClass};
pub use request::PayloadFormat;
pub use retry::RetrySchedule;
pub use secret_value::SecretValue;
pub use signing::Secret;
pub use signing_key::{Signatures, SigningKey};
pub use trace_context::{TraceContext, TraceContextError, TraceParent};

/// `user-agent` sent with every attempt: `Tern/<version>`.
pub const USER_AGENT: &str = concat!("Tern/", env!("CARGO_PKG_VERSION"));
