//! OpenTelemetry traces of one event (issue 30), checked by decoding what Tern exports:
//! the real relay and sender of a local deployment export OTLP/HTTP (protobuf) to a
//! loopback receiver, and the test decodes each request with `opentelemetry-proto`.
//!
//! One event, written with an application span's `traceparent`, goes to three endpoints:
//! one that fails twice and then takes it (and asks for the `traceparent` header), one that
//! takes it at once (and does not ask), one that answers 410 (dead-lettered). The spans
//! must form one trace under the application's span, with the attempts linked in order,
//! the semantic-convention attributes present, and no secret, header value, URL path or
//! payload byte in any attribute.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use tern_core::endpoint::EndpointUpdate;
use tern_core::{Endpoint, RetrySchedule};
use tern_local::LocalOptions;
use tern_outbox::OutboxWriter;
use tern_tests::*;

/// The application's span: trace id and span id of the W3C spec's example.
const APP_TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const APP_SPAN_ID: &str = "00f067aa0ba902b7";

/// The OTLP receiver of this test process: a loopback HTTP receiver on its own runtime
/// (a test's runtime ends with the test; the exporter outlives it), and tracing turned on
/// for the process, exporting to it.
fn otlp() -> &'static Receiver {
    static OTLP: OnceLock<(Receiver, tokio::runtime::Runtime)> = OnceLock::new();
    let (receiver, _) = OTLP.get_or_init(|| {
        std::thread::spawn(|| {
            let runtime = tokio::runtime::Runtime::new().expect("runtime");
            let receiver = runtime
                .block_on(Receiver::start())
                .expect("OTLP receiver on 127.0.0.1");
            let provider = tern_handlers::telemetry::otlp_provider(
                "tern-test",
                Some(&receiver.url("/v1/traces")),
                Some(&span_log()),
            )
            .expect("OTLP exporter");
            assert!(tern_handlers::telemetry::install(provider));
            (receiver, runtime)
        })
        .join()
        .expect("OTLP receiver thread")
    });
    receiver
}

/// The span file this process also writes (local mode's store, which `tern trace` reads).
fn span_log() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("tern-trace-test-{}.jsonl", std::process::id()))
}

/// Every span exported so far.
fn exported_spans(receiver: &Receiver) -> Vec<Span> {
    receiver
        .requests("/v1/traces")
        .iter()
        .flat_map(|request| {
            ExportTraceServiceRequest::decode(request.body.as_ref())
                .expect("an OTLP/HTTP protobuf export")
                .resource_spans
        })
        .flat_map(|r| r.scope_spans)
        .flat_map(|s| s.spans)
        .collect()
}

fn text(value: &AnyValue) -> String {
    match &value.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn attributes(span: &Span) -> HashMap<String, String> {
    span.attributes
        .iter()
        .map(|kv: &KeyValue| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(text).unwrap_or_default(),
            )
        })
        .collect()
}

fn attr(span: &Span, key: &str) -> Option<String> {
    attributes(span).remove(key)
}

/// The spans of `event_id` (by its attribute).
fn spans_of(receiver: &Receiver, event_id: &str) -> Vec<Span> {
    exported_spans(receiver)
        .into_iter()
        .filter(|s| attr(s, "tern.event.id").as_deref() == Some(event_id))
        .collect()
}

