//! The PostgreSQL relay Lambda: invoked on a schedule (EventBridge Scheduler, every
//! minute), it polls the `tern_outbox` table for the rest of its invocation
//! (`tern_relay_pg::PgRelay::run_until`) and fans each row out to the delivery queue with
//! the stream relay's code. Builds its clients once; the database connection is kept
//! across warm invocations and opened again after an error.

use std::sync::Arc;

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use tern_handlers::config::{Env, PgRelayConfig};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_relay_pg::PgRelay;

#[tokio::main]
async fn main() -> Result<(), Error> {
    tern_handlers::logging::init_lambda();
    tern_handlers::telemetry::init_from_env("tern-relay-pg")?;
    let config = PgRelayConfig::from_env(&Env::process())?;
    let aws = tern_aws::tls::load_for_lambda().await;
    let deps = Arc::new(tern_aws::wiring::relay_deps(&config.relay, &aws));
    let relay = PgRelay::new(deps, &config)?;
    let relay = &relay;
    let namespace = config.relay.metrics_namespace.as_str();
    run(service_fn(
        move |event: LambdaEvent<serde_json::Value>| async move {
            let metrics = Metrics::new(namespace, MetricsSink::Stdout);
            let lambda_deadline = event.context.deadline();
            let summary = relay
                .run_until(invocation_deadline(lambda_deadline), &metrics)
                .await;
            metrics.flush();
            tern_handlers::telemetry::flush_before(lambda_deadline).await;
            Ok::<serde_json::Value, Error>(serde_json::json!({
                "published": summary.published,
                "parked": summary.parked,
                "deleted": summary.deleted,
                "errors": summary.errors,
                "lag_seconds": summary.lag_seconds,
            }))
        },
    ))
    .await
}

/// The invocation's deadline (Lambda's `Lambda-Runtime-Deadline-Ms`, wall-clock time) on
/// the monotonic clock the relay measures with. A deadline already past is now.
fn invocation_deadline(deadline: std::time::SystemTime) -> tokio::time::Instant {
    let left = deadline
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    tokio::time::Instant::now() + left
}
