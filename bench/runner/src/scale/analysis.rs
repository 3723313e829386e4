//! From the recorded requests of one scenario phase to what the projection needs: capacity
//! units per partition key and what each key grows with, requests per operation, and which
//! fetches the functions cache (and for how long).
//!
//! **Caches are found, not assumed.** A fetch class (`dynamodb:GetItem <table>`,
//! `dynamodb:Query <table>`, `kms:Decrypt`, `secretsmanager:GetSecretValue`) is cached
//! when an instance that was handed the same endpoint (or tenant) again and again fetched
//! its item for fewer than half of those invocations: over every (instance, endpoint) pair
//! with at least [`MIN_DEMANDS`] invocations, fetches / invocations < 0.5. Its lifetime is
//! the time those pairs were in demand (first to last such invocation) over the fetches
//! after each pair's first: what an instance that needs an item all the time pays, reads
//! that bypass the cache included (the sender reads an endpoint afresh on some paths). A
//! cached class never fetched again is kept at least as long as the run, and the projection
//! takes the `--unseen-ttl` assumption for it. A class whose items name one event is
//! one-shot and never cached.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use super::esm::Invocation;
use super::keys::{Basis, Common, Group, Ids, Mentions, classify};
use super::meter::Record;
use super::units::Kind;

/// Invocations of one instance carrying one endpoint (or tenant) before its fetches say
/// whether the instance caches them.
pub const MIN_DEMANDS: u64 = 5;
/// Below this share of fetches per such invocation, a class is cached.
pub const CACHED_BELOW: f64 = 0.5;

/// What the items of a fetch class are per: the level its cache is kept at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Level {
    /// One item per event (never cached: each is needed once).
    Event,
    /// Items per endpoint (an endpoint's item, its data key).
    Endpoint,
    /// Items per tenant (a tenant's endpoint list).
    Tenant,
    /// One item for all (a shared secret).
    Shared,
}

/// Whether a fetch class is cached, and for how long.
#[derive(Debug, Clone, Serialize)]
pub struct ClassCache {
    /// The items' level.
    pub level: Level,
    /// Cached by the instances.
    pub cached: bool,
    /// Seconds between fetches of an item in constant demand (`None`: never re-fetched).
    pub ttl_s: Option<f64>,
    /// Fetches / invocations over the pairs with repeated demand (`None`: no such pair).
    pub fetch_ratio: Option<f64>,
}

/// The cache classes of a whole run (every scenario: the hot endpoint's repeated demand
/// shows what the spread scenarios cannot).
pub type CacheModel = BTreeMap<String, ClassCache>;

fn level_of(m: &Mentions) -> (Level, Option<String>) {
    match m.most_specific() {
        Some(Group::Event(e)) => (Level::Event, Some(e)),
        Some(Group::Endpoint(e)) => (Level::Endpoint, Some(e)),
        Some(Group::Tenant(t)) => (Level::Tenant, Some(t)),
        _ => (Level::Shared, None),
    }
}

fn demands(inv: &Invocation, level: Level, member: Option<&str>) -> bool {
    match (level, member) {
        (Level::Endpoint, Some(e)) => inv.mentions.endpoints.contains(e),
        (Level::Tenant, Some(t)) => inv.mentions.tenants.contains(t),
        (Level::Shared, _) => true,
        _ => false,
    }
}

/// One fetch as the cache analysis sees it: (class, instance, item, mentions, seconds).
pub type FetchSeen<'a> = (&'a str, &'a str, &'a str, &'a Mentions, f64);

