//! The scale meter (`make bench-scale`, issue 29): the real relay and sender binaries in
//! local mode, a recording proxy in front of the local AWS, four scenarios, and a
//! projection of what they measured to 10,000 deliveries a second (or what the flags say)
//! against AWS's limits, with the cost per million deliveries. A benchmark, not a test.
//!
//! - [`meter`]: the recording proxy; [`units`]: DynamoDB's billing rules;
//! - [`keys`]: what a partition key grows with, found from the traffic;
//! - [`esm`]: the event source mappings driving the binaries; [`receiver`]: receivers;
//! - [`scenarios`]: fan-out, hot endpoint, mixed, burst;
//! - [`analysis`]: records to per-key and per-operation figures, and the caches found;
//! - [`model`]: the projection (the model, its assumptions in its doc and the report);
//! - [`report`]: `scale.md` and `scale.json`.

pub mod analysis;
pub mod esm;
pub mod keys;
pub mod meter;
pub mod model;
pub mod receiver;
pub mod report;
pub mod scenarios;
pub mod units;

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::BoxError;

/// `tern-bench scale`'s flags.
#[derive(clap::Args, Debug, Clone)]
pub struct ScaleArgs {
    /// Scenarios to run, comma-separated: fan-out, hot, mixed, burst.
    #[arg(long, value_delimiter = ',', default_value = "fan-out,hot,mixed,burst")]
    pub scenarios: Vec<String>,
    /// The checkout whose binaries (`<checkout>/target/release/{sender,relay}`, unless
    /// --bin-dir says otherwise) and settings (`infra/settings.json`) are measured. Its
    /// tables are created by this checkout's local mode: see docs/scale.md.
    #[arg(long, default_value = ".")]
    pub checkout: PathBuf,
    /// A name for the run in the report (e.g. `main@43ade88`).
    #[arg(long)]
    pub label: Option<String>,
    /// Target: steady deliveries per second.
    #[arg(long, default_value_t = 10_000.0)]
    pub target: f64,
    /// Target: burst deliveries per second.
    #[arg(long, default_value_t = 100_000.0)]
    pub burst: f64,
    /// Target: the burst's length, seconds.
    #[arg(long, default_value_t = 60.0)]
    pub burst_seconds: f64,
    /// Target: warm sender instances at the steady rate.
    #[arg(long, default_value_t = 300.0)]
    pub warm_senders: f64,
    /// Model: seconds a sender batch takes at scale (the slowest POST plus DynamoDB).
    #[arg(long, default_value_t = 0.3)]
    pub batch_seconds: f64,
    /// Target: deliveries per second of the hot endpoint.
    #[arg(long, default_value_t = 2_000.0)]
    pub hot: f64,
    /// Model: lifetime of a cached class never fetched twice in the run, seconds.
    #[arg(long, default_value_t = 900.0)]
    pub unseen_ttl: f64,
    /// Run: sender processes (warm instances) per scenario.
    #[arg(long, default_value_t = 4)]
    pub senders: usize,
    /// Run: endpoints of the fan-out event.
    #[arg(long, default_value_t = 5_000)]
    pub fanout: usize,
    /// Run: endpoints of the mixed scenario.
    #[arg(long, default_value_t = 10_000)]
    pub mixed_endpoints: usize,
    /// Run: tenants of the mixed scenario.
    #[arg(long, default_value_t = 100)]
    pub mixed_tenants: usize,
    /// Run: events of the mixed scenario.
    #[arg(long, default_value_t = 1_500)]
    pub mixed_events: usize,
    /// Run: seconds of each phase of the hot-endpoint scenario.
    #[arg(long, default_value_t = 30.0)]
    pub hot_phase_seconds: f64,
}

impl ScaleArgs {
    fn sizes(&self) -> scenarios::Sizes {
        scenarios::Sizes {
            senders: self.senders,
            fanout: self.fanout,
            mixed_endpoints: self.mixed_endpoints,
            mixed_tenants: self.mixed_tenants,
            mixed_events: self.mixed_events,
            hot_phase_s: self.hot_phase_seconds,
            ..scenarios::Sizes::default()
        }
    }

    fn target(&self, batch: f64) -> model::Target {
        model::Target {
            deliveries_per_s: self.target,
            burst_per_s: self.burst,
            burst_seconds: self.burst_seconds,
            warm_senders: self.warm_senders,
            batch,
            batch_seconds: self.batch_seconds,
            hot_per_s: self.hot,
            unseen_ttl_s: self.unseen_ttl,
            ..model::Target::default()
        }
    }
}

