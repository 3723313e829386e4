//! SQS adapter: the delivery queue, the DLQ and the relay's failure queue.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use tern_core::ports::{DrainableQueue, MessageQueue, PortError, QueueEntry, ReceivedMessage};

use crate::error::port_error;

/// One SQS queue, by URL.
#[derive(Clone, Debug)]
pub struct SqsQueue {
    client: Client,
    url: String,
}

impl SqsQueue {
    /// The queue at `url`.
    pub fn new(client: Client, url: impl Into<String>) -> Self {
        Self { client, url: url.into() }
    }

    /// The queue URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

fn attributes(entry: &QueueEntry) -> Result<Option<HashMap<String, MessageAttributeValue>>, PortError> {
    if entry.attributes.is_empty() {
        return Ok(None);
    }
    entry
        .attributes
        .iter()
        .map(|(k, v)| {
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value(v)
                .build()
                .map(|a| (k.clone(), a))
                .map_err(|e| PortError::Rejected(e.to_string()))
        })
        .collect::<Result<HashMap<_, _>, _>>()
        .map(Some)
}

#[async_trait]
impl MessageQueue for SqsQueue {
    async fn send_batch(&self, entries: &[QueueEntry]) -> Result<Vec<Result<(), PortError>>, PortError> {
        let built = entries
            .iter()
            .map(|e| {
                SendMessageBatchRequestEntry::builder()
                    .id(&e.id)
                    .message_body(&e.body)
                    .delay_seconds(i32::try_from(e.delay_seconds).unwrap_or(900))
                    .set_message_attributes(attributes(e)?)
                    .build()
                    .map_err(|err| PortError::Rejected(err.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let out = self
            .client
            .send_message_batch()
            .queue_url(&self.url)
            .set_entries(Some(built))
            .send()
            .await
            .map_err(port_error)?;
        let failed: HashMap<&str, (bool, String)> = out
            .failed()
            .iter()
            .map(|f| (f.id(), (f.sender_fault(), format!("{}: {}", f.code(), f.message().unwrap_or("")))))
            .collect();
        Ok(entries
            .iter()
            .map(|e| match failed.get(e.id.as_str()) {
                None => Ok(()),
                Some((true, why)) => Err(PortError::Rejected(why.clone())),
                Some((false, why)) => Err(PortError::Unavailable(why.clone())),
            })
            .collect())
    }

    async fn send(&self, entry: &QueueEntry) -> Result<(), PortError> {
        self.client
            .send_message()
            .queue_url(&self.url)
            .message_body(&entry.body)
            .delay_seconds(i32::try_from(entry.delay_seconds).unwrap_or(900))
            .set_message_attributes(attributes(entry)?)
            .send()
            .await
            .map_err(port_error)?;
        Ok(())
    }
}

#[async_trait]
impl DrainableQueue for SqsQueue {
    async fn receive(&self, max: i32, visibility_seconds: i32) -> Result<Vec<ReceivedMessage>, PortError> {
        let out = self
            .client
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(max.clamp(1, 10))
            .visibility_timeout(visibility_seconds)
            .wait_time_seconds(0)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(port_error)?;
        Ok(out
            .messages()
            .iter()
            .map(|m| ReceivedMessage {
                message_id: m.message_id().unwrap_or_default().to_owned(),
                receipt_handle: m.receipt_handle().unwrap_or_default().to_owned(),
                body: m.body().unwrap_or_default().to_owned(),
                attributes: m
                    .message_attributes()
                    .map(|a| {
                        a.iter()
                            .filter_map(|(k, v)| v.string_value().map(|s| (k.clone(), s.to_owned())))
                            .collect()
                    })
                    .unwrap_or_default(),
            })
            .collect())
    }

    async fn delete(&self, receipt_handle: &str) -> Result<(), PortError> {
        self.client
            .delete_message()
            .queue_url(&self.url)
            .receipt_handle(receipt_handle)
            .send()
            .await
            .map_err(port_error)?;
        Ok(())
    }

    async fn release(&self, receipt_handle: &str) -> Result<(), PortError> {
        self.client
            .change_message_visibility()
            .queue_url(&self.url)
            .receipt_handle(receipt_handle)
            .visibility_timeout(0)
            .send()
            .await
            .map_err(port_error)?;
        Ok(())
    }
}
