//! The console on AWS: its settings, its dependencies, and the replay function invoked
//! through Lambda.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_lambda::primitives::Blob;
use tern_aws::{DynamoEndpointStore, DynamoLedger, DynamoOutboxReader, SqsQueue};
use tern_handlers::replay::{ReplayRequest, ReplaySummary};

use crate::{AuditDeps, CONSOLE_REPLAY_SECONDS, ConsoleDeps, ConsoleError, ReplayInvoker};

/// The console function's settings, from its environment.
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// `TERN_ENDPOINTS_TABLE`.
    pub endpoints_table: String,
    /// `TERN_ATTEMPTS_TABLE`.
    pub attempts_table: String,
    /// `TERN_DLQ_URL`.
    pub dlq_url: String,
    /// `TERN_REPLAY_FUNCTION`: name or ARN of the replay function.
    pub replay_function: String,
    /// `TERN_HEALTH_TABLE`: endpoint health records (Enable resets the endpoint's).
    pub health_table: String,
    /// The failure model's thresholds (`TERN_HEALTH_*`, the sender's), for the states the
    /// Endpoints widget shows; the defaults where unset.
    pub policy: tern_core::health::HealthPolicy,
    /// `TERN_OUTBOX_TABLE`: the "Is anything lost?" widget scans the events of its window.
    pub outbox_table: String,
    /// `TERN_RELAY_FAILURE_QUEUE_URL`: read whole (received, then released) by that widget.
    pub relay_failure_queue_url: String,
    /// `TERN_DELIVERY_QUEUE_URL`: only counted (`GetQueueAttributes`), never read.
    pub delivery_queue_url: String,
    /// The sender's schedule, time scale and thresholds (`TERN_RETRY_SCHEDULE`, ...), by
    /// which that widget judges whether a pair is overdue; grace [`tern_ops::audit::DEFAULT_GRACE`].
    pub audit_rules: tern_ops::audit::Rules,
}

impl ConsoleConfig {
    /// Reads the settings through `get` (the process environment in the Lambda).
    ///
    /// # Errors
    /// [`ConsoleError::BadRequest`] naming the missing variable.
    pub fn from_env(get: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConsoleError> {
        let required = |name: &str| {
            get(name)
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| ConsoleError::BadRequest(format!("{name} is not set")))
        };
        Ok(Self {
            endpoints_table: required("TERN_ENDPOINTS_TABLE")?,
            attempts_table: required("TERN_ATTEMPTS_TABLE")?,
            dlq_url: required("TERN_DLQ_URL")?,
            replay_function: required("TERN_REPLAY_FUNCTION")?,
            health_table: required("TERN_HEALTH_TABLE")?,
            policy: tern_handlers::config::health_policy(&tern_handlers::config::Env(get))
                .map_err(|e| ConsoleError::BadRequest(e.to_string()))?,
            outbox_table: required("TERN_OUTBOX_TABLE")?,
            relay_failure_queue_url: required("TERN_RELAY_FAILURE_QUEUE_URL")?,
            delivery_queue_url: required("TERN_DELIVERY_QUEUE_URL")?,
            audit_rules: tern_ops::audit::rules_from_env(
                &tern_handlers::config::Env(get),
                tern_ops::audit::DEFAULT_GRACE,
            )
            .map_err(|e| ConsoleError::BadRequest(e.to_string()))?,
        })
    }
}

/// Deadline of one replay invocation: the console's replay budget
/// ([`CONSOLE_REPLAY_SECONDS`], 20 s) plus 10 s for the drain's last long polls and the
/// releases. The AWS call deadlines of `tern_aws::budget` (6 s) fit DynamoDB and SQS, not a
/// synchronous invoke.
pub const REPLAY_INVOKE_TIMEOUT: Duration = Duration::from_secs(CONSOLE_REPLAY_SECONDS as u64 + 10);

/// The replay function, invoked synchronously (`RequestResponse`) with a `ReplayRequest`.
pub struct LambdaReplay {
    client: aws_sdk_lambda::Client,
    function: String,
}

