//! The HTTP side of a delivery: the client that makes one attempt (signed body, no
//! redirects, a total deadline, a capped excerpt of the answer, classified errors) and
//! the SSRF guard it connects through.

#![warn(missing_docs)]

mod classify;
pub mod client;
pub mod dns;
pub mod eyeballs;
pub mod guard;
#[cfg(feature = "test-support")]
pub mod test_support;
pub mod transport;

pub use client::{AttemptReport, AttemptRequest, ClientOptions, DeliveryClient};
pub use dns::{DnsError, DnsFailure, DnsResolver};
pub use guard::{
    BlockedError, DestinationPolicy, EndpointCheckError, HostLookup, StaticLookup,
    check_endpoint_url,
};
