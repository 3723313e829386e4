//! Builds each handler's dependencies from its configuration and one shared AWS config.
//! The Lambda binaries and local mode both call these, so they run the same wiring. Every
//! client gets the deadlines and bounded retries of [`crate::budget`].

use std::sync::Arc;

use aws_config::SdkConfig;
use tern_core::operational::{FanOut, OperationalEventSink};
use tern_handlers::config::{OperationalConfig, RelayConfig, ReplayConfig, SenderConfig};
use tern_handlers::endpoint_cache::CachedEndpoints;
use tern_handlers::relay::RelayDeps;
use tern_handlers::replay::ReplayDeps;
use tern_handlers::sender::SenderDeps;
use tern_http::client::ClientBuildError;
use tern_http::{ClientOptions, DeliveryClient, DestinationPolicy, DnsResolver, HostLookup};

use tern_handlers::health::CircuitBreaker;

use crate::{
    DynamoEndpointStore, DynamoFanOutCheckpoints, DynamoHealthStore, DynamoLedger, OutboxEventSink,
    SecretsAtRest, SnsEventSink, SqsQueue, StepFunctionsScheduler,
};

/// The relay's dependencies.
pub fn relay_deps(config: &RelayConfig, aws: &SdkConfig) -> RelayDeps {
    let aws = &crate::budget::bounded(aws);
    let sqs = aws_sdk_sqs::Client::new(aws);
    RelayDeps {
        // The relay needs subscriptions only: it never reads a secret, and never calls KMS.
        endpoints: Arc::new(
            DynamoEndpointStore::new(aws_sdk_dynamodb::Client::new(aws), &config.endpoints_table)
                .with_secrets(SecretsAtRest::Hidden),
        ),
        delivery_queue: Arc::new(SqsQueue::new(sqs.clone(), &config.delivery_queue_url)),
        failure_queue: Arc::new(SqsQueue::new(sqs, &config.relay_failure_queue_url)),
        max_payload_bytes: config.max_payload_bytes,
        checkpoints: Some(Arc::new(DynamoFanOutCheckpoints::new(
            aws_sdk_dynamodb::Client::new(aws),
            &config.attempts_table,
            config.attempt_log_ttl_days,
        ))),
    }
}

/// How long a warm sender keeps an unwrapped key of endpoint secrets: 1 hour. Mostly the
/// keyring's epoch key (one for every endpoint, `tern2`), so a warm sender calls KMS
/// `Decrypt` about once an hour per epoch in use, whatever the number of endpoints
/// (docs/cost.md, "Secrets at rest"); also each `tern1` data key of values sealed before
/// the keyring, until `tern endpoints encrypt-secrets` re-seals them. A key never goes
/// stale (a value names its epoch or carries its data key); what waits for this is a
/// revocation (the KMS key disabled, `kms:Decrypt` removed from the role), which reaches
/// a warm sender within the hour. Never less than the endpoint cache's lifetime.
pub const SENDER_DATA_KEY_TTL: std::time::Duration = std::time::Duration::from_secs(60 * 60);

