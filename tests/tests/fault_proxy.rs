//! The fault proxy (`tern_tests::fault_proxy`) does what its rules say, as the real SDK
//! clients see it: a held answer after moto applied the request, each service's own
//! throttling error (which the SDK retries), a 500, a dropped connection before or after
//! forwarding, seeded chance, and rules changed while it runs. The fault soak builds on
//! these, so they are checked here on their own.

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::error::ProvideErrorMetadata as _;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use tern_tests::fault_proxy::{Fault, FaultProxy, Rule, Service};
use tern_tests::{moto_proxy, prefix};

/// An SDK config through `proxy` that tries each call once, with a 1 s deadline per try,
/// so a test sees each fault as the SDK's error.
async fn one_try(proxy: &FaultProxy) -> aws_config::SdkConfig {
    proxy
        .sdk_config()
        .await
        .to_builder()
        .retry_config(RetryConfig::disabled())
        .timeout_config(
            TimeoutConfig::builder()
                .operation_attempt_timeout(Duration::from_secs(1))
                .build(),
        )
        .build()
}

async fn table(ddb: &aws_sdk_dynamodb::Client, name: &str) {
    ddb.create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("CreateTable through the proxy");
}

async fn exists(ddb: &aws_sdk_dynamodb::Client, table: &str, id: &str) -> bool {
    ddb.get_item()
        .table_name(table)
        .key("id", AttributeValue::S(id.into()))
        .consistent_read(true)
        .send()
        .await
        .expect("GetItem")
        .item
        .is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_fault_reaches_the_sdk_as_aws_would_answer_and_is_applied_only_when_forwarded() {
    let proxy = moto_proxy().await;
    let ddb = aws_sdk_dynamodb::Client::new(&one_try(&proxy).await);
    let name = format!("{}items", prefix("proxy"));
    table(&ddb, &name).await;
    let put = |id: &str| {
        ddb.put_item()
            .table_name(&name)
            .item("id", AttributeValue::S(id.into()))
            .send()
    };

    // Each case: the fault, whether moto applied the put, and what the SDK saw.
    let cases = [
        (Fault::Throttle, "throttle", false),
        (Fault::ServerError, "server-error", false),
        (Fault::Drop, "drop", false),
        (Fault::DropAfterForward, "drop-after", true),
        (
            Fault::DelayAnswer(Duration::from_millis(2500)),
            "delay",
            true,
        ),
    ];
    for (fault, id, applied) in cases {
        let rule = proxy.add(
            Rule::on(Service::DynamoDb, "PutItem", fault)
                .body_contains(&format!("\"{id}\""))
                .first(1),
        );
        let error = put(id).await.expect_err("the fault reaches the SDK");
        assert_eq!(proxy.fired(rule), 1, "{id}");
        match fault {
            Fault::Throttle => {
                assert_eq!(
                    error.code(),
                    Some("ProvisionedThroughputExceededException"),
                    "{error:?}"
                );
            }
            Fault::ServerError => {
                assert_eq!(error.code(), Some("InternalServerError"), "{error:?}");
                assert_eq!(error.raw_response().map(|r| r.status().as_u16()), Some(500));
            }
            Fault::Drop | Fault::DropAfterForward => {
                assert!(
                    error.raw_response().is_none(),
                    "no answer at all: {error:?}"
                );
            }
            Fault::DelayAnswer(_) => {
                assert!(
                    matches!(error, aws_sdk_dynamodb::error::SdkError::TimeoutError(_)),
                    "{error:?}"
                );
            }
        }
        assert_eq!(
            exists(&ddb, &name, id).await,
            applied,
            "{id}: applied by moto?"
        );
        // `first(1)`: the next identical request passes through.
        put(id).await.expect("the rule fired once only");
        assert!(exists(&ddb, &name, id).await);
    }
    let seen = proxy.seen();
    assert!(
        seen.iter()
            .filter(|s| s.fault.is_some())
            .all(|s| s.service == Some(Service::DynamoDb)
                && s.operation.as_deref() == Some("PutItem")),
        "{seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_sns_and_step_functions_get_their_own_throttling_errors_which_the_sdk_retries() {
    let proxy = moto_proxy().await;
    let once = one_try(&proxy).await;
    let sqs = aws_sdk_sqs::Client::new(&once);
    let sns = aws_sdk_sns::Client::new(&once);
    let sfn = aws_sdk_sfn::Client::new(&once);
    let p = prefix("proxy-shapes");
    let queue = sqs
        .create_queue()
        .queue_name(format!("{p}q"))
        .send()
        .await
        .expect("CreateQueue")
        .queue_url
        .expect("queue url");
    let topic = sns
        .create_topic()
        .name(format!("{p}t"))
        .send()
        .await
        .expect("CreateTopic")
        .topic_arn
        .expect("topic arn");

    let all = proxy.add(Rule::any(Fault::Throttle));
    let e = sqs
        .send_message()
        .queue_url(&queue)
        .message_body("x")
        .send()
        .await
        .expect_err("throttled");
    assert_eq!(
        aws_sdk_sqs::error::ProvideErrorMetadata::code(&e),
        Some("RequestThrottled"),
        "{e:?}"
    );
    let e = sns
        .publish()
        .topic_arn(&topic)
        .message("x")
        .send()
        .await
        .expect_err("throttled");
    assert_eq!(
        aws_sdk_sns::error::ProvideErrorMetadata::code(&e),
        Some("ThrottledException"),
        "{e:?}"
    );
    let e = sfn
        .start_execution()
        .state_machine_arn("arn:aws:states:us-east-1:123456789012:stateMachine:none")
        .send()
        .await
        .expect_err("throttled");
    assert_eq!(
        aws_sdk_sfn::error::ProvideErrorMetadata::code(&e),
        Some("ThrottlingException"),
        "{e:?}"
    );
    assert_eq!(proxy.fired(all), 3);
    assert!(proxy.remove(all));

    // With the SDK's standard retries (3 tries), two throttles are retried away: the
    // SDK classifies each shape as throttling.
    let retried = proxy
        .sdk_config()
        .await
        .to_builder()
        .retry_config(RetryConfig::standard().with_max_attempts(3))
        .build();
    let sqs = aws_sdk_sqs::Client::new(&retried);
    let sns = aws_sdk_sns::Client::new(&retried);
    let q = proxy.add(Rule::on(Service::Sqs, "SendMessage", Fault::Throttle).first(2));
    let t = proxy.add(Rule::on(Service::Sns, "Publish", Fault::Throttle).first(2));
    sqs.send_message()
        .queue_url(&queue)
        .message_body("x")
        .send()
        .await
        .expect("retried past two throttles");
    sns.publish()
        .topic_arn(&topic)
        .message("x")
        .send()
        .await
        .expect("retried past two throttles");
    assert_eq!((proxy.fired(q), proxy.fired(t)), (2, 2));
    assert_eq!(proxy.count(&Service::Sqs, "SendMessage"), 4, "1 + 3 tries");
    assert_eq!(proxy.count(&Service::Sns, "Publish"), 4, "1 + 3 tries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_chance_repeats_and_rules_change_while_the_proxy_runs() {
    let proxy = moto_proxy().await;
    let sqs = aws_sdk_sqs::Client::new(&one_try(&proxy).await);
    let queue = sqs
        .create_queue()
        .queue_name(format!("{}q", prefix("proxy-chance")))
        .send()
        .await
        .expect("CreateQueue")
        .queue_url
        .expect("queue url");
    let run = async |seed| {
        let rule =
            proxy.add(Rule::on(Service::Sqs, "SendMessage", Fault::Throttle).chance(0.5, seed));
        let mut pattern = Vec::new();
        for _ in 0..16 {
            pattern.push(
                sqs.send_message()
                    .queue_url(&queue)
                    .message_body("x")
                    .send()
                    .await
                    .is_err(),
            );
        }
        assert_eq!(pattern.iter().filter(|f| **f).count(), proxy.fired(rule));
        proxy.remove(rule);
        pattern
    };
    let first = run(11).await;
    assert_eq!(run(11).await, first, "same seed, same faults");
    assert!(first.contains(&true) && first.contains(&false), "{first:?}");

    // Added and cleared while requests flow.
    proxy.add(Rule::on(Service::Sqs, "SendMessage", Fault::ServerError));
    assert!(
        sqs.send_message()
            .queue_url(&queue)
            .message_body("x")
            .send()
            .await
            .is_err()
    );
    proxy.clear();
    sqs.send_message()
        .queue_url(&queue)
        .message_body("x")
        .send()
        .await
        .expect("no rule left");
}
