//! The projection: from what one phase measured to the rates at the target, against AWS's
//! limits, and the cost per million deliveries. A model, written down here and printed
//! with the numbers (`MODEL_TEXT`).
//!
//! **Per partition key.** A key's units per delivery of what it grows with (its group, see
//! [`super::keys`]) times that group's delivery rate at the target:
//! - one event: `min(R, N x B / d, F / d)`: a fan-out of F pairs is delivered as fast as N
//!   warm senders go (batches of B taking d seconds each), and no faster than all of its
//!   pairs at once;
//! - one endpoint, one tenant: the target's share for the scenario (the hot endpoint takes
//!   `--hot` of R; the others share the rest by the scenario's shape: 5,000 endpoints of
//!   one tenant, 10,000 endpoints over 100 tenants, ...);
//! - shared keys: R.
//!
//! Keys spread over many events (or endpoints, tenants) so scale down by their number: a
//! key of one event of the mixed scenario is one of R events a second.
//!
//! **Cached fetches** (found by [`super::analysis`], not assumed) do not grow with
//! deliveries: each of N warm instances fetches an item at most once per lifetime T. With
//! deliveries needing an item at rate r spread over N instances, an instance fetches it
//! once per `T + N / r` seconds (the lifetime, then the wait for its next use), so the
//! fetch rate is `r / (1 + r T / N)`: r when r T / N is small, N / T when large.
//!
//! **Phases under a burst** are projected at `min(burst, ESM max x B / d)`: what the event
//! source mapping's 1,000 concurrent batches can hand to the senders; the rest queues.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::analysis::{CacheModel, Level, PhaseData};
use super::keys::Group;

/// A key whose group had fewer pairs than this in the phase takes its units per delivery
/// from every key of its kind (same table and index, same kind of group, same rate at the
/// target): the scenario made those groups alike, and a handful of pairs is noise (a
/// tenant with 2 pairs and 3 health writes is not 1.5 writes a delivery).
pub const POOL_BELOW_PAIRS: f64 = 30.0;

/// What to project to. Defaults: the target.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// Steady deliveries per second (R).
    pub deliveries_per_s: f64,
    /// Burst deliveries per second.
    pub burst_per_s: f64,
    /// Length of the burst, seconds.
    pub burst_seconds: f64,
    /// Warm sender instances at the steady target (N).
    pub warm_senders: f64,
    /// Messages per sender batch (B, `eventSources.sender.batchSize`).
    pub batch: f64,
    /// Seconds a sender batch takes at scale (d: the slowest of its POSTs plus DynamoDB).
    pub batch_seconds: f64,
    /// Deliveries per second of the hot endpoint at the steady target.
    pub hot_per_s: f64,
    /// Lifetime taken for a cached class never fetched twice in the run, seconds.
    pub unseen_ttl_s: f64,
    /// Seconds a relay invocation takes at scale (for its Lambda duration).
    pub relay_seconds: f64,
}

impl Default for Target {
    fn default() -> Self {
        Self {
            deliveries_per_s: 10_000.0,
            burst_per_s: 100_000.0,
            burst_seconds: 60.0,
            warm_senders: 300.0,
            batch: 10.0,
            batch_seconds: 0.3,
            hot_per_s: 2_000.0,
            unseen_ttl_s: 900.0,
            relay_seconds: 0.2,
        }
    }
}

/// AWS's limits, each with its source (scale-facts.md's keys).
#[derive(Debug, Clone, Serialize)]
pub struct Limits {
    /// Write units per second per partition, tables and indexes (S1).
    pub partition_wcu: f64,
    /// Read units per second per partition (S1).
    pub partition_rcu: f64,
    /// Default on-demand table throughput quota, each of read and write units (S2).
    pub table_units: f64,
    /// Messages in flight per standard queue (S5).
    pub sqs_in_flight: f64,
    /// KMS symmetric requests per second, shared by the account and Region (S11).
    pub kms_per_s: f64,
    /// Secrets Manager `GetSecretValue` per second (S12).
    pub secrets_per_s: f64,
    /// Step Functions `StartExecution` refill per second (S10).
    pub sfn_starts_per_s: f64,
    /// Concurrent batches of one SQS event source mapping (S6, S7).
    pub esm_max_batches: f64,
    /// Batches an SQS event source mapping adds per minute (S6).
    pub esm_ramp_per_min: f64,
    /// Lambda concurrent executions per account, default (S8).
    pub account_concurrency: f64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            partition_wcu: 1_000.0,
            partition_rcu: 3_000.0,
            table_units: 40_000.0,
            sqs_in_flight: 120_000.0,
            kms_per_s: 10_000.0,
            secrets_per_s: 10_000.0,
            sfn_starts_per_s: 300.0,
            esm_max_batches: 1_000.0,
            esm_ramp_per_min: 300.0,
            account_concurrency: 1_000.0,
        }
    }
}

