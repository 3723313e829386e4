//! The relay: DynamoDB stream batch of outbox items -> one delivery message per
//! (event, subscribed endpoint) on the delivery queue.
//!
//! Only INSERTs of Tern outbox items matter; MODIFY, REMOVE (including TTL clean-up) and
//! other items are acknowledged and ignored. A record that cannot be read is poison, and
//! an INSERT without a new image shows a misconfigured stream: either goes to the relay's
//! failure queue with the whole record (the latter also logged as an error and counted
//! for its alarm) and the batch goes on.
//!
//! The delivery messages of all records of a batch are packed into full
//! `SendMessageBatch` calls (10 entries, 1 MiB). An entry SQS fails transiently is sent
//! again alone, a bounded number of times within the invocation; an entry SQS refuses
//! (sender fault) is parked alone, naming its endpoint. The first record left with a
//! transient failure (endpoint table or queue unavailable) is reported by its
//! `SequenceNumber`, so Lambda retries from there (partial batch response); records
//! before it are checkpointed and never sent again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::dynamodb::{Event as StreamEvent, EventRecord};
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use serde_json::{Map, Value, json};
use tern_core::outbox::{KIND_ATTRIBUTE, OUTBOX_RECORD_KIND, OutboxRecord};
use tern_core::ports::{EndpointStore, MessageQueue, PortError, QueueEntry};
use tern_core::{DeliveryMessage, Endpoint, EndpointId, Event, TenantId};

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

/// `SendMessageBatch` calls an entry gets within one invocation: the first and two
/// retries of the entries that failed transiently (`SenderFault: false`, throttling, a
/// failed call). Bounded so a lasting outage goes to Lambda's own retry of the record
/// (`eventSources.relay.maximumRetryAttempts` in infra/settings.json) instead of using
/// up the invocation.
pub const SEND_ATTEMPTS: usize = 3;

/// Wait before each retry, in milliseconds: 50 ms, then 200 ms (250 ms at most per
/// invocation): enough to ride out a throttling blip, small against the relay's 30 s
/// timeout (`functions.relay.timeoutSeconds` in infra/settings.json).
pub const RETRY_BACKOFF_MS: [u64; SEND_ATTEMPTS - 1] = [50, 200];

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
    /// A MODIFY or REMOVE, or an INSERT of an item that is not an outbox item:
    /// acknowledged, nothing sent.
    Ignored,
    /// Relayed: `deliveries` messages are on the delivery queue (0 when nobody
    /// subscribes), and `parked` messages SQS refused (sender fault) are in the
    /// relay-failure queue, each naming its endpoint.
    Relayed {
        /// Delivery messages sent.
        deliveries: usize,
        /// Delivery messages refused by SQS and parked instead.
        parked: usize,
    },
    /// Unreadable: sent to the failure queue with the reason.
    Poison {
        /// Why it could not be read.
        reason: String,
    },
    /// A record only a misconfigured stream or table produces (an INSERT without
    /// `NewImage`): parked in the failure queue with its keys, logged as an error and
    /// counted (`RelayMisconfigured`), so nothing is lost and the alarm fires.
    Misconfigured {
        /// What is wrong and how to recover.
        reason: String,
    },
}

/// What a stream record holds, decided from the record alone (no I/O).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reading {
    /// A MODIFY or REMOVE, or an INSERT of an item that is not an outbox item.
    Ignored,
    /// A record that cannot become an event; the reason says why.
    Poison(String),
    /// A record only a misconfigured stream produces; the reason says what to fix.
    Misconfigured(String),
    /// An event to fan out.
    Event(Box<Event>),
}

