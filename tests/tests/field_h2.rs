//! Issue 16 item 4: HTTP/2 receivers. Each receiver is an HTTP/2 server over TLS on
//! 127.0.0.1 (the `h2` crate's server side, or raw frames where the h2 crate cannot say
//! what is needed), with a certificate from a test certificate authority made here
//! (rcgen) that the client trusts through the `test-support` seam only.
//!
//! (a) A 200 with ~20 KiB of response headers over HTTP/2 is a 200, as over HTTP/1.1
//!     (hyper's HTTP/2 default header list limit is 16 KiB).
//! (b) A stream refused with `REFUSED_STREAM`, or cut by a `GOAWAY` whose last-stream-id is
//!     below it, was not processed (RFC 9113 §8.7): the request is sent again at once,
//!     within the same attempt, a bounded number of times.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tern_core::outcome::{AttemptResult, ErrorClass};
use tern_http::client::MAX_UNPROCESSED_RESENDS;
use tern_http::{AttemptRequest, ClientOptions, DeliveryClient, DestinationPolicy, StaticLookup};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

const HOST: &str = "h2.test";

/// A certificate authority made for this test, and a TLS acceptor (ALPN `h2` only) with a
/// certificate it issued for [`HOST`].
struct TestCa {
    root: CertificateDer<'static>,
    acceptor: TlsAcceptor,
}

fn test_ca() -> TestCa {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "Tern test CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec![HOST.to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &ca)
        .unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
        )
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    TestCa {
        root: ca.der().clone(),
        acceptor: TlsAcceptor::from(Arc::new(config)),
    }
}

/// What the server saw.
#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    /// Streams opened by the client (requests received).
    streams: AtomicUsize,
    /// Requests answered (processed).
    processed: AtomicUsize,
}

/// What the server does with the `n`-th stream it receives (0-based, across connections).
#[derive(Clone, Copy)]
enum Stream {
    /// Resets it with `REFUSED_STREAM`.
    Refuse,
    /// Answers 200 with this many bytes of extra headers.
    Answer { header_bytes: usize },
}

/// An HTTP/2 server over TLS on 127.0.0.1: the h2 crate serves each stream as `plan(n)`
/// says, except the first connection when `goaway_first_connection` (raw frames, see
/// [`goaway_below_first_stream`]). Returns its port.
async fn h2_server(
    ca: &TestCa,
    seen: Arc<Seen>,
    plan: fn(usize) -> Stream,
    goaway_first_connection: bool,
) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let acceptor = ca.acceptor.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let index = seen.connections.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                if goaway_first_connection && index == 0 {
                    goaway_below_first_stream(tls, seen).await;
                } else {
                    serve_h2(tls, seen, plan).await;
                }
            });
        }
    });
    port
}

async fn serve_h2(
    tls: TlsStream<tokio::net::TcpStream>,
    seen: Arc<Seen>,
    plan: fn(usize) -> Stream,
) {
    let Ok(mut conn) = h2::server::handshake(tls).await else {
        return;
    };
    while let Some(Ok((request, mut respond))) = conn.accept().await {
        let n = seen.streams.fetch_add(1, Ordering::SeqCst);
        let seen = seen.clone();
        tokio::spawn(async move {
            match plan(n) {
                Stream::Refuse => respond.send_reset(h2::Reason::REFUSED_STREAM),
                Stream::Answer { header_bytes } => {
                    let mut body = request.into_body();
                    while let Some(Ok(chunk)) = body.data().await {
                        let _ = body.flow_control().release_capacity(chunk.len());
                    }
                    let mut response = http::Response::builder().status(200);
                    for i in 0..header_bytes / 128 {
                        response = response.header(format!("x-detail-{i:04}"), "v".repeat(117));
                    }
                    seen.processed.fetch_add(1, Ordering::SeqCst);
                    let _ = respond.send_response(response.body(()).unwrap(), true);
                }
            }
        });
    }
}

