//! Tern's three handlers (relay, sender, replay) as plain async functions over typed
//! Lambda events and the domain's ports, plus the typed configuration and the metrics
//! they emit. The Lambda binaries and local mode call exactly these functions.

#![warn(missing_docs)]

pub mod config;
pub mod deadline;
pub mod endpoint_cache;
pub mod endpoint_log;
pub mod health;
pub mod logging;
pub mod markers;
pub mod metrics;
pub mod rate_limit;
pub mod relay;
pub mod relay_send;
pub mod replay;
pub mod sender;
pub mod span_log;
pub mod subscription_cache;
pub mod telemetry;
