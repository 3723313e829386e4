//! Issue 16 item 2: name resolution judges fairly. Our resolver failing (SERVFAIL, no
//! answer, `EAI_AGAIN`) is our failure (`dns_temporary`): retried and never charged to the
//! endpoint; a name that does not exist stays the receiver's (`dns`); answers are cached
//! for their TTL within a warm client.
//!
//! The resolver is the production one ([`DnsResolver`]) asking a DNS server on
//! 127.0.0.1 that this file runs (hickory-proto's codec over UDP), so every query is seen
//! and counted; the pipeline test injects a failing resolver at the `HostLookup` port.
//! No test queries the system's DNS or leaves 127.0.0.1.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, SOA};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use tern_core::outcome::{AttemptResult, ErrorClass};
use tern_core::{DeadLetterReason, RetrySchedule};
use tern_http::{
    AttemptRequest, ClientOptions, DeliveryClient, DestinationPolicy, DnsError, DnsResolver,
    HostLookup,
};
use tern_local::{Behavior, LocalOptions, Receiver, Reply};
use tern_tests::*;

/// How the test DNS server answers one name.
#[derive(Debug, Clone, Copy)]
enum Zone {
    /// An A record (TTL in seconds); AAAA queries get NODATA with an SOA of the same TTL.
    Address { ip: Ipv4Addr, ttl: u32 },
    /// NXDOMAIN: the name does not exist.
    NxDomain,
    /// NODATA for A and AAAA: the name exists with no address.
    NoData,
    /// SERVFAIL: the resolver could not answer.
    ServFail,
    /// No answer at all (a resolver that is down or drops queries).
    Silent,
}

/// A DNS server on 127.0.0.1 (UDP) that answers from a fixed zone and counts queries.
struct DnsServer {
    addr: SocketAddr,
    queries: Arc<Mutex<Vec<(String, RecordType)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn soa(zone: &Name, ttl: u32) -> Record {
    Record::from_rdata(
        zone.clone(),
        ttl,
        RData::SOA(SOA::new(
            Name::from_ascii("ns.test.").unwrap(),
            Name::from_ascii("admin.test.").unwrap(),
            1,
            60,
            60,
            60,
            ttl,
        )),
    )
}

impl DnsServer {
    async fn start(zone: HashMap<&'static str, Zone>) -> Self {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let zone: HashMap<String, Zone> = zone
            .into_iter()
            .map(|(k, v)| (format!("{k}."), v))
            .collect();
        let queries = Arc::new(Mutex::new(Vec::new()));
        let seen = queries.clone();
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            while let Ok((n, from)) = socket.recv_from(&mut buf).await {
                let Ok(request) = Message::from_vec(&buf[..n]) else {
                    continue;
                };
                let Some(query) = request.queries.first().cloned() else {
                    continue;
                };
                let name = query.name().to_ascii().to_ascii_lowercase();
                seen.lock()
                    .unwrap()
                    .push((name.clone(), query.query_type()));
                let mut response =
                    Message::new(request.metadata.id, MessageType::Response, OpCode::Query);
                response.metadata.recursion_desired = request.metadata.recursion_desired;
                response.metadata.recursion_available = true;
                response.add_query(query.clone());
                match zone.get(&name).copied().unwrap_or(Zone::NxDomain) {
                    Zone::Silent => continue,
                    Zone::ServFail => response.metadata.response_code = ResponseCode::ServFail,
                    Zone::NoData => {
                        response.add_authority(soa(query.name(), 60));
                    }
                    Zone::NxDomain => {
                        response.metadata.response_code = ResponseCode::NXDomain;
                        response.add_authority(soa(query.name(), 60));
                    }
                    Zone::Address { ip, ttl } => match query.query_type() {
                        RecordType::A => {
                            response.add_answer(Record::from_rdata(
                                query.name().clone(),
                                ttl,
                                RData::A(A(ip)),
                            ));
                        }
                        // NODATA, cacheable for the same TTL (RFC 2308 §5).
                        _ => {
                            response.add_authority(soa(query.name(), ttl));
                        }
                    },
                }
                if let Ok(bytes) = response.to_vec() {
                    let _ = socket.send_to(&bytes, from).await;
                }
            }
        });
        Self {
            addr,
            queries,
            task,
        }
    }

    /// A queries seen for `name` (one per lookup: AAAA goes with each).
    fn lookups(&self, name: &str) -> usize {
        let name = format!("{name}.");
        self.queries
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, t)| *n == name && *t == RecordType::A)
            .count()
    }
}

