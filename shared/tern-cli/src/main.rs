//! `tern`: the operator tool. Local mode and the demo, endpoints, attempt history, the
//! DLQ and replays. Table and queue names come from the same `TERN_*` variables the
//! functions read; AWS access from the usual AWS variables (`AWS_ENDPOINT_URL` for moto).

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tern_aws::{DynamoEndpointStore, DynamoLedger, SqsQueue};
use tern_core::endpoint::EndpointUpdate;
use tern_core::ports::EndpointStore;
use tern_core::{DeadLetterReason, EndpointId, EventId, EventType, RetrySchedule, TenantId};
use tern_handlers::config::{DestinationSettings, Env};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::replay::{ReplayDeps, ReplayFilters, ReplayRequest};
use tern_http::{DestinationPolicy, SystemLookup};
use tern_ops::{self as ops, NewEndpoint, OpsError, var};

#[cfg(feature = "local")]
mod local_mode;

#[derive(Parser)]
#[command(
    name = "tern",
    version,
    about = "Tern: webhook delivery on AWS serverless. Operator tool and local mode."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
    /// Show every attempt of an event, oldest first.
    Attempts {
        /// Event id (the webhook-id).
        event_id: String,
    },
    /// Inspect the DLQ without changing it.
    Dlq {
        /// Most messages to show.
        #[arg(long, default_value_t = 50)]
        max: u32,
    },
    /// Move dead-lettered deliveries back to the delivery queue (fresh budget, same webhook-id).
    Replay {
        /// Count what would be replayed; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Only this endpoint.
        #[arg(long)]
        endpoint: Option<String>,
        /// Only this event type.
        #[arg(long)]
        event_type: Option<String>,
        /// Only this reason: exhausted, gone, endpoint_disabled, endpoint_deleted, blocked_destination.
        #[arg(long)]
        reason: Option<String>,
        /// Most messages to examine.
        #[arg(long)]
        max: Option<u32>,
    },
}

#[derive(Subcommand)]
enum EndpointCommand {
    /// Register an endpoint. Prints its id and signing secret (shown once).
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
        /// Print one JSON object (stable field names, see the README).
        #[arg(long)]
        json: bool,
    },
    /// Change settings; only the options given change. A new URL is checked like `add`.
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
    },
    /// Disable an endpoint: new events skip it, queued deliveries dead-letter.
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
    // Errors only unless RUST_LOG says otherwise; the guard keeps secrets out at any level.
    {
        use tracing_subscriber::layer::SubscriberExt as _;
        use tracing_subscriber::util::SubscriberInitExt as _;
        tracing_subscriber::registry()
            .with(tern_handlers::logging::guard())
            .with(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "error".into()),
            )
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
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

async fn run(cli: Cli) -> Result<(), OpsError> {
    let mut out = std::io::stdout();
    match cli.command {
        Command::Demo { events, time_scale } => demo(events, time_scale, &mut out).await,
        Command::Local { time_scale } => local(time_scale).await,
        Command::Endpoints { command } => endpoints(command, &mut out).await,
        Command::Attempts { event_id } => {
            let aws = tern_aws::budget::bounded(&aws_config::load_from_env().await);
            let ledger = DynamoLedger::new(
                aws_sdk_dynamodb::Client::new(&aws),
                var("TERN_ATTEMPTS_TABLE")?,
                30,
            );
            ops::print_history(&mut out, &ledger, &EventId::new(event_id).map_err(invalid)?).await
        }
        Command::Dlq { max } => {
            let aws = tern_aws::budget::bounded(&aws_config::load_from_env().await);
            let dlq = SqsQueue::new(aws_sdk_sqs::Client::new(&aws), var("TERN_DLQ_URL")?);
            let n = ops::peek_dlq(&mut out, &dlq, max).await?;
            let _ = writeln!(out, "{n} message(s) shown; none removed.");
            Ok(())
        }
        Command::Replay {
            dry_run,
            endpoint,
            event_type,
            reason,
            max,
        } => {
            let aws = tern_aws::budget::bounded(&aws_config::load_from_env().await);
            let sqs = aws_sdk_sqs::Client::new(&aws);
            let deps = ReplayDeps {
                dlq: std::sync::Arc::new(SqsQueue::new(sqs.clone(), var("TERN_DLQ_URL")?)),
                delivery_queue: std::sync::Arc::new(SqsQueue::new(
                    sqs,
                    var("TERN_DELIVERY_QUEUE_URL")?,
                )),
            };
            let request = ReplayRequest {
                dry_run,
                max_messages: max,
                max_seconds: None,
                filters: ReplayFilters {
                    endpoint_id: endpoint.map(EndpointId::new).transpose().map_err(invalid)?,
                    event_type: event_type
                        .map(EventType::new)
                        .transpose()
                        .map_err(invalid)?,
                    reason: reason
                        .map(|r| r.parse::<DeadLetterReason>())
                        .transpose()
                        .map_err(invalid)?,
                },
            };
            let summary = tern_handlers::replay::handle(
                &deps,
                request,
                &Metrics::new("Tern", MetricsSink::Discard),
            )
            .await?;
            let _ = writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&summary).unwrap_or_default()
            );
            Ok(())
        }
    }
}

