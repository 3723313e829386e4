//! Issue 11, item 5: every AWS call is bounded. An AWS endpoint that accepts connections and
//! never answers (a black hole on 127.0.0.1) stands in for a stalled DynamoDB, SQS or Step
//! Functions. The sender, relay and replay, wired exactly as the Lambda binaries wire them,
//! each return on their own, well before their function timeout (`infra/settings.json`),
//! with the messages (or stream record) the stalled calls served reported as failures.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tern_handlers::config::{Env, RelayConfig, ReplayConfig, SenderConfig};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::replay::ReplayRequest;
use tern_tests::{fixture, fixture_json, no_dns};
use tokio::net::TcpListener;

/// Accepts every connection and holds it open without reading or answering.
async fn black_hole() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    format!("http://{addr}")
}

fn env() -> HashMap<&'static str, String> {
    let queue = |name: &str| format!("http://127.0.0.1:1/123456789012/{name}");
    HashMap::from([
        ("TERN_ENDPOINTS_TABLE", "tern-endpoints".to_owned()),
        ("TERN_ATTEMPTS_TABLE", "tern-attempts".to_owned()),
        ("TERN_HEALTH_TABLE", "tern-health".to_owned()),
        ("TERN_DELIVERY_QUEUE_URL", queue("tern-delivery")),
        ("TERN_DLQ_URL", queue("tern-dlq")),
        ("TERN_RELAY_FAILURE_QUEUE_URL", queue("tern-relay-failures")),
    ])
}

/// A function's timeout, seconds, from the one settings file both stacks deploy.
fn function_timeout(name: &str) -> Duration {
    let settings: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../infra/settings.json"
        ))
        .expect("settings"),
    )
    .expect("settings JSON");
    let seconds = settings["functions"][name]["timeoutSeconds"]
        .as_u64()
        .expect("timeoutSeconds");
    Duration::from_secs(seconds)
}

#[tokio::test]
async fn a_stalled_aws_endpoint_fails_only_its_messages_before_the_function_timeout() {
    let aws = tern_local::moto::sdk_config_for(&black_hole().await).await;
    let vars = env();
    let lookup = |k: &str| vars.get(k).cloned();
    let env = Env(&lookup);
    let metrics = || Metrics::new("Tern", MetricsSink::Discard);

    let sender = tern_aws::wiring::sender_deps(
        &SenderConfig::from_env(&env).expect("sender config"),
        &aws,
        Some(no_dns()),
    )
    .expect("sender deps");
    let relay = tern_aws::wiring::relay_deps(&RelayConfig::from_env(&env).expect("relay"), &aws);
    let replay =
        tern_aws::wiring::replay_deps(&ReplayConfig::from_env(&env).expect("replay"), &aws);

    let batch: aws_lambda_events::sqs::SqsEvent =
        serde_json::from_str(&fixture("sqs-delivery-batch.json")).expect("fixture");
    let ids: Vec<String> = batch
        .records
        .iter()
        .filter_map(|r| r.message_id.clone())
        .collect();
    let stream = fixture_json("dynamodb-stream-insert.json");

    // The three run at once, as three Lambda functions would.
    let sender_run = async {
        let started = Instant::now();
        let m = metrics();
        let (response, _) = tern_handlers::sender::handle(&sender, batch, &m).await;
        (started.elapsed(), response)
    };
    let relay_run = async {
        let started = Instant::now();
        let m = metrics();
        let (response, _) = tern_handlers::relay::handle_value(&relay, stream, &m).await;
        (started.elapsed(), response)
    };
    let replay_run = async {
        let started = Instant::now();
        let m = metrics();
        let result = tern_handlers::replay::handle(&replay, ReplayRequest::default(), &m).await;
        (started.elapsed(), result)
    };
    let guard = function_timeout("replay");
    let (
        (sender_took, sender_response),
        (relay_took, relay_response),
        (replay_took, replay_result),
    ) = tokio::time::timeout(guard, async {
        tokio::join!(sender_run, relay_run, replay_run)
    })
    .await
    .expect("no handler may still wait on a stalled AWS call at the replay's timeout");
    eprintln!(
        "black hole: sender returned after {sender_took:?}, relay after {relay_took:?}, replay after {replay_took:?}"
    );

    // Sender: every message read its endpoint from the stalled DynamoDB; each is reported.
    assert!(sender_took < function_timeout("sender"), "{sender_took:?}");
    let mut failed: Vec<String> = sender_response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect();
    failed.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(failed, expected, "every message is reported, none lost");

    // Relay: the first record's endpoint lookup stalled; it is the record to retry from.
    assert!(relay_took < function_timeout("relay"), "{relay_took:?}");
    assert_eq!(relay_response.batch_item_failures.len(), 1);
    let first_sequence =
        fixture_json("dynamodb-stream-insert.json")["Records"][0]["dynamodb"]["SequenceNumber"]
            .as_str()
            .map(str::to_owned);
    assert_eq!(
        relay_response.batch_item_failures[0].item_identifier,
        first_sequence
    );

    // Replay: the DLQ read stalled; the run ends with the error, not at the timeout.
    assert!(replay_took < function_timeout("replay"), "{replay_took:?}");
    let error = replay_result.expect_err("a stalled DLQ is an error");
    assert!(
        matches!(error, tern_core::ports::PortError::Unavailable(_)),
        "{error:?}"
    );
}