/// Reads one stream record: only an INSERT of an item whose `tern_record` is
/// [`OUTBOX_RECORD_KIND`] is an event. MODIFY and REMOVE (including TTL clean-up) and
/// items of other kinds (a shared table) are ignored; an unknown event name or an
/// outbox item that does not have the outbox shape or fails validation is poison; an
/// INSERT without a new image means the stream does not carry `NEW_IMAGE` (it is
/// `KEYS_ONLY` or `OLD_IMAGE`): misconfiguration, since no item can be relayed then.
pub fn read_record(record: &EventRecord, max_payload: usize) -> Reading {
    match record.event_name.as_str() {
        "INSERT" => {}
        // The event source mapping filters these out; the check stays for local mode
        // and for a mapping created without the filter.
        "MODIFY" | "REMOVE" => return Reading::Ignored,
        _ => {
            return Reading::Poison(
                "eventName is not INSERT, MODIFY or REMOVE (the only DynamoDB stream event names)"
                    .to_owned(),
            );
        }
    }
    let image = &record.change.new_image;
    if image.is_empty() {
        let view = record
            .change
            .stream_view_type
            .as_ref()
            .and_then(|v| serde_json::to_value(v).ok())
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_else(|| "not given".to_owned());
        return Reading::Misconfigured(format!(
            "INSERT without NewImage (stream view type {view}): the outbox stream must be NEW_IMAGE; \
             once it is, re-read the item by its keys and write it again"
        ));
    }
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

/// Parses one record of a Lambda stream event, requiring only what Tern uses:
/// `eventName`, `dynamodb.SequenceNumber` (to report a retry), `dynamodb.Keys` (to name
/// the item) and, for an INSERT, a readable `dynamodb.NewImage`. Every other field (such
/// as `SizeBytes`, `ApproximateCreationDateTime`, `StreamViewType`, `userIdentity`,
/// `awsRegion`) may be missing, null or of an unexpected shape: it is kept when it
/// reads and left at its default otherwise. (`aws_lambda_events`' own deserializer
/// requires `SizeBytes` and a numeric `ApproximateCreationDateTime`, which real records
/// do not always have.)
///
/// A record that still does not parse is poison for that record alone: the handler
/// parks it as received instead of failing the whole batch and blocking the shard.
///
/// # Errors
/// The reason, as text starting "stream record does not parse".
pub fn parse_record(raw: &Value) -> Result<EventRecord, String> {
    let fail = |why: String| format!("stream record does not parse: {why}");
    let obj = raw
        .as_object()
        .ok_or_else(|| fail("not a JSON object".into()))?;
    let change = obj
        .get("dynamodb")
        .and_then(Value::as_object)
        .ok_or_else(|| fail("no `dynamodb` object".into()))?;
    let text = |map: &Map<String, Value>, key: &str| {
        map.get(key).and_then(Value::as_str).map(str::to_owned)
    };
    let event_name = text(obj, "eventName").ok_or_else(|| fail("no `eventName` string".into()))?;
    let sequence = text(change, "SequenceNumber")
        .ok_or_else(|| fail("no `dynamodb.SequenceNumber` string".into()))?;
    let item = |key: &str| -> Result<serde_dynamo::Item, String> {
        match change.get(key) {
            None | Some(Value::Null) => Ok(serde_dynamo::Item::default()),
            Some(v) => serde_json::from_value(v.clone())
                .map_err(|e| fail(format!("`dynamodb.{key}`: {e}"))),
        }
    };
    let keys = match change.get("Keys") {
        Some(Value::Object(_)) => item("Keys")?,
        _ => return Err(fail("no `dynamodb.Keys` object".into())),
    };
    // The new image is read only where it is used: an unreadable image of a MODIFY or
    // REMOVE is ignored with the record.
    let new_image = if event_name == "INSERT" {
        item("NewImage")?
    } else {
        item("NewImage").unwrap_or_default()
    };
    let mut record = EventRecord::default();
    record.event_name = event_name;
    record.event_id = text(obj, "eventID").unwrap_or_default();
    record.aws_region = text(obj, "awsRegion").unwrap_or_default();
    record.event_source = text(obj, "eventSource");
    record.event_version = text(obj, "eventVersion");
    record.event_source_arn = text(obj, "eventSourceARN");
    record.record_format = text(obj, "recordFormat");
    record.table_name = text(obj, "tableName");
    record.user_identity = obj
        .get("userIdentity")
        .and_then(|v| serde_json::from_value(v.clone()).ok());
    record.change.sequence_number = Some(sequence);
    record.change.keys = keys;
    record.change.new_image = new_image;
    record.change.old_image = item("OldImage").unwrap_or_default();
    record.change.size_bytes = change.get("SizeBytes").and_then(Value::as_i64).unwrap_or(0);
    record.change.stream_view_type = change
        .get("StreamViewType")
        .and_then(|v| serde_json::from_value(v.clone()).ok());
    if let Some(at) = change
        .get("ApproximateCreationDateTime")
        .and_then(Value::as_f64)
        .and_then(|secs| chrono::DateTime::from_timestamp_millis((secs * 1000.0) as i64))
    {
        record.change.approximate_creation_date_time = at;
    }
    Ok(record)
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
    poison_body_value(&raw_record(record), reason)
}

/// [`poison_body`] for a record as raw JSON (one that may not even parse).
pub fn poison_body_value(raw: &Value, reason: &str) -> String {
    parked_body(raw, reason, &Map::new())
}

/// SQS refuses the characters U+FFFE and U+FFFF in a body (its allowed set is XML's);
/// serde_json writes them raw. Inside a JSON string their `\u` escape means the same, and
/// in serialized JSON they can only occur inside strings, so the body stays equal.
fn sqs_safe(json: String) -> String {
    if json.contains(['\u{FFFE}', '\u{FFFF}']) {
        json.replace('\u{FFFE}', "\\ufffe")
            .replace('\u{FFFF}', "\\uffff")
    } else {
        json
    }
}

/// A failure-queue body: `context` (e.g. the endpoint and event of a refused delivery)
/// plus the reason and the record, slimmed to fit [`POISON_BODY_LIMIT_BYTES`].
fn parked_body(raw: &Value, reason: &str, context: &Map<String, Value>) -> String {
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
        for (k, v) in context {
            b[k] = v.clone();
        }
        sqs_safe(b.to_string())
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
    minimal_body(raw, reason, context)
}

/// A failure-queue body with only what names the record: for a record whose keys do not
/// fit (a hostile record), or a body the failure queue refused.
fn minimal_body(raw: &Value, reason: &str, context: &Map<String, Value>) -> String {
    let mut minimal = json!({
        "source": "tern-relay",
        "reason": reason,
        "record_truncated": "record removed: larger than the failure queue's size limit, or refused by it",
    });
    for (k, v) in [
        ("event_id", raw.get("eventID")),
        ("sequence_number", raw.pointer("/dynamodb/SequenceNumber")),
    ] {
        if let Some(s) = v.and_then(Value::as_str).filter(|s| s.len() <= 1024) {
            minimal[k] = json!(s);
        }
    }
    for (k, v) in context {
        minimal[k] = v.clone();
    }
    sqs_safe(minimal.to_string())
}

/// Handles one stream batch. Returns the partial batch response (empty when every record
/// was handled, else the first record to retry) and the outcome of every record before
/// that one.
pub async fn handle(
    deps: &RelayDeps,
    event: StreamEvent,
    metrics: &Metrics,
) -> (DynamoDbEventResponse, Vec<RecordOutcome>) {
    let records = event
        .records
        .into_iter()
        .map(|r| (raw_record(&r), Ok(r)))
        .collect();
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
            // The raw JSON is kept so a parked record is exactly as received.
            .map(|raw| (raw.clone(), parse_record(raw)))
            .collect(),
        // No record list at all: park the whole event, there is nothing to checkpoint.
        _ => vec![(event, Err("stream event has no Records array".to_owned()))],
    };
    handle_records(deps, records, metrics).await
}

