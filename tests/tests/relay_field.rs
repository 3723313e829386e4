//! The relay against what SQS and DynamoDB streams really do (issue 11 items 7-9, issue 9
//! item 3): partial `SendMessageBatch` results, entries packed across records, stream
//! records with missing or null fields, and records that can only mean a misconfigured
//! stream.
//!
//! The partial-result tests drive the real relay handler over an in-memory
//! [`MessageQueue`] that fails chosen entries (moto cannot fail one entry of a batch on
//! demand); the packing and the adapter's per-entry results are also checked on moto.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::Utc;
use serde_json::{Value, json};
use tern_core::ports::{EndpointStore as _, MessageQueue, PortError, QueueEntry};
use tern_core::{DeliveryMessage, Endpoint, EndpointId, Secret, TenantId};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::relay::{RecordOutcome, RelayDeps};
use tern_local::LocalOptions;
use tern_tests::fakes::{MemEndpoints, MemQueue};
use tern_tests::*;

type FailRule = Box<dyn Fn(usize, &QueueEntry) -> Option<PortError> + Send + Sync>;

/// A delivery queue that records every `SendMessageBatch` call and fails the entries a
/// rule picks (given the 0-based call number and the entry).
struct ScriptedQueue {
    calls: Mutex<Vec<Vec<QueueEntry>>>,
    accepted: Mutex<Vec<QueueEntry>>,
    fail: FailRule,
}

impl ScriptedQueue {
    fn new(fail: impl Fn(usize, &QueueEntry) -> Option<PortError> + Send + Sync + 'static) -> Self {
        Self {
            calls: Mutex::new(Vec::new()),
            accepted: Mutex::new(Vec::new()),
            fail: Box::new(fail),
        }
    }

    fn calls(&self) -> Vec<Vec<QueueEntry>> {
        self.calls.lock().unwrap().clone()
    }

    /// (event id, endpoint id) of every accepted entry, in order.
    fn accepted(&self) -> Vec<(String, String)> {
        self.accepted
            .lock()
            .unwrap()
            .iter()
            .map(|e| pair(&e.body))
            .collect()
    }
}

fn pair(body: &str) -> (String, String) {
    let m = DeliveryMessage::parse(body).expect("relay writes valid messages");
    (
        m.event.id.as_str().to_owned(),
        m.endpoint_id.as_str().to_owned(),
    )
}

#[async_trait]
impl MessageQueue for ScriptedQueue {
    async fn send_batch(
        &self,
        entries: &[QueueEntry],
    ) -> Result<Vec<Result<(), PortError>>, PortError> {
        assert!(entries.len() <= 10, "SQS takes at most 10 entries per call");
        let call = {
            let mut calls = self.calls.lock().unwrap();
            calls.push(entries.to_vec());
            calls.len() - 1
        };
        let mut ids: Vec<&str> = entries.iter().map(|e| e.id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), entries.len(), "entry ids must be distinct");
        Ok(entries
            .iter()
            .map(|e| match (self.fail)(call, e) {
                Some(err) => Err(err),
                None => {
                    self.accepted.lock().unwrap().push(e.clone());
                    Ok(())
                }
            })
            .collect())
    }

    async fn send(&self, entry: &QueueEntry) -> Result<(), PortError> {
        self.send_batch(std::slice::from_ref(entry))
            .await?
            .pop()
            .unwrap_or(Ok(()))
    }
}

fn endpoint(id: &str) -> Endpoint {
    Endpoint::new(
        EndpointId::new(id).unwrap(),
        TenantId::new("tnt_a").unwrap(),
        "https://receiver.test/hook",
        vec!["*".into()],
        Secret::generate(),
        Utc::now(),
    )
}

struct Fixture {
    deps: RelayDeps,
    delivery: Arc<ScriptedQueue>,
    failures: Arc<MemQueue>,
}

