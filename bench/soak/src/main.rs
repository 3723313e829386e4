//! `make soak`: Tern's fault soak (not part of `make test`; a few minutes).
//!
//! Events are fanned out to endpoints of different health (healthy, flaky, rate-limited
//! with `Retry-After`, refusing, hanging, slow) through local mode (the real relay and
//! sender handlers under local event source mappings, moto as AWS), while faults are on:
//! AWS answers held past the SDK's per-try timeout, throttled, failed or cut off (the
//! fault proxy in front of moto), sender panics before and after the POST and duplicate
//! delivery messages (wrappers at the ports), and poller restarts (the pollers' tasks
//! aborted mid-batch and started again). Then the faults stop, the receivers recover,
//! what was disabled is enabled, the DLQ is replayed, and every (event, endpoint) pair is
//! accounted for with `tern audit`'s code (`tern_ops::audit`), each unaccounted one
//! printed with its trace. The receivers count duplicates on their own (`receivers.rs`).
//!
//! Every random choice comes from the seed (printed; `--seed` repeats a run's choices;
//! the interleaving of concurrent tasks is the machine's). Exit 1 when a pair is
//! unaccounted or duplicates exceed 1 % of the pairs.

mod faults;
mod pollers;
mod progress;
mod receivers;
mod report;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use clap::Parser;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use tern_core::ports::EndpointStore as _;
use tern_core::{Endpoint, EndpointId, Secret, TenantId};
use tern_handlers::config::{Env, SenderPolicy, health_policy};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::relay::RelayDeps;
use tern_handlers::replay::ReplayRequest;
use tern_handlers::sender::SenderDeps;
use tern_local::{LocalOptions, LocalTern};
use tern_ops::audit::{AuditReport, AuditRequest, AuditStores, Rules};

use crate::faults::{
    Dice, DuplicatingQueue, PanickingLedger, PanickingQueue, PortFaults, WireFaults,
};
use crate::receivers::{EndpointReceiver, Mode};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Parser, Debug, Clone)]
#[command(about = "Tern's fault soak: is anything lost, and how many duplicates reach receivers?")]
struct Args {
    /// Seed of every random choice (default: from the clock; printed either way).
    #[arg(long)]
    seed: Option<u64>,
    /// Events written (each goes to every endpoint of its tenant: 7 per tenant).
    #[arg(long, default_value_t = 420)]
    events: usize,
    /// Tenants, each with one endpoint of each kind.
    #[arg(long, default_value_t = 2)]
    tenants: usize,
    /// Seconds over which the events are written, with the faults on (21 pairs/s by
    /// default: about what local mode's sender keeps up with on 2 cores under the faults,
    /// so the run measures faults, not a backlog in moto).
    #[arg(long, default_value_t = 120)]
    write_seconds: u64,
    /// Seconds the faults stay on after the last event.
    #[arg(long, default_value_t = 20)]
    fault_tail_seconds: u64,
    /// Real seconds per logical second of retry waits (0.0002: the 24 h schedule in 29 s,
    /// so deliveries to a dead endpoint exhaust while the faults are on).
    #[arg(long, default_value_t = 0.0002)]
    time_scale: f64,
    /// Concurrent sender pollers (the mapping's maximum concurrency).
    #[arg(long, default_value_t = 8)]
    sender_concurrency: u32,
    /// Times the sender pollers are stopped mid-batch and started again during the faults.
    #[arg(long, default_value_t = 3)]
    restarts: u32,
    /// Also restart the stream poller once (it starts again at the stream's trim
    /// horizon: every event so far is relayed a second time).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    restart_stream: bool,
    /// Visibility timeout of the delivery queue's pollers, seconds: above the claim's
    /// lease (60 s), as in AWS (360 s), so a message whose sender died comes back to an
    /// expired lease and takes the claim over.
    #[arg(long, default_value_t = 65)]
    visibility_timeout_seconds: i32,
    /// Carry waits over 900 logical seconds with Step Functions on moto (default: chained
    /// queue delays, lighter on moto).
    #[arg(long)]
    step_functions: bool,
    /// Longest wait for the pairs to settle after the faults, and again after the replay.
    #[arg(long, default_value_t = 420)]
    settle_limit_seconds: u64,
    /// Where the JSON summary goes.
    #[arg(long, default_value = "target/soak")]
    out: PathBuf,
}

/// The port faults while the faults are on. A panic after the POST and before the
/// delivered marker makes a second POST by design (the redelivery cannot know the first
/// one succeeded): 0.3 % of deliveries, so about as many receiver-side duplicates.
const PORT_FAULTS: PortFaults = PortFaults {
    panic_after_claim: 0.01,
    panic_before_marker: 0.003,
    panic_after_retry: 0.01,
    duplicate_message: 0.03,
};

