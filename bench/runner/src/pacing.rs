//! The adaptive pacing benchmark (issue 26, "Adaptive pacing"; `make bench-pacing`, part of
//! `make bench`), in local mode: the real relay and sender handlers under the local event
//! source mappings with 20 concurrent sender batches (the sender mapping's
//! `maximumConcurrency` in both stacks), moto as AWS behind the counting proxy, a
//! receiver on 127.0.0.1 on a thread of its own.
//!
//! A burst of [`DELIVERIES`] deliveries to one endpoint without a limit of its own, three
//! times: to a receiver that takes 5 requests in any one-second window and answers the rest
//! `429 Retry-After: 1`; to one that takes 50; to one that takes everything (the reference:
//! pacing never starts). Measured at the receiver: refused requests (429s) against
//! deliveries, the time from the first outbox write to the last delivery against the
//! ideal (deliveries / the receiver's rate), the busiest one-second window; from the ledger:
//! attempts beyond one per delivery (a push-back spends none); from the health record,
//! sampled each second: the pace the receiver taught; on the wire: AWS requests per
//! delivery and their cost. Real time (time scale 1): the receiver's second is a real one.
//!
//! The goal (issue 26): against the 5/s receiver, refused requests at most 10 % of the
//! deliveries and all delivered within 1.5 x the ideal; against the 50/s one, no slower
//! than against the one that takes everything.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use tern_core::health::HealthStore as _;
use tern_core::{Endpoint, EndpointId, Secret, TenantId};
use tern_local::{Behavior, LocalOptions, LocalTern, Reply};

use crate::BoxError;
use crate::proxy::{CountingProxy, Counts};
use crate::rate_limit::{
    busiest_second, cost_per_million, receiver_on_its_own_thread, write_burst,
};

/// Deliveries in each burst (the 200).
pub const DELIVERIES: usize = 200;
/// Concurrent sender batches: the sender mapping's `maximumConcurrency` (20).
const SENDER_CONCURRENCY: u32 = 20;
/// Longest one run may take, seconds.
const LIMIT_SECONDS: u64 = 600;

/// One burst.
#[derive(Debug, Clone, Serialize)]
pub struct PacingRun {
    /// What the receiver takes per second (`None`: everything).
    pub receiver_per_second: Option<u32>,
    /// Deliveries written.
    pub deliveries: usize,
    /// Distinct deliveries the receiver accepted.
    pub delivered: usize,
    /// Requests the receiver refused (429).
    pub refused: usize,
    /// Refused requests per delivery, percent.
    pub refused_percent: f64,
    /// From the first outbox write to the last accepted request, seconds.
    pub seconds_to_deliver: f64,
    /// From the first outbox write to the last, seconds (the burst's own pace).
    pub seconds_to_write: f64,
    /// Deliveries / the receiver's rate, seconds (`None`: no limit).
    pub ideal_seconds: Option<f64>,
    /// `seconds_to_deliver / ideal_seconds`.
    pub times_ideal: Option<f64>,
    /// Most accepted requests in any one-second window.
    pub busiest_second: usize,
    /// Attempts beyond the first per delivery in the ledger (a push-back spends none).
    pub attempts_beyond_first: usize,
    /// The learnt pace sampled each second (seconds since the first write, requests per
    /// second; 0 while unpaced).
    pub pace: Vec<(u64, u32)>,
    /// Requests the receiver accepted and refused in each whole second since the first
    /// write (second, accepted, refused).
    pub timeline: Vec<(i64, usize, usize)>,
    /// AWS requests per delivery by caller and operation.
    pub per_delivery: BTreeMap<String, BTreeMap<String, f64>>,
    /// DynamoDB and SQS requests of the billed callers, $ per million deliveries.
    pub dynamodb_sqs_cost_per_million: f64,
}

/// The three bursts.
#[derive(Debug, Clone, Serialize)]
pub struct PacingReport {
    /// Against the 5/s receiver.
    pub slow: PacingRun,
    /// Against the 50/s receiver.
    pub fast: PacingRun,
    /// Against the receiver that takes everything.
    pub free: PacingRun,
}

/// Runs the three bursts.
///
/// # Errors
/// A burst that did not deliver everything within its time, or an AWS error.
pub async fn run(proxy: &CountingProxy) -> Result<PacingReport, BoxError> {
    Ok(PacingReport {
        slow: burst(proxy, Some(5)).await?,
        fast: burst(proxy, Some(50)).await?,
        free: burst(proxy, None).await?,
    })
}

