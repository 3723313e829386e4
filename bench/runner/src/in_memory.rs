//! Tern on in-memory ports (`tern_core::in_memory`), run the way Lambda runs the sender:
//! the real sender handler (`tern_handlers::sender::handle_within`) in up to N concurrent
//! "instances" (the event source mapping's `maximumConcurrency`), started as the mapping
//! scales in standard mode: [`INITIAL_POLLERS`] concurrent batches at first, one more
//! every [`SCALE_UP_EVERY`] (300 a minute) while messages wait visible, never fewer (an
//! instance once started stays warm for the run: Lambda keeps idle instances for minutes,
//! and the mapping's scaling down is not modelled). Each instance is warm with its own
//! endpoint cache, health cache and HTTP connection pool, each receiving a batch of up to
//! 10 from the delivery queue (visibility timeout 360 s, redrive after 5 receives, fair
//! ordering by `MessageGroupId`), handling it with the invocation's 60 s deadline and the
//! deployed reserve, deleting what succeeded and leaving the batch item failures to their
//! visibility timeout. An instance waits for a message like a long poll: woken by a send,
//! or when a delayed message becomes visible. Time is real: the handler reads the system
//! clock (`Utc::now`, tokio's timers, the HTTP client's deadlines), so no faster clock can
//! drive it without changing it.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use tern_core::health::HealthPolicy;
use tern_core::in_memory::{
    InMemoryEndpoints, InMemoryEventSink, InMemoryHealthStore, InMemoryLedger, InMemoryQueue,
    QueueMessage, QueueSettings,
};
use tern_handlers::deadline::Deadline;
use tern_handlers::endpoint_cache::{CachedEndpoints, DEFAULT_ENDPOINT_CACHE_SECONDS};
use tern_handlers::health::{CircuitBreaker, DEFAULT_HEALTH_CACHE_SECONDS};
use tern_handlers::metrics::{Counts, Metrics, MetricsSink};
use tern_handlers::sender::SenderDeps;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::BoxError;

/// The sender function's timeout (`infra/settings.json` `functions.sender.timeoutSeconds`).
const FUNCTION_TIMEOUT: Duration = Duration::from_secs(60);

/// Longest wait of an idle instance's long poll, as the event source mapping's 20 s.
const LONG_POLL: Duration = Duration::from_secs(20);

/// Concurrent batches an SQS event source mapping starts with in standard mode: 5
/// ("Configuring scaling behavior for SQS event source mappings", Lambda developer
/// guide; `shared/research/scale-facts.md` [S6]).
pub const INITIAL_POLLERS: usize = 5;

/// How often the mapping may add a concurrent batch while messages wait: every 200 ms,
/// its "up to 300 more a minute" (same source).
pub const SCALE_UP_EVERY: Duration = Duration::from_millis(200);

/// Sender outcomes by tenant and kind (`delivered`, `deferred`, ..., `failed` for a batch
/// item failure).
pub type Tally = BTreeMap<String, BTreeMap<String, u64>>;

/// The shared "AWS" side of an in-memory deployment, and its running sender instances.
pub struct InMemoryTern {
    /// The delivery queue.
    pub queue: Arc<InMemoryQueue>,
    /// Its dead-letter queue.
    pub dlq: Arc<InMemoryQueue>,
    /// The delivery ledger.
    pub ledger: Arc<InMemoryLedger>,
    /// Endpoint health.
    pub health: Arc<InMemoryHealthStore>,
    /// The endpoint registry.
    pub endpoints: Arc<InMemoryEndpoints>,
    /// Operational events published.
    pub events: Arc<InMemoryEventSink>,
    /// Every instance's metrics, summed.
    pub metrics: Arc<Metrics>,
    tally: Arc<Mutex<Tally>>,
    stop: Arc<AtomicBool>,
    instances: Arc<Mutex<Vec<JoinHandle<()>>>>,
    /// The mapping's scaling, and the watcher of messages coming due.
    mapping: Vec<JoinHandle<()>>,
}

impl Drop for InMemoryTern {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for m in &self.mapping {
            m.abort();
        }
        for i in self
            .instances
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            i.abort();
        }
    }
}

/// The shared stores an instance runs over.
#[derive(Clone)]
struct Shared {
    queue: Arc<InMemoryQueue>,
    dlq: Arc<InMemoryQueue>,
    ledger: Arc<InMemoryLedger>,
    health: Arc<InMemoryHealthStore>,
    endpoints: Arc<InMemoryEndpoints>,
    events: Arc<InMemoryEventSink>,
    metrics: Arc<Metrics>,
    tally: Arc<Mutex<Tally>>,
    stop: Arc<AtomicBool>,
    wake: Arc<Notify>,
}

