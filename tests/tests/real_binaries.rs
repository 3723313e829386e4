//! The real Lambda binaries (`sender`, `relay`, `relay-pg`, `replay`, `api`, as `cargo
//! build` makes them), each run once as Lambda would run its `bootstrap`: spawned with the
//! Lambda environment and pointed at a Runtime API emulator on 127.0.0.1, with AWS on moto
//! (and, for `relay-pg`, a real PostgreSQL server). Each gets an event from `events/` (or
//! the schedule's) and its answer is checked, so a binary that cannot start (a
//! missing variable, an AWS call at init, a panic in the wiring) or answers in the wrong
//! shape fails here, not in a deployment.
//!
//! The binaries are looked up next to this test's own executable (`target/<profile>/`);
//! `cargo test --workspace --all-targets` (`make test`) builds them first. Run alone:
//! `cargo build -p tern-sender -p tern-relay -p tern-relay-pg -p tern-replay -p tern-api-fn` then
//! `cargo test -p tern-tests --test real_binaries`.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tern_core::EndpointId;
use tern_local::{LocalOptions, LocalTern};
use tern_runtime_emulator::{Outcome, RuntimeApi};
use tern_tests::*;

/// How long one invocation may take (it does a few calls to moto and POSTs on loopback).
const INVOKE_LIMIT: Duration = Duration::from_secs(60);

/// Path of a workspace binary built with the same profile as this test.
fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/real_binaries-<hash> -> target/<profile>/<name>
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("test executable lives in target/<profile>/deps");
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "{} is missing: build it first with `cargo build -p {}` (make test does)",
        path.display(),
        if name == "api" {
            "tern-api-fn".to_owned()
        } else {
            format!("tern-{name}")
        }
    );
    path
}

/// A running function binary under the emulator. Killed when dropped.
struct Function {
    api: RuntimeApi,
    child: tokio::process::Child,
}

impl Function {
    /// Spawns `name` with the deployment's function environment, AWS pointed at moto.
    async fn start(name: &str, local: &LocalTern) -> Self {
        let api = RuntimeApi::start().await.expect("runtime API emulator");
        Self::start_with(name, local, api, &[]).await
    }

    /// [`Self::start`] under `api`, with `extra` variables.
    async fn start_with(
        name: &str,
        local: &LocalTern,
        api: RuntimeApi,
        extra: &[(&str, &str)],
    ) -> Self {
        let child = tokio::process::Command::new(binary(name))
            .env_clear()
            .envs(api.lambda_env(name, 256))
            .envs(local.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("AWS_ENDPOINT_URL", moto_url())
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("RUST_LOG", "info")
            .envs(extra.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the function binary");
        Self { api, child }
    }

    /// Invokes it once; returns the JSON it answered. Panics on an error outcome, or
    /// when the process exits first (a failed init ends a Lambda process).
    async fn invoke(&mut self, event: &Value) -> Value {
        let payload = serde_json::to_vec(event).expect("event JSON");
        let outcome = tokio::select! {
            o = self.api.invoke(payload, INVOKE_LIMIT) => o,
            status = self.child.wait() => panic!("the function exited with {status:?}"),
        };
        match outcome {
            Ok(Outcome::Response(body)) => {
                serde_json::from_slice(&body).expect("the function answered JSON")
            }
            other => panic!("the function did not answer: {other:?}"),
        }
    }
}

/// The sender binary delivers `events/sqs-delivery-batch.json` (3 messages to
/// `ep_fixture`) to a loopback receiver and answers the all-ok partial batch response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sender_binary_answers_the_fixture_batch() {
    let local = deployment_without_pollers("rbsender", LocalOptions::default()).await;
    let receiver = Receiver::start().await.expect("receiver");
    add_endpoint_with(
        &local,
        EndpointId::new("ep_fixture").expect("id"),
        "tnt_fixture",
        &receiver.url("/hook"),
        &["order.paid"],
        None,
        None,
    )
    .await;
    let mut f = Function::start("sender", &local).await;
    let got = f.invoke(&fixture_json("sqs-delivery-batch.json")).await;
    assert_eq!(got, fixture_json("golden/sqs-batch-all-ok.json"));
    let posts = receiver.requests("/hook");
    let mut ids: Vec<&str> = posts
        .iter()
        .filter_map(|c| c.header("webhook-id"))
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, ["evt_fixture_1", "evt_fixture_2", "evt_fixture_3"]);
}

