//! The relay at fan-out scale (issue 15 item 5), at the handler level over fakes at the
//! ports: its `SendMessageBatch` calls run concurrently within a bound, and a fan-out that
//! cannot finish before the invocation's deadline resumes where it stopped, each
//! (event, endpoint) message sent exactly once across the invocations.
//!
//! Time is tokio's paused clock: a call that "takes" 100 ms costs no real time, so the
//! 30 s invocations play out in milliseconds. Memory is in `relay_memory.rs` (its own
//! binary, for its allocation counter).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use serde_json::{Value, json};
use tern_core::fanout::{FanOutCheckpoints, FanOutRecord};
use tern_core::ports::{EndpointStore as _, MessageQueue, PortError, QueueEntry};
use tern_core::spread::{LedgerLayout, PAIR_SHARDS};
use tern_core::{DeliveryMessage, Endpoint, EndpointId, EventId, Secret, TenantId};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::relay::RelayDeps;
use tern_tests::fakes::{MemEndpoints, MemQueue};
use tokio::time::Instant;

/// A delivery queue whose every call takes `latency`; it counts the calls in flight (and
/// their peak) and every (event, endpoint) pair it accepted. It keeps no body.
#[derive(Default)]
struct TimedQueue {
    latency: Duration,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    calls: AtomicUsize,
    accepted: Mutex<HashMap<(String, String), usize>>,
    /// The ledger layouts each event's messages carried.
    layouts: Mutex<HashMap<String, std::collections::HashSet<LedgerLayout>>>,
}

impl TimedQueue {
    fn new(latency: Duration) -> Self {
        Self {
            latency,
            ..Self::default()
        }
    }
}

#[async_trait]
impl MessageQueue for TimedQueue {
    async fn send_batch(
        &self,
        entries: &[QueueEntry],
    ) -> Result<Vec<Result<(), PortError>>, PortError> {
        assert!(entries.len() <= 10, "SQS takes at most 10 entries per call");
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.latency).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let mut accepted = self.accepted.lock().unwrap();
        for e in entries {
            let m = DeliveryMessage::parse(&e.body).expect("the relay writes valid messages");
            *accepted
                .entry((m.event.id.to_string(), m.endpoint_id.to_string()))
                .or_default() += 1;
            self.layouts
                .lock()
                .unwrap()
                .entry(m.event.id.to_string())
                .or_default()
                .insert(m.ledger_layout());
        }
        Ok(vec![Ok(()); entries.len()])
    }
    async fn send(&self, _entry: &QueueEntry) -> Result<(), PortError> {
        Ok(())
    }
}

/// Fan-out records in a map, as the attempts-table item keeps them.
#[derive(Default)]
struct MemCheckpoints(Mutex<HashMap<String, FanOutRecord>>);

#[async_trait]
impl FanOutCheckpoints for MemCheckpoints {
    async fn read(
        &self,
        tenant: &TenantId,
        event: &EventId,
    ) -> Result<Option<FanOutRecord>, PortError> {
        Ok(self
            .0
            .lock()
            .unwrap()
            .get(&format!("{tenant}/{event}"))
            .cloned())
    }
    async fn begin(
        &self,
        tenant: &TenantId,
        event: &EventId,
        layout: LedgerLayout,
    ) -> Result<(), PortError> {
        self.0
            .lock()
            .unwrap()
            .entry(format!("{tenant}/{event}"))
            .or_insert(FanOutRecord {
                through: None,
                layout,
            });
        Ok(())
    }
    async fn write(
        &self,
        tenant: &TenantId,
        event: &EventId,
        through: &EndpointId,
        layout: LedgerLayout,
    ) -> Result<(), PortError> {
        let mut map = self.0.lock().unwrap();
        let entry = map
            .entry(format!("{tenant}/{event}"))
            .or_insert_with(|| FanOutRecord {
                through: None,
                layout,
            });
        if entry.through.as_ref().is_none_or(|t| through > t) {
            entry.through = Some(through.clone());
        }
        entry.layout = layout;
        Ok(())
    }
}

fn endpoint_name(i: usize) -> String {
    format!("ep_{i:05}")
}

