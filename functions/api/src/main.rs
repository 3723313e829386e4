//! The API Lambda: the `tern-api` router behind API Gateway (HTTP API) with IAM
//! authorization, through `lambda_http` (the runtime's adapter for any tower service, as in
//! its `http-axum` example). Builds its clients once; no logic of its own: the caller comes
//! from API Gateway's request context (`tern_api::Authenticator::ApiGatewayIam`).
//!
//! Environment: `tern_api::aws` lists the variables (the tables, the queues, and the
//! settings the other functions read).

use lambda_http::{Error, run};
use tern_api::Authenticator;
use tern_api::aws::{ApiConfig, api_deps};

#[tokio::main]
async fn main() -> Result<(), Error> {
    // JSON logs, RUST_LOG verbosity, and never the SDK's body-printing TRACE events.
    tern_handlers::logging::init_lambda();
    // OpenTelemetry traces when OTEL_EXPORTER_OTLP_ENDPOINT is set (docs/tracing.md);
    // without it nothing is built.
    tern_handlers::telemetry::init_from_env("tern-api")?;
    let config = ApiConfig::from_env(&|k| std::env::var(k).ok())?;
    // Trusts the Amazon Trust Services roots only: no system certificate store to load.
    let aws = tern_aws::tls::load_for_lambda().await;
    let deps = api_deps(&config, &aws, None)?;
    let router = tern_api::router(deps, Authenticator::ApiGatewayIam)
        // Spans (a resend's) leave before the answer does: Lambda freezes the process after
        // it. Nothing when tracing is off; at most 2 s when on (the router answers within 25
        // s, the function's timeout is 28 s).
        .layer(axum::middleware::map_response(
            |response: axum::response::Response| async move {
                tern_handlers::telemetry::flush().await;
                response
            },
        ));
    run(router).await
}
