//! Issue 18: the Tern API, served by local mode on 127.0.0.1 (the same router the `api`
//! Lambda serves), on moto, with receivers on 127.0.0.1 and every request signed with SigV4
//! as a client signs it. Tenant isolation on every route, idempotent publish, pagination,
//! PATCH beside a concurrent disable, the SSRF guard, problems, secrets, authentication,
//! resend, recover, the test send, the delivery log by endpoint and the rate limit.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tern_api::sigv4::LocalCredential;
use tern_core::endpoint::{EndpointSecret, EndpointUpdate};
use tern_core::ports::{EndpointStore, PortError};
use tern_core::{Endpoint, EndpointId, Secret, TenantId};
use tern_local::LocalOptions;
use tern_local::local::LocalTern;
use tern_tests::api::{Answer, ApiClient};
use tern_tests::*;

fn options() -> LocalOptions {
    LocalOptions {
        time_scale: 0.001,
        lookup: Some(no_dns()),
        console_port: None,
        ..LocalOptions::default()
    }
}

/// A deployment with pollers and the API; a client signing with `.tern/local.env`'s keys.
async fn api_deployment(
    test: &str,
    options: LocalOptions,
) -> (
    LocalTern,
    tokio::sync::mpsc::UnboundedReceiver<tern_local::pollers::LocalEvent>,
    ApiClient,
) {
    let (mut local, rx) = deployment(test, options).await;
    local
        .start_api(0, tern_local::api::local_credentials())
        .expect("the local API starts");
    let client = ApiClient::of(&local);
    (local, rx, client)
}

