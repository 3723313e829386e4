//! The sender's endpoint log: what one batch recorded, written once per endpoint at its end.
//!
//! [`BatchLog`] stands in for the sender's ledger during a batch, so it must pass on every
//! method of [`DeliveryLedger`], the ones with a default included (a default here would
//! silently replace the real store's: its test calls each one).
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
use tern_core::delivery_log::{EndpointLogPage, EndpointLogQuery, PairState};
use tern_core::ports::{AttemptRecord, Claim, DeliveryLedger, DeliveryState, PortError};
use tern_core::trace::EventTrace;
use tern_core::{DeliveryMessage, EndpointId, EventId, TenantId};

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

    async fn finish_retrying(
        &self,
        message: &DeliveryMessage,
        next_attempt: u32,
        due_at: DateTime<Utc>,
    ) -> Result<(), PortError> {
        self.inner
            .finish_retrying(message, next_attempt, due_at)
            .await
    }

    async fn list_waiting(
        &self,
        message: &DeliveryMessage,
        due_at: DateTime<Utc>,
    ) -> Result<(), PortError> {
        self.inner.list_waiting(message, due_at).await
    }

    async fn unlist_waiting(&self, message: &DeliveryMessage) -> Result<(), PortError> {
        self.inner.unlist_waiting(message).await
    }

    async fn release(
        &self,
        message: &DeliveryMessage,
        takeover: u32,
        due_at: DateTime<Utc>,
    ) -> Result<(), PortError> {
        self.inner.release(message, takeover, due_at).await
    }

    async fn record_duplicate(&self, message: &DeliveryMessage) -> Result<(), PortError> {
        self.inner.record_duplicate(message).await
    }

    async fn record_dead_letter(&self, message: &DeliveryMessage) -> Result<(), PortError> {
        self.inner.record_dead_letter(message).await
    }

    async fn remove_dead_letter(&self, message: &DeliveryMessage) -> Result<(), PortError> {
        self.inner.remove_dead_letter(message).await
    }

    async fn dead_letters(
        &self,
        query: &tern_core::dead_letters::DeadLetterQuery,
    ) -> Result<tern_core::dead_letters::DeadLetterRead, PortError> {
        self.inner.dead_letters(query).await
    }

    async fn record_attempt(
        &self,
        message: &DeliveryMessage,
        record: &AttemptRecord,
    ) -> Result<(), PortError> {
        self.keep(record);
        self.inner.record_attempt(message, record).await
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

    async fn history(
        &self,
        tenant: &TenantId,
        event: &EventId,
    ) -> Result<Vec<AttemptRecord>, PortError> {
        self.inner.history(tenant, event).await
    }

    async fn pair_states(
        &self,
        tenant: &TenantId,
        event: &EventId,
    ) -> Result<Vec<PairState>, PortError> {
        self.inner.pair_states(tenant, event).await
    }

    async fn pair_state(
        &self,
        tenant: &TenantId,
        event: &EventId,
        endpoint: &EndpointId,
    ) -> Result<Option<PairState>, PortError> {
        self.inner.pair_state(tenant, event, endpoint).await
    }

    async fn append_endpoint_log(&self, records: &[AttemptRecord]) -> Result<(), PortError> {
        self.inner.append_endpoint_log(records).await
    }

    async fn endpoint_log(&self, query: &EndpointLogQuery) -> Result<EndpointLogPage, PortError> {
        self.inner.endpoint_log(query).await
    }

    async fn trace(&self, tenant: &TenantId, event: &EventId) -> Result<EventTrace, PortError> {
        self.inner.trace(tenant, event).await
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use tern_core::Event;
    use tern_core::delivery_log::EndpointLogQuery;

    /// Records the name of every method called.
    #[derive(Default)]
    struct Calls(Mutex<Vec<&'static str>>);

    impl Calls {
        fn add(&self, name: &'static str) {
            self.0.lock().unwrap().push(name);
        }
    }

    #[async_trait]
    impl DeliveryLedger for Calls {
        async fn claim(&self, _: &DeliveryMessage, _: DateTime<Utc>) -> Result<Claim, PortError> {
            self.add("claim");
            Ok(Claim::Granted)
        }
        async fn finish(&self, _: &DeliveryMessage, _: DeliveryState) -> Result<(), PortError> {
            self.add("finish");
            Ok(())
        }
        async fn finish_retrying(
            &self,
            _: &DeliveryMessage,
            _: u32,
            _: DateTime<Utc>,
        ) -> Result<(), PortError> {
            self.add("finish_retrying");
            Ok(())
        }
        async fn list_waiting(
            &self,
            _: &DeliveryMessage,
            _: DateTime<Utc>,
        ) -> Result<(), PortError> {
            self.add("list_waiting");
            Ok(())
        }
        async fn unlist_waiting(&self, _: &DeliveryMessage) -> Result<(), PortError> {
            self.add("unlist_waiting");
            Ok(())
        }
        async fn record_attempt(
            &self,
            _: &DeliveryMessage,
            _: &AttemptRecord,
        ) -> Result<(), PortError> {
            self.add("record_attempt");
            Ok(())
        }
        async fn record_delivered(
            &self,
            _: &DeliveryMessage,
            _: &AttemptRecord,
        ) -> Result<(), PortError> {
            self.add("record_delivered");
            Ok(())
        }
        async fn history(
            &self,
            _: &TenantId,
            _: &EventId,
        ) -> Result<Vec<AttemptRecord>, PortError> {
            self.add("history");
            Ok(vec![])
        }
        async fn pair_states(
            &self,
            _: &TenantId,
            _: &EventId,
        ) -> Result<Vec<PairState>, PortError> {
            self.add("pair_states");
            Ok(vec![])
        }
        async fn pair_state(
            &self,
            _: &TenantId,
            _: &EventId,
            _: &EndpointId,
        ) -> Result<Option<PairState>, PortError> {
            self.add("pair_state");
            Ok(None)
        }
        async fn trace(&self, _: &TenantId, _: &EventId) -> Result<EventTrace, PortError> {
            self.add("trace");
            Ok(EventTrace::default())
        }
        async fn append_endpoint_log(&self, r: &[AttemptRecord]) -> Result<(), PortError> {
            assert_eq!(r.len(), 2, "the batch's two rows, the retried marker once");
            self.add("append_endpoint_log");
            Ok(())
        }
        async fn endpoint_log(&self, _: &EndpointLogQuery) -> Result<EndpointLogPage, PortError> {
            self.add("endpoint_log");
            Ok(EndpointLogPage {
                entries: vec![],
                next: None,
            })
        }
    }

    #[tokio::test]
    async fn every_method_reaches_the_real_ledger_and_the_rows_are_flushed_once() {
        let calls = Arc::new(Calls::default());
        let log = BatchLog::new(calls.clone());
        let event: Event = serde_json::from_value(serde_json::json!({
            "id": "evt_1", "type": "order.paid", "tenant_id": "tnt_a",
            "created_at": "2026-12-01T00:00:00Z", "payload": {"n": 1},
        }))
        .unwrap();
        let m = DeliveryMessage::first(event, EndpointId::new("ep_1").unwrap());
        let row = |attempt: u32, outcome: &str| AttemptRecord {
            event_id: m.event.id.clone(),
            endpoint_id: m.endpoint_id.clone(),
            replay_count: 0,
            attempt,
            takeover: 0,
            started_at: Utc::now(),
            latency_ms: 1,
            status: Some(200),
            error_class: None,
            error: None,
            location: None,
            response_excerpt: None,
            excerpt_truncated: false,
            outcome: outcome.into(),
            next_wait_seconds: None,
        };
        let now = Utc::now();
        log.claim(&m, now).await.unwrap();
        log.finish(&m, DeliveryState::Retrying).await.unwrap();
        log.finish_retrying(&m, 2, now).await.unwrap();
        log.list_waiting(&m, now).await.unwrap();
        log.unlist_waiting(&m).await.unwrap();
        log.record_attempt(&m, &row(1, "retry")).await.unwrap();
        log.record_delivered(&m, &row(2, "delivered"))
            .await
            .unwrap();
        log.record_delivered(&m, &row(2, "delivered"))
            .await
            .unwrap();
        let t = &m.event.tenant_id;
        log.history(t, &m.event.id).await.unwrap();
        log.pair_states(t, &m.event.id).await.unwrap();
        log.pair_state(t, &m.event.id, &m.endpoint_id)
            .await
            .unwrap();
        log.trace(t, &m.event.id).await.unwrap();
        log.endpoint_log(&EndpointLogQuery {
            endpoint_id: m.endpoint_id.clone(),
            since: None,
            until: None,
            outcome: None,
            limit: 1,
            before: None,
        })
        .await
        .unwrap();
        log.flush().await.unwrap();
        log.flush().await.unwrap();
        let seen = calls.0.lock().unwrap().clone();
        for name in [
            "claim",
            "finish",
            "finish_retrying",
            "list_waiting",
            "unlist_waiting",
            "record_attempt",
            "record_delivered",
            "history",
            "pair_states",
            "pair_state",
            "trace",
            "endpoint_log",
        ] {
            assert!(
                seen.contains(&name),
                "{name} did not reach the ledger: {seen:?}"
            );
        }
        assert_eq!(
            seen.iter().filter(|n| **n == "append_endpoint_log").count(),
            1,
            "{seen:?}"
        );
    }
}
