//! The delivery message: the versioned JSON body of every message on the delivery queue
//! and the DLQ. One message is one attempt-to-be of one (event, endpoint) pair.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::event::Event;
use crate::ids::{DeliveryId, EndpointId};
use crate::spread::{LedgerLayout, PAIR_SHARDS};
use crate::trace_context::TraceContext;

/// The message format version this build writes: 2. A version also fixes where the
/// delivery ledger keeps the pair's items ([`crate::spread::LedgerLayout`]): version 1
/// under the event id alone, version 2 under `<tenant>#<event>#<shard>`. A message keeps
/// its version for its whole life (retries, requeues, Step Functions waits, the DLQ,
/// replays), so every claim and marker of one pair lands in one layout.
pub const MESSAGE_VERSION: u32 = 2;

/// The oldest message format version this build reads: 1 (messages written before the
/// ledger was sharded, still queued, waiting in Step Functions or dead-lettered).
pub const OLDEST_MESSAGE_VERSION: u32 = 1;

/// Highest attempt number a message may carry: the longest schedule plus the first
/// attempt ([`crate::retry::MAX_SCHEDULE_LEN`] + 1).
pub const MAX_ATTEMPT: u32 = crate::retry::MAX_SCHEDULE_LEN as u32 + 1;

/// Most replays a message may record. Far beyond any real use; bounds the claim key.
pub const MAX_REPLAYS: u32 = 1_000_000;

/// Why a delivery was dead-lettered. Serialized in `snake_case`; these strings are the
/// values an operator filters on (`tern replay --reason gone`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadLetterReason {
    /// Every attempt of the budget failed.
    Exhausted,
    /// The receiver answered 410 Gone: it asked not to be sent this again.
    Gone,
    /// The endpoint is disabled.
    EndpointDisabled,
    /// The endpoint no longer exists.
    EndpointDeleted,
    /// The destination is not allowed (private or metadata address, or not https where
    /// https is required).
    BlockedDestination,
    /// The queue message could not be read as a delivery message.
    MalformedMessage,
    /// The endpoint has no secret (or, for `v1a`, no Ed25519 key) that signs now: Tern
    /// never sends an unsigned webhook.
    NoActiveSecret,
}

impl DeadLetterReason {
    /// Every reason, for parsers and documentation.
    pub const ALL: [Self; 7] = [
        Self::Exhausted,
        Self::Gone,
        Self::EndpointDisabled,
        Self::EndpointDeleted,
        Self::BlockedDestination,
        Self::MalformedMessage,
        Self::NoActiveSecret,
    ];

    /// The `snake_case` name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exhausted => "exhausted",
            Self::Gone => "gone",
            Self::EndpointDisabled => "endpoint_disabled",
            Self::EndpointDeleted => "endpoint_deleted",
            Self::BlockedDestination => "blocked_destination",
            Self::MalformedMessage => "malformed_message",
            Self::NoActiveSecret => "no_active_secret",
        }
    }
}

impl std::fmt::Display for DeadLetterReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for DeadLetterReason {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Self::ALL.iter().map(|r| r.as_str()).collect();
                format!("unknown reason {s:?}; expected one of {}", names.join(", "))
            })
    }
}

/// What the sender records when it dead-letters a delivery. Kept inside the message on
/// the DLQ so an operator can inspect it before replaying.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// Why.
    pub reason: DeadLetterReason,
    /// HTTP status of the last attempt, if one got an answer.
    pub last_status: Option<u16>,
    /// Error class and detail of the last attempt (`"connect: connection refused"`), if any.
    pub last_error: Option<String>,
    /// Attempts made in this budget.
    pub attempts: u32,
    /// When the delivery was dead-lettered.
    pub at: DateTime<Utc>,
}