/// The relay binary turns `events/dynamodb-stream-insert.json` (one INSERT of
/// `evt_stream_2` for `tnt_fixture`) into one delivery message for the tenant's endpoint,
/// and answers an empty `batchItemFailures`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_binary_answers_the_fixture_stream_batch() {
    let local = deployment_without_pollers("rbrelay", LocalOptions::default()).await;
    add_endpoint_with(
        &local,
        EndpointId::new("ep_fixture").expect("id"),
        "tnt_fixture",
        "http://127.0.0.1:9/hook",
        &["order.paid"],
        None,
        None,
    )
    .await;
    let mut f = Function::start("relay", &local).await;
    let got = f.invoke(&fixture_json("dynamodb-stream-insert.json")).await;
    assert_eq!(got, json!({ "batchItemFailures": [] }));
    let queued = peek_queue(&local, &local.resources.delivery_queue_url.clone()).await;
    assert_eq!(queued.len(), 1, "{queued:?}");
    let message = tern_core::DeliveryMessage::parse(&queued[0]).expect("a delivery message");
    assert_eq!(message.delivery_id.as_str(), "evt_stream_2.ep_fixture");
    assert_eq!(message.attempt, 1);
}

/// The replay binary takes a `ReplayRequest` and moves a dead letter back to the delivery
/// queue, answering its `ReplaySummary`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_binary_answers_a_replay_request() {
    let local = deployment_without_pollers("rbreplay", LocalOptions::default()).await;
    let batch = fixture_json("sqs-delivery-batch.json");
    let body = batch["Records"][0]["body"].as_str().expect("fixture body");
    local
        .sqs()
        .send_message()
        .queue_url(&local.resources.dlq_url)
        .message_body(body)
        .send()
        .await
        .expect("seed the DLQ");
    let mut f = Function::start("replay", &local).await;
    let got = f.invoke(&json!({ "max_messages": 1 })).await;
    assert_eq!(got["dry_run"], json!(false), "{got}");
    assert_eq!(got["examined"], json!(1), "{got}");
    assert_eq!(got["replayed"], json!(1), "{got}");
    assert_eq!(
        got["delivery_ids"],
        json!(["evt_fixture_1.ep_fixture"]),
        "{got}"
    );
    let queued = peek_queue(&local, &local.resources.delivery_queue_url.clone()).await;
    assert_eq!(queued.len(), 1, "{queued:?}");
    let message = tern_core::DeliveryMessage::parse(&queued[0]).expect("a delivery message");
    assert_eq!(message.delivery_id.as_str(), "evt_fixture_1.ep_fixture");
}

/// The replay binary reads the tenant's dead-letter record (the stacks give it the
/// attempts table): a tenant's dry run counts the record's entry without receiving from
/// the shared DLQ (no message is held invisible), and a replay removes the entry it
/// moved. Before, its wiring had no ledger: the dry run received (and hid) the DLQ's
/// messages, and a replayed entry stayed in the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_binary_reads_and_trims_the_tenants_dead_letter_record() {
    let local = deployment_without_pollers("rbreplayrec", LocalOptions::default()).await;
    let batch = fixture_json("sqs-delivery-batch.json");
    let body = batch["Records"][0]["body"].as_str().expect("fixture body");
    let dead = tern_core::DeliveryMessage::parse(body)
        .expect("fixture message")
        .dead_lettered(tern_core::DeadLetter {
            reason: tern_core::DeadLetterReason::Exhausted,
            last_status: Some(500),
            last_error: None,
            attempts: 8,
            at: chrono::Utc::now(),
        });
    // As the sender dead-letters: the record's entry, then the DLQ message.
    local
        .sender
        .ledger
        .record_dead_letter(&dead)
        .await
        .expect("record");
    local
        .sqs()
        .send_message()
        .queue_url(&local.resources.dlq_url)
        .message_body(dead.to_body())
        .send()
        .await
        .expect("seed the DLQ");
    let tenant = dead.event.tenant_id.to_string();
    let mut f = Function::start("replay", &local).await;
    let dry = f
        .invoke(&json!({ "dry_run": true, "filters": { "tenant_id": tenant } }))
        .await;
    assert_eq!(
        (dry["recorded"].clone(), dry["matched"].clone()),
        (json!(1), json!(1)),
        "{dry}"
    );
    let hidden = local
        .sqs()
        .get_queue_attributes()
        .queue_url(&local.resources.dlq_url)
        .attribute_names(
            aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
        )
        .send()
        .await
        .expect("attributes");
    assert_eq!(
        hidden
            .attributes()
            .and_then(|a| a.get(
                &aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible
            ))
            .map(String::as_str),
        Some("0"),
        "the dry run held no DLQ message"
    );
    let done = f
        .invoke(&json!({ "filters": { "tenant_id": tenant } }))
        .await;
    assert_eq!(done["replayed"], json!(1), "{done}");
    let left = local
        .sender
        .ledger
        .dead_letters(&tern_core::dead_letters::DeadLetterQuery {
            tenant: dead.event.tenant_id.clone(),
            endpoint: None,
            max: 10,
        })
        .await
        .expect("read the record");
    assert!(
        left.entries.is_empty(),
        "the replayed entry is out of the record: {:?}",
        left.entries
    );
}

