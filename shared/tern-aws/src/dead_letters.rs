//! The dead-letter record ([`tern_core::dead_letters`]) in the attempts table, next to the
//! ledger's items: one item per dead-lettered (event, endpoint) pair.
//!
//! | key | value |
//! | --- | --- |
//! | `event_id` (partition) | `dl#<tenant id>#<shard, 2 digits>`, shard 0..32 ([`tern_core::dead_letters::shard`]) |
//! | `sk` (sort) | `<endpoint id>#<event id>` |
//!
//! Ids hold only `[A-Za-z0-9_-]`, so `#` splits them and an event's own partition (an
//! event id) never meets a record partition. A tenant's dead letters are 32 Queries (one
//! per shard, run 8 at a time), one endpoint's the same with `begins_with(sk, <endpoint>#)`
//! as a key condition: no scan, no index. Each item holds at most 1,024 bytes (the payload
//! sample is cut to fit): one write unit to write, one to delete. Scale (DESIGN.md §11):
//! 10,000 dead letters a second of one tenant's one endpoint (an outage of a big endpoint)
//! put 10,000 / 32 = 313 write units a second on each shard, under half (500) of a
//! partition's 1,000.
//!
//! Items expire with the ledger's other items (`expires_at`, the attempt log's TTL,
//! `TERN_ATTEMPT_LOG_TTL_DAYS`, 30 days by default), after the DLQ's own retention
//! (14 days, `infra/settings.json`), so an entry never expires before its message can.
//! An entry outliving its message (SQS dropped it after 14 days) shows until the TTL.
//!
//! Reads are eventually consistent (half a read unit per 4 KB) and then checked against
//! the pairs' state items (`BatchGetItem`, 100 keys a call, two attributes projected): a
//! pair delivered since (delivered wins) or whose later budget was claimed (it was
//! replayed, and its entry's removal did not land) is not shown. An entry says where its
//! pair's state item is: `lsh` (the partitions of a sharded event, `crate::ledger_keys`);
//! an entry without it (written by a version 1 message, or before the ledger was sharded)
//! has the unsharded one.

use std::collections::HashMap;

use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use tern_core::dead_letters::{
    DEAD_LETTER_SHARDS, DeadLetterQuery, DeadLetterRead, MAX_ENTRY_BYTES, MAX_SAMPLE_CHARS,
    RecordedDeadLetter, cut, shard,
};
use tern_core::ports::PortError;
use tern_core::spread::LedgerLayout;
use tern_core::{DeliveryMessage, EndpointId, EventId, TenantId};

use crate::DynamoLedger;
use crate::error::port_error;
use crate::ledger::item_size_bytes;
use crate::ledger_keys::pair_partition;

/// Partition key prefix of the record's items.
pub const PARTITION_PREFIX: &str = "dl#";

/// Attribute of an entry: the partitions of its pair's event in the sharded ledger layout;
/// absent for an unsharded pair.
const LEDGER_SHARDS: &str = "lsh";

/// Shard Queries run at once by one read: 8.
pub const PARALLEL_QUERIES: usize = 8;

/// Keys per `BatchGetItem`: 100 (its limit, DynamoDB API reference).
const BATCH_GET_KEYS: usize = 100;

/// Tries of a `BatchGetItem` whose keys come back unprocessed (throttled): 5.
const BATCH_GET_TRIES: usize = 5;

fn partition(tenant: &TenantId, shard: u32) -> String {
    format!("{PARTITION_PREFIX}{tenant}#{shard:02}")
}

