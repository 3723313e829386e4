//! The API's request and response bodies. Schema names (the Rust type names here) and
//! field names are the contract of `openapi.json` and of the clients generated from it:
//! add fields, never rename. Times are RFC 3339 UTC; durations say their unit in the name.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::{IntoParams, ToSchema};

pub use crate::reach::{
    AuthBasic, AuthBasicType, AuthBearer, AuthBearerType, AuthNone, AuthNoneType,
    AuthOauth2ClientCredentials, AuthOauth2ClientCredentialsType, ClientAuthMethod, CustomHeader,
    CustomHeaderSetting, ReceiverAuthSetting, ReceiverAuthType, ReceiverAuthView,
    RotateSigningKeyRequest, RotatedSigningKey, Signatures, SigningKeyInfo,
};

/// Deserializes a field that may be absent (no change), `null` (back to the default) or a
/// value: `Some(None)` for `null`.
fn nullable<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// A request's time: RFC 3339 with an offset (`2026-12-01T09:00:00Z`,
/// `2026-12-01T10:00:00+01:00`). Anything else gets an error that shows the form and what is
/// missing (issue 28: a time without an offset got "premature end of input at line 1
/// column 37"). The value is echoed cut to 64 characters.
fn time_from(text: &str) -> Result<DateTime<Utc>, String> {
    let text = text.trim();
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| {
            let shown = tern_core::sqs_text::clean(text, 64);
            // A date and a time but no offset: the usual mistake, named.
            let no_offset =
                chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f").is_ok();
            let why = if no_offset {
                "it has no offset: add Z for UTC (or +hh:mm)"
            } else {
                "write it as 2026-12-01T09:00:00Z"
            };
            format!("{shown:?} is not an RFC 3339 time with an offset: {why}")
        })
}

/// Deserializes a required time ([`time_from`]).
fn time<'de, D: serde::Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
    let text = String::deserialize(d)?;
    time_from(&text).map_err(serde::de::Error::custom)
}

/// Deserializes an optional time ([`time_from`]); `null` or absent is `None`.
fn optional_time<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<DateTime<Utc>>, D::Error> {
    Option::<String>::deserialize(d)?
        .map(|t| time_from(&t))
        .transpose()
        .map_err(serde::de::Error::custom)
}

/// Request body format of an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PayloadFormat {
    /// The payload exactly as published.
    Raw,
    /// The payload wrapped as `{"type","timestamp","data"}` (Standard Webhooks).
    StandardWebhooks,
}

impl From<PayloadFormat> for tern_core::PayloadFormat {
    fn from(f: PayloadFormat) -> Self {
        match f {
            PayloadFormat::Raw => Self::Raw,
            PayloadFormat::StandardWebhooks => Self::StandardWebhooks,
        }
    }
}

impl From<tern_core::PayloadFormat> for PayloadFormat {
    fn from(f: tern_core::PayloadFormat) -> Self {
        match f {
            tern_core::PayloadFormat::Raw => Self::Raw,
            tern_core::PayloadFormat::StandardWebhooks => Self::StandardWebhooks,
        }
    }
}

/// A new endpoint.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"url": "https://receiver.example.com/webhooks", "event_types": ["order.paid"], "description": "Acme's order hook"}))]
pub struct NewEndpoint {
    /// Receiver URL: `https://` (plain `http://` only where the deployment allows it), at
    /// most 2,048 bytes (`tern_core::endpoint::MAX_URL_LEN`), no credentials; its host must
    /// not resolve to a private, loopback or metadata address (the SSRF guard).
    #[schema(max_length = 2048, pattern = "^[Hh][Tt][Tt][Pp][Ss]?://")]
    pub url: String,
    /// Event types delivered (`*`: all of the tenant's own types). Default `["*"]`.
    #[serde(default)]
    pub event_types: Option<Vec<String>>,
    /// Free text: at most 1,024 bytes (`tern_core::sqs_text::MAX_TEXT_BYTES`), no control
    /// characters.
    #[serde(default)]
    #[schema(max_length = 1024)]
    pub description: Option<String>,
    /// Attempt deadline, milliseconds, 1,000..=30,000 (`tern_core::endpoint::MIN_TIMEOUT_MS`,
    /// `MAX_TIMEOUT_MS`); default: the deployment's.
    #[serde(default)]
    #[schema(minimum = 1000, maximum = 30000)]
    pub timeout_ms: Option<u64>,
    /// Waits before each retry, seconds (at most 50 of them, `tern_core::retry::MAX_SCHEDULE_LEN`,
    /// each 1 to 604,800: a week; jitter of 0-10 % is added); default: the deployment's
    /// schedule.
    #[serde(default)]
    #[schema(max_items = 50)]
    pub schedule_seconds: Option<Vec<u64>>,
    /// Attempt budget, at least 1 (capped at the schedule's length + 1); default: the
    /// schedule's length + 1.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub max_attempts: Option<u32>,
    /// Request body format; default `raw`.
    #[serde(default)]
    pub payload_format: Option<PayloadFormat>,
    /// Rate limit: at most this many requests per second to the receiver, across every
    /// sender batch, 1..=1,000 (`tern_core::rate_limit::MAX_PER_SECOND`); deliveries over
    /// it wait on the queue without spending an attempt. Default: no limit.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1000)]
    pub max_per_second: Option<u32>,
    /// Mutual TLS: the ARN of the Secrets Manager secret holding the client certificate
    /// chain (leaf first) and its private key as PEM text; its name must start with the
    /// tenant's own prefix, `tern/mtls/<tenant_id>/` (another tenant's secret is refused,
    /// whether or not it exists). Offered to a receiver that asks for a client
    /// certificate. Default: none.
    #[serde(default)]
    pub client_certificate_arn: Option<String>,
    /// Custom headers sent with every attempt (at most 20,
    /// `tern_core::custom_headers::MAX_CUSTOM_HEADERS`; 4,096 bytes together). Secret ones
    /// are never shown again. Default: none.
    #[serde(default)]
    #[schema(max_items = 20)]
    pub headers: Option<Vec<CustomHeaderSetting>>,
    /// Authentication to the receiver. Default: `none` (the signatures authenticate).
    #[serde(default)]
    pub auth: Option<ReceiverAuthSetting>,
    /// Signature schemes: `v1` (HMAC, the default), `v1a` (Ed25519) or `both`. With
    /// `v1a` or `both` an Ed25519 signing key is made; its public key is in the answer's
    /// `endpoint.signing_keys`.
    #[serde(default)]
    pub signatures: Option<Signatures>,
    /// True to send each attempt's W3C Trace Context `traceparent` header (the attempt
    /// span's when Tern traces, else the published event's), so a receiver that traces
    /// sees the delivery as the parent of its own work. Default: false.
    #[serde(default)]
    pub send_traceparent: Option<bool>,
}