fn created(answer: &Answer) -> (String, Secret) {
    assert_eq!(answer.status, 201, "{}", answer.text);
    let id = answer.json["endpoint"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let secret = Secret::parse(answer.json["secret"].as_str().expect("secret")).expect("whsec_");
    (id, secret)
}

async fn create(api: &ApiClient, tenant: &str, body: Value) -> (String, Secret) {
    created(
        &api.post(&format!("/v1/tenants/{tenant}/endpoints"), &body)
            .await,
    )
}

const WAIT: Duration = Duration::from_secs(20);

/// Every route, asked by tenant B about tenant A's endpoint and event, answers 404 (never
/// 403: that would confirm they exist), changes nothing of A's, and lists and replays
/// nothing of A's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_another_tenants_ids_with_404() {
    let receiver = Receiver::start().await.expect("receiver");
    receiver.set("/dead", Behavior::Always(Reply::status(500)));
    let (local, _rx, api) = api_deployment("api-isolation", options()).await;
    let (a1, _) = create(&api, "tnt_a", json!({"url": receiver.url("/a")})).await;
    let (a_dead, _) = create(
        &api,
        "tnt_a",
        json!({"url": receiver.url("/dead"), "max_attempts": 1}),
    )
    .await;
    let (b1, _) = create(&api, "tnt_b", json!({"url": receiver.url("/b")})).await;
    let published = api
        .post(
            "/v1/tenants/tnt_a/events",
            &json!({"id": "evt_isolated_a", "type": "order.paid", "payload": {"n": 1}}),
        )
        .await;
    assert_eq!(published.status, 202, "{}", published.text);
    receiver.wait_for("/a", 1, WAIT).await;
    // A's dead letter is in the DLQ.
    assert!(
        eventually(WAIT, async || !dead_letters(&local).await.is_empty()).await,
        "A's failing endpoint dead-letters the event"
    );
    let evb = api
        .post(
            "/v1/tenants/tnt_b/events",
            &json!({"id": "evt_isolated_b", "type": "order.paid", "payload": {"n": 2}}),
        )
        .await;
    assert_eq!(evb.status, 202);
    receiver.wait_for("/b", 1, WAIT).await;

    let a_before = api.get(&format!("/v1/tenants/tnt_a/endpoints/{a1}")).await;
    assert_eq!(a_before.status, 200, "A sees its own endpoint");

    let b = |rest: &str| format!("/v1/tenants/tnt_b/{rest}");
    let ep = |rest: &str| b(&format!("endpoints/{a1}{rest}"));
    let since = (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    let asks: Vec<(&str, String, Option<Value>)> = vec![
        ("GET", ep(""), None),
        ("PATCH", ep(""), Some(json!({"description": "mine now"}))),
        ("DELETE", ep(""), None),
        ("POST", ep("/enable"), None),
        ("POST", ep("/disable"), Some(json!({"reason": "b did it"}))),
        ("POST", ep("/rotate-secret"), Some(json!({}))),
        ("POST", ep("/rotate-signing-key"), Some(json!({}))),
        ("GET", ep("/health"), None),
        ("POST", ep("/test"), None),
        ("GET", ep("/attempts"), None),
        (
            "POST",
            ep("/recover"),
            Some(json!({"since": since, "enable": true})),
        ),
        ("GET", b("events/evt_isolated_a"), None),
        ("GET", b("events/evt_isolated_a/attempts"), None),
        (
            "POST",
            b(&format!("events/evt_isolated_a/endpoints/{b1}/resend")),
            None,
        ),
        (
            "POST",
            b(&format!("events/evt_isolated_b/endpoints/{a1}/resend")),
            None,
        ),
        (
            "POST",
            b(&format!("events/evt_isolated_a/endpoints/{a1}/resend")),
            None,
        ),
    ];
    for (method, path, body) in &asks {
        let answer = api.call(method, path, body.as_ref()).await;
        assert_eq!(
            (answer.status, answer.problem()),
            (404, "not-found"),
            "{method} {path}: {}",
            answer.text
        );
    }
    // Lists and the DLQ show B nothing of A's; a replay moves nothing of A's.
    let list = api.get(&b("endpoints")).await;
    let ids: Vec<&str> = list.json["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|e| e["id"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(ids, [b1.as_str()], "{}", list.text);
    let dlq = api.get(&b("dead-letters")).await;
    assert_eq!(dlq.status, 200, "{}", dlq.text);
    assert_eq!(dlq.json["groups"], json!([]), "{}", dlq.text);
    assert_eq!(
        dlq.json["read"], 0,
        "B's list reads B's dead-letter record only, never the shared DLQ: {}",
        dlq.text
    );
    let replay = api
        .post(&b("dead-letters/replay"), &json!({"force": true}))
        .await;
    assert_eq!(replay.status, 200, "{}", replay.text);
    assert_eq!(replay.json["replayed"], 0, "{}", replay.text);
    assert_eq!(dead_letters(&local).await.len(), 1, "A's dead letter stays");
    // Event ids are per tenant: B publishing A's id writes B's own event (its answer the
    // one any new id gets, nothing of A's in it), delivered to B's endpoint only.
    let own = api
        .post(
            &b("events"),
            &json!({"id": "evt_isolated_a", "type": "order.paid", "payload": {"n": "b's"}}),
        )
        .await;
    assert_eq!(
        (own.status, own.json["created"].clone()),
        (202, json!(true)),
        "{}",
        own.text
    );
    assert!(!own.text.contains("tnt_a"), "{}", own.text);
    let got = receiver.wait_for("/b", 2, WAIT).await;
    let b_copy = got
        .iter()
        .find(|r| r.header("webhook-id") == Some("evt_isolated_a"))
        .expect("B's event with A's id reaches B's endpoint");
    assert_eq!(&b_copy.body[..], br#"{"n":"b's"}"#);
    let b_event = api.get(&b("events/evt_isolated_a")).await;
    assert_eq!(
        b_event.json["payload"],
        json!({"n": "b's"}),
        "{}",
        b_event.text
    );
    let b_attempts = api.get(&b("events/evt_isolated_a/attempts")).await;
    assert_eq!(b_attempts.status, 200, "{}", b_attempts.text);
    assert!(
        !b_attempts.text.contains(a1.as_str()) && !b_attempts.text.contains(a_dead.as_str()),
        "B's attempts of its event name none of A's endpoints: {}",
        b_attempts.text
    );

    // Nothing of A's changed.
    let a_after = api.get(&format!("/v1/tenants/tnt_a/endpoints/{a1}")).await;
    assert_eq!(a_after.json, a_before.json);
    assert_eq!(
        receiver.requests("/a").len(),
        1,
        "no test send or resend reached A"
    );
    let a_dead_now = api
        .get(&format!("/v1/tenants/tnt_a/endpoints/{a_dead}"))
        .await;
    assert_eq!(a_dead_now.json["enabled"], true);
    let a_event = api.get("/v1/tenants/tnt_a/events/evt_isolated_a").await;
    assert_eq!(a_event.status, 200, "{}", a_event.text);
    assert_eq!(a_event.json["payload"], json!({"n": 1}), "A's event is A's");
}

/// A publish carries the caller's W3C trace context (docs/tracing.md): from the body, or
/// else from the request's own `traceparent` header; a bad one in the body is a 400 naming
/// the field. An endpoint created with `send_traceparent` receives it (this process does not
/// trace, so the header is the event's own context); one without does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_carries_the_trace_context_to_receivers_that_ask_for_it() {
    let receiver = Receiver::start().await.expect("receiver");
    let (_local, _rx, api) = api_deployment("api-trace", options()).await;
    let (asks, _) = create(
        &api,
        "tnt_a",
        json!({"url": receiver.url("/asks"), "send_traceparent": true}),
    )
    .await;
    let (quiet, _) = create(&api, "tnt_a", json!({"url": receiver.url("/quiet")})).await;
    for (id, sends) in [(&asks, true), (&quiet, false)] {
        let got = api.get(&format!("/v1/tenants/tnt_a/endpoints/{id}")).await;
        assert_eq!(got.json["send_traceparent"], sends, "{}", got.text);
    }

    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    for (body, field) in [
        (
            json!({"type": "order.paid", "payload": {}, "traceparent": parent.to_uppercase()}),
            "traceparent",
        ),
        (
            json!({"type": "order.paid", "payload": {}, "traceparent": parent.replacen("00", "01", 1)}),
            "traceparent",
        ),
        (
            json!({"type": "order.paid", "payload": {}, "traceparent": parent, "tracestate": "Bad=1"}),
            "tracestate",
        ),
        (
            json!({"type": "order.paid", "payload": {}, "tracestate": "Bad=1"}),
            "tracestate",
        ),
        // A batch refuses a bad one whole.
        (
            json!({"events": [{"type": "order.paid", "payload": {}}, {"type": "order.paid", "payload": {}, "traceparent": "00-x"}]}),
            "events[1].traceparent",
        ),
    ] {
        let path = if body.get("events").is_some() {
            "/v1/tenants/tnt_a/event-batches"
        } else {
            "/v1/tenants/tnt_a/events"
        };
        let refused = api.post(path, &body).await;
        assert_eq!(
            (refused.status, refused.field()),
            (400, field),
            "{body}: {}",
            refused.text
        );
    }
    // A valid tracestate without a traceparent is not read (W3C Trace Context §3.3): the
    // event is published without a trace context.
    let alone = api
        .post(
            "/v1/tenants/tnt_a/events",
            &json!({"type": "order.paid", "payload": {}, "tracestate": "a=1"}),
        )
        .await;
    assert_eq!(alone.status, 202, "{}", alone.text);
    let alone_id = alone.json["id"].as_str().unwrap_or_default().to_owned();
    let published = api
        .post(
            "/v1/tenants/tnt_a/events",
            &json!({"id": "evt_traced", "type": "order.paid", "payload": {"n": 1}, "traceparent": parent}),
        )
        .await;
    assert_eq!(published.status, 202, "{}", published.text);
    let from_header = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let published = api
        .post_with(
            "/v1/tenants/tnt_a/events",
            &json!({"id": "evt_header", "type": "order.paid", "payload": {"n": 2}}),
            &[("traceparent", from_header)],
        )
        .await;
    assert_eq!(published.status, 202, "{}", published.text);

    // Three events each: the tracestate-only one, evt_traced and evt_header.
    let got = receiver.wait_for("/asks", 3, WAIT).await;
    let header_of = |id: &str| {
        got.iter()
            .find(|r| r.header("webhook-id") == Some(id))
            .and_then(|r| r.header("traceparent"))
            .map(str::to_owned)
    };
    assert_eq!(header_of("evt_traced").as_deref(), Some(parent));
    assert_eq!(header_of("evt_header").as_deref(), Some(from_header));
    // Not traced by the writer, and Tern not tracing here: no traceparent to send.
    assert_eq!(header_of(&alone_id), None);
    let quiet_got = receiver.wait_for("/quiet", 3, WAIT).await;
    assert_eq!(quiet_got.len(), 3);
    assert!(quiet_got.iter().all(|r| r.header("traceparent").is_none()));
}

/// The same id with the same body returns the original event; with another body, 409;
/// concurrent duplicates write it once, and the receiver gets it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_is_idempotent_on_the_event_id() {
    let receiver = Receiver::start().await.expect("receiver");
    let (_local, _rx, api) = api_deployment("api-idempotent", options()).await;
    let (_, secret) = create(&api, "tnt_a", json!({"url": receiver.url("/hook")})).await;
    let body = json!({"id": "evt_once", "type": "order.paid", "payload": {"order": "o_1", "amount": 4200}});
    let first = api.post("/v1/tenants/tnt_a/events", &body).await;
    assert_eq!(first.status, 202, "{}", first.text);
    assert_eq!(first.json["created"], true);
    let again = api.post("/v1/tenants/tnt_a/events", &body).await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.json["created"], false);
    assert_eq!(
        again.json["created_at"], first.json["created_at"],
        "the original"
    );
    let other = api
        .post(
            "/v1/tenants/tnt_a/events",
            &json!({"id": "evt_once", "type": "order.paid", "payload": {"order": "o_1", "amount": 1}}),
        )
        .await;
    assert_eq!(
        (other.status, other.problem(), other.field()),
        (409, "event-id-conflict", "id")
    );
    let other_type = api
        .post(
            "/v1/tenants/tnt_a/events",
            &json!({"id": "evt_once", "type": "order.refunded", "payload": {"order": "o_1", "amount": 4200}}),
        )
        .await;
    assert_eq!(other_type.status, 409);

    // Ten concurrent publishes of one new id: one writes, nine get the original.
    let body = json!({"id": "evt_race", "type": "order.paid", "payload": {"n": 7}});
    let answers =
        futures::future::join_all((0..10).map(|_| api.post("/v1/tenants/tnt_a/events", &body)))
            .await;
    let mut statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
    statuses.sort_unstable();
    assert_eq!(
        statuses,
        [200, 200, 200, 200, 200, 200, 200, 200, 200, 202],
        "{answers:?}"
    );
    let got = receiver.wait_for("/hook", 2, WAIT).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let ids: Vec<String> = receiver
        .requests("/hook")
        .iter()
        .map(|r| r.header("webhook-id").unwrap_or("").to_owned())
        .collect();
    assert_eq!(
        ids.iter().filter(|i| *i == "evt_once").count(),
        1,
        "{ids:?}"
    );
    assert_eq!(
        ids.iter().filter(|i| *i == "evt_race").count(),
        1,
        "{ids:?}"
    );
    // Delivered byte for byte as published, verified by the reference library.
    let race = got
        .iter()
        .find(|r| r.header("webhook-id") == Some("evt_race"))
        .expect("evt_race delivered");
    assert_eq!(&race.body[..], br#"{"n":7}"#);
    verify_reference(&secret, race).expect("signature");
}

/// Issue 29: a batch of 100 events (half with the caller's ids, half without) in one
/// request: each created (202 in its result, `created` 100), and each delivered once to a
/// receiver on 127.0.0.1, byte for byte, signed (verified by the reference library), with
/// the `webhook-id` the batch answered for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_100_is_delivered_to_a_loopback_receiver() {
    let receiver = Receiver::start().await.expect("receiver");
    let (_local, _rx, api) = api_deployment("api-batch-100", options()).await;
    let (_, secret) = create(&api, "tnt_a", json!({"url": receiver.url("/hook")})).await;
    let events: Vec<Value> = (0..100)
        .map(|i| {
            if i % 2 == 0 {
                json!({"id": format!("evt_batch_{i}"), "type": "order.paid", "payload": {"n": i}})
            } else {
                json!({"type": "order.paid", "payload": {"n": i}})
            }
        })
        .collect();
    let answer = api
        .post(
            "/v1/tenants/tnt_a/event-batches",
            &json!({"events": events}),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(
        (
            &answer.json["created"],
            &answer.json["existing"],
            &answer.json["failed"]
        ),
        (&json!(100), &json!(0), &json!(0)),
        "{}",
        answer.text
    );
    let results = answer.json["results"].as_array().expect("results");
    assert_eq!(results.len(), 100);
    let mut n_of: std::collections::BTreeMap<String, i64> = std::collections::BTreeMap::new();
    for (i, r) in results.iter().enumerate() {
        let id = r["id"].as_str().expect("an id").to_owned();
        assert_eq!(r["status"], 202, "{r}");
        assert_eq!(r["event"]["id"], id.as_str(), "{r}");
        assert_eq!(
            (&r["event"]["type"], &r["event"]["tenant_id"]),
            (&json!("order.paid"), &json!("tnt_a"))
        );
        if i % 2 == 0 {
            assert_eq!(id, format!("evt_batch_{i}"));
        } else {
            assert!(id.starts_with("evt_"), "a made id: {id}");
        }
        n_of.insert(id, i64::try_from(i).unwrap());
    }
    assert_eq!(n_of.len(), 100, "100 distinct ids");
    let got = receiver
        .wait_for("/hook", 100, Duration::from_secs(180))
        .await;
    let mut seen = std::collections::BTreeSet::new();
    for r in &got {
        let id = r.header("webhook-id").expect("webhook-id").to_owned();
        let n = n_of
            .get(&id)
            .unwrap_or_else(|| panic!("{id} was in the batch"));
        assert_eq!(&r.body[..], format!("{{\"n\":{n}}}").as_bytes(), "{id}");
        verify_reference(&secret, r).expect("signature");
        assert!(seen.insert(id.clone()), "{id} delivered twice");
    }
    assert_eq!(seen.len(), 100);
}

/// Issue 29: each event of a batch gets what a publish of it alone would have answered,
/// at its index, and one event's problem stops none of the others: created, published
/// before (existing), an id taken by another event (409), a bad type (400), a payload over
/// the limit (413), an id twice in the batch, an id that is not one, a payload that is not
/// an object. Only the two created events are delivered; an event that failed can be
/// published again with the id its result named. A body that is not a batch is refused
/// whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_event_of_a_batch_is_answered_on_its_own() {
    let receiver = Receiver::start().await.expect("receiver");
    let (_local, _rx, api) = api_deployment("api-batch-each", options()).await;
    create(&api, "tnt_a", json!({"url": receiver.url("/hook")})).await;
    let batch = "/v1/tenants/tnt_a/event-batches";
    for (id, n) in [("evt_b_old", json!(1)), ("evt_b_taken", json!(2))] {
        let one = api
            .post(
                "/v1/tenants/tnt_a/events",
                &json!({"id": id, "type": "order.paid", "payload": {"n": n}}),
            )
            .await;
        assert_eq!(one.status, 202, "{}", one.text);
    }
    let too_big = "a".repeat(tern_core::event::DEFAULT_MAX_PAYLOAD_BYTES);
    let events = json!([
        {"id": "evt_b_new", "type": "order.paid", "payload": {"n": 0}},
        {"id": "evt_b_old", "type": "order.paid", "payload": {"n": 1}},
        {"id": "evt_b_taken", "type": "order.paid", "payload": {"n": "another"}},
        {"type": "bad type!", "payload": {}},
        {"type": "order.paid", "payload": {"p": too_big}},
        {"id": "evt_b_new", "type": "order.paid", "payload": {"n": 0}},
        {"id": "not an id!", "type": "order.paid", "payload": {}},
        {"type": "order.paid", "payload": [1, 2]},
        {"type": "order.paid", "payload": {"n": 8}},
    ]);
    let answer = api.post(batch, &json!({"events": events})).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let r = &answer.json["results"];
    let row = |i: usize| {
        (
            r[i]["status"].as_u64().unwrap_or(0),
            r[i]["problem"]["type"]
                .as_str()
                .unwrap_or("")
                .trim_start_matches("urn:tern:problem:")
                .to_owned(),
            r[i]["problem"]["field"].as_str().unwrap_or("").to_owned(),
        )
    };
    let expected = [
        (202, "", ""),
        (200, "", ""),
        (409, "event-id-conflict", "events[2].id"),
        (400, "validation", "events[3].type"),
        (413, "payload-too-large", "events[4].payload"),
        (400, "validation", "events[5].id"),
        (400, "validation", "events[6].id"),
        (400, "validation", "events[7].payload"),
        (202, "", ""),
    ];
    for (i, (status, kind, field)) in expected.iter().enumerate() {
        assert_eq!(
            row(i),
            (*status, (*kind).to_owned(), (*field).to_owned()),
            "event {i}: {}",
            r[i]
        );
    }
    assert_eq!(
        (
            &answer.json["created"],
            &answer.json["existing"],
            &answer.json["failed"]
        ),
        (&json!(2), &json!(1), &json!(6))
    );
    assert_eq!(
        r[1]["event"]["created"], false,
        "the original, not written again"
    );
    assert!(r[6].get("id").is_none(), "no id for an id that is not one");
    let made = |i: usize| r[i]["id"].as_str().expect("a made id").to_owned();
    let (failed_id, created_id) = (made(3), made(8));
    assert!(failed_id.starts_with("evt_") && created_id.starts_with("evt_"));
    // Only what was created is delivered: the two earlier events, evt_b_new and event 8.
    let got = receiver.wait_for("/hook", 4, WAIT).await;
    let ids: std::collections::BTreeSet<&str> =
        got.iter().filter_map(|r| r.header("webhook-id")).collect();
    let want: std::collections::BTreeSet<&str> =
        ["evt_b_old", "evt_b_taken", "evt_b_new", created_id.as_str()].into();
    assert_eq!(ids, want);
    // The failed event's id was never written: it publishes now; the created one's is a repeat.
    let again = api
        .post(
            batch,
            &json!({"events": [
                {"id": failed_id, "type": "order.paid", "payload": {}},
                {"id": created_id, "type": "order.paid", "payload": {"n": 8}},
            ]}),
        )
        .await;
    assert_eq!(
        (
            &again.json["results"][0]["status"],
            &again.json["results"][1]["status"]
        ),
        (&json!(202), &json!(200)),
        "{}",
        again.text
    );

    // Not a batch: refused whole, naming the field; nothing written.
    let one = json!({"type": "order.paid", "payload": {}});
    let many: Vec<Value> = (0..101).map(|_| one.clone()).collect();
    for (body, field) in [
        (json!({}), "events"),
        (json!({"events": []}), "events"),
        (json!({"events": many}), "events"),
        (json!({"events": [one, {"payload": {}}]}), "events[1].type"),
        (
            json!({"events": [{"type": "order.paid"}]}),
            "events[0].payload",
        ),
    ] {
        let answer = api.post(batch, &body).await;
        assert_eq!(
            (answer.status, answer.field()),
            (400, field),
            "{body}: {}",
            answer.text
        );
    }
}

