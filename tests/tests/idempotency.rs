//! Issue 28: `Idempotency-Key` on every POST of the API, with Stripe's semantics. Before
//! it, only `createEndpoint` honoured the key: a retried rotation rotated again, a
//! retried test send or resend POSTed again, a retried portal session minted another link.
//!
//! On moto through local mode, as a client calls the API (SigV4), with receivers on
//! 127.0.0.1 and every AWS call going through the fault proxy (to count them, and to fail
//! one on purpose). For a representative set of routes: a retry with the same key runs
//! nothing (the effect counted: rotations, POSTs at the receiver, messages put on the
//! delivery queue, portal links) and answers byte for byte what the first answered, with
//! `Idempotent-Replayed: true`; the key with another request is a 422; concurrent requests
//! run once; a 5xx runs again; another tenant's key is its own; a record past its 24 h
//! (written so through the store, not waited for) or abandoned past its lease runs anew;
//! a kept answer that holds a secret is sealed in the table.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Value, json};
use tern_aws::DynamoIdempotencyStore;
use tern_core::TenantId;
use tern_core::idempotency::{
    Claim, IdempotencyStore, LEASE_SECONDS, RECORD_TTL_SECONDS, RecordKey, StoredAnswer,
    fingerprint,
};
use tern_local::LocalOptions;
use tern_local::local::LocalTern;
use tern_tests::api::{Answer, ApiClient};
use tern_tests::fault_proxy::{Fault, FaultProxy, Rule, Service};
use tern_tests::*;

const WAIT: Duration = Duration::from_secs(30);

fn options() -> LocalOptions {
    LocalOptions {
        time_scale: 0.001,
        lookup: Some(no_dns()),
        console_port: None,
        ..LocalOptions::default()
    }
}

/// A deployment whose every AWS call goes through `proxy`, with pollers and the API.
async fn deployment(proxy: &FaultProxy, test: &str) -> (LocalTern, ApiClient) {
    let (mut local, _rx) = deployment_through(proxy, test, options()).await;
    local
        .start_api(0, tern_local::api::local_credentials())
        .expect("the local API starts");
    let api = ApiClient::of(&local);
    (local, api)
}

/// A POST with `key` as its `Idempotency-Key`.
async fn keyed(api: &ApiClient, path: &str, body: &Value, key: &str) -> Answer {
    api.post_with(path, body, &[("idempotency-key", key)]).await
}

/// `again` is `first` replayed: the same status, content type and body, byte for byte
/// (times and generated ids included), marked `Idempotent-Replayed: true`; `first` was not.
fn replayed(first: &Answer, again: &Answer) {
    assert_eq!(first.header("idempotent-replayed"), None, "{}", first.text);
    assert_eq!(
        again.header("idempotent-replayed"),
        Some("true"),
        "{}",
        again.text
    );
    assert_eq!(
        (again.status, again.header("content-type"), &again.text),
        (first.status, first.header("content-type"), &first.text)
    );
}

fn env(local: &LocalTern, name: &str) -> String {
    local
        .env
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("{name} in the local environment"))
}

fn ddb(local: &LocalTern) -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::new(&local.aws)
}

/// The record of `tenant`'s `key`, as DynamoDB holds it.
async fn raw_record(local: &LocalTern, tenant: &str, key: &str) -> HashMap<String, AttributeValue> {
    let record = RecordKey::new(&TenantId::new(tenant).expect("tenant"), key);
    ddb(local)
        .get_item()
        .table_name(env(local, "TERN_PORTAL_TABLE"))
        .key(
            "pk",
            AttributeValue::S(DynamoIdempotencyStore::item_key(&record)),
        )
        .consistent_read(true)
        .send()
        .await
        .expect("GetItem")
        .item
        .unwrap_or_else(|| panic!("a record for {key}"))
}

