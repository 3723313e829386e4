//! `make demo`: the whole pipeline on this machine. Starts moto and a receiver with three
//! endpoints (healthy; fails its first attempts then recovers; always fails), writes
//! outbox items with the outbox writer in real transactions next to a business item,
//! shows live progress, dead-letters what cannot be delivered, "fixes" the broken
//! endpoint, replays the DLQ and shows every event delivered.

use std::collections::{BTreeMap, HashSet};
use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use indicatif::{ProgressBar, ProgressStyle};
use tern_core::ports::{DeliveryLedger, EndpointStore};
use tern_core::{DeliveryMessage, Endpoint, EventId, TenantId};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::replay::ReplayRequest;
use tern_handlers::sender::MessageOutcome;
use tern_outbox::OutboxWriter;

use crate::local::{LocalOptions, LocalTern};
use crate::moto::MotoServer;
use crate::pollers::LocalEvent;
use crate::receiver::{Behavior, Receiver, Reply};
use tern_ops::{NewEndpoint, add_endpoint, print_history};

/// Demo settings.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Events to write.
    pub events: usize,
    /// Real seconds per logical second (0.0005: the 24 h retry plays out in 44 s).
    pub time_scale: f64,
    /// Give up waiting after this long, in seconds.
    pub timeout_seconds: u64,
    /// After the report, keep the deployment up (until Ctrl-C or SIGTERM) so the customer
    /// portal link it prints can be opened: `tern demo` in a terminal.
    pub hold: bool,
}

impl Default for DemoOptions {
    fn default() -> Self {
        Self {
            events: 20,
            time_scale: 0.0005,
            timeout_seconds: 150,
            hold: false,
        }
    }
}

/// Per-endpoint tally, observed independently of Tern's own counters: deliveries at the
/// receiver (2xx, signature verified) and messages in the DLQ.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    /// Distinct events the receiver accepted with a valid signature.
    pub delivered: usize,
    /// HTTP requests the receiver saw.
    pub requests: usize,
    /// Requests that failed signature verification (must be 0).
    pub bad_signatures: usize,
    /// Deliveries of this endpoint in the DLQ.
    pub dead_lettered: usize,
}

/// What the demo ends with.
#[derive(Debug, Clone)]
pub struct DemoReport {
    /// Events written.
    pub written: usize,
    /// Per endpoint, before the replay.
    pub before_replay: BTreeMap<String, Tally>,
    /// Per endpoint, after the replay.
    pub after_replay: BTreeMap<String, Tally>,
    /// Retries the sender queued.
    pub retries: usize,
    /// Messages the replay moved back.
    pub replayed: u32,
}

/// The demo failed.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Setup failed.
    #[error("{0}")]
    Setup(String),
    /// Not every event was accounted for in time.
    #[error("not every event was accounted for within {0} s")]
    Timeout(u64),
}

struct Demo {
    local: LocalTern,
    receiver: Receiver,
    endpoints: Vec<(String, Endpoint)>,
    written: Vec<EventId>,
}

impl Demo {
    async fn tally(&self) -> BTreeMap<String, Tally> {
        let dlq = dlq_endpoints(&self.local).await;
        self.endpoints
            .iter()
            .map(|(name, ep)| {
                let verifier = tern_receiver::Verifier::new(ep.secrets[0].secret.expose()).ok();
                let mut tally = Tally::default();
                let mut ok = HashSet::new();
                for req in self.receiver.requests(&format!("/{name}")) {
                    tally.requests += 1;
                    let verified = verifier
                        .as_ref()
                        .is_some_and(|v| v.verify_now(&req.headers, &req.body).is_ok());
                    if !verified {
                        tally.bad_signatures += 1;
                    } else if (200..300).contains(&req.answered)
                        && let Some(id) = req.header("webhook-id")
                    {
                        ok.insert(id.to_owned());
                    }
                }
                tally.delivered = self
                    .written
                    .iter()
                    .filter(|id| ok.contains(id.as_str()))
                    .count();
                tally.dead_lettered = dlq.iter().filter(|e| **e == ep.id.as_str()).count();
                (name.clone(), tally)
            })
            .collect()
    }
}

