//! Issue 5: the SSRF guard (no connection is ever opened to a blocked address), poison
//! that never blocks (O1, panics), payload bytes kept whatever they hold (O4, the size
//! limit), and secrets that never reach a log.
//!
//! Every destination a test can reach is on 127.0.0.1/8, and every name resolves through
//! a fixed table: were the guard broken, nothing would leave this machine. Addresses off
//! this machine are tested through the guard's decision alone (`corpus.rs` and
//! `guard_decisions_for_every_denied_range` below).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine as _;
use bytes_shim::Bytes;
use chrono::Utc;
use serde_json::{Value, json};
use tern_core::ports::{EndpointStore, PortError};
use tern_core::{
    DeadLetterReason, DeliveryMessage, Endpoint, EndpointId, ErrorClass, Secret, TenantId,
};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::replay::{ReplayFilters, ReplayRequest};
use tern_http::{
    AttemptRequest, ClientOptions, DeliveryClient, DestinationPolicy, HostLookup, StaticLookup,
};
use tern_local::LocalOptions;
use tern_tests::*;

/// `bytes::Bytes` without a direct dependency: the type reqwest and axum re-export.
mod bytes_shim {
    pub use axum::body::Bytes;
}

fn fast() -> LocalOptions {
    LocalOptions {
        time_scale: 0.001,
        ..LocalOptions::default()
    }
}

fn table(entries: &[(&str, &[IpAddr])]) -> Arc<dyn HostLookup> {
    Arc::new(StaticLookup {
        hosts: entries
            .iter()
            .map(|(h, a)| ((*h).to_owned(), a.to_vec()))
            .collect(),
    })
}

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const LOOPBACK_2: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

// ---------------------------------------------------------------- SSRF

/// A deployment whose allow-list is empty: an endpoint at the counting listener's IP
/// literal, and one whose name resolves to it, both dead-letter with
/// `blocked_destination` after one attempt, and the listener never sees a connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_destinations_are_dead_lettered_without_a_connection() {
    let listener = CountingListener::start(LOOPBACK).await.expect("listener");
    let port = listener.addr.port();
    let options = LocalOptions {
        allow_destinations: vec![],
        lookup: Some(table(&[("blocked.test", &[LOOPBACK])])),
        ..fast()
    };
    let (local, _rx) = deployment("ssrf", options).await;
    let literal = add_endpoint(
        &local,
        "tnt_acme",
        &format!("http://127.0.0.1:{port}/hook"),
        &["*"],
        None,
    )
    .await;
    let named = add_endpoint(
        &local,
        "tnt_acme",
        &format!("http://blocked.test:{port}/hook"),
        &["*"],
        None,
    )
    .await;
    let id = publish(&local, "order.paid", "tnt_acme", r#"{"x":1}"#).await;

    let dlq = local.resources.dlq_url.clone();
    assert!(
        eventually(Duration::from_secs(30), async || peek_queue(&local, &dlq)
            .await
            .len()
            == 2)
        .await,
        "both deliveries dead-lettered"
    );
    let mut seen = Vec::new();
    for body in peek_queue(&local, &dlq).await {
        let dead = DeliveryMessage::parse(&body).expect("a delivery message");
        let record = dead.dead_letter.expect("dead-letter record");
        assert_eq!(record.reason, DeadLetterReason::BlockedDestination);
        assert_eq!(record.attempts, 1, "a blocked destination is never retried");
        assert!(
            record
                .last_error
                .as_deref()
                .unwrap_or("")
                .contains("loopback"),
            "{record:?}"
        );
        seen.push(dead.endpoint_id);
    }
    seen.sort();
    let mut want = vec![literal.id.clone(), named.id.clone()];
    want.sort();
    assert_eq!(seen, want);
    let history = local
        .sender
        .ledger
        .history(&TenantId::new("tnt_acme").unwrap(), &id)
        .await
        .expect("history");
    assert!(
        history
            .iter()
            .all(|a| a.error_class == Some(ErrorClass::Blocked)),
        "{history:?}"
    );
    // Give any stray retry a chance to show up before counting.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        listener.connections(),
        0,
        "no connection to a blocked address"
    );
}

fn client(policy: DestinationPolicy, lookup: Arc<dyn HostLookup>) -> DeliveryClient {
    DeliveryClient::new(ClientOptions {
        policy,
        lookup,
        ..ClientOptions::default()
    })
    .expect("client")
}

