//! Endpoint health (issue 10, DESIGN.md §10), on moto with receivers on 127.0.0.1: the
//! circuit opens after N consecutive failures; while open, exactly one probe per interval
//! goes out across concurrent batches (separate sender instances, one health table) and
//! every other due delivery is put back without spending an attempt; a delivery past its
//! retry window still ends `exhausted`; a successful probe closes the circuit and every
//! waiting delivery is delivered; auto-disable happens below the threshold with enough
//! attempts, not below the minimum volume; each operational event is reported once;
//! `tern endpoints enable` resets the record.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use tern_core::health::{HealthPolicy, HealthStore};
use tern_core::operational::{OperationalEvent, OperationalEventKind, OperationalEventSink};
use tern_core::ports::{MessageQueue, PortError, QueueEntry};
use tern_core::{DeadLetterReason, DeliveryMessage, Endpoint, RetrySchedule};
use tern_handlers::health::CircuitBreaker;
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::sender::{MessageOutcome, MessageResult, SenderDeps};
use tern_local::{Behavior, LocalOptions, LocalTern, Receiver, Reply};
use tern_tests::*;

fn metrics() -> Metrics {
    Metrics::new("Tern", MetricsSink::Discard)
}

fn policy(failure_threshold: u32, probe_interval_seconds: u64, min_attempts: u64) -> HealthPolicy {
    HealthPolicy {
        failure_threshold,
        probe_interval_seconds,
        min_attempts,
        ..HealthPolicy::default()
    }
}

async fn setup(name: &str, health: HealthPolicy) -> LocalTern {
    deployment_without_pollers(
        name,
        LocalOptions {
            lookup: Some(no_dns()),
            health: Some(health),
            ..LocalOptions::default()
        },
    )
    .await
}

/// Operational events as the sender publishes them (the port; SNS and the outbox are
/// tested on moto in `operational_events.rs`).
#[derive(Default)]
struct Recorded(Mutex<Vec<OperationalEvent>>);

#[async_trait]
impl OperationalEventSink for Recorded {
    async fn publish(&self, event: &OperationalEvent) -> Result<(), PortError> {
        self.0.lock().unwrap().push(event.clone());
        Ok(())
    }
}

impl Recorded {
    fn kinds(&self) -> Vec<OperationalEventKind> {
        self.0.lock().unwrap().iter().map(|e| e.kind).collect()
    }
}

/// A sender instance of its own (its own health cache) over the deployment's tables,
/// publishing to `events`.
fn instance(local: &LocalTern, policy: &HealthPolicy, events: Arc<Recorded>) -> SenderDeps {
    let s = &local.sender;
    let store: Arc<dyn HealthStore> = Arc::new(tern_aws::DynamoHealthStore::new(
        aws_sdk_dynamodb::Client::new(&local.aws),
        &local.resources.health_table,
    ));
    SenderDeps {
        endpoints: s.endpoints.clone(),
        ledger: s.ledger.clone(),
        delivery_queue: s.delivery_queue.clone(),
        dlq: s.dlq.clone(),
        scheduler: s.scheduler.clone(),
        client: s.client.clone(),
        policy: s.policy.clone(),
        breaker: Some(Arc::new(CircuitBreaker::new(
            store,
            events,
            policy.clone(),
            1.0,
            Duration::from_secs(5),
        ))),
    }
}

/// The delivery queue on moto, keeping a copy of every entry sent (a delayed message is
/// invisible to a peek until its delay is over).
struct Tee {
    inner: Arc<dyn MessageQueue>,
    sent: Mutex<Vec<QueueEntry>>,
}

#[async_trait]
impl MessageQueue for Tee {
    async fn send_batch(
        &self,
        entries: &[QueueEntry],
    ) -> Result<Vec<Result<(), PortError>>, PortError> {
        self.sent.lock().unwrap().extend_from_slice(entries);
        self.inner.send_batch(entries).await
    }
    async fn send(&self, entry: &QueueEntry) -> Result<(), PortError> {
        self.sent.lock().unwrap().push(entry.clone());
        self.inner.send(entry).await
    }
}

