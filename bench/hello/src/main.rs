//! Hello world on `lambda_runtime`: parses the event as JSON and answers a constant. The
//! benchmarks compare Tern's functions against it (cold start, memory, size), so it is
//! built with the same profile and the same runtime crate, and nothing else.

use lambda_runtime::{Error, LambdaEvent, run, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    run(service_fn(
        |event: LambdaEvent<serde_json::Value>| async move {
            // Touch the event so the parse is not optimised away.
            let records = event
                .payload
                .get("Records")
                .map_or(0, |r| r.as_array().map_or(0, Vec::len));
            Ok::<_, Error>(serde_json::json!({ "hello": "world", "records": records }))
        },
    ))
    .await
}