/// The wire faults while the faults are on, per matching AWS request.
pub const WIRE_FAULTS: WireFaults = WireFaults {
    slow: 0.01,
    slow_ms: 2_500,
    throttle: 0.02,
    server_error: 0.01,
    drop_after: 0.01,
};

/// The endpoint kinds every tenant has, in order.
pub const KINDS: [&str; 7] = [
    "healthy",
    "flaky",
    "rate_limited",
    "paced",
    "refusing",
    "hanging",
    "slow",
];

fn mode_of(kind: &str) -> Mode {
    match kind {
        "flaky" => Mode::Flaky { fail_percent: 30 },
        // Issue 26's two receivers that push back: 429 at half the requests, and a
        // receiver's own limit of 5 a second.
        "rate_limited" => Mode::RateLimited {
            limited_percent: 50,
            retry_after_seconds: 3600,
        },
        "paced" => Mode::Limited { per_second: 5 },
        "refusing" => Mode::Refusing,
        "hanging" => Mode::Hanging,
        "slow" => Mode::Slow {
            min_ms: 200,
            max_ms: 900,
        },
        _ => Mode::Healthy,
    }
}

/// Attempt deadline per kind, milliseconds: 1,000 (the minimum) for the hanging one, so
/// its attempts end soon; 5,000 for the slow one, above its slowest answer, so a slow
/// answer is never a timeout (that would be a duplicate by design, not a finding).
fn timeout_of(kind: &str) -> u64 {
    match kind {
        "hanging" => 1_000,
        _ => 5_000,
    }
}

struct Soak {
    local: LocalTern,
    /// SQS on moto directly (the soak's own reads, not the delivery path's).
    sqs: aws_sdk_sqs::Client,
    receivers: Vec<(TenantId, EndpointId, EndpointReceiver)>,
    real_ledger: Arc<dyn tern_core::ports::DeliveryLedger>,
    rules: Rules,
}

impl Soak {
    async fn audit(&self, grace: Duration, recheck: Duration) -> Result<AuditReport, BoxError> {
        let outbox = tern_aws::DynamoOutboxReader::new(
            self.local.dynamodb(),
            &self.local.resources.outbox_table,
        );
        let endpoints = self.local.endpoint_table();
        let health = tern_aws::DynamoHealthStore::new(
            self.local.dynamodb(),
            &self.local.resources.health_table,
        );
        let dlq = tern_aws::SqsQueue::new(self.local.sqs(), &self.local.resources.dlq_url);
        let parked = tern_aws::SqsQueue::new(
            self.local.sqs(),
            &self.local.resources.relay_failure_queue_url,
        );
        let delivery =
            tern_aws::SqsQueue::new(self.local.sqs(), &self.local.resources.delivery_queue_url);
        let now = chrono::Utc::now();
        let mut request = AuditRequest::new(
            now - chrono::Duration::hours(1),
            now + chrono::Duration::minutes(1),
        );
        request.recheck_after = recheck;
        request.max_listed = usize::MAX;
        // moto answers one request at a time: more in flight only queue there.
        request.concurrency = 4;
        let mut rules = self.rules.clone();
        rules.grace = chrono::Duration::from_std(grace)?;
        Ok(tern_ops::audit::audit(
            AuditStores {
                outbox: &outbox,
                ledger: self.real_ledger.as_ref(),
                endpoints: &endpoints,
                health: Some(&health),
                dlq: &dlq,
                relay_failures: &parked,
                delivery_queue: Some(&delivery),
            },
            &request,
            &rules,
        )
        .await?)
    }