async fn endpoints(n: usize) -> Arc<MemEndpoints> {
    let store = Arc::new(MemEndpoints::default());
    // Registered in reverse: the relay's order must not depend on the store's.
    for i in (0..n).rev() {
        store
            .put(&Endpoint::new(
                EndpointId::new(endpoint_name(i)).unwrap(),
                TenantId::new("tnt_a").unwrap(),
                "https://receiver.test/hook",
                vec!["*".into()],
                Secret::generate(),
                Utc::now(),
            ))
            .await
            .unwrap();
    }
    store
}

fn insert(i: usize) -> Value {
    json!({
        "eventID": format!("ev{i}"), "eventName": "INSERT", "eventVersion": "1.1",
        "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
        "dynamodb": {
            "Keys": {"event_id": {"S": format!("evt_{i}")}},
            "SequenceNumber": format!("{:021}", 1000 + i),
            "StreamViewType": "NEW_IMAGE",
            "NewImage": {
                "event_id": {"S": format!("evt_{i}")},
                "tern_record": {"S": "outbox_event"},
                "schema_version": {"N": "1"},
                "event_type": {"S": "order.paid"},
                "tenant_id": {"S": "tnt_a"},
                "created_at": {"S": "2026-01-01T00:00:00.000Z"},
                "payload": {"S": format!("{{\"n\":{i}}}")},
                "expires_at": {"N": "1767830400"}
            }
        }
    })
}

fn deps(store: Arc<MemEndpoints>, queue: Arc<TimedQueue>) -> RelayDeps {
    deps_with(store, queue, Arc::new(MemCheckpoints::default()))
}

fn deps_with(
    store: Arc<MemEndpoints>,
    queue: Arc<TimedQueue>,
    checkpoints: Arc<MemCheckpoints>,
) -> RelayDeps {
    RelayDeps {
        endpoints: store,
        delivery_queue: queue,
        failure_queue: Arc::new(MemQueue::default()),
        max_payload_bytes: tern_core::event::DEFAULT_MAX_PAYLOAD_BYTES,
        checkpoints: Some(checkpoints),
    }
}

/// The ledger layout each message carries (issue 29): a fan-out of 50 endpoints or more
/// is spread over 64 partitions, recorded before any message goes (the ledger's readers
/// learn it there); one an older build began and cut short (its record says nothing of a
/// spread) is finished unsharded, so a message sent again claims beside the first one; a
/// small one keeps one partition and writes no record.
#[tokio::test(start_paused = true)]
async fn each_fan_out_keeps_the_ledger_layout_its_first_relay_chose() {
    let queue = Arc::new(TimedQueue::new(Duration::from_millis(1)));
    let checkpoints = Arc::new(MemCheckpoints::default());
    let tenant = TenantId::new("tnt_a").unwrap();
    checkpoints.0.lock().unwrap().insert(
        "tnt_a/evt_2".into(),
        FanOutRecord {
            through: Some(EndpointId::new(endpoint_name(99)).unwrap()),
            layout: LedgerLayout::Unsharded,
        },
    );
    let deps = deps_with(endpoints(300).await, queue.clone(), checkpoints.clone());
    let (response, _) = tern_handlers::relay::handle_value(
        &deps,
        json!({"Records": [insert(1), insert(2)]}),
        &metrics(),
    )
    .await;
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    let wide = LedgerLayout::Sharded {
        shards: PAIR_SHARDS,
    };
    let layouts = queue.layouts.lock().unwrap().clone();
    assert_eq!(
        layouts["evt_1"],
        [wide].into(),
        "a new big fan-out is spread"
    );
    assert_eq!(
        layouts["evt_2"],
        [LedgerLayout::Unsharded].into(),
        "an older build's fan-out stays unsharded"
    );
    let event = |id: &str| EventId::new(id).unwrap();
    let record = checkpoints.read(&tenant, &event("evt_1")).await.unwrap();
    assert_eq!(record.map(|r| r.layout), Some(wide), "recorded for readers");
    let accepted = queue.accepted.lock().unwrap().len();
    assert_eq!(accepted, 300 + 200, "evt_2 resumed after its checkpoint");

    // A small fan-out: one partition, no record.
    let small = Arc::new(TimedQueue::new(Duration::from_millis(1)));
    let none = Arc::new(MemCheckpoints::default());
    let deps = deps_with(endpoints(10).await, small.clone(), none.clone());
    tern_handlers::relay::handle_value(&deps, json!({"Records": [insert(3)]}), &metrics()).await;
    assert_eq!(
        small.layouts.lock().unwrap()["evt_3"],
        [LedgerLayout::Sharded { shards: 1 }].into()
    );
    assert!(none.0.lock().unwrap().is_empty());

    // A relay with no record to write (the retry of one refused message) keeps a big
    // fan-out's pairs in one partition too: readers would not know of a spread.
    let unrecorded = Arc::new(TimedQueue::new(Duration::from_millis(1)));
    let deps = RelayDeps {
        checkpoints: None,
        ..deps_with(endpoints(300).await, unrecorded.clone(), none.clone())
    };
    tern_handlers::relay::handle_value(&deps, json!({"Records": [insert(4)]}), &metrics()).await;
    assert_eq!(
        unrecorded.layouts.lock().unwrap()["evt_4"],
        [LedgerLayout::Sharded { shards: 1 }].into()
    );
}