/// Decides, per fetch class, whether the instances cache it (see the module doc).
pub fn cache_model<'a>(
    fetches: impl Iterator<Item = FetchSeen<'a>>,
    invocations: &[Invocation],
) -> CacheModel {
    struct Item {
        member: Option<String>,
        times: Vec<f64>,
    }
    #[derive(Default)]
    struct Seen<'a> {
        levels: BTreeMap<Level, u64>,
        items: HashMap<(&'a str, &'a str), Item>,
    }
    let mut classes: BTreeMap<&str, Seen> = BTreeMap::new();
    for (class, caller, item, mentions, at) in fetches {
        let seen = classes.entry(class).or_default();
        let (level, member) = level_of(mentions);
        *seen.levels.entry(level).or_default() += 1;
        seen.items
            .entry((caller, item))
            .or_insert(Item {
                member,
                times: Vec::new(),
            })
            .times
            .push(at);
    }
    let mut out = CacheModel::new();
    for (class, seen) in classes {
        let level = seen
            .levels
            .iter()
            .max_by_key(|(_, n)| **n)
            .map_or(Level::Shared, |(l, _)| *l);
        // Over the (instance, item) pairs whose member the instance was handed again and
        // again: fetches against invocations, and the time between fetches.
        let (mut fetched, mut demanded) = (0u64, 0u64);
        let (mut window, mut refetches) = (0.0, 0u64);
        if level != Level::Event {
            for ((caller, _), item) in &seen.items {
                let carrying: Vec<&Invocation> = invocations
                    .iter()
                    .filter(|i| i.caller == *caller && demands(i, level, item.member.as_deref()))
                    .collect();
                if (carrying.len() as u64) < MIN_DEMANDS {
                    continue;
                }
                let from = carrying
                    .iter()
                    .map(|i| i.started)
                    .fold(f64::INFINITY, f64::min);
                let to = carrying
                    .iter()
                    .map(|i| i.at)
                    .fold(f64::NEG_INFINITY, f64::max);
                let within = item
                    .times
                    .iter()
                    .filter(|t| **t >= from && **t <= to)
                    .count() as u64;
                fetched += within;
                demanded += carrying.len() as u64;
                window += to - from;
                refetches += within.saturating_sub(1);
            }
        }
        let fetch_ratio = (demanded > 0).then(|| fetched as f64 / demanded as f64);
        let cached = level != Level::Event && fetch_ratio.is_some_and(|r| r < CACHED_BELOW);
        out.insert(
            class.to_owned(),
            ClassCache {
                level,
                cached,
                ttl_s: (refetches > 0).then(|| window / refetches as f64),
                fetch_ratio,
            },
        );
    }
    out
}

/// Pairs delivered in a phase, by what they belong to.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Deliveries {
    /// All (event, endpoint) pairs published in the phase.
    pub total: f64,
    /// Per event.
    pub events: HashMap<String, f64>,
    /// Per endpoint.
    pub endpoints: HashMap<String, f64>,
    /// Per tenant.
    pub tenants: HashMap<String, f64>,
}

impl Deliveries {
    /// Adds `pairs` pairs of `event` to `endpoint` of `tenant`.
    pub fn add(&mut self, event: &str, endpoint: &str, tenant: &str, pairs: f64) {
        self.total += pairs;
        *self.events.entry(event.to_owned()).or_default() += pairs;
        *self.endpoints.entry(endpoint.to_owned()).or_default() += pairs;
        *self.tenants.entry(tenant.to_owned()).or_default() += pairs;
    }

    /// Pairs of `group` (all of them for [`Group::Shared`]).
    pub fn of(&self, group: &Group) -> f64 {
        match group {
            Group::Event(e) => self.events.get(e).copied().unwrap_or(0.0),
            Group::Endpoint(e) => self.endpoints.get(e).copied().unwrap_or(0.0),
            Group::Tenant(t) => self.tenants.get(t).copied().unwrap_or(0.0),
            Group::Shared => self.total,
        }
    }
}

/// A partition key's use in one phase.
#[derive(Debug, Clone, Serialize)]
pub struct KeyUse {
    /// Table (without the deployment's prefix).
    pub table: String,
    /// Index, when the key is an index partition.
    pub index: Option<String>,
    /// The partition key's value (`*` for a scan of the whole table).
    pub key: String,
    /// What it grows with.
    pub group: Group,
    /// How that was found.
    pub basis: Basis,
    /// Write units.
    pub write_units: f64,
    /// Read units of fetches that are not cached.
    pub read_units: f64,
    /// Read units and fetches of cached classes, by class.
    pub cached: BTreeMap<String, (f64, f64)>,
    /// Requests that charged it.
    pub requests: u64,
}

/// A cached class's use in one phase.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClassUse {
    /// Fetches.
    pub fetches: f64,
    /// Read units (DynamoDB), or 0.
    pub units: f64,
    /// Distinct items fetched.
    pub items: usize,
    /// Distinct members (endpoints, tenants) they belong to.
    pub members: usize,
    /// The operation (`kms:Decrypt`) and its caller kind, for the per-delivery table.
    pub op: String,
}

