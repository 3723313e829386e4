//! The endpoint log, in the attempts table.
//!
//! An endpoint log item lives in one of its endpoint's [`LOG_SHARDS`] partitions,
//! `event_id` = `log#<endpoint id>#<shard>` (the shard, [`tern_core::spread::log_shard`], by
//! the item's UUID; an event id never holds `#`, so it never meets an event's partition),
//! sort key `<latest attempt start, Unix ms, 13 digits>#<UUIDv7>`, and holds the batch's
//! lines for that endpoint in one string attribute (`entries`, one
//! [`EndpointLogEntry::to_line`] per line). A batch of ten deliveries to one endpoint writes
//! one item of about 700 bytes: one write unit per endpoint per batch, no index (ten failed
//! ones, each line with the start of the receiver's answer, about 1.7 KB: two). Items
//! expire with the attempt log (`expires_at`). Items written before the log was spread
//! are under `log#<endpoint id>`, which readers still read.
//!
//! Scale (`DESIGN.md` §11): a hot endpoint taking 2,000 of 10,000 deliveries a second in
//! mixed batches writes about 893 items a second, 223 on each partition (457 at twice the
//! rate), where one partition would be at 89 % (183 %) of its limit.
//!
//! A page is read newest first from the five partitions at once (at most
//! `limit` items each, so the first round holds the page in the usual case), merged by
//! item key into one stream newest first, and fed to [`LogPager`], which needs nothing but
//! items in non-increasing key order: the cursors stay exact, no line lost or repeated
//! across pages.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;
use tern_core::EndpointId;
use tern_core::delivery_log::{
    EndpointLogEntry, EndpointLogPage, EndpointLogQuery, LOG_ITEM_SPAN_MS, LogPager,
    SPREAD_LOG_ITEM_SPAN_MS,
};
use tern_core::ports::{AttemptRecord, PortError};
use tern_core::spread::{LOG_SHARDS, log_shard};

use crate::DynamoLedger;
use crate::error::port_error;

/// Partition key prefix of endpoint log items.
pub const LOG_PARTITION_PREFIX: &str = "log#";

/// Most Query calls one page of an endpoint log makes: 30 (the five partitions' first
/// pages, then more of whichever runs out first). A partition's first Query reads
/// [`FIRST_LOG_READ`] items (about 70 KB, 9 read units), each next one twice as many, up to
/// DynamoDB's 1 MB: a page reads up to about 20,000 items, where one partition's four
/// Queries of 1 MB read about 5,600. A page that runs out ends where everything above is
/// final, and its cursor carries on from there.
pub const MAX_LOG_QUERIES: usize = 30;

/// Items a partition's first Query of a page reads: 100 ([`tern_core::delivery_log::MAX_LOG_PAGE`]).
pub const FIRST_LOG_READ: i32 = 100;

/// Most items one Query asks for: 1,600 (DynamoDB stops at 1 MB anyway, about 1,400 items).
const MOST_LOG_READ: i32 = 1_600;

/// Attribute holding an item's lines.
const ENTRIES: &str = "entries";

/// The partition of `endpoint`'s log item `item_id` (its UUID).
fn partition(endpoint: &EndpointId, item_id: &str) -> String {
    format!("{LOG_PARTITION_PREFIX}{endpoint}#{}", log_shard(item_id))
}

/// Every partition of `endpoint`'s log: the unspread one (items written before the
/// spread), then its [`LOG_SHARDS`] shards.
pub fn log_partitions(endpoint: &EndpointId) -> Vec<String> {
    std::iter::once(format!("{LOG_PARTITION_PREFIX}{endpoint}"))
        .chain((0..LOG_SHARDS).map(|s| format!("{LOG_PARTITION_PREFIX}{endpoint}#{s}")))
        .collect()
}

/// One partition's stream of items, newest first: what was read and not yet merged.
struct Stream {
    partition: String,
    /// Its key range: `lo`, and `hi` by the span of its items.
    hi: String,
    /// Items its next Query reads.
    next_read: i32,
    items: std::collections::VecDeque<(i64, Vec<EndpointLogEntry>)>,
    start: Option<HashMap<String, AttributeValue>>,
    done: bool,
}

