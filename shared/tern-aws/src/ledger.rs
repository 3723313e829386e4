//! DynamoDB delivery ledger: per (event, endpoint) a state item that carries the claim
//! stopping double POSTs, and one item per attempt (the attempt log). Table key:
//! `event_id` (partition): the pair's partition in its message's ledger layout
//! (`crate::ledger_keys`: the event id, or `ev#<tenant>#<event>#<shard>`), `sk` (sort):
//! `state#<endpoint id>` and `attempt#<endpoint id>#<replay, 6 digits>#<attempt, 6 digits>`,
//! with `#t<n, 3 digits>` appended for the n-th takeover of an attempt (a redelivery that
//! took over an expired lease), so no try ever overwrites another's row and a Query of an
//! event's partitions returns its whole history (`crate::ledger_read`). Items expire
//! through the `expires_at` TTL.
//!
//! Every write of a pair goes to the partition its message's layout names
//! ([`DeliveryMessage::ledger_layout`]), which the message keeps for life: a pair's claim
//! and its delivered marker are always on one item.
//!
//! A success has no row of its own: the write that marks the state item delivered also
//! stores the successful attempt's summary on it (`ok_*` attributes, no response
//! excerpt), and [`DeliveryLedger::history`] returns it as the attempt's row. So a
//! delivery that succeeds at once costs two writes (claim, delivered), each on an item
//! under 1 KB (one write capacity unit), and no read. Failed attempts keep their own rows
//! with the response excerpt.
//!
//! Every conditional write here is safe to retry. The SDK sends a write again when a
//! try's answer does not come within the per-try deadline (`crate::budget`), although
//! the first try may have been applied. So each write recognises its own earlier try:
//! - the claim and the takeover store a claim token, unique to one [`DeliveryLedger::claim`]
//!   call (one processing of a message); a retry refused by the condition reads the item
//!   as it is (`ALL_OLD`) and, finding its own token on the same attempt, is granted (or
//!   taken over, with the takeover number on the item), not counted a duplicate;
//! - the delivered marker finds this very try's success on the item;
//! - `finish` is a plain overwrite of the holder's own claim (its condition stays true);
//! - an attempt row that is already there is [`PortError::Rejected`], which callers take
//!   as "recorded".

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use chrono::{DateTime, Utc};
use tern_core::DeliveryMessage;
use tern_core::delivery_log::{EndpointLogPage, EndpointLogQuery, PairState as LatestPairState};
use tern_core::ports::{
    AttemptRecord, Claim, DeliveryLedger, DeliveryState, OUTCOME_ABANDONED, OUTCOME_DUPLICATE,
    PortError,
};
use tern_core::trace::{EventTrace, PairState};
use tern_core::{EndpointId, EventId, TenantId};

use crate::error::port_error;
use crate::ledger_keys::message_partition;

/// The ledger in one table.
#[derive(Clone, Debug)]
pub struct DynamoLedger {
    pub(crate) client: Client,
    pub(crate) table: String,
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

    pub(crate) fn expires_at(&self) -> AttributeValue {
        AttributeValue::N((Utc::now() + self.ttl).timestamp().to_string())
    }

    /// The DynamoDB client (for the waiting list's reads, `crate::waiting`).
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The table's name.
    pub(crate) fn table(&self) -> &str {
        &self.table
    }
}

/// Attributes of the successful attempt's summary on a delivered state item. Short
/// names: they count towards the item's size (DynamoDB bills 1 KB per write unit).
const OK_ATTEMPT: &str = "ok_attempt";
const OK_REPLAY: &str = "ok_replay";
const OK_TAKEOVER: &str = "ok_takeover";
const OK_STARTED_AT: &str = "ok_started_at";
const OK_LATENCY_MS: &str = "ok_latency_ms";
const OK_STATUS: &str = "ok_status";

/// The size DynamoDB bills for an item, in bytes, as documented ("Item sizes and
/// formats", DynamoDB developer guide): each attribute's name in UTF-8 bytes plus its
/// value: a string's UTF-8 bytes, a number's significant digits / 2 + 1 (rounded up, so
/// this is an upper bound), 1 for a boolean or null, binary's length, and 3 plus the
/// elements for a list or map (1 more per element). A write of an item up to 1,024 bytes
/// costs one write unit.
pub fn item_size_bytes(item: &HashMap<String, AttributeValue>) -> usize {
    item.iter().map(|(k, v)| k.len() + value_size(v)).sum()
}

fn value_size(v: &AttributeValue) -> usize {
    match v {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => {
            let digits = n.chars().filter(char::is_ascii_digit).count();
            digits.div_ceil(2) + 1
        }
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::L(l) => 3 + l.iter().map(|e| value_size(e) + 1).sum::<usize>(),
        AttributeValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, e)| k.len() + value_size(e) + 1)
                .sum::<usize>()
        }
        AttributeValue::Ss(l) => l.iter().map(String::len).sum(),
        AttributeValue::Ns(l) => l.iter().map(|n| n.len().div_ceil(2) + 1).sum(),
        AttributeValue::Bs(l) => l.iter().map(|b| b.as_ref().len()).sum(),
        _ => 0,
    }
}

