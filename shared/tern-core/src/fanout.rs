//! Fan-out checkpoints: how far the relay got with one event's fan-out when its
//! invocation ran out of time, so the retried invocation sends only the rest.
//!
//! The relay sends an event's delivery messages in the order of its subscribed endpoints'
//! ids. When it stops inside that list (its Lambda deadline is near), it records the id of
//! the last endpoint up to which every message is on the delivery queue (or parked), and
//! reports the stream record so Lambda retries from it. The retried invocation reads the
//! checkpoint and starts after that id. Only large fan-outs are checkpointed
//! ([`CHECKPOINT_MIN_FANOUT`]): a small one pays no read and no write.

use async_trait::async_trait;

use crate::ids::{EndpointId, EventId, TenantId};
use crate::ports::PortError;
use crate::spread::LedgerLayout;

/// Fewest subscribed endpoints for which the relay reads (and, when it stops inside the
/// fan-out, writes) a checkpoint: 50. Such an event takes at least 5 `SendMessageBatch`
/// calls (10 entries each, the SQS batch limit), so the one read adds at most one request
/// per five; an event with fewer endpoints costs nothing extra, and if an invocation stops
/// inside it, at most 49 of its messages are sent again by the retry (the sender's claim
/// stops a second POST).
pub const CHECKPOINT_MIN_FANOUT: usize = 50;

/// What the store holds about one event's fan-out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FanOutRecord {
    /// The last endpoint, in id order, through which every delivery message was sent (or
    /// parked) by an earlier invocation; `None` before any was.
    pub through: Option<EndpointId>,
    /// The ledger layout its messages use ([`crate::spread`]): the one the relay that began
    /// the fan-out chose. A record an older build wrote (it says none) is
    /// [`LedgerLayout::Unsharded`]: the rest of that fan-out stays in it, so a message a
    /// retried invocation sends again lands its claim beside the first one's.
    pub layout: LedgerLayout,
}

/// Where the relay keeps fan-out checkpoints (DynamoDB in AWS: one item per event in the
/// attempts table).
#[async_trait]
pub trait FanOutCheckpoints: Send + Sync {
    /// What an earlier invocation recorded of `tenant`'s `event`; `None` when nothing.
    /// Event ids are per tenant: another tenant's event with the same id has a record of
    /// its own.
    ///
    /// # Errors
    /// [`PortError::Unavailable`] when the store cannot answer now;
    /// [`PortError::Rejected`] when it never will (no permission, no such table).
    async fn read(
        &self,
        tenant: &TenantId,
        event: &EventId,
    ) -> Result<Option<FanOutRecord>, PortError>;

    /// Records, before any of its messages is sent, that `tenant`'s `event` fans out in
    /// `layout`, unless a record exists (then nothing changes and it is no error): the
    /// ledger's readers learn there how many partitions to read.
    ///
    /// # Errors
    /// [`PortError`] when the write failed.
    async fn begin(
        &self,
        tenant: &TenantId,
        event: &EventId,
        layout: LedgerLayout,
    ) -> Result<(), PortError>;

    /// Records that every delivery message of `tenant`'s `event` up to and including endpoint
    /// `through` (in id order) is sent, in `layout`. Never moves a checkpoint back: a write
    /// whose `through` sorts at or before the stored one changes nothing and is not an
    /// error.
    ///
    /// # Errors
    /// [`PortError`] when the write failed; the retry then sends those messages again.
    async fn write(
        &self,
        tenant: &TenantId,
        event: &EventId,
        through: &EndpointId,
        layout: LedgerLayout,
    ) -> Result<(), PortError>;
}
