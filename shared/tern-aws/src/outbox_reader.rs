//! The outbox table read back by time window, for `tern audit` ([`OutboxReader`]).
//!
//! The table's only key is `event_id`, so no index finds items by `created_at`: this is a
//! parallel `Scan` (segments read concurrently), with a filter and a projection. DynamoDB
//! bills a Scan by what it reads, not by what the filter keeps: every item of the table,
//! at half a read unit per 4 KB (eventually consistent), whatever the window. The
//! projection only keeps the payloads off the wire. A global secondary index keyed by the
//! creation day would make this a Query of the window alone; docs/operating.md says what
//! each costs and why there is none by default.
//!
//! The filter compares `created_at` as text, the way the outbox writer formats it
//! (RFC 3339, UTC, milliseconds: `2026-12-01T10:00:00.000Z`). An application writing items
//! itself may use another offset or precision, so the server-side range is a day wider on
//! each side and each item's time is parsed and checked here.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnConsumedCapacity};
use chrono::{DateTime, Utc};
use tern_core::TenantId;
use tern_core::outbox::{OUTBOX_RECORD_KIND, event_id_in_key};
use tern_core::ports::PortError;
use tern_core::trace::{OutboxEntry, OutboxReader, OutboxScan};

use crate::error::port_error;

/// Segments scanned concurrently by default: 4. A Scan page is at most 1 MB; four in
/// flight read a 10 GB table in a few minutes without taking a large share of an
/// on-demand table's read throughput.
pub const DEFAULT_SCAN_SEGMENTS: u32 = 4;

/// Most segments a parallel Scan may have (DynamoDB: `TotalSegments` is 1 to 1,000,000);
/// this tool stops at 64.
pub const MAX_SCAN_SEGMENTS: u32 = 64;

/// The outbox table, read by window.
#[derive(Clone, Debug)]
pub struct DynamoOutboxReader {
    client: Client,
    table: String,
    segments: u32,
}

impl DynamoOutboxReader {
    /// Reads `table` with [`DEFAULT_SCAN_SEGMENTS`] segments.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            segments: DEFAULT_SCAN_SEGMENTS,
        }
    }

    /// Reads with `segments` concurrent segments (clamped to 1..=[`MAX_SCAN_SEGMENTS`]).
    #[must_use]
    pub fn with_segments(mut self, segments: u32) -> Self {
        self.segments = segments.clamp(1, MAX_SCAN_SEGMENTS);
        self
    }

    async fn scan_segment(
        &self,
        segment: u32,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
        tenant: Option<&TenantId>,
    ) -> Result<OutboxScan, PortError> {
        let day = chrono::Duration::days(1);
        let text = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let mut filter =
            "#kind = :kind AND #created >= :from AND #created < :to AND attribute_exists(#id)"
                .to_owned();
        if tenant.is_some() {
            filter.push_str(" AND #tenant = :tenant");
        }
        let mut scan = OutboxScan::default();
        let mut start = None;
        loop {
            let mut request = self
                .client
                .scan()
                .table_name(&self.table)
                .segment(i32::try_from(segment).unwrap_or(0))
                .total_segments(i32::try_from(self.segments).unwrap_or(1))
                .filter_expression(&filter)
                .projection_expression("#id, #type, #tenant, #created")
                .expression_attribute_names("#kind", "tern_record")
                .expression_attribute_names("#created", "created_at")
                .expression_attribute_names("#id", "event_id")
                .expression_attribute_names("#type", "event_type")
                .expression_attribute_names("#tenant", "tenant_id")
                .expression_attribute_values(":kind", AttributeValue::S(OUTBOX_RECORD_KIND.into()))
                .expression_attribute_values(":from", AttributeValue::S(text(since - day)))
                .expression_attribute_values(":to", AttributeValue::S(text(until + day)))
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .set_exclusive_start_key(start);
            if let Some(t) = tenant {
                request = request
                    .expression_attribute_values(":tenant", AttributeValue::S(t.to_string()));
            }
            let out = request.send().await.map_err(port_error)?;
            scan.items_scanned += u64::try_from(out.scanned_count()).unwrap_or(0);
            if let Some(units) = out.consumed_capacity().and_then(|c| c.capacity_units()) {
                *scan.read_units.get_or_insert(0.0) += units;
            }
            for item in out.items() {
                match entry(item) {
                    Ok(e) if e.created_at >= since && e.created_at < until => scan.events.push(e),
                    Ok(_) => {}
                    Err(why) => scan.unreadable.push(why),
                }
            }
            start = out.last_evaluated_key;
            if start.is_none() {
                return Ok(scan);
            }
        }
    }
}