/// The successful attempt stored on a delivered state item, as an attempt row; `None`
/// when the item holds none (not delivered, or delivered by a writer whose attempt has
/// its own row).
pub(crate) fn delivered_row(
    event: &EventId,
    item: &HashMap<String, AttributeValue>,
) -> Result<Option<AttemptRecord>, PortError> {
    let Some(status) = item.get(OK_STATUS) else {
        return Ok(None);
    };
    let bad = |what: &str| {
        PortError::Rejected(format!(
            "delivered state item of event {event} has a bad {what}"
        ))
    };
    let number = |name: &str| -> Result<u64, PortError> {
        match item.get(name) {
            Some(AttributeValue::N(v)) => v.parse::<u64>().map_err(|_| bad(name)),
            _ => Err(bad(name)),
        }
    };
    let small = |name: &str| number(name).and_then(|v| u32::try_from(v).map_err(|_| bad(name)));
    let endpoint = match item.get("endpoint_id") {
        Some(AttributeValue::S(s)) => EndpointId::new(s.clone()).map_err(|_| bad("endpoint_id"))?,
        _ => return Err(bad("endpoint_id")),
    };
    let started_at = match item.get(OK_STARTED_AT) {
        Some(AttributeValue::S(s)) => DateTime::parse_from_rfc3339(s)
            .map_err(|_| bad(OK_STARTED_AT))?
            .with_timezone(&Utc),
        _ => return Err(bad(OK_STARTED_AT)),
    };
    let status = match status {
        AttributeValue::N(v) => v.parse::<u16>().map_err(|_| bad(OK_STATUS))?,
        _ => return Err(bad(OK_STATUS)),
    };
    Ok(Some(AttemptRecord {
        event_id: event.clone(),
        endpoint_id: endpoint,
        replay_count: small(OK_REPLAY)?,
        attempt: small(OK_ATTEMPT)?,
        takeover: small(OK_TAKEOVER)?,
        started_at,
        latency_ms: number(OK_LATENCY_MS)?,
        status: Some(status),
        error_class: None,
        error: None,
        location: None,
        response_excerpt: None,
        excerpt_truncated: false,
        outcome: OUTCOME_DELIVERED.into(),
        next_wait_seconds: None,
    }))
}

/// `outcome` of a successful attempt's row.
const OUTCOME_DELIVERED: &str = "delivered";