/// The api binary answers an API Gateway HTTP API event (payload 2.0) whose request
/// context carries the IAM caller API Gateway authorized (`events/apigw-http-iam-get-endpoint.json`):
/// the endpoint, no secret. The same event without the IAM authorizer (a route left open
/// by mistake) is a 401 problem.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_binary_answers_an_iam_authorized_api_gateway_event() {
    let local = deployment_without_pollers("rbapi", LocalOptions::default()).await;
    add_endpoint_with(
        &local,
        EndpointId::new("ep_fixture").expect("id"),
        "tnt_fixture",
        "http://127.0.0.1:9/hook",
        &["order.paid"],
        None,
        None,
    )
    .await;
    let mut f = Function::start("api", &local).await;
    let event = fixture_json("apigw-http-iam-get-endpoint.json");
    let got = f.invoke(&event).await;
    assert_eq!(got["statusCode"], json!(200), "{got}");
    let body: Value = serde_json::from_str(got["body"].as_str().expect("body")).expect("JSON");
    assert_eq!(body["id"], "ep_fixture", "{body}");
    assert_eq!(body["tenant_id"], "tnt_fixture");
    assert!(!got["body"].as_str().unwrap_or("").contains("whsec_"));
    // Another tenant's path with the same endpoint id: 404.
    let mut other = event.clone();
    other["rawPath"] = json!("/v1/tenants/tnt_other/endpoints/ep_fixture");
    other["requestContext"]["http"]["path"] = other["rawPath"].clone();
    let got = f.invoke(&other).await;
    assert_eq!(got["statusCode"], json!(404), "{got}");
    // No IAM caller in the context: refused.
    let mut open = event;
    open["requestContext"]
        .as_object_mut()
        .expect("context")
        .remove("authorizer");
    let got = f.invoke(&open).await;
    assert_eq!(got["statusCode"], json!(401), "{got}");
    let body: Value = serde_json::from_str(got["body"].as_str().expect("body")).expect("JSON");
    assert_eq!(body["type"], "urn:tern:problem:unauthorized", "{body}");
}

/// The PostgreSQL relay binary, invoked as its schedule invokes it, polls the outbox table
/// of a real PostgreSQL server (`tern_tests::postgres`) for its invocation: with 14 s to
/// live it polls for about 2 s (no batch starts in the last 12 s), publishes the row a
/// transaction committed, queues its delivery message, and answers what it did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_pg_binary_publishes_the_outbox_rows_for_its_invocation() {
    let pg = tern_tests::postgres::PgServer::start().await;
    let mut db = pg.migrated().await;
    let local = deployment_without_pollers("rbrelaypg", LocalOptions::default()).await;
    add_endpoint_with(
        &local,
        EndpointId::new("ep_fixture").expect("id"),
        "tnt_fixture",
        "http://127.0.0.1:9/hook",
        &["order.paid"],
        None,
        None,
    )
    .await;
    let tx = db.transaction().await.unwrap();
    tern_outbox::OutboxWriter::new(tern_outbox::postgres::TABLE)
        .prepare_with_id(
            tern_core::EventId::new("evt_pg_1").unwrap(),
            "order.paid",
            "tnt_fixture",
            r#"{"order_id":"o_1"}"#,
        )
        .unwrap()
        .insert(&tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let api = RuntimeApi::start_with_deadline(14_000)
        .await
        .expect("runtime API emulator");
    let url = pg.url();
    let mut f = Function::start_with(
        "relay-pg",
        &local,
        api,
        &[("TERN_OUTBOX_DATABASE_URL", url.as_str())],
    )
    .await;
    // The scheduler's event carries nothing the relay reads.
    let got = f.invoke(&json!({})).await;
    assert_eq!(got["published"], 1, "{got}");
    assert_eq!(got["errors"], 0, "{got}");
    let published: bool = db
        .query_one(
            "SELECT published_at IS NOT NULL FROM tern_outbox WHERE event_id = 'evt_pg_1'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(published);
    let queued = peek_queue(&local, &local.resources.delivery_queue_url.clone()).await;
    assert_eq!(queued.len(), 1, "{queued:?}");
    let message = tern_core::DeliveryMessage::parse(&queued[0]).expect("a delivery message");
    assert_eq!(message.delivery_id.as_str(), "evt_pg_1.ep_fixture");
}