/// A change to an endpoint: only the fields present change. `null` returns an optional
/// setting to its default.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EndpointPatch {
    /// New receiver URL (checked as at creation; at most 2,048 bytes).
    #[serde(default)]
    #[schema(max_length = 2048, pattern = "^[Hh][Tt][Tt][Pp][Ss]?://")]
    pub url: Option<String>,
    /// New subscriptions.
    #[serde(default)]
    pub event_types: Option<Vec<String>>,
    /// New description (at most 1,024 bytes, no control characters); `null` removes it.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>, max_length = 1024)]
    pub description: Option<Option<String>>,
    /// New attempt deadline, milliseconds, 1,000..=30,000; `null`: the deployment's.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<u64>, minimum = 1000, maximum = 30000)]
    pub timeout_ms: Option<Option<u64>>,
    /// New retry waits, seconds (at most 50, each 1 to 604,800); `null`: the deployment's
    /// schedule.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<Vec<u64>>, max_items = 50)]
    pub schedule_seconds: Option<Option<Vec<u64>>>,
    /// New attempt budget, at least 1; `null`: the schedule's length + 1.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<u32>, minimum = 1)]
    pub max_attempts: Option<Option<u32>>,
    /// New request body format.
    #[serde(default)]
    pub payload_format: Option<PayloadFormat>,
    /// Send each attempt's W3C `traceparent` header, or stop sending it.
    #[serde(default)]
    pub send_traceparent: Option<bool>,
    /// New rate limit, requests per second, 1..=1,000; `null` removes the limit.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    pub max_per_second: Option<Option<u32>>,
    /// New client certificate secret (ARN, name under the tenant's own
    /// `tern/mtls/<tenant_id>/`) for mutual TLS; `null` removes it.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>)]
    pub client_certificate_arn: Option<Option<String>>,
    /// New custom headers: the whole list, replacing the stored one (a header left out is
    /// removed; `[]` or `null` removes them all; at most 20). A secret entry without a
    /// `value` keeps the stored value of the secret header of that name.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<Vec<CustomHeaderSetting>>, max_items = 20)]
    pub headers: Option<Option<Vec<CustomHeaderSetting>>>,
    /// New authentication, replacing the stored one (`null`: `none`). Its secret may be
    /// left out to keep the stored one: a basic password with the same user name, a
    /// bearer token, an OAuth2 client secret with the same token URL and client id.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<ReceiverAuthSetting>)]
    pub auth: Option<Option<ReceiverAuthSetting>>,
    /// New signature schemes (`null`: `v1`). Turning `v1a` on makes an Ed25519 signing key
    /// when the endpoint has no current one; turning it off keeps the keys.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<Signatures>)]
    pub signatures: Option<Option<Signatures>>,
}

/// One signing secret, never its value.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SecretInfo {
    /// `sha256:` and 12 hex digits of the secret: tells secrets apart.
    pub fingerprint: String,
    /// `current` (signs, no expiry), `previous` (signs until `expires_at`) or `expired`.
    pub state: String,
    /// When it was added.
    pub created_at: DateTime<Utc>,
    /// When it stops signing; `null` for the current secret.
    pub expires_at: Option<DateTime<Utc>>,
}

