//! The relay: DynamoDB stream batch of outbox items -> one delivery message per
//! (event, subscribed endpoint) on the delivery queue.
//!
//! Only INSERTs of Tern outbox items matter; MODIFY, REMOVE (including TTL clean-up) and
//! other items are acknowledged and ignored. A record that cannot be read is poison, and
//! an INSERT without a new image shows a misconfigured stream: either goes to the relay's
//! failure queue with the whole record (the latter also logged as an error and counted
//! for its alarm) and the batch goes on.
//!
//! Every subscribed endpoint gets its message, enabled or not: the sender dead-letters a
//! delivery to a disabled endpoint as `endpoint_disabled`, so nothing vanishes.
//!
//! The delivery messages of all records of a batch are packed into full
//! `SendMessageBatch` calls (10 entries, 1 MiB), built call by call and sent a bounded
//! number of calls at a time ([`crate::relay_send`]): memory stays bounded whatever the
//! fan-out. An entry SQS fails transiently is sent again, a bounded number of times
//! within the invocation; an entry SQS refuses (sender fault) is parked alone, naming its
//! endpoint. The first record left unfinished (endpoint table or queue unavailable, or
//! the invocation's deadline near) is reported by its `SequenceNumber`, so Lambda retries
//! from there (partial batch response); records before it are checkpointed and never
//! sent again. A large fan-out cut short by the deadline also records how far it got
//! ([`tern_core::fanout`]), so the retry sends only the rest.

use std::collections::HashMap;
use std::sync::Arc;

use aws_lambda_events::dynamodb::{Event as StreamEvent, EventRecord};
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use serde_json::{Map, Value, json};
use tern_core::fanout::{CHECKPOINT_MIN_FANOUT, FanOutCheckpoints};
use tern_core::outbox::{KIND_ATTRIBUTE, OUTBOX_RECORD_KIND, OutboxRecord};
use tern_core::ports::{EndpointStore, MessageQueue, PortError, QueueEntry};
use tern_core::spread::LedgerLayout;
use tern_core::{Endpoint, EndpointId, Event, TenantId, TraceContext};
use tokio::time::Instant;

use crate::metrics::Metrics;
use crate::relay_send::{CHECKPOINT_RESERVE, FanOut, PARK_RESERVE, Stops, send_fan_outs};
pub use crate::relay_send::{
    DRAIN_RESERVE, MAX_CONCURRENT_SENDS, RETRY_BACKOFF_MS, SEND_ATTEMPTS, SEND_RESERVE,
    SQS_BATCH_LIMIT, SQS_BATCH_MAX_BYTES, sqs_batches,
};
use crate::telemetry;

/// What the relay needs.
#[derive(Clone)]
pub struct RelayDeps {
    /// Endpoint registry. The Lambda and local mode wire it behind a
    /// [`crate::subscription_cache::SubscriptionCache`], so a warm relay reads each tenant's
    /// list once per change instead of once per batch.
    pub endpoints: Arc<dyn EndpointStore>,
    /// The delivery queue.
    pub delivery_queue: Arc<dyn MessageQueue>,
    /// The relay's failure destination, for poison records.
    pub failure_queue: Arc<dyn MessageQueue>,
    /// Largest payload accepted, in bytes.
    pub max_payload_bytes: usize,
    /// Where a large fan-out cut short by the deadline records how far it got, and where
    /// its retry reads it; `None` to neither read nor write (every subscribed endpoint
    /// gets the event, as when `tern relay-failures --retry` sends one refused message
    /// again).
    pub checkpoints: Option<Arc<dyn FanOutCheckpoints>>,
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
        Ok(rec) => {
            if let Err(e) = rec.trace_context() {
                // A trace is worth less than a delivery: the event goes on without it.
                tracing::warn!(
                    event = tern_core::outbox::event_id_part(&rec.event_id),
                    tenant = %rec.tenant_id.chars().take(128).collect::<String>(),
                    error = %e,
                    "outbox item's trace context ignored: it is not W3C Trace Context"
                );
            }
            read_event(rec, max_payload)
        }
    }
}