/// 250 endpoints, pages of 7: each endpoint exactly once; with a state filter, each
/// enabled (or disabled) one exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pagination_returns_each_endpoint_once() {
    let (local, _rx, api) = api_deployment("api-pages", options()).await;
    let mut disabled = std::collections::BTreeSet::new();
    let mut all = std::collections::BTreeSet::new();
    for i in 0..250 {
        let e = add_endpoint(
            &local,
            "tnt_many",
            "https://receiver.example/hook",
            &["*"],
            None,
        )
        .await;
        if i % 3 == 0 {
            local
                .sender
                .endpoints
                .disable(&e.tenant_id, &e.id, "test")
                .await
                .expect("disable");
            disabled.insert(e.id.to_string());
        }
        all.insert(e.id.to_string());
    }
    // Another tenant's endpoint never shows.
    add_endpoint(
        &local,
        "tnt_other",
        "https://receiver.example/x",
        &["*"],
        None,
    )
    .await;
    for (state, expected) in [
        (None, all.clone()),
        (Some("disabled"), disabled.clone()),
        (
            Some("enabled"),
            all.difference(&disabled).cloned().collect(),
        ),
    ] {
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..100 {
            let mut path = "/v1/tenants/tnt_many/endpoints?limit=7".to_owned();
            if let Some(s) = state {
                path.push_str(&format!("&state={s}"));
            }
            if let Some(c) = &cursor {
                path.push_str(&format!("&cursor={c}"));
            }
            let page = api.get(&path).await;
            assert_eq!(page.status, 200, "{}", page.text);
            let items = page.json["items"].as_array().expect("items");
            assert!(items.len() <= 7);
            seen.extend(
                items
                    .iter()
                    .map(|e| e["id"].as_str().unwrap_or("").to_owned()),
            );
            match page.json["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => break,
            }
        }
        let unique: std::collections::BTreeSet<String> = seen.iter().cloned().collect();
        assert_eq!(
            unique.len(),
            seen.len(),
            "{state:?}: an endpoint came twice"
        );
        assert_eq!(unique, expected, "{state:?}");
    }
    let bad = api
        .get("/v1/tenants/tnt_many/endpoints?cursor=bm90LWFuLWlk%21")
        .await;
    assert_eq!((bad.status, bad.field()), (400, "cursor"), "{}", bad.text);
    let big = api.get("/v1/tenants/tnt_many/endpoints?limit=101").await;
    assert_eq!((big.status, big.field()), (400, "limit"));
}

/// The real store, which disables the endpoint (as a 410 seen by the sender would) just
/// before the API's update is written.
struct DisableBeforeUpdate {
    inner: Arc<dyn EndpointStore>,
}

#[async_trait]
impl EndpointStore for DisableBeforeUpdate {
    async fn get(&self, t: &TenantId, id: &EndpointId) -> Result<Option<Endpoint>, PortError> {
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
    async fn update(
        &self,
        t: &TenantId,
        id: &EndpointId,
        u: &EndpointUpdate,
    ) -> Result<(), PortError> {
        self.inner.disable(t, id, "gone (410)").await?;
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

/// PATCH writes only the fields it names: a disable that lands between its read and its
/// write stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_keeps_a_concurrent_disable() {
    let local = deployment_without_pollers("api-patch", options()).await;
    let endpoint = add_endpoint(
        &local,
        "tnt_a",
        "https://receiver.example/old",
        &["*"],
        None,
    )
    .await;
    let mut deps = tern_local::api::deps(&local).expect("deps");
    deps.endpoints = Arc::new(DisableBeforeUpdate {
        inner: local.sender.endpoints.clone(),
    });
    let (api, _server) = ApiClient::serve(deps);
    let answer = api
        .call(
            "PATCH",
            &format!("/v1/tenants/tnt_a/endpoints/{}", endpoint.id),
            Some(&json!({"description": "billing", "timeout_ms": 5000})),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.json["description"], "billing");
    assert_eq!(answer.json["timeout_ms"], 5000);
    assert_eq!(
        answer.json["enabled"], false,
        "the disable stays: {}",
        answer.text
    );
    assert_eq!(answer.json["disabled_reason"], "gone (410)");
    let stored = local
        .sender
        .endpoints
        .get(&endpoint.tenant_id, &endpoint.id)
        .await
        .expect("get")
        .expect("there");
    assert!(!stored.enabled);
    assert_eq!(stored.url, "https://receiver.example/old");
    assert_eq!(stored.secrets, endpoint.secrets);
}

/// Create and update refuse URLs the sender would refuse: private, loopback, link-local
/// (metadata) addresses, literal or behind a name; the problem names `url`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ssrf_guard_refuses_create_and_update() {
    let lookup = Arc::new(tern_http::StaticLookup {
        hosts: [
            (
                "internal.test".to_owned(),
                vec!["10.1.2.3".parse().expect("ip")],
            ),
            (
                "public.test".to_owned(),
                vec!["93.184.216.34".parse().expect("ip")],
            ),
        ]
        .into_iter()
        .collect(),
    });
    let (_local, _rx, api) = api_deployment(
        "api-ssrf",
        LocalOptions {
            // Nothing allowed but public addresses, as in AWS.
            allow_destinations: vec![],
            lookup: Some(lookup),
            ..options()
        },
    )
    .await;
    for url in [
        "http://169.254.169.254/latest/meta-data/",
        "http://127.0.0.1:8080/hook",
        "http://[::1]/hook",
        "http://internal.test/hook",
        "http://10.0.0.1/hook",
        "ftp://public.test/hook",
        "http://user:pw@public.test/hook",
    ] {
        let answer = api
            .post("/v1/tenants/tnt_a/endpoints", &json!({"url": url}))
            .await;
        assert_eq!(
            (answer.status, answer.problem(), answer.field()),
            (400, "validation", "url"),
            "{url}: {}",
            answer.text
        );
    }
    let (id, _) = create(&api, "tnt_a", json!({"url": "http://public.test/hook"})).await;
    let path = format!("/v1/tenants/tnt_a/endpoints/{id}");
    for url in ["http://169.254.169.254/", "http://internal.test/x"] {
        let answer = api.call("PATCH", &path, Some(&json!({"url": url}))).await;
        assert_eq!(
            (answer.status, answer.field()),
            (400, "url"),
            "{url}: {}",
            answer.text
        );
    }
    assert_eq!(api.get(&path).await.json["url"], "http://public.test/hook");
}

/// The rate limit per endpoint (issue 20 item 7) through the API as through the CLI:
/// set at create, read back, changed and removed (`null`) by PATCH, stored as the sender
/// reads it; out of range it is a problem naming `max_per_second`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_is_set_read_changed_and_removed() {
    let (local, _rx, api) = api_deployment("api-rate-limit", options()).await;
    let (id, _) = create(
        &api,
        "tnt_a",
        json!({"url": "http://127.0.0.1:9/hook", "max_per_second": 10}),
    )
    .await;
    let path = format!("/v1/tenants/tnt_a/endpoints/{id}");
    // The table itself, not the sender's cache of it.
    let store = local.endpoint_table();
    let stored = async || {
        store
            .get(
                &TenantId::new("tnt_a").expect("tenant"),
                &EndpointId::new(id.as_str()).expect("id"),
            )
            .await
            .expect("get")
            .expect("there")
            .max_per_second
    };
    assert_eq!(api.get(&path).await.json["max_per_second"], 10);
    assert_eq!(stored().await, Some(10));
    let answer = api
        .call("PATCH", &path, Some(&json!({"max_per_second": 3})))
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.json["max_per_second"], 3);
    assert_eq!(stored().await, Some(3));
    // A PATCH without it keeps it.
    let answer = api
        .call("PATCH", &path, Some(&json!({"description": "billing"})))
        .await;
    assert_eq!(answer.json["max_per_second"], 3, "{}", answer.text);
    let answer = api
        .call("PATCH", &path, Some(&json!({"max_per_second": null})))
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.json["max_per_second"], Value::Null);
    assert_eq!(stored().await, None);
    for (method, target, body) in [
        (
            "POST",
            "/v1/tenants/tnt_a/endpoints".to_owned(),
            json!({"url": "http://127.0.0.1:9/", "max_per_second": 0}),
        ),
        ("PATCH", path.clone(), json!({"max_per_second": 1001})),
    ] {
        let answer = api.call(method, &target, Some(&body)).await;
        assert_eq!(
            (answer.status, answer.field()),
            (400, "max_per_second"),
            "{method} {body}: {}",
            answer.text
        );
    }
    assert_eq!(stored().await, None, "a refused PATCH changes nothing");
}

/// Mutual TLS: the client certificate's secret ARN is set at creation, changed, shown and
/// removed; an ARN outside the tenant's own `tern/mtls/<tenant id>/`, or not a Secrets
/// Manager ARN, is refused (issue 27: another tenant's secret is refused the same way
/// whether or not it exists).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_certificate_arn_is_set_shown_changed_and_removed() {
    let (local, _rx, api) = api_deployment("api-mtls", options()).await;
    let arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:tern/mtls/tnt_a/acme-AbCdEf";
    let (id, _) = create(
        &api,
        "tnt_a",
        json!({"url": "http://127.0.0.1:9/hook", "client_certificate_arn": arn}),
    )
    .await;
    let path = format!("/v1/tenants/tnt_a/endpoints/{id}");
    let store = local.endpoint_table();
    let stored = async || {
        store
            .get(
                &TenantId::new("tnt_a").expect("tenant"),
                &EndpointId::new(id.as_str()).expect("id"),
            )
            .await
            .expect("get")
            .expect("there")
            .client_certificate
            .map(|c| c.secret_arn)
    };
    assert_eq!(api.get(&path).await.json["client_certificate_arn"], arn);
    assert_eq!(stored().await.as_deref(), Some(arn));
    let other =
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:tern/mtls/tnt_a/acme-2-XyZ123";
    let answer = api
        .call(
            "PATCH",
            &path,
            Some(&json!({"client_certificate_arn": other})),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.json["client_certificate_arn"], other);
    for bad in [
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/database",
        "tern/mtls/tnt_a/acme",
        // Under tern/mtls/ but not tnt_a's own: another tenant's, the tenant-less form.
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:tern/mtls/tnt_b/acme-AbCdEf",
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:tern/mtls/tnt_a-2/x",
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:tern/mtls/acme-AbCdEf",
    ] {
        let answer = api
            .call(
                "PATCH",
                &path,
                Some(&json!({"client_certificate_arn": bad})),
            )
            .await;
        assert_eq!(
            (answer.status, answer.field()),
            (400, "client_certificate_arn"),
            "{bad}: {}",
            answer.text
        );
    }
    assert_eq!(
        stored().await.as_deref(),
        Some(other),
        "a refused PATCH changes nothing"
    );
    let answer = api
        .call(
            "PATCH",
            &path,
            Some(&json!({"client_certificate_arn": null})),
        )
        .await;
    assert_eq!(
        answer.json["client_certificate_arn"],
        Value::Null,
        "{}",
        answer.text
    );
    assert_eq!(stored().await, None);
}