/// Raw HTTP/2 frames: settles the connection's settings, then answers the first request's
/// HEADERS with `GOAWAY(last-stream-id 0, NO_ERROR)`: "I processed nothing; go
/// elsewhere" (RFC 9113 §6.8). The h2 crate's server can only send a GOAWAY naming the
/// streams it has already received.
async fn goaway_below_first_stream(mut tls: TlsStream<tokio::net::TcpStream>, seen: Arc<Seen>) {
    let mut preface = [0u8; 24];
    if tls.read_exact(&mut preface).await.is_err() {
        return;
    }
    // Our SETTINGS (empty: defaults).
    let _ = tls.write_all(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]).await;
    loop {
        let mut head = [0u8; 9];
        if tls.read_exact(&mut head).await.is_err() {
            return;
        }
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let (kind, flags) = (head[3], head[4]);
        let mut payload = vec![0u8; len];
        if tls.read_exact(&mut payload).await.is_err() {
            return;
        }
        match kind {
            // SETTINGS without ACK: acknowledge.
            0x4 if flags & 0x1 == 0 => {
                let _ = tls.write_all(&[0, 0, 0, 0x4, 0x1, 0, 0, 0, 0]).await;
            }
            // HEADERS: a request arrived; refuse everything with a GOAWAY.
            0x1 => {
                seen.streams.fetch_add(1, Ordering::SeqCst);
                let goaway = [
                    0, 0, 8, 0x7, 0, 0, 0, 0, 0, // frame header: length 8, GOAWAY, stream 0
                    0, 0, 0, 0, // last-stream-id 0
                    0, 0, 0, 0, // NO_ERROR
                ];
                let _ = tls.write_all(&goaway).await;
                let _ = tls.flush().await;
                // Keep reading until the client hangs up.
                let mut rest = [0u8; 4096];
                while matches!(tls.read(&mut rest).await, Ok(n) if n > 0) {}
                return;
            }
            _ => {}
        }
    }
}

fn client(ca: &TestCa) -> DeliveryClient {
    tern_http::test_support::client_trusting(
        ClientOptions {
            policy: DestinationPolicy {
                https_only: true,
                allow: vec!["127.0.0.1/32".parse().unwrap()],
                nat64: false,
            },
            lookup: Arc::new(StaticLookup {
                hosts: vec![(HOST.to_owned(), vec!["127.0.0.1".parse().unwrap()])],
            }),
            ..ClientOptions::default()
        },
        vec![ca.root.clone()],
    )
    .expect("client")
}