/// Splits one endpoint's entries (any order) into items whose starts are at most
/// [`SPREAD_LOG_ITEM_SPAN_MS`] apart, oldest first.
pub fn split_items(mut entries: Vec<EndpointLogEntry>) -> Vec<Vec<EndpointLogEntry>> {
    entries.sort_by_key(|e| e.started_at);
    let mut items: Vec<Vec<EndpointLogEntry>> = Vec::new();
    for e in entries {
        let ms = e.started_at.timestamp_millis();
        match items.last_mut() {
            Some(item)
                if item.first().is_some_and(|f| {
                    ms - f.started_at.timestamp_millis() <= SPREAD_LOG_ITEM_SPAN_MS
                }) =>
            {
                item.push(e);
            }
            _ => items.push(vec![e]),
        }
    }
    items
}

fn text(item: &HashMap<String, AttributeValue>, name: &str) -> Option<String> {
    match item.get(name) {
        Some(AttributeValue::S(s)) => Some(s.clone()),
        _ => None,
    }
}

impl DynamoLedger {
    /// One item per endpoint (and per [`SPREAD_LOG_ITEM_SPAN_MS`] of starts) for `records`, the
    /// writes made concurrently.
    pub(crate) async fn write_endpoint_log(
        &self,
        records: &[AttemptRecord],
    ) -> Result<(), PortError> {
        let mut by_endpoint: BTreeMap<&EndpointId, Vec<EndpointLogEntry>> = BTreeMap::new();
        for r in records {
            by_endpoint
                .entry(&r.endpoint_id)
                .or_default()
                .push(EndpointLogEntry::of(r));
        }
        let writes = by_endpoint.into_iter().flat_map(|(endpoint, entries)| {
            split_items(entries)
                .into_iter()
                .map(move |item| self.put_log_item(endpoint, item))
        });
        let results = futures::future::join_all(writes).await;
        results
            .into_iter()
            .collect::<Result<Vec<()>, PortError>>()?;
        Ok(())
    }

    async fn put_log_item(
        &self,
        endpoint: &EndpointId,
        entries: Vec<EndpointLogEntry>,
    ) -> Result<(), PortError> {
        let latest = entries
            .iter()
            .map(|e| e.started_at.timestamp_millis())
            .max()
            .unwrap_or_default();
        let lines: Vec<String> = entries.iter().map(EndpointLogEntry::to_line).collect();
        // A fresh UUID per item: two batches with the same latest millisecond never meet.
        let id = uuid::Uuid::now_v7().simple().to_string();
        let sk = format!("{latest:013}#{id}");
        self.client
            .put_item()
            .table_name(&self.table)
            .item("event_id", AttributeValue::S(partition(endpoint, &id)))
            .item("sk", AttributeValue::S(sk))
            .item(ENTRIES, AttributeValue::S(lines.join("\n")))
            .item("expires_at", self.expires_at())
            .send()
            .await
            .map_err(port_error)?;
        Ok(())
    }

    /// The next page of `stream` (newest first, keys between `lo` and its `hi`).
    async fn read_stream(
        &self,
        endpoint: &EndpointId,
        stream: &mut Stream,
        lo: &str,
    ) -> Result<(), PortError> {
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("event_id = :p AND sk BETWEEN :lo AND :hi")
            .expression_attribute_values(":p", AttributeValue::S(stream.partition.clone()))
            .expression_attribute_values(":lo", AttributeValue::S(lo.to_owned()))
            .expression_attribute_values(":hi", AttributeValue::S(stream.hi.clone()))
            .scan_index_forward(false)
            .limit(stream.next_read)
            .set_exclusive_start_key(stream.start.take())
            .send()
            .await
            .map_err(port_error)?;
        for item in out.items.unwrap_or_default() {
            match log_item(endpoint, &item) {
                Some(read) => stream.items.push_back(read),
                None => {
                    tracing::warn!(endpoint_id = %endpoint, "skipping an unreadable endpoint log item");
                }
            }
        }
        stream.start = out.last_evaluated_key.filter(|k| !k.is_empty());
        stream.done = stream.start.is_none();
        stream.next_read = stream.next_read.saturating_mul(2).min(MOST_LOG_READ);
        Ok(())
    }

