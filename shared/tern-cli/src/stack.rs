//! `tern --stack <name>`: table and queue names from a deployed stack's CloudFormation
//! outputs instead of `TERN_*` variables.

use std::collections::HashMap;

use aws_config::SdkConfig;
use tern_ops::OpsError;

/// Which stack output feeds which `TERN_*` variable. The output names are those of
/// `infra/lib/tern-stack.ts` and `infra/template.yaml` (both define the same outputs).
pub const OUTPUTS: [(&str, &str); 10] = [
    ("OutboxTableName", "TERN_OUTBOX_TABLE"),
    ("EndpointsTableName", "TERN_ENDPOINTS_TABLE"),
    ("AttemptsTableName", "TERN_ATTEMPTS_TABLE"),
    ("HealthTableName", "TERN_HEALTH_TABLE"),
    ("DeliveryQueueUrl", "TERN_DELIVERY_QUEUE_URL"),
    ("DlqUrl", "TERN_DLQ_URL"),
    ("RelayFailureQueueUrl", "TERN_RELAY_FAILURE_QUEUE_URL"),
    ("DelayStateMachineArn", "TERN_DELAY_STATE_MACHINE_ARN"),
    ("PortalKeySecretArn", "TERN_PORTAL_KEY_SECRET"),
    ("SecretsKeyArn", "TERN_SECRETS_KEY_ID"),
];

/// Where the commands find table and queue names.
pub struct Names {
    /// The stack named by `--stack`, with its outputs.
    stack: Option<(String, HashMap<String, String>)>,
}

impl Names {
    /// Names from `TERN_*` variables only.
    pub fn from_env() -> Self {
        Self { stack: None }
    }

    /// Names from `stack`'s outputs (DescribeStacks); variables without an output still
    /// come from the environment.
    ///
    /// # Errors
    /// [`OpsError::Invalid`]: the stack does not exist, or CloudFormation cannot be reached.
    pub async fn from_stack(aws: &SdkConfig, stack: &str) -> Result<Self, OpsError> {
        let cfn = aws_sdk_cloudformation::Client::new(aws);
        let answer = cfn
            .describe_stacks()
            .stack_name(stack)
            .send()
            .await
            .map_err(|e| {
                let text = aws_sdk_cloudformation::error::DisplayErrorContext(&e).to_string();
                if text.contains("does not exist") {
                    OpsError::Invalid(format!(
                        "stack {stack} does not exist (region {})",
                        aws.region().map_or("not set", |r| r.as_ref())
                    ))
                } else {
                    OpsError::Invalid(format!("cannot read stack {stack}: {text}"))
                }
            })?;
        let outputs = answer
            .stacks()
            .first()
            .map(|s| {
                s.outputs()
                    .iter()
                    .filter_map(|o| {
                        Some((o.output_key()?.to_owned(), o.output_value()?.to_owned()))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(Self {
            stack: Some((stack.to_owned(), outputs)),
        })
    }

    /// The stack named by `--stack` and all its outputs (none without `--stack`).
    pub fn stack_outputs(&self) -> Option<(&str, &HashMap<String, String>)> {
        self.stack
            .as_ref()
            .map(|(name, outputs)| (name.as_str(), outputs))
    }

    /// The value for `var`: the stack's output that feeds it when `--stack` was given,
    /// else the variable.
    ///
    /// # Errors
    /// [`OpsError::Invalid`] when the stack lacks the output; [`OpsError::Missing`].
    pub fn get(&self, var: &'static str) -> Result<String, OpsError> {
        if let Some((stack, outputs)) = &self.stack
            && let Some((output, _)) = OUTPUTS.iter().find(|(_, v)| *v == var)
        {
            return outputs.get(*output).cloned().ok_or_else(|| {
                OpsError::Invalid(format!(
                    "stack {stack} has no output {output} (it feeds {var}): is it a Tern stack?"
                ))
            });
        }
        tern_ops::var(var)
    }

    /// [`Self::get`] for a setting that may be absent (a stack deployed before it had
    /// the output, a variable not set): `None` then.
    pub fn optional(&self, var: &'static str) -> Option<String> {
        self.get(var).ok().filter(|v| !v.trim().is_empty())
    }
}
