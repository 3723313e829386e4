//! The relay: DynamoDB stream batch of outbox items -> one delivery message per
//! (event, subscribed endpoint) on the delivery queue.
//!
//! Only INSERTs of Tern outbox items matter; MODIFY, REMOVE (including TTL clean-up) and
//! other items are acknowledged and ignored. A record that cannot be read is poison: it
//! goes to the relay's failure queue with the whole record and the batch goes on. A
//! transient failure (endpoint table or queue unavailable) stops the batch at that record
//! and reports its `SequenceNumber`, so Lambda retries from there (partial batch
//! response); records before it are checkpointed.

use std::collections::HashMap;
use std::sync::Arc;

use aws_lambda_events::dynamodb::{Event as StreamEvent, EventRecord};
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use serde_json::json;
use tern_core::outbox::{KIND_ATTRIBUTE, OUTBOX_RECORD_KIND, OutboxRecord};
use tern_core::ports::{EndpointStore, MessageQueue, PortError, QueueEntry};
use tern_core::{DeliveryMessage, Endpoint, Event, TenantId};

use crate::metrics::Metrics;

/// Most entries in one SendMessageBatch call (SQS quota).
pub const SQS_BATCH_LIMIT: usize = 10;

/// What the relay needs.
pub struct RelayDeps {
    /// Endpoint registry.
    pub endpoints: Arc<dyn EndpointStore>,
    /// The delivery queue.
    pub delivery_queue: Arc<dyn MessageQueue>,
    /// The relay's failure destination, for poison records.
    pub failure_queue: Arc<dyn MessageQueue>,
    /// Largest payload accepted, in bytes.
    pub max_payload_bytes: usize,
}

/// What happened to one stream record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordOutcome {
    /// Not an INSERT, or not an outbox item: acknowledged, nothing sent.
    Ignored,
    /// Relayed to this many endpoints (0 when nobody subscribes).
    Relayed {
        /// Delivery messages sent.
        deliveries: usize,
    },
    /// Unreadable: sent to the failure queue with the reason.
    Poison {
        /// Why it could not be read.
        reason: String,
    },
}

enum Readable {
    Ignored,
    Poison(String),
    Event(Event),
}

fn read_record(record: &EventRecord, max_payload: usize) -> Readable {
    if record.event_name != "INSERT" {
        return Readable::Ignored;
    }
    let image = &record.change.new_image;
    match image.get(KIND_ATTRIBUTE) {
        Some(serde_dynamo::AttributeValue::S(kind)) if kind == OUTBOX_RECORD_KIND => {}
        _ => return Readable::Ignored,
    }
    let parsed: Result<OutboxRecord, _> = serde_dynamo::from_item(image.clone());
    match parsed {
        Err(e) => Readable::Poison(format!("outbox item does not have the outbox shape: {e}")),
        Ok(rec) => match rec.into_event(max_payload) {
            Ok(event) => Readable::Event(event),
            Err(e) => Readable::Poison(e.to_string()),
        },
    }
}

/// The failure-queue body for a poison record: the reason and the record as received,
/// enough to fix and replay it.
pub fn poison_body(record: &EventRecord, reason: &str) -> String {
    json!({
        "source": "tern-relay",
        "reason": reason,
        "event_id": record.event_id,
        "sequence_number": record.change.sequence_number,
        "record": record,
    })
    .to_string()
}

/// Handles one stream batch. Returns the partial batch response: empty when every record
/// was handled, else the first record to retry.
pub async fn handle(deps: &RelayDeps, event: StreamEvent, metrics: &Metrics) -> (DynamoDbEventResponse, Vec<RecordOutcome>) {
    let mut response = DynamoDbEventResponse::default();
    let mut outcomes = Vec::with_capacity(event.records.len());
    let mut tenants: HashMap<TenantId, Vec<Endpoint>> = HashMap::new();
    for record in &event.records {
        match relay_record(deps, record, &mut tenants, metrics).await {
            Ok(outcome) => outcomes.push(outcome),
            Err(e) => {
                tracing::warn!(error = %e, event_id = %record.event_id, "relay stopped; the batch is retried from this record");
                let mut failure = DynamoDbBatchItemFailure::default();
                failure.item_identifier = record.change.sequence_number.clone();
                response.batch_item_failures.push(failure);
                break;
            }
        }
    }
    (response, outcomes)
}

async fn relay_record(
    deps: &RelayDeps,
    record: &EventRecord,
    tenants: &mut HashMap<TenantId, Vec<Endpoint>>,
    metrics: &Metrics,
) -> Result<RecordOutcome, PortError> {
    let event = match read_record(record, deps.max_payload_bytes) {
        Readable::Ignored => return Ok(RecordOutcome::Ignored),
        Readable::Poison(reason) => return send_to_failure_queue(deps, record, reason).await,
        Readable::Event(e) => e,
    };
    match publish(deps, &event, tenants, metrics).await {
        // Permanent for this record (SQS refused the message itself): poison, not a retry.
        Err(PortError::Rejected(reason)) => send_to_failure_queue(deps, record, format!("delivery queue refused the message: {reason}")).await,
        other => other,
    }
}

async fn send_to_failure_queue(deps: &RelayDeps, record: &EventRecord, reason: String) -> Result<RecordOutcome, PortError> {
    tracing::error!(%reason, event_id = %record.event_id, "poison outbox record sent to the failure queue");
    let entry = QueueEntry {
        id: "poison".into(),
        body: poison_body(record, &reason),
        delay_seconds: 0,
        attributes: vec![("tern-reason".into(), "unreadable_outbox_record".into())],
    };
    deps.failure_queue.send(&entry).await?;
    Ok(RecordOutcome::Poison { reason })
}

async fn publish(
    deps: &RelayDeps,
    event: &Event,
    tenants: &mut HashMap<TenantId, Vec<Endpoint>>,
    metrics: &Metrics,
) -> Result<RecordOutcome, PortError> {
    if !tenants.contains_key(&event.tenant_id) {
        let list = deps.endpoints.list_for_tenant(&event.tenant_id).await?;
        tenants.insert(event.tenant_id.clone(), list);
    }
    let subscribed: Vec<&Endpoint> = tenants
        .get(&event.tenant_id)
        .map(|l| l.iter().filter(|e| e.enabled && e.subscribes(event)).collect())
        .unwrap_or_default();
    let entries: Vec<QueueEntry> = subscribed
        .iter()
        .enumerate()
        .map(|(i, ep)| {
            let msg = DeliveryMessage::first(event.clone(), ep.id.clone());
            QueueEntry {
                id: format!("m{i}"),
                body: msg.to_body(),
                delay_seconds: 0,
                attributes: vec![],
            }
        })
        .collect();
    for chunk in entries.chunks(SQS_BATCH_LIMIT) {
        let results = deps.delivery_queue.send_batch(chunk).await?;
        // A failed entry fails the record: the retry re-sends the whole fan-out, and the
        // sender's ledger drops the copies that were already sent.
        if let Some(Err(e)) = results.into_iter().find(Result::is_err) {
            return Err(e);
        }
    }
    metrics.update(|c| {
        c.events_relayed += 1;
        c.deliveries_enqueued += entries.len() as u64;
    });
    tracing::info!(event_id = %event.id, event_type = %event.event_type, deliveries = entries.len(), "relayed");
    Ok(RecordOutcome::Relayed {
        deliveries: entries.len(),
    })
}