fn state_key(m: &DeliveryMessage) -> String {
    format!("state#{}", m.endpoint_id)
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn ms(t: DateTime<Utc>) -> AttributeValue {
    n(t.timestamp_millis())
}

/// Attribute of the state item holding the token of the [`DeliveryLedger::claim`] call
/// that wrote the claim (or its latest takeover): 16 bytes, a UUID v7.
const CLAIM_TOKEN: &str = "claim_token";

/// A fresh claim token: unique to one claim call, so to one processing of a message.
/// Sent unchanged by every try of the call's writes, so a retry can tell its own
/// earlier try from another delivery's.
fn claim_token() -> AttributeValue {
    AttributeValue::B(aws_sdk_dynamodb::primitives::Blob::new(
        uuid::Uuid::now_v7().as_bytes().to_vec(),
    ))
}

/// The claim a holder of `takeover` has: the first claim (0) or the n-th takeover.
fn held(takeover: u32) -> Claim {
    if takeover == 0 {
        Claim::Granted
    } else {
        Claim::TakenOver { takeover }
    }
}

/// Why a claim or takeover write was refused, read from the state item as it is.
enum Refusal {
    /// Delivered, or claimed by a holder that is alive or finished: do not POST.
    Settled(Claim),
    /// This attempt was claimed, never finished, and its lease ran out: take it over.
    Expired,
    /// The item holds this call's own claim of this attempt: an earlier try of the same
    /// write was applied and its answer lost (the SDK retried it). The claim is ours,
    /// at takeover number `takeover` (0 for the first claim).
    Ours {
        /// The item's `claim_takeover`.
        takeover: u32,
    },
}

fn refusal(
    item: Option<&HashMap<String, AttributeValue>>,
    key: u64,
    token: &AttributeValue,
    now: DateTime<Utc>,
    resend: bool,
) -> Refusal {
    let Some(item) = item else {
        return Refusal::Settled(Claim::AlreadyClaimed);
    };
    // Delivered wins over our own claim: a slow earlier holder of this attempt may have
    // delivered it after we took it over; then there is nothing left to send. A manual
    // resend is sent to a delivered pair on purpose: only its claim key counts.
    if !resend && item.contains_key("delivered_at") {
        return Refusal::Settled(Claim::AlreadyDelivered);
    }
    let number = |name: &str| match item.get(name) {
        Some(AttributeValue::N(v)) => v.parse::<i64>().ok(),
        _ => None,
    };
    // Attempt keys use all 64 bits (replay count << 32): compare as u64.
    let same_attempt = matches!(item.get("claim_key"), Some(AttributeValue::N(v)) if v.parse::<u64>().ok() == Some(key));
    let unfinished = matches!(item.get("claim_done"), Some(AttributeValue::Bool(false)));
    if same_attempt && unfinished && item.get(CLAIM_TOKEN) == Some(token) {
        return Refusal::Ours {
            takeover: number("claim_takeover")
                .and_then(|t| u32::try_from(t).ok())
                .unwrap_or(0),
        };
    }
    let expired = number("lease_until").is_some_and(|l| l < now.timestamp_millis());
    if same_attempt && unfinished && expired {
        Refusal::Expired
    } else {
        Refusal::Settled(Claim::AlreadyClaimed)
    }
}

/// The claim conditions' first clause: a pair already delivered refuses every message but
/// a manual resend ([`DeliveryMessage::resend`]), whose attempt key alone decides (it is
/// above every earlier message of the pair, so it is sent once; its own retries follow).
/// A resend that succeeds on a delivered pair cannot store its success on the state item
/// (the first success stays there); it gets its own row, as a taken-over success does.
fn not_delivered_unless_resend(message: &DeliveryMessage) -> &'static str {
    if message.resend {
        ""
    } else {
        "attribute_not_exists(delivered_at) AND "
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

/// Whether an `UpdateItem` was refused on its condition alone (the item is not as the
/// write required), not failed.
fn refused_by_condition<R>(e: &aws_sdk_dynamodb::error::SdkError<UpdateItemError, R>) -> bool {
    matches!(
        e.as_service_error(),
        Some(UpdateItemError::ConditionalCheckFailedException(_))
    )
}

impl DynamoLedger {
    /// An UpdateItem on the delivery's state item (claim, lease, delivered mark).
    fn update_state(
        &self,
        message: &DeliveryMessage,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .key("event_id", AttributeValue::S(message_partition(message)))
            .key("sk", AttributeValue::S(state_key(message)))
    }

    /// Takes over an attempt whose holder's lease ran out unfinished; records the
    /// abandoned try unless its holder did. The condition repeats the check on the item
    /// as it is now, so of two redeliveries racing for it exactly one wins (the winner's
    /// new lease makes the other's condition fail).
    ///
    /// `token` is the claim call's own (see [`claim_token`]): a retried takeover whose
    /// first try was applied finds it on the item and is the takeover it made.
    async fn take_over(
        &self,
        message: &DeliveryMessage,
        lease_until: DateTime<Utc>,
        token: &AttributeValue,
    ) -> Result<Claim, PortError> {
        let now = Utc::now();
        let result = self
            .update_state(message)
            .update_expression(
                "SET lease_until = :lease, claimed_at = :now, expires_at = :exp, claim_token = :tok, \
                 claim_takeover = if_not_exists(claim_takeover, :zero) + :one",
            )
            // Never over this call's own takeover: a retry whose first try was applied
            // must not count a second takeover (its lease can be over already when the
            // lease given was short).
            .condition_expression(format!(
                "{}claim_key = :k AND claim_done = :f AND lease_until < :now \
                 AND (attribute_not_exists(claim_token) OR claim_token <> :tok)",
                not_delivered_unless_resend(message)
            ))
            .expression_attribute_values(":k", n(message.attempt_key()))
            .expression_attribute_values(":lease", ms(lease_until))
            .expression_attribute_values(":now", ms(now))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":f", AttributeValue::Bool(false))
            .expression_attribute_values(":exp", self.expires_at())
            .expression_attribute_values(":tok", token.clone())
            .return_values(ReturnValue::AllOld)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let old = match result {
            Ok(out) => out.attributes.unwrap_or_default(),
            Err(e) => {
                return match e.as_service_error() {
                    Some(UpdateItemError::ConditionalCheckFailedException(c)) => {
                        match refusal(c.item(), message.attempt_key(), token, now, message.resend) {
                            Refusal::Settled(claim) => Ok(claim),
                            // Expired again already: someone else's takeover crashed in
                            // between; leave it to the next redelivery.
                            Refusal::Expired => Ok(Claim::AlreadyClaimed),
                            // Our first try took it over; its answer (the item as it was,
                            // with the holder's start time) is lost: the takeover time is
                            // the best bound for the abandoned try's row.
                            Refusal::Ours { takeover } => Ok(self
                                .abandoned(message, takeover.saturating_sub(1), None, now)
                                .await),
                        }
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
        // A lease ended at 0 was given up by its holder on purpose ([`DeliveryLedger::release`]):
        // that try recorded itself (or sent nothing); no placeholder for it.
        if number("lease_until") == Some(0) {
            return Ok(Claim::TakenOver {
                takeover: previous.saturating_add(1),
            });
        }
        let claimed_at = number("claimed_at").and_then(DateTime::<Utc>::from_timestamp_millis);
        Ok(self.abandoned(message, previous, claimed_at, now).await)
    }

    /// After a takeover at `now` of try `previous` of the message's attempt (claimed at
    /// `claimed_at`, when known): records that try as abandoned, unless its holder
    /// recorded it, and returns the taker's claim.
    async fn abandoned(
        &self,
        message: &DeliveryMessage,
        previous: u32,
        claimed_at: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Claim {
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
        match self
            .put_attempt(&message_partition(message), &abandoned)
            .await
        {
            Ok(()) | Err(PortError::Rejected(_)) => {}
            Err(e) => {
                tracing::warn!(error = %e, event_id = %message.event.id, "abandoned attempt not logged");
            }
        }
        Claim::TakenOver {
            takeover: previous.saturating_add(1),
        }
    }

    /// Marks the claimed attempt finished with `state`; with `listing` (next attempt,
    /// due time) also lists the delivery as waiting, in the same write. Delivered wins
    /// over everything ([`DeliveryLedger::finish`]): a retry or a dead letter never
    /// overwrites a delivered pair's state (it only ends its own claim), and a delivery
    /// marks the pair delivered even when a later attempt holds the claim.
    async fn finish_listing(
        &self,
        message: &DeliveryMessage,
        state: DeliveryState,
        listing: Option<(u32, DateTime<Utc>)>,
    ) -> Result<(), PortError> {
        let state_text = serde_json::to_value(state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let delivered = state == DeliveryState::Delivered;
        let mut update = "SET claim_done = :t, delivery_state = :s, updated_at = :now".to_owned();
        if delivered {
            update.push_str(", delivered_at = if_not_exists(delivered_at, :now)");
        }
        if listing.is_some() {
            update.push_str(", ");
            update.push_str(crate::waiting::LIST);
        }
        let condition = if delivered {
            "claim_key = :k"
        } else {
            "claim_key = :k AND attribute_not_exists(delivered_at)"
        };
        let now = AttributeValue::S(Utc::now().to_rfc3339());
        let mut request = self
            .update_state(message)
            .update_expression(update)
            .condition_expression(condition)
            .expression_attribute_values(":k", n(message.attempt_key()))
            .expression_attribute_values(":t", AttributeValue::Bool(true))
            .expression_attribute_values(":s", AttributeValue::S(state_text))
            .expression_attribute_values(":now", now.clone())
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        if let Some((attempt, due_at)) = listing {
            request = with_listing(request, message, attempt, due_at);
        }
        let refused = match request.send().await {
            Ok(_) => return Ok(()),
            Err(e) => match e.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(c)) => {
                    c.item().cloned().unwrap_or_default()
                }
                _ => return Err(port_error(e)),
            },
        };
        let ours = matches!(refused.get("claim_key"), Some(AttributeValue::N(v)) if v.parse::<u64>().ok() == Some(message.attempt_key()));
        let second = if delivered && refused.contains_key("claim_key") {
            // Another attempt holds the claim (this holder was slow and taken over, and the
            // pair moved on): the receiver got this one, so the pair is delivered. The
            // other holder's claim is left as it is; its own end finds the pair delivered.
            Some(
                self.update_state(message)
                    .update_expression(
                        "SET delivery_state = :s, updated_at = :now, delivered_at = if_not_exists(delivered_at, :now)",
                    )
                    .condition_expression("attribute_exists(claim_key)")
                    .expression_attribute_values(":s", AttributeValue::S("delivered".into()))
                    .expression_attribute_values(":now", now),
            )
        } else if !delivered && ours && refused.contains_key("delivered_at") {
            // Delivered meanwhile (by a slow holder this one took over, or, for a manual
            // resend, before it): the claim ends, the pair stays delivered.
            Some(
                self.update_state(message)
                    .update_expression("SET claim_done = :t, updated_at = :now")
                    .condition_expression("claim_key = :k")
                    .expression_attribute_values(":k", n(message.attempt_key()))
                    .expression_attribute_values(":t", AttributeValue::Bool(true))
                    .expression_attribute_values(":now", now),
            )
        } else {
            None
        };
        let rejected = || {
            PortError::Rejected(format!(
                "event {} endpoint {}: attempt {} holds no claim to finish",
                message.event.id,
                message.endpoint_id,
                message.attempt_key()
            ))
        };
        // The claim is not this attempt's (a later attempt claimed the pair, or it was
        // never claimed): there is nothing of ours to mark, now or on a retry. A retried
        // finish whose first try landed meets a true condition again.
        let Some(second) = second else {
            return Err(rejected());
        };
        match second.send().await {
            Ok(_) => Ok(()),
            Err(e) if refused_by_condition(&e) => Err(rejected()),
            Err(e) => Err(port_error(e)),
        }
    }

    /// Puts one attempt row in `partition` (its pair's), never over a recorded one: only
    /// an [`OUTCOME_ABANDONED`] placeholder may be replaced, by the real result of the same
    /// try (its holder was slow, not dead). An existing row is [`PortError::Rejected`].
    async fn put_attempt(&self, partition: &str, record: &AttemptRecord) -> Result<(), PortError> {
        let mut item: HashMap<String, AttributeValue> =
            serde_dynamo::to_item(record).map_err(|e| PortError::Rejected(e.to_string()))?;
        // The record's own event id is the partition key attribute: it names the pair's
        // partition instead (the readers know the event they read).
        item.insert("event_id".into(), AttributeValue::S(partition.to_owned()));
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
        let token = claim_token();
        let result = self
            .update_state(message)
            // A claimed delivery waits no more: the same write takes it off the waiting
            // list (no index write when it was not on it).
            .update_expression(format!(
                "SET claim_key = :k, lease_until = :lease, claim_done = :f, endpoint_id = :ep, \
                 expires_at = :exp, claimed_at = :now, claim_token = :tok, claim_takeover = :zero \
                 {}",
                crate::waiting::UNLIST
            ))
            // Granted when the pair is not delivered (a manual resend: delivered or not)
            // and nobody claimed it, or only an earlier attempt was claimed, unless an
            // attempt of this budget was dead-lettered: that ends the budget, and only a
            // replay (a later budget) claims the pair again. Before, the next attempt of a
            // budget whose earlier copy was dead-lettered (a takeover past its window,
            // while the retry its crashed holder had queued was on its way) was POSTed and
            // delivered a pair the DLQ held. A takeover of this very attempt is a second
            // write (below), so the new holder learns its takeover number.
            .condition_expression(format!(
                "{}(attribute_not_exists(claim_key) OR claim_key < :k) AND \
                 NOT (claim_done = :t AND delivery_state = :dl AND claim_key >= :budget)",
                not_delivered_unless_resend(message)
            ))
            .expression_attribute_values(":k", n(message.attempt_key()))
            .expression_attribute_values(":t", AttributeValue::Bool(true))
            .expression_attribute_values(":dl", AttributeValue::S("dead_lettered".into()))
            .expression_attribute_values(":budget", n(u64::from(message.replay_count) << 32))
            .expression_attribute_values(":lease", ms(lease_until))
            .expression_attribute_values(":now", ms(now))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":f", AttributeValue::Bool(false))
            .expression_attribute_values(":ep", AttributeValue::S(message.endpoint_id.to_string()))
            .expression_attribute_values(":exp", self.expires_at())
            .expression_attribute_values(":tok", token.clone())
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Claim::Granted),
            Err(e) => match e.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(c)) => {
                    match refusal(c.item(), message.attempt_key(), &token, now, message.resend) {
                        Refusal::Settled(claim) => Ok(claim),
                        // Our own first try was applied: the claim is ours.
                        Refusal::Ours { takeover } => Ok(held(takeover)),
                        Refusal::Expired => self.take_over(message, lease_until, &token).await,
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
        self.finish_listing(message, state, None).await
    }

    async fn finish_retrying(
        &self,
        message: &DeliveryMessage,
        next_attempt: u32,
        due_at: DateTime<Utc>,
    ) -> Result<(), PortError> {
        self.finish_listing(
            message,
            DeliveryState::Retrying,
            Some((next_attempt, due_at)),
        )
        .await
    }

    async fn list_waiting(
        &self,
        message: &DeliveryMessage,
        due_at: DateTime<Utc>,
    ) -> Result<(), PortError> {
        let mut request = self
            .update_state(message)
            .update_expression(format!(
                "SET endpoint_id = :ep, expires_at = :exp, {}",
                crate::waiting::LIST
            ))
            // Never over a claim of this or a later attempt, nor over a delivered pair:
            // then the delivery is on its way, or done, and waits no more.
            .condition_expression(
                "attribute_not_exists(delivered_at) AND (attribute_not_exists(claim_key) OR claim_key < :k)",
            )
            .expression_attribute_values(":k", n(message.attempt_key()))
            .expression_attribute_values(":ep", AttributeValue::S(message.endpoint_id.to_string()))
            .expression_attribute_values(":exp", self.expires_at());
        request = with_listing(request, message, message.attempt, due_at);
        match request.send().await {
            Ok(_) => Ok(()),
            Err(e) if refused_by_condition(&e) => Ok(()),
            Err(e) => Err(port_error(e)),
        }
    }

    async fn unlist_waiting(&self, message: &DeliveryMessage) -> Result<(), PortError> {
        let result = self
            .update_state(message)
            .update_expression(crate::waiting::UNLIST)
            // Only an item that is listed: otherwise there is nothing to write.
            .condition_expression("attribute_exists(wait_ep)")
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) if refused_by_condition(&e) => Ok(()),
            Err(e) => Err(port_error(e)),
        }
    }

    async fn release(
        &self,
        message: &DeliveryMessage,
        takeover: u32,
        due_at: DateTime<Utc>,
    ) -> Result<(), PortError> {
        // One conditional write: the lease ends (0 ms since the epoch) only while the
        // claim is still this try's, unfinished, and the pair not delivered; the returning
        // message's claim then takes it over at once. The same write lists it as waiting
        // for this attempt (the claim had taken it off the list). A retry of an applied
        // write sets the same values again.
        let holder = if takeover == 0 {
            "(attribute_not_exists(claim_takeover) OR claim_takeover = :tk)"
        } else {
            "claim_takeover = :tk"
        };
        let mut request = self
            .update_state(message)
            .update_expression(format!("SET lease_until = :gone, {}", crate::waiting::LIST))
            .condition_expression(format!(
                "claim_key = :k AND claim_done = :f AND attribute_not_exists(delivered_at) \
                 AND {holder}"
            ))
            .expression_attribute_values(":k", n(message.attempt_key()))
            .expression_attribute_values(":f", AttributeValue::Bool(false))
            .expression_attribute_values(":tk", n(i64::from(takeover)))
            .expression_attribute_values(":gone", n(0));
        request = with_listing(request, message, message.attempt, due_at);
        match request.send().await {
            Ok(_) => Ok(()),
            Err(e) if refused_by_condition(&e) => Err(PortError::Rejected(
                "the claim is no longer this try's (finished, taken over, or the pair delivered)"
                    .into(),
            )),
            Err(e) => Err(port_error(e)),
        }
    }

    async fn record_duplicate(&self, message: &DeliveryMessage) -> Result<(), PortError> {
        // One row per attempt, whatever the number of copies: it counts them (`copies`)
        // and keeps when the first was seen. Shaped as an attempt row, so every reader of
        // the log shows it like one.
        let sk = format!(
            "{}#dup",
            attempt_sk(
                &message.endpoint_id,
                message.replay_count,
                message.attempt,
                0
            )
        );
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("event_id", AttributeValue::S(message_partition(message)))
            .key("sk", AttributeValue::S(sk))
            .update_expression(
                "SET endpoint_id = :ep, replay_count = :r, attempt = :a, takeover = :zero, \
                 started_at = if_not_exists(started_at, :now), latency_ms = :zero, \
                 outcome = :o, excerpt_truncated = :f, #e = :why, expires_at = :exp \
                 ADD copies :one",
            )
            .expression_attribute_names("#e", "error")
            .expression_attribute_values(":ep", AttributeValue::S(message.endpoint_id.to_string()))
            .expression_attribute_values(":r", n(message.replay_count))
            .expression_attribute_values(":a", n(message.attempt))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":now", AttributeValue::S(Utc::now().to_rfc3339()))
            .expression_attribute_values(":o", AttributeValue::S(OUTCOME_DUPLICATE.into()))
            .expression_attribute_values(":f", AttributeValue::Bool(false))
            .expression_attribute_values(
                ":why",
                AttributeValue::S(
                    "not sent: a copy of this attempt found the pair delivered and was dropped"
                        .into(),
                ),
            )
            .expression_attribute_values(":exp", self.expires_at())
            .expression_attribute_values(":one", n(1))
            .send()
            .await;
        result.map(|_| ()).map_err(port_error)
    }

    async fn record_attempt(
        &self,
        message: &DeliveryMessage,
        record: &AttemptRecord,
    ) -> Result<(), PortError> {
        self.put_attempt(&message_partition(message), record).await
    }

    async fn record_delivered(
        &self,
        message: &DeliveryMessage,
        record: &AttemptRecord,
    ) -> Result<(), PortError> {
        let now = Utc::now().to_rfc3339();
        // Only the holder of this very try may store its success on the state item, and
        // only once: a holder whose claim was taken over (it was slow, not dead) or that
        // finds the pair delivered by another try writes its own row instead, so no
        // success ever replaces another.
        let holder = if record.takeover == 0 {
            "(attribute_not_exists(claim_takeover) OR claim_takeover = :tk)"
        } else {
            "claim_takeover = :tk"
        };
        let result = self
            .update_state(message)
            .update_expression(
                "SET claim_done = :t, delivery_state = :s, updated_at = :now, delivered_at = :now, \
                 expires_at = :exp, ok_attempt = :a, ok_replay = :r, ok_takeover = :tk, \
                 ok_started_at = :st, ok_latency_ms = :lat, ok_status = :status",
            )
            .condition_expression(format!(
                "claim_key = :k AND attribute_not_exists(delivered_at) AND {holder}"
            ))
            .expression_attribute_values(":k", n(message.attempt_key()))
            .expression_attribute_values(":t", AttributeValue::Bool(true))
            .expression_attribute_values(":s", AttributeValue::S("delivered".into()))
            .expression_attribute_values(":now", AttributeValue::S(now))
            .expression_attribute_values(":exp", self.expires_at())
            .expression_attribute_values(":a", n(record.attempt))
            .expression_attribute_values(":r", n(record.replay_count))
            .expression_attribute_values(":tk", n(record.takeover))
            .expression_attribute_values(":st", AttributeValue::S(record.started_at.to_rfc3339()))
            .expression_attribute_values(":lat", n(record.latency_ms))
            .expression_attribute_values(":status", n(record.status.unwrap_or(0)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) => {
                let Some(UpdateItemError::ConditionalCheckFailedException(c)) =
                    e.as_service_error()
                else {
                    return Err(port_error(e));
                };
                // The SDK retried a write that had landed (its answer was lost): the
                // item already holds this very try's success.
                if let Some(item) = c.item()
                    && delivered_row(&message.event.id, item)
                        .ok()
                        .flatten()
                        .is_some_and(|r| {
                            r.endpoint_id == record.endpoint_id
                                && (r.replay_count, r.attempt, r.takeover, r.started_at)
                                    == (
                                        record.replay_count,
                                        record.attempt,
                                        record.takeover,
                                        record.started_at,
                                    )
                        })
                {
                    return Ok(());
                }
                // Its own row (replacing only an `abandoned` placeholder of this try),
                // then the plain finish, as before the combined write existed. A row this
                // try already has is this try's own success (a retried call): done.
                let logged = match self.put_attempt(&message_partition(message), record).await {
                    Err(PortError::Rejected(_)) => Ok(()),
                    other => other,
                };
                let finished = self.finish(message, DeliveryState::Delivered).await;
                logged.and(finished)
            }
        }
    }

    async fn trace(&self, tenant: &TenantId, event: &EventId) -> Result<EventTrace, PortError> {
        self.read_trace(tenant, event).await
    }

    async fn pair_states(
        &self,
        tenant: &TenantId,
        event: &EventId,
    ) -> Result<Vec<LatestPairState>, PortError> {
        self.read_pair_states(tenant, event).await
    }

    async fn pair_state(
        &self,
        tenant: &TenantId,
        event: &EventId,
        endpoint: &EndpointId,
    ) -> Result<Option<LatestPairState>, PortError> {
        self.read_pair_state(tenant, event, endpoint).await
    }

    async fn append_endpoint_log(&self, records: &[AttemptRecord]) -> Result<(), PortError> {
        self.write_endpoint_log(records).await
    }

    async fn record_dead_letter(&self, message: &DeliveryMessage) -> Result<(), PortError> {
        self.put_dead_letter(message).await
    }

    async fn remove_dead_letter(&self, message: &DeliveryMessage) -> Result<(), PortError> {
        self.delete_dead_letter(message).await
    }

    async fn dead_letters(
        &self,
        query: &tern_core::dead_letters::DeadLetterQuery,
    ) -> Result<tern_core::dead_letters::DeadLetterRead, PortError> {
        self.read_dead_letters(query).await
    }

    async fn endpoint_log(&self, query: &EndpointLogQuery) -> Result<EndpointLogPage, PortError> {
        self.read_endpoint_log(query).await
    }

    async fn history(
        &self,
        tenant: &TenantId,
        event: &EventId,
    ) -> Result<Vec<AttemptRecord>, PortError> {
        self.read_history(tenant, event).await
    }
}

/// The state item of one pair, as [`DeliveryLedger::trace`] returns it. Attributes that
/// are missing or of another type read as absent (an item written by an older build).
pub(crate) fn pair_state(item: &HashMap<String, AttributeValue>) -> Option<PairState> {
    let text = |name: &str| match item.get(name) {
        Some(AttributeValue::S(s)) => Some(s.as_str()),
        _ => None,
    };
    let number = |name: &str| match item.get(name) {
        Some(AttributeValue::N(v)) => v.parse::<i64>().ok(),
        _ => None,
    };
    let time = |name: &str| {
        text(name)
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc))
    };
    let millis = |name: &str| number(name).and_then(DateTime::<Utc>::from_timestamp_millis);
    let endpoint = text("endpoint_id")
        .or_else(|| text("sk").and_then(|sk| sk.strip_prefix("state#")))
        .and_then(|e| EndpointId::new(e).ok())?;
    Some(PairState {
        endpoint_id: endpoint,
        claim_key: match item.get("claim_key") {
            Some(AttributeValue::N(v)) => v.parse::<u64>().ok(),
            _ => None,
        },
        claim_done: matches!(item.get("claim_done"), Some(AttributeValue::Bool(true))),
        state: text("delivery_state")
            .and_then(|s| serde_json::from_value(serde_json::Value::String(s.to_owned())).ok()),
        lease_until: millis("lease_until"),
        claimed_at: millis("claimed_at"),
        delivered_at: time("delivered_at"),
        updated_at: time("updated_at"),
        waiting_attempt: number(crate::waiting::WAIT_ATTEMPT).and_then(|a| u32::try_from(a).ok()),
        waiting_due: millis(crate::waiting::WAIT_DUE),
    })
}

