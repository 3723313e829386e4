//! The HTTP side of a delivery: the client that makes one attempt (signed body, no
//! redirects, a total deadline, a capped excerpt of the answer, classified errors) and
//! the SSRF guard it connects through.

#![warn(missing_docs)]

pub mod client;
pub mod guard;
pub mod transport;

pub use client::{AttemptReport, AttemptRequest, ClientOptions, DeliveryClient};
pub use guard::{
    BlockedError, DestinationPolicy, EndpointCheckError, HostLookup, StaticLookup, SystemLookup,
    check_endpoint_url,
};