/// The store of `local`'s records, as the API builds it (without a key service: a test
/// writes records, it never seals).
fn store(local: &LocalTern) -> DynamoIdempotencyStore {
    DynamoIdempotencyStore::new(ddb(local), env(local, "TERN_PORTAL_TABLE"), None)
}

/// Messages put on SQS so far (resends, replays: each goes on the delivery queue before
/// the API answers).
fn sqs_sends(proxy: &FaultProxy) -> usize {
    proxy.count(&Service::Sqs, "SendMessage") + proxy.count(&Service::Sqs, "SendMessageBatch")
}

async fn create(api: &ApiClient, tenant: &str, body: Value) -> String {
    let created = api
        .post(&format!("/v1/tenants/{tenant}/endpoints"), &body)
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
    created.json["endpoint"]["id"]
        .as_str()
        .expect("id")
        .to_owned()
}

/// Rotate-secret and disable: a retry rotates nothing more and answers the same new
/// secret; the key with another body, or on another route, is a 422; another tenant's
/// same key is its own; the rotation's kept answer is sealed in the table (the secret
/// nowhere in the item), the disable's (no secret) kept as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_rotation_rotates_once_and_its_secret_is_sealed_at_rest() {
    let receiver = Receiver::start().await.expect("receiver");
    let proxy = moto_proxy().await;
    let (local, api) = deployment(&proxy, "idem-rotate").await;
    let id = create(&api, "tnt_a", json!({"url": receiver.url("/a")})).await;
    let ep = format!("/v1/tenants/tnt_a/endpoints/{id}");
    let secrets = async || {
        api.get(&ep).await.json["secrets"]
            .as_array()
            .map_or(0, Vec::len)
    };
    assert_eq!(secrets().await, 1);
    let key = "7d0c5c2e-rotate-1";
    let body = json!({"overlap_hours": 2});
    let kms = |op: &str| proxy.count(&Service::Other("kms".into()), op);
    let generated = kms("GenerateDataKey");
    let first = keyed(&api, &format!("{ep}/rotate-secret"), &body, key).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let secret = first.json["secret"].as_str().expect("secret").to_owned();
    assert_eq!(
        kms("GenerateDataKey") - generated,
        0,
        "the keyring's epoch key (in memory since the create) seals the new secret and the kept answer: no KMS call"
    );
    let opened = kms("Decrypt");
    // The same body, spaced and ordered differently, is the same request.
    let again = api
        .raw_with(
            "POST",
            &format!("{ep}/rotate-secret"),
            b"{ \"overlap_hours\" : 2 }".to_vec(),
            Some("application/json"),
            true,
            &[("idempotency-key", key)],
        )
        .await;
    replayed(&first, &again);
    assert_eq!(
        (kms("GenerateDataKey") - generated, kms("Decrypt") - opened),
        (0, 0),
        "a replay opens the kept answer under the epoch key in memory: no KMS call"
    );
    let third = keyed(&api, &format!("{ep}/rotate-secret"), &body, key).await;
    replayed(&first, &third);
    assert_eq!(
        kms("Decrypt") - opened,
        0,
        "the instance keeps the epoch key (an hour): no Decrypt"
    );
    assert_eq!(secrets().await, 2, "one rotation, not two");

    // Another body under the key: refused, nothing rotated.
    let other = keyed(
        &api,
        &format!("{ep}/rotate-secret"),
        &json!({"overlap_hours": 3}),
        key,
    )
    .await;
    assert_eq!(
        (other.status, other.problem(), other.field()),
        (422, "idempotency-key-reused", "Idempotency-Key"),
        "{}",
        other.text
    );
    // The key on another route (another request): refused, nothing disabled.
    let elsewhere = keyed(&api, &format!("{ep}/disable"), &json!({}), key).await;
    assert_eq!(
        (elsewhere.status, elsewhere.problem()),
        (422, "idempotency-key-reused"),
        "{}",
        elsewhere.text
    );
    assert_eq!(api.get(&ep).await.json["enabled"], true);
    assert_eq!(secrets().await, 2);

    // Another tenant's same key is its own: its rotation runs.
    let theirs = create(&api, "tnt_b", json!({"url": receiver.url("/b")})).await;
    let their_rotation = keyed(
        &api,
        &format!("/v1/tenants/tnt_b/endpoints/{theirs}/rotate-secret"),
        &body,
        key,
    )
    .await;
    assert_eq!(their_rotation.status, 200, "{}", their_rotation.text);
    assert_eq!(their_rotation.header("idempotent-replayed"), None);
    assert_ne!(their_rotation.json["secret"], first.json["secret"]);

    // At rest: the kept answer is sealed, the secret in no form in the item.
    let item = raw_record(&local, "tnt_a", key).await;
    let text = format!("{item:?}");
    let payload = secret.trim_start_matches("whsec_");
    assert!(
        !text.contains(&secret) && !text.contains(payload),
        "the new secret is not in the record: {text}"
    );
    assert!(
        matches!(item.get("sealed"), Some(AttributeValue::S(s)) if s.starts_with("tern2.")),
        "{text}"
    );
    assert!(!item.contains_key("body"), "{text}");
    assert!(!text.contains(key), "the key itself is not stored: {text}");

    // Disable: kept as it is (no secret in it), replayed byte for byte.
    let disable_key = "7d0c5c2e-disable-1";
    let reason = json!({"reason": "moving"});
    let puts = || proxy.count(&Service::DynamoDb, "PutItem");
    let (before, generated) = (puts(), kms("GenerateDataKey"));
    let first = keyed(&api, &format!("{ep}/disable"), &reason, disable_key).await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(
        (puts() - before, kms("GenerateDataKey") - generated),
        (2, 0),
        "the key's cost: the claim and the kept answer; no secret, no KMS call"
    );
    let again = keyed(&api, &format!("{ep}/disable"), &reason, disable_key).await;
    replayed(&first, &again);
    let other = keyed(
        &api,
        &format!("{ep}/disable"),
        &json!({"reason": "another"}),
        disable_key,
    )
    .await;
    assert_eq!(
        (other.status, other.problem()),
        (422, "idempotency-key-reused")
    );
    let item = raw_record(&local, "tnt_a", disable_key).await;
    assert!(
        matches!(item.get("body"), Some(AttributeValue::B(b)) if b.as_ref() == first.text.as_bytes()),
        "{item:?}"
    );
    // A keyless disable is unchanged: it runs every time.
    let plain = api.post(&format!("{ep}/disable"), &reason).await;
    assert_eq!(plain.header("idempotent-replayed"), None);
}

