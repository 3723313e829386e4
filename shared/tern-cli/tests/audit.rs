//! `tern audit` through the real binary against a local deployment on moto, with the
//! relay and the sender running (local mode's pollers) and receivers on 127.0.0.1: one
//! pair delivered, one waiting for its retry, one dead-lettered (410), three parked (a
//! poison outbox item), and one unaccounted on purpose (its retry message deleted from
//! the delivery queue by hand) -> exit 1 naming it. Everything stays on 127.0.0.1.

use std::process::Output;
use std::time::Duration;

use serde_json::Value;
use tern_core::{Endpoint, EndpointId, RetrySchedule, Secret, TenantId};
use tern_local::receiver::{Behavior, Receiver, Reply};
use tern_local::{LocalOptions, LocalTern, MotoServer};

const TENANT: &str = "tnt_audit";

/// Safety net for the pipeline to reach each state; not a speed check.
const LIMIT: Duration = Duration::from_secs(60);

fn tern(env: &[(String, String)], args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .expect("tern runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

async fn until(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not reached within {LIMIT:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn endpoint(
    local: &LocalTern,
    url: String,
    types: &[&str],
    schedule: Option<&str>,
) -> Endpoint {
    let mut e = Endpoint::new(
        EndpointId::generate(),
        TenantId::new(TENANT).unwrap(),
        url,
        types.iter().map(|t| (*t).to_owned()).collect(),
        Secret::generate(),
        chrono::Utc::now(),
    );
    e.schedule = schedule.map(|s| RetrySchedule::parse(s).unwrap());
    e.validate().unwrap();
    local.sender.endpoints.put(&e).await.unwrap();
    e
}

async fn publish(local: &LocalTern, event_type: &str) -> String {
    let writer = tern_outbox::OutboxWriter::new(&local.resources.outbox_table);
    let prepared = writer
        .prepare(event_type, TENANT, r#"{"order":"o-1"}"#)
        .unwrap();
    local
        .dynamodb()
        .transact_write_items()
        .transact_items(prepared.transact_item().unwrap())
        .send()
        .await
        .unwrap();
    prepared.event.id.to_string()
}

/// An outbox item the relay cannot read (a schema version it does not know): parked.
async fn publish_poison(local: &LocalTern) -> String {
    use aws_sdk_dynamodb::types::AttributeValue as A;
    let id = tern_core::EventId::generate().to_string();
    local
        .dynamodb()
        .put_item()
        .table_name(&local.resources.outbox_table)
        .item("event_id", A::S(id.clone()))
        .item("tern_record", A::S("outbox_event".into()))
        .item("schema_version", A::N("99".into()))
        .item("event_type", A::S("order.paid".into()))
        .item("tenant_id", A::S(TENANT.into()))
        .item(
            "created_at",
            A::S(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        )
        .item("payload", A::S("{}".into()))
        .item("expires_at", A::N("4102444800".into()))
        .send()
        .await
        .unwrap();
    id
}

async fn queue_len(local: &LocalTern, url: &str) -> usize {
    let queue = tern_aws::SqsQueue::new(local.sqs(), url);
    tern_ops::peek(&queue, 100).await.unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_accounts_for_every_pair_and_names_the_lost_one() {
    let moto = MotoServer::start()
        .await
        .expect("moto (the local AWS) is required for this test");
    let options = LocalOptions {
        prefix: "audit-".into(),
        time_scale: 0.01,
        console_port: None,
        step_functions: false,
        ..LocalOptions::default()
    };
    let mut local = LocalTern::create(moto.sdk_config().await, &options)
        .await
        .expect("local deployment");
    let receiver = Receiver::start().await.unwrap();
    receiver.set("/b", Behavior::Always(Reply::status(503)));
    receiver.set("/c", Behavior::Always(Reply::status(410)));
    receiver.set("/e", Behavior::Always(Reply::status(503)));
    let a = endpoint(&local, receiver.url("/a"), &["order.paid"], None).await;
    // B's retry is due an hour (36 s at this time scale) after its first attempt.
    let b = endpoint(&local, receiver.url("/b"), &["order.paid"], Some("3600")).await;
    let c = endpoint(&local, receiver.url("/c"), &["order.paid"], None).await;
    // E's retry is due 600 s (6 s) after its first attempt: time to delete it by hand.
    let e = endpoint(&local, receiver.url("/e"), &["order.lost"], Some("600")).await;
    let _events = local.start_pollers(&options);

    // The lost one: E's first attempt fails; its retry message is then removed from the
    // delivery queue by hand (a purge), so attempt 2 never happens.
    let lost = publish(&local, "order.lost").await;
    let ledger = local.sender.ledger.clone();
    let tenant_id = tern_core::TenantId::new(TENANT).unwrap();
    let lost_id = tern_core::EventId::new(lost.clone()).unwrap();
    until("E's first attempt is logged", async || {
        ledger
            .history(&tenant_id, &lost_id)
            .await
            .is_ok_and(|h| h.iter().any(|r| r.outcome == "retry"))
    })
    .await;
    local
        .sqs()
        .purge_queue()
        .queue_url(&local.resources.delivery_queue_url)
        .send()
        .await
        .expect("purge the delivery queue");

    let paid = publish(&local, "order.paid").await;
    let poison = publish_poison(&local).await;
    let paid_id = tern_core::EventId::new(paid.clone()).unwrap();
    until("A delivered, B retrying, C dead-lettered", async || {
        ledger.history(&tenant_id, &paid_id).await.is_ok_and(|h| {
            let of = |ep: &Endpoint, outcome: &str| {
                h.iter()
                    .any(|r| r.endpoint_id == ep.id && r.outcome.starts_with(outcome))
            };
            of(&a, "delivered") && of(&b, "retry") && of(&c, "dead_letter:gone")
        })
    })
    .await;
    until("C's dead letter in the DLQ", async || {
        queue_len(&local, &local.resources.dlq_url).await == 1
    })
    .await;
    until("the poison item parked", async || {
        queue_len(&local, &local.resources.relay_failure_queue_url).await == 1
    })
    .await;
    // E's attempt 2 was due 6 s after its attempt 1; the audit's grace is 2 s.
    tokio::time::sleep(Duration::from_secs(9)).await;

    let mut env: Vec<(String, String)> = vec![
        ("AWS_ENDPOINT_URL".into(), moto.url.clone()),
        ("AWS_REGION".into(), "us-east-1".into()),
        ("AWS_ACCESS_KEY_ID".into(), "testing".into()),
        ("AWS_SECRET_ACCESS_KEY".into(), "testing".into()),
    ];
    env.extend(local.env.iter().cloned());
    let args = [
        "audit",
        "--since",
        "10m",
        "--grace",
        "2s",
        "--recheck-after",
        "1s",
    ];
    let out = tern(&env, &[&args[..], &["--json"]].concat());
    assert_eq!(
        out.status.code(),
        Some(1),
        "one pair is unaccounted: exit 1\nstdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("--json prints the report");
    let totals = &report["totals"];
    let summary = format!("{report:#}");
    assert_eq!(report["events"], 3, "{summary}");
    assert_eq!(totals["delivered"], 1, "A: {summary}");
    assert_eq!(totals["waiting"], 1, "B: {summary}");
    assert_eq!(totals["dead_lettered"], 1, "C: {summary}");
    assert_eq!(totals["parked"], 3, "the poison item's A, B, C: {summary}");
    assert_eq!(totals["unaccounted"], 1, "E: {summary}");
    assert_eq!(totals["in_flight"], 0, "{summary}");
    let u = &report["unaccounted"][0];
    assert_eq!(u["event_id"], lost.as_str());
    assert_eq!(u["endpoint_id"], e.id.as_str());
    assert_eq!(u["status"], "unaccounted");
    let why = u["detail"].as_str().unwrap_or_default();
    assert!(why.contains("attempt 2 due at"), "{why}");
    assert_eq!(u["attempts"][0]["outcome"], "retry", "{summary}");
    assert_eq!(u["state_item"]["claim_done"], true, "{summary}");
    let listed = |status: &str, endpoint: &Endpoint| {
        report["not_delivered"].as_array().unwrap().iter().any(|p| {
            p["status"] == status
                && p["endpoint_id"] == endpoint.id.as_str()
                && (p["event_id"] == paid.as_str() || p["event_id"] == poison.as_str())
        })
    };
    assert!(listed("waiting", &b), "{summary}");
    assert!(listed("dead_lettered", &c), "{summary}");
    assert!(listed("parked", &a), "{summary}");
    let waiting = report["not_delivered"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["status"] == "waiting")
        .unwrap();
    assert!(waiting["due_at"].is_string(), "a due time: {waiting}");
    let dead = report["not_delivered"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["status"] == "dead_lettered")
        .unwrap();
    assert_eq!(dead["reason"], "gone", "{dead}");
    assert_eq!(report["reads"]["dlq_complete"], true);
    // B's retry waits in the delivery queue (delayed): counted, and named next to the
    // unaccounted pair, since a backlog could hold a pair with no trace yet.
    assert!(
        report["reads"]["delivery_queue"]["delayed"].as_u64() >= Some(1),
        "{summary}"
    );
    assert!(
        report["notes"].as_array().unwrap().iter().any(|n| n
            .as_str()
            .unwrap_or_default()
            .contains("the delivery queue holds")),
        "{summary}"
    );

    // The table names the lost pair and why; stderr says how many.
    let out = tern(&env, &args);
    assert_eq!(out.status.code(), Some(1));
    let table = text(&out.stdout);
    // Shown with --nocapture: what an operator reads.
    println!("{table}");
    assert!(table.contains("UNACCOUNTED (1):"), "{table}");
    assert!(
        table.contains(&format!("{lost} -> {}", e.id)),
        "names the pair: {table}"
    );
    assert!(
        text(&out.stderr).contains("1 pair(s) unaccounted"),
        "{}",
        text(&out.stderr)
    );

    // One endpoint whose pairs are all accounted for: exit 0.
    let out = tern(
        &env,
        &[&args[..], &["--endpoint", a.id.as_str(), "--json"]].concat(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["totals"]["delivered"], 1, "{report:#}");
    assert_eq!(report["totals"]["parked"], 1, "{report:#}");
    assert_eq!(report["totals"]["unaccounted"], 0, "{report:#}");
    // An unknown endpoint is an error, not an empty audit.
    let out = tern(&env, &[&args[..], &["--endpoint", "ep_nope"]].concat());
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("not found"),
        "{}",
        text(&out.stderr)
    );
    drop(local);
    moto.stop().await;
}
