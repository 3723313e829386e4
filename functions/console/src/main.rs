//! The console Lambda: answers the CloudWatch dashboard's custom widgets (dead letters,
//! endpoints, event lookup) with HTML, and runs their buttons (replay, enable). Buttons
//! call this same function: its own ARN comes from the invocation context.

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use tern_console::Target;
use tern_console::aws::{ConsoleConfig, console_deps};

#[tokio::main]
async fn main() -> Result<(), Error> {
    tern_handlers::logging::init_lambda();
    let config = ConsoleConfig::from_env(&|k| std::env::var(k).ok())?;
    // Trusts the Amazon Trust Services roots only: no system certificate store to load.
    let aws = tern_aws::tls::load_for_lambda().await;
    let deps = console_deps(&config, &aws);
    let deps = &deps;
    run(service_fn(
        move |event: LambdaEvent<serde_json::Value>| async move {
            let target = Target::CloudWatch {
                function_arn: event.context.invoked_function_arn.clone(),
            };
            Ok::<serde_json::Value, Error>(tern_console::handle(deps, event.payload, &target).await)
        },
    ))
    .await
}
