//! `tern relay-failures --retry <message-id>` for a batch the stream mapping gave up on
//! (Lambda's on-failure record, [`StreamBatchInfo`]): re-drives every event of its range
//! through the relay handler itself (`tern_handlers::relay::handle_value`, the Lambda's
//! code path, fan-out checkpoints included), so each (event, subscribed endpoint) pair
//! gets its delivery message; pairs already delivered or under way are not POSTed again
//! (the sender's claim), and a large fan-out's checkpoint skips what went out.
//!
//! Where the events come from:
//! - the stream, while it still holds the range (24 h): `GetShardIterator`
//!   `AT_SEQUENCE_NUMBER` at the range's start, then `GetRecords` to its end;
//! - otherwise the outbox table (items live 7 days by TTL): a `Scan` for outbox items
//!   whose `created_at` lies in the batch's arrival window, widened by
//!   [`OUTBOX_WINDOW_SLACK_SECONDS`] on each side. The outbox has no index on
//!   `created_at`, so the Scan reads the whole table: one read unit per 8 KB of items
//!   (eventually consistent), whatever the window; the command prints what it read.
//!   The window may hold events of other shards or batches too: they are relayed again
//!   as well, which costs messages but never a second POST.

use std::io::Write;
use std::sync::Arc;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnConsumedCapacity};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use tern_aws::SqsQueue;
use tern_aws::stream::{RangeError, read_range};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::relay::{RecordOutcome, RelayDeps};
use tern_ops::OpsError;
use tern_ops::relay_failures::StreamBatchInfo;

use crate::relay_retry::{OnlyEndpoint, image, insert_record, max_payload_bytes};
use crate::{Ctx, print_json, write_err};

/// Seconds the outbox window is widened on each side of the batch's arrival times: 300.
/// An item's `created_at` is set by the application before its transaction commits, and
/// the stream's arrival times are whole seconds from another clock; five minutes covers
/// a slow commit and clock skew. Events outside the batch that fall in the window are
/// relayed again too (no second POST: the sender's claim).
pub const OUTBOX_WINDOW_SLACK_SECONDS: i64 = 300;

/// Records handed to the relay handler at a time: 100, the stream mapping's batch size
/// (`eventSources.relay.batchSize` in infra/settings.json). Bounds the tool's memory on a
/// large window.
pub const REDRIVE_BATCH_RECORDS: usize = 100;

/// `tern relay-failures --retry --json` for a discarded stream batch.
#[derive(Debug, Serialize)]
pub struct Redriven {
    /// The on-failure record (removed from the queue).
    pub message_id: String,
    /// Where the events were read: `stream`, or `outbox` when the stream no longer held
    /// the range.
    pub source: &'static str,
    /// Why the stream could not be used, when the outbox was read instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_error: Option<String>,
    /// The outbox window scanned (`created_at` from, to), RFC 3339.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<(String, String)>,
    /// Outbox items the Scan read (`ScannedCount`), when it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scanned_items: Option<u64>,
    /// Read capacity units the Scan consumed, when DynamoDB reported them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_units: Option<f64>,
    /// The Tern events relayed again.
    pub events: Vec<String>,
    /// Delivery messages now on the delivery queue.
    pub deliveries: usize,
    /// Messages or records parked again in the relay-failure queue (each a new message).
    pub parked: usize,
}

/// The Tern events of a batch's range, read from the stream (for the listing).
///
/// # Errors
/// [`RangeError`] when the stream cannot give the range.
pub async fn covered_events(ctx: &Ctx, batch: &StreamBatchInfo) -> Result<Vec<String>, RangeError> {
    let records = read_range(
        &aws_sdk_dynamodbstreams::Client::new(&ctx.aws),
        &batch.stream_arn,
        &batch.shard_id,
        &batch.start_sequence_number,
        &batch.end_sequence_number,
    )
    .await?;
    Ok(records.iter().filter_map(outbox_event_id).collect())
}

/// The Tern event id of an outbox INSERT record; `None` for anything else.
fn outbox_event_id(record: &Value) -> Option<String> {
    if record.get("eventName").and_then(Value::as_str) != Some("INSERT") {
        return None;
    }
    let image = record.pointer("/dynamodb/NewImage")?;
    if image.pointer("/tern_record/S").and_then(Value::as_str)
        != Some(tern_core::outbox::OUTBOX_RECORD_KIND)
    {
        return None;
    }
    // The key: `<tenant>#<event id>` from outbox schema version 2.
    image
        .pointer("/event_id/S")
        .and_then(Value::as_str)
        .map(|key| tern_core::outbox::event_id_part(key).to_owned())
}

