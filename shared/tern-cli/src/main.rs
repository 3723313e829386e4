//! `tern`: the operator tool. Local mode and the demo, endpoints, attempt history, the
//! DLQ and replays. Table and queue names come from the same `TERN_*` variables the
//! functions read; AWS access from the usual AWS variables (`AWS_ENDPOINT_URL` for moto).

use std::io::{IsTerminal as _, Write};
use std::process::ExitCode;
use std::sync::Arc;

use aws_config::SdkConfig;
use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand};
use serde::Serialize;
use tern_aws::{DynamoEndpointStore, DynamoLedger, SqsQueue};
use tern_core::endpoint::EndpointUpdate;
use tern_core::event_store::EventStore as _;
use tern_core::ports::{DeliveryLedger as _, EndpointStore};
use tern_core::{
    DeadLetterReason, EndpointId, EventId, EventType, PayloadFormat, RetrySchedule, TenantId,
};
use tern_handlers::config::{DestinationSettings, Env};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::replay::{ReplayDeps, ReplayFilters, ReplayRequest};
use tern_http::DnsResolver;
use tern_ops::{self as ops, NewEndpoint, OpsError};

mod audit;
mod egress_ips;
#[cfg(feature = "local")]
mod local_mode;
mod reach_args;
mod relay_redrive;
mod relay_retry;
mod stack;

use stack::Names;

#[derive(Parser)]
#[command(
    name = "tern",
    version,
    about = "Tern: webhook delivery on AWS serverless. Operator tool and local mode.",
    after_help = "Exit codes: 0 done; 1 the command failed (unknown id, refused, AWS error); 2 usage error.\n\
        Names: TERN_* variables (source .tern/local.env for local mode), or --stack <name> for a deployed stack's outputs.\n\
        Logs: RUST_LOG=info (or debug) on stderr."
)]
struct Cli {
    /// Read table and queue names from this CloudFormation stack's outputs (instead of
    /// the TERN_* variables; see docs/operating.md for which output feeds which variable).
    #[arg(long, global = true, env = "TERN_STACK")]
    stack: Option<String>,
    /// Print JSON instead of a table (stable field names, see docs/operating.md).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

/// The dead-letter reasons `--reason` takes: help and error list the same ones.
fn reason_parser() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(DeadLetterReason::ALL.map(DeadLetterReason::as_str))
}

/// Parses `--payload-format`: `raw` or `standard_webhooks` (`standard-webhooks` too).
fn parse_payload_format(text: &str) -> Result<PayloadFormat, String> {
    text.parse()
        .map_err(|e: tern_core::request::PayloadFormatError| e.to_string())
}

/// `tern audit --grace`'s default as the flag reads it ("21m"): written from
/// [`ops::audit::DEFAULT_GRACE`], so the tool and the console keep one number.
static DEFAULT_GRACE_TEXT: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| humantime::format_duration(ops::audit::DEFAULT_GRACE).to_string());

/// Parses a duration (`90s`, `15m`, `1h`), as `humantime` reads it.
fn duration(text: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("{text:?} is not a duration like 90s, 15m or 1h: {e}"))
}

/// Parses an RFC 3339 time (`2026-11-30T10:00:00Z`) or a date (`2026-11-30`, midnight UTC).
fn utc_time(text: &str) -> Result<DateTime<Utc>, String> {
    tern_ops::when::parse_time(text, Utc::now()).map_err(|e| e.to_string())
}

