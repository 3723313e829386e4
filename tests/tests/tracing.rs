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

    // What a span costs a backend that bills by size (docs/tracing.md §5): each of Tern's
    // spans, protobuf-encoded as OTLP exports it (without the resource, sent once a batch),
    // stays under 1 KiB.
    let sizes: Vec<usize> = spans.iter().map(prost::Message::encoded_len).collect();
    let largest = sizes.iter().max().copied().unwrap_or(0);
    assert!(largest <= 1024, "a span of {largest} bytes: {sizes:?}");
    println!(
        "OTLP span sizes, bytes: largest {largest}, mean {} over {} spans",
        sizes.iter().sum::<usize>() / sizes.len().max(1),
        sizes.len()
    );

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

// ------------------------------------------- issue 30's "done when": a Python program's order

/// The venv's Python running `clients/python/examples/traced_order.py` in `role`,
/// exporting to each of `otlp`, its stdout piped. Panics with what to run when the venv
/// is missing.
fn traced_order(role: &str, otlp: &[String]) -> tokio::process::Command {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let pkg = root.join("clients/python");
    let mut command = tokio::process::Command::new(python());
    command
        .current_dir(&pkg)
        .arg("examples/traced_order.py")
        .arg(role)
        // This checkout's tern-client, whichever checkout the venv installed.
        .env("PYTHONPATH", &pkg)
        // Nothing may leave 127.0.0.1: no proxy, no shared AWS config or credentials.
        .env("NO_PROXY", "*")
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .env("AWS_ENDPOINT_URL", moto_url())
        .env("AWS_REGION", "us-east-1")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true);
    for url in otlp {
        command.arg("--otlp").arg(url);
    }
    command
}

