//! Issue 11, items 1-3: the receiver's answer is the truth. Each misbehaving receiver is a
//! raw TCP server on 127.0.0.1 (an HTTP library would hide the misbehaviour). Every item
//! is tested against `tern_http::DeliveryClient` directly and end to end on moto.
//!
//! 1. A `200 OK` with 120 extra headers (~50 bytes each) is delivered on attempt 1 with
//!    one POST; more generally, once a status line has arrived the attempt is classified
//!    by it, whatever follows in the head.
//! 2. A receiver that reads only the head of a ~250 KiB POST, answers 410 with
//!    `connection: close` and closes with the body unread is seen as 410 every time.
//! 3. A pooled keep-alive connection the receiver closes when the next POST arrives: that
//!    POST is sent once more on a new connection within the same attempt.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tern_core::outcome::{AttemptResult, ErrorClass};
use tern_core::{DeadLetterReason, TenantId};
use tern_http::{AttemptRequest, ClientOptions, DeliveryClient, DestinationPolicy};
use tern_local::LocalOptions;
use tern_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn fast() -> LocalOptions {
    LocalOptions {
        time_scale: 0.001,
        ..LocalOptions::default()
    }
}

fn loopback_client() -> DeliveryClient {
    DeliveryClient::new(ClientOptions {
        policy: DestinationPolicy {
            https_only: false,
            allow: vec!["127.0.0.1/32".parse().unwrap()],
            nat64: false,
        },
        lookup: no_dns(),
        ..ClientOptions::default()
    })
    .expect("client")
}

async fn post(client: &DeliveryClient, url: &str, body: Bytes) -> AttemptResult {
    client
        .attempt(AttemptRequest {
            url,
            body,
            headers: &[tern_core::request::OutgoingHeader::plain(
                "webhook-id",
                "msg_field_http",
            )],
            deadline: Duration::from_secs(10),
        })
        .await
        .result
}

fn status_of(r: &AttemptResult) -> Option<u16> {
    match r {
        AttemptResult::Response { status, .. } => Some(*status),
        AttemptResult::Failed { .. } => None,
    }
}

/// Reads up to the end of a request head. Returns the head's `content-length` and the
/// body bytes already read with it, or `None` when the peer closed first.
async fn read_head(s: &mut TcpStream) -> Option<(usize, usize)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..p]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            return Some((length, buf.len() - p - 4));
        }
    }
}

/// Reads one whole request (head and `content-length` body).
async fn read_request(s: &mut TcpStream) -> bool {
    let Some((length, mut have)) = read_head(s).await else {
        return false;
    };
    let mut chunk = [0u8; 16 * 1024];
    while have < length {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => have += n,
        }
    }
    true
}

/// What a raw server saw: connections accepted and request heads read.
#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    requests: AtomicUsize,
}

/// A raw TCP server on 127.0.0.1 running `serve(connection index, stream, seen)` for each
/// connection. Returns its port.
async fn raw_server<F, Fut>(seen: Arc<Seen>, serve: F) -> u16
where
    F: Fn(usize, TcpStream, Arc<Seen>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    raw_server_with(seen, None, serve).await
}

/// [`raw_server`] whose accepted connections have a receive buffer of `recv_buffer`
/// bytes (set on the listener, inherited by each connection).
async fn raw_server_with<F, Fut>(seen: Arc<Seen>, recv_buffer: Option<u32>, serve: F) -> u16
where
    F: Fn(usize, TcpStream, Arc<Seen>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    if let Some(size) = recv_buffer {
        socket.set_recv_buffer_size(size).unwrap();
    }
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener: TcpListener = socket.listen(128).unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let index = seen.connections.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(serve(index, stream, seen.clone()));
        }
    });
    port
}

/// `HTTP/1.1 <status>` with `extra` headers of ~50 bytes each, then an empty body.
fn many_headers(status: &str, extra: usize) -> Vec<u8> {
    let mut head = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n");
    for i in 0..extra {
        head.push_str(&format!("x-receiver-detail-{i:04}: {}\r\n", "v".repeat(24)));
    }
    head.push_str("\r\n");
    head.into_bytes()
}

