//! Fairness between tenants (issue 10, item 6): every message Tern puts on the delivery
//! queue carries `MessageGroupId` = its tenant id, so the standard delivery queue works as
//! an SQS fair queue. One test per send path, each on moto: the relay, a sender retry
//! (`DelaySeconds`), a sender long-wait requeue (`not_before`), the Step Functions wait
//! (the real state machine definition, executed by moto), the replay handler (the replay
//! function, the local console's Replay) and the operator's `tern replay`. Each reads the
//! delivery queue back with `MessageSystemAttributeNames=[MessageGroupId]`, as a consumer
//! on AWS would, so each fails if its path forgets the group id.

use std::time::Duration;

use aws_sdk_sqs::types::MessageSystemAttributeName;
use chrono::Utc;
use serde_json::json;
use tern_core::ports::{MessageQueue, QueueEntry};
use tern_core::{DeadLetter, DeadLetterReason, DeliveryMessage, EndpointId, RetrySchedule};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::replay::ReplayRequest;
use tern_handlers::sender::MessageOutcome;
use tern_local::local::{LocalOptions, LocalTern};
use tern_tests::*;

fn metrics() -> Metrics {
    Metrics::new("Tern", MetricsSink::Discard)
}

/// Options for a handler-level deployment: no console, loopback receivers allowed.
fn options() -> LocalOptions {
    LocalOptions {
        console_port: None,
        ..LocalOptions::default()
    }
}

/// Receives up to `n` messages from the delivery queue within `limit` (long polls, a
/// visibility timeout that outlasts the test) and returns each as (delivery message, its
/// `MessageGroupId`).
async fn received(
    local: &LocalTern,
    n: usize,
    limit: Duration,
) -> Vec<(DeliveryMessage, Option<String>)> {
    let sqs = local.sqs();
    let deadline = tokio::time::Instant::now() + limit;
    let mut out = Vec::new();
    while out.len() < n && tokio::time::Instant::now() < deadline {
        let answer = sqs
            .receive_message()
            .queue_url(&local.resources.delivery_queue_url)
            .max_number_of_messages(10)
            .visibility_timeout(600)
            .wait_time_seconds(1)
            .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
            .send()
            .await
            .expect("ReceiveMessage");
        for m in answer.messages() {
            let message = DeliveryMessage::parse(m.body().unwrap_or_default())
                .expect("a delivery message on the delivery queue");
            let group = m
                .attributes()
                .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
                .cloned();
            out.push((message, group));
        }
    }
    out
}

/// Asserts every received message is in its own tenant's group.
fn assert_tenant_groups(got: &[(DeliveryMessage, Option<String>)]) {
    for (m, group) in got {
        assert_eq!(
            group.as_deref(),
            Some(m.event.tenant_id.as_str()),
            "delivery {} (attempt {}, tenant {}) reached the delivery queue with MessageGroupId {group:?}",
            m.delivery_id,
            m.attempt,
            m.event.tenant_id
        );
    }
}

/// One outbox INSERT stream record (NEW_IMAGE), as DynamoDB Streams hands it to the relay.
fn insert_record(seq: usize, event_id: &str, tenant: &str) -> serde_json::Value {
    json!({
        "eventID": format!("e{seq}"),
        "eventName": "INSERT",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/tern-outbox/stream/2026",
        "dynamodb": {
            "ApproximateCreationDateTime": 1_764_374_400.0,
            "Keys": {"event_id": {"S": event_id}},
            "SequenceNumber": format!("{:021}", 100 + seq),
            "SizeBytes": 256,
            "StreamViewType": "NEW_IMAGE",
            "NewImage": {
                "event_id": {"S": event_id},
                "tern_record": {"S": "outbox_event"},
                "schema_version": {"N": "1"},
                "event_type": {"S": "order.paid"},
                "tenant_id": {"S": tenant},
                "created_at": {"S": "2026-11-01T00:00:00.000Z"},
                "payload": {"S": "{\"order_id\":\"ord_1\"}"},
                "expires_at": {"N": "1764979200"}
            }
        }
    })
}

fn event(id: &str, tenant: &str) -> tern_core::Event {
    serde_json::from_value(json!({
        "id": id, "type": "order.paid", "tenant_id": tenant,
        "created_at": "2026-11-30T00:00:00Z", "payload": {"order": id},
    }))
    .expect("event")
}

