//! The sender Lambda: delivery queue -> signed POSTs. Builds its clients once, then hands
//! every batch to `tern_handlers::sender::handle`.

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use tern_handlers::config::{Env, SenderConfig};
use tern_handlers::deadline::Deadline;
use tern_handlers::metrics::{Metrics, MetricsSink};

#[tokio::main]
async fn main() -> Result<(), Error> {
    // JSON logs, RUST_LOG verbosity, and never the SDK's body-printing TRACE events.
    tern_handlers::logging::init_lambda();
    // OpenTelemetry traces when OTEL_EXPORTER_OTLP_ENDPOINT is set (docs/tracing.md);
    // without it nothing is built.
    tern_handlers::telemetry::init_from_env("tern-sender")?;
    let config = SenderConfig::from_env(&Env::process())?;
    // Trusts the Amazon Trust Services roots only: no system certificate store to load.
    let aws = tern_aws::tls::load_for_lambda().await;
    let deps = tern_aws::wiring::sender_deps(&config, &aws, None)?;
    let deps = &deps;
    let namespace = config.metrics_namespace.as_str();
    let reserve = tern_aws::wiring::sender_time_reserve();
    run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        let metrics = Metrics::new(namespace, MetricsSink::Stdout);
        // Answer before Lambda's deadline: a timed-out batch would come back whole,
        // the messages already POSTed included.
        let lambda_deadline = event.context.deadline();
        let deadline = Deadline::at_system_time(lambda_deadline, reserve);
        let (response, _) =
            tern_handlers::sender::handle_within(deps, event.payload, &metrics, deadline).await;
        metrics.flush();
        // Before the invocation ends: Lambda freezes the process after it.
        tern_handlers::telemetry::flush_before(lambda_deadline).await;
        Ok::<SqsBatchResponse, Error>(response)
    }))
    .await
}
