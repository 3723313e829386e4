//! The HTTP side of a delivery: the client that makes one attempt (signed body, no
//! redirects, a total deadline, a capped excerpt of the answer, classified errors), the
//! SSRF guard it connects through, and the OAuth2 client credentials tokens it fetches
//! and caches for receivers that want one ([`oauth`]).

#![warn(missing_docs)]

mod classify;
pub mod client;
pub mod dns;
pub mod eyeballs;
pub mod guard;
pub mod identity;
pub mod oauth;
#[cfg(feature = "test-support")]
pub mod test_support;
pub mod transport;

pub use client::{AttemptReport, AttemptRequest, ClientOptions, DeliveryClient};
pub use dns::{DnsError, DnsFailure, DnsResolver};
pub use guard::{
    BlockedError, DestinationPolicy, EndpointCheckError, HostLookup, StaticLookup,
    check_endpoint_url, refusal_hint,
};
pub use identity::{CertificateError, ClientIdentity, IdentityError};
