//! AWS adapters for the domain's ports: DynamoDB (endpoint registry, delivery ledger and
//! attempt log), SQS (delivery queue, DLQ, relay failure queue), Step Functions (waits over
//! 900 s). Clients are built once by the caller and passed in.

#![warn(missing_docs)]

pub mod budget;
pub mod certificates;
pub mod dead_letters;
pub mod endpoint_log;
pub mod endpoints;
pub mod error;
pub mod event_store;
pub mod fanout;
pub mod health;
pub mod idempotency;
pub mod keyring;
pub mod kms;
pub mod ledger;
pub mod ledger_keys;
pub mod ledger_read;
pub mod operational;
pub mod outbox_reader;
pub mod portal;
pub mod sealed_item;
pub mod sfn;
pub mod sqs;
#[cfg(feature = "streams")]
pub mod stream;
pub mod tls;
pub mod waiting;
pub mod wiring;

pub use endpoints::DynamoEndpointStore;
pub use event_store::DynamoEventStore;
pub use fanout::DynamoFanOutCheckpoints;
pub use health::DynamoHealthStore;
pub use idempotency::DynamoIdempotencyStore;
pub use kms::KmsDataKeys;
pub use ledger::DynamoLedger;
pub use operational::{OutboxEventSink, SnsEventSink};
pub use outbox_reader::DynamoOutboxReader;
pub use sealed_item::SecretsAtRest;
pub use sfn::StepFunctionsScheduler;
pub use sqs::SqsQueue;
