//! DynamoDB health records, one item per endpoint. Table key: [`HEALTH_KEY`] =
//! `<tenant id>#<endpoint id>` (partition, no sort key), so no two endpoints share a
//! partition key: a tenant whose fan-out writes one health item per endpoint per batch
//! (about one write per delivery, 9,990 a second at 10,000 deliveries a second) spreads
//! them over its endpoints' keys, where one partition key per tenant capped it at 1,000
//! (`DESIGN.md` §11). Every item also holds `tenant_id` and `endpoint_id`, the keys of
//! the KEYS_ONLY index [`TENANT_INDEX`], which lists a tenant's endpoints (`tern endpoints
//! health --tenant`, the API, the portal, the console): an index entry is written once
//! per endpoint, when its item is created, since no update changes those attributes. A
//! tenant's listing is one Query of the index, then the records by key (`BatchGetItem`,
//! 100 a call, eventually consistent: half a read unit per item under 4 KB); every
//! tenant's, one Scan of the table.
//!
//! The table before (key `tenant_id`, `endpoint_id`) cannot take this key: an upgrade
//! replaces it (CloudFormation creates a new table; the old one is retained, see
//! docs/operating.md "Upgrading"). Health is a rolling window: every endpoint starts
//! afresh, circuits closed, no pause, no pace, no 24-hour view; an endpoint the window
//! disabled stays disabled (that is the endpoints table's).
//!
//! Short attribute names, because they count towards the item's size and a write costs
//! one unit per KB (a busy endpoint's record, measured by `endpoint_health.rs`, stays under
//! 1 KB with a 30-character tenant id and a 200-byte error):
//!
//! | attribute | meaning |
//! | --- | --- |
//! | `w<n>` / `x<n>` | attempts / successes in window bucket `n` (starting at `n` × `bs` Unix seconds) |
//! | `h<n>` / `k<n>` | attempts / successes in 24 h-view bucket `n` (starting at `n` × 10,800 s) |
//! | `bs` | window bucket size, seconds |
//! | `cf` | consecutive failed attempts |
//! | `ls` | last success, Unix milliseconds |
//! | `lf_at`, `lf_st`, `lf_cl`, `lf_er`, `lf_x` | last failure: time (ms), status, error class, text, response excerpt |
//! | `fs` | failing since: start of the first failed attempt after the last success (ms) |
//! | `op`, `np` | circuit opened at, next probe at (ms); absent while closed |
//! | `dg`, `da` | `endpoint.degraded` reported at, auto-disabled at (ms) |
//! | `bl` | below the disable threshold since (ms); absent when not below |
//! | `pu`, `pn` | paused until (ms), pauses in a row (backpressure) |
//! | `pe`, `pa` | an operational event not yet published (JSON), its next publish attempt (ms) |
//! | `ua` | last write (ms) |
//! | `rt` | rate limit: end of the last slot given out (theoretical arrival time), Unix microseconds |
//! | `pr`, `pc`, `ps` | the learnt pace (requests per second, `tern_core::pacing`), when it last changed (ms), whether it is in slow start; absent while unpaced |
//! | `s<n>` | successes in Unix second `n`, kept for the last ten seconds (`tern_core::health::RECENT_SECONDS`, the pace's estimate) |
//! | `t_op`, `t_pb`, `t_cl`, `t_dg`, `t_rc`, `t_da` | token of the last open, probe claim, close, degrade, recover, disable (8 bytes) |
//! | `t_rl` | token of the last rate-limit write (8 bytes) |
//! | `t_pc` | token of the last pace change (8 bytes) |
//!
//! Counters are added with `ADD`, so concurrent sender batches never lose a count; each
//! write removes the buckets the writer last saw that have left the window.
//!
//! The conditional changes ([`HealthStore::apply`]) are safe to retry. The SDK sends a
//! write again when a try's answer is late (`crate::budget`), although the first try may
//! have been applied; the retry then fails its condition (the change is made) and would
//! read as "another sender made it", so nobody would act on it: no `endpoint.disabled`,
//! no registry disable, a probe slot lost. So each change writes a token of its own call
//! into an attribute of its kind, and a refused retry that finds its token there (the item
//! as it is, `ALL_OLD`) knows the change is its own. One attribute per kind: a different
//! change landing in between (another sender's) does not hide ours.
//!
//! The rate limit's slots ([`HealthStore::reserve_slots`]) follow the same pattern: the
//! write leaves its token in `t_rl` and its condition refuses a write whose token is
//! already there, so a retry of an applied write is refused and finds its token: the
//! slots are its own, and they are the last ones given out (`rt` minus the batch's span).
//! When another batch's write lands between the try and its retry, the retry takes slots
//! a second time: those of the first try go unused. The limit then sends less, never
//! more.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use chrono::{DateTime, Utc};
use tern_core::health::{
    Bucket, EndpointHealth, HealthChange, HealthDelta, HealthStore, LONG_BUCKET_SECONDS,
    LastFailure, PendingReport, bucket_start,
};
use tern_core::ports::PortError;
use tern_core::rate_limit::{SlotAnswer, SlotRequest};
use tern_core::{EndpointId, ErrorClass, TenantId};