/// Item 1: answers every request with `answer`, keep-alive.
async fn fixed_answer_server(seen: Arc<Seen>, answer: Vec<u8>) -> u16 {
    let answer = Arc::new(answer);
    raw_server(seen, move |_, mut s, seen| {
        let answer = answer.clone();
        async move {
            while read_request(&mut s).await {
                seen.requests.fetch_add(1, Ordering::SeqCst);
                if s.write_all(&answer).await.is_err() {
                    return;
                }
            }
        }
    })
    .await
}

/// Item 2: reads the request head only, answers 410 with `connection: close`, and closes
/// with the body unread (the kernel then resets the connection). Its small receive
/// buffer (4 KiB) keeps the client writing the body when the answer and the reset come,
/// as a receiver across a real network does.
async fn early_gone_server(seen: Arc<Seen>) -> u16 {
    raw_server_with(seen, Some(4096), |_, mut s, seen| async move {
        if read_head(&mut s).await.is_none() {
            return;
        }
        seen.requests.fetch_add(1, Ordering::SeqCst);
        let _ = s
            .write_all(b"HTTP/1.1 410 Gone\r\nconnection: close\r\ncontent-length: 4\r\n\r\ngone")
            .await;
        drop(s);
    })
    .await
}

/// Item 3: the first connection answers one POST with keep-alive, then closes when the
/// next POST arrives on it (head read, nothing answered). Every other connection answers
/// each POST with 200.
async fn stale_keep_alive_server(seen: Arc<Seen>, on_first: Arc<AtomicUsize>) -> u16 {
    raw_server(seen, move |index, mut s, seen| {
        let on_first = on_first.clone();
        async move {
            let mut served = 0;
            loop {
                if index == 0 && served == 1 {
                    if read_head(&mut s).await.is_some() {
                        seen.requests.fetch_add(1, Ordering::SeqCst);
                        on_first.fetch_add(1, Ordering::SeqCst);
                    }
                    return; // closes the connection without a byte of answer
                }
                if !read_request(&mut s).await {
                    return;
                }
                seen.requests.fetch_add(1, Ordering::SeqCst);
                if index == 0 {
                    on_first.fetch_add(1, Ordering::SeqCst);
                }
                served += 1;
                if s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    })
    .await
}

fn padded_json(bytes: usize) -> String {
    format!(r#"{{"pad":"{}"}}"#, "a".repeat(bytes - 10))
}

// ---- Item 1: oversized response head ------------------------------------------------

#[tokio::test]
async fn item1_client_a_200_with_120_extra_headers_is_a_200_after_one_post() {
    let seen = Arc::new(Seen::default());
    let port = fixed_answer_server(seen.clone(), many_headers("200 OK", 120)).await;
    let client = loopback_client();
    let r = post(
        &client,
        &format!("http://127.0.0.1:{port}/hook"),
        Bytes::from_static(b"{}"),
    )
    .await;
    assert_eq!(status_of(&r), Some(200), "{r:?}");
    assert_eq!(seen.requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn item1_client_any_head_that_began_with_a_status_line_is_classified_by_it() {
    let client = loopback_client();
    // 3,000 headers (~150 KiB): more lines and bytes than any parser limit. Retry-After
    // comes first, so it is still read.
    let mut huge = b"HTTP/1.1 503 Busy\r\nretry-after: 7\r\n".to_vec();
    huge.extend_from_slice(&many_headers("", 3_000)[b"HTTP/1.1 \r\n".len()..]);
    // Malformed header lines (no colon, a space before the colon, a non-token name).
    let malformed =
        b"HTTP/1.1 200 OK\r\nno colon here\r\nx-a : 1\r\nx(b): 2\r\ncontent-length: 0\r\n\r\n"
            .to_vec();
    // A head cut off by the receiver after its status line.
    let cut = b"HTTP/1.1 410 Gone\r\nx-a: 1\r\nx-b".to_vec();
    for (answer, status, retry_after) in [
        (huge, 503, Some("7")),
        (malformed, 200, None),
        (cut, 410, None),
    ] {
        let seen = Arc::new(Seen::default());
        let answer = Arc::new(answer);
        let port = raw_server(seen.clone(), move |_, mut s, seen| {
            let answer = answer.clone();
            async move {
                if read_request(&mut s).await {
                    seen.requests.fetch_add(1, Ordering::SeqCst);
                    let _ = s.write_all(&answer).await;
                }
            }
        })
        .await;
        let r = post(
            &client,
            &format!("http://127.0.0.1:{port}/hook"),
            Bytes::from_static(b"{}"),
        )
        .await;
        match &r {
            AttemptResult::Response {
                status: s,
                retry_after: ra,
                ..
            } => {
                assert_eq!((*s, ra.as_deref()), (status, retry_after), "{r:?}");
            }
            AttemptResult::Failed { .. } => panic!("answered {status}, got {r:?}"),
        }
        assert_eq!(seen.requests.load(Ordering::SeqCst), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item1_e2e_a_200_with_120_extra_headers_is_delivered_on_attempt_1_with_one_post() {
    let (local, _rx, _handoffs) = deployment_recording("f-http-1", fast()).await;
    let seen = Arc::new(Seen::default());
    let port = fixed_answer_server(seen.clone(), many_headers("200 OK", 120)).await;
    let tenant = "tnt_fh1";
    let ep = add_endpoint(
        &local,
        tenant,
        &format!("http://127.0.0.1:{port}/hook"),
        &["*"],
        Some(3),
    )
    .await;
    let id = publish(&local, "order.paid", tenant, r#"{"h":1}"#).await;
    assert!(history_reaches(&local, tenant, &id, 1, Duration::from_secs(30)).await);
    // Give a wrongly scheduled retry (1 s at this time scale) the chance to show.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let h = attempts_of(&local, &id, &ep).await;
    assert_eq!(h.len(), 1, "{h:#?}");
    assert_eq!(
        (h[0].attempt, h[0].status, h[0].outcome.as_str()),
        (1, Some(200), "delivered"),
        "{h:#?}"
    );
    assert_eq!(seen.requests.load(Ordering::SeqCst), 1);
    assert!(dead_letters(&local).await.is_empty());
}

// ---- Item 2: early final answer -----------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item2_client_an_early_410_with_the_body_unread_is_a_410_in_every_one_of_300_runs() {
    // The race is rare on loopback (1 run in 60 failed before the fix on the 2-core test
    // machine, 13 in 30 in the field): 300 runs make a regression show.
    let seen = Arc::new(Seen::default());
    let port = early_gone_server(seen.clone()).await;
    let client = loopback_client();
    let body = Bytes::from(padded_json(250 * 1024));
    let mut results = Vec::new();
    for _ in 0..300 {
        results.push(
            post(
                &client,
                &format!("http://127.0.0.1:{port}/hook"),
                body.clone(),
            )
            .await,
        );
    }
    let gone = results.iter().filter(|r| status_of(r) == Some(410)).count();
    let other: Vec<_> = results
        .iter()
        .filter(|r| status_of(r) != Some(410))
        .collect();
    eprintln!("item 2 (client): {gone} of 300 runs saw 410");
    assert_eq!(gone, 300, "{other:#?}");
    assert_eq!(seen.requests.load(Ordering::SeqCst), 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item2_e2e_30_deliveries_answered_410_early_are_all_gone_and_disable_their_endpoints() {
    let (local, _rx, _handoffs) = deployment_recording("f-http-2", fast()).await;
    let seen = Arc::new(Seen::default());
    let port = early_gone_server(seen.clone()).await;
    let tenant = "tnt_fh2";
    // 30 endpoints (a 410 disables its endpoint): one ~250 KiB event fans out to 30
    // deliveries, 30 runs of the race.
    let mut endpoints = Vec::new();
    for i in 0..30 {
        endpoints.push(
            add_endpoint(
                &local,
                tenant,
                &format!("http://127.0.0.1:{port}/hook/{i}"),
                &["*"],
                Some(3),
            )
            .await,
        );
    }
    let id = publish(&local, "order.paid", tenant, &padded_json(250 * 1024)).await;
    assert!(
        eventually(Duration::from_secs(120), async || dead_letters(&local)
            .await
            .len()
            >= 30)
        .await,
        "30 dead letters; attempts so far: {:#?}",
        local
            .sender
            .ledger
            .history(&TenantId::new(tenant).unwrap(), &id)
            .await
    );
    let dead = dead_letters(&local).await;
    assert_eq!(dead.len(), 30);
    let gone = dead
        .iter()
        .filter(|d| {
            d.dead_letter
                .as_ref()
                .map(|r| (r.reason, r.attempts, r.last_status))
                == Some((DeadLetterReason::Gone, 1, Some(410)))
        })
        .count();
    eprintln!("item 2 (e2e): {gone} of 30 deliveries dead-lettered gone on a 410");
    assert_eq!(gone, 30, "{dead:#?}");
    for ep in &endpoints {
        let h = attempts_of(&local, &id, ep).await;
        assert_eq!(h.len(), 1, "{h:#?}");
        assert_eq!(
            (h[0].status, h[0].outcome.as_str()),
            (Some(410), "dead_letter:gone")
        );
        let stored = local
            .sender
            .endpoints
            .get(&ep.tenant_id, &ep.id)
            .await
            .unwrap()
            .unwrap();
        assert!(!stored.enabled, "{stored:#?}");
    }
    assert_eq!(seen.requests.load(Ordering::SeqCst), 30);
}

// ---- Item 3: stale keep-alive connection --------------------------------------------

#[tokio::test]
async fn item3_client_a_post_met_by_a_closed_keep_alive_connection_is_sent_again_on_a_new_one() {
    let seen = Arc::new(Seen::default());
    let on_first = Arc::new(AtomicUsize::new(0));
    let port = stale_keep_alive_server(seen.clone(), on_first.clone()).await;
    let client = loopback_client();
    let url = format!("http://127.0.0.1:{port}/hook");
    let first = post(&client, &url, Bytes::from_static(b"{\"n\":1}")).await;
    assert_eq!(status_of(&first), Some(200), "{first:?}");
    let second = post(&client, &url, Bytes::from_static(b"{\"n\":2}")).await;
    assert_eq!(status_of(&second), Some(200), "{second:?}");
    // Both POSTs reached the first connection; the second was sent again on a new one.
    assert_eq!(on_first.load(Ordering::SeqCst), 2);
    assert_eq!(seen.connections.load(Ordering::SeqCst), 2);
    assert_eq!(seen.requests.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn item3_client_a_new_connection_closed_without_an_answer_is_not_sent_again() {
    // The re-send is only for a reused connection: on a new one the receiver may have
    // acted on the POST, so it stays one POST and a protocol failure.
    let seen = Arc::new(Seen::default());
    let port = raw_server(seen.clone(), |_, mut s, seen| async move {
        if read_request(&mut s).await {
            seen.requests.fetch_add(1, Ordering::SeqCst);
        }
    })
    .await;
    let client = loopback_client();
    let r = post(
        &client,
        &format!("http://127.0.0.1:{port}/hook"),
        Bytes::from_static(b"{}"),
    )
    .await;
    assert!(
        matches!(
            &r,
            AttemptResult::Failed {
                class: ErrorClass::Protocol,
                ..
            }
        ),
        "{r:?}"
    );
    assert_eq!(seen.requests.load(Ordering::SeqCst), 1);
    assert_eq!(seen.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item3_e2e_the_second_post_on_a_stale_keep_alive_connection_is_delivered_on_attempt_1() {
    let (local, _rx, _handoffs) = deployment_recording("f-http-3", fast()).await;
    let seen = Arc::new(Seen::default());
    let on_first = Arc::new(AtomicUsize::new(0));
    let port = stale_keep_alive_server(seen.clone(), on_first.clone()).await;
    let tenant = "tnt_fh3";
    let ep = add_endpoint(
        &local,
        tenant,
        &format!("http://127.0.0.1:{port}/hook"),
        &["*"],
        Some(3),
    )
    .await;
    let first = publish(&local, "order.paid", tenant, r#"{"n":1}"#).await;
    assert!(history_reaches(&local, tenant, &first, 1, Duration::from_secs(30)).await);
    let second = publish(&local, "order.paid", tenant, r#"{"n":2}"#).await;
    assert!(history_reaches(&local, tenant, &second, 1, Duration::from_secs(30)).await);
    tokio::time::sleep(Duration::from_secs(3)).await;
    for id in [&first, &second] {
        let h = attempts_of(&local, id, &ep).await;
        assert_eq!(h.len(), 1, "{h:#?}");
        assert_eq!(
            (h[0].attempt, h[0].status, h[0].outcome.as_str()),
            (1, Some(200), "delivered"),
            "{h:#?}"
        );
    }
    // The receiver saw the second POST on the stale connection, then again on a new one.
    assert_eq!(on_first.load(Ordering::SeqCst), 2);
    assert_eq!(seen.connections.load(Ordering::SeqCst), 2);
    assert_eq!(seen.requests.load(Ordering::SeqCst), 3);
}
