//! The deliveries that wait: scheduled for a later attempt, or held back by their
//! endpoint's open circuit or pause. "How many deliveries are waiting, and when is each
//! tried?" is answered from a list the ledger keeps in the writes the sender already makes,
//! never by reading the delivery queue or the Step Functions executions:
//!
//! - a failed attempt whose retry is queued (a queue delay or a Step Functions wait alike)
//!   is listed by the write that marks its claim finished
//!   ([`crate::ports::DeliveryLedger::finish_retrying`]), with the next attempt's number
//!   and due time;
//! - a delivery held back before an attempt of its own was ever claimed (a first attempt,
//!   or a replayed one, behind an open circuit or a pause) is listed once, the first time it
//!   is held back ([`crate::ports::DeliveryLedger::list_waiting`]);
//! - the entry goes when the delivery is next claimed (the claim's write removes it), or
//!   when it is dead-lettered without a claim
//!   ([`crate::ports::DeliveryLedger::unlist_waiting`]).
//!
//! A due time is real time (the time scale applied), the time the delivery was scheduled
//! for. One held back by its endpoint goes no sooner than the endpoint allows: its
//! circuit's next probe or the end of its pause (the endpoint's health record), which the
//! tools show beside it.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::ids::{EndpointId, EventId, TenantId};
use crate::ports::PortError;

/// One waiting delivery, as the list holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaitingDelivery {
    /// The event's tenant.
    pub tenant_id: TenantId,
    /// The endpoint it goes to.
    pub endpoint_id: EndpointId,
    /// The event (its `webhook-id`).
    pub event_id: EventId,
    /// The number of the attempt it waits for, within its budget (1-based).
    pub attempt: u32,
    /// When it was scheduled for (UTC, real time).
    pub due_at: DateTime<Utc>,
}

/// Which waiting deliveries to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitingScope {
    /// Every endpoint's.
    All,
    /// One tenant's endpoints'.
    Tenant(TenantId),
    /// One endpoint's.
    Endpoint(TenantId, EndpointId),
}

impl WaitingScope {
    /// True when `d` is in this scope.
    pub fn holds(&self, d: &WaitingDelivery) -> bool {
        match self {
            Self::All => true,
            Self::Tenant(t) => d.tenant_id == *t,
            Self::Endpoint(t, e) => d.tenant_id == *t && d.endpoint_id == *e,
        }
    }
}

/// What one read of the list returned.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WaitingRead {
    /// The entries read, soonest due first.
    pub entries: Vec<WaitingDelivery>,
    /// False when the read stopped at its limit: counts are lower bounds.
    pub complete: bool,
}

/// Reads the list of waiting deliveries (the ledger's waiting index in AWS).
#[async_trait]
pub trait WaitingList: Send + Sync {
    /// The waiting deliveries of `scope`, soonest due first, reading at most `max_entries`
    /// of them.
    async fn waiting(
        &self,
        scope: &WaitingScope,
        max_entries: usize,
    ) -> Result<WaitingRead, PortError>;
}

/// The key under which the list groups an endpoint's waiting deliveries:
/// `<tenant>#<endpoint>` (neither id can hold a `#`: `[A-Za-z0-9_-]`).
pub fn endpoint_key(tenant: &TenantId, endpoint: &EndpointId) -> String {
    format!("{tenant}#{endpoint}")
}

/// The tenant and endpoint of an [`endpoint_key`], `None` when it is not one.
pub fn parse_endpoint_key(key: &str) -> Option<(TenantId, EndpointId)> {
    let (tenant, endpoint) = key.split_once('#')?;
    Some((TenantId::new(tenant).ok()?, EndpointId::new(endpoint).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_keys_round_trip_and_scopes_hold_their_own() {
        let (t, e) = (
            TenantId::new("tnt_a").unwrap(),
            EndpointId::new("ep_1").unwrap(),
        );
        let key = endpoint_key(&t, &e);
        assert_eq!(key, "tnt_a#ep_1");
        assert_eq!(parse_endpoint_key(&key), Some((t.clone(), e.clone())));
        assert_eq!(parse_endpoint_key("no-separator"), None);
        assert_eq!(parse_endpoint_key("tnt a#ep_1"), None);
        let d = WaitingDelivery {
            tenant_id: t.clone(),
            endpoint_id: e.clone(),
            event_id: EventId::new("evt_1").unwrap(),
            attempt: 2,
            due_at: Utc::now(),
        };
        assert!(WaitingScope::All.holds(&d));
        assert!(WaitingScope::Tenant(t.clone()).holds(&d));
        assert!(!WaitingScope::Tenant(TenantId::new("tnt_b").unwrap()).holds(&d));
        assert!(WaitingScope::Endpoint(t, e).holds(&d));
    }
}