use crate::error::port_error;

/// Health records in a DynamoDB table.
#[derive(Clone, Debug)]
pub struct DynamoHealthStore {
    client: Client,
    table: String,
}

impl DynamoHealthStore {
    /// The records in `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }
}

/// The table's partition key attribute (`infra/settings.json` `tables.health.partitionKey`):
/// `<tenant id>#<endpoint id>`.
pub const HEALTH_KEY: &str = "endpoint_key";

/// The KEYS_ONLY index of a tenant's records (`tables.health.tenantIndex`): partition
/// key `tenant_id`, sort key `endpoint_id`.
pub const TENANT_INDEX: &str = "tenant";

/// Keys per `BatchGetItem`: 100 (its limit, DynamoDB API reference).
const BATCH_GET_KEYS: usize = 100;

/// Tries of a `BatchGetItem` whose keys come back unprocessed (throttled): 5.
const BATCH_GET_TRIES: u32 = 5;

/// The item's key.
fn key(tenant: &TenantId, endpoint: &EndpointId) -> HashMap<String, AttributeValue> {
    HashMap::from([(
        HEALTH_KEY.to_owned(),
        AttributeValue::S(tern_core::waiting::endpoint_key(tenant, endpoint)),
    )])
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn ms(t: DateTime<Utc>) -> AttributeValue {
    n(t.timestamp_millis())
}

fn num(item: &HashMap<String, AttributeValue>, key: &str) -> Option<i64> {
    item.get(key)?.as_n().ok()?.parse().ok()
}

fn time(item: &HashMap<String, AttributeValue>, key: &str) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(num(item, key)?)
}

/// `t` in Unix microseconds: the rate limit's slots are as close as 1 ms apart.
fn micros(t: DateTime<Utc>) -> AttributeValue {
    n(t.timestamp_micros())
}

fn time_micros(item: &HashMap<String, AttributeValue>, key: &str) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_micros(num(item, key)?)
}

/// Buckets stored as `<attempts><n>` / `<successes><n>` with `n` = start / `size`: an
/// index is shorter than a Unix time, and names count towards the item's size.
fn buckets(
    item: &HashMap<String, AttributeValue>,
    attempts: char,
    successes: char,
    size: u64,
) -> Vec<Bucket> {
    let size = i64::try_from(size.max(1)).unwrap_or(i64::MAX);
    let mut out: Vec<Bucket> = item
        .iter()
        .filter_map(|(k, v)| {
            let index: i64 = k.strip_prefix(attempts)?.parse().ok()?;
            let count: u64 = v.as_n().ok()?.parse().ok()?;
            Some(Bucket {
                start: index.checked_mul(size)?,
                attempts: count,
                successes: num(item, &format!("{successes}{index}"))
                    .and_then(|s| u64::try_from(s).ok())
                    .unwrap_or(0),
            })
        })
        .collect();
    out.sort_by_key(|b| b.start);
    out
}

