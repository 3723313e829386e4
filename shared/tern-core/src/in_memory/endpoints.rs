//! [`InMemoryEndpoints`]: the endpoint registry in memory, each write atomic as the
//! DynamoDB store's conditional writes are; and [`InMemoryEventSink`], which keeps the
//! operational events it is given.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use chrono::Utc;

use crate::endpoint::{Endpoint, EndpointSecret, EndpointUpdate};
use crate::ids::{EndpointId, TenantId};
use crate::operational::{OperationalEvent, OperationalEventSink};
use crate::ports::{EndpointStore, PortError};
use crate::signing_key::EndpointSigningKey;

type Key = (TenantId, EndpointId);

/// The endpoint registry in memory, in (tenant, id) order.
#[derive(Debug, Default)]
pub struct InMemoryEndpoints {
    endpoints: Mutex<BTreeMap<Key, Endpoint>>,
}

fn missing(tenant: &TenantId, id: &EndpointId) -> PortError {
    PortError::Rejected(format!("endpoint {id} of tenant {tenant} does not exist"))
}

impl InMemoryEndpoints {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<Key, Endpoint>> {
        self.endpoints
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes one endpoint with `f`, or [`PortError::Rejected`] when it does not exist.
    fn change(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        f: impl FnOnce(&mut Endpoint),
    ) -> Result<(), PortError> {
        let mut g = self.lock();
        let e = g
            .get_mut(&(tenant.clone(), id.clone()))
            .ok_or_else(|| missing(tenant, id))?;
        f(e);
        Ok(())
    }
}

#[async_trait]
impl EndpointStore for InMemoryEndpoints {
    async fn get(&self, tenant: &TenantId, id: &EndpointId) -> Result<Option<Endpoint>, PortError> {
        Ok(self.lock().get(&(tenant.clone(), id.clone())).cloned())
    }

    async fn list_for_tenant(&self, tenant: &TenantId) -> Result<Vec<Endpoint>, PortError> {
        Ok(self
            .lock()
            .values()
            .filter(|e| &e.tenant_id == tenant)
            .cloned()
            .collect())
    }

    async fn list_all(&self) -> Result<Vec<Endpoint>, PortError> {
        Ok(self.lock().values().cloned().collect())
    }

    async fn put(&self, endpoint: &Endpoint) -> Result<(), PortError> {
        self.lock().insert(
            (endpoint.tenant_id.clone(), endpoint.id.clone()),
            endpoint.clone(),
        );
        Ok(())
    }

    async fn create(&self, endpoint: &Endpoint) -> Result<Option<Endpoint>, PortError> {
        let mut g = self.lock();
        let key = (endpoint.tenant_id.clone(), endpoint.id.clone());
        if let Some(existing) = g.get(&key) {
            return Ok(Some(existing.clone()));
        }
        g.insert(key, endpoint.clone());
        Ok(None)
    }

    async fn disable(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        reason: &str,
    ) -> Result<(), PortError> {
        self.change(tenant, id, |e| {
            // The time stays that of the first disable.
            if e.enabled {
                e.disabled_at = Some(Utc::now());
            }
            e.enabled = false;
            e.disabled_reason = Some(reason.to_owned());
        })
    }

    async fn disable_keeping_reason(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        reason: &str,
    ) -> Result<(), PortError> {
        self.change(tenant, id, |e| {
            if e.disabled_reason.is_none() {
                e.disabled_reason = Some(reason.to_owned());
                e.disabled_at = Some(Utc::now());
            }
            e.enabled = false;
        })
    }

    async fn enable(&self, tenant: &TenantId, id: &EndpointId) -> Result<(), PortError> {
        self.change(tenant, id, |e| {
            e.enabled = true;
            if let Some(reason) = e.disabled_reason.take() {
                e.last_disabled_reason = Some(reason);
                e.last_disabled_at = e.disabled_at.take();
            }
            e.disabled_at = None;
        })
    }

    async fn delete(&self, tenant: &TenantId, id: &EndpointId) -> Result<(), PortError> {
        self.lock()
            .remove(&(tenant.clone(), id.clone()))
            .map(|_| ())
            .ok_or_else(|| missing(tenant, id))
    }

    async fn update(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        update: &EndpointUpdate,
    ) -> Result<(), PortError> {
        let mut result = Ok(());
        self.change(tenant, id, |e| {
            let mut changed = e.clone();
            match update.apply(&mut changed) {
                Ok(()) => {
                    changed.updated_at = Some(Utc::now());
                    *e = changed;
                }
                Err(err) => result = Err(PortError::Rejected(err.to_string())),
            }
        })?;
        result
    }

    async fn set_secrets(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        secrets: &[EndpointSecret],
    ) -> Result<(), PortError> {
        self.change(tenant, id, |e| e.secrets = secrets.to_vec())
    }

    async fn set_signing_keys(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        keys: &[EndpointSigningKey],
    ) -> Result<(), PortError> {
        self.change(tenant, id, |e| e.signing_keys = keys.to_vec())
    }
}

/// Keeps every operational event it is given, in order.
#[derive(Debug, Default)]
pub struct InMemoryEventSink {
    events: Mutex<Vec<OperationalEvent>>,
}

impl InMemoryEventSink {
    /// The events published so far.
    pub fn events(&self) -> Vec<OperationalEvent> {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[async_trait]
impl OperationalEventSink for InMemoryEventSink {
    async fn publish(&self, event: &OperationalEvent) -> Result<(), PortError> {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(event.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signing::Secret;

    #[tokio::test]
    async fn a_disable_keeps_the_first_reason_and_enable_keeps_it_for_people() {
        let store = InMemoryEndpoints::default();
        let e = Endpoint::new(
            EndpointId::new("ep_1").unwrap(),
            TenantId::new("tnt_a").unwrap(),
            "https://h.example/hook",
            vec!["*".into()],
            Secret::generate(),
            Utc::now(),
        );
        assert_eq!(store.create(&e).await, Ok(None));
        assert!(store.create(&e).await.unwrap().is_some());
        store
            .disable(&e.tenant_id, &e.id, "gone: 410")
            .await
            .unwrap();
        store
            .disable_keeping_reason(&e.tenant_id, &e.id, "auto_disabled")
            .await
            .unwrap();
        let got = store.get(&e.tenant_id, &e.id).await.unwrap().unwrap();
        assert!(!got.enabled);
        assert_eq!(got.disabled_reason.as_deref(), Some("gone: 410"));
        store.enable(&e.tenant_id, &e.id).await.unwrap();
        let got = store.get(&e.tenant_id, &e.id).await.unwrap().unwrap();
        assert!(got.enabled);
        assert_eq!(got.last_disabled_reason.as_deref(), Some("gone: 410"));
        let other = EndpointId::new("ep_2").unwrap();
        assert!(matches!(
            store.disable(&e.tenant_id, &other, "x").await,
            Err(PortError::Rejected(_))
        ));
    }
}
