//! Endpoints: where a tenant's events are delivered, with the secrets that sign them and
//! the event types they subscribe to.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::client_certificate::{ClientCertificate, ClientCertificateError};
use crate::custom_headers::{CustomHeader, HeaderError};
use crate::event::{Event, EventType};
use crate::ids::{EndpointId, TenantId};
use crate::receiver_auth::{AuthError, ReceiverAuth};
use crate::request::PayloadFormat;
use crate::retry::RetrySchedule;
use crate::signing::Secret;
use crate::signing_key::{EndpointSigningKey, Signatures, SigningKey};

/// Subscription that matches every event type.
pub const ALL_EVENT_TYPES: &str = "*";

/// Longest endpoint URL, in bytes.
pub const MAX_URL_LEN: usize = 2048;

/// Longest time an old secret keeps signing after a rotation, in hours: 30 days.
pub const MAX_ROTATION_OVERLAP_HOURS: i64 = 30 * 24;

/// Most secrets (and, apart, most Ed25519 signing keys) an endpoint keeps at once, the
/// current one included: 10, as Svix keeps. A rotation beyond it retires the oldest at
/// once, overlap or not. It bounds the signature header: 10 `v1` signatures are about 900
/// bytes, where 41 (forty rotations in one overlap) were 2,991, past what some verifiers
/// accept (32 signatures) and on the way to the 8 KiB header limit of common proxies.
pub const MAX_LIVE_SECRETS: usize = 10;

/// Shortest per-endpoint attempt deadline, in milliseconds.
pub const MIN_TIMEOUT_MS: u64 = 1_000;
/// Longest per-endpoint attempt deadline, in milliseconds: 30 s, well below the sender
/// function's timeout (see `infra/settings.json`).
pub const MAX_TIMEOUT_MS: u64 = 30_000;

/// Why an endpoint definition is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// The URL does not parse, or is not `http`/`https` with a host.
    #[error("endpoint URL is invalid: {0}")]
    BadUrl(String),
    /// The URL carries a user name or password, which would be sent to the receiver and
    /// stored in the clear.
    #[error("endpoint URL must not hold credentials (user:password@)")]
    UrlCredentials,
    /// The endpoint has no secret to sign with.
    #[error("an endpoint needs at least one signing secret")]
    NoSecret,
    /// Every secret has an expiry: once they pass, nothing would sign.
    #[error("an endpoint needs a current signing secret (one without an expiry)")]
    NoActiveSecret,
    /// A subscription can never match: it must be `*` or a valid event type.
    #[error(
        "event type {0:?} can never match: use \"*\" or 1-128 characters of ASCII letters, digits, '.', '_', ':' or '-'"
    )]
    BadEventType(String),
    /// No subscriptions at all.
    #[error("an endpoint needs at least one event type (\"*\" for all)")]
    NoEventTypes,
    /// A rotation overlap outside 0..=[`MAX_ROTATION_OVERLAP_HOURS`] hours.
    #[error("rotation overlap must be 0 to {MAX_ROTATION_OVERLAP_HOURS} hours")]
    BadOverlap,
    /// The timeout is outside [`MIN_TIMEOUT_MS`]..=[`MAX_TIMEOUT_MS`].
    #[error("timeout {0} ms is outside {MIN_TIMEOUT_MS}..={MAX_TIMEOUT_MS} ms")]
    BadTimeout(u64),
    /// The attempt budget is 0.
    #[error("max_attempts must be at least 1")]
    ZeroAttempts,
    /// The rate limit is outside 1..=[`crate::rate_limit::MAX_PER_SECOND`] per second.
    #[error(transparent)]
    BadRateLimit(#[from] crate::rate_limit::RateLimitError),
    /// A custom header is refused.
    #[error(transparent)]
    Header(#[from] HeaderError),
    /// The authentication setting is refused.
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// A custom `authorization` header on an endpoint that authenticates itself.
    #[error(
        "a custom authorization header cannot go with authentication {0}: the request would carry two"
    )]
    AuthorizationTwice(&'static str),
    /// The client certificate reference is refused.
    #[error(transparent)]
    ClientCertificate(#[from] ClientCertificateError),
    /// `v1a` signatures without a current Ed25519 key.
    #[error("v1a signatures need a current signing key (one without an expiry)")]
    NoActiveSigningKey,
}

/// One signing secret of an endpoint. During a rotation an endpoint holds the new secret
/// and the old one with an `expires_at`; both sign until then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointSecret {
    /// The secret.
    pub secret: Secret,
    /// When it was added.
    pub created_at: DateTime<Utc>,
    /// When it stops signing; `None` while it is the current secret.
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
}

