//! The waiting list ([`tern_core::waiting`]) in DynamoDB: three attributes on a delivery's
//! state item in the attempts table, and a sparse global secondary index over them.
//!
//! | attribute | meaning |
//! | --- | --- |
//! | `wait_ep` | `<tenant>#<endpoint>#<shard>`: the index's partition key, the shard ([`tern_core::spread::waiting_shard`]) one of [`WAITING_SHARDS`] by the event; `<tenant>#<endpoint>` on an entry written before the index was spread |
//! | `wait_due` | when the waiting attempt is due, Unix milliseconds: the index's sort key |
//! | `wait_att` | the number of the attempt it waits for (projected) |
//!
//! Only a state item that holds them is in the index (a sparse index), so the index holds
//! the waiting deliveries and nothing else: a delivery that succeeds at once never enters
//! it, and its two writes cost what they did (DynamoDB writes an index only when an item's
//! indexed attributes change). A retry costs one index write when it is listed (the
//! finish write that lists it already existed) and one when its next claim removes it;
//! each index entry is about 100 bytes, one write unit.
//!
//! Scale (`DESIGN.md` §11): an endpoint taking 2,000 deliveries a second that all fail
//! with its circuit closed lists and unlists each: 4,000 index writes a second, 250 on
//! each of the 16 partitions of its entries, where one partition would have been at four
//! times its limit (and a GSI short of capacity throttles the table's own writes, the
//! finish writes among them).
//!
//! Reads: one endpoint's entries are [`WAITING_SHARDS`] + 1 Queries (its shards and the
//! key of entries written before the spread), at once, merged soonest due first: 4.5 read
//! units at least, where one Query cost 0.5; every endpoint's, or a tenant's, one Scan of
//! the index (it holds only waiting deliveries), paged by 1 MB. All eventually
//! consistent: an entry written a moment ago may be missing, one removed a moment ago may
//! still show.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use tern_core::ports::PortError;
use tern_core::spread::{WAITING_SHARDS, waiting_shard};
use tern_core::waiting::{
    WaitingDelivery, WaitingList, WaitingRead, WaitingScope, endpoint_key, parse_endpoint_key,
};
use tern_core::{EndpointId, EventId, TenantId};

use crate::DynamoLedger;
use crate::error::port_error;

/// Name of the waiting index on the attempts table (`infra/settings.json`
/// `tables.attempts.waitingIndex.name`).
pub const WAITING_INDEX: &str = "waiting";

/// The index's partition key: `<tenant>#<endpoint>`.
pub const WAIT_ENDPOINT: &str = "wait_ep";

/// The index's sort key: due time, Unix milliseconds.
pub const WAIT_DUE: &str = "wait_due";

/// The attempt number waited for (projected into the index).
pub const WAIT_ATTEMPT: &str = "wait_att";

/// The update-expression clause that takes an item off the list (its attributes may be
/// absent: removing an absent attribute changes nothing and writes no index entry).
pub const UNLIST: &str = "REMOVE wait_ep, wait_due, wait_att";

/// The index partition key of `tenant`'s `endpoint`'s entry of `event`:
/// `<tenant>#<endpoint>#<shard>`.
pub fn wait_key(tenant: &TenantId, endpoint: &EndpointId, event: &EventId) -> String {
    format!(
        "{}#{}",
        endpoint_key(tenant, endpoint),
        waiting_shard(event)
    )
}

/// Every index partition key that can hold an entry of `tenant`'s `endpoint`: its
/// [`WAITING_SHARDS`] shards, and the unspread key of entries written before.
pub fn wait_keys(tenant: &TenantId, endpoint: &EndpointId) -> Vec<String> {
    let base = endpoint_key(tenant, endpoint);
    std::iter::once(base.clone())
        .chain((0..WAITING_SHARDS).map(|s| format!("{base}#{s}")))
        .collect()
}