/// A delivery message, version 1. JSON body of delivery-queue and DLQ messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryMessage {
    /// [`MESSAGE_VERSION`] for a message of a pair this build started;
    /// [`OLDEST_MESSAGE_VERSION`] for one whose pair started before (its ledger items are
    /// unsharded, [`Self::ledger_layout`]). A reader refuses any other version.
    pub version: u32,
    /// `<event id>.<endpoint id>`.
    pub delivery_id: DeliveryId,
    /// The event, payload verbatim.
    pub event: Event,
    /// The endpoint to deliver to. Its URL and secrets are read at send time.
    pub endpoint_id: EndpointId,
    /// 1-based number of the attempt this message asks for, within the current budget.
    pub attempt: u32,
    /// When attempt 1 of the current budget was made; `None` before it.
    #[serde(default)]
    pub first_attempt_at: Option<DateTime<Utc>>,
    /// How many times the delivery was replayed from the DLQ.
    #[serde(default)]
    pub replay_count: u32,
    /// HTTP status of the previous attempt, if any.
    #[serde(default)]
    pub last_status: Option<u16>,
    /// Error of the previous attempt, if any.
    #[serde(default)]
    pub last_error: Option<String>,
    /// Do not attempt before this time. Set when a wait longer than a queue delay is
    /// carried by chained queue delays instead of Step Functions (a message too large for
    /// an execution's input); the sender puts such a message back until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<DateTime<Utc>>,
    /// Set once dead-lettered. A message read from the delivery queue that carries one
    /// was redriven (from the console or by the replay function) and starts a fresh budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter: Option<DeadLetter>,
    /// The dead letter this budget was replayed from, if it was. A replayed budget that is
    /// dead-lettered again before any attempt of its own (a bounce: its endpoint is still
    /// disabled, or gone) keeps that dead letter's last status, last error and time
    /// ([`Self::bounced`]), so a replay into an endpoint that still refuses deliveries
    /// never erases why and since when they failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayed_from: Option<DeadLetter>,
    /// When the current budget began, for a replayed budget ([`Self::replayed`]): its
    /// retry window starts here until its first attempt is made. Without it a replayed
    /// delivery of an old event held back by an open circuit or a pause would count its
    /// window from the event's creation and be dead-lettered `exhausted` unsent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_started_at: Option<DateTime<Utc>>,
    /// True once this attempt is on the ledger's list of waiting deliveries
    /// ([`crate::waiting`]): a retry is listed when it is queued, a first attempt (or a
    /// replayed one) the first time an open circuit or a pause holds it back. The sender
    /// lists a held-back delivery only when this is false, so one that comes back and is
    /// held back again costs no second write.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub listed_waiting: bool,
    /// The slot this delivery holds under its endpoint's rate limit while it waits on the
    /// queue for it ([`crate::rate_limit`]): the sender that receives it back sends it at
    /// that time without taking another. Cleared by every other change of the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_slot: Option<crate::rate_limit::RateSlot>,
    /// A manual resend (the API's `resend` and `recover`): this budget may be sent to a pair
    /// that was already delivered. The ledger's claim lets it past the pair's delivered
    /// mark as long as its attempt key is above the pair's current claim
    /// ([`crate::ports::DeliveryLedger::claim`]); every other message of a delivered pair
    /// is dropped as a duplicate. Kept by its retries and by a replay of its dead letter.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resend: bool,
    /// In a version 2 message, the partitions its event's pairs spread over in the ledger
    /// ([`LedgerLayout::Sharded`]): absent for one, [`PAIR_SHARDS`] for a fan-out of at
    /// least [`crate::spread::SHARDED_FANOUT_MIN`] endpoints. Set by the relay, kept by
    /// every message derived from this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger_shards: Option<u32>,
    /// The W3C trace context this delivery's spans descend from: the relay's fan-out span
    /// when the relay traces, else the event's own ([`Event::trace`]), else none (each
    /// attempt span then starts a trace). Set by the relay; kept by every message derived
    /// from this one (retries, requeues, the dead letter, replays), so one event's
    /// attempts read as one story.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceContext>,
    /// The span of this pair's previous attempt, when it was traced: the next attempt's
    /// span links to it, so a pair's retries are linked in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_attempt: Option<TraceContext>,
    /// How many times in a row this attempt was put back on the queue because the sender
    /// failed on its own side (a throttled or failed AWS call: [`crate::put_back`]): the
    /// next put-back waits longer. 0 (absent) for a message that never was; every other
    /// change of the message (the next attempt, a requeue, a dead letter, a replay)
    /// starts it again at 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub put_back: u32,
    /// The lease, in milliseconds since the epoch, that the processing which put this
    /// message back gave its claim of this attempt before it failed (the claim may or may
    /// not have landed). The ledger lets this message take over a claim of this attempt
    /// that still holds exactly this lease at once, instead of waiting for it to run out
    /// ([`crate::ports::DeliveryLedger::claim`]); a claim with any other lease belongs to
    /// another copy and is left alone. Cleared by every other change of the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_lease_ms: Option<i64>,
    /// How many times in a row this attempt was held back by its endpoint's open circuit
    /// or its receiver's pause: each hold after the first keeps it away longer, towards
    /// the queue's 900 s ([`crate::put_back::held_back_until`]). Reset by the next
    /// attempt, a requeue, a dead letter and a replay.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub held_back: u32,
    /// Set on a message put back after its attempt was delivered (the receiver answered
    /// 2xx) but the delivered marker could not be written (throttled past its retries, or
    /// cut off by the invocation's deadline): the successful attempt, for the marker. The
    /// sender that receives it writes the marker and nothing else (no claim, no POST), so
    /// a delivered pair is never forgotten while the queue can still carry its message.
    /// Cleared by every other change of the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_attempt: Option<crate::ports::AttemptRecord>,
}