/// One endpoint of a scenario's shape.
#[derive(Debug, Clone, Serialize)]
pub struct Member {
    /// Endpoint id.
    pub endpoint: String,
    /// Its tenant.
    pub tenant: String,
    /// Its share of the target's deliveries (the shares sum to 1).
    pub weight: f64,
}

/// The shape a scenario stands for at the target: every endpoint and its share.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Population {
    /// Endpoints.
    pub members: Vec<Member>,
    #[serde(skip)]
    endpoint_weight: HashMap<String, f64>,
    #[serde(skip)]
    tenant_weight: HashMap<String, f64>,
    #[serde(skip)]
    by_tenant: HashMap<String, Vec<usize>>,
}

impl Population {
    /// Builds the indexes over `members`.
    pub fn new(members: Vec<Member>) -> Self {
        let mut p = Self {
            members,
            ..Self::default()
        };
        for (i, m) in p.members.iter().enumerate() {
            *p.endpoint_weight.entry(m.endpoint.clone()).or_default() += m.weight;
            *p.tenant_weight.entry(m.tenant.clone()).or_default() += m.weight;
            p.by_tenant.entry(m.tenant.clone()).or_default().push(i);
        }
        p
    }

    /// The share of an endpoint or a tenant (1 for shared, 0 for events: see
    /// [`Projection::group_rate`]).
    pub fn weight(&self, group: &Group) -> f64 {
        match group {
            Group::Endpoint(e) => self.endpoint_weight.get(e).copied().unwrap_or(0.0),
            Group::Tenant(t) => self.tenant_weight.get(t).copied().unwrap_or(0.0),
            Group::Shared => 1.0,
            Group::Event(_) => 0.0,
        }
    }

    /// The shares of the members of `level` under `group` (a tenant's endpoints, an
    /// endpoint's tenant, ...).
    pub fn member_weights(&self, group: &Group, level: Level) -> Vec<f64> {
        match (level, group) {
            (Level::Shared, _) => vec![1.0],
            (Level::Endpoint, Group::Endpoint(_)) => vec![self.weight(group)],
            (Level::Endpoint, Group::Tenant(t)) => self
                .by_tenant
                .get(t)
                .into_iter()
                .flatten()
                .map(|i| self.members[*i].weight)
                .collect(),
            (Level::Endpoint, Group::Shared) => self.members.iter().map(|m| m.weight).collect(),
            (Level::Tenant, Group::Endpoint(e)) => self
                .members
                .iter()
                .find(|m| &m.endpoint == e)
                .map(|m| vec![self.weight(&Group::Tenant(m.tenant.clone()))])
                .unwrap_or_default(),
            (Level::Tenant, Group::Tenant(_)) => vec![self.weight(group)],
            (Level::Tenant, Group::Shared) => self.tenant_weight.values().copied().collect(),
            _ => Vec::new(),
        }
    }
}

/// Fetches per second of an item needed at `rate` per second, kept `ttl_s` seconds by each
/// of `instances` warm instances: `rate / (1 + rate x ttl / instances)`.
pub fn cached_fetch_rate(rate: f64, ttl_s: f64, instances: f64) -> f64 {
    if rate <= 0.0 {
        return 0.0;
    }
    if ttl_s <= 0.0 || instances <= 0.0 {
        return rate;
    }
    rate / (1.0 + rate * ttl_s / instances)
}

/// One key at the target.
#[derive(Debug, Clone, Serialize)]
pub struct KeyAtTarget {
    /// Scenario and phase.
    pub scenario: String,
    /// Phase.
    pub phase: String,
    /// Table.
    pub table: String,
    /// Index, for an index partition.
    pub index: Option<String>,
    /// Partition key value.
    pub key: String,
    /// `one event`, `one endpoint`, ...
    pub grows_with: String,
    /// Pairs of that group in the phase.
    pub group_deliveries: f64,
    /// Its deliveries per second at the target.
    pub group_rate: f64,
    /// Write units per delivery of the group, measured.
    pub write_units_per_delivery: f64,
    /// Taken from every key of its kind (too few pairs of its own).
    pub pooled: bool,
    /// Write units per second at the target.
    pub wcu_per_s: f64,
    /// Read units per second at the target.
    pub rcu_per_s: f64,
    /// The larger of wcu/1,000 and rcu/3,000.
    pub share: f64,
}

