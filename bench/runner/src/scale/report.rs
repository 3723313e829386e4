//! `scale.md` and `scale.json`: what ran, the hottest keys at the target, the limits, the
//! requests per delivery, the caches found, the cost per million, and the model.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use super::analysis::{CacheModel, PhaseData};
use super::model::{self, CostLine, KeyAtTarget, LimitRow, Limits, Projection, Target};
use super::scenarios::{ScenarioRun, Sizes};

/// Keys listed per phase in `scale.json`, and overall in `scale.md`.
const KEYS_LISTED: usize = 20;
/// A key over this share of its partition limit breaks the goal.
const GOAL_SHARE: f64 = 0.5;

/// The model, as printed with the numbers (docs/scale.md repeats it).
pub const MODEL_TEXT: &str = "\
- **Per key.** A partition key's capacity units per delivery of what it grows with, times \
that thing's deliveries per second at the target. What a key grows with is found from the \
traffic, not from the code: the most specific id of the scenario named in the key's value \
(an event, else an endpoint, else a tenant), else the id every request on the key named, \
else it is shared by all traffic. Rates at the target: one event `min(R, N x B / d, F / d)` \
(a fan-out of F pairs is delivered as fast as N warm senders with batches of B taking d \
seconds go, and not faster than all its pairs at once); one endpoint or one tenant, its \
share of R in the scenario's shape (the hot endpoint `--hot` of R; the fan-out's tenant all \
of R over its endpoints; the mixed scenario's endpoints and tenants an equal share); shared, \
R. Keys spread over many events, endpoints or tenants so scale down by their number. A key \
whose group had fewer than 30 pairs in the run takes the units per delivery of every key of its \
kind (pooled). Limits: 1,000 write and 3,000 read units a second per partition key, index partitions too \
(S1); the goal is every key under half.\n\
- **Caches.** Fetches that the functions cache are found in the run (an instance handed the \
same endpoint or tenant at least 5 times fetched its item for fewer than half of those \
invocations) with their lifetime T (the time those instances needed the item over their \
fetches after the first, reads that bypass the cache included; `--unseen-ttl` when no instance \
fetched it twice; gaps in the run's demand make T longer than the cache's own, which only \
matters for items in constant demand, at most N / T fetches a second each). At the target each of N instances fetches \
an item needed at r a second once per `T + N / r`: `r / (1 + r T / N)` a second. Every other \
request is projected per delivery as measured.\n\
- **Per delivery.** Requests and units per (event, endpoint) pair published in the phase; \
SQS receives and deletes are the event source mapping's, with the batches the run made \
(full in the fan-out, mixed and burst phases, where the queue was deep).\n\
- **Burst.** A burst phase is projected at `min(burst, 1,000 x B / d)`: one event source \
mapping runs at most 1,000 batches (S6, S7); the rest waits in the queue, and the drain \
time assumes the mapping adds 300 batches a minute from the steady N.\n\
- **In flight.** `R x d` messages in batches, plus each failed message (a batch item \
failure) waiting out the queue's visibility timeout, against about 120,000 per queue (S5).\n\
- **Cost.** Measured requests and units at the target times list prices (docs/cost.md); the \
sender's Lambda time is `d` a batch at 256 MB arm64, the relay's `0.2 s` an invocation; \
logs, storage, Contributor Insights and egress are not measured here and are taken from \
scale-facts.md section 2 (marked model). EventBridge API destinations for the same \
deliveries: $1.00 per million events over the fan-out, plus $0.20 per million invocations.\n\
- **Not modelled.** Split for heat and adaptive capacity (both capped at the per-partition \
limits, S1), the SDK's retries of throttled requests, cold starts, moto's own speed (20-40 \
deliveries a second here: times are not the point, counts are).";