/// For `skip_serializing_if`: a zero count is left out of the body.
#[allow(clippy::trivially_copy_pass_by_ref)] // serde passes a reference
fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Why a queue message body is not a delivery message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// The body is not JSON of the delivery-message shape.
    #[error("not a delivery message: {0}")]
    Shape(String),
    /// The body is a delivery message of a version this build does not read.
    #[error(
        "delivery message version {found} is not supported (this build reads {OLDEST_MESSAGE_VERSION} to {MESSAGE_VERSION})"
    )]
    Version {
        /// The version found.
        found: u32,
    },
    /// `attempt` is 0.
    #[error("attempt numbers start at 1")]
    ZeroAttempt,
    /// `attempt` or `replay_count` is beyond what Tern ever writes.
    #[error(
        "attempt {attempt} or replay count {replay_count} is out of range (at most {MAX_ATTEMPT} and {MAX_REPLAYS})"
    )]
    OutOfRange {
        /// The attempt number found.
        attempt: u32,
        /// The replay count found.
        replay_count: u32,
    },
    /// `ledger_shards` is neither absent, 1 nor [`PAIR_SHARDS`]: the ledger's readers
    /// would not find the pair's items.
    #[error("ledger_shards {0} is not one this build reads (1, 32 or {PAIR_SHARDS})")]
    LedgerShards(u32),
    /// `delivery_id` does not match the event and endpoint.
    #[error("delivery id {found} does not match event and endpoint ({expected})")]
    DeliveryIdMismatch {
        /// In the message.
        found: String,
        /// Derived from event id and endpoint id.
        expected: String,
    },
}

// A tenant id is never longer than SQS allows a `MessageGroupId` to be (its alphabet is
// checked in the tests): if either limit changes, the build breaks here.
const _: () = assert!(crate::ids::MAX_ID_LEN <= crate::ports::MAX_GROUP_ID_LEN);

impl DeliveryMessage {
    /// The first message of a delivery, as the relay makes it.
    pub fn first(event: Event, endpoint_id: EndpointId) -> Self {
        Self {
            trace: event.trace.clone(),
            previous_attempt: None,
            version: MESSAGE_VERSION,
            delivery_id: DeliveryId::of(&event.id, &endpoint_id),
            event,
            endpoint_id,
            attempt: 1,
            first_attempt_at: None,
            replay_count: 0,
            last_status: None,
            last_error: None,
            not_before: None,
            dead_letter: None,
            replayed_from: None,
            budget_started_at: None,
            listed_waiting: false,
            rate_slot: None,
            resend: false,
            ledger_shards: None,
            put_back: 0,
            held_lease_ms: None,
            held_back: 0,
            delivered_attempt: None,
        }
    }

