//! `make bench`: Tern's figures next to their references, measured in the same run,
//! alternated over several rounds (min and median of each). Writes
//! `<out>/report.md` (also printed) and `<out>/report.json`, including the cost per
//! million deliveries computed from the measured counts (see `docs/cost.md`).
//!
//! Everything runs on 127.0.0.1: moto as AWS (behind a counting proxy), a Lambda Runtime
//! API emulator for the real binaries, and receivers in a child process (so their CPU is
//! not counted as the sender's).

mod api;
mod cost;
mod fakes;
mod health;
mod in_memory;
mod isolation;
mod pacing;
mod portal;
mod proxy;
mod rate_limit;
mod reach;
mod relay;
mod scale;
mod stats;
mod tracing_cost;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lambda_events::sqs::SqsEvent;
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use tern_core::{Endpoint, EndpointId, Secret, TenantId};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::sender::SenderDeps;
use tern_local::{Behavior, LocalOptions, LocalTern, MotoServer, Receiver, Reply};
use tern_runtime_emulator::{Outcome, RuntimeApi};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::proxy::{CountingProxy, Counts};
use crate::stats::{Row, Sample};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Memory of each function, MB (`infra/settings.json`, `functions.*.memoryMb`).
const MEMORY_MB: u32 = 256;
/// Payload of a normal delivery, bytes (the issue's 1 KiB).
const SMALL_PAYLOAD: usize = 1024;
/// Payload of the memory benchmark, bytes: 256 KiB, the default `TERN_MAX_PAYLOAD_BYTES`.
const LARGE_PAYLOAD: usize = 256 * 1024;
/// SQS event source batch size (`eventSources.sender.batchSize`).
const BATCH: usize = 10;

#[derive(Parser)]
#[command(about = "Tern's benchmarks")]
struct Args {
    /// Rounds of each alternated comparison.
    #[arg(long, default_value_t = 7)]
    rounds: usize,
    /// Deliveries per round of the CPU benchmark.
    #[arg(long, default_value_t = 500)]
    cpu_deliveries: usize,
    /// Deliveries per scenario of the AWS request count (happy, retry, dead letter).
    #[arg(long, default_value_t = 30)]
    aws_deliveries: usize,
    /// Folder of the release binaries (sender, relay, replay, hello-world).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Folder of the `cargo lambda build --output-format zip` output (`<name>/bootstrap.zip`).
    #[arg(long)]
    lambda_dir: Option<PathBuf>,
    /// Where the report goes.
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Internal: a webhook receiver answering 200 after `delay_ms`; prints its port and
    /// runs until standard input closes.
    Receiver {
        #[arg(long, default_value_t = 0)]
        delay_ms: u64,
    },
    /// Only the endpoint-health benchmark (`make bench-health`); writes `<out>/health.md`
    /// (also printed) and `<out>/health.json`. About 13 minutes: the local-mode runs on
    /// moto (5.5), then the noisy-neighbour scenario on in-memory ports (about 7).
    Health {
        /// Only the noisy-neighbour scenario on in-memory ports (`make bench-isolation`,
        /// about 7 minutes); writes `<out>/isolation.md` and `<out>/isolation.json`.
        #[arg(long)]
        in_memory: bool,
        /// Only these dead-endpoint kinds in the in-memory scenario (`503`, `refused`,
        /// `timeout`; default all three).
        #[arg(long, value_delimiter = ',')]
        dead: Vec<isolation::DeadKind>,
    },
    /// Only the AWS requests per delivery (`make bench-requests`): the happy, retry and
    /// dead-letter scenarios on moto behind the counting proxy; writes `<out>/requests.md`
    /// (also printed). About a minute.
    Requests,
    /// Only the relay at fan-out scale (`make bench-relay`): the real relay binary, one
    /// event x 500 endpoints x 256 KiB and 100 events x 500 endpoints; writes
    /// `<out>/relay.md` (also printed) and `<out>/relay.json`.
    Relay,
    /// Only the rate limit per endpoint (`make bench-rate`): a burst of 1,000 deliveries
    /// to an endpoint limited to 10 per second, 4 concurrent
    /// sender batches in local mode; writes `<out>/rate.md` (also printed) and
    /// `<out>/rate.json`. About 2-6 minutes (local mode on moto).
    Rate,
    /// Only adaptive pacing (`make bench-pacing`): bursts of 200 deliveries to receivers
    /// that take 5, 50 or all requests a second and answer the rest `429 Retry-After: 1`,
    /// 20 concurrent sender batches in local mode; writes `<out>/pacing.md` (also printed)
    /// and `<out>/pacing.json`. About 2-4 minutes.
    Pacing,
    /// Only the requests per delivery with OAuth2 client credentials on (`make
    /// bench-reach`): no authentication, then tokens of an hour and of 4 s, on moto
    /// behind the counting proxy with a token server on 127.0.0.1; writes `<out>/reach.md`
    /// (also printed). About a minute.
    Reach,
    /// Only the Tern API (`make bench-api`): each route's latency in local mode against the
    /// same port calls made directly, and a publish's cost; writes `<out>/api.md` (also
    /// printed) and `<out>/api.json`. About two minutes.
    Api,
    /// Only the customer portal (`make bench-portal`): each page's weight (uncompressed
    /// and gzip), render time in local mode and AWS calls per view; writes
    /// `<out>/portal.md` (also printed) and `<out>/portal.json`. About a minute.
    Portal,
    /// The scale meter (`make bench-scale`, not part of `make bench`): the real relay and
    /// sender binaries in local mode behind a recording proxy, four scenarios (a 5,000-
    /// endpoint fan-out, a hot endpoint healthy / 429 / dead, 10,000 endpoints over 100
    /// tenants with mixed batches, a 10x burst), projected to the target against AWS's
    /// limits; writes `<out>/scale.md` (also printed) and `<out>/scale.json`. About 14
    /// minutes on 2 busy cores.
    Scale(scale::ScaleArgs),
    /// Only what tracing costs (`make bench-tracing`): the sender's CPU per delivery and the
    /// sender's and relay's cold starts, tracing on against off; writes `<out>/tracing.md`
    /// (also printed). About a minute.
    Tracing,
    /// Internal: one side of the tracing CPU benchmark; prints microseconds per delivery.
    TracingCpu {
        #[arg(long)]
        on: bool,
        #[arg(long, default_value_t = tracing_cost::DELIVERIES)]
        deliveries: usize,
    },
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| PathBuf::from("target"), PathBuf::from)
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    match args.command {
        Some(Command::Receiver { delay_ms }) => runtime.block_on(serve_receiver(delay_ms)),
        Some(Command::Health { in_memory, dead }) => {
            runtime.block_on(health_only(&args.out, in_memory, &dead))
        }
        Some(Command::Requests) => runtime.block_on(requests_only(&args.out, args.aws_deliveries)),
        Some(Command::Relay) => runtime.block_on(relay_only(&args)),
        Some(Command::Rate) => runtime.block_on(rate_only(&args.out)),
        Some(Command::Pacing) => runtime.block_on(pacing_only(&args.out)),
        Some(Command::Reach) => runtime.block_on(reach_only(&args.out, args.aws_deliveries)),
        Some(Command::Api) => runtime.block_on(api_only(&args)),
        Some(Command::Portal) => runtime.block_on(portal_only(&args.out)),
        Some(Command::Scale(ref scale_args)) => {
            runtime.block_on(scale::run(scale_args, args.bin_dir.clone(), &args.out))
        }
        Some(Command::Tracing) => runtime.block_on(tracing_only(&args)),
        Some(Command::TracingCpu { on, deliveries }) => {
            runtime.block_on(tracing_cost::child(on, deliveries))
        }
        None => runtime.block_on(run(args)),
    }
}

