//! Isolation without the local emulator's ceiling (issue 29, item 7): the noisy-neighbour
//! scenario of the endpoint-health benchmark on in-memory ports with SQS semantics
//! ([`crate::in_memory`]: the real sender handler in up to 20 Lambda-like instances,
//! started as the event source mapping scales), so that what it shows is Tern's
//! behaviour, not moto's ~20-40 deliveries a second.
//!
//! Tenant A's endpoint answers 200 after a small latency and gets [`A_PER_SECOND`]
//! events a second; its latency is from the delivery message's send (what the relay
//! does) to the request's arrival at A's receiver. Per dead-endpoint kind (503, connection
//! refused, an endpoint that never answers), on a fresh deployment: (a) A alone; (d) the
//! control, A next to C, a healthy neighbour with B's traffic (10 x A); (c) B starting,
//! until its circuit is seen open and the instances have learnt it; (b) steady state with
//! B's circuit open, longer than one probe interval. Goal: p95 of (b) <= 1.1 x p95 of (d).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::Serialize;
use tern_core::event::{Event, EventType, Payload};
use tern_core::health::HealthStore;
use tern_core::ports::{EndpointStore, MessageQueue, QueueEntry};
use tern_core::{DeliveryMessage, Endpoint, EndpointId, EventId, Secret, TenantId};

use crate::BoxError;
use crate::in_memory::{InMemoryTern, Tally};

/// Tenant A's events per second.
pub const A_PER_SECOND: u64 = 20;
/// The neighbour's traffic: ten times A's (200 a second).
pub const NEIGHBOUR_FACTOR: u64 = 10;
/// Concurrent sender instances: the stack's `maximumConcurrency` (`infra/settings.json`).
pub const CONCURRENCY: usize = 20;
/// How long A's and C's receivers take to answer, milliseconds.
pub const RECEIVER_LATENCY_MS: u64 = 20;
/// Payload of every event, bytes (the benchmarks' 1 KiB).
const PAYLOAD_BYTES: usize = 1024;
/// Warm-up (connections, caches) before phase (a), not measured, seconds.
const WARM_SECONDS: u64 = 3;
/// Phase (a), A alone, seconds.
const ALONE_SECONDS: u64 = 15;
/// Phase (d), the control, seconds.
const CONTROL_SECONDS: u64 = 25;
/// Longest wait for B's circuit to open, seconds.
const OPEN_LIMIT_SECONDS: u64 = 60;
/// After B's circuit is seen open, still ramp-up, seconds: the POSTs sent before it
/// opened end within the 15 s attempt deadline, and every instance's health cache (5 s)
/// learns of the open circuit.
const SETTLE_SECONDS: u64 = 20;
/// Phase (b), steady state, seconds: more than one probe interval (60 s), so a probe and
/// its held instance are in the sample.
const STEADY_SECONDS: u64 = 65;
/// How long the last of a phase's events may take before they count as missing, seconds.
const DRAIN_SECONDS: u64 = 20;
/// The goal: p95 next to a dead neighbour at most this times the control's.
pub const GOAL: f64 = 1.1;

// ---- receivers ---------------------------------------------------------------------------

/// How a receiver path answers.
#[derive(Debug, Clone, Copy)]
pub enum Answer {
    /// 200 after this many milliseconds.
    Ok(u64),
    /// This status at once (no `Retry-After`: a failure, not backpressure).
    Status(u16),
    /// Never: holds the request until the sender's attempt deadline ends it.
    Hang,
}

#[derive(Default)]
struct PathLog {
    answer: Option<Answer>,
    requests: u64,
    /// First arrival of each `webhook-id`.
    arrivals: HashMap<String, DateTime<Utc>>,
}

type Paths = Arc<Mutex<HashMap<String, PathLog>>>;

/// Receivers on 127.0.0.1, served by a runtime on a thread of its own, so each request is
/// stamped when it arrives rather than when the benchmark's two workers (busy with the 20
/// sender instances) get to it. The thread lives as long as the process.
pub struct Receivers {
    addr: SocketAddr,
    paths: Paths,
}

