//! Local event source mappings: a stream poller and a queue poller that call the same
//! handler functions as the Lambda binaries, with the same batch and partial-batch
//! semantics as the AWS event source mappings (DESIGN.md §6, §7).
//!
//! - Stream -> relay: records in shard order, only INSERTs (the mapping's filter), a
//!   failing batch retried from the reported `SequenceNumber` up to the mapping's
//!   `maximumRetryAttempts`, then a failure record to the relay's failure queue
//!   (Lambda's `OnFailure` destination) and the shard moves on.
//! - Queue -> sender: up to 10 messages per invocation with the queue's visibility
//!   timeout; messages not in `batchItemFailures` are deleted, the others stay and come
//!   back after the timeout (SQS redrives them to the DLQ after `maxReceiveCount`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_config::SdkConfig;
use aws_lambda_events::sqs::SqsEvent;
use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageSystemAttributeName};
use serde_json::{Value, json};
use tern_aws::stream::sequence_order;
use tern_core::ports::{MessageQueue, QueueEntry};
use tern_handlers::deadline::Deadline;
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::relay::{RecordOutcome, RelayDeps};
use tern_handlers::sender::{MessageResult, SenderDeps};
use tern_ops::relay_failures::{OnFailureRecord, RequestContext, ResponseContext, StreamBatchInfo};
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;

/// What the pollers report, for progress displays and tests.
#[derive(Debug, Clone)]
pub enum LocalEvent {
    /// The relay handled a batch.
    Relayed(Vec<RecordOutcome>),
    /// The relay batch failed every retry and went to the failure destination.
    RelayBatchFailed {
        /// Records in the failed batch.
        records: usize,
    },
    /// The sender handled a batch.
    Sent(Vec<MessageResult>),
}

pub use tern_aws::stream::lambda_record;

/// Stream poller settings.
pub struct StreamPollerOptions {
    /// Records per relay invocation (`batchSize`).
    pub batch_size: i32,
    /// Retries of a failing batch (`maximumRetryAttempts`).
    pub max_retries: u32,
    /// Apply the mapping's INSERT filter (as AWS does). Off only to test the relay's own check.
    pub insert_filter: bool,
    /// Idle wait between empty reads.
    pub idle: Duration,
    /// Time each relay invocation gets (`functions.relay.timeoutSeconds`): the handler's
    /// deadline, as Lambda gives it.
    pub invocation_timeout: Duration,
}

/// How long a shard's iterator may return nothing before the poller checks it against a
/// fresh iterator from the same position, in seconds. A check costs two calls
/// (GetShardIterator, GetRecords with limit 1), at most once per this period per shard.
pub const STALE_CHECK_SECONDS: u64 = 5;

/// Where the poller reads one shard.
struct ShardPosition {
    iterator: Option<String>,
    /// Sequence number of the last record read: a fresh iterator continues after it.
    last_sequence: Option<String>,
    /// Since when reads have returned no record (reset by a record or a check).
    empty_since: Option<tokio::time::Instant>,
}