/// Problems: `application/problem+json`, a stable type, the field at fault, no internals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn problems_name_the_field_at_fault() {
    let (_local, _rx, api) = api_deployment("api-problems", options()).await;
    let (id, _) = create(&api, "tnt_a", json!({"url": "http://127.0.0.1:9/hook"})).await;
    let ep = format!("/v1/tenants/tnt_a/endpoints/{id}");
    let cases: Vec<(&str, String, Value, u16, &str, &str)> = vec![
        (
            "POST",
            "/v1/tenants/tnt_a/endpoints".into(),
            json!({"event_types": ["*"]}),
            400,
            "validation",
            "url",
        ),
        (
            "POST",
            "/v1/tenants/tnt_a/endpoints".into(),
            json!({"url": "http://127.0.0.1:9/", "timeout_ms": 10}),
            400,
            "validation",
            "timeout_ms",
        ),
        (
            "POST",
            "/v1/tenants/tnt_a/endpoints".into(),
            json!({"url": "http://127.0.0.1:9/", "timeout_ms": "soon"}),
            400,
            "validation",
            "timeout_ms",
        ),
        (
            "POST",
            "/v1/tenants/tnt_a/endpoints".into(),
            json!({"url": "http://127.0.0.1:9/", "event_types": ["bad type!"]}),
            400,
            "validation",
            "event_types",
        ),
        (
            "POST",
            "/v1/tenants/tnt_a/endpoints".into(),
            json!({"url": "http://127.0.0.1:9/", "schedule_seconds": [0]}),
            400,
            "validation",
            "schedule_seconds",
        ),
        (
            "POST",
            "/v1/tenants/tnt_a/endpoints".into(),
            json!({"url": "http://127.0.0.1:9/", "max_attempts": 0}),
            400,
            "validation",
            "max_attempts",
        ),
        (
            "POST",
            "/v1/tenants/tnt_a/endpoints".into(),
            json!({"url": "http://127.0.0.1:9/", "colour": "red"}),
            400,
            "validation",
            "colour",
        ),
        (
            "POST",
            "/v1/tenants/tnt a/endpoints".replace(' ', "%20"),
            json!({"url": "http://127.0.0.1:9/"}),
            400,
            "validation",
            "tenant_id",
        ),
        ("PATCH", ep.clone(), json!({}), 400, "validation", ""),
        (
            "PATCH",
            ep.clone(),
            json!({"payload_format": "xml"}),
            400,
            "validation",
            "payload_format",
        ),
        (
            "POST",
            format!("{ep}/rotate-secret"),
            json!({"overlap_hours": 1000}),
            400,
            "validation",
            "overlap_hours",
        ),
        (
            "POST",
            format!("{ep}/recover"),
            json!({"since": "yesterday"}),
            400,
            "validation",
            "since",
        ),
        (
            "POST",
            "/v1/tenants/tnt_a/events".into(),
            json!({"type": "order.paid", "payload": [1, 2]}),
            400,
            "validation",
            "payload",
        ),
        (
            "POST",
            "/v1/tenants/tnt_a/events".into(),
            json!({"type": "order paid", "payload": {}}),
            400,
            "validation",
            "type",
        ),
        (
            "POST",
            "/v1/tenants/tnt_a/events".into(),
            json!({"id": "evt.dots", "type": "a", "payload": {}}),
            400,
            "validation",
            "id",
        ),
        (
            "POST",
            "/v1/tenants/tnt_a/events".into(),
            json!({"type": "a"}),
            400,
            "validation",
            "payload",
        ),
        (
            "POST",
            "/v1/tenants/tnt_a/dead-letters/replay".into(),
            json!({"reason": "bored"}),
            400,
            "validation",
            "reason",
        ),
        (
            "GET",
            format!("{ep}/attempts?outcome=maybe"),
            Value::Null,
            400,
            "validation",
            "outcome",
        ),
        (
            "GET",
            format!("{ep}/attempts?since=2026-12-01T10:00:00Z&until=2026-12-01T09:00:00Z"),
            Value::Null,
            400,
            "validation",
            "until",
        ),
        (
            "GET",
            "/v1/tenants/tnt_a/endpoints/ep_missing".into(),
            Value::Null,
            404,
            "not-found",
            "",
        ),
        (
            "GET",
            "/v1/tenants/tnt_a/nothing-here".into(),
            Value::Null,
            404,
            "not-found",
            "",
        ),
        ("PUT", ep.clone(), json!({}), 405, "method-not-allowed", ""),
    ];
    for (method, path, body, status, kind, field) in cases {
        let answer = api
            .call(method, &path, (!body.is_null()).then_some(&body))
            .await;
        assert_eq!(
            (answer.status, answer.problem(), answer.field()),
            (status, kind, field),
            "{method} {path} {body}: {}",
            answer.text
        );
        assert_eq!(answer.content_type, "application/problem+json", "{path}");
        assert_eq!(answer.json["status"], status);
        assert!(answer.json["title"].is_string() && answer.json["detail"].is_string());
    }
    // Not JSON; too large (a payload over 256 KiB, with its JSON escaping).
    let not_json = api
        .raw(
            "POST",
            "/v1/tenants/tnt_a/events",
            b"type=x".to_vec(),
            Some("text/plain"),
            true,
        )
        .await;
    assert_eq!(
        (not_json.status, not_json.problem()),
        (415, "unsupported-media-type")
    );
    let fits = format!(
        r#"{{"type":"big","payload":{{"s":"{}"}}}}"#,
        "\\\"".repeat(60 * 1024)
    );
    let answer = api
        .raw(
            "POST",
            "/v1/tenants/tnt_a/events",
            fits.into_bytes(),
            Some("application/json"),
            true,
        )
        .await;
    assert_eq!(
        answer.status, 202,
        "a 120 KiB escaped payload fits: {}",
        answer.text
    );
    let over = format!(
        r#"{{"type":"big","payload":{{"s":"{}"}}}}"#,
        "x".repeat(300 * 1024)
    );
    let answer = api
        .raw(
            "POST",
            "/v1/tenants/tnt_a/events",
            over.into_bytes(),
            Some("application/json"),
            true,
        )
        .await;
    assert_eq!(
        (answer.status, answer.problem()),
        (413, "payload-too-large"),
        "{}",
        answer.text
    );
}

/// A secret appears in two answers only: the endpoint's creation and a rotation. Every
/// other answer shows fingerprints; the rotated secret signs at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_appear_only_at_create_and_rotate() {
    let receiver = Receiver::start().await.expect("receiver");
    let (_local, _rx, api) = api_deployment("api-secrets", options()).await;
    let answer = api
        .post(
            "/v1/tenants/tnt_a/endpoints",
            &json!({"url": receiver.url("/hook")}),
        )
        .await;
    let (id, first) = created(&answer);
    assert!(answer.text.contains(first.expose()));
    let ep = format!("/v1/tenants/tnt_a/endpoints/{id}");
    let rotated = api
        .post(&format!("{ep}/rotate-secret"), &json!({"overlap_hours": 2}))
        .await;
    assert_eq!(rotated.status, 200, "{}", rotated.text);
    let second = Secret::parse(rotated.json["secret"].as_str().expect("secret")).expect("whsec_");
    assert_eq!(
        rotated.json["endpoint"]["secrets"].as_array().map(Vec::len),
        Some(2)
    );
    assert_eq!(
        rotated.text.matches("whsec_").count(),
        1,
        "only the new secret: {}",
        rotated.text
    );
    let published = api
        .post(
            "/v1/tenants/tnt_a/events",
            &json!({"id": "evt_secret", "type": "order.paid", "payload": {"n": 1}}),
        )
        .await;
    assert_eq!(published.status, 202);
    let got = receiver.wait_for("/hook", 1, WAIT).await;
    // Both secrets sign during the overlap.
    verify_reference(&first, &got[0]).expect("old secret");
    verify_reference(&second, &got[0]).expect("new secret");
    let test = api.post(&format!("{ep}/test"), &json!({})).await;
    let others = [
        api.get(&ep).await,
        api.get("/v1/tenants/tnt_a/endpoints").await,
        api.get(&format!("{ep}/health")).await,
        api.get(&format!("{ep}/attempts")).await,
        api.call("PATCH", &ep, Some(&json!({"description": "x"})))
            .await,
        api.post(&format!("{ep}/disable"), &json!({})).await,
        api.post(&format!("{ep}/enable"), &json!({})).await,
        api.get("/v1/tenants/tnt_a/events/evt_secret").await,
        api.get("/v1/tenants/tnt_a/events/evt_secret/attempts")
            .await,
        api.get("/v1/tenants/tnt_a/dead-letters").await,
        test,
    ];
    for answer in others {
        assert!(answer.status < 300, "{}", answer.text);
        assert!(
            !answer.text.contains("whsec_")
                && !answer.text.contains(first.expose())
                && !answer.text.contains(second.expose()),
            "a secret leaked: {}",
            answer.text
        );
    }
}

/// Unsigned, badly signed, tampered and stale requests are 403 `signature-refused` on
/// every path, a path that is no route included, as API Gateway's IAM authorization
/// answers them (issue 27: they were 401, and a signature 15 minutes old passed where API
/// Gateway allows 5); a key scoped to one tenant gets 403 `forbidden` on another's paths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_and_badly_signed_requests_are_refused() {
    let (mut local, _rx) = deployment("api-auth", options()).await;
    let scoped = LocalCredential {
        access_key_id: "AKIDTENANTA".into(),
        secret_access_key: "tenant-a-secret".into(),
        tenant: Some(TenantId::new("tnt_a").expect("tenant")),
    };
    let mut keys = tern_local::api::local_credentials();
    keys.push(scoped.clone());
    local.start_api(0, keys).expect("api");
    let api = ApiClient::of(&local);
    let body = br#"{"url":"http://127.0.0.1:9/hook"}"#.to_vec();
    for path in [
        "/v1/tenants/tnt_a/endpoints",
        "/v1/tenants/tnt_a/events/evt_1",
        "/v1/nowhere",
        "/",
    ] {
        let answer = api.raw("GET", path, vec![], None, false).await;
        assert_eq!(
            (answer.status, answer.problem()),
            (403, "signature-refused"),
            "{path}"
        );
    }
    let wrong = api.with(LocalCredential {
        secret_access_key: "not-the-secret".into(),
        ..tern_local::api::local_credentials().remove(0)
    });
    let answer = wrong
        .raw(
            "POST",
            "/v1/tenants/tnt_a/endpoints",
            body.clone(),
            Some("application/json"),
            true,
        )
        .await;
    assert_eq!(
        (answer.status, answer.problem()),
        (403, "signature-refused"),
        "{}",
        answer.text
    );
    let unknown = api.with(LocalCredential {
        access_key_id: "AKIDUNKNOWN".into(),
        ..tern_local::api::local_credentials().remove(0)
    });
    assert_eq!(unknown.get("/v1/tenants/tnt_a/endpoints").await.status, 403);
    // A body changed after signing.
    let host = api.base.trim_start_matches("http://").to_owned();
    let signed = tern_api::sigv4::sign_request(
        &api.credential,
        "us-east-1",
        "POST",
        "/v1/tenants/tnt_a/endpoints",
        &[("host", &host), ("content-type", "application/json")],
        &body,
        std::time::SystemTime::now(),
    )
    .expect("sign");
    let mut tampered = reqwest::Client::new()
        .post(format!("{}/v1/tenants/tnt_a/endpoints", api.base))
        .header("content-type", "application/json")
        .body(br#"{"url":"http://127.0.0.1:10/hook"}"#.to_vec());
    for (k, v) in &signed {
        tampered = tampered.header(k, v);
    }
    assert_eq!(tampered.send().await.expect("send").status().as_u16(), 403);
    // Signed 6 minutes ago (past the 5 minutes API Gateway allows) or 6 minutes ahead:
    // refused; 4 minutes either way: accepted.
    let signed_at = async |offset_seconds: i64| {
        let now = std::time::SystemTime::now();
        let at = if offset_seconds < 0 {
            now - Duration::from_secs(offset_seconds.unsigned_abs())
        } else {
            now + Duration::from_secs(offset_seconds.unsigned_abs())
        };
        let signed = tern_api::sigv4::sign_request(
            &api.credential,
            "us-east-1",
            "GET",
            "/v1/tenants/tnt_a/endpoints",
            &[("host", &host)],
            b"",
            at,
        )
        .expect("sign");
        let mut request =
            reqwest::Client::new().get(format!("{}/v1/tenants/tnt_a/endpoints", api.base));
        for (k, v) in &signed {
            request = request.header(k, v);
        }
        request.send().await.expect("send").status().as_u16()
    };
    assert_eq!(signed_at(-6 * 60).await, 403, "6 minutes old");
    assert_eq!(signed_at(6 * 60).await, 403, "6 minutes ahead");
    assert_eq!(signed_at(-4 * 60).await, 200, "4 minutes old");
    assert_eq!(signed_at(4 * 60).await, 200, "4 minutes ahead");
    // The scoped key: its tenant yes, another tenant no (403, as an IAM policy denial).
    let tenant_a = api.with(scoped);
    assert_eq!(
        tenant_a.get("/v1/tenants/tnt_a/endpoints").await.status,
        200
    );
    let other = tenant_a.get("/v1/tenants/tnt_b/endpoints").await;
    assert_eq!((other.status, other.problem()), (403, "forbidden"));
    // The right key works.
    assert_eq!(
        api.raw(
            "POST",
            "/v1/tenants/tnt_a/endpoints",
            body,
            Some("application/json"),
            true
        )
        .await
        .status,
        201
    );
}

