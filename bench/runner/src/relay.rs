//! The relay at fan-out scale (issue 15 item 5): the real relay binary, under the Lambda
//! Runtime API emulator with the relay's 30 s deadline (`functions.relay.timeoutSeconds`)
//! and its 256 MB setting, against moto. Each scenario writes its events to the outbox,
//! reads their stream records back (as Lambda would deliver them), and invokes the binary
//! as the event source mapping does: a reported record is retried from, until the batch
//! is done. Measured: the process's peak resident set (VmHWM), the wall time from the
//! first invocation to the last answer, the invocations it took, and the messages on the
//! delivery queue afterwards (each (event, endpoint) pair exactly once: more would be a
//! message sent twice).
//!
//! moto on loopback answers a `SendMessageBatch` in milliseconds (with the launcher's fix 7)
//! but is one Python process on the same 2 cores as the relay: the times here say how the
//! relay behaves (one invocation or several, each pair once), not how long SQS would take.

use std::path::Path;
use std::process::Stdio;
use std::time::Instant;

use serde::Serialize;
use serde_json::{Value, json};
use tern_core::{Endpoint, EndpointId, Secret, TenantId};
use tern_local::{LocalOptions, LocalTern, MotoServer};

use crate::{BoxError, binary_path, payload_json, peak_rss_mb, queue_depth, spawn_function_with};

/// The relay's timeout, milliseconds (`functions.relay.timeoutSeconds` in
/// infra/settings.json): the deadline each invocation gets.
const RELAY_DEADLINE_MS: u64 = 30_000;

/// Most invocations a scenario may take before it counts as stuck.
const MAX_INVOCATIONS: usize = 40;

/// One scenario's figures.
#[derive(Debug, Clone, Serialize)]
pub struct RelayRun {
    /// What was relayed.
    pub scenario: String,
    /// Stream records (events) in the batch.
    pub events: usize,
    /// Endpoints subscribed to each.
    pub endpoints: usize,
    /// Payload of each event, bytes.
    pub payload_bytes: usize,
    /// Peak resident set of the relay process over all its invocations, MB.
    pub peak_rss_mb: f64,
    /// The invocations' time together (first call to answer, each), seconds.
    pub seconds: f64,
    /// Each invocation's deadline, milliseconds.
    pub deadline_ms: u64,
    /// Invocations it took (more than one: the fan-out resumed from its checkpoint).
    pub invocations: usize,
    /// Messages on the delivery queue afterwards.
    pub messages: u64,
    /// events x endpoints.
    pub expected: u64,
}

/// Both scenarios of the issue: one event x 500 endpoints x 256 KiB, and 100 events x 500
/// endpoints (1 KiB payloads).
///
/// # Errors
/// A scenario that could not run or did not finish.
pub async fn run(bin_dir: &Path) -> Result<Vec<RelayRun>, BoxError> {
    let relay = binary_path(bin_dir, "relay")?;
    let mut runs = Vec::new();
    for (name, events, endpoints, payload, deadline_ms) in [
        (
            "1 event x 500 endpoints x 256 KiB",
            1,
            500,
            256 * 1024,
            RELAY_DEADLINE_MS,
        ),
        (
            "100 events x 500 endpoints x 1 KiB",
            100,
            500,
            1024,
            RELAY_DEADLINE_MS,
        ),
        // The same with 4 s of sending per invocation (12 s less the 8 s reserve): the
        // fan-out is cut short and resumes from its checkpoint, invocation after invocation.
        (
            "100 events x 500 endpoints x 1 KiB, 12 s deadline",
            100,
            500,
            1024,
            SHORT_DEADLINE_MS,
        ),
    ] {
        eprintln!("relay bench: {name} ...");
        let run = scenario(&relay, name, (events, endpoints, payload), deadline_ms)
            .await
            .map_err(|e| format!("relay scenario {name}: {e}"))?;
        eprintln!(
            "relay bench: {name}: {:.1} MB peak, {:.1} s, {} invocation(s), {} of {} messages",
            run.peak_rss_mb, run.seconds, run.invocations, run.messages, run.expected
        );
        runs.push(run);
    }
    Ok(runs)
}

/// A deadline that cuts the 50,000-message fan-out short: 12 s, 4 s of sending.
const SHORT_DEADLINE_MS: u64 = 12_000;

