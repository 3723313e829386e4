//! The sender's endpoint log: what one batch recorded, written once per endpoint at its end.
//!
//! Every attempt row the sender records (a failure, a success, a dead letter made without
//! a POST) goes through the ledger. For one batch the handler wraps the ledger in a
//! [`BatchLog`], which passes every call on and keeps a copy of each row; after the
//! batch, next to the health write, [`BatchLog::flush`] hands them to
//! [`DeliveryLedger::append_endpoint_log`]: one write per endpoint per batch instead of an
//! index write per delivery (`tern_core::delivery_log`). Like the attempt log it is for
//! people: a failed or cut-off flush loses those lines from the endpoint's log, never from
//! the event's history, and never fails a message.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tern_core::DeliveryMessage;
use tern_core::EventId;
use tern_core::delivery_log::{EndpointLogPage, EndpointLogQuery, PairState};
use tern_core::ports::{AttemptRecord, Claim, DeliveryLedger, DeliveryState, PortError};

/// A ledger that remembers the attempt rows written through it during one batch.
pub struct BatchLog {
    inner: Arc<dyn DeliveryLedger>,
    rows: Mutex<Vec<AttemptRecord>>,
}

impl BatchLog {
    /// Wraps the sender's ledger for one batch.
    pub fn new(inner: Arc<dyn DeliveryLedger>) -> Self {
        Self {
            inner,
            rows: Mutex::new(Vec::new()),
        }
    }

    fn keep(&self, record: &AttemptRecord) {
        self.rows
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(record.clone());
    }

    /// The rows kept so far.
    pub fn rows(&self) -> Vec<AttemptRecord> {
        self.rows
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Writes the batch's rows to their endpoints' logs (nothing when there are none).
    ///
    /// # Errors
    /// The ledger's write error; the caller logs it.
    pub async fn flush(&self) -> Result<(), PortError> {
        let rows = std::mem::take(&mut *self.rows.lock().unwrap_or_else(PoisonError::into_inner));
        if rows.is_empty() {
            return Ok(());
        }
        self.inner.append_endpoint_log(&rows).await
    }
}

#[async_trait]
impl DeliveryLedger for BatchLog {
    async fn claim(
        &self,
        message: &DeliveryMessage,
        lease_until: DateTime<Utc>,
    ) -> Result<Claim, PortError> {
        self.inner.claim(message, lease_until).await
    }

    async fn finish(
        &self,
        message: &DeliveryMessage,
        state: DeliveryState,
    ) -> Result<(), PortError> {
        self.inner.finish(message, state).await
    }

    async fn record_attempt(&self, record: &AttemptRecord) -> Result<(), PortError> {
        self.keep(record);
        self.inner.record_attempt(record).await
    }

    async fn record_delivered(
        &self,
        message: &DeliveryMessage,
        record: &AttemptRecord,
    ) -> Result<(), PortError> {
        // Marker writes are retried (crate::markers): one row however many tries.
        if !self
            .rows
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|r| same_try(r, record))
        {
            self.keep(record);
        }
        self.inner.record_delivered(message, record).await
    }

    async fn history(&self, event: &EventId) -> Result<Vec<AttemptRecord>, PortError> {
        self.inner.history(event).await
    }

    async fn pair_states(&self, event: &EventId) -> Result<Vec<PairState>, PortError> {
        self.inner.pair_states(event).await
    }

    async fn append_endpoint_log(&self, records: &[AttemptRecord]) -> Result<(), PortError> {
        self.inner.append_endpoint_log(records).await
    }

    async fn endpoint_log(&self, query: &EndpointLogQuery) -> Result<EndpointLogPage, PortError> {
        self.inner.endpoint_log(query).await
    }
}

fn same_try(a: &AttemptRecord, b: &AttemptRecord) -> bool {
    (
        &a.event_id,
        &a.endpoint_id,
        a.replay_count,
        a.attempt,
        a.takeover,
    ) == (
        &b.event_id,
        &b.endpoint_id,
        b.replay_count,
        b.attempt,
        b.takeover,
    )
}