/// What the relay does with one record, decided before anything is sent.
enum Plan {
    Ignore,
    Park {
        reason: String,
        kind: ParkKind,
    },
    Deliver {
        event: Box<Event>,
        endpoints: Vec<EndpointId>,
    },
}

/// Why something is parked in the failure queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ParkKind {
    /// The record cannot be read.
    Poison,
    /// The record shows a misconfigured stream.
    Misconfigured,
    /// SQS refused one delivery message (sender fault).
    Refused,
}

impl ParkKind {
    /// The `tern-reason` attribute of the failure-queue message.
    fn attribute(self) -> &'static str {
        match self {
            Self::Poison => "unreadable_outbox_record",
            Self::Misconfigured => "misconfigured_stream",
            Self::Refused => "refused_delivery_message",
        }
    }
}

/// One delivery message of a batch and the record it came from.
struct Pending {
    record: usize,
    endpoint: EndpointId,
    entry: QueueEntry,
}

/// The batch in three steps: plan every record (reads, endpoint look-ups), send every
/// delivery message of the batch packed into full `SendMessageBatch` calls, then, in
/// stream order, park what must be parked and settle each record. The first record
/// that failed transiently (an endpoint look-up, a delivery entry after its retries, a
/// park) is reported; Lambda checkpoints every record before it and retries from it, so
/// records before it must be complete, and records at or after it may have been sent
/// already (the sender's claim stops a second POST).
async fn handle_records(
    deps: &RelayDeps,
    records: Vec<(Value, Result<EventRecord, String>)>,
    metrics: &Metrics,
) -> (DynamoDbEventResponse, Vec<RecordOutcome>) {
    let (plans, stop) = plan_records(deps, &records).await;
    let pending = delivery_entries(&plans);
    let entries: Vec<QueueEntry> = pending.iter().map(|p| p.entry.clone()).collect();
    let (results, retried) = send_packed(deps.delivery_queue.as_ref(), &entries).await;
    let enqueued = results.iter().filter(|r| r.is_ok()).count();
    metrics.update(|c| {
        c.deliveries_enqueued += enqueued as u64;
        c.relay_send_retries += retried;
    });
    let mut first_failure = first_failed_record(
        stop,
        pending
            .iter()
            .zip(&results)
            .filter(|(_, r)| matches!(r, Err(PortError::Unavailable(_))))
            .map(|(p, r)| (p.record, r.as_ref().err().map(ToString::to_string))),
    );

    let mut outcomes = Vec::with_capacity(plans.len());
    for (i, plan) in plans.iter().enumerate() {
        if first_failure.as_ref().is_some_and(|(f, _)| i >= *f) {
            break;
        }
        let raw = &records[i].0;
        let refused = pending
            .iter()
            .zip(&results)
            .filter(|(p, _)| p.record == i)
            .filter_map(|(p, r)| match r {
                Err(PortError::Rejected(why)) => Some((&p.endpoint, why.as_str())),
                _ => None,
            });
        match settle(deps, raw, plan, refused, metrics).await {
            Ok(outcome) => outcomes.push(outcome),
            Err(e) => first_failure = Some((i, e.to_string())),
        }
    }

    let mut response = DynamoDbEventResponse::default();
    if let Some((i, error)) = first_failure {
        let raw = &records[i].0;
        let event_id = raw
            .get("eventID")
            .and_then(Value::as_str)
            .unwrap_or_default();
        tracing::warn!(%error, %event_id, "relay stopped; the batch is retried from this record");
        let mut failure = DynamoDbBatchItemFailure::default();
        failure.item_identifier = raw
            .pointer("/dynamodb/SequenceNumber")
            .and_then(Value::as_str)
            .map(str::to_owned);
        response.batch_item_failures.push(failure);
    }
    (response, outcomes)
}

