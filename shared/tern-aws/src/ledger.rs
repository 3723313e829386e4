//! DynamoDB delivery ledger: per (event, endpoint) a state item that carries the claim
//! stopping double POSTs, and one item per attempt (the attempt log). Table key:
//! `event_id` (partition), `sk` (sort): `state#<endpoint id>` and
//! `attempt#<endpoint id>#<replay, 6 digits>#<attempt, 6 digits>`, with `#t<n, 3 digits>`
//! appended for the n-th takeover of an attempt (a redelivery that took over an expired
//! lease), so one Query returns an event's whole history in order and no try ever
//! overwrites another's row. Items expire through the `expires_at` TTL.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use chrono::{DateTime, Utc};
use tern_core::DeliveryMessage;
use tern_core::ports::{
    AttemptRecord, Claim, DeliveryLedger, DeliveryState, OUTCOME_ABANDONED, PortError,
};
use tern_core::{EndpointId, EventId};

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

/// Why a first claim was refused, read from the state item as it was.
enum Refusal {
    /// Delivered, or claimed by a holder that is alive or finished: do not POST.
    Settled(Claim),
    /// This attempt was claimed, never finished, and its lease ran out: take it over.
    Expired,
}

fn refusal(
    item: Option<&HashMap<String, AttributeValue>>,
    key: u64,
    now: DateTime<Utc>,
) -> Refusal {
    let Some(item) = item else {
        return Refusal::Settled(Claim::AlreadyClaimed);
    };
    if item.contains_key("delivered_at") {
        return Refusal::Settled(Claim::AlreadyDelivered);
    }
    let number = |name: &str| match item.get(name) {
        Some(AttributeValue::N(v)) => v.parse::<i64>().ok(),
        _ => None,
    };
    // Attempt keys use all 64 bits (replay count << 32): compare as u64.
    let same_attempt = matches!(item.get("claim_key"), Some(AttributeValue::N(v)) if v.parse::<u64>().ok() == Some(key));
    let unfinished = matches!(item.get("claim_done"), Some(AttributeValue::Bool(false)));
    let expired = number("lease_until").is_some_and(|l| l < now.timestamp_millis());
    if same_attempt && unfinished && expired {
        Refusal::Expired
    } else {
        Refusal::Settled(Claim::AlreadyClaimed)
    }
}

/// Sort key of one try of an attempt. The first try keeps the original
/// `attempt#<endpoint>#<replay>#<attempt>` shape; the n-th takeover appends `#t<n, 3
/// digits>`, which sorts after the first try and before the next attempt.
fn attempt_sk(endpoint: &EndpointId, replay: u32, attempt: u32, takeover: u32) -> String {
    let base = format!("attempt#{endpoint}#{replay:06}#{attempt:06}");
    if takeover == 0 {
        base
    } else {
        format!("{base}#t{takeover:03}")
    }
}

