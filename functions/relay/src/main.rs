//! The relay Lambda: DynamoDB stream of the outbox table -> delivery queue.
//! Builds its clients once, then hands every batch to
//! `tern_handlers::relay::handle_value_before` with the invocation's deadline, so a fan-out
//! too large for one invocation stops in time and resumes in the retry. The event is
//! taken as raw JSON so one record that does not parse is parked in the failure queue on
//! its own, instead of failing the whole batch before the handler runs.

use aws_lambda_events::streams::DynamoDbEventResponse;
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use tern_handlers::config::{Env, RelayConfig};
use tern_handlers::metrics::{Metrics, MetricsSink};

#[tokio::main]
async fn main() -> Result<(), Error> {
    // JSON logs, RUST_LOG verbosity, and never the SDK's body-printing TRACE events.
    tern_handlers::logging::init_lambda();
    // OpenTelemetry traces when OTEL_EXPORTER_OTLP_ENDPOINT is set (docs/tracing.md);
    // without it nothing is built.
    tern_handlers::telemetry::init_from_env("tern-relay")?;
    let config = RelayConfig::from_env(&Env::process())?;
    // Trusts the Amazon Trust Services roots only: no system certificate store to load.
    let aws = tern_aws::tls::load_for_lambda().await;
    let deps = tern_aws::wiring::relay_deps(&config, &aws);
    let deps = &deps;
    let namespace = config.metrics_namespace.as_str();
    run(service_fn(
        move |event: LambdaEvent<serde_json::Value>| async move {
            let metrics = Metrics::new(namespace, MetricsSink::Stdout);
            let lambda_deadline = event.context.deadline();
            let deadline = invocation_deadline(lambda_deadline);
            let (response, _) = tern_handlers::relay::handle_value_before(
                deps,
                event.payload,
                Some(deadline),
                &metrics,
            )
            .await;
            metrics.flush();
            // Before the invocation ends: Lambda freezes the process after it.
            tern_handlers::telemetry::flush_before(lambda_deadline).await;
            Ok::<DynamoDbEventResponse, Error>(response)
        },
    ))
    .await
}

/// The invocation's deadline (Lambda's `Lambda-Runtime-Deadline-Ms`, wall-clock time) on
/// the monotonic clock the handler measures with. A deadline already past is now.
fn invocation_deadline(deadline: std::time::SystemTime) -> tokio::time::Instant {
    let left = deadline
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    tokio::time::Instant::now() + left
}
