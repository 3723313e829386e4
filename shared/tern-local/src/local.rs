//! One local deployment of Tern: resources on a moto server, the three handlers wired with
//! the same code as the Lambda binaries, and the pollers that trigger them.

use std::sync::Arc;
use std::time::Duration;

use aws_config::SdkConfig;
use tern_aws::SqsQueue;
use tern_core::RetrySchedule;
use tern_core::operational::OperationalEventSink;
use tern_handlers::config::{Env, OperationalConfig, RelayConfig, ReplayConfig, SenderConfig};
use tern_handlers::relay::RelayDeps;
use tern_handlers::replay::ReplayDeps;
use tern_handlers::sender::SenderDeps;
use tern_http::HostLookup;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tokio::task::JoinHandle;

use crate::pollers::{
    LocalEvent, QueuePollerOptions, StreamPollerOptions, spawn_queue_pollers, spawn_stream_poller,
};
use crate::resources::{Resources, provision};
use crate::settings::infra_settings;

/// How to set up a local deployment.
#[derive(Clone)]
pub struct LocalOptions {
    /// Resource name prefix (unique per test).
    pub prefix: String,
    /// Multiplies every real retry wait (0.001 plays 24 h out in ~86 s).
    pub time_scale: f64,
    /// Default retry schedule; `None` uses `infra/settings.json`.
    pub schedule: Option<RetrySchedule>,
    /// Redrive `maxReceiveCount`; `None` uses the settings file.
    pub max_receive_count: Option<i32>,
    /// Attempt deadline, milliseconds; `None` uses the settings file.
    pub attempt_timeout_ms: Option<u64>,
    /// Networks the SSRF guard lets through (local receivers listen on 127.0.0.1).
    pub allow_destinations: Vec<String>,
    /// Name resolver behind the SSRF guard; `None` for the system resolver.
    pub lookup: Option<Arc<dyn HostLookup>>,
    /// Visibility timeout of the local queue poller, seconds; `None` uses the settings file.
    pub visibility_timeout_seconds: Option<i32>,
    /// Concurrent sender pollers.
    pub sender_concurrency: u32,
    /// Apply the stream mapping's INSERT filter.
    pub insert_filter: bool,
    /// Start the Step Functions scheduler for waits over 900 s.
    pub step_functions: bool,
    /// Serve the operator's console on 127.0.0.1 with the pollers: the port asked for
    /// first (any free one when taken), `None` for no console.
    pub console_port: Option<u16>,
    /// The endpoint-health thresholds; `None` uses `infra/settings.json` (`health`).
    pub health: Option<tern_core::health::HealthPolicy>,
    /// Retries of a failing stream batch before it is given up to the relay-failure
    /// queue; `None` uses the settings file (`eventSources.relay.maximumRetryAttempts`).
    pub relay_max_retries: Option<u32>,
    /// Serve the Tern API on 127.0.0.1 with the pollers: the port asked for first (any
    /// free one when taken), `None` for no API (`tern local` asks for
    /// [`crate::api::DEFAULT_API_PORT`]; tests start it with [`LocalTern::start_api`]).
    pub api_port: Option<u16>,
    /// Local mode's span file, which the console's trace page reads (`tern local` and
    /// `tern trace` use [`tern_handlers::span_log::DEFAULT_PATH`], relative to the working
    /// directory).
    pub span_file: std::path::PathBuf,
}

impl Default for LocalOptions {
    fn default() -> Self {
        Self {
            prefix: "tern-".into(),
            time_scale: 1.0,
            schedule: None,
            max_receive_count: None,
            attempt_timeout_ms: None,
            allow_destinations: vec!["127.0.0.1/32".into()],
            lookup: None,
            visibility_timeout_seconds: None,
            sender_concurrency: 2,
            insert_filter: true,
            step_functions: true,
            console_port: Some(crate::console::DEFAULT_CONSOLE_PORT),
            health: None,
            relay_max_retries: None,
            api_port: None,
            span_file: tern_handlers::span_log::DEFAULT_PATH.into(),
        }
    }
}