/// The relay: one stream batch of three events of two tenants, fanned out to two
/// endpoints of one tenant and one of the other; every SendMessageBatch entry is in its
/// tenant's group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_puts_every_delivery_in_its_tenant_group() {
    let local = deployment_without_pollers("fq-relay", options()).await;
    for (tenant, n) in [("tnt_fq_busy", 2), ("tnt_fq_quiet", 1)] {
        for _ in 0..n {
            add_endpoint(&local, tenant, "http://127.0.0.1:9/hook", &["*"], None).await;
        }
    }
    let batch = json!({"Records": [
        insert_record(1, "evt_fq_1", "tnt_fq_busy"),
        insert_record(2, "evt_fq_2", "tnt_fq_quiet"),
        insert_record(3, "evt_fq_3", "tnt_fq_busy"),
    ]});
    let (response, _) = tern_handlers::relay::handle_value(&local.relay, batch, &metrics()).await;
    assert_eq!(
        serde_json::to_value(&response).unwrap(),
        json!({"batchItemFailures": []})
    );
    let got = received(&local, 5, Duration::from_secs(20)).await;
    assert_eq!(
        got.len(),
        5,
        "2 x 2 deliveries of the busy tenant, 1 of the quiet one"
    );
    assert_tenant_groups(&got);
    let quiet = got
        .iter()
        .filter(|(_, g)| g.as_deref() == Some("tnt_fq_quiet"))
        .count();
    assert_eq!(quiet, 1);
}

/// The sender's retry: a 500 puts attempt 2 back on the queue with a `DelaySeconds`
/// (a 1 s schedule), in the tenant's group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sender_retry_stays_in_the_tenant_group() {
    let local = deployment_without_pollers("fq-retry", options()).await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set("/hook", Behavior::Always(Reply::status(500)));
    let endpoint = add_endpoint_with(
        &local,
        EndpointId::generate(),
        "tnt_fq_retry",
        &receiver.url("/hook"),
        &["*"],
        None,
        Some(RetrySchedule::new(vec![1, 1]).unwrap()),
    )
    .await;
    let first = DeliveryMessage::first(event("evt_fq_retry", "tnt_fq_retry"), endpoint.id);
    let (_, results) =
        tern_handlers::sender::handle(&local.sender, sqs_event(&[first.to_body()]), &metrics())
            .await;
    assert!(
        matches!(results[0].1, Ok(MessageOutcome::Retrying { .. })),
        "{results:?}"
    );
    let got = received(&local, 1, Duration::from_secs(20)).await;
    assert_eq!(got.len(), 1, "the retry is on the queue");
    assert_eq!(got[0].0.attempt, 2);
    assert_tenant_groups(&got);
}

/// The sender's long-wait requeue: a message not due yet (`not_before`, the chained
/// queue-delay path) goes back on the queue in the tenant's group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sender_requeue_of_a_message_not_due_stays_in_the_tenant_group() {
    let local = deployment_without_pollers("fq-requeue", options()).await;
    let endpoint = add_endpoint(
        &local,
        "tnt_fq_wait",
        "http://127.0.0.1:9/hook",
        &["*"],
        None,
    )
    .await;
    let mut message = DeliveryMessage::first(event("evt_fq_wait", "tnt_fq_wait"), endpoint.id);
    message.not_before = Some(Utc::now() + chrono::Duration::seconds(2));
    let (_, results) =
        tern_handlers::sender::handle(&local.sender, sqs_event(&[message.to_body()]), &metrics())
            .await;
    assert!(
        matches!(results[0].1, Ok(MessageOutcome::Waiting { .. })),
        "{results:?}"
    );
    let got = received(&local, 1, Duration::from_secs(20)).await;
    assert_eq!(got.len(), 1, "the waiting message is back on the queue");
    assert_eq!(got[0].0.delivery_id, message.delivery_id);
    assert_tenant_groups(&got);
}

