//! The waiting list ([`tern_core::waiting`]) in DynamoDB: three attributes on a delivery's
//! state item in the attempts table, and a sparse global secondary index over them.
//!
//! | attribute | meaning |
//! | --- | --- |
//! | `wait_ep` | `<tenant>#<endpoint>`: the index's partition key |
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
//! Reads: one endpoint's entries are one Query (soonest due first); every endpoint's, or a
//! tenant's, one Scan of the index (it holds only waiting deliveries), paged by 1 MB.
//! Both are eventually consistent: an entry written a moment ago may be missing, one
//! removed a moment ago may still show.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use tern_core::ports::PortError;
use tern_core::waiting::{
    WaitingDelivery, WaitingList, WaitingRead, WaitingScope, endpoint_key, parse_endpoint_key,
};

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

/// The values that list a delivery of `tenant`/`endpoint` for attempt `attempt` due at
/// `due_at`, for a `SET wait_ep = :wep, wait_due = :wdue, wait_att = :watt` clause.
pub fn listing(
    tenant: &tern_core::TenantId,
    endpoint: &tern_core::EndpointId,
    attempt: u32,
    due_at: DateTime<Utc>,
) -> [(&'static str, AttributeValue); 3] {
    [
        (":wep", AttributeValue::S(endpoint_key(tenant, endpoint))),
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
    let (tenant_id, endpoint_id) = parse_endpoint_key(text(WAIT_ENDPOINT)?)?;
    Some(WaitingDelivery {
        tenant_id,
        endpoint_id,
        // The state item's partition: the event id, or its sharded partition.
        event_id: crate::ledger_keys::parse_partition(text("event_id")?)?.1,
        attempt: number(WAIT_ATTEMPT)?.parse().ok()?,
        due_at: DateTime::from_timestamp_millis(number(WAIT_DUE)?.parse().ok()?)?,
    })
}

#[async_trait]
impl WaitingList for DynamoLedger {
    async fn waiting(
        &self,
        scope: &WaitingScope,
        max_entries: usize,
    ) -> Result<WaitingRead, PortError> {
        let mut entries = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let (items, next) = match scope {
                WaitingScope::Endpoint(tenant, endpoint) => {
                    let out = self
                        .client()
                        .query()
                        .table_name(self.table())
                        .index_name(WAITING_INDEX)
                        .key_condition_expression("wait_ep = :k")
                        .expression_attribute_values(
                            ":k",
                            AttributeValue::S(endpoint_key(tenant, endpoint)),
                        )
                        .set_exclusive_start_key(start)
                        .send()
                        .await
                        .map_err(port_error)?;
                    (out.items.unwrap_or_default(), out.last_evaluated_key)
                }
                WaitingScope::All | WaitingScope::Tenant(_) => {
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
                    (out.items.unwrap_or_default(), out.last_evaluated_key)
                }
            };
            entries.extend(items.iter().filter_map(entry).filter(|d| scope.holds(d)));
            let more = next.as_ref().is_some_and(|k| !k.is_empty());
            if entries.len() >= max_entries || !more {
                let complete = !more && entries.len() <= max_entries;
                entries.sort_by(|a, b| {
                    (a.due_at, &a.tenant_id, &a.endpoint_id, &a.event_id).cmp(&(
                        b.due_at,
                        &b.tenant_id,
                        &b.endpoint_id,
                        &b.event_id,
                    ))
                });
                entries.truncate(max_entries);
                return Ok(WaitingRead { entries, complete });
            }
            start = next;
        }
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
        let mut item: HashMap<String, AttributeValue> = listing(&tenant, &endpoint, 3, due)
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
            (tenant, endpoint, "evt_9", 3, due)
        );
        item.insert(WAIT_ENDPOINT.into(), AttributeValue::S("garbage".into()));
        assert_eq!(entry(&item), None, "skipped, not an error");
    }
}