fn metrics() -> Metrics {
    Metrics::new("Tern", MetricsSink::Discard)
}

/// One event to 300 endpoints, each call taking 50 ms: the calls overlap, never more than
/// the relay's bound at once, and every endpoint gets its message once.
#[tokio::test(start_paused = true)]
async fn send_calls_run_concurrently_within_the_bound() {
    let queue = Arc::new(TimedQueue::new(Duration::from_millis(50)));
    let deps = deps(endpoints(300).await, queue.clone());
    let (response, _) =
        tern_handlers::relay::handle_value(&deps, json!({"Records": [insert(1)]}), &metrics())
            .await;
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    assert_eq!(queue.calls.load(Ordering::SeqCst), 30);
    assert_eq!(
        queue.peak.load(Ordering::SeqCst),
        tern_handlers::relay::MAX_CONCURRENT_SENDS,
        "30 calls of 50 ms: the relay keeps its bound of calls in flight"
    );
    let accepted = queue.accepted.lock().unwrap();
    assert_eq!(accepted.len(), 300);
    assert!(accepted.values().all(|n| *n == 1));
}

/// What Lambda does with one invocation: it gives the handler `timeout` and kills it at
/// the deadline (no answer: the whole batch is retried). Returns the sequence number the
/// handler reported, `Err(())` when it was killed.
async fn invoke(
    deps: &RelayDeps,
    records: &[Value],
    timeout: Duration,
) -> Result<Option<String>, ()> {
    let deadline = Instant::now() + timeout;
    let event = json!({ "Records": records });
    let metrics = metrics();
    let run = tern_handlers::relay::handle_value_before(deps, event, Some(deadline), &metrics);
    match tokio::time::timeout_at(deadline, run).await {
        Ok((response, _)) => Ok(response
            .batch_item_failures
            .first()
            .and_then(|f| f.item_identifier.clone())),
        Err(_) => Err(()),
    }
}

/// Two events to 2,000 endpoints each, each call taking 100 ms (25 rounds of 8 calls per
/// event: 2.5 s), with 10 s invocations (2 s of sending before the 8 s reserve): each
/// invocation stops before its deadline and reports the record it was in; the retried
/// invocation sends only the rest. Each (event, endpoint) message goes out exactly once
/// across all of them.
#[tokio::test(start_paused = true)]
async fn a_fan_out_cut_by_the_deadline_resumes_without_resending() {
    let queue = Arc::new(TimedQueue::new(Duration::from_millis(100)));
    let deps = deps(endpoints(2000).await, queue.clone());
    let mut records = vec![insert(1), insert(2)];
    let (mut invocations, mut killed) = (0, 0);
    loop {
        invocations += 1;
        assert!(invocations <= 5, "the fan-out never finished");
        match invoke(&deps, &records, Duration::from_secs(10)).await {
            Ok(None) => break,
            Ok(Some(sequence)) => {
                let at = records
                    .iter()
                    .position(|r| r["dynamodb"]["SequenceNumber"] == sequence.as_str())
                    .expect("the reported record is one of the batch");
                records.drain(..at);
            }
            // Killed at the deadline: Lambda retries the same batch.
            Err(()) => killed += 1,
        }
    }
    assert_eq!(killed, 0, "the handler answers before its deadline");
    assert!(
        invocations >= 3,
        "each invocation has too little time for a whole fan-out: {invocations}"
    );
    let accepted = queue.accepted.lock().unwrap();
    let twice: Vec<_> = accepted.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "{} messages sent more than once, e.g. {:?}",
        twice.len(),
        twice.first()
    );
    assert_eq!(accepted.len(), 4000, "every (event, endpoint) pair, once");
}