#[derive(Subcommand)]
enum Command {
    /// Run the whole pipeline on this machine (moto as the local AWS) and report.
    Demo {
        /// Events to write.
        #[arg(long, default_value_t = 20)]
        events: usize,
        /// Real seconds per logical second of retry waits, in (0, 1].
        #[arg(long, default_value_t = 0.0005, value_parser = time_scale)]
        time_scale: f64,
    },
    /// Start local mode: moto, the resources, and the stream and queue pollers that
    /// call the handlers. Writes .tern/local.env; runs until Ctrl-C.
    Local {
        /// Real seconds per logical second of retry waits, in (0, 1] (1.0 = real time).
        #[arg(long, default_value_t = 1.0, value_parser = time_scale)]
        time_scale: f64,
    },
    /// Manage endpoints.
    Endpoints {
        #[command(subcommand)]
        command: EndpointCommand,
    },
    /// Print the trace of an event as a waterfall: the relay's fan-out, every attempt, wait,
    /// dead letter and replay on one time axis (docs/tracing.md). Reads the spans `tern
    /// local` collects in .tern/spans.jsonl when no OTLP endpoint is set.
    Trace {
        /// Event id (the webhook-id).
        event_id: String,
        /// The span file to read.
        #[arg(long, default_value = tern_handlers::span_log::DEFAULT_PATH)]
        file: std::path::PathBuf,
    },
    /// Show every attempt of an event, oldest first (times in UTC), with the response
    /// excerpt, when the next attempt is due, and a last row when it was dead-lettered.
    Attempts {
        /// Event id (the webhook-id).
        event_id: String,
        /// Only this endpoint's attempts.
        #[arg(long)]
        endpoint: Option<String>,
        /// The event's tenant: event ids are per tenant, and the ledger keeps each
        /// tenant's events apart. Without it, the --endpoint's tenant; without either,
        /// only attempts recorded under the event id alone (before the ledger was keyed by
        /// tenant) are found, and an event without any asks for it.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Inspect the DLQ without changing it: dead letters grouped by endpoint and reason.
    Dlq {
        /// Most messages to read.
        #[arg(long, default_value_t = 50)]
        max: u32,
        /// One line per dead letter instead of groups.
        #[arg(long, conflicts_with = "show")]
        list: bool,
        /// One dead letter whole (payload included), by its SQS message id.
        #[arg(long, value_name = "MESSAGE_ID")]
        show: Option<String>,
    },
    /// Move dead-lettered deliveries back to the delivery queue (fresh budget, same
    /// webhook-id). Refuses when a target endpoint is disabled or deleted (they would
    /// dead-letter again), unless you confirm on a terminal or pass --force.
    Replay {
        /// Count what would be replayed; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Only this endpoint.
        #[arg(long)]
        endpoint: Option<String>,
        /// Only this tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// Only this event (webhook-id).
        #[arg(long)]
        event: Option<String>,
        /// Only this event type.
        #[arg(long)]
        event_type: Option<String>,
        /// Only this dead-letter reason.
        #[arg(long, value_parser = reason_parser())]
        reason: Option<String>,
        /// Only deliveries dead-lettered at or after this time: a duration ago (30m, 1h,
        /// 2h30m, 7d), RFC 3339, or a date (UTC midnight).
        #[arg(long, value_parser = utc_time)]
        since: Option<DateTime<Utc>>,
        /// Only deliveries dead-lettered before this time: a duration ago (30m, 1h),
        /// RFC 3339, or a date (UTC midnight).
        #[arg(long, value_parser = utc_time)]
        until: Option<DateTime<Utc>>,
        /// Most messages to examine.
        #[arg(long)]
        max: Option<u32>,
        /// Replay even to disabled or deleted endpoints (they dead-letter again).
        #[arg(long)]
        force: bool,
    },
    /// Rotate the customer portal's signing key (TERN_PORTAL_KEY_SECRET, or the stack's
    /// PortalKeySecretArn): a new key signs portal links and sessions from now on, the
    /// current one keeps verifying, so live sessions go on. Each function instance reads
    /// the ring again within 5 minutes. Rotate at most once a day (a session lives at most
    /// 24 h and the ring keeps two keys).
    PortalRotateKey,
    /// What is waiting: per endpoint, the deliveries scheduled for a later attempt (queue
    /// delays and Step Functions waits alike, and those an open circuit, a pause or a rate
    /// limit holds back), each with its attempt number and due time (UTC), and the totals.
    /// Read from the ledger's waiting index, never by scanning SQS or Step Functions.
    Waiting {
        /// Only this endpoint.
        #[arg(long)]
        endpoint: Option<String>,
        /// Only this tenant's endpoints.
        #[arg(long)]
        tenant: Option<String>,
        /// Deliveries listed per endpoint, soonest due first (all are counted).
        #[arg(long, default_value_t = tern_ops::waiting::DEFAULT_PER_ENDPOINT)]
        max: usize,
    },
    /// Is anything lost? Accounts for every (event, subscribed endpoint) pair of the
    /// outbox events created in a window: delivered, waiting (next due time), in flight,
    /// dead-lettered (reason), parked in the relay-failure queue, or unaccounted (listed
    /// with its state item, attempts and age). Exit 1 when a pair is unaccounted. Reads
    /// the whole outbox table (a Scan), one ledger Query per event, and the DLQ and the
    /// relay-failure queue whole (their messages are hidden meanwhile; see docs/operating.md).
    Audit {
        /// Events created at or after this time: a duration ago (30m, 1h, 7d), RFC 3339,
        /// or a date (UTC midnight).
        #[arg(long, value_parser = utc_time, default_value = "24h")]
        since: DateTime<Utc>,
        /// Events created before this time (default: now).
        #[arg(long, value_parser = utc_time)]
        until: Option<DateTime<Utc>>,
        /// Only this tenant's events.
        #[arg(long)]
        tenant: Option<String>,
        /// Only this endpoint's pairs.
        #[arg(long)]
        endpoint: Option<String>,
        /// How long a pair may show no progress before it is unaccounted (real time:
        /// 90s, 15m, 1h). The default covers a delivery held back behind an open circuit
        /// (up to 900 s) and its return (`tern_ops::audit::DEFAULT_GRACE`).
        #[arg(long, value_parser = duration, default_value = DEFAULT_GRACE_TEXT.as_str())]
        grace: std::time::Duration,
        /// Wait before looking again at unaccounted pairs (0s: no second look).
        #[arg(long, value_parser = duration, default_value = "10s")]
        recheck_after: std::time::Duration,
        /// Most messages read of the DLQ and of the relay-failure queue, each.
        #[arg(long, default_value_t = ops::audit::DEFAULT_QUEUE_MAX)]
        queue_max: usize,
        /// Ledger Queries in flight.
        #[arg(long, default_value_t = ops::audit::DEFAULT_CONCURRENCY as u64, value_parser = clap::value_parser!(u64).range(1..=256))]
        concurrency: u64,
        /// Segments of the outbox Scan read concurrently (1-64).
        #[arg(long, default_value_t = tern_aws::outbox_reader::DEFAULT_SCAN_SEGMENTS, value_parser = clap::value_parser!(u32).range(1..=64))]
        scan_segments: u32,
        /// Most pairs listed that are not delivered (all are counted).
        #[arg(long, default_value_t = ops::audit::DEFAULT_MAX_LISTED)]
        max_listed: usize,
    },
    /// The fixed source IPs of a stack deployed with egress static (its EgressIps output),
    /// one per line: give every one to receivers whose firewalls admit listed addresses.
    /// Needs --stack (or TERN_STACK); a stack with shared egress has none (exit 1).
    EgressIps,
    /// The relay-failure queue: outbox items the relay could not relay, by Tern event id
    /// and reason. --retry relays one again once the cause is fixed.
    RelayFailures {
        /// Most messages to read.
        #[arg(long, default_value_t = 50)]
        max: u32,
        /// Re-read this parked item's outbox item by its keys and relay it again (then
        /// remove it from the queue), by its SQS message id. For a batch the stream
        /// mapping gave up on, relay every event of its range again: read from the stream
        /// while it holds the range (24 h), else the outbox items created in its window.
        #[arg(long, value_name = "MESSAGE_ID")]
        retry: Option<String>,
    },
}

#[derive(Subcommand)]
enum EndpointCommand {
    /// Register an endpoint. Prints its id and signing secret (shown once), and with
    /// `--signatures v1a|both` the Ed25519 public key to give the receiver.
    #[command(after_help = reach_args::SOURCE_HELP)]
    Add {
        /// Tenant (application) id.
        #[arg(long)]
        tenant: String,
        /// Receiver URL.
        #[arg(long)]
        url: String,
        /// Event types, comma-separated; `*` for all.
        #[arg(long, default_value = "*", value_delimiter = ',')]
        types: Vec<String>,
        /// Attempt budget (default: schedule length + 1).
        #[arg(long)]
        max_attempts: Option<u32>,
        /// Attempt deadline in milliseconds (1000-30000).
        #[arg(long)]
        timeout_ms: Option<u64>,
        /// Retry schedule: `default`, `short`, or seconds like `60,300,1800`.
        #[arg(long)]
        schedule: Option<String>,
        /// Note for operators.
        #[arg(long)]
        description: Option<String>,
        /// Request body: `raw` (the payload as written) or `standard_webhooks` (wrapped as
        /// `{"type","timestamp","data"}`, the Standard Webhooks payload structure).
        #[arg(long, default_value = "raw", value_parser = parse_payload_format)]
        payload_format: PayloadFormat,
        /// Rate limit: at most this many requests per second (1-1000) across every sender
        /// batch; deliveries over it wait on the queue without spending an attempt.
        /// Default: no limit.
        #[arg(long)]
        max_per_second: Option<u32>,
        /// Send each attempt's W3C `traceparent` header, so a receiver that traces sees the
        /// delivery as the parent of its own work (docs/tracing.md). Default: not sent.
        #[arg(long)]
        send_traceparent: bool,
        #[command(flatten)]
        reach: Box<reach_args::ReachArgs>,
    },
    /// Each endpoint's health: state (healthy, degraded, paused, open, disabled), success
    /// rate over the window (1 h) and 24 h, attempts in the window, last success, last
    /// failure (status and what the receiver answered), failing since, circuit opened at,
    /// deliveries waiting and the next due time, next probe or the end of a pause.
    /// Thresholds from the `TERN_HEALTH_*` variables (defaults otherwise).
    Health {
        /// Only this tenant.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// List endpoints.
    List {
        /// Only this tenant.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Show every field of an endpoint (secrets as fingerprints, never their value).
    Show {
        /// Endpoint id.
        endpoint: String,
        /// Tenant id (found by the id when omitted).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Change settings; only the options given change. A new URL (and an OAuth2 token
    /// URL) is checked like `add`. `--auth` replaces the whole authentication setting;
    /// `--header`/`--secret-header` add or replace headers by name.
    #[command(after_help = reach_args::SOURCE_HELP)]
    Update {
        /// Endpoint id.
        endpoint: String,
        /// Tenant id (found by the id when omitted).
        #[arg(long)]
        tenant: Option<String>,
        /// New receiver URL.
        #[arg(long)]
        url: Option<String>,
        /// New event types, comma-separated; `*` for all.
        #[arg(long, value_delimiter = ',')]
        types: Option<Vec<String>>,
        /// New note for operators ("" removes it).
        #[arg(long)]
        description: Option<String>,
        /// New attempt deadline in milliseconds (1000-30000); 0 = deployment default.
        #[arg(long)]
        timeout_ms: Option<u64>,
        /// New retry schedule: `default`, `short`, or seconds like `60,300,1800`;
        /// `deployment` = the deployment default.
        #[arg(long)]
        schedule: Option<String>,
        /// New attempt budget; 0 = schedule length + 1.
        #[arg(long)]
        max_attempts: Option<u32>,
        /// New request body format: `raw` or `standard_webhooks`.
        #[arg(long, value_parser = parse_payload_format)]
        payload_format: Option<PayloadFormat>,
        /// New rate limit in requests per second (1-1000); 0 = no limit.
        #[arg(long)]
        max_per_second: Option<u32>,
        /// Send each attempt's W3C `traceparent` header (`true`) or stop (`false`).
        #[arg(long, value_name = "BOOL")]
        send_traceparent: Option<bool>,
        /// Remove the custom header NAME (repeatable).
        #[arg(long, value_name = "NAME")]
        remove_header: Vec<String>,
        /// Remove every custom header (before adding those given with it).
        #[arg(long)]
        clear_headers: bool,
        #[command(flatten)]
        reach: Box<reach_args::ReachArgs>,
    },
    /// Disable an endpoint: its deliveries, new and queued, are dead-lettered
    /// `endpoint_disabled` without a POST, each with a row in the attempt log; enable it and
    /// replay them (`tern replay --reason endpoint_disabled`) to send them.
    Disable {
        /// Endpoint id.
        endpoint: String,
        /// Tenant id (found by the id when omitted).
        #[arg(long)]
        tenant: Option<String>,
        /// Why. Replaces an earlier reason; without it an earlier reason is kept (else
        /// "disabled by an operator").
        #[arg(long)]
        reason: Option<String>,
    },
    /// Enable a disabled endpoint (by a 410 or an operator); the old reason is kept as
    /// the last disabled reason.
    Enable {
        /// Endpoint id.
        endpoint: String,
        /// Tenant id (found by the id when omitted).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Delete an endpoint; queued deliveries to it dead-letter as endpoint_deleted.
    Delete {
        /// Endpoint id.
        endpoint: String,
        /// Tenant id (found by the id when omitted).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Seal every endpoint secret not yet under the secrets keyring's current epoch:
    /// plain text (a deployment from before sealing), values sealed with a data key each
    /// (tern1, before the keyring) and values of older epochs. Run it once after an
    /// upgrade; with --new-epoch it rotates the keyring first (docs/security.md). Needs
    /// TERN_SECRETS_KEY_ID or --stack, kms:Decrypt, and kms:GenerateDataKey for a new
    /// epoch. Safe to run again.
    EncryptSecrets {
        /// Start a new keyring epoch first (a fresh key from KMS), then re-seal every
        /// secret under it; values of older epochs stay readable meanwhile.
        #[arg(long)]
        new_epoch: bool,
    },
    /// New Ed25519 key for v1a signatures; the old one keeps signing during the overlap.
    /// Prints the new public key (whpk_) for the receiver; the secret key is never shown.
    RotateSigningKey {
        /// Endpoint id.
        endpoint: String,
        /// Tenant id (found by the id when omitted).
        #[arg(long)]
        tenant: Option<String>,
        /// Hours both keys sign (0-720).
        #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(i64).range(0..=720))]
        overlap_hours: i64,
    },
    /// New signing secret; the old one keeps signing during the overlap.
    RotateSecret {
        /// Endpoint id.
        endpoint: String,
        /// Tenant id (found by the id when omitted).
        #[arg(long)]
        tenant: Option<String>,
        /// Hours both secrets sign (0-720).
        #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(i64).range(0..=720))]
        overlap_hours: i64,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    // No log lines unless RUST_LOG asks for them: the CLI says what went wrong in its own
    // `error: ...` line, and a handler's tracing line next to it would only repeat it in
    // another shape. Colour codes only on a terminal. The guard keeps secrets out at any
    // level.
    {
        use std::io::IsTerminal as _;
        use tracing_subscriber::layer::SubscriberExt as _;
        use tracing_subscriber::util::SubscriberInitExt as _;
        tracing_subscriber::registry()
            .with(tern_handlers::logging::guard())
            .with(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "off".into()),
            )
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(std::io::stderr().is_terminal()),
            )
            .init();
    }
    // Exit codes: 0 done; 1 the command failed (unknown endpoint, refused input, AWS
    // error); 2 usage error (clap exits with 2 itself while parsing).
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Parses a time scale: a number in (0, 1]; 0.001 makes a 24 h wait take 86 s.
fn time_scale(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s > 0.0 && s <= 1.0 => Ok(s),
        _ => Err(format!("{text:?} is not a number in (0, 1]")),
    }
}

fn invalid(e: impl std::fmt::Display) -> OpsError {
    OpsError::Invalid(e.to_string())
}

fn write_err(e: std::io::Error) -> OpsError {
    OpsError::Invalid(e.to_string())
}

/// Prints `value` as pretty JSON (the `--json` output of every command).
fn print_json(out: &mut dyn Write, value: &impl Serialize) -> Result<(), OpsError> {
    let text = serde_json::to_string_pretty(value).map_err(invalid)?;
    writeln!(out, "{text}").map_err(write_err)
}

/// How long `tern` waits for a TCP connection to `AWS_ENDPOINT_URL` before going on: 2 s
/// (a local server answers in microseconds; a remote one is left to the SDK's deadlines).
const ENDPOINT_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// When `AWS_ENDPOINT_URL` is set (local mode) and nothing listens there, says so: a
/// stale `.tern/local.env` (from a `tern local` that has stopped) gets one line, not an
/// SDK error dump.
async fn check_endpoint_url() -> Result<(), OpsError> {
    let Some(text) = std::env::var("AWS_ENDPOINT_URL")
        .ok()
        .filter(|v| !v.is_empty())
    else {
        return Ok(());
    };
    let url = url::Url::parse(&text)
        .map_err(|e| OpsError::Invalid(format!("AWS_ENDPOINT_URL={text:?} is not a URL: {e}")))?;
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
        return Ok(());
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match tokio::time::timeout(
        ENDPOINT_CHECK_TIMEOUT,
        tokio::net::TcpStream::connect((host, port)),
    )
    .await
    {
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Err(OpsError::Invalid(format!(
                "nothing answers at AWS_ENDPOINT_URL={text} (connection refused): is `tern local` running? \
                 Start it, then `source .tern/local.env` again (each start writes a new port)"
            )))
        }
        _ => Ok(()),
    }
}

/// How long one `tern` command keeps an unwrapped data key: 60 s (a command reads an
/// endpoint, then writes it; a listing opens each endpoint's keys once).
const CLI_DATA_KEY_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// What every AWS command needs: the SDK configuration and where the names come from.
struct Ctx {
    aws: SdkConfig,
    names: Names,
    json: bool,
}

impl Ctx {
    async fn new(stack: Option<&str>, json: bool) -> Result<Self, OpsError> {
        check_endpoint_url().await?;
        let aws = tern_aws::budget::bounded(&aws_config::load_from_env().await);
        let names = match stack {
            Some(stack) => Names::from_stack(&aws, stack).await?,
            None => Names::from_env(),
        };
        Ok(Self { aws, names, json })
    }

    fn sqs(&self) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::new(&self.aws)
    }

    fn dynamodb(&self) -> aws_sdk_dynamodb::Client {
        aws_sdk_dynamodb::Client::new(&self.aws)
    }

    /// The endpoint registry, its secrets sealed with the stack's KMS key
    /// (`TERN_SECRETS_KEY_ID`, the `SecretsKeyArn` output) when there is one. Writing a
    /// secret needs `kms:GenerateDataKey`; commands that read one back to write the list
    /// again (rotations, header and authentication changes) need `kms:Decrypt` too.
    fn endpoints(&self) -> Result<DynamoEndpointStore, OpsError> {
        Ok(
            DynamoEndpointStore::new(self.dynamodb(), self.names.get("TERN_ENDPOINTS_TABLE")?)
                .with_secrets(tern_aws::kms::secrets_at_rest(
                    &self.aws,
                    self.names.optional("TERN_SECRETS_KEY_ID").as_deref(),
                    CLI_DATA_KEY_TTL,
                )),
        )
    }

    fn health(&self) -> Result<tern_aws::DynamoHealthStore, OpsError> {
        Ok(tern_aws::DynamoHealthStore::new(
            self.dynamodb(),
            self.names.get("TERN_HEALTH_TABLE")?,
        ))
    }
}

async fn run(cli: Cli) -> Result<(), OpsError> {
    let mut out = std::io::stdout();
    if cli.json && matches!(cli.command, Command::Demo { .. } | Command::Local { .. }) {
        // Usage error (exit 2), not a silently ignored flag: these two print live progress
        // for people; `.tern/local.env` is what scripts read.
        eprintln!("error: --json is not available for `tern local` and `tern demo`");
        std::process::exit(2);
    }
    match cli.command {
        Command::Demo { events, time_scale } => demo(events, time_scale, &mut out).await,
        Command::Local { time_scale } => local(time_scale).await,
        Command::Endpoints { command } => {
            let ctx = Ctx::new(cli.stack.as_deref(), cli.json).await?;
            endpoints(&ctx, command, &mut out).await
        }
        Command::Trace { event_id, file } => {
            let spans = tern_handlers::span_log::read(&file).map_err(|e| {
                OpsError::Invalid(format!(
                    "cannot read {}: {e} (tern local writes it while it runs without an OTLP endpoint)",
                    file.display()
                ))
            })?;
            let trace = tern_handlers::span_log::trace_of(&spans, &event_id);
            out.write_all(tern_handlers::span_log::waterfall(&trace).as_bytes())
                .map_err(|e| OpsError::Invalid(e.to_string()))
        }
        Command::Attempts {
            event_id,
            endpoint,
            tenant,
        } => {
            let ctx = Ctx::new(cli.stack.as_deref(), cli.json).await?;
            attempts(
                &ctx,
                &event_id,
                endpoint.as_deref(),
                tenant.as_deref(),
                &mut out,
            )
            .await
        }
        Command::Dlq { max, list, show } => {
            let ctx = Ctx::new(cli.stack.as_deref(), cli.json).await?;
            dlq(&ctx, max, list, show.as_deref(), &mut out).await
        }
        Command::Replay {
            dry_run,
            endpoint,
            tenant,
            event,
            event_type,
            reason,
            since,
            until,
            max,
            force,
        } => {
            let ctx = Ctx::new(cli.stack.as_deref(), cli.json).await?;
            let filters = ReplayFilters {
                endpoint_id: endpoint.map(EndpointId::new).transpose().map_err(invalid)?,
                event_type: event_type
                    .map(EventType::new)
                    .transpose()
                    .map_err(invalid)?,
                reason: reason
                    .map(|r| r.parse::<DeadLetterReason>())
                    .transpose()
                    .map_err(invalid)?,
                tenant_id: tenant.map(TenantId::new).transpose().map_err(invalid)?,
                event_id: event.map(EventId::new).transpose().map_err(invalid)?,
                dead_lettered_since: since,
                dead_lettered_until: until,
            };
            if let (Some(s), Some(u)) = (since, until)
                && s >= u
            {
                return Err(OpsError::Invalid(format!(
                    "--since ({}) must be before --until ({})",
                    s.to_rfc3339(),
                    u.to_rfc3339()
                )));
            }
            replay(&ctx, filters, dry_run, max, force, &mut out).await
        }
        Command::PortalRotateKey => {
            let ctx = Ctx::new(cli.stack.as_deref(), cli.json).await?;
            let keys = tern_aws::portal::SecretsManagerKeys::new(
                aws_sdk_secretsmanager::Client::new(&ctx.aws),
                ctx.names.get("TERN_PORTAL_KEY_SECRET")?,
            );
            let id = keys
                .rotate()
                .await
                .map_err(|e| OpsError::Invalid(e.to_string()))?;
            use std::io::Write as _;
            writeln!(
                out,
                "portal key rotated: {id} signs from now on; the previous key still verifies live sessions"
            )
            .map_err(|e| OpsError::Invalid(e.to_string()))?;
            Ok(())
        }
        Command::Waiting {
            endpoint,
            tenant,
            max,
        } => {
            let ctx = Ctx::new(cli.stack.as_deref(), cli.json).await?;
            waiting(&ctx, endpoint, tenant, max, &mut out).await
        }
        Command::Audit {
            since,
            until,
            tenant,
            endpoint,
            grace,
            recheck_after,
            queue_max,
            concurrency,
            scan_segments,
            max_listed,
        } => {
            let ctx = Ctx::new(cli.stack.as_deref(), cli.json).await?;
            let mut request = ops::audit::AuditRequest::new(since, until.unwrap_or_else(Utc::now));
            request.tenant = tenant.map(TenantId::new).transpose().map_err(invalid)?;
            request.endpoint = endpoint.map(EndpointId::new).transpose().map_err(invalid)?;
            request.recheck_after = recheck_after;
            request.queue_max = queue_max;
            request.concurrency = usize::try_from(concurrency).unwrap_or(1);
            request.max_listed = max_listed;
            audit::audit(&ctx, &request, grace, scan_segments, &mut out).await
        }
        Command::EgressIps => {
            if cli.stack.is_none() {
                // Before any AWS call: the addresses exist only as a deployed stack's output.
                return Err(OpsError::Invalid(
                    "tern egress-ips reads a deployed stack's outputs: pass --stack <name> (or set TERN_STACK)".into(),
                ));
            }
            let ctx = Ctx::new(cli.stack.as_deref(), cli.json).await?;
            egress_ips::print(&ctx, &mut out)
        }
        Command::RelayFailures { max, retry } => {
            let ctx = Ctx::new(cli.stack.as_deref(), cli.json).await?;
            match retry {
                Some(id) => relay_retry::retry(&ctx, &id, max, &mut out).await,
                None => relay_failures(&ctx, max, &mut out).await,
            }
        }
    }
}

/// `tern attempts`: an unknown event id (not in the outbox table) is an error; a known
/// one without attempts says so. Outbox items are keyed by tenant and id (schema version
/// 2): without `tenant` only an item written before version 2 (keyed by the bare id) can
/// be found, and an event with no attempts and no such item is an error that asks for
/// `--tenant`.
async fn attempts(
    ctx: &Ctx,
    event_id: &str,
    endpoint: Option<&str>,
    tenant: Option<&str>,
    out: &mut dyn Write,
) -> Result<(), OpsError> {
    let event = EventId::new(event_id).map_err(invalid)?;
    let endpoint = endpoint.map(EndpointId::new).transpose().map_err(invalid)?;
    let mut tenant = tenant.map(TenantId::new).transpose().map_err(invalid)?;
    if tenant.is_none()
        && let Some(id) = &endpoint
    {
        // The endpoint's tenant is the event's: the ledger keeps a tenant's events apart.
        // A deleted endpoint's attempts are still shown, from what was written under the
        // event id alone (or with --tenant).
        tenant = match ops::find_endpoint(&ctx.endpoints()?, None, id).await {
            Ok(e) => Some(e.tenant_id),
            Err(OpsError::NotFound { .. }) => None,
            Err(e) => return Err(e),
        };
    }
    let ledger = DynamoLedger::new(ctx.dynamodb(), ctx.names.get("TERN_ATTEMPTS_TABLE")?, 30);
    let history = match &tenant {
        Some(t) => ledger.history(t, &event).await?,
        // Without a tenant only what version 1 messages wrote (keyed by the event id
        // alone) can be found; the no-attempts answer below asks for --tenant.
        None => ledger.unsharded_history(&event).await?,
    };
    let report = ops::attempts::report_scaled(
        event.as_str(),
        endpoint.as_ref().map(EndpointId::as_str),
        &history,
        time_scale_setting()?,
    );
    if let Some(id) = &endpoint
        && report.attempts.is_empty()
        && !history.iter().any(|r| &r.endpoint_id == id)
    {
        // A typo must not read as "not tried yet": an id the registry does not hold is
        // an error (a deleted endpoint's attempts, when there are any, still show).
        ops::find_endpoint(&ctx.endpoints()?, None, id).await?;
    }
    if history.is_empty() {
        // Tell "no such event" from "not tried yet": the outbox table has every event
        // until its TTL. (An attempt to any endpoint says the event exists.)
        let outbox = ctx.names.get("TERN_OUTBOX_TABLE")?;
        let found = match &tenant {
            Some(t) => tern_aws::DynamoEventStore::new(ctx.dynamodb(), &outbox, 7)
                .get(t, &event)
                .await?
                .is_some(),
            None => ctx
                .dynamodb()
                .get_item()
                .table_name(&outbox)
                .key(
                    tern_core::outbox::KEY_ATTRIBUTE,
                    aws_sdk_dynamodb::types::AttributeValue::S(event.to_string()),
                )
                .consistent_read(true)
                .send()
                .await
                .map_err(tern_aws::error::port_error)?
                .item()
                .is_some(),
        };
        if !found {
            return Err(OpsError::Invalid(match &tenant {
                Some(t) => format!(
                    "event {event} of tenant {t} not found: it is not in the outbox table {outbox} \
                     (a wrong id or tenant, or its item expired after the outbox TTL, 7 days by default)"
                ),
                None => format!(
                    "event {event} not found: it has no attempts, and the outbox table {outbox} keys \
                     events by tenant and id: pass --tenant <tenant id> to look it up \
                     (a wrong id, or its item expired after the outbox TTL, 7 days by default)"
                ),
            }));
        }
    }
    if ctx.json {
        return print_json(out, &report);
    }
    if report.attempts.is_empty() {
        let whom = endpoint.map_or_else(String::new, |e| format!(" to endpoint {e}"));
        return writeln!(
            out,
            "no attempts yet for event {event}{whom}: it is in the outbox; the relay and the sender \
             have not tried it yet, or no endpoint subscribes to it"
        )
        .map_err(write_err);
    }
    ops::attempts::print_report(out, &report).map_err(write_err)
}

/// `TERN_TIME_SCALE` (local mode writes it to `.tern/local.env`; unset in production: 1):
/// the ledger stores logical waits, and a due time is the real one.
fn time_scale_setting() -> Result<f64, OpsError> {
    match std::env::var("TERN_TIME_SCALE") {
        Err(_) => Ok(1.0),
        Ok(text) if text.trim().is_empty() => Ok(1.0),
        Ok(text) => {
            time_scale(text.trim()).map_err(|e| OpsError::Invalid(format!("TERN_TIME_SCALE: {e}")))
        }
    }
}

/// `tern waiting`: the waiting list, per endpoint, with the delivery queue's counts.
async fn waiting(
    ctx: &Ctx,
    endpoint: Option<String>,
    tenant: Option<String>,
    max: usize,
    out: &mut dyn Write,
) -> Result<(), OpsError> {
    use tern_core::waiting::WaitingScope;
    let store = ctx.endpoints()?;
    let tenant = tenant.map(TenantId::new).transpose().map_err(invalid)?;
    let scope = match endpoint {
        Some(id) => {
            let id = EndpointId::new(id).map_err(invalid)?;
            let ep = ops::find_endpoint(&store, tenant.as_ref(), &id).await?;
            WaitingScope::Endpoint(ep.tenant_id, ep.id)
        }
        None => tenant.map_or(WaitingScope::All, WaitingScope::Tenant),
    };
    let ledger = DynamoLedger::new(ctx.dynamodb(), ctx.names.get("TERN_ATTEMPTS_TABLE")?, 30);
    let policy = tern_handlers::config::health_policy(&Env::process()).map_err(invalid)?;
    let mut report = ops::waiting::read(
        &ledger,
        &store,
        &ctx.health()?,
        &scope,
        &policy,
        time_scale_setting()?,
        max,
        Utc::now(),
    )
    .await?;
    report.queue =
        Some(delivery_queue_counts(&ctx.sqs(), &ctx.names.get("TERN_DELIVERY_QUEUE_URL")?).await?);
    if ctx.json {
        return print_json(out, &report);
    }
    ops::waiting::print(out, &report).map_err(write_err)
}

/// The delivery queue's approximate counts: due now, in a queue delay, being sent (one
/// `GetQueueAttributes`).
async fn delivery_queue_counts(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
) -> Result<ops::waiting::QueueDepth, OpsError> {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let answer = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(A::ApproximateNumberOfMessages)
        .attribute_names(A::ApproximateNumberOfMessagesDelayed)
        .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .map_err(tern_aws::error::port_error)?;
    let count = |a: A| {
        answer
            .attributes()
            .and_then(|m| m.get(&a))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok(ops::waiting::QueueDepth {
        visible: count(A::ApproximateNumberOfMessages),
        delayed: count(A::ApproximateNumberOfMessagesDelayed),
        in_flight: count(A::ApproximateNumberOfMessagesNotVisible),
    })
}

/// Messages in a queue: SQS's approximate visible plus in-flight counts.
async fn queue_depth(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<u64, OpsError> {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let answer = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(A::ApproximateNumberOfMessages)
        .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .map_err(tern_aws::error::port_error)?;
    let count = |a: A| {
        answer
            .attributes()
            .and_then(|m| m.get(&a))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok(count(A::ApproximateNumberOfMessages) + count(A::ApproximateNumberOfMessagesNotVisible))
}

async fn dlq(
    ctx: &Ctx,
    max: u32,
    list: bool,
    show: Option<&str>,
    out: &mut dyn Write,
) -> Result<(), OpsError> {
    let url = ctx.names.get("TERN_DLQ_URL")?;
    let sqs = ctx.sqs();
    let queue = SqsQueue::new(sqs.clone(), url.clone());
    if let Some(id) = show {
        let (found, read) = ops::take(&queue, id, max as usize).await?;
        let Some(m) = found else {
            return Err(OpsError::Invalid(format!(
                "message {id} is not in the DLQ (read {read} messages; raise --max to read more)"
            )));
        };
        use tern_core::ports::DrainableQueue as _;
        queue.release(&m.receipt_handle).await?;
        let d = ops::dlq::detail(&m);
        return if ctx.json {
            print_json(out, &d)
        } else {
            ops::dlq::print_detail(out, &d).map_err(write_err)
        };
    }
    let total = queue_depth(&sqs, &url).await?;
    // Every tenant's dead-letter record, never the queue itself: a list hides nothing
    // from a tenant's replay or another reader (`tern_core::dead_letters`).
    let ledger = DynamoLedger::new(ctx.dynamodb(), ctx.names.get("TERN_ATTEMPTS_TABLE")?, 30);
    let record =
        ops::dlq::read_record(&ledger, &ctx.endpoints()?, None, None, max as usize).await?;
    let views: Vec<_> = record.entries.iter().map(ops::dlq::recorded_view).collect();
    let shown = views.len();
    if list {
        if ctx.json {
            return print_json(
                out,
                &ops::dlq::DlqReport {
                    total,
                    shown,
                    items: views,
                },
            );
        }
        return ops::dlq::print_list(out, &views, total).map_err(write_err);
    }
    let groups = ops::dlq::group(&views);
    if ctx.json {
        return print_json(
            out,
            &ops::dlq::DlqReport {
                total,
                shown,
                items: groups,
            },
        );
    }
    ops::dlq::print_groups(out, &groups, shown, total).map_err(write_err)
}

async fn relay_failures(ctx: &Ctx, max: u32, out: &mut dyn Write) -> Result<(), OpsError> {
    let url = ctx.names.get("TERN_RELAY_FAILURE_QUEUE_URL")?;
    let sqs = ctx.sqs();
    let total = queue_depth(&sqs, &url).await?;
    let queue = SqsQueue::new(sqs, url);
    let seen = ops::peek(&queue, max as usize).await?;
    let mut views: Vec<_> = seen.iter().map(ops::relay_failures::view).collect();
    // A batch the stream mapping gave up on names no event: read its range to list them.
    for v in &mut views {
        if let Some(batch) = &v.stream_batch {
            match relay_redrive::covered_events(ctx, batch).await {
                Ok(events) => v.events = Some(events),
                Err(e) => v.events_unavailable = Some(relay_redrive::unavailable_note(&e, batch)),
            }
        }
    }
    if ctx.json {
        return print_json(
            out,
            &ops::dlq::DlqReport {
                total,
                shown: views.len(),
                items: views,
            },
        );
    }
    ops::relay_failures::print_list(out, &views).map_err(write_err)?;
    writeln!(
        out,
        "{} of {} parked items shown; none removed. Fix the cause, then `tern relay-failures --retry <message-id>`.",
        views.len(),
        total.max(views.len() as u64)
    )
    .map_err(write_err)
}

/// Asks on a terminal; false when stdin is not one.
fn confirm(question: &str) -> bool {
    if !std::io::stdin().is_terminal() {
        return false;
    }
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer).is_ok()
        && matches!(answer.trim(), "y" | "Y" | "yes" | "YES")
}

async fn replay(
    ctx: &Ctx,
    filters: ReplayFilters,
    dry_run: bool,
    max: Option<u32>,
    force: bool,
    out: &mut dyn Write,
) -> Result<(), OpsError> {
    let sqs = ctx.sqs();
    let dlq = SqsQueue::new(sqs.clone(), ctx.names.get("TERN_DLQ_URL")?);
    let delivery = SqsQueue::new(sqs.clone(), ctx.names.get("TERN_DELIVERY_QUEUE_URL")?);
    let ledger = Arc::new(DynamoLedger::new(
        ctx.dynamodb(),
        ctx.names.get("TERN_ATTEMPTS_TABLE")?,
        30,
    ));
    let bad = ops::replay_check::bad_targets(
        ledger.as_ref(),
        &ctx.endpoints()?,
        &filters,
        max.unwrap_or(tern_handlers::replay::DEFAULT_MAX_MESSAGES) as usize,
    )
    .await?;
    if !bad.is_empty() && !dry_run && !force {
        let list = ops::replay_check::list(&bad);
        let asked = !ctx.json
            && confirm(&format!(
                "Some dead letters would go to endpoints that cannot take them:{list}\nReplay anyway?"
            ));
        if !asked {
            return Err(OpsError::Invalid(format!(
                "refusing to replay to endpoints that cannot take deliveries:{list}\n\
                 Fix them, narrow the replay (--endpoint, --tenant, --event, --reason, --since/--until), or pass --force."
            )));
        }
    }
    let deps = ReplayDeps {
        dlq: Arc::new(dlq),
        delivery_queue: Arc::new(delivery),
        ledger: Some(ledger),
    };
    let request = ReplayRequest {
        dry_run,
        max_messages: max,
        max_seconds: None,
        filters,
    };
    let summary =
        tern_handlers::replay::handle(&deps, request, &Metrics::new("Tern", MetricsSink::Discard))
            .await?;
    if ctx.json {
        #[derive(Serialize)]
        struct ReplayOutput<'a> {
            #[serde(flatten)]
            summary: &'a tern_handlers::replay::ReplaySummary,
            /// Targets that cannot take deliveries (replayed anyway with --force).
            bad_targets: &'a [ops::replay_check::BadTarget],
        }
        return print_json(
            out,
            &ReplayOutput {
                summary: &summary,
                bad_targets: &bad,
            },
        );
    }
    for b in &bad {
        writeln!(out, "warning: endpoint {}: {}", b.endpoint_id, b.problem).map_err(write_err)?;
    }
    writeln!(
        out,
        "{} {} of {} matching dead letters (examined {}, skipped {} not matching, {} unreadable, {} already replayed by this run); stopped: {}",
        if dry_run { "would replay" } else { "replayed" },
        if dry_run { summary.matched } else { summary.replayed },
        summary.matched,
        summary.examined,
        summary.skipped,
        summary.unreadable,
        summary.already_replayed,
        summary
            .stopped
            .map_or_else(|| "-".to_owned(), |s| serde_json::to_value(s).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default())
    )
    .map_err(write_err)?;
    for id in &summary.delivery_ids {
        writeln!(out, "  {id}").map_err(write_err)?;
    }
    Ok(())
}

async fn endpoints(
    ctx: &Ctx,
    command: EndpointCommand,
    out: &mut dyn Write,
) -> Result<(), OpsError> {
    let store = ctx.endpoints()?;
    let json = ctx.json;
    let show = |out: &mut dyn Write, ep: &tern_core::Endpoint| -> Result<(), OpsError> {
        if json {
            print_json(out, &ops::EndpointView::of(ep, Utc::now()))
        } else {
            ops::print_endpoint(out, ep, false).map_err(write_err)
        }
    };
    match command {
        EndpointCommand::Add {
            tenant,
            url,
            types,
            max_attempts,
            timeout_ms,
            schedule,
            description,
            payload_format,
            max_per_second,
            send_traceparent,
            reach,
        } => {
            let destinations = DestinationSettings::from_env(&Env::process()).map_err(invalid)?;
            let mut secrets = reach_args::SecretReader::default();
            let headers = reach.headers(&mut secrets)?;
            let auth = reach.auth(&mut secrets)?.unwrap_or_default();
            let client_certificate = reach
                .client_certificate(Some(&TenantId::new(tenant.as_str()).map_err(invalid)?))?
                .flatten();
            let ep = ops::add_endpoint(
                &store,
                NewEndpoint {
                    tenant,
                    url,
                    // "a, b" is two types, not "a" and " b".
                    event_types: types.iter().map(|t| t.trim().to_owned()).collect(),
                    max_attempts,
                    timeout_ms,
                    schedule,
                    description,
                    payload_format,
                    max_per_second,
                    secret: None,
                    headers,
                    auth,
                    signatures: reach.signatures.unwrap_or_default(),
                    client_certificate,
                    send_traceparent,
                },
                &destinations.policy(),
                &DnsResolver::system(),
            )
            .await?;
            let public_key = ep.signing_keys.first().map(|k| k.key.public_key());
            if json {
                #[derive(Serialize)]
                struct Added<'a> {
                    id: &'a str,
                    tenant_id: &'a str,
                    url: &'a str,
                    secret: &'a str,
                    signatures: tern_core::Signatures,
                    #[serde(skip_serializing_if = "Option::is_none")]
                    public_key: Option<tern_core::signing_key::PublicKey>,
                }
                return print_json(
                    out,
                    &Added {
                        id: ep.id.as_str(),
                        tenant_id: ep.tenant_id.as_str(),
                        url: &ep.url,
                        secret: ep.secrets[0].secret.expose(),
                        signatures: ep.signatures,
                        public_key,
                    },
                );
            }
            writeln!(
                out,
                "endpoint {} created for tenant {}",
                ep.id, ep.tenant_id
            )
            .map_err(write_err)?;
            if ep.signatures.v1() {
                writeln!(
                    out,
                    "signing secret (shown once, give it to the receiver): {}",
                    ep.secrets[0].secret.expose()
                )
                .map_err(write_err)?;
            }
            if let Some(key) = public_key {
                writeln!(
                    out,
                    "v1a public key (give it to the receiver; `show` prints it again): {key}"
                )
                .map_err(write_err)?;
            }
            Ok(())
        }
        EndpointCommand::Health { tenant } => {
            let tenant = tenant.map(TenantId::new).transpose().map_err(invalid)?;
            let policy =
                tern_handlers::config::health_policy(&tern_handlers::config::Env::process())
                    .map_err(|e| OpsError::Invalid(e.to_string()))?;
            let health = ctx.health()?;
            let ledger =
                DynamoLedger::new(ctx.dynamodb(), ctx.names.get("TERN_ATTEMPTS_TABLE")?, 30);
            let report = ops::health::health_rows_waiting(
                &store,
                &health,
                &ledger,
                tenant.as_ref(),
                &policy,
                Utc::now(),
            )
            .await?;
            if json {
                if !report.waiting_complete {
                    eprintln!(
                        "warning: waiting counts are lower bounds (the waiting list was read up to {} entries)",
                        ops::health::MAX_WAITING_READ
                    );
                }
                // An array of rows, as before the waiting counts: scripts keep working.
                return print_json(out, &report.endpoints);
            }
            ops::health::print_health_report(out, &report).map_err(write_err)
        }
        EndpointCommand::List { tenant } => {
            let list = match tenant {
                Some(t) => {
                    store
                        .list_for_tenant(&TenantId::new(t).map_err(invalid)?)
                        .await?
                }
                None => store.list_all().await?,
            };
            if json {
                let now = Utc::now();
                let views: Vec<_> = list.iter().map(|e| ops::EndpointView::of(e, now)).collect();
                return print_json(out, &views);
            }
            ops::print_endpoints(out, &list).map_err(write_err)
        }
        EndpointCommand::Show { endpoint, tenant } => {
            let (tenant, id) = ids(tenant, endpoint)?;
            let ep = ops::find_endpoint(&store, tenant.as_ref(), &id).await?;
            show(out, &ep)
        }
        EndpointCommand::Update {
            endpoint,
            tenant,
            url,
            types,
            description,
            timeout_ms,
            schedule,
            max_attempts,
            payload_format,
            max_per_second,
            send_traceparent,
            remove_header,
            clear_headers,
            reach,
        } => {
            let (tenant, id) = ids(tenant, endpoint)?;
            let mut secrets = reach_args::SecretReader::default();
            let set_headers = reach.headers(&mut secrets)?;
            let headers = if set_headers.is_empty() && remove_header.is_empty() && !clear_headers {
                None
            } else {
                let current = ops::find_endpoint(&store, tenant.as_ref(), &id).await?;
                Some(ops::reach::edit_headers(
                    &current.headers,
                    set_headers,
                    &remove_header,
                    clear_headers,
                )?)
            };
            let update = EndpointUpdate {
                url,
                event_types: types.map(|t| t.iter().map(|t| t.trim().to_owned()).collect()),
                description: description.map(|d| Some(d).filter(|d| !d.is_empty())),
                timeout_ms: timeout_ms.map(|t| Some(t).filter(|t| *t != 0)),
                schedule: schedule
                    .map(|s| match s.as_str() {
                        "deployment" => Ok(None),
                        _ => RetrySchedule::parse(&s).map(Some),
                    })
                    .transpose()
                    .map_err(invalid)?,
                max_attempts: max_attempts.map(|m| Some(m).filter(|m| *m != 0)),
                payload_format,
                max_per_second: max_per_second.map(|r| Some(r).filter(|r| *r != 0)),
                send_traceparent,
                headers,
                auth: reach.auth(&mut secrets)?,
                signatures: reach.signatures,
                client_certificate: reach.client_certificate(tenant.as_ref())?,
            };
            let destinations = DestinationSettings::from_env(&Env::process()).map_err(invalid)?;
            let ep = ops::update_endpoint(
                &store,
                tenant.as_ref(),
                &id,
                &update,
                &destinations.policy(),
                &DnsResolver::system(),
            )
            .await?;
            if !json {
                writeln!(out, "updated").map_err(write_err)?;
            }
            show(out, &ep)
        }
        EndpointCommand::Disable {
            endpoint,
            tenant,
            reason,
        } => {
            let (tenant, id) = ids(tenant, endpoint)?;
            let ep = ops::disable_endpoint(&store, tenant.as_ref(), &id, reason.as_deref()).await?;
            if json {
                return show(out, &ep);
            }
            writeln!(
                out,
                "disabled ({})",
                ep.disabled_reason.as_deref().unwrap_or("-")
            )
            .map_err(write_err)
        }
        EndpointCommand::Enable { endpoint, tenant } => {
            let (tenant, id) = ids(tenant, endpoint)?;
            let health = ctx.health()?;
            let ep = ops::enable_endpoint(&store, Some(&health), tenant.as_ref(), &id).await?;
            if json {
                return show(out, &ep);
            }
            writeln!(
                out,
                "enabled (last disabled reason: {})",
                ep.last_disabled_reason.as_deref().unwrap_or("-")
            )
            .map_err(write_err)?;
            writeln!(out, "{}", ops::ENABLED_RESUME_NOTE).map_err(write_err)?;
            writeln!(
                out,
                "Its dead letters stay in the DLQ until replayed: tern replay --endpoint {} --dry-run, then without --dry-run.",
                ep.id
            )
            .map_err(write_err)
        }
        EndpointCommand::EncryptSecrets { new_epoch } => {
            if new_epoch {
                let keyring = store.keyring().ok_or_else(|| {
                    OpsError::from(tern_core::ports::PortError::Rejected(
                        "no key to seal with: set TERN_SECRETS_KEY_ID (the stack's SecretsKeyArn output)"
                            .into(),
                    ))
                })?;
                let epoch = keyring.rotate().await.map_err(|e| {
                    OpsError::from(tern_core::ports::PortError::Unavailable(format!(
                        "secrets keyring: {e}"
                    )))
                })?;
                if !json {
                    writeln!(out, "new secrets epoch {epoch}").map_err(write_err)?;
                }
            }
            let report = store.seal_stored().await?;
            if json {
                return print_json(out, &report);
            }
            let mut notes = String::new();
            if report.changed_meanwhile > 0 {
                notes.push_str(&format!(
                    "; {} changed meanwhile: run it again",
                    report.changed_meanwhile
                ));
            }
            if report.unreadable > 0 {
                notes.push_str(&format!(
                    "; {} do not open (logged): fix them with tern endpoints rotate-secret",
                    report.unreadable
                ));
            }
            writeln!(
                out,
                "read {} endpoints: sealed the secrets of {} under epoch {}, {} held none to seal{notes}",
                report.scanned, report.sealed, report.epoch, report.already_sealed,
            )
            .map_err(write_err)
        }
        EndpointCommand::Delete { endpoint, tenant } => {
            let (tenant, id) = ids(tenant, endpoint)?;
            let ep = ops::delete_endpoint(&store, tenant.as_ref(), &id).await?;
            if json {
                return show(out, &ep);
            }
            writeln!(out, "deleted endpoint {} of tenant {}", ep.id, ep.tenant_id)
                .map_err(write_err)
        }
        EndpointCommand::RotateSigningKey {
            endpoint,
            tenant,
            overlap_hours,
        } => {
            let (tenant, id) = ids(tenant, endpoint)?;
            let ep = ops::find_endpoint(&store, tenant.as_ref(), &id).await?;
            let public_key =
                ops::reach::rotate_signing_key(&store, &ep.tenant_id, &id, overlap_hours).await?;
            if json {
                #[derive(Serialize)]
                struct Rotated<'a> {
                    id: &'a str,
                    tenant_id: &'a str,
                    public_key: tern_core::signing_key::PublicKey,
                    overlap_hours: i64,
                }
                return print_json(
                    out,
                    &Rotated {
                        id: ep.id.as_str(),
                        tenant_id: ep.tenant_id.as_str(),
                        public_key,
                        overlap_hours,
                    },
                );
            }
            writeln!(out, "new v1a public key: {public_key}").map_err(write_err)?;
            if ep.signing_keys.iter().any(|k| k.expires_at.is_none()) {
                writeln!(out, "the previous key keeps signing for {overlap_hours} h")
                    .map_err(write_err)?;
            }
            if !ep.signatures.v1a() {
                writeln!(
                    out,
                    "v1a is off for this endpoint (signatures: {}): turn it on with `tern endpoints update {} --signatures both`",
                    ep.signatures, ep.id
                )
                .map_err(write_err)?;
            }
            Ok(())
        }
        EndpointCommand::RotateSecret {
            endpoint,
            tenant,
            overlap_hours,
        } => {
            let (tenant, id) = ids(tenant, endpoint)?;
            let ep = ops::find_endpoint(&store, tenant.as_ref(), &id).await?;
            let secret = ops::rotate_secret(&store, &ep.tenant_id, &id, overlap_hours).await?;
            if json {
                #[derive(Serialize)]
                struct Rotated<'a> {
                    id: &'a str,
                    tenant_id: &'a str,
                    secret: &'a str,
                    overlap_hours: i64,
                }
                return print_json(
                    out,
                    &Rotated {
                        id: ep.id.as_str(),
                        tenant_id: ep.tenant_id.as_str(),
                        secret: secret.expose(),
                        overlap_hours,
                    },
                );
            }
            writeln!(out, "new signing secret (shown once): {}", secret.expose())
                .map_err(write_err)?;
            writeln!(
                out,
                "the previous secret keeps signing for {overlap_hours} h"
            )
            .map_err(write_err)
        }
    }
}

/// Parses the `--tenant` option and the endpoint id argument.
fn ids(
    tenant: Option<String>,
    endpoint: String,
) -> Result<(Option<TenantId>, EndpointId), OpsError> {
    Ok((
        tenant.map(TenantId::new).transpose().map_err(invalid)?,
        EndpointId::new(endpoint).map_err(invalid)?,
    ))
}

#[cfg(feature = "local")]
async fn local(time_scale: f64) -> Result<(), OpsError> {
    local_mode::local(time_scale).await
}

#[cfg(feature = "local")]
async fn demo(
    events: usize,
    time_scale: f64,
    out: &mut (dyn Write + Send),
) -> Result<(), OpsError> {
    local_mode::demo(events, time_scale, out).await
}

/// What `tern local` and `tern demo` say in a build without local mode.
#[cfg(not(feature = "local"))]
const NO_LOCAL_MODE: &str = "this tern was built without local mode: install it with \
    `cargo install --path shared/tern-cli --features local`, or run `make demo` in the repo";

/// Usage error (exit 2): this build cannot run the command.
#[cfg(not(feature = "local"))]
async fn local(_time_scale: f64) -> Result<(), OpsError> {
    eprintln!("error: {NO_LOCAL_MODE}");
    std::process::exit(2)
}

/// Usage error (exit 2): this build cannot run the command.
#[cfg(not(feature = "local"))]
async fn demo(
    _events: usize,
    _time_scale: f64,
    _out: &mut (dyn Write + Send),
) -> Result<(), OpsError> {
    eprintln!("error: {NO_LOCAL_MODE}");
    std::process::exit(2)
}