/// Polls the outbox stream and calls the relay handler.
///
/// A shard whose iterator returns nothing for [`STALE_CHECK_SECONDS`] is checked: if a
/// fresh iterator from the last sequence number read does return records, the old one
/// was stale (moto once handed out iterators on a shard that no longer received records,
/// see tools/moto_server.py fix 3). The poller logs a warning naming the stream and the
/// shard, and carries on with the fresh iterator, so nothing is skipped and nothing is
/// read twice.
pub fn spawn_stream_poller(
    aws: &SdkConfig,
    stream_arn: String,
    relay: Arc<RelayDeps>,
    failure_queue: Arc<dyn MessageQueue>,
    options: StreamPollerOptions,
    events: Option<UnboundedSender<LocalEvent>>,
) -> JoinHandle<()> {
    let streams = aws_sdk_dynamodbstreams::Client::new(aws);
    tokio::spawn(async move {
        let mut shards: HashMap<String, ShardPosition> = HashMap::new();
        loop {
            let mut busy = false;
            match streams
                .describe_stream()
                .stream_arn(&stream_arn)
                .send()
                .await
            {
                Ok(d) => {
                    for shard in d
                        .stream_description()
                        .map(|s| s.shards())
                        .unwrap_or_default()
                    {
                        let Some(shard_id) = shard.shard_id() else {
                            continue;
                        };
                        if !shards.contains_key(shard_id) {
                            // Not stored until it succeeds: a failed call is retried on
                            // the next pass instead of leaving the shard unread.
                            let Some(iterator) =
                                shard_iterator(&streams, &stream_arn, shard_id, None).await
                            else {
                                continue;
                            };
                            shards.insert(
                                shard_id.to_owned(),
                                ShardPosition {
                                    iterator: Some(iterator),
                                    last_sequence: None,
                                    empty_since: None,
                                },
                            );
                        }
                        let Some(position) = shards.get_mut(shard_id) else {
                            continue;
                        };
                        let Some(it) = position.iterator.clone() else {
                            continue;
                        };
                        let out = match streams
                            .get_records()
                            .shard_iterator(it)
                            .limit(options.batch_size)
                            .send()
                            .await
                        {
                            Ok(o) => o,
                            Err(e) => {
                                tracing::warn!(error = %aws_sdk_dynamodbstreams::error::DisplayErrorContext(e), "get_records failed");
                                continue;
                            }
                        };
                        position.iterator = out.next_shard_iterator.clone();
                        if let Some(last) = out
                            .records()
                            .last()
                            .and_then(|r| r.dynamodb())
                            .and_then(|c| c.sequence_number())
                        {
                            position.last_sequence = Some(last.to_owned());
                            position.empty_since = None;
                        } else {
                            let since = *position
                                .empty_since
                                .get_or_insert_with(tokio::time::Instant::now);
                            if since.elapsed() >= Duration::from_secs(STALE_CHECK_SECONDS) {
                                position.empty_since = None;
                                recheck_stale(&streams, &stream_arn, shard_id, position).await;
                            }
                        }
                        let records: Vec<Value> = out
                            .records()
                            .iter()
                            .filter(|r| {
                                !options.insert_filter
                                    || r.event_name().is_some_and(|n| n.as_str() == "INSERT")
                            })
                            .map(|r| lambda_record(r, &stream_arn))
                            .collect();
                        if records.is_empty() {
                            continue;
                        }
                        busy = true;
                        invoke_relay(
                            &relay,
                            &failure_queue,
                            records,
                            Shard {
                                id: shard_id,
                                stream_arn: &stream_arn,
                            },
                            &options,
                            events.as_ref(),
                        )
                        .await;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %aws_sdk_dynamodbstreams::error::DisplayErrorContext(e), "describe_stream failed")
                }
            }
            if !busy {
                tokio::time::sleep(options.idle).await;
            }
        }
    })
}

/// A shard iterator after `after` (a sequence number), or at the trim horizon.
async fn shard_iterator(
    streams: &aws_sdk_dynamodbstreams::Client,
    stream_arn: &str,
    shard_id: &str,
    after: Option<&str>,
) -> Option<String> {
    let request = streams
        .get_shard_iterator()
        .stream_arn(stream_arn)
        .shard_id(shard_id);
    let request = match after {
        Some(sequence) => request
            .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
            .sequence_number(sequence),
        None => request.shard_iterator_type(ShardIteratorType::TrimHorizon),
    };
    match request.send().await {
        Ok(o) => o.shard_iterator,
        Err(e) => {
            tracing::warn!(stream_arn, shard_id, error = %aws_sdk_dynamodbstreams::error::DisplayErrorContext(e), "get_shard_iterator failed");
            None
        }
    }
}

/// Compares a shard iterator that keeps returning nothing with a fresh one from the same
/// position; when the fresh one finds records, warns and switches to it.
async fn recheck_stale(
    streams: &aws_sdk_dynamodbstreams::Client,
    stream_arn: &str,
    shard_id: &str,
    position: &mut ShardPosition,
) {
    let after = position.last_sequence.as_deref();
    let Some(fresh) = shard_iterator(streams, stream_arn, shard_id, after).await else {
        return;
    };
    let waiting = match streams
        .get_records()
        .shard_iterator(fresh)
        .limit(1)
        .send()
        .await
    {
        Ok(o) => !o.records().is_empty(),
        Err(e) => {
            tracing::warn!(stream_arn, shard_id, error = %aws_sdk_dynamodbstreams::error::DisplayErrorContext(e), "get_records failed");
            return;
        }
    };
    if !waiting {
        return;
    }
    tracing::warn!(
        stream_arn,
        shard_id,
        after_sequence = after.unwrap_or("trim horizon"),
        empty_seconds = STALE_CHECK_SECONDS,
        "stream poller's shard iterator returned no records while the stream holds newer ones; \
         reading on with a fresh iterator from the last record read"
    );
    // The probe's iterator has moved past the record it returned: take another one.
    if let Some(iterator) = shard_iterator(streams, stream_arn, shard_id, after).await {
        position.iterator = Some(iterator);
    }
}