/// A test send and a resend: a retry POSTs nothing more at the receiver and puts nothing
/// more on the delivery queue; a replay costs one conditional PutItem and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_test_send_or_resend_sends_once() {
    let receiver = Receiver::start().await.expect("receiver");
    receiver.set(
        "/hook",
        Behavior::Always(Reply {
            status: 200,
            headers: vec![],
            body: b"ok".to_vec(),
        }),
    );
    let proxy = moto_proxy().await;
    let (_local, api) = deployment(&proxy, "idem-send").await;
    let id = create(&api, "tnt_a", json!({"url": receiver.url("/hook")})).await;
    let ep = format!("/v1/tenants/tnt_a/endpoints/{id}");

    let test_key = "test-send-1";
    let first = keyed(&api, &format!("{ep}/test"), &json!({}), test_key).await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(receiver.requests("/hook").len(), 1);
    let ops = |p: &FaultProxy| {
        [
            "PutItem",
            "GetItem",
            "UpdateItem",
            "Query",
            "DeleteItem",
            "BatchGetItem",
        ]
        .map(|op| p.count(&Service::DynamoDb, op))
    };
    let before = ops(&proxy);
    let again = keyed(&api, &format!("{ep}/test"), &json!({}), test_key).await;
    replayed(&first, &again);
    let after = ops(&proxy);
    assert_eq!(
        std::array::from_fn::<usize, 6, _>(|i| after[i] - before[i]),
        [1, 0, 0, 0, 0, 0],
        "a replay: one refused conditional PutItem, nothing else"
    );
    assert_eq!(
        receiver.requests("/hook").len(),
        1,
        "the test send is synchronous: one POST, not two"
    );

    // Resend.
    let published = api
        .post(
            "/v1/tenants/tnt_a/events",
            &json!({"id": "evt_idem_resend", "type": "order.paid", "payload": {"n": 1}}),
        )
        .await;
    assert_eq!(published.status, 202, "{}", published.text);
    receiver.wait_for("/hook", 2, WAIT).await;
    let resend = format!("/v1/tenants/tnt_a/events/evt_idem_resend/endpoints/{id}/resend");
    let sends = sqs_sends(&proxy);
    let first = keyed(&api, &resend, &json!({}), "resend-1").await;
    assert_eq!(first.status, 202, "{}", first.text);
    assert_eq!(sqs_sends(&proxy), sends + 1, "the resend is queued");
    let again = keyed(&api, &resend, &json!({}), "resend-1").await;
    replayed(&first, &again);
    assert_eq!(sqs_sends(&proxy), sends + 1, "the retry queues nothing");
    let got = receiver.wait_for("/hook", 3, WAIT).await;
    assert_eq!(
        got.iter()
            .filter(|r| r.header("webhook-id") == Some("evt_idem_resend"))
            .count(),
        2,
        "the event, then one resend"
    );
}