fn client(lookup: Arc<dyn HostLookup>) -> DeliveryClient {
    DeliveryClient::new(ClientOptions {
        policy: DestinationPolicy {
            https_only: false,
            allow: vec!["127.0.0.1/32".parse().unwrap()],
            nat64: false,
        },
        lookup,
        ..ClientOptions::default()
    })
    .expect("client")
}

async fn post(client: &DeliveryClient, url: &str, deadline: Duration) -> AttemptResult {
    client
        .attempt(AttemptRequest {
            url,
            body: Bytes::from_static(b"{}"),
            headers: &[],
            deadline,
        })
        .await
        .result
}

/// A receiver that closes every connection after its answer, so each attempt connects
/// (and so looks its host up) afresh: no pooled connection hides a lookup.
async fn closing_receiver() -> Receiver {
    let r = Receiver::start().await.expect("receiver");
    r.set(
        "/hook",
        Behavior::Always(Reply::status(200).header("connection", "close")),
    );
    r
}

fn class_of(r: &AttemptResult) -> Option<ErrorClass> {
    match r {
        AttemptResult::Failed { class, .. } => Some(*class),
        AttemptResult::Response { .. } => None,
    }
}

#[tokio::test]
async fn answers_are_cached_for_their_ttl_within_a_warm_client() {
    let receiver = closing_receiver().await;
    let dns = DnsServer::start(HashMap::from([
        (
            "cached.test",
            Zone::Address {
                ip: Ipv4Addr::LOCALHOST,
                ttl: 300,
            },
        ),
        (
            "uncached.test",
            Zone::Address {
                ip: Ipv4Addr::LOCALHOST,
                ttl: 0,
            },
        ),
    ]))
    .await;
    let c = client(Arc::new(DnsResolver::with_name_servers(&[dns.addr])));
    let port = receiver.addr().port();
    for host in ["cached.test", "uncached.test"] {
        for _ in 0..2 {
            let r = post(
                &c,
                &format!("http://{host}:{port}/hook"),
                Duration::from_secs(5),
            )
            .await;
            assert!(
                matches!(r, AttemptResult::Response { status: 200, .. }),
                "{host}: {r:?}"
            );
        }
    }
    assert_eq!(
        receiver.requests("/hook").len(),
        4,
        "every attempt connected afresh"
    );
    // Within its 300 s TTL the second attempt used the cached answer...
    assert_eq!(
        dns.lookups("cached.test"),
        1,
        "{:?}",
        dns.queries.lock().unwrap()
    );
    // ...while a 0 s TTL is asked again: the cache follows the TTL, it does not pin names.
    assert_eq!(
        dns.lookups("uncached.test"),
        2,
        "{:?}",
        dns.queries.lock().unwrap()
    );
}

#[tokio::test]
async fn a_failing_resolver_is_ours_and_a_missing_name_is_the_receivers() {
    let dns = DnsServer::start(HashMap::from([
        ("servfail.test", Zone::ServFail),
        ("silent.test", Zone::Silent),
        ("missing.test", Zone::NxDomain),
        ("nodata.test", Zone::NoData),
    ]))
    .await;
    let c = client(Arc::new(DnsResolver::with_name_servers(&[dns.addr])));
    let deadline = Duration::from_millis(1_500);
    let servfail = post(&c, "http://servfail.test:9/hook", deadline).await;
    assert_eq!(
        class_of(&servfail),
        Some(ErrorClass::DnsTemporary),
        "{servfail:?}"
    );
    // No answer before the attempt's deadline: our resolver, not the receiver's timeout.
    let silent = post(&c, "http://silent.test:9/hook", deadline).await;
    assert_eq!(
        class_of(&silent),
        Some(ErrorClass::DnsTemporary),
        "{silent:?}"
    );
    let missing = post(&c, "http://missing.test:9/hook", deadline).await;
    assert_eq!(class_of(&missing), Some(ErrorClass::Dns), "{missing:?}");
    assert!(
        dns.lookups("missing.test") >= 1,
        "the NXDOMAIN came from the server"
    );
    // A name with no address of either family is the receiver's too.
    let nodata = post(&c, "http://nodata.test:9/hook", deadline).await;
    assert_eq!(class_of(&nodata), Some(ErrorClass::Dns), "{nodata:?}");
}

