//! The ledger's reads of one event (`tern audit`, `tern attempts`, the API's event and its
//! attempts, the portal's delivery page, the console's event lookup, resend and
//! recover): its partitions in both layouts (`crate::ledger_keys`), queried concurrently.
//!
//! Cost, per read of one event (eventually consistent Queries are half a read unit per
//! 4 KB, at least half a unit each; consistent ones twice that):
//!
//! | read | requests | least read units |
//! | --- | --- | --- |
//! | history, trace (event under 50 endpoints) | the fan-out record (1 consistent Query of one item), the unsharded partition, sharded partition 0: 3, at once | 2 |
//! | the same, event of 50 endpoints or more | then the other 31 sharded partitions, [`PARTITION_QUERIES_AT_ONCE`] at a time: 34 | 17 |
//! | pair states (consistent, `state#` items only) | as above | 3, or 33 |
//! | one pair's state (resend, recover) | its 2 or 3 possible items (unsharded, partition 0, its shard), one consistent Query each, at once | 2 or 3 |
//!
//! Before the sharded layout an event's read was one Query (half a unit); the reads are
//! people's (a page, a command) and the audit's, never the delivery path's.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnConsumedCapacity};
use futures::StreamExt;
use tern_core::delivery_log::PairState as LatestPairState;
use tern_core::ports::{AttemptRecord, DeliveryState, PortError};
use tern_core::spread::{LedgerLayout, pair_shard_of};
use tern_core::trace::{EventTrace, PairState};
use tern_core::{EndpointId, EventId, TenantId};

use crate::DynamoLedger;
use crate::error::port_error;
use crate::ledger::{delivered_row, pair_state};
use crate::ledger_keys::{sharded_partition, sharded_partitions};

/// Partition Queries one read of an event runs at once: 16 (a fully spread event's 32 in
/// two rounds).
pub const PARTITION_QUERIES_AT_ONCE: usize = 16;

type Item = HashMap<String, AttributeValue>;

/// The items one partition gave, with its layout and the read units they cost.
struct PartitionRead {
    layout: LedgerLayout,
    items: Vec<Item>,
    units: f64,
}

/// Which items of a partition to read.
#[derive(Clone, Copy)]
enum Select {
    /// Every item (state items, attempt rows, the fan-out record).
    All,
    /// The `state#` items, consistently.
    States,
}

impl DynamoLedger {
    /// Every item of `partition` that `select` asks for, all pages.
    async fn query_partition(
        &self,
        layout: LedgerLayout,
        partition: String,
        select: Select,
    ) -> Result<PartitionRead, PortError> {
        let mut read = PartitionRead {
            layout,
            items: Vec::new(),
            units: 0.0,
        };
        let mut start = None;
        loop {
            let mut request = self
                .client
                .query()
                .table_name(&self.table)
                .expression_attribute_values(":e", AttributeValue::S(partition.clone()))
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .set_exclusive_start_key(start);
            request = match select {
                Select::All => request.key_condition_expression("event_id = :e"),
                Select::States => request
                    .key_condition_expression("event_id = :e AND begins_with(sk, :state)")
                    .expression_attribute_values(":state", AttributeValue::S("state#".into()))
                    .consistent_read(true),
            };
            let out = request.send().await.map_err(port_error)?;
            read.units += out
                .consumed_capacity()
                .and_then(|c| c.capacity_units())
                .unwrap_or(0.0);
            read.items.extend(out.items.unwrap_or_default());
            start = out.last_evaluated_key.filter(|k| !k.is_empty());
            if start.is_none() {
                return Ok(read);
            }
        }
    }

