//! The event source mappings, driving the real Lambda binaries: a stream poller that hands
//! the outbox stream's INSERT records to the relay binary (batches of `batchSize`, a
//! failing batch retried from the record it reports), and queue pollers that each own one
//! sender binary process (one warm instance: Lambda runs one invocation at a time per
//! instance), receive up to 10 messages with the queue's visibility timeout, invoke, and
//! delete what the sender did not report as failed. Each binary runs under the Lambda
//! Runtime API emulator with its function's timeout as the deadline
//! (`infra/settings.json` `functions.*.timeoutSeconds`).
//!
//! The binaries' AWS calls go through the meter with their own label (`relay`,
//! `sender-<n>`); the mappings' own calls (stream reads, receives, deletes) with `esm`.

use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageSystemAttributeName};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::keys::{Ids, Mentions};
use crate::{BoxError, Running, binary_path, spawn_function_with};

/// One invocation of a function binary, as the mapping saw it.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// Seconds on the meter's clock when the function was invoked.
    pub started: f64,
    /// Seconds on the meter's clock when the answer came.
    pub at: f64,
    /// The instance (`relay`, `sender-<n>`).
    pub caller: String,
    /// Records or messages given.
    pub items: usize,
    /// Of those, reported failed (or all, when the invocation failed).
    pub failed: usize,
    /// The scenario ids the event named.
    pub mentions: Mentions,
}

/// The running mappings. Stop them with [`Esm::stop`]; the binaries end with them.
pub struct Esm {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
    /// Every invocation so far.
    pub log: Arc<Mutex<Vec<Invocation>>>,
}

/// What the mappings need.
pub struct EsmSetup<'a> {
    /// Folder of the `sender` and `relay` binaries.
    pub bin_dir: &'a Path,
    /// The functions' environment (local mode's), without AWS endpoint and credentials.
    pub env: &'a [(String, String)],
    /// The meter's URL for each label.
    pub url: &'a dyn Fn(&str) -> String,
    /// Meter clock.
    pub clock: Arc<dyn Fn() -> f64 + Send + Sync>,
    /// Scenario ids, to note which endpoints and tenants each invocation carried.
    pub ids: Ids,
    /// Outbox stream ARN.
    pub stream_arn: String,
    /// Delivery queue URL.
    pub queue_url: String,
    /// Sender processes.
    pub senders: usize,
    /// Where the binaries' logs go.
    pub log_dir: &'a Path,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn function_env(env: &[(String, String)], url: String) -> Vec<(String, String)> {
    let mut out = env.to_vec();
    out.extend(
        [
            ("AWS_ENDPOINT_URL", url),
            ("AWS_REGION", "us-east-1".to_owned()),
            ("AWS_ACCESS_KEY_ID", "testing".to_owned()),
            ("AWS_SECRET_ACCESS_KEY", "testing".to_owned()),
            ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
            ("RUST_LOG", "warn".to_owned()),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );
    out
}

/// A function binary, restarted when it dies (Lambda replaces a crashed instance).
struct Function {
    bin: std::path::PathBuf,
    name: &'static str,
    env: Vec<(String, String)>,
    deadline_ms: u64,
    log: std::path::PathBuf,
    running: Option<Running>,
}

impl Function {
    async fn invoke(&mut self, event: &Value) -> Result<Value, BoxError> {
        if self.running.is_none() {
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.log)?;
            self.running = Some(
                spawn_function_with(
                    &self.bin,
                    self.name,
                    &self.env,
                    Stdio::from(log),
                    self.deadline_ms,
                )
                .await?,
            );
        }
        let Some(running) = self.running.as_mut() else {
            return Err("no function".into());
        };
        let answer = running.invoke(event).await;
        if answer.is_err() && running.pid().is_err() {
            self.running = None;
        }
        answer
    }
}

fn failures(answer: &Value) -> Vec<String> {
    answer
        .get("batchItemFailures")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|f| f.get("itemIdentifier").and_then(Value::as_str))
        .map(str::to_owned)
        .collect()
}

