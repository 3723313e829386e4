//! SQS adapter: the delivery queue, the DLQ and the relay's failure queue.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, MessageAttributeValue, SendMessageBatchRequestEntry,
};
use tern_core::in_memory::sqs::MAX_VISIBILITY_TIMEOUT_SECONDS;
use tern_core::ports::{
    DrainableQueue, MAX_GROUP_ID_LEN, MessageQueue, PortError, QueueEntry, ReceivedMessage,
    VisibilityChange, group_id_is_valid,
};
use tern_core::retry::MAX_QUEUE_DELAY_SECONDS;
use tern_core::trace::{QueueCounter, QueueCounts};

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
        Self {
            client,
            url: url.into(),
        }
    }

    /// The queue URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

fn attributes(
    entry: &QueueEntry,
) -> Result<Option<HashMap<String, MessageAttributeValue>>, PortError> {
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

/// `DelaySeconds` for SQS. The sender routes longer waits to Step Functions; this check
/// is the last line: an out-of-range delay is refused here instead of being clamped, so
/// a bug upstream shows as an error rather than a silently shortened wait.
fn delay_seconds(entry: &QueueEntry) -> Result<i32, PortError> {
    if entry.delay_seconds > MAX_QUEUE_DELAY_SECONDS {
        return Err(PortError::Rejected(format!(
            "DelaySeconds {} is above the SQS limit of {MAX_QUEUE_DELAY_SECONDS} s",
            entry.delay_seconds
        )));
    }
    i32::try_from(entry.delay_seconds).map_err(|e| PortError::Rejected(e.to_string()))
}

/// `MessageGroupId` for SQS. Checked here like the delay: a group id SQS would refuse is
/// a bug upstream (tenant ids always qualify), refused with a clear error instead of
/// SQS's.
fn group_id(entry: &QueueEntry) -> Result<Option<String>, PortError> {
    match &entry.group_id {
        Some(id) if !group_id_is_valid(id) => Err(PortError::Rejected(format!(
            "MessageGroupId {id:?} is not 1-{MAX_GROUP_ID_LEN} characters of a-zA-Z0-9 and ASCII punctuation"
        ))),
        other => Ok(other.clone()),
    }
}

#[async_trait]
impl MessageQueue for SqsQueue {
    /// One `SendMessageBatch` call, answered per entry: an entry that cannot be built
    /// (a delay above 900 s, a bad attribute) is refused alone and the others are sent;
    /// SQS's `Failed` list maps `SenderFault: true` to [`PortError::Rejected`] and
    /// `false` to [`PortError::Unavailable`]; an entry SQS names in neither list is
    /// counted as unavailable, never as sent.
    async fn send_batch(
        &self,
        entries: &[QueueEntry],
    ) -> Result<Vec<Result<(), PortError>>, PortError> {
        let mut results: Vec<Result<(), PortError>> = Vec::with_capacity(entries.len());
        let mut built = Vec::with_capacity(entries.len());
        for e in entries {
            let entry = delay_seconds(e).and_then(|delay| {
                SendMessageBatchRequestEntry::builder()
                    .id(&e.id)
                    .message_body(&e.body)
                    .delay_seconds(delay)
                    .set_message_group_id(group_id(e)?)
                    .set_message_attributes(attributes(e)?)
                    .build()
                    .map_err(|err| PortError::Rejected(err.to_string()))
            });
            match entry {
                Ok(entry) => {
                    built.push(entry);
                    results.push(Ok(()));
                }
                Err(e) => results.push(Err(e)),
            }
        }
        if built.is_empty() {
            return Ok(results);
        }
        let out = self
            .client
            .send_message_batch()
            .queue_url(&self.url)
            .set_entries(Some(built))
            .send()
            .await
            .map_err(port_error)?;
        entry_results(
            entries.iter().map(|e| e.id.as_str()),
            &mut results,
            out.failed(),
            out.successful().iter().map(|s| s.id()),
            "SendMessageBatch",
        );
        Ok(results)
    }

    async fn send(&self, entry: &QueueEntry) -> Result<(), PortError> {
        let delay = delay_seconds(entry)?;
        let group = group_id(entry)?;
        tracing::debug!(queue = %self.url, delay_seconds = delay, group_id = group.as_deref(), "SendMessage");
        self.client
            .send_message()
            .queue_url(&self.url)
            .message_body(&entry.body)
            .delay_seconds(delay)
            .set_message_group_id(group)
            .set_message_attributes(attributes(entry)?)
            .send()
            .await
            .map_err(port_error)?;
        Ok(())
    }

    /// One `ChangeMessageVisibility` call for one entry, one
    /// `ChangeMessageVisibilityBatch` call for several (up to 10, SQS's limit), answered
    /// per entry as [`Self::send_batch`] answers: a timeout above SQS's 43,200 s is
    /// refused here alone; SQS's `Failed` list maps `SenderFault: true` (a receipt handle
    /// that expired, a message already deleted) to [`PortError::Rejected`] and `false` to
    /// [`PortError::Unavailable`]; an entry SQS names in neither list is unavailable.
    async fn change_visibility(
        &self,
        entries: &[VisibilityChange],
    ) -> Result<Vec<Result<(), PortError>>, PortError> {
        let timeout = |e: &VisibilityChange| {
            if u64::from(e.visibility_seconds) > MAX_VISIBILITY_TIMEOUT_SECONDS {
                return Err(PortError::Rejected(format!(
                    "VisibilityTimeout {} is above the SQS limit of {MAX_VISIBILITY_TIMEOUT_SECONDS} s",
                    e.visibility_seconds
                )));
            }
            i32::try_from(e.visibility_seconds).map_err(|err| PortError::Rejected(err.to_string()))
        };
        if let [one] = entries {
            let seconds = match timeout(one) {
                Ok(s) => s,
                Err(e) => return Ok(vec![Err(e)]),
            };
            self.client
                .change_message_visibility()
                .queue_url(&self.url)
                .receipt_handle(&one.receipt_handle)
                .visibility_timeout(seconds)
                .send()
                .await
                .map_err(port_error)?;
            return Ok(vec![Ok(())]);
        }
        let mut results: Vec<Result<(), PortError>> = Vec::with_capacity(entries.len());
        let mut built = Vec::with_capacity(entries.len());
        for e in entries {
            let entry = timeout(e).and_then(|seconds| {
                ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(&e.id)
                    .receipt_handle(&e.receipt_handle)
                    .visibility_timeout(seconds)
                    .build()
                    .map_err(|err| PortError::Rejected(err.to_string()))
            });
            match entry {
                Ok(entry) => {
                    built.push(entry);
                    results.push(Ok(()));
                }
                Err(e) => results.push(Err(e)),
            }
        }
        if built.is_empty() {
            return Ok(results);
        }
        let out = self
            .client
            .change_message_visibility_batch()
            .queue_url(&self.url)
            .set_entries(Some(built))
            .send()
            .await
            .map_err(port_error)?;
        entry_results(
            entries.iter().map(|e| e.id.as_str()),
            &mut results,
            out.failed(),
            out.successful().iter().map(|s| s.id()),
            "ChangeMessageVisibilityBatch",
        );
        Ok(results)
    }
}

/// Each entry's result from a batch answer of SQS (`SendMessageBatch`,
/// `ChangeMessageVisibilityBatch`): an entry SQS failed is `Rejected` when the fault is the
/// sender's, else `Unavailable` (worth another try); one in neither list is `Unavailable`.
/// Entries already failed before the call (`results[i]` an error) keep their error.
fn entry_results<'a>(
    ids: impl Iterator<Item = &'a str>,
    results: &mut [Result<(), PortError>],
    failed: &[aws_sdk_sqs::types::BatchResultErrorEntry],
    successful: impl Iterator<Item = &'a str>,
    operation: &str,
) {
    let failed: HashMap<&str, (bool, String)> = failed
        .iter()
        .map(|f| {
            (
                f.id(),
                (
                    f.sender_fault(),
                    format!("{}: {}", f.code(), f.message().unwrap_or("")),
                ),
            )
        })
        .collect();
    let successful: std::collections::HashSet<&str> = successful.collect();
    for (id, result) in ids.zip(results.iter_mut()) {
        if result.is_err() {
            continue;
        }
        *result = match failed.get(id) {
            Some((true, why)) => Err(PortError::Rejected(why.clone())),
            Some((false, why)) => Err(PortError::Unavailable(why.clone())),
            None if successful.contains(id) => Ok(()),
            None => Err(PortError::Unavailable(format!(
                "{operation} reported no result for entry {id}"
            ))),
        };
    }
}

