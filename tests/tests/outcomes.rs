//! What one attempt's answer means (DESIGN.md §5), end to end on moto with loopback
//! receivers: cases H2 (classification), H3 (redirects), H4 (huge answers), 410 Gone, and
//! the transport error classes (dns, connect, tls, timeout, protocol). Host names resolve
//! through a fixed test table only: no test queries the system's DNS or leaves 127.0.0.1.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tern_core::{DeadLetterReason, TenantId, outcome::ErrorClass};
use tern_local::LocalOptions;
use tern_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn fast() -> LocalOptions {
    LocalOptions {
        // 60 s -> 1 s, 300 s -> 1 s: a 3-attempt budget plays out in about 3 s.
        time_scale: 0.001,
        ..LocalOptions::default()
    }
}

/// Reads one HTTP/1.1 request (head and `content-length` body) so the client is done
/// sending before the test server answers.
async fn read_request(stream: &mut TcpStream) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut have = buf.len() - head_end;
    while have < length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        have += n;
    }
    Ok(())
}

/// A raw TCP server on 127.0.0.1 running `serve` for each connection. Returns its port.
async fn raw_server<F, Fut>(serve: F) -> u16
where
    F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let serve = Arc::new(serve);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream));
        }
    });
    port
}

/// Answers `status` with a `content-length` body of `len` bytes of `a`, streamed in
/// 64 KiB writes; counts the bytes the client let it write before hanging up.
async fn big_body_server(status: u16, len: u64, written: Arc<AtomicU64>) -> u16 {
    raw_server(move |mut s| {
        let written = written.clone();
        async move {
            if read_request(&mut s).await.is_err() {
                return;
            }
            let head = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: text/plain\r\ncontent-length: {len}\r\n\r\n"
            );
            if s.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let block = vec![b'a'; 64 * 1024];
            let mut left = len;
            while left > 0 {
                let n = usize::try_from(left.min(block.len() as u64)).unwrap();
                if s.write_all(&block[..n]).await.is_err() {
                    return;
                }
                written.fetch_add(n as u64, Ordering::Relaxed);
                left -= n as u64;
            }
        }
    })
    .await
}