/// The shard a batch came from.
struct Shard<'a> {
    id: &'a str,
    stream_arn: &'a str,
}

/// One batch as the event source mapping handles it: invoked with the invocation's
/// deadline, retried from the reported record up to `max_retries` times, then given up:
/// the on-failure record (Lambda's shape, [`OnFailureRecord`]) goes to the relay-failure
/// queue and the shard moves on.
async fn invoke_relay(
    relay: &RelayDeps,
    failure_queue: &Arc<dyn MessageQueue>,
    mut records: Vec<Value>,
    shard: Shard<'_>,
    options: &StreamPollerOptions,
    events: Option<&UnboundedSender<LocalEvent>>,
) {
    let mut invocations = 0;
    for attempt in 0..=options.max_retries {
        invocations += 1;
        // Raw JSON, as the Lambda binary takes it: a record that does not parse is parked
        // by the relay on its own instead of dropping the batch.
        let event = json!({ "Records": records });
        let metrics = Metrics::new("Tern", MetricsSink::Discard);
        let deadline = tokio::time::Instant::now() + options.invocation_timeout;
        let (response, outcomes) =
            tern_handlers::relay::handle_value_before(relay, event, Some(deadline), &metrics).await;
        if let Some(tx) = events {
            let _ = tx.send(LocalEvent::Relayed(outcomes));
        }
        // Lambda checkpoints at the lowest reported sequence number and retries from it.
        let Some(from) = response
            .batch_item_failures
            .iter()
            .filter_map(|f| f.item_identifier.clone())
            .min_by(|a, b| sequence_order(a, b))
        else {
            return;
        };
        let position = records
            .iter()
            .position(|r| r["dynamodb"]["SequenceNumber"] == from)
            .unwrap_or(0);
        records.drain(..position);
        if attempt < options.max_retries {
            tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt + 1))).await;
        }
    }
    let body = on_failure_record(&records, &shard, invocations);
    let entry = QueueEntry {
        id: "onfailure".into(),
        body: body.to_string(),
        delay_seconds: 0,
        attributes: vec![],
        group_id: None,
    };
    // Lambda retries delivery to the destination; so does the poller, a few times.
    let mut sent = failure_queue.send(&entry).await;
    for wait_ms in [200, 1000] {
        if sent.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        sent = failure_queue.send(&entry).await;
    }
    if let Err(error) = sent {
        tracing::error!(%error, %body, "the relay-failure queue refused the on-failure record of a discarded stream batch: re-drive its range by hand");
    }
    if let Some(tx) = events {
        let _ = tx.send(LocalEvent::RelayBatchFailed {
            records: records.len(),
        });
    }
}