/// An endpoint. Its secrets appear as fingerprints only.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Endpoint {
    /// Endpoint id (`ep_...`).
    pub id: String,
    /// Owning tenant.
    pub tenant_id: String,
    /// Receiver URL.
    pub url: String,
    /// Free text.
    pub description: Option<String>,
    /// Subscribed event types.
    pub event_types: Vec<String>,
    /// False when disabled.
    pub enabled: bool,
    /// Why it is disabled.
    pub disabled_reason: Option<String>,
    /// When it was disabled.
    pub disabled_at: Option<DateTime<Utc>>,
    /// The reason it had when it was last enabled again.
    pub last_disabled_reason: Option<String>,
    /// When it was disabled before it was last enabled again.
    pub last_disabled_at: Option<DateTime<Utc>>,
    /// Waits before each retry, seconds; `null`: the deployment's schedule.
    pub schedule_seconds: Option<Vec<u64>>,
    /// Attempt budget; `null`: the schedule's length + 1.
    pub max_attempts: Option<u32>,
    /// Attempt deadline, milliseconds; `null`: the deployment's.
    pub timeout_ms: Option<u64>,
    /// Request body format.
    pub payload_format: PayloadFormat,
    /// Rate limit, requests per second across every sender batch; `null`: no limit.
    pub max_per_second: Option<u32>,
    /// True when each attempt carries the W3C `traceparent` header.
    pub send_traceparent: bool,
    /// Signing secrets, newest first (fingerprints).
    pub secrets: Vec<SecretInfo>,
    /// Signature schemes in `webhook-signature`.
    pub signatures: Signatures,
    /// Ed25519 signing keys for `v1a`, newest first, by their public keys (what the
    /// receiver verifies with; none until `v1a` is first turned on or a key is rotated in).
    pub signing_keys: Vec<SigningKeyInfo>,
    /// Custom headers; a secret one's value is `null`.
    pub headers: Vec<CustomHeader>,
    /// Authentication to the receiver, its secret named but never shown.
    pub auth: ReceiverAuthView,
    /// Mutual TLS: the Secrets Manager secret (ARN) of its client certificate; `null`
    /// for none. The certificate and key themselves are never read by the API.
    pub client_certificate_arn: Option<String>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When its settings last changed.
    pub updated_at: Option<DateTime<Utc>>,
}

impl From<tern_ops::EndpointView> for Endpoint {
    fn from(v: tern_ops::EndpointView) -> Self {
        Self {
            id: v.id,
            tenant_id: v.tenant_id,
            url: v.url,
            description: v.description,
            event_types: v.event_types,
            enabled: v.enabled,
            disabled_reason: v.disabled_reason,
            disabled_at: v.disabled_at,
            last_disabled_reason: v.last_disabled_reason,
            last_disabled_at: v.last_disabled_at,
            schedule_seconds: v.schedule_seconds,
            max_attempts: v.max_attempts,
            timeout_ms: v.timeout_ms,
            payload_format: v.payload_format.into(),
            max_per_second: v.max_per_second,
            send_traceparent: v.send_traceparent,
            secrets: v
                .secrets
                .into_iter()
                .map(|s| SecretInfo {
                    fingerprint: s.fingerprint,
                    state: s.state.to_owned(),
                    created_at: s.created_at,
                    expires_at: s.expires_at,
                })
                .collect(),
            signatures: v.signatures.into(),
            signing_keys: v.signing_keys.into_iter().map(Into::into).collect(),
            headers: v.headers.into_iter().map(Into::into).collect(),
            auth: v.auth.into(),
            client_certificate_arn: v.client_certificate_arn,
            created_at: v.created_at,
            updated_at: v.updated_at,
        }
    }
}

impl Endpoint {
    /// The view of a stored endpoint now.
    pub fn of(e: &tern_core::Endpoint) -> Self {
        tern_ops::EndpointView::of(e, Utc::now()).into()
    }
}

/// A new endpoint and its signing secret: the only time the secret is shown.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EndpointCreated {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// The signing secret (`whsec_` + base64): store it now, it is never shown again.
    pub secret: String,
}

/// A page of endpoints.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EndpointList {
    /// Endpoints in id order.
    pub items: Vec<Endpoint>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// Which endpoints to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EndpointStateFilter {
    /// Enabled endpoints only.
    Enabled,
    /// Disabled endpoints only.
    Disabled,
}

/// Default page size: 50.
pub const DEFAULT_PAGE: u32 = 50;
/// Largest page size: 100.
pub const MAX_PAGE: u32 = 100;

/// Query of `listEndpoints`.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListEndpointsQuery {
    /// Only enabled or only disabled endpoints.
    pub state: Option<EndpointStateFilter>,
    /// Page size, 1..=100 (default 50).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
    /// The previous page's `next_cursor`.
    pub cursor: Option<String>,
}

/// Disabling an endpoint.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DisableRequest {
    /// Why (kept on the endpoint; at most 1,024 bytes, no control characters). Without one,
    /// an endpoint already disabled keeps its reason; otherwise "disabled by an operator".
    #[serde(default)]
    #[schema(max_length = 1024)]
    pub reason: Option<String>,
}

/// Rotating an endpoint's secret.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateSecretRequest {
    /// Hours the old secret keeps signing next to the new one, 0..=720 (default 24).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 720)]
    pub overlap_hours: Option<i64>,
}

/// A rotated secret: the only time the new secret is shown.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RotatedSecret {
    /// The new signing secret; it signs at once.
    pub secret: String,
    /// The endpoint after the rotation.
    pub endpoint: Endpoint,
}

/// An endpoint's last failure.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LastFailure {
    /// When the attempt started.
    pub at: DateTime<Utc>,
    /// HTTP status, when the receiver answered.
    pub status: Option<u16>,
    /// Error class, when there was no usable answer.
    pub error_class: Option<String>,
    /// Error text.
    pub error: Option<String>,
    /// The first bytes of what the receiver answered (at most 100 bytes), when it
    /// answered with a body.
    pub response_excerpt: Option<String>,
}