/// A registered endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// Id.
    pub id: EndpointId,
    /// Owning tenant: only this tenant's events are delivered here.
    pub tenant_id: TenantId,
    /// Receiver URL (`https://...`; `http://` only where the deployment allows it).
    pub url: String,
    /// Event types delivered here; `"*"` means all.
    pub event_types: Vec<String>,
    /// Signing secrets, newest first.
    pub secrets: Vec<EndpointSecret>,
    /// False once disabled (by an operator, or after a 410).
    pub enabled: bool,
    /// Why it is disabled.
    #[serde(default)]
    pub disabled_reason: Option<String>,
    /// When it was disabled (the first disable of a run of them); `None` while enabled,
    /// and for endpoints disabled before this field existed.
    #[serde(default)]
    pub disabled_at: Option<DateTime<Utc>>,
    /// The disabled reason it had when it was last enabled again, kept for operators.
    #[serde(default)]
    pub last_disabled_reason: Option<String>,
    /// When it was disabled before it was last enabled again.
    #[serde(default)]
    pub last_disabled_at: Option<DateTime<Utc>>,
    /// Attempt deadline in milliseconds; `None` uses the deployment default.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Retry schedule; `None` uses the deployment default.
    #[serde(default)]
    pub schedule: Option<RetrySchedule>,
    /// Attempt budget; `None` means schedule length + 1. Larger values are capped there.
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// How the request body is shaped ([`PayloadFormat`]): the payload as written (`raw`,
    /// the default, also for endpoints stored before this field existed) or wrapped in the
    /// Standard Webhooks payload structure (`standard_webhooks`).
    #[serde(default)]
    pub payload_format: PayloadFormat,
    /// Most requests per second the receiver takes ([`crate::rate_limit`]), across every
    /// concurrent sender batch; `None` (the default, also for endpoints stored before this
    /// field existed) means no limit. 1..=[`crate::rate_limit::MAX_PER_SECOND`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_per_second: Option<u32>,
    /// Headers sent with every attempt after Tern's own ([`crate::custom_headers`]);
    /// none for endpoints stored before this field existed.
    #[serde(default)]
    pub headers: Vec<CustomHeader>,
    /// How requests authenticate to the receiver ([`ReceiverAuth`]); `none` for
    /// endpoints stored before this field existed.
    #[serde(default)]
    pub auth: ReceiverAuth,
    /// Which signature schemes `webhook-signature` carries ([`Signatures`]): `v1` (HMAC,
    /// the default, also for endpoints stored before this field existed), `v1a` (Ed25519)
    /// or `both`.
    #[serde(default)]
    pub signatures: Signatures,
    /// Ed25519 keys for `v1a`, newest first; during a rotation the previous one carries
    /// an `expires_at` and signs until then. Kept when `v1a` is turned off, so turning it
    /// on again keeps the receiver's public key.
    #[serde(default)]
    pub signing_keys: Vec<EndpointSigningKey>,
    /// The client certificate offered to a receiver that asks for one (mutual TLS,
    /// [`crate::client_certificate`]): a Secrets Manager secret's ARN; `None` (the
    /// default, also for endpoints stored before this field existed) offers none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<ClientCertificate>,
    /// True to send each attempt's W3C `traceparent` header (its span's, or the event's
    /// trace context when Tern does not trace), so a receiver that traces sees the delivery
    /// as the parent of its own work. Off by default (also for endpoints stored before
    /// this field existed): a header the receiver did not ask for is not sent.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub send_traceparent: bool,
    /// Free text for operators.
    #[serde(default)]
    pub description: Option<String>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When an operator last changed its settings (`tern endpoints update`).
    #[serde(default)]
    pub updated_at: Option<DateTime<Utc>>,
    /// The fingerprint of the create request that made it under an `Idempotency-Key`
    /// (SHA-256 hex of the tenant, the key and the request's settings; `tern_api`): a
    /// retry with the same key and settings gets this endpoint back, other settings
    /// under the key are refused. `None` for endpoints created without a key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_request: Option<String>,
}

