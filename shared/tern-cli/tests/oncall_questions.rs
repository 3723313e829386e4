//! Issue 17: the on-call engineer's questions, through the real `tern` binary against moto.
//! Which endpoints are failing and since when (`tern endpoints health`), what the receiver
//! answered (`tern attempts`), how many deliveries wait and when each is tried (`tern
//! waiting`), and when deliveries resume after `enable`. The records are written through
//! the real DynamoDB stores, as the sender writes them.

mod common;

use chrono::{DateTime, Duration, Utc};
use common::{expect, json, setup, tern, text};
use tern_aws::{DynamoEndpointStore, DynamoHealthStore, DynamoLedger};
use tern_core::health::{HealthChange, HealthDelta, HealthSignal, HealthStore, LastFailure};
use tern_core::ports::{AttemptRecord, DeliveryLedger, EndpointStore};
use tern_core::{DeliveryMessage, Endpoint, EndpointId, Event, EventId, Secret, TenantId};

fn when(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%SZ").to_string()
}

fn event(id: &str, tenant: &str) -> Event {
    serde_json::from_value(serde_json::json!({
        "id": id, "type": "order.paid", "tenant_id": tenant,
        "created_at": "2026-11-30T00:00:00Z", "payload": {"order": id},
    }))
    .unwrap()
}

async fn endpoint(s: &common::Setup, id: &str, enabled: bool) -> Endpoint {
    let store = DynamoEndpointStore::new(
        aws_sdk_dynamodb::Client::new(&s.aws),
        s.resources.endpoints_table.clone(),
    );
    let ep = Endpoint::new(
        EndpointId::new(id).unwrap(),
        TenantId::new("tnt_a").unwrap(),
        "http://127.0.0.1:9/hook?token=secret",
        vec!["*".into()],
        Secret::generate(),
        Utc::now(),
    );
    store.put(&ep).await.unwrap();
    if !enabled {
        store
            .disable(
                &ep.tenant_id,
                &ep.id,
                "auto_disabled: 0 % success over 1 h, last status 503",
            )
            .await
            .unwrap();
    }
    ep
}

/// Two failed attempts (at `first` and a second later) as the sender records them: the
/// receiver answered 503 with a body; then the circuit opens with its next probe at
/// `next_probe`.
async fn failing(
    s: &common::Setup,
    ep: &Endpoint,
    first: DateTime<Utc>,
    next_probe: DateTime<Utc>,
) {
    let store = DynamoHealthStore::new(
        aws_sdk_dynamodb::Client::new(&s.aws),
        s.resources.health_table.clone(),
    );
    let mut delta = HealthDelta::new(first);
    for at in [first, first + Duration::seconds(1)] {
        delta.add(HealthSignal::Failure(LastFailure {
            at,
            status: Some(503),
            error_class: None,
            error: Some("http status 503".into()),
            excerpt: Some("down for maintenance until 04:00".into()),
        }));
    }
    store
        .record(&ep.tenant_id, &ep.id, &delta, 600, None)
        .await
        .unwrap();
    assert!(
        store
            .apply(
                &ep.tenant_id,
                &ep.id,
                &HealthChange::Open {
                    next_probe_at: next_probe
                },
                Utc::now(),
            )
            .await
            .unwrap()
    );
}

fn ledger(s: &common::Setup) -> DynamoLedger {
    DynamoLedger::new(
        aws_sdk_dynamodb::Client::new(&s.aws),
        s.resources.attempts_table.clone(),
        30,
    )
}