/// Endpoint ids of the deliveries in the DLQ, read without removing them.
async fn dlq_endpoints(local: &LocalTern) -> Vec<String> {
    tern_ops::peek(local.replay.dlq.as_ref(), usize::MAX)
        .await
        .unwrap_or_default()
        .iter()
        .filter_map(|m| DeliveryMessage::parse(&m.body).ok())
        .map(|d| d.endpoint_id.to_string())
        .collect()
}

fn line(written: usize, t: &BTreeMap<String, Tally>, retries: usize) -> String {
    let delivered: usize = t.values().map(|x| x.delivered).sum();
    let dead: usize = t.values().map(|x| x.dead_lettered).sum();
    let deliveries = written * t.len();
    format!(
        "events written {written} | deliveries {deliveries}: delivered {delivered}, retried {retries}, dead-lettered {dead}, in flight {}",
        deliveries.saturating_sub(delivered + dead)
    )
}

fn accounted(written: usize, t: &BTreeMap<String, Tally>) -> bool {
    t.values().all(|x| x.delivered + x.dead_lettered == written)
}

/// Runs the demo, printing to `out`.
///
/// # Errors
/// [`DemoError`].
pub async fn run(
    options: DemoOptions,
    out: &mut (dyn Write + Send),
) -> Result<DemoReport, DemoError> {
    let started = Instant::now();
    let setup = |e: &dyn std::fmt::Display| DemoError::Setup(e.to_string());
    let _ = writeln!(out, "Starting moto (the local AWS) ...");
    let moto = MotoServer::start().await.map_err(|e| setup(&e))?;
    let local_options = LocalOptions {
        prefix: "demo-".into(),
        time_scale: options.time_scale,
        // The API (any free port): the customer portal link printed at the end.
        api_port: Some(0),
        ..LocalOptions::default()
    };
    let mut local = LocalTern::create(moto.sdk_config().await, &local_options)
        .await
        .map_err(|e| setup(&e))?;
    let orders_table = create_orders_table(&local).await.map_err(|e| setup(&e))?;
    let receiver = Receiver::start().await.map_err(|e| setup(&e))?;
    // The first half of the events fail once on /flaky, then it recovers.
    receiver.set(
        "/flaky",
        Behavior::FailFirst {
            count: options.events / 2,
            status: 500,
        },
    );
    receiver.set("/broken", Behavior::Always(Reply::status(503)));

    let store: &dyn EndpointStore = local.sender.endpoints.as_ref();
    let mut endpoints = Vec::new();
    for name in ["healthy", "flaky", "broken"] {
        let ep = add_endpoint(
            store,
            NewEndpoint {
                tenant: "tnt_demo".into(),
                url: receiver.url(&format!("/{name}")),
                event_types: vec!["order.paid".into()],
                // The broken endpoint gives up after 3 attempts (a budget set per
                // endpoint), so its dead letters come within seconds: with its circuit
                // open, its retries go one per probe, and SQS delays come in whole seconds.
                max_attempts: (name == "broken").then_some(3),
                timeout_ms: Some(5_000),
                schedule: None,
                description: Some(format!("demo: {name}")),
                payload_format: tern_core::PayloadFormat::Raw,
                max_per_second: None,
                secret: None,
                headers: Vec::new(),
                auth: tern_core::receiver_auth::ReceiverAuth::None,
                signatures: tern_core::Signatures::V1,
                client_certificate: None,
            },
            &tern_http::DestinationPolicy {
                https_only: false,
                allow: vec!["127.0.0.1/32".parse().map_err(|e| setup(&e))?],
                nat64: false,
            },
            &tern_http::DnsResolver::system(),
        )
        .await
        .map_err(|e| setup(&e))?;
        let _ = writeln!(out, "  endpoint {:<8} {}  -> {}", name, ep.id, ep.url);
        endpoints.push((name.to_owned(), ep));
    }
    let mut events = local.start_pollers(&local_options);
    let _ = writeln!(
        out,
        "Retry schedule 1 min, 5 min, 30 min, 2 h, 10 h, 24 h (+0-10 % jitter), time scaled x{}: 24 h pass in {:.0} s.",
        options.time_scale,
        86_400.0 * options.time_scale
    );

    // Write the events: each in one transaction with its business item.
    let writer = OutboxWriter::new(&local.resources.outbox_table);
    let mut written = Vec::new();
    for n in 0..options.events {
        let payload = format!(
            r#"{{"order_id":"ord_{n:04}","amount_cents":{},"currency":"EUR","note":"café ☕"}}"#,
            1000 + n * 7
        );
        let prepared = writer
            .prepare("order.paid", "tnt_demo", payload)
            .map_err(|e| setup(&e))?;
        let order = Put::builder()
            .table_name(&orders_table)
            .item("order_id", AttributeValue::S(format!("ord_{n:04}")))
            .item("status", AttributeValue::S("paid".into()))
            .item("event_id", AttributeValue::S(prepared.event.id.to_string()))
            .build()
            .map_err(|e| setup(&e))?;
        local
            .dynamodb()
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(order).build())
            .transact_items(prepared.transact_item().map_err(|e| setup(&e))?)
            .send()
            .await
            .map_err(|e| setup(&aws_sdk_dynamodb::error::DisplayErrorContext(e)))?;
        written.push(prepared.event.id.clone());
    }
    let _ = writeln!(
        out,
        "Wrote {} order.paid events, each in one TransactWriteItems with its order row.",
        written.len()
    );

    let demo = Demo {
        local,
        receiver,
        endpoints,
        written,
    };
    let retries = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = retries.clone();
    let drain = tokio::spawn(async move {
        while let Some(e) = events.recv().await {
            if let LocalEvent::Sent(results) = e {
                let n = results
                    .iter()
                    .filter(|(_, r)| matches!(r, Ok(MessageOutcome::Retrying { .. })))
                    .count();
                counter.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            }
        }
    });
    let retried = || retries.load(std::sync::atomic::Ordering::Relaxed);

    let n = demo.written.len();
    let before = wait_until(
        &demo,
        n,
        options.timeout_seconds,
        out,
        &retried,
        "Delivering",
        |t| accounted(n, t),
    )
    .await?;
    let _ = writeln!(out, "\nBefore the replay:");
    report(out, n, &before);

    // Fix the broken endpoint, turn it back on if its failure rate disabled it (as an
    // operator would with `tern endpoints enable`), and replay the DLQ.
    demo.receiver
        .set("/broken", Behavior::Always(Reply::status(200)));
    let _ = writeln!(out, "\nThe broken endpoint is fixed.");
    let health =
        tern_aws::DynamoHealthStore::new(demo.local.dynamodb(), &demo.local.resources.health_table);
    let store: &dyn EndpointStore = demo.local.sender.endpoints.as_ref();
    for (name, ep) in &demo.endpoints {
        if let Ok(Some(now)) = store.get(&ep.tenant_id, &ep.id).await
            && !now.enabled
        {
            let _ = writeln!(
                out,
                "  endpoint {name} had been disabled ({}); enabling it (`tern endpoints enable {}`)",
                now.disabled_reason.as_deref().unwrap_or("-"),
                ep.id
            );
            tern_ops::enable_endpoint(store, Some(&health), Some(&ep.tenant_id), &ep.id)
                .await
                .map_err(|e| setup(&e))?;
        }
    }
    let _ = writeln!(out, "Replaying the DLQ ...");
    let metrics = Metrics::new("Tern", MetricsSink::Discard);
    let summary =
        tern_handlers::replay::handle(&demo.local.replay, ReplayRequest::default(), &metrics)
            .await
            .map_err(|e| setup(&e))?;
    let _ = writeln!(
        out,
        "  replay: examined {}, replayed {}, left {}",
        summary.examined,
        summary.replayed,
        summary.skipped + summary.unreadable
    );
    let after = wait_until(
        &demo,
        n,
        options.timeout_seconds,
        out,
        &retried,
        "Replaying",
        |t| t.values().all(|x| x.delivered == n && x.dead_lettered == 0),
    )
    .await?;
    let _ = writeln!(out, "\nAfter the replay:");
    report(out, n, &after);

    if let Some(first) = demo.written.first() {
        let _ = writeln!(
            out,
            "\nAttempt log of event {first} (`tern attempts {first} --tenant tnt_demo`):"
        );
        let ledger: &dyn DeliveryLedger = demo.local.sender.ledger.as_ref();
        let mut buf = Vec::new();
        let tenant = TenantId::new("tnt_demo").map_err(|e| setup(&e))?;
        if print_history(&mut buf, ledger, &tenant, first)
            .await
            .is_ok()
        {
            let _ = out.write_all(&buf);
        }
    }
    let _ = writeln!(out, "\nDone in {:.0} s.", started.elapsed().as_secs_f64());
    // What the demo tenant's customers would see: its three endpoints, their health and
    // delivery logs, in the customer portal.
    match crate::portal::link(&demo.local, crate::portal::DEMO_TENANT).await {
        Ok(url) if options.hold => {
            let _ = writeln!(
                out,
                "\nThe customer portal of tenant {} (what its customers see; the link opens once):\n  {url}\nPress Ctrl-C to stop.",
                crate::portal::DEMO_TENANT
            );
            let _ = out.flush();
            wait_for_stop().await;
        }
        Ok(_) => {
            let _ = writeln!(
                out,
                "\nRun `make demo` in a terminal to end with a customer portal link to click through (the demo stays up until Ctrl-C)."
            );
        }
        Err(e) => {
            let _ = writeln!(out, "\nNo customer portal link: {e}");
        }
    }
    drain.abort();
    drop(demo);
    moto.stop().await;
    Ok(DemoReport {
        written: n,
        before_replay: before,
        after_replay: after,
        retries: retried(),
        replayed: summary.replayed,
    })
}

