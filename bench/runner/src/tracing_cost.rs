//! What tracing costs (issue 30, `make bench-tracing`, also part of `make bench`): the
//! sender's CPU per delivery with tracing off and on, and the cold start of the sender and
//! relay binaries with tracing off and on, alternated round by round.
//!
//! CPU: each side runs in a child process of its own (a process turns tracing on once and
//! for good), sending batches of 10 deliveries of 1 KiB to a loopback receiver with the
//! in-memory ports of the CPU benchmark; "on" exports every span (no sampling, the worst
//! case) with the OTLP/HTTP batch exporter to a loopback sink in the receiver's process, and
//! flushes before the clock stops, so the spans' making, encoding and sending are counted.
//! Cold start: the real binaries, spawn -> first `next`, with `OTEL_EXPORTER_OTLP_ENDPOINT`
//! unset and set (the exporter is built at start; nothing is sent before an event).
//! Goal (issue 30): on costs at most 10 % CPU per delivery, off at most 1 % (off builds
//! nothing: each span site is one atomic load).

use std::path::Path;
use std::process::Stdio;

use crate::stats::{Row, Sample};
use crate::{
    BATCH, BoxError, ChildReceiver, cold_start_with, cpu_seconds, memory_deps, progress,
    sqs_events, tern_batches,
};

/// Deliveries each child measures.
pub const DELIVERIES: usize = 500;

/// Internal subcommand: one side's CPU per delivery, microseconds, printed on stdout.
pub async fn child(on: bool, deliveries: usize) -> Result<(), BoxError> {
    let receiver = ChildReceiver::start(0).await?;
    if on {
        let url = format!("http://127.0.0.1:{}/v1/traces", receiver.port());
        let provider = tern_handlers::telemetry::otlp_provider("tern-bench", Some(&url), None)?;
        if !tern_handlers::telemetry::install(provider) {
            return Err("tracing was already on in this process".into());
        }
    }
    let deps = memory_deps(&receiver.url())?;
    let batches = deliveries.div_ceil(BATCH);
    let n = (batches * BATCH) as f64;
    // Warm: connection pools, lazy statics, the exporter's client.
    tern_batches(&deps, sqs_events("warm", 2, BATCH)?).await?;
    tern_handlers::telemetry::flush().await;
    let events = sqs_events("cpu", batches, BATCH)?;
    let c0 = cpu_seconds();
    tern_batches(&deps, events).await?;
    tern_handlers::telemetry::flush().await;
    println!("{}", (cpu_seconds() - c0) * 1e6 / n);
    Ok(())
}

async fn one_side(on: bool, deliveries: usize) -> Result<f64, BoxError> {
    let out = tokio::process::Command::new(std::env::current_exe()?)
        .args(["tracing-cpu", "--deliveries", &deliveries.to_string()])
        .args(on.then_some("--on"))
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .output()
        .await?;
    if !out.status.success() {
        return Err(format!("tracing-cpu (on: {on}) failed: {}", out.status).into());
    }
    Ok(String::from_utf8(out.stdout)?.trim().parse()?)
}

/// The rows: CPU per delivery on against off (the reference), then each binary's cold
/// start on against off.
pub async fn run(bin_dir: &Path, rounds: usize, deliveries: usize) -> Result<Vec<Row>, BoxError> {
    let (mut on, mut off) = (Sample::default(), Sample::default());
    let bar = progress((rounds * 2) as u64, "tracing CPU");
    for round in 0..rounds {
        for side in [round % 2 == 0, round % 2 == 1] {
            let v = one_side(side, deliveries).await?;
            if side {
                on.push(v)
            } else {
                off.push(v)
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let mut rows = vec![Row {
        measure: format!(
            "CPU per delivery, tracing on (every span exported over OTLP/HTTP), {} B, batches of {BATCH}",
            crate::SMALL_PAYLOAD
        ),
        unit: "us".into(),
        tern: on,
        reference: "tracing off, same run".into(),
        reference_sample: off,
    }];
    let traced = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")];
    for name in ["sender", "relay"] {
        let bin = crate::binary_path(bin_dir, name)?;
        let (mut on, mut off) = (Sample::default(), Sample::default());
        let bar = progress((rounds * 2) as u64, "tracing cold start");
        for round in 0..rounds {
            for side in [round % 2 == 0, round % 2 == 1] {
                let extra: &[(&str, &str)] = if side { &traced } else { &[] };
                let ms = cold_start_with(&bin, name, extra).await?;
                if side {
                    on.push(ms)
                } else {
                    off.push(ms)
                }
                bar.inc(1);
            }
        }
        bar.finish_and_clear();
        rows.push(Row {
            measure: format!("cold start (spawn -> first `next`), {name}, tracing on"),
            unit: "ms".into(),
            tern: on,
            reference: "tracing off, same run".into(),
            reference_sample: off,
        });
    }
    Ok(rows)
}

/// The report's verdict lines: on against off, as percentages, against the goal.
pub fn verdict(rows: &[Row]) -> String {
    rows.iter()
        .map(|r| {
            let (on, off) = (r.tern.median(), r.reference_sample.median());
            format!(
                "- {}: on {:.1} {unit} against off {:.1} {unit}, {:+.1} %{}\n",
                r.measure,
                on,
                off,
                (on / off - 1.0) * 100.0,
                if r.unit == "us" {
                    " (goal: at most +10 %)"
                } else {
                    ""
                },
                unit = r.unit
            )
        })
        .collect()
}