impl Esm {
    /// Starts the relay's stream poller and `senders` queue pollers.
    ///
    /// # Errors
    /// A binary that is missing.
    pub async fn start(setup: EsmSetup<'_>) -> Result<Self, BoxError> {
        let settings = tern_local::settings::infra_settings();
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Vec::new()));
        let esm_aws = tern_local::moto::sdk_config_for(&(setup.url)("esm")).await;
        let mut tasks = Vec::new();
        let relay = Function {
            bin: binary_path(setup.bin_dir, "relay")?,
            name: "relay",
            env: function_env(setup.env, (setup.url)("relay")),
            deadline_ms: settings.functions.relay.timeout_seconds * 1000,
            log: setup.log_dir.join("relay.log"),
            running: None,
        };
        tasks.push(tokio::spawn(stream_poller(
            aws_sdk_dynamodbstreams::Client::new(&esm_aws),
            setup.stream_arn.clone(),
            relay,
            settings.event_sources.relay.batch_size,
            settings.event_sources.relay.maximum_retry_attempts,
            Shared {
                stop: stop.clone(),
                log: log.clone(),
                ids: setup.ids.clone(),
                clock: setup.clock.clone(),
            },
        )));
        let sender_bin = binary_path(setup.bin_dir, "sender")?;
        for n in 0..setup.senders {
            let label = format!("sender-{n}");
            let sender = Function {
                bin: sender_bin.clone(),
                name: "sender",
                env: function_env(setup.env, (setup.url)(&label)),
                deadline_ms: settings.functions.sender.timeout_seconds * 1000,
                log: setup.log_dir.join(format!("{label}.log")),
                running: None,
            };
            tasks.push(tokio::spawn(queue_poller(
                aws_sdk_sqs::Client::new(&esm_aws),
                setup.queue_url.clone(),
                label,
                sender,
                settings.event_sources.sender.batch_size,
                Shared {
                    stop: stop.clone(),
                    log: log.clone(),
                    ids: setup.ids.clone(),
                    clock: setup.clock.clone(),
                },
            )));
        }
        Ok(Self { stop, tasks, log })
    }

    /// Stops polling; invocations under way finish first (at most one function timeout).
    pub async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            if tokio::time::timeout(Duration::from_secs(70), t)
                .await
                .is_err()
            {
                eprintln!("scale: a poller did not stop within 70 s");
            }
        }
    }
}

#[derive(Clone)]
struct Shared {
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<Vec<Invocation>>>,
    ids: Ids,
    clock: Arc<dyn Fn() -> f64 + Send + Sync>,
}

impl Shared {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
    fn now(&self) -> f64 {
        (self.clock)()
    }
    fn note(&self, caller: &str, started: f64, event: &Value, items: usize, failed: usize) {
        lock(&self.log).push(Invocation {
            started,
            at: (self.clock)(),
            caller: caller.to_owned(),
            items,
            failed,
            mentions: self.ids.mentions(&event.to_string()),
        });
    }
}

