//! `tern local` and `tern demo`: local mode (moto as the local AWS, the resources, the
//! pollers) and the demo. Built only with the `local` feature, so the operator tool itself
//! does not pull in local mode.

use std::io::Write;

use tern_local::demo::{DemoOptions, run as run_demo};
use tern_local::local::{LocalOptions, LocalTern};
use tern_local::moto::MotoServer;
use tern_ops::OpsError;

fn invalid(e: impl std::fmt::Display) -> OpsError {
    OpsError::Invalid(e.to_string())
}

/// Runs the demo and fails unless every event was delivered after the replay.
///
/// # Errors
/// [`OpsError::Invalid`] when the demo could not run or did not deliver everything.
pub async fn demo(
    events: usize,
    time_scale: f64,
    out: &mut (dyn Write + Send),
) -> Result<(), OpsError> {
    use std::io::IsTerminal as _;
    let options = DemoOptions {
        events,
        time_scale,
        // In a terminal the demo ends with a customer portal link and stays up for it.
        hold: std::io::stdin().is_terminal() && std::io::stdout().is_terminal(),
        ..DemoOptions::default()
    };
    let report = run_demo(options, out).await.map_err(invalid)?;
    let all = report
        .after_replay
        .values()
        .all(|t| t.delivered == report.written && t.bad_signatures == 0);
    if !all {
        return Err(OpsError::Invalid(
            "after the replay, not every event was delivered".into(),
        ));
    }
    Ok(())
}

/// Starts local mode and runs until Ctrl-C or SIGTERM.
///
/// # Errors
/// [`OpsError::Invalid`] when moto or the resources cannot start.
pub async fn local(time_scale: f64) -> Result<(), OpsError> {
    // Status lines on stderr, so a first start (moto can take seconds) is never silent;
    // RUST_LOG=info shows every relay and attempt as well.
    // OpenTelemetry traces to the OTLP endpoint the standard environment names, if any
    // (docs/tracing.md); without one nothing is built.
    // Without one, every span goes to .tern/spans.jsonl, which `tern trace <event id>` reads.
    let span_file = std::path::Path::new(tern_handlers::span_log::DEFAULT_PATH);
    let mut collector = None;
    if !tern_handlers::telemetry::init_from_env("tern-local").map_err(invalid)? {
        tern_handlers::telemetry::install(tern_handlers::telemetry::span_log_provider(
            "tern-local",
            span_file,
        ));
        // Local mode's own OTLP receiver: the spans of the program that writes events and
        // of a receiver that traces join Tern's in the same file (docs/tracing.md).
        let addr = std::net::SocketAddr::from((
            [127, 0, 0, 1],
            tern_local::collector::DEFAULT_COLLECTOR_PORT,
        ));
        // Port 4318 taken (a collector or another local mode): any free port, printed below,
        // for OTEL_EXPORTER_OTLP_ENDPOINT.
        let started = match tern_local::collector::Collector::start(addr, span_file).await {
            Ok(c) => Ok(c),
            Err(_) => {
                tern_local::collector::Collector::start(
                    std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
                    span_file,
                )
                .await
            }
        };
        match started {
            Ok(c) => collector = Some(c),
            Err(e) => eprintln!(
                "tern local: {e}; other programs' spans will not be collected \
                 (Tern's own still go to {})",
                span_file.display()
            ),
        }
    }
    eprintln!("tern local: starting moto (the local AWS) on 127.0.0.1...");
    let moto = MotoServer::start().await.map_err(invalid)?;
    eprintln!(
        "tern local: moto is up at {}; creating the tables and queues...",
        moto.url
    );
    let options = LocalOptions {
        time_scale,
        api_port: Some(tern_local::api::DEFAULT_API_PORT),
        ..LocalOptions::default()
    };
    let mut local = LocalTern::create(moto.sdk_config().await, &options)
        .await
        .map_err(invalid)?;
    eprintln!("tern local: starting the stream and queue pollers (time scale {time_scale})...");
    let _events = local.start_pollers(&options);
    let portal = tern_local::portal::link(&local, tern_local::portal::DEMO_TENANT)
        .await
        .unwrap_or_else(|e| format!("not available ({e})"));
    let text = env_file(&moto.url, &local.env);
    std::fs::create_dir_all(".tern").map_err(invalid)?;
    std::fs::write(".tern/local.env", &text).map_err(invalid)?;
    println!(
        "Local mode is running (moto at {}); names and credentials are in .tern/local.env.\n\
         In another shell:\n  \
         source .tern/local.env\n  \
         tern endpoints add --tenant tnt_me --url http://127.0.0.1:8000/hook --schedule short   # prints the signing secret\n\
         (--schedule short retries within about 2 h instead of 36 h: the quick way to see a dead letter;\n\
         with --time-scale 0.01 it takes about a minute.)\n\
         Outbox table: {}\n\
         Operator's console: {}\n\
         Tern API: {} (TERN_API_URL; sign with SigV4 for execute-api and the keys in .tern/local.env, see docs/api.md)\n\
         Traces: `tern trace <event id>`; OTLP/HTTP collector for your program's spans: {} (docs/tracing.md)\n\
         Customer portal of tenant {} (opens once, for 24 h; docs/portal.md): {}\n\
         Logs: RUST_LOG=info tern local. Press Ctrl-C to stop.",
        moto.url,
        local.resources.outbox_table,
        local
            .console
            .map_or_else(|| "not started".to_owned(), tern_local::console::url),
        local
            .api
            .map_or_else(|| "not started".to_owned(), tern_local::api::url),
        collector.as_ref().map_or_else(
            || "not started".to_owned(),
            tern_local::collector::Collector::endpoint
        ),
        tern_local::portal::DEMO_TENANT,
        portal
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(invalid)?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    drop(local);
    moto.stop().await;
    Ok(())
}

/// The text of `.tern/local.env`: everything `tern`, the examples, the AWS CLI and boto3
/// need to reach local mode. The AWS CLI and boto3 read the region from
/// `AWS_DEFAULT_REGION` (the Rust SDK from `AWS_REGION`) and want credentials even though
/// moto ignores them.
fn env_file(moto_url: &str, names: &[(String, String)]) -> String {
    let mut env = vec![
        ("AWS_ENDPOINT_URL".to_owned(), moto_url.to_owned()),
        ("AWS_REGION".to_owned(), "us-east-1".to_owned()),
        ("AWS_DEFAULT_REGION".to_owned(), "us-east-1".to_owned()),
        ("AWS_ACCESS_KEY_ID".to_owned(), "testing".to_owned()),
        ("AWS_SECRET_ACCESS_KEY".to_owned(), "testing".to_owned()),
    ];
    env.extend(names.iter().cloned());
    env.iter()
        .map(|(k, v)| format!("export {k}='{v}'\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AWS CLI and boto3 work from the file alone: region (both spellings) and
    /// credentials are there, next to the endpoint and the names.
    #[test]
    fn env_file_is_enough_for_the_aws_cli_and_boto3() {
        let text = env_file(
            "http://127.0.0.1:5000",
            &[("TERN_DLQ_URL".to_owned(), "http://q".to_owned())],
        );
        for line in [
            "export AWS_ENDPOINT_URL='http://127.0.0.1:5000'",
            "export AWS_REGION='us-east-1'",
            "export AWS_DEFAULT_REGION='us-east-1'",
            "export AWS_ACCESS_KEY_ID='testing'",
            "export AWS_SECRET_ACCESS_KEY='testing'",
            "export TERN_DLQ_URL='http://q'",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from:\n{text}"
            );
        }
    }
}