impl DynamoLedger {
    /// Takes over an attempt whose holder's lease ran out unfinished; records the
    /// abandoned try unless its holder did. The condition repeats the check on the item
    /// as it is now, so of two redeliveries racing for it exactly one wins (the winner's
    /// new lease makes the other's condition fail).
    async fn take_over(
        &self,
        message: &DeliveryMessage,
        lease_until: DateTime<Utc>,
    ) -> Result<Claim, PortError> {
        let now = Utc::now();
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("event_id", AttributeValue::S(message.event.id.to_string()))
            .key("sk", AttributeValue::S(state_key(message)))
            .update_expression(
                "SET lease_until = :lease, claimed_at = :now, expires_at = :exp, \
                 claim_takeover = if_not_exists(claim_takeover, :zero) + :one",
            )
            .condition_expression(
                "attribute_not_exists(delivered_at) AND claim_key = :k AND claim_done = :f AND lease_until < :now",
            )
            .expression_attribute_values(":k", n(message.attempt_key()))
            .expression_attribute_values(":lease", ms(lease_until))
            .expression_attribute_values(":now", ms(now))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":f", AttributeValue::Bool(false))
            .expression_attribute_values(":exp", self.expires_at())
            .return_values(ReturnValue::AllOld)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let old = match result {
            Ok(out) => out.attributes.unwrap_or_default(),
            Err(e) => {
                return match e.as_service_error() {
                    Some(UpdateItemError::ConditionalCheckFailedException(c)) => {
                        Ok(match refusal(c.item(), message.attempt_key(), now) {
                            Refusal::Settled(claim) => claim,
                            // Expired again already: someone else's takeover crashed in
                            // between; leave it to the next redelivery.
                            Refusal::Expired => Claim::AlreadyClaimed,
                        })
                    }
                    _ => Err(port_error(e)),
                };
            }
        };
        let number = |name: &str| match old.get(name) {
            Some(AttributeValue::N(v)) => v.parse::<i64>().ok(),
            _ => None,
        };
        let previous = number("claim_takeover")
            .and_then(|t| u32::try_from(t).ok())
            .unwrap_or(0);
        let claimed_at = number("claimed_at").and_then(DateTime::<Utc>::from_timestamp_millis);
        let abandoned = AttemptRecord {
            event_id: message.event.id.clone(),
            endpoint_id: message.endpoint_id.clone(),
            replay_count: message.replay_count,
            attempt: message.attempt,
            takeover: previous,
            // Items claimed before claimed_at existed: the takeover time is the best bound.
            started_at: claimed_at.unwrap_or(now),
            latency_ms: 0,
            status: None,
            error_class: None,
            error: Some(format!(
                "the sender stopped before recording this attempt (crash or timeout); its lease \
                 ran out and it was taken over at {}; the receiver may have received it",
                now.to_rfc3339()
            )),
            location: None,
            response_excerpt: None,
            excerpt_truncated: false,
            outcome: OUTCOME_ABANDONED.into(),
            next_wait_seconds: None,
        };
        // The claim is ours now: failing here would leave the message to a redelivery
        // that finds a live lease and drops it. The placeholder is for people; log and go on.
        match self.put_attempt(&abandoned).await {
            Ok(()) | Err(PortError::Rejected(_)) => {}
            Err(e) => {
                tracing::warn!(error = %e, event_id = %message.event.id, "abandoned attempt not logged");
            }
        }
        Ok(Claim::TakenOver {
            takeover: previous.saturating_add(1),
        })
    }

    /// Puts one attempt row, never over a recorded one: only an [`OUTCOME_ABANDONED`]
    /// placeholder may be replaced, by the real result of the same try (its holder was
    /// slow, not dead). An existing row is [`PortError::Rejected`].
    async fn put_attempt(&self, record: &AttemptRecord) -> Result<(), PortError> {
        let mut item: HashMap<String, AttributeValue> =
            serde_dynamo::to_item(record).map_err(|e| PortError::Rejected(e.to_string()))?;
        let sk = attempt_sk(
            &record.endpoint_id,
            record.replay_count,
            record.attempt,
            record.takeover,
        );
        item.insert("sk".into(), AttributeValue::S(sk.clone()));
        item.insert("expires_at".into(), self.expires_at());
        let mut request = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item));
        request = if record.outcome == OUTCOME_ABANDONED {
            request.condition_expression("attribute_not_exists(sk)")
        } else {
            request
                .condition_expression("attribute_not_exists(sk) OR outcome = :abandoned")
                .expression_attribute_values(
                    ":abandoned",
                    AttributeValue::S(OUTCOME_ABANDONED.into()),
                )
        };
        match request.send().await {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.as_service_error(),
                    Some(PutItemError::ConditionalCheckFailedException(_))
                ) =>
            {
                Err(PortError::Rejected(format!(
                    "attempt row {sk} of event {} is already recorded; not overwritten",
                    record.event_id
                )))
            }
            Err(e) => Err(port_error(e)),
        }
    }
}

#[async_trait]
impl DeliveryLedger for DynamoLedger {
    async fn claim(
        &self,
        message: &DeliveryMessage,
        lease_until: DateTime<Utc>,
    ) -> Result<Claim, PortError> {
        let now = Utc::now();
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("event_id", AttributeValue::S(message.event.id.to_string()))
            .key("sk", AttributeValue::S(state_key(message)))
            .update_expression(
                "SET claim_key = :k, lease_until = :lease, claim_done = :f, endpoint_id = :ep, \
                 expires_at = :exp, claimed_at = :now, claim_takeover = :zero",
            )
            // Granted when the pair is not delivered and nobody claimed it, or only an
            // earlier attempt was claimed. A takeover of this very attempt is a second
            // write (below), so the new holder learns its takeover number.
            .condition_expression(
                "attribute_not_exists(delivered_at) AND (attribute_not_exists(claim_key) OR claim_key < :k)",
            )
            .expression_attribute_values(":k", n(message.attempt_key()))
            .expression_attribute_values(":lease", ms(lease_until))
            .expression_attribute_values(":now", ms(now))
            .expression_attribute_values(":zero", n(0))
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
                    match refusal(c.item(), message.attempt_key(), now) {
                        Refusal::Settled(claim) => Ok(claim),
                        Refusal::Expired => self.take_over(message, lease_until).await,
                    }
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
        self.put_attempt(record).await
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
                // Oldest first; tries of one attempt in takeover order.
                records.sort_by_key(|r: &AttemptRecord| {
                    (r.started_at, r.replay_count, r.attempt, r.takeover)
                });
                return Ok(records);
            }
        }
    }
}