/// The tenant and endpoint of an index partition key, spread or not; `None` when it is
/// not one.
fn parse_wait_key(key: &str) -> Option<(TenantId, EndpointId)> {
    let mut parts = key.splitn(3, '#');
    let (tenant, endpoint) = (parts.next()?, parts.next()?);
    if let Some(shard) = parts.next() {
        shard.parse::<u32>().ok().filter(|s| *s < WAITING_SHARDS)?;
    }
    parse_endpoint_key(&format!("{tenant}#{endpoint}"))
}

/// The values that list `tenant`/`endpoint`'s delivery of `event` for attempt `attempt`
/// due at `due_at`, for a `SET wait_ep = :wep, wait_due = :wdue, wait_att = :watt` clause.
pub fn listing(
    tenant: &TenantId,
    endpoint: &EndpointId,
    event: &EventId,
    attempt: u32,
    due_at: DateTime<Utc>,
) -> [(&'static str, AttributeValue); 3] {
    [
        (":wep", AttributeValue::S(wait_key(tenant, endpoint, event))),
        (
            ":wdue",
            AttributeValue::N(due_at.timestamp_millis().to_string()),
        ),
        (":watt", AttributeValue::N(attempt.to_string())),
    ]
}

/// The `SET` clause matching [`listing`]'s values.
pub const LIST: &str = "wait_ep = :wep, wait_due = :wdue, wait_att = :watt";

/// One index entry as a waiting delivery; `None` for an entry that is not one (it cannot
/// be parsed: skipped, never a reason to fail the read).
fn entry(item: &HashMap<String, AttributeValue>) -> Option<WaitingDelivery> {
    let text = |k: &str| item.get(k).and_then(|v| v.as_s().ok());
    let number = |k: &str| item.get(k).and_then(|v| v.as_n().ok());
    let (tenant_id, endpoint_id) = parse_wait_key(text(WAIT_ENDPOINT)?)?;
    Some(WaitingDelivery {
        tenant_id,
        endpoint_id,
        // The state item's partition: the event id, or its sharded partition.
        event_id: crate::ledger_keys::parse_partition(text("event_id")?)?.1,
        attempt: number(WAIT_ATTEMPT)?.parse().ok()?,
        due_at: DateTime::from_timestamp_millis(number(WAIT_DUE)?.parse().ok()?)?,
    })
}

impl DynamoLedger {
    /// Up to `max_entries` entries of index partition `key`, soonest due first, and
    /// whether that was all of them.
    async fn waiting_partition(
        &self,
        key: String,
        max_entries: usize,
    ) -> Result<(Vec<WaitingDelivery>, bool), PortError> {
        let mut entries = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let out = self
                .client()
                .query()
                .table_name(self.table())
                .index_name(WAITING_INDEX)
                .key_condition_expression("wait_ep = :k")
                .expression_attribute_values(":k", AttributeValue::S(key.clone()))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(port_error)?;
            entries.extend(out.items().iter().filter_map(entry));
            start = out.last_evaluated_key.filter(|k| !k.is_empty());
            if entries.len() > max_entries {
                entries.truncate(max_entries);
                return Ok((entries, false));
            }
            if start.is_none() {
                return Ok((entries, true));
            }
        }
    }
}

/// Index partitions one endpoint's read queries at once: all 9.
const WAIT_QUERIES_AT_ONCE: usize = WAITING_SHARDS as usize + 1;