/// A per-delivery figure, measured and at the target.
#[derive(Debug, Clone, Serialize)]
pub struct PerDelivery {
    /// `caller service:Operation`.
    pub op: String,
    /// Measured requests per pair published.
    pub measured: f64,
    /// At the target (cached fetches by the cache model; the rest as measured).
    pub at_target: f64,
}

/// A limit at the target.
#[derive(Debug, Clone, Serialize)]
pub struct LimitRow {
    /// What.
    pub what: String,
    /// Its rate or amount at the target.
    pub value: f64,
    /// The limit.
    pub limit: f64,
    /// value / limit.
    pub share: f64,
    /// Where the limit comes from, and what the figure assumes.
    pub note: String,
}

/// One phase at the target.
#[derive(Debug, Clone, Serialize)]
pub struct Projection {
    /// Scenario.
    pub scenario: String,
    /// Phase.
    pub phase: String,
    /// The rate it is projected at, deliveries per second.
    pub rate: f64,
    /// Keys, hottest first.
    pub keys: Vec<KeyAtTarget>,
    /// Requests per delivery.
    pub per_delivery: Vec<PerDelivery>,
    /// Write units per delivery at the target (Tern's tables).
    pub wru_per_delivery: f64,
    /// Read units per delivery at the target.
    pub rru_per_delivery: f64,
    /// Account and table limits.
    pub limits: Vec<LimitRow>,
    /// Requests per delivery at the target by service (`sqs`, `kms`, ...), all callers.
    pub by_service: BTreeMap<String, f64>,
    /// Sender invocations per delivery.
    pub sender_invocations_per_delivery: f64,
    /// Relay invocations per delivery.
    pub relay_invocations_per_delivery: f64,
    /// Outbox write units per event in the application's transaction.
    pub outbox_units_per_event: f64,
    /// Deliveries per event.
    pub fan_out: f64,
}