/// The pace an endpoint's receiver taught by pushing back (adaptive pacing,
/// docs/endpoint-health.md).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EndpointPace {
    /// Requests per second its deliveries are spaced at (the lower of this and the
    /// endpoint's own `max_per_second`).
    pub per_second: u32,
    /// When it last changed.
    pub changed_at: DateTime<Utc>,
    /// Still in slow start: doubling while the receiver takes it.
    pub slow_start: bool,
}

/// An endpoint's health, as `tern endpoints health` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EndpointHealth {
    /// Endpoint.
    pub endpoint_id: String,
    /// `healthy`, `degraded`, `paused`, `open` or `disabled`.
    pub state: String,
    /// Successes / attempts over the window, 0..=1; `null` without attempts.
    pub success_rate_window: Option<f64>,
    /// Successes / attempts over 24 hours.
    pub success_rate_24h: Option<f64>,
    /// Attempts in the window.
    pub attempts_window: u64,
    /// Attempts in 24 hours.
    pub attempts_24h: u64,
    /// The window, seconds.
    pub window_seconds: u64,
    /// Failed attempts since the last success.
    pub consecutive_failures: u64,
    /// When the current run of failures began (the first failed attempt after the last
    /// success); `null` while the last attempt succeeded.
    pub failing_since: Option<DateTime<Utc>>,
    /// While the circuit is open: when it opened.
    pub circuit_opened_at: Option<DateTime<Utc>>,
    /// Last success.
    pub last_success_at: Option<DateTime<Utc>>,
    /// Last failure, with the start of what the receiver answered.
    pub last_failure: Option<LastFailure>,
    /// While the circuit is open: when the next probe may go.
    pub next_probe_at: Option<DateTime<Utc>>,
    /// While the receiver's pause lasts: when it ends.
    pub paused_until: Option<DateTime<Utc>>,
    /// Deliveries waiting for a later attempt (retries scheduled, and deliveries held back
    /// by the circuit, a pause or the rate limit); a lower bound when `waiting_complete`
    /// is false.
    pub waiting: u64,
    /// False when the endpoint had more waiting deliveries than one answer counts (10,000).
    pub waiting_complete: bool,
    /// When the soonest waiting delivery is due.
    pub next_due_at: Option<DateTime<Utc>>,
    /// Since when the success rate is below the disable threshold.
    pub below_since: Option<DateTime<Utc>>,
    /// True while a change of its health was decided but its operational event is not
    /// published yet (the next batch for the endpoint publishes it).
    pub report_pending: bool,
    /// Why it is disabled.
    pub disabled_reason: Option<String>,
    /// The pace its receiver taught by pushing back; `null` while it has none.
    pub pace: Option<EndpointPace>,
}

/// What a receiver did with a test event.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TestSend {
    /// The test event's id (its `webhook-id`).
    pub event_id: String,
    /// `tern.test`.
    pub event_type: String,
    /// True for a 2xx answer.
    pub delivered: bool,
    /// HTTP status, when the receiver answered.
    pub status: Option<u16>,
    /// Start to end of the answer (or the error), milliseconds.
    pub latency_ms: u64,
    /// Error class when there was no usable answer (`timeout`, `connect`, `blocked`, ...).
    pub error_class: Option<String>,
    /// Error text.
    pub error: Option<String>,
    /// First bytes of the answer's body.
    pub response_excerpt: Option<String>,
    /// True when the body was longer than the excerpt.
    pub excerpt_truncated: bool,
}

/// How an attempt ended, as a filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeFilter {
    /// Delivered (2xx).
    Delivered,
    /// Anything but delivered.
    Failed,
    /// Failed, the next attempt scheduled.
    Retry,
    /// Dead-lettered.
    DeadLetter,
}

impl From<OutcomeFilter> for tern_core::delivery_log::OutcomeFilter {
    fn from(f: OutcomeFilter) -> Self {
        match f {
            OutcomeFilter::Delivered => Self::Delivered,
            OutcomeFilter::Failed => Self::Failed,
            OutcomeFilter::Retry => Self::Retry,
            OutcomeFilter::DeadLetter => Self::DeadLetter,
        }
    }
}

/// Query of `listEndpointAttempts`.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EndpointAttemptsQuery {
    /// Attempts that started at or after this time (RFC 3339).
    #[serde(default, deserialize_with = "optional_time")]
    pub since: Option<DateTime<Utc>>,
    /// Attempts that started before this time (RFC 3339, exclusive).
    #[serde(default, deserialize_with = "optional_time")]
    pub until: Option<DateTime<Utc>>,
    /// Only attempts with this kind of outcome.
    pub outcome: Option<OutcomeFilter>,
    /// Page size, 1..=100 (default 50).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
    /// The previous page's `next_cursor`.
    pub cursor: Option<String>,
}