/// Longest long poll, in seconds: 20 (SQS `ReceiveMessage` `WaitTimeSeconds` limit).
pub const MAX_WAIT_SECONDS: i32 = 20;

#[async_trait]
impl QueueCounter for SqsQueue {
    async fn counts(&self) -> Result<QueueCounts, PortError> {
        use aws_sdk_sqs::types::QueueAttributeName as A;
        let answer = self
            .client
            .get_queue_attributes()
            .queue_url(&self.url)
            .attribute_names(A::ApproximateNumberOfMessages)
            .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
            .attribute_names(A::ApproximateNumberOfMessagesDelayed)
            .send()
            .await
            .map_err(port_error)?;
        let count = |a: A| {
            answer
                .attributes()
                .and_then(|m| m.get(&a))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        Ok(QueueCounts {
            visible: count(A::ApproximateNumberOfMessages),
            in_flight: count(A::ApproximateNumberOfMessagesNotVisible),
            delayed: count(A::ApproximateNumberOfMessagesDelayed),
        })
    }
}

#[async_trait]
impl DrainableQueue for SqsQueue {
    async fn receive(
        &self,
        max: i32,
        visibility_seconds: i32,
        wait_seconds: i32,
    ) -> Result<Vec<ReceivedMessage>, PortError> {
        let wait_seconds = wait_seconds.clamp(0, MAX_WAIT_SECONDS);
        // A long poll legitimately takes up to its wait: the call's deadlines grow by it.
        let wait = std::time::Duration::from_secs(u64::from(wait_seconds.unsigned_abs()));
        let timeouts = aws_sdk_sqs::config::timeout::TimeoutConfig::builder()
            .operation_attempt_timeout(crate::budget::ATTEMPT_TIMEOUT + wait)
            .operation_timeout(crate::budget::OPERATION_TIMEOUT + wait)
            .build();
        let out = self
            .client
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(max.clamp(1, 10))
            .visibility_timeout(visibility_seconds)
            .wait_time_seconds(wait_seconds)
            .message_attribute_names("All")
            .customize()
            .config_override(aws_sdk_sqs::config::Builder::default().timeout_config(timeouts))
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
                            .filter_map(|(k, v)| {
                                v.string_value().map(|s| (k.clone(), s.to_owned()))
                            })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(delay_seconds: u32) -> QueueEntry {
        QueueEntry {
            id: "e".into(),
            body: "{}".into(),
            delay_seconds,
            attributes: vec![],
            group_id: None,
        }
    }

    #[test]
    fn a_group_id_sqs_would_refuse_is_refused_here() {
        let with = |id: &str| QueueEntry {
            group_id: Some(id.into()),
            ..entry(0)
        };
        assert_eq!(group_id(&entry(0)), Ok(None));
        assert_eq!(group_id(&with("tnt_a")), Ok(Some("tnt_a".into())));
        assert_eq!(
            group_id(&with(&"x".repeat(MAX_GROUP_ID_LEN))),
            Ok(Some("x".repeat(MAX_GROUP_ID_LEN)))
        );
        for bad in ["", "tnt a", "t\u{e9}", &"x".repeat(MAX_GROUP_ID_LEN + 1)] {
            assert!(
                matches!(group_id(&with(bad)), Err(PortError::Rejected(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn delay_outside_the_sqs_range_is_refused_not_clamped() {
        assert_eq!(delay_seconds(&entry(0)), Ok(0));
        assert_eq!(delay_seconds(&entry(900)), Ok(900));
        assert!(matches!(
            delay_seconds(&entry(901)),
            Err(PortError::Rejected(_))
        ));
        assert!(matches!(
            delay_seconds(&entry(u32::MAX)),
            Err(PortError::Rejected(_))
        ));
    }
}