    /// One page of the log, read newest first through [`LogPager`] with at most
    /// [`MAX_LOG_QUERIES`] Query calls: every partition's items merged into one stream
    /// in key order (a partition's next item is known before any older one is taken).
    pub(crate) async fn read_endpoint_log(
        &self,
        query: &EndpointLogQuery,
    ) -> Result<EndpointLogPage, PortError> {
        let lo = format!("{:013}", query.oldest_item_ms().unwrap_or(0).max(0));
        // `~` sorts after `#`: every item of the newest millisecond is inside. The items
        // written before the spread hold attempts up to a minute older than their key;
        // the shards' up to 5 s.
        let hi = |span_ms: i64| {
            format!(
                "{:013}~",
                query
                    .newest_item_ms_within(span_ms)
                    .unwrap_or(9_999_999_999_999)
                    .clamp(0, 9_999_999_999_999)
            )
        };
        let endpoint = &query.endpoint_id;
        let mut pager = LogPager::new(query.clone());
        let mut streams: Vec<Stream> = log_partitions(endpoint)
            .into_iter()
            .enumerate()
            .map(|(i, partition)| Stream {
                partition,
                hi: hi(if i == 0 {
                    LOG_ITEM_SPAN_MS
                } else {
                    SPREAD_LOG_ITEM_SPAN_MS
                }),
                next_read: FIRST_LOG_READ,
                items: std::collections::VecDeque::new(),
                start: None,
                done: false,
            })
            .collect();
        let mut queries = 0;
        loop {
            // Every partition that may hold the next item must show its next one first.
            let empty: Vec<&mut Stream> = streams
                .iter_mut()
                .filter(|s| s.items.is_empty() && !s.done)
                .collect();
            if !empty.is_empty() {
                if queries + empty.len() > MAX_LOG_QUERIES {
                    return Ok(pager.finish(false));
                }
                queries += empty.len();
                let reads = empty
                    .into_iter()
                    .map(|s| self.read_stream(endpoint, s, &lo));
                for read in futures::future::join_all(reads).await {
                    read?;
                }
                continue;
            }
            let newest = streams
                .iter_mut()
                .filter(|s| !s.items.is_empty())
                .max_by_key(|s| s.items.front().map(|(ms, _)| *ms));
            let Some(stream) = newest else {
                return Ok(pager.finish(true));
            };
            let Some((ms, entries)) = stream.items.pop_front() else {
                return Ok(pager.finish(true));
            };
            if pager.push(ms, entries) {
                return Ok(pager.finish(false));
            }
        }
    }
}

/// An endpoint log item's key time (Unix ms) and entries.
fn log_item(
    endpoint: &EndpointId,
    item: &HashMap<String, AttributeValue>,
) -> Option<(i64, Vec<EndpointLogEntry>)> {
    let sk = text(item, "sk")?;
    let ms = sk.get(..13)?.parse().ok()?;
    let entries = text(item, ENTRIES)?
        .lines()
        .filter_map(|l| EndpointLogEntry::from_line(endpoint, l))
        .collect();
    Some((ms, entries))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;
    use tern_core::EventId;

    fn entry(ms: i64) -> EndpointLogEntry {
        EndpointLogEntry {
            event_id: EventId::new(format!("evt_{ms}")).unwrap(),
            endpoint_id: EndpointId::new("ep_1").unwrap(),
            replay_count: 0,
            attempt: 1,
            takeover: 0,
            started_at: DateTime::from_timestamp_millis(ms).unwrap(),
            latency_ms: 3,
            status: Some(200),
            error_class: None,
            outcome: "delivered".into(),
            response_excerpt: None,
        }
    }

    #[test]
    fn items_span_at_most_five_seconds() {
        let items = split_items(vec![entry(7_000), entry(0), entry(5_000), entry(20_000)]);
        let starts: Vec<Vec<i64>> = items
            .iter()
            .map(|i| i.iter().map(|e| e.started_at.timestamp_millis()).collect())
            .collect();
        assert_eq!(starts, vec![vec![0, 5_000], vec![7_000], vec![20_000]]);
    }
}
