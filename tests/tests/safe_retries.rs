//! Issue 15, items 0 and 8: every conditional write Tern makes is safe to retry, and the
//! markers that stop a second POST (delivered, finished) are not lost to throttling.
//!
//! On moto through the fault proxy (`tern_tests::fault_proxy`), which forwards a write
//! and holds its answer past the SDK's per-try timeout (2 s), so the SDK sends the write
//! again although the first one was applied; or answers DynamoDB's own throttling error.
//! Receivers are real HTTP servers on 127.0.0.1.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::Utc;
use tern_core::ports::Claim;
use tern_core::{DeliveryMessage, Endpoint};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::sender::MessageOutcome;
use tern_local::LocalOptions;
use tern_local::local::LocalTern;
use tern_local::pollers::LocalEvent;
use tern_tests::fault_proxy::{Fault, FaultProxy, Rule, Service};
use tern_tests::*;

/// An answer held this long comes after the SDK's per-try deadline: the SDK gives up on
/// the try and sends the request again.
fn past_the_try_deadline() -> Duration {
    tern_aws::budget::ATTEMPT_TIMEOUT + Duration::from_millis(700)
}

/// Text only the first claim's UpdateItem carries (its update expression).
const CLAIM_WRITE: &str = "claim_takeover = :zero";
/// Text only a takeover's UpdateItem carries.
const TAKEOVER_WRITE: &str = "claim_takeover = if_not_exists";
/// Text only the delivered marker's UpdateItem carries (its update expression).
const DELIVERED_WRITE: &str = "ok_status = :status";
/// Text only `finish` of a delivery that will be retried carries (its state value).
const RETRYING_FINISH: &str = r#"{"S":"retrying"}"#;

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