fn health_store(local: &LocalTern) -> tern_aws::DynamoHealthStore {
    tern_aws::DynamoHealthStore::new(
        aws_sdk_dynamodb::Client::new(&local.aws),
        &local.resources.health_table,
    )
}

/// `n` first-attempt messages of new events to `ep`.
fn messages(local: &LocalTern, ep: &Endpoint, n: usize) -> Vec<DeliveryMessage> {
    (0..n)
        .map(|i| {
            let event = tern_outbox::OutboxWriter::new(&local.resources.outbox_table)
                .prepare(
                    "order.paid",
                    ep.tenant_id.as_str(),
                    format!(r#"{{"n":{i}}}"#),
                )
                .unwrap()
                .event;
            DeliveryMessage::first(event, ep.id.clone())
        })
        .collect()
}

async fn send(deps: &SenderDeps, batch: &[DeliveryMessage]) -> Vec<MessageResult> {
    let bodies: Vec<String> = batch.iter().map(DeliveryMessage::to_body).collect();
    let (response, results) =
        tern_handlers::sender::handle(deps, sqs_event(&bodies), &metrics()).await;
    assert!(response.batch_item_failures.is_empty(), "{results:?}");
    results
}

fn count(results: &[MessageResult], f: impl Fn(&MessageOutcome) -> bool) -> usize {
    results
        .iter()
        .filter(|(_, r)| r.as_ref().is_ok_and(&f))
        .count()
}

fn deferred(o: &MessageOutcome) -> bool {
    matches!(o, MessageOutcome::Deferred { .. })
}

async fn enabled(local: &LocalTern, ep: &Endpoint) -> bool {
    local
        .sender
        .endpoints
        .get(&ep.tenant_id, &ep.id)
        .await
        .unwrap()
        .unwrap()
        .enabled
}

async fn down_endpoint(local: &LocalTern, receiver: &Receiver, tenant: &str) -> Endpoint {
    receiver.set("/down", Behavior::Always(Reply::status(503)));
    add_endpoint(local, tenant, &receiver.url("/down"), &["*"], None).await
}

#[tokio::test]
async fn opens_after_n_failures_and_defers_without_spending_attempts() {
    let p = policy(5, 60, 1000);
    let local = setup("hopen", p.clone()).await;
    let receiver = Receiver::start().await.unwrap();
    let ep = down_endpoint(&local, &receiver, "tnt_open").await;
    let events = Arc::new(Recorded::default());
    let tee = Arc::new(Tee {
        inner: local.sender.delivery_queue.clone(),
        sent: Mutex::default(),
    });
    let deps = SenderDeps {
        delivery_queue: tee.clone(),
        ..instance(&local, &p, events.clone())
    };

    // 4 failures: still closed.
    let r = send(&deps, &messages(&local, &ep, 4)).await;
    assert_eq!(
        count(&r, |o| matches!(o, MessageOutcome::Retrying { .. })),
        4
    );
    let h = health_store(&local)
        .get(&ep.tenant_id, &ep.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(h.consecutive_failures, 4);
    assert!(h.opened_at.is_none());

    // The 5th consecutive failure opens it.
    send(&deps, &messages(&local, &ep, 1)).await;
    let h = health_store(&local)
        .get(&ep.tenant_id, &ep.id)
        .await
        .unwrap()
        .unwrap();
    assert!(h.opened_at.is_some(), "{h:?}");
    assert_eq!(receiver.requests("/down").len(), 5);

    // Open: new due deliveries, and a retry at attempt 3, are put back; no POST, no claim.
    let mut later = messages(&local, &ep, 3);
    let first = Utc::now() - chrono::Duration::seconds(90);
    later[2] = later[2]
        .next_attempt(first, Some(503), None)
        .next_attempt(first, Some(503), None);
    assert_eq!(later[2].attempt, 3);
    let r = send(&deps, &later).await;
    assert_eq!(count(&r, deferred), 3, "{r:?}");
    assert_eq!(receiver.requests("/down").len(), 5);
    for m in &later {
        assert!(
            local
                .sender
                .ledger
                .history(&m.event.id)
                .await
                .unwrap()
                .is_empty(),
            "a deferred delivery spends no attempt"
        );
    }
    // Back on the queue with the same attempt numbers, due after the next probe.
    let next_probe = h.next_probe_at.unwrap();
    let queued: Vec<DeliveryMessage> = tee
        .sent
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| DeliveryMessage::parse(&e.body).ok())
        .filter(|m| later.iter().any(|l| l.delivery_id == m.delivery_id))
        .collect();
    assert_eq!(queued.len(), 3);
    for m in &queued {
        let want = later
            .iter()
            .find(|l| l.delivery_id == m.delivery_id)
            .unwrap();
        assert_eq!(m.attempt, want.attempt);
        assert_eq!(m.first_attempt_at, want.first_attempt_at);
        let until = m.not_before.unwrap();
        assert!(
            until >= next_probe,
            "{until} before the probe at {next_probe}"
        );
        assert!(until <= next_probe + chrono::Duration::seconds(61));
    }
    // Opening is not reported to the owner (degraded/disabled are); nothing else happened.
    assert!(events.kinds().is_empty());
}

#[tokio::test]
async fn exactly_one_probe_per_interval_across_concurrent_batches() {
    let p = policy(5, 2, 1000);
    let local = setup("hprobe", p.clone()).await;
    let receiver = Receiver::start().await.unwrap();
    let ep = down_endpoint(&local, &receiver, "tnt_probe").await;
    let events = Arc::new(Recorded::default());
    send(
        &instance(&local, &p, events.clone()),
        &messages(&local, &ep, 5),
    )
    .await;
    assert_eq!(receiver.requests("/down").len(), 5);

    // Four sender instances (each its own cache), three due deliveries each, at once.
    let instances: Vec<SenderDeps> = (0..4)
        .map(|_| instance(&local, &p, events.clone()))
        .collect();
    for round in 1..=2 {
        let h = health_store(&local)
            .get(&ep.tenant_id, &ep.id)
            .await
            .unwrap()
            .unwrap();
        let wait = (h.next_probe_at.unwrap() - Utc::now())
            .to_std()
            .unwrap_or_default();
        tokio::time::sleep(wait + Duration::from_millis(200)).await;
        let batches: Vec<Vec<DeliveryMessage>> = (0..4).map(|_| messages(&local, &ep, 3)).collect();
        let results =
            futures::future::join_all(instances.iter().zip(&batches).map(|(d, b)| send(d, b)))
                .await;
        let all: Vec<MessageResult> = results.into_iter().flatten().collect();
        assert_eq!(
            receiver.requests("/down").len(),
            5 + round,
            "round {round}: one probe in all: {all:?}"
        );
        assert_eq!(count(&all, deferred), 11, "{all:?}");
    }
}

#[tokio::test]
async fn a_delivery_past_its_retry_window_is_exhausted_not_parked() {
    let p = policy(5, 60, 1000);
    let local = setup("hwindow", p.clone()).await;
    let receiver = Receiver::start().await.unwrap();
    let mut ep = down_endpoint(&local, &receiver, "tnt_window").await;
    // A 2-minute schedule: its window is long over for an attempt begun an hour ago.
    ep.schedule = Some(RetrySchedule::new(vec![60, 60]).unwrap());
    local.sender.endpoints.put(&ep).await.unwrap();
    let deps = instance(&local, &p, Arc::new(Recorded::default()));
    send(&deps, &messages(&local, &ep, 5)).await;

    let first = Utc::now() - chrono::Duration::hours(1);
    let old = messages(&local, &ep, 1)[0].next_attempt(first, Some(503), Some("http 503".into()));
    let fresh = messages(&local, &ep, 1).remove(0);
    let r = send(&deps, &[old.clone(), fresh]).await;
    assert_eq!(count(&r, deferred), 1, "{r:?}");
    assert_eq!(
        count(&r, |o| *o
            == MessageOutcome::DeadLettered {
                reason: DeadLetterReason::Exhausted,
                attempts: 1
            }),
        1,
        "{r:?}"
    );
    let dead = dead_letters(&local).await;
    assert!(dead.iter().any(|m| m.delivery_id == old.delivery_id
        && m.dead_letter.as_ref().unwrap().reason == DeadLetterReason::Exhausted));
    assert_eq!(receiver.requests("/down").len(), 5, "no POST for either");
}

#[tokio::test]
async fn a_successful_probe_closes_the_circuit_and_every_waiting_delivery_arrives() {
    // The whole pipeline with pollers: 5 failures open the circuit, 25 more events wait,
    // the receiver recovers, the next probe closes the circuit, and all 30 arrive.
    let p = policy(5, 60, 1000);
    let (local, _rx) = deployment(
        "hrecover",
        LocalOptions {
            lookup: Some(no_dns()),
            health: Some(p),
            time_scale: 0.02,
            sender_concurrency: 2,
            ..LocalOptions::default()
        },
    )
    .await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set(
        "/flaky",
        Behavior::FailFirst {
            count: 5,
            status: 503,
        },
    );
    let ep = add_endpoint(&local, "tnt_rec", &receiver.url("/flaky"), &["*"], None).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(publish(&local, "order.paid", "tnt_rec", &format!(r#"{{"i":{i}}}"#)).await);
    }
    let opened = eventually(Duration::from_secs(60), async || {
        health_store(&local)
            .get(&ep.tenant_id, &ep.id)
            .await
            .ok()
            .flatten()
            .is_some_and(|h| h.opened_at.is_some())
    })
    .await;
    assert!(opened, "the circuit never opened");
    for i in 5..30 {
        ids.push(publish(&local, "order.paid", "tnt_rec", &format!(r#"{{"i":{i}}}"#)).await);
    }
    let all = eventually(Duration::from_secs(120), async || {
        let delivered: std::collections::HashSet<String> = receiver
            .requests("/flaky")
            .iter()
            .filter_map(|r| r.header("webhook-id").map(str::to_owned))
            .collect();
        ids.iter().all(|id| delivered.contains(id.as_str()))
    })
    .await;
    assert!(all, "not every waiting delivery arrived");
    let h = health_store(&local)
        .get(&ep.tenant_id, &ep.id)
        .await
        .unwrap()
        .unwrap();
    assert!(h.opened_at.is_none(), "the circuit is still open: {h:?}");
    assert!(dead_letters(&local).await.is_empty());
}

#[tokio::test]
async fn auto_disable_below_the_threshold_with_enough_attempts_only() {
    let p = policy(1000, 60, 20);
    let local = setup("hdisable", p.clone()).await;
    let receiver = Receiver::start().await.unwrap();
    // 10 successes, then failures.
    let mut script = vec![Reply::status(200); 10];
    script.push(Reply::status(503));
    receiver.set("/mixed", Behavior::Script(script));
    let ep = add_endpoint(
        &local,
        "tnt_dis",
        &receiver.url("/mixed?token=s3cret"),
        &["*"],
        None,
    )
    .await;
    let events = Arc::new(Recorded::default());
    let deps = instance(&local, &p, events.clone());

    // 10 successes and 9 failures: 19 attempts, under the minimum of 20.
    send(&deps, &messages(&local, &ep, 10)).await;
    send(&deps, &messages(&local, &ep, 9)).await;
    assert!(enabled(&local, &ep).await);
    assert!(events.kinds().is_empty(), "{:?}", events.kinds());
    // The 20th attempt fails: exactly 50 % is not below 50 %, but below 95 %: degraded.
    send(&deps, &messages(&local, &ep, 1)).await;
    assert!(enabled(&local, &ep).await);
    assert_eq!(events.kinds(), vec![OperationalEventKind::Degraded]);
    // Another failure: 10 of 21 (48 %) disables it, once, with the reason and last success.
    send(&deps, &messages(&local, &ep, 1)).await;
    let stored = local
        .sender
        .endpoints
        .get(&ep.tenant_id, &ep.id)
        .await
        .unwrap()
        .unwrap();
    assert!(!stored.enabled);
    let reason = stored.disabled_reason.clone().unwrap();
    assert!(
        reason.starts_with("auto_disabled: 48 % success over 1 h, last status 503; last success "),
        "{reason}"
    );
    assert_eq!(
        events.kinds(),
        vec![
            OperationalEventKind::Degraded,
            OperationalEventKind::Disabled
        ]
    );
    let disabled = events.0.lock().unwrap()[1].clone();
    assert_eq!(disabled.tenant_id, ep.tenant_id);
    assert_eq!(disabled.endpoint_id, ep.id);
    assert_eq!(disabled.url, format!("{}?…", receiver.url("/mixed")));
    assert_eq!(disabled.last_status, Some(503));
    assert!(disabled.last_success_at.is_some());
    assert_eq!(disabled.attempts, 21);
    assert_eq!(disabled.window_seconds, 3600);
    assert!((disabled.success_rate.unwrap() - 10.0 / 21.0).abs() < 1e-9);

    // Queued deliveries now dead-letter `endpoint_disabled`; no event is reported twice.
    let r = send(&deps, &messages(&local, &ep, 2)).await;
    assert_eq!(
        count(&r, |o| matches!(
            o,
            MessageOutcome::DeadLettered {
                reason: DeadLetterReason::EndpointDisabled,
                ..
            }
        )),
        2
    );
    assert_eq!(events.kinds().len(), 2);

    // `tern endpoints enable` re-enables it and starts its health afresh.
    let health = health_store(&local);
    tern_local::ops::enable_endpoint(
        local.sender.endpoints.as_ref(),
        Some(&health as &dyn HealthStore),
        Some(&ep.tenant_id),
        &ep.id,
    )
    .await
    .unwrap();
    assert!(health.get(&ep.tenant_id, &ep.id).await.unwrap().is_none());
    assert!(enabled(&local, &ep).await);
}

#[tokio::test]
async fn recovery_is_reported_once_when_the_circuit_closes() {
    let p = policy(3, 1, 1000);
    let local = setup("hrecovered", p.clone()).await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set(
        "/back",
        Behavior::FailFirst {
            count: 3,
            status: 500,
        },
    );
    let ep = add_endpoint(&local, "tnt_back", &receiver.url("/back"), &["*"], None).await;
    let events = Arc::new(Recorded::default());
    let a = instance(&local, &p, events.clone());
    let b = instance(&local, &p, events.clone());
    send(&a, &messages(&local, &ep, 3)).await;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let (ma, mb) = (messages(&local, &ep, 2), messages(&local, &ep, 2));
    let (ra, rb) = tokio::join!(send(&a, &ma), send(&b, &mb));
    let delivered =
        |r: &[MessageResult]| count(r, |o| matches!(o, MessageOutcome::Delivered { .. }));
    assert_eq!(
        delivered(&ra) + delivered(&rb),
        1,
        "one probe: {ra:?} {rb:?}"
    );
    assert_eq!(events.kinds(), vec![OperationalEventKind::Recovered]);
    let recovered = events.0.lock().unwrap()[0].clone();
    assert!(
        recovered
            .reason
            .starts_with("probe succeeded; circuit closed"),
        "{}",
        recovered.reason
    );
    // Closed: the next batch is sent whole.
    let r = send(&a, &messages(&local, &ep, 3)).await;
    assert_eq!(delivered(&r), 3, "{r:?}");
}

#[tokio::test]
async fn tern_endpoints_health_shows_each_state_worst_first() {
    let p = policy(3, 60, 1000);
    let local = setup("hcli", p.clone()).await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set("/ok", Behavior::Always(Reply::status(204)));
    let down = down_endpoint(&local, &receiver, "tnt_cli").await;
    let ok = add_endpoint(&local, "tnt_cli", &receiver.url("/ok"), &["*"], None).await;
    let idle = add_endpoint(&local, "tnt_cli", &receiver.url("/idle"), &["*"], None).await;
    let deps = instance(&local, &p, Arc::new(Recorded::default()));
    let mut batch = messages(&local, &down, 3);
    batch.extend(messages(&local, &ok, 2));
    send(&deps, &batch).await;

    let health = health_store(&local);
    let rows = tern_local::ops::health::health_rows(
        local.sender.endpoints.as_ref(),
        &health,
        Some(&down.tenant_id),
        &p,
        Utc::now(),
    )
    .await
    .unwrap();
    let view: Vec<(String, String, u64)> = rows
        .iter()
        .map(|r| {
            (
                r.endpoint_id.to_string(),
                r.state.to_string(),
                r.attempts_window,
            )
        })
        .collect();
    assert_eq!(view[0], (down.id.to_string(), "open".into(), 3));
    assert!(view.contains(&(ok.id.to_string(), "healthy".into(), 2)));
    assert!(view.contains(&(idle.id.to_string(), "healthy".into(), 0)));
    assert_eq!(rows[0].success_rate_window, Some(0.0));
    assert_eq!(rows[0].last_failure.as_ref().unwrap().status, Some(503));
    assert!(rows[0].next_probe_at.is_some());
    let ok_row = rows.iter().find(|r| r.endpoint_id == ok.id).unwrap();
    assert_eq!(ok_row.success_rate_24h, Some(1.0));
    assert!(ok_row.last_success_at.is_some());

    let mut out = Vec::new();
    tern_local::ops::health::print_health(&mut out, &rows).unwrap();
    let text = String::from_utf8(out).unwrap();
    let first = text.lines().nth(1).unwrap();
    assert!(first.starts_with("open"), "{text}");
    assert!(
        first.contains("0.0 %") && first.contains("status 503"),
        "{text}"
    );
}

/// DynamoDB's size of an attribute value, in bytes (DynamoDB developer guide, "Item sizes
/// and formats"): strings their UTF-8 length, numbers about one byte per two significant
/// digits plus one.
fn value_size(v: &aws_sdk_dynamodb::types::AttributeValue) -> usize {
    match v {
        aws_sdk_dynamodb::types::AttributeValue::S(s) => s.len(),
        aws_sdk_dynamodb::types::AttributeValue::N(n) => {
            let digits = n.trim_start_matches('-').replace('.', "");
            digits.trim_start_matches('0').len().div_ceil(2) + 1
        }
        _ => 16,
    }
}

#[tokio::test]
async fn a_busy_endpoints_record_stays_under_one_write_unit() {
    let p = HealthPolicy::default();
    let local = setup("hsize", p.clone()).await;
    let store = health_store(&local);
    let tenant = tern_core::TenantId::new("tnt_size_of_a_long_tenant_name").unwrap();
    let endpoint = tern_core::EndpointId::generate();
    // A day of traffic: every hourly bucket and every window bucket holds four-digit
    // counts, and the last failure carries the longest error text kept (200 bytes).
    let now = Utc::now();
    let mut previous = None;
    for minutes_ago in (0..=24 * 60).rev().step_by(10) {
        let at = now - chrono::Duration::minutes(minutes_ago);
        let mut delta = tern_core::health::HealthDelta::new(at);
        for _ in 0..3 {
            delta.add(at, None);
        }
        delta.add(
            at,
            Some(tern_core::health::LastFailure {
                at,
                status: Some(503),
                error_class: Some(tern_core::ErrorClass::Timeout),
                error: Some("x".repeat(200)),
            }),
        );
        delta.attempts = 4_000;
        delta.successes = 3_990;
        let after = store
            .record(
                &tenant,
                &endpoint,
                &delta,
                p.bucket_seconds(),
                previous.as_ref(),
            )
            .await
            .unwrap();
        previous = Some(after);
    }
    let h = previous.unwrap();
    assert!(h.hourly.len() <= 26, "{}", h.hourly.len());
    assert!(h.buckets.len() <= 8, "{}", h.buckets.len());
    let item = aws_sdk_dynamodb::Client::new(&local.aws)
        .get_item()
        .table_name(&local.resources.health_table)
        .key(
            "tenant_id",
            aws_sdk_dynamodb::types::AttributeValue::S(tenant.to_string()),
        )
        .key(
            "endpoint_id",
            aws_sdk_dynamodb::types::AttributeValue::S(endpoint.to_string()),
        )
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    let size: usize = item.iter().map(|(k, v)| k.len() + value_size(v)).sum();
    assert!(size < 1024, "{size} bytes over {} attributes", item.len());
    eprintln!(
        "busy endpoint's health item: {size} bytes, {} attributes",
        item.len()
    );
}
