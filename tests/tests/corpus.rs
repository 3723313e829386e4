//! The bad-input corpus (`tests/corpus/*.json`): every case goes through the real parser
//! or handler and must come out as its file says. No AWS and no network: the relay and
//! the sender run over in-memory ports, URLs resolve through a fixed host table, and the
//! only destination a case can point at is a closed port on 127.0.0.1.
//!
//! Also the stable smoke test of the fuzz targets (`fuzz/`): every seed-corpus file runs
//! through the same target functions `cargo fuzz` drives.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lambda_events::sqs::SqsEvent;
use chrono::Utc;
use serde_json::{Value, json};
use tern_core::ports::EndpointStore as _;
use tern_core::{DeadLetterReason, DeliveryMessage, Endpoint, EndpointId, Secret, TenantId};
use tern_handlers::config::SenderPolicy;
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::relay::{RecordOutcome, RelayDeps};
use tern_handlers::sender::{MessageOutcome, SenderDeps};
use tern_http::{
    ClientOptions, DeliveryClient, DestinationPolicy, EndpointCheckError, StaticLookup,
};
use tern_tests::fakes::{MemEndpoints, MemLedger, MemQueue};

#[path = "../../fuzz/src/lib.rs"]
mod fuzz_targets;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

fn load(file: &str) -> Value {
    let path = corpus_dir().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn cases(doc: &Value) -> &Vec<Value> {
    doc["cases"].as_array().expect("a cases array")
}

fn name(case: &Value) -> &str {
    case["name"].as_str().unwrap_or("?")
}

fn expect(case: &Value) -> &str {
    case["expect"]
        .as_str()
        .unwrap_or_else(|| panic!("case {:?} has no expect", name(case)))
}

fn metrics() -> Metrics {
    Metrics::new("Tern", MetricsSink::Discard)
}

/// Every case file has at least this many cases, and all together at least 40.
#[test]
fn corpus_is_big_enough() {
    let files = [
        "stream_records.json",
        "delivery_messages.json",
        "endpoint_urls.json",
        "secrets.json",
        "payloads.json",
        "signature_headers.json",
    ];
    let total: usize = files.iter().map(|f| cases(&load(f)).len()).sum();
    for f in files {
        assert!(cases(&load(f)).len() >= 5, "{f} has fewer than 5 cases");
    }
    assert!(total >= 40, "corpus has {total} cases");
}

// ---------------------------------------------------------------- stream records

fn stream_record(case: &Value, seq: usize) -> Value {
    if let Some(record) = case.get("record") {
        return record.clone();
    }
    let mut dynamodb = json!({
        "ApproximateCreationDateTime": 1767225600.0,
        "Keys": {"event_id": {"S": format!("key{seq}")}},
        "SequenceNumber": format!("{:021}", 100 + seq),
        "SizeBytes": 100,
        "StreamViewType": case.get("stream_view_type").and_then(Value::as_str).unwrap_or("NEW_IMAGE"),
    });
    if let Some(img) = case.get("new_image") {
        dynamodb["NewImage"] = img.clone();
    }
    if let Some(img) = case.get("old_image") {
        dynamodb["OldImage"] = img.clone();
    }
    let mut record = json!({
        "eventID": format!("ev{seq}"),
        "eventName": case.get("event_name").and_then(Value::as_str).unwrap_or("INSERT"),
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/outbox/stream/2026",
        "dynamodb": dynamodb,
    });
    if let Some(who) = case.get("user_identity") {
        record["userIdentity"] = who.clone();
    }
    record
}

fn endpoint(id: &str, tenant: &str, url: &str) -> Endpoint {
    let mut e = Endpoint::new(
        EndpointId::new(id).expect("id"),
        TenantId::new(tenant).expect("tenant"),
        url,
        vec!["*".into()],
        Secret::generate(),
        Utc::now(),
    );
    e.timeout_ms = Some(1_000);
    e.max_attempts = Some(3);
    e
}

struct Relay {
    deps: RelayDeps,
    delivery: Arc<MemQueue>,
    failures: Arc<MemQueue>,
}

async fn relay() -> Relay {
    let endpoints = Arc::new(MemEndpoints::default());
    endpoints
        .put(&endpoint("ep_all", "tnt_a", "https://receiver.test/hook"))
        .await
        .expect("put");
    let (delivery, failures) = (Arc::new(MemQueue::default()), Arc::new(MemQueue::default()));
    Relay {
        deps: RelayDeps {
            endpoints,
            delivery_queue: delivery.clone(),
            failure_queue: failures.clone(),
            max_payload_bytes: tern_core::event::DEFAULT_MAX_PAYLOAD_BYTES,
            checkpoints: None,
        },
        delivery,
        failures,
    }
}

#[tokio::test]
async fn stream_record_corpus() {
    let doc = load("stream_records.json");
    let mut failures = Vec::new();
    for (i, case) in cases(&doc).iter().enumerate() {
        let r = relay().await;
        let record = stream_record(case, i);
        let (response, outcomes) = tern_handlers::relay::handle_value(
            &r.deps,
            json!({ "Records": [record.clone()] }),
            &metrics(),
        )
        .await;
        let got = match outcomes.as_slice() {
            [RecordOutcome::Ignored] => "ignored".to_owned(),
            [RecordOutcome::Relayed { deliveries, .. }] => format!("relayed:{deliveries}"),
            [RecordOutcome::Poison { reason } | RecordOutcome::Misconfigured { reason }] => {
                let want = case["reason_contains"].as_str().unwrap_or("");
                if !reason.contains(want) {
                    failures.push(format!(
                        "{}: poison reason {reason:?} lacks {want:?}",
                        name(case)
                    ));
                }
                // The failure queue holds the reason and the record as received.
                let parked = r.failures.entries();
                let body: Value =
                    serde_json::from_str(&parked[0].body).expect("poison body is JSON");
                if body["record"] != record || body["reason"] != json!(reason) {
                    failures.push(format!(
                        "{}: failure-queue body lacks the record: {body}",
                        name(case)
                    ));
                }
                if matches!(outcomes[0], RecordOutcome::Poison { .. }) {
                    "poison".to_owned()
                } else {
                    "misconfigured".to_owned()
                }
            }
            other => format!("{other:?}"),
        };
        if !response.batch_item_failures.is_empty() {
            failures.push(format!("{}: reported a batch failure", name(case)));
        }
        if got != expect(case) {
            failures.push(format!(
                "{}: expected {}, got {got}",
                name(case),
                expect(case)
            ));
        }
        // A relayed record's payload is the attribute's text, byte for byte.
        for entry in r.delivery.entries() {
            let msg = DeliveryMessage::parse(&entry.body).expect("relay writes valid messages");
            let attr = case["new_image"]["payload"]["S"]
                .as_str()
                .or_else(|| record["dynamodb"]["NewImage"]["payload"]["S"].as_str())
                .unwrap_or_default();
            if msg.event.payload.as_str() != attr {
                failures.push(format!(
                    "{}: payload changed: {:?} != {attr:?}",
                    name(case),
                    msg.event.payload.as_str()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Poison never blocks: the whole corpus as one batch is handled to its end, with no
/// batch failure, and every good record after a bad one is still relayed.
#[tokio::test]
async fn stream_record_corpus_as_one_batch_never_blocks() {
    let doc = load("stream_records.json");
    let records: Vec<Value> = cases(&doc)
        .iter()
        .enumerate()
        .map(|(i, c)| stream_record(c, i))
        .collect();
    let r = relay().await;
    let (response, outcomes) =
        tern_handlers::relay::handle_value(&r.deps, json!({ "Records": records }), &metrics())
            .await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(outcomes.len(), records.len());
    let poison = cases(&doc)
        .iter()
        .filter(|c| matches!(expect(c), "poison" | "misconfigured"))
        .count();
    assert_eq!(r.failures.entries().len(), poison);
    let relayed: usize = outcomes
        .iter()
        .map(|o| match o {
            RecordOutcome::Relayed { deliveries, .. } => *deliveries,
            _ => 0,
        })
        .sum();
    assert_eq!(r.delivery.entries().len(), relayed);
}

/// A stream event without a record list is parked whole, not dropped and not retried.
#[tokio::test]
async fn stream_event_without_records_is_parked() {
    let r = relay().await;
    let (response, outcomes) =
        tern_handlers::relay::handle_value(&r.deps, json!({"Nope": 1}), &metrics()).await;
    assert!(response.batch_item_failures.is_empty());
    assert!(matches!(
        outcomes.as_slice(),
        [RecordOutcome::Poison { .. }]
    ));
    assert_eq!(r.failures.entries().len(), 1);
}

/// A poison record too big for the failure queue is parked without its images; its keys
/// still name the outbox item.
#[tokio::test]
async fn oversized_poison_record_is_parked_with_its_keys() {
    let r = relay().await;
    let big = format!("[{}]", "1,".repeat(200_000) + "1");
    let case = json!({"new_image": {"event_id": {"S": "evt_big"}, "tern_record": {"S": "outbox_event"}, "payload": {"S": big}}});
    let record = stream_record(&case, 7);
    let (response, outcomes) =
        tern_handlers::relay::handle_value(&r.deps, json!({ "Records": [record] }), &metrics())
            .await;
    assert!(response.batch_item_failures.is_empty());
    assert!(matches!(
        outcomes.as_slice(),
        [RecordOutcome::Poison { .. }]
    ));
    let parked = &r.failures.entries()[0].body;
    assert!(
        parked.len() <= tern_handlers::relay::POISON_BODY_LIMIT_BYTES,
        "{}",
        parked.len()
    );
    let body: Value = serde_json::from_str(parked).expect("JSON");
    assert_eq!(body["keys"], json!({"event_id": {"S": "key7"}}));
    assert_eq!(body["sequence_number"], json!(format!("{:021}", 107)));
    assert!(body["record_truncated"].is_string());
}

// ---------------------------------------------------------------- delivery messages

#[tokio::test]
async fn delivery_message_corpus() {
    let doc = load("delivery_messages.json");
    let endpoints = Arc::new(MemEndpoints::default());
    // Port 9 on loopback, refused by the empty allow-list. Were the guard broken, the
    // attempt would only meet a closed local port.
    endpoints
        .put(&endpoint("ep_blocked", "tnt_a", "http://127.0.0.1:9/hook"))
        .await
        .expect("put");
    let client = DeliveryClient::new(ClientOptions {
        policy: DestinationPolicy {
            https_only: false,
            allow: vec![],
            nat64: false,
        },
        lookup: Arc::new(StaticLookup::default()),
        ..ClientOptions::default()
    })
    .expect("client");
    let mut failures = Vec::new();
    for case in cases(&doc) {
        let dlq = Arc::new(MemQueue::default());
        let delivery = Arc::new(MemQueue::default());
        let deps = SenderDeps {
            endpoints: endpoints.clone(),
            ledger: Arc::new(MemLedger::default()),
            delivery_queue: delivery.clone(),
            dlq: dlq.clone(),
            scheduler: None,
            client: client.clone(),
            policy: SenderPolicy::default(),
            breaker: None,
        };
        let body = match (case.get("body"), case.get("message")) {
            (Some(Value::String(b)), _) => b.clone(),
            (_, Some(m)) => m.to_string(),
            _ => panic!("case {:?} has neither body nor message", name(case)),
        };
        let event: SqsEvent = serde_json::from_value(json!({"Records": [{
            "messageId": "m1", "receiptHandle": "r1", "body": body, "attributes": {}, "messageAttributes": {},
            "eventSource": "aws:sqs", "awsRegion": "us-east-1",
        }]}))
        .expect("SQS event");
        let (response, results) = tern_handlers::sender::handle(&deps, event, &metrics()).await;
        if !response.batch_item_failures.is_empty() {
            failures.push(format!(
                "{}: reported a batch failure: {results:?}",
                name(case)
            ));
            continue;
        }
        // Whatever went on a queue is something SQS accepts: bodies and attribute values.
        for entry in dlq.entries().iter().chain(delivery.entries().iter()) {
            let texts = std::iter::once(&entry.body).chain(entry.attributes.iter().map(|(_, v)| v));
            if let Some(bad) = texts
                .into_iter()
                .find(|t| !tern_core::sqs_text::is_clean(t))
            {
                failures.push(format!("{}: SQS would refuse {bad:?}", name(case)));
            }
        }
        let want: DeadLetterReason = expect(case).parse().expect("a dead-letter reason");
        match &results[0].1 {
            Ok(MessageOutcome::DeadLettered { reason, .. }) if *reason == want => {}
            other => failures.push(format!("{}: expected {want}, got {other:?}", name(case))),
        }
        let parked = dlq.entries();
        if parked.len() != 1 {
            failures.push(format!("{}: {} DLQ entries", name(case), parked.len()));
            continue;
        }
        let reason_attr = parked[0]
            .attributes
            .iter()
            .find(|(k, _)| k == "tern-reason")
            .map(|(_, v)| v.as_str());
        if reason_attr != Some(want.as_str()) {
            failures.push(format!("{}: DLQ tern-reason {reason_attr:?}", name(case)));
        }
        if want == DeadLetterReason::MalformedMessage {
            // The raw body is kept so an operator can see and repair it.
            let kept = if body.is_empty() {
                "(empty body)"
            } else {
                body.as_str()
            };
            if parked[0].body != kept {
                failures.push(format!(
                    "{}: DLQ body {:?} is not the raw body",
                    name(case),
                    parked[0].body
                ));
            }
        }
        if !delivery.entries().is_empty() {
            failures.push(format!("{}: something was re-enqueued", name(case)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------- endpoint URLs

#[tokio::test]
async fn endpoint_url_corpus() {
    let doc = load("endpoint_urls.json");
    let hosts = doc["hosts"]
        .as_object()
        .expect("hosts")
        .iter()
        .map(|(h, addrs)| {
            let ips = addrs
                .as_array()
                .expect("list")
                .iter()
                .map(|a| a.as_str().and_then(|s| s.parse().ok()).expect("an IP"))
                .collect();
            (h.clone(), ips)
        })
        .collect();
    let lookup = StaticLookup { hosts };
    let mut failures = Vec::new();
    for case in cases(&doc) {
        let policy = DestinationPolicy {
            https_only: case
                .get("https_only")
                .and_then(Value::as_bool)
                .unwrap_or(true),
            allow: case
                .get("allow")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|n| n.as_str()?.parse().ok()).collect())
                .unwrap_or_default(),
            nat64: case.get("nat64").and_then(Value::as_bool).unwrap_or(false),
        };
        let url = case["url"].as_str().expect("url");
        let result = tern_http::check_endpoint_url(url, &policy, &lookup).await;
        let got = match &result {
            Ok(_) => "ok",
            Err(EndpointCheckError::Invalid(
                tern_core::endpoint::EndpointError::UrlCredentials,
            )) => "credentials",
            Err(EndpointCheckError::Invalid(_)) => "invalid",
            Err(EndpointCheckError::Blocked(tern_http::BlockedError::NotHttps)) => "not_https",
            Err(EndpointCheckError::Blocked(
                tern_http::BlockedError::DeniedAddress { range, .. }
                | tern_http::BlockedError::DeniedNat64 { range, .. },
            )) => {
                let want = case["range_contains"].as_str().unwrap_or("");
                if !range.contains(want) {
                    failures.push(format!("{}: range {range:?} lacks {want:?}", name(case)));
                }
                "blocked"
            }
            Err(EndpointCheckError::Unresolvable { .. }) => "unresolvable",
        };
        if got != expect(case) {
            failures.push(format!(
                "{}: {url:.60}: expected {}, got {result:?}",
                name(case),
                expect(case)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------- secrets

#[test]
fn secret_corpus() {
    let doc = load("secrets.json");
    let mut failures = Vec::new();
    for case in cases(&doc) {
        let text = case["secret"].as_str().expect("secret");
        let ours = Secret::parse(text);
        let got = match &ours {
            Ok(_) => "ok".to_owned(),
            Err(tern_core::signing::SecretError::MissingPrefix) => "missing_prefix".to_owned(),
            Err(tern_core::signing::SecretError::NotBase64) => "not_base64".to_owned(),
            Err(tern_core::signing::SecretError::BadLength(n)) => format!("bad_length:{n}"),
        };
        if got != expect(case) {
            failures.push(format!(
                "{}: expected {}, got {got}",
                name(case),
                expect(case)
            ));
        }
        // The receiver library agrees on what is a valid secret.
        let theirs = tern_receiver::Verifier::new(text);
        if theirs.is_ok() != ours.is_ok() {
            failures.push(format!(
                "{}: tern-receiver says {:?}",
                name(case),
                theirs.as_ref().err()
            ));
        }
        // Neither side repeats the secret in its error (a log of it would leak it).
        let key = text.strip_prefix("whsec_").unwrap_or(text);
        for msg in [
            ours.as_ref().err().map(ToString::to_string),
            theirs.as_ref().err().map(ToString::to_string),
        ]
        .into_iter()
        .flatten()
        {
            if key.len() >= 8 && msg.contains(key) {
                failures.push(format!("{}: error repeats the secret: {msg}", name(case)));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------- payloads

fn payload_text(case: &Value) -> String {
    if let Some(t) = case.get("text").and_then(Value::as_str) {
        return t.to_owned();
    }
    let g = &case["generate"];
    let (prefix, fill, suffix) = (
        g["prefix"].as_str().unwrap_or(""),
        g["fill"].as_str().unwrap_or("x"),
        g["suffix"].as_str().unwrap_or(""),
    );
    let total = usize::try_from(g["total"].as_u64().expect("total")).expect("fits");
    let mut s = prefix.to_owned();
    while s.len() + fill.len() + suffix.len() <= total {
        s.push_str(fill);
    }
    s.push_str(suffix);
    s
}

#[test]
fn payload_corpus() {
    let doc = load("payloads.json");
    let mut failures = Vec::new();
    for case in cases(&doc) {
        let text = payload_text(case);
        let mut writer = tern_outbox::OutboxWriter::new("outbox");
        if let Some(limit) = case.get("limit").and_then(Value::as_u64) {
            writer = writer.with_max_payload_bytes(usize::try_from(limit).expect("fits"));
        }
        let result = writer.prepare("order.paid", "tnt_a", text.clone());
        use tern_core::PayloadError as P;
        use tern_outbox::OutboxWriteError as W;
        let got = match &result {
            Ok(prepared) => {
                let put = prepared.put().expect("put");
                let stored = put
                    .item()
                    .get("payload")
                    .and_then(|v| v.as_s().ok())
                    .cloned()
                    .unwrap_or_default();
                if stored != text || prepared.event.payload.as_str() != text {
                    failures.push(format!(
                        "{}: stored payload differs from the text",
                        name(case)
                    ));
                }
                "ok".to_owned()
            }
            Err(W::Payload(P::NotJson(_))) => "not_json".to_owned(),
            Err(W::Payload(P::NotAnObject { found })) => format!("not_an_object:{found}"),
            Err(W::Payload(e @ P::TooLarge { .. })) => {
                if !(e.to_string().contains("reference") && e.to_string().contains("url")) {
                    failures.push(format!(
                        "{}: too-large message does not explain references: {e}",
                        name(case)
                    ));
                }
                "too_large".to_owned()
            }
            Err(W::Payload(P::Padded)) => "padded".to_owned(),
            Err(W::Payload(P::UnsendableCharacter { .. })) => "unsendable".to_owned(),
            Err(other) => format!("{other:?}"),
        };
        if got != expect(case) {
            failures.push(format!(
                "{}: expected {}, got {got}",
                name(case),
                expect(case)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------- signature headers

#[test]
fn signature_header_corpus() {
    let doc = load("signature_headers.json");
    let verifier = tern_receiver::Verifier::new(doc["secret"].as_str().expect("secret"))
        .expect("valid secret");
    let default_body = doc["body"].as_str().expect("body");
    let timestamp = doc["timestamp"].as_u64().expect("timestamp");
    let mut failures = Vec::new();
    for case in cases(&doc) {
        let headers: Vec<(String, String)> = case["headers"]
            .as_array()
            .expect("headers")
            .iter()
            .map(|h| {
                (
                    h[0].as_str().unwrap_or("").to_owned(),
                    h[1].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect();
        let body = case
            .get("body")
            .and_then(Value::as_str)
            .unwrap_or(default_body);
        let offset = case.get("now_offset").and_then(Value::as_i64).unwrap_or(0);
        let now = UNIX_EPOCH + Duration::from_secs(timestamp.saturating_add_signed(offset));
        let got = match verifier.verify(&headers, body.as_bytes(), now) {
            Ok(_) => "ok".to_owned(),
            // The variant name, without its fields.
            Err(e) => format!("{e:?}")
                .split(['(', ' ', '{'])
                .next()
                .unwrap_or("")
                .to_owned(),
        };
        if got != expect(case) {
            failures.push(format!(
                "{}: expected {}, got {got}",
                name(case),
                expect(case)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = SystemTime::now();
}

// ---------------------------------------------------------------- fuzz seeds (stable smoke test)

/// Runs every file of the fuzz seed corpus through its target function, as `cargo fuzz
/// run` would, on stable Rust. The targets assert their own invariants (no panic, round
/// trips keep payload bytes).
#[test]
fn fuzz_seed_corpus_smoke() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    let mut ran = 0;
    for (target, run) in fuzz_targets::TARGETS {
        let dir = root.join(target);
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let mut seeds = 0;
        for entry in entries {
            let path = entry.expect("entry").path();
            let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            run(&data);
            seeds += 1;
        }
        assert!(seeds > 0, "no seeds for {target}");
        ran += seeds;
    }
    // Plus the bad-input corpus's own inputs, which make good extra seeds.
    for case in cases(&load("delivery_messages.json")) {
        let body = case
            .get("body")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| case["message"].to_string());
        fuzz_targets::delivery_message(body.as_bytes());
        ran += 1;
    }
    assert!(ran > 10);
}