    /// A manual resend of `event` to `endpoint_id` (same `webhook-id`), recorded as a
    /// replay: a fresh budget (attempt 1) with replay count `replay_count`, which must be
    /// above the pair's current one ([`crate::delivery_log::PairState::next_replay_count`]) so its
    /// claim outranks every earlier message of the pair. Its retry window starts now.
    pub fn resend(event: Event, endpoint_id: EndpointId, replay_count: u32) -> Self {
        Self {
            replay_count: replay_count.min(MAX_REPLAYS),
            budget_started_at: Some(Utc::now()),
            resend: true,
            ..Self::first(event, endpoint_id)
        }
    }

    /// Where the delivery ledger keeps this pair's items: fixed by the message's version
    /// and [`Self::ledger_shards`], which every message derived from it keeps.
    pub fn ledger_layout(&self) -> LedgerLayout {
        if self.version >= MESSAGE_VERSION {
            LedgerLayout::Sharded {
                shards: self.ledger_shards.unwrap_or(1),
            }
        } else {
            LedgerLayout::Unsharded
        }
    }

    /// This message in `layout`: the version (and spread) that say it. For the relay (the
    /// spread it chose for the event, or the unsharded layout of a fan-out an older build
    /// began and it resumes) and for a manual resend of a pair an older build claimed, so
    /// that every message of a pair uses the pair's layout.
    #[must_use]
    pub fn in_layout(self, layout: LedgerLayout) -> Self {
        let (version, ledger_shards) = match layout {
            LedgerLayout::Unsharded => (OLDEST_MESSAGE_VERSION, None),
            LedgerLayout::Sharded { shards } => (MESSAGE_VERSION, (shards > 1).then_some(shards)),
        };
        Self {
            version,
            ledger_shards,
            ..self
        }
    }

    /// Where this delivery's retry window starts: its budget's first attempt, or, before
    /// one was made, when a replayed budget began, or else the event's creation
    /// ([`crate::decision::retry_window_end`] adds the schedule's span to it).
    pub fn retry_window_start(&self) -> DateTime<Utc> {
        self.first_attempt_at
            .or(self.budget_started_at)
            .unwrap_or(self.event.created_at)
    }

    /// The SQS `MessageGroupId` of this message on the delivery queue: its tenant id, so
    /// SQS fair queues keep one tenant's backlog from delaying the others
    /// ([`crate::ports::QueueEntry::group_id`]). Every path that puts a delivery message on
    /// the queue (relay, retry, requeue, replay, the Step Functions wait) uses this one
    /// value. A tenant id (`[A-Za-z0-9_-]`, 1 to 128 bytes) is always a valid group id, so
    /// no reduction is needed.
    pub fn group_id(&self) -> String {
        self.event.tenant_id.as_str().to_owned()
    }

    /// Parses and checks a queue message body.
    ///
    /// # Errors
    /// [`MessageError`] saying what is wrong.
    pub fn parse(body: &str) -> Result<Self, MessageError> {
        #[derive(Deserialize)]
        struct Versioned {
            version: u32,
        }
        let v: Versioned =
            serde_json::from_str(body).map_err(|e| MessageError::Shape(e.to_string()))?;
        if !(OLDEST_MESSAGE_VERSION..=MESSAGE_VERSION).contains(&v.version) {
            return Err(MessageError::Version { found: v.version });
        }
        let msg: Self =
            serde_json::from_str(body).map_err(|e| MessageError::Shape(e.to_string()))?;
        if msg.attempt == 0 {
            return Err(MessageError::ZeroAttempt);
        }
        if msg.attempt > MAX_ATTEMPT || msg.replay_count > MAX_REPLAYS {
            return Err(MessageError::OutOfRange {
                attempt: msg.attempt,
                replay_count: msg.replay_count,
            });
        }
        if let Some(shards) = msg.ledger_shards
            && shards != 1
            && !crate::spread::is_pair_spread(shards)
        {
            return Err(MessageError::LedgerShards(shards));
        }
        let expected = DeliveryId::of(&msg.event.id, &msg.endpoint_id);
        if msg.delivery_id != expected {
            return Err(MessageError::DeliveryIdMismatch {
                found: msg.delivery_id.to_string(),
                expected: expected.to_string(),
            });
        }
        Ok(msg)
    }

