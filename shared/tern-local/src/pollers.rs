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
use std::time::Duration;

use aws_config::SdkConfig;
use aws_lambda_events::sqs::SqsEvent;
use aws_sdk_dynamodbstreams::types::{Record, ShardIteratorType};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageSystemAttributeName};
use serde_json::{Value, json};
use tern_core::ports::{MessageQueue, QueueEntry};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::relay::{RecordOutcome, RelayDeps};
use tern_handlers::sender::{MessageResult, SenderDeps};
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

/// Converts a DynamoDB Streams record to the JSON shape Lambda delivers.
pub fn lambda_record(record: &Record, stream_arn: &str) -> Value {
    let change = record.dynamodb();
    let image =
        |m: Option<&HashMap<String, aws_sdk_dynamodbstreams::types::AttributeValue>>| -> Value {
            m.map(|m| {
                serde_json::to_value(serde_dynamo::Item::from(m.clone())).unwrap_or(Value::Null)
            })
            .unwrap_or(Value::Null)
        };
    let mut dynamodb = json!({
        "ApproximateCreationDateTime": change.and_then(|c| c.approximate_creation_date_time()).map(|t| t.secs()),
        "Keys": image(change.and_then(|c| c.keys.as_ref())),
        "SequenceNumber": change.and_then(|c| c.sequence_number()),
        "SizeBytes": change.and_then(|c| c.size_bytes()).unwrap_or(0),
        "StreamViewType": change.and_then(|c| c.stream_view_type()).map(|v| v.as_str().to_owned()),
    });
    if let Some(new) = change.and_then(|c| c.new_image.as_ref()) {
        dynamodb["NewImage"] = image(Some(new));
    }
    if let Some(old) = change.and_then(|c| c.old_image.as_ref()) {
        dynamodb["OldImage"] = image(Some(old));
    }
    let mut value = json!({
        "eventID": record.event_id(),
        "eventName": record.event_name().map(|n| n.as_str().to_owned()),
        "eventVersion": record.event_version().unwrap_or("1.1"),
        "eventSource": "aws:dynamodb",
        "awsRegion": record.aws_region().unwrap_or("us-east-1"),
        "eventSourceARN": stream_arn,
        "dynamodb": dynamodb,
    });
    if let Some(id) = record.user_identity() {
        value["userIdentity"] = json!({"type": id.r#type(), "principalId": id.principal_id()});
    }
    value
}

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
}

/// Polls the outbox stream and calls the relay handler.
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
        let mut iterators: HashMap<String, Option<String>> = HashMap::new();
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
                        if !iterators.contains_key(shard_id) {
                            let it = streams
                                .get_shard_iterator()
                                .stream_arn(&stream_arn)
                                .shard_id(shard_id)
                                .shard_iterator_type(ShardIteratorType::TrimHorizon)
                                .send()
                                .await
                                .ok()
                                .and_then(|o| o.shard_iterator);
                            iterators.insert(shard_id.to_owned(), it);
                        }
                        let Some(Some(it)) = iterators.get(shard_id).cloned() else {
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
                        iterators.insert(shard_id.to_owned(), out.next_shard_iterator.clone());
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
                            shard_id,
                            &stream_arn,
                            options.max_retries,
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

async fn invoke_relay(
    relay: &RelayDeps,
    failure_queue: &Arc<dyn MessageQueue>,
    mut records: Vec<Value>,
    shard_id: &str,
    stream_arn: &str,
    max_retries: u32,
    events: Option<&UnboundedSender<LocalEvent>>,
) {
    for attempt in 0..=max_retries {
        // Raw JSON, as the Lambda binary takes it: a record that does not parse is parked
        // by the relay on its own instead of dropping the batch.
        let event = json!({ "Records": records });
        let metrics = Metrics::new("Tern", MetricsSink::Discard);
        let (response, outcomes) = tern_handlers::relay::handle_value(relay, event, &metrics).await;
        if let Some(tx) = events {
            let _ = tx.send(LocalEvent::Relayed(outcomes));
        }
        // Lambda checkpoints at the lowest reported sequence number and retries from it.
        let Some(from) = response
            .batch_item_failures
            .iter()
            .filter_map(|f| f.item_identifier.clone())
            .min_by(|a, b| a.len().cmp(&b.len()).then(a.cmp(b)))
        else {
            return;
        };
        let position = records
            .iter()
            .position(|r| r["dynamodb"]["SequenceNumber"] == from)
            .unwrap_or(0);
        records.drain(..position);
        if attempt < max_retries {
            tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt + 1))).await;
        }
    }
    // OnFailure destination: what Lambda sends is batch metadata, not the records.
    let seq = |r: &Value| r["dynamodb"]["SequenceNumber"].as_str().map(str::to_owned);
    let body = json!({
        "requestContext": {"condition": "RetryAttemptsExhausted", "approximateInvokeCount": max_retries + 1},
        "DDBStreamBatchInfo": {
            "shardId": shard_id,
            "streamArn": stream_arn,
            "startSequenceNumber": records.first().and_then(seq),
            "endSequenceNumber": records.last().and_then(seq),
            "batchSize": records.len(),
        }
    });
    let _ = failure_queue
        .send(&QueueEntry {
            id: "onfailure".into(),
            body: body.to_string(),
            delay_seconds: 0,
            attributes: vec![],
        })
        .await;
    if let Some(tx) = events {
        let _ = tx.send(LocalEvent::RelayBatchFailed {
            records: records.len(),
        });
    }
}

/// Queue poller settings.
pub struct QueuePollerOptions {
    /// Messages per invocation (1..=10).
    pub batch_size: i32,
    /// Visibility timeout while a batch is handled, in seconds.
    pub visibility_timeout_seconds: i32,
    /// Concurrent pollers (the mapping's maximum concurrency).
    pub concurrency: u32,
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
                    let (response, results) = tern_handlers::sender::handle(&sender, event, &metrics).await;
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