/// Plans each record in order. An endpoint look-up that fails stops planning: the
/// returned index is that record's, with the error.
async fn plan_records(
    deps: &RelayDeps,
    records: &[(Value, Result<EventRecord, String>)],
) -> (Vec<Plan>, Option<(usize, String)>) {
    let mut plans = Vec::with_capacity(records.len());
    let mut tenants: HashMap<TenantId, Vec<Endpoint>> = HashMap::new();
    for (i, (_, record)) in records.iter().enumerate() {
        let reading = match record {
            Ok(record) => read_record(record, deps.max_payload_bytes),
            Err(reason) => Reading::Poison(reason.clone()),
        };
        plans.push(match reading {
            Reading::Ignored => Plan::Ignore,
            Reading::Poison(reason) => Plan::Park {
                reason,
                kind: ParkKind::Poison,
            },
            Reading::Misconfigured(reason) => Plan::Park {
                reason,
                kind: ParkKind::Misconfigured,
            },
            Reading::Event(event) => match subscribers(deps, &event, &mut tenants).await {
                Ok(endpoints) => Plan::Deliver { event, endpoints },
                Err(e) => return (plans, Some((i, e.to_string()))),
            },
        });
    }
    (plans, None)
}

/// The endpoints of the event's tenant that subscribe to it, enabled or not, looked up
/// once per tenant and batch. A disabled endpoint gets its deliveries too: the sender
/// dead-letters them `endpoint_disabled` (with a row in the attempt log), so they can be
/// replayed once it is enabled, instead of vanishing.
async fn subscribers(
    deps: &RelayDeps,
    event: &Event,
    tenants: &mut HashMap<TenantId, Vec<Endpoint>>,
) -> Result<Vec<EndpointId>, PortError> {
    if !tenants.contains_key(&event.tenant_id) {
        let list = deps.endpoints.list_for_tenant(&event.tenant_id).await?;
        tenants.insert(event.tenant_id.clone(), list);
    }
    Ok(tenants
        .get(&event.tenant_id)
        .map(|l| {
            l.iter()
                .filter(|e| e.subscribes(event))
                .map(|e| e.id.clone())
                .collect()
        })
        .unwrap_or_default())
}

