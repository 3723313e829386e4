//! Adversarial tests, written while attacking Tern before it shipped. The `a*` tests each
//! reproduced a bug that is now fixed (unsigned POST with no active secret, a rotation
//! undoing a disable, unmatchable event types, overflowing overlaps and counters, a
//! missing endpoint reported as an outage, a message parked forever); the `ok_*` tests are
//! checks that held. Everything stays on 127.0.0.1; names resolve through `no_dns()`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use tern_core::ports::{EndpointStore, PortError};
use tern_core::{
    DeadLetter, DeadLetterReason, DeliveryMessage, Endpoint, EndpointId, RetrySchedule, Secret,
    TenantId,
};
use tern_handlers::config::SenderPolicy;
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::replay::{ReplayDeps, ReplayRequest};
use tern_handlers::sender::{MessageOutcome, SenderDeps};
use tern_http::{ClientOptions, DeliveryClient, DestinationPolicy};
use tern_local::LocalOptions;
use tern_local::ops::{self, NewEndpoint};
use tern_tests::fakes::{MemEndpoints, MemLedger, MemQueue};
use tern_tests::*;

fn fast() -> LocalOptions {
    LocalOptions {
        time_scale: 0.001,
        lookup: Some(no_dns()),
        ..LocalOptions::default()
    }
}

fn metrics() -> Metrics {
    Metrics::new("Tern", MetricsSink::Discard)
}

fn loopback_policy() -> DestinationPolicy {
    DestinationPolicy {
        https_only: false,
        allow: vec!["127.0.0.1/32".parse().unwrap()],
        nat64: false,
    }
}

fn new_endpoint(tenant: &str, url: &str, types: &[&str]) -> NewEndpoint {
    NewEndpoint {
        tenant: tenant.into(),
        url: url.into(),
        event_types: types.iter().map(|s| (*s).to_owned()).collect(),
        max_attempts: None,
        timeout_ms: None,
        schedule: None,
        description: None,
        payload_format: tern_core::PayloadFormat::Raw,
        max_per_second: None,
        secret: None,
        headers: Vec::new(),
        auth: tern_core::receiver_auth::ReceiverAuth::None,
        signatures: tern_core::Signatures::V1,
        client_certificate: None,
        send_traceparent: false,
    }
}

fn sample_event(tenant: &str) -> tern_core::Event {
    tern_outbox::OutboxWriter::new("unused")
        .prepare("order.paid", tenant, r#"{"a":1}"#)
        .unwrap()
        .event
}

/// Sender deps over in-memory fakes (no AWS), with a loopback-only client.
fn fake_sender(
    endpoints: Arc<MemEndpoints>,
    delivery: Arc<MemQueue>,
    dlq: Arc<MemQueue>,
) -> SenderDeps {
    SenderDeps {
        endpoints,
        ledger: Arc::new(MemLedger::default()),
        delivery_queue: delivery,
        dlq,
        scheduler: None,
        client: DeliveryClient::new(ClientOptions {
            policy: loopback_policy(),
            lookup: no_dns(),
            excerpt_bytes: 1024,
        })
        .unwrap(),
        policy: SenderPolicy::default(),
        breaker: None,
    }
}

// ---------------------------------------------------------------------------------------
// A1. `tern endpoints add --types "order.paid, order.shipped"` (a space after the comma,
// as people type lists) stores an endpoint subscribed to " order.shipped", a type no
// event can ever have: the endpoint silently never receives those events. Bad input
// should get a clear, typed error.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a1_endpoint_event_types_that_can_never_match_are_refused() {
    let store = MemEndpoints::default();
    for types in [
        &["order.paid", " order.shipped"][..],
        &[""][..],
        &["order paid"][..],
        &["order.*"][..],
    ] {
        let result = ops::add_endpoint(
            &store,
            new_endpoint("tnt_types", "http://127.0.0.1:9/hook", types),
            &loopback_policy(),
            no_dns().as_ref(),
        )
        .await;
        if let Ok(ep) = &result {
            let shipped = tern_core::Event {
                event_type: tern_core::EventType::new("order.shipped").unwrap(),
                ..sample_event("tnt_types")
            };
            eprintln!(
                "types {types:?} accepted; subscribes to order.shipped: {}",
                ep.subscribes(&shipped)
            );
        }
        assert!(
            result.is_err(),
            "event types {types:?} were accepted although no event type can ever match them"
        );
    }
}

