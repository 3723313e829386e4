//! Partial batch responses and stream record kinds, with the JSON fixtures in `events/`
//! in the shapes AWS sends, on moto with a loopback receiver.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_lambda_events::dynamodb::Event as StreamEvent;
use aws_lambda_events::sqs::SqsEvent;
use chrono::{DateTime, Utc};
use tern_core::ports::{AttemptRecord, Claim, DeliveryLedger, DeliveryState, PortError};
use tern_core::{DeliveryMessage, EndpointId, EventId};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::relay::RecordOutcome;
use tern_handlers::sender::{MessageOutcome, SenderDeps};
use tern_local::LocalOptions;
use tern_tests::*;

fn metrics() -> Metrics {
    Metrics::new("Tern", MetricsSink::Discard)
}

async fn fixture_endpoint(
    local: &tern_local::LocalTern,
    receiver: &Receiver,
) -> tern_core::Endpoint {
    add_endpoint_with(
        local,
        EndpointId::new("ep_fixture").unwrap(),
        "tnt_fixture",
        &receiver.url("/hook"),
        &["order.paid"],
        None,
        None,
    )
    .await
}

/// Q1: a batch of 3 where the 2nd fails on our own infrastructure (its DLQ is gone): the
/// response is exactly the golden JSON, and #1 and #3 were delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q1_second_message_fails_alone_with_the_golden_response() {
    let local = deployment_without_pollers("q1", LocalOptions::default()).await;
    let receiver = Receiver::start().await.unwrap();
    fixture_endpoint(&local, &receiver).await;
    // #2 is malformed, so it must go to the DLQ; the DLQ no longer exists.
    local
        .sqs()
        .delete_queue()
        .queue_url(&local.resources.dlq_url)
        .send()
        .await
        .unwrap();

    let event: SqsEvent =
        serde_json::from_str(&fixture("sqs-delivery-batch-malformed-2nd.json")).unwrap();
    let (response, results) = tern_handlers::sender::handle(&local.sender, event, &metrics()).await;
    let got = serde_json::to_value(&response).unwrap();
    assert_eq!(got, fixture_json("golden/sqs-partial-batch-response.json"));
    assert!(matches!(
        results[0].1,
        Ok(MessageOutcome::Delivered { attempt: 1 })
    ));
    assert!(results[1].1.is_err());
    assert!(matches!(
        results[2].1,
        Ok(MessageOutcome::Delivered { attempt: 1 })
    ));
    let ids: Vec<String> = receiver
        .requests("/hook")
        .iter()
        .map(|r| r.header("webhook-id").unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 2);
    assert!(ids.contains(&"evt_fixture_1".to_owned()) && ids.contains(&"evt_fixture_3".to_owned()));
}

/// A ledger that panics for one event and otherwise is the real DynamoDB ledger.
struct PanicFor {
    inner: Arc<dyn DeliveryLedger>,
    event: EventId,
}

#[async_trait]
impl DeliveryLedger for PanicFor {
    async fn claim(
        &self,
        message: &DeliveryMessage,
        lease_until: DateTime<Utc>,
    ) -> Result<Claim, PortError> {
        assert!(
            message.event.id != self.event,
            "injected panic for {}",
            self.event
        );
        self.inner.claim(message, lease_until).await
    }
    async fn finish(
        &self,
        message: &DeliveryMessage,
        state: DeliveryState,
    ) -> Result<(), PortError> {
        self.inner.finish(message, state).await
    }
    async fn record_attempt(
        &self,
        message: &tern_core::DeliveryMessage,
        record: &AttemptRecord,
    ) -> Result<(), PortError> {
        self.inner.record_attempt(message, record).await
    }
    async fn history(
        &self,
        tenant: &tern_core::TenantId,
        event: &EventId,
    ) -> Result<Vec<AttemptRecord>, PortError> {
        self.inner.history(tenant, event).await
    }
}

/// Q1, the panic variant: processing #2 panics; only #2 fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q1_a_panic_fails_only_that_message() {
    let local = deployment_without_pollers("q1panic", LocalOptions::default()).await;
    let receiver = Receiver::start().await.unwrap();
    fixture_endpoint(&local, &receiver).await;
    let deps = SenderDeps {
        endpoints: local.sender.endpoints.clone(),
        ledger: Arc::new(PanicFor {
            inner: local.sender.ledger.clone(),
            event: EventId::new("evt_fixture_2").unwrap(),
        }),
        delivery_queue: local.sender.delivery_queue.clone(),
        dlq: local.sender.dlq.clone(),
        scheduler: None,
        client: local.sender.client.clone(),
        policy: local.sender.policy.clone(),
        breaker: local.sender.breaker.clone(),
    };
    let event: SqsEvent = serde_json::from_str(&fixture("sqs-delivery-batch.json")).unwrap();
    let (response, results) = tern_handlers::sender::handle(&deps, event, &metrics()).await;
    assert_eq!(
        serde_json::to_value(&response).unwrap(),
        fixture_json("golden/sqs-partial-batch-response.json")
    );
    assert!(
        results[1]
            .1
            .as_ref()
            .unwrap_err()
            .contains("injected panic")
    );
    assert_eq!(receiver.requests("/hook").len(), 2);
}