    /// The items of every partition that can hold a pair of `tenant`'s `event`: the
    /// unsharded one and sharded partition 0 at once with the event's fan-out record,
    /// then, when the record says the event is spread further, the other sharded ones.
    async fn read_event(
        &self,
        tenant: &TenantId,
        event: &EventId,
        select: Select,
    ) -> Result<Vec<PartitionRead>, PortError> {
        let narrow = LedgerLayout::Sharded { shards: 1 };
        let (layout, unsharded, first) = futures::join!(
            crate::fanout::read_layout(&self.client, &self.table, tenant, event),
            self.query_partition(LedgerLayout::Unsharded, event.to_string(), select),
            self.query_partition(narrow, sharded_partition(tenant, event, 0), select),
        );
        let shards = match layout? {
            Some(LedgerLayout::Sharded { shards }) => shards,
            _ => 1,
        };
        let wide = LedgerLayout::Sharded { shards };
        let mut first = first?;
        first.layout = wide;
        let mut reads = vec![unsharded?, first];
        let rest: Vec<Result<PartitionRead, PortError>> = futures::stream::iter(
            sharded_partitions(tenant, event, shards)
                .into_iter()
                .skip(1),
        )
        .map(|p| self.query_partition(wide, p, select))
        .buffer_unordered(PARTITION_QUERIES_AT_ONCE)
        .collect()
        .await;
        for read in rest {
            reads.push(read?);
        }
        Ok(reads)
    }

    /// [`tern_core::ports::DeliveryLedger::trace`].
    pub(crate) async fn read_trace(
        &self,
        tenant: &TenantId,
        event: &EventId,
    ) -> Result<EventTrace, PortError> {
        let mut trace = EventTrace::default();
        let mut pairs: HashMap<EndpointId, PairState> = HashMap::new();
        for read in self.read_event(tenant, event, Select::All).await? {
            *trace.read_units.get_or_insert(0.0) += read.units;
            for item in read.items {
                let sk = match item.get("sk") {
                    Some(AttributeValue::S(sk)) => sk.clone(),
                    _ => continue,
                };
                if sk.starts_with("state#") {
                    trace.attempts.extend(delivered_row(event, &item)?);
                    if let Some(p) = pair_state(&item) {
                        let key = p.endpoint_id.clone();
                        let p = match pairs.remove(&key) {
                            Some(other) => prevailing(p, other),
                            None => p,
                        };
                        pairs.insert(key, p);
                    }
                } else if sk.starts_with("attempt#") {
                    trace.attempts.push(attempt_row(event, item)?);
                }
                // Other items of the partition (the relay's fan-out record) are
                // neither a pair nor an attempt.
            }
        }
        trace.pairs = pairs.into_values().collect();
        trace
            .pairs
            .sort_by(|a, b| a.endpoint_id.cmp(&b.endpoint_id));
        sort_attempts(&mut trace.attempts);
        Ok(trace)
    }

    /// [`tern_core::ports::DeliveryLedger::history`].
    pub(crate) async fn read_history(
        &self,
        tenant: &TenantId,
        event: &EventId,
    ) -> Result<Vec<AttemptRecord>, PortError> {
        let mut records = Vec::new();
        for read in self.read_event(tenant, event, Select::All).await? {
            for item in read.items {
                let sk = match item.get("sk") {
                    Some(AttributeValue::S(sk)) => sk.clone(),
                    _ => continue,
                };
                if sk.starts_with("state#") {
                    records.extend(delivered_row(event, &item)?);
                } else if sk.starts_with("attempt#") {
                    records.push(attempt_row(event, item)?);
                }
                // The relay's fan-out record shares the unsharded partition; it is no
                // attempt.
            }
        }
        sort_attempts(&mut records);
        Ok(records)
    }