/// Every delivery message of the planned batch, in stream order; entry ids are
/// `r<record>e<n>`, unique within the batch (so within any call) and within the SQS id
/// rules (`[A-Za-z0-9_-]`, at most 80 characters).
fn delivery_entries(plans: &[Plan]) -> Vec<Pending> {
    let mut out = Vec::new();
    for (record, plan) in plans.iter().enumerate() {
        if let Plan::Deliver { event, endpoints } = plan {
            for (n, endpoint) in endpoints.iter().enumerate() {
                let message = DeliveryMessage::first(event.as_ref().clone(), endpoint.clone());
                out.push(Pending {
                    record,
                    endpoint: endpoint.clone(),
                    entry: QueueEntry {
                        id: format!("r{record}e{n}"),
                        body: message.to_body(),
                        delay_seconds: 0,
                        attributes: vec![],
                        group_id: Some(message.group_id()),
                    },
                });
            }
        }
    }
    out
}

/// The first record to report: the lowest of the record where planning stopped and the
/// records with an entry that finally failed transiently, with the error.
fn first_failed_record(
    stop: Option<(usize, String)>,
    failed_entries: impl Iterator<Item = (usize, Option<String>)>,
) -> Option<(usize, String)> {
    let entry = failed_entries
        .min_by_key(|(record, _)| *record)
        .map(|(record, e)| (record, e.unwrap_or_default()));
    match (stop, entry) {
        (Some(s), Some(e)) => Some(if e.0 < s.0 { e } else { s }),
        (s, e) => s.or(e),
    }
}

/// Sends `entries` packed into as few `SendMessageBatch` calls as the limits allow
/// ([`sqs_batches`]), then sends again, alone, the entries that failed transiently, up to
/// [`SEND_ATTEMPTS`] calls per entry with [`RETRY_BACKOFF_MS`] between rounds. Returns
/// each entry's final result, in order, and how many entry sends were retries.
async fn send_packed(
    queue: &dyn MessageQueue,
    entries: &[QueueEntry],
) -> (Vec<Result<(), PortError>>, u64) {
    let mut results: Vec<Result<(), PortError>> = vec![Ok(()); entries.len()];
    let mut todo: Vec<usize> = (0..entries.len()).collect();
    let mut retried = 0;
    for round in 0..SEND_ATTEMPTS {
        if todo.is_empty() {
            break;
        }
        if round > 0 {
            retried += todo.len() as u64;
            tokio::time::sleep(Duration::from_millis(RETRY_BACKOFF_MS[round - 1])).await;
        }
        let batch: Vec<QueueEntry> = todo.iter().map(|&i| entries[i].clone()).collect();
        let mut again = Vec::new();
        let mut at = 0;
        for call in sqs_batches(&batch) {
            for result in send_call(queue, call).await {
                let i = todo[at];
                at += 1;
                if matches!(result, Err(PortError::Unavailable(_))) {
                    again.push(i);
                }
                results[i] = result;
            }
        }
        todo = again;
    }
    (results, retried)
}

