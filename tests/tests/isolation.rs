//! Issue 27: the isolation suite. Every operation of the OpenAPI document
//! (`shared/tern-api/openapi.json`) is called by an attacker tenant with the victim
//! tenant's ids and references: in paths, in bodies, in filters, as cursors and as client
//! certificate secrets. Each answer must be exactly the answer the same request gets with
//! an id that does not exist (ids blanked out), so it confirms nothing, and nothing of the
//! victim's may change: its endpoints, its event, its delivery log, its dead letters, and
//! what its receivers got.
//!
//! The document is the list: an operation added to the API without an attack here fails
//! `every_operation_is_attacked`, so the suite cannot fall behind the API.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use tern_local::receiver::{Behavior, Reply};
use tern_local::{LocalOptions, Receiver};
use tern_tests::api::{Answer, ApiClient};
use tern_tests::*;

const VICTIM: &str = "tnt_victim";
const ATTACKER: &str = "tnt_attacker";
const WAIT: Duration = Duration::from_secs(30);

/// Operations whose attack is not in this suite yet, each with the reason. None: event
/// ids became per tenant (issue 27, attack 2), the last one open.
const KNOWN_OPEN: &[(&str, &str)] = &[];

fn options() -> LocalOptions {
    LocalOptions {
        time_scale: 0.001,
        lookup: Some(no_dns()),
        console_port: None,
        ..LocalOptions::default()
    }
}

/// The operation ids of the OpenAPI document, as `(operationId, METHOD path)`.
fn operations() -> Vec<(String, String)> {
    let doc: Value = serde_json::from_str(include_str!("../../shared/tern-api/openapi.json"))
        .expect("the OpenAPI document is JSON");
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            let id = op["operationId"].as_str().expect("operationId").to_owned();
            ops.push((id, format!("{} {path}", method.to_uppercase())));
        }
    }
    ops
}

/// One attack: the request with the victim's ids, and the same request with ids that
/// exist nowhere. `ids` are the strings that differ between the two (blanked out before
/// the answers are compared).
struct Attack {
    operation: &'static str,
    method: &'static str,
    victim: (String, Option<Value>),
    unknown: (String, Option<Value>),
    ids: Vec<String>,
}

fn blank(answer: &Answer, ids: &[String]) -> (u16, String) {
    let mut text = answer.text.clone();
    for id in ids {
        text = text.replace(id.as_str(), "<id>");
    }
    // A publish answers with its event's creation time: two publishes differ in it (a
    // batch, in each result's event).
    let times = std::iter::once(&answer.json["created_at"]).chain(
        answer.json["results"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| &r["event"]["created_at"]),
    );
    for time in times.filter_map(Value::as_str) {
        text = text.replace(time, "<time>");
    }
    (answer.status, text)
}

async fn created_endpoint(api: &ApiClient, tenant: &str, body: Value) -> String {
    let answer = api
        .post(&format!("/v1/tenants/{tenant}/endpoints"), &body)
        .await;
    assert_eq!(answer.status, 201, "{}", answer.text);
    answer.json["endpoint"]["id"]
        .as_str()
        .expect("id")
        .to_owned()
}

async fn published(api: &ApiClient, tenant: &str, id: &str) {
    let answer = api
        .post(
            &format!("/v1/tenants/{tenant}/events"),
            &json!({"id": id, "type": "order.paid", "payload": {"id": id}}),
        )
        .await;
    assert_eq!(answer.status, 202, "{}", answer.text);
}

/// What the attacker must not change or see: the victim's views, read as the victim.
async fn victim_state(api: &ApiClient, endpoints: &[&str], events: &[&str]) -> Vec<Value> {
    let v = |rest: String| format!("/v1/tenants/{VICTIM}/{rest}");
    let mut state = vec![api.get(&v("endpoints".into())).await.json];
    for e in endpoints {
        for rest in ["", "/attempts"] {
            state.push(api.get(&v(format!("endpoints/{e}{rest}"))).await.json);
        }
    }
    for e in events {
        for rest in ["", "/attempts"] {
            state.push(api.get(&v(format!("events/{e}{rest}"))).await.json);
        }
    }
    state
}