async fn serve_receiver(delay_ms: u64) -> Result<(), BoxError> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    println!("{}", listener.local_addr()?.port());
    // Also the OTLP sink of the tracing benchmark: an empty ExportTraceServiceResponse.
    let app = axum::Router::new()
        .route(
            "/v1/traces",
            axum::routing::post(|| async { ([("content-type", "application/x-protobuf")], "") }),
        )
        .fallback(move || async move {
            if delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            }
            "ok"
        });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    // Ends with the parent: its end of our stdin closes.
    let _ = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
    })
    .await;
    Ok(())
}

/// A receiver in a child process.
struct ChildReceiver {
    port: u16,
    _child: tokio::process::Child,
}

impl ChildReceiver {
    async fn start(delay_ms: u64) -> Result<Self, BoxError> {
        let mut child = tokio::process::Command::new(std::env::current_exe()?)
            .args(["receiver", "--delay-ms", &delay_ms.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().ok_or("receiver stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).await?;
        Ok(Self {
            port: line.trim().parse()?,
            _child: child,
        })
    }
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }
    fn port(&self) -> u16 {
        self.port
    }
}

async fn health_only(
    out: &Path,
    in_memory_only: bool,
    dead: &[isolation::DeadKind],
) -> Result<(), BoxError> {
    std::fs::create_dir_all(out)?;
    let report = if in_memory_only {
        None
    } else {
        Some(health::run().await?)
    };
    let isolation = isolation::run(dead).await?;
    // The in-memory scenario alone writes files of its own, next to a local-mode run's.
    let (name, title) = if in_memory_only {
        ("isolation", "isolation in memory")
    } else {
        ("health", "endpoint health")
    };
    let md = format!(
        "# Tern benchmarks: {title}\n{}{}",
        report
            .as_ref()
            .map(health::HealthReport::markdown)
            .unwrap_or_default(),
        isolation.markdown()
    );
    println!("\n{md}");
    std::fs::write(out.join(format!("{name}.md")), &md)?;
    std::fs::write(
        out.join(format!("{name}.json")),
        serde_json::to_string_pretty(&json!({ "local_mode": report, "in_memory": isolation }))?,
    )?;
    eprintln!("wrote {}", out.join(format!("{name}.md")).display());
    Ok(())
}

async fn requests_only(out: &Path, deliveries: usize) -> Result<(), BoxError> {
    std::fs::create_dir_all(out)?;
    let moto = MotoServer::start().await?;
    let proxy =
        CountingProxy::start(&moto.url, &["relay", "sender", "esm", "app", "binary"]).await?;
    let aws = aws_counts(&proxy, deliveries).await?;
    let md = format!(
        "# Tern benchmarks: AWS requests per delivery\n\n{}",
        aws.markdown()
    );
    println!("\n{md}");
    std::fs::write(out.join("requests.md"), &md)?;
    eprintln!("wrote {}", out.join("requests.md").display());
    Ok(())
}

async fn reach_only(out: &Path, deliveries: usize) -> Result<(), BoxError> {
    std::fs::create_dir_all(out)?;
    let moto = MotoServer::start().await?;
    let proxy =
        CountingProxy::start(&moto.url, &["relay", "sender", "esm", "app", "binary"]).await?;
    let runs = reach::run(&proxy, deliveries).await?;
    let md = format!(
        "# Tern benchmarks: reach (OAuth2 client credentials)\n{}",
        reach::markdown(&runs)
    );
    println!("\n{md}");
    std::fs::write(out.join("reach.md"), &md)?;
    eprintln!("wrote {}", out.join("reach.md").display());
    Ok(())
}

async fn api_only(args: &Args) -> Result<(), BoxError> {
    let out = &args.out;
    std::fs::create_dir_all(out)?;
    let bin_dir = args
        .bin_dir
        .clone()
        .unwrap_or_else(|| target_dir().join("release"));
    // The api binary's cold start and size against the reference, as `make bench` measures
    // them for every function.
    let mut rows = cold_starts(&bin_dir, args.rounds, &["api"]).await?;
    rows.extend(
        sizes(&bin_dir, &target_dir().join("lambda-zip"))
            .into_iter()
            .filter(|r| r.measure.ends_with(", api") || r.measure.contains(", api;")),
    );
    let report = api::run().await?;
    let md = format!(
        "# Tern benchmarks: the Tern API\n\n{}{}",
        stats::markdown(&rows),
        report.markdown()
    );
    println!("\n{md}");
    std::fs::write(out.join("api.md"), &md)?;
    std::fs::write(
        out.join("api.json"),
        serde_json::to_string_pretty(&json!({"functions": rows, "api": report}))?,
    )?;
    eprintln!("wrote {}", out.join("api.md").display());
    Ok(())
}

async fn relay_only(args: &Args) -> Result<(), BoxError> {
    std::fs::create_dir_all(&args.out)?;
    let bin_dir = args
        .bin_dir
        .clone()
        .unwrap_or_else(|| target_dir().join("release"));
    let runs = relay::run(&bin_dir).await?;
    let md = format!("# Tern benchmarks: the relay\n{}", relay::markdown(&runs));
    println!("\n{md}");
    std::fs::write(args.out.join("relay.md"), &md)?;
    std::fs::write(
        args.out.join("relay.json"),
        serde_json::to_string_pretty(&runs)?,
    )?;
    eprintln!("wrote {}", args.out.join("relay.md").display());
    Ok(())
}

async fn tracing_only(args: &Args) -> Result<(), BoxError> {
    std::fs::create_dir_all(&args.out)?;
    let bin_dir = args
        .bin_dir
        .clone()
        .unwrap_or_else(|| target_dir().join("release"));
    let rows = tracing_cost::run(&bin_dir, args.rounds, tracing_cost::DELIVERIES).await?;
    let md = format!(
        "# Tern benchmarks: what tracing costs\n\n{}\n{}",
        stats::markdown(&rows),
        tracing_cost::verdict(&rows)
    );
    println!("\n{md}");
    std::fs::write(args.out.join("tracing.md"), &md)?;
    eprintln!("wrote {}", args.out.join("tracing.md").display());
    Ok(())
}

async fn portal_only(out: &Path) -> Result<(), BoxError> {
    std::fs::create_dir_all(out)?;
    let report = portal::run().await?;
    let md = format!(
        "# Tern benchmarks: the customer portal\n{}",
        report.markdown()
    );
    println!("\n{md}");
    std::fs::write(out.join("portal.md"), &md)?;
    std::fs::write(
        out.join("portal.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    eprintln!("wrote {}", out.join("portal.md").display());
    Ok(())
}

async fn rate_only(out: &Path) -> Result<(), BoxError> {
    std::fs::create_dir_all(out)?;
    let moto = MotoServer::start().await?;
    let proxy =
        CountingProxy::start(&moto.url, &["relay", "sender", "esm", "app", "binary"]).await?;
    let report = rate_limit::run(&proxy).await?;
    let md = format!(
        "# Tern benchmarks: rate limit
{}",
        report.markdown()
    );
    println!("\n{md}");
    std::fs::write(out.join("rate.md"), &md)?;
    std::fs::write(
        out.join("rate.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    eprintln!("wrote {}", out.join("rate.md").display());
    Ok(())
}

async fn pacing_only(out: &Path) -> Result<(), BoxError> {
    std::fs::create_dir_all(out)?;
    let moto = MotoServer::start().await?;
    let proxy =
        CountingProxy::start(&moto.url, &["relay", "sender", "esm", "app", "binary"]).await?;
    let report = pacing::run(&proxy).await?;
    let md = format!(
        "# Tern benchmarks: adaptive pacing
{}",
        report.markdown()
    );
    println!("\n{md}");
    std::fs::write(out.join("pacing.md"), &md)?;
    std::fs::write(
        out.join("pacing.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    eprintln!("wrote {}", out.join("pacing.md").display());
    Ok(())
}

fn progress(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{msg:>28} [{bar:30}] {pos}/{len} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(what.to_owned());
    bar
}

async fn run(args: Args) -> Result<(), BoxError> {
    let bin_dir = args
        .bin_dir
        .clone()
        .unwrap_or_else(|| target_dir().join("release"));
    let lambda_dir = args
        .lambda_dir
        .clone()
        .unwrap_or_else(|| target_dir().join("lambda-zip"));
    std::fs::create_dir_all(&args.out)?;
    let started = Instant::now();
    let mut rows = Vec::new();

    rows.extend(cold_starts(&bin_dir, args.rounds, &FUNCTIONS).await?);
    rows.push(cpu_per_delivery(args.rounds, args.cpu_deliveries).await?);
    // What tracing costs (issue 30): CPU per delivery and cold starts, on against off.
    rows.extend(tracing_cost::run(&bin_dir, args.rounds, tracing_cost::DELIVERIES).await?);
    rows.push(batch_latency(args.rounds).await?);

    let moto = MotoServer::start().await?;
    let proxy =
        CountingProxy::start(&moto.url, &["relay", "sender", "esm", "app", "binary"]).await?;
    let binary = binary_runs(&bin_dir, args.rounds, &proxy).await?;
    rows.push(binary.rss.clone());
    rows.push(binary.log_row.clone());
    let aws = aws_counts(&proxy, args.aws_deliveries).await?;
    let rate = rate_limit::run(&proxy).await?;
    let pacing = pacing::run(&proxy).await?;
    rows.extend(sizes(&bin_dir, &lambda_dir));

    let model = cost::Inputs {
        happy: aws.per_delivery("happy"),
        retry: aws.per_delivery("retry"),
        dead_letter: aws.per_delivery("dead_letter"),
        log_bytes_per_delivery: binary.log_row.tern.median(),
        sender_invocation_ms: binary.invocation_ms.median(),
    };
    let costs = cost::table(&model);
    drop(proxy);
    drop(moto);
    let relay_runs = relay::run(&bin_dir).await?;
    let api_report = api::run().await?;
    let health = health::run().await?;
    let isolation = isolation::run(&[]).await?;

    let mut md = String::from("# Tern benchmarks\n\n");
    md.push_str(&format!(
        "Run of {} (`make bench`), {} rounds, alternated; {:.0} s.\n\n",
        chrono::Utc::now().format("%Y-%m-%d %H:%M UTC"),
        args.rounds,
        started.elapsed().as_secs_f64()
    ));
    md.push_str(&stats::markdown(&rows));
    md.push_str(
        "\n## AWS requests per delivery (counted on the wire, moto behind a counting proxy)\n\n",
    );
    md.push_str(&aws.markdown());
    md.push_str(&format!(
        "\nReal sender binary, happy path, per delivery: {}\n",
        per_delivery_text(&binary.binary_counts, binary.deliveries)
    ));
    md.push_str("\n## Cost per million deliveries (1 KiB payloads, full batches; model in docs/cost.md)\n\n");
    md.push_str(&cost::markdown(&costs));
    md.push_str(&relay::markdown(&relay_runs));
    md.push_str(&api_report.markdown());
    md.push_str(&health.markdown());
    md.push_str(&isolation.markdown());
    md.push_str(&rate.markdown());
    md.push_str(&pacing.markdown());
    println!("\n{md}");
    std::fs::write(args.out.join("report.md"), &md)?;
    let report = json!({
        "rows": rows,
        "aws_requests": aws.scenarios,
        "aws_deliveries_per_scenario": aws.deliveries,
        "binary_happy_path_counts": binary.binary_counts,
        "binary_deliveries": binary.deliveries,
        "sender_invocation_ms": binary.invocation_ms,
        "cost_inputs": model,
        "cost": costs,
        "relay_fan_out": relay_runs,
        "api": api_report,
        "endpoint_health": health,
        "isolation_in_memory": isolation,
        "rate_limit": rate,
        "pacing": pacing,
    });
    std::fs::write(
        args.out.join("report.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    eprintln!(
        "wrote {} and {}",
        args.out.join("report.md").display(),
        args.out.join("report.json").display()
    );
    Ok(())
}

// ---- cold start -------------------------------------------------------------------------

/// Environment for a cold start: dummy resource names and an AWS endpoint nobody listens
/// on (port 9, discard), so a function that called AWS at init would fail, not reach out.
fn dummy_env() -> Vec<(String, String)> {
    let q = |n: &str| format!("http://127.0.0.1:9/123456789012/{n}");
    [
        ("TERN_ENDPOINTS_TABLE", "bench-endpoints".to_owned()),
        ("TERN_ATTEMPTS_TABLE", "bench-attempts".to_owned()),
        ("TERN_HEALTH_TABLE", "bench-health".to_owned()),
        ("TERN_OUTBOX_TABLE", "bench-outbox".to_owned()),
        ("TERN_DELIVERY_QUEUE_URL", q("bench-delivery")),
        ("TERN_DLQ_URL", q("bench-dlq")),
        ("TERN_RELAY_FAILURE_QUEUE_URL", q("bench-relay-failure")),
        (
            "TERN_DELAY_STATE_MACHINE_ARN",
            "arn:aws:states:us-east-1:123456789012:stateMachine:bench".to_owned(),
        ),
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:9".to_owned()),
        ("AWS_REGION", "us-east-1".to_owned()),
        ("AWS_ACCESS_KEY_ID", "testing".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "testing".to_owned()),
        ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
        ("RUST_LOG", "info".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

fn binary_path(bin_dir: &Path, name: &str) -> Result<PathBuf, BoxError> {
    let p = bin_dir.join(name);
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!(
            "{} missing: build with `cargo build --release -p tern-sender -p tern-relay -p tern-replay -p tern-api-fn -p tern-bench-hello` (make bench does)",
            p.display()
        )
        .into())
    }
}

/// Spawn -> first `GET .../invocation/next`, milliseconds.
async fn cold_start(bin: &Path, name: &str) -> Result<f64, BoxError> {
    cold_start_with(bin, name, &[]).await
}

/// [`cold_start`] with `extra` variables in the environment.
async fn cold_start_with(bin: &Path, name: &str, extra: &[(&str, &str)]) -> Result<f64, BoxError> {
    let api = RuntimeApi::start().await?;
    let mut cmd = tokio::process::Command::new(bin);
    cmd.env_clear()
        .envs(api.lambda_env(name, MEMORY_MB))
        .envs(dummy_env())
        .envs(extra.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let t0 = Instant::now();
    let mut child = cmd.spawn()?;
    let ready = api.first_next(Duration::from_secs(20)).await;
    let _ = child.kill().await;
    let ready = ready.ok_or_else(|| format!("{name} never asked for an event"))?;
    Ok(ready.duration_since(t0).as_secs_f64() * 1e3)
}

/// The function binaries `make bench` measures.
const FUNCTIONS: [&str; 4] = ["sender", "relay", "replay", "api"];

/// Cold starts of the function binaries `names` against the hello-world reference,
/// alternated, `rounds` each (milliseconds).
async fn cold_starts(bin_dir: &Path, rounds: usize, names: &[&str]) -> Result<Vec<Row>, BoxError> {
    let hello = binary_path(bin_dir, "hello-world")?;
    let mut tern: BTreeMap<&str, Sample> = BTreeMap::new();
    let mut reference = Sample::default();
    let bar = progress((rounds * (names.len() + 1)) as u64, "cold start");
    for round in 0..rounds {
        // Alternate the order each round so no binary always runs first (page cache).
        let mut order: Vec<Option<&str>> = names.iter().copied().map(Some).collect();
        order.push(None);
        let len = order.len();
        order.rotate_left(round % len);
        for which in order {
            match which {
                Some(n) => tern
                    .entry(n)
                    .or_default()
                    .push(cold_start(&binary_path(bin_dir, n)?, n).await?),
                None => reference.push(cold_start(&hello, "hello-world").await?),
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    Ok(names
        .iter()
        .map(|n| Row {
            measure: format!("cold start (spawn -> first `next`), {n}"),
            unit: "ms".into(),
            tern: tern.remove(n).unwrap_or_default(),
            reference: "hello-world lambda_runtime".into(),
            reference_sample: reference.clone(),
        })
        .collect())
}

// ---- CPU and batching, in-memory ports ---------------------------------------------------

fn payload_json(bytes: usize, seed: &str) -> String {
    // A JSON object whose serialised form is `bytes` long.
    let overhead = r#"{"seed":"","data":""}"#.len() + seed.len();
    let fill = "x".repeat(bytes.saturating_sub(overhead));
    format!(r#"{{"seed":"{seed}","data":"{fill}"}}"#)
}

fn delivery_body(event_id: &str, endpoint: &str, tenant: &str, payload: &str) -> String {
    json!({
        "version": 1,
        "delivery_id": format!("{event_id}.{endpoint}"),
        "event": {
            "id": event_id,
            "type": "order.paid",
            "tenant_id": tenant,
            "created_at": "2026-11-01T00:00:00.000Z",
            "payload": serde_json::from_str::<serde_json::Value>(payload).unwrap_or_default(),
        },
        "endpoint_id": endpoint,
        "attempt": 1,
        "replay_count": 0,
    })
    .to_string()
}

fn sqs_event_json(bodies: &[String]) -> serde_json::Value {
    let records: Vec<serde_json::Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, body)| {
            json!({
                "messageId": format!("00000000-0000-4000-8000-{i:012}"),
                "receiptHandle": format!("rh-{i}"),
                "body": body,
                "attributes": {"ApproximateReceiveCount": "1"},
                "messageAttributes": {},
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:tern-delivery",
                "awsRegion": "us-east-1",
            })
        })
        .collect();
    json!({ "Records": records })
}

fn batch(prefix: &str, n: usize, payload_bytes: usize, tenant: &str) -> serde_json::Value {
    let bodies: Vec<String> = (0..n)
        .map(|i| {
            let id = format!("evt_{prefix}_{i}");
            delivery_body(&id, "ep_bench", tenant, &payload_json(payload_bytes, &id))
        })
        .collect();
    sqs_event_json(&bodies)
}

fn memory_deps(url: &str) -> Result<SenderDeps, BoxError> {
    let endpoint = Endpoint::new(
        EndpointId::new("ep_bench")?,
        TenantId::new("tnt_bench")?,
        url,
        vec!["*".into()],
        Secret::generate(),
        chrono::Utc::now(),
    );
    let client = tern_http::DeliveryClient::new(tern_http::ClientOptions {
        policy: tern_http::DestinationPolicy {
            https_only: false,
            allow: vec!["127.0.0.1/32".parse()?],
            nat64: false,
        },
        ..tern_http::ClientOptions::default()
    })?;
    Ok(SenderDeps {
        endpoints: Arc::new(fakes::OneEndpoint(endpoint)),
        ledger: Arc::new(fakes::CountingLedger::default()),
        delivery_queue: Arc::new(fakes::NullQueue),
        dlq: Arc::new(fakes::NullQueue),
        scheduler: None,
        client,
        policy: tern_handlers::config::SenderPolicy::default(),
        breaker: None,
    })
}

/// User + system CPU of this process, seconds.
pub(crate) fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the struct we pass and nothing else.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn sqs_events(prefix: &str, batches: usize, size: usize) -> Result<Vec<SqsEvent>, BoxError> {
    (0..batches)
        .map(|b| {
            Ok(serde_json::from_value(batch(
                &format!("{prefix}{b}"),
                size,
                SMALL_PAYLOAD,
                "tnt_bench",
            ))?)
        })
        .collect()
}

async fn tern_batches(deps: &SenderDeps, events: Vec<SqsEvent>) -> Result<(), BoxError> {
    let metrics = Metrics::new("Tern", MetricsSink::Discard);
    for e in events {
        let (response, _) = tern_handlers::sender::handle(deps, e, &metrics).await;
        if !response.batch_item_failures.is_empty() {
            return Err("the sender reported failures against the loopback receiver".into());
        }
    }
    Ok(())
}

async fn raw_batches(client: &reqwest::Client, url: &str, batches: usize) -> Result<(), BoxError> {
    let body = payload_json(SMALL_PAYLOAD, "raw");
    for _ in 0..batches {
        let posts = (0..BATCH).map(|_| {
            client
                .post(url)
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
        });
        for r in futures::future::join_all(posts).await {
            r?.error_for_status()?.bytes().await?;
        }
    }
    Ok(())
}

async fn cpu_per_delivery(rounds: usize, deliveries: usize) -> Result<Row, BoxError> {
    let receiver = ChildReceiver::start(0).await?;
    let url = receiver.url();
    let deps = memory_deps(&url)?;
    let raw = reqwest::Client::new();
    let batches = deliveries.div_ceil(BATCH);
    let n = (batches * BATCH) as f64;
    // Warm both (connection pools, lazy statics).
    tern_batches(&deps, sqs_events("warm", 2, BATCH)?).await?;
    raw_batches(&raw, &url, 2).await?;
    let (mut tern, mut reference) = (Sample::default(), Sample::default());
    let bar = progress((rounds * 2) as u64, "CPU per delivery");
    for round in 0..rounds {
        for first in [round % 2 == 0, round % 2 == 1] {
            if first {
                let events = sqs_events(&format!("cpu{round}_"), batches, BATCH)?;
                let c0 = cpu_seconds();
                tern_batches(&deps, events).await?;
                tern.push((cpu_seconds() - c0) * 1e6 / n);
            } else {
                let c0 = cpu_seconds();
                raw_batches(&raw, &url, batches).await?;
                reference.push((cpu_seconds() - c0) * 1e6 / n);
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    Ok(Row {
        measure: format!(
            "CPU per delivery, {SMALL_PAYLOAD} B, in-memory ports, loopback receiver, batches of {BATCH}"
        ),
        unit: "us".into(),
        tern,
        reference: "raw reqwest POSTs, 10 concurrent".into(),
        reference_sample: reference,
    })
}

async fn batch_latency(rounds: usize) -> Result<Row, BoxError> {
    let receiver = ChildReceiver::start(200).await?;
    let deps = memory_deps(&receiver.url())?;
    let (mut ten, mut one) = (Sample::default(), Sample::default());
    let bar = progress((rounds * 2) as u64, "batch 10 vs 1, 200 ms");
    for round in 0..rounds {
        for size in if round % 2 == 0 {
            [BATCH, 1]
        } else {
            [1, BATCH]
        } {
            let events = sqs_events(&format!("lat{round}_{size}_"), 1, size)?;
            let t0 = Instant::now();
            tern_batches(&deps, events).await?;
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            if size == BATCH {
                ten.push(ms)
            } else {
                one.push(ms)
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    Ok(Row {
        measure:
            "sender invocation, batch of 10 (Tern) vs batch of 1 (ref), receiver answers in 200 ms"
                .into(),
        unit: "ms".into(),
        tern: ten,
        reference: "batch of 1".into(),
        reference_sample: one,
    })
}

// ---- real binaries: memory, log bytes ------------------------------------------------

struct BinaryRuns {
    rss: Row,
    log_row: Row,
    invocation_ms: Sample,
    binary_counts: Counts,
    deliveries: usize,
}

/// Peak resident set (`VmHWM` in `/proc/<pid>/status`), MB.
fn peak_rss_mb(pid: u32) -> Result<f64, BoxError> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or("no VmHWM")?;
    Ok(kb / 1024.0)
}

struct Running {
    api: RuntimeApi,
    child: tokio::process::Child,
}

async fn spawn_function(
    bin: &Path,
    name: &str,
    env: &[(String, String)],
    stdout: Stdio,
) -> Result<Running, BoxError> {
    spawn_function_with(
        bin,
        name,
        env,
        stdout,
        tern_runtime_emulator::INVOCATION_DEADLINE_MS,
    )
    .await
}

/// [`spawn_function`] whose invocations each get `deadline_ms` milliseconds.
async fn spawn_function_with(
    bin: &Path,
    name: &str,
    env: &[(String, String)],
    stdout: Stdio,
    deadline_ms: u64,
) -> Result<Running, BoxError> {
    let api = RuntimeApi::start_with_deadline(deadline_ms).await?;
    let child = tokio::process::Command::new(bin)
        .env_clear()
        .envs(api.lambda_env(name, MEMORY_MB))
        .envs(env.iter().cloned())
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    Ok(Running { api, child })
}

impl Running {
    async fn invoke(&mut self, event: &serde_json::Value) -> Result<serde_json::Value, BoxError> {
        let payload = serde_json::to_vec(event)?;
        let outcome = tokio::select! {
            o = self.api.invoke(payload, Duration::from_secs(60)) => o?,
            s = self.child.wait() => return Err(format!("the function exited: {s:?}").into()),
        };
        match outcome {
            Outcome::Response(b) => Ok(serde_json::from_slice(&b)?),
            Outcome::Error(b) => Err(String::from_utf8_lossy(&b).into_owned().into()),
        }
    }
    fn pid(&self) -> Result<u32, BoxError> {
        self.child.id().ok_or_else(|| "the function exited".into())
    }
}

fn expect_no_failures(v: &serde_json::Value) -> Result<(), BoxError> {
    match v.get("batchItemFailures").and_then(|f| f.as_array()) {
        Some(f) if f.is_empty() => Ok(()),
        _ => Err(format!("the sender binary did not deliver everything: {v}").into()),
    }
}

async fn binary_runs(
    bin_dir: &Path,
    rounds: usize,
    proxy: &CountingProxy,
) -> Result<BinaryRuns, BoxError> {
    let sender = binary_path(bin_dir, "sender")?;
    let hello = binary_path(bin_dir, "hello-world")?;
    let receiver = ChildReceiver::start(0).await?;
    let options = LocalOptions {
        prefix: format!("bench-bin-{}-", std::process::id()),
        ..LocalOptions::default()
    };
    let local = LocalTern::create(
        tern_local::moto::sdk_config_for(&proxy.url("app")).await,
        &options,
    )
    .await?;
    let endpoint = Endpoint::new(
        EndpointId::new("ep_bench")?,
        TenantId::new("tnt_bench")?,
        receiver.url(),
        vec!["*".into()],
        Secret::generate(),
        chrono::Utc::now(),
    );
    tern_core::ports::EndpointStore::put(local.sender.endpoints.as_ref(), &endpoint).await?;
    let mut env = local.env.clone();
    env.extend(
        [
            ("AWS_ENDPOINT_URL", proxy.url("binary")),
            ("AWS_REGION", "us-east-1".to_owned()),
            ("AWS_ACCESS_KEY_ID", "testing".to_owned()),
            ("AWS_SECRET_ACCESS_KEY", "testing".to_owned()),
            ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
            ("RUST_LOG", "info".to_owned()),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );

    // Peak RSS: a fresh process per round and side, one batch of 10 x 256 KiB each.
    let (mut rss, mut rss_ref) = (Sample::default(), Sample::default());
    let bar = progress((rounds * 2) as u64, "peak RSS, 10 x 256 KiB");
    for round in 0..rounds {
        let event = batch(&format!("rss{round}"), BATCH, LARGE_PAYLOAD, "tnt_bench");
        for tern_first in [round % 2 == 0, round % 2 == 1] {
            if tern_first {
                let mut f = spawn_function(&sender, "sender", &env, Stdio::null()).await?;
                expect_no_failures(&f.invoke(&event).await?)?;
                rss.push(peak_rss_mb(f.pid()?)?);
            } else {
                let mut f = spawn_function(&hello, "hello-world", &env, Stdio::null()).await?;
                f.invoke(&event).await?;
                rss_ref.push(peak_rss_mb(f.pid()?)?);
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();

    // Log bytes and invocation time: one warm process, `rounds` batches of 10 x 1 KiB,
    // stdout (where Lambda's log capture reads the JSON logs and the EMF metrics) to a file.
    let log_path =
        std::env::temp_dir().join(format!("tern-bench-sender-{}.log", std::process::id()));
    let file = std::fs::File::create(&log_path)?;
    let mut f = spawn_function(&sender, "sender", &env, Stdio::from(file)).await?;
    // The first invocation builds connections; it is not part of the per-batch figures.
    let warm = batch("logwarm", BATCH, SMALL_PAYLOAD, "tnt_bench");
    expect_no_failures(&f.invoke(&warm).await?)?;
    let mut logs = Sample::default();
    let mut invocation_ms = Sample::default();
    proxy.reset();
    let mut deliveries = 0;
    for round in 0..rounds {
        let before = std::fs::metadata(&log_path)?.len();
        let event = batch(&format!("log{round}"), BATCH, SMALL_PAYLOAD, "tnt_bench");
        let t0 = Instant::now();
        expect_no_failures(&f.invoke(&event).await?)?;
        invocation_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        deliveries += BATCH;
        // The log writer flushes per line; give it a moment to reach the file.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let after = std::fs::metadata(&log_path)?.len();
        logs.push((after - before) as f64 / BATCH as f64);
    }
    let binary_counts = proxy.counts();
    drop(f);
    let _ = std::fs::remove_file(&log_path);
    Ok(BinaryRuns {
        rss: Row {
            measure: "peak RSS (VmHWM), real sender binary, one batch of 10 x 256 KiB".into(),
            unit: "MB".into(),
            tern: rss,
            reference: "hello-world, same event".into(),
            reference_sample: rss_ref,
        },
        log_row: Row {
            measure: "log bytes per delivery, sender at info (JSON logs + EMF metrics on stdout)"
                .into(),
            unit: "B".into(),
            tern: logs,
            reference: String::new(),
            reference_sample: Sample::default(),
        },
        invocation_ms,
        binary_counts,
        deliveries,
    })
}

// ---- AWS requests per delivery -------------------------------------------------------

struct AwsCounts {
    deliveries: usize,
    scenarios: BTreeMap<String, Counts>,
}

/// Labels whose calls are the functions' own (billed per delivery).
const FUNCTION_LABELS: [&str; 2] = ["relay", "sender"];

impl AwsCounts {
    /// Function calls per delivery, by operation (relay and sender together).
    fn per_delivery(&self, scenario: &str) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        if let Some(c) = self.scenarios.get(scenario) {
            for label in FUNCTION_LABELS {
                for (op, n) in c.get(label).into_iter().flatten() {
                    *out.entry(op.clone()).or_default() += *n as f64 / self.deliveries as f64;
                }
            }
        }
        out
    }

    fn markdown(&self) -> String {
        let mut s = format!(
            "{} deliveries per scenario, 1 KiB payloads, one endpoint. `relay` and `sender` are the functions' own calls; \
             `esm` is what the local event source mappings did (SQS ReceiveMessage/DeleteMessageBatch, stream reads), \
             idle polling during the run included; `app` is the outbox write in the application's transaction. \
             The endpoint's secrets are sealed (local mode seals them as a stack does): `kms:Decrypt` is paid once per \
             keyring epoch per warm sender per hour, whatever the number of endpoints, not per delivery, so its \
             per-delivery figure here is one call divided by this run's deliveries (docs/cost.md, \"Secrets at rest\").\n\n\
             | scenario | caller | operation | calls | per delivery |\n| --- | --- | --- | ---: | ---: |\n",
            self.deliveries
        );
        for (scenario, counts) in &self.scenarios {
            for (label, ops) in counts {
                for (op, n) in ops {
                    s.push_str(&format!(
                        "| {scenario} | {label} | {op} | {n} | {:.2} |\n",
                        *n as f64 / self.deliveries as f64
                    ));
                }
            }
        }
        s
    }
}

fn per_delivery_text(counts: &Counts, deliveries: usize) -> String {
    let mut parts = Vec::new();
    for ops in counts.values() {
        for (op, n) in ops {
            parts.push(format!("{op} {:.2}", *n as f64 / deliveries.max(1) as f64));
        }
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

async fn queue_depth(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<u64, BoxError> {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(A::ApproximateNumberOfMessages)
        .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
        .attribute_names(A::ApproximateNumberOfMessagesDelayed)
        .send()
        .await?;
    let a = out.attributes.unwrap_or_default();
    Ok(a.values().filter_map(|v| v.parse::<u64>().ok()).sum())
}

async fn aws_counts(proxy: &CountingProxy, n: usize) -> Result<AwsCounts, BoxError> {
    let mut scenarios = BTreeMap::new();
    let bar = progress(3, "AWS requests per delivery");
    for (scenario, behavior, max_attempts, expected_posts) in [
        ("happy", Behavior::Always(Reply::status(200)), None, n),
        (
            // Each delivery fails once, then succeeds on its retry: 2 POSTs each, however the
            // retries interleave with the first attempts. (`FailFirst { count: n }` failed
            // the first n requests of any delivery: a retry that came before the last first
            // attempt failed too and dead-lettered, and the run saw 57-59 of 60 POSTs.)
            "retry",
            Behavior::FailFirstOfEach { status: 500 },
            None,
            2 * n,
        ),
        (
            "dead_letter",
            Behavior::Always(Reply::status(500)),
            Some(1),
            n,
        ),
    ] {
        let counts = scenario_counts(
            proxy,
            scenario,
            behavior,
            |e| e.max_attempts = max_attempts,
            n,
            expected_posts,
        )
        .await
        .map_err(|e| format!("scenario {scenario}: {e}"))?;
        scenarios.insert(scenario.to_owned(), counts);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(AwsCounts {
        deliveries: n,
        scenarios,
    })
}

/// Publishes `n` events to one endpoint (at a receiver answering with `behavior`, set up
/// by `configure`) through local mode behind `proxy`, waits for `expected_posts` POSTs
/// and a drained queue, and returns the AWS calls counted.
pub(crate) async fn scenario_counts(
    proxy: &CountingProxy,
    scenario: &str,
    behavior: Behavior,
    configure: impl FnOnce(&mut Endpoint),
    n: usize,
    expected_posts: usize,
) -> Result<Counts, BoxError> {
    let sdk = |label: &str| {
        let url = proxy.url(label);
        async move { tern_local::moto::sdk_config_for(&url).await }
    };
    let options = LocalOptions {
        prefix: format!(
            "bench-{}-{}-",
            scenario.replace('_', "-"),
            std::process::id()
        ),
        // One retry after 1 s (an SQS DelaySeconds), then dead-letter: the retry scenario
        // fails each first attempt once.
        schedule: Some(tern_core::RetrySchedule::new(vec![1])?),
        // The circuit and auto-disable out of reach: these scenarios count what the retry
        // and dead-letter paths cost (health writes included); the health benchmark
        // measures the breaker itself.
        health: Some(tern_core::health::HealthPolicy {
            failure_threshold: 1000,
            min_attempts: 1_000_000,
            ..tern_core::health::HealthPolicy::default()
        }),
        ..LocalOptions::default()
    };
    let mut local = LocalTern::create(sdk("sender").await, &options).await?;
    let vars = local.env.clone();
    let lookup = move |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    local.relay = Arc::new(tern_aws::wiring::relay_deps(
        &tern_handlers::config::RelayConfig::from_env(&tern_handlers::config::Env(&lookup))?,
        &sdk("relay").await,
    ));
    let receiver = Receiver::start().await?;
    receiver.set("/hook", behavior);
    let mut endpoint = Endpoint::new(
        EndpointId::generate(),
        TenantId::new("tnt_bench")?,
        receiver.url("/hook"),
        vec!["*".into()],
        Secret::generate(),
        chrono::Utc::now(),
    );
    configure(&mut endpoint);
    endpoint.validate()?;
    // Written as the API or `tern` writes it (its own process, its own keyring cache), so the
    // sender unwraps the keyring's epoch key as it does in AWS (one `kms:Decrypt`).
    let writer_aws = sdk("app").await;
    tern_core::ports::EndpointStore::put(
        &tern_aws::DynamoEndpointStore::new(
            aws_sdk_dynamodb::Client::new(&writer_aws),
            &local.resources.endpoints_table,
        )
        .with_secrets(tern_aws::kms::secrets_at_rest(
            &writer_aws,
            Some(&local.resources.secrets_key_arn),
            Duration::from_secs(60),
        )),
        &endpoint,
    )
    .await?;
    let app = aws_sdk_dynamodb::Client::new(&sdk("app").await);
    let watch = aws_sdk_sqs::Client::new(&sdk("app").await);
    local.aws = sdk("esm").await;
    proxy.reset();
    let _events = local.start_pollers(&options);
    let writer = tern_outbox::OutboxWriter::new(&local.resources.outbox_table);
    for i in 0..n {
        let prepared = writer.prepare(
            "order.paid",
            "tnt_bench",
            payload_json(SMALL_PAYLOAD, &format!("{scenario}{i}")),
        )?;
        app.transact_write_items()
            .transact_items(prepared.transact_item()?)
            .send()
            .await?;
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while receiver.requests("/hook").len() < expected_posts {
        if Instant::now() > deadline {
            return Err(format!(
                "{} of {expected_posts} POSTs within 120 s",
                receiver.requests("/hook").len()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Let the pollers delete what was handled, and the last records land.
    loop {
        if queue_depth(&watch, &local.resources.delivery_queue_url).await? == 0 {
            break;
        }
        if Instant::now() > deadline {
            return Err("the delivery queue did not drain within 120 s".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if scenario == "dead_letter" {
        while queue_depth(&watch, &local.resources.dlq_url).await? < n as u64 {
            if Instant::now() > deadline {
                return Err("the DLQ did not fill within 120 s".into());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(local);
    let mut counts = proxy.counts();
    // The watcher's GetQueueAttributes calls are the benchmark's own.
    if let Some(app) = counts.get_mut("app") {
        app.remove("sqs:GetQueueAttributes");
    }
    proxy.reset();
    Ok(counts)
}

// ---- sizes ---------------------------------------------------------------------------

fn size_mb(p: &Path) -> Option<f64> {
    std::fs::metadata(p).ok().map(|m| m.len() as f64 / 1e6)
}

fn one(v: Option<f64>) -> Sample {
    Sample {
        values: v.into_iter().collect(),
    }
}

fn sizes(bin_dir: &Path, lambda_dir: &Path) -> Vec<Row> {
    let mut rows = Vec::new();
    for n in FUNCTIONS {
        rows.push(Row {
            measure: format!("release binary (host, {}), {n}", std::env::consts::ARCH),
            unit: "MB".into(),
            tern: one(size_mb(&bin_dir.join(n))),
            reference: "hello-world".into(),
            reference_sample: one(size_mb(&bin_dir.join("hello-world"))),
        });
    }
    for n in FUNCTIONS {
        rows.push(Row {
            measure: format!("arm64 zip (`make package`), {n}; goal <= 5 MB"),
            unit: "MB".into(),
            tern: one(size_mb(&lambda_dir.join(n).join("bootstrap.zip"))),
            reference: "hello-world".into(),
            reference_sample: one(size_mb(
                &lambda_dir.join("hello-world").join("bootstrap.zip"),
            )),
        });
    }
    rows
}
