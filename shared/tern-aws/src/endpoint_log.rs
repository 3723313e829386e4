//! The endpoint log, in the attempts table.
//!
//! An endpoint log item lives in a partition of its own endpoint, `event_id` =
//! `log#<endpoint id>` (an event id never holds `#`, so it never meets an event's
//! partition), sort key `<latest attempt start, Unix ms, 13 digits>#<UUIDv7>`, and holds the
//! batch's lines for that endpoint in one string attribute (`entries`, one
//! [`EndpointLogEntry::to_line`] per line). A batch of ten deliveries to one endpoint writes
//! one item of about 700 bytes: one write unit per endpoint per batch, no index (ten failed
//! ones, each line with the start of the receiver's answer, about 1.7 KB: two). Items
//! expire with the attempt log (`expires_at`).

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;
use tern_core::EndpointId;
use tern_core::delivery_log::{
    EndpointLogEntry, EndpointLogPage, EndpointLogQuery, LOG_ITEM_SPAN_MS, LogPager,
};
use tern_core::ports::{AttemptRecord, PortError};

use crate::DynamoLedger;
use crate::error::port_error;

/// Partition key prefix of endpoint log items.
pub const LOG_PARTITION_PREFIX: &str = "log#";

/// Most Query calls one page of an endpoint log makes: 4 (each reads up to 1 MB, about a
/// thousand items of a busy endpoint). A page that runs out ends where everything above is
/// final, and its cursor carries on from there.
pub const MAX_LOG_QUERIES: usize = 4;

/// Attribute holding an item's lines.
const ENTRIES: &str = "entries";

fn partition(endpoint: &EndpointId) -> AttributeValue {
    AttributeValue::S(format!("{LOG_PARTITION_PREFIX}{endpoint}"))
}

/// Splits one endpoint's entries (any order) into items whose starts are at most
/// [`LOG_ITEM_SPAN_MS`] apart, oldest first.
pub fn split_items(mut entries: Vec<EndpointLogEntry>) -> Vec<Vec<EndpointLogEntry>> {
    entries.sort_by_key(|e| e.started_at);
    let mut items: Vec<Vec<EndpointLogEntry>> = Vec::new();
    for e in entries {
        let ms = e.started_at.timestamp_millis();
        match items.last_mut() {
            Some(item)
                if item
                    .first()
                    .is_some_and(|f| ms - f.started_at.timestamp_millis() <= LOG_ITEM_SPAN_MS) =>
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
    /// One item per endpoint (and per [`LOG_ITEM_SPAN_MS`] of starts) for `records`, the
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
        let sk = format!("{latest:013}#{}", uuid::Uuid::now_v7().simple());
        self.client
            .put_item()
            .table_name(&self.table)
            .item("event_id", partition(endpoint))
            .item("sk", AttributeValue::S(sk))
            .item(ENTRIES, AttributeValue::S(lines.join("\n")))
            .item("expires_at", self.expires_at())
            .send()
            .await
            .map_err(port_error)?;
        Ok(())
    }

    /// One page of the log, read newest first through [`LogPager`] with at most
    /// [`MAX_LOG_QUERIES`] Query calls.
    pub(crate) async fn read_endpoint_log(
        &self,
        query: &EndpointLogQuery,
    ) -> Result<EndpointLogPage, PortError> {
        let lo = format!("{:013}", query.oldest_item_ms().unwrap_or(0).max(0));
        // `~` sorts after `#`: every item of the newest millisecond is inside.
        let hi = format!(
            "{:013}~",
            query
                .newest_item_ms()
                .unwrap_or(9_999_999_999_999)
                .clamp(0, 9_999_999_999_999)
        );
        let mut pager = LogPager::new(query.clone());
        let mut start = None;
        for _ in 0..MAX_LOG_QUERIES {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("event_id = :p AND sk BETWEEN :lo AND :hi")
                .expression_attribute_values(":p", partition(&query.endpoint_id))
                .expression_attribute_values(":lo", AttributeValue::S(lo.clone()))
                .expression_attribute_values(":hi", AttributeValue::S(hi.clone()))
                .scan_index_forward(false)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(port_error)?;
            for item in out.items.unwrap_or_default() {
                let Some((ms, entries)) = log_item(&query.endpoint_id, &item) else {
                    tracing::warn!(endpoint_id = %query.endpoint_id, "skipping an unreadable endpoint log item");
                    continue;
                };
                if pager.push(ms, entries) {
                    return Ok(pager.finish(false));
                }
            }
            start = out.last_evaluated_key;
            if start.is_none() {
                return Ok(pager.finish(true));
            }
        }
        Ok(pager.finish(false))
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
    fn items_span_at_most_a_minute() {
        let items = split_items(vec![entry(70_000), entry(0), entry(60_000), entry(200_000)]);
        let starts: Vec<Vec<i64>> = items
            .iter()
            .map(|i| i.iter().map(|e| e.started_at.timestamp_millis()).collect())
            .collect();
        assert_eq!(starts, vec![vec![0, 60_000], vec![70_000], vec![200_000]]);
    }
}