async fn receive(State(paths): State<Paths>, request: Request) -> StatusCode {
    let at = Utc::now();
    let path = request.uri().path().to_owned();
    let id = request
        .headers()
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let answer = {
        let mut g = paths.lock().unwrap_or_else(PoisonError::into_inner);
        let log = g.entry(path).or_default();
        log.requests += 1;
        if let Some(id) = id {
            log.arrivals.entry(id).or_insert(at);
        }
        log.answer.unwrap_or(Answer::Ok(0))
    };
    match answer {
        Answer::Ok(ms) => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            StatusCode::OK
        }
        Answer::Status(s) => StatusCode::from_u16(s).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
        Answer::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StatusCode::OK
        }
    }
}

impl Receivers {
    /// Starts on a free port of 127.0.0.1.
    ///
    /// # Errors
    /// When the thread, its runtime or the listener cannot start.
    pub fn start() -> Result<Self, BoxError> {
        let paths: Paths = Arc::default();
        let state = paths.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("isolation-receivers".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = tx.send(listener.local_addr());
                    let app = axum::Router::new().fallback(receive).with_state(state);
                    let _ = axum::serve(listener, app).await;
                });
            })?;
        let addr = rx.recv()??;
        Ok(Self { addr, paths })
    }

    /// Sets how `path` answers.
    pub fn set(&self, path: &str, answer: Answer) {
        let mut g = self.paths.lock().unwrap_or_else(PoisonError::into_inner);
        g.entry(path.to_owned()).or_default().answer = Some(answer);
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Requests `path` got so far.
    pub fn requests(&self, path: &str) -> u64 {
        let g = self.paths.lock().unwrap_or_else(PoisonError::into_inner);
        g.get(path).map_or(0, |l| l.requests)
    }

    /// When `id` first arrived at `path`.
    fn arrival(&self, path: &str, id: &str) -> Option<DateTime<Utc>> {
        let g = self.paths.lock().unwrap_or_else(PoisonError::into_inner);
        g.get(path).and_then(|l| l.arrivals.get(id).copied())
    }

    /// How many of `ids` arrived at `path`.
    fn arrived(&self, path: &str, ids: &[(String, DateTime<Utc>)]) -> usize {
        let g = self.paths.lock().unwrap_or_else(PoisonError::into_inner);
        g.get(path).map_or(0, |l| {
            ids.iter()
                .filter(|(id, _)| l.arrivals.contains_key(id))
                .count()
        })
    }
}

/// A URL on 127.0.0.1 where nothing listens: every connection is refused.
fn refused_url() -> Result<String, BoxError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    drop(listener);
    Ok(format!("http://127.0.0.1:{port}/refused"))
}

// ---- load --------------------------------------------------------------------------------

/// How the dead neighbour B is dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
pub enum DeadKind {
    /// Answers `503` at once.
    #[value(name = "503")]
    Status503,
    /// Refuses the connection.
    Refused,
    /// Accepts and never answers: each attempt lasts its 15 s deadline.
    Timeout,
}

impl DeadKind {
    fn text(self) -> &'static str {
        match self {
            Self::Status503 => "503 at once",
            Self::Refused => "connection refused",
            Self::Timeout => "never answers (15 s attempt deadline)",
        }
    }
}

fn endpoint(tenant: &str, url: &str) -> Result<Endpoint, BoxError> {
    Ok(Endpoint::new(
        EndpointId::generate(),
        TenantId::new(tenant)?,
        url,
        vec!["*".into()],
        Secret::generate(),
        Utc::now(),
    ))
}

/// The relay's message for a new event of `endpoint`'s tenant.
fn entry(
    endpoint: &Endpoint,
    payload: &Payload,
    n: usize,
) -> Result<(String, QueueEntry), BoxError> {
    let event = Event {
        id: EventId::generate(),
        event_type: EventType::new("order.paid")?,
        tenant_id: endpoint.tenant_id.clone(),
        created_at: Utc::now(),
        payload: payload.clone(),
        trace: None,
    };
    let id = event.id.to_string();
    let message = DeliveryMessage::first(event, endpoint.id.clone());
    Ok((
        id,
        QueueEntry {
            id: format!("e{n}"),
            body: message.to_body(),
            delay_seconds: 0,
            attributes: vec![],
            group_id: Some(message.group_id()),
        },
    ))
}

