//! DynamoDB delivery ledger: per (event, endpoint) a state item that carries the claim
//! stopping double POSTs, and one item per attempt (the attempt log). Table key:
//! `event_id` (partition), `sk` (sort): `state#<endpoint id>` and
//! `attempt#<endpoint id>#<replay, 6 digits>#<attempt, 6 digits>`, so one Query returns an
//! event's whole history in order. Items expire through the `expires_at` TTL.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use chrono::{DateTime, Utc};
use tern_core::DeliveryMessage;
use tern_core::EventId;
use tern_core::ports::{AttemptRecord, Claim, DeliveryLedger, DeliveryState, PortError};

use crate::error::port_error;

/// The ledger in one table.
#[derive(Clone, Debug)]
pub struct DynamoLedger {
    client: Client,
    table: String,
    ttl: chrono::Duration,
}

impl DynamoLedger {
    /// The ledger in `table`; items expire `ttl_days` after their last write.
    pub fn new(client: Client, table: impl Into<String>, ttl_days: u32) -> Self {
        Self {
            client,
            table: table.into(),
            ttl: chrono::Duration::days(i64::from(ttl_days)),
        }
    }

    fn expires_at(&self) -> AttributeValue {
        AttributeValue::N((Utc::now() + self.ttl).timestamp().to_string())
    }
}

fn state_key(m: &DeliveryMessage) -> String {
    format!("state#{}", m.endpoint_id)
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn ms(t: DateTime<Utc>) -> AttributeValue {
    n(t.timestamp_millis())
}

#[async_trait]
impl DeliveryLedger for DynamoLedger {
    async fn claim(
        &self,
        message: &DeliveryMessage,
        lease_until: DateTime<Utc>,
    ) -> Result<Claim, PortError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("event_id", AttributeValue::S(message.event.id.to_string()))
            .key("sk", AttributeValue::S(state_key(message)))
            .update_expression(
                "SET claim_key = :k, lease_until = :lease, claim_done = :f, endpoint_id = :ep, expires_at = :exp",
            )
            // Granted when the pair is not delivered and: nobody claimed it, or only an
            // earlier attempt was claimed, or this very attempt was claimed by a holder
            // whose lease ran out without finishing (it crashed).
            .condition_expression(
                "attribute_not_exists(delivered_at) AND (attribute_not_exists(claim_key) OR claim_key < :k \
                 OR (claim_key = :k AND claim_done = :f AND lease_until < :now))",
            )
            .expression_attribute_values(":k", n(message.attempt_key()))
            .expression_attribute_values(":lease", ms(lease_until))
            .expression_attribute_values(":now", ms(Utc::now()))
            .expression_attribute_values(":f", AttributeValue::Bool(false))
            .expression_attribute_values(":ep", AttributeValue::S(message.endpoint_id.to_string()))
            .expression_attribute_values(":exp", self.expires_at())
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Claim::Granted),
            Err(e) => match e.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(c)) => {
                    let delivered = c.item().is_some_and(|i| i.contains_key("delivered_at"));
                    Ok(if delivered {
                        Claim::AlreadyDelivered
                    } else {
                        Claim::AlreadyClaimed
                    })
                }
                _ => Err(port_error(e)),
            },
        }
    }

    async fn finish(
        &self,
        message: &DeliveryMessage,
        state: DeliveryState,
    ) -> Result<(), PortError> {
        let state_text = serde_json::to_value(state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let mut update = "SET claim_done = :t, delivery_state = :s, updated_at = :now".to_owned();
        if state == DeliveryState::Delivered {
            update.push_str(", delivered_at = :now");
        }
        self.client
            .update_item()
            .table_name(&self.table)
            .key("event_id", AttributeValue::S(message.event.id.to_string()))
            .key("sk", AttributeValue::S(state_key(message)))
            .update_expression(update)
            .condition_expression("claim_key = :k")
            .expression_attribute_values(":k", n(message.attempt_key()))
            .expression_attribute_values(":t", AttributeValue::Bool(true))
            .expression_attribute_values(":s", AttributeValue::S(state_text))
            .expression_attribute_values(":now", AttributeValue::S(Utc::now().to_rfc3339()))
            .send()
            .await
            .map_err(port_error)?;
        Ok(())
    }

    async fn record_attempt(&self, record: &AttemptRecord) -> Result<(), PortError> {
        let mut item: HashMap<String, AttributeValue> =
            serde_dynamo::to_item(record).map_err(|e| PortError::Rejected(e.to_string()))?;
        item.insert(
            "sk".into(),
            AttributeValue::S(format!(
                "attempt#{}#{:06}#{:06}",
                record.endpoint_id, record.replay_count, record.attempt
            )),
        );
        item.insert("expires_at".into(), self.expires_at());
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .send()
            .await
            .map_err(port_error)?;
        Ok(())
    }

    async fn history(&self, event: &EventId) -> Result<Vec<AttemptRecord>, PortError> {
        let mut records = Vec::new();
        let mut start = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("event_id = :e AND begins_with(sk, :p)")
                .expression_attribute_values(":e", AttributeValue::S(event.to_string()))
                .expression_attribute_values(":p", AttributeValue::S("attempt#".into()))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(port_error)?;
            for item in out.items.unwrap_or_default() {
                records.push(
                    serde_dynamo::from_item(item)
                        .map_err(|e| PortError::Rejected(e.to_string()))?,
                );
            }
            start = out.last_evaluated_key;
            if start.is_none() {
                records.sort_by_key(|r: &AttemptRecord| r.started_at);
                return Ok(records);
            }
        }
    }
}
