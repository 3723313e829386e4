//! In-memory ports for the CPU and batching benchmarks (the idea of
//! `tests/src/lib.rs::fakes`): the sender handler runs unchanged over them, so what is
//! measured is Tern's own work plus the HTTP POST, not AWS latency.

use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tern_core::ports::{
    AttemptRecord, Claim, DeliveryLedger, DeliveryState, EndpointStore, MessageQueue, PortError,
    QueueEntry,
};
use tern_core::{DeliveryMessage, Endpoint, EndpointId, EventId, TenantId};

/// A queue that counts what it is sent and keeps nothing (a long run stays flat).
#[derive(Default)]
pub struct NullQueue;

#[async_trait]
impl MessageQueue for NullQueue {
    async fn send_batch(
        &self,
        entries: &[QueueEntry],
    ) -> Result<Vec<Result<(), PortError>>, PortError> {
        Ok(entries.iter().map(|_| Ok(())).collect())
    }
    async fn send(&self, _entry: &QueueEntry) -> Result<(), PortError> {
        Ok(())
    }
}

/// One endpoint, read-only.
pub struct OneEndpoint(pub Endpoint);

#[async_trait]
impl EndpointStore for OneEndpoint {
    async fn get(&self, tenant: &TenantId, id: &EndpointId) -> Result<Option<Endpoint>, PortError> {
        Ok((self.0.tenant_id == *tenant && self.0.id == *id).then(|| self.0.clone()))
    }
    async fn list_for_tenant(&self, tenant: &TenantId) -> Result<Vec<Endpoint>, PortError> {
        Ok(if self.0.tenant_id == *tenant {
            vec![self.0.clone()]
        } else {
            vec![]
        })
    }
    async fn list_all(&self) -> Result<Vec<Endpoint>, PortError> {
        Ok(vec![self.0.clone()])
    }
    async fn put(&self, _endpoint: &Endpoint) -> Result<(), PortError> {
        Err(PortError::Rejected("read-only benchmark store".into()))
    }
    async fn disable(&self, _: &TenantId, _: &EndpointId, _: &str) -> Result<(), PortError> {
        Err(PortError::Rejected("read-only benchmark store".into()))
    }
    async fn set_secrets(
        &self,
        _: &TenantId,
        _: &EndpointId,
        _: &[tern_core::endpoint::EndpointSecret],
    ) -> Result<(), PortError> {
        Err(PortError::Rejected("read-only benchmark store".into()))
    }
}

/// A ledger that grants every claim and counts recorded attempts.
#[derive(Default)]
pub struct CountingLedger {
    /// Attempts recorded.
    pub recorded: Mutex<u64>,
}

#[async_trait]
impl DeliveryLedger for CountingLedger {
    async fn claim(&self, _: &DeliveryMessage, _: DateTime<Utc>) -> Result<Claim, PortError> {
        Ok(Claim::Granted)
    }
    async fn finish(&self, _: &DeliveryMessage, _: DeliveryState) -> Result<(), PortError> {
        Ok(())
    }
    async fn record_attempt(
        &self,
        _: &tern_core::DeliveryMessage,
        _record: &AttemptRecord,
    ) -> Result<(), PortError> {
        *self
            .recorded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) += 1;
        Ok(())
    }
    async fn history(
        &self,
        _: &tern_core::TenantId,
        _: &EventId,
    ) -> Result<Vec<AttemptRecord>, PortError> {
        Ok(vec![])
    }
}