fn sort_key(endpoint: &EndpointId, event: &EventId) -> String {
    format!("{endpoint}#{event}")
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// The item of `entry`, expiring at `expires_at`, its sample cut so the item holds at
/// most [`MAX_ENTRY_BYTES`].
fn item_of(
    entry: &RecordedDeadLetter,
    expires_at: AttributeValue,
) -> HashMap<String, AttributeValue> {
    let mut item = HashMap::from([
        (
            "event_id".to_owned(),
            s(partition(
                &entry.tenant_id,
                shard(&entry.event_id, &entry.endpoint_id),
            )),
        ),
        (
            "sk".to_owned(),
            s(sort_key(&entry.endpoint_id, &entry.event_id)),
        ),
        ("event_type".to_owned(), s(entry.event_type.clone())),
        ("reason".to_owned(), s(entry.reason.to_string())),
        ("attempts".to_owned(), n(entry.attempts)),
        ("dl_at".to_owned(), s(entry.dead_lettered_at.to_rfc3339())),
        ("rc".to_owned(), n(entry.replay_count)),
        (LEDGER_SHARDS.to_owned(), n(0)),
        ("expires_at".to_owned(), expires_at),
        (
            "sample_cut".to_owned(),
            AttributeValue::Bool(entry.payload_truncated),
        ),
    ]);
    match entry.ledger {
        LedgerLayout::Sharded { shards } => item.insert(LEDGER_SHARDS.into(), n(shards)),
        LedgerLayout::Unsharded => item.remove(LEDGER_SHARDS),
    };
    if let Some(status) = entry.last_status {
        item.insert("last_status".into(), n(status));
    }
    if let Some(error) = &entry.last_error {
        item.insert("last_error".into(), s(error.clone()));
    }
    let room = MAX_ENTRY_BYTES.saturating_sub(item_size_bytes(&item) + "sample".len());
    let (sample, cut_here) = cut(&entry.payload_sample, room, MAX_SAMPLE_CHARS);
    item.insert("sample".into(), s(sample));
    if cut_here {
        item.insert("sample_cut".into(), AttributeValue::Bool(true));
    }
    item
}

/// An item read back as its entry; `None` for one that is not (skipped, never a reason
/// to fail the read).
fn entry_of(item: &HashMap<String, AttributeValue>) -> Option<RecordedDeadLetter> {
    let text = |k: &str| item.get(k).and_then(|v| v.as_s().ok());
    let number = |k: &str| item.get(k).and_then(|v| v.as_n().ok());
    let (tenant, _shard) = text("event_id")?
        .strip_prefix(PARTITION_PREFIX)?
        .rsplit_once('#')?;
    let (endpoint, event) = text("sk")?.split_once('#')?;
    Some(RecordedDeadLetter {
        tenant_id: TenantId::new(tenant).ok()?,
        endpoint_id: EndpointId::new(endpoint).ok()?,
        event_id: EventId::new(event).ok()?,
        event_type: text("event_type")?.clone(),
        reason: text("reason")?.parse().ok()?,
        last_status: number("last_status").and_then(|v| v.parse().ok()),
        last_error: text("last_error").cloned(),
        attempts: number("attempts")?.parse().ok()?,
        dead_lettered_at: DateTime::parse_from_rfc3339(text("dl_at")?)
            .ok()?
            .with_timezone(&Utc),
        replay_count: number("rc")?.parse().ok()?,
        payload_sample: text("sample").cloned().unwrap_or_default(),
        payload_truncated: matches!(item.get("sample_cut"), Some(AttributeValue::Bool(true))),
        ledger: match number(LEDGER_SHARDS).and_then(|v| v.parse::<u32>().ok()) {
            Some(shards) => LedgerLayout::Sharded { shards },
            None => LedgerLayout::Unsharded,
        },
    })
}

impl DynamoLedger {
    /// [`tern_core::ports::DeliveryLedger::record_dead_letter`]: one `PutItem`, never over
    /// an entry of a later budget.
    pub(crate) async fn put_dead_letter(&self, message: &DeliveryMessage) -> Result<(), PortError> {
        let Some(entry) = RecordedDeadLetter::of(message) else {
            return Ok(());
        };
        let result = self
            .client()
            .put_item()
            .table_name(self.table())
            .set_item(Some(item_of(&entry, self.expires_at())))
            .condition_expression("attribute_not_exists(rc) OR rc <= :rc")
            .expression_attribute_values(":rc", n(entry.replay_count))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.as_service_error(),
                    Some(PutItemError::ConditionalCheckFailedException(_))
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(port_error(e)),
        }
    }

    /// [`tern_core::ports::DeliveryLedger::remove_dead_letter`]: one `DeleteItem` of the
    /// entry of this budget only.
    pub(crate) async fn delete_dead_letter(
        &self,
        message: &DeliveryMessage,
    ) -> Result<(), PortError> {
        let result = self
            .client()
            .delete_item()
            .table_name(self.table())
            .key(
                "event_id",
                s(partition(
                    &message.event.tenant_id,
                    shard(&message.event.id, &message.endpoint_id),
                )),
            )
            .key("sk", s(sort_key(&message.endpoint_id, &message.event.id)))
            .condition_expression("rc = :rc")
            .expression_attribute_values(":rc", n(message.replay_count))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.as_service_error(),
                    Some(DeleteItemError::ConditionalCheckFailedException(_))
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(port_error(e)),
        }
    }

    /// Up to `max` entries of one shard (and `complete` when none is left past them).
    async fn read_shard(
        &self,
        query: &DeadLetterQuery,
        shard: u32,
    ) -> Result<(Vec<RecordedDeadLetter>, bool), PortError> {
        let mut entries = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let mut request = self
                .client()
                .query()
                .table_name(self.table())
                .expression_attribute_values(":p", s(partition(&query.tenant, shard)))
                .limit(i32::try_from(query.max.saturating_add(1)).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start);
            request = match &query.endpoint {
                Some(endpoint) => request
                    .key_condition_expression("event_id = :p AND begins_with(sk, :e)")
                    .expression_attribute_values(":e", s(format!("{endpoint}#"))),
                None => request.key_condition_expression("event_id = :p"),
            };
            let out = request.send().await.map_err(port_error)?;
            entries.extend(out.items().iter().filter_map(entry_of));
            start = out.last_evaluated_key.filter(|k| !k.is_empty());
            if entries.len() > query.max {
                entries.truncate(query.max);
                return Ok((entries, false));
            }
            if start.is_none() {
                return Ok((entries, true));
            }
        }
    }

    /// The pairs of `entries` whose state item says they left the DLQ: delivered, or a
    /// later budget claimed (replayed). Indexes into `entries`.
    async fn gone(&self, entries: &[RecordedDeadLetter]) -> Result<Vec<bool>, PortError> {
        let mut gone = vec![false; entries.len()];
        let key = |e: &RecordedDeadLetter| {
            (
                pair_partition(e.ledger, &e.tenant_id, &e.event_id, &e.endpoint_id),
                format!("state#{}", e.endpoint_id),
            )
        };
        let mut by_key: HashMap<(String, String), Vec<usize>> = HashMap::new();
        for (i, e) in entries.iter().enumerate() {
            by_key.entry(key(e)).or_default().push(i);
        }
        let keys: Vec<(String, String)> = by_key.keys().cloned().collect();
        for chunk in keys.chunks(BATCH_GET_KEYS) {
            let mut wanted: Vec<HashMap<String, AttributeValue>> = chunk
                .iter()
                .map(|(event, sk)| {
                    HashMap::from([
                        ("event_id".to_owned(), s(event.clone())),
                        ("sk".to_owned(), s(sk.clone())),
                    ])
                })
                .collect();
            for attempt in 0..BATCH_GET_TRIES {
                if wanted.is_empty() {
                    break;
                }
                if attempt > 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(50 << attempt)).await;
                }
                let request = KeysAndAttributes::builder()
                    .set_keys(Some(std::mem::take(&mut wanted)))
                    .projection_expression("event_id, sk, delivered_at, claim_key")
                    .build()
                    .map_err(|e| PortError::Rejected(e.to_string()))?;
                let out = self
                    .client()
                    .batch_get_item()
                    .request_items(self.table(), request)
                    .send()
                    .await
                    .map_err(port_error)?;
                for item in out
                    .responses
                    .and_then(|mut r| r.remove(self.table()))
                    .unwrap_or_default()
                {
                    let text = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
                    let (Some(event), Some(sk)) = (text("event_id"), text("sk")) else {
                        continue;
                    };
                    let delivered = item.contains_key("delivered_at");
                    let claimed_replay = item
                        .get("claim_key")
                        .and_then(|v| v.as_n().ok())
                        .and_then(|v| v.parse::<u64>().ok())
                        .map(|k| k >> 32);
                    for &i in by_key.get(&(event, sk)).into_iter().flatten() {
                        gone[i] = delivered
                            || claimed_replay
                                .is_some_and(|r| r > u64::from(entries[i].replay_count));
                    }
                }
                wanted = out
                    .unprocessed_keys
                    .and_then(|mut u| u.remove(self.table()))
                    .map(|k| k.keys)
                    .unwrap_or_default();
            }
            if !wanted.is_empty() {
                return Err(PortError::Unavailable(format!(
                    "{} state items unread after {BATCH_GET_TRIES} tries (throttled)",
                    wanted.len()
                )));
            }
        }
        Ok(gone)
    }

    /// [`tern_core::ports::DeliveryLedger::dead_letters`].
    pub(crate) async fn read_dead_letters(
        &self,
        query: &DeadLetterQuery,
    ) -> Result<DeadLetterRead, PortError> {
        let shards: Vec<Result<(Vec<RecordedDeadLetter>, bool), PortError>> =
            futures::stream::iter(0..DEAD_LETTER_SHARDS)
                .map(|shard| self.read_shard(query, shard))
                .buffer_unordered(PARALLEL_QUERIES)
                .collect()
                .await;
        let mut entries = Vec::new();
        let mut complete = true;
        for read in shards {
            let (mut found, whole) = read?;
            complete &= whole;
            entries.append(&mut found);
        }
        entries.sort_by(|a, b| (&a.endpoint_id, &a.event_id).cmp(&(&b.endpoint_id, &b.event_id)));
        let read = entries.len();
        let gone = self.gone(&entries).await?;
        let mut entries: Vec<RecordedDeadLetter> = entries
            .into_iter()
            .zip(gone)
            .filter_map(|(e, gone)| (!gone).then_some(e))
            .collect();
        if entries.len() > query.max {
            entries.truncate(query.max);
            complete = false;
        }
        Ok(DeadLetterRead {
            entries,
            read,
            complete,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_core::{DeadLetter, DeadLetterReason, Event};

    fn message(payload: &str) -> DeliveryMessage {
        let event: Event = serde_json::from_value(serde_json::json!({
            "id": "evt_1", "type": "order.paid", "tenant_id": "tnt_a",
            "created_at": "2026-11-30T00:00:00Z", "payload": {"text": payload},
        }))
        .unwrap();
        DeliveryMessage::first(event, EndpointId::new("ep_1").unwrap()).dead_lettered(DeadLetter {
            reason: DeadLetterReason::Exhausted,
            last_status: Some(503),
            last_error: Some("http status 503".into()),
            attempts: 7,
            at: "2026-11-30T10:00:00Z".parse().unwrap(),
        })
    }

    #[test]
    fn an_item_reads_back_as_its_entry_and_fits_one_write_unit() {
        let entry = RecordedDeadLetter::of(&message("hello")).unwrap();
        let item = item_of(&entry, n(1));
        assert!(item_size_bytes(&item) <= MAX_ENTRY_BYTES);
        assert_eq!(entry.ledger, LedgerLayout::Sharded { shards: 1 });
        assert_eq!(entry_of(&item), Some(entry.clone()));
        // An entry of a pair of a spread event, and one of an unsharded pair (a version 1
        // message's, or written before the layouts), say where their state items are.
        for ledger in [
            LedgerLayout::Sharded { shards: 32 },
            LedgerLayout::Unsharded,
        ] {
            let e = RecordedDeadLetter {
                ledger,
                ..entry.clone()
            };
            assert_eq!(entry_of(&item_of(&e, n(1))).map(|e| e.ledger), Some(ledger));
        }
        // A big multi-byte payload is cut to fit, on a character boundary.
        let big = RecordedDeadLetter::of(&message(&"é".repeat(2000))).unwrap();
        let item = item_of(&big, n(1));
        assert!(
            item_size_bytes(&item) <= MAX_ENTRY_BYTES,
            "{}",
            item_size_bytes(&item)
        );
        let back = entry_of(&item).unwrap();
        assert!(back.payload_truncated);
        assert!(back.payload_sample.len() < big.payload_sample.len());
        assert!(big.payload_sample.starts_with(&back.payload_sample));
    }
}