/// A warm sender instance's dependencies over the shared stores: its own endpoint cache
/// (30 s), health cache (5 s) and HTTP client, as a warm Lambda instance has.
fn instance_deps(shared: &Shared) -> Result<SenderDeps, BoxError> {
    let client = tern_http::DeliveryClient::new(tern_http::ClientOptions {
        policy: tern_http::DestinationPolicy {
            https_only: false,
            allow: vec!["127.0.0.1/32".parse()?],
            nat64: false,
        },
        ..tern_http::ClientOptions::default()
    })?;
    Ok(SenderDeps {
        endpoints: Arc::new(CachedEndpoints::new(
            shared.endpoints.clone(),
            Duration::from_secs(DEFAULT_ENDPOINT_CACHE_SECONDS),
        )),
        ledger: shared.ledger.clone(),
        delivery_queue: shared.queue.clone(),
        dlq: shared.dlq.clone(),
        // Waits over 900 s are carried by chained queue delays (none comes due in a run).
        scheduler: None,
        client,
        policy: tern_handlers::config::SenderPolicy::default(),
        breaker: Some(Arc::new(CircuitBreaker::new(
            shared.health.clone(),
            shared.events.clone(),
            HealthPolicy::default(),
            1.0,
            Duration::from_secs(DEFAULT_HEALTH_CACHE_SECONDS),
        ))),
    })
}

/// The Lambda SQS event of a received batch.
fn sqs_event(messages: &[QueueMessage]) -> SqsEvent {
    let mut event = SqsEvent::default();
    event.records = messages
        .iter()
        .map(|m| {
            let mut r = SqsMessage::default();
            r.message_id = Some(m.message_id.clone());
            r.receipt_handle = Some(m.receipt_handle.clone());
            r.body = Some(m.body.clone());
            r.attributes = HashMap::from([(
                "ApproximateReceiveCount".to_owned(),
                m.receive_count.to_string(),
            )]);
            if let Some(g) = &m.group_id {
                r.attributes.insert("MessageGroupId".into(), g.clone());
            }
            r.event_source = Some("aws:sqs".into());
            r.event_source_arn = Some("arn:aws:sqs:us-east-1:123456789012:tern-delivery".into());
            r.aws_region = Some("us-east-1".into());
            r
        })
        .collect();
    event
}

impl InMemoryTern {
    /// A deployment with the delivery queue's settings (`fair`: the fair-queue ordering on,
    /// as SQS applies it) and an event source mapping of `maximumConcurrency`
    /// `concurrency`: [`INITIAL_POLLERS`] instances started, more as messages wait.
    ///
    /// # Errors
    /// When an HTTP client cannot be built.
    pub fn start(concurrency: usize, fair: bool) -> Result<Self, BoxError> {
        let dlq = Arc::new(InMemoryQueue::new(QueueSettings::default()));
        let queue = Arc::new(
            InMemoryQueue::new(QueueSettings {
                fair,
                ..QueueSettings::delivery_queue()
            })
            .with_dead_letter_queue(dlq.clone()),
        );
        let wake = Arc::new(Notify::new());
        let w = wake.clone();
        // One waiting instance per send call (a batch of 10 is one call): the others stay
        // in their long poll, as SQS answers one receive with the new messages.
        queue.on_send(Box::new(move || w.notify_one()));
        // The watcher of delayed and timed-out messages hears of sends too (one may come
        // due sooner than what it waits for).
        let watch = Arc::new(Notify::new());
        let w = watch.clone();
        queue.on_send(Box::new(move || w.notify_one()));
        let shared = Shared {
            queue,
            dlq,
            ledger: Arc::new(InMemoryLedger::default()),
            health: Arc::new(InMemoryHealthStore::default()),
            endpoints: Arc::new(InMemoryEndpoints::default()),
            events: Arc::new(InMemoryEventSink::default()),
            metrics: Arc::new(Metrics::new("Tern", MetricsSink::Discard)),
            tally: Arc::new(Mutex::new(Tally::new())),
            stop: Arc::new(AtomicBool::new(false)),
            wake,
        };
        let instances: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let concurrency = concurrency.max(1);
        for _ in 0..INITIAL_POLLERS.min(concurrency) {
            start_instance(&shared, &instances)?;
        }
        let watcher = tokio::spawn(watch_visibility(
            shared.queue.clone(),
            shared.wake.clone(),
            watch,
        ));
        let mapping = {
            let (shared, instances) = (shared.clone(), instances.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(SCALE_UP_EVERY);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let running = instances
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .len();
                    if running >= concurrency {
                        return;
                    }
                    if shared.queue.counts().visible > 0
                        && let Err(e) = start_instance(&shared, &instances)
                    {
                        eprintln!("in-memory instance not started: {e}");
                    }
                }
            })
        };
        Ok(Self {
            queue: shared.queue,
            dlq: shared.dlq,
            ledger: shared.ledger,
            health: shared.health,
            endpoints: shared.endpoints,
            events: shared.events,
            metrics: shared.metrics,
            tally: shared.tally,
            stop: shared.stop,
            instances,
            mapping: vec![mapping, watcher],
        })
    }

    /// Sender instances started so far (concurrent batches the mapping has reached).
    pub fn instances(&self) -> usize {
        self.instances
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Sender outcomes so far, by tenant and kind; `reset` starts the count afresh.
    pub fn tally(&self, reset: bool) -> Tally {
        let mut t = self.tally.lock().unwrap_or_else(PoisonError::into_inner);
        if reset {
            std::mem::take(&mut *t)
        } else {
            t.clone()
        }
    }

    /// Every instance's metrics so far, summed.
    pub fn counts(&self) -> Counts {
        self.metrics.snapshot()
    }
}

