//! Issue 15, "never lose, never loop", items 1 to 4: a disabled endpoint's deliveries are
//! dead-lettered with a trace and recovered by enable + replay; one replay run replays a
//! delivery at most once and a bounce keeps why it failed; a replay right after `enable`
//! is not refused on the sender's cached "disabled"; the endpoint cache follows the time
//! scale; a throttled Step Functions start does not POST the attempt again; and the
//! handler answers before its invocation's deadline without re-sending what it POSTed.
//!
//! Items 1 to 3 run on a local deployment (moto, the pollers, real receivers); item 4
//! drives the handler over slow fakes at the ports.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tern_core::ports::{
    AttemptRecord, Claim, DelayScheduler, DeliveryLedger, DeliveryState, EndpointStore,
    MessageQueue, PortError, QueueEntry,
};
use tern_core::{
    DeadLetter, DeadLetterReason, DeliveryMessage, Endpoint, EndpointId, EventId, RetrySchedule,
    TenantId,
};
use tern_handlers::config::SenderPolicy;
use tern_handlers::deadline::{Deadline, TimeReserve};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::replay::{ReplayFilters, ReplayRequest};
use tern_handlers::sender::{MessageOutcome, NOT_STARTED, SenderDeps};
use tern_http::{ClientOptions, DeliveryClient, DestinationPolicy};
use tern_local::LocalOptions;
use tern_local::ops;
use tern_tests::fakes::{MemEndpoints, MemLedger, MemQueue};
use tern_tests::*;

fn metrics() -> Metrics {
    Metrics::new("Tern", MetricsSink::Discard)
}

fn fast() -> LocalOptions {
    LocalOptions {
        time_scale: 0.001,
        lookup: Some(no_dns()),
        console_port: None,
        ..LocalOptions::default()
    }
}

/// The endpoint registry as the `tern` CLI reaches it: straight to the table, past the
/// sender's cache.
fn cli_store(local: &tern_local::LocalTern) -> tern_aws::DynamoEndpointStore {
    local.endpoint_table()
}

/// Distinct `webhook-id`s the receiver got on `path`, and how many requests in all.
fn received(receiver: &Receiver, path: &str) -> (HashSet<String>, usize) {
    let requests = receiver.requests(path);
    let ids = requests
        .iter()
        .filter_map(|r| r.header("webhook-id").map(str::to_owned))
        .collect();
    (ids, requests.len())
}

