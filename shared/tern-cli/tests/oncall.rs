//! The on-call questions, asked through the real `tern` binary against moto: which
//! endpoint is failing (`tern dlq`), what happened to an event (`tern attempts`), replay
//! what failed during an outage without replaying into a disabled endpoint, read and
//! retry the relay-failure queue, `--stack` names, `--json`, and a stale local env.
//! Everything stays on 127.0.0.1.

use std::process::Output;

use serde_json::Value;
use tern_aws::{DynamoLedger, SqsQueue};
use tern_core::ports::{AttemptRecord, DeliveryLedger, EndpointStore, MessageQueue, QueueEntry};
use tern_core::{
    DeadLetter, DeadLetterReason, DeliveryMessage, Endpoint, EndpointId, Event, EventId, Secret,
    TenantId,
};
use tern_local::MotoServer;
use tern_local::resources::Resources;

/// Runs `tern` with `args` and exactly the environment of `env` (no TERN_* leaks in).
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

/// Runs `tern`, expects exit code `code`, returns stdout.
fn expect(env: &[(String, String)], args: &[&str], code: i32) -> String {
    let out = tern(env, args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}\nstdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

fn json(env: &[(String, String)], args: &[&str]) -> Value {
    let out = expect(env, args, 0);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
}

struct Setup {
    moto: MotoServer,
    aws: aws_config::SdkConfig,
    resources: Resources,
    /// AWS access only, no TERN_* names.
    aws_env: Vec<(String, String)>,
    /// AWS access and the TERN_* names, as `.tern/local.env` has them.
    env: Vec<(String, String)>,
}

async fn setup(prefix: &str) -> Setup {
    let moto = MotoServer::start()
        .await
        .expect("moto (the local AWS) is required for this test");
    let aws = moto.sdk_config().await;
    let resources = tern_local::resources::provision(&aws, prefix, None)
        .await
        .expect("resources");
    let aws_env: Vec<(String, String)> = vec![
        ("AWS_ENDPOINT_URL".into(), moto.url.clone()),
        ("AWS_REGION".into(), "us-east-1".into()),
        ("AWS_ACCESS_KEY_ID".into(), "testing".into()),
        ("AWS_SECRET_ACCESS_KEY".into(), "testing".into()),
        ("TERN_HTTPS_ONLY".into(), "false".into()),
        ("TERN_ALLOW_DESTINATIONS".into(), "127.0.0.1/32".into()),
    ];
    let mut env = aws_env.clone();
    env.extend(resources.env().into_iter().map(|(k, v)| (k.to_owned(), v)));
    Setup {
        moto,
        aws,
        resources,
        aws_env,
        env,
    }
}

fn event(id: &str, tenant: &str) -> Event {
    serde_json::from_value(serde_json::json!({
        "id": id, "type": "order.paid", "tenant_id": tenant,
        "created_at": "2026-11-30T00:00:00Z", "payload": {"order": id},
    }))
    .unwrap()
}

async fn endpoint(s: &Setup, id: &str, tenant: &str, enabled: bool) -> Endpoint {
    let store = tern_aws::DynamoEndpointStore::new(
        aws_sdk_dynamodb::Client::new(&s.aws),
        s.resources.endpoints_table.clone(),
    );
    let mut ep = Endpoint::new(
        EndpointId::new(id).unwrap(),
        TenantId::new(tenant).unwrap(),
        "http://127.0.0.1:9/hook",
        vec!["*".into()],
        Secret::generate(),
        chrono::Utc::now(),
    );
    store.put(&ep).await.unwrap();
    if !enabled {
        store
            .disable(&ep.tenant_id, &ep.id, "gone: receiver answered 410 Gone")
            .await
            .unwrap();
        ep.enabled = false;
    }
    ep
}

/// Puts a dead letter of event `event_id` for `endpoint` into the DLQ, dead-lettered at `at`.
async fn dead_letter(
    s: &Setup,
    event_id: &str,
    tenant: &str,
    endpoint: &str,
    reason: DeadLetterReason,
    at: &str,
) {
    let m = DeliveryMessage::first(event(event_id, tenant), EndpointId::new(endpoint).unwrap())
        .dead_lettered(DeadLetter {
            reason,
            last_status: Some(503),
            last_error: Some("http status 503".into()),
            attempts: 7,
            at: at.parse().unwrap(),
        });
    in_dlq(s, &m).await;
}

/// Dead-letters `m` as the sender does: its tenant's dead-letter record, then the DLQ.
async fn in_dlq(s: &Setup, m: &DeliveryMessage) {
    tern_aws::DynamoLedger::new(
        aws_sdk_dynamodb::Client::new(&s.aws),
        s.resources.attempts_table.clone(),
        30,
    )
    .record_dead_letter(m)
    .await
    .unwrap();
    SqsQueue::new(
        aws_sdk_sqs::Client::new(&s.aws),
        s.resources.dlq_url.clone(),
    )
    .send(&QueueEntry {
        id: "t".into(),
        body: m.to_body(),
        delay_seconds: 0,
        attributes: vec![],
        group_id: None,
    })
    .await
    .unwrap();
}

async fn queue_bodies(s: &Setup, url: &str) -> Vec<String> {
    let queue = SqsQueue::new(aws_sdk_sqs::Client::new(&s.aws), url.to_owned());
    tern_ops::peek(&queue, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.body)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_answers_which_endpoint_is_failing() {
    let s = setup("toc1-").await;
    // The operator's list reads the record of every tenant in the registry.
    endpoint(&s, "ep_a", "tnt_a", true).await;
    endpoint(&s, "ep_b", "tnt_b", true).await;
    dead_letter(
        &s,
        "evt_1",
        "tnt_a",
        "ep_a",
        DeadLetterReason::Exhausted,
        "2026-11-30T10:01:00Z",
    )
    .await;
    dead_letter(
        &s,
        "evt_2",
        "tnt_a",
        "ep_a",
        DeadLetterReason::Exhausted,
        "2026-11-30T10:03:00Z",
    )
    .await;
    let big = format!(r#"{{"order":"{}"}}"#, "z".repeat(2000));
    let m = DeliveryMessage::first(
        serde_json::from_value(serde_json::json!({
            "id": "evt_3", "type": "order.paid", "tenant_id": "tnt_b",
            "created_at": "2026-11-30T00:00:00Z", "payload": serde_json::from_str::<Value>(&big).unwrap(),
        }))
        .unwrap(),
        EndpointId::new("ep_b").unwrap(),
    )
    .dead_lettered(DeadLetter {
        reason: DeadLetterReason::Gone,
        last_status: Some(410),
        last_error: None,
        attempts: 1,
        at: "2026-11-30T10:02:00Z".parse().unwrap(),
    });
    in_dlq(&s, &m).await;

    // Grouped by endpoint and reason, with totals and dead-letter times (UTC).
    let v = json(&s.env, &["dlq", "--json"]);
    assert_eq!(
        (v["total"].as_u64(), v["shown"].as_u64()),
        (Some(3), Some(3))
    );
    let groups = v["items"].as_array().unwrap();
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[0]["endpoint_id"], "ep_a");
    assert_eq!(groups[0]["reason"], "exhausted");
    assert_eq!(groups[0]["count"], 2);
    assert_eq!(groups[0]["oldest"], "2026-11-30T10:01:00Z");
    assert_eq!(groups[0]["newest"], "2026-11-30T10:03:00Z");
    assert_eq!(groups[1]["endpoint_id"], "ep_b");
    assert_eq!(groups[1]["reason"], "gone");
    let table = expect(&s.env, &["dlq"], 0);
    assert!(
        table.lines().next().unwrap().contains("OLDEST (UTC)"),
        "{table}"
    );
    assert!(
        table.contains("3 of 3 dead letters shown; none removed."),
        "{table}"
    );
    // Cut by --max: says so.
    let table = expect(&s.env, &["dlq", "--max", "1"], 0);
    assert!(
        table.contains("1 of 3 dead letters shown (raise --max to see more)"),
        "{table}"
    );

    // --list: one line per dead letter; --show: one whole payload.
    let v = json(&s.env, &["dlq", "--list", "--json"]);
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    let gone = items.iter().find(|i| i["event_id"] == "evt_3").unwrap();
    assert_eq!(gone["dead_lettered_at"], "2026-11-30T10:02:00Z");
    assert_eq!(gone["payload_truncated"], true);
    let id = gone["message_id"].as_str().unwrap().to_owned();
    let v = json(&s.env, &["dlq", "--show", &id, "--json"]);
    assert_eq!(v["payload"].as_str().unwrap(), big, "the whole payload");
    assert_eq!(v["endpoint_id"], "ep_b");
    let shown = expect(&s.env, &["dlq", "--show", &id], 0);
    assert!(
        shown.contains(&big) && shown.contains("reason:           gone"),
        "{shown}"
    );
    let out = tern(&s.env, &["dlq", "--show", "no-such-message"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no-such-message is not in the DLQ"));
    // Nothing was removed.
    assert_eq!(queue_bodies(&s, &s.resources.dlq_url).await.len(), 3);
    s.moto.stop().await;
}

fn attempt(
    event: &str,
    endpoint: &str,
    n: u32,
    second: u32,
    outcome: &str,
    wait: Option<u64>,
) -> AttemptRecord {
    AttemptRecord {
        event_id: EventId::new(event).unwrap(),
        endpoint_id: EndpointId::new(endpoint).unwrap(),
        replay_count: 0,
        attempt: n,
        takeover: 0,
        started_at: format!("2026-11-30T10:00:{second:02}Z").parse().unwrap(),
        latency_ms: 120,
        status: Some(503),
        error_class: None,
        error: None,
        location: None,
        response_excerpt: Some("maintenance until 11:00".into()),
        excerpt_truncated: false,
        outcome: outcome.into(),
        next_wait_seconds: wait,
    }
}

/// A delivery message of `tenant`'s `event` to `endpoint` whose pair the ledger keeps in
/// `layout` (`Unsharded`: as a message written before the ledger was keyed by tenant).
fn message_of(
    tenant: &str,
    event: &str,
    endpoint: &str,
    layout: tern_core::spread::LedgerLayout,
) -> DeliveryMessage {
    let event: tern_core::Event = serde_json::from_value(serde_json::json!({
        "id": event, "type": "order.paid", "tenant_id": tenant,
        "created_at": "2026-11-30T10:00:00Z", "payload": {},
    }))
    .unwrap();
    DeliveryMessage::first(event, EndpointId::new(endpoint).unwrap()).in_layout(layout)
}

async fn outbox_event(s: &Setup, tenant: &str) -> String {
    let prepared = tern_outbox::OutboxWriter::new(&s.resources.outbox_table)
        .prepare("order.paid", tenant, r#"{"order":"o_1"}"#)
        .unwrap();
    let put = prepared.put().unwrap();
    aws_sdk_dynamodb::Client::new(&s.aws)
        .put_item()
        .table_name(&s.resources.outbox_table)
        .set_item(Some(put.item().clone()))
        .send()
        .await
        .unwrap();
    prepared.event.id.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_show_excerpt_next_due_and_dead_letter() {
    let s = setup("toc2-").await;
    let tried = outbox_event(&s, "tnt_a").await;
    let untried = outbox_event(&s, "tnt_a").await;
    let ledger = DynamoLedger::new(
        aws_sdk_dynamodb::Client::new(&s.aws),
        s.resources.attempts_table.clone(),
        30,
    );
    let sharded = tern_core::spread::LedgerLayout::Sharded { shards: 1 };
    let (to_a, to_b) = (
        message_of("tnt_a", &tried, "ep_a", sharded),
        message_of("tnt_a", &tried, "ep_b", sharded),
    );
    ledger
        .record_attempt(&to_a, &attempt(&tried, "ep_a", 1, 0, "retry", Some(60)))
        .await
        .unwrap();
    ledger
        .record_attempt(
            &to_a,
            &attempt(&tried, "ep_a", 2, 30, "dead_letter:exhausted", None),
        )
        .await
        .unwrap();
    ledger
        .record_attempt(&to_b, &attempt(&tried, "ep_b", 1, 10, "delivered", None))
        .await
        .unwrap();

    let v = json(&s.env, &["attempts", &tried, "--tenant", "tnt_a", "--json"]);
    let attempts = v["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 3);
    assert_eq!(attempts[0]["response_excerpt"], "maintenance until 11:00");
    assert_eq!(
        attempts[0]["next_attempt_due_at"],
        "2026-11-30T10:01:00.120Z"
    );
    assert_eq!(v["dead_letters"][0]["reason"], "exhausted");
    assert_eq!(
        v["dead_letters"][0]["dead_lettered_at"],
        "2026-11-30T10:00:30.120Z"
    );

    let table = expect(&s.env, &["attempts", &tried, "--tenant", "tnt_a"], 0);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].contains("TIME (UTC)") && lines[0].contains("NEXT DUE (UTC)"),
        "{table}"
    );
    assert!(
        lines[1].contains("2026-11-30 10:00:00.000Z")
            && lines[1].contains("2026-11-30 10:01:00.120Z"),
        "{table}"
    );
    assert!(lines[1].contains("maintenance until 11:00"), "{table}");
    assert!(
        lines.last().unwrap().contains("in DLQ: exhausted"),
        "{table}"
    );

    // --endpoint keeps one endpoint's rows.
    let v = json(
        &s.env,
        &[
            "attempts",
            &tried,
            "--tenant",
            "tnt_a",
            "--endpoint",
            "ep_b",
            "--json",
        ],
    );
    assert_eq!(v["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(v["attempts"][0]["outcome"], "delivered");

    // Rows an older build wrote under the event id alone (version 1 messages) are found
    // with the tenant and without it; the tenant's rows only with it.
    let old = outbox_event(&s, "tnt_a").await;
    let unsharded = tern_core::spread::LedgerLayout::Unsharded;
    ledger
        .record_attempt(
            &message_of("tnt_a", &old, "ep_a", unsharded),
            &attempt(&old, "ep_a", 1, 5, "retry", Some(60)),
        )
        .await
        .unwrap();
    for args in [
        vec!["attempts", &old, "--json"],
        vec!["attempts", &old, "--tenant", "tnt_a", "--json"],
    ] {
        let v = json(&s.env, &args);
        assert_eq!(v["attempts"].as_array().unwrap().len(), 1, "{args:?}: {v}");
    }
    let out = tern(&s.env, &["attempts", &tried]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the tenant's rows need --tenant"
    );
    assert!(text(&out.stderr).contains("--tenant"));

    // A known event not tried yet, and an unknown id: different answers. Ids are per
    // tenant: the lookup of an event without attempts takes its tenant.
    let out = expect(&s.env, &["attempts", &untried, "--tenant", "tnt_a"], 0);
    assert!(out.contains("no attempts yet"), "{out}");
    let out = tern(&s.env, &["attempts", &untried, "--tenant", "tnt_b"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "another tenant's id is not found"
    );
    let out = tern(&s.env, &["attempts", &untried]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("--tenant"),
        "without a tenant it says what to add: {err}"
    );
    let out = tern(
        &s.env,
        &["attempts", "evt_never_written", "--tenant", "tnt_a"],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("event evt_never_written of tenant tnt_a not found")
            && err.contains(&s.resources.outbox_table),
        "{err}"
    );
    s.moto.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_refuses_dead_targets_and_filters_the_outage() {
    let s = setup("toc3-").await;
    endpoint(&s, "ep_live", "tnt_a", true).await;
    endpoint(&s, "ep_off", "tnt_a", false).await;
    dead_letter(
        &s,
        "evt_before",
        "tnt_a",
        "ep_live",
        DeadLetterReason::Exhausted,
        "2026-11-30T09:00:00Z",
    )
    .await;
    dead_letter(
        &s,
        "evt_during1",
        "tnt_a",
        "ep_live",
        DeadLetterReason::Exhausted,
        "2026-11-30T10:15:00Z",
    )
    .await;
    dead_letter(
        &s,
        "evt_during2",
        "tnt_b",
        "ep_live",
        DeadLetterReason::Exhausted,
        "2026-11-30T10:45:00Z",
    )
    .await;
    dead_letter(
        &s,
        "evt_off",
        "tnt_a",
        "ep_off",
        DeadLetterReason::Gone,
        "2026-11-30T10:20:00Z",
    )
    .await;
    dead_letter(
        &s,
        "evt_ghost",
        "tnt_a",
        "ep_ghost",
        DeadLetterReason::EndpointDeleted,
        "2026-11-30T10:30:00Z",
    )
    .await;

    // Usage errors (exit 2): the reasons listed are those of --help.
    let out = tern(&s.env, &["replay", "--reason", "broken"]);
    assert_eq!(out.status.code(), Some(2));
    let help = expect(&s.env, &["replay", "--help"], 0);
    for r in DeadLetterReason::ALL {
        assert!(
            text(&out.stderr).contains(r.as_str()),
            "{}",
            text(&out.stderr)
        );
        assert!(help.contains(r.as_str()), "{help}");
    }
    assert_eq!(
        tern(&s.env, &["replay", "--since", "yesterday"])
            .status
            .code(),
        Some(2)
    );
    // Relative times: a duration ago. Every dead letter here was dead-lettered on
    // 2026-11-30, so 3650 days back covers all five and one minute none (dry runs).
    let v = json(
        &s.env,
        &["replay", "--since", "3650d", "--dry-run", "--json"],
    );
    assert_eq!(v["matched"], 5, "{v}");
    let v = json(&s.env, &["replay", "--since", "1m", "--dry-run", "--json"]);
    assert_eq!(v["matched"], 0, "{v}");
    let v = json(&s.env, &["replay", "--until", "1m", "--dry-run", "--json"]);
    assert_eq!(v["matched"], 5, "{v}");

    // Without a filter the disabled and the unknown endpoint are targets: refused, no terminal.
    let out = tern(&s.env, &["replay"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("refusing to replay"), "{err}");
    assert!(
        err.contains("endpoint ep_off: disabled (gone: receiver answered 410 Gone)"),
        "{err}"
    );
    assert!(err.contains("endpoint ep_ghost: unknown"), "{err}");
    assert_eq!(
        queue_bodies(&s, &s.resources.dlq_url).await.len(),
        5,
        "nothing moved"
    );
    let out = tern(&s.env, &["replay", "--endpoint", "ep_off"]);
    assert_eq!(out.status.code(), Some(1));

    // The outage window, one tenant: only evt_during1 (ep_off's and ep_ghost's are in the
    // window but --endpoint narrows to the live one).
    let v = json(
        &s.env,
        &[
            "replay",
            "--endpoint",
            "ep_live",
            "--tenant",
            "tnt_a",
            "--since",
            "2026-11-30T10:00:00Z",
            "--until",
            "2026-11-30T11:00:00Z",
            "--json",
        ],
    );
    assert_eq!(v["replayed"], 1, "{v}");
    assert_eq!(v["delivery_ids"][0], "evt_during1.ep_live");
    // --event picks one.
    let v = json(&s.env, &["replay", "--event", "evt_during2", "--json"]);
    assert_eq!(v["replayed"], 1, "{v}");
    // --force replays to the disabled one anyway, and says so.
    let v = json(
        &s.env,
        &["replay", "--event", "evt_off", "--force", "--json"],
    );
    assert_eq!(v["replayed"], 1);
    assert_eq!(v["bad_targets"][0]["endpoint_id"], "ep_off");
    let delivered: Vec<String> = queue_bodies(&s, &s.resources.delivery_queue_url).await;
    assert_eq!(delivered.len(), 3);
    let left = queue_bodies(&s, &s.resources.dlq_url).await;
    assert_eq!(left.len(), 2);
    assert!(
        left.iter().any(|b| b.contains("evt_before"))
            && left.iter().any(|b| b.contains("evt_ghost"))
    );
    s.moto.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_failures_name_the_tern_event_and_retry_it() {
    let s = setup("toc4-").await;
    endpoint(&s, "ep_one", "tnt_a", true).await;
    endpoint(&s, "ep_two", "tnt_a", true).await;
    let sqs = aws_sdk_sqs::Client::new(&s.aws);
    let ddb = aws_sdk_dynamodb::Client::new(&s.aws);

    // A poison record, parked by the real relay: schema version 99.
    let good = outbox_event(&s, "tnt_a").await;
    let good_key = format!("tnt_a#{good}");
    let item = ddb
        .get_item()
        .table_name(&s.resources.outbox_table)
        .key(
            "event_id",
            aws_sdk_dynamodb::types::AttributeValue::S(good_key.clone()),
        )
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    let mut image = serde_json::Map::new();
    for (k, v) in &item {
        image.insert(
            k.clone(),
            match v {
                aws_sdk_dynamodb::types::AttributeValue::S(t) => serde_json::json!({ "S": t }),
                aws_sdk_dynamodb::types::AttributeValue::N(n) => serde_json::json!({ "N": n }),
                other => panic!("unexpected {other:?}"),
            },
        );
    }
    image.insert("schema_version".into(), serde_json::json!({ "N": "99" }));
    let record = serde_json::json!({"Records": [{
        "eventID": "stream-record-77", "eventName": "INSERT", "eventVersion": "1.1",
        "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
        "dynamodb": {"Keys": {"event_id": {"S": good_key}}, "NewImage": image,
                     "SequenceNumber": "700", "SizeBytes": 10, "StreamViewType": "NEW_IMAGE"}
    }]});
    let deps = tern_handlers::relay::RelayDeps {
        endpoints: std::sync::Arc::new(tern_aws::DynamoEndpointStore::new(
            ddb.clone(),
            s.resources.endpoints_table.clone(),
        )),
        delivery_queue: std::sync::Arc::new(SqsQueue::new(
            sqs.clone(),
            s.resources.delivery_queue_url.clone(),
        )),
        failure_queue: std::sync::Arc::new(SqsQueue::new(
            sqs.clone(),
            s.resources.relay_failure_queue_url.clone(),
        )),
        max_payload_bytes: 262_144,
        checkpoints: None,
    };
    let metrics =
        tern_handlers::metrics::Metrics::new("Tern", tern_handlers::metrics::MetricsSink::Discard);
    let (_, outcomes) = tern_handlers::relay::handle_value(&deps, record, &metrics).await;
    assert!(matches!(
        outcomes[0],
        tern_handlers::relay::RecordOutcome::Poison { .. }
    ));

    // A refused delivery for one endpoint, parked with the names relay.rs gives it.
    let refused = outbox_event(&s, "tnt_a").await;
    SqsQueue::new(sqs.clone(), s.resources.relay_failure_queue_url.clone())
        .send(&QueueEntry {
            id: "p".into(),
            body: serde_json::json!({
                "source": "tern-relay", "reason": "delivery queue refused the message: MessageTooLong",
                "event_id": "stream-record-78", "sequence_number": "800",
                "keys": {"event_id": {"S": format!("tnt_a#{refused}")}}, "tern_event_id": refused, "endpoint_id": "ep_two",
            })
            .to_string(),
            delay_seconds: 0,
            attributes: vec![("tern-reason".into(), "refused_delivery_message".into())],
            group_id: None,
        })
        .await
        .unwrap();

    let v = json(&s.env, &["relay-failures", "--json"]);
    assert_eq!(v["total"], 2);
    let items = v["items"].as_array().unwrap();
    let poison = items
        .iter()
        .find(|i| i["tern_event_id"] == good.as_str())
        .expect("names the Tern event");
    assert!(
        poison["reason"]
            .as_str()
            .unwrap()
            .contains("schema version 99"),
        "{poison}"
    );
    assert_eq!(poison["kind"], "unreadable_outbox_record");
    let other = items
        .iter()
        .find(|i| i["tern_event_id"] == refused.as_str())
        .unwrap();
    assert_eq!(other["endpoint_id"], "ep_two");
    let table = expect(&s.env, &["relay-failures"], 0);
    assert!(
        table.contains(&good) && !table.contains("stream-record-77"),
        "{table}"
    );

    let poison_id = poison["message_id"].as_str().unwrap().to_owned();
    let refused_id = other["message_id"].as_str().unwrap().to_owned();
    let out = tern(&s.env, &["relay-failures", "--retry", "nope"]);
    assert_eq!(out.status.code(), Some(1));

    // The refused one goes to its endpoint only.
    let v = json(
        &s.env,
        &["relay-failures", "--retry", &refused_id, "--json"],
    );
    assert_eq!(v["deliveries"], 1);
    assert_eq!(v["endpoint_id"], "ep_two");
    let queued: Vec<DeliveryMessage> = queue_bodies(&s, &s.resources.delivery_queue_url)
        .await
        .iter()
        .map(|b| DeliveryMessage::parse(b).unwrap())
        .collect();
    assert_eq!(queued.len(), 1);
    assert_eq!(
        (queued[0].event.id.as_str(), queued[0].endpoint_id.as_str()),
        (refused.as_str(), "ep_two")
    );

    // Retried before the fix (the table item is unreadable too): parked again, exit 1 with
    // one `error:` line. The relay handler logs the park at ERROR; without RUST_LOG none of
    // its tracing lines (nor a terminal colour code) reaches the operator's stderr.
    ddb.update_item()
        .table_name(&s.resources.outbox_table)
        .key(
            "event_id",
            aws_sdk_dynamodb::types::AttributeValue::S(good_key.clone()),
        )
        .update_expression("SET schema_version = :v")
        .expression_attribute_values(
            ":v",
            aws_sdk_dynamodb::types::AttributeValue::N("99".into()),
        )
        .send()
        .await
        .unwrap();
    let out = tern(&s.env, &["relay-failures", "--retry", &poison_id]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.starts_with("error: "), "{err}");
    assert_eq!(err.lines().count(), 1, "only the CLI's own line: {err}");
    assert!(!err.contains('\u{1b}'), "no terminal colour codes: {err:?}");
    let poison_id = json(&s.env, &["relay-failures", "--json"])["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["tern_event_id"] == good.as_str())
        .expect("parked again")["message_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // With RUST_LOG the operator asked for the handler's lines, still without colour codes
    // when stderr is not a terminal.
    let mut logged = s.env.clone();
    logged.push(("RUST_LOG".into(), "error".into()));
    let out = tern(&logged, &["relay-failures", "--retry", &poison_id]);
    let err = text(&out.stderr);
    assert!(err.contains("ERROR") && err.lines().count() > 1, "{err}");
    assert!(!err.contains('\u{1b}'), "{err:?}");
    let poison_id = json(&s.env, &["relay-failures", "--json"])["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["tern_event_id"] == good.as_str())
        .expect("parked again")["message_id"]
        .as_str()
        .unwrap()
        .to_owned();
    ddb.update_item()
        .table_name(&s.resources.outbox_table)
        .key(
            "event_id",
            aws_sdk_dynamodb::types::AttributeValue::S(good_key.clone()),
        )
        .update_expression("SET schema_version = :v")
        .expression_attribute_values(":v", aws_sdk_dynamodb::types::AttributeValue::N("2".into()))
        .send()
        .await
        .unwrap();

    // The poison one: the item in the table is right (only the stream record was bad, as
    // after a fix), so re-reading it by its keys relays it to both endpoints.
    let out = expect(&s.env, &["relay-failures", "--retry", &poison_id], 0);
    assert!(out.contains("2 delivery message(s) queued"), "{out}");
    assert_eq!(
        queue_bodies(&s, &s.resources.delivery_queue_url)
            .await
            .len(),
        3
    );
    assert!(
        queue_bodies(&s, &s.resources.relay_failure_queue_url)
            .await
            .is_empty(),
        "both removed"
    );
    s.moto.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stack_outputs_json_and_a_stale_local_env() {
    let s = setup("toc5-").await;
    endpoint(&s, "ep_stack", "tnt_a", true).await;
    // A tiny stack whose outputs name the provisioned resources (what a deployed stack gives).
    let r = &s.resources;
    let outputs: serde_json::Map<String, Value> = [
        ("OutboxTableName", &r.outbox_table),
        ("EndpointsTableName", &r.endpoints_table),
        ("AttemptsTableName", &r.attempts_table),
        ("DeliveryQueueUrl", &r.delivery_queue_url),
        ("DlqUrl", &r.dlq_url),
        ("RelayFailureQueueUrl", &r.relay_failure_queue_url),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), serde_json::json!({ "Value": v })))
    .collect();
    let template = serde_json::json!({
        "Resources": {"Marker": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "toc5-marker"}}},
        "Outputs": outputs,
    });
    aws_sdk_cloudformation::Client::new(&s.aws)
        .create_stack()
        .stack_name("tern-oncall")
        .template_body(template.to_string())
        .send()
        .await
        .expect("moto creates the stack");

    // No TERN_* variable at all: --stack supplies the names.
    let v = json(
        &s.aws_env,
        &["--stack", "tern-oncall", "endpoints", "list", "--json"],
    );
    assert_eq!(v[0]["id"], "ep_stack");
    let v = json(&s.aws_env, &["--stack", "tern-oncall", "dlq", "--json"]);
    assert_eq!(v["total"], 0);
    let out = tern(&s.aws_env, &["endpoints", "list"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("TERN_ENDPOINTS_TABLE is required"));
    let out = tern(&s.aws_env, &["--stack", "no-such-stack", "dlq"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("stack no-such-stack does not exist"),
        "{}",
        text(&out.stderr)
    );

    // --json where people watch progress is a usage error, not ignored.
    for args in [["local", "--json"], ["demo", "--json"]] {
        let out = tern(&s.env, &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(text(&out.stderr).contains("--json is not available"));
    }

    // --json on the printing endpoint commands.
    let v = json(
        &s.env,
        &[
            "endpoints",
            "add",
            "--tenant",
            "tnt_j",
            "--url",
            "http://127.0.0.1:9/j",
            "--json",
        ],
    );
    let id = v["id"].as_str().unwrap().to_owned();
    assert!(v["secret"].as_str().unwrap().starts_with("whsec_"));
    for args in [
        vec!["endpoints", "show", id.as_str(), "--json"],
        vec!["endpoints", "disable", id.as_str(), "--json"],
        vec!["endpoints", "enable", id.as_str(), "--json"],
        vec![
            "endpoints",
            "update",
            id.as_str(),
            "--description",
            "x",
            "--json",
        ],
    ] {
        assert_eq!(json(&s.env, &args)["id"], id.as_str(), "{args:?}");
    }
    assert_eq!(
        json(&s.env, &["endpoints", "rotate-secret", &id, "--json"])["id"],
        id.as_str()
    );
    assert_eq!(
        json(&s.env, &["endpoints", "delete", &id, "--json"])["id"],
        id.as_str()
    );

    // A stale env file: the port it names has nothing listening any more.
    let url = s.moto.url.clone();
    s.moto.stop().await;
    let out = tern(&s.env, &["dlq"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(&url) && err.contains("is `tern local` running?"),
        "{err}"
    );
    assert!(!err.contains("dispatch failure"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// Runs `tern` on a pseudo-terminal (util-linux `script`), typing `answer`.
fn tern_on_terminal(env: &[(String, String)], args: &str, answer: &str) -> (Option<i32>, String) {
    use std::io::Write as _;
    let mut child = std::process::Command::new("script")
        .args([
            "-qec",
            &format!("{} {args}", env!("CARGO_BIN_EXE_tern")),
            "/dev/null",
        ])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("util-linux `script` is required for this test");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(answer.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.code(), text(&out.stdout))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_asks_on_a_terminal() {
    let s = setup("toc6-").await;
    endpoint(&s, "ep_off", "tnt_a", false).await;
    dead_letter(
        &s,
        "evt_off",
        "tnt_a",
        "ep_off",
        DeadLetterReason::Gone,
        "2026-11-30T10:20:00Z",
    )
    .await;
    // "n" (or anything but y/yes): refused, nothing moved.
    let (code, said) = tern_on_terminal(&s.env, "replay", "n\n");
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("Replay anyway? [y/N]") && said.contains("endpoint ep_off: disabled"),
        "{said}"
    );
    assert_eq!(queue_bodies(&s, &s.resources.dlq_url).await.len(), 1);
    // "y": replayed.
    let (code, said) = tern_on_terminal(&s.env, "replay", "y\n");
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("replayed 1 of 1"), "{said}");
    assert_eq!(
        queue_bodies(&s, &s.resources.delivery_queue_url)
            .await
            .len(),
        1
    );
    s.moto.stop().await;
}