async fn scenario(
    relay: &Path,
    name: &str,
    (events, endpoints, payload): (usize, usize, usize),
    deadline_ms: u64,
) -> Result<RelayRun, BoxError> {
    // A moto of its own: 50,000 messages must not weigh on the other benchmarks.
    let moto = MotoServer::start().await?;
    let options = LocalOptions {
        prefix: format!("bench-relay-{events}-{}-", std::process::id()),
        console_port: None,
        ..LocalOptions::default()
    };
    let local = LocalTern::create(moto.sdk_config().await, &options).await?;
    for i in 0..endpoints {
        local
            .sender
            .endpoints
            .put(&Endpoint::new(
                EndpointId::new(format!("ep_{i:04}"))?,
                TenantId::new("tnt_bench")?,
                format!("http://127.0.0.1:9/hook{i}"),
                vec!["*".into()],
                Secret::generate(),
                chrono::Utc::now(),
            ))
            .await?;
    }
    let writer = tern_outbox::OutboxWriter::new(&local.resources.outbox_table);
    let ddb = aws_sdk_dynamodb::Client::new(&local.aws);
    for i in 0..events {
        let prepared = writer.prepare(
            "order.paid",
            "tnt_bench",
            payload_json(payload, &format!("relay{i}")),
        )?;
        ddb.transact_write_items()
            .transact_items(prepared.transact_item()?)
            .send()
            .await?;
    }
    let mut records = stream_records(&local, events).await?;

    let mut env = local.env.clone();
    env.extend(
        [
            ("AWS_ENDPOINT_URL", moto.url.clone()),
            ("AWS_REGION", "us-east-1".to_owned()),
            ("AWS_ACCESS_KEY_ID", "testing".to_owned()),
            ("AWS_SECRET_ACCESS_KEY", "testing".to_owned()),
            ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
            ("RUST_LOG", "info".to_owned()),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );
    // The relay's own log (warnings: where it stopped, checkpoints not written).
    let log_path = std::env::temp_dir().join(format!(
        "tern-bench-relay-{events}-{deadline_ms}-{}.log",
        std::process::id()
    ));
    let log = std::fs::File::create(&log_path)?;
    let mut f = spawn_function_with(relay, "relay", &env, Stdio::from(log), deadline_ms).await?;
    let sqs = aws_sdk_sqs::Client::new(&local.aws);
    // The invocations' own time: the progress query between them is the bench's.
    let mut invoking = std::time::Duration::ZERO;
    let mut invocations = 0;
    while !records.is_empty() {
        invocations += 1;
        if invocations > MAX_INVOCATIONS {
            return Err(format!("not done after {MAX_INVOCATIONS} invocations").into());
        }
        let t0 = Instant::now();
        let answer = f.invoke(&json!({ "Records": records })).await?;
        let took = t0.elapsed();
        invoking += took;
        eprintln!(
            "relay bench:   invocation {invocations}: {:.1} s, {} record(s) given, {} messages queued so far (log {})",
            took.as_secs_f64(),
            records.len(),
            queue_depth(&sqs, &local.resources.delivery_queue_url).await?,
            log_path.display()
        );
        let Some(from) = answer
            .get("batchItemFailures")
            .and_then(Value::as_array)
            .and_then(|f| f.first())
            .and_then(|f| f.get("itemIdentifier"))
            .and_then(Value::as_str)
        else {
            break;
        };
        // As the event source mapping: everything before the reported record is done.
        let at = records
            .iter()
            .position(|r| r["dynamodb"]["SequenceNumber"] == from)
            .ok_or("the relay reported a record that is not in the batch")?;
        records.drain(..at);
    }
    let seconds = invoking.as_secs_f64();
    let peak_rss_mb = peak_rss_mb(f.pid()?)?;
    drop(f);
    let messages = queue_depth(&sqs, &local.resources.delivery_queue_url).await?;
    drop(local);
    moto.stop().await;
    Ok(RelayRun {
        scenario: name.to_owned(),
        events,
        endpoints,
        payload_bytes: payload,
        peak_rss_mb,
        seconds,
        deadline_ms,
        invocations,
        messages,
        expected: (events * endpoints) as u64,
    })
}

/// The outbox's stream records, as Lambda delivers them, once `n` INSERTs are there.
async fn stream_records(local: &LocalTern, n: usize) -> Result<Vec<Value>, BoxError> {
    let streams = aws_sdk_dynamodbstreams::Client::new(&local.aws);
    let arn = &local.resources.outbox_stream_arn;
    let description = streams.describe_stream().stream_arn(arn).send().await?;
    let mut records = Vec::new();
    for shard in description
        .stream_description()
        .map(|d| d.shards())
        .unwrap_or_default()
    {
        let Some(shard_id) = shard.shard_id() else {
            continue;
        };
        let mut iterator = streams
            .get_shard_iterator()
            .stream_arn(arn)
            .shard_id(shard_id)
            .shard_iterator_type(aws_sdk_dynamodbstreams::types::ShardIteratorType::TrimHorizon)
            .send()
            .await?
            .shard_iterator;
        while let Some(it) = iterator.take() {
            let out = streams.get_records().shard_iterator(it).send().await?;
            if out.records().is_empty() {
                break;
            }
            records.extend(
                out.records()
                    .iter()
                    .filter(|r| r.event_name().is_some_and(|e| e.as_str() == "INSERT"))
                    .map(|r| tern_aws::stream::lambda_record(r, arn)),
            );
            iterator = out.next_shard_iterator;
        }
    }
    if records.len() != n {
        return Err(format!("{} stream records for {n} events", records.len()).into());
    }
    Ok(records)
}

/// The report's section.
pub fn markdown(runs: &[RelayRun]) -> String {
    let mut s = String::from(
        "\n## Relay at fan-out scale (real relay binary, 256 MB setting, moto)\n\n\
         Invoked as the stream mapping does: a reported record is retried from, the fan-out \
         resumes from its checkpoint. moto on loopback answers a call in milliseconds but is \
         one Python process on the same 2 cores as the relay: the times show how the relay \
         behaves, not how long SQS takes. Messages: on the delivery queue afterwards, each \
         (event, endpoint) pair once.\n\n\
         | scenario | deadline (s) | peak RSS (MB) | time (s) | invocations | messages / expected |\n\
         | --- | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in runs {
        s.push_str(&format!(
            "| {} | {} | {:.1} | {:.1} | {} | {} / {} |\n",
            r.scenario,
            r.deadline_ms / 1000,
            r.peak_rss_mb,
            r.seconds,
            r.invocations,
            r.messages,
            r.expected
        ));
    }
    s
}