// ---------------------------------------------------------------------------------------
// Item 1: events published while an endpoint is disabled leave a trace and come back.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_for_a_disabled_endpoint_are_dead_lettered_shown_and_delivered_after_enable() {
    let (local, _rx) = deployment("nl-disabled", fast()).await;
    let receiver = Receiver::start().await.unwrap();
    let tenant = "tnt_nl_disabled";
    let ep = add_endpoint(&local, tenant, &receiver.url("/d"), &["*"], None).await;
    let cli = cli_store(&local);
    ops::disable_endpoint(&cli, Some(&ep.tenant_id), &ep.id, Some("maintenance"))
        .await
        .unwrap();

    let mut events = Vec::new();
    for n in 0..5 {
        events.push(publish(&local, "order.paid", tenant, &format!(r#"{{"n":{n}}}"#)).await);
    }
    let all_dead = eventually(Duration::from_secs(30), async || {
        dead_letters(&local).await.len() == 5
    })
    .await;
    let dead = dead_letters(&local).await;
    assert!(
        all_dead,
        "5 dead letters expected, the DLQ holds {}",
        dead.len()
    );
    for d in &dead {
        assert_eq!(d.endpoint_id, ep.id);
        assert_eq!(
            d.dead_letter.as_ref().map(|r| r.reason),
            Some(DeadLetterReason::EndpointDisabled)
        );
    }
    assert!(
        receiver.requests("/d").is_empty(),
        "nothing sent while disabled"
    );

    // `tern attempts <event>` shows each pair with its reason (the row follows the dead
    // letter: it is for people).
    for id in &events {
        let logged = eventually(Duration::from_secs(10), async || {
            let history = local
                .sender
                .ledger
                .history(&ep.tenant_id, id)
                .await
                .unwrap();
            !ops::attempts::report(id.as_str(), None, &history)
                .dead_letters
                .is_empty()
        })
        .await;
        let history = local
            .sender
            .ledger
            .history(&ep.tenant_id, id)
            .await
            .unwrap();
        assert!(logged, "{id}: {history:?}");
        let report = ops::attempts::report(id.as_str(), None, &history);
        assert_eq!(report.dead_letters.len(), 1, "{id}: {history:?}");
        assert_eq!(report.dead_letters[0].reason, "endpoint_disabled");
        assert_eq!(report.dead_letters[0].endpoint_id, ep.id.as_str());
        let mut text = Vec::new();
        ops::attempts::print_report(&mut text, &report).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("in DLQ: endpoint_disabled"), "{text}");
        assert!(
            text.contains("not sent: the endpoint is disabled"),
            "{text}"
        );
    }

    // Enable, replay: each is delivered, once.
    ops::enable_endpoint(&cli, None, Some(&ep.tenant_id), &ep.id)
        .await
        .unwrap();
    let summary = tern_handlers::replay::handle(
        &local.replay,
        ReplayRequest {
            filters: ReplayFilters {
                endpoint_id: Some(ep.id.clone()),
                ..ReplayFilters::default()
            },
            max_seconds: Some(10),
            ..ReplayRequest::default()
        },
        &metrics(),
    )
    .await
    .unwrap();
    assert_eq!(summary.replayed, 5, "{summary:?}");
    receiver.wait_for("/d", 5, Duration::from_secs(30)).await;
    let (ids, requests) = received(&receiver, "/d");
    let expected: HashSet<String> = events.iter().map(|e| e.to_string()).collect();
    assert_eq!(ids, expected);
    assert_eq!(requests, 5, "each event exactly once");
    assert!(
        eventually(Duration::from_secs(10), async || dead_letters(&local)
            .await
            .is_empty())
        .await,
        "the DLQ is empty again"
    );
}

// ---------------------------------------------------------------------------------------
// Item 2: replay ping-pong, a stale cache, a bounce that erased why.
// ---------------------------------------------------------------------------------------

/// Puts a dead letter on the DLQ as the sender writes it: `exhausted` after 503s at `at`.
async fn seed_dead_letter(
    local: &tern_local::LocalTern,
    tenant: &str,
    endpoint: &EndpointId,
    at: DateTime<Utc>,
) -> EventId {
    let event = tern_outbox::OutboxWriter::new("unused")
        .prepare("order.paid", tenant, r#"{"seeded":true}"#)
        .unwrap()
        .event;
    let id = event.id.clone();
    let message = DeliveryMessage::first(event, endpoint.clone()).dead_lettered(DeadLetter {
        reason: DeadLetterReason::Exhausted,
        last_status: Some(503),
        last_error: Some("http status 503".into()),
        attempts: 7,
        at,
    });
    local
        .sender
        .dlq
        .send(&QueueEntry {
            id: "seed".into(),
            body: message.to_body(),
            delay_seconds: 0,
            attributes: vec![],
            group_id: Some(message.group_id()),
        })
        .await
        .unwrap();
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_run_into_a_disabled_endpoint_replays_each_delivery_once_and_keeps_why() {
    let (local, _rx) = deployment("nl-pingpong", fast()).await;
    let receiver = Receiver::start().await.unwrap();
    let tenant = "tnt_nl_pingpong";
    let ep = add_endpoint(&local, tenant, &receiver.url("/p"), &["*"], None).await;
    ops::disable_endpoint(&cli_store(&local), Some(&ep.tenant_id), &ep.id, None)
        .await
        .unwrap();
    let failed_at: DateTime<Utc> = "2026-11-30T10:00:00Z".parse().unwrap();
    for _ in 0..6 {
        seed_dead_letter(&local, tenant, &ep.id, failed_at).await;
    }

    // `tern replay --force`: the pollers bounce each replayed delivery back to the DLQ
    // within a second, while the run still reads it.
    let summary = tern_handlers::replay::handle(
        &local.replay,
        ReplayRequest {
            max_messages: Some(200),
            max_seconds: Some(8),
            ..ReplayRequest::default()
        },
        &metrics(),
    )
    .await
    .unwrap();
    assert_eq!(summary.replayed, 6, "each delivery once: {summary:?}");

    let bounced = eventually(Duration::from_secs(20), async || {
        let dead = dead_letters(&local).await;
        dead.len() == 6 && dead.iter().all(|d| d.replay_count == 1)
    })
    .await;
    let dead = dead_letters(&local).await;
    assert!(bounced, "6 bounces of replay 1 expected: {dead:?}");
    for d in &dead {
        let record = d.dead_letter.as_ref().unwrap();
        assert_eq!(record.reason, DeadLetterReason::EndpointDisabled);
        assert_eq!(
            (record.last_status, record.last_error.as_deref(), record.at),
            (Some(503), Some("http status 503"), failed_at),
            "the bounce keeps the original failure"
        );
    }
    assert!(receiver.requests("/p").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_right_after_enable_is_delivered_though_the_senders_cache_said_disabled() {
    // Time scale 1: the sender keeps an endpoint 30 s, longer than this test.
    let options = LocalOptions {
        lookup: Some(no_dns()),
        console_port: None,
        ..LocalOptions::default()
    };
    let (local, _rx) = deployment("nl-stale", options).await;
    let receiver = Receiver::start().await.unwrap();
    let tenant = "tnt_nl_stale";
    let ep = add_endpoint(&local, tenant, &receiver.url("/s"), &["*"], None).await;
    let cli = cli_store(&local);
    ops::disable_endpoint(&cli, Some(&ep.tenant_id), &ep.id, None)
        .await
        .unwrap();
    let event = publish(&local, "order.paid", tenant, r#"{"stale":1}"#).await;
    assert!(
        eventually(Duration::from_secs(30), async || dead_letters(&local)
            .await
            .len()
            == 1)
        .await,
        "dead-lettered while disabled (the sender now caches it disabled)"
    );

    ops::enable_endpoint(&cli, None, Some(&ep.tenant_id), &ep.id)
        .await
        .unwrap();
    let summary = tern_handlers::replay::handle(
        &local.replay,
        ReplayRequest {
            max_seconds: Some(5),
            ..ReplayRequest::default()
        },
        &metrics(),
    )
    .await
    .unwrap();
    assert_eq!(summary.replayed, 1, "{summary:?}");
    let got = receiver.wait_for("/s", 1, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 1, "delivered within the cache's 30 s");
    assert_eq!(got[0].header("webhook-id"), Some(event.as_str()));
    let history = local
        .sender
        .ledger
        .history(&ep.tenant_id, &event)
        .await
        .unwrap();
    let delivered: Vec<_> = history
        .iter()
        .filter(|r| r.outcome == "delivered")
        .collect();
    assert_eq!(delivered.len(), 1, "{history:?}");
    assert_eq!(
        delivered[0].replay_count, 1,
        "delivered by the first replay"
    );
    assert!(dead_letters(&local).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_senders_endpoint_cache_follows_the_time_scale() {
    let (local, _rx) = deployment("nl-cache-scale", fast()).await;
    let receiver = Receiver::start().await.unwrap();
    let tenant = "tnt_nl_cache";
    let ep = add_endpoint(&local, tenant, &receiver.url("/c"), &["*"], None).await;
    publish(&local, "order.paid", tenant, r#"{"n":1}"#).await;
    receiver.wait_for("/c", 1, Duration::from_secs(20)).await;
    // The sender now holds the endpoint, enabled; an operator disables it elsewhere.
    ops::disable_endpoint(&cli_store(&local), Some(&ep.tenant_id), &ep.id, None)
        .await
        .unwrap();
    // 30 s at time scale 0.001 is 30 ms: the next event finds it disabled.
    tokio::time::sleep(Duration::from_millis(100)).await;
    publish(&local, "order.paid", tenant, r#"{"n":2}"#).await;
    assert!(
        eventually(Duration::from_secs(20), async || dead_letters(&local)
            .await
            .len()
            == 1)
        .await,
        "the second event is dead-lettered"
    );
    assert_eq!(
        dead_letters(&local).await[0]
            .dead_letter
            .as_ref()
            .map(|d| d.reason),
        Some(DeadLetterReason::EndpointDisabled)
    );
    assert_eq!(receiver.requests("/c").len(), 1);
}

// ---------------------------------------------------------------------------------------
// Item 3: a throttled Step Functions start.
// ---------------------------------------------------------------------------------------

/// A delay scheduler that answers every start as Step Functions does when throttled.
#[derive(Default)]
struct Throttled(AtomicUsize);

#[async_trait]
impl DelayScheduler for Throttled {
    async fn schedule(&self, _: &DeliveryMessage, _: u64) -> Result<(), PortError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(PortError::Unavailable(
            "ThrottlingException: Rate exceeded".into(),
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_step_functions_start_keeps_the_retry_with_one_post() {
    let options = LocalOptions {
        // A batch failure would come back after 2 s, well inside this test.
        visibility_timeout_seconds: Some(2),
        ..fast()
    };
    let mut local = deployment_without_pollers("nl-throttled", options.clone()).await;
    let throttled = Arc::new(Throttled::default());
    let s = &local.sender;
    local.sender = Arc::new(SenderDeps {
        endpoints: s.endpoints.clone(),
        ledger: s.ledger.clone(),
        delivery_queue: s.delivery_queue.clone(),
        dlq: s.dlq.clone(),
        scheduler: Some(throttled.clone()),
        client: s.client.clone(),
        policy: s.policy.clone(),
        breaker: s.breaker.clone(),
    });
    let mut rx = local.start_pollers(&options);
    let receiver = Receiver::start().await.unwrap();
    receiver.set(
        "/t",
        Behavior::FailFirst {
            count: 1,
            status: 500,
        },
    );
    let tenant = "tnt_nl_throttled";
    // One retry after 1,800 s: a Step Functions wait (1.8 s at this scale).
    add_endpoint_with(
        &local,
        EndpointId::generate(),
        tenant,
        &receiver.url("/t"),
        &["*"],
        Some(2),
        Some(RetrySchedule::new(vec![1800]).unwrap()),
    )
    .await;
    publish(&local, "order.paid", tenant, r#"{"t":1}"#).await;
    let got = receiver.wait_for("/t", 2, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 2, "the failed attempt and its retry");
    // Long enough for a redelivery (2 s) to have POSTed again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(receiver.requests("/t").len(), 2, "one POST per attempt");
    assert_eq!(throttled.0.load(Ordering::SeqCst), 1);
    let mut first = None;
    while let Ok(event) = rx.try_recv() {
        if let tern_local::pollers::LocalEvent::Sent(results) = event {
            for (_, r) in results {
                assert!(r.is_ok(), "no batch failure: {r:?}");
                if let Ok(MessageOutcome::Retrying { attempt: 1, .. }) = r {
                    first = Some(());
                }
            }
        }
    }
    assert!(first.is_some(), "attempt 1 ended retrying");
    assert!(dead_letters(&local).await.is_empty());
}

// ---------------------------------------------------------------------------------------
// Item 4: the invocation's deadline.
// ---------------------------------------------------------------------------------------

/// Sleeps `d`, then does `f`.
async fn after<T>(d: Duration, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::sleep(d).await;
    f.await
}

const QUICK: Duration = Duration::from_millis(100);
/// The attempt log and the claim's finish: DynamoDB writes that crawl (throttled, retried).
const CRAWL: Duration = Duration::from_secs(3);

/// The ledger over slow DynamoDB: claims answer in [`QUICK`], the writes for people in
/// [`CRAWL`]. Counts the claims.
#[derive(Default)]
struct SlowLedger {
    inner: MemLedger,
    claims: AtomicUsize,
}

#[async_trait]
impl DeliveryLedger for SlowLedger {
    async fn claim(&self, m: &DeliveryMessage, lease: DateTime<Utc>) -> Result<Claim, PortError> {
        self.claims.fetch_add(1, Ordering::SeqCst);
        after(QUICK, self.inner.claim(m, lease)).await
    }
    async fn finish(&self, m: &DeliveryMessage, s: DeliveryState) -> Result<(), PortError> {
        after(CRAWL, self.inner.finish(m, s)).await
    }
    async fn record_attempt(
        &self,
        message: &tern_core::DeliveryMessage,
        r: &AttemptRecord,
    ) -> Result<(), PortError> {
        after(CRAWL, self.inner.record_attempt(message, r)).await
    }
    async fn record_delivered(
        &self,
        m: &DeliveryMessage,
        r: &AttemptRecord,
    ) -> Result<(), PortError> {
        after(CRAWL, self.inner.record_delivered(m, r)).await
    }
    async fn history(
        &self,
        tenant: &tern_core::TenantId,
        e: &EventId,
    ) -> Result<Vec<AttemptRecord>, PortError> {
        self.inner.history(tenant, e).await
    }
}

/// A queue whose sends answer in [`QUICK`].
#[derive(Default)]
struct SlowQueue(MemQueue);

#[async_trait]
impl MessageQueue for SlowQueue {
    async fn send_batch(
        &self,
        entries: &[QueueEntry],
    ) -> Result<Vec<Result<(), PortError>>, PortError> {
        after(QUICK, self.0.send_batch(entries)).await
    }
    async fn send(&self, entry: &QueueEntry) -> Result<(), PortError> {
        after(QUICK, self.0.send(entry)).await
    }
}

/// Planned with: AWS calls within 200 ms, attempts within 1 s (the endpoints' timeout),
/// 300 ms for the answer. A message needs 4 × 200 + 1,000 + 300 = 2,100 ms to start.
fn reserve() -> TimeReserve {
    TimeReserve {
        aws_call: Duration::from_millis(200),
        longest_attempt: Duration::from_secs(1),
        answer: Duration::from_millis(300),
    }
}

/// The sender over in-memory ports (`ledger` may be slowed), POSTing to loopback only,
/// with no health gate.
fn sender_over(
    endpoints: Arc<MemEndpoints>,
    ledger: Arc<dyn DeliveryLedger>,
    delivery_queue: Arc<dyn MessageQueue>,
    dlq: Arc<dyn MessageQueue>,
) -> SenderDeps {
    SenderDeps {
        endpoints,
        ledger,
        delivery_queue,
        dlq,
        scheduler: None,
        client: DeliveryClient::new(ClientOptions {
            policy: DestinationPolicy {
                https_only: false,
                allow: vec!["127.0.0.1/32".parse().unwrap()],
                nat64: false,
            },
            lookup: no_dns(),
            excerpt_bytes: 256,
        })
        .unwrap(),
        policy: SenderPolicy {
            time_scale: 0.001,
            ..SenderPolicy::default()
        },
        breaker: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sender_answers_before_its_deadline_and_never_resends_what_it_posted() {
    let receiver = Receiver::start().await.unwrap();
    receiver.set("/ok", Behavior::Always(Reply::status(200)));
    receiver.set("/retry", Behavior::Always(Reply::status(500)));
    receiver.set("/gone", Behavior::Always(Reply::status(410)));
    let endpoints = Arc::new(MemEndpoints::default());
    let tenant = TenantId::new("tnt_nl_deadline").unwrap();
    let mut targets = Vec::new();
    for path in ["/ok", "/retry", "/gone"] {
        let mut e = Endpoint::new(
            EndpointId::generate(),
            tenant.clone(),
            receiver.url(path),
            vec!["*".into()],
            tern_core::Secret::generate(),
            Utc::now(),
        );
        e.timeout_ms = Some(1_000);
        endpoints.put(&e).await.unwrap();
        targets.push(e);
    }
    let ledger = Arc::new(SlowLedger::default());
    let delivery = Arc::new(SlowQueue::default());
    let dlq = Arc::new(SlowQueue::default());
    let deps = sender_over(endpoints, ledger.clone(), delivery.clone(), dlq.clone());
    let message = |e: &Endpoint| {
        let event = tern_outbox::OutboxWriter::new("unused")
            .prepare("order.paid", tenant.as_str(), r#"{"d":1}"#)
            .unwrap()
            .event;
        DeliveryMessage::first(event, e.id.clone()).to_body()
    };

    // A batch with time to start: every message is POSTed once, its retry or dead letter
    // written; the attempt log crawls, and the handler answers before the deadline
    // anyway, reporting nothing.
    let bodies: Vec<String> = targets.iter().map(message).collect();
    let allowed = Duration::from_millis(2_500);
    let started = Instant::now();
    let deadline = Deadline::at(started + allowed, reserve());
    let (response, results) =
        tern_handlers::sender::handle_within(&deps, sqs_event(&bodies), &metrics(), deadline).await;
    let took = started.elapsed();
    assert!(took < allowed, "answered after {took:?}, past its deadline");
    assert!(
        response.batch_item_failures.is_empty(),
        "nothing POSTed is reported: {results:?}"
    );
    assert_eq!(
        results
            .iter()
            .map(|(_, r)| r.clone().map(|o| std::mem::discriminant(&o)))
            .collect::<Vec<_>>(),
        vec![
            Ok(std::mem::discriminant(&MessageOutcome::Delivered {
                attempt: 1
            })),
            Ok(std::mem::discriminant(&MessageOutcome::Retrying {
                attempt: 1,
                wait_seconds: 0
            })),
            Ok(std::mem::discriminant(&MessageOutcome::DeadLettered {
                reason: DeadLetterReason::Gone,
                attempts: 1
            })),
        ]
    );
    assert_eq!(delivery.0.entries().len(), 1, "the retry is on the queue");
    assert_eq!(dlq.0.entries().len(), 1, "the 410 is in the DLQ");

    // A batch whose deadline is too near to start (1.5 s < 2.1 s): nothing is claimed or
    // sent, every message is reported; SQS delivers them again, and each is POSTed once.
    let late: Vec<String> = targets.iter().map(message).collect();
    let claims = ledger.claims.load(Ordering::SeqCst);
    let deadline = Deadline::at(Instant::now() + Duration::from_millis(1_500), reserve());
    let (response, results) =
        tern_handlers::sender::handle_within(&deps, sqs_event(&late), &metrics(), deadline).await;
    assert_eq!(response.batch_item_failures.len(), 3, "{results:?}");
    assert!(
        results
            .iter()
            .all(|(_, r)| r.as_ref().err().is_some_and(|e| e.contains(NOT_STARTED)))
    );
    assert_eq!(
        ledger.claims.load(Ordering::SeqCst),
        claims,
        "nothing claimed"
    );
    let redelivered: Vec<String> = response
        .batch_item_failures
        .iter()
        .map(|f| late[f.item_identifier[1..].parse::<usize>().unwrap()].clone())
        .collect();
    let deadline = Deadline::at(Instant::now() + allowed, reserve());
    let (response, _) =
        tern_handlers::sender::handle_within(&deps, sqs_event(&redelivered), &metrics(), deadline)
            .await;
    assert!(response.batch_item_failures.is_empty());

    for path in ["/ok", "/retry"] {
        let (ids, requests) = received(&receiver, path);
        assert_eq!(
            (ids.len(), requests),
            (2, 2),
            "{path}: each event exactly once"
        );
    }
    // The first 410 disabled its endpoint: the second event is dead-lettered unsent.
    assert_eq!(received(&receiver, "/gone").1, 1);
}

/// The ledger over a DynamoDB whose claims crawl ([`CLAIM_CRAWL`]); the rest answers at
/// once.
#[derive(Default)]
struct SlowClaims(MemLedger);

/// A claim slower than the reserve's AWS call (200 ms) by far: throttled, retried.
const CLAIM_CRAWL: Duration = Duration::from_millis(1_200);

#[async_trait]
impl DeliveryLedger for SlowClaims {
    async fn claim(&self, m: &DeliveryMessage, lease: DateTime<Utc>) -> Result<Claim, PortError> {
        after(CLAIM_CRAWL, self.0.claim(m, lease)).await
    }
    async fn finish(&self, m: &DeliveryMessage, s: DeliveryState) -> Result<(), PortError> {
        self.0.finish(m, s).await
    }
    async fn release(
        &self,
        m: &DeliveryMessage,
        takeover: u32,
        due_at: DateTime<Utc>,
    ) -> Result<(), PortError> {
        self.0.release(m, takeover, due_at).await
    }
    async fn record_attempt(
        &self,
        message: &tern_core::DeliveryMessage,
        r: &AttemptRecord,
    ) -> Result<(), PortError> {
        self.0.record_attempt(message, r).await
    }
    async fn history(
        &self,
        tenant: &tern_core::TenantId,
        e: &EventId,
    ) -> Result<Vec<AttemptRecord>, PortError> {
        self.0.history(tenant, e).await
    }
}

/// A claim that outruns its share of the invocation (1.2 s of a 2.5 s deadline planned
/// with 200 ms calls) leaves too little time for the attempt: nothing is POSTed, the same
/// attempt goes back on the queue on our own short schedule (no attempt spent), and the
/// attempt log says why in the claimed try's row, "not sent, out of time", rather than
/// leaving the redelivery to write the generic "stopped before recording this attempt"
/// (which reads as if a POST may have gone out). Before: no row at all, and the message
/// waited out SQS's visibility timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_outruns_the_deadline_is_logged_as_not_sent() {
    let receiver = Receiver::start().await.unwrap();
    receiver.set("/slow-claim", Behavior::Always(Reply::status(200)));
    let endpoints = Arc::new(MemEndpoints::default());
    let tenant = TenantId::new("tnt_nl_slow_claim").unwrap();
    let mut e = Endpoint::new(
        EndpointId::generate(),
        tenant.clone(),
        receiver.url("/slow-claim"),
        vec!["*".into()],
        tern_core::Secret::generate(),
        Utc::now(),
    );
    e.timeout_ms = Some(1_000);
    endpoints.put(&e).await.unwrap();
    let ledger = Arc::new(SlowClaims::default());
    let queue = Arc::new(MemQueue::default());
    let deps = sender_over(
        endpoints,
        ledger.clone(),
        queue.clone(),
        Arc::new(MemQueue::default()),
    );
    let event = tern_outbox::OutboxWriter::new("unused")
        .prepare("order.paid", tenant.as_str(), r#"{"d":1}"#)
        .unwrap()
        .event;
    let body = DeliveryMessage::first(event.clone(), e.id.clone()).to_body();

    let deadline = Deadline::at(Instant::now() + Duration::from_millis(2_500), reserve());
    let (response, results) =
        tern_handlers::sender::handle_within(&deps, sqs_event(&[body]), &metrics(), deadline).await;
    assert!(response.batch_item_failures.is_empty(), "{results:?}");
    assert!(
        matches!(
            results[0].1,
            Ok(MessageOutcome::Requeued { attempt: 1, .. })
        ),
        "{results:?}"
    );
    let back = queue.entries();
    assert_eq!(back.len(), 1, "{back:?}");
    let copy = DeliveryMessage::parse(&back[0].body).unwrap();
    assert_eq!(copy.attempt, 1, "no attempt spent");
    assert!(copy.not_before.is_some() && copy.listed_waiting, "{copy:?}");
    assert!(
        receiver.requests("/slow-claim").is_empty(),
        "nothing POSTed"
    );
    let history = ledger.history(&event.tenant_id, &event.id).await.unwrap();
    assert_eq!(history.len(), 1, "the claimed try's one row: {history:?}");
    let row = &history[0];
    assert_eq!(row.outcome, tern_core::ports::OUTCOME_ABANDONED);
    assert_eq!(
        (row.attempt, row.status, row.error_class),
        (1, None, None),
        "{row:?}"
    );
    let said = row.error.as_deref().unwrap_or_default();
    assert!(
        said.starts_with("not sent, out of time (no attempt spent") && said.contains("deadline"),
        "{said}"
    );
}