/// Dead-letter replay and recover: a retry moves nothing more to the delivery queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_replay_or_recover_sends_again_once() {
    let receiver = Receiver::start().await.expect("receiver");
    receiver.set("/hook", Behavior::Always(Reply::status(500)));
    let proxy = moto_proxy().await;
    let (_local, api) = deployment(&proxy, "idem-replay").await;
    let t0 = chrono::Utc::now() - chrono::Duration::seconds(1);
    let id = create(
        &api,
        "tnt_a",
        json!({"url": receiver.url("/hook"), "max_attempts": 1}),
    )
    .await;
    for event in ["evt_idem_1", "evt_idem_2"] {
        let published = api
            .post(
                "/v1/tenants/tnt_a/events",
                &json!({"id": event, "type": "order.paid", "payload": {"e": event}}),
            )
            .await;
        assert_eq!(published.status, 202, "{}", published.text);
    }
    let dead = async |event: &str| {
        api.get(&format!("/v1/tenants/tnt_a/events/{event}"))
            .await
            .json["deliveries"][0]["state"]
            == "dead_lettered"
    };
    assert!(
        eventually(WAIT, async || dead("evt_idem_1").await
            && dead("evt_idem_2").await)
        .await
    );
    receiver.set("/hook", Behavior::Always(Reply::status(200)));

    let replay = "/v1/tenants/tnt_a/dead-letters/replay";
    let body = json!({"event_id": "evt_idem_1"});
    let sends = sqs_sends(&proxy);
    let first = keyed(&api, replay, &body, "replay-1").await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(first.json["replayed"], 1, "{}", first.text);
    let moved = sqs_sends(&proxy);
    assert!(moved > sends, "the replay moved it to the delivery queue");
    let again = keyed(&api, replay, &body, "replay-1").await;
    replayed(&first, &again);
    assert_eq!(sqs_sends(&proxy), moved, "the retry moves nothing");

    let recover = format!("/v1/tenants/tnt_a/endpoints/{id}/recover");
    let window = json!({"since": t0.to_rfc3339()});
    let first = keyed(&api, &recover, &window, "recover-1").await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(first.json["dead_letters"]["replayed"], 1, "{}", first.text);
    let recovered = sqs_sends(&proxy);
    assert!(recovered > moved);
    let again = keyed(&api, &recover, &window, "recover-1").await;
    replayed(&first, &again);
    assert_eq!(
        sqs_sends(&proxy),
        recovered,
        "the retry sends nothing again"
    );
    let delivered = async |event: &str| {
        api.get(&format!("/v1/tenants/tnt_a/events/{event}"))
            .await
            .json["deliveries"][0]["state"]
            == "delivered"
    };
    assert!(
        eventually(WAIT, async || delivered("evt_idem_1").await
            && delivered("evt_idem_2").await)
        .await
    );
    let ok = |event: &str| {
        receiver
            .requests("/hook")
            .iter()
            .filter(|r| r.answered == 200 && r.header("webhook-id") == Some(event))
            .count()
    };
    assert_eq!((ok("evt_idem_1"), ok("evt_idem_2")), (1, 1));
}

