//! In-memory ports: an SQS standard queue ([`sqs`], [`queue`]) and the DynamoDB-backed
//! stores the sender needs (the delivery ledger, endpoint health, the endpoint registry),
//! each with the semantics the AWS adapters rely on: SQS's visibility timeout, delays,
//! batches, redrive and fair-queue ordering; DynamoDB's conditional writes (claims,
//! terminal states, health counters and transitions), applied atomically under a lock.
//! The handlers run over them unchanged, so a benchmark or a test on them shows Tern's
//! own behaviour without a local emulator's throughput (`make bench-isolation`,
//! `bench/runner/src/isolation.rs`). No AWS crate in here.

pub mod endpoints;
pub mod health;
pub mod ledger;
pub mod queue;
pub mod sqs;

pub use endpoints::{InMemoryEndpoints, InMemoryEventSink};
pub use health::InMemoryHealthStore;
pub use ledger::{InMemoryLedger, LedgerCounts};
pub use queue::InMemoryQueue;
pub use sqs::{QueueCounts, QueueMessage, QueueSettings, SqsError, SqsModel};