/// One phase, digested.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseData {
    /// Scenario.
    pub scenario: String,
    /// Phase.
    pub phase: String,
    /// Projected at the burst rate instead of the steady target.
    pub burst: bool,
    /// Length, seconds.
    pub seconds: f64,
    /// Receiver POSTs during it.
    pub posts: u64,
    /// Pairs published.
    pub deliveries: Deliveries,
    /// Events published.
    pub events: f64,
    /// Partition keys.
    pub keys: Vec<KeyUse>,
    /// Requests by `caller op` (`sender dynamodb:UpdateItem`), cached classes excluded.
    pub ops: BTreeMap<String, f64>,
    /// Polls that found nothing and stream reads, by `caller op` (left out of `ops`).
    pub idle: BTreeMap<String, f64>,
    /// Cached classes (fetches left out of `ops`).
    pub cached: BTreeMap<String, ClassUse>,
    /// SQS messages moved, by `caller op`.
    pub sqs_messages: BTreeMap<String, f64>,
    /// Sender invocations, messages given and reported failed (left for the visibility
    /// timeout).
    pub sender_invocations: f64,
    /// Messages given to the senders.
    pub sender_messages: f64,
    /// Messages the senders reported failed.
    pub sender_failed: f64,
    /// Relay invocations.
    pub relay_invocations: f64,
    /// Write units of the application's outbox writes (measured as `PutItem`).
    pub outbox_units: f64,
    /// Answers of 400 and over, by `caller op: error` (conditional refusals included).
    pub refused: BTreeMap<String, u64>,
}

/// `relay`, `sender`, `esm` or `app`, from a label.
pub fn caller_kind(label: &str) -> &str {
    label.split('-').next().unwrap_or(label)
}

/// The class name of a DynamoDB read by `op` of `table` at partition `key` (as the meter
/// names fetches: a key of one of Tern's own families is a class apart).
fn read_class(op: &str, table: &str, index: Option<&str>, key: Option<&str>) -> String {
    let class = match index {
        Some(i) if op == "dynamodb:Query" => format!("{op} {table}/{i}"),
        _ => format!("{op} {table}"),
    };
    match key.and_then(super::meter::key_family) {
        Some(family) if index.is_none() => format!("{class} {family}"),
        _ => class,
    }
}

/// What one phase needs besides its records.
pub struct PhaseSpec<'a> {
    /// Scenario name.
    pub scenario: &'a str,
    /// Phase name.
    pub phase: &'a str,
    /// Projected at the burst rate.
    pub burst: bool,
    /// Length, seconds.
    pub seconds: f64,
    /// Receiver POSTs.
    pub posts: u64,
    /// Pairs published.
    pub deliveries: Deliveries,
    /// Events published.
    pub events: f64,
    /// The deployment's resource name prefix.
    pub prefix: &'a str,
}