fn curl(args: &[&str]) -> (u16, String) {
    let out = std::process::Command::new("curl")
        .args(["--silent", "--show-error", "--write-out", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("curl is required for this test (docs/api.md's example uses it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').expect("status line");
    (code.trim().parse().expect("status"), body.to_owned())
}

/// docs/api.md's worked example, run as written: `curl --aws-sigv4` with the keys of
/// `.tern/local.env` creates an endpoint, publishes an event and reads it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_curl_example_works() {
    let receiver = Receiver::start().await.expect("receiver");
    let (local, _rx, api) = api_deployment("api-curl", options()).await;
    let get = |k: &str| {
        local
            .env
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .expect(k)
    };
    let base = get("TERN_API_URL");
    assert_eq!(base, api.base);
    let user = format!(
        "{}:{}",
        tern_local::api::LOCAL_ACCESS_KEY_ID,
        tern_local::api::LOCAL_SECRET_ACCESS_KEY
    );
    let sigv4 = [
        "--aws-sigv4",
        "aws:amz:us-east-1:execute-api",
        "--user",
        &user,
    ];
    let endpoint_body =
        json!({"url": receiver.url("/hook"), "event_types": ["order.paid"]}).to_string();
    let mut args: Vec<&str> = sigv4.to_vec();
    let url = format!("{base}/v1/tenants/tnt_acme/endpoints");
    args.extend([
        "-H",
        "content-type: application/json",
        "--data",
        &endpoint_body,
        &url,
    ]);
    let (status, body) = curl(&args);
    assert_eq!(status, 201, "{body}");
    let secret: Value = serde_json::from_str(&body).expect("json");
    let secret = Secret::parse(secret["secret"].as_str().expect("secret")).expect("whsec_");
    let event =
        r#"{"id":"evt_curl_1","type":"order.paid","payload":{"order_id":"o_1","amount":4200}}"#;
    let url = format!("{base}/v1/tenants/tnt_acme/events");
    let mut args: Vec<&str> = sigv4.to_vec();
    args.extend([
        "-H",
        "content-type: application/json",
        "--data",
        event,
        &url,
    ]);
    let (status, body) = curl(&args);
    assert_eq!(status, 202, "{body}");
    let got = receiver.wait_for("/hook", 1, WAIT).await;
    assert_eq!(&got[0].body[..], br#"{"order_id":"o_1","amount":4200}"#);
    verify_reference(&secret, &got[0]).expect("signature");
    let url = format!("{base}/v1/tenants/tnt_acme/events/evt_curl_1");
    let mut delivered = false;
    for _ in 0..100 {
        let mut args: Vec<&str> = sigv4.to_vec();
        args.push(&url);
        let (status, body) = curl(&args);
        assert_eq!(status, 200, "{body}");
        if body.contains(r#""state":"delivered""#) {
            delivered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(delivered, "GET the event shows the delivery");
    // Without --aws-sigv4: refused, as API Gateway refuses it.
    let (status, body) = curl(&[&url]);
    assert_eq!(status, 403, "{body}");
}

/// Resend: a delivered event goes to the endpoint again, with the same webhook-id and a
/// valid signature, recorded as a replay (replay count 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resend_sends_a_delivered_event_again() {
    let receiver = Receiver::start().await.expect("receiver");
    let (_local, _rx, api) = api_deployment("api-resend", options()).await;
    let (id, secret) = create(&api, "tnt_a", json!({"url": receiver.url("/hook")})).await;
    let published = api
        .post(
            "/v1/tenants/tnt_a/events",
            &json!({"id": "evt_resend", "type": "order.paid", "payload": {"n": 1}}),
        )
        .await;
    assert_eq!(published.status, 202);
    receiver.wait_for("/hook", 1, WAIT).await;
    let event_path = "/v1/tenants/tnt_a/events/evt_resend";
    assert!(
        eventually(WAIT, async || {
            api.get(event_path).await.json["deliveries"][0]["state"] == "delivered"
        })
        .await
    );
    let resend = api
        .post(&format!("{event_path}/endpoints/{id}/resend"), &json!({}))
        .await;
    assert_eq!(resend.status, 202, "{}", resend.text);
    assert_eq!(resend.json["previous_state"], "delivered");
    assert_eq!(resend.json["replay_count"], 1);
    let got = receiver.wait_for("/hook", 2, WAIT).await;
    assert_eq!(got.len(), 2, "sent again although delivered");
    assert_eq!(got[1].header("webhook-id"), Some("evt_resend"));
    assert_eq!(got[1].body, got[0].body);
    verify_reference(&secret, &got[1]).expect("signature");
    // Recorded: the first success and the resend's, replay 0 and 1.
    assert!(
        eventually(WAIT, async || {
            api.get(&format!("{event_path}/attempts")).await.json["attempts"]
                .as_array()
                .is_some_and(|a| a.len() == 2)
        })
        .await
    );
    let attempts = api.get(&format!("{event_path}/attempts")).await;
    let replays: Vec<u64> = attempts.json["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| a["replay_count"].as_u64().unwrap_or(99))
        .collect();
    assert_eq!(replays, [0, 1], "{}", attempts.text);
    let event = api.get(event_path).await;
    assert_eq!(event.json["deliveries"][0]["state"], "delivered");
    assert_eq!(event.json["deliveries"][0]["replay_count"], 1);
    // Once more, then no more: a resend is one budget.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(receiver.requests("/hook").len(), 2);
    // Refused: an endpoint that does not subscribe to the type; a disabled one.
    let (other, _) = create(
        &api,
        "tnt_a",
        json!({"url": receiver.url("/other"), "event_types": ["user.created"]}),
    )
    .await;
    let refused = api
        .post(
            &format!("{event_path}/endpoints/{other}/resend"),
            &json!({}),
        )
        .await;
    assert_eq!((refused.status, refused.problem()), (409, "not-subscribed"));
    api.post(
        &format!("/v1/tenants/tnt_a/endpoints/{id}/disable"),
        &json!({}),
    )
    .await;
    let refused = api
        .post(&format!("{event_path}/endpoints/{id}/resend"), &json!({}))
        .await;
    assert_eq!(
        (refused.status, refused.problem()),
        (409, "endpoint-disabled")
    );
}

/// Recover: after an outage, the endpoint's dead letter and its delivery still waiting
/// for a retry (12 s away) are both sent again at once; a delivery that succeeded is not.
/// The queued retry, when it comes, is dropped as a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_sends_dead_letters_and_waiting_deliveries_again() {
    let receiver = Receiver::start().await.expect("receiver");
    // Time scale 0.004: the endpoint cache (30 s scaled) forgets a settings change in
    // 0.12 s, a retry scheduled 3,000 s out comes 12 s later.
    let (local, _rx, api) = api_deployment(
        "api-recover",
        LocalOptions {
            time_scale: 0.004,
            ..options()
        },
    )
    .await;
    let t0 = chrono::Utc::now() - chrono::Duration::seconds(1);
    let (id, secret) = create(
        &api,
        "tnt_a",
        json!({"url": receiver.url("/hook"), "max_attempts": 1}),
    )
    .await;
    let ep = format!("/v1/tenants/tnt_a/endpoints/{id}");
    let publish = async |event: &str| {
        let a = api
            .post(
                "/v1/tenants/tnt_a/events",
                &json!({"id": event, "type": "order.paid", "payload": {"e": event}}),
            )
            .await;
        assert_eq!(a.status, 202, "{}", a.text);
    };
    // Delivered before the outage.
    publish("evt_ok").await;
    receiver.wait_for("/hook", 1, WAIT).await;
    // The outage: one attempt allowed, so evt_dead is dead-lettered `exhausted`.
    receiver.set("/hook", Behavior::Always(Reply::status(500)));
    publish("evt_dead").await;
    let state = |event: &'static str| {
        let api = api.clone();
        async move {
            api.get(&format!("/v1/tenants/tnt_a/events/{event}"))
                .await
                .json["deliveries"][0]["state"]
                .clone()
        }
    };
    assert!(eventually(WAIT, async || state("evt_dead").await == "dead_lettered").await);
    // Then two attempts, the retry 3,000 s (12 s real) away: evt_wait is still waiting.
    let patched = api
        .call(
            "PATCH",
            &ep,
            Some(&json!({"max_attempts": 2, "schedule_seconds": [3000]})),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.text);
    tokio::time::sleep(Duration::from_millis(600)).await;
    publish("evt_wait").await;
    assert!(eventually(WAIT, async || state("evt_wait").await == "retrying").await);
    let retry_due = tokio::time::Instant::now() + Duration::from_secs(12);
    // The endpoint log's line is written after the pair's state (one write per batch, at
    // its end): on a loaded machine it can come a moment after `retrying` reads back.
    let mut failed = None;
    assert!(
        eventually(WAIT, async || {
            let answer = api.get(&format!("{ep}/attempts?outcome=failed")).await;
            let n = answer.json["items"].as_array().map(Vec::len);
            failed = Some(answer.text);
            n == Some(2)
        })
        .await,
        "two failed attempts in the endpoint log: {failed:?}"
    );

    // The receiver is back; recover from before the outage.
    receiver.set("/hook", Behavior::Always(Reply::status(200)));
    let report = api
        .post(&format!("{ep}/recover"), &json!({"since": t0.to_rfc3339()}))
        .await;
    assert_eq!(report.status, 200, "{}", report.text);
    assert_eq!(
        report.json["dead_letters"]["replayed"], 1,
        "{}",
        report.text
    );
    assert_eq!(
        report.json["waiting"]["still_waiting"], 1,
        "{}",
        report.text
    );
    assert_eq!(report.json["waiting"]["resent"][0]["event_id"], "evt_wait");
    assert_eq!(report.json["waiting"]["complete"], true);
    let got = receiver.wait_for("/hook", 6, WAIT).await;
    let ok: Vec<&str> = got
        .iter()
        .filter(|r| r.answered == 200)
        .filter_map(|r| r.header("webhook-id"))
        .collect();
    assert!(
        ok.contains(&"evt_dead") && ok.contains(&"evt_wait"),
        "{ok:?}"
    );
    assert_eq!(
        ok.iter().filter(|i| **i == "evt_ok").count(),
        1,
        "not sent again: {ok:?}"
    );
    for r in got.iter().filter(|r| r.answered == 200) {
        verify_reference(&secret, r).expect("signature");
    }
    assert!(eventually(WAIT, async || state("evt_dead").await == "delivered").await);
    assert!(eventually(WAIT, async || state("evt_wait").await == "delivered").await);
    // The queued retry of evt_wait's first budget comes due (12 s after its failure) and
    // is dropped: the resend's claim outranks it.
    tokio::time::sleep_until(retry_due).await;
    assert!(
        eventually(WAIT, async || peek_queue(
            &local,
            &local.resources.delivery_queue_url
        )
        .await
        .is_empty())
        .await,
        "the old retry was taken off the queue"
    );
    let evt_wait_200s = receiver
        .requests("/hook")
        .iter()
        .filter(|r| r.answered == 200 && r.header("webhook-id") == Some("evt_wait"))
        .count();
    assert_eq!(
        evt_wait_200s, 1,
        "delivered once, not again by the old retry"
    );
    // A disabled endpoint: refused, unless the recover enables it.
    api.post(&format!("{ep}/disable"), &json!({})).await;
    let refused = api
        .post(&format!("{ep}/recover"), &json!({"since": t0.to_rfc3339()}))
        .await;
    assert_eq!(
        (refused.status, refused.problem()),
        (409, "endpoint-disabled")
    );
    let enabled = api
        .post(
            &format!("{ep}/recover"),
            &json!({"since": t0.to_rfc3339(), "enable": true}),
        )
        .await;
    assert_eq!(enabled.status, 200, "{}", enabled.text);
    assert_eq!(enabled.json["enabled"], true);
    assert_eq!(
        enabled.json["waiting"]["still_waiting"], 0,
        "{}",
        enabled.text
    );
}

/// The test send: a `tern.test` event signed like a delivery, the receiver's answer
/// returned at once; a receiver that is down is a result, not an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_send_returns_the_receivers_answer() {
    let receiver = Receiver::start().await.expect("receiver");
    receiver.set(
        "/hook",
        Behavior::Always(Reply {
            status: 200,
            headers: vec![],
            body: b"thanks, got it".to_vec(),
        }),
    );
    let (_local, _rx, api) = api_deployment("api-test-send", options()).await;
    let (id, secret) = create(
        &api,
        "tnt_a",
        json!({"url": receiver.url("/hook"), "payload_format": "standard_webhooks"}),
    )
    .await;
    let sent = api
        .post(
            &format!("/v1/tenants/tnt_a/endpoints/{id}/test"),
            &json!({}),
        )
        .await;
    assert_eq!(sent.status, 200, "{}", sent.text);
    assert_eq!(sent.json["delivered"], true);
    assert_eq!(sent.json["status"], 200);
    assert_eq!(sent.json["response_excerpt"], "thanks, got it");
    assert!(sent.json["latency_ms"].is_u64());
    let got = receiver.requests("/hook");
    assert_eq!(
        got.len(),
        1,
        "synchronous: the POST was made before the answer"
    );
    assert_eq!(got[0].header("webhook-id"), sent.json["event_id"].as_str());
    assert_eq!(got[0].header("webhook-event-type"), Some("tern.test"));
    verify_reference(&secret, &got[0]).expect("signed like any delivery");
    let envelope: Value = serde_json::from_slice(&got[0].body).expect("json");
    assert_eq!(envelope["type"], "tern.test");
    // Nothing recorded as a delivery.
    let log = api
        .get(&format!("/v1/tenants/tnt_a/endpoints/{id}/attempts"))
        .await;
    assert_eq!(log.json["items"], json!([]), "{}", log.text);
    // A receiver that refuses connections.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let (down, _) = create(
        &api,
        "tnt_a",
        json!({"url": format!("http://127.0.0.1:{port}/hook")}),
    )
    .await;
    let sent = api
        .post(
            &format!("/v1/tenants/tnt_a/endpoints/{down}/test"),
            &json!({}),
        )
        .await;
    assert_eq!(sent.status, 200, "{}", sent.text);
    assert_eq!(sent.json["delivered"], false);
    assert_eq!(sent.json["status"], Value::Null);
    assert_eq!(sent.json["error_class"], "connect", "{}", sent.text);
}

/// The delivery log by endpoint: newest first, filtered by outcome and time, a page at a
/// time, each attempt once; the event shows each delivery's state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_log_pages_newest_first_by_outcome() {
    let receiver = Receiver::start().await.expect("receiver");
    // Three failures that say why (a tab in the text: the log line is tab-separated), then
    // successes.
    let mut script = vec![Reply::status(500).body("db down\tretry later"); 3];
    script.push(Reply::status(200));
    receiver.set("/flaky", Behavior::Script(script));
    let (_local, _rx, api) = api_deployment("api-log", options()).await;
    let (id, _) = create(
        &api,
        "tnt_a",
        json!({"url": receiver.url("/flaky"), "schedule_seconds": [600, 600, 600, 600]}),
    )
    .await;
    let ep = format!("/v1/tenants/tnt_a/endpoints/{id}");
    // One at a time, so the receiver's first three answers (500) go to the first event.
    for i in 0..5 {
        let event = format!("evt_log_{i}");
        let a = api
            .post(
                "/v1/tenants/tnt_a/events",
                &json!({"id": event, "type": "order.paid", "payload": {"i": i}}),
            )
            .await;
        assert_eq!(a.status, 202);
        let path = format!("/v1/tenants/tnt_a/events/{event}");
        assert!(
            eventually(
                WAIT,
                async || api.get(&path).await.json["deliveries"][0]["state"] == "delivered"
            )
            .await,
            "{event} delivered"
        );
    }
    // 3 failures + 5 successes, in the log once each, newest first.
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..20 {
        let path = match &cursor {
            Some(c) => format!("{ep}/attempts?limit=3&cursor={c}"),
            None => format!("{ep}/attempts?limit=3"),
        };
        let page = api.get(&path).await;
        assert_eq!(page.status, 200, "{}", page.text);
        all.extend(page.json["items"].as_array().expect("items").clone());
        match page.json["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(all.len(), 8, "{all:#?}");
    let times: Vec<&str> = all
        .iter()
        .map(|a| a["started_at"].as_str().unwrap_or(""))
        .collect();
    let starts: Vec<chrono::DateTime<chrono::Utc>> =
        times.iter().map(|t| t.parse().expect("time")).collect();
    assert!(
        starts.windows(2).all(|w| w[0] >= w[1]),
        "newest first: {times:?}"
    );
    assert_eq!(all[0]["event_id"], "evt_log_4");
    let failed = api.get(&format!("{ep}/attempts?outcome=failed")).await;
    let failed = failed.json["items"].as_array().expect("items").clone();
    assert_eq!(failed.len(), 3);
    assert!(
        failed
            .iter()
            .all(|a| a["event_id"] == "evt_log_0" && a["status"] == 500)
    );
    // Each failure says what the receiver answered (issue 28: the log had no response text).
    assert!(
        failed
            .iter()
            .all(|a| a["response_excerpt"] == "db down retry later"),
        "{failed:#?}"
    );
    let delivered = api.get(&format!("{ep}/attempts?outcome=delivered")).await;
    assert_eq!(delivered.json["items"].as_array().map(Vec::len), Some(5));
    assert!(
        delivered.json["items"]
            .as_array()
            .is_some_and(|items| items.iter().all(|a| a["response_excerpt"].is_null())),
        "{}",
        delivered.text
    );
    // A window after everything: empty; one ending before the last event's attempt: not it.
    let later = (chrono::Utc::now() + chrono::Duration::minutes(1)).to_rfc3339();
    let none = api
        .get(&format!(
            "{ep}/attempts?since={}",
            later.replace('+', "%2B")
        ))
        .await;
    assert_eq!(none.json["items"], json!([]), "{}", none.text);
    let last_start = starts[0].to_rfc3339();
    let before = api
        .get(&format!(
            "{ep}/attempts?until={}",
            last_start.replace('+', "%2B")
        ))
        .await;
    let items = before.json["items"].as_array().expect("items");
    assert_eq!(items.len(), 7, "{}", before.text);
    assert!(items.iter().all(|a| a["event_id"] != "evt_log_4"));
    // The event with three failures then a success: its attempts, oldest first.
    let attempts = api.get("/v1/tenants/tnt_a/events/evt_log_0/attempts").await;
    let outcomes: Vec<&str> = attempts.json["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| a["outcome"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(outcomes, ["retry", "retry", "retry", "delivered"]);
    // Each retry is due after its wait at the deployment's time scale (0.001: 600 s are
    // 0.6 s), as the sender waited, not 600 s later (issue 28: local mode showed unscaled
    // times).
    for a in attempts.json["attempts"].as_array().expect("attempts") {
        if a["outcome"] != "retry" {
            assert!(a["next_attempt_due_at"].is_null(), "{a}");
            continue;
        }
        // The schedule's wait, jittered.
        assert!(
            a["next_wait_seconds"].as_u64().is_some_and(|w| w >= 500),
            "{a}"
        );
        let started: chrono::DateTime<chrono::Utc> = a["started_at"]
            .as_str()
            .expect("start")
            .parse()
            .expect("time");
        let due: chrono::DateTime<chrono::Utc> = a["next_attempt_due_at"]
            .as_str()
            .expect("a due time")
            .parse()
            .expect("time");
        assert!(
            due - started < chrono::Duration::seconds(60),
            "due {due}, started {started}: unscaled"
        );
    }
    let event = api.get("/v1/tenants/tnt_a/events/evt_log_0").await;
    assert_eq!(event.json["type"], "order.paid");
    assert_eq!(event.json["payload"], json!({"i": 0}));
    assert_eq!(event.json["deliveries"][0]["attempt"], 4);
}

/// Issue 28: a time without an offset got "premature end of input at line 1 column 37";
/// now the problem names the field and says what to change, in a body and in a query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_time_without_an_offset_gets_an_error_that_says_so() {
    let (_local, _rx, api) = api_deployment("api-times", options()).await;
    let (id, _) = create(&api, "tnt_a", json!({"url": "http://127.0.0.1:9/hook"})).await;
    let ep = format!("/v1/tenants/tnt_a/endpoints/{id}");
    let body = api
        .post(
            &format!("{ep}/recover"),
            &json!({"since": "2026-12-01T09:00:00"}),
        )
        .await;
    assert_eq!(
        (body.status, body.problem(), body.field()),
        (400, "validation", "since"),
        "{}",
        body.text
    );
    assert!(body.text.contains("no offset: add Z"), "{}", body.text);
    assert!(!body.text.contains("premature end"), "{}", body.text);
    let query = api
        .get(&format!("{ep}/attempts?since=2026-12-01T09%3A00%3A00"))
        .await;
    assert_eq!(
        (query.status, query.problem()),
        (400, "validation"),
        "{}",
        query.text
    );
    assert!(query.text.contains("no offset: add Z"), "{}", query.text);
    let replay = api
        .post(
            "/v1/tenants/tnt_a/dead-letters/replay",
            &json!({"dead_lettered_since": "soon", "dry_run": true}),
        )
        .await;
    assert_eq!(
        (replay.status, replay.field()),
        (400, "dead_lettered_since"),
        "{}",
        replay.text
    );
    assert!(
        replay.text.contains("2026-12-01T09:00:00Z"),
        "{}",
        replay.text
    );
    // With the offset, accepted.
    let fine = api
        .get(&format!("{ep}/attempts?since=2026-12-01T09%3A00%3A00Z"))
        .await;
    assert_eq!(fine.status, 200, "{}", fine.text);
}

/// Issue 28: a create retried after a timeout made a second endpoint with a second secret,
/// and every event then went out twice. With an `Idempotency-Key` (as Stripe and Svix
/// honour it), the retry answers the first create: the same endpoint and secret,
/// `Idempotent-Replayed: true`, nothing written; concurrent retries write one endpoint
/// (tests/tests/idempotency.rs covers the other POSTs and the record's life);
/// the key with another body is a 422; another tenant's same key is its own. A create
/// without a key is unchanged (two creates, two endpoints).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_create_with_an_idempotency_key_creates_one_endpoint() {
    let receiver = Receiver::start().await.expect("receiver");
    let (_local, _rx, api) = api_deployment("api-idempotency-key", options()).await;
    let body = json!({"url": receiver.url("/hook"), "event_types": ["order.paid"]});
    let key = [("idempotency-key", "3f2b8c1e-7d4a-4e0b-9a57-2c1d5e6f7a80")];
    let path = "/v1/tenants/tnt_a/endpoints";
    let first = api.post_with(path, &body, &key).await;
    assert_eq!(first.status, 201, "{}", first.text);
    assert_eq!(first.header("idempotent-replayed"), None);
    // The retries: the client never saw the first answer; one at a time, then five at once.
    let again = api.post_with(path, &body, &key).await;
    assert_eq!(again.status, 201, "{}", again.text);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.json["endpoint"]["id"], first.json["endpoint"]["id"]);
    assert_eq!(
        again.json["secret"], first.json["secret"],
        "the secret the first answer carried"
    );
    // Concurrent retries: the kept answer, or (while one of them would still run) a 409
    // to retry; never another endpoint.
    let racing = futures::future::join_all((0..5).map(|_| api.post_with(path, &body, &key))).await;
    for r in &racing {
        assert!(
            (r.status, &r.json["endpoint"]["id"]) == (201, &first.json["endpoint"]["id"])
                || (r.status, r.problem()) == (409, "idempotency-key-in-use"),
            "{}",
            r.text
        );
    }
    // The IETF draft's form of the same key (a quoted string) is the same key.
    let quoted = [(
        "idempotency-key",
        "\"3f2b8c1e-7d4a-4e0b-9a57-2c1d5e6f7a80\"",
    )];
    let same = api.post_with(path, &body, &quoted).await;
    assert_eq!(
        same.json["endpoint"]["id"], first.json["endpoint"]["id"],
        "{}",
        same.text
    );
    let listed = api.get(path).await;
    assert_eq!(
        listed.json["items"].as_array().map(Vec::len),
        Some(1),
        "one endpoint: {}",
        listed.text
    );
    // The key with another body: refused, nothing written.
    let other = api
        .post_with(
            path,
            &json!({"url": receiver.url("/other"), "event_types": ["order.paid"]}),
            &key,
        )
        .await;
    assert_eq!(
        (other.status, other.problem(), other.field()),
        (422, "idempotency-key-reused", "Idempotency-Key"),
        "{}",
        other.text
    );
    // Another tenant's same key is its own endpoint.
    let theirs = api
        .post_with("/v1/tenants/tnt_b/endpoints", &body, &key)
        .await;
    assert_eq!(theirs.status, 201, "{}", theirs.text);
    assert_eq!(theirs.header("idempotent-replayed"), None);
    assert_ne!(theirs.json["endpoint"]["id"], first.json["endpoint"]["id"]);
    // Bad keys: a clear 400 naming the header.
    for bad in ["", "a key", &"k".repeat(256)] {
        let answer = api
            .post_with(path, &body, &[("idempotency-key", bad)])
            .await;
        assert_eq!(
            (answer.status, answer.field()),
            (400, "Idempotency-Key"),
            "{bad:?}: {}",
            answer.text
        );
    }
    // Without a key: two creates, two endpoints, as before.
    api.post(path, &body).await;
    api.post(path, &body).await;
    let listed = api.get(path).await;
    assert_eq!(
        listed.json["items"].as_array().map(Vec::len),
        Some(3),
        "{}",
        listed.text
    );
}

/// The API's endpoint health says all that `tern endpoints health --json` says of the
/// endpoint (issue 28: failing since, circuit opened, the receiver's answer, the waiting
/// deliveries and the pace were the CLI's alone), with the same values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_health_says_what_the_cli_says() {
    let policy = tern_core::health::HealthPolicy::default();
    let receiver = Receiver::start().await.expect("receiver");
    receiver.set(
        "/broken",
        Behavior::Always(Reply::status(500).body("upstream database is down")),
    );
    // Real time: the circuit, once open, stays open for the probe interval (60 s), so the
    // two reads below see one state.
    let (local, _rx, api) = api_deployment(
        "api-health",
        LocalOptions {
            time_scale: 1.0,
            health: Some(policy.clone()),
            ..options()
        },
    )
    .await;
    let (id, _) = create(&api, "tnt_h", json!({"url": receiver.url("/broken")})).await;
    for i in 0..(policy.failure_threshold + 2) {
        let answer = api
            .post(
                "/v1/tenants/tnt_h/events",
                &json!({"id": format!("evt_h{i}"), "type": "order.paid", "payload": {"n": i}}),
            )
            .await;
        assert_eq!(answer.status, 202, "{}", answer.text);
    }
    let path = format!("/v1/tenants/tnt_h/endpoints/{id}/health");
    let opened = eventually(Duration::from_secs(60), async || {
        let h = api.get(&path).await;
        h.json["state"] == "open" && h.json["waiting"].as_u64().unwrap_or(0) >= 1
    })
    .await;
    assert!(opened, "{}", api.get(&path).await.text);

    let tenant = TenantId::new("tnt_h").unwrap();
    let ddb = aws_sdk_dynamodb::Client::new(&local.aws);
    let health = tern_aws::DynamoHealthStore::new(ddb.clone(), &local.resources.health_table);
    let ledger = tern_aws::DynamoLedger::new(ddb, &local.resources.attempts_table, 30);
    // Read the API, the CLI's rows, the API again: compared when the state held still.
    let mut compared = false;
    for _ in 0..10 {
        let before = api.get(&path).await.json;
        let report = tern_ops::health::health_rows_waiting(
            local.sender.endpoints.as_ref(),
            &health,
            &ledger,
            Some(&tenant),
            &policy,
            chrono::Utc::now(),
        )
        .await
        .expect("the CLI's rows");
        let after = api.get(&path).await.json;
        if before != after {
            continue;
        }
        let row = report
            .endpoints
            .iter()
            .find(|r| r.endpoint_id.as_str() == id)
            .expect("the endpoint's row");
        let mut cli = serde_json::to_value(row).unwrap();
        let cli = cli.as_object_mut().unwrap();
        // Not the API's to say again: the tenant is in the path, the URL in the endpoint.
        cli.remove("tenant_id");
        cli.remove("url");
        cli.insert("waiting_complete".into(), json!(report.waiting_complete));
        if let Some(failure) = cli.get_mut("last_failure").and_then(Value::as_object_mut) {
            let excerpt = failure.remove("excerpt").unwrap_or(Value::Null);
            failure.insert("response_excerpt".into(), excerpt);
        }
        assert_eq!(
            Value::Object(cli.clone()),
            after,
            "the CLI's row and the API's"
        );
        compared = true;
        break;
    }
    assert!(compared, "the health never held still for two reads");
    let h = api.get(&path).await.json;
    assert!(h["failing_since"].is_string(), "{h}");
    assert!(h["circuit_opened_at"].is_string(), "{h}");
    assert_eq!(
        h["last_failure"]["response_excerpt"], "upstream database is down",
        "{h}"
    );
}

