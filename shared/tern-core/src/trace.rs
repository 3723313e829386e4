//! What the stores hold about an event, read back for an audit ("is anything lost?"):
//! the outbox items created in a time window, and an event's delivery state items beside
//! its attempt log. Read-only views; the writers are the relay, the sender and the
//! application's outbox transaction.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::ids::{EndpointId, EventId, TenantId};
use crate::ports::{AttemptRecord, DeliveryState, PortError};

/// One (event, endpoint) pair's state item in the ledger, as stored: the claim that stops
/// double POSTs and how the claimed attempt ended. Written by the sender (the claim, then
/// the finish or the delivered mark); the relay writes none, so a pair no sender has
/// claimed yet has no state item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PairState {
    /// The endpoint.
    pub endpoint_id: EndpointId,
    /// The claimed attempt's key ([`crate::DeliveryMessage::attempt_key`]: replay count
    /// in the high 32 bits, attempt number in the low 32).
    pub claim_key: Option<u64>,
    /// True once the claimed attempt finished (delivered, retry queued, dead-lettered).
    pub claim_done: bool,
    /// How the claimed attempt ended, once it did.
    pub state: Option<DeliveryState>,
    /// When the claim's lease runs out: a redelivery may take an unfinished claim over
    /// after this.
    pub lease_until: Option<DateTime<Utc>>,
    /// When the claim (or its latest takeover) was written.
    pub claimed_at: Option<DateTime<Utc>>,
    /// When the pair was delivered.
    pub delivered_at: Option<DateTime<Utc>>,
    /// When the item was last finished.
    pub updated_at: Option<DateTime<Utc>>,
    /// The attempt the pair waits for, while it is on the waiting list
    /// ([`crate::waiting`]): listed by a retry's finish or by a first hold-back, removed by
    /// the next claim.
    pub waiting_attempt: Option<u32>,
    /// When that attempt is due (real time), while it is on the waiting list.
    pub waiting_due: Option<DateTime<Utc>>,
}

impl PairState {
    /// Replay count of the claimed attempt.
    pub fn claim_replay(&self) -> Option<u32> {
        self.claim_key
            .map(|k| u32::try_from(k >> 32).unwrap_or(u32::MAX))
    }

    /// Attempt number of the claimed attempt.
    pub fn claim_attempt(&self) -> Option<u32> {
        self.claim_key.map(|k| (k & u64::from(u32::MAX)) as u32)
    }
}

/// Everything the ledger holds for one event: its pairs' state items and its attempt log
/// (oldest first). One DynamoDB Query of the event's partition.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventTrace {
    /// One per endpoint a sender claimed a delivery for.
    pub pairs: Vec<PairState>,
    /// Every recorded attempt, oldest first (a delivered attempt included, as
    /// [`crate::ports::DeliveryLedger::history`] returns it).
    pub attempts: Vec<AttemptRecord>,
    /// Read units the read consumed, when the store reported them.
    pub read_units: Option<f64>,
}

/// An outbox item as an audit lists it: its identity, no payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OutboxEntry {
    /// The event id (the `webhook-id`).
    pub event_id: EventId,
    /// Its event type, as written.
    pub event_type: String,
    /// Its tenant.
    pub tenant_id: TenantId,
    /// When the application created it.
    pub created_at: DateTime<Utc>,
}

/// The outbox items of a window, and what reading them cost.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OutboxScan {
    /// The Tern outbox items created in the window, in no particular order.
    pub events: Vec<OutboxEntry>,
    /// Items the store read to find them (a Scan reads the whole table).
    pub items_scanned: u64,
    /// Read units consumed, when the store reported them.
    pub read_units: Option<f64>,
    /// Items of the window that are not readable outbox items (a bad id or time), with
    /// why: the relay parks them as poison, so the audit lists them apart.
    pub unreadable: Vec<String>,
}

/// Reads the outbox table back (the audit's side; the relay reads the stream).
#[async_trait]
pub trait OutboxReader: Send + Sync {
    /// Every Tern outbox item (`tern_record` = [`crate::outbox::OUTBOX_RECORD_KIND`])
    /// whose `created_at` is at or after `since` and before `until`, of `tenant` only when
    /// given. Items past their TTL are gone from the table and not listed.
    ///
    /// # Errors
    /// [`PortError`] when the table cannot be read.
    async fn created_between(
        &self,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
        tenant: Option<&TenantId>,
    ) -> Result<OutboxScan, PortError>;
}

/// Messages in a queue, as SQS approximates them (`GetQueueAttributes`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct QueueCounts {
    /// Available to receive (`ApproximateNumberOfMessages`).
    pub visible: u64,
    /// Received and not yet deleted (`ApproximateNumberOfMessagesNotVisible`).
    pub in_flight: u64,
    /// Waiting for their `DelaySeconds` (`ApproximateNumberOfMessagesDelayed`).
    pub delayed: u64,
}

impl QueueCounts {
    /// Every message counted.
    pub fn total(&self) -> u64 {
        self.visible + self.in_flight + self.delayed
    }
}

/// A queue that can say how many messages it holds, without reading them.
#[async_trait]
pub trait QueueCounter: Send + Sync {
    /// The queue's counts now (approximate: SQS's own).
    ///
    /// # Errors
    /// [`PortError`] when the queue cannot be asked.
    async fn counts(&self) -> Result<QueueCounts, PortError>;
}