// ---------------------------------------------------------------------------------------
// A2. A schedule entry that is not a number is reported as "is 0 s": the typed error
// carries a value the operator never wrote.
// ---------------------------------------------------------------------------------------

#[test]
fn a2_schedule_errors_name_the_entry_actually_written() {
    for text in ["60,x", "60,-5", "60,1.5", "60,99999999999999999999999"] {
        let err = RetrySchedule::parse(text).unwrap_err();
        let shown = err.to_string();
        assert!(
            !shown.contains(" is 0 s"),
            "{text:?} is reported as {shown:?} ({err:?}): the entry is not 0"
        );
    }
}

// ---------------------------------------------------------------------------------------
// A3. `tern endpoints rotate-secret --overlap-hours N` takes any i64. A large value
// panics inside chrono (the CLI crashes instead of answering); a negative one is
// accepted, expires the old secret at once and the CLI says "the previous secret keeps
// signing for -24 h".
// ---------------------------------------------------------------------------------------

async fn endpoint_in(store: &Arc<MemEndpoints>) -> Endpoint {
    ops::add_endpoint(
        store.as_ref(),
        new_endpoint("tnt_rot", "http://127.0.0.1:9/hook", &["*"]),
        &loopback_policy(),
        no_dns().as_ref(),
    )
    .await
    .expect("endpoint")
}