/// The document's constraints are the server's (issue 28: generated clients and contract
/// tests sent values the server refused). For every documented bound of a request body's
/// field (minimum, maximum, minLength, maxLength, minItems, maxItems, pattern, enum), read
/// from the committed openapi.json, the values at the bound are accepted and the values just
/// past it refused with a 400 or 422; the fields of an array's items (a custom header's
/// name and value) and of each type of a discriminated union (every authentication's
/// fields) are walked too, and the path's tenant id. A bound the document lacks is not
/// tested, and a bound it states wrongly fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documents_bounds_are_the_servers() {
    let doc: Value = serde_json::from_str(include_str!("../../shared/tern-api/openapi.json"))
        .expect("the document");
    let receiver = Receiver::start().await.expect("receiver");
    let (_local, _rx, api) = api_deployment("api-bounds", options()).await;
    let url = receiver.url("/bounds");
    let token_url = receiver.url("/token");
    // 21 endpoints: endpoint_ids' 20 at the bound, 21 past it.
    let mut ids = Vec::new();
    for _ in 0..21 {
        ids.push(create(&api, "tnt_b", json!({"url": url})).await.0);
    }
    let ep = format!("/v1/tenants/tnt_b/endpoints/{}", ids[0]);
    struct Op {
        id: &'static str,
        method: &'static str,
        path: String,
        base: Value,
    }
    let ops = [
        Op {
            id: "createEndpoint",
            method: "POST",
            path: "/v1/tenants/tnt_b/endpoints".into(),
            base: json!({"url": url}),
        },
        Op {
            id: "updateEndpoint",
            method: "PATCH",
            path: ep.clone(),
            base: json!({}),
        },
        Op {
            id: "disableEndpoint",
            method: "POST",
            path: format!("/v1/tenants/tnt_b/endpoints/{}/disable", ids[1]),
            base: json!({}),
        },
        Op {
            id: "rotateEndpointSecret",
            method: "POST",
            path: format!("{ep}/rotate-secret"),
            base: json!({}),
        },
        Op {
            id: "rotateEndpointSigningKey",
            method: "POST",
            path: format!("{ep}/rotate-signing-key"),
            base: json!({}),
        },
        Op {
            id: "createPortalSession",
            method: "POST",
            path: "/v1/tenants/tnt_b/portal-sessions".into(),
            base: json!({}),
        },
        Op {
            id: "replayDeadLetters",
            method: "POST",
            path: "/v1/tenants/tnt_b/dead-letters/replay".into(),
            base: json!({"dry_run": true}),
        },
        // A tenant without endpoints: its events are published, and delivered nowhere.
        Op {
            id: "publishEventBatch",
            method: "POST",
            path: "/v1/tenants/tnt_quiet/event-batches".into(),
            base: json!({"events": [{"type": "t.base", "payload": {}}]}),
        },
    ];
    // An array field's i-th item, valid.
    let item = |field: &str, i: usize| -> Value {
        match field {
            "schedule_seconds" => json!(60),
            "endpoint_ids" => json!(ids[i % ids.len()]),
            "event_types" => json!(format!("type.{i}")),
            "headers" => json!({"name": format!("x-h{i}"), "value": "v"}),
            "events" => json!({"type": format!("t.{i}"), "payload": {"n": i}}),
            other => panic!("no item maker for {other}: add one"),
        }
    };
    // A string field's valid value of n bytes.
    let text = |field: &str, n: usize| -> String {
        let padded = |head: &str| format!("{head}{}", "a".repeat(n.saturating_sub(head.len())));
        match field {
            "logo_url" => padded("https://cdn.example.com/"),
            "url" => padded(&format!("{url}/")),
            "token_url" => padded(&format!("{token_url}/")),
            "description" | "reason" => "d".repeat(n),
            "name" => "x".repeat(n),
            "value" => "v".repeat(n),
            "username" | "password" | "token" | "client_id" | "client_secret" | "scope"
            | "audience" => "s".repeat(n),
            // A valid traceparent is 55 characters: shorter or longer, cut or padded.
            "traceparent" => {
                let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
                if n <= valid.len() {
                    valid[..n].to_owned()
                } else {
                    format!("{valid}{}", "1".repeat(n - valid.len()))
                }
            }
            // Members of at most 100 characters (a member's value may have 256).
            "tracestate" => {
                let mut out = String::new();
                let mut i = 0;
                while out.len() < n {
                    let sep = if out.is_empty() { "" } else { "," };
                    let head = format!("{sep}k{i}=");
                    let left = n - out.len();
                    if left <= head.len() {
                        // Optional white space after the last member fills the rest.
                        out.push_str(&" ".repeat(left));
                        break;
                    }
                    out.push_str(&head);
                    out.push_str(&"v".repeat((left - head.len()).min(100)));
                    i += 1;
                }
                out
            }
            other => panic!("no text maker for {other}: add one"),
        }
    };
    // Values that match / do not match a documented pattern (checked against it below).
    let patterned = |field: &str| -> (Vec<String>, Vec<String>) {
        let v = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        match field {
            "brand_color" => (
                v(&["#0b5fff", "#ABCDEF"]),
                v(&["0b5fff", "#abc", "#gggggg"]),
            ),
            "url" => (
                vec![url.clone(), url.replace("http://", "HTTP://")],
                v(&["ftp://127.0.0.1/x", "127.0.0.1/x", "mailto:a@b.example"]),
            ),
            "token_url" => (
                vec![token_url.clone()],
                v(&["ftp://127.0.0.1/t", "//127.0.0.1/t"]),
            ),
            "name" => (
                v(&["X-Api-Key", "x_t!#$%&'*+.^`|~9"]),
                v(&["x api", "x:y", "é", "x\r\ny"]),
            ),
            "value" => (
                v(&["a b\tc", "", "k=v; w"]),
                v(&["a\nb", " lead", "trail ", "é"]),
            ),
            "token" => (v(&["t0k.EN~"]), v(&["has space", "é"])),
            "client_id" | "client_secret" | "audience" => (v(&["c 1 ~"]), v(&["é", "a\tb"])),
            "scope" => (v(&["a b:c"]), v(&["a  b", "a\"b", " a", "a\\b"])),
            "traceparent" => (
                v(&["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"]),
                v(&[
                    "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",
                    "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
                ]),
            ),
            other => panic!("no pattern examples for {other}: add some"),
        }
    };
    // A valid value of each type of a discriminated union, by type name.
    let variant = |union: &str, kind: &str| -> Value {
        match (union, kind) {
            ("ReceiverAuthSetting", "none") => json!({"type": "none"}),
            ("ReceiverAuthSetting", "basic") => {
                json!({"type": "basic", "username": "u", "password": "p"})
            }
            ("ReceiverAuthSetting", "bearer") => json!({"type": "bearer", "token": "t"}),
            ("ReceiverAuthSetting", "oauth2_client_credentials") => json!({
                "type": "oauth2_client_credentials", "token_url": token_url,
                "client_id": "c", "client_secret": "s",
            }),
            other => panic!("no valid value of {other:?}: add one"),
        }
    };
    let component = |r: &str| doc["components"]["schemas"][r.rsplit('/').next().unwrap()].clone();
    // The component a property refers to: `$ref`, or `oneOf` of a `$ref` and `null`.
    let referenced = |schema: &Value| -> Option<Value> {
        schema["$ref"].as_str().map(component).or_else(|| {
            schema["oneOf"]
                .as_array()
                .and_then(|alts| alts.iter().find_map(|a| a["$ref"].as_str().map(component)))
        })
    };
    // Each bound of one field's schema: (value, documented as valid).
    let bounds = |field: &str, schema: &Value| -> Vec<(Value, bool)> {
        let mut cases: Vec<(Value, bool)> = Vec::new();
        if let Some(min) = schema["minimum"].as_i64() {
            cases.push((json!(min), true));
            cases.push((json!(min - 1), false));
        }
        if let Some(max) = schema["maximum"].as_i64() {
            cases.push((json!(max), true));
            cases.push((json!(max + 1), false));
        }
        let items = |n: usize| Value::Array((0..n).map(|i| item(field, i)).collect());
        if let Some(max) = schema["maxItems"].as_u64() {
            let max = usize::try_from(max).unwrap();
            cases.push((items(max), true));
            cases.push((items(max + 1), false));
        }
        if let Some(min) = schema["minItems"].as_u64() {
            let min = usize::try_from(min).unwrap();
            cases.push((items(min), true));
            if min > 0 {
                cases.push((items(min - 1), false));
            }
        }
        if let Some(max) = schema["maxLength"].as_u64() {
            let max = usize::try_from(max).unwrap();
            cases.push((json!(text(field, max)), true));
            cases.push((json!(text(field, max + 1)), false));
        }
        if let Some(min) = schema["minLength"].as_u64() {
            let min = usize::try_from(min).unwrap();
            cases.push((json!(text(field, min)), true));
            if min > 0 {
                cases.push((json!(text(field, min - 1)), false));
            }
        }
        if let Some(pattern) = schema["pattern"].as_str() {
            let re = regex_lite::Regex::new(pattern).expect("a pattern");
            let (good, bad) = patterned(field);
            for g in good {
                assert!(re.is_match(&g), "{g:?} matches {pattern}");
                cases.push((json!(g), true));
            }
            for b in bad {
                assert!(!re.is_match(&b), "{b:?} does not match {pattern}");
                cases.push((json!(b), false));
            }
        }
        let values = schema["enum"]
            .as_array()
            .cloned()
            .or_else(|| referenced(schema).and_then(|c| c["enum"].as_array().cloned()));
        if let Some(values) = values {
            for v in values {
                cases.push((v, true));
            }
            cases.push((json!("no_such_value"), false));
        }
        cases
    };
    let mut tested = 0;
    let mut nested = 0;
    for op in &ops {
        let schema_ref = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .flat_map(|item| item.as_object().unwrap().values())
            .find(|o| o["operationId"] == op.id)
            .and_then(|o| {
                o["requestBody"]["content"]["application/json"]["schema"]["$ref"].as_str()
            })
            .unwrap_or_else(|| panic!("{} has a request body", op.id));
        let props = component(schema_ref)["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("{schema_ref} has properties"))
            .clone();
        for (field, schema) in &props {
            // (what is set, its value as sent, documented as valid)
            let mut cases: Vec<(String, Value, bool)> = bounds(field, schema)
                .into_iter()
                .map(|(v, ok)| (field.clone(), v, ok))
                .collect();
            // The fields of an array's items: one item, valid but for the field.
            if let Some(r) = schema["items"]["$ref"].as_str() {
                let inner = component(r);
                for (name, s) in inner["properties"].as_object().into_iter().flatten() {
                    for (v, ok) in bounds(name, s) {
                        let mut one = item(field, 0);
                        one[name.as_str()] = v;
                        cases.push((format!("{field}[0].{name}"), json!([one]), ok));
                        nested += 1;
                    }
                }
            }
            // The fields of each type of a discriminated union.
            if let Some(union) = referenced(schema).filter(|u| u["discriminator"].is_object()) {
                let union_name = schema_name_of(&doc, &union);
                for (kind, r) in union["discriminator"]["mapping"].as_object().unwrap() {
                    let inner = component(r.as_str().unwrap());
                    for (name, s) in inner["properties"].as_object().into_iter().flatten() {
                        for (v, ok) in bounds(name, s) {
                            let mut one = variant(&union_name, kind);
                            one[name.as_str()] = v;
                            cases.push((format!("{field}({kind}).{name}"), one, ok));
                            nested += 1;
                        }
                    }
                }
            }
            for (what, value, valid) in cases {
                let mut body = op.base.clone();
                body[field.as_str()] = value.clone();
                let answer = api.call(op.method, &op.path, Some(&body)).await;
                let shown = value.to_string();
                let shown = &shown[..shown.len().min(100)];
                if valid {
                    assert!(
                        answer.status < 300,
                        "{} {what}={shown}: documented as valid, the server answered {}: {}",
                        op.id,
                        answer.status,
                        answer.text
                    );
                } else {
                    assert!(
                        matches!(answer.status, 400 | 422),
                        "{} {what}={shown}: documented as invalid, the server answered {}: {}",
                        op.id,
                        answer.status,
                        answer.text
                    );
                }
                tested += 1;
            }
        }
    }
    // The batch publish's whole body: documented in `x-max-body-bytes`. A valid batch of
    // exactly that many bytes (events of 230 KB, padded with the whitespace JSON allows
    // after the value) is published; one byte more is a 413.
    let limit = doc["paths"]["/v1/tenants/{tenant_id}/event-batches"]["post"]["requestBody"]
        ["x-max-body-bytes"]
        .as_u64()
        .expect("publishEventBatch documents its byte limit");
    let limit = usize::try_from(limit).unwrap();
    let events: Vec<Value> = (0..11)
        .map(|i| json!({"type": "t.big", "payload": {"p": "a".repeat(230_000), "n": i}}))
        .collect();
    let mut full = json!({"events": events}).to_string().into_bytes();
    assert!(full.len() < limit, "{} bytes before padding", full.len());
    full.resize(limit, b' ');
    let mut over = full.clone();
    over.push(b' ');
    let path = "/v1/tenants/tnt_quiet/event-batches";
    let answer = api
        .raw("POST", path, full, Some("application/json"), true)
        .await;
    assert_eq!(answer.status, 200, "{limit} bytes: {}", answer.text);
    assert_eq!(answer.json["failed"], 0, "{}", answer.text);
    let answer = api
        .raw("POST", path, over, Some("application/json"), true)
        .await;
    assert_eq!(
        (answer.status, answer.problem()),
        (413, "payload-too-large"),
        "{} bytes: {}",
        limit + 1,
        answer.text
    );
    tested += 2;
    // The path's tenant id, on listEndpoints.
    let tenant_param = doc["paths"]["/v1/tenants/{tenant_id}/endpoints"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "tenant_id")
        .unwrap()["schema"]
        .clone();
    let max = usize::try_from(tenant_param["maxLength"].as_u64().expect("maxLength")).unwrap();
    let re = regex_lite::Regex::new(tenant_param["pattern"].as_str().expect("pattern")).unwrap();
    for (tenant, valid) in [
        ("t".repeat(max), true),
        ("t".repeat(max + 1), false),
        ("tnt_a-1".to_owned(), true),
        ("tnt.a".to_owned(), false),
        ("tnt%20a".to_owned(), false),
    ] {
        let decoded = tenant.replace("%20", " ");
        assert_eq!(
            re.is_match(&decoded) && decoded.len() <= max,
            valid,
            "{tenant}"
        );
        let answer = api.get(&format!("/v1/tenants/{tenant}/endpoints")).await;
        if valid {
            assert_eq!(answer.status, 200, "{tenant}: {}", answer.text);
        } else {
            assert_eq!(
                (answer.status, answer.field()),
                (400, "tenant_id"),
                "{tenant}: {}",
                answer.text
            );
        }
        tested += 1;
    }
    assert!(tested >= 150, "{tested} cases");
    assert!(nested >= 60, "{nested} cases inside items and unions");
}

/// The name of a component schema equal to `schema`.
fn schema_name_of(doc: &Value, schema: &Value) -> String {
    doc["components"]["schemas"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(_, s)| *s == schema)
        .map(|(n, _)| n.clone())
        .expect("a component")
}