/// Issue 29: a batch publish under a key. Its events carry no ids of the caller's, so
/// without the key a retry would publish them again under new ids; with it the retry
/// answers the first answer (the same made ids) and writes nothing, and the receiver gets
/// each event once. The batch's body, larger than any other route takes, is read whole by
/// the key's layer (which once read every body with one event's limit: a 413); its kept
/// answer holds no secret and is stored as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_batch_publishes_once() {
    let receiver = Receiver::start().await.expect("receiver");
    let proxy = moto_proxy().await;
    let (local, api) = deployment(&proxy, "idem-batch").await;
    create(&api, "tnt_a", json!({"url": receiver.url("/hook")})).await;
    let path = "/v1/tenants/tnt_a/event-batches";
    // Three events of 200 KB: 600 KB, over the 272 KB any other route takes.
    let events: Vec<Value> = (0..3)
        .map(|i| json!({"type": "order.paid", "payload": {"n": i, "pad": "p".repeat(200_000)}}))
        .collect();
    let body = json!({"events": events});
    let key = "batch-1";
    // The outbox's items: what the batch wrote (every page: a Scan reads 1 MB at a time).
    let outbox = || async {
        let pages: Vec<_> = ddb(&local)
            .scan()
            .table_name(env(&local, "TERN_OUTBOX_TABLE"))
            .select(aws_sdk_dynamodb::types::Select::Count)
            .into_paginator()
            .send()
            .collect()
            .await;
        pages
            .into_iter()
            .map(|p| p.expect("Scan").count)
            .sum::<i32>()
    };
    let first = keyed(&api, path, &body, key).await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(first.json["created"], 3, "{}", first.text);
    assert_eq!(outbox().await, 3);
    let again = keyed(&api, path, &body, key).await;
    replayed(&first, &again);
    assert_eq!(outbox().await, 3, "the retry writes no event");
    let ids: Vec<&str> = first.json["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["id"].as_str().expect("id"))
        .collect();
    let got = receiver.wait_for("/hook", 3, WAIT).await;
    let mut delivered: Vec<&str> = got.iter().filter_map(|r| r.header("webhook-id")).collect();
    delivered.sort_unstable();
    let mut want = ids.clone();
    want.sort_unstable();
    assert_eq!(
        delivered, want,
        "each event once, under the ids first answered"
    );
    // Without the key the same body is a new batch: three more events.
    let unkeyed = api.post(path, &body).await;
    assert_eq!(unkeyed.json["created"], 3, "{}", unkeyed.text);
    assert_eq!(outbox().await, 6);
    let item = raw_record(&local, "tnt_a", key).await;
    assert!(
        matches!(item.get("body"), Some(AttributeValue::B(b)) if b.as_ref() == first.text.as_bytes()),
        "kept as it is: {:?}",
        item.keys().collect::<Vec<_>>()
    );
}