/// The next JSON line `lines` prints, within `limit`.
async fn next_json(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    what: &str,
    limit: Duration,
) -> serde_json::Value {
    let line = tokio::time::timeout(limit, lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing printed within {limit:?}"))
        .expect("read the program's output")
        .unwrap_or_else(|| panic!("{what}: the program ended without printing"));
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{what}: {line:?} is not JSON: {e}"))
}

/// A `traceparent`'s version, trace id, parent id and flags (W3C Trace Context §3.2).
fn traceparent_parts(header: Option<&str>) -> (&str, &str, &str, &str) {
    let parts: Vec<&str> = header.expect("a traceparent").split('-').collect();
    assert_eq!(parts.len(), 4, "{header:?}");
    (parts[0], parts[1], parts[2], parts[3])
}

/// One trace, as the test reads it from either store: (span id, parent span id, name,
/// attributes), with the trace id of every span.
struct Story {
    trace_ids: Vec<String>,
    spans: Vec<(String, String, String, HashMap<String, String>)>,
}

impl Story {
    fn named(&self, name: &str) -> Vec<&(String, String, String, HashMap<String, String>)> {
        let mut found: Vec<_> = self.spans.iter().filter(|s| s.2 == name).collect();
        found.sort_by_key(|s| {
            s.3.get("tern.attempt")
                .or_else(|| s.3.get("webhook.request"))
                .and_then(|a| a.parse::<u32>().ok())
        });
        found
    }
}

/// Issue 30's "done when": an order written with a span in a Python program (the Python
/// client's outbox builder takes the span's context) goes through local mode's real relay
/// and sender to a receiver that fails twice, then takes it, and traces its own work from
/// the `traceparent` header. One trace holds the program's span, the fan-out, two failed
/// attempts, the waits, the successful attempt and the receiver's spans, each receiver span
/// the child of the attempt it answered: in local mode's span file (Tern's spans and, through
/// local mode's OTLP collector, the programs') and in an OTLP backend (a loopback OTLP/HTTP
/// receiver decoding every protobuf export).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_order_is_one_trace_to_a_receiver_that_traces() {
    let backend = otlp();
    let collector = tern_local::collector::Collector::start(
        std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        span_log(),
    )
    .await
    .expect("local mode's OTLP collector");
    let exports = [collector.traces_url(), backend.url("/v1/traces")];
    let (local, _rx) = deployment(
        "trace_python",
        LocalOptions {
            time_scale: 0.001,
            ..LocalOptions::default()
        },
    )
    .await;

    // The receiver that traces: 500, 500, then 200.
    let mut receiver = traced_order("receiver", &exports)
        .arg("--fail")
        .arg("2")
        .spawn()
        .expect("start the Python receiver");
    let mut receiver_out = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(
        receiver.stdout.take().expect("stdout"),
    ));
    let port = next_json(&mut receiver_out, "receiver", Duration::from_secs(60)).await["port"]
        .as_u64()
        .expect("the receiver's port");
    // The shortest schedule: retries after 1 s and 1 s, at local mode's time scale 0.001.
    let endpoint = add_endpoint_with(
        &local,
        tern_core::EndpointId::generate(),
        "tnt_shop",
        &format!("http://127.0.0.1:{port}/hooks/orders"),
        &["order.paid"],
        Some(3),
        Some(RetrySchedule::parse("1,1").expect("schedule")),
    )
    .await;
    local
        .sender
        .endpoints
        .update(
            &endpoint.tenant_id,
            &endpoint.id,
            &EndpointUpdate {
                send_traceparent: Some(true),
                ..EndpointUpdate::default()
            },
        )
        .await
        .expect("send_traceparent on");

    // The program writes the order and its event inside its span.
    let written = traced_order("order", &exports)
        .env("TERN_OUTBOX_TABLE", &local.resources.outbox_table)
        .env("TERN_TENANT", "tnt_shop")
        .output();
    let written = tokio::time::timeout(Duration::from_secs(60), written)
        .await
        .expect("the order program ends within 60 s")
        .expect("run the order program");
    assert!(written.status.success(), "order program: {written:?}");
    let program: serde_json::Value =
        serde_json::from_slice(&written.stdout).expect("the program's JSON line");
    let event_id = program["event_id"].as_str().expect("event id").to_owned();
    let trace_id = program["trace_id"].as_str().expect("trace id").to_owned();
    let program_span = program["span_id"].as_str().expect("span id").to_owned();
    let (version, trace, span, flags) = traceparent_parts(program["traceparent"].as_str());
    assert_eq!(
        (version, trace, span),
        ("00", trace_id.as_str(), program_span.as_str()),
        "the builder took the current span's context"
    );
    // Sampled; the SDK also sets W3C Trace Context Level 2's random-trace-id flag (0x02).
    assert_eq!(u8::from_str_radix(flags, 16).expect("flags") & 1, 1);

    // The receiver saw three deliveries, then exits.
    let seen = next_json(&mut receiver_out, "receiver", Duration::from_secs(90)).await;
    let received = seen["received"]
        .as_array()
        .unwrap_or_else(|| panic!("{seen}"));
    let statuses: Vec<u64> = received
        .iter()
        .filter_map(|r| r["status"].as_u64())
        .collect();
    assert_eq!(statuses, [500, 500, 200]);
    let status = tokio::time::timeout(Duration::from_secs(30), receiver.wait())
        .await
        .expect("the receiver exits after the delivery")
        .expect("receiver status");
    assert!(status.success());

    // Tern's spans reach both stores through the batch processor; the programs' spans
    // were exported before the programs answered or ended.
    let expected = [
        ("place order", 1),
        ("fan-out", 1),
        ("POST", 3),
        ("retry wait", 2),
        ("handle order.paid", 3),
    ];
    let from_backend = || {
        let all = exported_spans(backend);
        let spans: Vec<&Span> = all
            .iter()
            .filter(|s| hex::encode(&s.trace_id) == trace_id)
            .collect();
        Story {
            // The traces Tern's spans of the event are in: the program's alone.
            trace_ids: all
                .iter()
                .filter(|s| attr(s, "tern.event.id").as_deref() == Some(event_id.as_str()))
                .map(|s| hex::encode(&s.trace_id))
                .collect(),
            spans: spans
                .iter()
                .map(|s| {
                    (
                        hex::encode(&s.span_id),
                        hex::encode(&s.parent_span_id),
                        s.name.clone(),
                        attributes(s),
                    )
                })
                .collect(),
        }
    };
    let from_file = || {
        let logged = tern_handlers::span_log::read(&span_log()).unwrap_or_default();
        let trace = tern_handlers::span_log::trace_of(&logged, &event_id);
        Story {
            trace_ids: trace.iter().map(|s| s.trace_id.clone()).collect(),
            spans: trace
                .iter()
                .map(|s| {
                    (
                        s.span_id.clone(),
                        s.parent_span_id.clone(),
                        s.name.clone(),
                        s.attributes.clone().into_iter().collect(),
                    )
                })
                .collect(),
        }
    };
    let complete = |story: &Story| {
        expected
            .iter()
            .all(|(name, n)| story.named(name).len() == *n)
    };
    let done = eventually(Duration::from_secs(60), async || {
        tern_handlers::telemetry::flush().await;
        complete(&from_backend()) && complete(&from_file())
    })
    .await;
    for (store, story) in [("OTLP backend", from_backend()), ("span file", from_file())] {
        let names: Vec<&str> = story.spans.iter().map(|s| s.2.as_str()).collect();
        assert!(done, "{store}: spans of the trace: {names:?}");
        assert_eq!(
            story.spans.len(),
            expected.iter().map(|(_, n)| n).sum::<usize>(),
            "{store}: nothing else in the trace: {names:?}"
        );
        assert!(
            story.trace_ids.iter().all(|t| *t == trace_id),
            "{store}: one trace, the program's"
        );
        let place = story.named("place order")[0];
        assert_eq!(place.0, program_span, "{store}: the program's span");
        assert_eq!(
            place.3.get("service.name").map(String::as_str),
            (store == "span file").then_some("shop"),
            "{store}: the collector keeps the program's service name"
        );
        let fan_out = story.named("fan-out")[0];
        assert_eq!(
            fan_out.1, program_span,
            "{store}: the fan-out's parent is the program's span"
        );
        assert_eq!(fan_out.3["tern.event.id"], event_id);
        let attempts = story.named("POST");
        let waits = story.named("retry wait");
        let handled = story.named("handle order.paid");
        for (i, attempt) in attempts.iter().enumerate() {
            assert_eq!(
                attempt.1,
                fan_out.0,
                "{store}: attempt {} under the fan-out",
                i + 1
            );
            assert_eq!(attempt.3["tern.attempt"], (i + 1).to_string());
            let (status, outcome) = if i < 2 {
                ("500", "retry")
            } else {
                ("200", "delivered")
            };
            assert_eq!(attempt.3["http.response.status_code"], status, "{store}");
            assert_eq!(attempt.3["tern.outcome"], outcome, "{store}");
            // The receiver's span of this request is the attempt's child.
            assert_eq!(
                handled[i].1,
                attempt.0,
                "{store}: the receiver's span of request {} is the child of attempt {}",
                i + 1,
                i + 1
            );
            assert_eq!(handled[i].3["http.response.status_code"], status, "{store}");
            let (_, trace, span, _) = traceparent_parts(received[i]["traceparent"].as_str());
            assert_eq!(
                (trace, span),
                (trace_id.as_str(), attempt.0.as_str()),
                "{store}: request {} carried attempt {}'s span as its traceparent",
                i + 1,
                i + 1
            );
            assert_eq!(received[i]["span_id"].as_str(), Some(handled[i].0.as_str()));
        }
        for wait in &waits {
            assert_eq!(wait.1, fan_out.0, "{store}: a wait under the fan-out");
        }
    }

    // `tern trace`'s waterfall of the file: the whole story, the program's span first and
    // the receiver's spans indented under the attempts they answered.
    let logged = tern_handlers::span_log::read(&span_log()).expect("span file");
    let waterfall =
        tern_handlers::span_log::waterfall(&tern_handlers::span_log::trace_of(&logged, &event_id));
    let lines: Vec<&str> = waterfall.lines().collect();
    assert_eq!(lines[0], format!("trace {trace_id}"), "{waterfall}");
    assert!(
        lines[2].contains("place order") && lines[2].contains("service shop"),
        "{waterfall}"
    );
    let receiver_lines: Vec<&&str> = lines
        .iter()
        .filter(|l| l.contains("handle order.paid"))
        .collect();
    assert_eq!(receiver_lines.len(), 3, "{waterfall}");
    assert!(
        receiver_lines
            .iter()
            .all(|l| l.contains("      handle order.paid") && l.contains("service order-receiver")),
        "the receiver's spans three levels down (program, fan-out, attempt):\n{waterfall}"
    );
    println!("{waterfall}");
}
