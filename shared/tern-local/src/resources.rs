//! Creates Tern's tables, queues and state machine on the local AWS with the settings the
//! infra uses (`infra/settings.json`), under a name prefix so tests can share one server.

use aws_config::SdkConfig;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, StreamSpecification, StreamViewType,
    TimeToLiveSpecification,
};
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::json;

use crate::settings::{DELAY_STATE_MACHINE_ASL, WaitingIndex, infra_settings};

/// A resource could not be created.
#[derive(Debug, thiserror::Error)]
#[error("creating {what}: {detail}")]
pub struct ProvisionError {
    /// Which resource.
    pub what: String,
    /// The SDK error.
    pub detail: String,
}

fn err(what: &str) -> impl Fn(String) -> ProvisionError + '_ {
    move |detail| ProvisionError {
        what: what.to_owned(),
        detail,
    }
}

/// Names and addresses of one local deployment.
#[derive(Debug, Clone)]
pub struct Resources {
    /// Outbox table.
    pub outbox_table: String,
    /// Its stream.
    pub outbox_stream_arn: String,
    /// Endpoints table.
    pub endpoints_table: String,
    /// Attempts table (ledger and attempt log).
    pub attempts_table: String,
    /// Delivery queue URL.
    pub delivery_queue_url: String,
    /// DLQ URL.
    pub dlq_url: String,
    /// Relay failure queue URL.
    pub relay_failure_queue_url: String,
    /// Delayed-delivery state machine ARN.
    pub state_machine_arn: String,
    /// Health table: one item per endpoint (rolling-window counters, circuit state).
    pub health_table: String,
    /// Operational-events SNS topic ARN (`endpoint.disabled`, ...).
    pub operational_topic_arn: String,
    /// The customer portal's table (link uses, rate limits).
    pub portal_table: String,
    /// The customer portal's key ring secret (Secrets Manager name).
    pub portal_key_secret: String,
    /// ARN of the KMS key that seals endpoint secrets at rest (`tern_core::sealed`).
    pub secrets_key_arn: String,
}

impl Resources {
    /// The environment variables the functions read, for these resources.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("TERN_OUTBOX_TABLE", self.outbox_table.clone()),
            ("TERN_ENDPOINTS_TABLE", self.endpoints_table.clone()),
            ("TERN_ATTEMPTS_TABLE", self.attempts_table.clone()),
            ("TERN_DELIVERY_QUEUE_URL", self.delivery_queue_url.clone()),
            ("TERN_DLQ_URL", self.dlq_url.clone()),
            (
                "TERN_RELAY_FAILURE_QUEUE_URL",
                self.relay_failure_queue_url.clone(),
            ),
            (
                "TERN_DELAY_STATE_MACHINE_ARN",
                self.state_machine_arn.clone(),
            ),
            ("TERN_HEALTH_TABLE", self.health_table.clone()),
            (
                "TERN_OPERATIONAL_TOPIC_ARN",
                self.operational_topic_arn.clone(),
            ),
            ("TERN_PORTAL_TABLE", self.portal_table.clone()),
            ("TERN_PORTAL_KEY_SECRET", self.portal_key_secret.clone()),
            ("TERN_SECRETS_KEY_ID", self.secrets_key_arn.clone()),
        ]
    }
}