/// Returns on Ctrl-C or SIGTERM.
async fn wait_for_stop() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

async fn wait_until(
    demo: &Demo,
    n: usize,
    timeout: u64,
    out: &mut (dyn Write + Send),
    retried: &dyn Fn() -> usize,
    label: &str,
    done: impl Fn(&BTreeMap<String, Tally>) -> bool,
) -> Result<BTreeMap<String, Tally>, DemoError> {
    let tty = std::io::stderr().is_terminal();
    let bar = ProgressBar::new_spinner();
    if tty {
        bar.set_style(
            ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(120));
    }
    let deadline = Instant::now() + Duration::from_secs(timeout);
    let mut last_print = Instant::now() - Duration::from_secs(60);
    loop {
        let t = demo.tally().await;
        let msg = format!("{label}: {}", line(n, &t, retried()));
        if tty {
            bar.set_message(msg.clone());
        } else if last_print.elapsed() >= Duration::from_secs(5) {
            let _ = writeln!(out, "  {msg}");
            last_print = Instant::now();
        }
        if done(&t) {
            bar.finish_and_clear();
            let _ = writeln!(out, "  {msg}");
            return Ok(t);
        }
        if Instant::now() >= deadline {
            bar.finish_and_clear();
            let _ = writeln!(out, "  {msg}");
            return Err(DemoError::Timeout(timeout));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn report(out: &mut (dyn Write + Send), n: usize, t: &BTreeMap<String, Tally>) {
    let _ = writeln!(
        out,
        "  {:<10} {:>8} {:>10} {:>14} {:>10} {:>15}  accounted",
        "endpoint", "written", "delivered", "dead-lettered", "requests", "bad signatures"
    );
    for (name, x) in t {
        let _ = writeln!(
            out,
            "  {:<10} {:>8} {:>10} {:>14} {:>10} {:>15}  {}",
            name,
            n,
            x.delivered,
            x.dead_lettered,
            x.requests,
            x.bad_signatures,
            if x.delivered + x.dead_lettered == n {
                "yes"
            } else {
                "NO"
            }
        );
    }
}

async fn create_orders_table(local: &LocalTern) -> Result<String, String> {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    let name = "demo-orders".to_owned();
    local
        .dynamodb()
        .create_table()
        .table_name(&name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("order_id")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(|e| e.to_string())?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("order_id")
                .key_type(KeyType::Hash)
                .build()
                .map_err(|e| e.to_string())?,
        )
        .send()
        .await
        .map_err(|e| aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string())?;
    Ok(name)
}