/// `EAI_AGAIN` from a throttled resolver, at the `HostLookup` port: lookups fail in a
/// fixed pattern, 3 of every 5 (60 %); the others answer 127.0.0.1.
struct FlakyResolver {
    lookups: AtomicUsize,
}

impl HostLookup for FlakyResolver {
    fn lookup(&self, host: String) -> reqwest::dns::Resolving {
        let n = self.lookups.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            if matches!(n % 5, 0 | 2 | 4) {
                return Err(Box::new(DnsError::temporary(format!(
                    "{host}: Temporary failure in name resolution (EAI_AGAIN)"
                ))) as _);
            }
            let addrs: reqwest::dns::Addrs =
                Box::new(vec![SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0)].into_iter());
            Ok(addrs)
        })
    }
}

#[tokio::test]
async fn our_resolver_failing_60_percent_charges_nothing_and_everything_arrives() {
    let flaky = Arc::new(FlakyResolver {
        lookups: AtomicUsize::new(0),
    });
    let (local, _events) = deployment(
        "dns60",
        LocalOptions {
            // A failed lookup is ours: the same attempt again on our own schedule (1 s
            // doubling, scaled to milliseconds), each time at least the 1 s of SQS's
            // whole-second DelaySeconds; never an attempt of the receiver's schedule.
            time_scale: 0.001,
            lookup: Some(flaky.clone()),
            console_port: None,
            ..LocalOptions::default()
        },
    )
    .await;
    let receiver = closing_receiver().await;
    // The retry window (about 60 s real at this scale) bounds our retries too: room for
    // 50 of them, which a 60 % pattern does not produce in a row.
    let schedule = RetrySchedule::new(vec![3_600; 15]).unwrap();
    let ep = add_endpoint_with(
        &local,
        tern_core::EndpointId::generate(),
        "tnt_dns60",
        &format!("http://flaky.test:{}/hook", receiver.addr().port()),
        &["order.paid"],
        None,
        Some(schedule),
    )
    .await;
    let mut events = Vec::new();
    for i in 0..60 {
        events.push(
            publish(
                &local,
                "order.paid",
                "tnt_dns60",
                &format!(r#"{{"n":{i}}}"#),
            )
            .await,
        );
    }
    let arrived = receiver
        .wait_for("/hook", 60, Duration::from_secs(90))
        .await;
    let distinct: std::collections::HashSet<_> = arrived
        .iter()
        .filter_map(|r| r.header("webhook-id").map(str::to_owned))
        .collect();
    assert_eq!(distinct.len(), 60, "every event arrived");

    let lookups = flaky.lookups.load(Ordering::SeqCst);
    assert!(
        lookups >= 100,
        "the resolver failed often: {lookups} lookups"
    );
    let mut ours = 0;
    for event in &events {
        let rows = attempts_of(&local, event, &ep).await;
        for a in &rows {
            if a.error_class == Some(ErrorClass::DnsTemporary) {
                ours += 1;
                // The same attempt again: our failure spends none of the receiver's.
                assert_eq!(a.outcome, tern_core::ports::OUTCOME_REQUEUED, "{a:?}");
            }
        }
        assert!(
            rows.iter().all(|a| a.attempt == 1),
            "our failures spent no attempt: {rows:?}"
        );
    }
    assert!(
        ours >= 30,
        "failed lookups were logged as dns_temporary: {ours}"
    );

    // Nothing was charged to the receiver: still enabled, no failure on its health
    // record, every attempt in its window a success, no dead letter.
    let stored = tern_core::ports::EndpointStore::get(
        local.sender.endpoints.as_ref(),
        &ep.tenant_id,
        &ep.id,
    )
    .await
    .unwrap()
    .expect("endpoint");
    assert!(stored.enabled, "{:?}", stored.disabled_reason);
    let health = tern_aws::DynamoHealthStore::new(
        aws_sdk_dynamodb::Client::new(&local.aws),
        &local.resources.health_table,
    );
    let h = tern_core::health::HealthStore::get(&health, &ep.tenant_id, &ep.id)
        .await
        .unwrap()
        .expect("health record");
    assert_eq!(h.consecutive_failures, 0, "{h:?}");
    assert!(h.last_failure.is_none(), "{:?}", h.last_failure);
    let rate = h.window_rate(chrono::Utc::now());
    assert_eq!(rate.attempts, rate.successes, "{rate:?}");
    let dead: Vec<DeadLetterReason> = dead_letters(&local)
        .await
        .iter()
        .filter_map(|m| m.dead_letter.as_ref().map(|d| d.reason))
        .collect();
    assert!(dead.is_empty(), "{dead:?}");
}

/// The sender counts a failure on our side in `OurFailures` (and in `AttemptsFailed`), and
/// not a receiver's failure; handler-level, over in-memory ports.
#[tokio::test]
async fn the_sender_counts_our_failures_in_their_own_metric() {
    use tern_handlers::metrics::{Metrics, MetricsSink};
    use tern_tests::fakes::{MemEndpoints, MemLedger, MemQueue};

    let receiver = Receiver::start().await.expect("receiver");
    receiver.set("/down", Behavior::Always(Reply::status(500)));
    let endpoints = Arc::new(MemEndpoints::default());
    let tenant = "tnt_our_metric";
    let endpoint = |url: String| {
        let e = tern_core::Endpoint::new(
            tern_core::EndpointId::generate(),
            tern_core::TenantId::new(tenant).unwrap(),
            url,
            vec!["*".into()],
            tern_core::Secret::generate(),
            chrono::Utc::now(),
        );
        e.validate().unwrap();
        endpoints.endpoints.lock().unwrap().push(e.clone());
        e
    };
    // Our resolver fails every lookup of `flaky.test`; the loopback receiver answers 500.
    let ours = endpoint("http://flaky.test/hook".to_owned());
    let theirs = endpoint(receiver.url("/down"));
    let deps = tern_handlers::sender::SenderDeps {
        endpoints: endpoints.clone(),
        ledger: Arc::new(MemLedger::default()),
        delivery_queue: Arc::new(MemQueue::default()),
        dlq: Arc::new(MemQueue::default()),
        scheduler: None,
        client: client(Arc::new(FlakyResolver {
            // Starts on a failing residue (0 mod 5).
            lookups: AtomicUsize::new(0),
        })),
        policy: tern_handlers::config::SenderPolicy::default(),
        breaker: None,
    };
    let body = |ep: &tern_core::Endpoint| {
        let event = tern_outbox::OutboxWriter::new("unused")
            .prepare("order.paid", tenant, r#"{"m":1}"#)
            .unwrap()
            .event;
        tern_core::DeliveryMessage::first(event, ep.id.clone()).to_body()
    };
    let metrics = Metrics::new("Tern", MetricsSink::Discard);
    let (response, results) =
        tern_handlers::sender::handle(&deps, sqs_event(&[body(&ours), body(&theirs)]), &metrics)
            .await;
    assert!(response.batch_item_failures.is_empty(), "{results:?}");
    let counts = metrics.snapshot();
    assert_eq!(
        (counts.attempts, counts.attempts_failed, counts.our_failures),
        (2, 2, 1),
        "{counts:?}"
    );
    let emf = metrics.emf(0).expect("an EMF document").to_string();
    assert!(emf.contains(r#""OurFailures":1"#), "{emf}");
}