/// Reads an item. Unknown or unreadable attributes are ignored: health is advisory, and
/// a record that cannot be read whole must not stop deliveries.
fn from_item(item: &HashMap<String, AttributeValue>) -> Result<EndpointHealth, PortError> {
    let text = |key: &str| item.get(key).and_then(|v| v.as_s().ok()).cloned();
    // The key says whose record it is; the two attributes repeat it for the index.
    let (tenant, endpoint) = text(HEALTH_KEY)
        .as_deref()
        .and_then(tern_core::waiting::parse_endpoint_key)
        .ok_or_else(|| PortError::Rejected(format!("health item without a valid {HEALTH_KEY}")))?;
    let last_failure = time(item, "lf_at").map(|at| LastFailure {
        at,
        status: num(item, "lf_st").and_then(|s| u16::try_from(s).ok()),
        error_class: text("lf_cl")
            .and_then(|c| serde_json::from_value::<ErrorClass>(serde_json::Value::String(c)).ok()),
        error: text("lf_er"),
        excerpt: text("lf_x"),
    });
    let bucket_seconds = num(item, "bs")
        .and_then(|s| u64::try_from(s).ok())
        .filter(|s| *s > 0)
        .unwrap_or(600);
    Ok(EndpointHealth {
        tenant_id: tenant,
        endpoint_id: endpoint,
        bucket_seconds,
        buckets: buckets(item, 'w', 'x', bucket_seconds),
        hourly: buckets(item, 'h', 'k', LONG_BUCKET_SECONDS),
        consecutive_failures: num(item, "cf")
            .and_then(|s| u64::try_from(s).ok())
            .unwrap_or(0),
        last_success_at: time(item, "ls"),
        last_failure,
        failing_since: time(item, "fs"),
        opened_at: time(item, "op"),
        next_probe_at: time(item, "np"),
        closed_at: time(item, "cl"),
        degraded_at: time(item, "dg"),
        disabled_at: time(item, "da"),
        below_since: time(item, "bl"),
        paused_until: time(item, "pu"),
        pauses: num(item, "pn")
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
        pending_report: text("pe").map(|event| PendingReport {
            event,
            retry_at: time(item, "pa").unwrap_or(DateTime::<Utc>::MIN_UTC),
        }),
        rate_tat: time_micros(item, "rt"),
        pace: match (
            num(item, "pr").and_then(|r| u32::try_from(r).ok()),
            time(item, "pc"),
        ) {
            (Some(per_second), Some(changed_at)) => Some(tern_core::pacing::Pace {
                per_second,
                changed_at,
                slow_start: item.get("ps").and_then(|v| v.as_bool().ok()) == Some(&true),
            }),
            _ => None,
        },
        recent_successes: item
            .iter()
            .filter_map(|(k, v)| {
                let second: i64 = k.strip_prefix('s')?.parse().ok()?;
                Some((second, v.as_n().ok()?.parse().ok()?))
            })
            .collect(),
    })
}

/// A token for one [`HealthStore::apply`] call: the random 8 bytes of a UUID v7 (62 random
/// bits), enough to tell concurrent senders' writes of one item apart.
fn change_token() -> AttributeValue {
    AttributeValue::B(aws_sdk_dynamodb::primitives::Blob::new(
        uuid::Uuid::now_v7().as_bytes()[8..].to_vec(),
    ))
}

/// An update expression under construction: clauses and values.
#[derive(Default)]
struct Update {
    set: Vec<String>,
    add: Vec<String>,
    remove: Vec<String>,
    values: Vec<(String, AttributeValue)>,
}

impl Update {
    /// The update of `tenant`'s `endpoint`'s record: every write sets the two attributes
    /// the tenant index is keyed by (the same values each time: the index is written when
    /// the item is created, never again), whichever write creates the item.
    fn of(tenant: &TenantId, endpoint: &EndpointId) -> Self {
        let mut u = Self::default();
        u.set("tenant_id", AttributeValue::S(tenant.to_string()));
        u.set("endpoint_id", AttributeValue::S(endpoint.to_string()));
        u
    }
    fn value(&mut self, v: AttributeValue) -> String {
        let name = format!(":v{}", self.values.len());
        self.values.push((name.clone(), v));
        name
    }
    fn set(&mut self, attr: &str, v: AttributeValue) {
        let p = self.value(v);
        self.set.push(format!("{attr} = {p}"));
    }
    fn add(&mut self, attr: &str, v: AttributeValue) {
        let p = self.value(v);
        self.add.push(format!("{attr} {p}"));
    }
    /// Sets `attr` to `v` unless the item already has it (a newer write won).
    fn keep(&mut self, attr: &str, v: AttributeValue) {
        let p = self.value(v);
        self.set
            .push(format!("{attr} = if_not_exists({attr}, {p})"));
    }
    /// Writes `report` as the record's pending operational event.
    fn report(&mut self, report: &PendingReport) {
        self.set("pe", AttributeValue::S(report.event.clone()));
        self.set("pa", ms(report.retry_at));
    }
    fn expression(&self) -> String {
        let mut parts = Vec::new();
        if !self.set.is_empty() {
            parts.push(format!("SET {}", self.set.join(", ")));
        }
        if !self.add.is_empty() {
            parts.push(format!("ADD {}", self.add.join(", ")));
        }
        if !self.remove.is_empty() {
            parts.push(format!("REMOVE {}", self.remove.join(", ")));
        }
        parts.join(" ")
    }
}