/// What the report is made from.
pub struct Inputs<'a> {
    /// Name of the run.
    pub label: Option<String>,
    /// Where the binaries came from.
    pub bin_dir: &'a Path,
    /// The checkout's `infra/settings.json`.
    pub settings: &'a Value,
    /// Sizes run.
    pub sizes: &'a Sizes,
    /// Target.
    pub target: &'a Target,
    /// Limits.
    pub limits: &'a Limits,
    /// Scenario runs.
    pub runs: &'a [ScenarioRun],
    /// Digested phases and their projections.
    pub phases: &'a [(PhaseData, Projection)],
    /// The caches found.
    pub caches: &'a CacheModel,
    /// Wall time of the whole run, seconds.
    pub seconds: f64,
}

/// One phase in the report.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseReport {
    /// Scenario.
    pub scenario: String,
    /// Phase.
    pub phase: String,
    /// Events published.
    pub events: f64,
    /// Pairs published.
    pub pairs: f64,
    /// Receiver POSTs.
    pub posts: u64,
    /// Seconds.
    pub seconds: f64,
    /// Sender invocations.
    pub sender_invocations: f64,
    /// Mean messages per sender batch.
    pub mean_batch: f64,
    /// Messages the senders reported failed.
    pub sender_failed: f64,
    /// Relay invocations.
    pub relay_invocations: f64,
    /// Empty receives and stream reads.
    pub idle_polls: f64,
    /// Answers of 400 and over.
    pub refused: BTreeMap<String, u64>,
    /// Keys with more than half their limit at the target.
    pub keys_over_half: usize,
    /// The projection (keys cut to the hottest).
    pub projection: Projection,
}

/// A setting on the path to the target.
#[derive(Debug, Clone, Serialize)]
pub struct SettingRow {
    /// `infra/settings.json` path.
    pub setting: String,
    /// Its value in the measured checkout.
    pub value: String,
    /// What the target needs, and what the setting carries.
    pub at_target: String,
}

/// The whole report (also `scale.json`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// When.
    pub date: String,
    /// Label.
    pub label: Option<String>,
    /// Binaries measured.
    pub bin_dir: String,
    /// Wall time, seconds.
    pub seconds: f64,
    /// Sizes.
    pub sizes: Sizes,
    /// Target.
    pub target: Target,
    /// Limits.
    pub limits: Limits,
    /// Per scenario: set-up and traffic seconds, notes.
    pub scenarios: Vec<(String, f64, f64, Vec<String>)>,
    /// Phases.
    pub phases: Vec<PhaseReport>,
    /// The hottest keys over every phase.
    pub hottest: Vec<KeyAtTarget>,
    /// Caches found.
    pub caches: CacheModel,
    /// Phase the cost is computed for.
    pub cost_phase: Option<String>,
    /// Cost lines, $ per million deliveries.
    pub cost: Vec<CostLine>,
    /// EventBridge API destinations for the same deliveries, $ per million.
    pub eventbridge: f64,
    /// Seconds for a burst's backlog to be delivered, ramping the mapping.
    pub burst_drain_s: f64,
    /// Settings on the path.
    pub settings: Vec<SettingRow>,
    /// Requests per delivery: `op` -> phase -> (measured, at target).
    pub per_delivery: BTreeMap<String, BTreeMap<String, (f64, f64)>>,
    /// The model.
    pub model: String,
    /// Refusals that say the binaries do not fit this checkout's tables.
    pub mismatches: Vec<String>,
}