    /// The attempts of event `event` the unsharded layout holds: every tenant's event with
    /// that id, written by version 1 messages. For an operator who does not know the
    /// event's tenant (`tern attempts` without `--tenant`): a sharded pair is found only
    /// with its tenant.
    ///
    /// # Errors
    /// [`PortError`] when the table cannot be read.
    pub async fn unsharded_history(
        &self,
        event: &EventId,
    ) -> Result<Vec<AttemptRecord>, PortError> {
        let read = self
            .query_partition(LedgerLayout::Unsharded, event.to_string(), Select::All)
            .await?;
        let mut records = Vec::new();
        for item in read.items {
            match item.get("sk") {
                Some(AttributeValue::S(sk)) if sk.starts_with("state#") => {
                    records.extend(delivered_row(event, &item)?);
                }
                Some(AttributeValue::S(sk)) if sk.starts_with("attempt#") => {
                    records.push(attempt_row(event, item)?);
                }
                _ => {}
            }
        }
        sort_attempts(&mut records);
        Ok(records)
    }

    /// [`tern_core::ports::DeliveryLedger::pair_states`].
    pub(crate) async fn read_pair_states(
        &self,
        tenant: &TenantId,
        event: &EventId,
    ) -> Result<Vec<LatestPairState>, PortError> {
        let mut states: HashMap<EndpointId, LatestPairState> = HashMap::new();
        for read in self.read_event(tenant, event, Select::States).await? {
            for item in read.items {
                let Some(state) = latest_pair_state(&item, read.layout) else {
                    tracing::warn!(event_id = %event, "skipping an unreadable delivery state item");
                    continue;
                };
                let key = state.endpoint_id.clone();
                let state = match states.remove(&key) {
                    Some(other) => state.prevailing(other),
                    None => state,
                };
                states.insert(key, state);
            }
        }
        let mut states: Vec<LatestPairState> = states.into_values().collect();
        states.sort_by(|a, b| a.endpoint_id.cmp(&b.endpoint_id));
        Ok(states)
    }

    /// [`tern_core::ports::DeliveryLedger::pair_state`]: the pair's state item in each
    /// place it can be (unsharded; sharded partition 0, where an event under 50 endpoints
    /// keeps it; its own shard in a spread event), one consistent Query each, at once.
    pub(crate) async fn read_pair_state(
        &self,
        tenant: &TenantId,
        event: &EventId,
        endpoint: &EndpointId,
    ) -> Result<Option<LatestPairState>, PortError> {
        let mut places = vec![
            (LedgerLayout::Unsharded, event.to_string()),
            (
                LedgerLayout::Sharded { shards: 1 },
                sharded_partition(tenant, event, 0),
            ),
        ];
        // A spread event's pair: at its shard of this build's width, or of the earlier
        // width (an event fanned out before); one read when both are the same partition.
        for shards in [
            tern_core::spread::EARLIER_PAIR_SHARDS,
            tern_core::spread::PAIR_SHARDS,
        ] {
            let partition = sharded_partition(tenant, event, pair_shard_of(endpoint, shards));
            if places.iter().all(|(_, p)| *p != partition) {
                places.push((LedgerLayout::Sharded { shards }, partition));
            }
        }
        let sk = AttributeValue::S(format!("state#{endpoint}"));
        let reads = places.into_iter().map(|(layout, partition)| {
            let sk = sk.clone();
            async move {
                let out = self
                    .client
                    .query()
                    .table_name(&self.table)
                    .key_condition_expression("event_id = :e AND sk = :sk")
                    .expression_attribute_values(":e", AttributeValue::S(partition))
                    .expression_attribute_values(":sk", sk)
                    .consistent_read(true)
                    .send()
                    .await
                    .map_err(port_error)?;
                Ok::<_, PortError>(
                    out.items()
                        .first()
                        .and_then(|item| latest_pair_state(item, layout)),
                )
            }
        });
        let mut found: Option<LatestPairState> = None;
        for state in futures::future::join_all(reads).await {
            if let Some(state) = state? {
                found = Some(match found {
                    Some(other) => state.prevailing(other),
                    None => state,
                });
            }
        }
        Ok(found)
    }
}

/// An attempt row read back: its `event_id` attribute names its partition, so the event
/// it belongs to (the one read) is put back first.
fn attempt_row(event: &EventId, mut item: Item) -> Result<AttemptRecord, PortError> {
    item.insert("event_id".into(), AttributeValue::S(event.to_string()));
    serde_dynamo::from_item(item).map_err(|e| PortError::Rejected(e.to_string()))
}

