//! Test harness: one moto server per test process (started here, killed when the process
//! ends), a fresh prefixed deployment per test, endpoint and event helpers, and waiting.

use std::sync::OnceLock;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use chrono::Utc;
use tern_core::{Endpoint, EndpointId, EventId, PayloadFormat, RetrySchedule, Secret, TenantId};
use tern_local::local::{LocalOptions, LocalTern};
use tern_local::pollers::LocalEvent;
use tern_outbox::OutboxWriter;
use tokio::sync::mpsc::UnboundedReceiver;

pub use tern_local::receiver::{Behavior, Captured, Receiver, Reply};

pub mod api;
pub mod fault_proxy;
pub mod portal;
pub mod postgres;

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
        .unwrap_or_else(|e| {
            panic!("moto (the local AWS) is required for this test and could not start: {e}")
        })
}

fn start_moto() -> Result<String, String> {
    use std::os::unix::process::CommandExt;
    let moto = tern_local::moto::find_moto_server().map_err(|e| e.to_string())?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let (tx, rx) = std::sync::mpsc::channel();
    // The child is spawned from a thread that lives as long as the process, with
    // PR_SET_PDEATHSIG, so moto dies with the test process even on a panic.
    std::thread::spawn(move || {
        let mut cmd = std::process::Command::new(&moto.program);
        cmd.args(&moto.args)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
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
                let _ = tx.send(Err(format!("{}: {e}", moto.program.display())));
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
        return Err(format!(
            "moto config call failed: {}",
            answer.lines().next().unwrap_or("")
        ));
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
pub async fn deployment(
    test: &str,
    options: LocalOptions,
) -> (LocalTern, UnboundedReceiver<LocalEvent>) {
    let aws = tern_local::moto::sdk_config_for(&moto_url()).await;
    with_pollers(create(aws, test, options.clone()).await, &options)
}

/// A fresh deployment without pollers (handler-level tests drive the handlers).
pub async fn deployment_without_pollers(test: &str, options: LocalOptions) -> LocalTern {
    let aws = tern_local::moto::sdk_config_for(&moto_url()).await;
    create(aws, test, options).await
}

/// A fresh deployment on the shared moto whose AWS clients (handlers, pollers, and the
/// resources' creation) all go through `proxy`, with pollers running.
pub async fn deployment_through(
    proxy: &fault_proxy::FaultProxy,
    test: &str,
    options: LocalOptions,
) -> (LocalTern, UnboundedReceiver<LocalEvent>) {
    with_pollers(
        create(proxy.sdk_config().await, test, options.clone()).await,
        &options,
    )
}

/// [`deployment_through`] without pollers (handler-level tests drive the handlers).
pub async fn deployment_through_without_pollers(
    proxy: &fault_proxy::FaultProxy,
    test: &str,
    options: LocalOptions,
) -> LocalTern {
    create(proxy.sdk_config().await, test, options).await
}

/// A fault proxy in front of this process's moto, with no rules yet.
pub async fn moto_proxy() -> fault_proxy::FaultProxy {
    fault_proxy::FaultProxy::start(&moto_url())
        .await
        .expect("fault proxy on 127.0.0.1")
}

async fn create(aws: aws_config::SdkConfig, test: &str, mut options: LocalOptions) -> LocalTern {
    options.prefix = prefix(test);
    LocalTern::create(aws, &options)
        .await
        .expect("local deployment")
}

fn with_pollers(
    mut local: LocalTern,
    options: &LocalOptions,
) -> (LocalTern, UnboundedReceiver<LocalEvent>) {
    let rx = local.start_pollers(options);
    (local, rx)
}

/// Registers an endpoint with a new secret; returns it.
pub async fn add_endpoint(
    local: &LocalTern,
    tenant: &str,
    url: &str,
    types: &[&str],
    max_attempts: Option<u32>,
) -> Endpoint {
    add_endpoint_with(
        local,
        EndpointId::generate(),
        tenant,
        url,
        types,
        max_attempts,
        None,
    )
    .await
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
    let mut endpoint = Endpoint::new(
        id,
        TenantId::new(tenant).expect("tenant"),
        url,
        types.iter().map(|s| (*s).to_owned()).collect(),
        Secret::generate(),
        Utc::now(),
    );
    endpoint.schedule = schedule;
    endpoint.max_attempts = max_attempts;
    endpoint.validate().expect("valid endpoint");
    tern_core::ports::EndpointStore::put(local.sender.endpoints.as_ref(), &endpoint)
        .await
        .expect("put endpoint");
    endpoint
}

/// Sets an endpoint's request body format, as `tern endpoints update --payload-format` does.
pub async fn set_payload_format(local: &LocalTern, endpoint: &Endpoint, format: PayloadFormat) {
    let update = tern_core::endpoint::EndpointUpdate {
        payload_format: Some(format),
        ..Default::default()
    };
    tern_core::ports::EndpointStore::update(
        local.sender.endpoints.as_ref(),
        &endpoint.tenant_id,
        &endpoint.id,
        &update,
    )
    .await
    .expect("update endpoint");
}

/// Writes an event through the outbox writer in one transaction with a business item (an
/// order row in the endpoints table's neighbour: the outbox table itself holds a
/// non-outbox item, as in a single-table design). Returns the event id.
pub async fn publish(local: &LocalTern, event_type: &str, tenant: &str, payload: &str) -> EventId {
    publish_event(local, event_type, tenant, payload).await.id
}

/// As [`publish`], returning the whole event as written (its `created_at` too).
pub async fn publish_event(
    local: &LocalTern,
    event_type: &str,
    tenant: &str,
    payload: &str,
) -> tern_core::Event {
    let writer = OutboxWriter::new(&local.resources.outbox_table);
    let prepared = writer
        .prepare(event_type, tenant, payload)
        .expect("valid event");
    let business = Put::builder()
        .table_name(&local.resources.outbox_table)
        .item(
            "event_id",
            AttributeValue::S(format!("order#{}", prepared.event.id)),
        )
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
    prepared.event
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
    let queue = tern_aws::SqsQueue::new(local.sqs(), url);
    tern_local::ops::peek(&queue, usize::MAX)
        .await
        .expect("peek")
        .into_iter()
        .map(|m| m.body)
        .collect()
}

/// Waits until the attempt log of `tenant`'s `event` holds at least `n` rows, or `limit`
/// passes.
pub async fn history_reaches(
    local: &LocalTern,
    tenant: &str,
    event: &EventId,
    n: usize,
    limit: Duration,
) -> bool {
    let tenant = TenantId::new(tenant).expect("tenant");
    eventually(limit, async || {
        local
            .sender
            .ledger
            .history(&tenant, event)
            .await
            .map(|h| h.len() >= n)
            .unwrap_or(false)
    })
    .await
}

/// Verifies a captured request with the reference `standardwebhooks` crate over the
/// received bytes.
pub fn verify_reference(secret: &Secret, request: &Captured) -> Result<(), String> {
    let wh = standardwebhooks::Webhook::new(secret.expose()).map_err(|e| format!("{e:?}"))?;
    let mut headers = http::HeaderMap::new();
    for (n, v) in &request.headers {
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::try_from(n.as_str()),
            http::HeaderValue::try_from(v.as_str()),
        ) {
            headers.append(n, v);
        }
    }
    wh.verify(&request.body, &headers)
        .map_err(|e| format!("{e:?}"))
}

/// Every message the sender hands to the delivery queue or the delay scheduler, in order.
/// Recorded by wrapper ports around the real adapters, so a test can prove that no
/// SendMessage carries a `DelaySeconds` outside 0-900 and that long waits went to Step
/// Functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handoff {
    /// SendMessage on the delivery queue.
    Queue {
        /// Attempt number of the message sent.
        attempt: u32,
        /// Its `DelaySeconds`, seconds.
        delay_seconds: u32,
    },
    /// A Step Functions wait.
    StepFunctions {
        /// Attempt number of the message scheduled.
        attempt: u32,
        /// The Wait state's seconds (real, after time scaling).
        wait_seconds: u64,
    },
}

/// Shared log of [`Handoff`]s.
pub type HandoffLog = std::sync::Arc<std::sync::Mutex<Vec<Handoff>>>;

/// A [`tern_core::ports::MessageQueue`] that records each entry's delay, then forwards.
pub struct RecordingQueue {
    /// The real queue.
    pub inner: std::sync::Arc<dyn tern_core::ports::MessageQueue>,
    /// Where records go.
    pub log: HandoffLog,
}

fn attempt_of(body: &str) -> u32 {
    tern_core::DeliveryMessage::parse(body)
        .map(|m| m.attempt)
        .unwrap_or(0)
}

#[async_trait::async_trait]
impl tern_core::ports::MessageQueue for RecordingQueue {
    async fn send_batch(
        &self,
        entries: &[tern_core::ports::QueueEntry],
    ) -> Result<Vec<Result<(), tern_core::ports::PortError>>, tern_core::ports::PortError> {
        for e in entries {
            self.log.lock().unwrap().push(Handoff::Queue {
                attempt: attempt_of(&e.body),
                delay_seconds: e.delay_seconds,
            });
        }
        self.inner.send_batch(entries).await
    }

    async fn send(
        &self,
        entry: &tern_core::ports::QueueEntry,
    ) -> Result<(), tern_core::ports::PortError> {
        self.log.lock().unwrap().push(Handoff::Queue {
            attempt: attempt_of(&entry.body),
            delay_seconds: entry.delay_seconds,
        });
        self.inner.send(entry).await
    }

    /// Forwarded unrecorded: a changed visibility hands nothing over.
    async fn change_visibility(
        &self,
        entries: &[tern_core::ports::VisibilityChange],
    ) -> Result<Vec<Result<(), tern_core::ports::PortError>>, tern_core::ports::PortError> {
        self.inner.change_visibility(entries).await
    }
}

/// A [`tern_core::ports::DelayScheduler`] that records each wait, then forwards.
pub struct RecordingScheduler {
    /// The real scheduler (Step Functions on moto).
    pub inner: std::sync::Arc<dyn tern_core::ports::DelayScheduler>,
    /// Where records go.
    pub log: HandoffLog,
}

#[async_trait::async_trait]
impl tern_core::ports::DelayScheduler for RecordingScheduler {
    async fn schedule(
        &self,
        message: &tern_core::DeliveryMessage,
        wait_seconds: u64,
    ) -> Result<(), tern_core::ports::PortError> {
        self.log.lock().unwrap().push(Handoff::StepFunctions {
            attempt: message.attempt,
            wait_seconds,
        });
        self.inner.schedule(message, wait_seconds).await
    }
}

/// A name resolver that knows no names: any host name fails with a `dns` error class and
/// no test ever queries the system's DNS. IP-literal URLs (the loopback receivers) are
/// not looked up at all.
pub fn no_dns() -> std::sync::Arc<dyn tern_http::HostLookup> {
    std::sync::Arc::new(tern_http::StaticLookup::default())
}

/// A fresh deployment whose sender hands retries to recording wrappers around the real
/// delivery queue and Step Functions scheduler; pollers running. Also uses [`no_dns`]
/// unless `options.lookup` is set.
pub async fn deployment_recording(
    test: &str,
    mut options: LocalOptions,
) -> (LocalTern, UnboundedReceiver<LocalEvent>, HandoffLog) {
    use std::sync::Arc;
    if options.lookup.is_none() {
        options.lookup = Some(no_dns());
    }
    let mut local = deployment_without_pollers(test, options.clone()).await;
    let log = HandoffLog::default();
    let s = &local.sender;
    let deps = tern_handlers::sender::SenderDeps {
        endpoints: s.endpoints.clone(),
        ledger: s.ledger.clone(),
        delivery_queue: Arc::new(RecordingQueue {
            inner: s.delivery_queue.clone(),
            log: log.clone(),
        }),
        dlq: s.dlq.clone(),
        scheduler: s.scheduler.clone().map(|inner| {
            Arc::new(RecordingScheduler {
                inner,
                log: log.clone(),
            }) as Arc<dyn tern_core::ports::DelayScheduler>
        }),
        client: s.client.clone(),
        policy: s.policy.clone(),
        breaker: s.breaker.clone(),
    };
    local.sender = Arc::new(deps);
    let rx = local.start_pollers(&options);
    (local, rx, log)
}

/// Asserts the delay invariant over a [`HandoffLog`]: every SendMessage carries a
/// `DelaySeconds` in 0..=900.
pub fn assert_queue_delays_in_range(log: &HandoffLog) {
    for h in log.lock().unwrap().iter() {
        if let Handoff::Queue { delay_seconds, .. } = h {
            assert!(
                *delay_seconds <= tern_core::retry::MAX_QUEUE_DELAY_SECONDS,
                "SendMessage with DelaySeconds {delay_seconds}: {h:?}"
            );
        }
    }
}

/// Registers an endpoint with its own attempt deadline (milliseconds).
pub async fn add_endpoint_with_timeout(
    local: &LocalTern,
    tenant: &str,
    url: &str,
    max_attempts: Option<u32>,
    timeout_ms: u64,
) -> Endpoint {
    let mut endpoint = add_endpoint(local, tenant, url, &["*"], max_attempts).await;
    endpoint.timeout_ms = Some(timeout_ms);
    endpoint.validate().expect("valid endpoint");
    tern_core::ports::EndpointStore::put(local.sender.endpoints.as_ref(), &endpoint)
        .await
        .expect("put endpoint");
    endpoint
}

/// The DLQ's messages, parsed.
pub async fn dead_letters(local: &LocalTern) -> Vec<tern_core::DeliveryMessage> {
    peek_queue(local, &local.resources.dlq_url.clone())
        .await
        .iter()
        .map(|b| tern_core::DeliveryMessage::parse(b).expect("delivery message in the DLQ"))
        .collect()
}

/// Moves every DLQ message to the delivery queue byte for byte, as the SQS console's
/// "start DLQ redrive" does (StartMessageMoveTask is not in moto). Returns how many.
pub async fn console_redrive(local: &LocalTern) -> usize {
    let sqs = local.sqs();
    let mut moved = 0;
    loop {
        let out = sqs
            .receive_message()
            .queue_url(&local.resources.dlq_url)
            .max_number_of_messages(10)
            .visibility_timeout(30)
            .send()
            .await
            .expect("receive from the DLQ");
        let msgs = out.messages.unwrap_or_default();
        if msgs.is_empty() {
            return moved;
        }
        for m in msgs {
            sqs.send_message()
                .queue_url(&local.resources.delivery_queue_url)
                .message_body(m.body.unwrap_or_default())
                .send()
                .await
                .expect("send to the delivery queue");
            sqs.delete_message()
                .queue_url(&local.resources.dlq_url)
                .receipt_handle(m.receipt_handle.unwrap_or_default())
                .send()
                .await
                .expect("delete from the DLQ");
            moved += 1;
        }
    }
}

/// In-memory stand-ins for the ports, for handler-level tests that need no AWS: the
/// relay and sender run unchanged over them.
pub mod fakes {
    use std::sync::Mutex;

    use async_trait::async_trait;
    use chrono::{DateTime, Utc};
    use tern_core::ports::{
        AttemptRecord, Claim, DeliveryLedger, DeliveryState, EndpointStore, MessageQueue,
        PortError, QueueEntry,
    };
    use tern_core::{DeliveryMessage, Endpoint, EndpointId, EventId, TenantId};

    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A queue that keeps what it is sent.
    #[derive(Default)]
    pub struct MemQueue {
        entries: Mutex<Vec<QueueEntry>>,
    }

    impl MemQueue {
        /// Everything sent so far.
        pub fn entries(&self) -> Vec<QueueEntry> {
            lock(&self.entries).clone()
        }
    }

    #[async_trait]
    impl MessageQueue for MemQueue {
        async fn send_batch(
            &self,
            entries: &[QueueEntry],
        ) -> Result<Vec<Result<(), PortError>>, PortError> {
            lock(&self.entries).extend(entries.iter().cloned());
            Ok(entries.iter().map(|_| Ok(())).collect())
        }
        async fn send(&self, entry: &QueueEntry) -> Result<(), PortError> {
            lock(&self.entries).push(entry.clone());
            Ok(())
        }
    }

    /// An endpoint registry in a vector.
    #[derive(Default)]
    pub struct MemEndpoints {
        /// The endpoints.
        pub endpoints: Mutex<Vec<Endpoint>>,
    }

    #[async_trait]
    impl EndpointStore for MemEndpoints {
        async fn get(
            &self,
            tenant: &TenantId,
            id: &EndpointId,
        ) -> Result<Option<Endpoint>, PortError> {
            Ok(lock(&self.endpoints)
                .iter()
                .find(|e| &e.tenant_id == tenant && &e.id == id)
                .cloned())
        }
        async fn list_for_tenant(&self, tenant: &TenantId) -> Result<Vec<Endpoint>, PortError> {
            Ok(lock(&self.endpoints)
                .iter()
                .filter(|e| &e.tenant_id == tenant)
                .cloned()
                .collect())
        }
        async fn list_all(&self) -> Result<Vec<Endpoint>, PortError> {
            Ok(lock(&self.endpoints).clone())
        }
        async fn put(&self, endpoint: &Endpoint) -> Result<(), PortError> {
            let mut g = lock(&self.endpoints);
            g.retain(|e| !(e.tenant_id == endpoint.tenant_id && e.id == endpoint.id));
            g.push(endpoint.clone());
            Ok(())
        }
        async fn disable(
            &self,
            tenant: &TenantId,
            id: &EndpointId,
            reason: &str,
        ) -> Result<(), PortError> {
            for e in lock(&self.endpoints)
                .iter_mut()
                .filter(|e| &e.tenant_id == tenant && &e.id == id)
            {
                e.enabled = false;
                e.disabled_reason = Some(reason.to_owned());
            }
            Ok(())
        }
        async fn set_secrets(
            &self,
            tenant: &TenantId,
            id: &EndpointId,
            secrets: &[tern_core::endpoint::EndpointSecret],
        ) -> Result<(), PortError> {
            let mut g = lock(&self.endpoints);
            let e = g
                .iter_mut()
                .find(|e| &e.tenant_id == tenant && &e.id == id)
                .ok_or_else(|| PortError::Rejected(format!("endpoint {id} does not exist")))?;
            e.secrets = secrets.to_vec();
            Ok(())
        }
    }

    /// A ledger that grants every claim and keeps the attempt log.
    #[derive(Default)]
    pub struct MemLedger {
        attempts: Mutex<Vec<AttemptRecord>>,
    }

    #[async_trait]
    impl DeliveryLedger for MemLedger {
        async fn claim(
            &self,
            _message: &DeliveryMessage,
            _lease_until: DateTime<Utc>,
        ) -> Result<Claim, PortError> {
            Ok(Claim::Granted)
        }
        async fn finish(
            &self,
            _message: &DeliveryMessage,
            _state: DeliveryState,
        ) -> Result<(), PortError> {
            Ok(())
        }
        /// Nothing to give up: every claim is granted.
        async fn release(
            &self,
            _message: &DeliveryMessage,
            _takeover: u32,
            _due_at: DateTime<Utc>,
        ) -> Result<(), PortError> {
            Ok(())
        }
        async fn record_attempt(
            &self,
            _message: &DeliveryMessage,
            record: &AttemptRecord,
        ) -> Result<(), PortError> {
            lock(&self.attempts).push(record.clone());
            Ok(())
        }
        async fn history(
            &self,
            _tenant: &TenantId,
            event: &EventId,
        ) -> Result<Vec<AttemptRecord>, PortError> {
            Ok(lock(&self.attempts)
                .iter()
                .filter(|a| &a.event_id == event)
                .cloned()
                .collect())
        }
    }
}

/// A TCP listener on a loopback address that accepts and counts connections, then drops
/// them. Stands in for a destination that must never be reached.
pub struct CountingListener {
    /// The address it listens on.
    pub addr: std::net::SocketAddr,
    count: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl CountingListener {
    /// Listens on `ip` (a loopback address) on a free port.
    pub async fn start(ip: std::net::IpAddr) -> std::io::Result<Self> {
        assert!(ip.is_loopback(), "counting listeners stay on this machine");
        let listener = tokio::net::TcpListener::bind((ip, 0)).await?;
        let addr = listener.local_addr()?;
        let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let c = count.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                drop(stream);
            }
        });
        Ok(Self { addr, count, task })
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.count.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for CountingListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Everything logged through `tracing` (and the `log` crate) by this test process, at
/// TRACE level for every target, once [`capture_logs`] has been called.
#[derive(Clone, Default)]
pub struct LogBuffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl LogBuffer {
    /// The captured text so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(
            &self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
        .into_owned()
    }
}

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogBuffer {
    type Writer = LogBuffer;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

static LOGS: OnceLock<LogBuffer> = OnceLock::new();

/// Installs (once per test process) a global subscriber that writes every event of every
/// target at TRACE level, with all fields and spans, into a buffer; returns the buffer.
/// It carries the same [`tern_handlers::logging::guard`] as the Lambda binaries, so it
/// shows what they would log with `RUST_LOG=trace`. Global, not thread-local, so logs of
/// tasks on every runtime thread are caught; `log`-crate records are bridged in too.
pub fn capture_logs() -> LogBuffer {
    LOGS.get_or_init(|| {
        use tracing_subscriber::layer::SubscriberExt as _;
        use tracing_subscriber::util::SubscriberInitExt as _;
        let buffer = LogBuffer::default();
        tracing_subscriber::registry()
            .with(tern_handlers::logging::guard())
            .with(tracing_subscriber::filter::LevelFilter::TRACE)
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(buffer.clone())
                    .with_ansi(false),
            )
            .try_init()
            .expect("no other global subscriber in this test process");
        buffer
    })
    .clone()
}