/// Digests one phase's records and invocations.
pub fn phase(
    spec: PhaseSpec<'_>,
    records: &[Record],
    invocations: &[Invocation],
    ids: &Ids,
    caches: &CacheModel,
) -> PhaseData {
    let logical = |name: &str| name.strip_prefix(spec.prefix).unwrap_or(name).to_owned();
    let is_cached = |class: &str| caches.get(class).is_some_and(|c| c.cached);
    struct Acc {
        use_: KeyUse,
        common: Common,
    }
    let mut keys: BTreeMap<(String, Option<String>, String), Acc> = BTreeMap::new();
    let mut ops: BTreeMap<String, f64> = BTreeMap::new();
    let mut cached: BTreeMap<String, ClassUse> = BTreeMap::new();
    let mut class_items: BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)> = BTreeMap::new();
    let mut sqs_messages: BTreeMap<String, f64> = BTreeMap::new();
    let mut refused: BTreeMap<String, u64> = BTreeMap::new();
    let mut outbox_units = 0.0;
    let mut idle: BTreeMap<String, f64> = BTreeMap::new();
    for r in records {
        let kind = caller_kind(&r.caller);
        let row = match (&r.resource, r.op.starts_with("dynamodb:")) {
            (Some(table), true) => format!("{kind} {} {}", r.op, logical(table)),
            _ => format!("{kind} {}", r.op),
        };
        if r.status >= 400 {
            let error = r.error.as_deref().unwrap_or("HTTP error");
            *refused.entry(format!("{row}: {error}")).or_default() += 1;
        }
        if kind == "app" {
            outbox_units += r
                .charges
                .iter()
                .filter(|c| c.kind == Kind::Write)
                .map(|c| c.units)
                .sum::<f64>();
            continue;
        }
        // Polling that found nothing, and the stream reads (free when Lambda reads): not
        // per delivery.
        if r.op.starts_with("streams:") || (r.op == "sqs:ReceiveMessage" && r.messages == 0) {
            *idle.entry(row).or_default() += 1.0;
            continue;
        }
        if r.messages > 0 {
            *sqs_messages.entry(row.clone()).or_default() += f64::from(r.messages);
        }
        // Cacheable fetches of a cached class are counted apart, per class.
        let mut counted_as_cached = false;
        for f in &r.fetches {
            let class = logical_class(&f.class, spec.prefix);
            if is_cached(&class) {
                counted_as_cached = true;
                let c = cached.entry(class.clone()).or_default();
                c.fetches += 1.0;
                c.op = row.clone();
                let (items, members) = class_items.entry(class).or_default();
                items.insert(f.item.clone());
                if let Some(g) = f.mentions.most_specific() {
                    members.insert(format!("{g:?}"));
                }
            }
        }
        // A query's later pages belong to its first page's class.
        if r.op == "dynamodb:Query" && r.fetches.is_empty() {
            let table = r.resource.as_deref().map(&logical).unwrap_or_default();
            let first = r.charges.first();
            let index = first.and_then(|c| c.index.as_deref());
            let key = first.and_then(|c| c.key.as_deref());
            counted_as_cached = is_cached(&read_class(&r.op, &table, index, key));
        }
        if !counted_as_cached {
            *ops.entry(row).or_default() += 1.0;
        }
        for c in &r.charges {
            let table = logical(&c.table);
            let key = c.key.clone().unwrap_or_else(|| "*".to_owned());
            let acc = keys
                .entry((table.clone(), c.index.clone(), key.clone()))
                .or_insert_with(|| Acc {
                    use_: KeyUse {
                        table: table.clone(),
                        index: c.index.clone(),
                        key,
                        group: Group::Shared,
                        basis: Basis::Nothing,
                        write_units: 0.0,
                        read_units: 0.0,
                        cached: BTreeMap::new(),
                        requests: 0,
                    },
                    common: Common::default(),
                });
            acc.use_.requests += 1;
            acc.common.add(&r.mentions);
            match c.kind {
                Kind::Write => acc.use_.write_units += c.units,
                Kind::Read => {
                    let class = read_class(&r.op, &table, c.index.as_deref(), c.key.as_deref());
                    if is_cached(&class) {
                        let fetches = if r.op == "dynamodb:Query" && r.fetches.is_empty() {
                            0.0
                        } else {
                            1.0
                        };
                        let e = acc.use_.cached.entry(class.clone()).or_default();
                        e.0 += c.units;
                        e.1 += fetches;
                        cached.entry(class).or_default().units += c.units;
                    } else {
                        acc.use_.read_units += c.units;
                    }
                }
            }
        }
    }
    for (class, (items, members)) in class_items {
        if let Some(c) = cached.get_mut(&class) {
            c.items = items.len();
            c.members = members.len().max(1);
        }
    }
    let keys = keys
        .into_values()
        .map(|mut acc| {
            let (group, basis) = classify(&ids.mentions(&acc.use_.key), &acc.common.get());
            acc.use_.group = group;
            acc.use_.basis = basis;
            acc.use_
        })
        .collect();
    let senders: Vec<&Invocation> = invocations
        .iter()
        .filter(|i| i.caller.starts_with("sender"))
        .collect();
    PhaseData {
        scenario: spec.scenario.to_owned(),
        phase: spec.phase.to_owned(),
        burst: spec.burst,
        seconds: spec.seconds,
        posts: spec.posts,
        deliveries: spec.deliveries,
        events: spec.events,
        keys,
        ops,
        idle,
        cached,
        sqs_messages,
        sender_invocations: senders.len() as f64,
        sender_messages: senders.iter().map(|i| i.items as f64).sum(),
        sender_failed: senders.iter().map(|i| i.failed as f64).sum(),
        relay_invocations: invocations.iter().filter(|i| i.caller == "relay").count() as f64,
        outbox_units,
        refused,
    }
}

