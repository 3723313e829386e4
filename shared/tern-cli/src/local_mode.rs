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
    let options = DemoOptions {
        events,
        time_scale,
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
    let moto = MotoServer::start().await.map_err(invalid)?;
    let options = LocalOptions {
        time_scale,
        ..LocalOptions::default()
    };
    let mut local = LocalTern::create(moto.sdk_config().await, &options)
        .await
        .map_err(invalid)?;
    let _events = local.start_pollers(&options);
    let mut env = vec![
        ("AWS_ENDPOINT_URL".to_owned(), moto.url.clone()),
        ("AWS_REGION".to_owned(), "us-east-1".to_owned()),
        ("AWS_ACCESS_KEY_ID".to_owned(), "testing".to_owned()),
        ("AWS_SECRET_ACCESS_KEY".to_owned(), "testing".to_owned()),
    ];
    env.extend(local.env.iter().cloned());
    let text: String = env
        .iter()
        .map(|(k, v)| format!("export {k}='{v}'\n"))
        .collect();
    std::fs::create_dir_all(".tern").map_err(invalid)?;
    std::fs::write(".tern/local.env", &text).map_err(invalid)?;
    println!(
        "Local mode is running (moto at {}). In another shell:\n  source .tern/local.env\n  tern endpoints add --tenant tnt_me --url http://127.0.0.1:8000/hook\nOutbox table: {}\nOperator's console: {}\nPress Ctrl-C to stop.",
        moto.url,
        local.resources.outbox_table,
        local
            .console
            .map_or_else(|| "not started".to_owned(), tern_local::console::url)
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