fn message(tenant: &str, ep: &Endpoint, n: u32) -> DeliveryMessage {
    let event = tern_outbox::OutboxWriter::new("unused")
        .prepare("order.paid", tenant, format!(r#"{{"n":{n}}}"#))
        .expect("event")
        .event;
    DeliveryMessage::first(event, ep.id.clone())
}

fn delay_claims(proxy: &FaultProxy, write: &str, times: usize) -> tern_tests::fault_proxy::RuleId {
    proxy.add(
        Rule::on(
            Service::DynamoDb,
            "UpdateItem",
            Fault::DelayAnswer(past_the_try_deadline()),
        )
        .body_contains(write)
        .first(times),
    )
}

/// The delivery's state item, read straight from the table.
async fn state_item(local: &LocalTern, m: &DeliveryMessage) -> HashMap<String, AttributeValue> {
    local
        .dynamodb()
        .get_item()
        .table_name(&local.resources.attempts_table)
        .key(
            "event_id",
            AttributeValue::S(tern_aws::ledger_keys::message_partition(m)),
        )
        .key("sk", AttributeValue::S(format!("state#{}", m.endpoint_id)))
        .consistent_read(true)
        .send()
        .await
        .expect("GetItem")
        .item
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_answer_comes_after_the_try_deadline_is_granted() {
    let proxy = moto_proxy().await;
    let local = deployment_through_without_pollers(&proxy, "claim-slow", options()).await;
    let ledger = local.sender.ledger.clone();
    let ep = add_endpoint(&local, "tnt_slow", "http://127.0.0.1:9/x", &["*"], None).await;
    let m = message("tnt_slow", &ep, 1);
    let rule = delay_claims(&proxy, CLAIM_WRITE, 1);
    let before = proxy.count(&Service::DynamoDb, "UpdateItem");

    let lease = Utc::now() + chrono::Duration::seconds(60);
    let claim = ledger.claim(&m, lease).await.expect("claim");

    assert_eq!(proxy.fired(rule), 1, "the first try's answer was held");
    assert!(
        proxy.count(&Service::DynamoDb, "UpdateItem") - before >= 2,
        "the SDK sent the claim again: {:?}",
        proxy.seen()
    );
    assert_eq!(
        claim,
        Claim::Granted,
        "our own earlier try landed: the claim is ours"
    );
    // And it is a real claim: another copy of the message is refused while it lives.
    assert_eq!(
        ledger.claim(&m, lease).await.expect("second copy"),
        Claim::AlreadyClaimed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_whose_answer_comes_after_the_try_deadline_is_taken_over_with_its_number() {
    let proxy = moto_proxy().await;
    let local = deployment_through_without_pollers(&proxy, "takeover-slow", options()).await;
    let ledger = local.sender.ledger.clone();
    let ep = add_endpoint(&local, "tnt_take", "http://127.0.0.1:9/x", &["*"], None).await;
    let past = || Utc::now() - chrono::Duration::seconds(1);
    let live = || Utc::now() + chrono::Duration::seconds(60);

    // A holder crashed (its lease is over); the redelivery's takeover is applied and
    // retried. Its retry meets its own live lease.
    let a = message("tnt_take", &ep, 1);
    assert_eq!(ledger.claim(&a, past()).await.unwrap(), Claim::Granted);
    let rule = delay_claims(&proxy, TAKEOVER_WRITE, 1);
    let claim = ledger.claim(&a, live()).await.expect("takeover");
    assert_eq!(proxy.fired(rule), 1, "the takeover's answer was held");
    assert_eq!(
        claim,
        Claim::TakenOver { takeover: 1 },
        "our own takeover landed"
    );
    assert_eq!(
        ledger.claim(&a, live()).await.unwrap(),
        Claim::AlreadyClaimed,
        "and it is a real claim: the next copy is refused"
    );

    // The same when the taker crashes too: its retry must not take over a second time,
    // and the next takeover gets the next number.
    let b = message("tnt_take", &ep, 2);
    assert_eq!(ledger.claim(&b, past()).await.unwrap(), Claim::Granted);
    for (expected, lease) in [(1, past()), (2, live())] {
        let rule = delay_claims(&proxy, TAKEOVER_WRITE, 1);
        let claim = ledger.claim(&b, lease).await.expect("takeover");
        assert_eq!(proxy.fired(rule), 1, "takeover {expected}: answer held");
        assert_eq!(
            claim,
            Claim::TakenOver { takeover: expected },
            "our own earlier try landed: the takeover is ours, with its number"
        );
    }
    // Each abandoned try has its placeholder row: the first holder's and takeover 1's.
    let rows: Vec<(u32, String)> = ledger
        .history(&b.event.tenant_id, &b.event.id)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.takeover, r.outcome))
        .collect();
    assert_eq!(
        rows,
        [(0, "abandoned".to_owned()), (1, "abandoned".to_owned())],
        "{rows:?}"
    );
    let item = state_item(&local, &b).await;
    assert_eq!(
        item.get("claim_takeover"),
        Some(&AttributeValue::N("2".into()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_true_duplicate_is_refused_even_when_its_own_claim_is_retried() {
    let proxy = moto_proxy().await;
    let local = deployment_through_without_pollers(&proxy, "true-dup", options()).await;
    let receiver = Receiver::start().await.unwrap();
    let tenant = "tnt_dup";
    let ep = add_endpoint(&local, tenant, &receiver.url("/d"), &["*"], None).await;

    // Another copy of the message is being processed: it holds a live claim.
    let m = message(tenant, &ep, 1);
    let lease = Utc::now() + chrono::Duration::seconds(60);
    assert_eq!(
        local.sender.ledger.claim(&m, lease).await.unwrap(),
        Claim::Granted
    );
    // This copy's claim is applied-and-retried too: its retry meets the other's claim,
    // which is not its own.
    let rule = delay_claims(&proxy, CLAIM_WRITE, 1);
    let (response, results) =
        tern_handlers::sender::handle(&local.sender, sqs_event(&[m.to_body()]), &metrics()).await;
    assert!(response.batch_item_failures.is_empty(), "{results:?}");
    assert_eq!(proxy.fired(rule), 1);
    assert_eq!(
        results[0].1,
        Ok(MessageOutcome::Duplicate(Claim::AlreadyClaimed)),
        "another delivery owns the pair"
    );

    // A delivered pair: a late copy whose claim is retried is not sent either.
    let d = message(tenant, &ep, 2);
    let (_, results) =
        tern_handlers::sender::handle(&local.sender, sqs_event(&[d.to_body()]), &metrics()).await;
    assert_eq!(results[0].1, Ok(MessageOutcome::Delivered { attempt: 1 }));
    let rule = delay_claims(&proxy, CLAIM_WRITE, 1);
    let (_, results) =
        tern_handlers::sender::handle(&local.sender, sqs_event(&[d.to_body()]), &metrics()).await;
    assert_eq!(proxy.fired(rule), 1);
    assert_eq!(
        results[0].1,
        Ok(MessageOutcome::Duplicate(Claim::AlreadyDelivered))
    );
    assert_eq!(
        receiver.requests("/d").len(),
        1,
        "one POST: the delivered pair's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_whose_claim_answer_is_delayed_is_posted_once_and_ends_delivered() {
    let proxy = moto_proxy().await;
    let (local, mut reports) = deployment_through(&proxy, "claim-e2e", options()).await;
    let receiver = Receiver::start().await.unwrap();
    let tenant = "tnt_e2e";
    let ep = add_endpoint(&local, tenant, &receiver.url("/e2e"), &["order.paid"], None).await;
    let rule = delay_claims(&proxy, CLAIM_WRITE, 1);

    let event = publish(&local, "order.paid", tenant, r#"{"order":"o-1"}"#).await;

    // The sender reports what it did with the message: delivered, once.
    let mut outcomes = Vec::new();
    let reported = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(report) = reports.recv().await {
            if let LocalEvent::Sent(results) = report {
                outcomes.extend(results.into_iter().map(|(_, r)| r));
                if outcomes
                    .iter()
                    .any(|o| !matches!(o, Err(_) | Ok(MessageOutcome::Waiting { .. })))
                {
                    return;
                }
            }
        }
    })
    .await;
    assert!(
        reported.is_ok(),
        "no sender report within 60 s: {outcomes:?}"
    );
    assert_eq!(proxy.fired(rule), 1, "the claim's answer was held");
    assert_eq!(
        outcomes,
        [Ok(MessageOutcome::Delivered { attempt: 1 })],
        "delivered, not dropped as a duplicate of itself"
    );
    let posts = receiver.requests("/e2e");
    assert_eq!(posts.len(), 1, "exactly one POST");
    assert_eq!(posts[0].header("webhook-id"), Some(event.as_str()));
    // The ledger says delivered: a later copy of the message would not be sent.
    let h = attempts_of(&local, &event, &ep).await;
    assert_eq!(
        h.iter().map(|r| r.outcome.as_str()).collect::<Vec<_>>(),
        ["delivered"],
        "{h:#?}"
    );
}

fn throttle(
    proxy: &FaultProxy,
    write: &str,
    times: Option<usize>,
) -> tern_tests::fault_proxy::RuleId {
    let rule = Rule::on(Service::DynamoDb, "UpdateItem", Fault::Throttle).body_contains(write);
    proxy.add(match times {
        Some(n) => rule.first(n),
        None => rule,
    })
}

/// The SDK's own tries per call (`tern_aws::budget::MAX_ATTEMPTS`): one more throttle
/// than this fails a whole ledger call, which only the sender's marker retry survives.
fn beyond_the_sdk() -> usize {
    usize::try_from(tern_aws::budget::MAX_ATTEMPTS).unwrap() + 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_markers_are_tried_again_until_they_land() {
    let proxy = moto_proxy().await;
    let local = deployment_through_without_pollers(&proxy, "marker-lands", options()).await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set("/fail", Behavior::Always(Reply::status(500)));
    let tenant = "tnt_mark";
    let ok = add_endpoint(&local, tenant, &receiver.url("/ok"), &["*"], None).await;
    let failing = add_endpoint(&local, tenant, &receiver.url("/fail"), &["*"], None).await;
    let delivered = throttle(&proxy, DELIVERED_WRITE, Some(beyond_the_sdk()));
    let finished = throttle(&proxy, RETRYING_FINISH, Some(beyond_the_sdk()));

    let (d, r) = (message(tenant, &ok, 1), message(tenant, &failing, 2));
    let m = metrics();
    let (response, results) =
        tern_handlers::sender::handle(&local.sender, sqs_event(&[d.to_body(), r.to_body()]), &m)
            .await;
    assert!(response.batch_item_failures.is_empty(), "{results:?}");
    assert_eq!(results[0].1, Ok(MessageOutcome::Delivered { attempt: 1 }));
    assert!(
        matches!(
            results[1].1,
            Ok(MessageOutcome::Retrying { attempt: 1, .. })
        ),
        "{results:?}"
    );
    assert_eq!(
        proxy.fired(delivered),
        beyond_the_sdk(),
        "a whole call was throttled"
    );
    assert_eq!(
        proxy.fired(finished),
        beyond_the_sdk(),
        "a whole call was throttled"
    );

    // Both markers landed: the pair is delivered, the failed attempt's claim finished.
    let item = state_item(&local, &d).await;
    assert!(
        item.contains_key("delivered_at"),
        "delivered marker lost: {item:?}"
    );
    let item = state_item(&local, &r).await;
    assert_eq!(
        item.get("claim_done"),
        Some(&AttributeValue::Bool(true)),
        "{item:?}"
    );
    assert_eq!(
        item.get("delivery_state"),
        Some(&AttributeValue::S("retrying".into()))
    );
    assert_eq!(m.snapshot().markers_lost, 0);
    // So a later copy of the delivered message is not sent.
    let (_, results) =
        tern_handlers::sender::handle(&local.sender, sqs_event(&[d.to_body()]), &metrics()).await;
    assert_eq!(
        results[0].1,
        Ok(MessageOutcome::Duplicate(Claim::AlreadyDelivered))
    );
    assert_eq!(receiver.requests("/ok").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markers_throttled_past_their_window_are_counted_lost() {
    let proxy = moto_proxy().await;
    let local = deployment_through_without_pollers(&proxy, "marker-lost", options()).await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set("/fail", Behavior::Always(Reply::status(500)));
    let tenant = "tnt_lost";
    let ok = add_endpoint(&local, tenant, &receiver.url("/ok"), &["*"], None).await;
    let failing = add_endpoint(&local, tenant, &receiver.url("/fail"), &["*"], None).await;
    let delivered = throttle(&proxy, DELIVERED_WRITE, None);
    let finished = throttle(&proxy, RETRYING_FINISH, None);

    let (d, r) = (message(tenant, &ok, 1), message(tenant, &failing, 2));
    let m = metrics();
    let (deps, tee) = teed(&local);
    let (response, results) =
        tern_handlers::sender::handle(&deps, sqs_event(&[d.to_body(), r.to_body()]), &m).await;
    // The deliveries' outcomes stand (the POST was made, the retry queued); the delivered
    // one, whose marker is lost, goes back to write it (issue 29 item 3) ...
    assert!(response.batch_item_failures.is_empty(), "{results:?}");
    assert!(
        matches!(
            &results[0].1,
            Ok(MessageOutcome::PutBack { put_back: 1, .. })
        ),
        "{results:?}"
    );
    assert!(
        matches!(
            results[1].1,
            Ok(MessageOutcome::Retrying { attempt: 1, .. })
        ),
        "{results:?}"
    );
    // ... each marker was tried beyond the SDK's own tries, then counted lost.
    assert!(
        proxy.fired(delivered) > beyond_the_sdk(),
        "{}",
        proxy.fired(delivered)
    );
    assert!(
        proxy.fired(finished) > beyond_the_sdk(),
        "{}",
        proxy.fired(finished)
    );
    assert_eq!(m.snapshot().markers_lost, 2, "{:?}", m.snapshot());
    let emf = m.emf(0).expect("metrics");
    assert_eq!(emf["MarkersLost"], 2, "{emf}");
    assert!(!state_item(&local, &d).await.contains_key("delivered_at"));

    // ... carrying its successful attempt. Once the table takes writes again, the copy
    // writes the marker and sends nothing: the delivered pair is not forgotten.
    proxy.clear();
    let copy = tee
        .sent
        .lock()
        .unwrap()
        .iter()
        .find(|e| DeliveryMessage::parse(&e.body).is_ok_and(|c| c.delivery_id == d.delivery_id))
        .expect("the delivered message put back")
        .clone();
    assert!(copy.delay_seconds <= 2, "{}", copy.delay_seconds);
    let carried = DeliveryMessage::parse(&copy.body).unwrap();
    assert_eq!(
        carried.delivered_attempt.as_ref().map(|a| a.status),
        Some(Some(200))
    );
    let (_, results) =
        tern_handlers::sender::handle(&deps, sqs_event(&[copy.body]), &metrics()).await;
    assert_eq!(results[0].1, Ok(MessageOutcome::Delivered { attempt: 1 }));
    assert!(state_item(&local, &d).await.contains_key("delivered_at"));
    assert_eq!(receiver.requests("/ok").len(), 1, "no second POST");
    // And a later copy of the original is dropped as a duplicate.
    let (_, results) =
        tern_handlers::sender::handle(&deps, sqs_event(&[d.to_body()]), &metrics()).await;
    assert_eq!(
        results[0].1,
        Ok(MessageOutcome::Duplicate(Claim::AlreadyDelivered))
    );
    assert_eq!(receiver.requests("/ok").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_change_whose_answer_comes_after_the_try_deadline_is_its_callers() {
    use tern_core::health::{
        HealthChange, HealthDelta, HealthSignal, HealthStore, LastFailure, PendingReport,
    };
    let proxy = moto_proxy().await;
    let local = deployment_through_without_pollers(&proxy, "health-slow", options()).await;
    // The store as the sender wires it: the SDK's per-try deadline and retries.
    let store = tern_aws::DynamoHealthStore::new(
        aws_sdk_dynamodb::Client::new(&tern_aws::budget::bounded(&local.aws)),
        &local.resources.health_table,
    );
    let tenant = tern_core::TenantId::new("tnt_health").unwrap();
    let endpoint = tern_core::EndpointId::generate();
    let now = Utc::now();
    let mut delta = HealthDelta::new(now);
    delta.add(HealthSignal::Failure(LastFailure {
        at: now,
        status: Some(503),
        error_class: None,
        error: None,
        excerpt: None,
    }));
    store
        .record(&tenant, &endpoint, &delta, 600, None)
        .await
        .expect("record");

    // Each change's answer is held: the SDK sends it again, and the retry meets the
    // change already made. The caller made it, so the caller reports it.
    let probe = now + chrono::Duration::seconds(60);
    let changes = [
        (
            "attribute_not_exists(op)",
            HealthChange::Open {
                next_probe_at: probe,
            },
        ),
        (
            "AND np = ",
            HealthChange::ClaimProbe {
                seen: Some(probe),
                next_probe_at: probe + chrono::Duration::seconds(60),
            },
        ),
        (
            "attribute_not_exists(da)",
            HealthChange::Disable {
                report: PendingReport {
                    event: "{}".into(),
                    retry_at: now,
                },
            },
        ),
    ];
    for (text, change) in changes {
        let rule = proxy.add(
            Rule::on(
                Service::DynamoDb,
                "UpdateItem",
                Fault::DelayAnswer(past_the_try_deadline()),
            )
            .body_contains(text)
            .first(1),
        );
        let made = store
            .apply(&tenant, &endpoint, &change, Utc::now())
            .await
            .expect("apply");
        assert_eq!(proxy.fired(rule), 1, "{change:?}: answer held");
        assert!(made, "{change:?}: our own earlier try made it; it is ours");
        // Another sender making the same change now is refused: it is made once.
        assert!(
            !store
                .apply(&tenant, &endpoint, &change, Utc::now())
                .await
                .expect("apply"),
            "{change:?}"
        );
    }
    let h = store.get(&tenant, &endpoint).await.unwrap().unwrap();
    assert!(h.opened_at.is_some() && h.disabled_at.is_some(), "{h:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_write_whose_answer_comes_after_the_try_deadline_gets_its_slots_once() {
    use tern_core::health::HealthStore;
    use tern_core::rate_limit::{RateLimit, SlotAnswer, request};
    let proxy = moto_proxy().await;
    let local = deployment_through_without_pollers(&proxy, "slots-slow", options()).await;
    // The store as the sender wires it: the SDK's per-try deadline and retries.
    let store = tern_aws::DynamoHealthStore::new(
        aws_sdk_dynamodb::Client::new(&tern_aws::budget::bounded(&local.aws)),
        &local.resources.health_table,
    );
    let tenant = tern_core::TenantId::new("tnt_slots").unwrap();
    let endpoint = tern_core::EndpointId::generate();
    let limit = RateLimit::new(10).unwrap();

    // Both shapes of the write, each answer held: the SDK sends it again, the retry meets
    // the write already made and recognises its token. The batch gets the slots of its
    // one write, and the schedule moved once.
    let restart = request(None, 5, limit, Utc::now()).unwrap();
    let busy = restart.from + restart.span();
    for (text, req, tat_before) in [
        ("attribute_not_exists(rt) OR rt <=", restart, None),
        (
            "rt = rt +",
            request(Some(busy), 3, limit, Utc::now()).unwrap(),
            Some(busy),
        ),
    ] {
        let rule = proxy.add(
            Rule::on(
                Service::DynamoDb,
                "UpdateItem",
                Fault::DelayAnswer(past_the_try_deadline()),
            )
            .body_contains(text)
            .first(1),
        );
        let answer = store
            .reserve_slots(&tenant, &endpoint, &req)
            .await
            .expect("reserve");
        assert_eq!(proxy.fired(rule), 1, "{text}: answer held");
        let first = tat_before.unwrap_or(req.from);
        assert_eq!(answer, SlotAnswer::Granted { first }, "{text}");
        let h = store.get(&tenant, &endpoint).await.unwrap().unwrap();
        assert_eq!(h.rate_tat, Some(first + req.span()), "{text}: moved once");
    }
}

// Issue 29, item 3: our failures go back with a short delay, not the visibility timeout.

/// The delivery queue on moto, keeping a copy of every entry sent (a delayed message is
/// invisible to a peek until its delay is over).
struct Tee {
    inner: std::sync::Arc<dyn tern_core::ports::MessageQueue>,
    sent: std::sync::Mutex<Vec<tern_core::ports::QueueEntry>>,
}

#[async_trait::async_trait]
impl tern_core::ports::MessageQueue for Tee {
    async fn send_batch(
        &self,
        entries: &[tern_core::ports::QueueEntry],
    ) -> Result<Vec<Result<(), tern_core::ports::PortError>>, tern_core::ports::PortError> {
        self.sent.lock().unwrap().extend_from_slice(entries);
        self.inner.send_batch(entries).await
    }
    async fn send(
        &self,
        entry: &tern_core::ports::QueueEntry,
    ) -> Result<(), tern_core::ports::PortError> {
        self.sent.lock().unwrap().push(entry.clone());
        self.inner.send(entry).await
    }
    async fn change_visibility(
        &self,
        entries: &[tern_core::ports::VisibilityChange],
    ) -> Result<Vec<Result<(), tern_core::ports::PortError>>, tern_core::ports::PortError> {
        self.inner.change_visibility(entries).await
    }
}

/// The deployment's sender with its delivery queue teed.
fn teed(local: &LocalTern) -> (tern_handlers::sender::SenderDeps, std::sync::Arc<Tee>) {
    let tee = std::sync::Arc::new(Tee {
        inner: local.sender.delivery_queue.clone(),
        sent: std::sync::Mutex::default(),
    });
    let deps = tern_handlers::sender::SenderDeps {
        delivery_queue: tee.clone(),
        ..(*local.sender).clone()
    };
    (deps, tee)
}

/// Production waits (time scale 1): the delays asserted are the ones SQS would be given.
fn real_time() -> LocalOptions {
    LocalOptions {
        time_scale: 1.0,
        ..options()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_claim_goes_back_within_seconds_not_the_visibility_timeout() {
    let proxy = moto_proxy().await;
    let local = deployment_through_without_pollers(&proxy, "claim-throttled", real_time()).await;
    let receiver = Receiver::start().await.unwrap();
    let tenant = "tnt_claim_thr";
    let ep = add_endpoint(&local, tenant, &receiver.url("/t"), &["*"], None).await;
    // Every try the SDK makes of one claim call is throttled.
    let tries = usize::try_from(tern_aws::budget::MAX_ATTEMPTS).unwrap();
    let rule = throttle(&proxy, CLAIM_WRITE, Some(tries));
    let (deps, tee) = teed(&local);

    let m = message(tenant, &ep, 1);
    let metrics = metrics();
    let (response, results) =
        tern_handlers::sender::handle(&deps, sqs_event(&[m.to_body()]), &metrics).await;
    assert_eq!(
        proxy.fired(rule),
        tries,
        "the whole claim call was throttled"
    );
    // Not a batch failure (which waits out the queue's 360 s visibility timeout and counts
    // towards the redrive): the message was sent again, due within seconds.
    assert!(response.batch_item_failures.is_empty(), "{results:?}");
    assert!(
        matches!(
            &results[0].1,
            Ok(MessageOutcome::PutBack { put_back: 1, delay_seconds, .. }) if *delay_seconds <= 2
        ),
        "{results:?}"
    );
    let sent = tee.sent.lock().unwrap().clone();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(
        (1..=2).contains(&sent[0].delay_seconds),
        "DelaySeconds {}",
        sent[0].delay_seconds
    );
    let copy = DeliveryMessage::parse(&sent[0].body).expect("a delivery message");
    assert_eq!((copy.attempt, copy.put_back), (1, 1));
    assert!(copy.held_lease_ms.is_some(), "it carries its claim's lease");
    assert_eq!(metrics.snapshot().put_back, 1);
    assert!(
        receiver.requests("/t").is_empty(),
        "never a POST without its claim"
    );

    // The copy comes back: claimed, POSTed once, delivered.
    let (response, results) =
        tern_handlers::sender::handle(&deps, sqs_event(&[sent[0].body.clone()]), &metrics).await;
    assert!(response.batch_item_failures.is_empty(), "{results:?}");
    assert_eq!(results[0].1, Ok(MessageOutcome::Delivered { attempt: 1 }));
    assert_eq!(receiver.requests("/t").len(), 1);
    assert!(state_item(&local, &m).await.contains_key("delivered_at"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_landed_before_its_call_failed_is_taken_over_by_the_put_back_copy() {
    let proxy = moto_proxy().await;
    let local = deployment_through_without_pollers(&proxy, "claim-landed", options()).await;
    let receiver = Receiver::start().await.unwrap();
    let tenant = "tnt_claim_landed";
    let ep = add_endpoint(&local, tenant, &receiver.url("/l"), &["*"], None).await;
    // The claim's first try is applied but its answer comes too late; the SDK's other
    // tries are throttled: the call fails, the claim stands with this processing's lease.
    let held = delay_claims(&proxy, CLAIM_WRITE, 1);
    let tries = usize::try_from(tern_aws::budget::MAX_ATTEMPTS).unwrap();
    let throttled = throttle(&proxy, CLAIM_WRITE, Some(tries - 1));
    let (deps, tee) = teed(&local);

    let m = message(tenant, &ep, 1);
    let (response, results) =
        tern_handlers::sender::handle(&deps, sqs_event(&[m.to_body()]), &metrics()).await;
    assert_eq!((proxy.fired(held), proxy.fired(throttled)), (1, tries - 1));
    assert!(response.batch_item_failures.is_empty(), "{results:?}");
    assert!(
        matches!(&results[0].1, Ok(MessageOutcome::PutBack { .. })),
        "{results:?}"
    );
    let item = state_item(&local, &m).await;
    assert_eq!(
        item.get("claim_done"),
        Some(&AttributeValue::Bool(false)),
        "the claim landed: {item:?}"
    );
    let copy = tee.sent.lock().unwrap()[0].body.clone();

    // Its lease is a minute away, yet the copy takes it over at once (not dropped as a
    // duplicate, which would lose the delivery), and sends it once.
    let (_, results) =
        tern_handlers::sender::handle(&deps, sqs_event(std::slice::from_ref(&copy)), &metrics())
            .await;
    assert_eq!(results[0].1, Ok(MessageOutcome::Delivered { attempt: 1 }));
    assert_eq!(receiver.requests("/l").len(), 1);
    // A second copy of the put-back message (SQS delivers at least once) is a duplicate.
    let (_, results) = tern_handlers::sender::handle(&deps, sqs_event(&[copy]), &metrics()).await;
    assert_eq!(
        results[0].1,
        Ok(MessageOutcome::Duplicate(Claim::AlreadyDelivered))
    );
    assert_eq!(receiver.requests("/l").len(), 1, "one POST in all");
    // The failed try has its row: put back on our failure, then taken over.
    let rows = local
        .sender
        .ledger
        .history(&m.event.tenant_id, &m.event.id)
        .await
        .unwrap();
    assert!(
        rows.iter().any(|r| r.outcome == "abandoned"
            && r.error
                .as_deref()
                .is_some_and(|e| e.contains("put the message back"))),
        "{rows:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttling_storm_longer_than_the_redrive_does_not_dead_letter_a_delivery() {
    let proxy = moto_proxy().await;
    // A short visibility timeout: before, each failed receive came back in 2 s, and the
    // redrive's 5th receive moved it to the DLQ; now each put-back is a new message.
    let storm = LocalOptions {
        visibility_timeout_seconds: Some(2),
        max_receive_count: Some(5),
        ..options()
    };
    let (local, mut reports) = deployment_through(&proxy, "claim-storm", storm).await;
    let receiver = Receiver::start().await.unwrap();
    let tenant = "tnt_storm";
    let _ep = add_endpoint(&local, tenant, &receiver.url("/s"), &["*"], None).await;
    // Seven whole claim calls throttled: more failures than maxReceiveCount (5).
    let tries = usize::try_from(tern_aws::budget::MAX_ATTEMPTS).unwrap();
    let rule = throttle(&proxy, CLAIM_WRITE, Some(tries * 7));

    let event = publish(&local, "order.paid", tenant, r#"{"storm":1}"#).await;
    let mut outcomes = Vec::new();
    let delivered = tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(report) = reports.recv().await {
            if let LocalEvent::Sent(results) = report {
                outcomes.extend(results.into_iter().map(|(_, r)| r));
                if outcomes
                    .iter()
                    .any(|o| matches!(o, Ok(MessageOutcome::Delivered { .. })))
                {
                    return;
                }
            }
        }
    })
    .await;
    let put_backs = outcomes
        .iter()
        .filter(|o| matches!(o, Ok(MessageOutcome::PutBack { .. })))
        .count();
    assert!(
        delivered.is_ok(),
        "not delivered within 120 s; dead letters: {:?}; outcomes: {outcomes:?}",
        dead_letters(&local).await
    );
    assert!(proxy.fired(rule) >= tries * 5, "{}", proxy.fired(rule));
    assert!(
        put_backs > 5,
        "put back more often than maxReceiveCount: {outcomes:?}"
    );
    assert!(
        !outcomes.iter().any(Result::is_err),
        "no batch failure: {outcomes:?}"
    );
    assert!(
        dead_letters(&local).await.is_empty(),
        "nothing dead-lettered"
    );
    let posts = receiver.requests("/s");
    assert_eq!(posts.len(), 1, "delivered once");
    assert_eq!(posts[0].header("webhook-id"), Some(event.as_str()));
}

// Issue 29, item 3: a put-back SQS does not take falls back to ChangeMessageVisibility.

/// Sends `messages` to the deployment's delivery queue (one `SendMessage` each, so a rule
/// on `SendMessageBatch` only meets the sender's put-back) and receives them as the
/// sender's event source would: the queue's 360 s visibility timeout, every attribute.
async fn received_from_the_queue(
    local: &LocalTern,
    messages: &[DeliveryMessage],
) -> (
    aws_lambda_events::sqs::SqsEvent,
    Vec<aws_sdk_sqs::types::Message>,
) {
    for m in messages {
        let entry = tern_core::ports::QueueEntry {
            id: "e".into(),
            body: m.to_body(),
            delay_seconds: 0,
            attributes: vec![],
            group_id: Some(m.event.tenant_id.as_str().to_owned()),
        };
        local
            .sender
            .delivery_queue
            .send(&entry)
            .await
            .expect("SendMessage");
    }
    let sqs = local.sqs();
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while got.len() < messages.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "only {} of {} messages received within 30 s",
            got.len(),
            messages.len()
        );
        let out = sqs
            .receive_message()
            .queue_url(&local.resources.delivery_queue_url)
            .max_number_of_messages(10)
            .visibility_timeout(360)
            .wait_time_seconds(1)
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
            .send()
            .await
            .expect("ReceiveMessage");
        got.extend(out.messages.unwrap_or_default());
    }
    let event =
        tern_local::pollers::lambda_sqs_event(&got, "arn:aws:sqs:us-east-1:123456789012:delivery")
            .expect("a Lambda SQS event");
    (event, got)
}

/// Receives from the delivery queue until `ids` have all come back or `within` is over;
/// returns when each came back, from `since`, and its receive count.
async fn came_back(
    local: &LocalTern,
    ids: &[String],
    since: std::time::Instant,
    within: Duration,
) -> HashMap<String, (Duration, u32)> {
    let sqs = local.sqs();
    let mut back = HashMap::new();
    let end = since + within;
    while back.len() < ids.len() && std::time::Instant::now() < end {
        let out = sqs
            .receive_message()
            .queue_url(&local.resources.delivery_queue_url)
            .max_number_of_messages(10)
            .visibility_timeout(360)
            .wait_time_seconds(1)
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
            .send()
            .await
            .expect("ReceiveMessage");
        for m in out.messages.unwrap_or_default() {
            let id = m.message_id().unwrap_or_default().to_owned();
            let count = m
                .attributes()
                .and_then(|a| {
                    a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount)
                })
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            back.entry(id).or_insert((since.elapsed(), count));
        }
    }
    back
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_back_sqs_refuses_comes_back_after_its_delay_not_the_visibility_timeout() {
    let proxy = moto_proxy().await;
    let local = deployment_through_without_pollers(&proxy, "putback-refused", real_time()).await;
    let receiver = Receiver::start().await.unwrap();
    let tenant = "tnt_pb_refused";
    let ep = add_endpoint(&local, tenant, &receiver.url("/r"), &["*"], None).await;
    let messages = [message(tenant, &ep, 1), message(tenant, &ep, 2)];
    let (event, received) = received_from_the_queue(&local, &messages).await;
    let ids: Vec<String> = received
        .iter()
        .map(|m| m.message_id().unwrap_or_default().to_owned())
        .collect();
    // Both claims fail whole (every try throttled), and so does the put-back's whole
    // SendMessageBatch call.
    let tries = usize::try_from(tern_aws::budget::MAX_ATTEMPTS).unwrap();
    let claims = throttle(&proxy, CLAIM_WRITE, Some(tries * 2));
    let put_back =
        proxy.add(Rule::on(Service::Sqs, "SendMessageBatch", Fault::Throttle).first(tries));

    let metrics = metrics();
    let handled = std::time::Instant::now();
    let (response, results) = tern_handlers::sender::handle(&local.sender, event, &metrics).await;
    let answered = handled.elapsed();
    assert_eq!(
        (proxy.fired(claims), proxy.fired(put_back)),
        (tries * 2, tries)
    );
    // Batch failures (Lambda leaves them on the queue), each hidden for its put-back's
    // short delay: the first put-back's, 1 s.
    let mut failed: Vec<String> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect();
    failed.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(failed, expected, "{results:?}");
    for (_, r) in &results {
        assert!(
            matches!(r, Err(e) if e.contains("visible again in 1 s")),
            "{results:?}"
        );
    }
    let counts = metrics.snapshot();
    assert_eq!(
        (
            counts.put_back,
            counts.put_back_by_visibility,
            counts.put_back_failed
        ),
        (0, 2, 0),
        "{counts:?}"
    );

    // They come back in seconds (before: after the queue's 360 s visibility timeout).
    let back = came_back(&local, &ids, handled, Duration::from_secs(30)).await;
    eprintln!(
        "put-back refused: the batch answered after {answered:?} (throttled claims and put-back, \
         the SDK's tries and backoff); the originals came back {back:?} (after the batch \
         started, receive count)"
    );
    assert_eq!(back.len(), 2, "both back within 30 s: {back:?}");
    for (after, count) in back.values() {
        assert_eq!(*count, 2, "the same message, received again");
        assert!(
            *after >= Duration::from_secs(1),
            "not before its delay: {after:?}"
        );
    }
    assert!(
        receiver.requests("/r").is_empty(),
        "never a POST without its claim"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_back_whose_visibility_change_fails_too_is_left_to_the_visibility_timeout_and_counted()
 {
    let proxy = moto_proxy().await;
    let local = deployment_through_without_pollers(&proxy, "putback-left", real_time()).await;
    let receiver = Receiver::start().await.unwrap();
    let tenant = "tnt_pb_left";
    let ep = add_endpoint(&local, tenant, &receiver.url("/l"), &["*"], None).await;
    let m = message(tenant, &ep, 1);
    let (event, received) = received_from_the_queue(&local, std::slice::from_ref(&m)).await;
    let tries = usize::try_from(tern_aws::budget::MAX_ATTEMPTS).unwrap();
    let claims = throttle(&proxy, CLAIM_WRITE, Some(tries));
    let put_back =
        proxy.add(Rule::on(Service::Sqs, "SendMessageBatch", Fault::Throttle).first(tries));
    let hide = proxy
        .add(Rule::on(Service::Sqs, "ChangeMessageVisibility", Fault::ServerError).first(tries));

    let metrics = metrics();
    let (response, results) = tern_handlers::sender::handle(&local.sender, event, &metrics).await;
    assert_eq!(
        (
            proxy.fired(claims),
            proxy.fired(put_back),
            proxy.fired(hide)
        ),
        (tries, tries, tries)
    );
    assert_eq!(response.batch_item_failures.len(), 1, "{results:?}");
    assert_eq!(
        response.batch_item_failures[0].item_identifier,
        received[0].message_id().unwrap_or_default()
    );
    let counts = metrics.snapshot();
    assert_eq!(
        (
            counts.put_back,
            counts.put_back_by_visibility,
            counts.put_back_failed,
            counts.batch_failures
        ),
        (0, 0, 1, 1),
        "{counts:?}"
    );
    // Still in flight: it waits out the visibility timeout.
    let attrs = local
        .sqs()
        .get_queue_attributes()
        .queue_url(&local.resources.delivery_queue_url)
        .attribute_names(
            aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
        )
        .send()
        .await
        .expect("GetQueueAttributes");
    assert_eq!(
        attrs
            .attributes()
            .and_then(|a| a.get(
                &aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible
            ))
            .map(String::as_str),
        Some("1")
    );
}
