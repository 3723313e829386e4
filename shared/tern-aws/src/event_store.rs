//! The outbox table as an [`EventStore`]: a publish is one conditional `PutItem` of the
//! same outbox item an application's transaction writes (`tern_outbox`), so the event
//! takes the same stream -> relay path. A plain put costs half the write units of the same
//! item in a transaction (DynamoDB bills transactional writes twice). Items are keyed by
//! tenant and id (`tern_core::outbox::outbox_key`, schema version 2): a read of an id
//! absent under that key costs a second GetItem, for an item written before version 2.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use tern_core::event::MAX_CONFIGURABLE_PAYLOAD_BYTES;
use tern_core::event_store::{EventStore, Published};
use tern_core::outbox::{KEY_ATTRIBUTE, OutboxRecord, outbox_key};
use tern_core::ports::PortError;
use tern_core::{Event, EventId, TenantId};

use crate::error::port_error;

/// Events in the outbox table.
#[derive(Clone, Debug)]
pub struct DynamoEventStore {
    client: Client,
    table: String,
    ttl: chrono::Duration,
}

impl DynamoEventStore {
    /// The outbox in `table`; items expire `ttl_days` after the event's creation (the
    /// outbox writer's default is 7: `tern_outbox::DEFAULT_TTL_DAYS`), clamped to 1..=3650.
    pub fn new(client: Client, table: impl Into<String>, ttl_days: i64) -> Self {
        Self {
            client,
            table: table.into(),
            ttl: chrono::Duration::days(ttl_days.clamp(1, tern_outbox::MAX_TTL_DAYS)),
        }
    }
}

/// The event an outbox item holds; `None` for an item that is not a readable Tern event
/// (an application may share the table).
fn event_of(item: HashMap<String, AttributeValue>) -> Option<Event> {
    let record: OutboxRecord = serde_dynamo::from_item(item).ok()?;
    record.into_event(MAX_CONFIGURABLE_PAYLOAD_BYTES).ok()
}

#[async_trait]
impl EventStore for DynamoEventStore {
    async fn publish(&self, event: &Event) -> Result<Published, PortError> {
        let record = OutboxRecord::from_event(event, self.ttl);
        let item = serde_dynamo::to_item(&record)
            .map_err(|e| PortError::Rejected(format!("outbox item does not encode: {e}")))?;
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            // The key is the tenant's (`outbox_key`): only its own id can refuse it.
            .condition_expression("attribute_not_exists(event_id)")
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Published::Created),
            Err(e) => match e.as_service_error() {
                Some(PutItemError::ConditionalCheckFailedException(c)) => Ok(c
                    .item()
                    .cloned()
                    .and_then(event_of)
                    .map_or(Published::Taken, Published::Existing)),
                _ => Err(port_error(e)),
            },
        }
    }

    async fn get(&self, tenant: &TenantId, id: &EventId) -> Result<Option<Event>, PortError> {
        // The version 2 key first; then the bare id an item written before version 2 has,
        // taken only when it is this tenant's.
        for key in [outbox_key(tenant, id), id.to_string()] {
            let out = self
                .client
                .get_item()
                .table_name(&self.table)
                .key(KEY_ATTRIBUTE, AttributeValue::S(key))
                .consistent_read(true)
                .send()
                .await
                .map_err(port_error)?;
            if let Some(event) = out.item.and_then(event_of)
                && event.tenant_id == *tenant
                && event.id == *id
            {
                return Ok(Some(event));
            }
        }
        Ok(None)
    }
}