/// Projects one phase (see the module doc).
pub fn project(
    data: &PhaseData,
    population: &Population,
    caches: &CacheModel,
    target: &Target,
    limits: &Limits,
    visibility_s: f64,
) -> Projection {
    let sender_cap = target.warm_senders * target.batch / target.batch_seconds;
    let rate = if data.burst {
        target
            .burst_per_s
            .min(limits.esm_max_batches * target.batch / target.batch_seconds)
    } else {
        target.deliveries_per_s
    };
    let instances = if data.burst {
        limits.esm_max_batches
    } else {
        target.warm_senders
    };
    let total = data.deliveries.total.max(1.0);
    let group_rate = |g: &Group| match g {
        Group::Event(_) => {
            // Under a burst the mapping's cap is already in `rate`.
            let senders = if data.burst { rate } else { sender_cap };
            let fan_out = data.deliveries.of(g).max(1.0);
            rate.min(senders).min(fan_out / target.batch_seconds)
        }
        other => rate * population.weight(other),
    };
    let ttl = |class: &str| {
        caches
            .get(class)
            .map_or(0.0, |c| c.ttl_s.unwrap_or(target.unseen_ttl_s))
    };
    let level = |class: &str| caches.get(class).map_or(Level::Shared, |c| c.level);
    // Fetches per second at the target of `class` under `group`, and units per fetch.
    let cached_rate = |class: &str, group: &Group| -> f64 {
        let Some(usage) = data.cached.get(class) else {
            return 0.0;
        };
        let items_per_member = usage.items as f64 / usage.members.max(1) as f64;
        population
            .member_weights(group, level(class))
            .iter()
            .map(|w| items_per_member * cached_fetch_rate(rate * w, ttl(class), instances))
            .sum()
    };
    // Units per delivery of every kind of key, for keys with too few pairs of their own.
    let pool_of = |k: &super::analysis::KeyUse| {
        (
            k.table.clone(),
            k.index.clone(),
            k.group.label(),
            format!("{:.9e}", group_rate(&k.group)),
        )
    };
    let mut pools: HashMap<_, (f64, f64, f64)> = HashMap::new();
    for k in &data.keys {
        let e = pools.entry(pool_of(k)).or_default();
        e.0 += k.write_units;
        e.1 += k.read_units;
        e.2 += data.deliveries.of(&k.group).max(1.0);
    }
    let mut keys: Vec<KeyAtTarget> = data
        .keys
        .iter()
        .map(|k| {
            let own = data.deliveries.of(&k.group).max(1.0);
            let r = group_rate(&k.group);
            let pooled = own < POOL_BELOW_PAIRS;
            let (write_u, read_u) = match pools.get(&pool_of(k)) {
                Some((w, rd, d)) if pooled => (w / d, rd / d),
                _ => (k.write_units / own, k.read_units / own),
            };
            let mut rcu = read_u * r;
            for (class, (units, fetches)) in &k.cached {
                let per_fetch = if *fetches > 0.0 { units / fetches } else { 0.0 };
                rcu += per_fetch * cached_rate(class, &k.group);
            }
            let wcu = write_u * r;
            KeyAtTarget {
                scenario: data.scenario.clone(),
                phase: data.phase.clone(),
                table: k.table.clone(),
                index: k.index.clone(),
                key: k.key.clone(),
                grows_with: k.group.label().to_owned(),
                group_deliveries: own,
                group_rate: r,
                write_units_per_delivery: write_u,
                pooled,
                wcu_per_s: wcu,
                rcu_per_s: rcu,
                share: (wcu / limits.partition_wcu).max(rcu / limits.partition_rcu),
            }
        })
        .collect();
    keys.sort_by(|a, b| b.share.total_cmp(&a.share));

    // Per delivery: requests as measured, and cached classes by the cache model (shared
    // group: every member of the shape).
    let mut per_delivery: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for (op, n) in &data.ops {
        let e = per_delivery.entry(op.clone()).or_default();
        e.0 += n / total;
        e.1 += n / total;
    }
    let mut cached_units = 0.0;
    let mut cached_tables: BTreeMap<String, f64> = BTreeMap::new();
    for (class, usage) in &data.cached {
        let fetches = cached_rate(class, &Group::Shared);
        let e = per_delivery.entry(usage.op.clone()).or_default();
        e.0 += usage.fetches / total;
        e.1 += fetches / rate;
        if usage.fetches > 0.0 {
            let units = usage.units / usage.fetches * fetches;
            cached_units += units;
            if let Some((_, table)) = class.split_once(' ') {
                let table = table.split('/').next().unwrap_or(table);
                *cached_tables.entry(table.to_owned()).or_default() += units;
            }
        }
    }
    let per_delivery: Vec<PerDelivery> = per_delivery
        .into_iter()
        .map(|(op, (measured, at_target))| PerDelivery {
            op,
            measured,
            at_target,
        })
        .collect();
    let mut by_service: BTreeMap<String, f64> = BTreeMap::new();
    for p in &per_delivery {
        let service =
            p.op.split(' ')
                .nth(1)
                .and_then(|o| o.split(':').next())
                .unwrap_or("?");
        *by_service.entry(service.to_owned()).or_default() += p.at_target;
    }
    let write_units: f64 = data.keys.iter().map(|k| k.write_units).sum();
    let read_units: f64 = data.keys.iter().map(|k| k.read_units).sum();
    let wru_per_delivery = write_units / total;
    let rru_per_delivery = read_units / total + cached_units / rate;

    let mut limits_rows = Vec::new();
    let mut tables: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
    for k in &data.keys {
        let t = tables.entry(k.table.as_str()).or_default();
        t.0 += k.write_units / total * rate;
        t.1 += k.read_units / total * rate;
    }
    for (table, units) in &cached_tables {
        tables.entry(table.as_str()).or_default().1 += units;
    }
    for (table, (w, r)) in tables {
        limits_rows.push(LimitRow {
            what: format!("table `{table}`, write units/s"),
            value: w,
            limit: limits.table_units,
            share: w / limits.table_units,
            note: "default on-demand table quota (S2); adjustable".into(),
        });
        if r > 0.0 {
            limits_rows.push(LimitRow {
                what: format!("table `{table}`, read units/s"),
                value: r,
                limit: limits.table_units,
                share: r / limits.table_units,
                note: "default on-demand table quota (S2); adjustable".into(),
            });
        }
    }
    let batches = rate * target.batch_seconds / target.batch;
    let failed_per_delivery = data.sender_failed / total;
    let in_flight = batches * target.batch + failed_per_delivery * rate * visibility_s;
    limits_rows.push(LimitRow {
        what: "SQS messages in flight (delivery queue)".into(),
        value: in_flight,
        limit: limits.sqs_in_flight,
        share: in_flight / limits.sqs_in_flight,
        note: format!(
            "{batches:.0} batches of {} being handled, plus {:.4} failed messages per delivery \
             waiting out the {visibility_s:.0} s visibility timeout (S5)",
            target.batch, failed_per_delivery
        ),
    });
    let service_rate = |s: &str| by_service.get(s).copied().unwrap_or(0.0) * rate;
    for (service, limit, note) in [
        (
            "kms",
            limits.kms_per_s,
            "KMS symmetric requests, shared by the account and Region (S11); goal < 1 %",
        ),
        (
            "secretsmanager",
            limits.secrets_per_s,
            "Secrets Manager GetSecretValue (S12)",
        ),
        (
            "states",
            limits.sfn_starts_per_s,
            "Step Functions StartExecution refill (S10)",
        ),
    ] {
        let v = service_rate(service);
        limits_rows.push(LimitRow {
            what: format!("{service} requests/s"),
            value: v,
            limit,
            share: v / limit,
            note: note.into(),
        });
    }
    limits_rows.push(LimitRow {
        what: "sender batches in flight (concurrency)".into(),
        value: batches,
        limit: limits.esm_max_batches,
        share: batches / limits.esm_max_batches,
        note: format!(
            "rate x {} s / {}: one event source mapping runs at most 1,000 (S6, S7); \
             the account's default concurrency is {} (S8)",
            target.batch_seconds, target.batch, limits.account_concurrency
        ),
    });

    Projection {
        scenario: data.scenario.clone(),
        phase: data.phase.clone(),
        rate,
        keys,
        per_delivery,
        wru_per_delivery,
        rru_per_delivery,
        limits: limits_rows,
        by_service,
        sender_invocations_per_delivery: data.sender_invocations / total,
        relay_invocations_per_delivery: data.relay_invocations / total,
        outbox_units_per_event: if data.events > 0.0 {
            // Measured as a PutItem; the application writes it in its transaction (x2).
            2.0 * data.outbox_units / data.events
        } else {
            0.0
        },
        fan_out: total / data.events.max(1.0),
    }
}