/// The checkpoint item on moto: absent at first, never moved back (a retried or stale
/// write changes nothing), its tenant's own (event ids are per tenant: another tenant's
/// event with the same id starts its fan-out from the first endpoint), and invisible to
/// the attempt log that shares its partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_on_moto_never_move_back_and_stay_out_of_the_attempt_log() {
    let local = tern_tests::deployment_without_pollers(
        "fanoutcheckpoint",
        tern_local::LocalOptions::default(),
    )
    .await;
    let client = aws_sdk_dynamodb::Client::new(&local.aws);
    let store =
        tern_aws::DynamoFanOutCheckpoints::new(client.clone(), &local.resources.attempts_table, 30);
    let event = EventId::generate();
    let (a, b) = (
        TenantId::new("tnt_a").unwrap(),
        TenantId::new("tnt_b").unwrap(),
    );
    let id = |s: &str| EndpointId::new(s).unwrap();
    let wide = LedgerLayout::Sharded {
        shards: PAIR_SHARDS,
    };
    let through = |r: Option<FanOutRecord>| r.and_then(|r| r.through);
    assert_eq!(store.read(&a, &event).await.unwrap(), None);
    // The spread is recorded before any message; a second begin changes nothing.
    store.begin(&a, &event, wide).await.unwrap();
    store
        .begin(&a, &event, LedgerLayout::Sharded { shards: 1 })
        .await
        .unwrap();
    assert_eq!(
        store.read(&a, &event).await.unwrap(),
        Some(FanOutRecord {
            through: None,
            layout: wide
        })
    );
    store
        .write(&a, &event, &id("ep_00100"), wide)
        .await
        .unwrap();
    store
        .write(&a, &event, &id("ep_00050"), wide)
        .await
        .unwrap();
    store
        .write(&a, &event, &id("ep_00100"), wide)
        .await
        .unwrap();
    let read = store.read(&a, &event).await.unwrap();
    assert_eq!(read.as_ref().map(|r| r.layout), Some(wide));
    assert_eq!(through(read), Some(id("ep_00100")));
    assert_eq!(
        store.read(&b, &event).await.unwrap(),
        None,
        "another tenant's event with this id has no checkpoint"
    );
    store
        .write(&b, &event, &id("ep_00010"), LedgerLayout::Unsharded)
        .await
        .unwrap();
    store
        .write(&a, &event, &id("ep_00200"), wide)
        .await
        .unwrap();
    assert_eq!(
        through(store.read(&a, &event).await.unwrap()),
        Some(id("ep_00200"))
    );
    let b_read = store.read(&b, &event).await.unwrap();
    assert_eq!(
        b_read.as_ref().map(|r| r.layout),
        Some(LedgerLayout::Unsharded)
    );
    assert_eq!(through(b_read), Some(id("ep_00010")));
    // A checkpoint an older build wrote (no spread attribute) reads as unsharded.
    let old = EventId::generate();
    client
        .put_item()
        .table_name(&local.resources.attempts_table)
        .item(
            "event_id",
            aws_sdk_dynamodb::types::AttributeValue::S(old.to_string()),
        )
        .item(
            "sk",
            aws_sdk_dynamodb::types::AttributeValue::S(tern_aws::fanout::checkpoint_sk(&a)),
        )
        .item(
            "fanout_through",
            aws_sdk_dynamodb::types::AttributeValue::S("ep_00007".into()),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        store.read(&a, &old).await.unwrap(),
        Some(FanOutRecord {
            through: Some(id("ep_00007")),
            layout: LedgerLayout::Unsharded
        })
    );
    let history = local
        .sender
        .ledger
        .history(&a, &event)
        .await
        .expect("the attempt log reads past the checkpoint item");
    assert!(history.is_empty(), "{history:?}");
}
