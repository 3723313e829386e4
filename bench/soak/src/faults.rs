//! The soak's faults. At the ports (wrappers the soak wires into local mode's sender and
//! relay, as a test would: no fault code in the production path): sender panics before
//! and after the POST, and duplicate delivery messages. On the wire (the fault proxy in
//! front of moto, `tern_tests::fault_proxy`): AWS answers held past the SDK's per-try
//! timeout, throttling, 500s and dropped connections. Every random choice comes from a
//! generator seeded from the run's seed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use serde::Serialize;
use tern_core::DeliveryMessage;
use tern_core::EventId;
use tern_core::delivery_log::{EndpointLogPage, EndpointLogQuery, PairState};
use tern_core::ports::{
    AttemptRecord, Claim, DeliveryLedger, DeliveryState, MessageQueue, PortError, QueueEntry,
};
use tern_core::trace::EventTrace;
use tern_tests::fault_proxy::{Fault, FaultProxy, Rule, RuleId, Service};

/// Text every injected panic starts with (the soak's panic hook keeps them quiet).
pub const PANIC_PREFIX: &str = "soak: injected panic";

/// How often each port fault fires while the faults are on.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PortFaults {
    /// Chance that a granted claim panics right after it is written (before the POST).
    pub panic_after_claim: f64,
    /// Chance that the delivered marker's write panics before it is made (after the POST:
    /// the redelivery takes the claim over once its lease has run out and POSTs again).
    pub panic_before_marker: f64,
    /// Chance that the sender panics right after it queued a retry (after the POST).
    pub panic_after_retry: f64,
    /// Chance that the relay sends a delivery message twice.
    pub duplicate_message: f64,
}

/// Counts of what was injected.
#[derive(Debug, Default, Serialize)]
pub struct Injected {
    /// Panics after a claim, before the POST.
    pub panics_before_post: AtomicU64,
    /// Panics after the POST (before the delivered marker, or after a retry was queued).
    pub panics_after_post: AtomicU64,
    /// Delivery messages sent twice.
    pub duplicate_messages: AtomicU64,
}

/// A switch and a seeded generator shared by the wrappers.
pub struct Dice {
    on: AtomicBool,
    rng: Mutex<StdRng>,
    /// What was injected.
    pub injected: Injected,
    /// The chances.
    pub faults: PortFaults,
}

impl Dice {
    /// Dice seeded with `seed`, on.
    pub fn new(seed: u64, faults: PortFaults) -> Arc<Self> {
        Arc::new(Self {
            on: AtomicBool::new(true),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            injected: Injected::default(),
            faults,
        })
    }

    /// Stops every port fault.
    pub fn off(&self) {
        self.on.store(false, Ordering::SeqCst);
    }

    fn roll(&self, chance: f64) -> bool {
        self.on.load(Ordering::SeqCst)
            && self
                .rng
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .random_bool(chance.clamp(0.0, 1.0))
    }
}

/// The sender's ledger, panicking now and then around the POST. Every method forwards,
/// the ones with a default too (a default would drop the waiting list's writes and the
/// endpoint log's lines).
pub struct PanickingLedger {
    /// The real ledger.
    pub inner: Arc<dyn DeliveryLedger>,
    /// The dice.
    pub dice: Arc<Dice>,
}

#[async_trait]
impl DeliveryLedger for PanickingLedger {
    async fn claim(
        &self,
        message: &DeliveryMessage,
        lease_until: DateTime<Utc>,
    ) -> Result<Claim, PortError> {
        let claim = self.inner.claim(message, lease_until).await;
        if matches!(claim, Ok(c) if c.granted_takeover().is_some())
            && self.dice.roll(self.dice.faults.panic_after_claim)
        {
            self.dice
                .injected
                .panics_before_post
                .fetch_add(1, Ordering::SeqCst);
            panic!("{PANIC_PREFIX} after the claim, before the POST");
        }
        claim
    }

    async fn finish(
        &self,
        message: &DeliveryMessage,
        state: DeliveryState,
    ) -> Result<(), PortError> {
        self.inner.finish(message, state).await
    }

    async fn finish_retrying(
        &self,
        message: &DeliveryMessage,
        next_attempt: u32,
        due_at: DateTime<Utc>,
    ) -> Result<(), PortError> {
        self.inner
            .finish_retrying(message, next_attempt, due_at)
            .await
    }

    async fn list_waiting(
        &self,
        message: &DeliveryMessage,
        due_at: DateTime<Utc>,
    ) -> Result<(), PortError> {
        self.inner.list_waiting(message, due_at).await
    }

