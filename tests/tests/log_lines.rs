//! Issue 9: the sender's JSON log lines carry each field once. The Lambda runtime wraps
//! every invocation in a `Lambda runtime invoke` span with the request id; the sender's
//! lines, at `RUST_LOG=info` in the Lambda format, must name it once. Also measures the
//! log bytes per delivery (printed; bytes are not a timing, but the number is reported,
//! not asserted beyond "each field once").

use std::sync::{Arc, Mutex};

use tern_core::DeliveryMessage;
use tern_handlers::config::SenderPolicy;
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::sender::{MessageOutcome, SenderDeps};
use tern_http::{ClientOptions, DeliveryClient, DestinationPolicy};
use tern_tests::fakes::{MemEndpoints, MemLedger, MemQueue};
use tern_tests::*;
use tracing::Instrument as _;
use tracing_subscriber::layer::SubscriberExt as _;

const REQUEST_ID: &str = "8476a536-e9f4-11e8-9739-2dfe598c3fcd";
const DELIVERIES: usize = 5;

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Buffer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Buffer {
    type Writer = Buffer;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Delivers `DELIVERIES` events (one Lambda invocation each) to a receiver that answers
/// 200, over in-memory ports, with `layer` as the log format at `info`; returns the log.
async fn sender_log<L>(layer: impl FnOnce(Buffer) -> L) -> String
where
    L: tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync + 'static,
{
    let buffer = Buffer::default();
    let subscriber = tracing_subscriber::registry()
        .with(layer(buffer.clone()))
        .with(tracing_subscriber::EnvFilter::new("info"));
    let _default = tracing::subscriber::set_default(subscriber);

    let receiver = Receiver::start().await.unwrap();
    let endpoints = Arc::new(MemEndpoints::default());
    let tenant = "tnt_logs";
    let endpoint = tern_core::Endpoint::new(
        tern_core::EndpointId::generate(),
        tern_core::TenantId::new(tenant).unwrap(),
        receiver.url("/ok"),
        vec!["*".into()],
        tern_core::Secret::generate(),
        chrono::Utc::now(),
    );
    endpoint.validate().unwrap();
    endpoints.endpoints.lock().unwrap().push(endpoint.clone());
    let deps = SenderDeps {
        endpoints,
        ledger: Arc::new(MemLedger::default()),
        delivery_queue: Arc::new(MemQueue::default()),
        dlq: Arc::new(MemQueue::default()),
        scheduler: None,
        client: DeliveryClient::new(ClientOptions {
            policy: DestinationPolicy {
                https_only: false,
                allow: vec!["127.0.0.1/32".parse().unwrap()],
                nat64: false,
            },
            lookup: no_dns(),
            excerpt_bytes: 1024,
        })
        .unwrap(),
        policy: SenderPolicy::default(),
        breaker: None,
    };
    for n in 0..DELIVERIES {
        let event = tern_outbox::OutboxWriter::new("unused")
            .prepare("order.paid", tenant, format!(r#"{{"n":{n}}}"#))
            .unwrap()
            .event;
        let body = DeliveryMessage::first(event, endpoint.id.clone()).to_body();
        // The span lambda_runtime opens around each invocation (layers::trace::request_span).
        let span = tracing::info_span!("Lambda runtime invoke", requestId = REQUEST_ID);
        let metrics = Metrics::new("Tern", MetricsSink::Discard);
        let (_, results) = tern_handlers::sender::handle(&deps, sqs_event(&[body]), &metrics)
            .instrument(span)
            .await;
        assert_eq!(results[0].1, Ok(MessageOutcome::Delivered { attempt: 1 }));
    }
    buffer.text()
}

#[tokio::test(flavor = "current_thread")]
async fn sender_log_lines_carry_the_request_id_once() {
    let before = sender_log(|b| tracing_subscriber::fmt::layer().json().with_writer(b)).await;
    let after = sender_log(tern_handlers::logging::json_layer).await;
    let lines: Vec<&str> = after
        .lines()
        .filter(|l| l.contains(r#""attempt""#))
        .collect();
    assert_eq!(
        lines.len(),
        DELIVERIES,
        "one info line per delivery:\n{after}"
    );
    for line in after.lines() {
        let parsed: serde_json::Value = serde_json::from_str(line).unwrap();
        if line.contains(REQUEST_ID) {
            assert_eq!(line.matches(REQUEST_ID).count(), 1, "{line}");
            assert_eq!(parsed["spans"][0]["requestId"], REQUEST_ID, "{line}");
        }
    }
    let per = |text: &str| text.len() as f64 / DELIVERIES as f64;
    eprintln!(
        "sender log at info, per delivery: before {:.0} bytes ({} lines), after {:.0} bytes ({} lines)\nbefore: {}\nafter:  {}",
        per(&before),
        before.lines().count(),
        per(&after),
        after.lines().count(),
        before.lines().next().unwrap_or(""),
        after.lines().next().unwrap_or(""),
    );
    assert!(
        before
            .lines()
            .all(|l| !l.contains(REQUEST_ID) || l.matches(REQUEST_ID).count() == 2),
        "the default JSON format printed the span twice; if it no longer does, this test's \
         'before' is stale:\n{before}"
    );
}

/// Issue 17 item 6: a relay log line about a record names the Tern event (`evt_...`, the
/// outbox item's key) as `event_id`, and the stream record's own id apart, as
/// `stream_record_id`: an operator searches the logs for the id `tern attempts` and
/// `tern relay-failures` print, not for a stream sequence detail.
#[tokio::test]
async fn relay_log_lines_name_the_tern_event_not_the_stream_record() {
    let buffer = Buffer::default();
    let subscriber = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .json()
                .with_writer(buffer.clone()),
        )
        .with(tracing_subscriber::EnvFilter::new("info"));
    let _default = tracing::subscriber::set_default(subscriber);

    // A poison record: the fixture's outbox item with a schema version this build refuses.
    let mut event: serde_json::Value =
        serde_json::from_str(&fixture("dynamodb-stream-insert.json")).unwrap();
    event["Records"][0]["dynamodb"]["NewImage"]["schema_version"] = serde_json::json!({"N": "99"});
    let failures = Arc::new(MemQueue::default());
    let deps = tern_handlers::relay::RelayDeps {
        endpoints: Arc::new(MemEndpoints::default()),
        delivery_queue: Arc::new(MemQueue::default()),
        failure_queue: failures.clone(),
        max_payload_bytes: 262_144,
        checkpoints: None,
    };
    let metrics = Metrics::new("Tern", MetricsSink::Discard);
    let (_, outcomes) = tern_handlers::relay::handle_value(&deps, event, &metrics).await;
    assert!(
        matches!(
            outcomes[0],
            tern_handlers::relay::RecordOutcome::Poison { .. }
        ),
        "{outcomes:?}"
    );
    let log = buffer.text();
    let line = log
        .lines()
        .find(|l| l.contains("poison outbox record parked"))
        .unwrap_or_else(|| panic!("no park line in {log}"));
    let line: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(line["fields"]["event_id"], "evt_stream_2", "{line}");
    assert_eq!(line["fields"]["stream_record_id"], "e0011", "{line}");
}