/// The sender's dependencies. `lookup` is the name resolver behind the SSRF guard:
/// `None` for [`DnsResolver::system`] (one per sender process: its cache keeps each
/// answer for its TTL across the invocations of a warm sender).
///
/// # Errors
/// [`ClientBuildError`] when the HTTP client cannot start.
pub fn sender_deps(
    config: &SenderConfig,
    aws: &SdkConfig,
    lookup: Option<Arc<dyn HostLookup>>,
) -> Result<SenderDeps, ClientBuildError> {
    let events = operational_sink(&config.operational, aws);
    let aws = &crate::budget::bounded(aws);
    let sqs = aws_sdk_sqs::Client::new(aws);
    let ddb = aws_sdk_dynamodb::Client::new(aws);
    let ddb_health = ddb.clone();
    let client = DeliveryClient::new(ClientOptions {
        policy: DestinationPolicy {
            https_only: config.https_only,
            allow: config.allow_destinations.clone(),
            nat64: config.nat64,
        },
        lookup: lookup.unwrap_or_else(|| Arc::new(DnsResolver::system())),
        ..ClientOptions::default()
    })?
    // Client certificates for mutual TLS, read from Secrets Manager when an endpoint has one.
    .with_certificate_secrets(Arc::new(
        crate::certificates::SecretsManagerCertificates::new(aws_sdk_secretsmanager::Client::new(
            aws,
        )),
    ));
    // KMS is called on an endpoint cache miss only, and then at most once per epoch (and
    // per tern1 data key) per SENDER_DATA_KEY_TTL (never less than the endpoint cache's).
    let secrets = crate::kms::secrets_at_rest(
        aws,
        config.secrets_key_id.as_deref(),
        SENDER_DATA_KEY_TTL.max(config.endpoint_cache_ttl()),
    );
    Ok(SenderDeps {
        // Warm instances serve endpoints from memory for `endpoint_cache` (30 s default,
        // times the time scale).
        endpoints: Arc::new(CachedEndpoints::new(
            Arc::new(
                DynamoEndpointStore::new(ddb.clone(), &config.endpoints_table)
                    .with_secrets(secrets),
            ),
            config.endpoint_cache_ttl(),
        )),
        ledger: Arc::new(DynamoLedger::new(
            ddb,
            &config.attempts_table,
            config.attempt_log_ttl_days,
        )),
        delivery_queue: Arc::new(SqsQueue::new(sqs.clone(), &config.delivery_queue_url)),
        dlq: Arc::new(SqsQueue::new(sqs, &config.dlq_url)),
        scheduler: config.delay_state_machine_arn.as_ref().map(|arn| {
            Arc::new(StepFunctionsScheduler::new(
                aws_sdk_sfn::Client::new(aws),
                arn,
                &config.delivery_queue_url,
            )) as Arc<dyn tern_core::ports::DelayScheduler>
        }),
        client,
        policy: config.policy.clone(),
        breaker: Some(Arc::new(CircuitBreaker::new(
            Arc::new(DynamoHealthStore::new(ddb_health, &config.health_table)),
            events,
            config.health.clone(),
            config.policy.time_scale,
            config.health_cache,
        ))),
    })
}

/// What the sender keeps in reserve against its invocation's deadline with the clients
/// this wiring builds: each AWS call ends within [`crate::budget::OPERATION_TIMEOUT`]
/// (6 s), an attempt within 30 s, and 1 s is kept for the answer
/// ([`tern_handlers::deadline::TimeReserve::for_aws_calls`]).
pub fn sender_time_reserve() -> tern_handlers::deadline::TimeReserve {
    tern_handlers::deadline::TimeReserve::for_aws_calls(crate::budget::OPERATION_TIMEOUT)
}

/// The replay function's dependencies.
pub fn replay_deps(config: &ReplayConfig, aws: &SdkConfig) -> ReplayDeps {
    let aws = &crate::budget::bounded(aws);
    let sqs = aws_sdk_sqs::Client::new(aws);
    ReplayDeps {
        dlq: Arc::new(SqsQueue::new(sqs.clone(), &config.dlq_url)),
        delivery_queue: Arc::new(SqsQueue::new(sqs, &config.delivery_queue_url)),
        // The dead-letter record, when the stack names the attempts table: its role may
        // read the record and delete its entries only (`dl#*` partitions). The TTL is for
        // writes, which the replay makes none of.
        ledger: config.attempts_table.as_ref().map(|table| {
            Arc::new(DynamoLedger::new(
                aws_sdk_dynamodb::Client::new(aws),
                table,
                30,
            )) as Arc<dyn tern_core::ports::DeliveryLedger>
        }),
    }
}

/// Where the sender reports endpoint health changes: a [`FanOut`] of the SNS topic and the
/// outbox table, each when configured; an empty `FanOut` (which accepts and drops every
/// event) when neither is.
pub fn operational_sink(
    config: &OperationalConfig,
    aws: &SdkConfig,
) -> Arc<dyn OperationalEventSink> {
    let aws = &crate::budget::bounded(aws);
    let mut sinks: Vec<Arc<dyn OperationalEventSink>> = Vec::new();
    if let Some(arn) = &config.topic_arn {
        sinks.push(Arc::new(SnsEventSink::new(
            aws_sdk_sns::Client::new(aws),
            arn,
        )));
    }
    if let Some(table) = &config.outbox_table {
        sinks.push(Arc::new(OutboxEventSink::new(
            aws_sdk_dynamodb::Client::new(aws),
            table,
        )));
    }
    Arc::new(FanOut(sinks))
}