async fn fixture_with(endpoints: &[&str], delivery: ScriptedQueue) -> Fixture {
    let store = Arc::new(MemEndpoints::default());
    for id in endpoints {
        store.put(&endpoint(id)).await.unwrap();
    }
    let delivery = Arc::new(delivery);
    let failures = Arc::new(MemQueue::default());
    Fixture {
        deps: RelayDeps {
            endpoints: store,
            delivery_queue: delivery.clone(),
            failure_queue: failures.clone(),
            max_payload_bytes: tern_core::event::DEFAULT_MAX_PAYLOAD_BYTES,
            checkpoints: None,
        },
        delivery,
        failures,
    }
}

fn sequence(i: usize) -> String {
    format!("{:021}", 1000 + i)
}

/// An outbox INSERT as Lambda delivers it (NEW_IMAGE view).
fn insert(i: usize) -> Value {
    json!({
        "eventID": format!("ev{i}"),
        "eventName": "INSERT",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/outbox/stream/2026",
        "dynamodb": {
            "ApproximateCreationDateTime": 1767225600.0,
            "Keys": {"event_id": {"S": format!("evt_{i}")}},
            "SequenceNumber": sequence(i),
            "SizeBytes": 300,
            "StreamViewType": "NEW_IMAGE",
            "NewImage": {
                "event_id": {"S": format!("evt_{i}")},
                "tern_record": {"S": "outbox_event"},
                "schema_version": {"N": "1"},
                "event_type": {"S": "order.paid"},
                "tenant_id": {"S": "tnt_a"},
                "created_at": {"S": "2026-01-01T00:00:00.000Z"},
                "payload": {"S": format!("{{\"n\":{i}}}")},
                "expires_at": {"N": "1767830400"}
            }
        }
    })
}

fn batch(records: Vec<Value>) -> Value {
    json!({ "Records": records })
}

fn metrics() -> Metrics {
    Metrics::new("Tern", MetricsSink::Discard)
}

fn reported(response: &aws_lambda_events::streams::DynamoDbEventResponse) -> Vec<String> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone().unwrap_or_default())
        .collect()
}

fn unavailable() -> Option<PortError> {
    Some(PortError::Unavailable("InternalError: try again".into()))
}

fn endpoint_of(entry: &QueueEntry) -> String {
    pair(&entry.body).1
}

// ---------------------------------------------------------------- item 7: partial results

/// 3 entries, SQS answers `Failed` (SenderFault false) for entry 2 on the first call
/// only: the retry inside the invocation sends entry 2 alone, and the record succeeds.
#[tokio::test]
async fn transient_failure_of_one_entry_resends_only_that_entry() {
    let f = fixture_with(
        &["ep_1", "ep_2", "ep_3"],
        ScriptedQueue::new(|call, e| (call == 0 && endpoint_of(e) == "ep_2").then(unavailable)?),
    )
    .await;
    let (response, outcomes) =
        tern_handlers::relay::handle_value(&f.deps, batch(vec![insert(1)]), &metrics()).await;
    assert!(reported(&response).is_empty(), "{response:?}");
    assert_eq!(
        outcomes,
        vec![RecordOutcome::Relayed {
            deliveries: 3,
            parked: 0
        }]
    );
    let calls = f.delivery.calls();
    let sizes: Vec<usize> = calls.iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![3, 1]);
    assert_eq!(endpoint_of(&calls[1][0]), "ep_2");
    let mut sent = f.delivery.accepted();
    sent.sort();
    assert_eq!(
        sent,
        vec![
            ("evt_1".to_owned(), "ep_1".to_owned()),
            ("evt_1".to_owned(), "ep_2".to_owned()),
            ("evt_1".to_owned(), "ep_3".to_owned()),
        ]
    );
    assert!(f.failures.entries().is_empty());
}