/// Why the listing shows no events for a batch.
pub fn unavailable_note(error: &RangeError, batch: &StreamBatchInfo) -> String {
    match (error, outbox_window(batch)) {
        (RangeError::Gone(_), Ok((from, to))) => format!(
            "{error}; --retry relays the outbox items created between {from} and {to} (a Scan of the outbox table)"
        ),
        _ => error.to_string(),
    }
}

/// The `created_at` window of a batch: its arrival times widened by
/// [`OUTBOX_WINDOW_SLACK_SECONDS`], in the outbox's format (RFC 3339, milliseconds, `Z`).
fn outbox_window(batch: &StreamBatchInfo) -> Result<(String, String), OpsError> {
    let time = |t: &Option<String>, which: &str| -> Result<DateTime<Utc>, OpsError> {
        let text = t.as_deref().ok_or_else(|| {
            OpsError::Invalid(format!(
                "the on-failure record has no approximateArrivalOf{which}Record: no window to look for its events in the outbox"
            ))
        })?;
        DateTime::parse_from_rfc3339(text)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| {
                OpsError::Invalid(format!("approximateArrivalOf{which}Record {text:?}: {e}"))
            })
    };
    let slack = chrono::Duration::seconds(OUTBOX_WINDOW_SLACK_SECONDS);
    let format = |t: DateTime<Utc>| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string();
    let from = time(&batch.approximate_arrival_of_first_record, "First")? - slack;
    let to = time(&batch.approximate_arrival_of_last_record, "Last")? + slack;
    Ok((format(from), format(to)))
}

/// Re-drives every event of `batch`. The caller removes the on-failure record only on
/// `Ok`.
///
/// # Errors
/// [`OpsError`] when the events cannot be read (stream unavailable, outbox unreadable)
/// or the relay could not finish (endpoint table or delivery queue unavailable): nothing
/// is lost, run it again.
pub async fn redrive(
    ctx: &Ctx,
    sqs: &aws_sdk_sqs::Client,
    failure_url: &str,
    message_id: &str,
    batch: &StreamBatchInfo,
) -> Result<Redriven, OpsError> {
    let deps = RelayDeps {
        endpoints: Arc::new(OnlyEndpoint {
            inner: Arc::new(ctx.endpoints()?),
            only: None,
        }),
        delivery_queue: Arc::new(SqsQueue::new(
            sqs.clone(),
            ctx.names.get("TERN_DELIVERY_QUEUE_URL")?,
        )),
        failure_queue: Arc::new(SqsQueue::new(sqs.clone(), failure_url)),
        max_payload_bytes: max_payload_bytes()?,
        checkpoints: Some(Arc::new(tern_aws::DynamoFanOutCheckpoints::new(
            ctx.dynamodb(),
            ctx.names.get("TERN_ATTEMPTS_TABLE")?,
            // The ledger's TTL the deployment uses by default (delivery.attemptLogTtlDays).
            30,
        ))),
    };
    let mut done = Redriven {
        message_id: message_id.to_owned(),
        source: "stream",
        stream_error: None,
        window: None,
        scanned_items: None,
        read_units: None,
        events: Vec::new(),
        deliveries: 0,
        parked: 0,
    };
    let streams = aws_sdk_dynamodbstreams::Client::new(&ctx.aws);
    match read_range(
        &streams,
        &batch.stream_arn,
        &batch.shard_id,
        &batch.start_sequence_number,
        &batch.end_sequence_number,
    )
    .await
    {
        Ok(records) => {
            for chunk in records.chunks(REDRIVE_BATCH_RECORDS) {
                relay(&deps, chunk.to_vec(), &mut done).await?;
            }
        }
        Err(RangeError::Gone(why)) => {
            done.source = "outbox";
            done.stream_error = Some(why);
            from_outbox(ctx, &deps, batch, &mut done).await?;
        }
        Err(e @ RangeError::Unavailable(_)) => {
            return Err(OpsError::Invalid(format!(
                "{e}; the on-failure record stays, try again"
            )));
        }
    }
    Ok(done)
}