#[async_trait]
impl HealthStore for DynamoHealthStore {
    async fn get(
        &self,
        tenant: &TenantId,
        endpoint: &EndpointId,
    ) -> Result<Option<EndpointHealth>, PortError> {
        // Eventually consistent (half a read unit): the circuit's decisions are made by
        // conditional writes, not by this read.
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(tenant, endpoint)))
            .send()
            .await
            .map_err(port_error)?;
        out.item.as_ref().map(from_item).transpose()
    }

    async fn list(&self, tenant: Option<&TenantId>) -> Result<Vec<EndpointHealth>, PortError> {
        let mut records = Vec::new();
        let items = match tenant {
            Some(t) => self.tenant_items(t).await?,
            None => {
                let mut items = Vec::new();
                let mut start = None;
                loop {
                    let out = self
                        .client
                        .scan()
                        .table_name(&self.table)
                        .set_exclusive_start_key(start)
                        .send()
                        .await
                        .map_err(port_error)?;
                    items.extend(out.items.unwrap_or_default());
                    match out.last_evaluated_key {
                        Some(k) if !k.is_empty() => start = Some(k),
                        _ => break,
                    }
                }
                items
            }
        };
        for item in &items {
            match from_item(item) {
                Ok(r) => records.push(r),
                Err(e) => tracing::warn!(error = %e, "health item skipped"),
            }
        }
        records.sort_by(|a, b| (&a.tenant_id, &a.endpoint_id).cmp(&(&b.tenant_id, &b.endpoint_id)));
        Ok(records)
    }

    async fn record(
        &self,
        tenant: &TenantId,
        endpoint: &EndpointId,
        delta: &HealthDelta,
        bucket_seconds: u64,
        previous: Option<&EndpointHealth>,
    ) -> Result<EndpointHealth, PortError> {
        let mut u = Update::of(tenant, endpoint);
        let size = i64::try_from(bucket_seconds.max(1)).unwrap_or(i64::MAX);
        let long = i64::try_from(LONG_BUCKET_SECONDS).unwrap_or(i64::MAX);
        let window = bucket_start(delta.at, bucket_seconds) / size;
        let hour = bucket_start(delta.at, LONG_BUCKET_SECONDS) / long;
        u.add(&format!("w{window}"), n(delta.attempts));
        u.add(&format!("h{hour}"), n(delta.attempts));
        // Each success in the second its request was sent (the pace's estimate reads
        // them at a push-back's send time), the ones too old to keep left out.
        let oldest = delta.at.timestamp() - tern_core::health::RECENT_SECONDS + 1;
        let seconds: Vec<(i64, u64)> = delta
            .success_seconds
            .iter()
            .copied()
            .filter(|(s, _)| *s >= oldest)
            .collect();
        if delta.successes > 0 {
            u.add(&format!("x{window}"), n(delta.successes));
            u.add(&format!("k{hour}"), n(delta.successes));
        }
        for (second, count) in &seconds {
            u.add(&format!("s{second}"), n(*count));
        }
        u.set("bs", n(bucket_seconds));
        u.set("ua", ms(Utc::now()));
        if delta.any_success() {
            u.set("cf", n(delta.trailing_failures));
        } else {
            u.add("cf", n(delta.trailing_failures));
        }
        if let Some(t) = delta.last_success_at {
            u.set("ls", ms(t));
        }
        // Failing since: a success ends the run (the failures after it, if any, start a
        // new one); without a success the run goes on from where it began.
        match (delta.any_success(), delta.failing_since) {
            (true, Some(t)) => u.set("fs", ms(t)),
            (true, None) => u.remove.push("fs".into()),
            (false, Some(t)) => {
                let p = u.value(ms(t));
                u.set.push(format!("fs = if_not_exists(fs, {p})"));
            }
            (false, None) => {}
        }
        if let Some(f) = &delta.last_failure {
            u.set("lf_at", ms(f.at));
            match f.status {
                Some(s) => u.set("lf_st", n(s)),
                None => u.remove.push("lf_st".into()),
            }
            match f.error_class {
                Some(c) => u.set("lf_cl", AttributeValue::S(c.to_string())),
                None => u.remove.push("lf_cl".into()),
            }
            match &f.error {
                Some(e) => u.set("lf_er", AttributeValue::S(e.clone())),
                None => u.remove.push("lf_er".into()),
            }
            match &f.excerpt {
                Some(x) => u.set("lf_x", AttributeValue::S(x.clone())),
                None => u.remove.push("lf_x".into()),
            }
        }
        if let Some(p) = previous {
            for old in p
                .expired_seconds(delta.at)
                .into_iter()
                .filter(|s| !seconds.iter().any(|(added, _)| added == s))
            {
                u.remove.push(format!("s{old}"));
            }
            let (old, old_long) = p.expired(delta.at);
            let old_size = i64::try_from(p.bucket_seconds.max(1)).unwrap_or(i64::MAX);
            for (starts, size, current, names) in [
                (old, old_size, window, ('w', 'x')),
                (old_long, long, hour, ('h', 'k')),
            ] {
                for index in starts
                    .into_iter()
                    .map(|s| s / size)
                    .filter(|i| *i != current)
                {
                    u.remove.push(format!("{}{index}", names.0));
                    u.remove.push(format!("{}{index}", names.1));
                }
            }
        }
        let mut request = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(tenant, endpoint)))
            .update_expression(u.expression())
            .return_values(ReturnValue::AllNew);
        for (name, value) in u.values {
            request = request.expression_attribute_values(name, value);
        }
        let out = request.send().await.map_err(port_error)?;
        from_item(&out.attributes.unwrap_or_default())
    }

    async fn apply(
        &self,
        tenant: &TenantId,
        endpoint: &EndpointId,
        change: &HealthChange,
        now: DateTime<Utc>,
    ) -> Result<bool, PortError> {
        let mut u = Update::of(tenant, endpoint);
        // Where this kind of change leaves its call's token (see the module doc). Not
        // two letters: `to` is a DynamoDB reserved word.
        let token_attribute = match change {
            HealthChange::Open { .. } => "t_op",
            HealthChange::ClaimProbe { .. } => "t_pb",
            HealthChange::Close { .. } => "t_cl",
            HealthChange::Degrade { .. } => "t_dg",
            HealthChange::Recover { .. } => "t_rc",
            HealthChange::Disable { .. } => "t_da",
            HealthChange::Pause { .. } => "t_pa",
            HealthChange::MarkBelow => "t_bl",
            HealthChange::ClearBelow => "t_cb",
            HealthChange::DeferReport { .. } => "t_dr",
            HealthChange::Reported { .. } => "t_rp",
            HealthChange::SetPace { .. } => "t_pc",
        };
        let token = change_token();
        u.set(token_attribute, token.clone());
        // Reports stop once the record disabled the endpoint: its owner's last news is
        // `endpoint.disabled`, never a `degraded` or `recovered` decided beside it.
        let condition = match change {
            HealthChange::Open { next_probe_at } => {
                u.set("op", ms(now));
                u.set("np", ms(*next_probe_at));
                "attribute_exists(tenant_id) AND attribute_not_exists(op)".to_owned()
            }
            HealthChange::ClaimProbe {
                seen,
                next_probe_at,
            } => {
                u.set("np", ms(*next_probe_at));
                match seen {
                    Some(t) => {
                        let p = u.value(ms(*t));
                        format!("attribute_exists(op) AND np = {p}")
                    }
                    None => "attribute_exists(op) AND attribute_not_exists(np)".to_owned(),
                }
            }
            HealthChange::Close { report } => {
                u.remove.push("op".into());
                u.remove.push("np".into());
                // When it closed: held-back deliveries may come back up to 900 s later
                // (tern_core::put_back::held_back_cap), which `tern audit` allows for.
                u.set("cl", ms(now));
                u.set("cf", n(0));
                u.report(report);
                "attribute_exists(op) AND attribute_not_exists(da)".to_owned()
            }
            HealthChange::Degrade { not_since, report } => {
                u.set("dg", ms(now));
                u.report(report);
                let p = u.value(ms(*not_since));
                format!(
                    "attribute_exists(tenant_id) AND attribute_not_exists(da) \
                     AND (attribute_not_exists(dg) OR dg < {p})"
                )
            }
            HealthChange::Recover { report } => {
                u.remove.push("dg".into());
                u.report(report);
                "attribute_exists(dg) AND attribute_not_exists(da)".to_owned()
            }
            HealthChange::Disable { report } => {
                u.set("da", ms(now));
                u.report(report);
                "attribute_exists(tenant_id) AND attribute_not_exists(da)".to_owned()
            }
            HealthChange::Pause { until, pauses } => {
                u.set("pu", ms(*until));
                u.set("pn", n(*pauses));
                let p = u.value(ms(*until));
                format!("attribute_not_exists(pu) OR pu < {p}")
            }
            HealthChange::SetPace {
                change,
                seen,
                restart_at,
            } => {
                match change {
                    tern_core::pacing::PaceChange::Set {
                        per_second,
                        slow_start,
                    } => {
                        u.set("pr", n(*per_second));
                        u.set("pc", ms(now));
                        u.set("ps", AttributeValue::Bool(*slow_start));
                    }
                    tern_core::pacing::PaceChange::Forget => {
                        u.remove.push("pr".into());
                        u.remove.push("pc".into());
                        u.remove.push("ps".into());
                    }
                }
                // The schedule starts afresh at the new pace: the slots given under the
                // old one are void (their deliveries take new ones).
                u.set("rt", micros(*restart_at));
                match seen {
                    Some(t) => {
                        let p = u.value(ms(*t));
                        format!("attribute_exists(tenant_id) AND pc = {p}")
                    }
                    None => "attribute_exists(tenant_id) AND attribute_not_exists(pc)".to_owned(),
                }
            }
            HealthChange::MarkBelow => {
                u.set("bl", ms(now));
                "attribute_exists(tenant_id) AND attribute_not_exists(bl)".to_owned()
            }
            HealthChange::ClearBelow => {
                u.remove.push("bl".into());
                "attribute_exists(bl)".to_owned()
            }
            HealthChange::DeferReport {
                event,
                seen,
                retry_at,
            } => {
                u.set("pa", ms(*retry_at));
                let e = u.value(AttributeValue::S(event.clone()));
                match seen {
                    Some(t) => {
                        let p = u.value(ms(*t));
                        format!("pe = {e} AND pa = {p}")
                    }
                    None => format!("pe = {e}"),
                }
            }
            HealthChange::Reported { event } => {
                u.remove.push("pe".into());
                u.remove.push("pa".into());
                let e = u.value(AttributeValue::S(event.clone()));
                format!("pe = {e}")
            }
        };
        let mut request = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(tenant, endpoint)))
            .update_expression(u.expression())
            .condition_expression(condition)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        for (name, value) in u.values {
            request = request.expression_attribute_values(name, value);
        }
        match request.send().await {
            Ok(_) => Ok(true),
            Err(e) => match e.as_service_error() {
                // Refused: made by another sender, or by an earlier try of this very call
                // whose answer was lost (its token is on the item).
                Some(UpdateItemError::ConditionalCheckFailedException(c)) => {
                    Ok(c.item().and_then(|i| i.get(token_attribute)) == Some(&token))
                }
                _ => Err(port_error(e)),
            },
        }
    }

    async fn reserve_slots(
        &self,
        tenant: &TenantId,
        endpoint: &EndpointId,
        request: &SlotRequest,
    ) -> Result<SlotAnswer, PortError> {
        let mut u = Update::of(tenant, endpoint);
        let token = change_token();
        let mine = u.value(token.clone());
        u.set.push(format!("t_rl = {mine}"));
        let from = u.value(micros(request.from));
        // The same conditions as `SlotRequest::apply_to`, plus: not already applied by an
        // earlier try of this call.
        let condition = if request.extend {
            let span = u.value(n(request.span().num_microseconds().unwrap_or(i64::MAX)));
            u.set.push(format!("rt = rt + {span}"));
            let ceiling = u.value(micros(request.ceiling()));
            format!(
                "rt >= {from} AND rt <= {ceiling} \
                 AND (attribute_not_exists(t_rl) OR t_rl <> {mine})"
            )
        } else {
            u.set("rt", micros(request.from + request.span()));
            format!(
                "(attribute_not_exists(rt) OR rt <= {from}) \
                 AND (attribute_not_exists(t_rl) OR t_rl <> {mine})"
            )
        };
        let mut call = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(tenant, endpoint)))
            .update_expression(u.expression())
            .condition_expression(condition)
            // The TAT before the write: where an extended batch's slots begin.
            .return_values(ReturnValue::UpdatedOld)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        for (name, value) in u.values {
            call = call.expression_attribute_values(name, value);
        }
        match call.send().await {
            Ok(out) => {
                let first = if request.extend {
                    out.attributes
                        .as_ref()
                        .and_then(|old| time_micros(old, "rt"))
                        .ok_or_else(|| {
                            PortError::Unavailable("rate-limit write returned no old rt".into())
                        })?
                } else {
                    request.from
                };
                Ok(SlotAnswer::Granted { first })
            }
            Err(e) => match e.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(c)) => {
                    let item = c.item().cloned().unwrap_or_default();
                    let tat = time_micros(&item, "rt");
                    match (item.get("t_rl") == Some(&token), tat) {
                        // An earlier try of this call was applied: its slots are the last
                        // ones given out.
                        (true, Some(tat)) => Ok(SlotAnswer::Granted {
                            first: tat - request.span(),
                        }),
                        _ => Ok(SlotAnswer::Refused { tat }),
                    }
                }
                _ => Err(port_error(e)),
            },
        }
    }

    async fn reset(&self, tenant: &TenantId, endpoint: &EndpointId) -> Result<(), PortError> {
        let old = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(key(tenant, endpoint)))
            .return_values(ReturnValue::AllOld)
            .send()
            .await
            .map_err(port_error)?;
        let Some(old) = old.attributes else {
            return Ok(());
        };
        // The history goes back: added to whatever a batch wrote since the delete, never
        // over a newer value (ADD and if_not_exists).
        if let Some(history) = kept_history(&old) {
            self.update(tenant, endpoint, history, None).await?;
        }
        // The last failure is one group: put back only when no newer failure was written.
        if let Some(failure) = kept_failure(&old) {
            self.update(
                tenant,
                endpoint,
                failure,
                Some("attribute_not_exists(lf_at)"),
            )
            .await?;
        }
        // Deliveries holding rate-limit slots ahead may still be on the queue: a new
        // schedule starting at now would give their slots out again. Put the schedule
        // back unless a batch has written a later one since.
        if let Some(tat) = time_micros(&old, "rt").filter(|tat| *tat > Utc::now()) {
            let mut u = Update::default();
            u.set("rt", micros(tat));
            let p = u.value(micros(tat));
            let condition = format!("attribute_not_exists(rt) OR rt < {p}");
            self.update(tenant, endpoint, u, Some(&condition)).await?;
        }
        Ok(())
    }
}

