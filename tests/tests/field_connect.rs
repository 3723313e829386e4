//! Issue 16 items 2, 3 and 5: the connection step judges fairly and reaches every
//! receiver. Everything listens on loopback addresses of this machine.
//!
//! - Item 3: a host with two addresses, the first black-holed, is delivered on attempt 1
//!   within a 3 s deadline (Happy Eyeballs, RFC 8305). The black hole is a listener on
//!   127.0.0.2 with a backlog of 0 whose one accept slot is taken and never accepted:
//!   Linux then drops every new SYN, so a connect there hangs as to a dead host.
//! - Item 2: a connect failing because this process is out of file descriptors (a real
//!   `EMFILE`, in a child process whose `RLIMIT_NOFILE` is lowered) is `local_resource`.
//! - Item 5: with the NAT64 setting on, a receiver whose name resolves to
//!   `64:ff9b::<public IPv4>` is delivered (through a stand-in NAT64 gateway on loopback,
//!   the `test-support` seam); with it off, it is blocked and never contacted.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tern_core::outcome::{AttemptResult, ErrorClass};
use tern_http::{
    AttemptRequest, ClientOptions, DeliveryClient, DestinationPolicy, HostLookup, StaticLookup,
};
use tern_local::{Behavior, LocalOptions, Receiver, Reply};
use tern_tests::*;
use tokio::net::{TcpListener, TcpSocket, TcpStream};

// `EMFILE` is 24 on Linux (errno-base.h), which the assertion below names.

fn lookup(host: &str, addrs: &[&str]) -> Arc<dyn HostLookup> {
    Arc::new(StaticLookup {
        hosts: vec![(
            host.to_owned(),
            addrs.iter().map(|a| a.parse().unwrap()).collect(),
        )],
    })
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

/// A listener on `ip:port` that never accepts, with its one accept slot taken: every
/// further SYN is dropped. Returned with the connection holding the slot (keep both).
async fn black_hole(ip: Ipv4Addr, port: u16) -> (TcpListener, TcpStream) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(IpAddr::V4(ip), port)).unwrap();
    let listener = socket.listen(0).unwrap();
    let filler = TcpStream::connect((ip, port)).await.unwrap();
    // It is a black hole: a connect neither completes nor fails.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), TcpStream::connect((ip, port)))
            .await
            .is_err(),
        "{ip}:{port} should swallow SYNs on this machine"
    );
    (listener, filler)
}

// ---- Item 3: one dead address hides the live one ------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item3_e2e_a_black_holed_first_address_does_not_hide_the_live_one() {
    let receiver = Receiver::start().await.expect("receiver");
    receiver.set("/hook", Behavior::Always(Reply::status(200)));
    let port = receiver.addr().port();
    let (_hole, _filler) = black_hole(Ipv4Addr::new(127, 0, 0, 2), port).await;
    let (local, _rx, _handoffs) = deployment_recording(
        "f-eyeballs",
        LocalOptions {
            time_scale: 0.001,
            lookup: Some(lookup("two.test", &["127.0.0.2", "127.0.0.1"])),
            allow_destinations: vec!["127.0.0.0/8".into()],
            console_port: None,
            ..LocalOptions::default()
        },
    )
    .await;
    // 3 s: sequential connects would spend all of it on the black-holed address.
    let ep = add_endpoint_with_timeout(
        &local,
        "tnt_eyeballs",
        &format!("http://two.test:{port}/hook"),
        Some(3),
        3_000,
    )
    .await;
    let id = publish(&local, "order.paid", "tnt_eyeballs", r#"{"he":1}"#).await;
    assert!(history_reaches(&local, "tnt_eyeballs", &id, 1, Duration::from_secs(30)).await);
    let h = attempts_of(&local, &id, &ep).await;
    assert_eq!(
        (h[0].attempt, h[0].status, h[0].outcome.as_str()),
        (1, Some(200), "delivered"),
        "{h:#?}"
    );
    assert_eq!(receiver.requests("/hook").len(), 1);
}

// ---- Item 2: our file descriptors ---------------------------------------------------

/// Set in the child process this test re-runs itself in.
const EMFILE_CHILD: &str = "TERN_TEST_EMFILE_CHILD";

