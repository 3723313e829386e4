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
use serde::Deserialize as _;
use serde_json::{Value, json};
use tern_core::outbox::{KIND_ATTRIBUTE, OUTBOX_RECORD_KIND, OutboxRecord};
use tern_core::ports::{EndpointStore, MessageQueue, PortError, QueueEntry};
use tern_core::{DeliveryMessage, Endpoint, Event, TenantId};

use crate::metrics::Metrics;

/// Most entries in one SendMessageBatch call (SQS quota).
pub const SQS_BATCH_LIMIT: usize = 10;

/// Most bytes in one SendMessageBatch call, all bodies and attributes together: 1 MiB
/// (SQS quota: "the total size of all messages in a batch" is at most 1,048,576 bytes).
pub const SQS_BATCH_MAX_BYTES: usize = 1_048_576;

/// Bytes an entry counts towards [`SQS_BATCH_MAX_BYTES`]: its body, and each attribute's
/// name, data type (`String`) and value.
fn entry_bytes(entry: &QueueEntry) -> usize {
    entry.body.len()
        + entry
            .attributes
            .iter()
            .map(|(k, v)| k.len() + "String".len() + v.len())
            .sum::<usize>()
}

/// Splits entries into SendMessageBatch calls that respect both the count (10) and the
/// total-size (1 MiB) limits, in order. A single entry is always its own batch, however
/// large; SQS judges it alone.
pub fn sqs_batches(entries: &[QueueEntry]) -> Vec<&[QueueEntry]> {
    let mut batches = Vec::new();
    let mut start = 0;
    let mut bytes = 0;
    for (i, entry) in entries.iter().enumerate() {
        let size = entry_bytes(entry);
        let full =
            i - start == SQS_BATCH_LIMIT || (i > start && bytes + size > SQS_BATCH_MAX_BYTES);
        if full {
            batches.push(&entries[start..i]);
            start = i;
            bytes = 0;
        }
        bytes += size;
    }
    if start < entries.len() {
        batches.push(&entries[start..]);
    }
    batches
}

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

/// What a stream record holds, decided from the record alone (no I/O).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reading {
    /// Not an INSERT, or not an outbox item: acknowledged, nothing sent.
    Ignored,
    /// An outbox item that cannot become an event; the reason says why.
    Poison(String),
    /// An event to fan out.
    Event(Box<Event>),
}

/// Reads one stream record: only an INSERT of an item whose `tern_record` is
/// [`OUTBOX_RECORD_KIND`] is an event; everything else is ignored; an outbox item that
/// does not have the outbox shape or fails validation is poison.
pub fn read_record(record: &EventRecord, max_payload: usize) -> Reading {
    if record.event_name != "INSERT" {
        return Reading::Ignored;
    }
    let image = &record.change.new_image;
    match image.get(KIND_ATTRIBUTE) {
        Some(serde_dynamo::AttributeValue::S(kind)) if kind == OUTBOX_RECORD_KIND => {}
        _ => return Reading::Ignored,
    }
    let parsed: Result<OutboxRecord, _> = serde_dynamo::from_item(image.clone());
    match parsed {
        Err(e) => Reading::Poison(format!("outbox item does not have the outbox shape: {e}")),
        Ok(rec) => match rec.into_event(max_payload) {
            Ok(event) => Reading::Event(Box::new(event)),
            Err(e) => Reading::Poison(e.to_string()),
        },
    }
}

/// Parses one record of a Lambda stream event. A record that does not parse (an
/// attribute of an unknown type, a missing field) is poison for that record alone: the
/// handler sends it to the failure queue as received, instead of failing the whole
/// batch at deserialization and blocking the shard.
///
/// # Errors
/// The parse error, as text.
pub fn parse_record(raw: &Value) -> Result<EventRecord, String> {
    EventRecord::deserialize(raw).map_err(|e| format!("stream record does not parse: {e}"))
}