#[tokio::test]
async fn every_operation_is_attacked() {
    // The attacks below name their operations; this is the same list, checked without a
    // deployment so that a new operation fails fast.
    let attacked: BTreeSet<&str> = ATTACKED.iter().copied().collect();
    let open: BTreeSet<&str> = KNOWN_OPEN.iter().map(|(o, _)| *o).collect();
    for (id, route) in operations() {
        assert!(
            attacked.contains(id.as_str()) || open.contains(id.as_str()),
            "{id} ({route}) is in the OpenAPI document but not attacked in tests/tests/isolation.rs"
        );
    }
}

/// The operations `another_tenants_ids_get_the_unknown_ids_answer` attacks.
const ATTACKED: &[&str] = &[
    "listDeadLetters",
    "replayDeadLetters",
    "listEndpoints",
    "createEndpoint",
    "deleteEndpoint",
    "getEndpoint",
    "updateEndpoint",
    "listEndpointAttempts",
    "disableEndpoint",
    "enableEndpoint",
    "getEndpointHealth",
    "recoverEndpoint",
    "rotateEndpointSecret",
    "rotateEndpointSigningKey",
    "sendTestEvent",
    "getEvent",
    "listEventAttempts",
    "resendEvent",
    "createPortalSession",
    "publishEvent",
    "publishEventBatch",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_ids_get_the_unknown_ids_answer() {
    let receiver = Receiver::start().await.expect("receiver");
    receiver.set("/dead", Behavior::Always(Reply::status(500)));
    let (mut local, _rx) = deployment("isolation", options()).await;
    local
        .start_api(0, tern_local::api::local_credentials())
        .expect("the local API starts");
    let api = ApiClient::of(&local);

    // The victim: an endpoint with two deliveries (its log has a second page), one that
    // dead-letters; the attacker: an endpoint and an event of its own.
    // With a secret header, a bearer token and a v1a key: what a PATCH that keeps
    // secrets, or a key rotation, must never reach from another tenant.
    let v_ep = created_endpoint(
        &api,
        VICTIM,
        json!({
            "url": receiver.url("/v"),
            "headers": [{"name": "x-k", "value": "victim-header-secret", "secret": true}],
            "auth": {"type": "bearer", "token": "victim-bearer-secret"},
            "signatures": "both",
        }),
    )
    .await;
    let v_dead = created_endpoint(
        &api,
        VICTIM,
        json!({"url": receiver.url("/dead"), "max_attempts": 1, "event_types": ["order.dead"]}),
    )
    .await;
    let a_ep = created_endpoint(&api, ATTACKER, json!({"url": receiver.url("/a")})).await;
    published(&api, VICTIM, "evt_victim_1").await;
    published(&api, VICTIM, "evt_victim_2").await;
    let dead = api
        .post(
            &format!("/v1/tenants/{VICTIM}/events"),
            &json!({"id": "evt_victim_dead", "type": "order.dead", "payload": {}}),
        )
        .await;
    assert_eq!(dead.status, 202, "{}", dead.text);
    published(&api, ATTACKER, "evt_attacker_1").await;
    receiver.wait_for("/v", 2, WAIT).await;
    receiver.wait_for("/a", 1, WAIT).await;
    assert!(
        eventually(WAIT, async || !dead_letters(&local).await.is_empty()).await,
        "the victim's failing endpoint dead-letters its event"
    );
    // The victim's cursors: of its endpoint list and of its endpoint's log.
    let v_list_cursor = api
        .get(&format!("/v1/tenants/{VICTIM}/endpoints?limit=1"))
        .await
        .json["next_cursor"]
        .as_str()
        .expect("a second page of the victim's endpoints")
        .to_owned();
    let mut v_log_cursor = None;
    assert!(
        eventually(WAIT, async || {
            v_log_cursor = api
                .get(&format!(
                    "/v1/tenants/{VICTIM}/endpoints/{v_ep}/attempts?limit=1"
                ))
                .await
                .json["next_cursor"]
                .as_str()
                .map(str::to_owned);
            v_log_cursor.is_some()
        })
        .await,
        "the victim's endpoint log has a second page"
    );
    let v_log_cursor = v_log_cursor.expect("cursor");
    // Cursors of the attacker's own lists: what a cursor from its own pages looks like.
    let garbage_cursor = "bm90IGEgY3Vyc29y".to_owned();

    let before = victim_state(
        &api,
        &[&v_ep, &v_dead],
        &["evt_victim_1", "evt_victim_dead"],
    )
    .await;
    let v_requests = receiver.requests("/v").len();
    let v_dead_letters = dead_letters(&local).await.len();

    let unknown_ep = "ep_0000000000000000000000000000nope".to_owned();
    let unknown_evt = "evt_nothing_here".to_owned();
    let att = |rest: &str| format!("/v1/tenants/{ATTACKER}/{rest}");
    let on_ep = |ep: &str, rest: &str| att(&format!("endpoints/{ep}{rest}"));
    let since = (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    let ids = vec![v_ep.clone(), unknown_ep.clone()];
    let evt_ids = vec!["evt_victim_1".to_owned(), unknown_evt.clone()];
    let path_attack =
        |operation: &'static str, method: &'static str, rest: &str, body: Option<Value>| Attack {
            operation,
            method,
            victim: (on_ep(&v_ep, rest), body.clone()),
            unknown: (on_ep(&unknown_ep, rest), body),
            ids: ids.clone(),
        };
    let mut attacks = vec![
        path_attack("getEndpoint", "GET", "", None),
        path_attack(
            "updateEndpoint",
            "PATCH",
            "",
            Some(json!({"description": "mine now"})),
        ),
        path_attack(
            "disableEndpoint",
            "POST",
            "/disable",
            Some(json!({"reason": "attacker"})),
        ),
        path_attack("enableEndpoint", "POST", "/enable", None),
        path_attack("getEndpointHealth", "GET", "/health", None),
        path_attack(
            "rotateEndpointSecret",
            "POST",
            "/rotate-secret",
            Some(json!({})),
        ),
        path_attack(
            "rotateEndpointSigningKey",
            "POST",
            "/rotate-signing-key",
            Some(json!({"overlap_hours": 0})),
        ),
        // A PATCH that would keep the victim's secrets under the attacker's own settings.
        path_attack(
            "updateEndpoint",
            "PATCH",
            "",
            Some(json!({
                "headers": [{"name": "x-k", "secret": true}],
                "auth": {"type": "bearer"},
                "url": receiver.url("/a"),
            })),
        ),
        path_attack("sendTestEvent", "POST", "/test", None),
        path_attack("listEndpointAttempts", "GET", "/attempts", None),
        path_attack(
            "recoverEndpoint",
            "POST",
            "/recover",
            Some(json!({"since": since, "enable": true})),
        ),
        path_attack("deleteEndpoint", "DELETE", "", None),
        Attack {
            operation: "getEvent",
            method: "GET",
            victim: (att("events/evt_victim_1"), None),
            unknown: (att(&format!("events/{unknown_evt}")), None),
            ids: evt_ids.clone(),
        },
        Attack {
            operation: "listEventAttempts",
            method: "GET",
            victim: (att("events/evt_victim_1/attempts"), None),
            unknown: (att(&format!("events/{unknown_evt}/attempts")), None),
            ids: evt_ids.clone(),
        },
        // Resend: the victim's event to the attacker's endpoint, the attacker's event to the
        // victim's endpoint, the victim's pair.
        Attack {
            operation: "resendEvent",
            method: "POST",
            victim: (
                att(&format!("events/evt_victim_1/endpoints/{a_ep}/resend")),
                None,
            ),
            unknown: (
                att(&format!("events/{unknown_evt}/endpoints/{a_ep}/resend")),
                None,
            ),
            ids: evt_ids.clone(),
        },
        Attack {
            operation: "resendEvent",
            method: "POST",
            victim: (
                att(&format!("events/evt_attacker_1/endpoints/{v_ep}/resend")),
                None,
            ),
            unknown: (
                att(&format!(
                    "events/evt_attacker_1/endpoints/{unknown_ep}/resend"
                )),
                None,
            ),
            ids: ids.clone(),
        },
        Attack {
            operation: "resendEvent",
            method: "POST",
            victim: (
                att(&format!("events/evt_victim_1/endpoints/{v_ep}/resend")),
                None,
            ),
            unknown: (
                att(&format!(
                    "events/{unknown_evt}/endpoints/{unknown_ep}/resend"
                )),
                None,
            ),
            ids: [ids.clone(), evt_ids.clone()].concat(),
        },
        // References in bodies and filters.
        Attack {
            operation: "createPortalSession",
            method: "POST",
            victim: (
                att("portal-sessions"),
                Some(json!({"endpoint_ids": [v_ep]})),
            ),
            unknown: (
                att("portal-sessions"),
                Some(json!({"endpoint_ids": [unknown_ep]})),
            ),
            ids: ids.clone(),
        },
        Attack {
            operation: "replayDeadLetters",
            method: "POST",
            victim: (
                att("dead-letters/replay"),
                Some(json!({"endpoint_id": v_dead, "force": true})),
            ),
            unknown: (
                att("dead-letters/replay"),
                Some(json!({"endpoint_id": unknown_ep, "force": true})),
            ),
            ids: vec![v_dead.clone(), unknown_ep.clone()],
        },
        Attack {
            operation: "replayDeadLetters",
            method: "POST",
            victim: (
                att("dead-letters/replay"),
                Some(json!({"event_id": "evt_victim_dead", "force": true})),
            ),
            unknown: (
                att("dead-letters/replay"),
                Some(json!({"event_id": unknown_evt, "force": true})),
            ),
            ids: vec!["evt_victim_dead".to_owned(), unknown_evt.clone()],
        },
        // A client certificate under the victim's prefix: refused as one under a prefix
        // of nobody's.
        Attack {
            operation: "createEndpoint",
            method: "POST",
            victim: (
                att("endpoints"),
                Some(json!({
                    "url": receiver.url("/a"),
                    "client_certificate_arn": format!("arn:aws:secretsmanager:us-east-1:123456789012:secret:tern/mtls/{VICTIM}/client-AbCdEf"),
                })),
            ),
            unknown: (
                att("endpoints"),
                Some(json!({
                    "url": receiver.url("/a"),
                    "client_certificate_arn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:tern/mtls/tnt_nobody/client-AbCdEf",
                })),
            ),
            ids: vec![VICTIM.to_owned(), "tnt_nobody".to_owned()],
        },
        // The victim's cursors on the attacker's own lists: refused as a cursor made up.
        Attack {
            operation: "listEndpoints",
            method: "GET",
            victim: (att(&format!("endpoints?cursor={v_list_cursor}")), None),
            unknown: (att(&format!("endpoints?cursor={garbage_cursor}")), None),
            ids: vec![],
        },
        Attack {
            operation: "listEndpointAttempts",
            method: "GET",
            victim: (
                on_ep(&a_ep, &format!("/attempts?cursor={v_log_cursor}")),
                None,
            ),
            unknown: (
                on_ep(&a_ep, &format!("/attempts?cursor={garbage_cursor}")),
                None,
            ),
            ids: vec![],
        },
    ];
    // The deletion goes last among the path attacks: were it to succeed, the rest would
    // see a victim without its endpoint and still compare equal.
    attacks.sort_by_key(|a| a.method == "DELETE");
    let mut seen = BTreeSet::new();
    for attack in &attacks {
        seen.insert(attack.operation);
        let victim = api
            .call(attack.method, &attack.victim.0, attack.victim.1.as_ref())
            .await;
        let unknown = api
            .call(attack.method, &attack.unknown.0, attack.unknown.1.as_ref())
            .await;
        assert_eq!(
            blank(&victim, &attack.ids),
            blank(&unknown, &attack.ids),
            "{} {} {}: the victim's ids got another answer than unknown ids",
            attack.operation,
            attack.method,
            attack.victim.0
        );
        assert!(
            victim.status >= 400 || attack.operation.starts_with("replay"),
            "{} {}: {} {}",
            attack.operation,
            attack.victim.0,
            victim.status,
            victim.text
        );
    }
    // Lists show the attacker nothing of the victim's.
    for (operation, path) in [
        ("listEndpoints", att("endpoints")),
        ("listDeadLetters", att("dead-letters")),
        ("listEndpointAttempts", on_ep(&a_ep, "/attempts")),
    ] {
        seen.insert(operation);
        let answer = api.get(&path).await;
        assert_eq!(answer.status, 200, "{operation}: {}", answer.text);
        for theirs in [v_ep.as_str(), v_dead.as_str(), "evt_victim"] {
            assert!(
                !answer.text.contains(theirs),
                "{operation}: {theirs} in {}",
                answer.text
            );
        }
    }
    // Publishing the victim's event id: the answer any new id gets (202, the attacker's
    // own event), not the 409 of a taken id. Last: the attacker then has an event of its
    // own with that id, which its own reads rightly show.
    let publish =
        |id: &str| Some(json!({"id": id, "type": "order.paid", "payload": {"n": "attacker"}}));
    let victim = api
        .call("POST", &att("events"), publish("evt_victim_1").as_ref())
        .await;
    let unknown = api
        .call("POST", &att("events"), publish("evt_attacker_new").as_ref())
        .await;
    let publish_ids = ["evt_victim_1".to_owned(), "evt_attacker_new".to_owned()];
    assert_eq!(
        blank(&victim, &publish_ids),
        blank(&unknown, &publish_ids),
        "publishEvent with the victim's id got another answer than a new id"
    );
    assert_eq!(victim.status, 202, "{}", victim.text);
    seen.insert("publishEvent");
    // The same in a batch: the victim's other event id, beside a new one, answers as two
    // new ids do (each 202, the attacker's own events).
    let batch = |ids: [&str; 2]| {
        Some(
            json!({"events": ids.map(|id| json!({"id": id, "type": "order.paid", "payload": {"n": "attacker-batch"}}))}),
        )
    };
    let victim = api
        .call(
            "POST",
            &att("event-batches"),
            batch(["evt_victim_dead", "evt_attacker_b1"]).as_ref(),
        )
        .await;
    let unknown = api
        .call(
            "POST",
            &att("event-batches"),
            batch(["evt_attacker_b2", "evt_attacker_b3"]).as_ref(),
        )
        .await;
    let batch_ids = [
        "evt_victim_dead".to_owned(),
        "evt_attacker_b1".to_owned(),
        "evt_attacker_b2".to_owned(),
        "evt_attacker_b3".to_owned(),
    ];
    assert_eq!(
        blank(&victim, &batch_ids),
        blank(&unknown, &batch_ids),
        "publishEventBatch with the victim's id got another answer than new ids"
    );
    assert_eq!(
        (victim.status, &victim.json["created"]),
        (200, &json!(2)),
        "{}",
        victim.text
    );
    seen.insert("publishEventBatch");
    // The attacker's events with the victim's ids are the attacker's, delivered to its own
    // endpoint with its own payloads.
    let got = receiver.wait_for("/a", 7, WAIT).await;
    for (id, body) in [
        ("evt_victim_1", &br#"{"n":"attacker"}"#[..]),
        ("evt_victim_dead", &br#"{"n":"attacker-batch"}"#[..]),
    ] {
        assert!(
            got.iter()
                .any(|r| r.header("webhook-id") == Some(id) && &r.body[..] == body),
            "the attacker's own {id} reached the attacker's endpoint: {:?}",
            got.iter()
                .map(|r| r.header("webhook-id"))
                .collect::<Vec<_>>()
        );
    }

    let attacked: BTreeSet<&str> = ATTACKED.iter().copied().collect();
    assert_eq!(
        seen, attacked,
        "ATTACKED names exactly the operations attacked here"
    );

    // Nothing of the victim's changed.
    let after = victim_state(
        &api,
        &[&v_ep, &v_dead],
        &["evt_victim_1", "evt_victim_dead"],
    )
    .await;
    assert_eq!(
        before, after,
        "the victim's endpoints, events and logs are as they were"
    );
    assert_eq!(
        receiver.requests("/v").len(),
        v_requests,
        "no test send or resend reached the victim"
    );
    assert_eq!(
        dead_letters(&local).await.len(),
        v_dead_letters,
        "the victim's dead letter stays"
    );
}

/// Attack 2 of issue 27: event ids are per tenant. A tenant's backend builds ids from its
/// business keys (`evt_order_o_1_paid`, as the docs suggest); another tenant that
/// publishes that id first (through the API) must neither cancel the first tenant's
/// business transaction nor take its event. Before: the transaction was cancelled by the
/// outbox put's condition and the first tenant's event was never delivered. Now both
/// events are delivered, each to its own tenant's endpoint with its own payload and the
/// same `webhook-id`, and the first tenant's own retry is still refused by the condition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_another_tenant_published_first_never_cancels_a_transaction() {
    use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};

    let receiver = Receiver::start().await.expect("receiver");
    let (mut local, _rx) = deployment("isolation-ids", options()).await;
    local
        .start_api(0, tern_local::api::local_credentials())
        .expect("the local API starts");
    let api = ApiClient::of(&local);
    created_endpoint(&api, VICTIM, json!({"url": receiver.url("/v")})).await;
    created_endpoint(&api, ATTACKER, json!({"url": receiver.url("/a")})).await;
    let id = "evt_order_o_1_paid";

    // The attacker takes the victim's next id first: the answer any new id gets.
    let first = api
        .post(
            &format!("/v1/tenants/{ATTACKER}/events"),
            &json!({"id": id, "type": "order.paid", "payload": {"n": "attacker"}}),
        )
        .await;
    assert_eq!(first.status, 202, "{}", first.text);

    // The victim's backend: its order and the outbox item in one transaction.
    let transaction = async || {
        let prepared = tern_outbox::OutboxWriter::new(&local.resources.outbox_table)
            .prepare_with_id(
                tern_outbox::EventId::new(id).expect("id"),
                "order.paid",
                VICTIM,
                r#"{"n":"victim"}"#,
            )
            .expect("valid event");
        let order = Put::builder()
            .table_name(&local.resources.outbox_table)
            .item("event_id", AttributeValue::S("order_o_1".into()))
            .item("status", AttributeValue::S("paid".into()))
            .build()
            .expect("put");
        local
            .dynamodb()
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(order).build())
            .transact_items(prepared.transact_item().expect("outbox put"))
            .send()
            .await
    };
    transaction()
        .await
        .expect("the victim's transaction commits: another tenant's id is another event");

    let v = receiver.wait_for("/v", 1, WAIT).await;
    let a = receiver.wait_for("/a", 1, WAIT).await;
    assert_eq!(
        (v[0].header("webhook-id"), &v[0].body[..]),
        (Some(id), &br#"{"n":"victim"}"#[..])
    );
    assert_eq!(
        (a[0].header("webhook-id"), &a[0].body[..]),
        (Some(id), &br#"{"n":"attacker"}"#[..])
    );
    // Each tenant reads its own event under the id.
    for (tenant, n) in [(VICTIM, "victim"), (ATTACKER, "attacker")] {
        let event = api.get(&format!("/v1/tenants/{tenant}/events/{id}")).await;
        assert_eq!(event.status, 200, "{}", event.text);
        assert_eq!(event.json["payload"], json!({"n": n}), "{tenant}");
    }
    // The victim's own retry is still refused: ids are never reused within a tenant.
    let again = transaction()
        .await
        .expect_err("a retried transaction is cancelled");
    assert!(
        tern_outbox::failed_condition_at(&again, 1),
        "cancelled by the outbox put's condition: {again:?}"
    );
    // One delivery per tenant.
    assert_eq!(
        (receiver.requests("/v").len(), receiver.requests("/a").len()),
        (1, 1)
    );
}
