//! Local mode: moto server as the local AWS, Tern's resources created with the infra's
//! settings, local event source mappings that call the Lambda handlers, a scriptable
//! receiver, and the demo. Production never depends on this crate.

#![warn(missing_docs)]

pub mod api;
pub mod collector;
pub mod console;
pub mod demo;
pub mod local;
pub mod loopback;
pub mod moto;
pub mod pollers;
pub mod portal;
pub mod receiver;
pub mod resources;
pub mod settings;

pub use local::{LocalOptions, LocalTern};
pub use moto::MotoServer;
pub use receiver::{Behavior, Receiver, Reply};
/// The operator commands, re-exported from `tern-ops` for the demo and tests.
pub use tern_ops as ops;