/// Largest failure-queue body, in bytes: 256 KiB, the smallest `MaximumMessageSize` a
/// queue may have had by default, so a poison record can always be parked. A record too
/// big for it is parked without its images; its `Keys` and sequence number still name
/// the outbox item, which stays in the table until its TTL.
pub const POISON_BODY_LIMIT_BYTES: usize = 256 * 1024;

/// The failure-queue body for a poison record: the reason and the record as received
/// (or, above [`POISON_BODY_LIMIT_BYTES`], the record without its images), enough to fix
/// and replay it: correct the outbox item and write it again under a new event id, or
/// re-read it by its keys.
pub fn poison_body(record: &EventRecord, reason: &str) -> String {
    poison_body_value(&serde_json::to_value(record).unwrap_or(Value::Null), reason)
}

/// [`poison_body`] for a record as raw JSON (one that may not even parse).
pub fn poison_body_value(raw: &Value, reason: &str) -> String {
    let body = |record: &Value, truncated: bool| {
        let mut b = json!({
            "source": "tern-relay",
            "reason": reason,
            "event_id": raw.get("eventID"),
            "sequence_number": raw.pointer("/dynamodb/SequenceNumber"),
            "keys": raw.pointer("/dynamodb/Keys"),
            "record": record,
        });
        if truncated {
            b["record_truncated"] = json!(
                "images removed: the record exceeds the failure queue's size limit; read the item by its keys"
            );
        }
        b.to_string()
    };
    let full = body(raw, false);
    if full.len() <= POISON_BODY_LIMIT_BYTES {
        return full;
    }
    let mut slim = raw.clone();
    if let Some(change) = slim.get_mut("dynamodb").and_then(Value::as_object_mut) {
        change.remove("NewImage");
        change.remove("OldImage");
    }
    let slim_body = body(&slim, true);
    if slim_body.len() <= POISON_BODY_LIMIT_BYTES {
        return slim_body;
    }
    // Not even the keys fit (a hostile record): keep what names it.
    let mut minimal = json!({
        "source": "tern-relay",
        "reason": reason,
        "record_truncated": "record removed: larger than the failure queue's size limit",
    });
    for (k, v) in [
        ("event_id", raw.get("eventID")),
        ("sequence_number", raw.pointer("/dynamodb/SequenceNumber")),
    ] {
        if let Some(s) = v.and_then(Value::as_str).filter(|s| s.len() <= 1024) {
            minimal[k] = json!(s);
        }
    }
    minimal.to_string()
}

/// Handles one stream batch. Returns the partial batch response: empty when every record
/// was handled, else the first record to retry.
pub async fn handle(
    deps: &RelayDeps,
    event: StreamEvent,
    metrics: &Metrics,
) -> (DynamoDbEventResponse, Vec<RecordOutcome>) {
    let records = event.records.into_iter().map(|r| (None, Ok(r))).collect();
    handle_records(deps, records, metrics).await
}

/// Handles one stream batch given as raw JSON (what the Lambda binary receives), parsing
/// each record on its own so one unparseable record is poison, not a failed batch.
pub async fn handle_value(
    deps: &RelayDeps,
    event: Value,
    metrics: &Metrics,
) -> (DynamoDbEventResponse, Vec<RecordOutcome>) {
    let records = match event.get("Records") {
        Some(Value::Array(records)) => records
            .iter()
            // The raw JSON is kept so a poison record is parked exactly as received.
            .map(|raw| (Some(raw.clone()), parse_record(raw)))
            .collect(),
        // No record list at all: park the whole event, there is nothing to checkpoint.
        _ => vec![(
            Some(event),
            Err("stream event has no Records array".to_owned()),
        )],
    };
    handle_records(deps, records, metrics).await
}