/// One attempt in an endpoint's log (the event's attempts have the error text and a
/// longer response excerpt).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EndpointAttempt {
    /// Event (`webhook-id`).
    pub event_id: String,
    /// Endpoint.
    pub endpoint_id: String,
    /// Replays before this budget (0: the first; a resend or a DLQ replay adds one).
    pub replay_count: u32,
    /// 1-based attempt number within the budget.
    pub attempt: u32,
    /// 0, or the n-th takeover of the attempt after a lost lease.
    pub takeover: u32,
    /// When the attempt started.
    pub started_at: DateTime<Utc>,
    /// Start to end of the answer (or the error), milliseconds.
    pub latency_ms: u64,
    /// HTTP status, when the receiver answered.
    pub status: Option<u16>,
    /// Error class, when there was no usable answer.
    pub error_class: Option<String>,
    /// `delivered`, `retry`, `requeued` (the receiver pushed back or the failure was
    /// ours: the same attempt went back on the queue, none spent), `duplicate` (copies
    /// of the message found the pair delivered and were dropped without a POST),
    /// `dead_letter:<reason>` or `abandoned`.
    pub outcome: String,
    /// The start of what the receiver answered, for an attempt that was not delivered
    /// (at most 100 bytes, on one line); `null` when it answered no body, or was
    /// delivered.
    pub response_excerpt: Option<String>,
}

/// A page of an endpoint's attempts, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EndpointAttemptList {
    /// Attempts, newest first.
    pub items: Vec<EndpointAttempt>,
    /// Pass as `cursor` for the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

/// One try of an event to an endpoint, with its details.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Attempt {
    /// Endpoint.
    pub endpoint_id: String,
    /// Replays before this budget.
    pub replay_count: u32,
    /// 1-based attempt number within the budget.
    pub attempt: u32,
    /// 0, or the n-th takeover.
    pub takeover: u32,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// Start to end, milliseconds.
    pub latency_ms: u64,
    /// HTTP status.
    pub status: Option<u16>,
    /// `delivered`, `retry`, `requeued` (the receiver pushed back or the failure was
    /// ours: the same attempt went back on the queue, none spent), `duplicate` (copies
    /// of the message found the pair delivered and were dropped without a POST),
    /// `dead_letter:<reason>` or `abandoned`.
    pub outcome: String,
    /// Error text.
    pub error: Option<String>,
    /// First bytes of the answer's body (failures only).
    pub response_excerpt: Option<String>,
    /// True when the body was longer than the excerpt.
    pub excerpt_truncated: bool,
    /// `Location` of a 3xx answer (never followed).
    pub location: Option<String>,
    /// Wait before the next attempt as the schedule says it, seconds (a retry).
    pub next_wait_seconds: Option<u64>,
    /// When the next attempt is due (a retry): the attempt's end plus its wait at the
    /// deployment's time scale (local mode runs the schedule faster).
    pub next_attempt_due_at: Option<DateTime<Utc>>,
}

/// A budget that ended in the DLQ.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeadLetteredBudget {
    /// Endpoint.
    pub endpoint_id: String,
    /// Replays before that budget.
    pub replay_count: u32,
    /// Why (`exhausted`, `gone`, ...).
    pub reason: String,
    /// When.
    pub dead_lettered_at: DateTime<Utc>,
    /// True when a later budget (a replay or resend) exists.
    pub replayed_since: bool,
}

/// An event's attempts, oldest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EventAttempts {
    /// The event.
    pub event_id: String,
    /// Every try to this tenant's endpoints, oldest first.
    pub attempts: Vec<Attempt>,
    /// Budgets that ended in the DLQ.
    pub dead_letters: Vec<DeadLetteredBudget>,
}

/// A new event.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"id": "evt_3f9c2b7e-order-o_1-paid", "type": "order.paid", "payload": {"order_id": "o_1", "amount": 4200}}))]
pub struct NewEvent {
    /// Your event id (1-128 characters of `A-Za-z0-9_-`), the `webhook-id` receivers see.
    /// Publishing again with the same id and the same type and payload returns the
    /// original event; with a different one, 409. Ids are unique across the deployment:
    /// use unguessable ones (a UUID). Default: a new `evt_` id.
    #[serde(default)]
    pub id: Option<String>,
    /// Event type: 1-128 characters of `A-Za-z0-9._:-`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The payload: a JSON object, delivered byte for byte as sent, at most the
    /// deployment's payload limit (256 KiB by default).
    #[schema(value_type = std::collections::HashMap<String, serde_json::Value>)]
    pub payload: Box<RawValue>,
    /// The W3C Trace Context `traceparent` of the code that publishes
    /// (`00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`, lowercase, ids not all zeros):
    /// Tern's spans of this event (the fan-out, every attempt, the dead letter, a replay)
    /// join that trace. Default: the request's own `traceparent` header when it holds a
    /// valid one, else none (the event starts a trace of its own). An invalid one here is
    /// a 400 naming `traceparent`.
    #[serde(default)]
    #[schema(
        min_length = 55,
        max_length = 55,
        pattern = "^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"
    )]
    pub traceparent: Option<String>,
    /// The W3C Trace Context `tracestate` that goes with `traceparent`: at most 512
    /// characters and 32 `key=value` members (W3C Trace Context §3.3.1). Read only with
    /// `traceparent`: alone it is checked, then not used.
    #[serde(default)]
    #[schema(max_length = 512)]
    pub tracestate: Option<String>,
}