/// A change to an endpoint's settings (`tern endpoints update`): each `Some` field is
/// replaced, every other field stays as stored. Secrets and the enabled state are not
/// settings: rotation and enable/disable have their own operations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndpointUpdate {
    /// New receiver URL. Check it with the SSRF guard before applying.
    pub url: Option<String>,
    /// New subscriptions (`*` for all).
    pub event_types: Option<Vec<String>>,
    /// New operator note; `Some(None)` removes it.
    pub description: Option<Option<String>>,
    /// New attempt deadline in milliseconds; `Some(None)` returns to the deployment default.
    pub timeout_ms: Option<Option<u64>>,
    /// New retry schedule; `Some(None)` returns to the deployment default.
    pub schedule: Option<Option<RetrySchedule>>,
    /// New attempt budget; `Some(None)` returns to schedule length + 1.
    pub max_attempts: Option<Option<u32>>,
    /// New request body format.
    pub payload_format: Option<PayloadFormat>,
    /// New rate limit in requests per second; `Some(None)` removes it.
    pub max_per_second: Option<Option<u32>>,
    /// New custom headers: the whole list, replacing the stored one (`Some(vec![])`
    /// removes them all).
    pub headers: Option<Vec<CustomHeader>>,
    /// New authentication to the receiver.
    pub auth: Option<ReceiverAuth>,
    /// New signature schemes. `v1a` needs a current Ed25519 key: add one with
    /// [`Endpoint::rotate_signing_key`] (the store's `set_signing_keys`) first.
    pub signatures: Option<Signatures>,
    /// New client certificate for mutual TLS; `Some(None)` removes it.
    pub client_certificate: Option<Option<ClientCertificate>>,
    /// Whether to send the `traceparent` header.
    pub send_traceparent: Option<bool>,
}

impl EndpointUpdate {
    /// True when it changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Applies the change to `endpoint` and checks the result with
    /// [`Endpoint::validate`], so a store writes only a valid combination.
    ///
    /// # Errors
    /// The first [`EndpointError`] of the updated endpoint; `endpoint` may be partly
    /// changed then (apply to a copy).
    pub fn apply(&self, endpoint: &mut Endpoint) -> Result<(), EndpointError> {
        if let Some(url) = &self.url {
            endpoint.url.clone_from(url);
        }
        if let Some(types) = &self.event_types {
            endpoint.event_types.clone_from(types);
        }
        if let Some(d) = &self.description {
            endpoint.description.clone_from(d);
        }
        if let Some(t) = self.timeout_ms {
            endpoint.timeout_ms = t;
        }
        if let Some(s) = &self.schedule {
            endpoint.schedule.clone_from(s);
        }
        if let Some(m) = self.max_attempts {
            endpoint.max_attempts = m;
        }
        if let Some(f) = self.payload_format {
            endpoint.payload_format = f;
        }
        if let Some(t) = self.send_traceparent {
            endpoint.send_traceparent = t;
        }
        if let Some(r) = self.max_per_second {
            endpoint.max_per_second = r;
        }
        if let Some(h) = &self.headers {
            endpoint.headers.clone_from(h);
        }
        if let Some(a) = &self.auth {
            endpoint.auth.clone_from(a);
        }
        if let Some(s) = self.signatures {
            endpoint.signatures = s;
        }
        if let Some(c) = &self.client_certificate {
            endpoint.client_certificate.clone_from(c);
        }
        endpoint.validate()
    }
}

/// A short public name for a secret, to tell secrets apart without showing one:
/// `sha256:` and the first 12 hex digits of SHA-256 over the secret's text. Learning it
/// does not help to find the secret (24-64 random bytes).
pub fn secret_fingerprint(secret: &Secret) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(secret.expose().as_bytes());
    format!("sha256:{}", &hex::encode(digest)[..12])
}

