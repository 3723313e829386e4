//! The relay Lambda: DynamoDB stream of the outbox table -> delivery queue.
//! Builds its clients once, then hands every batch to `tern_handlers::relay::handle`.

use aws_lambda_events::dynamodb::Event;
use aws_lambda_events::streams::DynamoDbEventResponse;
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use tern_handlers::config::{Env, RelayConfig};
use tern_handlers::metrics::{Metrics, MetricsSink};

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing_subscriber::fmt().json().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    let config = RelayConfig::from_env(&Env::process())?;
    let aws = aws_config::load_from_env().await;
    let deps = tern_aws::wiring::relay_deps(&config, &aws);
    let deps = &deps;
    let namespace = config.metrics_namespace.as_str();
    run(service_fn(move |event: LambdaEvent<Event>| async move {
        let metrics = Metrics::new(namespace, MetricsSink::Stdout);
        let (response, _) = tern_handlers::relay::handle(deps, event.payload, &metrics).await;
        metrics.flush();
        Ok::<DynamoDbEventResponse, Error>(response)
    }))
    .await
}