/// A published event.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PublishedEvent {
    /// Event id.
    pub id: String,
    /// Event type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// Tenant.
    pub tenant_id: String,
    /// When it was first published.
    pub created_at: DateTime<Utc>,
    /// False when this was a repeat of an earlier publish (nothing written).
    pub created: bool,
}

/// Events to publish in one request: each as `publishEvent` takes one.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"events": [
    {"id": "evt_3f9c2b7e-order-o_1-paid", "type": "order.paid", "payload": {"order_id": "o_1", "amount": 4200}},
    {"type": "order.shipped", "payload": {"order_id": "o_2"}}
]}))]
pub struct NewEventBatch {
    /// 1 to 100 events (`tern_ops::publish::MAX_BATCH_EVENTS`), published each on its own:
    /// each one's answer is in `results`, at the same index. The whole body is at most
    /// 2,621,440 bytes (`x-max-body-bytes`; `tern_api::MAX_BATCH_BODY_BYTES`), each payload
    /// at most the deployment's payload limit (256 KiB by default).
    #[schema(min_items = 1, max_items = 100)]
    pub events: Vec<NewEvent>,
}

/// What happened to one event of a batch: its `status` is what `publishEvent` would have
/// answered for it alone.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EventBatchResult {
    /// The event's id: the one given, or the `evt_` id made for it (also when it failed:
    /// publish it again with this id and a write that did land is not made twice). Absent
    /// when the id given is not an id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// 202: published; 200: published before with this id (nothing written); otherwise the
    /// status of `problem` (400, 409, 413; 503: retry it).
    pub status: u16,
    /// The event, when published now or before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<PublishedEvent>,
    /// Why it was not published; its `field` names the event (`events[3].payload`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<crate::problem::Problem>,
}

/// The answer to a batch: one result per event, in the request's order, and their counts.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PublishedEventBatch {
    /// One per event, at the event's index.
    pub results: Vec<EventBatchResult>,
    /// Events published now (status 202).
    pub created: u32,
    /// Events published before with the same id, type and payload (status 200).
    pub existing: u32,
    /// Events not published (any other status): 0 when the whole batch is in.
    pub failed: u32,
}

/// Where one delivery of an event stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// Not attempted yet (queued, or held back by the endpoint's circuit).
    Pending,
    /// An attempt is being made.
    InFlight,
    /// The last attempt failed; the next is scheduled.
    Retrying,
    /// Delivered.
    Delivered,
    /// In the DLQ.
    DeadLettered,
}

/// One delivery of an event.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeliveryStatus {
    /// Endpoint.
    pub endpoint_id: String,
    /// Where it stands.
    pub state: DeliveryState,
    /// Replay count of the latest budget (`null` before the first attempt).
    pub replay_count: Option<u32>,
    /// Latest attempt number in that budget.
    pub attempt: Option<u32>,
    /// When it was delivered.
    pub delivered_at: Option<DateTime<Utc>>,
}

/// An event and its deliveries.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Event {
    /// Event id.
    pub id: String,
    /// Tenant.
    pub tenant_id: String,
    /// Event type (`null` once the outbox no longer keeps the event).
    #[serde(rename = "type")]
    pub event_type: Option<String>,
    /// When it was published (`null` once the outbox no longer keeps it).
    pub created_at: Option<DateTime<Utc>>,
    /// The payload while the outbox keeps it (7 days by default), else `null`.
    #[schema(value_type = Option<std::collections::HashMap<String, serde_json::Value>>)]
    pub payload: Option<Box<RawValue>>,
    /// One per endpoint subscribed to it or attempted, in endpoint id order.
    pub deliveries: Vec<DeliveryStatus>,
}

/// A resend put on the delivery queue.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Resend {
    /// Event.
    pub event_id: String,
    /// Endpoint.
    pub endpoint_id: String,
    /// Replay count of the resend's budget: its attempts carry it.
    pub replay_count: u32,
    /// Before the resend: `delivered`, `retrying`, `dead_lettered`, `in_flight` or `none`.
    pub previous_state: String,
}

/// Recovering an endpoint over a window.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"since": "2026-12-01T09:00:00Z", "until": "2026-12-01T11:00:00Z", "enable": true}))]
pub struct RecoverRequest {
    /// Failures at or after this time.
    #[serde(deserialize_with = "time")]
    pub since: DateTime<Utc>,
    /// Failures before this time (exclusive); default now.
    #[serde(default, deserialize_with = "optional_time")]
    pub until: Option<DateTime<Utc>>,
    /// Enable the endpoint first if it is disabled (else a disabled endpoint is a 409).
    #[serde(default)]
    pub enable: bool,
}

/// A DLQ replay's result.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ReplayReport {
    /// True for a dry run (nothing moved).
    pub dry_run: bool,
    /// DLQ messages read (every tenant's: the DLQ is shared; another tenant's are made
    /// visible again at once). A dry run reads no message: it counts this tenant's
    /// dead-letter record entries read.
    pub examined: u32,
    /// Of which matched the filters (this tenant's only). A dry run: the record's entries
    /// that match, each a dead letter still in the DLQ.
    pub matched: u32,
    /// Moved to the delivery queue.
    pub replayed: u32,
    /// Read and left: copies of a delivery this run already replayed.
    pub already_replayed: u32,
    /// Delivery ids replayed (`<event id>.<endpoint id>`), at most 100.
    pub delivery_ids: Vec<String>,
    /// Why the run ended: `max_reached`, `time_budget` (call again) or `queue_empty`.
    pub stopped: Option<String>,
}