#[tokio::test]
async fn a3_rotate_secret_with_an_absurd_overlap_is_a_clear_error_not_a_panic() {
    let mut problems = Vec::new();
    // 1e9 h (~114,000 years: the old secret never stops signing), 1e10 h (past chrono's
    // last date), i64::MAX (out of TimeDelta's range).
    for hours in [1_000_000_000_i64, 10_000_000_000, i64::MAX] {
        let store = Arc::new(MemEndpoints::default());
        let ep = endpoint_in(&store).await;
        let s = store.clone();
        let joined = tokio::spawn(async move {
            ops::rotate_secret(s.as_ref(), &ep.tenant_id, &ep.id, hours)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .await;
        match joined {
            Err(panic) => problems.push(format!("--overlap-hours {hours} panicked: {panic:?}")),
            Ok(Ok(())) => problems.push(format!("--overlap-hours {hours} accepted")),
            Ok(Err(_)) => {}
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[tokio::test]
async fn a3b_rotate_secret_with_a_negative_overlap_is_refused() {
    let store = Arc::new(MemEndpoints::default());
    let ep = endpoint_in(&store).await;
    let result = ops::rotate_secret(store.as_ref(), &ep.tenant_id, &ep.id, -24).await;
    let after = store.get(&ep.tenant_id, &ep.id).await.unwrap().unwrap();
    let old_still_signs = after
        .active_secrets(Utc::now())
        .iter()
        .any(|s| **s == ep.secrets[0].secret);
    assert!(
        result.is_err(),
        "--overlap-hours -24 accepted (old secret still signs: {old_still_signs})"
    );
}

// ---------------------------------------------------------------------------------------
// A4. An endpoint whose secrets have all expired (`Endpoint::validate` only checks that
// the list is not empty) is POSTed to with an EMPTY `webhook-signature` and
// `x-webhook-signature`: an unsigned webhook. A receiver that does not verify marks it
// delivered. Expected: no unsigned request, a clear dead-letter outcome instead.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a4_an_endpoint_without_an_active_secret_is_never_sent_an_unsigned_request() {
    let (local, _rx) = deployment("a4", fast()).await;
    let receiver = Receiver::start().await.unwrap();
    let now = Utc::now();
    let mut endpoint = Endpoint::new(
        EndpointId::generate(),
        TenantId::new("tnt_nosig").unwrap(),
        receiver.url("/nosig"),
        vec!["*".into()],
        Secret::generate(),
        now - chrono::Duration::days(2),
    );
    // Its only secret expired an hour ago (written directly, as other code could).
    endpoint.secrets[0].expires_at = Some(now - chrono::Duration::hours(1));
    endpoint.max_attempts = Some(1);
    let valid = endpoint.validate();
    local.sender.endpoints.put(&endpoint).await.unwrap();
    publish(&local, "order.paid", "tnt_nosig", r#"{"unsigned":true}"#).await;

    let settled = eventually(Duration::from_secs(30), async || {
        !receiver.requests("/nosig").is_empty() || !dead_letters(&local).await.is_empty()
    })
    .await;
    assert!(settled, "nothing happened to the event");
    tokio::time::sleep(Duration::from_millis(500)).await;

    let unsigned: Vec<(Option<String>, Option<String>, u16)> = receiver
        .requests("/nosig")
        .iter()
        .map(|r| {
            (
                r.header("webhook-signature").map(str::to_owned),
                r.header("x-webhook-signature").map(str::to_owned),
                r.answered,
            )
        })
        .filter(|(sig, _, _)| sig.as_deref().is_none_or(|s| !s.starts_with("v1,")))
        .collect();
    assert!(
        unsigned.is_empty(),
        "unsigned request(s) reached the receiver (validate() said {valid:?}); \
         (webhook-signature, x-webhook-signature, status answered): {unsigned:?}"
    );
    assert_eq!(
        dead_letters(&local).await.len(),
        1,
        "a clear dead-letter outcome"
    );
}

// ---------------------------------------------------------------------------------------
// A5. replay_count is a plain `+ 1` (message.rs `replayed`). A DLQ message with
// replay_count = u32::MAX panics the replay function (debug) -- one poison message aborts
// the whole run -- and in a release build wraps to 0, whose attempt key is then below the
// ledger's claim: the sender drops it as a duplicate and the delivery vanishes.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a5_a_dlq_message_at_the_replay_count_limit_does_not_crash_the_replay_run() {
    let local = deployment_without_pollers("a5", fast()).await;
    let receiver = Receiver::start().await.unwrap();
    let ep = add_endpoint(&local, "tnt_rc", &receiver.url("/rc"), &["*"], None).await;
    let mut message = DeliveryMessage::first(sample_event("tnt_rc"), ep.id.clone());
    message.replay_count = u32::MAX;
    let dead = message.dead_lettered(DeadLetter {
        reason: DeadLetterReason::Exhausted,
        last_status: Some(500),
        last_error: None,
        attempts: 7,
        at: Utc::now(),
    });
    let body = dead.to_body();
    // Out of range: the parser refuses it, so the replay leaves it (unreadable) and goes on.
    assert!(matches!(
        DeliveryMessage::parse(&body),
        Err(tern_core::message::MessageError::OutOfRange { .. })
    ));
    // A second, ordinary dead letter behind it, which the run should also replay.
    let other =
        DeliveryMessage::first(sample_event("tnt_rc"), ep.id.clone()).dead_lettered(DeadLetter {
            reason: DeadLetterReason::Exhausted,
            last_status: Some(500),
            last_error: None,
            attempts: 7,
            at: Utc::now(),
        });
    let sqs = local.sqs();
    for b in [body, other.to_body()] {
        sqs.send_message()
            .queue_url(&local.resources.dlq_url)
            .message_body(b)
            .send()
            .await
            .unwrap();
    }
    let deps = ReplayDeps {
        dlq: local.replay.dlq.clone(),
        delivery_queue: local.replay.delivery_queue.clone(),
        ledger: local.replay.ledger.clone(),
    };
    let joined = tokio::spawn(async move {
        tern_handlers::replay::handle(&deps, ReplayRequest::default(), &metrics()).await
    })
    .await;
    let summary = match joined {
        Err(panic) => panic!("the replay run panicked on a replay_count of u32::MAX: {panic:?}"),
        Ok(r) => r.expect("replay"),
    };
    assert_eq!(
        (summary.replayed, summary.unreadable),
        (1, 1),
        "{summary:?}"
    );
}

#[test]
fn a5b_attempt_keys_of_different_budgets_never_collide() {
    // `attempt_key = replay_count * 1_000_000 + attempt`, with `attempt` unbounded by
    // `DeliveryMessage::parse`: attempt 1_000_001 of budget 0 claims the same key as
    // attempt 1 of budget 1, so the two are indistinguishable to the no-double-POST claim.
    let mut a = DeliveryMessage::first(sample_event("tnt_k"), EndpointId::new("ep_k").unwrap());
    a.attempt = 1_000_001;
    let b =
        DeliveryMessage::first(sample_event("tnt_k"), EndpointId::new("ep_k").unwrap()).replayed();
    let parsed = DeliveryMessage::parse(&a.to_body());
    assert!(
        parsed.is_err() || a.attempt_key() != b.attempt_key(),
        "replay 0 attempt {} and replay {} attempt {} share key {}",
        a.attempt,
        b.replay_count,
        b.attempt,
        a.attempt_key()
    );
}

// ---------------------------------------------------------------------------------------
// A6. `tern endpoints disable` on an endpoint that does not exist answers
// "service unavailable: ConditionalCheckFailedException ...": the missing endpoint is
// reported as a transient AWS outage (PortError::Unavailable), not as bad input.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a6_disabling_a_missing_endpoint_is_a_clear_not_found_error() {
    let local = deployment_without_pollers("a6", fast()).await;
    let err = local
        .sender
        .endpoints
        .disable(
            &TenantId::new("tnt_none").unwrap(),
            &EndpointId::new("ep_missing").unwrap(),
            "disabled by an operator",
        )
        .await
        .expect_err("there is no such endpoint");
    assert!(
        !matches!(err, PortError::Unavailable(_)),
        "a missing endpoint is reported as an outage: {err}"
    );
}

// ---------------------------------------------------------------------------------------
// A7. rotate-secret is read-modify-write of the whole endpoint item (get, then an
// unconditional put). A 410 that disables the endpoint between the two (the sender's
// `disable`) is silently undone: the rotation re-enables an endpoint the receiver asked
// to stop, and the disabled reason is lost.
// ---------------------------------------------------------------------------------------

struct DisableDuringRead {
    inner: Arc<dyn EndpointStore>,
    fired: AtomicBool,
}

#[async_trait]
impl EndpointStore for DisableDuringRead {
    async fn get(&self, tenant: &TenantId, id: &EndpointId) -> Result<Option<Endpoint>, PortError> {
        let read = self.inner.get(tenant, id).await;
        if !self.fired.swap(true, Ordering::SeqCst) {
            // The sender's 410 handling lands right after the operator's read.
            self.inner
                .disable(tenant, id, "gone: receiver answered 410 Gone")
                .await?;
        }
        read
    }
    async fn list_for_tenant(&self, tenant: &TenantId) -> Result<Vec<Endpoint>, PortError> {
        self.inner.list_for_tenant(tenant).await
    }
    async fn list_all(&self) -> Result<Vec<Endpoint>, PortError> {
        self.inner.list_all().await
    }
    async fn put(&self, endpoint: &Endpoint) -> Result<(), PortError> {
        self.inner.put(endpoint).await
    }
    async fn disable(&self, t: &TenantId, id: &EndpointId, r: &str) -> Result<(), PortError> {
        self.inner.disable(t, id, r).await
    }
    async fn set_secrets(
        &self,
        t: &TenantId,
        id: &EndpointId,
        secrets: &[tern_core::endpoint::EndpointSecret],
    ) -> Result<(), PortError> {
        self.inner.set_secrets(t, id, secrets).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a7_rotating_a_secret_does_not_undo_a_concurrent_disable() {
    let local = deployment_without_pollers("a7", fast()).await;
    let ep = add_endpoint(&local, "tnt_race", "http://127.0.0.1:9/hook", &["*"], None).await;
    let store = DisableDuringRead {
        inner: local.sender.endpoints.clone(),
        fired: AtomicBool::new(false),
    };
    ops::rotate_secret(&store, &ep.tenant_id, &ep.id, 24)
        .await
        .expect("rotation");
    let after = local
        .sender
        .endpoints
        .get(&ep.tenant_id, &ep.id)
        .await
        .unwrap()
        .unwrap();
    assert!(
        !after.enabled,
        "the rotation re-enabled an endpoint disabled by a 410 (disabled_reason now {:?})",
        after.disabled_reason
    );
}

// ---------------------------------------------------------------------------------------
// A8. A queued delivery whose `not_before` is absurdly far away (a corrupt or hand-made
// message: no legitimate wait exceeds ~7.7 days) is put back on the queue every 900 s
// forever. It is never delivered, never dead-lettered, and -- because each hop is a new
// message -- never visible to the "oldest message > 30 min" alarm.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a8_a_not_before_beyond_any_possible_wait_ends_in_the_dlq() {
    let endpoints = Arc::new(MemEndpoints::default());
    let delivery = Arc::new(MemQueue::default());
    let dlq = Arc::new(MemQueue::default());
    let deps = fake_sender(endpoints.clone(), delivery.clone(), dlq.clone());
    let mut message =
        DeliveryMessage::first(sample_event("tnt_nb"), EndpointId::new("ep_nb").unwrap());
    message.not_before = Some(Utc::now() + chrono::Duration::days(365 * 100));
    let (_, results) =
        tern_handlers::sender::handle(&deps, sqs_event(&[message.to_body()]), &metrics()).await;
    let outcome = results[0].1.clone();
    assert!(
        !matches!(outcome, Ok(MessageOutcome::Waiting { .. })),
        "a message not due for 100 years is parked on the queue indefinitely: {outcome:?}; \
         delivery-queue sends: {:?}",
        delivery
            .entries()
            .iter()
            .map(|e| e.delay_seconds)
            .collect::<Vec<_>>()
    );
}

// ---------------------------------------------------------------------------------------
// Checks that passed (kept as regression tests).
// ---------------------------------------------------------------------------------------

/// A message naming another tenant's endpoint is dead-lettered as endpoint_deleted and
/// never POSTed; attempt = u32::MAX is refused as malformed (no overflow, no POST).
#[tokio::test]
async fn ok_cross_tenant_endpoint_and_extreme_attempt_numbers() {
    let receiver = Receiver::start().await.unwrap();
    let endpoints = Arc::new(MemEndpoints::default());
    let delivery = Arc::new(MemQueue::default());
    let dlq = Arc::new(MemQueue::default());
    let deps = fake_sender(endpoints.clone(), delivery.clone(), dlq.clone());
    let ep = Endpoint::new(
        EndpointId::new("ep_other").unwrap(),
        TenantId::new("tnt_owner").unwrap(),
        receiver.url("/x"),
        vec!["*".into()],
        Secret::generate(),
        Utc::now(),
    );
    endpoints.put(&ep).await.unwrap();
    receiver.set("/x", Behavior::Always(Reply::status(500)));

    let foreign = DeliveryMessage::first(sample_event("tnt_intruder"), ep.id.clone());
    let mut huge = DeliveryMessage::first(sample_event("tnt_owner"), ep.id.clone());
    huge.attempt = u32::MAX;
    huge.first_attempt_at = Some(Utc::now() + chrono::Duration::days(3650));
    let (resp, results) = tern_handlers::sender::handle(
        &deps,
        sqs_event(&[foreign.to_body(), huge.to_body()]),
        &metrics(),
    )
    .await;
    assert!(resp.batch_item_failures.is_empty(), "{results:?}");
    assert_eq!(
        results[0].1,
        Ok(MessageOutcome::DeadLettered {
            reason: DeadLetterReason::EndpointDeleted,
            attempts: 0
        })
    );
    // An attempt number beyond any schedule is not a message Tern wrote: dead-lettered
    // as malformed, never POSTed.
    assert!(matches!(
        results[1].1,
        Ok(MessageOutcome::DeadLettered {
            reason: DeadLetterReason::MalformedMessage,
            ..
        })
    ));
    assert!(
        receiver.requests("/x").is_empty(),
        "neither message was POSTed"
    );
    assert!(delivery.entries().is_empty(), "nothing re-queued");
    assert_eq!(dlq.entries().len(), 2);
    for e in dlq.entries() {
        assert!(e.delay_seconds <= 900);
    }
}

/// 40 events over two tenants, 12 + 3 endpoints (fan-out over 10 per event, several
/// events whose fan-out is over the 1 MiB batch size): every (event, subscribed
/// endpoint) pair is POSTed exactly once, nothing is dead-lettered or parked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ok_many_events_to_many_endpoints_are_each_delivered_exactly_once() {
    let (local, _rx) = deployment("fanout", fast()).await;
    let receiver = Receiver::start().await.unwrap();
    let mut a_paths = Vec::new();
    for i in 0..12 {
        let path = format!("/a{i}");
        add_endpoint(&local, "tnt_big", &receiver.url(&path), &["*"], None).await;
        a_paths.push(path);
    }
    // Tenant B: one endpoint per type, plus one for everything.
    add_endpoint(
        &local,
        "tnt_small",
        &receiver.url("/b_paid"),
        &["order.paid"],
        None,
    )
    .await;
    add_endpoint(
        &local,
        "tnt_small",
        &receiver.url("/b_ship"),
        &["order.shipped"],
        None,
    )
    .await;
    add_endpoint(&local, "tnt_small", &receiver.url("/b_all"), &["*"], None).await;

    let big = format!(r#"{{"blob":"{}"}}"#, "é".repeat(45_000)); // 90 KB, multi-byte
    let mut a_events = Vec::new();
    let mut b_events = Vec::new();
    for i in 0..30 {
        let payload = if i % 6 == 0 {
            big.clone()
        } else {
            format!(r#"{{"i":{i}}}"#)
        };
        a_events.push(publish(&local, "order.paid", "tnt_big", &payload).await);
    }
    for i in 0..10 {
        let ty = if i % 2 == 0 {
            "order.paid"
        } else {
            "order.shipped"
        };
        b_events.push((
            publish(&local, ty, "tnt_small", &format!(r#"{{"j":{i}}}"#)).await,
            ty,
        ));
    }
    let expected = 30 * 12 + 10 * 2;
    let done = eventually(Duration::from_secs(240), async || {
        receiver.all_requests().len() >= expected
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let all = receiver.all_requests();
    assert!(done, "only {} of {expected} requests arrived", all.len());
    let mut per_pair: HashMap<(String, String), usize> = HashMap::new();
    for r in &all {
        *per_pair
            .entry((
                r.path.clone(),
                r.header("webhook-id").unwrap_or("").to_owned(),
            ))
            .or_default() += 1;
    }
    let doubles: Vec<_> = per_pair.iter().filter(|(_, n)| **n > 1).collect();
    assert!(doubles.is_empty(), "double POSTs: {doubles:?}");
    for p in &a_paths {
        let got: HashSet<String> = per_pair
            .keys()
            .filter(|(path, _)| path == p)
            .map(|(_, id)| id.clone())
            .collect();
        let want: HashSet<String> = a_events.iter().map(|e| e.to_string()).collect();
        assert_eq!(got, want, "endpoint {p}");
    }
    for (id, ty) in &b_events {
        let paths: HashSet<&str> = all
            .iter()
            .filter(|r| r.header("webhook-id") == Some(id.as_str()))
            .map(|r| r.path.as_str())
            .collect();
        let want: HashSet<&str> = if *ty == "order.paid" {
            ["/b_paid", "/b_all"].into()
        } else {
            ["/b_ship", "/b_all"].into()
        };
        assert_eq!(paths, want, "event {id} ({ty})");
    }
    assert!(all.iter().all(|r| r.answered == 200));
    assert!(dead_letters(&local).await.is_empty());
    assert!(
        peek_queue(&local, &local.resources.relay_failure_queue_url.clone())
            .await
            .is_empty()
    );
}

// ---------------------------------------------------------------------------------------
// A9. An endpoint item whose `secrets` were written by hand as plain strings (a common
// shape for a migrated or CLI-edited item): the parse error is logged. Does the log line
// carry the secret?
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ok_a9_an_unreadable_endpoint_item_never_puts_its_secret_in_the_logs() {
    use aws_sdk_dynamodb::types::AttributeValue as Av;
    let logs = capture_logs();
    let local = deployment_without_pollers("a9", fast()).await;
    let secret = Secret::generate();
    local
        .dynamodb()
        .put_item()
        .table_name(&local.resources.endpoints_table)
        .item("tenant_id", Av::S("tnt_handmade".into()))
        .item("endpoint_id", Av::S("ep_handmade".into()))
        .item("id", Av::S("ep_handmade".into()))
        .item("url", Av::S("http://127.0.0.1:9/hook".into()))
        .item("event_types", Av::L(vec![Av::S("*".into())]))
        .item("secrets", Av::L(vec![Av::S(secret.expose().to_owned())]))
        .item("enabled", Av::Bool(true))
        .item("created_at", Av::S(Utc::now().to_rfc3339()))
        .send()
        .await
        .unwrap();
    let tenant = TenantId::new("tnt_handmade").unwrap();
    let listed = local.relay.endpoints.list_for_tenant(&tenant).await;
    let got = local
        .sender
        .endpoints
        .get(&tenant, &EndpointId::new("ep_handmade").unwrap())
        .await;
    // What the sender logs for such an item: the message fails with the store's error.
    let message = DeliveryMessage::first(
        sample_event("tnt_handmade"),
        EndpointId::new("ep_handmade").unwrap(),
    );
    let (_, results) =
        tern_handlers::sender::handle(&local.sender, sqs_event(&[message.to_body()]), &metrics())
            .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let text = logs.text();
    let key = &secret.expose()["whsec_".len()..];
    let leaking: Vec<String> = text
        .lines()
        .filter(|l| l.contains(key))
        .map(|l| l.replace(key, "<SECRET>").chars().take(300).collect())
        .collect();
    // The message fails on our side: put back with a short delay (issue 29 item 3), or a
    // batch failure when that is refused.
    let failed = match &results[0].1 {
        Err(_) => true,
        Ok(outcome) => matches!(outcome, MessageOutcome::PutBack { .. }),
    };
    assert!(got.is_err() && failed, "{got:?} {results:?}");
    assert!(
        text.contains("does not parse"),
        "the parse error was logged"
    );
    let in_errors = format!("{got:?} {results:?}").contains(key);
    assert!(
        leaking.is_empty() && !in_errors,
        "secret in logs ({} lines) / in returned errors ({in_errors}); list: {:?}\n{}",
        leaking.len(),
        listed.map(|l| l.len()),
        leaking.join("\n")
    );
}

/// An endpoint disabled while its retry is queued: the retry dead-letters as
/// endpoint_disabled (no POST); a malformed DLQ entry sits beside it. Dry runs count the
/// same twice, max_messages 0 touches nothing, a filtered replay after re-enabling
/// delivers exactly once and leaves the malformed entry in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ok_disabled_while_queued_then_filtered_replays() {
    use tern_handlers::replay::ReplayFilters;
    let (local, _rx) = deployment("disq", fast()).await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set(
        "/d",
        Behavior::FailFirst {
            count: 1,
            status: 500,
        },
    );
    // One retry of 300 s: 0.3 s real at this scale, enough to disable in between.
    let ep = add_endpoint_with(
        &local,
        EndpointId::generate(),
        "tnt_dis",
        &receiver.url("/d"),
        &["*"],
        None,
        Some(RetrySchedule::new(vec![600]).unwrap()),
    )
    .await;
    let id = publish(&local, "order.paid", "tnt_dis", r#"{"x":1}"#).await;
    receiver.wait_for("/d", 1, Duration::from_secs(20)).await;
    local
        .sender
        .endpoints
        .disable(&ep.tenant_id, &ep.id, "operator")
        .await
        .unwrap();
    let dead = eventually(Duration::from_secs(20), async || {
        dead_letters(&local).await.len() == 1
    })
    .await;
    assert!(dead, "the queued retry dead-lettered");
    let dl = dead_letters(&local).await.remove(0);
    assert_eq!(
        dl.dead_letter.as_ref().unwrap().reason,
        DeadLetterReason::EndpointDisabled
    );
    assert_eq!(
        receiver.requests("/d").len(),
        1,
        "no POST to a disabled endpoint"
    );
    local
        .sqs()
        .send_message()
        .queue_url(&local.resources.dlq_url)
        .message_body("{\"not\":\"a delivery\"}")
        .send()
        .await
        .unwrap();

    let dry = ReplayRequest {
        dry_run: true,
        ..ReplayRequest::default()
    };
    let a = tern_handlers::replay::handle(&local.replay, dry.clone(), &metrics())
        .await
        .unwrap();
    let b = tern_handlers::replay::handle(&local.replay, dry, &metrics())
        .await
        .unwrap();
    assert_eq!(a, b, "dry runs are stable");
    assert_eq!((a.examined, a.matched, a.unreadable), (2, 1, 1));
    let zero = ReplayRequest {
        max_messages: Some(0),
        ..ReplayRequest::default()
    };
    let z = tern_handlers::replay::handle(&local.replay, zero, &metrics())
        .await
        .unwrap();
    assert_eq!((z.examined, z.replayed), (0, 0));

    let mut enabled = ep.clone();
    enabled.enabled = true;
    local.sender.endpoints.put(&enabled).await.unwrap();
    let r = ReplayRequest {
        filters: ReplayFilters {
            reason: Some(DeadLetterReason::EndpointDisabled),
            ..ReplayFilters::default()
        },
        ..ReplayRequest::default()
    };
    let s = tern_handlers::replay::handle(&local.replay, r, &metrics())
        .await
        .unwrap();
    assert_eq!((s.replayed, s.unreadable), (1, 1), "{s:?}");
    let got = receiver.wait_for("/d", 2, Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(receiver.requests("/d").len(), 2);
    assert_eq!(got[1].answered, 200);
    assert_eq!(got[1].header("webhook-id"), Some(id.as_str()));
    assert_eq!(
        peek_queue(&local, &local.resources.dlq_url.clone())
            .await
            .len(),
        1,
        "malformed entry stays"
    );
}

/// Informational answers: `100 Continue` / `102 Processing` before a 200 is delivered;
/// a bare `101 Switching Protocols` (never asked for) is not delivered; a 200 with a
/// huge `Retry-After` is delivered.
#[tokio::test]
async fn ok_informational_and_odd_answers() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    async fn serve(answer: &'static str) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        let n = s.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..p]).to_ascii_lowercase();
                            let len: usize = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .and_then(|v| v.trim().parse().ok())
                                .unwrap_or(0);
                            if buf.len() >= p + 4 + len {
                                break;
                            }
                        }
                    }
                    let _ = s.write_all(answer.as_bytes()).await;
                    let _ = s.shutdown().await;
                });
            }
        });
        port
    }
    let cases = [
        (
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
            true,
        ),
        (
            "HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: x\r\n\r\n",
            false,
        ),
        (
            "HTTP/1.1 200 OK\r\nretry-after: 99999999\r\ncontent-length: 0\r\n\r\n",
            true,
        ),
    ];
    for (answer, delivered) in cases {
        let port = serve(answer).await;
        let endpoints = Arc::new(MemEndpoints::default());
        let mut ep = Endpoint::new(
            EndpointId::generate(),
            TenantId::new("tnt_1xx").unwrap(),
            format!("http://127.0.0.1:{port}/h"),
            vec!["*".into()],
            Secret::generate(),
            Utc::now(),
        );
        ep.timeout_ms = Some(3000);
        ep.validate().unwrap();
        endpoints.put(&ep).await.unwrap();
        ep.enabled = true;
        let delivery = Arc::new(MemQueue::default());
        let dlq = Arc::new(MemQueue::default());
        let deps = fake_sender(endpoints, delivery.clone(), dlq);
        let m = DeliveryMessage::first(sample_event("tnt_1xx"), ep.id.clone());
        let (_, results) =
            tern_handlers::sender::handle(&deps, sqs_event(&[m.to_body()]), &metrics()).await;
        let outcome = results[0].1.clone().unwrap();
        assert_eq!(
            matches!(outcome, MessageOutcome::Delivered { .. }),
            delivered,
            "{answer:?} -> {outcome:?}"
        );
        if !delivered {
            assert!(
                matches!(outcome, MessageOutcome::Retrying { wait_seconds, .. } if wait_seconds >= 60)
            );
            assert!(delivery.entries().iter().all(|e| e.delay_seconds <= 900));
        }
    }
}
