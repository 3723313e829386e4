//! Adapters of the [`OperationalEventSink`] port: the operational-events SNS topic (one
//! message per event, `tenant_id` as a message attribute so each owner subscribes with a
//! filter policy) and the tenant's outbox (a Tern event `tern.endpoint.disabled`, ...,
//! which the relay delivers like any other event to the tenant's endpoints subscribed to
//! that type).

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_sns::types::MessageAttributeValue;
use tern_core::operational::{OperationalEvent, OperationalEventSink};
use tern_core::ports::PortError;
use tern_outbox::{EventId, OutboxWriter};

use crate::error::port_error;

/// SNS message attribute holding the event's tenant id; owners subscribe with a filter
/// policy on it (`{"tenant_id": ["acme"]}`).
pub const TENANT_ATTRIBUTE: &str = "tenant_id";
/// SNS message attribute holding the event's type (`endpoint.disabled`).
pub const EVENT_TYPE_ATTRIBUTE: &str = "event_type";
/// SNS message attribute holding the endpoint id.
pub const ENDPOINT_ATTRIBUTE: &str = "endpoint_id";

/// Publishes each event to the operational-events topic: `Message` = the event's JSON,
/// attributes [`TENANT_ATTRIBUTE`], [`EVENT_TYPE_ATTRIBUTE`], [`ENDPOINT_ATTRIBUTE`]
/// (all `String`). The JSON is a few hundred bytes, far below SNS's 256 KiB message limit.
#[derive(Debug, Clone)]
pub struct SnsEventSink {
    client: aws_sdk_sns::Client,
    topic_arn: String,
}

impl SnsEventSink {
    /// A sink publishing to `topic_arn`. Build `client` from a config passed through
    /// [`crate::budget::bounded`] so a stalled SNS cannot hold a sender batch.
    pub fn new(client: aws_sdk_sns::Client, topic_arn: impl Into<String>) -> Self {
        Self {
            client,
            topic_arn: topic_arn.into(),
        }
    }

    /// The topic's ARN.
    pub fn topic_arn(&self) -> &str {
        &self.topic_arn
    }
}

fn string_attribute(value: &str) -> Result<MessageAttributeValue, PortError> {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .map_err(|e| PortError::Rejected(e.to_string()))
}

#[async_trait]
impl OperationalEventSink for SnsEventSink {
    async fn publish(&self, event: &OperationalEvent) -> Result<(), PortError> {
        self.client
            .publish()
            .topic_arn(&self.topic_arn)
            .message(event.to_json())
            .message_attributes(
                TENANT_ATTRIBUTE,
                string_attribute(event.tenant_id.as_str())?,
            )
            .message_attributes(EVENT_TYPE_ATTRIBUTE, string_attribute(event.kind.as_str())?)
            .message_attributes(
                ENDPOINT_ATTRIBUTE,
                string_attribute(event.endpoint_id.as_str())?,
            )
            .send()
            .await
            .map_err(port_error)?;
        Ok(())
    }
}

/// Writes each event to the outbox table as a Tern event of type
/// `kind.tern_event_type()` (`tern.endpoint.disabled`) for the event's tenant, id
/// [`OperationalEvent::event_id_text`], payload the event's JSON. The put is conditional
/// on the id being new, so publishing the same change twice writes one item and the
/// tenant's endpoints receive it once.
#[derive(Debug, Clone)]
pub struct OutboxEventSink {
    client: aws_sdk_dynamodb::Client,
    writer: OutboxWriter,
}

impl OutboxEventSink {
    /// A sink writing to the outbox table `table` with the outbox writer's defaults
    /// (256 KiB payload limit, 7-day TTL).
    pub fn new(client: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        Self {
            client,
            writer: OutboxWriter::new(table),
        }
    }
}

#[async_trait]
impl OperationalEventSink for OutboxEventSink {
    async fn publish(&self, event: &OperationalEvent) -> Result<(), PortError> {
        let id = EventId::new(event.event_id_text())
            .map_err(|e| PortError::Rejected(format!("operational event id: {e}")))?;
        let prepared = self
            .writer
            .prepare_with_id(
                id,
                &event.kind.tern_event_type(),
                event.tenant_id.as_str(),
                event.to_json(),
            )
            .map_err(|e| PortError::Rejected(format!("operational event: {e}")))?;
        let put = prepared
            .put()
            .map_err(|e| PortError::Rejected(e.to_string()))?;
        let written = self
            .client
            .put_item()
            .table_name(put.table_name())
            .set_item(Some(put.item().clone()))
            .set_condition_expression(put.condition_expression().map(str::to_owned))
            .send()
            .await;
        match written {
            Ok(_) => Ok(()),
            // The same change was already written (a retried publish): the first item
            // stands and the relay delivers it once.
            Err(e)
                if matches!(
                    e.as_service_error(),
                    Some(PutItemError::ConditionalCheckFailedException(_))
                ) =>
            {
                tracing::debug!(event_id = %prepared.event.id, "operational event already in the outbox");
                Ok(())
            }
            Err(e) => Err(port_error(e)),
        }
    }
}