impl From<tern_handlers::replay::ReplaySummary> for ReplayReport {
    fn from(s: tern_handlers::replay::ReplaySummary) -> Self {
        Self {
            dry_run: s.dry_run,
            examined: s.examined,
            matched: s.matched,
            replayed: s.replayed,
            already_replayed: s.already_replayed,
            delivery_ids: s.delivery_ids,
            stopped: s.stopped.and_then(|d| {
                serde_json::to_value(d)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
            }),
        }
    }
}

/// Deliveries still waiting that a recover found.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WaitingReport {
    /// Failed attempts (outcome `retry`) read in the window.
    pub attempts_examined: usize,
    /// Distinct deliveries among them still waiting for their next attempt.
    pub still_waiting: usize,
    /// The resends made.
    pub resent: Vec<Resend>,
    /// Waiting events the outbox no longer keeps: not resent (their retries go on).
    pub not_resendable: Vec<String>,
    /// False when the window held more than one call handles: call again.
    pub complete: bool,
}

/// What a recover did.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RecoverReport {
    /// Endpoint.
    pub endpoint_id: String,
    /// The window's start.
    pub since: DateTime<Utc>,
    /// The window's end (exclusive).
    pub until: DateTime<Utc>,
    /// True when this call enabled the endpoint.
    pub enabled: bool,
    /// The endpoint's dead letters of the window, replayed.
    pub dead_letters: ReplayReport,
    /// The deliveries still waiting, resent.
    pub waiting: WaitingReport,
}

/// One dead letter (a sample of its group).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeadLetter {
    /// Event id (`webhook-id`).
    pub event_id: Option<String>,
    /// Event type.
    pub event_type: Option<String>,
    /// Endpoint.
    pub endpoint_id: Option<String>,
    /// Why.
    pub reason: String,
    /// Last status.
    pub last_status: Option<u16>,
    /// Last error.
    pub last_error: Option<String>,
    /// Attempts in the budget that ended here.
    pub attempts: Option<u32>,
    /// When.
    pub dead_lettered_at: Option<DateTime<Utc>>,
    /// Replays so far.
    pub replay_count: Option<u32>,
    /// The payload, cut to 500 characters.
    pub payload_sample: String,
    /// True when cut.
    pub payload_truncated: bool,
}

/// Dead letters of one endpoint with one reason.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeadLetterGroup {
    /// Endpoint.
    pub endpoint_id: Option<String>,
    /// Reason.
    pub reason: String,
    /// Dead letters in the group (among those read).
    pub count: usize,
    /// Oldest dead-letter time.
    pub oldest: Option<DateTime<Utc>>,
    /// Newest dead-letter time.
    pub newest: Option<DateTime<Utc>>,
    /// Last status of the newest.
    pub last_status: Option<u16>,
    /// Last error of the newest.
    pub last_error: Option<String>,
    /// The newest, to inspect before replaying.
    pub sample: DeadLetter,
}

/// This tenant's dead letters, grouped by endpoint and reason, largest group first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeadLetterGroups {
    /// Entries of this tenant's dead-letter record read (the DLQ itself is never read by
    /// a list, so a list hides nothing from another reader). Before issue 27 this counted
    /// DLQ messages of every tenant.
    pub read: usize,
    /// Of which still in the DLQ (a pair delivered or replayed since is not shown): the
    /// dead letters in `groups`.
    pub matched: usize,
    /// True when `max` cut the list: more of this tenant's dead letters may exist.
    pub truncated: bool,
    /// The groups.
    pub groups: Vec<DeadLetterGroup>,
}

/// Query of `listDeadLetters`.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeadLettersQuery {
    /// Most dead letters listed, 1..=500 (default 100).
    #[param(minimum = 1, maximum = 500)]
    pub max: Option<u32>,
}

/// Replaying this tenant's dead letters; every set filter must match.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    /// Only this endpoint's.
    #[serde(default)]
    pub endpoint_id: Option<String>,
    /// Only this event type.
    #[serde(default)]
    pub event_type: Option<String>,
    /// Only this reason (`exhausted`, `gone`, `endpoint_disabled`, `endpoint_deleted`,
    /// `blocked_destination`, `malformed_message`, `no_active_secret`).
    #[serde(default)]
    #[schema(value_type = Option<DeadLetterReasonName>)]
    pub reason: Option<String>,
    /// Only this event.
    #[serde(default)]
    pub event_id: Option<String>,
    /// Only dead-lettered at or after.
    #[serde(default, deserialize_with = "optional_time")]
    pub dead_lettered_since: Option<DateTime<Utc>>,
    /// Only dead-lettered before (exclusive).
    #[serde(default, deserialize_with = "optional_time")]
    pub dead_lettered_until: Option<DateTime<Utc>>,
    /// Count, move nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Force a replay to disabled or deleted endpoints (their deliveries come back at
    /// once).
    #[serde(default)]
    pub force: bool,
}