/// Seconds until a burst's backlog is delivered: `burst` per second for `burst_s` over a
/// steady `rate`, senders starting at `rate x d / B` batches and adding `ramp_per_min`
/// a minute up to `max_batches` (the event source mapping's scaling, S6).
pub fn burst_drain_seconds(
    rate: f64,
    burst: f64,
    burst_s: f64,
    target: &Target,
    max_batches: f64,
    ramp_per_min: f64,
) -> f64 {
    let mut batches = rate * target.batch_seconds / target.batch;
    let mut backlog = 0.0;
    let mut t = 0.0;
    while t < 24.0 * 3600.0 {
        let arriving = if t < burst_s { burst } else { rate };
        if backlog > 0.0 || arriving > batches * target.batch / target.batch_seconds {
            batches = (batches + ramp_per_min / 60.0).min(max_batches);
        }
        let capacity = batches * target.batch / target.batch_seconds;
        backlog = (backlog + arriving - capacity).max(0.0);
        t += 1.0;
        if t >= burst_s && backlog <= 0.0 {
            return t - burst_s;
        }
    }
    f64::INFINITY
}

/// Prices: `crate::cost` (docs/cost.md) plus KMS, Secrets Manager, and the lines this
/// meter does not measure, from scale-facts.md section 2 at 10,000 deliveries/s.
pub mod prices {
    /// KMS, $ per request ($0.03 per 10,000; docs/cost.md).
    pub const KMS_REQUEST: f64 = 0.03 / 10_000.0;
    /// Secrets Manager, $ per API call ($0.05 per 10,000; docs/cost.md).
    pub const SECRETS_REQUEST: f64 = 0.05 / 10_000.0;
    /// Deliveries in scale-facts.md's month at 10,000/s.
    pub const FACTS_MONTH_DELIVERIES: f64 = 26.28e9;
    /// Lines not measured here, $ a month at 10,000/s (scale-facts.md section 2):
    /// CloudWatch Logs ingestion, attempts-table storage, Contributor Insights, egress.
    pub const UNMEASURED: [(&str, f64); 4] = [
        ("CloudWatch Logs ingestion (model)", 8_163.0),
        ("DynamoDB storage, 30 d TTL (model)", 4_244.0),
        ("Contributor Insights, 2 rules (model)", 527.0),
        ("data transfer out, 3.3 KB a delivery (model)", 6_871.0),
    ];
}

/// One line of the cost table, $ per million deliveries.
#[derive(Debug, Clone, Serialize)]
pub struct CostLine {
    /// What.
    pub line: String,
    /// On-demand DynamoDB.
    pub on_demand: f64,
    /// Provisioned DynamoDB at the auto-scaling target.
    pub provisioned: f64,
    /// Measured here (false: taken from the paper model).
    pub measured: bool,
}