/// One `SendMessageBatch` call, answered per entry. A failed call fails each entry with
/// its error; a call refused as a whole (a sender fault of the request, which no entry
/// can be blamed for from the answer) is split so each entry gets its own verdict.
async fn send_call(queue: &dyn MessageQueue, call: &[QueueEntry]) -> Vec<Result<(), PortError>> {
    match queue.send_batch(call).await {
        Ok(results) if results.len() == call.len() => results,
        Ok(results) => {
            let why = format!(
                "SendMessageBatch answered {} results for {} entries",
                results.len(),
                call.len()
            );
            vec![Err(PortError::Unavailable(why)); call.len()]
        }
        Err(PortError::Rejected(_)) if call.len() > 1 => {
            let mut out = Vec::with_capacity(call.len());
            for entry in call {
                let one = std::slice::from_ref(entry);
                out.push(match queue.send_batch(one).await {
                    Ok(mut r) if r.len() == 1 => r.pop().unwrap_or(Ok(())),
                    Ok(_) => Err(PortError::Unavailable(
                        "SendMessageBatch answered no result for the entry".into(),
                    )),
                    Err(e) => Err(e),
                });
            }
            out
        }
        Err(e) => vec![Err(e); call.len()],
    }
}

/// Finishes one record before the first failure: parks what must be parked and says
/// what happened. An error is a failure to park (the failure queue is unavailable).
async fn settle<'a>(
    deps: &RelayDeps,
    raw: &Value,
    plan: &Plan,
    refused: impl Iterator<Item = (&'a EndpointId, &'a str)>,
    metrics: &Metrics,
) -> Result<RecordOutcome, PortError> {
    let stream_event_id = raw
        .get("eventID")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match plan {
        Plan::Ignore => Ok(RecordOutcome::Ignored),
        Plan::Park { reason, kind } => {
            // The reason names the rule broken, never the payload, so it is safe to log.
            if *kind == ParkKind::Misconfigured {
                tracing::error!(%reason, event_id = %stream_event_id, "misconfigured outbox stream: record parked in the relay-failure queue");
                metrics.update(|c| c.relay_misconfigured += 1);
            } else {
                tracing::error!(%reason, event_id = %stream_event_id, "poison outbox record parked in the relay-failure queue");
            }
            park(deps, raw, reason, *kind, &Map::new(), metrics).await?;
            Ok(match kind {
                ParkKind::Misconfigured => RecordOutcome::Misconfigured {
                    reason: reason.clone(),
                },
                _ => RecordOutcome::Poison {
                    reason: reason.clone(),
                },
            })
        }
        Plan::Deliver { event, endpoints } => {
            let mut parked = 0;
            for (endpoint, why) in refused {
                let reason = format!("delivery queue refused the message: {why}");
                tracing::error!(%reason, event_id = %event.id, endpoint_id = %endpoint, "delivery message parked in the relay-failure queue");
                let mut context = Map::new();
                context.insert("endpoint_id".into(), json!(endpoint.as_str()));
                context.insert("tern_event_id".into(), json!(event.id.as_str()));
                park(deps, raw, &reason, ParkKind::Refused, &context, metrics).await?;
                parked += 1;
            }
            let deliveries = endpoints.len() - parked;
            metrics.update(|c| c.events_relayed += 1);
            tracing::info!(event_id = %event.id, event_type = %event.event_type, deliveries, parked, "relayed");
            Ok(RecordOutcome::Relayed { deliveries, parked })
        }
    }
}