/// A running local deployment. Pollers stop when it is dropped.
pub struct LocalTern {
    /// SDK configuration pointing at moto.
    pub aws: SdkConfig,
    /// Resource names.
    pub resources: Resources,
    /// Relay dependencies.
    pub relay: Arc<RelayDeps>,
    /// Sender dependencies.
    pub sender: Arc<SenderDeps>,
    /// Replay dependencies.
    pub replay: ReplayDeps,
    /// Where endpoint health changes go: the operational-events topic and the outbox
    /// (`tern_aws::wiring::operational_sink`, the same wiring as the sender Lambda).
    pub operational: Arc<dyn OperationalEventSink>,
    /// The environment the functions would get, as `(name, value)` pairs.
    pub env: Vec<(String, String)>,
    /// Address of the operator's console, once [`Self::start_pollers`] started it.
    pub console: Option<std::net::SocketAddr>,
    /// Address of the Tern API, once [`Self::start_api`] started it.
    pub api: Option<std::net::SocketAddr>,
    /// The resolver behind the SSRF guard (`LocalOptions::lookup`), for the API's checks.
    pub(crate) lookup: Option<Arc<dyn HostLookup>>,
    /// The span file the console's trace page reads (`LocalOptions::span_file`).
    pub span_file: std::path::PathBuf,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for LocalTern {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Local mode could not start.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// Creating resources failed.
    #[error(transparent)]
    Provision(#[from] crate::resources::ProvisionError),
    /// A setting is invalid.
    #[error(transparent)]
    Config(#[from] tern_handlers::config::ConfigError),
    /// The HTTP client did not start.
    #[error(transparent)]
    Client(#[from] tern_http::client::ClientBuildError),
}

impl LocalTern {
    /// Creates the resources on `aws` (a moto server) and wires the handlers. Call
    /// [`Self::start_pollers`] to begin processing.
    ///
    /// # Errors
    /// [`LocalError`].
    pub async fn create(aws: SdkConfig, options: &LocalOptions) -> Result<Self, LocalError> {
        let settings = infra_settings();
        let resources = provision(&aws, &options.prefix, options.max_receive_count).await?;
        let schedule = options.schedule.clone().unwrap_or_else(|| {
            RetrySchedule::new(settings.delivery.retry_schedule.clone()).unwrap_or_default()
        });
        let mut env: Vec<(String, String)> = resources
            .env()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        if !options.step_functions {
            env.retain(|(k, _)| k != "TERN_DELAY_STATE_MACHINE_ARN");
        }
        let schedule_text = schedule
            .delays()
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",");
        env.extend([
            ("TERN_RETRY_SCHEDULE".to_owned(), schedule_text),
            ("TERN_TIME_SCALE".to_owned(), options.time_scale.to_string()),
            (
                "TERN_ATTEMPT_TIMEOUT_MS".to_owned(),
                options
                    .attempt_timeout_ms
                    .unwrap_or(settings.delivery.attempt_timeout_ms)
                    .to_string(),
            ),
            ("TERN_HTTPS_ONLY".to_owned(), "false".to_owned()),
            (
                "TERN_ALLOW_DESTINATIONS".to_owned(),
                options.allow_destinations.join(","),
            ),
            (
                "TERN_MAX_PAYLOAD_BYTES".to_owned(),
                settings.delivery.max_payload_bytes.to_string(),
            ),
            (
                "TERN_ATTEMPT_LOG_TTL_DAYS".to_owned(),
                settings.delivery.attempt_log_ttl_days.to_string(),
            ),
        ]);
        env.extend(
            settings
                .health
                .env()
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v)),
        );
        if let Some(h) = &options.health {
            // The test's thresholds replace the settings file's.
            env.retain(|(k, _)| !k.starts_with("TERN_HEALTH_") || k == "TERN_HEALTH_TABLE");
            env.extend([
                (
                    "TERN_HEALTH_FAILURE_THRESHOLD".to_owned(),
                    h.failure_threshold.to_string(),
                ),
                (
                    "TERN_HEALTH_PROBE_INTERVAL_SECONDS".to_owned(),
                    h.probe_interval_seconds.to_string(),
                ),
                (
                    "TERN_HEALTH_WINDOW_SECONDS".to_owned(),
                    h.window_seconds.to_string(),
                ),
                (
                    "TERN_HEALTH_DISABLE_BELOW_PERCENT".to_owned(),
                    (h.disable_below * 100.0).to_string(),
                ),
                (
                    "TERN_HEALTH_DEGRADED_BELOW_PERCENT".to_owned(),
                    (h.degraded_below * 100.0).to_string(),
                ),
                (
                    "TERN_HEALTH_MIN_ATTEMPTS".to_owned(),
                    h.min_attempts.to_string(),
                ),
                (
                    "TERN_HEALTH_MAX_PAUSE_SECONDS".to_owned(),
                    h.max_pause_seconds.to_string(),
                ),
            ]);
        }
        let lookup_env = env.clone();
        let lookup = move |k: &str| {
            lookup_env
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
        };
        let vars = Env(&lookup);
        let relay = tern_aws::wiring::relay_deps(&RelayConfig::from_env(&vars)?, &aws);
        let sender = tern_aws::wiring::sender_deps(
            &SenderConfig::from_env(&vars)?,
            &aws,
            options.lookup.clone(),
        )?;
        let mut replay = tern_aws::wiring::replay_deps(&ReplayConfig::from_env(&vars)?, &aws);
        // Local mode's tools share the sender's ledger: the tenants' dead-letter records.
        replay.ledger = Some(sender.ledger.clone());
        let operational =
            tern_aws::wiring::operational_sink(&OperationalConfig::from_env(&vars)?, &aws);
        Ok(Self {
            aws,
            resources,
            relay: Arc::new(relay),
            sender: Arc::new(sender),
            replay,
            operational,
            env,
            console: None,
            api: None,
            lookup: options.lookup.clone(),
            span_file: options.span_file.clone(),
            tasks: Vec::new(),
        })
    }

    /// Starts the stream poller and the queue pollers. Returns the channel their reports
    /// arrive on.
    pub fn start_pollers(&mut self, options: &LocalOptions) -> UnboundedReceiver<LocalEvent> {
        let settings = infra_settings();
        let (tx, rx) = unbounded_channel();
        let failure_queue = Arc::new(SqsQueue::new(
            aws_sdk_sqs::Client::new(&self.aws),
            &self.resources.relay_failure_queue_url,
        ));
        self.tasks.push(spawn_stream_poller(
            &self.aws,
            self.resources.outbox_stream_arn.clone(),
            self.relay.clone(),
            failure_queue,
            StreamPollerOptions {
                batch_size: settings.event_sources.relay.batch_size,
                max_retries: options
                    .relay_max_retries
                    .unwrap_or(settings.event_sources.relay.maximum_retry_attempts),
                insert_filter: options.insert_filter,
                idle: Duration::from_millis(100),
                invocation_timeout: Duration::from_secs(settings.functions.relay.timeout_seconds),
            },
            Some(tx.clone()),
        ));
        self.tasks.extend(spawn_queue_pollers(
            &self.aws,
            self.resources.delivery_queue_url.clone(),
            self.sender.clone(),
            QueuePollerOptions {
                batch_size: settings.event_sources.sender.batch_size,
                visibility_timeout_seconds: options
                    .visibility_timeout_seconds
                    .unwrap_or(settings.queues.delivery.visibility_timeout_seconds),
                concurrency: options.sender_concurrency,
                function_timeout: Duration::from_secs(settings.functions.sender.timeout_seconds),
            },
            Some(tx),
        ));
        if let Some(port) = options.console_port {
            self.start_console(port);
        }
        if let Some(port) = options.api_port {
            self.start_api(port, crate::api::local_credentials());
        }
        rx
    }

    /// Serves the Tern API on 127.0.0.1 (`port`, or any free port when it is taken or 0),
    /// accepting SigV4 signatures of `credentials`; records its address in [`Self::api`]
    /// and as `TERN_API_URL` in [`Self::env`]. An API that cannot start is logged and left
    /// out: delivery does not depend on it.
    pub fn start_api(
        &mut self,
        port: u16,
        credentials: Vec<tern_api::sigv4::LocalCredential>,
    ) -> Option<std::net::SocketAddr> {
        let deps = match crate::api::deps(self) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(error = %e, "the local API could not be wired");
                return None;
            }
        };
        let auth = crate::api::authenticator(&deps, credentials);
        let router = tern_api::router(deps, auth);
        match crate::console::bind(port).and_then(|l| Ok((l.local_addr()?, l))) {
            Ok((addr, listener)) => {
                self.tasks.push(crate::api::spawn(listener, router));
                self.api = Some(addr);
                self.env.retain(|(k, _)| k != crate::api::API_URL_VAR);
                self.env
                    .push((crate::api::API_URL_VAR.to_owned(), crate::api::url(addr)));
                Some(addr)
            }
            Err(e) => {
                tracing::warn!(error = %e, "the local API could not bind 127.0.0.1");
                None
            }
        }
    }

    /// Serves the operator's console on 127.0.0.1 (`port`, or any free port when it is
    /// taken) and records its address in [`Self::console`]. A console that cannot bind is
    /// logged and left out: delivery does not depend on it.
    pub fn start_console(&mut self, port: u16) -> Option<std::net::SocketAddr> {
        let namespace = self
            .env
            .iter()
            .find(|(k, _)| k == "TERN_METRICS_NAMESPACE")
            .map_or_else(|| "Tern".to_owned(), |(_, v)| v.clone());
        let deps = crate::console::console_deps(self, &namespace);
        match crate::console::bind(port).and_then(|l| Ok((l.local_addr()?, l))) {
            Ok((addr, listener)) => {
                self.tasks.push(crate::console::spawn(
                    listener,
                    deps,
                    self.span_file.clone(),
                ));
                self.console = Some(addr);
                Some(addr)
            }
            Err(e) => {
                tracing::warn!(error = %e, "the local console could not bind 127.0.0.1");
                None
            }
        }
    }

    /// A DynamoDB client on the local AWS.
    pub fn dynamodb(&self) -> aws_sdk_dynamodb::Client {
        aws_sdk_dynamodb::Client::new(&self.aws)
    }

    /// An SQS client on the local AWS.
    pub fn sqs(&self) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::new(&self.aws)
    }

    /// The endpoints table as the `tern` CLI reaches it: past the sender's cache, secrets
    /// sealed and opened with this deployment's key (unwrapped data keys kept 60 s).
    pub fn endpoint_table(&self) -> tern_aws::DynamoEndpointStore {
        tern_aws::DynamoEndpointStore::new(self.dynamodb(), &self.resources.endpoints_table)
            .with_secrets(tern_aws::kms::secrets_at_rest(
                &self.aws,
                Some(&self.resources.secrets_key_arn),
                Duration::from_secs(60),
            ))
    }
}
