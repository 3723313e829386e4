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
    instance_at(local, policy, events, 1.0)
}

/// [`instance`] playing the failure model at `time_scale`.
fn instance_at(
    local: &LocalTern,
    policy: &HealthPolicy,
    events: Arc<Recorded>,
    time_scale: f64,
) -> SenderDeps {
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
        policy: tern_handlers::config::SenderPolicy {
            time_scale,
            ..s.policy.clone()
        },
        // Gate calls get 15 s instead of the deployed 1 s: moto on a loaded 2-core machine
        // can take over a second, and a gate that passes a slow table over (by design)
        // would send what these tests expect held back.
        breaker: Some(Arc::new(
            CircuitBreaker::new(
                store,
                events,
                policy.clone(),
                time_scale,
                Duration::from_secs(5),
            )
            .with_gate_deadline(Duration::from_secs(15)),
        )),
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
                .history(&m.event.tenant_id, &m.event.id)
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

/// A replay starts a fresh budget, and so a fresh retry window: a dead letter of an event
/// written days ago, replayed while its endpoint's circuit is open, waits for the probe like
/// any due delivery instead of being dead-lettered `exhausted` unsent (its window counted
/// from the event's creation).
#[tokio::test]
async fn a_replay_of_an_old_event_behind_an_open_circuit_waits_for_the_probe() {
    let p = policy(5, 60, 1000);
    let local = setup("hreplaywin", p.clone()).await;
    let receiver = Receiver::start().await.unwrap();
    let mut ep = down_endpoint(&local, &receiver, "tnt_replaywin").await;
    ep.schedule = Some(RetrySchedule::new(vec![60, 60]).unwrap());
    local.sender.endpoints.put(&ep).await.unwrap();
    let deps = instance(&local, &p, Arc::new(Recorded::default()));
    send(&deps, &messages(&local, &ep, 5)).await;

    let mut old = messages(&local, &ep, 1).remove(0);
    old.event.created_at = Utc::now() - chrono::Duration::days(3);
    let dead = old.dead_lettered(tern_core::DeadLetter {
        reason: DeadLetterReason::Exhausted,
        last_status: Some(503),
        last_error: Some("http status 503".into()),
        attempts: 3,
        at: Utc::now() - chrono::Duration::days(2),
    });
    // Redriven from the console (it carries its dead letter) and by the replay function.
    for replayed in [dead.clone(), dead.replayed()] {
        let r = send(&deps, &[replayed]).await;
        assert_eq!(count(&r, deferred), 1, "{r:?}");
    }
    assert!(dead_letters(&local).await.is_empty());
    assert_eq!(receiver.requests("/down").len(), 5, "no POST while open");
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
    // The close is kept: `tern audit` counts deliveries held back until then as waiting
    // for one grace after it (issue 29 item 3).
    assert!(
        h.closed_at.is_some_and(|c| c <= chrono::Utc::now()),
        "the close is not kept: {h:?}"
    );
    assert!(dead_letters(&local).await.is_empty());
}

/// A one-minute window played at 0.05: 3 s of real time.
const WINDOW_SCALE: f64 = 0.05;

fn one_minute_window(failure_threshold: u32, min_attempts: u64) -> HealthPolicy {
    HealthPolicy {
        failure_threshold,
        window_seconds: 60,
        min_attempts,
        ..HealthPolicy::default()
    }
}

/// Sleeps one window of `policy` at [`WINDOW_SCALE`], and a little more.
async fn sleep_one_window(policy: &HealthPolicy) {
    let window = policy.timings(WINDOW_SCALE).window();
    tokio::time::sleep(window + Duration::from_millis(300)).await;
}

#[tokio::test]
async fn auto_disable_once_below_the_threshold_for_a_whole_window_with_enough_attempts() {
    // Semantics changed on purpose (issue 16, item 8): the 21st attempt at 48 % used to
    // disable at once; now it starts the window, and the endpoint is disabled only if it is
    // still below 50 % a whole window later.
    // A one-minute window at 0.2 (12 s): the 21 attempts that make the rate fall below
    // must land in one window, however slow a loaded machine makes each batch.
    const DISABLE_WINDOW_SCALE: f64 = 0.2;
    let p = one_minute_window(1000, 20);
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
    let deps = instance_at(&local, &p, events.clone(), DISABLE_WINDOW_SCALE);

    // 10 successes and 9 failures: 19 attempts, under the minimum of 20.
    send(&deps, &messages(&local, &ep, 10)).await;
    send(&deps, &messages(&local, &ep, 9)).await;
    assert!(enabled(&local, &ep).await);
    assert!(events.kinds().is_empty(), "{:?}", events.kinds());
    // The 20th attempt fails: exactly 50 % is not below 50 %, but below 95 %: degraded.
    send(&deps, &messages(&local, &ep, 1)).await;
    assert!(enabled(&local, &ep).await);
    assert_eq!(events.kinds(), vec![OperationalEventKind::Degraded]);
    // Another failure: 10 of 21 (48 %) is below; the window before auto-disable starts.
    send(&deps, &messages(&local, &ep, 1)).await;
    assert!(enabled(&local, &ep).await, "disabled before a whole window");
    let h = health_store(&local)
        .get(&ep.tenant_id, &ep.id)
        .await
        .unwrap()
        .unwrap();
    let below_since = h.below_since.expect("the time it fell below is kept");
    assert_eq!(events.kinds(), vec![OperationalEventKind::Degraded]);
    // Still below a whole window later, with the failing traffic going on (five every
    // quarter window, as a live sender's retries and new events would keep coming): it is disabled,
    // once, with the reason and the last success. The traffic matters: the attempts that
    // made it fall below are a whole window old by then, at the edge of the rate's window.
    let window = p.timings(DISABLE_WINDOW_SCALE).window();
    let mut sent_after = 0;
    while enabled(&local, &ep).await {
        assert!(
            sent_after < 12,
            "still enabled {sent_after} quarter windows after falling below"
        );
        tokio::time::sleep(window / 4).await;
        // Five a quarter window: at least the minimum volume in any window, even when a
        // loaded machine makes each send slow.
        send(&deps, &messages(&local, &ep, 5)).await;
        sent_after += 1;
    }
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
        reason.starts_with("auto_disabled: ")
            && reason.contains(" % success over 1 min, last status 503; last success "),
        "{reason}"
    );
    let h = health_store(&local)
        .get(&ep.tenant_id, &ep.id)
        .await
        .unwrap()
        .unwrap();
    let disabled_at = h.disabled_at.unwrap();
    assert!(
        (disabled_at - below_since).to_std().unwrap() >= p.timings(DISABLE_WINDOW_SCALE).window(),
        "disabled {disabled_at} less than a window after falling below at {below_since}"
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
    // The rate it was disabled at, as the record had it: at least the minimum volume,
    // below 50 %, and the text of the reason says the same.
    assert!(disabled.attempts >= 20, "{}", disabled.attempts);
    assert_eq!(disabled.window_seconds, 60);
    let rate = disabled.success_rate.unwrap();
    assert!(rate < 0.5, "{rate}");
    assert!(
        reason.starts_with(&format!("auto_disabled: {:.0} %", rate * 100.0)),
        "{reason} at {rate}"
    );
    assert!(h.pending_report.is_none(), "published: {h:?}");

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

    // `tern endpoints enable` re-enables it and starts its health afresh: the window, the
    // failures in a row and the disable go; the 24 h view and the last success and failure
    // stay (a customer reading "100 % of 2" after 60 requests would be misled).
    let health = health_store(&local);
    let before = health.get(&ep.tenant_id, &ep.id).await.unwrap().unwrap();
    let day_before = before.long_rate(Utc::now());
    assert!(day_before.attempts >= 21, "{day_before:?}");
    tern_local::ops::enable_endpoint(
        local.sender.endpoints.as_ref(),
        Some(&health as &dyn HealthStore),
        Some(&ep.tenant_id),
        &ep.id,
    )
    .await
    .unwrap();
    let after = health.get(&ep.tenant_id, &ep.id).await.unwrap().unwrap();
    assert_eq!(
        after.long_rate(Utc::now()),
        day_before,
        "the 24 h view is kept"
    );
    assert_eq!(after.last_success_at, before.last_success_at);
    assert_eq!(after.last_failure, before.last_failure);
    assert_eq!(after.window_rate(Utc::now()).attempts, 0, "{after:?}");
    assert_eq!(after.consecutive_failures, 0);
    assert_eq!(
        (
            after.below_since,
            after.disabled_at,
            after.failing_since,
            after.opened_at
        ),
        (None, None, None, None),
        "{after:?}"
    );
    assert_eq!(
        after.state(true, &p, Utc::now()),
        tern_core::health::HealthState::Healthy
    );
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
    // counts, the last failure carries the longest error text kept (200 bytes) and the
    // longest response excerpt (100 bytes), and a run of failures is going on (failing
    // since).
    let now = Utc::now();
    let mut previous = None;
    for minutes_ago in (0..=24 * 60).rev().step_by(10) {
        let at = now - chrono::Duration::minutes(minutes_ago);
        let mut delta = tern_core::health::HealthDelta::new(at);
        for _ in 0..3 {
            delta.add(tern_core::health::HealthSignal::Success { at });
        }
        delta.add(tern_core::health::HealthSignal::Failure(
            tern_core::health::LastFailure {
                at,
                status: Some(503),
                error_class: Some(tern_core::ErrorClass::Timeout),
                error: Some("x".repeat(tern_core::health::LAST_ERROR_BYTES)),
                excerpt: Some("y".repeat(tern_core::health::LAST_EXCERPT_BYTES)),
            },
        ));
        delta.attempts = 4_000;
        delta.successes = 3_990;
        let after = store
            .record(
                &tenant,
                &endpoint,
                &delta,
                p.timings(1.0).bucket_seconds(),
                previous.as_ref(),
            )
            .await
            .unwrap();
        previous = Some(after);
    }
    let h = previous.unwrap();
    // And rate-limited: the schedule and the token of its last write.
    let slots = tern_core::rate_limit::request(
        None,
        10,
        tern_core::rate_limit::RateLimit::new(tern_core::rate_limit::MAX_PER_SECOND).unwrap(),
        Utc::now(),
    )
    .unwrap();
    store
        .reserve_slots(&tenant, &endpoint, &slots)
        .await
        .unwrap();
    assert!(h.hourly.len() <= 26, "{}", h.hourly.len());
    assert!(h.buckets.len() <= 8, "{}", h.buckets.len());
    let item = aws_sdk_dynamodb::Client::new(&local.aws)
        .get_item()
        .table_name(&local.resources.health_table)
        .key(
            tern_aws::health::HEALTH_KEY,
            aws_sdk_dynamodb::types::AttributeValue::S(format!("{tenant}#{endpoint}")),
        )
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    assert!(
        item.contains_key("lf_x")
            && item.contains_key("fs")
            && item.contains_key("rt")
            && item.contains_key("t_rl"),
        "{item:#?}"
    );
    let size: usize = item.iter().map(|(k, v)| k.len() + value_size(v)).sum();
    assert!(size < 1024, "{size} bytes over {} attributes", item.len());
    eprintln!(
        "busy endpoint's health item: {size} bytes, {} attributes",
        item.len()
    );
}

fn health_record(
    local: &LocalTern,
    ep: &Endpoint,
) -> impl std::future::Future<Output = tern_core::health::EndpointHealth> {
    let store = health_store(local);
    let (tenant, id) = (ep.tenant_id.clone(), ep.id.clone());
    async move {
        store
            .get(&tenant, &id)
            .await
            .unwrap()
            .expect("a health record")
    }
}

fn delivered_ids(receiver: &Receiver, path: &str) -> std::collections::HashSet<String> {
    receiver
        .requests(path)
        .iter()
        .filter(|r| r.answered == 200)
        .filter_map(|r| r.header("webhook-id").map(str::to_owned))
        .collect()
}

/// Issue 16, item 1: a receiver that takes 5 requests a second and answers the rest
/// `429 Retry-After: 1` used to be auto-disabled within a second (5-9 of 200 arrived).
/// Backpressure pauses the endpoint instead; the held-back deliveries come back spread
/// over a resume window that doubles with each pause in a row; nothing is counted against
/// the endpoint; all 200 arrive. Real time: the receiver's second is a real one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_rate_limiting_a_burst_with_retry_after_1_gets_all_200_and_stays_enabled() {
    let p = HealthPolicy {
        // The first resume window: 2 s (then 4, 8, 16 s... while pushed back again).
        probe_interval_seconds: 2,
        ..HealthPolicy::default()
    };
    let (local, _rx) = deployment(
        "hratelimit",
        LocalOptions {
            lookup: Some(no_dns()),
            health: Some(p),
            sender_concurrency: 2,
            ..LocalOptions::default()
        },
    )
    .await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set(
        "/limited",
        Behavior::RateLimit {
            per_second: 5,
            retry_after: "1".into(),
        },
    );
    // A schedule of its own that retries a delivery that met a 429 seconds later; its last
    // wait (10 min) gives held-back deliveries a retry window (about 12 min) that a slow,
    // loaded machine cannot outrun.
    let ep = add_endpoint_with(
        &local,
        tern_core::EndpointId::generate(),
        "tnt_rl",
        &receiver.url("/limited"),
        &["*"],
        None,
        Some(RetrySchedule::new(vec![1, 2, 4, 8, 16, 600]).unwrap()),
    )
    .await;
    let started = std::time::Instant::now();
    let mut ids = Vec::new();
    for i in 0..200 {
        ids.push(publish(&local, "order.paid", "tnt_rl", &format!(r#"{{"i":{i}}}"#)).await);
    }
    let all = eventually(Duration::from_secs(360), async || {
        let got = delivered_ids(&receiver, "/limited");
        ids.iter().all(|id| got.contains(id.as_str()))
    })
    .await;
    let requests = receiver.requests("/limited");
    let rejected = requests.iter().filter(|r| r.answered == 429).count();
    let h = health_record(&local, &ep).await;
    eprintln!(
        "200 deliveries through a 5/s limiter in {:.1} s: {} requests, {rejected} answered 429; \
         {} pauses in a row at the end",
        started.elapsed().as_secs_f64(),
        requests.len(),
        h.pauses
    );
    if !all {
        let got = delivered_ids(&receiver, "/limited");
        for id in ids.iter().filter(|id| !got.contains(id.as_str())) {
            let log: Vec<(u32, Option<u16>, String)> = attempts_of(&local, id, &ep)
                .await
                .into_iter()
                .map(|r| (r.attempt, r.status, r.outcome))
                .collect();
            eprintln!("missing {id}: attempts {log:?}");
        }
        eprintln!("dead letters: {:?}", dead_letters(&local).await);
    }
    assert!(
        all,
        "{} of 200 arrived",
        delivered_ids(&receiver, "/limited").len()
    );
    assert!(enabled(&local, &ep).await, "a polite receiver was disabled");
    assert!(dead_letters(&local).await.is_empty());
    // Backpressure is nobody's failure: the record holds the 200 successes and nothing else.
    assert_eq!(h.consecutive_failures, 0, "{h:?}");
    assert!(h.last_failure.is_none(), "{h:?}");
    assert!(h.opened_at.is_none() && h.disabled_at.is_none(), "{h:?}");
    let rate = h.window_rate(Utc::now());
    assert_eq!(rate.attempts, rate.successes, "{h:?}");
    assert!(
        rejected > 0,
        "the limiter never pushed back: the test tested nothing"
    );
    // Issue 26: no push-back spends an attempt, so every delivery arrived on its first
    // (before, each 429 spent one, and the schedule's waits followed).
    for id in &ids {
        let rows = attempts_of(&local, id, &ep).await;
        assert!(
            rows.iter().all(|r| r.attempt == 1),
            "a push-back spent an attempt: {rows:?}"
        );
    }
}

/// Issue 16, item 1: a receiver answering `429 Retry-After: 3600` used to be disabled after
/// 20 requests. It pauses the endpoint for the hour it asked (the cap), not disabled, no
/// circuit; while paused, due deliveries (a retry included) wait without a POST, a claim or
/// a spent attempt, on every sender instance. Issue 26: the pushed-back deliveries spend
/// no attempt either, and an instance holds back its POSTs not yet sent as soon as the
/// first answer pushes back.
#[tokio::test]
async fn a_receiver_asking_for_an_hour_pauses_the_endpoint_and_nothing_spends_attempts() {
    let p = HealthPolicy::default();
    let local = setup("hpause", p.clone()).await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set(
        "/busy",
        Behavior::Always(Reply::status(429).header("retry-after", "3600")),
    );
    let ep = add_endpoint(&local, "tnt_pause", &receiver.url("/busy"), &["*"], None).await;
    let events = Arc::new(Recorded::default());
    let tee = Arc::new(Tee {
        inner: local.sender.delivery_queue.clone(),
        sent: Mutex::default(),
    });
    let a = SenderDeps {
        delivery_queue: tee.clone(),
        ..instance(&local, &p, events.clone())
    };
    let b = instance(&local, &p, events.clone());

    // Two batches at once, 20 deliveries (20 failures at 0 % used to disable). Each
    // instance learns of the pause from its first 429 and holds back what has not left
    // yet: at least one POST per instance, at most all 20. None spends its attempt: each
    // goes back for the same attempt after the hour it asked for.
    let (m1, m2) = (messages(&local, &ep, 10), messages(&local, &ep, 10));
    let before = Utc::now();
    let (ra, rb) = tokio::join!(send(&a, &m1), send(&b, &m2));
    let posts = receiver.requests("/busy").len();
    assert!((2..=20).contains(&posts), "{posts} POSTs");
    let requeued = |r: &[MessageResult]| {
        count(r, |o| {
            matches!(
                o,
                MessageOutcome::Requeued { attempt: 1, until }
                    if *until >= before + chrono::Duration::seconds(3600)
            )
        })
    };
    assert_eq!(requeued(&ra) + requeued(&rb), 20, "{ra:?} {rb:?}");
    assert!(
        enabled(&local, &ep).await,
        "disabled for asking to slow down"
    );
    let h = health_record(&local, &ep).await;
    assert_eq!(h.consecutive_failures, 0, "{h:?}");
    assert_eq!(h.window_rate(Utc::now()).attempts, 0, "{h:?}");
    assert!(
        h.opened_at.is_none(),
        "backpressure opened the circuit: {h:?}"
    );
    let paused_until = h.paused_until.expect("paused");
    assert!(
        paused_until >= before + chrono::Duration::seconds(3600)
            && paused_until <= Utc::now() + chrono::Duration::seconds(3600),
        "{paused_until}"
    );
    assert_eq!(
        h.state(true, &p, Utc::now()),
        tern_core::health::HealthState::Paused
    );
    assert!(events.kinds().is_empty(), "{:?}", events.kinds());

    // Paused: new deliveries and a retry at attempt 2 wait; no POST, no claim.
    let mut later = messages(&local, &ep, 4);
    later[3] = later[3].next_attempt(Utc::now(), Some(429), None);
    let r = send(&a, &later).await;
    assert_eq!(count(&r, deferred), 4, "{r:?}");
    // The other instance (its own cache) holds them back too.
    let r = send(&b, &messages(&local, &ep, 3)).await;
    assert_eq!(count(&r, deferred), 3, "{r:?}");
    assert_eq!(receiver.requests("/busy").len(), posts);
    for m in &later {
        assert!(
            local
                .sender
                .ledger
                .history(&m.event.tenant_id, &m.event.id)
                .await
                .unwrap()
                .is_empty(),
            "a deferred delivery spends no attempt"
        );
    }
    let queued: Vec<DeliveryMessage> = tee
        .sent
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| DeliveryMessage::parse(&e.body).ok())
        .filter(|m| later.iter().any(|l| l.delivery_id == m.delivery_id))
        .collect();
    assert_eq!(queued.len(), 4);
    for m in &queued {
        let want = later
            .iter()
            .find(|l| l.delivery_id == m.delivery_id)
            .unwrap();
        assert_eq!(m.attempt, want.attempt);
        assert!(m.not_before.unwrap() >= paused_until);
    }
}

/// Issue 16, item 8: an endpoint whose 11 of its first 23 attempts succeeded, the 12
/// failures in one burst, used to be disabled there and then. Below 50 % for a moment
/// opens the circuit (one probe per interval, nothing lost) and starts the window; it is
/// not disabled.
#[tokio::test]
async fn a_short_burst_of_failures_opens_the_circuit_and_does_not_disable() {
    let p = HealthPolicy::default();
    let local = setup("hburst", p.clone()).await;
    let receiver = Receiver::start().await.unwrap();
    let mut script = vec![Reply::status(200); 11];
    script.push(Reply::status(503));
    receiver.set("/burst", Behavior::Script(script));
    let ep = add_endpoint(&local, "tnt_burst", &receiver.url("/burst"), &["*"], None).await;
    let events = Arc::new(Recorded::default());
    let a = instance(&local, &p, events.clone());
    let b = instance(&local, &p, events.clone());
    send(&a, &messages(&local, &ep, 11)).await;
    let (m1, m2) = (messages(&local, &ep, 6), messages(&local, &ep, 6));
    tokio::join!(send(&a, &m1), send(&b, &m2));
    assert_eq!(receiver.requests("/burst").len(), 23);

    assert!(enabled(&local, &ep).await, "disabled by a burst");
    let h = health_record(&local, &ep).await;
    let rate = h.window_rate(Utc::now());
    assert_eq!((rate.attempts, rate.successes), (23, 11));
    assert!(h.opened_at.is_some(), "the burst opens the circuit: {h:?}");
    assert!(h.below_since.is_some(), "{h:?}");
    assert!(h.disabled_at.is_none(), "{h:?}");
    assert!(
        !events.kinds().contains(&OperationalEventKind::Disabled),
        "{:?}",
        events.kinds()
    );
    // Nothing is lost: the circuit holds the next ones back without spending attempts.
    let r = send(&a, &messages(&local, &ep, 5)).await;
    assert_eq!(count(&r, deferred), 5, "{r:?}");
}

/// Issue 15, item 7: two batches settling at once, one seeing 62 % and the other 45 %,
/// used to report `endpoint.degraded` beside `endpoint.disabled`. The owner hears
/// `degraded` when the endpoint falls below, and `disabled` alone a window later.
#[tokio::test]
async fn two_batches_settling_at_once_never_report_degraded_beside_disabled() {
    let p = one_minute_window(1000, 4);
    let local = setup("hsettle", p.clone()).await;
    let receiver = Receiver::start().await.unwrap();
    let mut script = vec![Reply::status(200); 10];
    script.push(Reply::status(503));
    receiver.set("/falls", Behavior::Script(script));
    let ep = add_endpoint(&local, "tnt_settle", &receiver.url("/falls"), &["*"], None).await;
    let events = Arc::new(Recorded::default());
    let a = instance_at(&local, &p, events.clone(), WINDOW_SCALE);
    let b = instance_at(&local, &p, events.clone(), WINDOW_SCALE);
    send(&a, &messages(&local, &ep, 10)).await;
    assert!(events.kinds().is_empty());

    let round = async |n: usize| {
        let seen = events.kinds().len();
        let (m1, m2) = (messages(&local, &ep, n), messages(&local, &ep, n));
        tokio::join!(send(&a, &m1), send(&b, &m2));
        events.kinds()[seen..].to_vec()
    };
    let beside = |kinds: &[OperationalEventKind]| {
        kinds.contains(&OperationalEventKind::Degraded)
            && kinds.contains(&OperationalEventKind::Disabled)
    };
    // 10 of 16, then 10 of 22: below 50 % from now on.
    let first = round(6).await;
    assert!(!beside(&first), "degraded beside disabled: {first:?}");
    assert_eq!(first, vec![OperationalEventKind::Degraded]);
    assert!(enabled(&local, &ep).await);
    // Still below a window later: disabled, reported once, alone.
    sleep_one_window(&p).await;
    let second = round(2).await;
    assert!(!beside(&second), "degraded beside disabled: {second:?}");
    assert_eq!(second, vec![OperationalEventKind::Disabled]);
    assert!(!enabled(&local, &ep).await);
}

/// Issue 16, item 7: the failure model runs at the deployment's time scale, like the retry
/// waits. At 0.002 the 1 h window is 7.2 s: failures older than that no longer count, and
/// an endpoint below 50 % is not disabled before the scaled window has passed (at scale 1
/// a quick burst at 0 % used to disable it in seconds).
#[tokio::test]
async fn the_window_runs_at_the_time_scale_like_the_retry_waits() {
    let scale = 0.002;
    let p = HealthPolicy {
        failure_threshold: 1000,
        min_attempts: 5,
        ..HealthPolicy::default()
    };
    let local = setup("hscale", p.clone()).await;
    let receiver = Receiver::start().await.unwrap();
    let mut script = vec![Reply::status(503); 6];
    script.push(Reply::status(200));
    receiver.set("/scaled", Behavior::Script(script));
    let ep = add_endpoint(&local, "tnt_scale", &receiver.url("/scaled"), &["*"], None).await;
    let events = Arc::new(Recorded::default());
    let deps = instance_at(&local, &p, events.clone(), scale);

    send(&deps, &messages(&local, &ep, 6)).await;
    assert!(
        enabled(&local, &ep).await,
        "disabled before the (scaled) window"
    );
    assert_eq!(events.kinds(), vec![OperationalEventKind::Degraded]);
    let h = health_record(&local, &ep).await;
    assert_eq!(h.bucket_seconds, 1, "7.2 s window: 1 s buckets");

    // Past the scaled window (six 1 s buckets and the current one), the failures have left it.
    tokio::time::sleep(Duration::from_millis(8_500)).await;
    send(&deps, &messages(&local, &ep, 6)).await;
    let h = health_record(&local, &ep).await;
    let rate = h.window_rate(Utc::now());
    assert_eq!((rate.attempts, rate.successes), (6, 6), "{h:?}");
    assert!(h.below_since.is_none(), "{h:?}");
    assert_eq!(
        h.state(true, &p, Utc::now()),
        tern_core::health::HealthState::Healthy
    );
    assert_eq!(
        events.kinds(),
        vec![
            OperationalEventKind::Degraded,
            OperationalEventKind::Recovered
        ]
    );
    assert!(enabled(&local, &ep).await);
}

/// Issue 16, item 7: the walkthrough's "stop the receiver first to see dead letters", with
/// the default failure model and the short schedule (1.9 h, 14 s at 0.002). Three events'
/// 21 attempts span the schedule, never 20 in one (scaled) window: as in production, each
/// delivery ends `exhausted` and the endpoint stays enabled. With the window unscaled it
/// was auto-disabled within seconds and the deliveries dead-lettered `endpoint_disabled`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_receiver_ends_in_exhausted_dead_letters_as_the_walkthrough_says() {
    let (local, _rx) = deployment(
        "hwalk",
        LocalOptions {
            lookup: Some(no_dns()),
            time_scale: 0.002,
            ..LocalOptions::default()
        },
    )
    .await;
    // A receiver that was stopped: nothing listens on its port any more.
    let stopped = Receiver::start().await.unwrap();
    let url = stopped.url("/hook");
    drop(stopped);
    let ep = add_endpoint_with(
        &local,
        tern_core::EndpointId::generate(),
        "tnt_walk",
        &url,
        &["*"],
        None,
        Some(RetrySchedule::short()),
    )
    .await;
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(publish(&local, "order.paid", "tnt_walk", &format!(r#"{{"i":{i}}}"#)).await);
    }
    let dead = eventually(Duration::from_secs(90), async || {
        dead_letters(&local).await.len() >= 3
    })
    .await;
    let letters = dead_letters(&local).await;
    assert!(dead, "{} of 3 dead-lettered", letters.len());
    let reasons: Vec<DeadLetterReason> = letters
        .iter()
        .map(|m| m.dead_letter.as_ref().unwrap().reason)
        .collect();
    assert_eq!(reasons, vec![DeadLetterReason::Exhausted; 3], "{letters:?}");
    for m in &letters {
        assert_eq!(m.dead_letter.as_ref().unwrap().attempts, 7, "{m:?}");
        assert!(ids.contains(&m.event.id));
    }
    assert!(enabled(&local, &ep).await, "auto-disabled");
}

/// The health store on moto, counting the count writes (`record`) per endpoint.
struct CountingHealth {
    inner: tern_aws::DynamoHealthStore,
    records: Mutex<std::collections::HashMap<String, usize>>,
}

impl CountingHealth {
    fn writes(&self, ep: &Endpoint) -> usize {
        self.records
            .lock()
            .unwrap()
            .get(ep.id.as_str())
            .copied()
            .unwrap_or(0)
    }
}

#[async_trait]
impl HealthStore for CountingHealth {
    async fn get(
        &self,
        t: &tern_core::TenantId,
        e: &tern_core::EndpointId,
    ) -> Result<Option<tern_core::health::EndpointHealth>, PortError> {
        self.inner.get(t, e).await
    }
    async fn list(
        &self,
        t: Option<&tern_core::TenantId>,
    ) -> Result<Vec<tern_core::health::EndpointHealth>, PortError> {
        self.inner.list(t).await
    }
    async fn record(
        &self,
        t: &tern_core::TenantId,
        e: &tern_core::EndpointId,
        delta: &tern_core::health::HealthDelta,
        bucket_seconds: u64,
        previous: Option<&tern_core::health::EndpointHealth>,
    ) -> Result<tern_core::health::EndpointHealth, PortError> {
        *self
            .records
            .lock()
            .unwrap()
            .entry(e.to_string())
            .or_default() += 1;
        self.inner
            .record(t, e, delta, bucket_seconds, previous)
            .await
    }
    async fn apply(
        &self,
        t: &tern_core::TenantId,
        e: &tern_core::EndpointId,
        change: &tern_core::health::HealthChange,
        now: chrono::DateTime<Utc>,
    ) -> Result<bool, PortError> {
        self.inner.apply(t, e, change, now).await
    }
    async fn reserve_slots(
        &self,
        t: &tern_core::TenantId,
        e: &tern_core::EndpointId,
        request: &tern_core::rate_limit::SlotRequest,
    ) -> Result<tern_core::rate_limit::SlotAnswer, PortError> {
        self.inner.reserve_slots(t, e, request).await
    }
    async fn reset(
        &self,
        t: &tern_core::TenantId,
        e: &tern_core::EndpointId,
    ) -> Result<(), PortError> {
        self.inner.reset(t, e).await
    }
}

/// A sender instance (time scale 1) over `store`, holding a healthy endpoint's successes
/// for at most `flush`.
fn counted_instance(local: &LocalTern, store: Arc<CountingHealth>, flush: Duration) -> SenderDeps {
    let s = &local.sender;
    SenderDeps {
        endpoints: s.endpoints.clone(),
        ledger: s.ledger.clone(),
        delivery_queue: s.delivery_queue.clone(),
        dlq: s.dlq.clone(),
        scheduler: s.scheduler.clone(),
        client: s.client.clone(),
        policy: s.policy.clone(),
        breaker: Some(Arc::new(
            CircuitBreaker::new(
                store,
                Arc::new(Recorded::default()),
                HealthPolicy::default(),
                1.0,
                // Longer than any run: a success is held only on a record the instance
                // holds in memory, so a 5 s cache let a slow run (12 batches past 5 s on a
                // loaded machine) read the record afresh and write again: what is tested
                // here is the flush interval, not the cache's lifetime.
                Duration::from_secs(600),
            )
            .with_gate_deadline(Duration::from_secs(15))
            .with_flush_interval(flush),
        )),
    }
}

/// Issue 29: a healthy endpoint's item is not written once per batch. Batches whose
/// attempts to it all succeed, within the flush interval of the instance's last write,
/// are held; a failure is written at once with every held success before it, so the
/// circuit breaker sees the counts whole; held successes whose interval is over go out
/// with the next batch of any endpoint. Before, each of the batches below wrote the item.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_hot_endpoints_successes_are_written_once_an_interval_and_a_failure_at_once() {
    const BATCHES: usize = 12;
    const PER_BATCH: usize = 5;
    let local = setup("health-held", HealthPolicy::default()).await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set("/hot", Behavior::Always(Reply::status(200)));
    receiver.set("/other", Behavior::Always(Reply::status(200)));
    let hot = add_endpoint(&local, "tnt_hot", &receiver.url("/hot"), &["*"], None).await;
    let other = add_endpoint(&local, "tnt_hot", &receiver.url("/other"), &["*"], None).await;
    let store = Arc::new(CountingHealth {
        inner: health_store(&local),
        records: Mutex::new(std::collections::HashMap::new()),
    });

    // With an interval longer than the run: the first batch writes, the others are held.
    let deps = counted_instance(&local, store.clone(), Duration::from_secs(600));
    for _ in 0..BATCHES {
        let r = send(&deps, &messages(&local, &hot, PER_BATCH)).await;
        assert_eq!(
            count(&r, |o| matches!(o, MessageOutcome::Delivered { .. })),
            PER_BATCH
        );
    }
    assert_eq!(
        store.writes(&hot),
        1,
        "only the first batch's counts were written"
    );
    let window = |h: tern_core::health::EndpointHealth| h.window_rate(Utc::now());
    let h = health_store(&local)
        .get(&hot.tenant_id, &hot.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(window(h).attempts, PER_BATCH as u64);
    // A failure is written at once, the held successes with it (before it).
    receiver.set("/hot", Behavior::Always(Reply::status(500)));
    send(&deps, &messages(&local, &hot, 1)).await;
    assert_eq!(store.writes(&hot), 2);
    let h = health_store(&local)
        .get(&hot.tenant_id, &hot.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(h.consecutive_failures, 1);
    let rate = window(h);
    assert_eq!(
        (rate.attempts, rate.successes),
        (
            (BATCHES * PER_BATCH + 1) as u64,
            (BATCHES * PER_BATCH) as u64
        ),
        "every held success counted, none twice"
    );

    // A short interval: held successes go out with a later batch of another endpoint.
    let store = Arc::new(CountingHealth {
        inner: health_store(&local),
        records: Mutex::new(std::collections::HashMap::new()),
    });
    let deps = counted_instance(&local, store.clone(), Duration::from_secs(2));
    send(&deps, &messages(&local, &other, 2)).await;
    send(&deps, &messages(&local, &other, 2)).await;
    assert_eq!(store.writes(&other), 1, "the second batch is held");
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    send(&deps, &messages(&local, &hot, 1)).await;
    assert_eq!(
        store.writes(&other),
        2,
        "its interval over, the next batch writes it"
    );
    let h = health_store(&local)
        .get(&other.tenant_id, &other.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        window(h).attempts,
        4,
        "flushed by a later batch of another endpoint"
    );

    // What a sender instance writes to a hot endpoint's item (interval 1 s, time scale 1),
    // next to what it wrote before (every batch).
    for (label, flush) in [
        ("before (every batch)", Duration::ZERO),
        ("after (1 s)", Duration::from_secs(1)),
    ] {
        let store = Arc::new(CountingHealth {
            inner: health_store(&local),
            records: Mutex::new(std::collections::HashMap::new()),
        });
        let deps = counted_instance(&local, store.clone(), flush);
        let started = std::time::Instant::now();
        for _ in 0..BATCHES {
            send(&deps, &messages(&local, &other, PER_BATCH)).await;
        }
        let seconds = started.elapsed().as_secs_f64();
        let writes = store.writes(&other);
        eprintln!(
            "hot endpoint, {label}: {writes} health writes for {} deliveries in {BATCHES} batches over {seconds:.1} s ({:.3} per delivery, {:.2} per second)",
            BATCHES * PER_BATCH,
            writes as f64 / (BATCHES * PER_BATCH) as f64,
            writes as f64 / seconds
        );
        if flush.is_zero() {
            assert_eq!(writes, BATCHES);
        } else {
            assert!(
                writes as f64 <= seconds.ceil() + 1.0,
                "{writes} writes in {seconds:.1} s"
            );
        }
    }
}

/// Issue 29, item 3: a delivery held back again and again by an open circuit waits
/// longer each time, towards the queue's 900 s, instead of coming back every ~90 s.
#[tokio::test]
async fn a_delivery_held_back_again_and_again_waits_longer_each_time_up_to_900_s() {
    let p = policy(5, 60, 1000);
    let local = setup("hgrow", p.clone()).await;
    let receiver = Receiver::start().await.unwrap();
    let ep = down_endpoint(&local, &receiver, "tnt_grow").await;
    let tee = Arc::new(Tee {
        inner: local.sender.delivery_queue.clone(),
        sent: Mutex::default(),
    });
    let deps = SenderDeps {
        delivery_queue: tee.clone(),
        ..instance(&local, &p, Arc::new(Recorded::default()))
    };
    // Five failures open the circuit (next probe in 60 s).
    send(&deps, &messages(&local, &ep, 5)).await;
    let h = health_store(&local)
        .get(&ep.tenant_id, &ep.id)
        .await
        .unwrap()
        .unwrap();
    assert!(h.opened_at.is_some(), "{h:?}");

    // One delivery, held back eight times in a row: each time it comes back (its delay
    // over, simulated by making it due now) the circuit is still open.
    let mut m = messages(&local, &ep, 1).remove(0);
    let mut delays = Vec::new();
    for hold in 0..8 {
        let before = tee.sent.lock().unwrap().len();
        let r = send(&deps, std::slice::from_ref(&m)).await;
        assert_eq!(count(&r, deferred), 1, "hold {hold}: {r:?}");
        let sent = tee.sent.lock().unwrap()[before..].to_vec();
        assert_eq!(sent.len(), 1, "{sent:?}");
        delays.push(sent[0].delay_seconds);
        let back = DeliveryMessage::parse(&sent[0].body).unwrap();
        assert_eq!(back.held_back, hold + 1);
        assert_eq!(back.attempt, 1, "no attempt spent");
        m = DeliveryMessage {
            not_before: Some(Utc::now()),
            ..back
        };
    }
    assert_eq!(
        receiver.requests("/down").len(),
        5,
        "nothing sent while open"
    );
    // The first hold keeps to the gate (after the next probe, spread over one probe
    // interval); each later one at least the gate's wait (the probe, under a minute away)
    // doubled per earlier hold and halved, at most 900 s.
    assert!(delays[0] <= 122, "{delays:?}");
    for (k, d) in delays.iter().enumerate().skip(1) {
        let floor = (25u32 << k).min(450);
        assert!(
            (floor..=900).contains(d),
            "hold {k}: {d} s, want {floor}..=900: {delays:?}"
        );
    }
    assert!(
        delays[7] >= 450,
        "grown towards the queue's 900 s: {delays:?}"
    );
}