/// A portal session: a retry mints no second link (the tenant's link count in the portal
/// table says one) and answers the same link; the link is sealed at rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_portal_session_mints_one_link() {
    let proxy = moto_proxy().await;
    let (local, api) = deployment(&proxy, "idem-portal").await;
    let path = "/v1/tenants/tnt_a/portal-sessions";
    let body = json!({"read_only": true});
    let first = keyed(&api, path, &body, "portal-1").await;
    assert_eq!(first.status, 201, "{}", first.text);
    let again = keyed(&api, path, &body, "portal-1").await;
    replayed(&first, &again);
    // Links minted: the tenant's rate-limit windows count each one.
    let items = ddb(&local)
        .scan()
        .table_name(env(&local, "TERN_PORTAL_TABLE"))
        .send()
        .await
        .expect("Scan")
        .items
        .unwrap_or_default();
    let minted: u64 = items
        .iter()
        .filter(|i| {
            matches!(i.get("pk"), Some(AttributeValue::S(k)) if k.starts_with("rl#sessions#tnt_a#"))
        })
        .filter_map(|i| match i.get("n") {
            Some(AttributeValue::N(n)) => n.parse::<u64>().ok(),
            _ => None,
        })
        .sum();
    assert_eq!(minted, 1, "one link minted, not two");
    let url = first.json["url"].as_str().expect("url");
    let token = url.split("token=").nth(1).expect("token");
    let text = format!("{:?}", raw_record(&local, "tnt_a", "portal-1").await);
    assert!(!text.contains(token), "the link is sealed at rest: {text}");
}

/// Five requests at once under one key, to a receiver that holds each test POST for its
/// deadline (1 s): one runs, the others get the kept answer or a 409 to retry; the
/// receiver gets one POST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_under_one_key_run_once() {
    let receiver = Receiver::start().await.expect("receiver");
    receiver.set("/slow", Behavior::Hang);
    let proxy = moto_proxy().await;
    let (_local, api) = deployment(&proxy, "idem-race").await;
    let id = create(
        &api,
        "tnt_a",
        json!({"url": receiver.url("/slow"), "timeout_ms": 5000}),
    )
    .await;
    let path = format!("/v1/tenants/tnt_a/endpoints/{id}/test");
    let empty = json!({});
    let answers =
        futures::future::join_all((0..5).map(|_| keyed(&api, &path, &empty, "race-1"))).await;
    let ran: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.status == 200 && a.header("idempotent-replayed").is_none())
        .collect();
    assert_eq!(ran.len(), 1, "{answers:?}");
    let mut in_use = 0;
    for a in &answers {
        if a.status == 409 {
            assert_eq!(
                (a.problem(), a.header("retry-after")),
                ("idempotency-key-in-use", Some("1")),
                "{}",
                a.text
            );
            in_use += 1;
        } else if a.header("idempotent-replayed").is_some() {
            assert_eq!(a.text, ran[0].text);
        }
    }
    assert!(
        in_use > 0,
        "the others came while the first waited 5 s for the receiver: {answers:?}"
    );
    assert_eq!(receiver.requests("/slow").len(), 1, "one POST");
    let after = keyed(&api, &path, &json!({}), "race-1").await;
    replayed(ran[0], &after);
    assert_eq!(receiver.requests("/slow").len(), 1);
}

/// A first request that failed on our side (503: the delivery queue throttled every try)
/// keeps nothing: its retry runs, and the resend happens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_first_request_runs_again() {
    let receiver = Receiver::start().await.expect("receiver");
    let proxy = moto_proxy().await;
    let (_local, api) = deployment(&proxy, "idem-5xx").await;
    let id = create(&api, "tnt_a", json!({"url": receiver.url("/hook")})).await;
    let published = api
        .post(
            "/v1/tenants/tnt_a/events",
            &json!({"id": "evt_idem_5xx", "type": "order.paid", "payload": {"n": 1}}),
        )
        .await;
    assert_eq!(published.status, 202, "{}", published.text);
    receiver.wait_for("/hook", 1, WAIT).await;
    let resend = format!("/v1/tenants/tnt_a/events/evt_idem_5xx/endpoints/{id}/resend");
    let rule = proxy.add(Rule::on(Service::Sqs, "SendMessage", Fault::Throttle));
    let failed = keyed(&api, &resend, &json!({}), "resend-5xx").await;
    assert_eq!(
        (failed.status, failed.problem()),
        (503, "unavailable"),
        "{}",
        failed.text
    );
    assert!(proxy.fired(rule) > 0);
    proxy.remove(rule);
    let again = keyed(&api, &resend, &json!({}), "resend-5xx").await;
    assert_eq!(again.status, 202, "{}", again.text);
    assert_eq!(again.header("idempotent-replayed"), None, "it ran again");
    let got = receiver.wait_for("/hook", 2, WAIT).await;
    assert_eq!(got.len(), 2, "the resend arrived");
    // Now kept.
    let third = keyed(&api, &resend, &json!({}), "resend-5xx").await;
    replayed(&again, &third);
}