async fn burst(proxy: &CountingProxy, per_second: Option<u32>) -> Result<PacingRun, BoxError> {
    let name = per_second.map_or_else(|| "free".to_owned(), |r| format!("p{r}"));
    let sdk = |label: &str| {
        let url = proxy.url(label);
        async move { tern_local::moto::sdk_config_for(&url).await }
    };
    let options = LocalOptions {
        prefix: format!("bench-pace-{name}-{}-", std::process::id()),
        sender_concurrency: SENDER_CONCURRENCY,
        ..LocalOptions::default()
    };
    let mut local = LocalTern::create(sdk("sender").await, &options).await?;
    let vars = local.env.clone();
    let lookup = move |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    local.relay = std::sync::Arc::new(tern_aws::wiring::relay_deps(
        &tern_handlers::config::RelayConfig::from_env(&tern_handlers::config::Env(&lookup))?,
        &sdk("relay").await,
    ));
    let receiver = receiver_on_its_own_thread()?;
    receiver.set(
        "/hook",
        match per_second {
            Some(r) => Behavior::RateLimit {
                per_second: r as usize,
                retry_after: "1".into(),
            },
            None => Behavior::Always(Reply::status(200)),
        },
    );
    let tenant = TenantId::new("tnt_pace")?;
    let endpoint = Endpoint::new(
        EndpointId::generate(),
        tenant.clone(),
        receiver.url("/hook"),
        vec!["*".into()],
        Secret::generate(),
        Utc::now(),
    );
    tern_core::ports::EndpointStore::put(local.sender.endpoints.as_ref(), &endpoint).await?;
    let app = aws_sdk_dynamodb::Client::new(&sdk("app").await);
    let health = tern_aws::DynamoHealthStore::new(
        aws_sdk_dynamodb::Client::new(&sdk("app").await),
        &local.resources.health_table,
    );
    local.aws = sdk("esm").await;
    proxy.reset();
    let _events = local.start_pollers(&options);

    let started = Utc::now();
    let wall = Instant::now();
    // Written beside the sampling below, so the pace is seen from the first second.
    let writes = {
        let (app, table) = (app.clone(), local.resources.outbox_table.clone());
        tokio::spawn(async move {
            let ids = write_burst(&app, &table, "tnt_pace", DELIVERIES)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>((ids, Utc::now()))
        })
    };
    let bar = crate::progress(DELIVERIES as u64, &format!("pacing, receiver {name}"));
    let accepted = |got: &[tern_local::receiver::Captured]| {
        got.iter()
            .filter(|r| r.answered == 200)
            .filter_map(|r| r.header("webhook-id"))
            .collect::<HashSet<_>>()
            .len()
    };
    let mut pace = Vec::new();
    let mut next_sample = wall;
    loop {
        if Instant::now() >= next_sample {
            let record = health.get(&tenant, &endpoint.id).await.ok().flatten();
            let per_second = record.and_then(|h| h.pace).map_or(0, |p| p.per_second);
            pace.push((wall.elapsed().as_secs(), per_second));
            next_sample += Duration::from_secs(1);
        }
        let n = accepted(&receiver.requests("/hook"));
        bar.set_position(n as u64);
        if n >= DELIVERIES {
            break;
        }
        if wall.elapsed() > Duration::from_secs(LIMIT_SECONDS) {
            bar.finish_and_clear();
            return Err(
                format!("{name}: {n} of {DELIVERIES} delivered within {LIMIT_SECONDS} s").into(),
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bar.finish_and_clear();
    let (ids, written) = writes.await??;
    let got = receiver.requests("/hook");
    let accepted_at: Vec<DateTime<Utc>> = got
        .iter()
        .filter(|r| r.answered == 200)
        .map(|r| r.at)
        .collect();
    let refused = got.iter().filter(|r| r.answered == 429).count();
    let mut seconds_seen: BTreeMap<i64, (usize, usize)> = BTreeMap::new();
    for r in &got {
        let second = (r.at - started).num_seconds();
        let entry = seconds_seen.entry(second).or_default();
        match r.answered {
            200 => entry.0 += 1,
            429 => entry.1 += 1,
            _ => {}
        }
    }
    let timeline = seconds_seen
        .into_iter()
        .map(|(s, (a, r))| (s, a, r))
        .collect();
    let last = accepted_at.iter().max().copied().unwrap_or(started);
    let mut attempts_beyond_first = 0;
    for id in &ids {
        attempts_beyond_first += local
            .sender
            .ledger
            .history(&tenant, id)
            .await?
            .iter()
            .filter(|a| a.attempt > 1)
            .count();
    }
    drop(local);
    let mut counts: Counts = proxy.counts();
    if let Some(app) = counts.get_mut("app") {
        app.remove("dynamodb:GetItem");
    }
    proxy.reset();
    let per_delivery = crate::rate_limit::per_delivery(&counts, DELIVERIES);
    let seconds = (last - started).num_milliseconds() as f64 / 1000.0;
    let ideal = per_second.map(|r| DELIVERIES as f64 / f64::from(r));
    let delivered = accepted(&got);
    Ok(PacingRun {
        receiver_per_second: per_second,
        deliveries: DELIVERIES,
        delivered,
        refused,
        refused_percent: refused as f64 * 100.0 / DELIVERIES as f64,
        seconds_to_deliver: seconds,
        seconds_to_write: (written - started).num_milliseconds() as f64 / 1000.0,
        ideal_seconds: ideal,
        times_ideal: ideal.map(|i| seconds / i),
        busiest_second: busiest_second(&accepted_at),
        attempts_beyond_first,
        pace,
        timeline,
        dynamodb_sqs_cost_per_million: cost_per_million(&per_delivery),
        per_delivery,
    })
}

impl PacingReport {
    /// The report as Markdown.
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "\n## Adaptive pacing\n\n\
             A burst of {DELIVERIES} deliveries to one endpoint without a limit of its own, \
             {SENDER_CONCURRENCY} concurrent sender batches in local mode (real time), to a receiver \
             that takes 5, 50 or all requests per one-second window and answers the rest \
             `429 Retry-After: 1`. Goal: against 5/s, refused <= 10 % of deliveries and all \
             delivered within 1.5 x the ideal; against 50/s, no slower than against the receiver \
             that takes everything.\n\n\
             | receiver | delivered | refused (429) | refused / deliveries | time to deliver all | ideal | x ideal | busiest 1-s window | attempts beyond the first | DynamoDB + SQS $ per million |\n\
             | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
        );
        for run in [&self.slow, &self.fast, &self.free] {
            let name = run
                .receiver_per_second
                .map_or_else(|| "takes everything".to_owned(), |r| format!("{r}/s"));
            s.push_str(&format!(
                "| {name} | {} | {} | {:.1} % | {:.1} s | {} | {} | {} | {} | {:.2} |\n",
                run.delivered,
                run.refused,
                run.refused_percent,
                run.seconds_to_deliver,
                run.ideal_seconds
                    .map_or_else(|| "-".to_owned(), |i| format!("{i:.0} s")),
                run.times_ideal
                    .map_or_else(|| "-".to_owned(), |x| format!("{x:.2}")),
                run.busiest_second,
                run.attempts_beyond_first,
                run.dynamodb_sqs_cost_per_million,
            ));
        }
        s.push_str(&format!(
            "\nAgainst 50/s: {:.1} s, against the receiver that takes everything: {:.1} s. \
             Writing the {DELIVERIES} outbox items took {:.1} / {:.1} / {:.1} s.\n",
            self.fast.seconds_to_deliver,
            self.free.seconds_to_deliver,
            self.slow.seconds_to_write,
            self.fast.seconds_to_write,
            self.free.seconds_to_write,
        ));
        s.push_str(
            "\nThe pace the 5/s receiver taught, each second (requests per second; 0 unpaced):\n\n",
        );
        let trace: Vec<String> = self
            .slow
            .pace
            .iter()
            .map(|(t, p)| format!("{t}s:{p}"))
            .collect();
        s.push_str(&format!("`{}`\n", trace.join(" ")));
        for run in [&self.slow, &self.fast] {
            let line: Vec<String> = run
                .timeline
                .iter()
                .map(|(t, a, r)| {
                    if *r > 0 {
                        format!("{t}s:{a}/{r}")
                    } else {
                        format!("{t}s:{a}")
                    }
                })
                .collect();
            s.push_str(&format!(
                "\nAccepted (/refused) each second since the first write, receiver {}/s:\n\n`{}`\n",
                run.receiver_per_second.unwrap_or_default(),
                line.join(" ")
            ));
        }
        s.push_str(
            "\nRequests per delivery against 5/s (`esm`: the local event source mappings' receives \
             and deletes, idle polling included):\n\n| caller | operation | per delivery |\n| --- | --- | ---: |\n",
        );
        for (label, ops) in &self.slow.per_delivery {
            for (op, per) in ops {
                s.push_str(&format!("| {label} | {op} | {per:.3} |\n"));
            }
        }
        s
    }
}