/// Wakes one idle instance whenever a delayed or timed-out message comes due: one
/// watcher, so that each message coming due wakes one long poll, not every idle instance
/// at once (which, with thousands of deferrals coming back a second apart, made every
/// instance take the queue's lock for each of them: a harness cost, not Tern's).
async fn watch_visibility(queue: Arc<InMemoryQueue>, wake: Arc<Notify>, watch: Arc<Notify>) {
    loop {
        let notified = watch.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let now = Instant::now();
        match queue.next_visible_at() {
            Some(t) if t <= now => {
                // Due (made visible by the next receive): an instance receives it; look
                // again shortly, once it has.
                wake.notify_one();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            next => {
                let until = next.map_or(now + LONG_POLL, |t| t.min(now + LONG_POLL));
                tokio::select! {
                    () = &mut notified => {}
                    () = tokio::time::sleep_until(until.into()) => {}
                }
            }
        }
    }
}

/// Starts one more warm sender instance.
fn start_instance(shared: &Shared, instances: &Mutex<Vec<JoinHandle<()>>>) -> Result<(), BoxError> {
    let deps = instance_deps(shared)?;
    let shared = shared.clone();
    let handle = tokio::spawn(async move {
        instance(
            deps,
            shared.queue,
            shared.wake,
            shared.stop,
            shared.metrics,
            shared.tally,
        )
        .await;
    });
    instances
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(handle);
    Ok(())
}

/// One warm sender instance: receive a batch, handle it, delete what succeeded; wait like
/// a long poll when the queue has nothing visible.
async fn instance(
    deps: SenderDeps,
    queue: Arc<InMemoryQueue>,
    wake: Arc<Notify>,
    stop: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
    tally: Arc<Mutex<Tally>>,
) {
    while !stop.load(Ordering::SeqCst) {
        let notified = wake.notified();
        tokio::pin!(notified);
        // Registered before the receive, so a send between the two is not missed.
        notified.as_mut().enable();
        let batch = match queue.receive_messages(10, None) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("in-memory receive refused: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if batch.is_empty() {
            // Woken by a send or by the watcher of messages coming due, one instance at
            // a time, as SQS answers one long poll per message.
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep(LONG_POLL) => {}
            }
            continue;
        }
        // Another instance may take what is left.
        wake.notify_one();
        let deadline = Deadline::at(
            Instant::now() + FUNCTION_TIMEOUT,
            tern_aws::wiring::sender_time_reserve(),
        );
        let batch_metrics = Metrics::new("Tern", MetricsSink::Discard);
        let (response, results) = tern_handlers::sender::handle_within(
            &deps,
            sqs_event(&batch),
            &batch_metrics,
            deadline,
        )
        .await;
        let failed: Vec<&str> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        for m in &batch {
            if !failed.contains(&m.message_id.as_str())
                && let Err(e) = queue.delete_message(&m.receipt_handle)
            {
                eprintln!("in-memory delete refused: {e}");
            }
        }
        let counts = batch_metrics.snapshot();
        metrics.update(|c| add_counts(c, &counts));
        let mut t = tally.lock().unwrap_or_else(PoisonError::into_inner);
        for (id, result) in &results {
            let tenant = batch
                .iter()
                .find(|m| &m.message_id == id)
                .and_then(|m| m.group_id.clone())
                .unwrap_or_default();
            let kind = result.as_ref().map_or("failed", |o| o.kind());
            *t.entry(tenant).or_default().entry(kind.into()).or_default() += 1;
        }
    }
}

/// Adds the counters the benchmark reports.
fn add_counts(total: &mut Counts, batch: &Counts) {
    total.attempts += batch.attempts;
    total.attempts_succeeded += batch.attempts_succeeded;
    total.attempts_failed += batch.attempts_failed;
    total.retries += batch.retries;
    total.dead_letters += batch.dead_letters;
    total.duplicates += batch.duplicates;
    total.deferred += batch.deferred;
    total.probes += batch.probes;
    total.circuits_opened += batch.circuits_opened;
    total.circuits_closed += batch.circuits_closed;
    total.requeued += batch.requeued;
}
