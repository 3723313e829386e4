//! Issue 27, attack 4: local mode is as strict as AWS about who may talk to it.
//!
//! The local API (and the portal it serves) and the operator's console listen on
//! 127.0.0.1, but a page in the operator's browser can reach them through DNS rebinding:
//! its name resolves to 127.0.0.1 and its script sends `Host: <its name>:<port>`. Before
//! the fix every route answered any `Host`: a request signed with the published local keys
//! for `evil.example` created endpoints, and the console's pages (every tenant's dead
//! letters) were readable. Now only a loopback `Host` (127.0.0.1, localhost, [::1]) is
//! served; any other gets a 403 before a route runs.

use std::net::SocketAddr;
use std::time::Duration;

use tern_local::LocalOptions;
use tern_tests::*;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Sends one HTTP/1.1 request to `addr` exactly as written (the `Host` header as given,
/// which a client library might rewrite) and returns the status and the body.
async fn raw_request(addr: SocketAddr, head: &str, body: &[u8]) -> (u16, String) {
    let mut tcp = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::net::TcpStream::connect(addr),
    )
    .await
    .expect("connect in time")
    .expect("connect");
    tcp.write_all(head.as_bytes()).await.expect("write head");
    tcp.write_all(body).await.expect("write body");
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), tcp.read_to_end(&mut answer))
        .await
        .expect("answer in time")
        .expect("read");
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    (status, body)
}

/// A request to the API signed with the published local keys (`.tern/local.env`) for
/// `host`, as a rebinding page's script would sign it.
async fn signed(
    addr: SocketAddr,
    host: &str,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, String) {
    let signed = tern_api::sigv4::sign_request(
        &tern_local::api::local_credentials().remove(0),
        tern_local::api::LOCAL_REGION,
        method,
        path,
        &[("host", host), ("content-type", "application/json")],
        body.as_bytes(),
        std::time::SystemTime::now(),
    )
    .expect("sign");
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (k, v) in signed {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    raw_request(addr, &head, body.as_bytes()).await
}

fn get(host: &str, path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_loopback_host_is_served() {
    let mut local = deployment_without_pollers("local-host", LocalOptions::default()).await;
    let api = local
        .start_api(0, tern_local::api::local_credentials())
        .expect("api");
    let console = local.start_console(0).expect("console");
    let create = r#"{"url":"http://127.0.0.1:9/hook"}"#;
    let path = "/v1/tenants/tnt_rebind/endpoints";

    // A rebinding page: its own name, the right port, a valid signature for it.
    for host in [
        format!("evil.example:{}", api.port()),
        format!("127.0.0.1.nip.io:{}", api.port()),
        "evil.example".to_owned(),
    ] {
        let (status, body) = signed(api, &host, "POST", path, create).await;
        assert_eq!(status, 403, "{host}: {body}");
        assert!(body.contains("loopback"), "{host}: {body}");
        let (status, _) = raw_request(api, &get(&host, "/portal/endpoints"), b"").await;
        assert_eq!(status, 403, "{host}: the portal");
        let (status, body) = raw_request(console, &get(&host, "/widgets/dead_letters"), b"").await;
        assert_eq!(status, 403, "{host}: the console's page: {body}");
    }
    // Nothing was created through them.
    let (status, body) = signed(api, &format!("127.0.0.1:{}", api.port()), "GET", path, "").await;
    assert_eq!(status, 200, "{body}");
    let listed: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(0), "{body}");

    // Each loopback name passes, with and without the port.
    for host in [
        format!("127.0.0.1:{}", api.port()),
        format!("localhost:{}", api.port()),
        format!("[::1]:{}", api.port()),
        "localhost".to_owned(),
    ] {
        let (status, body) = signed(api, &host, "POST", path, create).await;
        assert_eq!(status, 201, "{host}: {body}");
    }
    for host in [
        format!("127.0.0.1:{}", console.port()),
        format!("localhost:{}", console.port()),
    ] {
        let (status, body) = raw_request(console, &get(&host, "/widgets/dead_letters"), b"").await;
        assert_eq!(status, 200, "{host}: {body}");
    }
}