fn raw_record(record: &EventRecord) -> Value {
    serde_json::to_value(record).unwrap_or(Value::Null)
}

/// Puts one body on the failure queue. When the queue refuses it (a sender fault: too
/// large for a queue with a smaller `MaximumMessageSize`, a character SQS refuses), the
/// minimal body that still names the record is sent instead, so a park cannot block the
/// shard.
async fn park(
    deps: &RelayDeps,
    raw: &Value,
    reason: &str,
    kind: ParkKind,
    context: &Map<String, Value>,
    metrics: &Metrics,
) -> Result<(), PortError> {
    let entry = |body: String| QueueEntry {
        id: "parked".into(),
        body,
        delay_seconds: 0,
        attributes: vec![("tern-reason".into(), kind.attribute().into())],
        // The failure queue is not the delivery queue: no tenant to be fair between.
        group_id: None,
    };
    match deps
        .failure_queue
        .send(&entry(parked_body(raw, reason, context)))
        .await
    {
        Err(PortError::Rejected(why)) => {
            tracing::warn!(error = %why, "the failure queue refused the parked record; parking its names only");
            deps.failure_queue
                .send(&entry(minimal_body(raw, reason, context)))
                .await?;
        }
        other => other?,
    }
    metrics.update(|c| c.relay_parked += 1);
    Ok(())
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
            group_id: None,
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

    fn event(id: &str) -> Box<Event> {
        let record: OutboxRecord = serde_json::from_value(json!({
            "event_id": id, "tern_record": "outbox_event", "schema_version": 1,
            "event_type": "order.paid", "tenant_id": "tnt_a",
            "created_at": "2026-01-01T00:00:00.000Z", "payload": "{}", "expires_at": 1767830400
        }))
        .unwrap();
        Box::new(record.into_event(1024).unwrap())
    }

    fn deliver(id: &str, endpoints: &[&str]) -> Plan {
        Plan::Deliver {
            event: event(id),
            endpoints: endpoints
                .iter()
                .map(|e| EndpointId::new(*e).unwrap())
                .collect(),
        }
    }

    #[test]
    fn entries_of_a_batch_keep_stream_order_and_distinct_ids() {
        let plans = vec![
            deliver("evt_a", &["ep_1", "ep_2"]),
            Plan::Ignore,
            deliver("evt_b", &["ep_1"]),
        ];
        let pending = delivery_entries(&plans);
        let got: Vec<(usize, &str, &str)> = pending
            .iter()
            .map(|p| (p.record, p.endpoint.as_str(), p.entry.id.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, "ep_1", "r0e0"),
                (0, "ep_2", "r0e1"),
                (2, "ep_1", "r2e0")
            ]
        );
    }

    #[test]
    fn the_lowest_failed_record_is_reported() {
        let stop = |i: usize| Some((i, "lookup".to_owned()));
        let failed = |v: Vec<usize>| v.into_iter().map(|i| (i, Some(format!("entry {i}"))));
        assert_eq!(first_failed_record(None, failed(vec![])), None);
        assert_eq!(
            first_failed_record(None, failed(vec![23, 7, 30])),
            Some((7, "entry 7".to_owned()))
        );
        assert_eq!(
            first_failed_record(stop(5), failed(vec![7])),
            Some((5, "lookup".to_owned()))
        );
        assert_eq!(
            first_failed_record(stop(9), failed(vec![7])),
            Some((7, "entry 7".to_owned()))
        );
    }

    /// Fails, per call, the entries whose id is listed for that call; refuses as a whole
    /// any call holding the id `whole`.
    struct Script {
        fail: Vec<Vec<&'static str>>,
        calls: std::sync::Mutex<Vec<Vec<String>>>,
    }

    #[async_trait::async_trait]
    impl MessageQueue for Script {
        async fn send_batch(
            &self,
            entries: &[QueueEntry],
        ) -> Result<Vec<Result<(), PortError>>, PortError> {
            let mut calls = self.calls.lock().unwrap();
            let n = calls.len();
            calls.push(entries.iter().map(|e| e.id.clone()).collect());
            if entries.len() > 1 && entries.iter().any(|e| e.id == "whole") {
                return Err(PortError::Rejected("BatchRequestTooLong".into()));
            }
            let fail = self.fail.get(n).cloned().unwrap_or_default();
            Ok(entries
                .iter()
                .map(|e| match e.id.as_str() {
                    "whole" => Err(PortError::Rejected("too long".into())),
                    id if fail.contains(&id) => Err(PortError::Unavailable("x".into())),
                    _ => Ok(()),
                })
                .collect())
        }
        async fn send(&self, _: &QueueEntry) -> Result<(), PortError> {
            Ok(())
        }
    }

    fn named(ids: &[&str]) -> Vec<QueueEntry> {
        ids.iter()
            .map(|id| QueueEntry {
                id: (*id).into(),
                ..entry(1)
            })
            .collect()
    }

    #[tokio::test]
    async fn only_transiently_failed_entries_are_sent_again() {
        let q = Script {
            fail: vec![vec!["b", "c"], vec!["c"]],
            calls: Default::default(),
        };
        let (results, retried) = send_packed(&q, &named(&["a", "b", "c", "d"])).await;
        assert_eq!(results, vec![Ok(()); 4]);
        assert_eq!(retried, 3);
        assert_eq!(
            *q.calls.lock().unwrap(),
            vec![vec!["a", "b", "c", "d"], vec!["b", "c"], vec!["c"]]
        );
    }

    #[tokio::test]
    async fn a_call_refused_as_a_whole_is_split_to_find_the_entry() {
        let q = Script {
            fail: vec![],
            calls: Default::default(),
        };
        let (results, retried) = send_packed(&q, &named(&["a", "whole", "c"])).await;
        assert_eq!(retried, 0);
        assert!(results[0].is_ok() && results[2].is_ok());
        assert!(matches!(results[1], Err(PortError::Rejected(_))));
    }

    fn raw(change: Value) -> Value {
        json!({"eventID": "e1", "eventName": "INSERT", "dynamodb": change})
    }

    #[test]
    fn only_the_fields_tern_uses_are_required() {
        let keys = json!({"event_id": {"S": "evt_a"}});
        let minimal = raw(json!({"SequenceNumber": "1", "Keys": keys}));
        assert!(parse_record(&minimal).is_ok());
        let nulls = raw(json!({
            "SequenceNumber": "1", "Keys": keys, "SizeBytes": null,
            "ApproximateCreationDateTime": null, "StreamViewType": null,
            "NewImage": null, "OldImage": null
        }));
        assert!(parse_record(&nulls).is_ok());
        for (without, field) in [
            (raw(json!({"Keys": keys})), "SequenceNumber"),
            (raw(json!({"SequenceNumber": "1"})), "Keys"),
            (
                json!({"dynamodb": {"SequenceNumber": "1", "Keys": keys}}),
                "eventName",
            ),
        ] {
            let err = parse_record(&without).unwrap_err();
            assert!(err.contains(field), "{err}");
        }
    }

    #[test]
    fn an_insert_without_a_new_image_is_misconfiguration() {
        let keys = json!({"event_id": {"S": "evt_a"}});
        let record = parse_record(&raw(json!({
            "SequenceNumber": "1", "Keys": keys, "StreamViewType": "KEYS_ONLY"
        })))
        .unwrap();
        assert!(matches!(
            read_record(&record, 1024),
            Reading::Misconfigured(r) if r.contains("KEYS_ONLY")
        ));
    }

    #[test]
    fn parked_bodies_carry_no_character_sqs_refuses() {
        let record =
            json!({"eventID": "e\u{FFFF}", "dynamodb": {"Keys": {"k": {"S": "\u{FFFE}"}}}});
        let body = poison_body_value(&record, "r");
        assert!(!body.contains(['\u{FFFE}', '\u{FFFF}']));
        let back: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(back["record"], record);
    }
}
