//! The replay Lambda: invoked by an operator with a `ReplayRequest`
//! (`{"dry_run":true,"filters":{"reason":"exhausted"}}`), drains the DLQ back into the
//! delivery queue and returns a `ReplaySummary`.

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use tern_handlers::config::{Env, ReplayConfig};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::replay::{ReplayRequest, ReplaySummary};

#[tokio::main]
async fn main() -> Result<(), Error> {
    // JSON logs, RUST_LOG verbosity, and never the SDK's body-printing TRACE events.
    tern_handlers::logging::init_lambda();
    // OpenTelemetry traces when OTEL_EXPORTER_OTLP_ENDPOINT is set (docs/tracing.md);
    // without it nothing is built.
    tern_handlers::telemetry::init_from_env("tern-replay")?;
    let config = ReplayConfig::from_env(&Env::process())?;
    // Trusts the Amazon Trust Services roots only: no system certificate store to load.
    let aws = tern_aws::tls::load_for_lambda().await;
    let deps = tern_aws::wiring::replay_deps(&config, &aws);
    let deps = &deps;
    let namespace = config.metrics_namespace.as_str();
    run(service_fn(
        move |event: LambdaEvent<ReplayRequest>| async move {
            let metrics = Metrics::new(namespace, MetricsSink::Stdout);
            let summary = tern_handlers::replay::handle(deps, event.payload, &metrics).await;
            metrics.flush();
            // Before the invocation ends: Lambda freezes the process after it.
            tern_handlers::telemetry::flush_before(event.context.deadline()).await;
            Ok::<ReplaySummary, Error>(summary?)
        },
    ))
    .await
}
