//! A batch the stream mapping gave up on (issue 15 item 6), end to end on moto with the
//! real `tern` binary: local mode's stream poller retries a failing batch, then writes
//! Lambda's on-failure record (`DDBStreamBatchInfo`: shard and sequence range, no event
//! id) to the relay-failure queue; `tern relay-failures` lists it with its range and its
//! events, and `--retry` re-drives every event so each (event, endpoint) pair is
//! delivered once. Read from the stream while it holds the range (moto's streams API
//! serves `AT_SEQUENCE_NUMBER`), else from the outbox items in the batch's window.
//! Everything stays on 127.0.0.1.

use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tern_core::endpoint::EndpointSecret;
use tern_core::ports::{EndpointStore, MessageQueue as _, PortError, QueueEntry};
use tern_core::{Endpoint, EndpointId, Secret, TenantId};
use tern_handlers::relay::RelayDeps;
use tern_local::pollers::LocalEvent;
use tern_local::receiver::{Behavior, Receiver, Reply};
use tern_local::{LocalOptions, LocalTern, MotoServer};

/// The endpoint registry, unavailable to the relay while `down` is set: every relay
/// invocation fails, as with a DynamoDB outage, until the mapping gives up.
struct Outage {
    inner: Arc<dyn EndpointStore>,
    down: AtomicBool,
}

#[async_trait]
impl EndpointStore for Outage {
    async fn get(&self, t: &TenantId, id: &EndpointId) -> Result<Option<Endpoint>, PortError> {
        self.inner.get(t, id).await
    }
    async fn list_for_tenant(&self, t: &TenantId) -> Result<Vec<Endpoint>, PortError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(PortError::Unavailable(
                "ProvisionedThroughputExceededException: injected outage".into(),
            ));
        }
        self.inner.list_for_tenant(t).await
    }
    async fn list_all(&self) -> Result<Vec<Endpoint>, PortError> {
        self.inner.list_all().await
    }
    async fn put(&self, e: &Endpoint) -> Result<(), PortError> {
        self.inner.put(e).await
    }
    async fn disable(&self, t: &TenantId, id: &EndpointId, r: &str) -> Result<(), PortError> {
        self.inner.disable(t, id, r).await
    }
    async fn set_secrets(
        &self,
        t: &TenantId,
        id: &EndpointId,
        s: &[EndpointSecret],
    ) -> Result<(), PortError> {
        self.inner.set_secrets(t, id, s).await
    }
}

struct Setup {
    moto: MotoServer,
    local: LocalTern,
    receiver: Receiver,
    env: Vec<(String, String)>,
    events: Vec<String>,
    on_failure: Value,
    on_failure_id: String,
}

