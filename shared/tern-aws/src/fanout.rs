//! Fan-out records ([`tern_core::fanout`]) in the attempts table: one item per event with
//! at least [`tern_core::fanout::CHECKPOINT_MIN_FANOUT`] subscribed endpoints, in the
//! event's unsharded partition (`crate::ledger_keys`): `event_id` (partition) = the event
//! id, `sk` = [`CHECKPOINT_SK`] `#<tenant id>` (event ids are per tenant: two tenants'
//! events with one id have two records), and:
//!
//! | attribute | meaning |
//! | --- | --- |
//! | `fanout_shards` | the partitions the event's pairs spread over in the sharded ledger layout ([`tern_core::spread::LedgerLayout::Sharded`]); absent on a record an older build wrote: its fan-out is unsharded |
//! | `fanout_through` | the last endpoint id through which every message is sent, once an invocation stopped inside the fan-out |
//! | `expires_at` | its TTL: [`RECORD_MARGIN_DAYS`] after the ledger's own, since the ledger's readers read the spread here |
//!
//! Cost: only events with at least that many endpoints pay anything: one strongly
//! consistent GetItem (1 read unit: the item is under 4 KB) and one conditional PutItem (1
//! write unit: under 1 KB) per relay of such an event, one more PutItem per invocation
//! that stops inside its fan-out; a reader of such an event's ledger reads the item (1
//! read unit). The attempt log's readers skip the item ([`crate::DynamoLedger`]'s
//! history).

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::Utc;
use tern_core::fanout::{FanOutCheckpoints, FanOutRecord};
use tern_core::ports::PortError;
use tern_core::spread::LedgerLayout;
use tern_core::{EndpointId, EventId, TenantId};

use crate::error::port_error;

/// Start of the sort key of an event's checkpoint item in the attempts table, followed by
/// `#<tenant id>` ([`checkpoint_sk`]). Attempt rows start with `attempt#`, state items with
/// `state#`: no collision.
pub const CHECKPOINT_SK: &str = "relay#fanout";

/// The sort key of `tenant`'s checkpoint: [`CHECKPOINT_SK`] `#<tenant id>`.
pub fn checkpoint_sk(tenant: &TenantId) -> String {
    format!("{CHECKPOINT_SK}#{tenant}")
}

/// True for the sort key of any tenant's checkpoint item (the attempt log skips them).
pub fn is_checkpoint_sk(sk: &str) -> bool {
    sk.strip_prefix(CHECKPOINT_SK)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('#'))
}

/// Attribute holding the checkpoint's endpoint id.
pub const THROUGH_ATTRIBUTE: &str = "fanout_through";

/// Attribute holding the partitions the event's pairs spread over.
pub const SHARDS_ATTRIBUTE: &str = "fanout_shards";

/// Days a record outlives the ledger's items (`TERN_ATTEMPT_LOG_TTL_DAYS` after their last
/// write): 60. A pair's items are written again by its retries (at most about a day and a
/// half of schedule) and by replays of its dead letters (the DLQ keeps them 14 days), so a
/// record that lived only as long as the ledger's TTL would leave readers without the
/// spread of an event whose pairs a replay refreshed. Four replays in a row of one pair,
/// each near the end of its DLQ retention, could outlive it: its history would then show
/// only partition 0. Never shorter than the 8 days a record can be relayed again (the
/// outbox's 7 days, `delivery.outboxTtlDays` in infra/settings.json, plus one).
pub const RECORD_MARGIN_DAYS: i64 = 60;

/// Checkpoints in the attempts table.
#[derive(Clone, Debug)]
pub struct DynamoFanOutCheckpoints {
    client: Client,
    table: String,
    ttl: chrono::Duration,
}

impl DynamoFanOutCheckpoints {
    /// Records in `table` (the attempts table), whose ledger items expire
    /// `ledger_ttl_days` after their last write.
    pub fn new(client: Client, table: impl Into<String>, ledger_ttl_days: u32) -> Self {
        Self {
            client,
            table: table.into(),
            ttl: chrono::Duration::days(i64::from(ledger_ttl_days).max(8) + RECORD_MARGIN_DAYS),
        }
    }

    fn expires_at(&self) -> AttributeValue {
        AttributeValue::N((Utc::now() + self.ttl).timestamp().to_string())
    }
}

/// The layout an item's `fanout_shards` says: none (an older build's record) is
/// unsharded.
fn layout_of(item: &std::collections::HashMap<String, AttributeValue>) -> LedgerLayout {
    match item.get(SHARDS_ATTRIBUTE).and_then(|v| v.as_n().ok()) {
        Some(n) => LedgerLayout::Sharded {
            shards: n
                .parse::<u32>()
                .unwrap_or(1)
                .clamp(1, tern_core::spread::PAIR_SHARDS),
        },
        None => LedgerLayout::Unsharded,
    }
}

fn shards_value(layout: LedgerLayout) -> Option<AttributeValue> {
    match layout {
        LedgerLayout::Unsharded => None,
        LedgerLayout::Sharded { shards } => Some(AttributeValue::N(shards.to_string())),
    }
}

/// The spread of `tenant`'s `event` as its fan-out record says, read consistently with a
/// Query of the one item (the api and console functions may Query the attempts table,
/// not GetItem it): `None` without a record (a fan-out of fewer than
/// [`tern_core::fanout::CHECKPOINT_MIN_FANOUT`] endpoints: one partition).
pub(crate) async fn read_layout(
    client: &Client,
    table: &str,
    tenant: &TenantId,
    event: &EventId,
) -> Result<Option<LedgerLayout>, PortError> {
    let out = client
        .query()
        .table_name(table)
        .key_condition_expression("event_id = :e AND sk = :sk")
        .expression_attribute_values(":e", AttributeValue::S(event.to_string()))
        .expression_attribute_values(":sk", AttributeValue::S(checkpoint_sk(tenant)))
        .projection_expression("#n")
        .expression_attribute_names("#n", SHARDS_ATTRIBUTE)
        .consistent_read(true)
        .send()
        .await
        .map_err(port_error)?;
    Ok(out.items().first().map(layout_of))
}