async fn add_traced_endpoint(
    local: &tern_local::LocalTern,
    url: &str,
    send_traceparent: bool,
) -> Endpoint {
    let endpoint = add_endpoint_with(
        local,
        tern_core::EndpointId::generate(),
        "tnt_trace",
        url,
        &["order.paid"],
        Some(3),
        Some(RetrySchedule::parse("1,1").expect("schedule")),
    )
    .await;
    let update = EndpointUpdate {
        send_traceparent: Some(send_traceparent),
        ..EndpointUpdate::default()
    };
    local
        .sender
        .endpoints
        .update(&endpoint.tenant_id, &endpoint.id, &update)
        .await
        .expect("update endpoint");
    endpoint
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_event_is_one_trace_under_the_application_span() {
    let otlp = otlp();
    let options = LocalOptions {
        time_scale: 0.001,
        ..LocalOptions::default()
    };
    let (local, _rx) = deployment("trace_story", options).await;
    let receiver = Receiver::start().await.expect("receiver");
    receiver.set(
        "/secret-path-flaky",
        Behavior::FailFirst {
            count: 2,
            status: 500,
        },
    );
    receiver.set("/secret-path-quiet", Behavior::Always(Reply::status(200)));
    receiver.set("/secret-path-gone", Behavior::Always(Reply::status(410)));
    let flaky =
        add_traced_endpoint(&local, &receiver.url("/secret-path-flaky?token=q1"), true).await;
    let quiet = add_traced_endpoint(&local, &receiver.url("/secret-path-quiet"), false).await;
    let gone = add_traced_endpoint(&local, &receiver.url("/secret-path-gone"), true).await;

    // The application writes the event inside its span, carrying the span's context.
    let payload = r#"{"order_id":"o_payload_marker_7f3a","amount":4200}"#;
    let prepared = OutboxWriter::new(&local.resources.outbox_table)
        .prepare("order.paid", "tnt_trace", payload)
        .expect("event")
        .with_trace_context(
            &format!("00-{APP_TRACE_ID}-{APP_SPAN_ID}-01"),
            Some("vendor=opaque"),
        )
        .expect("trace context");
    local
        .dynamodb()
        .transact_write_items()
        .transact_items(prepared.transact_item().expect("put"))
        .send()
        .await
        .expect("transaction");
    let event_id = prepared.event.id.to_string();

    let flaky_requests = receiver
        .wait_for("/secret-path-flaky", 3, Duration::from_secs(90))
        .await;
    assert_eq!(flaky_requests.len(), 3, "two failures, then the delivery");
    let quiet_requests = receiver
        .wait_for("/secret-path-quiet", 1, Duration::from_secs(60))
        .await;
    assert_eq!(quiet_requests.len(), 1);
    assert_eq!(
        receiver
            .wait_for("/secret-path-gone", 1, Duration::from_secs(60))
            .await
            .len(),
        1
    );

    // 1 fan-out + 5 attempts + 2 waits + 1 dead letter, exported by the batch processor.
    let complete = eventually(Duration::from_secs(60), async || {
        tern_handlers::telemetry::flush().await;
        let spans = spans_of(otlp, &event_id);
        let named = |n: &str| spans.iter().filter(|s| s.name == n).count();
        named("fan-out") == 1
            && named("POST") == 5
            && named("retry wait") == 2
            && named("dead-letter") == 1
    })
    .await;
    let spans = spans_of(otlp, &event_id);
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert!(complete, "spans of the event: {names:?}");

    // One trace, the application's.
    for span in &spans {
        assert_eq!(
            hex::encode(&span.trace_id),
            APP_TRACE_ID,
            "{} is in the application's trace",
            span.name
        );
    }
    let fan_out = spans.iter().find(|s| s.name == "fan-out").expect("fan-out");
    assert_eq!(
        hex::encode(&fan_out.parent_span_id),
        APP_SPAN_ID,
        "the fan-out is the application span's child"
    );
    assert_eq!(attr(fan_out, "tern.fanout.endpoints").as_deref(), Some("3"));
    assert_eq!(
        attr(fan_out, "messaging.batch.message_count").as_deref(),
        Some("3")
    );
    assert_eq!(
        attr(fan_out, "tern.event.type").as_deref(),
        Some("order.paid")
    );
    for span in spans.iter().filter(|s| s.name != "fan-out") {
        assert_eq!(
            span.parent_span_id, fan_out.span_id,
            "{} is the fan-out's child",
            span.name
        );
    }

    // The flaky endpoint's attempts: 500, 500, 200, in order, each linked to the one before.
    let endpoint_spans = |endpoint: &Endpoint, name: &str| -> Vec<&Span> {
        let mut found: Vec<&Span> = spans
            .iter()
            .filter(|s| {
                s.name == name
                    && attr(s, "tern.endpoint.id").as_deref() == Some(endpoint.id.as_str())
            })
            .collect();
        found.sort_by_key(|s| attr(s, "tern.attempt").and_then(|a| a.parse::<u32>().ok()));
        found
    };
    let attempts = endpoint_spans(&flaky, "POST");
    assert_eq!(attempts.len(), 3);
    for (i, span) in attempts.iter().enumerate() {
        let a = attributes(span);
        assert_eq!(a["tern.attempt"], (i + 1).to_string());
        assert_eq!(a["http.request.resend_count"], i.to_string());
        assert_eq!(a["http.request.method"], "POST");
        assert_eq!(a["server.address"], "127.0.0.1");
        assert_eq!(a["server.port"], receiver.addr().port().to_string());
        assert_eq!(a["url.scheme"], "http");
        assert_eq!(a["tern.tenant.id"], "tnt_trace");
        assert_eq!(span.kind, 3, "an HTTP client span (SPAN_KIND_CLIENT)");
        let expected = if i < 2 {
            ("500", "retry")
        } else {
            ("200", "delivered")
        };
        assert_eq!(a["http.response.status_code"], expected.0);
        assert_eq!(a["tern.outcome"], expected.1);
        assert_eq!(
            a.get("error.type").map(String::as_str),
            (i < 2).then_some("500")
        );
        assert!(span.end_time_unix_nano >= span.start_time_unix_nano);
        if i == 0 {
            assert!(span.links.is_empty(), "the first attempt links to nothing");
        } else {
            assert_eq!(
                span.links.len(),
                1,
                "attempt {} links to the one before",
                i + 1
            );
            assert_eq!(span.links[0].span_id, attempts[i - 1].span_id);
        }
        // The receiver saw this attempt's span as its parent.
        let header = flaky_requests[i]
            .header("traceparent")
            .expect("traceparent sent");
        assert_eq!(
            header,
            format!("00-{APP_TRACE_ID}-{}-01", hex::encode(&span.span_id))
        );
    }
    let waits = endpoint_spans(&flaky, "retry wait");
    assert_eq!(waits.len(), 2);
    for (i, wait) in waits.iter().enumerate() {
        assert_eq!(
            wait.links[0].span_id,
            attempts[i].span_id,
            "the wait follows attempt {}",
            i + 1
        );
    }

    // The endpoint that did not ask gets no traceparent; its attempt is traced all the same.
    assert_eq!(quiet_requests[0].header("traceparent"), None);
    assert_eq!(endpoint_spans(&quiet, "POST").len(), 1);

    // The 410: one attempt, then the dead letter linked to it.
    let gone_attempt = endpoint_spans(&gone, "POST");
    assert_eq!(gone_attempt.len(), 1);
    assert_eq!(
        attr(gone_attempt[0], "tern.outcome").as_deref(),
        Some("dead_letter:gone")
    );
    let dead = endpoint_spans(&gone, "dead-letter");
    assert_eq!(dead.len(), 1);
    assert_eq!(
        attr(dead[0], "tern.dead_letter.reason").as_deref(),
        Some("gone")
    );
    assert_eq!(dead[0].links[0].span_id, gone_attempt[0].span_id);

    // Nothing secret or receiver-controlled in any attribute of any span.
    let mut forbidden: Vec<String> = vec![
        "secret-path".into(),
        "token=q1".into(),
        "payload_marker".into(),
        "whsec_".into(),
    ];
    for endpoint in [&flaky, &quiet, &gone] {
        for secret in &endpoint.secrets {
            let text = secret.secret.expose();
            forbidden.push(text.trim_start_matches("whsec_").to_owned());
        }
    }
    for request in flaky_requests.iter().chain(&quiet_requests) {
        for name in ["webhook-signature", "x-webhook-signature", "user-agent"] {
            if let Some(value) = request.header(name) {
                forbidden.push(value.to_owned());
            }
        }
    }
    for span in &spans {
        for (key, value) in attributes(span) {
            for bad in &forbidden {
                assert!(
                    !value.contains(bad.as_str()),
                    "{}'s attribute {key} holds {bad:?}: {value:?}",
                    span.name
                );
            }
        }
        let status = span
            .status
            .as_ref()
            .map(|s| s.message.clone())
            .unwrap_or_default();
        assert!(
            !forbidden.iter().any(|bad| status.contains(bad.as_str())),
            "{}'s status {status:?}",
            span.name
        );
    }

    // The same spans in local mode's span file, and `tern trace`'s waterfall of them: the
    // fan-out first, every attempt, wait and dead letter on one time axis.
    let logged = tern_handlers::span_log::read(&span_log()).expect("span file");
    let trace = tern_handlers::span_log::trace_of(&logged, &event_id);
    assert_eq!(
        trace.len(),
        spans.len(),
        "the file holds the exported spans"
    );
    let waterfall = tern_handlers::span_log::waterfall(&trace);
    let lines: Vec<&str> = waterfall.lines().collect();
    assert_eq!(lines[0], format!("trace {APP_TRACE_ID}"));
    assert_eq!(lines.len(), 2 + spans.len(), "{waterfall}");
    assert!(lines[2].contains("fan-out endpoints 3"), "{waterfall}");
    let flaky_lines: Vec<&&str> = lines
        .iter()
        .filter(|l| l.contains("POST") && l.contains(flaky.id.as_str()))
        .collect();
    assert_eq!(flaky_lines.len(), 3, "{waterfall}");
    assert!(
        flaky_lines[0].contains("attempt 1 500 error 500 retry"),
        "{waterfall}"
    );
    assert!(
        flaky_lines[2].contains("attempt 3 200 delivered"),
        "{waterfall}"
    );
    assert!(waterfall.contains("dead-letter"), "{waterfall}");
    assert!(
        lines[3..].iter().all(|l| l.contains("  POST")
            || l.contains("  retry wait")
            || l.contains("  dead-letter")),
        "children indented under the fan-out:\n{waterfall}"
    );
    println!("{waterfall}");
}