async fn queue_poller(
    sqs: aws_sdk_sqs::Client,
    url: String,
    label: String,
    mut sender: Function,
    batch: i32,
    shared: Shared,
) {
    let arn = format!(
        "arn:aws:sqs:us-east-1:123456789012:{}",
        url.rsplit('/').next().unwrap_or("queue")
    );
    while !shared.stopped() {
        // The queue's own visibility timeout applies, as with Lambda's mapping.
        let received = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(batch.clamp(1, 10))
            .wait_time_seconds(1)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await;
        let messages = match received {
            Ok(o) => o.messages.unwrap_or_default(),
            Err(e) => {
                eprintln!(
                    "scale: {label}: receive failed: {}",
                    aws_sdk_sqs::error::DisplayErrorContext(e)
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        if messages.is_empty() {
            continue;
        }
        let event = match tern_local::pollers::lambda_sqs_event(&messages, &arn)
            .ok()
            .and_then(|e| serde_json::to_value(e).ok())
        {
            Some(e) => e,
            None => continue,
        };
        let started = shared.now();
        let failed: Vec<String> = match sender.invoke(&event).await {
            Ok(answer) => failures(&answer),
            Err(e) => {
                // A failed invocation: Lambda leaves the whole batch for the timeout.
                eprintln!("scale: {label}: invocation failed: {e}");
                messages
                    .iter()
                    .filter_map(|m| m.message_id().map(str::to_owned))
                    .collect()
            }
        };
        shared.note(&label, started, &event, messages.len(), failed.len());
        let done: Vec<DeleteMessageBatchRequestEntry> = messages
            .iter()
            .filter(|m| !failed.iter().any(|f| Some(f.as_str()) == m.message_id()))
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
            && let Err(e) = sqs
                .delete_message_batch()
                .queue_url(&url)
                .set_entries(Some(done))
                .send()
                .await
        {
            eprintln!(
                "scale: {label}: delete failed: {}",
                aws_sdk_sqs::error::DisplayErrorContext(e)
            );
        }
    }
}

/// How long a shard iterator may return nothing before the poller takes a fresh one after
/// the last record read, seconds (moto can hand out iterators that go stale; see
/// `tern_local::pollers::STALE_CHECK_SECONDS`).
const FRESH_ITERATOR_SECONDS: f64 = 3.0;

async fn stream_poller(
    streams: aws_sdk_dynamodbstreams::Client,
    arn: String,
    mut relay: Function,
    batch: i32,
    max_retries: u32,
    shared: Shared,
) {
    let mut shard: Option<String> = None;
    let mut iterator: Option<String> = None;
    let mut last: Option<String> = None;
    let mut empty_since = tokio::time::Instant::now();
    while !shared.stopped() {
        if shard.is_none() {
            shard = streams
                .describe_stream()
                .stream_arn(&arn)
                .send()
                .await
                .ok()
                .and_then(|d| d.stream_description)
                .and_then(|d| d.shards.and_then(|s| s.into_iter().next()))
                .and_then(|s| s.shard_id);
        }
        let Some(shard_id) = shard.clone() else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        if iterator.is_none() || empty_since.elapsed().as_secs_f64() > FRESH_ITERATOR_SECONDS {
            let request = streams
                .get_shard_iterator()
                .stream_arn(&arn)
                .shard_id(&shard_id);
            let request = match &last {
                Some(seq) => request
                    .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                    .sequence_number(seq),
                None => request.shard_iterator_type(ShardIteratorType::TrimHorizon),
            };
            iterator = request.send().await.ok().and_then(|o| o.shard_iterator);
            empty_since = tokio::time::Instant::now();
        }
        let Some(it) = iterator.clone() else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let out = match streams
            .get_records()
            .shard_iterator(it)
            .limit(batch)
            .send()
            .await
        {
            Ok(o) => o,
            Err(_) => {
                iterator = None;
                continue;
            }
        };
        iterator = out.next_shard_iterator.clone();
        if let Some(seq) = out
            .records()
            .last()
            .and_then(|r| r.dynamodb())
            .and_then(|d| d.sequence_number())
        {
            last = Some(seq.to_owned());
            empty_since = tokio::time::Instant::now();
        }
        let mut records: Vec<Value> = out
            .records()
            .iter()
            .filter(|r| r.event_name().is_some_and(|n| n.as_str() == "INSERT"))
            .map(|r| tern_aws::stream::lambda_record(r, &arn))
            .collect();
        if records.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        for attempt in 0..=max_retries {
            let event = json!({ "Records": records });
            let started = shared.now();
            let answer = relay.invoke(&event).await;
            let reported = match &answer {
                Ok(a) => failures(a).into_iter().next(),
                Err(e) => {
                    eprintln!("scale: relay invocation failed: {e}");
                    records[0]["dynamodb"]["SequenceNumber"]
                        .as_str()
                        .map(str::to_owned)
                }
            };
            let failed_from = reported.as_ref().and_then(|from| {
                records
                    .iter()
                    .position(|r| r["dynamodb"]["SequenceNumber"].as_str() == Some(from))
            });
            shared.note(
                "relay",
                started,
                &event,
                records.len(),
                failed_from.map_or(0, |at| records.len() - at),
            );
            let Some(at) = failed_from else {
                break;
            };
            records.drain(..at);
            if attempt == max_retries {
                eprintln!(
                    "scale: relay gave up on {} record(s) after {max_retries} retries",
                    records.len()
                );
            } else {
                tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt + 1))).await;
            }
        }
    }
}
