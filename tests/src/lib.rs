//! Test harness: one moto server per test process (started here, killed when the process
//! ends), a fresh prefixed deployment per test, endpoint and event helpers, and waiting.

use std::sync::OnceLock;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use chrono::Utc;
use tern_core::endpoint::EndpointSecret;
use tern_core::{Endpoint, EndpointId, EventId, RetrySchedule, Secret, TenantId};
use tern_local::local::{LocalOptions, LocalTern};
use tern_local::pollers::LocalEvent;
use tern_outbox::OutboxWriter;
use tokio::sync::mpsc::UnboundedReceiver;

pub use tern_local::receiver::{Behavior, Captured, Receiver, Reply};

static MOTO_URL: OnceLock<Result<String, String>> = OnceLock::new();

/// URL of the moto server for this test process: `$TERN_MOTO_URL` if set, else one
/// started from the project's venv. Panics with a clear message when moto cannot start:
/// an integration test never skips silently.
pub fn moto_url() -> String {
    MOTO_URL
        .get_or_init(|| {
            if let Ok(url) = std::env::var("TERN_MOTO_URL") {
                return Ok(url);
            }
            start_moto()
        })
        .clone()
        .unwrap_or_else(|e| panic!("moto (the local AWS) is required for this test and could not start: {e}"))
}

fn start_moto() -> Result<String, String> {
    use std::os::unix::process::CommandExt;
    let path = tern_local::moto::find_moto_server().map_err(|e| e.to_string())?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let (tx, rx) = std::sync::mpsc::channel();
    // The child is spawned from a thread that lives as long as the process, with
    // PR_SET_PDEATHSIG, so moto dies with the test process even on a panic.
    std::thread::spawn(move || {
        let mut cmd = std::process::Command::new(&path);
        cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .env("MOTO_PORT", port.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        match cmd.spawn() {
            Ok(mut child) => {
                let _ = tx.send(Ok(()));
                let _ = child.wait();
            }
            Err(e) => {
                let _ = tx.send(Err(format!("{}: {e}", path.display())));
            }
        }
    });
    rx.recv().map_err(|e| e.to_string())??;
    let url = format!("http://127.0.0.1:{port}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("moto_server did not listen on {url} within 30 s"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Step Functions execution must be on before any state machine is created.
    let body = r#"{"stepfunctions":{"execute_state_machine":true}}"#;
    let request = format!(
        "POST /moto-api/config HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    if !(answer.starts_with("HTTP/1.1 20") || answer.starts_with("HTTP/1.0 20")) {
        return Err(format!("moto config call failed: {}", answer.lines().next().unwrap_or("")));
    }
    Ok(url)
}

/// A unique resource prefix for one test.
pub fn prefix(test: &str) -> String {
    format!("t{}-{}-", uuid_fragment(), test.replace('_', "-"))
}

fn uuid_fragment() -> String {
    EventId::generate().as_str()[20..].to_owned()
}

/// A fresh deployment on the shared moto, with pollers running.
pub async fn deployment(test: &str, mut options: LocalOptions) -> (LocalTern, UnboundedReceiver<LocalEvent>) {
    options.prefix = prefix(test);
    let aws = tern_local::moto::sdk_config_for(&moto_url()).await;
    let mut local = LocalTern::create(aws, &options).await.expect("local deployment");
    let rx = local.start_pollers(&options);
    (local, rx)
}

/// A fresh deployment without pollers (handler-level tests drive the handlers).
pub async fn deployment_without_pollers(test: &str, mut options: LocalOptions) -> LocalTern {
    options.prefix = prefix(test);
    let aws = tern_local::moto::sdk_config_for(&moto_url()).await;
    LocalTern::create(aws, &options).await.expect("local deployment")
}

/// Registers an endpoint with a new secret; returns it.
pub async fn add_endpoint(local: &LocalTern, tenant: &str, url: &str, types: &[&str], max_attempts: Option<u32>) -> Endpoint {
    add_endpoint_with(local, EndpointId::generate(), tenant, url, types, max_attempts, None).await
}

/// Registers an endpoint with a chosen id and optional schedule.
pub async fn add_endpoint_with(
    local: &LocalTern,
    id: EndpointId,
    tenant: &str,
    url: &str,
    types: &[&str],
    max_attempts: Option<u32>,
    schedule: Option<RetrySchedule>,
) -> Endpoint {
    let endpoint = Endpoint {
        id,
        tenant_id: TenantId::new(tenant).expect("tenant"),
        url: url.to_owned(),
        event_types: types.iter().map(|s| (*s).to_owned()).collect(),
        secrets: vec![EndpointSecret {
            secret: Secret::generate(),
            created_at: Utc::now(),
            expires_at: None,
        }],
        enabled: true,
        disabled_reason: None,
        timeout_ms: None,
        schedule,
        max_attempts,
        description: None,
        created_at: Utc::now(),
    };
    endpoint.validate().expect("valid endpoint");
    tern_core::ports::EndpointStore::put(local.sender.endpoints.as_ref(), &endpoint).await.expect("put endpoint");
    endpoint
}

/// Writes an event through the outbox writer in one transaction with a business item (an
/// order row in the endpoints table's neighbour: the outbox table itself holds a
/// non-outbox item, as in a single-table design). Returns the event id.
pub async fn publish(local: &LocalTern, event_type: &str, tenant: &str, payload: &str) -> EventId {
    let writer = OutboxWriter::new(&local.resources.outbox_table);
    let prepared = writer.prepare(event_type, tenant, payload).expect("valid event");
    let business = Put::builder()
        .table_name(&local.resources.outbox_table)
        .item("event_id", AttributeValue::S(format!("order#{}", prepared.event.id)))
        .item("kind", AttributeValue::S("order".into()))
        .item("status", AttributeValue::S("paid".into()))
        .build()
        .expect("put");
    local
        .dynamodb()
        .transact_write_items()
        .transact_items(TransactWriteItem::builder().put(business).build())
        .transact_items(prepared.transact_item().expect("outbox put"))
        .send()
        .await
        .expect("transaction");
    prepared.event.id
}

/// Polls `check` every 50 ms until it returns true or `limit` passes; returns the last
/// result.
pub async fn eventually(limit: Duration, mut check: impl AsyncFnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Messages currently in a queue, read without consuming them (received then released).
pub async fn peek_queue(local: &LocalTern, url: &str) -> Vec<String> {
    let sqs = local.sqs();
    let mut bodies = Vec::new();
    let mut handles = Vec::new();
    loop {
        let out = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(30)
            .send()
            .await
            .expect("receive");
        let msgs = out.messages.unwrap_or_default();
        if msgs.is_empty() {
            break;
        }
        for m in msgs {
            bodies.push(m.body.unwrap_or_default());
            handles.push(m.receipt_handle.unwrap_or_default());
        }
    }
    for h in handles {
        let _ = sqs.change_message_visibility().queue_url(url).receipt_handle(h).visibility_timeout(0).send().await;
    }
    bodies
}

/// Verifies a captured request with the reference `standardwebhooks` crate over the
/// received bytes.
pub fn verify_reference(secret: &Secret, request: &Captured) -> Result<(), String> {
    let wh = standardwebhooks::Webhook::new(secret.expose()).map_err(|e| format!("{e:?}"))?;
    let mut headers = http::HeaderMap::new();
    for (n, v) in &request.headers {
        if let (Ok(n), Ok(v)) = (http::HeaderName::try_from(n.as_str()), http::HeaderValue::try_from(v.as_str())) {
            headers.append(n, v);
        }
    }
    wh.verify(&request.body, &headers).map_err(|e| format!("{e:?}"))
}