/// Oldest first; tries of one attempt in takeover order.
fn sort_attempts(records: &mut [AttemptRecord]) {
    records.sort_by_key(|r| (r.started_at, r.replay_count, r.attempt, r.takeover));
}

/// Of one pair's two state items (one per layout), the one that speaks for it: delivered
/// wins, then the later claim.
fn prevailing(a: PairState, b: PairState) -> PairState {
    let rank = |p: &PairState| (p.delivered_at.is_some(), p.claim_key);
    if rank(&b) > rank(&a) { b } else { a }
}

/// A `state#` item as a [`LatestPairState`] of a pair in `layout`; `None` when it is not
/// one.
pub(crate) fn latest_pair_state(item: &Item, layout: LedgerLayout) -> Option<LatestPairState> {
    let text = |name: &str| match item.get(name) {
        Some(AttributeValue::S(s)) => Some(s.clone()),
        _ => None,
    };
    let endpoint_id = EndpointId::new(text("endpoint_id")?).ok()?;
    let key: u64 = match item.get("claim_key") {
        Some(AttributeValue::N(v)) => v.parse().ok()?,
        _ => return None,
    };
    let done = matches!(item.get("claim_done"), Some(AttributeValue::Bool(true)));
    let delivered_at = text("delivered_at")
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(&t).ok())
        .map(|t| t.with_timezone(&chrono::Utc));
    // Delivered wins over everything: a pair a slow holder delivered while a later
    // attempt holds the claim is delivered, whatever that holder is doing.
    let state = if delivered_at.is_some() {
        Some(DeliveryState::Delivered)
    } else if done {
        text("delivery_state").and_then(|s| {
            serde_json::from_value::<DeliveryState>(serde_json::Value::String(s)).ok()
        })
    } else {
        None
    };
    Some(LatestPairState {
        endpoint_id,
        state,
        replay_count: u32::try_from(key >> 32).ok()?,
        attempt: u32::try_from(key & u64::from(u32::MAX)).ok()?,
        delivered_at,
        ledger: layout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_items_read_back() {
        let item = HashMap::from([
            ("endpoint_id".to_owned(), AttributeValue::S("ep_1".into())),
            (
                "claim_key".to_owned(),
                AttributeValue::N(((2u64 << 32) | 3).to_string()),
            ),
            ("claim_done".to_owned(), AttributeValue::Bool(true)),
            (
                "delivery_state".to_owned(),
                AttributeValue::S("retrying".into()),
            ),
        ]);
        let s = latest_pair_state(&item, LedgerLayout::Unsharded).unwrap();
        assert_eq!(
            (s.replay_count, s.attempt, s.state, s.ledger),
            (2, 3, Some(DeliveryState::Retrying), LedgerLayout::Unsharded)
        );
        assert_eq!(s.delivered_at, None);
    }

    #[test]
    fn an_attempt_row_of_a_sharded_partition_reads_back_with_its_event() {
        let record = AttemptRecord {
            event_id: EventId::new("evt_1").unwrap(),
            endpoint_id: EndpointId::new("ep_1").unwrap(),
            replay_count: 0,
            attempt: 2,
            takeover: 0,
            started_at: chrono::Utc::now(),
            latency_ms: 5,
            status: Some(500),
            error_class: None,
            error: None,
            location: None,
            response_excerpt: None,
            excerpt_truncated: false,
            outcome: "retry".into(),
            next_wait_seconds: Some(60),
        };
        let mut item: Item = serde_dynamo::to_item(&record).unwrap();
        item.insert(
            "event_id".into(),
            AttributeValue::S("ev#tnt_a#evt_1#07".into()),
        );
        assert_eq!(attempt_row(&record.event_id, item).unwrap(), record);
    }
}
