//! Issue 9 item 3: DynamoDB per delivery. A delivered webhook costs at most two ledger
//! writes (the claim, and one write that marks it delivered and records the attempt) and,
//! with the endpoint cache warm, no endpoint read; each item stays under 1 KB (one write
//! unit). A 410 seen by this instance disables the endpoint for its next delivery at once,
//! without waiting for the cache to expire. On moto, through the real DynamoDB ledger and
//! endpoint store, with counting wrappers at the port level (one ledger call that writes =
//! one DynamoDB write request in the common case, one store `get` = one GetItem).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use tern_core::endpoint::{EndpointSecret, EndpointUpdate};
use tern_core::ports::{
    AttemptRecord, Claim, DeliveryLedger, DeliveryState, EndpointStore, PortError,
};
use tern_core::{DeadLetterReason, DeliveryMessage, Endpoint, EndpointId, EventId, TenantId};
use tern_handlers::endpoint_cache::CachedEndpoints;
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::sender::{MessageOutcome, SenderDeps};
use tern_local::LocalOptions;
use tern_local::local::LocalTern;
use tern_tests::*;

fn options() -> LocalOptions {
    LocalOptions {
        time_scale: 0.001,
        lookup: Some(no_dns()),
        ..LocalOptions::default()
    }
}

fn metrics() -> Metrics {
    Metrics::new("Tern", MetricsSink::Discard)
}

/// Counts the ledger calls that write: each is one DynamoDB write request on the path
/// it is used for here (no takeover, no race).
struct CountingLedger {
    inner: Arc<dyn DeliveryLedger>,
    writes: AtomicUsize,
}