    async fn unlist_waiting(&self, message: &DeliveryMessage) -> Result<(), PortError> {
        self.inner.unlist_waiting(message).await
    }

    async fn release(
        &self,
        message: &DeliveryMessage,
        takeover: u32,
        due_at: DateTime<Utc>,
    ) -> Result<(), PortError> {
        self.inner.release(message, takeover, due_at).await
    }
    async fn record_duplicate(&self, message: &DeliveryMessage) -> Result<(), PortError> {
        self.inner.record_duplicate(message).await
    }

    async fn record_dead_letter(&self, message: &DeliveryMessage) -> Result<(), PortError> {
        self.inner.record_dead_letter(message).await
    }

    async fn remove_dead_letter(&self, message: &DeliveryMessage) -> Result<(), PortError> {
        self.inner.remove_dead_letter(message).await
    }

    async fn dead_letters(
        &self,
        query: &tern_core::dead_letters::DeadLetterQuery,
    ) -> Result<tern_core::dead_letters::DeadLetterRead, PortError> {
        self.inner.dead_letters(query).await
    }

    async fn record_attempt(
        &self,
        message: &tern_core::DeliveryMessage,
        record: &AttemptRecord,
    ) -> Result<(), PortError> {
        self.inner.record_attempt(message, record).await
    }

    async fn record_delivered(
        &self,
        message: &DeliveryMessage,
        record: &AttemptRecord,
    ) -> Result<(), PortError> {
        if self.dice.roll(self.dice.faults.panic_before_marker) {
            self.dice
                .injected
                .panics_after_post
                .fetch_add(1, Ordering::SeqCst);
            panic!("{PANIC_PREFIX} after the POST, before the delivered marker");
        }
        self.inner.record_delivered(message, record).await
    }

    async fn history(
        &self,
        tenant: &tern_core::TenantId,
        event: &EventId,
    ) -> Result<Vec<AttemptRecord>, PortError> {
        self.inner.history(tenant, event).await
    }

    async fn trace(
        &self,
        tenant: &tern_core::TenantId,
        event: &EventId,
    ) -> Result<EventTrace, PortError> {
        self.inner.trace(tenant, event).await
    }

    async fn pair_states(
        &self,
        tenant: &tern_core::TenantId,
        event: &EventId,
    ) -> Result<Vec<PairState>, PortError> {
        self.inner.pair_states(tenant, event).await
    }

    async fn append_endpoint_log(&self, records: &[AttemptRecord]) -> Result<(), PortError> {
        self.inner.append_endpoint_log(records).await
    }

    async fn endpoint_log(&self, query: &EndpointLogQuery) -> Result<EndpointLogPage, PortError> {
        self.inner.endpoint_log(query).await
    }
}

/// The sender's delivery queue (retries, deferrals), panicking now and then right after a
/// retry was queued.
pub struct PanickingQueue {
    /// The real queue.
    pub inner: Arc<dyn MessageQueue>,
    /// The dice.
    pub dice: Arc<Dice>,
}

#[async_trait]
impl MessageQueue for PanickingQueue {
    async fn send_batch(
        &self,
        entries: &[QueueEntry],
    ) -> Result<Vec<Result<(), PortError>>, PortError> {
        self.inner.send_batch(entries).await
    }

    async fn send(&self, entry: &QueueEntry) -> Result<(), PortError> {
        let sent = self.inner.send(entry).await;
        // Only a retry (the sender's `send`, attempt > 1) comes after a POST.
        let retry = DeliveryMessage::parse(&entry.body)
            .is_ok_and(|m| m.attempt > 1 && m.not_before.is_none());
        if sent.is_ok() && retry && self.dice.roll(self.dice.faults.panic_after_retry) {
            self.dice
                .injected
                .panics_after_post
                .fetch_add(1, Ordering::SeqCst);
            panic!("{PANIC_PREFIX} after the POST and the retry's enqueue, before the finish");
        }
        sent
    }

    /// Forwarded: the sender hides a message whose put-back SQS did not take.
    async fn change_visibility(
        &self,
        entries: &[tern_core::ports::VisibilityChange],
    ) -> Result<Vec<Result<(), PortError>>, PortError> {
        self.inner.change_visibility(entries).await
    }
}

/// The relay's delivery queue, sending some messages twice (SQS is at-least-once; a
/// relay retried after a timeout sends a record's messages again).
pub struct DuplicatingQueue {
    /// The real queue.
    pub inner: Arc<dyn MessageQueue>,
    /// The dice.
    pub dice: Arc<Dice>,
}