async fn handle_records(
    deps: &RelayDeps,
    records: Vec<(Option<Value>, Result<EventRecord, String>)>,
    metrics: &Metrics,
) -> (DynamoDbEventResponse, Vec<RecordOutcome>) {
    let mut response = DynamoDbEventResponse::default();
    let mut outcomes = Vec::with_capacity(records.len());
    let mut tenants: HashMap<TenantId, Vec<Endpoint>> = HashMap::new();
    for (raw, record) in &records {
        let raw = || {
            raw.clone()
                .unwrap_or_else(|| record.as_ref().map(raw_record).unwrap_or(Value::Null))
        };
        let result = match record {
            Ok(record) => relay_record(deps, record, raw, &mut tenants, metrics).await,
            Err(reason) => send_to_failure_queue(deps, &raw(), reason.clone()).await,
        };
        match result {
            Ok(outcome) => outcomes.push(outcome),
            Err(e) => {
                let raw = raw();
                let event_id = raw
                    .get("eventID")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let sequence = raw
                    .pointer("/dynamodb/SequenceNumber")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                tracing::warn!(error = %e, %event_id, "relay stopped; the batch is retried from this record");
                let mut failure = DynamoDbBatchItemFailure::default();
                failure.item_identifier = sequence;
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
    raw: impl Fn() -> Value,
    tenants: &mut HashMap<TenantId, Vec<Endpoint>>,
    metrics: &Metrics,
) -> Result<RecordOutcome, PortError> {
    let event = match read_record(record, deps.max_payload_bytes) {
        Reading::Ignored => return Ok(RecordOutcome::Ignored),
        Reading::Poison(reason) => return send_to_failure_queue(deps, &raw(), reason).await,
        Reading::Event(e) => e,
    };
    match publish(deps, &event, tenants, metrics).await {
        // Permanent for this record (SQS refused the message itself): poison, not a retry.
        Err(PortError::Rejected(reason)) => {
            send_to_failure_queue(
                deps,
                &raw(),
                format!("delivery queue refused the message: {reason}"),
            )
            .await
        }
        other => other,
    }
}

fn raw_record(record: &EventRecord) -> Value {
    serde_json::to_value(record).unwrap_or(Value::Null)
}

async fn send_to_failure_queue(
    deps: &RelayDeps,
    raw: &Value,
    reason: String,
) -> Result<RecordOutcome, PortError> {
    // The reason names the rule broken, never the payload, so it is safe to log.
    let event_id = raw
        .get("eventID")
        .and_then(Value::as_str)
        .unwrap_or_default();
    tracing::error!(%reason, %event_id, "poison outbox record sent to the failure queue");
    let entry = QueueEntry {
        id: "poison".into(),
        body: poison_body_value(raw, &reason),
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
        .map(|l| {
            l.iter()
                .filter(|e| e.enabled && e.subscribes(event))
                .collect()
        })
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
    for chunk in sqs_batches(&entries) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(bytes: usize) -> QueueEntry {
        QueueEntry {
            id: "x".into(),
            body: "a".repeat(bytes),
            delay_seconds: 0,
            attributes: vec![],
        }
    }

    #[test]
    fn batches_respect_count_and_total_size() {
        let small: Vec<_> = (0..25).map(|_| entry(10)).collect();
        let sizes: Vec<usize> = sqs_batches(&small).iter().map(|b| b.len()).collect();
        assert_eq!(sizes, vec![10, 10, 5]);

        // Five 262 KB messages: 1.31 MB in one call would be refused (BatchRequestTooLong).
        let big: Vec<_> = (0..5).map(|_| entry(262_200)).collect();
        let batches = sqs_batches(&big);
        assert!(
            batches
                .iter()
                .all(|b| b.iter().map(entry_bytes).sum::<usize>() <= SQS_BATCH_MAX_BYTES)
        );
        assert_eq!(batches.iter().map(|b| b.len()).sum::<usize>(), 5);
        assert_eq!(batches.len(), 2);

        assert!(sqs_batches(&[]).is_empty());
        assert_eq!(sqs_batches(&[entry(2_000_000)]).len(), 1);
    }
}