/// Two endpoints, three events published while the relay's endpoint look-ups fail: the
/// poller's one retry fails too, and the batch goes to the relay-failure queue as
/// Lambda's on-failure record. Returns once it is there.
async fn setup(prefix: &str) -> Setup {
    let moto = MotoServer::start()
        .await
        .expect("moto (the local AWS) is required for this test");
    let options = LocalOptions {
        prefix: prefix.into(),
        console_port: None,
        relay_max_retries: Some(1),
        ..LocalOptions::default()
    };
    let mut local = LocalTern::create(moto.sdk_config().await, &options)
        .await
        .expect("local deployment");
    let receiver = Receiver::start().await.unwrap();
    for (id, path) in [("ep_a", "/a"), ("ep_b", "/b")] {
        receiver.set(path, Behavior::Always(Reply::status(200)));
        local
            .sender
            .endpoints
            .put(&Endpoint::new(
                EndpointId::new(id).unwrap(),
                TenantId::new("tnt_a").unwrap(),
                receiver.url(path),
                vec!["*".into()],
                Secret::generate(),
                chrono::Utc::now(),
            ))
            .await
            .unwrap();
    }
    let outage = Arc::new(Outage {
        inner: local.relay.endpoints.clone(),
        down: AtomicBool::new(true),
    });
    local.relay = Arc::new(RelayDeps {
        endpoints: outage.clone(),
        delivery_queue: local.relay.delivery_queue.clone(),
        failure_queue: local.relay.failure_queue.clone(),
        max_payload_bytes: local.relay.max_payload_bytes,
        checkpoints: local.relay.checkpoints.clone(),
    });
    // Written before the poller starts: one batch of three records.
    let writer = tern_outbox::OutboxWriter::new(&local.resources.outbox_table);
    let ddb = aws_sdk_dynamodb::Client::new(&local.aws);
    let mut events = Vec::new();
    for i in 0..3 {
        let prepared = writer
            .prepare("order.paid", "tnt_a", format!("{{\"n\":{i}}}"))
            .unwrap();
        events.push(prepared.event.id.to_string());
        ddb.transact_write_items()
            .transact_items(prepared.transact_item().unwrap())
            .send()
            .await
            .unwrap();
    }
    let mut rx = local.start_pollers(&options);
    let gave_up = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(e) = rx.recv().await {
            if let LocalEvent::RelayBatchFailed { records } = e {
                return records;
            }
        }
        0
    })
    .await
    .expect("the poller gives the batch up after its retries");
    assert_eq!(gave_up, 3);
    // The outage is over; the batch stays given up until an operator re-drives it.
    outage.down.store(false, Ordering::SeqCst);

    let sqs = aws_sdk_sqs::Client::new(&local.aws);
    let received = sqs
        .receive_message()
        .queue_url(&local.resources.relay_failure_queue_url)
        .max_number_of_messages(10)
        .visibility_timeout(0)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    let messages = received.messages();
    assert_eq!(messages.len(), 1, "one on-failure record");
    let on_failure: Value = serde_json::from_str(messages[0].body().unwrap()).unwrap();
    let mut env: Vec<(String, String)> = vec![
        ("AWS_ENDPOINT_URL".into(), moto.url.clone()),
        ("AWS_REGION".into(), "us-east-1".into()),
        ("AWS_ACCESS_KEY_ID".into(), "testing".into()),
        ("AWS_SECRET_ACCESS_KEY".into(), "testing".into()),
    ];
    env.extend(local.env.iter().cloned());
    Setup {
        on_failure_id: messages[0].message_id().unwrap().to_owned(),
        moto,
        local,
        receiver,
        env,
        events,
        on_failure,
    }
}

fn tern(env: &[(String, String)], args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .expect("tern runs")
}

fn expect_ok(env: &[(String, String)], args: &[&str]) -> String {
    let out = tern(env, args);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}\nstdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