/// Reads a fixture from the repo's `events/` folder.
pub fn fixture(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../events")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()))
}

/// Reads a fixture as JSON.
pub fn fixture_json(name: &str) -> serde_json::Value {
    serde_json::from_str(&fixture(name))
        .unwrap_or_else(|e| panic!("fixture {name} is not JSON: {e}"))
}

/// The attempt log of one endpoint for one event (of the endpoint's tenant), in (replay,
/// attempt) order.
pub async fn attempts_of(
    local: &LocalTern,
    event: &EventId,
    endpoint: &Endpoint,
) -> Vec<tern_core::ports::AttemptRecord> {
    let mut h: Vec<tern_core::ports::AttemptRecord> = local
        .sender
        .ledger
        .history(&endpoint.tenant_id, event)
        .await
        .expect("history")
        .into_iter()
        .filter(|r| r.endpoint_id == endpoint.id)
        .collect();
    h.sort_by_key(|r| (r.replay_count, r.attempt));
    h
}

/// A Lambda SQS event carrying `bodies`, message ids `m0`, `m1`, ... (for driving the
/// sender handler directly).
pub fn sqs_event(bodies: &[String]) -> aws_lambda_events::sqs::SqsEvent {
    let records: Vec<serde_json::Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, body)| {
            serde_json::json!({
                "messageId": format!("m{i}"),
                "receiptHandle": format!("h{i}"),
                "body": body,
                "attributes": {},
                "messageAttributes": {},
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:tern-delivery",
                "awsRegion": "us-east-1",
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({ "Records": records })).unwrap()
}

// ---------------------------------------------------------------- v1a, verified apart

/// The repository's venv Python (it has `cryptography`, a dependency of moto and
/// pinned in requirements-dev.txt). Panics with what to do when it is missing.
pub fn python() -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let py = root.join(".venv/bin/python");
    assert!(
        py.is_file(),
        "{} is required (make venv): it verifies v1a with PyPI cryptography",
        py.display()
    );
    py
}