async fn attempt(client: &DeliveryClient, url: &str) -> tern_core::AttemptResult {
    client
        .attempt(AttemptRequest {
            url,
            body: Bytes::from_static(b"{}"),
            headers: &[],
            deadline: Duration::from_secs(5),
        })
        .await
        .result
}

fn is_blocked(r: &tern_core::AttemptResult) -> bool {
    matches!(
        r,
        tern_core::AttemptResult::Failed {
            class: ErrorClass::Blocked,
            ..
        }
    )
}

/// The guard at the attempt level, against counting listeners on loopback: a name whose
/// answer mixes an allowed and a denied address is refused whole; https-only refuses
/// `http://`; a denied literal is refused; only the allowed control connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_refuses_before_connecting() {
    let allowed = CountingListener::start(LOOPBACK).await.expect("listener");
    let denied = CountingListener::start(LOOPBACK_2)
        .await
        .expect("listener on 127.0.0.2");
    let lookup = table(&[
        ("mixed.test", &[LOOPBACK, LOOPBACK_2]),
        ("denied.test", &[LOOPBACK_2]),
        ("allowed.test", &[LOOPBACK]),
    ]);
    let allow_one = DestinationPolicy {
        https_only: false,
        allow: vec!["127.0.0.1/32".parse().expect("net")],
        nat64: false,
    };
    let c = client(allow_one.clone(), lookup.clone());
    let (pa, pd) = (allowed.addr.port(), denied.addr.port());

    // Mixed answer: refused whole, although its first address is allowed.
    assert!(is_blocked(
        &attempt(&c, &format!("http://mixed.test:{pa}/")).await
    ));
    assert!(is_blocked(
        &attempt(&c, &format!("http://denied.test:{pd}/")).await
    ));
    assert!(is_blocked(
        &attempt(&c, &format!("http://127.0.0.2:{pd}/")).await
    ));
    // IPv4-mapped spelling of an allowed address is still refused.
    assert!(is_blocked(
        &attempt(&c, &format!("http://[::ffff:127.0.0.1]:{pa}/")).await
    ));
    // https-only refuses http before any lookup or connection.
    let https_only = client(
        DestinationPolicy {
            https_only: true,
            ..allow_one.clone()
        },
        lookup.clone(),
    );
    assert!(is_blocked(
        &attempt(&https_only, &format!("http://127.0.0.1:{pa}/")).await
    ));
    assert!(is_blocked(
        &attempt(&https_only, &format!("http://allowed.test:{pa}/")).await
    ));
    assert_eq!(allowed.connections(), 0);
    assert_eq!(denied.connections(), 0);

    // Control: the listener does count an allowed connection.
    let r = attempt(&c, &format!("http://allowed.test:{pa}/")).await;
    assert!(!is_blocked(&r), "{r:?}");
    assert!(
        allowed.connections() >= 1,
        "the control connection was counted"
    );
    assert_eq!(denied.connections(), 0);
}