/// Lowers this process's `RLIMIT_NOFILE` to the descriptors it has open and fills every
/// free slot below it, so the next `socket(2)` fails with `EMFILE`.
fn exhaust_file_descriptors() -> Vec<std::fs::File> {
    let highest = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
        .max()
        .unwrap_or(2);
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own; setrlimit reads it and changes
    // only this (child) process's limit.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = highest + 1;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
    let mut held = Vec::new();
    while let Ok(f) = std::fs::File::open("/dev/null") {
        held.push(f);
    }
    held
}

#[tokio::test]
async fn item2_a_connect_failing_for_lack_of_file_descriptors_is_ours() {
    if std::env::var_os(EMFILE_CHILD).is_some() {
        // The child: a live receiver, then no descriptor left for the connection to it.
        let live = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = live.local_addr().unwrap().port();
        let client = DeliveryClient::new(ClientOptions {
            policy: DestinationPolicy {
                https_only: false,
                allow: vec!["127.0.0.1/32".parse().unwrap()],
                nat64: false,
            },
            lookup: no_dns(),
            ..ClientOptions::default()
        })
        .unwrap();
        let _held = exhaust_file_descriptors();
        let r = post(
            &client,
            &format!("http://127.0.0.1:{port}/hook"),
            Duration::from_secs(5),
        )
        .await;
        drop(_held);
        match r {
            AttemptResult::Failed { class, detail } => println!("RESULT class={class} {detail}"),
            other => println!("RESULT {other:?}"),
        }
        return;
    }
    // The parent: the same test alone in a child process (the limit is per process, and
    // this one runs other tests in parallel).
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "item2_a_connect_failing_for_lack_of_file_descriptors_is_ours",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(EMFILE_CHILD, "1")
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // libtest prints the test's name on the same line before the test's own output.
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r))
        .unwrap_or_else(|| panic!("the child reported nothing: {stdout}"));
    assert!(
        line.starts_with("class=local_resource") && line.contains("os error 24"),
        "{line}"
    );
}

// ---- Item 5: DNS64 / NAT64 ----------------------------------------------------------

/// A public IPv4 (never contacted: the stand-in gateway carries it to 127.0.0.1) in the
/// NAT64 well-known prefix, as a DNS64 resolver answers for an IPv4-only name.
const NAT64_OF_PUBLIC: &str = "64:ff9b::5db8:d70e";

#[tokio::test]
async fn item5_client_a_nat64_answer_is_judged_by_its_ipv4_only_with_the_setting_on() {
    let receiver = Receiver::start().await.expect("receiver");
    receiver.set("/hook", Behavior::Always(Reply::status(200)));
    let url = format!("http://v4only.test:{}/hook", receiver.addr().port());
    let client = |nat64| {
        tern_http::test_support::client_behind_loopback_nat64(ClientOptions {
            policy: DestinationPolicy {
                https_only: false,
                allow: vec![],
                nat64,
            },
            lookup: lookup("v4only.test", &[NAT64_OF_PUBLIC]),
            ..ClientOptions::default()
        })
        .unwrap()
    };

    let off = post(&client(false), &url, Duration::from_secs(5)).await;
    assert!(
        matches!(&off, AttemptResult::Failed { class: ErrorClass::Blocked, detail } if detail.contains("NAT64")),
        "{off:?}"
    );
    assert!(receiver.requests("/hook").is_empty(), "never contacted");

    let on = post(&client(true), &url, Duration::from_secs(5)).await;
    assert!(
        matches!(on, AttemptResult::Response { status: 200, .. }),
        "{on:?}"
    );
    assert_eq!(receiver.requests("/hook").len(), 1);

    // The NAT64 form of a private or metadata address stays blocked with the setting on.
    for (name, denied) in [
        ("metadata.test", "64:ff9b::a9fe:a9fe"),
        ("private.test", "64:ff9b::a00:5"),
        ("loopback.test", "64:ff9b::7f00:1"),
    ] {
        let c = tern_http::test_support::client_behind_loopback_nat64(ClientOptions {
            policy: DestinationPolicy {
                https_only: false,
                allow: vec![],
                nat64: true,
            },
            lookup: lookup(name, &[denied]),
            ..ClientOptions::default()
        })
        .unwrap();
        let r = post(
            &c,
            &format!("http://{name}:{}/hook", receiver.addr().port()),
            Duration::from_secs(5),
        )
        .await;
        assert!(
            matches!(
                &r,
                AttemptResult::Failed {
                    class: ErrorClass::Blocked,
                    ..
                }
            ),
            "{name}: {r:?}"
        );
    }
    assert_eq!(receiver.requests("/hook").len(), 1, "no more contact");
}