fn num(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let a = v.abs();
    if a >= 100.0 {
        group_thousands(v.round() as i64)
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 0.1 || a == 0.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

fn group_thousands(n: i64) -> String {
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

fn pct(v: f64) -> String {
    if v >= 0.1 {
        format!("{:.0} %", v * 100.0)
    } else {
        format!("{:.2} %", v * 100.0)
    }
}

fn phase_name(p: &Projection) -> String {
    format!("{}: {}", p.scenario, p.phase)
}

fn setting(v: &Value, path: &[&str]) -> Option<f64> {
    let mut at = v;
    for p in path {
        at = at.get(p)?;
    }
    at.as_f64()
}

impl Report {
    /// Builds the report.
    pub fn new(i: Inputs<'_>) -> Self {
        let mut phases = Vec::new();
        let mut all_keys: Vec<KeyAtTarget> = Vec::new();
        let mut per_delivery: BTreeMap<String, BTreeMap<String, (f64, f64)>> = BTreeMap::new();
        let mut mismatches = Vec::new();
        for (data, projection) in i.phases {
            let name = phase_name(projection);
            for d in &projection.per_delivery {
                per_delivery
                    .entry(d.op.clone())
                    .or_default()
                    .insert(name.clone(), (d.measured, d.at_target));
            }
            for (what, n) in &data.refused {
                if [
                    "ValidationException",
                    "ResourceNotFoundException",
                    "SerializationException",
                ]
                .iter()
                .any(|e| what.ends_with(e))
                {
                    mismatches.push(format!("{name}: {what} x {n}"));
                }
            }
            all_keys.extend(projection.keys.iter().take(KEYS_LISTED).cloned());
            let mut cut = projection.clone();
            let over = cut.keys.iter().filter(|k| k.share > GOAL_SHARE).count();
            cut.keys.truncate(KEYS_LISTED);
            phases.push(PhaseReport {
                scenario: data.scenario.clone(),
                phase: data.phase.clone(),
                events: data.events,
                pairs: data.deliveries.total,
                posts: data.posts,
                seconds: data.seconds,
                sender_invocations: data.sender_invocations,
                mean_batch: data.sender_messages / data.sender_invocations.max(1.0),
                sender_failed: data.sender_failed,
                relay_invocations: data.relay_invocations,
                idle_polls: data.idle.values().sum(),
                refused: data.refused.clone(),
                keys_over_half: over,
                projection: cut,
            });
        }
        all_keys.sort_by(|a, b| b.share.total_cmp(&a.share));
        all_keys.truncate(KEYS_LISTED);
        // The cost at the target: the mixed scenario (mixed batches, 10,000 endpoints) when
        // it ran, else the first steady phase.
        let reference = i
            .phases
            .iter()
            .find(|(d, _)| d.scenario == "mixed")
            .or_else(|| i.phases.iter().find(|(d, _)| !d.burst));
        let (cost, eventbridge) = reference
            .map(|(_, p)| model::cost(p, i.target))
            .unwrap_or_default();
        let burst_drain_s = model::burst_drain_seconds(
            i.target.deliveries_per_s,
            i.target.burst_per_s,
            i.target.burst_seconds,
            i.target,
            i.limits.esm_max_batches,
            i.limits.esm_ramp_per_min,
        );
        let settings = settings_rows(i.settings, i.target, reference.map(|(_, p)| p));
        Self {
            date: chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string(),
            label: i.label,
            bin_dir: i.bin_dir.display().to_string(),
            seconds: i.seconds,
            sizes: i.sizes.clone(),
            target: i.target.clone(),
            limits: i.limits.clone(),
            scenarios: i
                .runs
                .iter()
                .map(|r| (r.name.clone(), r.setup_s, r.run_s, r.notes.clone()))
                .collect(),
            phases,
            hottest: all_keys,
            caches: i.caches.clone(),
            cost_phase: reference.map(|(_, p)| phase_name(p)),
            cost,
            eventbridge,
            burst_drain_s,
            settings,
            per_delivery,
            model: MODEL_TEXT.to_owned(),
            mismatches,
        }
    }

    /// The report as markdown.
    pub fn markdown(&self) -> String {
        let t = &self.target;
        let mut s = String::from("# Tern scale meter (`make bench-scale`)\n\n");
        let _ = writeln!(
            s,
            "Run of {}{}; binaries from `{}`; {:.0} s in all. Target: **{} deliveries/s** \
             steady (R), bursts of {} /s for {} s, N = {} warm senders, batches of {} taking \
             d = {} s, the hot endpoint at {} /s. The model and its assumptions are at the end.\n",
            self.date,
            self.label
                .as_ref()
                .map_or_else(String::new, |l| format!(" ({l})")),
            self.bin_dir,
            self.seconds,
            num(t.deliveries_per_s),
            num(t.burst_per_s),
            num(t.burst_seconds),
            num(t.warm_senders),
            num(t.batch),
            t.batch_seconds,
            num(t.hot_per_s),
        );
        if !self.mismatches.is_empty() {
            let _ = writeln!(
                s,
                "**Warning: the binaries' requests did not fit the tables** (made by this \
                 checkout's local mode; see docs/scale.md, \"Another checkout\"): {}\n",
                self.mismatches.join("; ")
            );
        }
        s.push_str("## What ran (local mode on moto, the real relay and sender binaries)\n\n");
        s.push_str(
            "| scenario | phase | events | pairs | POSTs | seconds | sender batches (mean size) | failed messages | relay invocations | empty polls, stream reads | keys over 50 % |\n\
             | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        );
        for p in &self.phases {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {:.0} | {} ({:.1}) | {} | {} | {} | {} |",
                p.scenario,
                p.phase,
                num(p.events),
                num(p.pairs),
                num(p.posts as f64),
                p.seconds,
                num(p.sender_invocations),
                p.mean_batch,
                num(p.sender_failed),
                num(p.relay_invocations),
                num(p.idle_polls),
                p.keys_over_half
            );
        }
        for (name, setup, run, notes) in &self.scenarios {
            let _ = write!(s, "\n{name}: set-up {setup:.0} s, traffic {run:.0} s.");
            for n in notes {
                let _ = write!(s, " **{n}**");
            }
        }
        s.push_str(
            "\n\nAnswers of 400 and over (conditional refusals are how the ledger's claims work):",
        );
        for p in &self.phases {
            if p.refused.is_empty() {
                continue;
            }
            let list: Vec<String> = p
                .refused
                .iter()
                .map(|(w, n)| format!("{w} x {n}"))
                .collect();
            let _ = write!(s, "\n- {}: {}: {}", p.scenario, p.phase, list.join(", "));
        }
        s.push_str("\n\n## The hottest keys at the target\n\n");
        s.push_str(
            "Share: the larger of write units over 1,000/s and read units over 3,000/s (the \
             partition limit, S1). The goal: every key under 50 %. (pooled): the key's group had \
             fewer than 30 pairs in the run, so its units per delivery are those of every key of \
             its kind (same table, kind of group and rate).\n\n\
             | # | scenario: phase | table (index) | partition key | grows with | its pairs in the run | its rate at target (/s) | write units per its delivery | WCU/s | RCU/s | share |\n\
             | ---: | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        );
        for (n, k) in self.hottest.iter().enumerate() {
            let _ = writeln!(
                s,
                "| {} | {}: {} | {}{} | `{}` | {} | {} | {} | {} | {} | {} | **{}** |",
                n + 1,
                k.scenario,
                k.phase,
                k.table,
                k.index
                    .as_ref()
                    .map_or_else(String::new, |i| format!(" ({i})")),
                k.key,
                k.grows_with,
                if k.pooled {
                    format!("{} (pooled)", num(k.group_deliveries))
                } else {
                    num(k.group_deliveries)
                },
                num(k.group_rate),
                num(k.write_units_per_delivery),
                num(k.wcu_per_s),
                num(k.rcu_per_s),
                pct(k.share)
            );
        }
        s.push_str("\n## Limits at the target, per scenario\n\n");
        for p in &self.phases {
            let proj = &p.projection;
            let _ = writeln!(
                s,
                "**{}** (at {} deliveries/s; write units {} and read units {} per delivery):\n",
                phase_name(proj),
                num(proj.rate),
                num(proj.wru_per_delivery),
                num(proj.rru_per_delivery)
            );
            s.push_str("| limit | at target | limit | share | note |\n| --- | ---: | ---: | ---: | --- |\n");
            let mut rows: Vec<&LimitRow> = proj.limits.iter().collect();
            rows.sort_by(|a, b| b.share.total_cmp(&a.share));
            for r in rows {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} |",
                    r.what,
                    num(r.value),
                    num(r.limit),
                    pct(r.share),
                    r.note
                );
            }
            if let Some(k) = proj.keys.first() {
                let _ = writeln!(
                    s,
                    "| hottest key: {}{} `{}` ({}) | {} | {} | {} | units per second at the target |",
                    k.table,
                    k.index
                        .as_ref()
                        .map_or_else(String::new, |i| format!(" ({i})")),
                    k.key,
                    k.grows_with,
                    num(k.wcu_per_s.max(k.rcu_per_s)),
                    if k.wcu_per_s / 1000.0 >= k.rcu_per_s / 3000.0 {
                        "1,000"
                    } else {
                        "3,000"
                    },
                    pct(k.share)
                );
            }
            s.push('\n');
        }
        let _ = writeln!(
            s,
            "A burst of {} /s for {} s over the steady {} /s is delivered {:.1} minutes after \
             it ends, with the event source mapping adding 300 batches a minute up to 1,000 \
             (S6) and nothing else binding.\n",
            num(t.burst_per_s),
            num(t.burst_seconds),
            num(t.deliveries_per_s),
            self.burst_drain_s / 60.0
        );
        s.push_str("## Requests per delivery\n\n");
        s.push_str(
            "Per (event, endpoint) pair published. `relay` and `sender` are the functions' own \
             calls, `esm` the event source mappings' (stream reads, SQS receives and deletes). \
             Measured, and in brackets at the target where it differs (cached fetches, by the \
             cache model).\n\n",
        );
        let names: Vec<String> = self
            .phases
            .iter()
            .map(|p| phase_name(&p.projection))
            .collect();
        let _ = writeln!(s, "| caller operation | {} |", names.join(" | "));
        let _ = writeln!(s, "| --- |{}", " ---: |".repeat(names.len()));
        for (op, by_phase) in &self.per_delivery {
            let cells: Vec<String> = names
                .iter()
                .map(|n| match by_phase.get(n) {
                    Some((m, t)) if (m - t).abs() > 1e-9 * m.abs().max(1e-9) => {
                        format!("{} ({})", num(*m), num(*t))
                    }
                    Some((m, _)) => num(*m),
                    None => String::new(),
                })
                .collect();
            let _ = writeln!(s, "| {op} | {} |", cells.join(" | "));
        }
        s.push_str("\n## Caches found\n\n| fetch | per | cached | lifetime (s) | fetches per invocation carrying it again |\n| --- | --- | --- | ---: | ---: |\n");
        for (class, c) in &self.caches {
            let _ = writeln!(
                s,
                "| {class} | {:?} | {} | {} | {} |",
                c.level,
                if c.cached { "yes" } else { "no" },
                match (c.cached, c.ttl_s) {
                    (false, _) => "-".to_owned(),
                    (true, Some(t)) => format!("{t:.1}"),
                    (true, None) => format!("not re-fetched: {} assumed", num(t.unseen_ttl_s)),
                },
                c.fetch_ratio
                    .map_or_else(|| "-".to_owned(), |r| format!("{r:.3}"))
            );
        }
        if let Some(phase) = &self.cost_phase {
            let _ = writeln!(
                s,
                "\n## Cost per million deliveries at {} /s ({phase})\n",
                num(t.deliveries_per_s)
            );
            s.push_str("| line | on-demand | provisioned (70 %) |\n| --- | ---: | ---: |\n");
            let (mut od, mut pr, mut od_m, mut pr_m) = (0.0, 0.0, 0.0, 0.0);
            for l in &self.cost {
                let app = l.line.starts_with("outbox");
                let _ = writeln!(
                    s,
                    "| {}{} | ${:.3} | ${:.3} |",
                    l.line,
                    if l.measured { "" } else { " *" },
                    l.on_demand + 0.0,
                    l.provisioned + 0.0
                );
                if !app {
                    od += l.on_demand;
                    pr += l.provisioned;
                    if l.measured {
                        od_m += l.on_demand;
                        pr_m += l.provisioned;
                    }
                }
            }
            let _ = writeln!(
                s,
                "| **Tern, measured lines** | **${od_m:.2}** | **${pr_m:.2}** |\n\
                 | **Tern, with the modelled lines (*)** | **${od:.2}** | **${pr:.2}** |\n\
                 | EventBridge API destinations, same deliveries | ${:.2} | ${:.2} |\n",
                self.eventbridge, self.eventbridge
            );
            s.push_str(
                "(*) not measured by the meter: scale-facts.md section 2's model at 10,000/s. \
                 The outbox write is the application's, in its own transaction, and left out \
                 of Tern's totals.\n",
            );
        }
        s.push_str("\n## Settings on the path (the measured checkout's `infra/settings.json`)\n\n| setting | value | at the target |\n| --- | ---: | --- |\n");
        for r in &self.settings {
            let _ = writeln!(s, "| `{}` | {} | {} |", r.setting, r.value, r.at_target);
        }
        s.push_str("\n## The model and its assumptions\n\n");
        s.push_str(MODEL_TEXT);
        s.push('\n');
        s
    }
}

fn settings_rows(settings: &Value, t: &Target, reference: Option<&Projection>) -> Vec<SettingRow> {
    let mut rows = Vec::new();
    let batches = t.deliveries_per_s * t.batch_seconds / t.batch;
    if let Some(c) = setting(settings, &["eventSources", "sender", "maximumConcurrency"]) {
        rows.push(SettingRow {
            setting: "eventSources.sender.maximumConcurrency".into(),
            value: num(c),
            at_target: format!(
                "carries {} deliveries/s (x {} / {} s); the target needs {} batches at once \
                 (at most 1,000 per mapping, S7)",
                num(c * t.batch / t.batch_seconds),
                num(t.batch),
                t.batch_seconds,
                num(batches)
            ),
        });
    }
    if let Some(pf) = setting(
        settings,
        &["eventSources", "relay", "parallelizationFactor"],
    ) {
        rows.push(SettingRow {
            setting: "eventSources.relay.parallelizationFactor".into(),
            value: num(pf),
            at_target: "one relay invocation per stream shard at a time (up to 10, S4)".into(),
        });
    }
    if let Some(v) = setting(
        settings,
        &["queues", "delivery", "visibilityTimeoutSeconds"],
    ) {
        rows.push(SettingRow {
            setting: "queues.delivery.visibilityTimeoutSeconds".into(),
            value: num(v),
            at_target: format!(
                "a failed message stays in flight this long: {} failed messages/s fill the \
                 120,000 (S5)",
                num((120_000.0 - batches * t.batch) / v.max(1.0))
            ),
        });
    }
    if let Some(api) = setting(settings, &["api", "throttlingRateLimit"]) {
        let events = reference.map_or(t.deliveries_per_s, |p| {
            t.deliveries_per_s / p.fan_out.max(1.0)
        });
        rows.push(SettingRow {
            setting: "api.throttlingRateLimit".into(),
            value: num(api),
            at_target: format!(
                "publishes/s through the API; the target is {} events/s (one event a request)",
                num(events)
            ),
        });
    }
    if let (Some(p), Some(tables)) = (
        reference,
        settings
            .get("capacity")
            .and_then(|c| c.get("tables"))
            .and_then(Value::as_object),
    ) {
        let utilisation =
            setting(settings, &["capacity", "targetUtilizationPercent"]).unwrap_or(70.0) / 100.0;
        for (table, spec) in tables {
            let needed = p
                .limits
                .iter()
                .find(|l| l.what == format!("table `{table}`, write units/s"))
                .map(|l| l.value);
            if let (Some(max), Some(needed)) = (spec["write"]["max"].as_f64(), needed) {
                rows.push(SettingRow {
                    setting: format!("capacity.tables.{table}.write.max"),
                    value: num(max),
                    at_target: format!(
                        "provisioned mode: the target writes {} units/s, {} at {:.0} % utilisation",
                        num(needed),
                        num(needed / utilisation),
                        utilisation * 100.0
                    ),
                });
            }
        }
    }
    rows
}