/// Checks an endpoint URL: `http`/`https`, a host, no credentials, at most
/// [`MAX_URL_LEN`] bytes. Address policy (private ranges, https-only) is the SSRF
/// guard's job, applied with the deployment's settings.
///
/// # Errors
/// [`EndpointError::BadUrl`] or [`EndpointError::UrlCredentials`].
pub fn validate_url(text: &str) -> Result<url::Url, EndpointError> {
    if text.len() > MAX_URL_LEN {
        return Err(EndpointError::BadUrl(format!(
            "longer than {MAX_URL_LEN} bytes"
        )));
    }
    let url = url::Url::parse(text).map_err(|e| EndpointError::BadUrl(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(EndpointError::BadUrl(format!(
            "scheme {:?} is not http or https",
            url.scheme()
        )));
    }
    if url.host().is_none() {
        return Err(EndpointError::BadUrl("no host".into()));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(EndpointError::UrlCredentials);
    }
    Ok(url)
}

impl Endpoint {
    /// An enabled endpoint with one current secret and the deployment's defaults (no
    /// timeout, schedule or budget of its own, raw payloads), created at `now`. Set the optional fields
    /// on the result; call [`Self::validate`] before storing it.
    pub fn new(
        id: EndpointId,
        tenant_id: TenantId,
        url: impl Into<String>,
        event_types: Vec<String>,
        secret: Secret,
        now: DateTime<Utc>,
    ) -> Self {
        Self {
            id,
            tenant_id,
            url: url.into(),
            event_types,
            secrets: vec![EndpointSecret {
                secret,
                created_at: now,
                expires_at: None,
            }],
            enabled: true,
            disabled_reason: None,
            disabled_at: None,
            last_disabled_reason: None,
            last_disabled_at: None,
            timeout_ms: None,
            schedule: None,
            max_attempts: None,
            payload_format: PayloadFormat::Raw,
            max_per_second: None,
            headers: Vec::new(),
            auth: ReceiverAuth::None,
            signatures: Signatures::V1,
            signing_keys: Vec::new(),
            client_certificate: None,
            send_traceparent: false,
            description: None,
            created_at: now,
            updated_at: None,
            creation_request: None,
        }
    }

    /// Checks the fields a caller can get wrong.
    ///
    /// # Errors
    /// The first [`EndpointError`] found.
    pub fn validate(&self) -> Result<(), EndpointError> {
        validate_url(&self.url)?;
        if self.secrets.is_empty() {
            return Err(EndpointError::NoSecret);
        }
        if self.secrets.iter().all(|s| s.expires_at.is_some()) {
            return Err(EndpointError::NoActiveSecret);
        }
        if self.event_types.is_empty() {
            return Err(EndpointError::NoEventTypes);
        }
        if let Some(bad) = self
            .event_types
            .iter()
            .find(|t| t.as_str() != ALL_EVENT_TYPES && EventType::new(t.as_str()).is_err())
        {
            return Err(EndpointError::BadEventType(bad.clone()));
        }
        if let Some(t) = self.timeout_ms
            && !(MIN_TIMEOUT_MS..=MAX_TIMEOUT_MS).contains(&t)
        {
            return Err(EndpointError::BadTimeout(t));
        }
        if self.max_attempts == Some(0) {
            return Err(EndpointError::ZeroAttempts);
        }
        self.rate_limit()?;
        crate::custom_headers::validate(&self.headers)?;
        self.auth.validate()?;
        if let Some(c) = &self.client_certificate {
            c.validate(&self.tenant_id)?;
        }
        if self.auth.sends_authorization() && self.headers.iter().any(|h| h.name == "authorization")
        {
            return Err(EndpointError::AuthorizationTwice(self.auth.kind()));
        }
        if self.signatures.v1a() && self.signing_keys.iter().all(|k| k.expires_at.is_some()) {
            return Err(EndpointError::NoActiveSigningKey);
        }
        Ok(())
    }

    /// Its rate limit ([`Self::max_per_second`]), `None` when it has none.
    ///
    /// # Errors
    /// [`EndpointError::BadRateLimit`] for a value outside
    /// 1..=[`crate::rate_limit::MAX_PER_SECOND`].
    pub fn rate_limit(&self) -> Result<Option<crate::rate_limit::RateLimit>, EndpointError> {
        self.max_per_second
            .map(crate::rate_limit::RateLimit::new)
            .transpose()
            .map_err(EndpointError::from)
    }

    /// True when `event` belongs to this endpoint's tenant and one of its subscriptions.
    /// `*` covers the tenant's own event types but not Tern's operational events
    /// (`tern.endpoint.disabled`, ...: [`crate::operational::TERN_EVENT_TYPE_PREFIX`]),
    /// which an endpoint gets only by naming them: otherwise every `*` endpoint, the
    /// failing one included, would start receiving reports about endpoint health.
    pub fn subscribes(&self, event: &Event) -> bool {
        self.subscribes_to(&event.tenant_id, event.event_type.as_str())
    }

    /// [`Self::subscribes`] for an event known by its tenant and type only (an outbox item
    /// read without its payload, as `tern audit` reads them).
    pub fn subscribes_to(&self, tenant: &TenantId, event_type: &str) -> bool {
        let ty = event_type;
        let operational = ty.starts_with(crate::operational::TERN_EVENT_TYPE_PREFIX);
        &self.tenant_id == tenant
            && self
                .event_types
                .iter()
                .any(|t| (t == ALL_EVENT_TYPES && !operational) || t == ty)
    }

    /// Secrets that sign at `now`, newest first.
    pub fn active_secrets(&self, now: DateTime<Utc>) -> Vec<&Secret> {
        self.secrets
            .iter()
            .filter(|s| s.expires_at.is_none_or(|e| e > now))
            .map(|s| &s.secret)
            .collect()
    }

    /// Ed25519 keys that sign at `now`, newest first (whatever [`Self::signatures`] says:
    /// the caller asks it whether `v1a` is sent).
    pub fn active_signing_keys(&self, now: DateTime<Utc>) -> Vec<&SigningKey> {
        self.signing_keys
            .iter()
            .filter(|k| k.expires_at.is_none_or(|e| e > now))
            .map(|k| &k.key)
            .collect()
    }

    /// What signs an attempt at `now`: the active `whsec_` secrets when `v1` is on, the
    /// active `whsk_` keys when `v1a` is on.
    pub fn signers(&self, now: DateTime<Utc>) -> crate::request::Signers<'_> {
        crate::request::Signers {
            v1: if self.signatures.v1() {
                self.active_secrets(now)
            } else {
                Vec::new()
            },
            v1a: if self.signatures.v1a() {
                self.active_signing_keys(now)
            } else {
                Vec::new()
            },
        }
    }

    /// The retry schedule and attempt budget for this endpoint.
    pub fn retry_policy(&self, default: &RetrySchedule) -> (RetrySchedule, u32) {
        let schedule = self.schedule.clone().unwrap_or_else(|| default.clone());
        let max = self.max_attempts.map_or(schedule.max_attempts(), |m| {
            m.clamp(1, schedule.max_attempts())
        });
        (schedule, max)
    }

    /// Makes `new` the current secret; the old current secret keeps signing until
    /// `now + overlap`. Secrets already expired are dropped, and beyond
    /// [`MAX_LIVE_SECRETS`] the oldest are retired.
    ///
    /// # Errors
    /// [`EndpointError::BadOverlap`] for an overlap outside 0..=[`MAX_ROTATION_OVERLAP_HOURS`]
    /// hours; nothing changes then.
    pub fn rotate_secret(
        &mut self,
        new: Secret,
        now: DateTime<Utc>,
        overlap: chrono::Duration,
    ) -> Result<(), EndpointError> {
        let until = overlap_end(now, overlap)?;
        self.secrets
            .retain(|s| s.expires_at.is_none_or(|e| e > now));
        for s in &mut self.secrets {
            if s.expires_at.is_none() {
                s.expires_at = Some(until);
            }
        }
        self.secrets.insert(
            0,
            EndpointSecret {
                secret: new,
                created_at: now,
                expires_at: None,
            },
        );
        retire_oldest(&mut self.secrets, |s| s.created_at);
        Ok(())
    }

    /// Makes `new` the current Ed25519 key; the old current key keeps signing until
    /// `now + overlap`, like [`Self::rotate_secret`]. Keys already expired are dropped, and
    /// beyond [`MAX_LIVE_SECRETS`] the oldest are retired.
    /// The first key of an endpoint is added the same way.
    ///
    /// # Errors
    /// [`EndpointError::BadOverlap`] for an overlap outside 0..=[`MAX_ROTATION_OVERLAP_HOURS`]
    /// hours; nothing changes then.
    pub fn rotate_signing_key(
        &mut self,
        new: SigningKey,
        now: DateTime<Utc>,
        overlap: chrono::Duration,
    ) -> Result<(), EndpointError> {
        let until = overlap_end(now, overlap)?;
        self.signing_keys
            .retain(|k| k.expires_at.is_none_or(|e| e > now));
        for k in &mut self.signing_keys {
            if k.expires_at.is_none() {
                k.expires_at = Some(until);
            }
        }
        self.signing_keys.insert(
            0,
            EndpointSigningKey {
                key: new,
                created_at: now,
                expires_at: None,
            },
        );
        retire_oldest(&mut self.signing_keys, |k| k.created_at);
        Ok(())
    }
}