fn read_event(rec: OutboxRecord, max_payload: usize) -> Reading {
    match rec.into_event(max_payload) {
        Ok(event) => Reading::Event(Box::new(event)),
        Err(e) => Reading::Poison(e.to_string()),
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
/// that one. No deadline: see [`handle_before`].
pub async fn handle(
    deps: &RelayDeps,
    event: StreamEvent,
    metrics: &Metrics,
) -> (DynamoDbEventResponse, Vec<RecordOutcome>) {
    handle_before(deps, event, None, metrics).await
}

/// [`handle`] for an invocation that must answer by `deadline` (see
/// [`handle_value_before`]).
pub async fn handle_before(
    deps: &RelayDeps,
    event: StreamEvent,
    deadline: Option<Instant>,
    metrics: &Metrics,
) -> (DynamoDbEventResponse, Vec<RecordOutcome>) {
    let records = event
        .records
        .into_iter()
        .map(|r| (raw_record(&r), Source::Stream(Ok(r))))
        .collect();
    handle_records(deps, records, deadline, metrics).await
}

/// Handles one stream batch given as raw JSON (what the Lambda binary receives), parsing
/// each record on its own so one unparseable record is poison, not a failed batch. No
/// deadline (the `tern` tool's re-drives): see [`handle_value_before`].
pub async fn handle_value(
    deps: &RelayDeps,
    event: Value,
    metrics: &Metrics,
) -> (DynamoDbEventResponse, Vec<RecordOutcome>) {
    handle_value_before(deps, event, None, metrics).await
}

/// [`handle_value`] for an invocation that must answer by `deadline` (the Lambda
/// context's deadline, or the local poller's own). No `SendMessageBatch` call starts
/// later than [`SEND_RESERVE`] (8 s) before it; the record whose fan-out was cut short is
/// reported so Lambda retries from it, and when it has at least
/// [`CHECKPOINT_MIN_FANOUT`] subscribed endpoints, how far it got is written to
/// [`RelayDeps::checkpoints`], so the retry sends only the rest.
pub async fn handle_value_before(
    deps: &RelayDeps,
    event: Value,
    deadline: Option<Instant>,
    metrics: &Metrics,
) -> (DynamoDbEventResponse, Vec<RecordOutcome>) {
    let records = match event {
        Value::Object(mut event) => match event.remove("Records") {
            Some(Value::Array(records)) => records
                .into_iter()
                // The raw JSON is kept so a parked record is exactly as received.
                .map(|raw| {
                    let parsed = parse_record(&raw);
                    (raw, Source::Stream(parsed))
                })
                .collect(),
            // No record list at all: park the whole event, there is nothing to checkpoint.
            other => {
                if let Some(v) = other {
                    event.insert("Records".into(), v);
                }
                vec![(
                    Value::Object(event),
                    Source::Stream(Err("stream event has no Records array".to_owned())),
                )]
            }
        },
        other => vec![(
            other,
            Source::Stream(Err("stream event has no Records array".to_owned())),
        )],
    };
    handle_records(deps, records, deadline, metrics).await
}

/// Relays events read from another outbox than the DynamoDB stream (the PostgreSQL
/// relay's claimed rows), with the stream relay's fan-out: the same delivery messages,
/// packed into the same `SendMessageBatch` calls with the same bounded memory, the same
/// fan-out checkpoints and ledger layouts, the same parking of a message SQS refuses.
/// Each event comes with the JSON that names its source (its row: `{"outbox":
/// "postgres", "seq": .., "tenant_id": .., "event_id": ..}`), put in the failure-queue
/// body of a refused message and in log lines.
///
/// Returns the outcome of each event settled, in order (every one a
/// [`RecordOutcome::Relayed`]: each of its messages accepted by SQS or parked), and the
/// first event left unfinished with the reason (a subscription look-up or a send failed,
/// or the deadline came first: [`handle_value_before`] says how the deadline is kept).
/// Events from that one on are not settled and must be relayed again (the sender's claim
/// stops a second POST of a message sent twice; a large fan-out's checkpoint, written
/// here, stops the second message).
pub async fn relay_events_before(
    deps: &RelayDeps,
    events: Vec<(Value, Box<Event>)>,
    deadline: Option<Instant>,
    metrics: &Metrics,
) -> (Vec<RecordOutcome>, Option<(usize, String)>) {
    let records = events
        .into_iter()
        .map(|(names, event)| (names, Source::Event(event)))
        .collect();
    let (_, outcomes, failure) = relay_records(deps, records, deadline, metrics).await;
    (outcomes, failure)
}

/// Where a record to relay comes from.
// A stream record is held unboxed, as before this enum: one per record of a batch, no
// extra allocation each.
#[allow(clippy::large_enum_variant)]
enum Source {
    /// A DynamoDB stream record, parsed or not ([`parse_record`]).
    Stream(Result<EventRecord, String>),
    /// An event another outbox already read and validated (PostgreSQL).
    Event(Box<Event>),
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
        /// The endpoints to send it to in this invocation, sorted by id: every subscribed
        /// endpoint, less those an earlier invocation's checkpoint covers.
        endpoints: Vec<EndpointId>,
        /// How many endpoints subscribe (before the checkpoint).
        subscribed: usize,
        /// The ledger layout of the event's messages (`tern_core::spread`): chosen by the
        /// relay that began the fan-out, kept by every invocation that resumes it.
        layout: LedgerLayout,
        /// The fan-out's span, when tracing is on: its context is the parent of every
        /// delivery's spans. Ended when the record is settled (or dropped with the plan).
        span: FanOutSpan,
    },
}

/// The span of one event's fan-out ([`crate::telemetry`]), ended once.
/// Boxed: the span is large, and most plans (tracing off) hold none.
struct FanOutSpan(std::sync::Mutex<Option<Box<opentelemetry_sdk::trace::Span>>>);

impl FanOutSpan {
    /// Starts the span of `event`'s fan-out to `endpoints` endpoints, child of the
    /// application's span; an empty one when tracing is off.
    fn start(event: &Event, endpoints: usize) -> Self {
        use opentelemetry::KeyValue;
        use telemetry::keys;
        let span = telemetry::tracer().and_then(|_| {
            telemetry::start(
                "fan-out",
                opentelemetry::trace::SpanKind::Producer,
                event.trace.as_ref(),
                None,
                vec![
                    KeyValue::new(keys::EVENT_ID, event.id.to_string()),
                    KeyValue::new(keys::EVENT_TYPE, event.event_type.to_string()),
                    KeyValue::new(keys::TENANT_ID, event.tenant_id.to_string()),
                    KeyValue::new(keys::FANOUT_ENDPOINTS, endpoints as i64),
                    KeyValue::new("messaging.system", "aws_sqs"),
                    KeyValue::new("messaging.operation.type", "send"),
                ],
                vec![],
            )
        });
        Self(std::sync::Mutex::new(span.map(Box::new)))
    }

    /// The context every delivery message of the fan-out carries.
    fn context(&self) -> Option<TraceContext> {
        use opentelemetry::trace::Span as _;
        let guard = self.0.lock().ok()?;
        guard
            .as_ref()
            .and_then(|s| telemetry::trace_context_of(s.span_context()))
    }

    /// Ends the span with what was sent and parked.
    fn finish(&self, deliveries: usize, parked: usize) {
        use opentelemetry::KeyValue;
        use opentelemetry::trace::Span as _;
        if let Ok(mut guard) = self.0.lock()
            && let Some(mut span) = guard.take()
        {
            span.set_attribute(KeyValue::new(
                "messaging.batch.message_count",
                deliveries as i64,
            ));
            span.set_attribute(KeyValue::new("tern.fanout.parked", parked as i64));
            span.end();
        }
    }
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

/// The batch in three steps: plan every record (reads, endpoint look-ups, checkpoints),
/// send every delivery message of the batch ([`send_fan_outs`]), then, in stream order,
/// park what must be parked and settle each record. The first record left unfinished (an
/// endpoint look-up failed, a delivery entry failed after its retries, a park failed, or
/// the deadline came first) is reported; Lambda checkpoints every record before it and
/// retries from it, so records before it must be complete, and records at or after it may
/// have been sent already (the sender's claim stops a second POST; a large fan-out's
/// checkpoint stops the second message).
async fn handle_records(
    deps: &RelayDeps,
    records: Vec<(Value, Source)>,
    deadline: Option<Instant>,
    metrics: &Metrics,
) -> (DynamoDbEventResponse, Vec<RecordOutcome>) {
    let (raws, outcomes, first_failure) = relay_records(deps, records, deadline, metrics).await;
    let mut response = DynamoDbEventResponse::default();
    if let Some((i, error)) = first_failure {
        let raw = &raws[i];
        let (event_id, stream_record_id) = record_names(raw);
        tracing::warn!(%error, event_id, stream_record_id, "relay stopped; the batch is retried from this record");
        let mut failure = DynamoDbBatchItemFailure::default();
        failure.item_identifier = raw
            .pointer("/dynamodb/SequenceNumber")
            .and_then(Value::as_str)
            .map(str::to_owned);
        response.batch_item_failures.push(failure);
    }
    (response, outcomes)
}

/// [`handle_records`] for any source: returns the raw JSON of every record, the outcome of
/// every record settled, and the first record left unfinished with the reason.
async fn relay_records(
    deps: &RelayDeps,
    records: Vec<(Value, Source)>,
    deadline: Option<Instant>,
    metrics: &Metrics,
) -> (Vec<Value>, Vec<RecordOutcome>, Option<(usize, String)>) {
    let stops = deadline.map(Stops::before);
    let (raws, plans, stop) = plan_records(deps, records, stops).await;
    let mut sent_of = vec![None; plans.len()];
    let fan_outs: Vec<FanOut<'_>> = plans
        .iter()
        .enumerate()
        .filter_map(|(record, plan)| match plan {
            Plan::Deliver {
                event,
                endpoints,
                layout,
                span,
                ..
            } => Some(FanOut {
                record,
                event,
                endpoints,
                layout: *layout,
                trace: span.context(),
            }),
            _ => None,
        })
        .collect();
    for (k, f) in fan_outs.iter().enumerate() {
        sent_of[f.record] = Some(k);
    }
    let (results, retried) = send_fan_outs(deps.delivery_queue.as_ref(), &fan_outs, stops).await;
    drop(fan_outs);
    let enqueued = results
        .iter()
        .flatten()
        .filter(|r| matches!(r, Some(Ok(()))))
        .count();
    metrics.update(|c| {
        c.deliveries_enqueued += enqueued as u64;
        c.relay_send_retries += retried;
    });

    let park_by = deadline.map(|d| d.checked_sub(PARK_RESERVE).unwrap_or(d));
    let mut outcomes = Vec::with_capacity(plans.len());
    let mut first_failure = None;
    for (i, plan) in plans.iter().enumerate() {
        let sent = sent_of[i].map_or(&[][..], |k| results[k].as_slice());
        match settle(deps, &raws[i], plan, sent, park_by, metrics).await {
            Settled::Done(outcome) => outcomes.push(outcome),
            Settled::Stopped { done, error } => {
                if let Plan::Deliver {
                    event,
                    endpoints,
                    subscribed,
                    layout,
                    ..
                } = plan
                {
                    checkpoint(deps, event, endpoints, *subscribed, *layout, done, deadline).await;
                }
                first_failure = Some((i, error));
                break;
            }
        }
    }
    // Planning stopped at a record after every planned one was settled.
    let first_failure = first_failure.or(stop);
    (raws, outcomes, first_failure)
}

/// Records how far a fan-out cut short got (`done` of `endpoints` sent or parked), when it
/// is large enough to be checkpointed ([`CHECKPOINT_MIN_FANOUT`]) and got further than
/// before. A failed write is logged: the retry then sends those messages again, and the
/// sender's claim stops a second POST.
async fn checkpoint(
    deps: &RelayDeps,
    event: &Event,
    endpoints: &[EndpointId],
    subscribed: usize,
    layout: LedgerLayout,
    done: usize,
    deadline: Option<Instant>,
) {
    let (Some(store), Some(through)) = (&deps.checkpoints, done.checked_sub(1)) else {
        return;
    };
    if subscribed < CHECKPOINT_MIN_FANOUT {
        return;
    }
    let through = &endpoints[through];
    let by = deadline.map(|d| d.checked_sub(CHECKPOINT_RESERVE).unwrap_or(d));
    match within(
        by,
        store.write(&event.tenant_id, &event.id, through, layout),
        "the fan-out checkpoint",
    )
    .await
    {
        Ok(()) => tracing::info!(
            event_id = %event.id, through = %through, sent = done, left = endpoints.len() - done,
            "fan-out checkpoint written: the retry sends only the rest"
        ),
        Err(error) => tracing::warn!(
            event_id = %event.id, %error, sent = done,
            "fan-out checkpoint not written: the retry sends these messages again (the sender's claim stops a second POST)"
        ),
    }
}

/// `work`, or [`PortError::Unavailable`] when `by` comes first.
async fn within<T>(
    by: Option<Instant>,
    work: impl std::future::Future<Output = Result<T, PortError>>,
    what: &str,
) -> Result<T, PortError> {
    match by {
        None => work.await,
        Some(by) => tokio::time::timeout_at(by, work).await.unwrap_or_else(|_| {
            Err(PortError::Unavailable(format!(
                "{what} did not finish before the invocation deadline"
            )))
        }),
    }
}

/// Plans each record in order, taking the parsed records (the raw JSON of each is
/// returned, to park or report it). An endpoint look-up or a checkpoint read that fails
/// transiently stops planning, and so does the deadline: the returned index is that
/// record's, with the error.
async fn plan_records(
    deps: &RelayDeps,
    records: Vec<(Value, Source)>,
    stops: Option<Stops>,
) -> (Vec<Value>, Vec<Plan>, Option<(usize, String)>) {
    let mut plans = Vec::with_capacity(records.len());
    let mut raws = Vec::with_capacity(records.len());
    let mut stop = None;
    let mut tenants: HashMap<TenantId, Vec<Endpoint>> = HashMap::new();
    for (i, (raw, record)) in records.into_iter().enumerate() {
        raws.push(raw);
        if stop.is_some() {
            continue;
        }
        if stops.is_some_and(|s| Instant::now() >= s.stop_sending) {
            stop = Some((i, "the invocation deadline is near".to_owned()));
            continue;
        }
        let reading = match record {
            Source::Stream(Ok(record)) => read_record(&record, deps.max_payload_bytes),
            Source::Stream(Err(reason)) => Reading::Poison(reason),
            Source::Event(event) => Reading::Event(event),
        };
        let plan = match reading {
            Reading::Ignored => Plan::Ignore,
            Reading::Poison(reason) => Plan::Park {
                reason,
                kind: ParkKind::Poison,
            },
            Reading::Misconfigured(reason) => Plan::Park {
                reason,
                kind: ParkKind::Misconfigured,
            },
            Reading::Event(event) => match deliver_plan(deps, event, &mut tenants).await {
                Ok(plan) => plan,
                Err(e) => {
                    stop = Some((i, e.to_string()));
                    continue;
                }
            },
        };
        plans.push(plan);
    }
    (raws, plans, stop)
}

/// The event's subscribed endpoints, less those an earlier invocation's checkpoint covers,
/// and the ledger layout of its messages (`tern_core::spread`). A fan-out of at least
/// [`CHECKPOINT_MIN_FANOUT`] endpoints reads its record: an earlier invocation's layout
/// and checkpoint are kept (a record an older build wrote says the fan-out is unsharded:
/// the messages it sends again claim beside the first ones); without a record, this one
/// records the spread over [`tern_core::spread::PAIR_SHARDS`] partitions before any
/// message goes, so the ledger's readers find every partition. A record the store refuses
/// to read or write (no permission, no table) is logged: the event is relayed with its
/// pairs in one partition (readers find them there; only the spread is lost), and every
/// endpoint gets it again (the sender's claim stops a second POST).
async fn deliver_plan(
    deps: &RelayDeps,
    event: Box<Event>,
    tenants: &mut HashMap<TenantId, Vec<Endpoint>>,
) -> Result<Plan, PortError> {
    let mut endpoints = subscribers(deps, &event, tenants).await?;
    let subscribed = endpoints.len();
    // One partition unless the spread is on the event's record, where readers look for it
    // (a relay without checkpoints, `tern relay-failures --retry` of one refused message,
    // writes none).
    let mut layout = LedgerLayout::for_fan_out(1);
    if let Some(store) = deps
        .checkpoints
        .as_ref()
        .filter(|_| subscribed >= CHECKPOINT_MIN_FANOUT)
    {
        match store.read(&event.tenant_id, &event.id).await {
            Ok(Some(record)) => {
                layout = record.layout;
                if let Some(through) = record.through {
                    endpoints.retain(|e| *e > through);
                    tracing::info!(
                        event_id = %event.id, %through, left = endpoints.len(), subscribed,
                        ?layout, "fan-out resumed from its checkpoint"
                    );
                }
            }
            Ok(None) => {
                let wide = LedgerLayout::for_fan_out(subscribed);
                match store.begin(&event.tenant_id, &event.id, wide).await {
                    Ok(()) => layout = wide,
                    Err(e @ PortError::Unavailable(_)) => return Err(e),
                    Err(PortError::Rejected(error)) => tracing::error!(
                        event_id = %event.id, %error,
                        "fan-out record not written: the event's pairs stay in one ledger partition"
                    ),
                }
            }
            Err(e @ PortError::Unavailable(_)) => return Err(e),
            Err(PortError::Rejected(error)) => tracing::error!(
                event_id = %event.id, %error,
                "fan-out checkpoint unreadable: relaying to every subscribed endpoint, its pairs in one ledger partition"
            ),
        }
    }
    let span = FanOutSpan::start(&event, endpoints.len());
    Ok(Plan::Deliver {
        event,
        endpoints,
        subscribed,
        layout,
        span,
    })
}

/// The endpoints of the event's tenant that subscribe to it, enabled or not, looked up
/// once per tenant and batch (behind the subscription cache: one version read, the list
/// from memory while the version is unchanged). A disabled endpoint gets its deliveries too: the sender
/// dead-letters them `endpoint_disabled` (with a row in the attempt log), so they can be
/// replayed once it is enabled, instead of vanishing. Sorted by id, so a fan-out cut short
/// stops at a well-defined place.
async fn subscribers(
    deps: &RelayDeps,
    event: &Event,
    tenants: &mut HashMap<TenantId, Vec<Endpoint>>,
) -> Result<Vec<EndpointId>, PortError> {
    if !tenants.contains_key(&event.tenant_id) {
        let list = deps.endpoints.list_for_tenant(&event.tenant_id).await?;
        tenants.insert(event.tenant_id.clone(), list);
    }
    let mut ids: Vec<EndpointId> = tenants
        .get(&event.tenant_id)
        .map(|l| {
            l.iter()
                .filter(|e| e.subscribes(event))
                .map(|e| e.id.clone())
                .collect()
        })
        .unwrap_or_default();
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// How settling one record ended.
enum Settled {
    /// Complete: Lambda may checkpoint past it.
    Done(RecordOutcome),
    /// Not complete: the first `done` messages (of a delivery) are sent or parked, the
    /// rest are not; the record is reported with `error`.
    Stopped { done: usize, error: String },
}

/// Finishes one record: parks what must be parked (poison, refused messages, in order,
/// until the first message that was not sent) and says what happened.
async fn settle(
    deps: &RelayDeps,
    raw: &Value,
    plan: &Plan,
    sent: &[Option<Result<(), PortError>>],
    park_by: Option<Instant>,
    metrics: &Metrics,
) -> Settled {
    let (event_id, stream_record_id) = record_names(raw);
    match plan {
        Plan::Ignore => Settled::Done(RecordOutcome::Ignored),
        Plan::Park { reason, kind } => {
            // The reason names the rule broken, never the payload, so it is safe to log.
            if *kind == ParkKind::Misconfigured {
                tracing::error!(%reason, event_id, stream_record_id, "misconfigured outbox stream: record parked in the relay-failure queue");
                metrics.update(|c| c.relay_misconfigured += 1);
            } else {
                tracing::error!(%reason, event_id, stream_record_id, "poison outbox record parked in the relay-failure queue");
            }
            let no_context = Map::new();
            let parked = park(deps, raw, reason, *kind, &no_context, metrics);
            if let Err(e) = within(park_by, parked, "parking the record").await {
                return Settled::Stopped {
                    done: 0,
                    error: e.to_string(),
                };
            }
            Settled::Done(match kind {
                ParkKind::Misconfigured => RecordOutcome::Misconfigured {
                    reason: reason.clone(),
                },
                _ => RecordOutcome::Poison {
                    reason: reason.clone(),
                },
            })
        }
        Plan::Deliver {
            event,
            endpoints,
            span,
            ..
        } => {
            let mut parked = 0;
            for (done, (endpoint, result)) in endpoints.iter().zip(sent).enumerate() {
                let why = match result {
                    Some(Ok(())) => continue,
                    Some(Err(PortError::Rejected(why))) => why,
                    Some(Err(e @ PortError::Unavailable(_))) => {
                        return Settled::Stopped {
                            done,
                            error: e.to_string(),
                        };
                    }
                    None => {
                        return Settled::Stopped {
                            done,
                            error: format!(
                                "{} of {} delivery messages sent before the invocation deadline",
                                done,
                                endpoints.len()
                            ),
                        };
                    }
                };
                let reason = format!("delivery queue refused the message: {why}");
                tracing::error!(%reason, event_id = %event.id, endpoint_id = %endpoint, "delivery message parked in the relay-failure queue");
                let mut context = Map::new();
                context.insert("endpoint_id".into(), json!(endpoint.as_str()));
                context.insert("tern_event_id".into(), json!(event.id.as_str()));
                let parking = park(deps, raw, &reason, ParkKind::Refused, &context, metrics);
                if let Err(e) = within(park_by, parking, "parking a refused message").await {
                    return Settled::Stopped {
                        done,
                        error: e.to_string(),
                    };
                }
                parked += 1;
            }
            let deliveries = endpoints.len() - parked;
            metrics.update(|c| c.events_relayed += 1);
            tracing::info!(event_id = %event.id, event_type = %event.event_type, deliveries, parked, "relayed");
            span.finish(deliveries, parked);
            Settled::Done(RecordOutcome::Relayed { deliveries, parked })
        }
    }
}

/// The names a log line gives a stream record: the Tern event id (from the outbox item's
/// `event_id` key, `<tenant>#<event id>` from schema version 2; what `tern attempts` and
/// `tern relay-failures` print), when the record has one, and the stream record's own
/// `eventID`.
fn record_names(raw: &Value) -> (Option<&str>, Option<&str>) {
    (
        raw.pointer("/dynamodb/Keys/event_id/S")
            .and_then(Value::as_str)
            .map(tern_core::outbox::event_id_part)
            // A row of another outbox (`relay_events_before`) names its event itself.
            .or_else(|| raw.get("event_id").and_then(Value::as_str)),
        raw.get("eventID").and_then(Value::as_str),
    )
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