async fn endpoints(command: EndpointCommand, out: &mut dyn Write) -> Result<(), OpsError> {
    let aws = tern_aws::budget::bounded(&aws_config::load_from_env().await);
    let store = DynamoEndpointStore::new(
        aws_sdk_dynamodb::Client::new(&aws),
        var("TERN_ENDPOINTS_TABLE")?,
    );
    match command {
        EndpointCommand::Add {
            tenant,
            url,
            types,
            max_attempts,
            timeout_ms,
            schedule,
            description,
        } => {
            let destinations = DestinationSettings::from_env(&Env::process()).map_err(invalid)?;
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
                    secret: None,
                },
                &DestinationPolicy {
                    https_only: destinations.https_only,
                    allow: destinations.allow,
                },
                &SystemLookup,
            )
            .await?;
            let _ = writeln!(
                out,
                "endpoint {} created for tenant {}",
                ep.id, ep.tenant_id
            );
            let _ = writeln!(
                out,
                "signing secret (shown once, give it to the receiver): {}",
                ep.secrets[0].secret.expose()
            );
            Ok(())
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
            ops::print_endpoints(out, &list).map_err(invalid)
        }
        EndpointCommand::Show {
            endpoint,
            tenant,
            json,
        } => {
            let (tenant, id) = ids(tenant, endpoint)?;
            let ep = ops::find_endpoint(&store, tenant.as_ref(), &id).await?;
            ops::print_endpoint(out, &ep, json).map_err(invalid)
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
        } => {
            let (tenant, id) = ids(tenant, endpoint)?;
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
            };
            let destinations = DestinationSettings::from_env(&Env::process()).map_err(invalid)?;
            let ep = ops::update_endpoint(
                &store,
                tenant.as_ref(),
                &id,
                &update,
                &DestinationPolicy {
                    https_only: destinations.https_only,
                    allow: destinations.allow,
                },
                &SystemLookup,
            )
            .await?;
            let _ = writeln!(out, "updated");
            ops::print_endpoint(out, &ep, false).map_err(invalid)
        }
        EndpointCommand::Disable {
            endpoint,
            tenant,
            reason,
        } => {
            let (tenant, id) = ids(tenant, endpoint)?;
            let ep = ops::disable_endpoint(&store, tenant.as_ref(), &id, reason.as_deref()).await?;
            let _ = writeln!(
                out,
                "disabled ({})",
                ep.disabled_reason.as_deref().unwrap_or("-")
            );
            Ok(())
        }
        EndpointCommand::Enable { endpoint, tenant } => {
            let (tenant, id) = ids(tenant, endpoint)?;
            let ep = ops::enable_endpoint(&store, tenant.as_ref(), &id).await?;
            let _ = writeln!(
                out,
                "enabled (last disabled reason: {})",
                ep.last_disabled_reason.as_deref().unwrap_or("-")
            );
            Ok(())
        }
        EndpointCommand::Delete { endpoint, tenant } => {
            let (tenant, id) = ids(tenant, endpoint)?;
            let ep = ops::delete_endpoint(&store, tenant.as_ref(), &id).await?;
            let _ = writeln!(out, "deleted endpoint {} of tenant {}", ep.id, ep.tenant_id);
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
            let _ = writeln!(out, "new signing secret (shown once): {}", secret.expose());
            let _ = writeln!(
                out,
                "the previous secret keeps signing for {overlap_hours} h"
            );
            Ok(())
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