/// A global secondary index of a table local mode creates.
enum Index<'a> {
    /// The attempts table's waiting index: string partition key, number sort key, sparse,
    /// INCLUDE projection.
    Waiting(&'a WaitingIndex),
    /// The health table's tenant index: string keys, KEYS_ONLY.
    Tenant(&'a crate::settings::TenantIndex),
}

async fn table(
    ddb: &aws_sdk_dynamodb::Client,
    name: &str,
    pk: &str,
    sk: Option<&str>,
    stream: bool,
    ttl: Option<&str>,
    index: Option<Index<'_>>,
) -> Result<Option<String>, ProvisionError> {
    let mut req = ddb
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(pk)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(|e| err(name)(e.to_string()))?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(pk)
                .key_type(KeyType::Hash)
                .build()
                .map_err(|e| err(name)(e.to_string()))?,
        );
    if let Some(sk) = sk {
        req = req
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(sk)
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .map_err(|e| err(name)(e.to_string()))?,
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(sk)
                    .key_type(KeyType::Range)
                    .build()
                    .map_err(|e| err(name)(e.to_string()))?,
            );
    }
    if let Some(index) = index {
        let attribute = |name: &str, kind| {
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(kind)
                .build()
                .map_err(|e| err(name)(e.to_string()))
        };
        let key = |name: &str, kind| {
            KeySchemaElement::builder()
                .attribute_name(name)
                .key_type(kind)
                .build()
                .map_err(|e| err(name)(e.to_string()))
        };
        let (index_name, partition_key, (sort_key, sort_type), projection) = match &index {
            // settings.json tables.attempts.waitingIndex.
            Index::Waiting(w) => (
                &w.name,
                &w.partition_key,
                (&w.sort_key, ScalarAttributeType::N),
                Projection::builder()
                    .projection_type(ProjectionType::Include)
                    .set_non_key_attributes(Some(w.projected_attributes.clone()))
                    .build(),
            ),
            // settings.json tables.health.tenantIndex.
            Index::Tenant(t) => (
                &t.name,
                &t.partition_key,
                (&t.sort_key, ScalarAttributeType::S),
                Projection::builder()
                    .projection_type(ProjectionType::KeysOnly)
                    .build(),
            ),
        };
        req = req
            .attribute_definitions(attribute(partition_key, ScalarAttributeType::S)?)
            .attribute_definitions(attribute(sort_key, sort_type)?)
            .global_secondary_indexes(
                GlobalSecondaryIndex::builder()
                    .index_name(index_name)
                    .key_schema(key(partition_key, KeyType::Hash)?)
                    .key_schema(key(sort_key, KeyType::Range)?)
                    .projection(projection)
                    .build()
                    .map_err(|e| err(index_name)(e.to_string()))?,
            );
    }
    if stream {
        req = req.stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::NewImage)
                .build()
                .map_err(|e| err(name)(e.to_string()))?,
        );
    }
    let out = req
        .send()
        .await
        .map_err(|e| err(name)(aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string()))?;
    if let Some(attr) = ttl {
        ddb.update_time_to_live()
            .table_name(name)
            .time_to_live_specification(
                TimeToLiveSpecification::builder()
                    .enabled(true)
                    .attribute_name(attr)
                    .build()
                    .map_err(|e| err(name)(e.to_string()))?,
            )
            .send()
            .await
            .map_err(|e| err(name)(aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string()))?;
    }
    Ok(out.table_description.and_then(|d| d.latest_stream_arn))
}

async fn queue(
    sqs: &aws_sdk_sqs::Client,
    name: &str,
    attributes: Vec<(QueueAttributeName, String)>,
) -> Result<String, ProvisionError> {
    let mut req = sqs.create_queue().queue_name(name);
    for (k, v) in attributes {
        req = req.attributes(k, v);
    }
    let out = req
        .send()
        .await
        .map_err(|e| err(name)(aws_sdk_sqs::error::DisplayErrorContext(e).to_string()))?;
    out.queue_url
        .ok_or_else(|| err(name)("no queue URL returned".into()))
}