/// The Step Functions wait: a logical 1 h retry (scaled to about 4 s) is one execution of
/// the real `delayed-delivery.asl.json` on moto; its `sqs:sendMessage` state puts the
/// message back in the tenant's group. An input from a sender of before this change
/// (no `group_id`) is still sent, without a group, rather than failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_functions_wait_puts_the_message_back_in_the_tenant_group() {
    let local = deployment_without_pollers(
        "fq-sfn",
        LocalOptions {
            time_scale: 0.001,
            ..options()
        },
    )
    .await;
    assert!(local.sender.scheduler.is_some(), "Step Functions scheduler");
    let receiver = Receiver::start().await.unwrap();
    receiver.set("/hook", Behavior::Always(Reply::status(503)));
    let endpoint = add_endpoint_with(
        &local,
        EndpointId::generate(),
        "tnt_fq_sfn",
        &receiver.url("/hook"),
        &["*"],
        None,
        Some(RetrySchedule::new(vec![3600]).unwrap()),
    )
    .await;
    let first = DeliveryMessage::first(event("evt_fq_sfn", "tnt_fq_sfn"), endpoint.id.clone());
    let (_, results) =
        tern_handlers::sender::handle(&local.sender, sqs_event(&[first.to_body()]), &metrics())
            .await;
    assert!(
        matches!(results[0].1, Ok(MessageOutcome::Retrying { .. })),
        "{results:?}"
    );
    let got = received(&local, 1, Duration::from_secs(60)).await;
    assert_eq!(got.len(), 1, "the execution put the retry on the queue");
    assert_eq!(got[0].0.attempt, 2);
    assert_tenant_groups(&got);

    // An execution started with the input of an older sender (no group_id).
    let arn = local
        .env
        .iter()
        .find(|(k, _)| k == "TERN_DELAY_STATE_MACHINE_ARN")
        .map(|(_, v)| v.clone())
        .expect("state machine ARN");
    let old = DeliveryMessage::first(event("evt_fq_old", "tnt_fq_sfn"), endpoint.id);
    aws_sdk_sfn::Client::new(&local.aws)
        .start_execution()
        .state_machine_arn(arn)
        .input(
            json!({
                "wait_seconds": 1,
                "queue_url": local.resources.delivery_queue_url,
                "body": old.to_body(),
            })
            .to_string(),
        )
        .send()
        .await
        .expect("StartExecution");
    let got = received(&local, 1, Duration::from_secs(60)).await;
    assert_eq!(got.len(), 1, "an input without group_id is still delivered");
    assert_eq!(got[0].0.delivery_id, old.delivery_id);
    assert_eq!(got[0].1, None);
}

/// Puts a dead letter of `event_id` (tenant `tenant`) in the DLQ the way the sender's
/// oldest messages are there: without a group id.
async fn dead_letter(local: &LocalTern, event_id: &str, tenant: &str, endpoint: &EndpointId) {
    let m = DeliveryMessage::first(event(event_id, tenant), endpoint.clone()).dead_lettered(
        DeadLetter {
            reason: DeadLetterReason::Exhausted,
            last_status: Some(503),
            last_error: Some("http status 503".into()),
            attempts: 7,
            at: Utc::now(),
        },
    );
    tern_aws::SqsQueue::new(local.sqs(), local.resources.dlq_url.clone())
        .send(&QueueEntry {
            id: "seed".into(),
            body: m.to_body(),
            delay_seconds: 0,
            attributes: vec![],
            group_id: None,
        })
        .await
        .expect("seed the DLQ");
}

/// The replay handler (the replay function, and the console's Replay on AWS and in local
/// mode): replayed messages of two tenants each go back in their tenant's group, even
/// when their DLQ copy has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_handler_puts_each_replay_in_its_tenant_group() {
    let local = deployment_without_pollers("fq-replay", options()).await;
    for (tenant, event_id) in [("tnt_fq_r1", "evt_fq_r1"), ("tnt_fq_r2", "evt_fq_r2")] {
        let ep = add_endpoint(&local, tenant, "http://127.0.0.1:9/hook", &["*"], None).await;
        dead_letter(&local, event_id, tenant, &ep.id).await;
    }
    let summary =
        tern_handlers::replay::handle(&local.replay, ReplayRequest::default(), &metrics())
            .await
            .expect("replay");
    assert_eq!(summary.replayed, 2, "{summary:?}");
    let got = received(&local, 2, Duration::from_secs(20)).await;
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|(m, _)| m.replay_count == 1));
    assert_tenant_groups(&got);
}

/// The operator's `tern replay` (the real binary, built by `make test`) against the same
/// deployment: the replayed message is in its tenant's group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_replay_puts_the_replay_in_its_tenant_group() {
    let local = deployment_without_pollers("fq-ops", options()).await;
    let ep = add_endpoint(
        &local,
        "tnt_fq_ops",
        "http://127.0.0.1:9/hook",
        &["*"],
        None,
    )
    .await;
    dead_letter(&local, "evt_fq_ops", "tnt_fq_ops", &ep.id).await;
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/fair_queue-<hash> -> target/<profile>/tern
    let tern = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("test executable lives in target/<profile>/deps")
        .join("tern");
    assert!(
        tern.is_file(),
        "{} is missing: build it first with `cargo build -p tern-cli --bin tern` (make test does)",
        tern.display()
    );
    let out = tokio::process::Command::new(&tern)
        .args(["replay", "--json"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(local.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("AWS_ENDPOINT_URL", moto_url())
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .output()
        .await
        .expect("tern runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tern replay failed\nstdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_str(&stdout).expect("JSON summary");
    assert_eq!(summary["replayed"], 1, "{summary}");
    let got = received(&local, 1, Duration::from_secs(20)).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0.event.id.as_str(), "evt_fq_ops");
    assert_tenant_groups(&got);
}
