//! Fan-out checkpoints ([`tern_core::fanout`]) in the attempts table: one item per event
//! whose fan-out an invocation cut short, beside the event's delivery state items:
//! `event_id` (partition) = the event, `sk` = [`CHECKPOINT_SK`] `#<tenant id>` (event ids
//! are per tenant: two tenants' events with one id have two checkpoints), `fanout_through` = the
//! last endpoint id through which every message is sent, `expires_at` = its TTL.
//!
//! Cost: only events with at least [`tern_core::fanout::CHECKPOINT_MIN_FANOUT`] subscribed
//! endpoints pay anything: one strongly consistent GetItem (1 read unit: the item is under
//! 4 KB) per relay of such an event, and one PutItem (1 write unit: under 1 KB) per
//! invocation that stops inside its fan-out. The attempt log's readers skip the item
//! ([`crate::DynamoLedger`]'s history).

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::Utc;
use tern_core::fanout::FanOutCheckpoints;
use tern_core::ports::PortError;
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

/// Days a checkpoint lives (the `expires_at` TTL): 8. A record can be relayed again for as
/// long as its outbox item exists (7 days, `delivery.outboxTtlDays` in
/// infra/settings.json: `tern relay-failures --retry` re-reads it), plus a day of margin.
pub const CHECKPOINT_TTL_DAYS: i64 = 8;

/// Checkpoints in the attempts table.
#[derive(Clone, Debug)]
pub struct DynamoFanOutCheckpoints {
    client: Client,
    table: String,
}

impl DynamoFanOutCheckpoints {
    /// Checkpoints in `table` (the attempts table).
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }
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
    ) -> Result<Option<EndpointId>, PortError> {
        let [k1, k2] = key(tenant, event);
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(k1.0, k1.1)
            .key(k2.0, k2.1)
            // A checkpoint written by the invocation just before must be seen.
            .consistent_read(true)
            // Only the attribute the relay may read (its IAM policy allows no other).
            .projection_expression("#t")
            .expression_attribute_names("#t", THROUGH_ATTRIBUTE)
            .send()
            .await
            .map_err(port_error)?;
        match out.item().and_then(|i| i.get(THROUGH_ATTRIBUTE)) {
            None => Ok(None),
            Some(AttributeValue::S(id)) => EndpointId::new(id.clone()).map(Some).map_err(|e| {
                PortError::Rejected(format!("fan-out checkpoint of event {event}: {e}"))
            }),
            Some(other) => Err(PortError::Rejected(format!(
                "fan-out checkpoint of event {event} is not a string: {other:?}"
            ))),
        }
    }

    async fn write(
        &self,
        tenant: &TenantId,
        event: &EventId,
        through: &EndpointId,
    ) -> Result<(), PortError> {
        let [k1, k2] = key(tenant, event);
        let expires = (Utc::now() + chrono::Duration::days(CHECKPOINT_TTL_DAYS)).timestamp();
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(k1.0, k1.1)
            .item(k2.0, k2.1)
            .item(THROUGH_ATTRIBUTE, AttributeValue::S(through.to_string()))
            .item("expires_at", AttributeValue::N(expires.to_string()))
            // Never back: a retried write (its first try applied) or a stale one changes
            // nothing. DynamoDB compares strings by UTF-8 bytes, as the relay sorts ids.
            .condition_expression("attribute_not_exists(sk) OR #t < :t")
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
        let attributes = ["event_id", "sk", THROUGH_ATTRIBUTE, "expires_at"];
        let sam = include_str!("../../../infra/template.yaml");
        let sam_list = format!("dynamodb:Attributes: [{}]", attributes.join(", "));
        assert!(sam.contains(&sam_list), "template.yaml lacks {sam_list}");
        let cdk = include_str!("../../../infra/lib/constructs/functions.ts");
        let quoted: Vec<String> = attributes.iter().map(|a| format!("'{a}'")).collect();
        let cdk_list = format!("RELAY_CHECKPOINT_ATTRIBUTES = [{}]", quoted.join(", "));
        assert!(cdk.contains(&cdk_list), "functions.ts lacks {cdk_list}");
    }
}