#[async_trait]
impl WaitingList for DynamoLedger {
    async fn waiting(
        &self,
        scope: &WaitingScope,
        max_entries: usize,
    ) -> Result<WaitingRead, PortError> {
        let (mut entries, complete) = match scope {
            WaitingScope::Endpoint(tenant, endpoint) => {
                let reads: Vec<Result<(Vec<WaitingDelivery>, bool), PortError>> =
                    futures::stream::iter(wait_keys(tenant, endpoint))
                        .map(|key| self.waiting_partition(key, max_entries))
                        .buffer_unordered(WAIT_QUERIES_AT_ONCE)
                        .collect()
                        .await;
                let mut entries = Vec::new();
                let mut whole = true;
                for read in reads {
                    let (mut found, all) = read?;
                    whole &= all;
                    entries.append(&mut found);
                }
                entries.retain(|d| scope.holds(d));
                (entries, whole)
            }
            WaitingScope::All | WaitingScope::Tenant(_) => {
                let mut entries = Vec::new();
                let mut start: Option<HashMap<String, AttributeValue>> = None;
                loop {
                    let mut scan = self
                        .client()
                        .scan()
                        .table_name(self.table())
                        .index_name(WAITING_INDEX)
                        .set_exclusive_start_key(start);
                    if let WaitingScope::Tenant(t) = scope {
                        // Reads the same entries (a filter is applied after the read); it
                        // only spares sending the others.
                        scan = scan
                            .filter_expression("begins_with(wait_ep, :t)")
                            .expression_attribute_values(":t", AttributeValue::S(format!("{t}#")));
                    }
                    let out = scan.send().await.map_err(port_error)?;
                    entries.extend(
                        out.items()
                            .iter()
                            .filter_map(entry)
                            .filter(|d| scope.holds(d)),
                    );
                    let next = out.last_evaluated_key.filter(|k| !k.is_empty());
                    if entries.len() >= max_entries || next.is_none() {
                        break (entries, next.is_none());
                    }
                    start = next;
                }
            }
        };
        let complete = complete && entries.len() <= max_entries;
        entries.sort_by(|a, b| {
            (a.due_at, &a.tenant_id, &a.endpoint_id, &a.event_id).cmp(&(
                b.due_at,
                &b.tenant_id,
                &b.endpoint_id,
                &b.event_id,
            ))
        });
        entries.truncate(max_entries);
        Ok(WaitingRead { entries, complete })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_entry_reads_back_as_the_delivery_it_lists() {
        let tenant = tern_core::TenantId::new("tnt_a").unwrap();
        let endpoint = tern_core::EndpointId::new("ep_1").unwrap();
        let due: DateTime<Utc> = "2026-12-01T02:18:21.250Z".parse().unwrap();
        let event = EventId::new("evt_9").unwrap();
        let mut item: HashMap<String, AttributeValue> = listing(&tenant, &endpoint, &event, 3, due)
            .into_iter()
            .map(|(k, v)| {
                let name = match k {
                    ":wep" => WAIT_ENDPOINT,
                    ":wdue" => WAIT_DUE,
                    _ => WAIT_ATTEMPT,
                };
                (name.to_owned(), v)
            })
            .collect();
        item.insert(
            "event_id".into(),
            AttributeValue::S("ev#tnt_a#evt_9#03".into()),
        );
        let d = entry(&item).unwrap();
        assert_eq!(
            (
                d.tenant_id,
                d.endpoint_id,
                d.event_id.as_str(),
                d.attempt,
                d.due_at
            ),
            (tenant.clone(), endpoint.clone(), "evt_9", 3, due)
        );
        assert_eq!(
            item[WAIT_ENDPOINT].as_s().unwrap(),
            &format!("tnt_a#ep_1#{}", waiting_shard(&event)),
            "spread by the event"
        );
        // An entry written before the index was spread still reads.
        item.insert(WAIT_ENDPOINT.into(), AttributeValue::S("tnt_a#ep_1".into()));
        assert_eq!(
            entry(&item).map(|d| d.endpoint_id.to_string()),
            Some("ep_1".into())
        );
        assert!(wait_keys(&tenant, &endpoint).contains(&"tnt_a#ep_1".to_owned()));
        assert_eq!(
            wait_keys(&tenant, &endpoint).len(),
            1 + WAITING_SHARDS as usize
        );
        for bad in ["garbage", "tnt_a#ep_1#16", "tnt_a#ep_1#x"] {
            item.insert(WAIT_ENDPOINT.into(), AttributeValue::S(bad.into()));
            assert_eq!(entry(&item), None, "{bad}: skipped, not an error");
        }
    }
}