impl DynamoHealthStore {
    /// Every record of `tenant`: the keys from the tenant index (one Query, paged), then
    /// the items by key, 100 per `BatchGetItem`.
    async fn tenant_items(
        &self,
        tenant: &TenantId,
    ) -> Result<Vec<HashMap<String, AttributeValue>>, PortError> {
        let mut keys = Vec::new();
        let mut start = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(TENANT_INDEX)
                .key_condition_expression("tenant_id = :t")
                .expression_attribute_values(":t", AttributeValue::S(tenant.to_string()))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(port_error)?;
            for item in out.items.unwrap_or_default() {
                if let Some(k) = item.get(HEALTH_KEY) {
                    keys.push(HashMap::from([(HEALTH_KEY.to_owned(), k.clone())]));
                }
            }
            match out.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        let mut items = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(BATCH_GET_KEYS) {
            let mut wanted = chunk.to_vec();
            for attempt in 0..BATCH_GET_TRIES {
                if wanted.is_empty() {
                    break;
                }
                if attempt > 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(50 << attempt)).await;
                }
                let request = aws_sdk_dynamodb::types::KeysAndAttributes::builder()
                    .set_keys(Some(std::mem::take(&mut wanted)))
                    .build()
                    .map_err(|e| PortError::Rejected(e.to_string()))?;
                let out = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, request)
                    .send()
                    .await
                    .map_err(port_error)?;
                items.extend(
                    out.responses
                        .and_then(|mut r| r.remove(&self.table))
                        .unwrap_or_default(),
                );
                wanted = out
                    .unprocessed_keys
                    .and_then(|mut u| u.remove(&self.table))
                    .map(|k| k.keys)
                    .unwrap_or_default();
            }
            if !wanted.is_empty() {
                return Err(PortError::Unavailable(format!(
                    "{} health records unread after {BATCH_GET_TRIES} tries (throttled)",
                    wanted.len()
                )));
            }
        }
        Ok(items)
    }

    /// One UpdateItem of `u`; a refused `condition` is no error (a newer write won).
    async fn update(
        &self,
        tenant: &TenantId,
        endpoint: &EndpointId,
        mut u: Update,
        condition: Option<&str>,
    ) -> Result<(), PortError> {
        u.set("tenant_id", AttributeValue::S(tenant.to_string()));
        u.set("endpoint_id", AttributeValue::S(endpoint.to_string()));
        let mut request = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(tenant, endpoint)))
            .update_expression(u.expression())
            .set_condition_expression(condition.map(str::to_owned));
        for (name, value) in u.values {
            request = request.expression_attribute_values(name, value);
        }
        match request.send().await {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.as_service_error(),
                    Some(UpdateItemError::ConditionalCheckFailedException(_))
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(port_error(e)),
        }
    }
}