/// Removes the oldest entries (by `created_at`; the first of equals stays) until at most
/// [`MAX_LIVE_SECRETS`] are left, keeping the order of the rest (the current one first).
fn retire_oldest<T>(entries: &mut Vec<T>, created_at: impl Fn(&T) -> DateTime<Utc>) {
    while entries.len() > MAX_LIVE_SECRETS {
        let oldest = entries
            .iter()
            .enumerate()
            .rev()
            .min_by_key(|(_, e)| created_at(e))
            .map(|(i, _)| i);
        match oldest {
            Some(i) => {
                entries.remove(i);
            }
            None => break,
        }
    }
}

/// `now + overlap`, for an overlap within 0..=[`MAX_ROTATION_OVERLAP_HOURS`] hours.
fn overlap_end(
    now: DateTime<Utc>,
    overlap: chrono::Duration,
) -> Result<DateTime<Utc>, EndpointError> {
    if overlap < chrono::Duration::zero()
        || overlap > chrono::Duration::hours(MAX_ROTATION_OVERLAP_HOURS)
    {
        return Err(EndpointError::BadOverlap);
    }
    now.checked_add_signed(overlap)
        .ok_or(EndpointError::BadOverlap)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EventType, Payload};
    use crate::ids::EventId;

    fn endpoint() -> Endpoint {
        let mut e = Endpoint::new(
            EndpointId::new("ep_1").unwrap(),
            TenantId::new("tnt_a").unwrap(),
            "https://example.invalid/hook",
            vec!["order.paid".into()],
            Secret::generate(),
            Utc::now(),
        );
        e.max_attempts = Some(3);
        e
    }

    fn event(tenant: &str, ty: &str) -> Event {
        Event {
            id: EventId::generate(),
            event_type: EventType::new(ty).unwrap(),
            tenant_id: TenantId::new(tenant).unwrap(),
            created_at: Utc::now(),
            payload: Payload::parse("{}", 10).unwrap(),
            trace: None,
        }
    }

    #[test]
    fn subscription_matching() {
        let mut e = endpoint();
        assert!(e.subscribes(&event("tnt_a", "order.paid")));
        assert!(!e.subscribes(&event("tnt_a", "order.shipped")));
        assert!(!e.subscribes(&event("tnt_b", "order.paid")));
        e.event_types = vec!["*".into()];
        assert!(e.subscribes(&event("tnt_a", "anything")));
    }

    #[test]
    fn operational_event_types_are_delivered_only_when_named() {
        let mut e = endpoint();
        e.event_types = vec!["*".into()];
        assert!(!e.subscribes(&event("tnt_a", "tern.endpoint.disabled")));
        e.event_types = vec!["*".into(), "tern.endpoint.disabled".into()];
        assert!(e.subscribes(&event("tnt_a", "tern.endpoint.disabled")));
        assert!(!e.subscribes(&event("tnt_a", "tern.endpoint.degraded")));
        assert!(e.subscribes(&event("tnt_a", "order.paid")));
        assert!(!e.subscribes(&event("tnt_b", "tern.endpoint.disabled")));
    }

    #[test]
    fn urls() {
        assert!(validate_url("https://a.example/x").is_ok());
        assert_eq!(
            validate_url("https://u:p@a.example/").unwrap_err(),
            EndpointError::UrlCredentials
        );
        assert!(matches!(
            validate_url("ftp://a.example/"),
            Err(EndpointError::BadUrl(_))
        ));
        assert!(matches!(
            validate_url("not a url"),
            Err(EndpointError::BadUrl(_))
        ));
    }

    #[test]
    fn rotation_overlaps_then_expires() {
        let mut e = endpoint();
        let now = Utc::now();
        e.rotate_secret(Secret::generate(), now, chrono::Duration::hours(24))
            .unwrap();
        assert_eq!(
            e.rotate_secret(Secret::generate(), now, chrono::Duration::hours(-1)),
            Err(EndpointError::BadOverlap)
        );
        assert_eq!(e.active_secrets(now).len(), 2);
        assert_eq!(e.active_secrets(now + chrono::Duration::hours(25)).len(), 1);
    }

    /// Issue 28: forty rotations within one overlap kept 41 secrets, all signing (2,991
    /// bytes of signature header). At most 10 live now, the newest, current first.
    #[test]
    fn rotations_keep_at_most_ten_secrets_and_keys() {
        let mut e = endpoint();
        let start = Utc::now();
        let mut newest = Vec::new();
        for n in 0..40 {
            let at = start + chrono::Duration::seconds(n);
            let secret = Secret::generate();
            newest.insert(0, secret.clone());
            e.rotate_secret(secret, at, chrono::Duration::hours(24))
                .unwrap();
            e.rotate_signing_key(SigningKey::generate(), at, chrono::Duration::hours(24))
                .unwrap();
        }
        let now = start + chrono::Duration::seconds(40);
        assert_eq!(e.secrets.len(), MAX_LIVE_SECRETS);
        assert_eq!(e.active_secrets(now).len(), MAX_LIVE_SECRETS);
        assert_eq!(e.signing_keys.len(), MAX_LIVE_SECRETS);
        let kept: Vec<&Secret> = e.secrets.iter().map(|s| &s.secret).collect();
        let expected: Vec<&Secret> = newest.iter().take(MAX_LIVE_SECRETS).collect();
        assert_eq!(kept, expected, "the newest ten, current first");
        assert!(
            e.secrets[0].expires_at.is_none(),
            "the current one is first"
        );
        let headers = crate::signing::signature_headers(
            &crate::EventId::new("msg_1").unwrap(),
            now.timestamp(),
            b"{}",
            &e.active_secrets(now),
        );
        let header = &headers
            .iter()
            .find(|(n, _)| *n == crate::signing::header::WEBHOOK_SIGNATURE)
            .unwrap()
            .1;
        assert_eq!(header.split(' ').count(), MAX_LIVE_SECRETS, "{header}");
        assert!(header.len() < 1_000, "{} bytes", header.len());
    }

    #[test]
    fn an_update_changes_only_what_it_sets_and_is_validated() {
        let mut e = endpoint();
        let before = e.clone();
        EndpointUpdate::default().apply(&mut e).unwrap();
        assert_eq!(e, before);
        let update = EndpointUpdate {
            event_types: Some(vec!["order.shipped".into()]),
            timeout_ms: Some(Some(5_000)),
            description: Some(None),
            ..EndpointUpdate::default()
        };
        update.apply(&mut e).unwrap();
        assert_eq!(e.event_types, ["order.shipped"]);
        assert_eq!(e.timeout_ms, Some(5_000));
        assert_eq!(
            (e.url.as_str(), &e.secrets),
            (before.url.as_str(), &before.secrets)
        );
        let bad = EndpointUpdate {
            timeout_ms: Some(Some(31_000)),
            ..EndpointUpdate::default()
        };
        assert_eq!(
            bad.apply(&mut endpoint()),
            Err(EndpointError::BadTimeout(31_000))
        );
    }

    #[test]
    fn payload_format_defaults_to_raw_for_stored_endpoints_and_updates_alone() {
        let mut e = endpoint();
        // An endpoint stored before the field existed has no `payload_format` key.
        let mut stored = serde_json::to_value(&e).unwrap();
        assert_eq!(stored["payload_format"], "raw");
        stored.as_object_mut().unwrap().remove("payload_format");
        let old: Endpoint = serde_json::from_value(stored).unwrap();
        assert_eq!(old.payload_format, PayloadFormat::Raw);

        let before = e.clone();
        EndpointUpdate {
            payload_format: Some(PayloadFormat::StandardWebhooks),
            ..EndpointUpdate::default()
        }
        .apply(&mut e)
        .unwrap();
        assert_eq!(e.payload_format, PayloadFormat::StandardWebhooks);
        assert_eq!(
            Endpoint {
                payload_format: PayloadFormat::Raw,
                ..e.clone()
            },
            before,
            "nothing else changed"
        );
        assert_eq!(
            serde_json::to_value(&e).unwrap()["payload_format"],
            "standard_webhooks"
        );
    }

    #[test]
    fn a_rate_limit_is_optional_bounded_and_updated_alone() {
        let mut e = endpoint();
        // Stored before the field existed, or never limited: no key, no limit.
        let stored = serde_json::to_value(&e).unwrap();
        assert!(stored.get("max_per_second").is_none(), "{stored}");
        assert_eq!(e.rate_limit(), Ok(None));
        let before = e.clone();
        EndpointUpdate {
            max_per_second: Some(Some(10)),
            ..EndpointUpdate::default()
        }
        .apply(&mut e)
        .unwrap();
        assert_eq!(e.rate_limit().unwrap().map(|r| r.per_second()), Some(10));
        assert_eq!(
            Endpoint {
                max_per_second: None,
                ..e.clone()
            },
            before,
            "nothing else changed"
        );
        let back: Endpoint = serde_json::from_value(serde_json::to_value(&e).unwrap()).unwrap();
        assert_eq!(back.max_per_second, Some(10));
        for bad in [0, crate::rate_limit::MAX_PER_SECOND + 1] {
            assert_eq!(
                EndpointUpdate {
                    max_per_second: Some(Some(bad)),
                    ..EndpointUpdate::default()
                }
                .apply(&mut endpoint()),
                Err(EndpointError::BadRateLimit(
                    crate::rate_limit::RateLimitError::OutOfRange(bad)
                ))
            );
        }
        EndpointUpdate {
            max_per_second: Some(None),
            ..EndpointUpdate::default()
        }
        .apply(&mut e)
        .unwrap();
        assert_eq!(e, before);
    }

    #[test]
    fn reach_settings_default_for_stored_endpoints_and_are_validated() {
        use crate::custom_headers::FieldValue;
        use crate::receiver_auth::ReceiverAuth;
        let e = endpoint();
        let mut stored = serde_json::to_value(&e).unwrap();
        assert_eq!(stored["auth"], serde_json::json!({"type": "none"}));
        assert_eq!(stored["signatures"], "v1");
        for key in ["headers", "auth", "signatures", "signing_keys"] {
            stored.as_object_mut().unwrap().remove(key);
        }
        let old: Endpoint = serde_json::from_value(stored).unwrap();
        assert_eq!(
            old, e,
            "an endpoint stored before these fields reads as before"
        );

        // A custom authorization header goes with no authentication only.
        let auth_header =
            CustomHeader::new("Authorization", FieldValue::Plain("ApiKey abc".into())).unwrap();
        let mut with_header = endpoint();
        with_header.headers = vec![auth_header.clone()];
        with_header.validate().unwrap();
        let update = EndpointUpdate {
            auth: Some(ReceiverAuth::Bearer {
                token: crate::SecretValue::new("t0ken"),
            }),
            ..EndpointUpdate::default()
        };
        assert_eq!(
            update.apply(&mut with_header),
            Err(EndpointError::AuthorizationTwice("bearer"))
        );
        // A bad header or auth setting surfaces as its own error.
        let mut bad = endpoint();
        bad.auth = ReceiverAuth::Bearer {
            token: crate::SecretValue::new("has space"),
        };
        assert!(matches!(bad.validate(), Err(EndpointError::Auth(_))));
    }

    #[test]
    fn v1a_needs_a_current_key_and_keys_rotate_like_secrets() {
        let mut e = endpoint();
        let now = Utc::now();
        let v1a = EndpointUpdate {
            signatures: Some(Signatures::V1a),
            ..EndpointUpdate::default()
        };
        assert_eq!(
            v1a.apply(&mut e.clone()),
            Err(EndpointError::NoActiveSigningKey)
        );
        let first = SigningKey::generate();
        e.rotate_signing_key(first.clone(), now, chrono::Duration::hours(24))
            .unwrap();
        v1a.apply(&mut e).unwrap();
        let second = SigningKey::generate();
        e.rotate_signing_key(second.clone(), now, chrono::Duration::hours(2))
            .unwrap();
        assert_eq!(e.active_signing_keys(now), [&second, &first]);
        let later = now + chrono::Duration::hours(3);
        assert_eq!(e.active_signing_keys(later), [&second]);
        assert_eq!(e.signers(now).v1a.len(), 2);
        assert!(e.signers(now).v1.is_empty(), "v1a alone: no HMAC");
        assert_eq!(
            e.rotate_signing_key(SigningKey::generate(), now, chrono::Duration::hours(721)),
            Err(EndpointError::BadOverlap)
        );
        e.validate().unwrap();
    }

    #[test]
    fn a_fingerprint_names_a_secret_without_showing_it() {
        let s = Secret::generate();
        let f = secret_fingerprint(&s);
        assert_eq!(f.len(), "sha256:".len() + 12);
        assert!(!s.expose().contains(&f[7..]));
        assert_ne!(f, secret_fingerprint(&Secret::generate()));
    }

    #[test]
    fn budget() {
        let e = endpoint();
        let (s, max) = e.retry_policy(&RetrySchedule::standard());
        assert_eq!((s.max_attempts(), max), (7, 3));
    }
}