/// Runs the scenarios, projects, writes `<out>/scale.md` (printed too) and `scale.json`.
///
/// # Errors
/// A scenario that could not run, a missing binary, an unreadable settings file.
pub async fn run(args: &ScaleArgs, bin_dir: Option<PathBuf>, out: &Path) -> Result<(), BoxError> {
    std::fs::create_dir_all(out)?;
    let started = Instant::now();
    let bin_dir = bin_dir.unwrap_or_else(|| args.checkout.join("target").join("release"));
    let settings_path = args.checkout.join("infra").join("settings.json");
    let settings: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&settings_path)
            .map_err(|e| format!("{}: {e}", settings_path.display()))?,
    )?;
    let batch = settings["eventSources"]["sender"]["batchSize"]
        .as_f64()
        .unwrap_or(10.0);
    let sizes = args.sizes();
    let mut runs = Vec::new();
    for name in &args.scenarios {
        eprintln!("scale: scenario {name} ...");
        let t = Instant::now();
        let run = match name.as_str() {
            "fan-out" | "fanout" => scenarios::fan_out(&sizes, &bin_dir, out).await,
            "hot" => scenarios::hot(&sizes, &bin_dir, out, args.hot / args.target).await,
            "mixed" => scenarios::mixed(&sizes, &bin_dir, out).await,
            "burst" => scenarios::burst(&sizes, &bin_dir, out).await,
            other => Err(format!("unknown scenario {other}: fan-out, hot, mixed, burst").into()),
        }
        .map_err(|e| format!("scenario {name}: {e}"))?;
        eprintln!(
            "scale: scenario {name}: {:.0} s ({} requests recorded)",
            t.elapsed().as_secs_f64(),
            run.records.len()
        );
        runs.push(run);
    }
    // The caches, from every scenario's fetches and invocations together.
    let fetches: Vec<(String, &str, &str, &keys::Mentions, f64)> = runs
        .iter()
        .flat_map(|run| {
            run.records.iter().flat_map(move |r| {
                r.fetches.iter().map(move |f| {
                    (
                        analysis::logical_class(&f.class, &run.prefix),
                        r.caller.as_str(),
                        f.item.as_str(),
                        &f.mentions,
                        r.at,
                    )
                })
            })
        })
        .collect();
    let invocations: Vec<esm::Invocation> =
        runs.iter().flat_map(|r| r.invocations.clone()).collect();
    let caches = analysis::cache_model(
        fetches
            .iter()
            .map(|(c, caller, item, m, at)| (c.as_str(), *caller, *item, *m, *at)),
        &invocations,
    );
    let target = args.target(batch);
    let limits = model::Limits::default();
    let mut phases = Vec::new();
    for run in &runs {
        for p in &run.phases {
            let (from, to) = p.window;
            let records: Vec<meter::Record> = run
                .records
                .iter()
                .filter(|r| r.at >= from && r.at < to)
                .cloned()
                .collect();
            let invocations: Vec<esm::Invocation> = run
                .invocations
                .iter()
                .filter(|i| i.at >= from && i.at < to)
                .cloned()
                .collect();
            let data = analysis::phase(
                analysis::PhaseSpec {
                    scenario: &run.name,
                    phase: &p.name,
                    burst: p.burst,
                    seconds: p.seconds,
                    posts: p.posts,
                    deliveries: p.deliveries.clone(),
                    events: p.events,
                    prefix: &run.prefix,
                },
                &records,
                &invocations,
                &run.ids,
                &caches,
            );
            let projection = model::project(
                &data,
                &run.population,
                &caches,
                &target,
                &limits,
                run.visibility_s,
            );
            phases.push((data, projection));
        }
    }
    let report = report::Report::new(report::Inputs {
        label: args.label.clone(),
        bin_dir: &bin_dir,
        settings: &settings,
        sizes: &sizes,
        target: &target,
        limits: &limits,
        runs: &runs,
        phases: &phases,
        caches: &caches,
        seconds: started.elapsed().as_secs_f64(),
    });
    let md = report.markdown();
    println!("\n{md}");
    std::fs::write(out.join("scale.md"), &md)?;
    std::fs::write(
        out.join("scale.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    eprintln!(
        "wrote {} and {}",
        out.join("scale.md").display(),
        out.join("scale.json").display()
    );
    Ok(())
}