/// Every denied range, through the guard's decision alone (resolver + policy), for names
/// resolved by a fixed table and for IP literals. Nothing is connected to.
#[tokio::test]
async fn guard_decisions_for_every_denied_range() {
    let denied: &[(&str, &str)] = &[
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("10.0.0.1", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "metadata"),
        ("169.254.0.1", "link-local"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("100.127.255.254", "carrier-grade NAT"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("255.255.255.255", "broadcast"),
        ("::", "unspecified"),
        ("::1", "loopback"),
        ("fc00::1", "unique-local"),
        ("fdff:ffff::1", "unique-local"),
        ("fe80::1", "link-local"),
        ("febf::1", "link-local"),
        ("ff02::1", "multicast"),
        ("::ffff:169.254.169.254", "IPv4-mapped"),
        ("::ffff:8.8.8.8", "IPv4-mapped"),
        ("::a9fe:a9fe", "IPv4-compatible"),
        ("64:ff9b::a9fe:a9fe", "NAT64"),
        ("64:ff9b::808:808", "NAT64"),
        ("64:ff9b:1::1", "NAT64"),
    ];
    let allowed = [
        "8.8.8.8",
        "1.1.1.1",
        "172.32.0.1",
        "100.128.0.1",
        "192.169.0.1",
        "2606:4700:4700::1111",
        "2a00:1450::1",
    ];
    let policy = DestinationPolicy {
        https_only: true,
        allow: vec![],
        nat64: false,
    };
    for (addr, range) in denied {
        let ip: IpAddr = addr.parse().expect("ip");
        let lookup = StaticLookup {
            hosts: vec![("host.test".into(), vec![ip])],
        };
        let by_name =
            tern_http::check_endpoint_url("https://host.test/hook", &policy, &lookup).await;
        let literal = match ip {
            IpAddr::V4(v4) => format!("https://{v4}/hook"),
            IpAddr::V6(v6) => format!("https://[{v6}]/hook"),
        };
        let by_literal = tern_http::check_endpoint_url(&literal, &policy, &lookup).await;
        for result in [by_name, by_literal] {
            match result {
                Err(tern_http::EndpointCheckError::Blocked(
                    tern_http::BlockedError::DeniedAddress { range: r, .. },
                )) => {
                    assert!(r.contains(range), "{addr}: range {r:?}, expected {range:?}");
                }
                other => panic!("{addr} should be denied ({range}), got {other:?}"),
            }
        }
        // The resolver reqwest uses refuses the same answer.
        let resolver =
            tern_http::guard::GuardedResolver::new(Arc::new(lookup), Arc::new(policy.clone()));
        let name = "host.test".parse().expect("name");
        assert!(
            reqwest::dns::Resolve::resolve(&resolver, name)
                .await
                .is_err(),
            "{addr}"
        );
    }
    for addr in allowed {
        let ip: IpAddr = addr.parse().expect("ip");
        let lookup = StaticLookup {
            hosts: vec![("host.test".into(), vec![ip])],
        };
        let ok = tern_http::check_endpoint_url("https://host.test/hook", &policy, &lookup).await;
        assert_eq!(ok, Ok(vec![ip]), "{addr} should be allowed");
        // One denied address among good ones refuses the whole answer.
        let mixed = StaticLookup {
            hosts: vec![(
                "host.test".into(),
                vec![ip, "10.0.0.1".parse().expect("ip")],
            )],
        };
        assert!(
            tern_http::check_endpoint_url("https://host.test/hook", &policy, &mixed)
                .await
                .is_err()
        );
    }
}

// ---------------------------------------------------------------- poison

/// O1: five outbox items, the 3rd without its payload attribute. Items 1, 2, 4 and 5 are
/// delivered byte for byte; item 3 is in the relay's failure queue with its record; the
/// shard is not blocked (nothing reaches the Lambda-style OnFailure path).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o1_poison_record_goes_to_the_failure_queue_and_the_shard_moves_on() {
    let (local, mut rx) = deployment("o1", fast()).await;
    let receiver = Receiver::start().await.expect("receiver");
    add_endpoint(&local, "tnt_acme", &receiver.url("/o1"), &["*"], None).await;
    let payloads: Vec<String> = (1..=5)
        .map(|i| format!(r#"{{"item":{i},"n":1e{i}}}"#))
        .collect();
    publish(&local, "order.paid", "tnt_acme", &payloads[0]).await;
    publish(&local, "order.paid", "tnt_acme", &payloads[1]).await;
    let poison_id = format!("evt_o1poison{}", Utc::now().timestamp_millis());
    local
        .dynamodb()
        .put_item()
        .table_name(&local.resources.outbox_table)
        .item("event_id", AttributeValue::S(poison_id.clone()))
        .item("tern_record", AttributeValue::S("outbox_event".into()))
        .item("schema_version", AttributeValue::N("1".into()))
        .item("event_type", AttributeValue::S("order.paid".into()))
        .item("tenant_id", AttributeValue::S("tnt_acme".into()))
        .item("created_at", AttributeValue::S(Utc::now().to_rfc3339()))
        .item(
            "expires_at",
            AttributeValue::N((Utc::now().timestamp() + 3600).to_string()),
        )
        .send()
        .await
        .expect("raw put of the poison item");
    publish(&local, "order.paid", "tnt_acme", &payloads[3]).await;
    publish(&local, "order.paid", "tnt_acme", &payloads[4]).await;

    let got = receiver.wait_for("/o1", 4, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 4, "items 1, 2, 4, 5 delivered");
    let mut bodies: Vec<&[u8]> = got.iter().map(|r| &r.body[..]).collect();
    bodies.sort();
    let mut want: Vec<&[u8]> = [0, 1, 3, 4]
        .iter()
        .map(|&i| payloads[i].as_bytes())
        .collect();
    want.sort();
    assert_eq!(bodies, want);

    let failures = local.resources.relay_failure_queue_url.clone();
    assert!(
        eventually(Duration::from_secs(10), async || peek_queue(
            &local, &failures
        )
        .await
        .len()
            == 1)
        .await
    );
    let parked: Value =
        serde_json::from_str(&peek_queue(&local, &failures).await[0]).expect("JSON");
    assert!(
        parked["reason"].as_str().unwrap_or("").contains("payload"),
        "{parked}"
    );
    assert_eq!(
        parked["record"]["dynamodb"]["NewImage"]["event_id"]["S"],
        json!(poison_id)
    );
    assert_eq!(parked["record"]["eventName"], json!("INSERT"));
    assert!(parked["sequence_number"].is_string());
    // The record has everything needed to fix and re-write the item.
    for attr in [
        "tern_record",
        "schema_version",
        "event_type",
        "tenant_id",
        "created_at",
    ] {
        assert!(
            parked["record"]["dynamodb"]["NewImage"][attr].is_object(),
            "{attr} kept"
        );
    }
    // The stream poller never gave up on a batch.
    while let Ok(e) = rx.try_recv() {
        assert!(
            !matches!(e, tern_local::pollers::LocalEvent::RelayBatchFailed { .. }),
            "shard blocked: {e:?}"
        );
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        receiver.requests("/o1").len(),
        4,
        "no duplicates after the poison"
    );
}

/// An endpoint store that panics for one endpoint: the panic fails that message alone.
struct PanickingStore(tern_tests::fakes::MemEndpoints);

#[async_trait::async_trait]
impl EndpointStore for PanickingStore {
    async fn get(&self, tenant: &TenantId, id: &EndpointId) -> Result<Option<Endpoint>, PortError> {
        assert!(id.as_str() != "ep_panic", "endpoint store exploded");
        self.0.get(tenant, id).await
    }
    async fn list_for_tenant(&self, tenant: &TenantId) -> Result<Vec<Endpoint>, PortError> {
        self.0.list_for_tenant(tenant).await
    }
    async fn list_all(&self) -> Result<Vec<Endpoint>, PortError> {
        self.0.list_all().await
    }
    async fn put(&self, endpoint: &Endpoint) -> Result<(), PortError> {
        self.0.put(endpoint).await
    }
    async fn disable(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        reason: &str,
    ) -> Result<(), PortError> {
        self.0.disable(tenant, id, reason).await
    }
    async fn set_secrets(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        secrets: &[tern_core::endpoint::EndpointSecret],
    ) -> Result<(), PortError> {
        self.0.set_secrets(tenant, id, secrets).await
    }
}

#[tokio::test]
async fn a_panic_fails_only_its_own_message() {
    let dlq = Arc::new(tern_tests::fakes::MemQueue::default());
    let deps = tern_handlers::sender::SenderDeps {
        endpoints: Arc::new(PanickingStore(tern_tests::fakes::MemEndpoints::default())),
        ledger: Arc::new(tern_tests::fakes::MemLedger::default()),
        delivery_queue: Arc::new(tern_tests::fakes::MemQueue::default()),
        dlq: dlq.clone(),
        scheduler: None,
        client: client(DestinationPolicy::default(), table(&[])),
        policy: tern_handlers::config::SenderPolicy::default(),
        breaker: None,
    };
    let message = |ep: &str| {
        json!({"version":1,"delivery_id":format!("evt_p.{ep}"),"event":{"id":"evt_p","type":"a.b","tenant_id":"tnt_a",
            "created_at":"2026-01-01T00:00:00Z","payload":{"a":1}},"endpoint_id":ep,"attempt":1})
        .to_string()
    };
    let event: aws_lambda_events::sqs::SqsEvent = serde_json::from_value(json!({"Records": [
        {"messageId": "m1", "body": message("ep_gone1")},
        {"messageId": "m2", "body": message("ep_panic")},
        {"messageId": "m3", "body": "not a delivery message"},
    ]}))
    .expect("event");
    let (response, results) =
        tern_handlers::sender::handle(&deps, event, &Metrics::new("Tern", MetricsSink::Discard))
            .await;
    let failed: Vec<&str> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(failed, vec!["m2"]);
    assert!(
        results[1].1.as_ref().is_err_and(|e| e.contains("panic")),
        "{results:?}"
    );
    let reasons: Vec<String> = dlq
        .entries()
        .iter()
        .filter_map(|e| {
            e.attributes
                .iter()
                .find(|(k, _)| k == "tern-reason")
                .map(|(_, v)| v.clone())
        })
        .collect();
    assert_eq!(
        reasons,
        vec![
            "endpoint_deleted".to_owned(),
            "malformed_message".to_owned()
        ]
    );
}

// ---------------------------------------------------------------- payload bytes

/// O4 (U+0007 escaped), S3-style Unicode (raw and `\u`-escaped), and a payload of
/// exactly 256 KiB: each arrives byte-identical through DynamoDB, the stream and SQS,
/// and verifies with the reference verifier. One byte more is refused by the outbox
/// writer with a message that says how to send a reference URL instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_bytes_arrive_identical_and_verify() {
    let (local, _rx) = deployment("bytes", fast()).await;
    let receiver = Receiver::start().await.expect("receiver");
    let ep = add_endpoint(&local, "tnt_acme", &receiver.url("/bytes"), &["*"], None).await;
    let limit = tern_core::event::DEFAULT_MAX_PAYLOAD_BYTES;
    let filler = |total: usize| format!("{{\"a\":\"{}\"}}", "x".repeat(total - 8));
    let payloads = vec![
        r#"{"bell":"\u0007"}"#.to_owned(),
        String::from_utf8(hex::decode("7b226e616d65223a22c3a9f09f9880e280a8227d").expect("hex"))
            .expect("utf-8"),
        r#"{"name":"\u00e9\ud83d\ude00\u2028"}"#.to_owned(),
        filler(limit),
    ];
    assert_eq!(payloads[3].len(), limit);
    for p in &payloads {
        publish(&local, "order.paid", "tnt_acme", p).await;
    }
    let got = receiver
        .wait_for("/bytes", payloads.len(), Duration::from_secs(30))
        .await;
    assert_eq!(got.len(), payloads.len());
    for p in &payloads {
        let req = got
            .iter()
            .find(|r| r.body.len() == p.len() && &r.body[..] == p.as_bytes());
        let req =
            req.unwrap_or_else(|| panic!("payload {:.40}... did not arrive byte-identical", p));
        verify_reference(&ep.secrets[0].secret, req).expect("reference verifier accepts");
    }

    let too_big = tern_outbox::OutboxWriter::new("outbox").prepare(
        "order.paid",
        "tnt_acme",
        filler(limit + 1),
    );
    let err = too_big
        .expect_err("one byte over the limit is refused")
        .to_string();
    assert!(err.contains("262145") && err.contains("262144"), "{err}");
    assert!(err.contains("reference") && err.contains("url"), "{err}");
}

// ---------------------------------------------------------------- secrets

fn secret_forms(secret: &Secret) -> Vec<String> {
    let text = secret.expose().to_owned();
    let b64 = text.trim_start_matches("whsec_").to_owned();
    let key = base64::engine::general_purpose::STANDARD
        .decode(&b64)
        .expect("valid secret");
    vec![
        text,
        b64.clone(),
        // A prefix long enough to be unmistakable, in case a log cut the value short.
        b64[..16].to_owned(),
        hex::encode(&key),
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&key),
    ]
}

/// Captures every log line (all targets, TRACE) of a full run: publish, retry, deliver,
/// dead-letter, replay, a malformed message, and a secret rotation (during the overlap
/// both signatures are sent and each verifies; after it only the new one). No form of
/// any secret appears in the logs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_never_reach_the_logs_of_a_full_run() {
    let logs = capture_logs();
    let (local, _rx) = deployment("secrets", fast()).await;
    let receiver = Receiver::start().await.expect("receiver");
    receiver.set(
        "/flaky",
        Behavior::FailFirst {
            count: 1,
            status: 500,
        },
    );
    receiver.set("/down", Behavior::Always(Reply::status(503)));
    let flaky = add_endpoint(&local, "tnt_acme", &receiver.url("/flaky"), &["*"], None).await;
    let down = add_endpoint(&local, "tnt_acme", &receiver.url("/down"), &["*"], Some(2)).await;
    let mut secrets = vec![
        flaky.secrets[0].secret.clone(),
        down.secrets[0].secret.clone(),
    ];

    // Retry then deliver; exhaust then dead-letter.
    let first = publish(&local, "order.paid", "tnt_acme", r#"{"step":"first"}"#).await;
    assert_eq!(
        receiver
            .wait_for("/flaky", 2, Duration::from_secs(30))
            .await
            .len(),
        2
    );
    let dlq = local.resources.dlq_url.clone();
    assert!(
        eventually(Duration::from_secs(30), async || peek_queue(&local, &dlq)
            .await
            .len()
            == 1)
        .await
    );

    // A malformed message straight onto the delivery queue.
    local
        .sqs()
        .send_message()
        .queue_url(&local.resources.delivery_queue_url)
        .message_body("{\"version\":1,\"garbage\":true}")
        .send()
        .await
        .expect("send");
    assert!(
        eventually(Duration::from_secs(20), async || peek_queue(&local, &dlq)
            .await
            .len()
            == 2)
        .await
    );

    // Replay the exhausted delivery after fixing the receiver.
    receiver.set("/down", Behavior::Always(Reply::status(200)));
    let metrics = Metrics::new("Tern", MetricsSink::Discard);
    let replay = ReplayRequest {
        filters: ReplayFilters {
            endpoint_id: Some(down.id.clone()),
            ..ReplayFilters::default()
        },
        ..ReplayRequest::default()
    };
    let summary = tern_handlers::replay::handle(&local.replay, replay, &metrics)
        .await
        .expect("replay");
    assert_eq!(summary.replayed, 1);
    let down_got = receiver.wait_for("/down", 3, Duration::from_secs(20)).await;
    assert_eq!(down_got.last().map(|r| r.answered), Some(200));
    assert_eq!(
        down_got.last().and_then(|r| r.header("webhook-id")),
        Some(first.as_str())
    );

    // Rotate the flaky endpoint's secret with a 3 s overlap.
    let old = flaky.secrets[0].secret.clone();
    let new = Secret::generate();
    secrets.push(new.clone());
    let mut rotated = flaky.clone();
    rotated
        .rotate_secret(new.clone(), Utc::now(), chrono::Duration::seconds(3))
        .unwrap();
    local
        .sender
        .endpoints
        .put(&rotated)
        .await
        .expect("put rotated");
    publish(&local, "order.paid", "tnt_acme", r#"{"step":"overlap"}"#).await;
    let during = receiver
        .wait_for("/flaky", 3, Duration::from_secs(20))
        .await;
    let req = &during[2];
    assert_eq!(
        req.header("webhook-signature")
            .map(|s| s.split(' ').count()),
        Some(2),
        "both signatures during the overlap"
    );
    verify_reference(&old, req).expect("old secret still verifies");
    verify_reference(&new, req).expect("new secret verifies");
    for s in [&old, &new] {
        tern_receiver::Verifier::new(s.expose())
            .expect("secret")
            .verify_now(&req.headers, &req.body)
            .expect("tern-receiver verifies");
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    publish(&local, "order.paid", "tnt_acme", r#"{"step":"after"}"#).await;
    let after = receiver
        .wait_for("/flaky", 4, Duration::from_secs(20))
        .await;
    let req = &after[3];
    assert_eq!(
        req.header("webhook-signature")
            .map(|s| s.split(' ').count()),
        Some(1),
        "one signature after the overlap"
    );
    verify_reference(&new, req).expect("new secret verifies");
    assert!(
        verify_reference(&old, req).is_err(),
        "the expired secret no longer signs"
    );

    // Let the last attempt logs and ledger writes land, then search.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let text = logs.text();
    assert!(
        text.contains("dead-lettered") && text.contains("TRACE"),
        "the capture saw the run ({} bytes)",
        text.len()
    );
    for secret in &secrets {
        for form in secret_forms(secret) {
            // On failure, name the log lines (level and target) with the secret cut out.
            let lines: Vec<String> = text
                .lines()
                .filter(|l| l.contains(&form))
                .map(|l| l.replace(&form, "<SECRET>").chars().take(300).collect())
                .take(5)
                .collect();
            assert!(
                lines.is_empty(),
                "a secret appears in the logs:\n{}",
                lines.join("\n")
            );
        }
    }
}