#[async_trait]
impl MessageQueue for DuplicatingQueue {
    async fn send_batch(
        &self,
        entries: &[QueueEntry],
    ) -> Result<Vec<Result<(), PortError>>, PortError> {
        let results = self.inner.send_batch(entries).await?;
        for (entry, r) in entries.iter().zip(&results) {
            if r.is_ok() && self.dice.roll(self.dice.faults.duplicate_message) {
                // The copy's own failure changes nothing: the original is on the queue.
                if self.inner.send(entry).await.is_ok() {
                    self.dice
                        .injected
                        .duplicate_messages
                        .fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        Ok(results)
    }

    async fn send(&self, entry: &QueueEntry) -> Result<(), PortError> {
        self.inner.send(entry).await
    }
}

/// How often each wire fault fires while the faults are on.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct WireFaults {
    /// Chance that an answer is held past the SDK's per-try timeout (2 s): the request
    /// was applied, and the SDK sends it again.
    pub slow: f64,
    /// How long a held answer waits, milliseconds.
    pub slow_ms: u64,
    /// Chance of a throttling answer (not applied).
    pub throttle: f64,
    /// Chance of a 500 (not applied).
    pub server_error: f64,
    /// Chance that the connection is closed after the request was applied.
    pub drop_after: f64,
}

/// The wire rules, one per (operation, fault), each with its own seed.
pub fn wire_rules(faults: &WireFaults, seed: u64) -> Vec<(String, Rule)> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut rules = Vec::new();
    let mut add = |service: Service, op: &str, fault: Fault, chance: f64| {
        if chance > 0.0 {
            let name = format!("{service:?} {op} {fault:?}");
            rules.push((
                name,
                Rule::on(service, op, fault).chance(chance, rng.random()),
            ));
        }
    };
    let slow = Fault::DelayAnswer(Duration::from_millis(faults.slow_ms));
    for op in ["UpdateItem", "PutItem", "Query", "GetItem"] {
        add(Service::DynamoDb, op, slow, faults.slow);
        add(Service::DynamoDb, op, Fault::Throttle, faults.throttle);
        add(
            Service::DynamoDb,
            op,
            Fault::ServerError,
            faults.server_error,
        );
    }
    add(
        Service::DynamoDb,
        "UpdateItem",
        Fault::DropAfterForward,
        faults.drop_after,
    );
    for op in ["SendMessage", "SendMessageBatch"] {
        add(Service::Sqs, op, slow, faults.slow);
        add(Service::Sqs, op, Fault::ServerError, faults.server_error);
        add(Service::Sqs, op, Fault::DropAfterForward, faults.drop_after);
    }
    add(
        Service::Sqs,
        "DeleteMessageBatch",
        Fault::DropAfterForward,
        faults.drop_after,
    );
    add(
        Service::Sqs,
        "DeleteMessageBatch",
        Fault::ServerError,
        faults.server_error,
    );
    add(
        Service::Sqs,
        "ReceiveMessage",
        Fault::ServerError,
        faults.server_error,
    );
    add(
        Service::DynamoDbStreams,
        "GetRecords",
        Fault::Throttle,
        faults.throttle,
    );
    // Issue 29: throttling aimed at the spread keys, at the throttle chance on top of the
    // operation-wide rules: the sharded ledger partitions (claims, markers, attempt rows),
    // the endpoint log's shards, the health items keyed by endpoint, and the writes that
    // list a delivery in the waiting index's shards.
    if faults.throttle > 0.0 {
        for (op, text, what) in [
            ("UpdateItem", r#""S":"ev#"#, "ledger shard"),
            ("PutItem", r#""S":"ev#"#, "ledger shard"),
            ("PutItem", r#""S":"log#"#, "endpoint log shard"),
            ("UpdateItem", "endpoint_key", "health item"),
            ("UpdateItem", ":wep", "waiting index shard"),
        ] {
            rules.push((
                format!("DynamoDb {op} Throttle aimed at the {what}"),
                Rule::on(Service::DynamoDb, op, Fault::Throttle)
                    .body_contains(text)
                    .chance(faults.throttle, rng.random()),
            ));
        }
    }
    rules
}

/// Adds the rules to the proxy; returns their ids with names, to count what fired.
pub fn install(proxy: &FaultProxy, rules: Vec<(String, Rule)>) -> Vec<(String, RuleId)> {
    rules
        .into_iter()
        .map(|(name, rule)| (name, proxy.add(rule)))
        .collect()
}