/// `request` with the values of the waiting-list entry for `attempt` of `message`, due at
/// `due_at` (real time): the names [`crate::waiting::LIST`] sets.
fn with_listing(
    mut request: aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder,
    message: &DeliveryMessage,
    attempt: u32,
    due_at: DateTime<Utc>,
) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
    for (name, value) in crate::waiting::listing(
        &message.event.tenant_id,
        &message.endpoint_id,
        &message.event.id,
        attempt,
        due_at,
    ) {
        request = request.expression_attribute_values(name, value);
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_item_reads_back_as_the_pair_state() {
        let item = HashMap::from([
            ("event_id".to_owned(), AttributeValue::S("evt_1".into())),
            ("sk".to_owned(), AttributeValue::S("state#ep_1".into())),
            ("claim_key".to_owned(), n((1u64 << 32) | 3)),
            ("claim_done".to_owned(), AttributeValue::Bool(true)),
            (
                "delivery_state".to_owned(),
                AttributeValue::S("retrying".into()),
            ),
            ("lease_until".to_owned(), n(1_700_000_060_000_i64)),
            ("claimed_at".to_owned(), n(1_700_000_000_000_i64)),
            ("wait_att".to_owned(), n(4)),
            ("wait_due".to_owned(), n(1_700_000_900_000_i64)),
        ]);
        let p = pair_state(&item).expect("a state item");
        assert_eq!(p.endpoint_id.as_str(), "ep_1", "from the sort key");
        assert_eq!((p.claim_replay(), p.claim_attempt()), (Some(1), Some(3)));
        assert!(p.claim_done);
        assert_eq!(p.state, Some(DeliveryState::Retrying));
        assert_eq!(p.claimed_at.map(|t| t.timestamp()), Some(1_700_000_000));
        assert_eq!(p.delivered_at, None);
        assert_eq!(p.waiting_attempt, Some(4));
        assert_eq!(p.waiting_due.map(|t| t.timestamp()), Some(1_700_000_900));
    }

    fn item(token: &AttributeValue, lease_ms: i64) -> HashMap<String, AttributeValue> {
        HashMap::from([
            ("claim_key".to_owned(), n(7)),
            ("claim_done".to_owned(), AttributeValue::Bool(false)),
            ("lease_until".to_owned(), n(lease_ms)),
            ("claim_takeover".to_owned(), n(2)),
            (CLAIM_TOKEN.to_owned(), token.clone()),
        ])
    }

    #[test]
    fn a_refused_write_is_ours_only_with_our_token_on_the_same_unfinished_attempt() {
        let now = Utc::now();
        let live = (now + chrono::Duration::seconds(60)).timestamp_millis();
        let over = (now - chrono::Duration::seconds(1)).timestamp_millis();
        let (mine, theirs) = (claim_token(), claim_token());
        assert_ne!(mine, theirs, "each claim call has its own token");
        let ours = |i: &HashMap<String, AttributeValue>, key| {
            matches!(
                refusal(Some(i), key, &mine, now, false),
                Refusal::Ours { takeover: 2 }
            )
        };
        assert!(ours(&item(&mine, live), 7));
        assert!(
            ours(&item(&mine, over), 7),
            "even when the lease given was short"
        );
        // Another holder's live claim: a true duplicate.
        assert!(matches!(
            refusal(Some(&item(&theirs, live)), 7, &mine, now, false),
            Refusal::Settled(Claim::AlreadyClaimed)
        ));
        assert!(matches!(
            refusal(Some(&item(&theirs, over)), 7, &mine, now, false),
            Refusal::Expired
        ));
        // Our token but a later attempt's key, a finished claim, or a delivered pair.
        assert!(!ours(&item(&mine, live), 8));
        let mut done = item(&mine, live);
        done.insert("claim_done".into(), AttributeValue::Bool(true));
        assert!(!ours(&done, 7));
        let mut delivered = item(&mine, live);
        delivered.insert("delivered_at".into(), AttributeValue::S(now.to_rfc3339()));
        assert!(matches!(
            refusal(Some(&delivered), 7, &mine, now, false),
            Refusal::Settled(Claim::AlreadyDelivered)
        ));
        // A resend is sent to a delivered pair on purpose: its own claim is its own, and
        // another's live claim of the same attempt is a duplicate, delivered or not.
        assert!(matches!(
            refusal(Some(&delivered), 7, &mine, now, true),
            Refusal::Ours { takeover: 2 }
        ));
        let mut theirs_delivered = item(&theirs, live);
        theirs_delivered.insert("delivered_at".into(), AttributeValue::S(now.to_rfc3339()));
        assert!(matches!(
            refusal(Some(&theirs_delivered), 7, &mine, now, true),
            Refusal::Settled(Claim::AlreadyClaimed)
        ));
        assert_eq!(held(0), Claim::Granted);
        assert_eq!(held(3), Claim::TakenOver { takeover: 3 });
    }
}