/// The record's life, written through the store at past times (no waiting): a record
/// claimed 23 h ago still answers, one claimed 24 h ago is absent (DynamoDB's TTL
/// deletion lags; the read treats it as gone) and the request runs anew; a claim that
/// never finished holds the key for its lease, then a retry runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_or_abandoned_record_runs_anew() {
    let receiver = Receiver::start().await.expect("receiver");
    let proxy = moto_proxy().await;
    let (local, api) = deployment(&proxy, "idem-expiry").await;
    let id = create(&api, "tnt_a", json!({"url": receiver.url("/a")})).await;
    let path = format!("/v1/tenants/tnt_a/endpoints/{id}/disable");
    let body = json!({"reason": "maintenance"});
    let print = fingerprint("POST", &path, body.to_string().as_bytes());
    let store = store(&local);
    let tenant = TenantId::new("tnt_a").expect("tenant");
    let stale = StoredAnswer {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body: br#"{"kept":"long ago"}"#.to_vec(),
        sealed: false,
    };
    let keep = async |key: &str, hours_ago: i64| {
        let at = chrono::Utc::now() - chrono::Duration::hours(hours_ago);
        let record = RecordKey::new(&tenant, key);
        let Claim::Claimed(lease) = store.claim(&record, &print, at).await.expect("claim") else {
            panic!("a fresh key is claimed")
        };
        assert!(
            store
                .complete(&record, &lease, &print, &stale)
                .await
                .expect("complete")
        );
    };
    assert_eq!(RECORD_TTL_SECONDS, 24 * 3600);
    keep("kept-23h", 23).await;
    keep("kept-24h", 24).await;
    let young = keyed(&api, &path, &body, "kept-23h").await;
    assert_eq!(
        (
            young.status,
            young.text.as_str(),
            young.header("idempotent-replayed")
        ),
        (200, r#"{"kept":"long ago"}"#, Some("true")),
        "a record of 23 h answers"
    );
    let old = keyed(&api, &path, &body, "kept-24h").await;
    assert_eq!(old.status, 200, "{}", old.text);
    assert_eq!(old.header("idempotent-replayed"), None, "{}", old.text);
    assert_eq!(old.json["enabled"], false, "it ran: {}", old.text);
    let again = keyed(&api, &path, &body, "kept-24h").await;
    replayed(&old, &again);

    // Abandoned claims (an instance that crashed mid-request).
    let abandon = async |key: &str, seconds_ago: i64| {
        let at = chrono::Utc::now() - chrono::Duration::seconds(seconds_ago);
        let claim = store
            .claim(&RecordKey::new(&tenant, key), &print, at)
            .await
            .expect("claim");
        assert!(matches!(claim, Claim::Claimed(_)), "{claim:?}");
    };
    abandon("crashed-now", 1).await;
    abandon("crashed-long-ago", LEASE_SECONDS + 1).await;
    let held = keyed(&api, &path, &body, "crashed-now").await;
    assert_eq!(
        (held.status, held.problem()),
        (409, "idempotency-key-in-use"),
        "{}",
        held.text
    );
    let freed = keyed(&api, &path, &body, "crashed-long-ago").await;
    assert_eq!(freed.status, 200, "{}", freed.text);
    assert_eq!(freed.header("idempotent-replayed"), None);
}