/// What [`HealthStore::reset`] keeps of a record, as a write: the 24 h view (`h<n>` /
/// `k<n>`), the last success (`ls`), the bucket size (`bs`) and an operational event not
/// yet published (`pe`, `pa`: its owner is still told). `None` when there is none of it.
/// Everything that decides (window buckets, consecutive failures, the circuit, pauses,
/// the learnt pace, `below_since`, `disabled_at`) is left deleted: an endpoint enabled
/// with its old window would be disabled again by its next failure.
fn kept_history(old: &HashMap<String, AttributeValue>) -> Option<Update> {
    let mut u = Update::default();
    for (name, value) in old {
        let long_view = name
            .strip_prefix(['h', 'k'])
            .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()));
        if long_view && value.as_n().is_ok() {
            u.add(name, value.clone());
        }
    }
    for attr in ["ls", "bs", "pe", "pa"] {
        if let Some(v) = old.get(attr) {
            u.keep(attr, v.clone());
        }
    }
    (!u.set.is_empty() || !u.add.is_empty()).then_some(u)
}

/// The last failure ([`EndpointHealth::last_failure`], `lf_*`) of a reset record, as a
/// write; `None` when it had none.
fn kept_failure(old: &HashMap<String, AttributeValue>) -> Option<Update> {
    old.get("lf_at")?;
    let mut u = Update::default();
    for attr in ["lf_at", "lf_st", "lf_cl", "lf_er", "lf_x"] {
        if let Some(v) = old.get(attr) {
            u.set(attr, v.clone());
        }
    }
    Some(u)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_is_keyed_by_tenant_and_endpoint_and_reads_back_from_its_key() {
        let (t, e) = (
            TenantId::new("tnt_a").unwrap(),
            EndpointId::new("ep_1").unwrap(),
        );
        let k = key(&t, &e);
        assert_eq!(k[HEALTH_KEY], AttributeValue::S("tnt_a#ep_1".into()));
        // Every write names the tenant index's keys.
        let u = Update::of(&t, &e);
        assert!(
            u.expression()
                .starts_with("SET tenant_id = :v0, endpoint_id = :v1")
        );
        let h = from_item(&k).expect("a record of its key alone");
        assert_eq!((h.tenant_id, h.endpoint_id), (t, e));
        let mut bad = HashMap::new();
        bad.insert(
            HEALTH_KEY.to_owned(),
            AttributeValue::S("no-separator".into()),
        );
        assert!(from_item(&bad).is_err());
    }

    /// The api and console functions may update a health item only in the attributes an
    /// enable's reset writes (a `dynamodb:Attributes` condition in both stacks): the key
    /// and the tenant index's keys among them.
    #[test]
    fn both_stacks_let_a_reset_write_the_key() {
        let sam = include_str!("../../../infra/template.yaml");
        assert!(
            sam.contains("dynamodb:Attributes: [endpoint_key, tenant_id, endpoint_id, rt,"),
            "template.yaml"
        );
        let cdk = include_str!("../../../infra/lib/constructs/functions.ts");
        assert!(
            cdk.contains("HEALTH_RESET_ATTRIBUTES = ['endpoint_key', 'tenant_id', 'endpoint_id',"),
            "functions.ts"
        );
    }
}