    /// Audits every 10 s until the delivery queue is empty and no pair waits or is in
    /// flight, or `limit` passes. (A pair still in the queue's backlog has no trace yet:
    /// the audit cannot tell it from a lost one, so the soak waits for the queue.)
    async fn settle(
        &self,
        label: &str,
        grace: Duration,
        limit: Duration,
    ) -> Result<AuditReport, BoxError> {
        let started = Instant::now();
        loop {
            // The queue first (one cheap call), the audit once it is empty.
            let (visible, in_flight, delayed) = loop {
                let depth =
                    progress::depth(&self.sqs, &self.local.resources.delivery_queue_url).await;
                if depth == (0, 0, 0) || started.elapsed() >= limit {
                    break depth;
                }
                tokio::time::sleep(Duration::from_secs(5)).await;
            };
            let r = self.audit(grace, Duration::ZERO).await?;
            let t = &r.totals;
            println!(
                "  {label} {:>4.0} s: pairs {} delivered {} waiting {} in flight {} dead-lettered {} parked {} unaccounted {}; queue {visible}/{in_flight}/{delayed}",
                started.elapsed().as_secs_f64(),
                t.pairs(),
                t.delivered,
                t.waiting,
                t.in_flight,
                t.dead_lettered,
                t.parked,
                t.unaccounted
            );
            let quiet = visible + in_flight + delayed == 0 && t.waiting + t.in_flight == 0;
            if quiet || started.elapsed() >= limit {
                for u in r.unaccounted.iter().take(5) {
                    println!(
                        "    unaccounted: {} -> {}: {}",
                        u.pair.event_id, u.pair.endpoint_id, u.pair.finding.detail
                    );
                }
                return Ok(r);
            }
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run(Args::parse()).await {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("soak failed to run: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

/// Keeps the injected panics quiet (they are counted); any other panic is printed.
fn quiet_injected_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let text = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if !text.starts_with(faults::PANIC_PREFIX) {
            default(info);
        }
    }));
}

async fn run(args: Args) -> Result<bool, BoxError> {
    quiet_injected_panics();
    let started = Instant::now();
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64 % 1_000_000_007)
    });
    println!("soak seed {seed} (repeat its choices: make soak SOAK_ARGS='--seed {seed}')");
    let mut dice_seeds = StdRng::seed_from_u64(seed);

    // moto, the fault proxy in front of it, and a local deployment whose every AWS call
    // goes through the proxy. The application (the event writer) and the soak's own reads
    // go to moto directly: their faults are not the delivery path's.
    let moto_url = tern_tests::moto_url();
    let proxy = tern_tests::fault_proxy::FaultProxy::start(&moto_url).await?;
    let options = LocalOptions {
        prefix: format!("soak{}-", seed % 100_000),
        time_scale: args.time_scale,
        visibility_timeout_seconds: Some(args.visibility_timeout_seconds),
        sender_concurrency: args.sender_concurrency,
        step_functions: args.step_functions,
        console_port: None,
        ..LocalOptions::default()
    };
    let mut local = LocalTern::create(proxy.sdk_config().await, &options).await?;
    let direct = tern_local::moto::sdk_config_for(&moto_url).await;
    let env = local.env.clone();
    let lookup = move |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let vars = Env(&lookup);
    let policy = SenderPolicy::from_env(&vars)?;
    let rules = Rules {
        grace: chrono::Duration::seconds(90),
        time_scale: policy.time_scale,
        default_schedule: policy.schedule.clone(),
        health: health_policy(&vars)?,
    };

    // Endpoints and their receivers.
    let mut receivers = Vec::new();
    for t in 0..args.tenants.max(1) {
        let tenant = TenantId::new(format!("tnt_soak_{t}"))?;
        for kind in KINDS {
            let secret = Secret::generate();
            let receiver =
                EndpointReceiver::start(kind, secret.expose(), mode_of(kind), dice_seeds.random())
                    .await?;
            let mut endpoint = Endpoint::new(
                EndpointId::generate(),
                tenant.clone(),
                receiver.url(),
                vec!["*".into()],
                secret,
                chrono::Utc::now(),
            );
            endpoint.timeout_ms = Some(timeout_of(kind));
            endpoint.description = Some(format!("soak: {kind}"));
            endpoint.validate()?;
            local.sender.endpoints.put(&endpoint).await?;
            receivers.push((tenant.clone(), endpoint.id.clone(), receiver));
        }
    }

    // The faults at the ports: wrappers around the real ledger and queues.
    let dice = Dice::new(dice_seeds.random(), PORT_FAULTS);
    let real_ledger = local.sender.ledger.clone();
    local.sender = Arc::new(SenderDeps {
        ledger: Arc::new(PanickingLedger {
            inner: real_ledger.clone(),
            dice: dice.clone(),
        }),
        delivery_queue: Arc::new(PanickingQueue {
            inner: local.sender.delivery_queue.clone(),
            dice: dice.clone(),
        }),
        ..(*local.sender).clone()
    });
    local.relay = Arc::new(RelayDeps {
        delivery_queue: Arc::new(DuplicatingQueue {
            inner: local.relay.delivery_queue.clone(),
            dice: dice.clone(),
        }),
        ..(*local.relay).clone()
    });
    // The faults on the wire.
    let rules_fired = faults::install(
        &proxy,
        faults::wire_rules(&WIRE_FAULTS, dice_seeds.random()),
    );
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let progress = progress::Progress::default();
    progress.follow(rx);
    let mut pollers = pollers::Pollers::start(&local, &options, tx);
    let sqs = aws_sdk_sqs::Client::new(&direct);
    let ticker = {
        let (progress, sqs, url) = (
            progress.clone(),
            sqs.clone(),
            local.resources.delivery_queue_url.clone(),
        );
        tokio::spawn(async move {
            let start = Instant::now();
            loop {
                tokio::time::sleep(Duration::from_secs(15)).await;
                let (v, i, d) = progress::depth(&sqs, &url).await;
                println!(
                    "  [{:>4.0} s] {}; delivery queue visible/in flight/delayed {v}/{i}/{d}",
                    start.elapsed().as_secs_f64(),
                    progress.line()
                );
            }
        })
    };
    let soak = Soak {
        local,
        sqs,
        receivers,
        real_ledger,
        rules,
    };

    // Write the events (the application, straight to moto), restarting pollers meanwhile.
    let fault_seconds = args.write_seconds + args.fault_tail_seconds;
    let mut restarts: Vec<(f64, bool)> = (0..args.restarts)
        .map(|_| (dice_seeds.random_range(5.0..fault_seconds as f64), false))
        .collect();
    if args.restart_stream {
        // Early: the restarted stream poller relays every event written so far again.
        restarts.push((dice_seeds.random_range(8.0..20.0), true));
    }
    restarts.sort_by(|a, b| a.0.total_cmp(&b.0));
    println!(
        "{} events to {} tenants x {} endpoints ({} pairs) over {} s, faults on for {} s; time scale {}; restarts at {:?} s",
        args.events,
        args.tenants,
        KINDS.len(),
        args.events * KINDS.len(),
        args.write_seconds,
        fault_seconds,
        args.time_scale,
        restarts
            .iter()
            .map(|(t, s)| format!("{t:.0}{}", if *s { " (stream too)" } else { "" }))
            .collect::<Vec<_>>()
    );
    let writer = {
        let direct = aws_sdk_dynamodb::Client::new(&direct);
        let table = soak.local.resources.outbox_table.clone();
        let tenants: Vec<TenantId> = soak.receivers.iter().map(|(t, ..)| t.clone()).collect();
        let mut rng = StdRng::seed_from_u64(dice_seeds.random());
        let events = args.events;
        let spacing = Duration::from_secs_f64(args.write_seconds as f64 / events.max(1) as f64);
        tokio::spawn(async move {
            let types = ["order.paid", "order.shipped", "invoice.created"];
            let outbox = tern_outbox::OutboxWriter::new(&table);
            let mut written = Vec::new();
            let start = tokio::time::Instant::now();
            for n in 0..events {
                let tenant = &tenants[rng.random_range(0..tenants.len())];
                let ty = types[rng.random_range(0..types.len())];
                let payload = format!(r#"{{"n":{n},"note":"soak"}}"#);
                let Ok(prepared) = outbox.prepare(ty, tenant.as_str(), payload) else {
                    continue;
                };
                let Ok(item) = prepared.transact_item() else {
                    continue;
                };
                if direct
                    .transact_write_items()
                    .transact_items(item)
                    .send()
                    .await
                    .is_ok()
                {
                    written.push((prepared.event.id.to_string(), tenant.clone()));
                }
                tokio::time::sleep_until(start + spacing * (n as u32 + 1)).await;
            }
            written
        })
    };
    let fault_start = Instant::now();
    // Halfway through the writes an operator disables the first tenant's refusing
    // endpoint (`tern endpoints disable`): its deliveries dead-letter endpoint_disabled
    // until it is enabled and they are replayed.
    let disable_at = args.write_seconds as f64 / 2.0;
    let mut steps: Vec<(f64, Option<bool>)> =
        restarts.iter().map(|(t, s)| (*t, Some(*s))).collect();
    steps.push((disable_at, None));
    steps.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut restarted = 0;
    for (at, step) in steps {
        let due = fault_start + Duration::from_secs_f64(at);
        tokio::time::sleep_until(due.into()).await;
        match step {
            Some(stream) => {
                pollers.restart(&soak.local, &options, stream);
                restarted += 1;
                println!(
                    "  {at:>4.0} s: pollers restarted{}",
                    if stream { " (stream poller too)" } else { "" }
                );
            }
            None => {
                let (tenant, id, _) = soak
                    .receivers
                    .iter()
                    .find(|(_, _, r)| r.name == "refusing")
                    .ok_or("no refusing endpoint")?;
                tern_ops::disable_endpoint(
                    soak.local.sender.endpoints.as_ref(),
                    Some(tenant),
                    id,
                    Some("soak: disabled by an operator during the faults"),
                )
                .await?;
                println!("  {at:>4.0} s: endpoint {id} (refusing) disabled by an operator");
            }
        }
    }
    let written = writer.await?;
    tokio::time::sleep_until((fault_start + Duration::from_secs(fault_seconds)).into()).await;

    // The faults stop; the receivers recover.
    dice.off();
    let fired: Vec<(String, usize)> = rules_fired
        .iter()
        .map(|(name, id)| (name.clone(), proxy.fired(*id)))
        .collect();
    proxy.clear();
    for (_, _, r) in &soak.receivers {
        r.set_mode(Mode::Healthy).await?;
    }
    println!(
        "faults off after {:.0} s: {} events written; injected {} panics before the POST, {} after, {} duplicate messages; {} AWS faults on the wire",
        fault_start.elapsed().as_secs_f64(),
        written.len(),
        dice.injected.panics_before_post.load(Ordering::SeqCst),
        dice.injected.panics_after_post.load(Ordering::SeqCst),
        dice.injected.duplicate_messages.load(Ordering::SeqCst),
        fired.iter().map(|(_, n)| n).sum::<usize>()
    );
    let grace =
        Duration::from_secs(u64::try_from(args.visibility_timeout_seconds).unwrap_or(65) + 25);
    let limit = Duration::from_secs(args.settle_limit_seconds);
    let before_replay = soak.settle("settling", grace, limit).await?;
    // Issue 26's finding, with the evidence: a delivered pair a DLQ message also names.
    for pair in &before_replay.delivered_in_dlq {
        let rows = match tern_core::EventId::new(pair.event_id.clone()) {
            Ok(id) => match tern_core::TenantId::new(pair.tenant_id.clone()) {
                Ok(tenant) => soak
                    .real_ledger
                    .history(&tenant, &id)
                    .await
                    .unwrap_or_default(),
                Err(_) => Vec::new(),
            },
            Err(_) => Vec::new(),
        };
        let rows: Vec<String> = rows
            .iter()
            .filter(|a| a.endpoint_id.as_str() == pair.endpoint_id)
            .map(|a| {
                format!(
                    "{}.{}.{} {} {:?} {}",
                    a.replay_count,
                    a.attempt,
                    a.takeover,
                    a.outcome,
                    a.status,
                    a.error.as_deref().unwrap_or("")
                )
            })
            .collect();
        println!(
            "  delivered and in the DLQ ({}, budget {:?}): {} at {}: [{}]",
            pair.reason,
            pair.replay_count,
            pair.event_id,
            soak.receivers
                .iter()
                .find(|(_, id, _)| id.as_str() == pair.endpoint_id)
                .map_or(pair.endpoint_id.as_str(), |(_, _, r)| r.name.as_str()),
            rows.join("; ")
        );
    }

    // Enable what was disabled, then replay the DLQ until it is empty.
    let store = soak.local.endpoint_table();
    let health =
        tern_aws::DynamoHealthStore::new(soak.local.dynamodb(), &soak.local.resources.health_table);
    let mut enabled = 0;
    for (tenant, id, _) in &soak.receivers {
        if let Some(e) = store.get(tenant, id).await?
            && !e.enabled
        {
            tern_ops::enable_endpoint(&store, Some(&health), Some(tenant), id).await?;
            enabled += 1;
        }
    }
    // The sender's endpoint cache (30 s, scaled) forgets the disabled state.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let metrics = Metrics::new("Tern", MetricsSink::Discard);
    let mut replayed = 0;
    for _ in 0..20 {
        let summary =
            tern_handlers::replay::handle(&soak.local.replay, ReplayRequest::default(), &metrics)
                .await?;
        replayed += summary.replayed;
        if summary.replayed == 0 {
            break;
        }
    }
    println!("enabled {enabled} endpoint(s), replayed {replayed} dead letter(s)");
    let _ = soak.settle("after the replay", grace, limit).await?;

    // The verdict: tern audit's code, with its second look.
    let report = soak.audit(grace, Duration::from_secs(10)).await?;
    pollers.stop();
    ticker.abort();
    let duplicated = report::duplicates(soak.real_ledger.as_ref(), &soak.receivers).await;
    let summary = report::Summary::of(
        seed,
        &args,
        &report,
        &before_replay,
        &soak.receivers,
        &written,
        &dice,
        duplicated,
        fired,
        restarted,
        enabled,
        replayed,
        started.elapsed(),
    );
    summary.print(&report);
    std::fs::create_dir_all(&args.out)?;
    let path = args.out.join(format!("soak-{seed}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&summary)?)?;
    println!("summary: {}", path.display());
    Ok(summary.passed())
}