async fn post(client: &DeliveryClient, port: u16) -> AttemptResult {
    client
        .attempt(AttemptRequest {
            url: &format!("https://{HOST}:{port}/hook"),
            body: Bytes::from_static(br#"{"h2":true}"#),
            headers: &[tern_core::request::OutgoingHeader::plain(
                "webhook-id",
                "msg_h2",
            )],
            deadline: Duration::from_secs(10),
        })
        .await
        .result
}

fn is_200(r: &AttemptResult) -> bool {
    matches!(r, AttemptResult::Response { status: 200, .. })
}

#[tokio::test]
async fn a_an_http2_200_with_20_kib_of_headers_is_a_200() {
    let ca = test_ca();
    let seen = Arc::new(Seen::default());
    let port = h2_server(
        &ca,
        seen.clone(),
        |_| Stream::Answer {
            header_bytes: 20 * 1024,
        },
        false,
    )
    .await;
    let r = post(&client(&ca), port).await;
    assert!(is_200(&r), "{r:?}");
    assert_eq!(seen.processed.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn b_a_refused_stream_is_sent_again_at_once_within_the_attempt() {
    let ca = test_ca();
    let seen = Arc::new(Seen::default());
    let port = h2_server(
        &ca,
        seen.clone(),
        |n| {
            if n == 0 {
                Stream::Refuse
            } else {
                Stream::Answer { header_bytes: 0 }
            }
        },
        false,
    )
    .await;
    let r = post(&client(&ca), port).await;
    assert!(is_200(&r), "{r:?}");
    assert_eq!(
        seen.streams.load(Ordering::SeqCst),
        2,
        "refused, then sent again"
    );
    assert_eq!(seen.processed.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn b_a_goaway_below_the_stream_is_sent_again_on_a_new_connection() {
    let ca = test_ca();
    let seen = Arc::new(Seen::default());
    let port = h2_server(
        &ca,
        seen.clone(),
        |_| Stream::Answer { header_bytes: 0 },
        true,
    )
    .await;
    let r = post(&client(&ca), port).await;
    assert!(is_200(&r), "{r:?}");
    assert_eq!(
        seen.connections.load(Ordering::SeqCst),
        2,
        "a new connection"
    );
    assert_eq!(seen.streams.load(Ordering::SeqCst), 2);
    assert_eq!(seen.processed.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn b_a_receiver_that_keeps_refusing_is_sent_again_a_bounded_number_of_times() {
    let ca = test_ca();
    let seen = Arc::new(Seen::default());
    let port = h2_server(&ca, seen.clone(), |_| Stream::Refuse, false).await;
    let r = post(&client(&ca), port).await;
    assert!(
        matches!(
            r,
            AttemptResult::Failed {
                class: ErrorClass::Protocol,
                ..
            }
        ),
        "{r:?}"
    );
    assert_eq!(
        seen.streams.load(Ordering::SeqCst),
        1 + MAX_UNPROCESSED_RESENDS as usize
    );
    assert_eq!(seen.processed.load(Ordering::SeqCst), 0);
}

/// An HTTP/2 server over TLS on 127.0.0.1 that takes `max_streams` streams at a time on
/// each connection and resets with `REFUSED_STREAM` every stream beyond them, whether or
/// not it advertises that limit (`SETTINGS_MAX_CONCURRENT_STREAMS`, with `advertise`):
/// load-shedding proxies refuse below what they advertise. Each request it takes is
/// answered 200 after `hold`. Returns its port.
async fn limited_h2_server(
    ca: &TestCa,
    seen: Arc<Seen>,
    max_streams: usize,
    advertise: bool,
    hold: Duration,
) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let acceptor = ca.acceptor.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            seen.connections.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut builder = h2::server::Builder::new();
                if advertise {
                    builder.max_concurrent_streams(u32::try_from(max_streams).unwrap());
                }
                let Ok(mut conn) = builder.handshake::<_, Bytes>(tls).await else {
                    return;
                };
                let active = Arc::new(AtomicUsize::new(0));
                while let Some(Ok((request, mut respond))) = conn.accept().await {
                    seen.streams.fetch_add(1, Ordering::SeqCst);
                    if active.fetch_add(1, Ordering::SeqCst) >= max_streams {
                        active.fetch_sub(1, Ordering::SeqCst);
                        respond.send_reset(h2::Reason::REFUSED_STREAM);
                        continue;
                    }
                    let (seen, active) = (seen.clone(), active.clone());
                    tokio::spawn(async move {
                        let mut body = request.into_body();
                        while let Some(Ok(chunk)) = body.data().await {
                            let _ = body.flow_control().release_capacity(chunk.len());
                        }
                        tokio::time::sleep(hold).await;
                        seen.processed.fetch_add(1, Ordering::SeqCst);
                        let response = http::Response::builder().status(200).body(()).unwrap();
                        let _ = respond.send_response(response, true);
                        active.fetch_sub(1, Ordering::SeqCst);
                    });
                }
            });
        }
    });
    port
}

/// Issue 26: a receiver that takes one stream at a time got 1 of 10 concurrent deliveries
/// on the first attempt: each refused stream was sent again on the same crowded
/// connection, at most twice, and never on another. The client keeps to an advertised
/// `MAX_CONCURRENT_STREAMS` (RFC 9113 §5.1.2) and sends a refused stream again on a new
/// connection (§8.7): all 10 are answered 200 in their first attempt, whether or not the
/// limit was advertised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b_a_receiver_taking_one_stream_at_a_time_gets_ten_concurrent_deliveries_in_their_first_attempt()
 {
    for advertise in [true, false] {
        let ca = test_ca();
        let seen = Arc::new(Seen::default());
        let port =
            limited_h2_server(&ca, seen.clone(), 1, advertise, Duration::from_millis(50)).await;
        let client = client(&ca);
        let results = futures::future::join_all((0..10).map(|_| post(&client, port))).await;
        let ok = results.iter().filter(|r| is_200(r)).count();
        eprintln!(
            "advertised {advertise}: {ok} of 10 answered 200; {} streams on {} connections",
            seen.streams.load(Ordering::SeqCst),
            seen.connections.load(Ordering::SeqCst)
        );
        assert_eq!(ok, 10, "advertised {advertise}: {results:?}");
        assert_eq!(seen.processed.load(Ordering::SeqCst), 10);
    }
}