/// Tern's cost per million deliveries at the target from a projection, and EventBridge
/// API destinations for the same deliveries.
pub fn cost(p: &Projection, target: &Target) -> (Vec<CostLine>, f64) {
    use crate::cost::*;
    let per_m = 1e6;
    let provisioned_per_unit = |hour_price: f64| hour_price / PROVISIONED_UTILISATION / 3600.0;
    let sqs = p.by_service.get("sqs").copied().unwrap_or(0.0);
    let kms = p.by_service.get("kms").copied().unwrap_or(0.0);
    let secrets = p.by_service.get("secretsmanager").copied().unwrap_or(0.0);
    let starts = p
        .per_delivery
        .iter()
        .filter(|d| d.op.ends_with("states:StartExecution"))
        .map(|d| d.at_target)
        .sum::<f64>();
    let sender_inv = p.sender_invocations_per_delivery;
    let relay_inv = p.relay_invocations_per_delivery;
    let line = |name: &str, on_demand: f64, provisioned: f64| CostLine {
        line: name.to_owned(),
        on_demand: on_demand * per_m,
        provisioned: provisioned * per_m,
        measured: true,
    };
    let mut lines = vec![
        line(
            "DynamoDB writes (Tern's tables)",
            p.wru_per_delivery * DDB_WRU,
            p.wru_per_delivery * provisioned_per_unit(DDB_WCU_HOUR),
        ),
        line(
            "DynamoDB reads",
            p.rru_per_delivery * DDB_RRU,
            p.rru_per_delivery * provisioned_per_unit(DDB_RCU_HOUR),
        ),
        line("SQS requests", sqs * SQS_REQUEST, sqs * SQS_REQUEST),
        line(
            "Lambda sender (requests, batches of d seconds at 256 MB)",
            sender_inv * (LAMBDA_REQUEST + MEMORY_GB * target.batch_seconds * LAMBDA_ARM_GB_S),
            sender_inv * (LAMBDA_REQUEST + MEMORY_GB * target.batch_seconds * LAMBDA_ARM_GB_S),
        ),
        line(
            "Lambda relay",
            relay_inv * (LAMBDA_REQUEST + MEMORY_GB * target.relay_seconds * LAMBDA_ARM_GB_S),
            relay_inv * (LAMBDA_REQUEST + MEMORY_GB * target.relay_seconds * LAMBDA_ARM_GB_S),
        ),
        line("KMS", kms * prices::KMS_REQUEST, kms * prices::KMS_REQUEST),
        line(
            "Secrets Manager",
            secrets * prices::SECRETS_REQUEST,
            secrets * prices::SECRETS_REQUEST,
        ),
        line(
            "Step Functions (long waits)",
            starts * SFN_TRANSITIONS_PER_WAIT * SFN_TRANSITION,
            starts * SFN_TRANSITIONS_PER_WAIT * SFN_TRANSITION,
        ),
    ];
    for (name, month) in prices::UNMEASURED {
        let per = month / prices::FACTS_MONTH_DELIVERIES;
        lines.push(CostLine {
            line: name.to_owned(),
            on_demand: per * per_m,
            provisioned: per * per_m,
            measured: false,
        });
    }
    let outbox = p.outbox_units_per_event / p.fan_out.max(1.0);
    lines.push(CostLine {
        line: "outbox write in the application's transaction (not Tern's bill)".into(),
        on_demand: outbox * DDB_WRU * per_m,
        provisioned: outbox * provisioned_per_unit(DDB_WCU_HOUR) * per_m,
        measured: true,
    });
    let eventbridge = (EVENTBRIDGE_EVENT / p.fan_out.max(1.0) + API_DESTINATION_INVOCATION) * per_m;
    (lines, eventbridge)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scale::analysis::{ClassCache, ClassUse, Deliveries, KeyUse};
    use crate::scale::keys::Basis;

    fn approx(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-6 * b.abs().max(1.0)
    }

    #[test]
    fn the_cache_formula_goes_from_every_use_to_one_fetch_per_lifetime() {
        assert_eq!(cached_fetch_rate(5.0, 0.0, 300.0), 5.0);
        // KMS: 10,000 endpoints at 1/s, 300 instances, 900 s: 0.25/s each.
        assert!(approx(cached_fetch_rate(1.0, 900.0, 300.0), 0.25));
        // A hot endpoint at 2,000/s, 30 s: close to 300 / 30.
        let hot = cached_fetch_rate(2000.0, 30.0, 300.0);
        assert!(hot < 10.0 && hot > 9.9, "{hot}");
        assert_eq!(cached_fetch_rate(0.0, 30.0, 300.0), 0.0);
    }

    fn key(table: &str, key: &str, group: Group, write: f64, read: f64) -> KeyUse {
        KeyUse {
            table: table.into(),
            index: None,
            key: key.into(),
            group,
            basis: Basis::NamedInKey,
            write_units: write,
            read_units: read,
            cached: BTreeMap::new(),
            requests: 1,
        }
    }

    fn fan_out_phase() -> (PhaseData, Population) {
        // One event to 5,000 endpoints of one tenant: 2 write units per pair on the event's
        // key, 1 per pair on each endpoint's log key.
        let mut deliveries = Deliveries::default();
        let mut members = Vec::new();
        let mut keys = vec![key(
            "attempts",
            "evt_1",
            Group::Event("evt_1".into()),
            10_000.0,
            0.0,
        )];
        for i in 0..5000 {
            let ep = format!("ep_{i}");
            deliveries.add("evt_1", &ep, "tnt_1", 1.0);
            members.push(Member {
                endpoint: ep.clone(),
                tenant: "tnt_1".into(),
                weight: 1.0 / 5000.0,
            });
            if i < 3 {
                keys.push(key(
                    "attempts",
                    &format!("log#{ep}"),
                    Group::Endpoint(ep),
                    1.0,
                    0.0,
                ));
            }
        }
        let data = PhaseData {
            scenario: "fan-out".into(),
            phase: "all".into(),
            burst: false,
            seconds: 100.0,
            posts: 5000,
            deliveries,
            events: 1.0,
            keys,
            ops: BTreeMap::from([("sender dynamodb:UpdateItem".to_owned(), 10_000.0)]),
            idle: BTreeMap::new(),
            cached: BTreeMap::new(),
            sqs_messages: BTreeMap::new(),
            sender_invocations: 500.0,
            sender_messages: 5000.0,
            sender_failed: 0.0,
            relay_invocations: 1.0,
            outbox_units: 2.0,
            refused: BTreeMap::new(),
        };
        (data, Population::new(members))
    }

    #[test]
    fn an_events_key_runs_at_the_senders_speed_and_spread_keys_at_their_share() {
        let (data, population) = fan_out_phase();
        let p = project(
            &data,
            &population,
            &CacheModel::new(),
            &Target::default(),
            &Limits::default(),
            360.0,
        );
        let event = p.keys.iter().find(|k| k.key == "evt_1").expect("event key");
        // 2 units per delivery x 10,000/s (300 x 10 / 0.3 s; 5,000 / 0.3 s is more).
        assert!(approx(event.group_rate, 10_000.0));
        assert!(approx(event.wcu_per_s, 20_000.0));
        assert!(approx(event.share, 20.0));
        let log = p
            .keys
            .iter()
            .find(|k| k.key == "log#ep_0")
            .expect("log key");
        assert!(approx(log.wcu_per_s, 2.0), "one of 5,000 endpoints: 2/s");
        assert_eq!(p.keys[0].key, "evt_1", "hottest first");
        assert!(approx(p.wru_per_delivery, (10_000.0 + 3.0) / 5000.0));
        assert!(approx(p.outbox_units_per_event, 4.0));
        assert!(approx(p.fan_out, 5000.0));
        // A one-pair event is one of many: 1 / 0.3 s.
        let mut small = data.clone();
        small.deliveries = Deliveries::default();
        small.deliveries.add("evt_1", "ep_0", "tnt_1", 1.0);
        small.keys = vec![key(
            "attempts",
            "evt_1",
            Group::Event("evt_1".into()),
            2.0,
            0.0,
        )];
        let p = project(
            &small,
            &population,
            &CacheModel::new(),
            &Target::default(),
            &Limits::default(),
            360.0,
        );
        assert!(approx(p.keys[0].wcu_per_s, 2.0 / 0.3));
    }

    #[test]
    fn keys_of_groups_with_few_pairs_take_the_units_of_their_kind() {
        let (mut data, population) = fan_out_phase();
        // Two endpoints' log keys: one with 1 pair and 3 units (noise), one with 99 pairs
        // and 99 units; pooled, the small one is 102 / 100 units a delivery.
        data.deliveries = Deliveries::default();
        data.deliveries.add("evt_1", "ep_0", "tnt_1", 1.0);
        data.deliveries.add("evt_2", "ep_1", "tnt_1", 99.0);
        data.keys = vec![
            key(
                "attempts",
                "log#ep_0",
                Group::Endpoint("ep_0".into()),
                3.0,
                0.0,
            ),
            key(
                "attempts",
                "log#ep_1",
                Group::Endpoint("ep_1".into()),
                99.0,
                0.0,
            ),
        ];
        let p = project(
            &data,
            &population,
            &CacheModel::new(),
            &Target::default(),
            &Limits::default(),
            360.0,
        );
        let small = p.keys.iter().find(|k| k.key == "log#ep_0").expect("small");
        assert!(small.pooled);
        assert!(approx(small.write_units_per_delivery, 102.0 / 100.0));
        let big = p.keys.iter().find(|k| k.key == "log#ep_1").expect("big");
        assert!(!big.pooled);
        assert!(approx(big.write_units_per_delivery, 1.0));
    }

    #[test]
    fn cached_reads_of_a_tenant_partition_sum_over_its_endpoints() {
        let (mut data, population) = fan_out_phase();
        let class = "dynamodb:GetItem endpoints".to_owned();
        let mut k = key(
            "endpoints",
            "tnt_1",
            Group::Tenant("tnt_1".into()),
            0.0,
            0.0,
        );
        k.cached.insert(class.clone(), (5000.0, 5000.0));
        data.keys = vec![k];
        data.cached.insert(
            class.clone(),
            ClassUse {
                fetches: 5000.0,
                units: 5000.0,
                items: 5000,
                members: 5000,
                op: "sender dynamodb:GetItem".into(),
            },
        );
        let caches = CacheModel::from([(
            class,
            ClassCache {
                level: Level::Endpoint,
                cached: true,
                ttl_s: Some(30.0),
                fetch_ratio: Some(0.05),
            },
        )]);
        let p = project(
            &data,
            &population,
            &caches,
            &Target::default(),
            &Limits::default(),
            360.0,
        );
        // 5,000 endpoints at 2/s each, 30 s, 300 instances: 2 / 1.2 each, 1 unit a fetch.
        assert!(
            approx(p.keys[0].rcu_per_s, 5000.0 * 2.0 / 1.2),
            "{}",
            p.keys[0].rcu_per_s
        );
        let row = p
            .per_delivery
            .iter()
            .find(|d| d.op == "sender dynamodb:GetItem")
            .expect("row");
        assert!(approx(row.measured, 1.0));
        assert!(approx(row.at_target, 5000.0 * 2.0 / 1.2 / 10_000.0));
    }

    #[test]
    fn failures_waiting_out_the_visibility_timeout_fill_the_queue() {
        let (mut data, population) = fan_out_phase();
        data.sender_failed = 50.0; // 1 % of 5,000
        let p = project(
            &data,
            &population,
            &CacheModel::new(),
            &Target::default(),
            &Limits::default(),
            360.0,
        );
        let row = p
            .limits
            .iter()
            .find(|l| l.what.starts_with("SQS"))
            .expect("sqs row");
        // 3,000 in batches + 100 failed/s x 360 s.
        assert!(approx(row.value, 3000.0 + 36_000.0), "{}", row.value);
    }

    #[test]
    fn a_burst_is_capped_by_the_mapping_and_drains_as_it_ramps() {
        let (mut data, population) = fan_out_phase();
        data.burst = true;
        let p = project(
            &data,
            &population,
            &CacheModel::new(),
            &Target::default(),
            &Limits::default(),
            360.0,
        );
        assert!(approx(p.rate, 1000.0 * 10.0 / 0.3));
        let t = Target::default();
        // 100,000/s for 60 s over 10,000/s: ramping 300 batches a minute from 300.
        let s = burst_drain_seconds(10_000.0, 100_000.0, 60.0, &t, 1000.0, 300.0);
        assert!(s > 60.0 && s < 3600.0, "{s}");
        assert_eq!(
            burst_drain_seconds(10_000.0, 10_000.0, 60.0, &t, 1000.0, 300.0),
            0.0
        );
    }

    #[test]
    fn cost_lines_follow_the_per_delivery_figures() {
        let (data, population) = fan_out_phase();
        let p = project(
            &data,
            &population,
            &CacheModel::new(),
            &Target::default(),
            &Limits::default(),
            360.0,
        );
        let (lines, eventbridge) = cost(&p, &Target::default());
        let writes = &lines[0];
        assert!(approx(writes.on_demand, p.wru_per_delivery * 0.625));
        // Fan-out 5,000: $1 per million events over 5,000 deliveries, plus $0.20.
        assert!(approx(eventbridge, 0.2 + 1.0 / 5000.0));
        assert!(lines.iter().any(|l| !l.measured));
    }
}