    /// The JSON body. Serializing a delivery message cannot fail (all fields are plain
    /// data and the payload is already valid JSON).
    pub fn to_body(&self) -> String {
        let json = serde_json::to_string(self)
            .unwrap_or_else(|e| unreachable!("delivery message serializes: {e}"));
        // A text field may hold a character SQS refuses (an old message's error text);
        // the escape is lossless and never touches the payload, which cannot hold one.
        crate::sqs_text::escape_json(json)
    }

    /// The message for the next attempt after a failed one.
    pub fn next_attempt(
        &self,
        first_attempt_at: DateTime<Utc>,
        status: Option<u16>,
        error: Option<String>,
    ) -> Self {
        Self {
            attempt: self.attempt.saturating_add(1),
            first_attempt_at: Some(first_attempt_at),
            last_status: status,
            last_error: crate::sqs_text::clean_opt(error.as_deref()),
            not_before: None,
            dead_letter: None,
            // The sender lists the retry when it queues it (`finish_retrying`).
            listed_waiting: true,
            rate_slot: None,
            put_back: 0,
            held_lease_ms: None,
            held_back: 0,
            delivered_attempt: None,
            ..self.clone()
        }
    }

    /// The message that makes the same attempt again after a try that did not count (the
    /// receiver pushed back, or the failure was ours: [`crate::decision::Next::Again`]):
    /// the same attempt number, its retry window anchored at `first_attempt_at` (this
    /// try's start when it was the first), due at `not_before`, and listed as waiting (the
    /// ledger's release listed it, [`crate::ports::DeliveryLedger::release`]).
    pub fn again(
        &self,
        first_attempt_at: DateTime<Utc>,
        status: Option<u16>,
        error: Option<String>,
        not_before: DateTime<Utc>,
    ) -> Self {
        Self {
            first_attempt_at: Some(self.first_attempt_at.unwrap_or(first_attempt_at)),
            last_status: status,
            last_error: crate::sqs_text::clean_opt(error.as_deref()),
            not_before: Some(not_before),
            dead_letter: None,
            listed_waiting: true,
            rate_slot: None,
            put_back: 0,
            held_lease_ms: None,
            held_back: 0,
            delivered_attempt: None,
            ..self.clone()
        }
    }

    /// This message, dead-lettered.
    pub fn dead_lettered(&self, mut dead_letter: DeadLetter) -> Self {
        dead_letter.last_error = crate::sqs_text::clean_opt(dead_letter.last_error.as_deref());
        Self {
            last_status: dead_letter.last_status,
            last_error: dead_letter.last_error.clone(),
            not_before: None,
            dead_letter: Some(dead_letter),
            listed_waiting: false,
            rate_slot: None,
            put_back: 0,
            held_lease_ms: None,
            held_back: 0,
            delivered_attempt: None,
            ..self.clone()
        }
    }