/// What Lambda sends to the on-failure destination when it gives up on `records`:
/// metadata of the batch, not the records (AWS Lambda developer guide, "Retain discarded
/// records for a DynamoDB event source").
fn on_failure_record(records: &[Value], shard: &Shard<'_>, invocations: u32) -> Value {
    let seq = |r: Option<&Value>| {
        r.and_then(|r| r["dynamodb"]["SequenceNumber"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    // Lambda writes whole seconds, `2019-11-14T00:13:19Z`.
    let arrival = |r: Option<&Value>| {
        r.and_then(|r| r["dynamodb"]["ApproximateCreationDateTime"].as_f64())
            .and_then(|secs| chrono::DateTime::from_timestamp(secs as i64, 0))
            .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
    };
    let record = OnFailureRecord {
        request_context: RequestContext {
            request_id: tern_core::EventId::generate().to_string(),
            function_arn: "arn:aws:lambda:us-east-1:123456789012:function:tern-relay-local".into(),
            condition: "RetryAttemptsExhausted".into(),
            approximate_invoke_count: invocations,
        },
        response_context: ResponseContext {
            status_code: 200,
            executed_version: "$LATEST".into(),
            function_error: None,
        },
        version: "1.0".into(),
        timestamp: chrono::Utc::now()
            .format("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string(),
        batch: StreamBatchInfo {
            shard_id: shard.id.to_owned(),
            start_sequence_number: seq(records.first()),
            end_sequence_number: seq(records.last()),
            approximate_arrival_of_first_record: arrival(records.first()),
            approximate_arrival_of_last_record: arrival(records.last()),
            batch_size: records.len() as u32,
            stream_arn: shard.stream_arn.to_owned(),
        },
    };
    serde_json::to_value(record).unwrap_or(Value::Null)
}

/// Queue poller settings.
pub struct QueuePollerOptions {
    /// Messages per invocation (1..=10).
    pub batch_size: i32,
    /// Visibility timeout while a batch is handled, in seconds.
    pub visibility_timeout_seconds: i32,
    /// Concurrent pollers (the mapping's maximum concurrency).
    pub concurrency: u32,
    /// The sender function's timeout (`functions.sender.timeoutSeconds`, 60 s): each
    /// batch gets the deadline Lambda would give it, counted from when the poller hands
    /// it over, and the same reserve ([`tern_aws::wiring::sender_time_reserve`]).
    pub function_timeout: Duration,
}

/// Builds the Lambda SQS event for received messages.
pub fn lambda_sqs_event(
    messages: &[aws_sdk_sqs::types::Message],
    queue_arn: &str,
) -> Result<SqsEvent, serde_json::Error> {
    let records: Vec<Value> = messages
        .iter()
        .map(|m| {
            let attributes: HashMap<String, String> = m
                .attributes()
                .map(|a| a.iter().map(|(k, v)| (k.as_str().to_owned(), v.clone())).collect())
                .unwrap_or_default();
            let message_attributes: HashMap<String, Value> = m
                .message_attributes()
                .map(|a| {
                    a.iter()
                        .map(|(k, v)| {
                            (
                                k.clone(),
                                json!({"stringValue": v.string_value(), "dataType": v.data_type(), "stringListValues": [], "binaryListValues": []}),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            json!({
                "messageId": m.message_id(),
                "receiptHandle": m.receipt_handle(),
                "body": m.body(),
                "attributes": attributes,
                "messageAttributes": message_attributes,
                "md5OfBody": m.md5_of_body(),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": "us-east-1",
            })
        })
        .collect();
    serde_json::from_value(json!({ "Records": records }))
}

/// Polls the delivery queue and calls the sender handler; returns one task per poller.
pub fn spawn_queue_pollers(
    aws: &SdkConfig,
    queue_url: String,
    sender: Arc<SenderDeps>,
    options: QueuePollerOptions,
    events: Option<UnboundedSender<LocalEvent>>,
) -> Vec<JoinHandle<()>> {
    let sqs = aws_sdk_sqs::Client::new(aws);
    let queue_arn = format!(
        "arn:aws:sqs:us-east-1:123456789012:{}",
        queue_url.rsplit('/').next().unwrap_or("queue")
    );
    (0..options.concurrency.max(1))
        .map(|_| {
            let (sqs, url, arn, sender, events) = (sqs.clone(), queue_url.clone(), queue_arn.clone(), sender.clone(), events.clone());
            let (batch, visibility) = (options.batch_size.clamp(1, 10), options.visibility_timeout_seconds);
            let timeout = options.function_timeout;
            tokio::spawn(async move {
                loop {
                    let received = sqs
                        .receive_message()
                        .queue_url(&url)
                        .max_number_of_messages(batch)
                        .visibility_timeout(visibility)
                        .wait_time_seconds(1)
                        .message_system_attribute_names(MessageSystemAttributeName::All)
                        .message_attribute_names("All")
                        .send()
                        .await;
                    let messages = match received {
                        Ok(o) => o.messages.unwrap_or_default(),
                        Err(e) => {
                            tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(e), "receive_message failed");
                            tokio::time::sleep(Duration::from_millis(500)).await;
                            continue;
                        }
                    };
                    if messages.is_empty() {
                        continue;
                    }
                    let event = match lambda_sqs_event(&messages, &arn) {
                        Ok(e) => e,
                        Err(e) => {
                            tracing::error!(error = %e, "SQS batch does not parse as a Lambda event");
                            continue;
                        }
                    };
                    let metrics = Metrics::new("Tern", MetricsSink::Discard);
                    let deadline = Deadline::at(Instant::now() + timeout, tern_aws::wiring::sender_time_reserve());
                    let (response, results) = tern_handlers::sender::handle_within(&sender, event, &metrics, deadline).await;
                    let failed: Vec<&str> = response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
                    let done: Vec<DeleteMessageBatchRequestEntry> = messages
                        .iter()
                        .filter(|m| !failed.contains(&m.message_id().unwrap_or_default()))
                        .enumerate()
                        .filter_map(|(i, m)| {
                            DeleteMessageBatchRequestEntry::builder()
                                .id(format!("d{i}"))
                                .receipt_handle(m.receipt_handle().unwrap_or_default())
                                .build()
                                .ok()
                        })
                        .collect();
                    if !done.is_empty()
                        && let Err(e) = sqs.delete_message_batch().queue_url(&url).set_entries(Some(done)).send().await
                    {
                        tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(e), "delete_message_batch failed");
                    }
                    if let Some(tx) = &events {
                        let _ = tx.send(LocalEvent::Sent(results));
                    }
                }
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodbstreams::types::{AttributeValue, OperationType, Record, StreamRecord};

    fn keys() -> HashMap<String, AttributeValue> {
        HashMap::from([("event_id".to_owned(), AttributeValue::S("evt_1".into()))])
    }

    /// moto's records may lack ApproximateCreationDateTime and SizeBytes: they are left
    /// out, as AWS leaves out what a record does not have, never written as null.
    #[test]
    fn absent_record_fields_are_left_out_not_null() {
        let record = Record::builder()
            .event_id("e1")
            .event_name(OperationType::Insert)
            .dynamodb(
                StreamRecord::builder()
                    .set_keys(Some(keys()))
                    .set_new_image(Some(keys()))
                    .sequence_number("100")
                    .build(),
            )
            .build();
        let value = lambda_record(&record, "arn:stream");
        let dynamodb = value["dynamodb"].as_object().expect("dynamodb object");
        for absent in [
            "ApproximateCreationDateTime",
            "SizeBytes",
            "StreamViewType",
            "OldImage",
        ] {
            assert!(!dynamodb.contains_key(absent), "{absent} in {value}");
        }
        assert_eq!(dynamodb["SequenceNumber"], "100");
        assert_eq!(dynamodb["Keys"]["event_id"]["S"], "evt_1");
        assert_eq!(dynamodb["NewImage"]["event_id"]["S"], "evt_1");
        assert_eq!(value["eventName"], "INSERT");
        fn no_null(v: &Value) -> bool {
            match v {
                Value::Null => false,
                Value::Array(a) => a.iter().all(no_null),
                Value::Object(o) => o.values().all(no_null),
                _ => true,
            }
        }
        assert!(no_null(&value), "{value}");
    }

    /// Fields moto does give come through with AWS's types: whole epoch seconds, a number
    /// of bytes, the view type's name.
    #[test]
    fn present_record_fields_keep_their_values() {
        let record = Record::builder()
            .event_name(OperationType::Insert)
            .dynamodb(
                StreamRecord::builder()
                    .set_keys(Some(keys()))
                    .approximate_creation_date_time(
                        aws_sdk_dynamodbstreams::primitives::DateTime::from_secs(1_700_000_000),
                    )
                    .size_bytes(57)
                    .stream_view_type(aws_sdk_dynamodbstreams::types::StreamViewType::NewImage)
                    .sequence_number("7")
                    .build(),
            )
            .build();
        let value = lambda_record(&record, "arn:stream");
        assert_eq!(
            value["dynamodb"]["ApproximateCreationDateTime"],
            1_700_000_000
        );
        assert_eq!(value["dynamodb"]["SizeBytes"], 57);
        assert_eq!(value["dynamodb"]["StreamViewType"], "NEW_IMAGE");
        assert_eq!(value["eventSourceARN"], "arn:stream");
    }
}