/// Entry 2 keeps failing transiently: it alone is retried, a bounded number of times,
/// then the record is reported as a batch item failure.
#[tokio::test]
async fn persistent_transient_failure_is_retried_then_reported() {
    let f = fixture_with(
        &["ep_1", "ep_2", "ep_3"],
        ScriptedQueue::new(|_, e| (endpoint_of(e) == "ep_2").then(unavailable)?),
    )
    .await;
    let (response, outcomes) =
        tern_handlers::relay::handle_value(&f.deps, batch(vec![insert(1)]), &metrics()).await;
    assert_eq!(reported(&response), vec![sequence(1)]);
    assert!(outcomes.is_empty(), "{outcomes:?}");
    let calls = f.delivery.calls();
    assert_eq!(
        calls.len(),
        tern_handlers::relay::SEND_ATTEMPTS,
        "one first call and bounded retries"
    );
    for retry in &calls[1..] {
        assert_eq!(retry.len(), 1);
        assert_eq!(endpoint_of(&retry[0]), "ep_2");
    }
}

/// `SenderFault: true` on entry 2: entries 1 and 3 go out, entry 2 alone is parked in the
/// relay-failure queue naming its endpoint and event, and nothing is retried.
#[tokio::test]
async fn sender_fault_entry_is_parked_alone() {
    let f = fixture_with(
        &["ep_1", "ep_2", "ep_3"],
        ScriptedQueue::new(|_, e| {
            (endpoint_of(e) == "ep_2")
                .then(|| PortError::Rejected("InvalidMessageContents: no".into()))
        }),
    )
    .await;
    let (response, outcomes) =
        tern_handlers::relay::handle_value(&f.deps, batch(vec![insert(1)]), &metrics()).await;
    assert!(reported(&response).is_empty(), "{response:?}");
    assert!(
        matches!(
            outcomes.as_slice(),
            [RecordOutcome::Relayed { deliveries: 2, .. }]
        ),
        "{outcomes:?}"
    );
    assert_eq!(f.delivery.calls().len(), 1, "a sender fault is not retried");
    let mut sent = f.delivery.accepted();
    sent.sort();
    assert_eq!(
        sent,
        vec![
            ("evt_1".to_owned(), "ep_1".to_owned()),
            ("evt_1".to_owned(), "ep_3".to_owned()),
        ]
    );
    let parked = f.failures.entries();
    assert_eq!(parked.len(), 1);
    let body: Value = serde_json::from_str(&parked[0].body).unwrap();
    assert_eq!(body["endpoint_id"], "ep_2");
    assert_eq!(body["tern_event_id"], "evt_1");
    assert_eq!(body["sequence_number"], json!(sequence(1)));
    assert_eq!(body["keys"], json!({"event_id": {"S": "evt_1"}}));
    assert!(
        body["reason"]
            .as_str()
            .unwrap()
            .contains("InvalidMessageContents"),
        "{body}"
    );
}

// ---------------------------------------------------------------- issue 9 item 3: packing

/// 50 events to one endpoint: 5 calls of 10 entries, not 50 calls of 1.
#[tokio::test]
async fn fifty_single_endpoint_events_take_five_calls() {
    let f = fixture_with(&["ep_1"], ScriptedQueue::new(|_, _| None)).await;
    let records = (0..50).map(insert).collect();
    let (response, outcomes) =
        tern_handlers::relay::handle_value(&f.deps, batch(records), &metrics()).await;
    assert!(reported(&response).is_empty());
    assert_eq!(outcomes.len(), 50);
    let sizes: Vec<usize> = f.delivery.calls().iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![10; 5]);
    let sent = f.delivery.accepted();
    let want: Vec<(String, String)> = (0..50)
        .map(|i| (format!("evt_{i}"), "ep_1".to_owned()))
        .collect();
    assert_eq!(sent, want, "every event once, in stream order");
}