/// The process's resident and peak resident memory, in KiB (Linux `/proc/self/status`).
fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_each_outcome_is_classified_and_failures_dead_letter_once_after_three_attempts() {
    let (local, _rx, handoffs) = deployment_recording("h2", fast()).await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set("/forbidden", Behavior::Always(Reply::status(403)));
    receiver.set("/empty", Behavior::Always(Reply::status(200)));
    receiver.set("/nocontent", Behavior::Always(Reply::status(204)));
    // A port that refuses: bound, then closed.
    let refused_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();

    let tenant = "tnt_h2";
    let forbidden =
        add_endpoint(&local, tenant, &receiver.url("/forbidden"), &["*"], Some(3)).await;
    // Not in the test host table: fails to resolve without touching real DNS.
    let unresolved = add_endpoint(
        &local,
        tenant,
        "http://no-such-host.tern.test:8080/hook",
        &["*"],
        Some(3),
    )
    .await;
    let refused = add_endpoint(
        &local,
        tenant,
        &format!("http://127.0.0.1:{refused_port}/hook"),
        &["*"],
        Some(3),
    )
    .await;
    let empty = add_endpoint(&local, tenant, &receiver.url("/empty"), &["*"], Some(3)).await;
    let nocontent =
        add_endpoint(&local, tenant, &receiver.url("/nocontent"), &["*"], Some(3)).await;
    let id = publish(&local, "order.paid", tenant, r#"{"h":2}"#).await;

    assert!(
        eventually(Duration::from_secs(60), async || dead_letters(&local)
            .await
            .len()
            >= 3)
        .await,
        "three dead letters"
    );
    // Exactly once: nothing else arrives after a few more (scaled) slots.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let dead = dead_letters(&local).await;
    assert_eq!(dead.len(), 3, "{dead:#?}");

    assert_eq!(receiver.requests("/forbidden").len(), 3);
    assert_eq!(receiver.requests("/empty").len(), 1);
    assert_eq!(receiver.requests("/nocontent").len(), 1);

    for (ep, status, class) in [
        (&forbidden, Some(403), None),
        (&unresolved, None, Some(ErrorClass::Dns)),
        (&refused, None, Some(ErrorClass::Connect)),
    ] {
        let h = attempts_of(&local, &id, ep).await;
        assert_eq!(
            h.iter().map(|r| r.attempt).collect::<Vec<_>>(),
            vec![1, 2, 3],
            "{h:#?}"
        );
        for r in &h {
            assert_eq!(r.status, status, "{r:#?}");
            assert_eq!(r.error_class, class, "{r:#?}");
            assert!(r.error.is_some(), "{r:#?}");
        }
        assert_eq!(h[0].outcome, "retry");
        assert_eq!(h[1].outcome, "retry");
        assert_eq!(h[2].outcome, "dead_letter:exhausted");
        assert!(h.windows(2).all(|w| w[0].started_at < w[1].started_at));
        let d = dead
            .iter()
            .find(|d| d.endpoint_id == ep.id)
            .expect("in the DLQ");
        let record = d.dead_letter.as_ref().unwrap();
        assert_eq!(record.reason, DeadLetterReason::Exhausted);
        assert_eq!(record.attempts, 3);
        assert_eq!(record.last_status, status);
        if let Some(class) = class {
            let last = record.last_error.as_deref().unwrap_or("");
            assert!(last.starts_with(&format!("{class}:")), "{last}");
        }
    }
    for (ep, status) in [(&empty, 200), (&nocontent, 204)] {
        let h = attempts_of(&local, &id, ep).await;
        assert_eq!(h.len(), 1, "{h:#?}");
        assert_eq!(
            (h[0].attempt, h[0].status, h[0].outcome.as_str()),
            (1, Some(status), "delivered")
        );
        assert_eq!(h[0].response_excerpt, None);
        assert!(!h[0].excerpt_truncated);
    }
    assert_queue_delays_in_range(&handoffs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transport_errors_are_distinct_retryable_classes() {
    let (local, _rx, handoffs) = deployment_recording("transport", fast()).await;
    // TLS: an https URL whose server speaks plain HTTP, so the handshake fails.
    let tls_port = raw_server(|mut s| async move {
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf).await;
        let _ = s
            .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            .await;
    })
    .await;
    // Timeout: accepts, reads, never answers.
    let silent_port = raw_server(|mut s| async move {
        let _ = read_request(&mut s).await;
        tokio::time::sleep(Duration::from_secs(120)).await;
    })
    .await;
    // Protocol: answers something that is not HTTP.
    let garbage_port = raw_server(|mut s| async move {
        let _ = read_request(&mut s).await;
        let _ = s.write_all(b"hello, this is not http\r\n\r\n").await;
    })
    .await;

    let tenant = "tnt_transport";
    let tls = add_endpoint(
        &local,
        tenant,
        &format!("https://127.0.0.1:{tls_port}/hook"),
        &["*"],
        Some(2),
    )
    .await;
    let silent = add_endpoint_with_timeout(
        &local,
        tenant,
        &format!("http://127.0.0.1:{silent_port}/hook"),
        Some(2),
        1_000,
    )
    .await;
    let garbage = add_endpoint(
        &local,
        tenant,
        &format!("http://127.0.0.1:{garbage_port}/hook"),
        &["*"],
        Some(2),
    )
    .await;
    let id = publish(&local, "order.paid", tenant, r#"{"t":1}"#).await;

    assert!(
        eventually(Duration::from_secs(60), async || dead_letters(&local)
            .await
            .len()
            >= 3)
        .await,
        "three dead letters"
    );
    for (ep, class) in [
        (&tls, ErrorClass::Tls),
        (&silent, ErrorClass::Timeout),
        (&garbage, ErrorClass::Protocol),
    ] {
        let h = attempts_of(&local, &id, ep).await;
        assert_eq!(h.len(), 2, "{h:#?}");
        for r in &h {
            assert_eq!((r.status, r.error_class), (None, Some(class)), "{r:#?}");
        }
        // Retryable: the first failure was retried on the schedule.
        assert_eq!(h[0].outcome, "retry");
        assert!(h[0].next_wait_seconds.unwrap() >= 60);
        assert_eq!(h[1].outcome, "dead_letter:exhausted");
    }
    // The per-endpoint deadline ends a silent attempt: at 1 s, not at the 15 s default.
    for r in attempts_of(&local, &id, &silent).await {
        assert!(
            r.latency_ms >= 1_000 && r.latency_ms < 5_000,
            "latency {} ms",
            r.latency_ms
        );
    }
    assert_queue_delays_in_range(&handoffs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h3_redirects_are_failed_attempts_that_record_the_location_and_are_never_followed() {
    let (local, _rx, handoffs) = deployment_recording("h3", fast()).await;
    let receiver = Receiver::start().await.unwrap();
    let admin = receiver.url("/admin");
    receiver.set(
        "/hook",
        Behavior::Always(Reply::status(302).header("location", "/ok")),
    );
    receiver.set(
        "/hook2",
        Behavior::Always(Reply::status(307).header("location", &admin)),
    );
    receiver.set("/ok", Behavior::Always(Reply::status(200)));
    receiver.set("/admin", Behavior::Always(Reply::status(200)));

    let tenant = "tnt_h3";
    let relative = add_endpoint(&local, tenant, &receiver.url("/hook"), &["*"], Some(2)).await;
    let absolute = add_endpoint(&local, tenant, &receiver.url("/hook2"), &["*"], Some(2)).await;
    let id = publish(&local, "order.paid", tenant, r#"{"r":3}"#).await;

    assert!(
        eventually(Duration::from_secs(40), async || dead_letters(&local)
            .await
            .len()
            >= 2)
        .await,
        "both dead-lettered"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        receiver.requests("/ok").is_empty(),
        "redirect target was requested"
    );
    assert!(
        receiver.requests("/admin").is_empty(),
        "redirect target was requested"
    );
    assert_eq!(receiver.requests("/hook").len(), 2);
    assert_eq!(receiver.requests("/hook2").len(), 2);

    for (ep, status, location) in [
        (&relative, 302, "/ok".to_owned()),
        (&absolute, 307, admin.clone()),
    ] {
        let h = attempts_of(&local, &id, ep).await;
        assert_eq!(h.len(), 2, "{h:#?}");
        for r in &h {
            assert_eq!(r.status, Some(status));
            assert_eq!(r.error_class, None);
            assert_eq!(r.location.as_deref(), Some(location.as_str()), "{r:#?}");
            assert!(r.error.as_deref().unwrap().contains(&location), "{r:#?}");
        }
        assert_eq!(h[0].outcome, "retry");
        assert_eq!(h[1].outcome, "dead_letter:exhausted");
        let dead = dead_letters(&local).await;
        let d = dead
            .iter()
            .find(|d| d.endpoint_id == ep.id)
            .unwrap()
            .dead_letter
            .clone()
            .unwrap();
        assert_eq!(d.last_status, Some(status));
        assert!(d.last_error.unwrap().contains(&location));
    }
    assert_queue_delays_in_range(&handoffs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h4_huge_and_endless_answers_keep_a_short_truncated_excerpt_and_end_by_the_deadline() {
    let (local, _rx, handoffs) = deployment_recording("h4", fast()).await;
    const FIFTY_MB: u64 = 50 * 1024 * 1024;
    let written_50 = Arc::new(AtomicU64::new(0));
    let written_2 = Arc::new(AtomicU64::new(0));
    let port_50 = big_body_server(200, FIFTY_MB, written_50.clone()).await;
    let port_2 = big_body_server(500, 2 * 1024 * 1024, written_2.clone()).await;
    // A chunked body that never ends: 16 bytes every 200 ms, forever.
    let endless_port = raw_server(|mut s| async move {
        if read_request(&mut s).await.is_err() {
            return;
        }
        if s.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            .await
            .is_err()
        {
            return;
        }
        loop {
            if s.write_all(b"10\r\nstill going....\n\r\n").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;

    let (rss_before, _) = rss_kib();
    let tenant = "tnt_h4";
    // Short per-endpoint deadlines (1 s, the minimum) and a 1-attempt budget.
    let big = add_endpoint_with_timeout(
        &local,
        tenant,
        &format!("http://127.0.0.1:{port_50}/big"),
        Some(1),
        1_000,
    )
    .await;
    let err = add_endpoint_with_timeout(
        &local,
        tenant,
        &format!("http://127.0.0.1:{port_2}/err"),
        Some(1),
        1_000,
    )
    .await;
    let endless = add_endpoint_with_timeout(
        &local,
        tenant,
        &format!("http://127.0.0.1:{endless_port}/endless"),
        Some(1),
        1_000,
    )
    .await;
    let id = publish(&local, "order.paid", tenant, r#"{"h":4}"#).await;

    assert!(
        eventually(Duration::from_secs(40), async || local
            .sender
            .ledger
            .history(&TenantId::new(tenant).unwrap(), &id)
            .await
            .unwrap()
            .len()
            >= 3)
        .await,
        "three attempts logged"
    );
    let (rss_after, hwm) = rss_kib();

    let b = &attempts_of(&local, &id, &big).await[0];
    assert_eq!(
        (b.status, b.outcome.as_str()),
        (Some(200), "delivered"),
        "{b:#?}"
    );
    // A success keeps no excerpt (issue 9: the delivered record stays under 1 KB); the
    // client read at most the excerpt's bytes all the same.
    assert_eq!(
        (b.response_excerpt.as_deref(), b.excerpt_truncated),
        (None, false)
    );
    // The client stopped reading: the server could not push the 50 MB (only what the
    // loopback socket buffers hold).
    let pushed = written_50.load(Ordering::Relaxed);
    assert!(pushed < FIFTY_MB / 2, "server wrote {pushed} bytes");

    let e = &attempts_of(&local, &id, &err).await[0];
    assert_eq!(
        (e.status, e.outcome.as_str()),
        (Some(500), "dead_letter:exhausted"),
        "{e:#?}"
    );
    assert!(e.excerpt_truncated);
    assert_eq!(
        e.response_excerpt.as_deref().map(str::len),
        Some(tern_http::client::DEFAULT_EXCERPT_BYTES)
    );

    let n = &attempts_of(&local, &id, &endless).await[0];
    assert_eq!(
        (n.status, n.outcome.as_str()),
        (Some(200), "delivered"),
        "outcome by status alone: {n:#?}"
    );
    assert_eq!(
        (n.response_excerpt.as_deref(), n.excerpt_truncated),
        (None, false)
    );
    assert!(
        n.latency_ms >= 1_000 && n.latency_ms < 5_000,
        "ended by its 1 s deadline: {} ms",
        n.latency_ms
    );

    let dead = dead_letters(&local).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].endpoint_id, err.id);
    eprintln!(
        "h4: 50 MB answer: {} ms, server pushed {} KiB before the hang-up; 2 MB 500: {} ms; endless: {} ms; \
         test process RSS {} -> {} KiB (peak {} KiB)",
        b.latency_ms,
        pushed / 1024,
        e.latency_ms,
        n.latency_ms,
        rss_before,
        rss_after,
        hwm
    );
    assert_queue_delays_in_range(&handoffs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_dead_letters_at_once_and_disables_the_endpoint() {
    let (local, _rx, handoffs) = deployment_recording("gone", fast()).await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set("/gone", Behavior::Always(Reply::status(410)));
    let tenant = "tnt_gone";
    let ep = add_endpoint(&local, tenant, &receiver.url("/gone"), &["*"], None).await;
    let id = publish(&local, "order.paid", tenant, r#"{"g":1}"#).await;

    assert!(
        eventually(Duration::from_secs(30), async || dead_letters(&local)
            .await
            .len()
            == 1)
        .await
    );
    let d = dead_letters(&local).await[0].dead_letter.clone().unwrap();
    assert_eq!(
        (d.reason, d.attempts, d.last_status),
        (DeadLetterReason::Gone, 1, Some(410))
    );
    let h = attempts_of(&local, &id, &ep).await;
    assert_eq!(h.len(), 1);
    assert_eq!(
        (h[0].status, h[0].outcome.as_str(), h[0].next_wait_seconds),
        (Some(410), "dead_letter:gone", None)
    );

    let stored = local
        .sender
        .endpoints
        .get(&ep.tenant_id, &ep.id)
        .await
        .unwrap()
        .unwrap();
    assert!(!stored.enabled);
    assert!(
        stored
            .disabled_reason
            .as_deref()
            .unwrap_or("")
            .starts_with("gone"),
        "{stored:#?}"
    );

    // Later events are not sent to it.
    publish(&local, "order.paid", tenant, r#"{"g":2}"#).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(receiver.requests("/gone").len(), 1);
    assert!(
        handoffs.lock().unwrap().is_empty(),
        "no retry was queued: {:?}",
        handoffs.lock().unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempt_log_items_carry_every_field_and_expire_by_ttl() {
    let (local, _rx, _handoffs) = deployment_recording("log", fast()).await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set(
        "/log",
        Behavior::Script(vec![
            Reply {
                status: 500,
                headers: vec![],
                body: b"database is down".to_vec(),
            },
            Reply::status(200),
        ]),
    );
    let ep = add_endpoint(&local, "tnt_log", &receiver.url("/log"), &["*"], None).await;
    let before = chrono::Utc::now();
    let id = publish(&local, "order.paid", "tnt_log", r#"{"l":1}"#).await;
    assert!(history_reaches(&local, "tnt_log", &id, 2, Duration::from_secs(30)).await);

    let h = local
        .sender
        .ledger
        .history(&ep.tenant_id, &id)
        .await
        .unwrap();
    assert_eq!(h.iter().map(|r| r.attempt).collect::<Vec<_>>(), vec![1, 2]);
    let first = &h[0];
    assert_eq!(first.endpoint_id, ep.id);
    assert_eq!(first.event_id, id);
    assert_eq!(first.status, Some(500));
    assert_eq!(first.error_class, None);
    assert_eq!(first.error.as_deref(), Some("http status 500"));
    assert_eq!(first.response_excerpt.as_deref(), Some("database is down"));
    assert!(!first.excerpt_truncated);
    assert!(first.started_at >= before - chrono::Duration::seconds(1));
    assert!(first.latency_ms < 15_000);
    assert_eq!(first.outcome, "retry");
    assert!(first.next_wait_seconds.is_some());
    assert_eq!(
        (h[1].status, h[1].outcome.as_str()),
        (Some(200), "delivered")
    );

    // Raw items: a row per failed (event, endpoint, replay, attempt); the success lives on
    // the pair's state item (one write marks it delivered and records the attempt). Each
    // with a TTL about 30 days (the settings' attemptLogTtlDays) out. An event of one
    // endpoint keeps its pairs in its tenant's sharded partition 0.
    let items =
        local
            .dynamodb()
            .query()
            .table_name(&local.resources.attempts_table)
            .key_condition_expression("event_id = :e")
            .expression_attribute_values(
                ":e",
                aws_sdk_dynamodb::types::AttributeValue::S(
                    tern_aws::ledger_keys::sharded_partition(&ep.tenant_id, &id, 0),
                ),
            )
            .send()
            .await
            .unwrap()
            .items
            .unwrap_or_default();
    let keys: Vec<&str> = items
        .iter()
        .map(|i| i["sk"].as_s().unwrap().as_str())
        .collect();
    assert_eq!(
        keys,
        [
            format!("attempt#{}#000000#000001", ep.id),
            format!("state#{}", ep.id)
        ]
    );
    for item in &items {
        let ttl: i64 = item["expires_at"].as_n().unwrap().parse().unwrap();
        let days = (ttl - chrono::Utc::now().timestamp()) / 86_400;
        assert!((29..=30).contains(&days), "expires in {days} days");
    }
}