/// Verifies every `v1a` entry of `req` against each of `public_keys` with Python's
/// `cryptography` (Ed25519PublicKey.verify over `id.timestamp.body`, as the Standard
/// Webhooks spec defines the signed content). Returns, per key, whether some entry
/// verified with it.
pub fn verify_v1a_in_python(req: &Captured, public_keys: &[String]) -> Vec<bool> {
    const SCRIPT: &str = r#"
import base64, json, sys
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.exceptions import InvalidSignature
case = json.load(sys.stdin)
content = (case["id"] + "." + case["timestamp"] + ".").encode() + base64.b64decode(case["body"])
entries = [e.split(",", 1) for e in case["signature"].split(" ")]
sigs = [base64.b64decode(s) for (v, s) in entries if v == "v1a"]
out = []
for key in case["keys"]:
    assert key.startswith("whpk_")
    public = Ed25519PublicKey.from_public_bytes(base64.b64decode(key[5:]))
    ok = False
    for sig in sigs:
        try:
            public.verify(sig, content)
            ok = True
        except InvalidSignature:
            pass
    out.append(ok)
print(json.dumps(out))
"#;
    let case = serde_json::json!({
        "id": req.header("webhook-id").expect("id"),
        "timestamp": req.header("webhook-timestamp").expect("timestamp"),
        "signature": req.header("webhook-signature").expect("signature"),
        "body": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &req.body),
        "keys": public_keys,
    });
    let mut child = std::process::Command::new(python())
        .args(["-c", SCRIPT])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python runs");
    use std::io::Write as _;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(case.to_string().as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("python ends");
    assert!(
        out.status.success(),
        "python could not verify (is cryptography installed in .venv?): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("python's answer")
}