/// One entry of a packed call (event 23 of 50) keeps failing: record 23 is the one
/// reported, records before it are checkpointed and never re-sent, and only its entry
/// is retried inside the invocation.
#[tokio::test]
async fn a_failed_entry_is_attributed_to_its_record() {
    let f = fixture_with(
        &["ep_1"],
        ScriptedQueue::new(|_, e| (pair(&e.body).0 == "evt_23").then(unavailable)?),
    )
    .await;
    let records = (0..50).map(insert).collect();
    let (response, outcomes) =
        tern_handlers::relay::handle_value(&f.deps, batch(records), &metrics()).await;
    assert_eq!(reported(&response), vec![sequence(23)]);
    assert_eq!(
        outcomes.len(),
        23,
        "records before the failure are checkpointed"
    );
    let calls = f.delivery.calls();
    assert_eq!(calls.len(), 5 + tern_handlers::relay::SEND_ATTEMPTS - 1);
    for retry in &calls[5..] {
        let events: Vec<String> = retry.iter().map(|e| pair(&e.body).0).collect();
        assert_eq!(events, vec!["evt_23".to_owned()]);
    }
}

/// A whole-call failure (the SendMessageBatch request itself fails) is retried as a
/// whole; when it keeps failing, the first record of that call is reported.
#[tokio::test]
async fn a_failed_call_reports_its_first_record() {
    struct DownAfter(MemQueue, usize, std::sync::atomic::AtomicUsize);
    #[async_trait]
    impl MessageQueue for DownAfter {
        async fn send_batch(
            &self,
            entries: &[QueueEntry],
        ) -> Result<Vec<Result<(), PortError>>, PortError> {
            let call = self.2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if call >= self.1 {
                return Err(PortError::Unavailable("connection reset".into()));
            }
            self.0.send_batch(entries).await
        }
        async fn send(&self, entry: &QueueEntry) -> Result<(), PortError> {
            self.0.send(entry).await
        }
    }
    let store = Arc::new(MemEndpoints::default());
    store.put(&endpoint("ep_1")).await.unwrap();
    let delivery = Arc::new(DownAfter(MemQueue::default(), 2, Default::default()));
    let deps = RelayDeps {
        endpoints: store,
        delivery_queue: delivery.clone(),
        failure_queue: Arc::new(MemQueue::default()),
        max_payload_bytes: tern_core::event::DEFAULT_MAX_PAYLOAD_BYTES,
        checkpoints: None,
    };
    let records = (0..25).map(insert).collect();
    let (response, outcomes) =
        tern_handlers::relay::handle_value(&deps, batch(records), &metrics()).await;
    assert_eq!(reported(&response), vec![sequence(20)]);
    assert_eq!(outcomes.len(), 20);
    assert_eq!(delivery.0.entries().len(), 20);
}

// ---------------------------------------------------------------- item 8: real-world records

/// A record without `SizeBytes`, and one with `"ApproximateCreationDateTime": null`, are
/// relayed, not parked.
#[tokio::test]
async fn records_missing_optional_fields_are_relayed() {
    let f = fixture_with(&["ep_1"], ScriptedQueue::new(|_, _| None)).await;
    let mut no_size = insert(1);
    no_size["dynamodb"]
        .as_object_mut()
        .unwrap()
        .remove("SizeBytes");
    let mut null_time = insert(2);
    null_time["dynamodb"]["ApproximateCreationDateTime"] = Value::Null;
    let (response, outcomes) =
        tern_handlers::relay::handle_value(&f.deps, batch(vec![no_size, null_time]), &metrics())
            .await;
    assert!(reported(&response).is_empty());
    assert_eq!(
        outcomes,
        vec![
            RecordOutcome::Relayed {
                deliveries: 1,
                parked: 0
            },
            RecordOutcome::Relayed {
                deliveries: 1,
                parked: 0
            }
        ]
    );
    assert!(f.failures.entries().is_empty());
}

// ---------------------------------------------------------------- item 9: misconfiguration