/// Q1 through the queue poller: the failed message stays on the queue and comes back;
/// #1 and #3 are deleted and never sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q1_only_the_failed_message_comes_back() {
    let options = LocalOptions {
        visibility_timeout_seconds: Some(1),
        sender_concurrency: 1,
        ..LocalOptions::default()
    };
    let (local, _rx) = deployment("q1poll", options).await;
    let receiver = Receiver::start().await.unwrap();
    fixture_endpoint(&local, &receiver).await;
    local
        .sqs()
        .delete_queue()
        .queue_url(&local.resources.dlq_url)
        .send()
        .await
        .unwrap();
    let batch = fixture_json("sqs-delivery-batch-malformed-2nd.json");
    for record in batch["Records"].as_array().unwrap() {
        local
            .sqs()
            .send_message()
            .queue_url(&local.resources.delivery_queue_url)
            .message_body(record["body"].as_str().unwrap())
            .send()
            .await
            .unwrap();
    }
    assert!(
        receiver
            .wait_for("/hook", 2, Duration::from_secs(20))
            .await
            .len()
            >= 2
    );
    // Several visibility timeouts later: still exactly one POST each for #1 and #3, and
    // #2 is the only message left, received again and again.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(receiver.requests("/hook").len(), 2);
    let attrs = local
        .sqs()
        .get_queue_attributes()
        .queue_url(&local.resources.delivery_queue_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
        .send()
        .await
        .unwrap();
    let a = attrs.attributes.unwrap();
    let count =
        |k: aws_sdk_sqs::types::QueueAttributeName| a.get(&k).unwrap().parse::<u32>().unwrap();
    assert_eq!(
        count(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
            + count(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        1
    );
}

/// O2 and the mixed stream batch: only the outbox INSERT becomes a delivery; MODIFY, a
/// user REMOVE, a TTL REMOVE and a non-outbox INSERT are acknowledged, never an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o2_mixed_stream_batch_relays_only_the_outbox_insert() {
    let local = deployment_without_pollers("o2", LocalOptions::default()).await;
    let receiver = Receiver::start().await.unwrap();
    fixture_endpoint(&local, &receiver).await;
    let event: StreamEvent = serde_json::from_str(&fixture("dynamodb-stream-mixed.json")).unwrap();
    let (response, outcomes) = tern_handlers::relay::handle(&local.relay, event, &metrics()).await;
    assert_eq!(
        serde_json::to_value(&response).unwrap(),
        serde_json::json!({"batchItemFailures": []})
    );
    assert_eq!(
        outcomes,
        vec![
            RecordOutcome::Relayed {
                deliveries: 1,
                parked: 0
            },
            RecordOutcome::Ignored,
            RecordOutcome::Ignored,
            RecordOutcome::Ignored,
            RecordOutcome::Ignored,
        ]
    );
    let queued = peek_queue(&local, &local.resources.delivery_queue_url).await;
    assert_eq!(queued.len(), 1);
    let m = DeliveryMessage::parse(&queued[0]).unwrap();
    assert_eq!(m.event.id.as_str(), "evt_stream_1");
    assert_eq!(
        m.event.payload.as_str(),
        r#"{"order_id":"ord_o2","amount_cents":4200}"#
    );
    assert!(
        peek_queue(&local, &local.resources.relay_failure_queue_url)
            .await
            .is_empty()
    );
}

/// O3: the relay is invoked twice with the same record: exactly one POST per
/// (event, endpoint) reaches the receiver; the second copies count as duplicates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o3_duplicate_stream_record_posts_once_per_endpoint() {
    let (local, mut rx) = deployment("o3", LocalOptions::default()).await;
    let receiver = Receiver::start().await.unwrap();
    fixture_endpoint(&local, &receiver).await;
    add_endpoint(
        &local,
        "tnt_fixture",
        &receiver.url("/second"),
        &["*"],
        None,
    )
    .await;
    for _ in 0..2 {
        let event: StreamEvent =
            serde_json::from_str(&fixture("dynamodb-stream-insert.json")).unwrap();
        let (response, outcomes) =
            tern_handlers::relay::handle(&local.relay, event, &metrics()).await;
        assert!(response.batch_item_failures.is_empty());
        assert_eq!(
            outcomes,
            vec![RecordOutcome::Relayed {
                deliveries: 2,
                parked: 0
            }]
        );
    }
    let mut duplicates = 0;
    let mut delivered = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while duplicates + delivered < 4 && tokio::time::Instant::now() < deadline {
        if let Ok(Some(tern_local::pollers::LocalEvent::Sent(results))) =
            tokio::time::timeout(Duration::from_secs(1), rx.recv()).await
        {
            for (_, r) in results {
                match r {
                    Ok(MessageOutcome::Duplicate(
                        Claim::AlreadyDelivered | Claim::AlreadyClaimed,
                    )) => duplicates += 1,
                    Ok(MessageOutcome::Delivered { .. }) => delivered += 1,
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
    }
    assert_eq!((delivered, duplicates), (2, 2));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(receiver.requests("/hook").len(), 1);
    assert_eq!(receiver.requests("/second").len(), 1);
}