/// Why a budget was dead-lettered: the values `reason` filters take
/// (`tern_core::DeadLetterReason`). Documented only: the filter is read as text and a
/// value outside these is a 400 naming `reason`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeadLetterReasonName {
    /// Every attempt failed.
    Exhausted,
    /// The receiver answered 410 Gone.
    Gone,
    /// The endpoint was disabled.
    EndpointDisabled,
    /// The endpoint was deleted.
    EndpointDeleted,
    /// The URL's address is one the deployment does not send to.
    BlockedDestination,
    /// The queue message could not be read.
    MalformedMessage,
    /// The endpoint had no secret to sign with.
    NoActiveSecret,
}

/// An endpoint a replay would send dead letters to that cannot take them.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct BadTarget {
    /// Endpoint.
    pub endpoint_id: String,
    /// Why, and what to do first.
    pub problem: String,
}

/// A replay of this tenant's dead letters.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeadLetterReplay {
    /// What moved (nothing when refused: see `bad_targets`).
    pub report: Option<ReplayReport>,
    /// Endpoints that cannot take their dead letters now: the replay was refused unless
    /// `force`.
    pub bad_targets: Vec<BadTarget>,
}

impl From<tern_ops::resend::Resent> for Resend {
    fn from(r: tern_ops::resend::Resent) -> Self {
        Self {
            event_id: r.event_id,
            endpoint_id: r.endpoint_id,
            replay_count: r.replay_count,
            previous_state: r.previous_state,
        }
    }
}

/// A customer portal session to mint for one tenant.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"endpoint_ids": ["ep_01H..."], "read_only": false, "expires_in_seconds": 3600, "brand_color": "#0b5fff"}))]
pub struct PortalSessionRequest {
    /// Limit the session to these endpoints of the tenant (1 to 20,
    /// `tern_core::portal::MAX_SESSION_ENDPOINTS`; each must exist). By default it sees all
    /// of them and may add new ones.
    #[serde(default)]
    #[schema(min_items = 1, max_items = 20)]
    pub endpoint_ids: Option<Vec<String>>,
    /// No change of any kind and no secret shown. Default `false`.
    #[serde(default)]
    pub read_only: bool,
    /// Life of the link and of the session it opens, seconds: 60 to 86,400, default 3,600
    /// (`tern_core::portal::MIN_SESSION_SECONDS`, `MAX_SESSION_SECONDS`).
    #[serde(default)]
    #[schema(minimum = 60, maximum = 86400)]
    pub expires_in_seconds: Option<i64>,
    /// Brand colour of the portal's header and buttons, `#rrggbb`.
    #[serde(default)]
    #[schema(pattern = "^#[0-9A-Fa-f]{6}$")]
    pub brand_color: Option<String>,
    /// Logo shown in the header: an `https` URL of at most 512 bytes (the portal's CSP
    /// allows images from its origin only).
    #[serde(default)]
    #[schema(max_length = 512)]
    pub logo_url: Option<String>,
    /// Event types the application sends, offered as choices when the customer adds an
    /// endpoint (at most 50), besides the types its endpoints already subscribe to.
    #[serde(default)]
    #[schema(max_items = 50)]
    pub event_types: Option<Vec<String>>,
}

/// A minted portal session: open `url` once (in a browser or an iframe).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PortalSession {
    /// The single-use link: `<portal>/portal/start?token=...`. Loading it spends nothing (link
    /// scanners fetch it first); its page's button exchanges the token for a session cookie
    /// and drops it from the address bar; a used link is refused.
    pub url: String,
    /// The session's id (logged with every action of the session).
    pub session_id: String,
    /// When the link and the session end.
    pub expires_at: DateTime<Utc>,
}

#[cfg(test)]
mod time_tests {
    use super::time_from;

    #[test]
    fn times_need_an_offset_and_say_so() {
        assert_eq!(
            time_from("2026-12-01T09:00:00Z").unwrap().to_rfc3339(),
            "2026-12-01T09:00:00+00:00"
        );
        assert_eq!(
            time_from("2026-12-01T10:00:00+01:00").unwrap().to_rfc3339(),
            "2026-12-01T09:00:00+00:00"
        );
        let no_offset = time_from("2026-12-01T09:00:00").unwrap_err();
        assert!(
            no_offset.contains("no offset") && no_offset.contains("add Z"),
            "{no_offset}"
        );
        let junk = time_from("yesterday").unwrap_err();
        assert!(junk.contains("2026-12-01T09:00:00Z"), "{junk}");
        assert!(time_from(&"9".repeat(10_000)).unwrap_err().len() < 200);
    }
}

#[cfg(test)]
mod reason_tests {
    use super::DeadLetterReasonName;

    /// The document's `reason` values are the dead-letter reasons, all of them: a reason
    /// added to `tern_core` without its name here would be missing from the schema.
    #[test]
    fn the_documented_reasons_are_every_dead_letter_reason() {
        let documented: Vec<String> = [
            DeadLetterReasonName::Exhausted,
            DeadLetterReasonName::Gone,
            DeadLetterReasonName::EndpointDisabled,
            DeadLetterReasonName::EndpointDeleted,
            DeadLetterReasonName::BlockedDestination,
            DeadLetterReasonName::MalformedMessage,
            DeadLetterReasonName::NoActiveSecret,
        ]
        .iter()
        .map(|r| {
            serde_json::to_value(r)
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
        let core: Vec<String> = tern_core::DeadLetterReason::ALL
            .iter()
            .map(|r| r.as_str().to_owned())
            .collect();
        assert_eq!(documented, core);
    }
}
