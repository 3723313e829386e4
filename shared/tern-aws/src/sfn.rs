//! Step Functions adapter: waits longer than 900 s. Each wait is one execution of the
//! Standard state machine in `infra/statemachine/delayed-delivery.asl.json`.

use async_trait::async_trait;
use aws_sdk_sfn::Client;
use serde_json::json;
use sha2::{Digest, Sha256};
use tern_core::DeliveryMessage;
use tern_core::ports::{DelayScheduler, PortError};
use tern_core::retry::MAX_STEP_FUNCTIONS_INPUT_BYTES;

use crate::error::port_error;

/// Starts delayed-delivery executions.
#[derive(Clone, Debug)]
pub struct StepFunctionsScheduler {
    client: Client,
    state_machine_arn: String,
    delivery_queue_url: String,
}

impl StepFunctionsScheduler {
    /// Executions of `state_machine_arn` that send to `delivery_queue_url`.
    pub fn new(
        client: Client,
        state_machine_arn: impl Into<String>,
        delivery_queue_url: impl Into<String>,
    ) -> Self {
        Self {
            client,
            state_machine_arn: state_machine_arn.into(),
            delivery_queue_url: delivery_queue_url.into(),
        }
    }
}

/// Execution name: deterministic per (delivery, replay, attempt), so a duplicate request
/// finds the existing execution instead of starting a second wait. At most 80 characters
/// of `[A-Za-z0-9_-]` (Step Functions `name` limit).
pub fn execution_name(message: &DeliveryMessage) -> String {
    let digest = Sha256::digest(message.delivery_id.as_str().as_bytes());
    format!(
        "tern-{}-r{}-a{}",
        &hex::encode(digest)[..40],
        message.replay_count,
        message.attempt
    )
}

/// The execution input the state machine reads: `wait_seconds` (its Wait state),
/// `queue_url`, `body` and `group_id` (its `sqs:sendMessage` state's `QueueUrl`,
/// `MessageBody` and `MessageGroupId`: the tenant, so the message rejoins its tenant's
/// group on the fair delivery queue, as every other send path does).
pub fn execution_input(
    message: &DeliveryMessage,
    wait_seconds: u64,
    delivery_queue_url: &str,
) -> String {
    json!({
        "wait_seconds": wait_seconds,
        "queue_url": delivery_queue_url,
        "body": message.to_body(),
        "group_id": message.group_id(),
    })
    .to_string()
}

#[async_trait]
impl DelayScheduler for StepFunctionsScheduler {
    async fn schedule(
        &self,
        message: &DeliveryMessage,
        wait_seconds: u64,
    ) -> Result<(), PortError> {
        let input = execution_input(message, wait_seconds, &self.delivery_queue_url);
        if input.len() > MAX_STEP_FUNCTIONS_INPUT_BYTES {
            // Refused here rather than by the service; the sender chains queue delays instead.
            return Err(PortError::Rejected(format!(
                "execution input is {} bytes; Step Functions takes at most {MAX_STEP_FUNCTIONS_INPUT_BYTES}",
                input.len()
            )));
        }
        let result = self
            .client
            .start_execution()
            .state_machine_arn(&self.state_machine_arn)
            .name(execution_name(message))
            .input(input)
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_execution_already_exists()) =>
            {
                tracing::info!(delivery_id = %message.delivery_id, "delayed execution already exists; duplicate ignored");
                Ok(())
            }
            Err(e) => Err(port_error(e)),
        }
    }
}