fn json(env: &[(String, String)], args: &[&str]) -> Value {
    let out = expect_ok(env, args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
}

/// Waits until each endpoint got each event, then checks nothing came twice.
async fn every_pair_delivered_once(s: &Setup) {
    for path in ["/a", "/b"] {
        let got = s
            .receiver
            .wait_for(path, s.events.len(), Duration::from_secs(60))
            .await;
        let mut ids: Vec<String> = got
            .iter()
            .filter_map(|r| r.header("webhook-id").map(str::to_owned))
            .collect();
        ids.sort();
        let mut want = s.events.clone();
        want.sort();
        assert_eq!(ids, want, "endpoint {path}: each event once");
    }
    // Late duplicates would arrive within the sender pollers' next rounds.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for path in ["/a", "/b"] {
        assert_eq!(s.receiver.requests(path).len(), s.events.len(), "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discarded_batch_is_listed_with_its_events_and_redriven_from_the_stream() {
    let s = setup("tredrive1-").await;
    // Lambda's shape: the batch's range and arrival times, no event id.
    let info = &s.on_failure["DDBStreamBatchInfo"];
    assert_eq!(info["batchSize"], 3);
    assert_eq!(
        s.on_failure["requestContext"]["condition"],
        "RetryAttemptsExhausted"
    );
    assert_eq!(s.on_failure["requestContext"]["approximateInvokeCount"], 2);
    for field in [
        "approximateArrivalOfFirstRecord",
        "approximateArrivalOfLastRecord",
        "shardId",
    ] {
        assert!(info[field].is_string(), "{field}: {info}");
    }
    assert!(
        !s.on_failure.to_string().contains(&s.events[0]),
        "no event id in it"
    );

    let list = json(&s.env, &["relay-failures", "--json"]);
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{list}");
    assert_eq!(items[0]["kind"], "discarded_stream_batch");
    assert_eq!(
        items[0]["stream_batch"]["startSequenceNumber"],
        info["startSequenceNumber"]
    );
    assert_eq!(
        items[0]["stream_batch"]["endSequenceNumber"],
        info["endSequenceNumber"]
    );
    let listed: Vec<String> = items[0]["events"]
        .as_array()
        .expect("the events of the range")
        .iter()
        .map(|e| e.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(listed, s.events, "the range's events, in stream order");
    let table = expect_ok(&s.env, &["relay-failures"]);
    assert!(
        table.contains(info["startSequenceNumber"].as_str().unwrap())
            && s.events.iter().all(|e| table.contains(e.as_str())),
        "{table}"
    );

    let done = json(
        &s.env,
        &["relay-failures", "--retry", &s.on_failure_id, "--json"],
    );
    assert_eq!(done["source"], "stream", "{done}");
    assert_eq!(done["deliveries"], 6, "{done}");
    assert_eq!(done["events"].as_array().unwrap().len(), 3);
    every_pair_delivered_once(&s).await;
    let list = json(&s.env, &["relay-failures", "--json"]);
    assert_eq!(
        list["items"].as_array().unwrap().len(),
        0,
        "removed: {list}"
    );
    drop(s.local);
    s.moto.stop().await;
}

/// The stream no longer holds the range (here: its stream is gone, as a disabled stream
/// is after 24 h; moto keeps records for ever, so age alone cannot be shown): the
/// listing says so, and `--retry` relays the outbox items created in the batch's window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discarded_batch_past_the_stream_is_redriven_from_the_outbox() {
    let s = setup("tredrive2-").await;
    let sqs = aws_sdk_sqs::Client::new(&s.local.aws);
    let failures = &s.local.resources.relay_failure_queue_url;
    // Take the poller's record off the queue and put it back naming a stream that no
    // longer exists.
    let received = sqs
        .receive_message()
        .queue_url(failures)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    for m in received.messages() {
        sqs.delete_message()
            .queue_url(failures)
            .receipt_handle(m.receipt_handle().unwrap())
            .send()
            .await
            .unwrap();
    }
    let mut record = s.on_failure.clone();
    record["DDBStreamBatchInfo"]["streamArn"] = Value::from(
        "arn:aws:dynamodb:us-east-1:123456789012:table/tredrive2-gone/stream/2026-01-01T00:00:00.000",
    );
    tern_aws::SqsQueue::new(sqs.clone(), failures.clone())
        .send(&QueueEntry {
            id: "onfailure".into(),
            body: record.to_string(),
            delay_seconds: 0,
            attributes: vec![],
            group_id: None,
        })
        .await
        .unwrap();

    let list = json(&s.env, &["relay-failures", "--json"]);
    let item = &list["items"][0];
    let note = item["events_unavailable"]
        .as_str()
        .expect("says why no events");
    assert!(
        note.contains("no longer holds") && note.contains("outbox"),
        "{note}"
    );

    let done = json(
        &s.env,
        &[
            "relay-failures",
            "--retry",
            item["message_id"].as_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(done["source"], "outbox", "{done}");
    let mut relayed: Vec<String> = done["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap().to_owned())
        .collect();
    relayed.sort();
    let mut want = s.events.clone();
    want.sort();
    assert_eq!(relayed, want, "{done}");
    assert!(done["scanned_items"].as_u64().unwrap() >= 3, "{done}");
    every_pair_delivered_once(&s).await;
    drop(s.local);
    s.moto.stop().await;
}