/// One projected item as an entry, or why it is not a readable outbox item.
fn entry(item: &HashMap<String, AttributeValue>) -> Result<OutboxEntry, String> {
    let text = |name: &str| match item.get(name) {
        Some(AttributeValue::S(s)) => Some(s.clone()),
        _ => None,
    };
    let id = text("event_id").unwrap_or_default();
    let bad = |what: &str| format!("outbox item {id:?}: {what}");
    let tenant = text("tenant_id").unwrap_or_default();
    let tenant_id = TenantId::new(tenant.clone()).map_err(|e| bad(&format!("tenant_id: {e}")))?;
    // `<tenant>#<id>` from schema version 2, the bare id before.
    let event_id = event_id_in_key(&id, &tenant).map_err(|e| bad(&e.to_string()))?;
    let created = text("created_at").unwrap_or_default();
    let created_at = DateTime::parse_from_rfc3339(&created)
        .map_err(|_| bad(&format!("created_at {created:?} is not RFC 3339")))?
        .with_timezone(&Utc);
    Ok(OutboxEntry {
        event_id,
        event_type: text("event_type").unwrap_or_default(),
        tenant_id,
        created_at,
    })
}

#[async_trait]
impl OutboxReader for DynamoOutboxReader {
    async fn created_between(
        &self,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
        tenant: Option<&TenantId>,
    ) -> Result<OutboxScan, PortError> {
        let segments = (0..self.segments).map(|s| self.scan_segment(s, since, until, tenant));
        let mut all = OutboxScan::default();
        for part in futures::future::join_all(segments).await {
            let part = part?;
            all.events.extend(part.events);
            all.items_scanned += part.items_scanned;
            all.unreadable.extend(part.unreadable);
            if let Some(units) = part.read_units {
                *all.read_units.get_or_insert(0.0) += units;
            }
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: &str, created: &str) -> HashMap<String, AttributeValue> {
        HashMap::from([
            ("event_id".to_owned(), AttributeValue::S(id.into())),
            (
                "event_type".to_owned(),
                AttributeValue::S("order.paid".into()),
            ),
            ("tenant_id".to_owned(), AttributeValue::S("tnt_a".into())),
            ("created_at".to_owned(), AttributeValue::S(created.into())),
        ])
    }

    #[test]
    fn any_rfc3339_offset_is_read_and_bad_items_say_why() {
        let e = entry(&item("evt_1", "2026-12-01T12:00:00+02:00")).expect("readable");
        assert_eq!(e.created_at.to_rfc3339(), "2026-12-01T10:00:00+00:00");
        assert_eq!(e.event_type, "order.paid");
        let why = entry(&item("evt_2", "yesterday")).expect_err("bad time");
        assert!(why.contains("evt_2") && why.contains("RFC 3339"), "{why}");
        assert!(entry(&item("", "2026-12-01T10:00:00Z")).is_err());
        // Version 2 keys: the tenant's own prefix, never another's.
        let v2 = entry(&item("tnt_a#evt_3", "2026-12-01T10:00:00.000Z")).expect("v2 key");
        assert_eq!(v2.event_id.as_str(), "evt_3");
        let why = entry(&item("tnt_b#evt_3", "2026-12-01T10:00:00.000Z")).expect_err("foreign");
        assert!(why.contains("tnt_b#evt_3"), "{why}");
    }
}