    /// The message a replay puts back on the delivery queue: a fresh attempt budget
    /// (attempt 1), the same event and so the same `webhook-id`, the replay count raised.
    /// It remembers the dead letter it came from ([`Self::replayed_from`]; for a message
    /// SQS moved to the DLQ itself, which carries none, the one its budget came from).
    /// Its retry window starts now ([`Self::budget_started_at`]).
    pub fn replayed(&self) -> Self {
        Self {
            attempt: 1,
            first_attempt_at: None,
            replay_count: self.replay_count.saturating_add(1),
            last_status: None,
            last_error: None,
            not_before: None,
            dead_letter: None,
            listed_waiting: false,
            replayed_from: self
                .dead_letter
                .clone()
                .or_else(|| self.replayed_from.clone()),
            budget_started_at: Some(Utc::now()),
            rate_slot: None,
            put_back: 0,
            held_lease_ms: None,
            held_back: 0,
            delivered_attempt: None,
            ..self.clone()
        }
    }

    /// The dead-letter record of a budget that ends before any attempt of its own was
    /// made, for `reason`: when the budget was replayed, the last status, last error and
    /// time of the dead letter it was replayed from (nothing new was learnt about the
    /// receiver, and the time says since when its deliveries fail); otherwise this
    /// message's own and `now`. `attempts` counts those made in this budget before it
    /// ended: `attempt - 1`.
    pub fn bounced(&self, reason: DeadLetterReason, now: DateTime<Utc>) -> DeadLetter {
        match (&self.replayed_from, self.attempt) {
            (Some(from), 1) => DeadLetter {
                reason,
                last_status: from.last_status,
                last_error: from.last_error.clone(),
                attempts: 0,
                at: from.at,
            },
            _ => DeadLetter {
                reason,
                last_status: self.last_status,
                last_error: self.last_error.clone(),
                attempts: self.attempt.saturating_sub(1),
                at: now,
            },
        }
    }