impl CountingLedger {
    fn writes(&self) -> usize {
        self.writes.load(Ordering::SeqCst)
    }
    fn count(&self) {
        self.writes.fetch_add(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl DeliveryLedger for CountingLedger {
    async fn claim(&self, m: &DeliveryMessage, lease: DateTime<Utc>) -> Result<Claim, PortError> {
        self.count();
        self.inner.claim(m, lease).await
    }
    async fn finish(&self, m: &DeliveryMessage, s: DeliveryState) -> Result<(), PortError> {
        self.count();
        self.inner.finish(m, s).await
    }
    async fn finish_retrying(
        &self,
        m: &DeliveryMessage,
        next: u32,
        due: DateTime<Utc>,
    ) -> Result<(), PortError> {
        self.count();
        self.inner.finish_retrying(m, next, due).await
    }
    async fn list_waiting(&self, m: &DeliveryMessage, due: DateTime<Utc>) -> Result<(), PortError> {
        self.count();
        self.inner.list_waiting(m, due).await
    }
    async fn unlist_waiting(&self, m: &DeliveryMessage) -> Result<(), PortError> {
        self.count();
        self.inner.unlist_waiting(m).await
    }
    async fn record_attempt(
        &self,
        message: &tern_core::DeliveryMessage,
        r: &AttemptRecord,
    ) -> Result<(), PortError> {
        self.count();
        self.inner.record_attempt(message, r).await
    }
    async fn record_delivered(
        &self,
        m: &DeliveryMessage,
        r: &AttemptRecord,
    ) -> Result<(), PortError> {
        self.count();
        self.inner.record_delivered(m, r).await
    }
    async fn history(
        &self,
        tenant: &tern_core::TenantId,
        e: &EventId,
    ) -> Result<Vec<AttemptRecord>, PortError> {
        self.inner.history(tenant, e).await
    }
}

/// Counts `get` (one GetItem each) on the endpoint store below the cache.
struct CountingStore {
    inner: Arc<dyn EndpointStore>,
    reads: AtomicUsize,
}

impl CountingStore {
    fn reads(&self) -> usize {
        self.reads.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl EndpointStore for CountingStore {
    async fn get(&self, t: &TenantId, id: &EndpointId) -> Result<Option<Endpoint>, PortError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.get(t, id).await
    }
    async fn list_for_tenant(&self, t: &TenantId) -> Result<Vec<Endpoint>, PortError> {
        self.inner.list_for_tenant(t).await
    }
    async fn list_all(&self) -> Result<Vec<Endpoint>, PortError> {
        self.inner.list_all().await
    }
    async fn put(&self, e: &Endpoint) -> Result<(), PortError> {
        self.inner.put(e).await
    }
    async fn disable(&self, t: &TenantId, id: &EndpointId, r: &str) -> Result<(), PortError> {
        self.inner.disable(t, id, r).await
    }
    async fn disable_keeping_reason(
        &self,
        t: &TenantId,
        id: &EndpointId,
        r: &str,
    ) -> Result<(), PortError> {
        self.inner.disable_keeping_reason(t, id, r).await
    }
    async fn enable(&self, t: &TenantId, id: &EndpointId) -> Result<(), PortError> {
        self.inner.enable(t, id).await
    }
    async fn delete(&self, t: &TenantId, id: &EndpointId) -> Result<(), PortError> {
        self.inner.delete(t, id).await
    }
    async fn update(
        &self,
        t: &TenantId,
        id: &EndpointId,
        u: &EndpointUpdate,
    ) -> Result<(), PortError> {
        self.inner.update(t, id, u).await
    }
    async fn set_secrets(
        &self,
        t: &TenantId,
        id: &EndpointId,
        s: &[EndpointSecret],
    ) -> Result<(), PortError> {
        self.inner.set_secrets(t, id, s).await
    }
}

struct Counted {
    deps: SenderDeps,
    ledger: Arc<CountingLedger>,
    store: Arc<CountingStore>,
}

/// The deployment's sender, with counters on the real ledger and on the real endpoint
/// store below a fresh endpoint cache (the deployment's default, 30 s).
fn counted(local: &LocalTern) -> Counted {
    let s = &local.sender;
    let store = Arc::new(CountingStore {
        inner: Arc::new(local.endpoint_table()),
        reads: AtomicUsize::new(0),
    });
    let ledger = Arc::new(CountingLedger {
        inner: s.ledger.clone(),
        writes: AtomicUsize::new(0),
    });
    let deps = SenderDeps {
        endpoints: Arc::new(CachedEndpoints::new(
            store.clone(),
            Duration::from_secs(tern_handlers::endpoint_cache::DEFAULT_ENDPOINT_CACHE_SECONDS),
        )),
        ledger: ledger.clone(),
        delivery_queue: s.delivery_queue.clone(),
        dlq: s.dlq.clone(),
        scheduler: s.scheduler.clone(),
        client: s.client.clone(),
        policy: s.policy.clone(),
        breaker: s.breaker.clone(),
    };
    Counted {
        deps,
        ledger,
        store,
    }
}

fn message(tenant: &str, ep: &Endpoint, n: u32) -> DeliveryMessage {
    let event = tern_outbox::OutboxWriter::new("unused")
        .prepare("order.paid", tenant, format!(r#"{{"n":{n}}}"#))
        .unwrap()
        .event;
    DeliveryMessage::first(event, ep.id.clone())
}

async fn send(deps: &SenderDeps, m: &DeliveryMessage) -> MessageOutcome {
    let (response, results) =
        tern_handlers::sender::handle(deps, sqs_event(&[m.to_body()]), &metrics()).await;
    assert!(response.batch_item_failures.is_empty(), "{results:?}");
    results[0].1.clone().expect("handled")
}

/// The raw items of `tenant`'s event in the attempts table: its partitions in both ledger
/// layouts (the event id, and its 64 sharded ones).
async fn raw_items(
    local: &LocalTern,
    tenant: &TenantId,
    event: &EventId,
) -> Vec<std::collections::HashMap<String, AttributeValue>> {
    let mut items = Vec::new();
    let partitions = std::iter::once(event.to_string()).chain(
        tern_aws::ledger_keys::sharded_partitions(tenant, event, tern_core::spread::PAIR_SHARDS),
    );
    for partition in partitions {
        items.extend(
            local
                .dynamodb()
                .query()
                .table_name(&local.resources.attempts_table)
                .key_condition_expression("event_id = :e")
                .expression_attribute_values(":e", AttributeValue::S(partition))
                .send()
                .await
                .unwrap()
                .items
                .unwrap_or_default(),
        );
    }
    items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_costs_two_ledger_writes_and_no_endpoint_read_when_the_cache_is_warm() {
    let local = deployment_without_pollers("ddb-cost", options()).await;
    let receiver = Receiver::start().await.unwrap();
    let tenant = "tnt_cost";
    let ep = add_endpoint(&local, tenant, &receiver.url("/ok"), &["*"], None).await;
    let c = counted(&local);

    // Cold: the first delivery reads the endpoint once.
    let first = message(tenant, &ep, 0);
    assert_eq!(
        send(&c.deps, &first).await,
        MessageOutcome::Delivered { attempt: 1 }
    );
    assert_eq!(c.store.reads(), 1, "cold cache: one read");
    assert!(
        c.ledger.writes() <= 2,
        "{} ledger writes for one delivery",
        c.ledger.writes()
    );

    // Warm: every later delivery to it.
    const N: usize = 5;
    let (writes_before, reads_before) = (c.ledger.writes(), c.store.reads());
    let mut events = vec![first.event.id.clone()];
    for n in 1..=N {
        let m = message(tenant, &ep, u32::try_from(n).unwrap());
        assert_eq!(
            send(&c.deps, &m).await,
            MessageOutcome::Delivered { attempt: 1 }
        );
        events.push(m.event.id.clone());
    }
    let writes = c.ledger.writes() - writes_before;
    let reads = c.store.reads() - reads_before;
    eprintln!(
        "per delivery (warm): {:.1} ledger writes, {:.1} endpoint reads",
        writes as f64 / N as f64,
        reads as f64 / N as f64
    );
    assert!(writes <= 2 * N, "{writes} ledger writes for {N} deliveries");
    assert_eq!(reads, 0, "no endpoint read with the cache warm");
    assert_eq!(receiver.requests("/ok").len(), N + 1);

    // What `tern attempts` and the tests read is unchanged: one delivered row per event.
    for id in &events {
        let h = local
            .sender
            .ledger
            .history(&TenantId::new(tenant).unwrap(), id)
            .await
            .unwrap();
        assert_eq!(h.len(), 1, "{h:#?}");
        let r = &h[0];
        assert_eq!(
            (
                &r.endpoint_id,
                r.replay_count,
                r.attempt,
                r.takeover,
                r.status,
                r.outcome.as_str()
            ),
            (&ep.id, 0, 1, 0, Some(200), "delivered"),
            "{r:#?}"
        );
        assert_eq!(r.next_wait_seconds, None);
        // Only the delivery item: no separate attempt row for a success. And it never
        // entered the waiting index: no index write on the happy path.
        let items = raw_items(&local, &TenantId::new(tenant).unwrap(), id).await;
        assert_eq!(items.len(), 1, "{items:#?}");
        assert!(
            !items[0].contains_key(tern_aws::waiting::WAIT_ENDPOINT),
            "{:#?}",
            items[0]
        );
    }
    // A redelivery of a delivered pair is dropped without a POST (the claim says so).
    assert_eq!(
        send(&c.deps, &first).await,
        MessageOutcome::Duplicate(Claim::AlreadyDelivered)
    );
    assert_eq!(receiver.requests("/ok").len(), N + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivered_item_with_the_longest_ids_is_under_one_kilobyte() {
    let local = deployment_without_pollers("ddb-size", options()).await;
    let receiver = Receiver::start().await.unwrap();
    // Ids at their limit (128 bytes, tern_core::ids::MAX_ID_LEN).
    let long = |c: char| c.to_string().repeat(tern_core::ids::MAX_ID_LEN);
    let tenant = TenantId::new(long('t')).unwrap();
    let ep = add_endpoint_with(
        &local,
        EndpointId::new(long('e')).unwrap(),
        tenant.as_str(),
        &receiver.url("/ok"),
        &["*"],
        None,
        None,
    )
    .await;
    let event = tern_outbox::OutboxWriter::new("unused")
        .prepare_with_id(
            EventId::new(long('v')).unwrap(),
            "order.paid",
            tenant.as_str(),
            r#"{"big":"ids"}"#,
        )
        .unwrap()
        .event;
    let m = DeliveryMessage::first(event.clone(), ep.id.clone());
    assert_eq!(
        send(&local.sender, &m).await,
        MessageOutcome::Delivered { attempt: 1 }
    );
    let items = raw_items(&local, &tenant, &event.id).await;
    assert_eq!(items.len(), 1, "{items:#?}");
    let size = tern_aws::ledger::item_size_bytes(&items[0]);
    eprintln!("delivered item with 128-byte ids: {size} bytes");
    assert!(size < 1024, "{size} bytes: {:#?}", items[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_410_seen_by_this_instance_disables_the_endpoint_for_its_next_delivery_at_once() {
    let local = deployment_without_pollers("ddb-gone", options()).await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set(
        "/g",
        Behavior::Script(vec![Reply::status(200), Reply::status(410)]),
    );
    let tenant = "tnt_gone_cache";
    let ep = add_endpoint(&local, tenant, &receiver.url("/g"), &["*"], None).await;
    let c = counted(&local);

    // Warm the cache with an enabled endpoint.
    assert_eq!(
        send(&c.deps, &message(tenant, &ep, 0)).await,
        MessageOutcome::Delivered { attempt: 1 }
    );
    assert_eq!(
        send(&c.deps, &message(tenant, &ep, 1)).await,
        MessageOutcome::DeadLettered {
            reason: DeadLetterReason::Gone,
            attempts: 1
        }
    );
    let reads = c.store.reads();
    // Within the cache time, the next delivery is not POSTed: the disable applied here.
    assert_eq!(
        send(&c.deps, &message(tenant, &ep, 2)).await,
        MessageOutcome::DeadLettered {
            reason: DeadLetterReason::EndpointDisabled,
            attempts: 0
        }
    );
    assert_eq!(receiver.requests("/g").len(), 2, "no POST after the 410");
    // Before refusing, the sender asks the registry once past the cache (an enable made
    // elsewhere would show): it agrees, the 410's disable reached it.
    assert_eq!(c.store.reads(), reads + 1, "one read past the cache");
    // And the store has it too, for every other instance.
    let stored = local
        .sender
        .endpoints
        .get(&ep.tenant_id, &ep.id)
        .await
        .unwrap()
        .unwrap();
    assert!(!stored.enabled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_disable_through_the_senders_store_applies_at_once() {
    let local = deployment_without_pollers("ddb-disable", options()).await;
    let receiver = Receiver::start().await.unwrap();
    let tenant = "tnt_disable_cache";
    let ep = add_endpoint(&local, tenant, &receiver.url("/d"), &["*"], None).await;
    let c = counted(&local);
    assert_eq!(
        send(&c.deps, &message(tenant, &ep, 0)).await,
        MessageOutcome::Delivered { attempt: 1 }
    );
    tern_local::ops::disable_endpoint(c.deps.endpoints.as_ref(), Some(&ep.tenant_id), &ep.id, None)
        .await
        .unwrap();
    assert_eq!(
        send(&c.deps, &message(tenant, &ep, 1)).await,
        MessageOutcome::DeadLettered {
            reason: DeadLetterReason::EndpointDisabled,
            attempts: 0
        }
    );
    assert_eq!(receiver.requests("/d").len(), 1);
    // A secret rotated through it signs the next request at once, too.
    tern_local::ops::enable_endpoint(c.deps.endpoints.as_ref(), None, Some(&ep.tenant_id), &ep.id)
        .await
        .unwrap();
    tern_local::ops::rotate_secret(c.deps.endpoints.as_ref(), &ep.tenant_id, &ep.id, 1)
        .await
        .unwrap();
    assert_eq!(
        send(&c.deps, &message(tenant, &ep, 2)).await,
        MessageOutcome::Delivered { attempt: 1 }
    );
    let last = receiver.requests("/d").pop().unwrap();
    let signatures = last.header("webhook-signature").unwrap_or_default();
    assert_eq!(
        signatures.split(' ').count(),
        2,
        "new and previous secret: {signatures}"
    );
}

/// The attempt row a sender would record for a 2xx of `m`'s try `takeover`.
fn success(m: &DeliveryMessage, takeover: u32, status: u16) -> AttemptRecord {
    AttemptRecord {
        event_id: m.event.id.clone(),
        endpoint_id: m.endpoint_id.clone(),
        replay_count: m.replay_count,
        attempt: m.attempt,
        takeover,
        started_at: Utc::now(),
        latency_ms: 7,
        status: Some(status),
        error_class: None,
        error: None,
        location: None,
        response_excerpt: None,
        excerpt_truncated: false,
        outcome: "delivered".into(),
        next_wait_seconds: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_holder_and_its_takeover_both_keep_their_success_whatever_the_order() {
    let local = deployment_without_pollers("ddb-race", options()).await;
    let ledger = local.sender.ledger.clone();
    let ep = add_endpoint(&local, "tnt_race", "http://127.0.0.1:9/x", &["*"], None).await;
    for slow_first in [false, true] {
        let m = message("tnt_race", &ep, u32::from(slow_first));
        // The slow holder's lease is over when the redelivery comes: it is taken over.
        let past = Utc::now() - chrono::Duration::seconds(1);
        assert_eq!(ledger.claim(&m, past).await.unwrap(), Claim::Granted);
        let later = Utc::now() + chrono::Duration::seconds(60);
        assert_eq!(
            ledger.claim(&m, later).await.unwrap(),
            Claim::TakenOver { takeover: 1 }
        );
        let (slow, taker) = (success(&m, 0, 201), success(&m, 1, 200));
        if slow_first {
            ledger.record_delivered(&m, &slow).await.unwrap();
            ledger.record_delivered(&m, &taker).await.unwrap();
        } else {
            ledger.record_delivered(&m, &taker).await.unwrap();
            ledger.record_delivered(&m, &slow).await.unwrap();
        }
        // A write the SDK retried after its answer was lost lands once.
        ledger.record_delivered(&m, &taker).await.unwrap();
        let h = ledger
            .history(&m.event.tenant_id, &m.event.id)
            .await
            .unwrap();
        let tries: Vec<(u32, Option<u16>, &str)> = h
            .iter()
            .map(|r| (r.takeover, r.status, r.outcome.as_str()))
            .collect();
        assert_eq!(
            tries,
            [(0, Some(201), "delivered"), (1, Some(200), "delivered")],
            "slow_first={slow_first}: {h:#?}"
        );
        // And the pair is delivered: a later redelivery is not sent.
        assert_eq!(
            ledger.claim(&m, later).await.unwrap(),
            Claim::AlreadyDelivered
        );
    }
}

/// The waiting index's entries of one endpoint, as `tern waiting --endpoint` reads them
/// (a Query of each of the index partitions its entries spread over), raw.
async fn index_entries(
    local: &LocalTern,
    ep: &Endpoint,
) -> Vec<std::collections::HashMap<String, AttributeValue>> {
    let mut all = Vec::new();
    for key in tern_aws::waiting::wait_keys(&ep.tenant_id, &ep.id) {
        all.extend(
            local
                .dynamodb()
                .query()
                .table_name(&local.resources.attempts_table)
                .index_name(tern_aws::waiting::WAITING_INDEX)
                .key_condition_expression("wait_ep = :k")
                .expression_attribute_values(":k", AttributeValue::S(key))
                .send()
                .await
                .unwrap()
                .items
                .unwrap_or_default(),
        );
    }
    all
}

/// Issue 17: "what is waiting" costs no scan of SQS or Step Functions: a retry is listed by
/// the write that already marks its claim finished, and taken off by the next claim. Per
/// retry that is the same three ledger writes as before (claim, finish, attempt row), each
/// item under 1 KB, plus two index writes of an entry under 1 KB (listed, unlisted): 2 write
/// units. A delivery held back before its first attempt is listed once (one write, one
/// index write), not once per time it comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_is_listed_as_waiting_by_its_finish_and_unlisted_by_its_next_claim() {
    let local = deployment_without_pollers("ddb-wait", options()).await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set(
        "/w",
        Behavior::Script(vec![Reply::status(503), Reply::status(200)]),
    );
    let tenant = "tnt_wait_cost";
    let ep = add_endpoint(&local, tenant, &receiver.url("/w"), &["*"], None).await;
    let c = counted(&local);
    let first = message(tenant, &ep, 0);
    let before = Utc::now();
    let MessageOutcome::Retrying { wait_seconds, .. } = send(&c.deps, &first).await else {
        panic!("a 503 is retried");
    };
    let failed_writes = c.ledger.writes();
    assert_eq!(
        failed_writes, 3,
        "claim, finish (which lists it), attempt row: as many writes as before the list"
    );
    // Listed: the next attempt, due when its queue delay ends.
    let entries = index_entries(&local, &ep).await;
    assert_eq!(entries.len(), 1, "{entries:#?}");
    let entry = &entries[0];
    let size = tern_aws::ledger::item_size_bytes(entry);
    let waiting =
        tern_aws::DynamoLedger::new(local.dynamodb(), &local.resources.attempts_table, 30);
    let read = tern_core::waiting::WaitingList::waiting(
        &waiting,
        &tern_core::waiting::WaitingScope::Endpoint(ep.tenant_id.clone(), ep.id.clone()),
        100,
    )
    .await
    .unwrap();
    assert!(read.complete);
    let d = &read.entries[0];
    assert_eq!((&d.event_id, d.attempt), (&first.event.id, 2));
    let real = tern_core::retry::real_wait_seconds(wait_seconds, options().time_scale);
    let due_after = before + chrono::Duration::seconds(i64::try_from(real).unwrap());
    assert!(
        d.due_at >= due_after && d.due_at <= Utc::now() + chrono::Duration::seconds(2),
        "due {} for a real wait of {real} s from {before}",
        d.due_at
    );
    let state = raw_items(&local, &first.event.tenant_id, &first.event.id)
        .await
        .into_iter()
        .find(|i| matches!(i.get("sk"), Some(AttributeValue::S(sk)) if sk.starts_with("state#")))
        .unwrap();
    let state_size = tern_aws::ledger::item_size_bytes(&state);
    assert!(size < 1024 && state_size < 1024, "{size} / {state_size}");

    // The next attempt's claim takes it off the list, in the claim's own write.
    let next = first.next_attempt(Utc::now(), Some(503), None);
    assert_eq!(
        send(&c.deps, &next).await,
        MessageOutcome::Delivered { attempt: 2 }
    );
    assert_eq!(c.ledger.writes() - failed_writes, 2, "claim, delivered");
    assert!(index_entries(&local, &ep).await.is_empty(), "unlisted");
    eprintln!(
        "per retry: {failed_writes} ledger writes as before; index entry {size} bytes (1 write unit) \
         written twice (listed, unlisted): +2 write units; state item {state_size} bytes"
    );

    // Held back before its first attempt (the receiver asked for a pause): listed once.
    let health = tern_aws::DynamoHealthStore::new(local.dynamodb(), &local.resources.health_table);
    let until = Utc::now() + chrono::Duration::seconds(600);
    assert!(
        tern_core::health::HealthStore::apply(
            &health,
            &ep.tenant_id,
            &ep.id,
            &tern_core::health::HealthChange::Pause { until, pauses: 1 },
            Utc::now(),
        )
        .await
        .unwrap()
    );
    tokio::time::sleep(Duration::from_millis(50)).await; // the health cache, scaled
    let held = message(tenant, &ep, 1);
    let writes = c.ledger.writes();
    let MessageOutcome::Deferred { .. } = send(&c.deps, &held).await else {
        panic!("paused: held back");
    };
    assert_eq!(c.ledger.writes() - writes, 1, "listed once");
    let entries = index_entries(&local, &ep).await;
    assert_eq!(entries.len(), 1, "{entries:#?}");
    // The copy that comes back held again carries the flag: no second write.
    let again = DeliveryMessage {
        listed_waiting: true,
        ..held.clone()
    };
    let writes = c.ledger.writes();
    let MessageOutcome::Deferred { .. } = send(&c.deps, &again).await else {
        panic!("still paused");
    };
    assert_eq!(
        c.ledger.writes(),
        writes,
        "no write for a delivery already listed"
    );
    assert_eq!(
        receiver.requests("/w").len(),
        2,
        "nothing POSTed while paused"
    );
}

/// Issue 18: what the endpoint log (the delivery log by endpoint) adds, counted on the
/// wire: one `PutItem` per endpoint per batch, its item under 1 KB (one write unit). A
/// full batch of ten deliveries to one endpoint pays 0.1 write unit per delivery; a batch
/// spread over ten endpoints, 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_log_costs_one_write_per_endpoint_per_batch() {
    use tern_tests::fault_proxy::Service;
    let proxy = moto_proxy().await;
    let local = deployment_through_without_pollers(&proxy, "ddb-log", options()).await;
    let receiver = Receiver::start().await.unwrap();
    let tenant = "tnt_logcost";
    let one = add_endpoint(&local, tenant, &receiver.url("/one"), &["*"], None).await;
    // Warm the endpoint cache and the health record: the batch below counts only what a
    // steady stream of deliveries writes.
    send(&local.sender, &message(tenant, &one, 999)).await;
    let puts = || proxy.count(&Service::DynamoDb, "PutItem");
    let updates = || proxy.count(&Service::DynamoDb, "UpdateItem");

    let batch: Vec<DeliveryMessage> = (0..10).map(|n| message(tenant, &one, n)).collect();
    let (p0, u0) = (puts(), updates());
    let bodies: Vec<String> = batch.iter().map(DeliveryMessage::to_body).collect();
    let (response, results) =
        tern_handlers::sender::handle(&local.sender, sqs_event(&bodies), &metrics()).await;
    assert!(response.batch_item_failures.is_empty(), "{results:?}");
    let (p1, u1) = (puts() - p0, updates() - u0);
    eprintln!(
        "batch of 10 to one endpoint: {u1} UpdateItem (claims, delivered marks, health) and {p1} PutItem (the endpoint log)"
    );
    assert_eq!(p1, 1, "one endpoint log item for the batch");
    assert_eq!(
        u1,
        10 * 2 + 1,
        "two ledger writes per delivery, one health write"
    );

    // The item: ten lines, under 1 KB even with 36-character event ids.
    let mut items = Vec::new();
    for partition in tern_aws::endpoint_log::log_partitions(&one.id) {
        items.extend(
            local
                .dynamodb()
                .query()
                .table_name(&local.resources.attempts_table)
                .key_condition_expression("event_id = :p")
                .expression_attribute_values(":p", AttributeValue::S(partition))
                .send()
                .await
                .unwrap()
                .items
                .unwrap_or_default(),
        );
    }
    let item = items
        .iter()
        .find(|i| matches!(i.get("entries"), Some(AttributeValue::S(s)) if s.lines().count() == 10))
        .expect("the batch's item");
    let size = tern_aws::ledger::item_size_bytes(item);
    eprintln!("endpoint log item for 10 deliveries: {size} bytes");
    assert!(size <= 1024, "{size} bytes: more than one write unit");

    // The same batch spread over ten endpoints: one item per endpoint.
    let mut spread = Vec::new();
    for n in 0..10 {
        let ep = add_endpoint(
            &local,
            tenant,
            &receiver.url(&format!("/e{n}")),
            &["*"],
            None,
        )
        .await;
        send(&local.sender, &message(tenant, &ep, 500 + n)).await;
        spread.push(message(tenant, &ep, 600 + n));
    }
    let p0 = puts();
    let bodies: Vec<String> = spread.iter().map(DeliveryMessage::to_body).collect();
    let (response, _) =
        tern_handlers::sender::handle(&local.sender, sqs_event(&bodies), &metrics()).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(
        puts() - p0,
        10,
        "one endpoint log item per endpoint of the batch"
    );
}