/// Writes A's events at [`A_PER_SECOND`], and the neighbour's at ten times that (one
/// `SendMessageBatch` of 10 per A event), keeping its rhythm across calls.
struct Load {
    payload: Payload,
    next: tokio::time::Instant,
}

impl Load {
    fn new() -> Result<Self, BoxError> {
        let text = format!(r#"{{"pad":"{}"}}"#, "x".repeat(PAYLOAD_BYTES - 10));
        Ok(Self {
            payload: Payload::parse(text, PAYLOAD_BYTES * 2)?,
            next: tokio::time::Instant::now(),
        })
    }

    async fn until(
        &mut self,
        tern: &InMemoryTern,
        a: &Endpoint,
        neighbour: Option<&Endpoint>,
        until: Instant,
        a_sent: &mut Vec<(String, DateTime<Utc>)>,
    ) -> Result<usize, BoxError> {
        let tick = Duration::from_millis(1000 / A_PER_SECOND);
        let mut sent = 0;
        while Instant::now() < until {
            let (id, e) = entry(a, &self.payload, 0)?;
            let at = Utc::now();
            tern.queue.send(&e).await?;
            a_sent.push((id, at));
            if let Some(n) = neighbour {
                let batch: Vec<QueueEntry> = (0..NEIGHBOUR_FACTOR as usize)
                    .map(|i| entry(n, &self.payload, i).map(|(_, e)| e))
                    .collect::<Result<_, _>>()?;
                for r in tern.queue.send_batch(&batch).await? {
                    r?;
                    sent += 1;
                }
            }
            self.next += tick;
            tokio::time::sleep_until(self.next).await;
        }
        Ok(sent)
    }
}

// ---- phases ------------------------------------------------------------------------------

/// A's latency in one phase, and what the deployment did meanwhile.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    /// What the phase is.
    pub phase: String,
    /// A's events written.
    pub written: usize,
    /// Of which received.
    pub received: usize,
    /// Median latency, milliseconds (send to arrival at A's receiver).
    pub p50_ms: f64,
    /// 95th percentile (nearest rank), milliseconds.
    pub p95_ms: f64,
    /// 99th percentile, milliseconds.
    pub p99_ms: f64,
    /// Largest, milliseconds.
    pub max_ms: f64,
    /// Length of the phase, seconds.
    pub seconds: f64,
    /// Sender outcomes by tenant and kind during the phase.
    pub tally: Tally,
    /// Probes of open circuits sent during the phase.
    pub probes: u64,
    /// POSTs B's endpoint got during the phase (none counted when it refuses connections).
    pub b_requests: u64,
    /// Delivery queue at the end: visible, in flight, delayed.
    pub queue_end: (usize, usize, usize),
    /// Groups the fair-queue ordering treated as noisy at the end.
    pub noisy: Vec<String>,
    /// Sender instances the mapping had started by the end.
    pub instances: usize,
    /// CPU this process used during the phase (the sender instances, the queue and store
    /// models, the load and the receivers), seconds per second of the phase: what the
    /// phase's traffic costs on this machine, where every sender instance shares its cores.
    pub cpu_per_second: f64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

struct Clock {
    t0: Instant,
    cpu: f64,
    probes: u64,
    b_requests: u64,
}

impl Clock {
    fn start(tern: &InMemoryTern, receivers: &Receivers, b_path: &str) -> Self {
        tern.tally(true);
        Self {
            t0: Instant::now(),
            cpu: crate::cpu_seconds(),
            probes: tern.counts().probes,
            b_requests: receivers.requests(b_path),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn stop(
        self,
        phase: &str,
        tern: &InMemoryTern,
        receivers: &Receivers,
        b_path: &str,
        a_path: &str,
        sent: &[(String, DateTime<Utc>)],
    ) -> Phase {
        let seconds = self.t0.elapsed().as_secs_f64();
        let cpu_per_second = (crate::cpu_seconds() - self.cpu) / seconds.max(1e-9);
        let tally = tern.tally(true);
        let probes = tern.counts().probes - self.probes;
        let b_requests = receivers.requests(b_path) - self.b_requests;
        let q = tern.queue.counts();
        let noisy = tern.queue.noisy_groups();
        // The last of the phase's events may still be on their way.
        let limit = Instant::now() + Duration::from_secs(DRAIN_SECONDS);
        while receivers.arrived(a_path, sent) < sent.len() && Instant::now() < limit {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut v: Vec<f64> = sent
            .iter()
            .filter_map(|(id, at)| {
                receivers
                    .arrival(a_path, id)
                    .map(|r| (r - *at).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e3)
            })
            .collect();
        v.sort_by(f64::total_cmp);
        Phase {
            phase: phase.into(),
            written: sent.len(),
            received: v.len(),
            p50_ms: percentile(&v, 0.50),
            p95_ms: percentile(&v, 0.95),
            p99_ms: percentile(&v, 0.99),
            max_ms: v.last().copied().unwrap_or(f64::NAN),
            seconds,
            tally,
            probes,
            b_requests,
            queue_end: (q.visible, q.in_flight, q.delayed),
            noisy,
            instances: tern.instances(),
            cpu_per_second,
        }
    }
}

/// One dead-endpoint kind's run.
#[derive(Debug, Clone, Serialize)]
pub struct IsolationRun {
    /// How B is dead.
    pub dead: DeadKind,
    /// (a), (d), (b), (c).
    pub phases: Vec<Phase>,
    /// Seconds from B's first event to its circuit being seen open.
    pub open_after_seconds: f64,
    /// B's events written.
    pub b_written: usize,
    /// Where B's deliveries are at the end: (queued: visible + in flight + delayed, DLQ).
    pub b_accounted: (usize, usize),
    /// Pairs the ledger holds at the end: (delivered, listed as waiting).
    pub ledger_pairs: (usize, usize),
    /// Operational events published (`endpoint.circuit_opened` and the like).
    pub operational_events: Vec<String>,
}

impl IsolationRun {
    fn p95(&self, prefix: &str) -> f64 {
        self.phases
            .iter()
            .find(|p| p.phase.starts_with(prefix))
            .map_or(f64::NAN, |p| p.p95_ms)
    }

    /// p95 in steady state next to the dead B / p95 of the control.
    pub fn ratio_to_control(&self) -> f64 {
        self.p95("(b)") / self.p95("(d)")
    }

    /// p95 in steady state next to the dead B / p95 of A alone.
    pub fn ratio_to_alone(&self) -> f64 {
        self.p95("(b)") / self.p95("(a)")
    }
}

async fn run_one(dead: DeadKind, fair: bool) -> Result<IsolationRun, BoxError> {
    let receivers = Receivers::start()?;
    receivers.set("/a", Answer::Ok(RECEIVER_LATENCY_MS));
    receivers.set("/c", Answer::Ok(RECEIVER_LATENCY_MS));
    let b_url = match dead {
        DeadKind::Status503 => {
            receivers.set("/b", Answer::Status(503));
            receivers.url("/b")
        }
        DeadKind::Timeout => {
            receivers.set("/b", Answer::Hang);
            receivers.url("/b")
        }
        DeadKind::Refused => refused_url()?,
    };
    let tern = InMemoryTern::start(CONCURRENCY, fair)?;
    let a = endpoint("tnt_a", &receivers.url("/a"))?;
    let b = endpoint("tnt_b", &b_url)?;
    let c = endpoint("tnt_c", &receivers.url("/c"))?;
    for e in [&a, &b, &c] {
        tern.endpoints.put(e).await?;
    }
    let mut load = Load::new()?;

    let mut warm = Vec::new();
    load.until(
        &tern,
        &a,
        None,
        Instant::now() + Duration::from_secs(WARM_SECONDS),
        &mut warm,
    )
    .await?;

    // (a) A alone.
    let mut alone = Vec::new();
    let clock = Clock::start(&tern, &receivers, "/b");
    load.until(
        &tern,
        &a,
        None,
        Instant::now() + Duration::from_secs(ALONE_SECONDS),
        &mut alone,
    )
    .await?;
    let alone = clock
        .stop("(a) A alone", &tern, &receivers, "/b", "/a", &alone)
        .await;

    // (d) the control: C, healthy, with B's traffic.
    let mut control = Vec::new();
    let clock = Clock::start(&tern, &receivers, "/b");
    load.until(
        &tern,
        &a,
        Some(&c),
        Instant::now() + Duration::from_secs(CONTROL_SECONDS),
        &mut control,
    )
    .await?;
    let control = clock
        .stop(
            "(d) control: next to C, healthy, with B's traffic",
            &tern,
            &receivers,
            "/b",
            "/a",
            &control,
        )
        .await;
    // C's backlog (if any) drains before B starts.
    let limit = Instant::now() + Duration::from_secs(DRAIN_SECONDS);
    while tern.queue.counts() != Default::default() && Instant::now() < limit {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    load.next = tokio::time::Instant::now();

    // (c) B starts: until its circuit is seen open, and the instances have learnt it.
    let mut ramp = Vec::new();
    let mut b_written = 0;
    let clock = Clock::start(&tern, &receivers, "/b");
    let b_start = Instant::now();
    let mut open_after = None;
    while b_start.elapsed() < Duration::from_secs(OPEN_LIMIT_SECONDS) {
        b_written += load
            .until(
                &tern,
                &a,
                Some(&b),
                Instant::now() + Duration::from_millis(200),
                &mut ramp,
            )
            .await?;
        let open = tern
            .health
            .get(&b.tenant_id, &b.id)
            .await?
            .is_some_and(|h| h.opened_at.is_some());
        if open {
            open_after = Some(b_start.elapsed().as_secs_f64());
            break;
        }
    }
    let Some(open_after) = open_after else {
        return Err(format!("B's circuit did not open within {OPEN_LIMIT_SECONDS} s").into());
    };
    b_written += load
        .until(
            &tern,
            &a,
            Some(&b),
            Instant::now() + Duration::from_secs(SETTLE_SECONDS),
            &mut ramp,
        )
        .await?;
    let ramp = clock
        .stop(
            "(c) B starting, until its circuit opened and every instance knew",
            &tern,
            &receivers,
            "/b",
            "/a",
            &ramp,
        )
        .await;

    // (b) steady state: B's circuit open.
    let mut steady = Vec::new();
    let clock = Clock::start(&tern, &receivers, "/b");
    b_written += load
        .until(
            &tern,
            &a,
            Some(&b),
            Instant::now() + Duration::from_secs(STEADY_SECONDS),
            &mut steady,
        )
        .await?;
    let steady = clock
        .stop(
            "(b) next to B, dead, circuit open (steady state)",
            &tern,
            &receivers,
            "/b",
            "/a",
            &steady,
        )
        .await;
    let queued = tern.queue.group_counts("tnt_b");
    let b_accounted = (
        queued.visible + queued.in_flight + queued.delayed,
        tern.dlq.counts().visible,
    );
    let ledger = tern.ledger.counts();
    Ok(IsolationRun {
        dead,
        phases: vec![alone, control, steady, ramp],
        open_after_seconds: open_after,
        b_written,
        b_accounted,
        ledger_pairs: (ledger.delivered, ledger.waiting),
        operational_events: tern
            .events
            .events()
            .iter()
            .map(|e| format!("{} {}", e.tenant_id, e.kind.as_str()))
            .collect(),
    })
}

// ---- the whole benchmark -------------------------------------------------------------------

/// Every run of the isolation benchmark.
#[derive(Debug, Clone, Serialize)]
pub struct IsolationReport {
    /// One per dead-endpoint kind.
    pub runs: Vec<IsolationRun>,
    /// Real seconds it took.
    pub seconds: f64,
}

/// Runs the scenario once per dead-endpoint kind (`only` those, when any), each on a
/// fresh deployment.
///
/// # Errors
/// When a receiver or a deployment cannot start, or B's circuit never opens.
pub async fn run(only: &[DeadKind]) -> Result<IsolationReport, BoxError> {
    let started = Instant::now();
    let kinds = if only.is_empty() {
        vec![DeadKind::Status503, DeadKind::Refused, DeadKind::Timeout]
    } else {
        only.to_vec()
    };
    let bar = crate::progress(kinds.len() as u64, "isolation, in memory");
    let mut runs = Vec::new();
    for dead in kinds {
        runs.push(
            run_one(dead, true)
                .await
                .map_err(|e| format!("isolation, B {}: {e}", dead.text()))?,
        );
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(IsolationReport {
        runs,
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn ms(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn per_second(tally: &Tally, tenant: &str, kind: &str, seconds: f64) -> f64 {
    tally
        .get(tenant)
        .and_then(|k| k.get(kind))
        .copied()
        .unwrap_or(0) as f64
        / seconds.max(1e-9)
}

impl IsolationReport {
    /// The report section, markdown.
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "\n### Healthy endpoint latency with a dead neighbour, in memory (no emulator)\n\n\
             The real sender handler on in-memory ports with SQS semantics (`tern_core::in_memory`: \
             visibility timeout 360 s, `DelaySeconds`, batches of 10, redrive after 5 receives, fair \
             ordering by `MessageGroupId`) and DynamoDB's conditional writes, in up to {CONCURRENCY} \
             Lambda-like instances (the event source mapping's `maximumConcurrency`; {} at first, \
             one more every {} ms while messages wait; each warm with its own caches and \
             connections, a 60 s deadline per batch of up to 10); deployment defaults (attempt deadline 15 s, probe every 60 s, \
             health cache 5 s, endpoint cache 30 s); real time. A gets {A_PER_SECOND} events/s, \
             its receiver answers 200 after {RECEIVER_LATENCY_MS} ms; B (and the control's C) get \
             {} events/s. Latency: the delivery message's send (the relay's) -> arrival at A's \
             receiver, milliseconds.\n",
            crate::in_memory::INITIAL_POLLERS,
            crate::in_memory::SCALE_UP_EVERY.as_millis(),
            A_PER_SECOND * NEIGHBOUR_FACTOR
        );
        for r in &self.runs {
            s.push_str(&format!(
                "\n**B {}**: circuit seen open {:.1} s after B's first event; B's deliveries: {} \
                 written, {} queued at the end, {} dead-lettered; the ledger's pairs: {} delivered, \
                 {} listed as waiting; operational events: {}.\n\n\
                 | phase | A's events | received | p50 ms | p95 ms | p99 ms | max ms | s | A delivered/s | B deferred/s | B POSTs (probes) | queue at end: visible / in flight / delayed | instances | CPU s/s |\n\
                 | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
                r.dead.text(),
                r.open_after_seconds,
                r.b_written,
                r.b_accounted.0,
                r.b_accounted.1,
                r.ledger_pairs.0,
                r.ledger_pairs.1,
                if r.operational_events.is_empty() {
                    "none".to_owned()
                } else {
                    r.operational_events.join(", ")
                },
            ));
            for p in &r.phases {
                s.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {} | {} | {:.0} | {:.1} | {:.1} | {} ({}) | {} / {} / {} | {} | {:.2} |\n",
                    p.phase,
                    p.written,
                    p.received,
                    ms(p.p50_ms),
                    ms(p.p95_ms),
                    ms(p.p99_ms),
                    ms(p.max_ms),
                    p.seconds,
                    per_second(&p.tally, "tnt_a", "delivered", p.seconds),
                    per_second(&p.tally, "tnt_b", "deferred", p.seconds),
                    if r.dead == DeadKind::Refused {
                        "-".to_owned()
                    } else {
                        p.b_requests.to_string()
                    },
                    p.probes,
                    p.queue_end.0,
                    p.queue_end.1,
                    p.queue_end.2,
                    p.instances,
                    p.cpu_per_second,
                ));
            }
            let ratio = r.ratio_to_control();
            s.push_str(&format!(
                "\np95 next to the dead B / the control: **{:.2} x** (goal <= {GOAL} x: {}); / A alone: {:.2} x.\n",
                ratio,
                if ratio <= GOAL { "met" } else { "missed" },
                r.ratio_to_alone(),
            ));
        }
        s.push_str(&format!(
            "\nIsolation benchmark, in memory: {:.0} s.\n",
            self.seconds
        ));
        s
    }
}