fn key(tenant: &TenantId, event: &EventId) -> [(String, AttributeValue); 2] {
    [
        ("event_id".into(), AttributeValue::S(event.to_string())),
        ("sk".into(), AttributeValue::S(checkpoint_sk(tenant))),
    ]
}

#[async_trait]
impl FanOutCheckpoints for DynamoFanOutCheckpoints {
    async fn read(
        &self,
        tenant: &TenantId,
        event: &EventId,
    ) -> Result<Option<FanOutRecord>, PortError> {
        let [k1, k2] = key(tenant, event);
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(k1.0, k1.1)
            .key(k2.0, k2.1)
            // A checkpoint written by the invocation just before must be seen.
            .consistent_read(true)
            // Only the attributes the relay may read (its IAM policy allows no other).
            .projection_expression("#t, #n")
            .expression_attribute_names("#t", THROUGH_ATTRIBUTE)
            .expression_attribute_names("#n", SHARDS_ATTRIBUTE)
            .send()
            .await
            .map_err(port_error)?;
        let Some(item) = out.item() else {
            return Ok(None);
        };
        let through = match item.get(THROUGH_ATTRIBUTE) {
            None => None,
            Some(AttributeValue::S(id)) => Some(EndpointId::new(id.clone()).map_err(|e| {
                PortError::Rejected(format!("fan-out checkpoint of event {event}: {e}"))
            })?),
            Some(other) => {
                return Err(PortError::Rejected(format!(
                    "fan-out checkpoint of event {event} is not a string: {other:?}"
                )));
            }
        };
        Ok(Some(FanOutRecord {
            through,
            layout: layout_of(item),
        }))
    }

    async fn begin(
        &self,
        tenant: &TenantId,
        event: &EventId,
        layout: LedgerLayout,
    ) -> Result<(), PortError> {
        let [k1, k2] = key(tenant, event);
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(k1.0, k1.1)
            .item(k2.0, k2.1)
            .item("expires_at", self.expires_at());
        let result = match shards_value(layout) {
            Some(v) => result.item(SHARDS_ATTRIBUTE, v),
            None => result,
        }
        // Never over a record: a retried invocation keeps the spread its first chose.
        .condition_expression("attribute_not_exists(sk)")
        .send()
        .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) => match e.as_service_error() {
                Some(PutItemError::ConditionalCheckFailedException(_)) => Ok(()),
                _ => Err(port_error(e)),
            },
        }
    }

    async fn write(
        &self,
        tenant: &TenantId,
        event: &EventId,
        through: &EndpointId,
        layout: LedgerLayout,
    ) -> Result<(), PortError> {
        let [k1, k2] = key(tenant, event);
        let request = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(k1.0, k1.1)
            .item(k2.0, k2.1)
            .item(THROUGH_ATTRIBUTE, AttributeValue::S(through.to_string()))
            .item("expires_at", self.expires_at());
        let request = match shards_value(layout) {
            Some(v) => request.item(SHARDS_ATTRIBUTE, v),
            None => request,
        };
        let result = request
            // Never back: a retried write (its first try applied) or a stale one changes
            // nothing. DynamoDB compares strings by UTF-8 bytes, as the relay sorts ids.
            .condition_expression("attribute_not_exists(#t) OR #t < :t")
            .expression_attribute_names("#t", THROUGH_ATTRIBUTE)
            .expression_attribute_values(":t", AttributeValue::S(through.to_string()))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) => match e.as_service_error() {
                Some(PutItemError::ConditionalCheckFailedException(_)) => Ok(()),
                _ => Err(port_error(e)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tenant_has_its_own_checkpoint_and_the_log_knows_them_all() {
        let a = checkpoint_sk(&TenantId::new("tnt_a").unwrap());
        let b = checkpoint_sk(&TenantId::new("tnt_b").unwrap());
        assert_eq!(a, "relay#fanout#tnt_a");
        assert_ne!(a, b);
        assert!(is_checkpoint_sk(&a) && is_checkpoint_sk(CHECKPOINT_SK));
        assert!(!is_checkpoint_sk("relay#fanoutx") && !is_checkpoint_sk("state#ep_1"));
    }

    /// The relay's IAM policy lets it touch only these attributes of the attempts table
    /// (a `dynamodb:Attributes` condition in both stacks): the item must use no other.
    #[test]
    fn both_stacks_allow_exactly_the_item_attributes() {
        let attributes = [
            "event_id",
            "sk",
            THROUGH_ATTRIBUTE,
            SHARDS_ATTRIBUTE,
            "expires_at",
        ];
        let sam = include_str!("../../../infra/template.yaml");
        let sam_list = format!("dynamodb:Attributes: [{}]", attributes.join(", "));
        assert!(sam.contains(&sam_list), "template.yaml lacks {sam_list}");
        let cdk = include_str!("../../../infra/lib/constructs/functions.ts");
        let quoted: Vec<String> = attributes.iter().map(|a| format!("'{a}'")).collect();
        let cdk_list = format!("RELAY_CHECKPOINT_ATTRIBUTES = [{}]", quoted.join(", "));
        assert!(cdk.contains(&cdk_list), "functions.ts lacks {cdk_list}");
    }
}