impl LambdaReplay {
    /// An invoker of `function` (name or ARN). `aws` should already carry Tern's bounded
    /// retries; the invoke gets its own deadline, [`REPLAY_INVOKE_TIMEOUT`].
    pub fn new(aws: &SdkConfig, function: impl Into<String>) -> Self {
        let aws = aws
            .to_builder()
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(tern_aws::budget::CONNECT_TIMEOUT)
                    .operation_attempt_timeout(REPLAY_INVOKE_TIMEOUT)
                    .operation_timeout(REPLAY_INVOKE_TIMEOUT)
                    .build(),
            )
            .build();
        Self {
            client: aws_sdk_lambda::Client::new(&aws),
            function: function.into(),
        }
    }
}

#[async_trait]
impl ReplayInvoker for LambdaReplay {
    async fn replay(&self, request: ReplayRequest) -> Result<ReplaySummary, ConsoleError> {
        let payload =
            serde_json::to_vec(&request).map_err(|e| ConsoleError::Replay(e.to_string()))?;
        let out = self
            .client
            .invoke()
            .function_name(&self.function)
            .payload(Blob::new(payload))
            .send()
            .await
            .map_err(|e| {
                ConsoleError::Replay(aws_sdk_lambda::error::DisplayErrorContext(&e).to_string())
            })?;
        let body = out
            .payload()
            .map(|b| b.as_ref().to_vec())
            .unwrap_or_default();
        if let Some(kind) = out.function_error() {
            return Err(ConsoleError::Replay(format!(
                "{kind}: {}",
                String::from_utf8_lossy(&body)
            )));
        }
        serde_json::from_slice(&body)
            .map_err(|e| ConsoleError::Replay(format!("unreadable summary: {e}")))
    }
}

/// The console's dependencies on AWS.
pub fn console_deps(config: &ConsoleConfig, aws: &SdkConfig) -> ConsoleDeps {
    let bounded = tern_aws::budget::bounded(aws);
    let ddb = aws_sdk_dynamodb::Client::new(&bounded);
    // The console only reads the log and the waiting list; the TTL applies to writes.
    let ledger = Arc::new(DynamoLedger::new(ddb.clone(), &config.attempts_table, 30));
    let sqs = aws_sdk_sqs::Client::new(&bounded);
    ConsoleDeps {
        dlq: Arc::new(SqsQueue::new(sqs.clone(), &config.dlq_url)),
        // The console shows states and header names, never a secret: it reads endpoints
        // without them and never calls KMS.
        endpoints: Arc::new(
            DynamoEndpointStore::new(ddb.clone(), &config.endpoints_table)
                .with_secrets(tern_aws::SecretsAtRest::Hidden),
        ),
        health: Some(Arc::new(tern_aws::DynamoHealthStore::new(
            ddb.clone(),
            &config.health_table,
        ))),
        ledger: ledger.clone(),
        waiting: Some(ledger),
        replay: Arc::new(LambdaReplay::new(&bounded, &config.replay_function)),
        policy: config.policy.clone(),
        // AWS runs in real time.
        time_scale: 1.0,
        audit: Some(AuditDeps {
            outbox: Arc::new(DynamoOutboxReader::new(ddb, &config.outbox_table)),
            relay_failures: Arc::new(SqsQueue::new(sqs.clone(), &config.relay_failure_queue_url)),
            delivery_queue: Some(Arc::new(SqsQueue::new(sqs, &config.delivery_queue_url))),
            rules: config.audit_rules.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_names_the_missing_variable() {
        let env = |k: &str| match k {
            "TERN_ENDPOINTS_TABLE" => Some("e".to_owned()),
            "TERN_ATTEMPTS_TABLE" => Some("a".to_owned()),
            "TERN_DLQ_URL" => Some("q".to_owned()),
            _ => None,
        };
        let e = ConsoleConfig::from_env(&env).unwrap_err();
        assert!(e.to_string().contains("TERN_REPLAY_FUNCTION"), "{e}");
    }
}