async fn queue_arn(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<String, ProvisionError> {
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(|e| err(url)(aws_sdk_sqs::error::DisplayErrorContext(e).to_string()))?;
    out.attributes
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .ok_or_else(|| err(url)("no QueueArn".into()))
}

/// Creates everything under `prefix` (e.g. `tern-` or a per-test prefix).
///
/// `max_receive_count` overrides the settings file's redrive count when given (tests of
/// the attempt budget use 3).
///
/// # Errors
/// [`ProvisionError`] naming the resource.
pub async fn provision(
    aws: &SdkConfig,
    prefix: &str,
    max_receive_count: Option<i32>,
) -> Result<Resources, ProvisionError> {
    let settings = infra_settings();
    let ddb = aws_sdk_dynamodb::Client::new(aws);
    let sqs = aws_sdk_sqs::Client::new(aws);
    let sfn = aws_sdk_sfn::Client::new(aws);

    let outbox_table = format!("{prefix}outbox");
    let endpoints_table = format!("{prefix}endpoints");
    let attempts_table = format!("{prefix}attempts");
    let health_table = format!("{prefix}health");
    let outbox_stream_arn = table(
        &ddb,
        &outbox_table,
        "event_id",
        None,
        true,
        Some("expires_at"),
        None,
    )
    .await?
    .ok_or_else(|| err(&outbox_table)("no stream ARN returned".into()))?;
    table(
        &ddb,
        &endpoints_table,
        "tenant_id",
        Some("endpoint_id"),
        false,
        None,
        None,
    )
    .await?;
    table(
        &ddb,
        &attempts_table,
        "event_id",
        Some("sk"),
        false,
        Some("expires_at"),
        Some(Index::Waiting(&settings.tables.attempts.waiting_index)),
    )
    .await?;
    let keys = &settings.tables.health;
    table(
        &ddb,
        &health_table,
        &keys.partition_key,
        None,
        false,
        None,
        Some(Index::Tenant(&keys.tenant_index)),
    )
    .await?;

    let q = &settings.queues.delivery;
    let retention = q.message_retention_seconds.to_string();
    let dlq_url = queue(
        &sqs,
        &format!("{prefix}dlq"),
        vec![(
            QueueAttributeName::MessageRetentionPeriod,
            retention.clone(),
        )],
    )
    .await?;
    let dlq_arn = queue_arn(&sqs, &dlq_url).await?;
    let redrive = json!({
        "deadLetterTargetArn": dlq_arn,
        "maxReceiveCount": max_receive_count.unwrap_or(q.max_receive_count),
    });
    let delivery_queue_url = queue(
        &sqs,
        &format!("{prefix}delivery"),
        vec![
            (
                QueueAttributeName::VisibilityTimeout,
                q.visibility_timeout_seconds.to_string(),
            ),
            (
                QueueAttributeName::MessageRetentionPeriod,
                retention.clone(),
            ),
            (QueueAttributeName::RedrivePolicy, redrive.to_string()),
        ],
    )
    .await?;
    let relay_failure_queue_url = queue(
        &sqs,
        &format!("{prefix}relay-failures"),
        vec![(QueueAttributeName::MessageRetentionPeriod, retention)],
    )
    .await?;

    let portal_table = format!("{prefix}portal");
    let keys = &settings.tables.portal;
    table(
        &ddb,
        &portal_table,
        &keys.partition_key,
        None,
        false,
        Some(&keys.ttl_attribute),
        None,
    )
    .await?;
    // The key ring: created with one random key, as the stacks' generated secret.
    let portal_key_secret = format!("{prefix}portal-keys");
    tern_aws::portal::SecretsManagerKeys::new(
        aws_sdk_secretsmanager::Client::new(aws),
        &portal_key_secret,
    )
    .ensure()
    .await
    .map_err(|e| err(&portal_key_secret)(e.to_string()))?;

    let sm_name = format!("{prefix}delayed-delivery");
    let state_machine_arn = sfn
        .create_state_machine()
        .name(&sm_name)
        .definition(DELAY_STATE_MACHINE_ASL)
        .role_arn("arn:aws:iam::123456789012:role/tern-local-delayed-delivery")
        .r#type(aws_sdk_sfn::types::StateMachineType::Standard)
        .send()
        .await
        .map_err(|e| err(&sm_name)(aws_sdk_sfn::error::DisplayErrorContext(e).to_string()))?
        .state_machine_arn;

    // Encrypted with the AWS managed SNS key, as in the stacks (moto stores the attribute).
    let topic_name = format!("{prefix}operational-events");
    let operational_topic_arn = aws_sdk_sns::Client::new(aws)
        .create_topic()
        .name(&topic_name)
        .attributes("KmsMasterKeyId", "alias/aws/sns")
        .send()
        .await
        .map_err(|e| err(&topic_name)(aws_sdk_sns::error::DisplayErrorContext(e).to_string()))?
        .topic_arn
        .ok_or_else(|| err(&topic_name)("no topic ARN returned".into()))?;

    // The key that seals endpoint secrets, as in the stacks: symmetric, rotation on
    // (moto keeps the setting; it does not rotate).
    let key_name = format!("{prefix}endpoint-secrets");
    let kms = aws_sdk_kms::Client::new(aws);
    let secrets_key_arn = kms
        .create_key()
        .description(format!("Tern {key_name}: seals endpoint secrets at rest"))
        .send()
        .await
        .map_err(|e| err(&key_name)(aws_sdk_kms::error::DisplayErrorContext(e).to_string()))?
        .key_metadata
        .and_then(|m| m.arn)
        .ok_or_else(|| err(&key_name)("no key ARN returned".into()))?;
    kms.enable_key_rotation()
        .key_id(&secrets_key_arn)
        .send()
        .await
        .map_err(|e| err(&key_name)(aws_sdk_kms::error::DisplayErrorContext(e).to_string()))?;

    Ok(Resources {
        outbox_table,
        outbox_stream_arn,
        endpoints_table,
        attempts_table,
        delivery_queue_url,
        dlq_url,
        relay_failure_queue_url,
        state_machine_arn,
        health_table,
        operational_topic_arn,
        portal_table,
        portal_key_secret,
        secrets_key_arn,
    })
}