/// A delivery of `event` to `ep` whose attempt `failed` failed and whose next attempt is
/// queued, due at `due`: what the sender writes (claim, then the finish that lists it).
async fn retrying(
    s: &common::Setup,
    ep: &Endpoint,
    event_id: &str,
    failed: u32,
    due: DateTime<Utc>,
) {
    let mut m = DeliveryMessage::first(event(event_id, ep.tenant_id.as_str()), ep.id.clone());
    m.attempt = failed;
    let l = ledger(s);
    l.claim(&m, Utc::now() + Duration::seconds(60))
        .await
        .unwrap();
    l.finish_retrying(&m, failed + 1, due).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_says_since_when_what_the_receiver_answered_and_what_waits() {
    let s = setup("toq1-").await;
    let now = Utc::now();
    let since = now - Duration::minutes(30);
    let down = endpoint(&s, "ep_down", true).await;
    failing(&s, &down, since, now + Duration::seconds(45)).await;
    // Disabled while its circuit was open: the record still holds a probe time, long past.
    let off = endpoint(&s, "ep_off", false).await;
    failing(&s, &off, since, now - Duration::minutes(20)).await;
    endpoint(&s, "ep_ok", true).await;
    let soon = now + Duration::minutes(1);
    retrying(&s, &down, "evt_w1", 1, now + Duration::minutes(5)).await;
    retrying(&s, &down, "evt_w2", 2, soon).await;

    let rows = json(&s.env, &["endpoints", "health", "--json"]);
    let row = |id: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["endpoint_id"] == id)
            .unwrap_or_else(|| panic!("no row for {id}: {rows:#}"))
            .clone()
    };
    let off_row = row("ep_off");
    assert_eq!(off_row["state"], "disabled");
    assert!(
        off_row["next_probe_at"].is_null(),
        "a disabled endpoint gets no probe: {off_row:#}"
    );
    let down_row = row("ep_down");
    assert_eq!(down_row["state"], "open");
    let at = |v: &serde_json::Value| v.as_str().unwrap().parse::<DateTime<Utc>>().unwrap();
    assert_eq!(
        at(&down_row["failing_since"]).timestamp_millis(),
        since.timestamp_millis()
    );
    assert!(down_row["circuit_opened_at"].is_string(), "{down_row:#}");
    assert_eq!(down_row["last_failure"]["status"], 503);
    assert_eq!(
        down_row["last_failure"]["excerpt"],
        "down for maintenance until 04:00"
    );
    assert_eq!(down_row["waiting"], 2);
    assert_eq!(
        at(&down_row["next_due_at"]).timestamp_millis(),
        soon.timestamp_millis()
    );
    assert_eq!(row("ep_ok")["waiting"], 0);

    let table = expect(&s.env, &["endpoints", "health"], 0);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].contains("FAILING SINCE")
            && lines[0].contains("WAITING")
            && lines[0].contains("NEXT DUE"),
        "{table}"
    );
    let down_line = lines
        .iter()
        .position(|l| l.contains("ep_down"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        lines[down_line].contains(&when(since)) && lines[down_line].contains(&when(soon)),
        "{table}"
    );
    let details = lines[down_line + 1..].join("\n");
    assert!(
        details.contains("last failure: status 503: \"down for maintenance until 04:00\""),
        "{table}"
    );
    let off_line = lines.iter().find(|l| l.contains("ep_off")).unwrap();
    assert!(
        !off_line.contains(&when(now - Duration::minutes(20))),
        "no next probe in the past: {table}"
    );

    // After enable, the CLI says when deliveries resume.
    let out = expect(&s.env, &["endpoints", "enable", "ep_off"], 0);
    assert!(out.contains("Deliveries resume now"), "{out}");
    assert!(out.contains("tern replay --endpoint ep_off"), "{out}");
    s.moto.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_lists_each_endpoints_deliveries_with_attempt_and_due_time() {
    let s = setup("toq2-").await;
    let now = Utc::now();
    let down = endpoint(&s, "ep_down", true).await;
    let probe = now + Duration::seconds(45);
    failing(&s, &down, now - Duration::minutes(30), probe).await;
    let slow = endpoint(&s, "ep_slow", true).await;
    endpoint(&s, "ep_ok", true).await;
    let (d1, d2, d3) = (
        now + Duration::minutes(5),
        now + Duration::minutes(1),
        now + Duration::hours(2),
    );
    retrying(&s, &down, "evt_w1", 1, d1).await;
    retrying(&s, &down, "evt_w2", 2, d2).await;
    retrying(&s, &slow, "evt_w3", 4, d3).await;

    let table = expect(&s.env, &["waiting"], 0);
    assert!(
        table.contains(&format!(
            "ep_down (tenant tnt_a, open): 2 waiting, next due {}; held until {} (open circuit)",
            when(d2),
            when(probe)
        )),
        "{table}"
    );
    let rows: Vec<&str> = table.lines().filter(|l| l.contains("evt_w")).collect();
    assert!(
        rows[0].contains(&when(d2)) && rows[0].contains(" 3 ") && rows[0].ends_with("evt_w2"),
        "soonest first, with its attempt: {table}"
    );
    assert!(
        rows[1].ends_with("evt_w1") && rows[1].contains(" 2 "),
        "{table}"
    );
    assert!(
        rows[2].ends_with("evt_w3") && rows[2].contains(" 5 "),
        "{table}"
    );
    assert!(
        table.contains(
            "total: 3 waiting for 2 endpoints; delivery queue (SQS, approximate): 0 due now"
        ),
        "{table}"
    );

    let v = json(&s.env, &["waiting", "--json", "--max", "1"]);
    assert_eq!(v["total"], 3);
    assert_eq!(v["complete"], true);
    assert_eq!(v["endpoints"][0]["endpoint_id"], "ep_down");
    assert_eq!(v["endpoints"][0]["waiting"], 2);
    assert_eq!(v["endpoints"][0]["held_by"], "open circuit");
    assert_eq!(v["endpoints"][0]["url"], "http://127.0.0.1:9/hook?…");
    let listed = v["endpoints"][0]["deliveries"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "--max 1");
    assert_eq!(
        (
            listed[0]["event_id"].as_str(),
            listed[0]["attempt"].as_u64()
        ),
        (Some("evt_w2"), Some(3))
    );
    assert_eq!(v["queue"]["visible"], 0);

    let one = json(&s.env, &["waiting", "--endpoint", "ep_slow", "--json"]);
    assert_eq!(one["total"], 1);
    assert_eq!(one["endpoints"][0]["deliveries"][0]["event_id"], "evt_w3");
    let none = expect(&s.env, &["waiting", "--endpoint", "ep_ok"], 0);
    assert!(none.starts_with("nothing is waiting"), "{none}");
    let other = json(&s.env, &["waiting", "--tenant", "tnt_b", "--json"]);
    assert_eq!(other["total"], 0);
    let out = tern(&s.env, &["waiting", "--endpoint", "ep_nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("endpoint ep_nope not found"),
        "{}",
        text(&out.stderr)
    );
    s.moto.stop().await;
}

fn attempt_row(event: &str, endpoint: &str, n: u32, at: &str) -> AttemptRecord {
    AttemptRecord {
        event_id: EventId::new(event).unwrap(),
        endpoint_id: EndpointId::new(endpoint).unwrap(),
        replay_count: 0,
        attempt: n,
        takeover: 0,
        started_at: at.parse().unwrap(),
        latency_ms: 120,
        status: Some(503),
        error_class: None,
        error: Some("http status 503".into()),
        location: None,
        response_excerpt: Some("down for maintenance until 04:00".into()),
        excerpt_truncated: false,
        outcome: "retry".into(),
        next_wait_seconds: Some(60),
    }
}

async fn outbox_event(s: &common::Setup, tenant: &str) -> String {
    let prepared = tern_outbox::OutboxWriter::new(&s.resources.outbox_table)
        .prepare("order.paid", tenant, r#"{"order":"o_1"}"#)
        .unwrap();
    aws_sdk_dynamodb::Client::new(&s.aws)
        .put_item()
        .table_name(&s.resources.outbox_table)
        .set_item(Some(prepared.put().unwrap().item().clone()))
        .send()
        .await
        .unwrap();
    prepared.event.id.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_show_the_receivers_answer_scaled_due_times_and_refuse_an_unknown_endpoint() {
    let s = setup("toq3-").await;
    let id = outbox_event(&s, "tnt_a").await;
    endpoint(&s, "ep_registered", true).await;
    let l = ledger(&s);
    let to_a = DeliveryMessage::first(event(&id, "tnt_a"), EndpointId::new("ep_a").unwrap());
    l.record_attempt(&to_a, &attempt_row(&id, "ep_a", 1, "2026-11-30T10:00:00Z"))
        .await
        .unwrap();
    // The next attempt found its endpoint disabled: dead-lettered without a POST, with a
    // row of its own (as the sender writes it).
    l.record_attempt(
        &to_a,
        &AttemptRecord {
            status: None,
            latency_ms: 0,
            error: Some(
                "not sent: the endpoint is disabled; `tern endpoints enable`, then replay".into(),
            ),
            response_excerpt: None,
            outcome: "dead_letter:endpoint_disabled".into(),
            next_wait_seconds: None,
            ..attempt_row(&id, "ep_a", 2, "2026-11-30T10:00:02Z")
        },
    )
    .await
    .unwrap();
    let mut env = s.env.clone();
    env.push(("TERN_TIME_SCALE".into(), "0.01".into()));

    let table = expect(&env, &["attempts", &id, "--tenant", "tnt_a"], 0);
    let lines: Vec<&str> = table.lines().collect();
    // The try ended at 10:00:00.120; 60 s at ×0.01 is waited as 1 s.
    assert!(
        lines[1].contains("2026-11-30 10:00:01.120Z"),
        "NEXT DUE in the time scale: {table}"
    );
    assert!(
        lines[1].contains("down for maintenance until 04:00"),
        "what the receiver answered: {table}"
    );
    assert!(
        lines[2].contains("dead_letter:endpoint_disabled"),
        "{table}"
    );
    assert!(
        lines.last().unwrap().contains("in DLQ: endpoint_disabled"),
        "{table}"
    );
    let v = json(&env, &["attempts", &id, "--tenant", "tnt_a", "--json"]);
    assert_eq!(
        v["attempts"][0]["next_attempt_due_at"],
        "2026-11-30T10:00:01.120Z"
    );
    assert_eq!(v["dead_letters"][0]["reason"], "endpoint_disabled");

    // An id the registry does not know, and that has no attempts, is an error.
    let out = tern(&env, &["attempts", &id, "--endpoint", "ep_unknown"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("endpoint ep_unknown not found"),
        "{}",
        text(&out.stderr)
    );
    // A registered endpoint without attempts for this event: not tried yet.
    let out = expect(&env, &["attempts", &id, "--endpoint", "ep_registered"], 0);
    assert!(out.contains("no attempts yet"), "{out}");
    // Attempts of an endpoint deleted since still show.
    let v = json(
        &env,
        &[
            "attempts",
            &id,
            "--tenant",
            "tnt_a",
            "--endpoint",
            "ep_a",
            "--json",
        ],
    );
    assert_eq!(v["attempts"].as_array().unwrap().len(), 2);
    s.moto.stop().await;
}
