//! Issue 11, items 4 and 6, end to end on moto: everything Tern writes to SQS is SQS-clean
//! (a receiver's `Location` ending in U+FFFF), and a replay does not stop at a first empty
//! answer while the DLQ holds messages.

use std::time::Duration;

use tern_core::ports::{MessageQueue, QueueEntry};
use tern_core::{DeadLetter, DeadLetterReason, DeliveryMessage, EndpointId, Event, sqs_text};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::replay::ReplayRequest;
use tern_local::LocalOptions;
use tern_local::pollers::LocalEvent;
use tern_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A receiver on 127.0.0.1 that answers every request `302` with a `Location` header whose
/// value ends in the UTF-8 bytes of U+FFFF (raw bytes: HTTP libraries would refuse to send
/// them). Returns its URL.
async fn redirect_to_u_ffff() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let mut seen = Vec::new();
                loop {
                    let Ok(n) = stream.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    if seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                let mut answer =
                    b"HTTP/1.1 302 Found\r\nlocation: https://example.com/next".to_vec();
                answer.extend_from_slice("\u{FFFF}".as_bytes());
                answer.extend_from_slice(b"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                let _ = stream.write_all(&answer).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    format!("http://127.0.0.1:{port}/hook")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_location_ending_in_u_ffff_retries_and_dead_letters_with_no_batch_failure() {
    let options = LocalOptions {
        time_scale: 0.001,
        ..LocalOptions::default()
    };
    let (local, mut rx) = deployment("u-ffff", options).await;
    let url = redirect_to_u_ffff().await;
    let tenant = "tnt_ffff";
    let endpoint = add_endpoint(&local, tenant, &url, &["*"], Some(3)).await;
    let id = publish(&local, "order.paid", tenant, r#"{"n":1}"#).await;

    let mut failures = Vec::new();
    let dead = loop {
        let dead = dead_letters(&local).await;
        if !dead.is_empty() {
            break dead;
        }
        match tokio::time::timeout(Duration::from_secs(60), rx.recv()).await {
            Ok(Some(LocalEvent::Sent(results))) => {
                failures.extend(results.into_iter().filter_map(|(_, r)| r.err()));
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => panic!("not dead-lettered; batch failures so far: {failures:?}"),
        }
    };
    // Drain what the pollers reported meanwhile.
    while let Ok(event) = rx.try_recv() {
        if let LocalEvent::Sent(results) = event {
            failures.extend(results.into_iter().filter_map(|(_, r)| r.err()));
        }
    }
    assert!(failures.is_empty(), "batch failures: {failures:?}");

    let h = attempts_of(&local, &id, &endpoint).await;
    let outcomes: Vec<&str> = h.iter().map(|r| r.outcome.as_str()).collect();
    assert_eq!(
        outcomes,
        ["retry", "retry", "dead_letter:exhausted"],
        "{h:#?}"
    );
    for r in &h {
        let location = r.location.as_deref().unwrap_or_default();
        assert_eq!(location, "https://example.com/next\u{FFFD}", "{r:#?}");
    }

    assert_eq!(dead.len(), 1);
    let record = dead[0].dead_letter.clone().expect("dead-letter record");
    assert_eq!(record.reason, DeadLetterReason::Exhausted);
    assert_eq!(record.last_status, Some(302));
    let last_error = record.last_error.unwrap_or_default();
    assert!(
        last_error.contains("https://example.com/next\u{FFFD}"),
        "{last_error}"
    );
    // What SQS holds is SQS-clean, body and attributes.
    for body in peek_queue(&local, &local.resources.dlq_url).await {
        assert!(sqs_text::is_clean(&body), "{body:?}");
    }
}

fn dead_message(n: usize) -> DeliveryMessage {
    let event: Event = serde_json::from_value(serde_json::json!({
        "id": format!("evt_longpoll_{n}"),
        "type": "order.paid",
        "tenant_id": "tnt_longpoll",
        "created_at": "2026-11-30T00:00:00Z",
        "payload": {"n": n},
    }))
    .expect("event");
    DeliveryMessage::first(event, EndpointId::new("ep_longpoll").unwrap()).dead_lettered(
        DeadLetter {
            reason: DeadLetterReason::Exhausted,
            last_status: Some(500),
            last_error: Some("http status 500".into()),
            attempts: 6,
            at: chrono::Utc::now(),
        },
    )
}

#[tokio::test]
async fn replay_does_not_stop_at_a_first_empty_answer() {
    let local = deployment_without_pollers("longpoll", LocalOptions::default()).await;
    let dlq = tern_aws::SqsQueue::new(
        aws_sdk_sqs::Client::new(&local.aws),
        &local.resources.dlq_url,
    );
    // Three messages the DLQ holds but does not show yet: the first receive is empty, as a
    // short poll of a real queue can be while messages exist.
    for n in 0..3 {
        dlq.send(&QueueEntry {
            id: format!("d{n}"),
            body: dead_message(n).to_body(),
            delay_seconds: 1,
            attributes: vec![],
            group_id: None,
        })
        .await
        .expect("send to DLQ");
    }
    let metrics = Metrics::new("Tern", MetricsSink::Discard);
    let summary = tern_handlers::replay::handle(&local.replay, ReplayRequest::default(), &metrics)
        .await
        .expect("replay");
    assert_eq!(summary.replayed, 3, "{summary:?}");
    assert_eq!(
        summary.stopped,
        Some(tern_core::drain::DrainStop::QueueEmpty)
    );
    let delivered = peek_queue(&local, &local.resources.delivery_queue_url).await;
    assert_eq!(delivered.len(), 3, "{delivered:?}");
}
