//! End to end on moto with loopback receivers: outbox -> stream -> relay -> queue ->
//! sender -> receiver, retries, the DLQ and the replay.

use std::time::Duration;

use tern_core::{DeliveryMessage, TenantId};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::replay::{ReplayFilters, ReplayRequest};
use tern_local::LocalOptions;
use tern_tests::*;

fn fast() -> LocalOptions {
    LocalOptions {
        // 60 s -> 1 s, 300 s -> 1 s: retries within seconds.
        time_scale: 0.001,
        ..LocalOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn happy_path_fans_out_to_two_endpoints_with_verifiable_signatures() {
    let (local, _rx) = deployment("happy", fast()).await;
    let receiver = Receiver::start().await.unwrap();
    let a = add_endpoint(
        &local,
        "tnt_acme",
        &receiver.url("/a"),
        &["order.paid"],
        None,
    )
    .await;
    let b = add_endpoint(&local, "tnt_acme", &receiver.url("/b"), &["*"], None).await;
    let other_type = add_endpoint(
        &local,
        "tnt_acme",
        &receiver.url("/c"),
        &["order.shipped"],
        None,
    )
    .await;
    let other_tenant = add_endpoint(&local, "tnt_other", &receiver.url("/d"), &["*"], None).await;

    // S2: the exact bytes, not re-ordered keys, not 100.0.
    let payload = r#"{"b":1,"a":2,"n":1e2}"#;
    let id = publish(&local, "order.paid", "tnt_acme", payload).await;

    let got_a = receiver.wait_for("/a", 1, Duration::from_secs(30)).await;
    let got_b = receiver.wait_for("/b", 1, Duration::from_secs(30)).await;
    assert_eq!(got_a.len(), 1);
    assert_eq!(got_b.len(), 1);
    for (req, ep) in [(&got_a[0], &a), (&got_b[0], &b)] {
        assert_eq!(&req.body[..], payload.as_bytes());
        assert_eq!(req.header("webhook-id"), Some(id.as_str()));
        assert_eq!(req.header("idempotency-key"), Some(id.as_str()));
        assert_eq!(req.header("content-type"), Some("application/json"));
        assert!(req.header("user-agent").unwrap().starts_with("Tern/"));
        verify_reference(&ep.secrets[0].secret, req).expect("reference verifier accepts");
        let body_sig = req.header("x-webhook-signature").unwrap();
        tern_receiver::Verifier::new(ep.secrets[0].secret.expose())
            .unwrap()
            .verify_body_signature(&req.headers, &req.body)
            .unwrap_or_else(|e| panic!("x-webhook-signature {body_sig} does not verify: {e}"));
    }
    // Nothing for the other type or tenant, and no second POST.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(receiver.requests("/c").is_empty(), "{other_type:?}");
    assert!(receiver.requests("/d").is_empty(), "{other_tenant:?}");
    assert_eq!(receiver.requests("/a").len(), 1);
    let history = local
        .sender
        .ledger
        .history(&TenantId::new("tnt_acme").unwrap(), &id)
        .await
        .unwrap();
    assert_eq!(history.len(), 2);
    assert!(
        history
            .iter()
            .all(|r| r.outcome == "delivered" && r.status == Some(200))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_then_succeeds_with_the_same_webhook_id() {
    let (local, _rx) = deployment("retry", fast()).await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set(
        "/flaky",
        Behavior::FailFirst {
            count: 2,
            status: 500,
        },
    );
    let ep = add_endpoint(&local, "tnt_acme", &receiver.url("/flaky"), &["*"], None).await;
    let id = publish(&local, "order.paid", "tnt_acme", r#"{"x":1}"#).await;

    let got = receiver
        .wait_for("/flaky", 3, Duration::from_secs(40))
        .await;
    assert_eq!(
        got.iter().map(|r| r.answered).collect::<Vec<_>>(),
        vec![500, 500, 200]
    );
    for r in &got {
        assert_eq!(r.header("webhook-id"), Some(id.as_str()));
        verify_reference(&ep.secrets[0].secret, r).expect("each attempt verifies");
    }
    // Retries waited (scaled) instead of hammering: each gap is at least 1 s.
    for w in got.windows(2) {
        assert!(
            w[1].at - w[0].at >= chrono::Duration::milliseconds(900),
            "{:?}",
            (w[0].at, w[1].at)
        );
    }
    assert!(history_reaches(&local, "tnt_acme", &id, 3, Duration::from_secs(10)).await);
    let history = local
        .sender
        .ledger
        .history(&TenantId::new("tnt_acme").unwrap(), &id)
        .await
        .unwrap();
    assert_eq!(
        history.iter().map(|r| r.attempt).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert_eq!(history[0].outcome, "retry");
    assert_eq!(history[2].outcome, "delivered");
    assert!(history[0].next_wait_seconds.unwrap() >= 60);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_goes_to_the_dlq_and_replay_delivers_it() {
    let (local, _rx) = deployment("exhaust", fast()).await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set("/down", Behavior::Always(Reply::status(503)));
    let ep = add_endpoint(&local, "tnt_acme", &receiver.url("/down"), &["*"], Some(3)).await;
    let id = publish(&local, "order.paid", "tnt_acme", r#"{"x":2}"#).await;

    let dlq = local.resources.dlq_url.clone();
    assert!(
        eventually(Duration::from_secs(40), async || peek_queue(&local, &dlq)
            .await
            .len()
            == 1)
        .await,
        "dead-lettered"
    );
    assert_eq!(
        receiver.requests("/down").len(),
        3,
        "exactly the attempt budget"
    );
    let dead = DeliveryMessage::parse(&peek_queue(&local, &dlq).await[0]).unwrap();
    let record = dead.dead_letter.clone().unwrap();
    assert_eq!(record.reason.as_str(), "exhausted");
    assert_eq!(record.attempts, 3);
    assert_eq!(record.last_status, Some(503));

    // Dry run changes nothing.
    let metrics = Metrics::new("Tern", MetricsSink::Discard);
    let dry = ReplayRequest {
        dry_run: true,
        ..ReplayRequest::default()
    };
    let summary = tern_handlers::replay::handle(&local.replay, dry, &metrics)
        .await
        .unwrap();
    assert_eq!((summary.matched, summary.replayed), (1, 0));
    assert_eq!(peek_queue(&local, &dlq).await.len(), 1);

    // A filter that matches nothing leaves it.
    let other = ReplayRequest {
        filters: ReplayFilters {
            reason: Some(tern_core::DeadLetterReason::Gone),
            ..ReplayFilters::default()
        },
        ..ReplayRequest::default()
    };
    let summary = tern_handlers::replay::handle(&local.replay, other, &metrics)
        .await
        .unwrap();
    assert_eq!(
        (summary.examined, summary.skipped, summary.replayed),
        (1, 1, 0)
    );

    // Fix the receiver, replay: delivered with the same webhook-id and a fresh budget.
    receiver.set("/down", Behavior::Always(Reply::status(200)));
    let fix = ReplayRequest {
        filters: ReplayFilters {
            endpoint_id: Some(ep.id.clone()),
            ..ReplayFilters::default()
        },
        ..ReplayRequest::default()
    };
    let summary = tern_handlers::replay::handle(&local.replay, fix, &metrics)
        .await
        .unwrap();
    assert_eq!(summary.replayed, 1);
    let got = receiver.wait_for("/down", 4, Duration::from_secs(20)).await;
    assert_eq!(got.len(), 4);
    assert_eq!(got[3].answered, 200);
    assert_eq!(got[3].header("webhook-id"), Some(id.as_str()));
    verify_reference(&ep.secrets[0].secret, &got[3]).unwrap();
    assert!(peek_queue(&local, &dlq).await.is_empty());
    assert!(
        eventually(Duration::from_secs(10), async || {
            let h = local
                .sender
                .ledger
                .history(&TenantId::new("tnt_acme").unwrap(), &id)
                .await
                .unwrap();
            h.last()
                .is_some_and(|r| r.replay_count == 1 && r.attempt == 1 && r.outcome == "delivered")
        })
        .await
    );
}

/// S3: the Unicode payload (é, an emoji, U+2028) and its \u-escaped twin each arrive
/// byte-identical after DynamoDB and SQS, and verify.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_unicode_payloads_arrive_byte_identical() {
    let (local, _rx) = deployment("unicode", fast()).await;
    let receiver = Receiver::start().await.unwrap();
    let ep = add_endpoint(&local, "tnt_acme", &receiver.url("/u"), &["*"], None).await;
    let raw = String::from_utf8(hex::decode("7b226e616d65223a22c3a9f09f9880e280a8227d").unwrap())
        .unwrap();
    let escaped = r#"{"name":"\u00e9\ud83d\ude00\u2028"}"#.to_owned();
    let a = publish(&local, "user.renamed", "tnt_acme", &raw).await;
    let b = publish(&local, "user.renamed", "tnt_acme", &escaped).await;
    let got = receiver.wait_for("/u", 2, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 2);
    for (id, text) in [(a, &raw), (b, &escaped)] {
        let req = got
            .iter()
            .find(|r| r.header("webhook-id") == Some(id.as_str()))
            .expect("delivered");
        assert_eq!(&req.body[..], text.as_bytes());
        verify_reference(&ep.secrets[0].secret, req).expect("verifies");
    }
}

/// The fields of a `standard_webhooks` body, read as a receiver reads them; `data` kept as
/// the exact text it holds.
#[derive(serde::Deserialize)]
struct Envelope<'a> {
    #[serde(rename = "type")]
    event_type: &'a str,
    timestamp: &'a str,
    #[serde(borrow)]
    data: &'a serde_json::value::RawValue,
}

/// The `standard_webhooks` body for `event`, as the receiver guide documents it (built
/// here from the spec's fields, independently of the sender's code).
fn documented_envelope(event: &tern_core::Event) -> String {
    format!(
        r#"{{"type":"{}","timestamp":"{}","data":{}}}"#,
        event.event_type,
        event
            .created_at
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        event.payload.as_str()
    )
}

/// S2 for both payload formats: the application's bytes (odd spacing, key order, number
/// spelling, escapes, non-ASCII) arrive as the raw body, and byte for byte inside `data` of
/// the Standard Webhooks envelope; both verify with the reference `standardwebhooks` crate
/// over the bytes received, and both name the event type in `webhook-event-type`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_payload_formats_carry_the_payload_bytes_and_the_event_type() {
    let (local, _rx) = deployment("formats", fast()).await;
    let receiver = Receiver::start().await.unwrap();
    let raw = add_endpoint(&local, "tnt_fmt", &receiver.url("/raw"), &["*"], None).await;
    let wrapped = add_endpoint(&local, "tnt_fmt", &receiver.url("/std"), &["*"], None).await;
    set_payload_format(&local, &wrapped, tern_core::PayloadFormat::StandardWebhooks).await;

    let payload = r#"{"b": 1,"a" :2,  "n":1e2,"s":"\u00e9\"\\/","u":"é😀\u2028","z":[1, 2.50,-0]}"#;
    let event = publish_event(&local, "invoice.paid", "tnt_fmt", payload).await;
    let got_raw = receiver.wait_for("/raw", 1, Duration::from_secs(30)).await;
    let got_std = receiver.wait_for("/std", 1, Duration::from_secs(30)).await;
    assert_eq!((got_raw.len(), got_std.len()), (1, 1));

    assert_eq!(&got_raw[0].body[..], payload.as_bytes());
    let expected = documented_envelope(&event);
    assert!(expected.contains(payload));
    assert_eq!(String::from_utf8_lossy(&got_std[0].body), expected);
    let envelope: Envelope<'_> = serde_json::from_slice(&got_std[0].body).expect("JSON");
    assert_eq!(envelope.event_type, "invoice.paid");
    assert_eq!(envelope.data.get(), payload, "data is the payload's text");
    let created = chrono::DateTime::parse_from_rfc3339(envelope.timestamp).expect("RFC 3339");
    assert_eq!(
        created.timestamp_millis(),
        event.created_at.timestamp_millis(),
        "the event's creation time, not the attempt's"
    );

    for (req, ep) in [(&got_raw[0], &raw), (&got_std[0], &wrapped)] {
        assert_eq!(req.header("webhook-event-type"), Some("invoice.paid"));
        assert_eq!(req.header("webhook-id"), Some(event.id.as_str()));
        verify_reference(&ep.secrets[0].secret, req).expect("reference verifier accepts");
        tern_receiver::Verifier::new(ep.secrets[0].secret.expose())
            .unwrap()
            .verify_body_signature(&req.headers, &req.body)
            .expect("x-webhook-signature covers the bytes sent");
    }
}

/// A payload at the 256 KiB limit fanned out to five endpoints: one SendMessageBatch of
/// five such messages would exceed SQS's 1 MiB batch limit, so the relay splits by size
/// and every endpoint gets the exact bytes. Two of them take the `standard_webhooks`
/// format: the queue still carries the raw payload, and the envelope adds its few bytes
/// on the way out only (256 KiB + 68 bytes for `blob.ready`), verified like the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_at_the_limit_reaches_five_endpoints() {
    let (local, _rx) = deployment("bigfan", fast()).await;
    let receiver = Receiver::start().await.unwrap();
    let wrapped = |i: usize| i >= 3;
    let mut endpoints = Vec::new();
    for i in 0..5 {
        let ep = add_endpoint(
            &local,
            "tnt_big",
            &receiver.url(&format!("/e{i}")),
            &["*"],
            None,
        )
        .await;
        if wrapped(i) {
            set_payload_format(&local, &ep, tern_core::PayloadFormat::StandardWebhooks).await;
        }
        endpoints.push(ep);
    }
    let filler = "x".repeat(tern_core::event::DEFAULT_MAX_PAYLOAD_BYTES - r#"{"data":""}"#.len());
    let payload = format!(r#"{{"data":"{filler}"}}"#);
    assert_eq!(payload.len(), tern_core::event::DEFAULT_MAX_PAYLOAD_BYTES);
    let event = publish_event(&local, "blob.ready", "tnt_big", &payload).await;
    for (i, ep) in endpoints.iter().enumerate() {
        let got = receiver
            .wait_for(&format!("/e{i}"), 1, Duration::from_secs(30))
            .await;
        assert_eq!(got.len(), 1, "endpoint {i}");
        assert_eq!(got[0].header("webhook-id"), Some(event.id.as_str()));
        assert_eq!(got[0].header("webhook-event-type"), Some("blob.ready"));
        if wrapped(i) {
            let expected = documented_envelope(&event);
            assert_eq!(expected.len(), payload.len() + 68);
            assert!(
                expected.len() <= payload.len() + tern_core::request::MAX_ENVELOPE_OVERHEAD_BYTES
            );
            assert!(
                got[0].body[..] == *expected.as_bytes(),
                "endpoint {i}: envelope bytes"
            );
        } else {
            assert!(
                got[0].body[..] == *payload.as_bytes(),
                "endpoint {i}: payload bytes"
            );
        }
        verify_reference(&ep.secrets[0].secret, &got[0]).unwrap();
    }
    assert!(
        peek_queue(&local, &local.resources.relay_failure_queue_url)
            .await
            .is_empty()
    );
}

/// A wait over 900 s for a message too large for a Step Functions execution input
/// (256 KiB) is carried by chained queue delays instead: the retry still happens, no
/// sooner than its scaled wait, and no execution is started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_wait_for_a_large_message_uses_chained_queue_delays() {
    let options = LocalOptions {
        time_scale: 0.002, // 1200 s -> 3 s real
        ..LocalOptions::default()
    };
    let (local, _rx) = deployment("chain", options).await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set(
        "/big",
        Behavior::FailFirst {
            count: 1,
            status: 500,
        },
    );
    let ep = add_endpoint_with(
        &local,
        tern_core::EndpointId::generate(),
        "tnt_chain",
        &receiver.url("/big"),
        &["*"],
        None,
        Some(tern_core::RetrySchedule::new(vec![1200]).unwrap()),
    )
    .await;
    let filler = "y".repeat(tern_core::event::DEFAULT_MAX_PAYLOAD_BYTES - r#"{"data":""}"#.len());
    let id = publish(
        &local,
        "blob.ready",
        "tnt_chain",
        &format!(r#"{{"data":"{filler}"}}"#),
    )
    .await;
    let got = receiver.wait_for("/big", 2, Duration::from_secs(40)).await;
    assert_eq!(
        got.iter().map(|r| r.answered).collect::<Vec<_>>(),
        vec![500, 200]
    );
    assert!(
        got[1].at - got[0].at >= chrono::Duration::milliseconds(2400),
        "{:?}",
        got[1].at - got[0].at
    );
    verify_reference(&ep.secrets[0].secret, &got[1]).unwrap();
    assert_eq!(got[1].header("webhook-id"), Some(id.as_str()));
    let executions = aws_sdk_sfn::Client::new(&local.aws)
        .list_executions()
        .state_machine_arn(&local.resources.state_machine_arn)
        .send()
        .await
        .unwrap();
    assert!(
        executions.executions().is_empty(),
        "no Step Functions execution for a message too large for one"
    );
}

/// The outbox writer's put is conditional: writing an event id that exists fails the
/// whole transaction (the business write too), and the caller can tell why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_put_of_the_same_event_id_fails_cleanly() {
    use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
    let local = deployment_without_pollers("dupid", LocalOptions::default()).await;
    let writer = tern_outbox::OutboxWriter::new(&local.resources.outbox_table);
    let id = tern_core::EventId::new("evt_order_42_paid").unwrap();
    let write = |marker: &'static str| {
        let event = writer
            .prepare_with_id(id.clone(), "order.paid", "tnt_acme", r#"{"order":42}"#)
            .unwrap();
        let business = Put::builder()
            .table_name(&local.resources.outbox_table)
            .item("event_id", AttributeValue::S(format!("order#42#{marker}")))
            .build()
            .unwrap();
        local
            .dynamodb()
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(business).build())
            .transact_items(event.transact_item().unwrap())
            .send()
    };
    write("first").await.expect("the first write commits");
    let err = write("second")
        .await
        .expect_err("the same event id is refused");
    assert!(tern_outbox::failed_condition_at(&err, 1), "{err:?}");
    assert!(!tern_outbox::failed_condition_at(&err, 0));
    // The business write of the failed transaction did not happen either.
    let second = local
        .dynamodb()
        .get_item()
        .table_name(&local.resources.outbox_table)
        .key("event_id", AttributeValue::S("order#42#second".into()))
        .send()
        .await
        .unwrap();
    assert!(second.item.is_none());
}