/// A fetch class with the deployment's prefix taken off its table name.
pub fn logical_class(class: &str, prefix: &str) -> String {
    match class.split_once(' ') {
        Some((op, table)) => format!("{op} {}", table.strip_prefix(prefix).unwrap_or(table)),
        None => class.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scale::keys::IdKind;

    fn ids() -> Ids {
        let mut ids = Ids::default();
        for e in ["ep_1", "ep_2"] {
            ids.add(IdKind::Endpoint, e);
        }
        ids.add(IdKind::Tenant, "tnt_1");
        ids.add(IdKind::Event, "evt_1");
        ids
    }

    fn invocation(caller: &str, at: f64, text: &str) -> Invocation {
        Invocation {
            started: at,
            at: at + 1.0,
            caller: caller.into(),
            items: 10,
            failed: 0,
            mentions: ids().mentions(text),
        }
    }

    #[test]
    fn a_class_fetched_once_per_many_invocations_is_cached_with_the_shortest_refetch() {
        let ids = ids();
        let m = ids.mentions("tnt_1 ep_1");
        // 30 invocations of sender-0 carrying ep_1, each taking a second, every 3 s (0 to
        // 88 s); the endpoint item fetched at 0, 30.5 and 61 s.
        let invocations: Vec<Invocation> = (0..30)
            .map(|i| invocation("sender-0", f64::from(i) * 3.0, "evt_1 ep_1 tnt_1"))
            .collect();
        let fetches = [0.0, 30.5, 61.0].map(|t| ("get ep", "sender-0", "k1", &m, t));
        let model = cache_model(fetches.into_iter(), &invocations);
        let c = &model["get ep"];
        assert_eq!(c.level, Level::Endpoint);
        assert!(c.cached, "{c:?}");
        // 88 s of demand, two fetches after the first: one every 44 s.
        let ttl = c.ttl_s.expect("re-fetched");
        assert!((ttl - 44.0).abs() < 1e-9, "{ttl}");
        assert_eq!(c.fetch_ratio, Some(3.0 / 30.0));
        // Fetched once in all that time: cached, lifetime unknown (the run is too short).
        let once = [("kms", "sender-0", "blob", &m, 1.0)];
        let c = &cache_model(once.into_iter(), &invocations)["kms"];
        assert_eq!((c.cached, c.ttl_s), (true, None));
    }

    #[test]
    fn a_fetch_per_invocation_is_not_a_cache_and_event_items_never_are() {
        let ids = ids();
        let m = ids.mentions("tnt_1 ep_1");
        let invocations: Vec<Invocation> = (0..10)
            .map(|i| invocation("sender-0", f64::from(i), "ep_1 tnt_1"))
            .collect();
        let per_batch: Vec<FetchSeen> = (0..10)
            .map(|i| ("health", "sender-0", "k", &m, f64::from(i)))
            .collect();
        assert!(!cache_model(per_batch.into_iter(), &invocations)["health"].cached);
        let e = ids.mentions("evt_1 ep_1 tnt_1");
        let once = [("state", "sender-0", "s", &e, 1.0)];
        let c = &cache_model(once.into_iter(), &invocations)["state"];
        assert_eq!((c.level, c.cached), (Level::Event, false));
        // Too little repeated demand to tell: not cached (projected per delivery).
        let few = [invocation("sender-1", 0.0, "ep_2 tnt_1")];
        let m2 = ids.mentions("tnt_1 ep_2");
        let c = &cache_model([("x", "sender-1", "k", &m2, 0.0)].into_iter(), &few)["x"];
        assert_eq!((c.cached, c.fetch_ratio), (false, None));
    }

    #[test]
    fn a_phase_adds_units_per_key_and_classifies_them() {
        use crate::scale::units::Charge;
        let ids = ids();
        let record = |op: &str, key: &str, kind, units| Record {
            at: 1.0,
            caller: "sender-0".into(),
            op: op.into(),
            status: 200,
            error: None,
            resource: Some("p-attempts".into()),
            charges: vec![Charge {
                table: "p-attempts".into(),
                index: None,
                key: Some(key.into()),
                kind,
                units,
            }],
            messages: 0,
            fetches: vec![],
            mentions: ids.mentions("evt_1 ep_1 tnt_1"),
        };
        let records = vec![
            record("dynamodb:UpdateItem", "evt_1", Kind::Write, 1.0),
            record("dynamodb:UpdateItem", "evt_1", Kind::Write, 2.0),
            record("dynamodb:PutItem", "log#ep_1", Kind::Write, 1.0),
            record("dynamodb:GetItem", "tnt_1", Kind::Read, 0.5),
        ];
        let mut deliveries = Deliveries::default();
        deliveries.add("evt_1", "ep_1", "tnt_1", 1.0);
        let spec = PhaseSpec {
            scenario: "s",
            phase: "p",
            burst: false,
            seconds: 1.0,
            posts: 1,
            deliveries,
            events: 1.0,
            prefix: "p-",
        };
        let data = phase(spec, &records, &[], &ids, &CacheModel::new());
        let find = |k: &str| data.keys.iter().find(|u| u.key == k).expect(k);
        assert_eq!(find("evt_1").write_units, 3.0);
        assert_eq!(find("evt_1").table, "attempts");
        assert_eq!(find("evt_1").group, Group::Event("evt_1".into()));
        assert_eq!(find("log#ep_1").group, Group::Endpoint("ep_1".into()));
        assert_eq!(find("tnt_1").read_units, 0.5);
        assert_eq!(data.ops["sender dynamodb:UpdateItem attempts"], 2.0);
    }
}