    /// A key that rises with every attempt of a delivery across replays: replays
    /// dominate attempts. Used for the conditional claim that prevents double POSTs.
    pub fn attempt_key(&self) -> u64 {
        (u64::from(self.replay_count) << 32) | u64::from(self.attempt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EventType, Payload};
    use crate::ids::{EventId, TenantId};

    fn sample() -> DeliveryMessage {
        let event = Event {
            id: EventId::new("evt_1").unwrap(),
            event_type: EventType::new("order.paid").unwrap(),
            tenant_id: TenantId::new("tnt_a").unwrap(),
            created_at: "2026-01-01T00:00:00Z".parse().unwrap(),
            payload: Payload::parse(r#"{"b":1,"a":2,"n":1e2}"#, 1024).unwrap(),
            trace: None,
        };
        DeliveryMessage::first(event, EndpointId::new("ep_1").unwrap())
    }

    #[test]
    fn the_group_id_is_the_tenant_id() {
        let mut m = sample();
        assert_eq!(m.group_id(), "tnt_a");
        m.event.tenant_id = TenantId::new("tnt_other").unwrap();
        assert_eq!(m.group_id(), "tnt_other");
        // Retries and replays stay in the tenant's group.
        let next = m.next_attempt(Utc::now(), Some(500), None);
        assert_eq!(next.group_id(), "tnt_other");
        assert_eq!(next.replayed().group_id(), "tnt_other");
    }

    /// The SQS rule (1-128 characters of `a-zA-Z0-9` and ASCII punctuation) holds for
    /// every tenant id: each character a tenant id may hold, and the longest tenant id.
    #[test]
    fn every_tenant_id_is_a_valid_sqs_group_id() {
        use crate::ports::{MAX_GROUP_ID_LEN, group_id_is_valid};
        let sqs_alphabet: String = ('a'..='z')
            .chain('A'..='Z')
            .chain('0'..='9')
            .chain("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~".chars())
            .collect();
        let mut accepted = 0;
        for c in (0u32..0x3000).filter_map(char::from_u32) {
            let one = c.to_string();
            assert_eq!(
                group_id_is_valid(&one),
                sqs_alphabet.contains(c),
                "group id check disagrees with the SQS alphabet on {c:?}"
            );
            if TenantId::new(one.clone()).is_ok() {
                accepted += 1;
                assert!(
                    sqs_alphabet.contains(c),
                    "tenant ids may hold {c:?}, SQS group ids may not"
                );
            }
        }
        assert_eq!(accepted, 64, "[A-Za-z0-9_-]");
        let longest = "t".repeat(crate::ids::MAX_ID_LEN);
        assert!(TenantId::new(longest.clone()).is_ok());
        assert!(group_id_is_valid(&longest));
        assert!(!group_id_is_valid(&"t".repeat(MAX_GROUP_ID_LEN + 1)));
        assert!(!group_id_is_valid(""));
        assert!(!group_id_is_valid("tnt a"));
    }

    #[test]
    fn round_trips_and_keeps_payload_bytes() {
        let m = sample();
        let body = m.to_body();
        assert!(
            body.contains(r#""payload":{"b":1,"a":2,"n":1e2}"#),
            "{body}"
        );
        assert_eq!(DeliveryMessage::parse(&body).unwrap(), m);
    }

    #[test]
    fn refuses_bad_messages() {
        assert!(matches!(
            DeliveryMessage::parse("nope"),
            Err(MessageError::Shape(_))
        ));
        let body = sample().to_body().replace("\"version\":2", "\"version\":9");
        assert_eq!(
            DeliveryMessage::parse(&body),
            Err(MessageError::Version { found: 9 })
        );
        let body = sample().to_body().replace("evt_1.ep_1", "evt_2.ep_1");
        assert!(matches!(
            DeliveryMessage::parse(&body),
            Err(MessageError::DeliveryIdMismatch { .. })
        ));
    }

    #[test]
    fn a_message_keeps_its_ledger_layout_for_life() {
        let m = sample();
        assert_eq!(m.version, MESSAGE_VERSION);
        assert_eq!(m.ledger_layout(), LedgerLayout::Sharded { shards: 1 });
        let wide = m.clone().in_layout(LedgerLayout::Sharded {
            shards: PAIR_SHARDS,
        });
        let body = wide.to_body();
        assert!(body.contains(r#""ledger_shards":64"#), "{body}");
        let back = DeliveryMessage::parse(&body).unwrap();
        assert_eq!(
            back.ledger_layout(),
            LedgerLayout::Sharded {
                shards: PAIR_SHARDS
            }
        );
        let retried = back.next_attempt(Utc::now(), None, None).replayed();
        assert_eq!(retried.ledger_layout(), wide.ledger_layout());
        assert_eq!(
            DeliveryMessage::parse(&body.replace(r#""ledger_shards":64"#, r#""ledger_shards":7"#)),
            Err(MessageError::LedgerShards(7))
        );
        // A message of an event an earlier build spread over 32 is read, and keeps 32.
        let earlier =
            DeliveryMessage::parse(&body.replace(r#""ledger_shards":64"#, r#""ledger_shards":32"#))
                .expect("32 is read");
        assert_eq!(
            earlier.next_attempt(Utc::now(), None, None).ledger_layout(),
            LedgerLayout::Sharded { shards: 32 }
        );
        // A version 1 message (queued, delayed or dead-lettered before the upgrade) is
        // read, and it and everything derived from it stay unsharded.
        let body = m.to_body().replace("\"version\":2", "\"version\":1");
        let old = DeliveryMessage::parse(&body).expect("version 1 is read");
        assert_eq!(old.ledger_layout(), LedgerLayout::Unsharded);
        let retry = old.next_attempt(Utc::now(), Some(500), None);
        let again = retry.again(Utc::now(), Some(429), None, Utc::now());
        let dead = again.dead_lettered(DeadLetter {
            reason: DeadLetterReason::Exhausted,
            last_status: Some(500),
            last_error: None,
            attempts: 2,
            at: Utc::now(),
        });
        for derived in [&retry, &again, &dead, &dead.replayed()] {
            assert_eq!(derived.ledger_layout(), LedgerLayout::Unsharded);
            let back = DeliveryMessage::parse(&derived.to_body()).unwrap();
            assert_eq!(back.ledger_layout(), LedgerLayout::Unsharded);
        }
        assert_eq!(m.clone().in_layout(LedgerLayout::Unsharded).version, 1);
        assert_eq!(
            old.in_layout(LedgerLayout::Sharded { shards: 1 }).version,
            MESSAGE_VERSION
        );
        let body = sample().to_body().replace("\"version\":2", "\"version\":0");
        assert_eq!(
            DeliveryMessage::parse(&body),
            Err(MessageError::Version { found: 0 })
        );
    }

    #[test]
    fn a_resend_is_a_replay_that_keeps_its_mark() {
        let m = sample();
        // Messages that are not resends look as before: no `resend` key.
        assert!(!m.to_body().contains("resend"), "{}", m.to_body());
        let r = DeliveryMessage::resend(m.event.clone(), m.endpoint_id.clone(), 3);
        assert!(r.resend);
        assert_eq!((r.attempt, r.replay_count), (1, 3));
        assert_eq!(r.event.id, m.event.id, "same webhook-id");
        assert!(r.budget_started_at.is_some());
        assert!(r.attempt_key() > m.attempt_key());
        let body = r.to_body();
        assert!(body.contains(r#""resend":true"#), "{body}");
        assert_eq!(DeliveryMessage::parse(&body).unwrap(), r);
        // Its retries and the replay of its dead letter stay resends.
        let next = r.next_attempt(Utc::now(), Some(500), None);
        assert!(next.resend && next.attempt == 2);
        assert!(next.replayed().resend);
    }

    #[test]
    fn replay_resets_budget_and_keeps_id() {
        let m = sample().next_attempt(Utc::now(), Some(500), None);
        let dl = m.dead_lettered(DeadLetter {
            reason: DeadLetterReason::Exhausted,
            last_status: Some(500),
            last_error: None,
            attempts: 2,
            at: Utc::now(),
        });
        let r = dl.replayed();
        assert_eq!(r.attempt, 1);
        assert_eq!(r.replay_count, 1);
        assert_eq!(r.event.id, m.event.id);
        assert!(r.dead_letter.is_none());
        assert!(r.attempt_key() > dl.attempt_key());
    }

    #[test]
    fn a_bounce_keeps_the_failure_it_was_replayed_from() {
        let t0: DateTime<Utc> = "2026-01-01T10:00:00Z".parse().unwrap();
        let now = Utc::now();
        let dl = sample()
            .next_attempt(t0, Some(410), None)
            .dead_lettered(DeadLetter {
                reason: DeadLetterReason::Gone,
                last_status: Some(410),
                last_error: Some("gone".into()),
                attempts: 2,
                at: t0,
            });
        let replayed = dl.replayed();
        let body = replayed.to_body();
        assert_eq!(DeliveryMessage::parse(&body).unwrap(), replayed);
        let bounce = replayed.bounced(DeadLetterReason::EndpointDisabled, now);
        assert_eq!(bounce.reason, DeadLetterReason::EndpointDisabled);
        assert_eq!(
            (
                bounce.last_status,
                bounce.last_error.as_deref(),
                bounce.at,
                bounce.attempts
            ),
            (Some(410), Some("gone"), t0, 0)
        );
        // Bounced and replayed again: still the first failure.
        let again = replayed.dead_lettered(bounce).replayed();
        assert_eq!(again.replay_count, 2);
        let second = again.bounced(DeadLetterReason::EndpointDisabled, now);
        assert_eq!((second.last_status, second.at), (Some(410), t0));
        // A budget that made an attempt of its own reports that attempt.
        let own = replayed
            .next_attempt(now, Some(503), Some("busy".into()))
            .bounced(DeadLetterReason::EndpointDisabled, now);
        assert_eq!(
            (
                own.last_status,
                own.last_error.as_deref(),
                own.at,
                own.attempts
            ),
            (Some(503), Some("busy"), now, 1)
        );
        // Never replayed: its own (empty) failure, now.
        let fresh = sample().bounced(DeadLetterReason::EndpointDisabled, now);
        assert_eq!(
            (fresh.last_status, fresh.at, fresh.attempts),
            (None, now, 0)
        );
    }
}
