//! DynamoDB endpoint registry. Table key: `tenant_id` (partition), `endpoint_id` (sort),
//! so the relay finds a tenant's endpoints with one Query.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::AttributeValue;
use tern_core::endpoint::EndpointSecret;
use tern_core::ports::{EndpointStore, PortError};
use tern_core::{Endpoint, EndpointId, TenantId};

use crate::error::port_error;

/// Endpoints in a DynamoDB table.
#[derive(Clone, Debug)]
pub struct DynamoEndpointStore {
    client: Client,
    table: String,
}

impl DynamoEndpointStore {
    /// The registry in `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }
}

fn to_item(endpoint: &Endpoint) -> Result<HashMap<String, AttributeValue>, PortError> {
    let mut item: HashMap<String, AttributeValue> = serde_dynamo::to_item(endpoint)
        .map_err(|e| PortError::Rejected(format!("endpoint does not serialize: {e}")))?;
    item.insert(
        "endpoint_id".into(),
        AttributeValue::S(endpoint.id.to_string()),
    );
    Ok(item)
}

impl DynamoEndpointStore {
    /// Applies `update` to an endpoint that exists; a missing one is
    /// [`PortError::Rejected`] (bad input), not an outage.
    async fn update_existing(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        update: &str,
        values: Vec<(&str, AttributeValue)>,
    ) -> Result<(), PortError> {
        let mut request = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("tenant_id", AttributeValue::S(tenant.to_string()))
            .key("endpoint_id", AttributeValue::S(id.to_string()))
            .update_expression(update)
            .condition_expression("attribute_exists(endpoint_id)");
        for (name, value) in values {
            request = request.expression_attribute_values(name, value);
        }
        match request.send().await {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.as_service_error(),
                    Some(UpdateItemError::ConditionalCheckFailedException(_))
                ) =>
            {
                Err(PortError::Rejected(format!(
                    "endpoint {id} of tenant {tenant} does not exist"
                )))
            }
            Err(e) => Err(port_error(e)),
        }
    }
}

fn from_item(item: HashMap<String, AttributeValue>) -> Result<Endpoint, PortError> {
    serde_dynamo::from_item(item)
        .map_err(|e| PortError::Rejected(format!("endpoint item does not parse: {e}")))
}

#[async_trait]
impl EndpointStore for DynamoEndpointStore {
    async fn get(&self, tenant: &TenantId, id: &EndpointId) -> Result<Option<Endpoint>, PortError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("tenant_id", AttributeValue::S(tenant.to_string()))
            .key("endpoint_id", AttributeValue::S(id.to_string()))
            .consistent_read(true)
            .send()
            .await
            .map_err(port_error)?;
        out.item.map(from_item).transpose()
    }

    async fn list_for_tenant(&self, tenant: &TenantId) -> Result<Vec<Endpoint>, PortError> {
        let mut endpoints = Vec::new();
        let mut start = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("tenant_id = :t")
                .expression_attribute_values(":t", AttributeValue::S(tenant.to_string()))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(port_error)?;
            for item in out.items.unwrap_or_default() {
                match from_item(item) {
                    Ok(e) => endpoints.push(e),
                    // One corrupt endpoint must not stop delivery to the others.
                    Err(e) => {
                        tracing::error!(error = %e, %tenant, "skipping unreadable endpoint item")
                    }
                }
            }
            start = out.last_evaluated_key;
            if start.is_none() {
                return Ok(endpoints);
            }
        }
    }

    async fn list_all(&self) -> Result<Vec<Endpoint>, PortError> {
        let mut endpoints = Vec::new();
        let mut start = None;
        loop {
            let out = self
                .client
                .scan()
                .table_name(&self.table)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(port_error)?;
            for item in out.items.unwrap_or_default() {
                match from_item(item) {
                    Ok(e) => endpoints.push(e),
                    // As in list_for_tenant: one corrupt item must not hide the others.
                    Err(e) => tracing::error!(error = %e, "skipping unreadable endpoint item"),
                }
            }
            start = out.last_evaluated_key;
            if start.is_none() {
                endpoints.sort_by(|a, b| (&a.tenant_id, &a.id).cmp(&(&b.tenant_id, &b.id)));
                return Ok(endpoints);
            }
        }
    }

    async fn put(&self, endpoint: &Endpoint) -> Result<(), PortError> {
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(to_item(endpoint)?))
            .send()
            .await
            .map_err(port_error)?;
        Ok(())
    }

    async fn disable(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        reason: &str,
    ) -> Result<(), PortError> {
        self.update_existing(
            tenant,
            id,
            "SET enabled = :f, disabled_reason = :r",
            vec![
                (":f", AttributeValue::Bool(false)),
                (":r", AttributeValue::S(reason.to_owned())),
            ],
        )
        .await
    }

    async fn set_secrets(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        secrets: &[EndpointSecret],
    ) -> Result<(), PortError> {
        let value: AttributeValue = serde_dynamo::to_attribute_value(secrets)
            .map_err(|e| PortError::Rejected(format!("secrets do not serialize: {e}")))?;
        self.update_existing(tenant, id, "SET secrets = :s", vec![(":s", value)])
            .await
    }
}