/// An INSERT without `NewImage` (a `KEYS_ONLY` stream) is parked with its keys, logged
/// as an error and counted, never dropped unseen.
#[tokio::test]
async fn keys_only_insert_is_parked_logged_and_counted() {
    let logs = capture_logs();
    let f = fixture_with(&["ep_1"], ScriptedQueue::new(|_, _| None)).await;
    let mut keys_only = insert(4);
    let change = keys_only["dynamodb"].as_object_mut().unwrap();
    change.remove("NewImage");
    change.insert("StreamViewType".into(), json!("KEYS_ONLY"));
    let m = metrics();
    let (response, outcomes) =
        tern_handlers::relay::handle_value(&f.deps, batch(vec![keys_only, insert(5)]), &m).await;
    assert!(reported(&response).is_empty());
    assert!(
        matches!(&outcomes[0], RecordOutcome::Misconfigured { reason } if reason.contains("KEYS_ONLY")),
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes[1],
        RecordOutcome::Relayed {
            deliveries: 1,
            parked: 0
        }
    );
    let parked = f.failures.entries();
    assert_eq!(parked.len(), 1);
    let body: Value = serde_json::from_str(&parked[0].body).unwrap();
    assert_eq!(body["keys"], json!({"event_id": {"S": "evt_4"}}));
    assert_eq!(body["sequence_number"], json!(sequence(4)));
    assert_eq!(
        parked[0].attributes,
        vec![("tern-reason".to_owned(), "misconfigured_stream".to_owned())]
    );
    assert_eq!(m.snapshot().relay_misconfigured, 1);
    let doc = m.emf(0).unwrap();
    assert_eq!(doc["RelayMisconfigured"], 1);
    let text = logs.text();
    assert!(
        text.lines()
            .any(|l| l.contains("ERROR") && l.contains("misconfigured") && l.contains("ev4")),
        "no error log line for the KEYS_ONLY record"
    );
}

// ---------------------------------------------------------------- on moto

/// The adapter on moto: an entry SQS refuses (DelaySeconds out of range, a sender fault)
/// fails alone; the other entries of the call are sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_adapter_fails_one_entry_alone_on_moto() {
    let local = deployment_without_pollers("relayentry", LocalOptions::default()).await;
    let queue = tern_aws::sqs::SqsQueue::new(
        local.sqs().clone(),
        local.resources.relay_failure_queue_url.clone(),
    );
    let entry = |id: &str, delay| QueueEntry {
        id: id.into(),
        body: format!("{{\"id\":\"{id}\"}}"),
        delay_seconds: delay,
        attributes: vec![],
        group_id: None,
    };
    let results = queue
        .send_batch(&[entry("a", 0), entry("b", 901), entry("c", 0)])
        .await
        .expect("the call goes through");
    assert_eq!(results.len(), 3);
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    assert!(
        matches!(results[1], Err(PortError::Rejected(_))),
        "{results:?}"
    );
    let mut bodies = peek_queue(&local, &local.resources.relay_failure_queue_url).await;
    bodies.sort();
    assert_eq!(bodies, vec![r#"{"id":"a"}"#, r#"{"id":"c"}"#]);
}

/// The relay on moto: 25 events, each to 2 endpoints, packed across records into calls
/// of 10 with distinct entry ids: all 50 deliveries arrive, nothing is reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packed_calls_are_accepted_by_sqs_on_moto() {
    let local = deployment_without_pollers("relaypack", LocalOptions::default()).await;
    for id in ["ep_1", "ep_2"] {
        // The relay reads endpoints without their secrets and may not write them.
        local.sender.endpoints.put(&endpoint(id)).await.unwrap();
    }
    let records = (0..25).map(insert).collect();
    let (response, outcomes) =
        tern_handlers::relay::handle_value(&local.relay, batch(records), &metrics()).await;
    assert!(reported(&response).is_empty(), "{response:?}");
    assert_eq!(
        outcomes,
        vec![
            RecordOutcome::Relayed {
                deliveries: 2,
                parked: 0
            };
            25
        ]
    );
    let queued = peek_queue(&local, &local.resources.delivery_queue_url).await;
    let mut pairs: Vec<(String, String)> = queued.iter().map(|b| pair(b)).collect();
    pairs.sort();
    pairs.dedup();
    assert_eq!(pairs.len(), 50);
}