/// Relays the outbox items created in the batch's window, one Scan page at a time.
async fn from_outbox(
    ctx: &Ctx,
    deps: &RelayDeps,
    batch: &StreamBatchInfo,
    done: &mut Redriven,
) -> Result<(), OpsError> {
    let (from, to) = outbox_window(batch)?;
    let outbox = ctx.names.get("TERN_OUTBOX_TABLE")?;
    let ddb = ctx.dynamodb();
    let (mut scanned, mut units) = (0_u64, None::<f64>);
    let mut start = None;
    let mut sequence = 0_u64;
    loop {
        let page = ddb
            .scan()
            .table_name(&outbox)
            .filter_expression("tern_record = :kind AND created_at BETWEEN :from AND :to")
            .expression_attribute_values(
                ":kind",
                AttributeValue::S(tern_core::outbox::OUTBOX_RECORD_KIND.into()),
            )
            .expression_attribute_values(":from", AttributeValue::S(from.clone()))
            .expression_attribute_values(":to", AttributeValue::S(to.clone()))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| OpsError::Port(tern_aws::error::port_error(e)))?;
        scanned += u64::try_from(page.scanned_count()).unwrap_or_default();
        if let Some(u) = page.consumed_capacity().and_then(|c| c.capacity_units()) {
            *units.get_or_insert(0.0) += u;
        }
        let mut records = Vec::new();
        for item in page.items() {
            let Some(AttributeValue::S(event_id)) = item.get("event_id") else {
                continue;
            };
            sequence += 1;
            records.push(insert_record(
                &format!("tern-redrive-{}-{sequence}", done.message_id),
                event_id,
                image(item)?,
                &sequence.to_string(),
                ctx,
            ));
        }
        for chunk in records.chunks(REDRIVE_BATCH_RECORDS) {
            relay(deps, chunk.to_vec(), done).await?;
        }
        start = page.last_evaluated_key;
        if start.is_none() {
            break;
        }
    }
    done.window = Some((from, to));
    done.scanned_items = Some(scanned);
    done.read_units = units;
    Ok(())
}

/// Relays `records` through the relay handler; counts what it did.
async fn relay(deps: &RelayDeps, records: Vec<Value>, done: &mut Redriven) -> Result<(), OpsError> {
    let events: Vec<String> = records.iter().filter_map(outbox_event_id).collect();
    let total = records.len();
    let (response, outcomes) = tern_handlers::relay::handle_value(
        deps,
        json!({ "Records": records }),
        &Metrics::new("Tern", MetricsSink::Discard),
    )
    .await;
    for outcome in &outcomes {
        match outcome {
            RecordOutcome::Relayed { deliveries, parked } => {
                done.deliveries += deliveries;
                done.parked += parked;
            }
            RecordOutcome::Poison { .. } | RecordOutcome::Misconfigured { .. } => done.parked += 1,
            RecordOutcome::Ignored => {}
        }
    }
    if !response.batch_item_failures.is_empty() {
        return Err(OpsError::Invalid(format!(
            "the relay could not finish ({} of {} record(s) done; endpoint table or delivery queue unavailable, \
             RUST_LOG=warn shows why); the on-failure record stays, run --retry again",
            outcomes.len(),
            total
        )));
    }
    done.events.extend(events);
    Ok(())
}

/// Prints a re-drive's result.
///
/// # Errors
/// A write error.
pub fn print(ctx: &Ctx, done: &Redriven, out: &mut dyn Write) -> Result<(), OpsError> {
    if ctx.json {
        return print_json(out, done);
    }
    let source = match (&done.window, done.scanned_items) {
        (Some((from, to)), Some(scanned)) => format!(
            "the outbox items created between {from} and {to} (the stream no longer holds the range: {}; \
             the Scan read {scanned} item(s){})",
            done.stream_error.as_deref().unwrap_or("-"),
            done.read_units
                .map_or_else(String::new, |u| format!(", {u} read unit(s)"))
        ),
        _ => "the stream".to_owned(),
    };
    writeln!(
        out,
        "re-drove the discarded batch from {source}: {} event(s) relayed again ({}), {} delivery message(s) queued, \
         {} parked again; on-failure record {} removed",
        done.events.len(),
        if done.events.is_empty() {
            "-".to_owned()
        } else {
            done.events.join(" ")
        },
        done.deliveries,
        done.parked,
        done.message_id
    )
    .map_err(write_err)
}
