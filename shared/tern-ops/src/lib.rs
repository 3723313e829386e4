//! Operator commands: endpoints, attempt history, DLQ inspection, replay. They talk to
//! whatever AWS the SDK configuration points at (moto in local mode, a real account
//! otherwise), with table and queue names from the same `TERN_*` variables the functions read.

pub mod attempts;
pub mod audit;
pub mod dlq;
pub mod health;
pub mod publish;
pub mod reach;
pub mod recover;
pub mod relay_failures;
pub mod replay_check;
pub mod resend;
pub mod test_send;
pub mod text;
pub mod waiting;
pub mod when;

use std::io::Write;

use chrono::{DateTime, Utc};
use serde::Serialize;
use tern_core::custom_headers::CustomHeader;
use tern_core::drain::{Drain, DrainRule};
use tern_core::endpoint::{EndpointUpdate, secret_fingerprint};
use tern_core::ports::{DeliveryLedger, DrainableQueue, EndpointStore, PortError, ReceivedMessage};
use tern_core::receiver_auth::ReceiverAuth;
use tern_core::{
    DeliveryMessage, Endpoint, EndpointId, EventId, PayloadFormat, RetrySchedule, Secret,
    Signatures, SigningKey, TenantId,
};
use tern_http::{DestinationPolicy, HostLookup};

/// An operator command failed.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// A required variable is not set.
    #[error(
        "environment variable {0} is required (source .tern/local.env for local mode, or set it to your stack's output)"
    )]
    Missing(&'static str),
    /// Bad input.
    #[error("{0}")]
    Invalid(String),
    /// No endpoint has this id (in this tenant, when one was named).
    #[error("endpoint {id} not found{}", tenant.as_ref().map(|t| format!(" for tenant {t}")).unwrap_or_default())]
    NotFound {
        /// The id asked for.
        id: String,
        /// The tenant named, if any.
        tenant: Option<String>,
    },
    /// An id matches endpoints of several tenants: name the tenant.
    #[error("endpoint id {0} exists for several tenants ({1}); pass --tenant")]
    Ambiguous(String, String),
    /// AWS call failed.
    #[error(transparent)]
    Port(#[from] tern_core::ports::PortError),
}

/// Reads a required variable.
///
/// # Errors
/// [`OpsError::Missing`].
pub fn var(name: &'static str) -> Result<String, OpsError> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .ok_or(OpsError::Missing(name))
}

/// What `tern endpoints add` takes.
#[derive(Debug, Clone)]
pub struct NewEndpoint {
    /// Tenant.
    pub tenant: String,
    /// URL.
    pub url: String,
    /// Subscribed event types (`*` for all).
    pub event_types: Vec<String>,
    /// Attempt budget.
    pub max_attempts: Option<u32>,
    /// Attempt deadline, milliseconds.
    pub timeout_ms: Option<u64>,
    /// Schedule: preset name or comma-separated seconds.
    pub schedule: Option<String>,
    /// Operator note.
    pub description: Option<String>,
    /// Request body format (`raw` unless set).
    pub payload_format: PayloadFormat,
    /// Rate limit, requests per second (`None`: no limit).
    pub max_per_second: Option<u32>,
    /// Existing secret to use (else a new one is generated).
    pub secret: Option<String>,
    /// Custom headers ([`tern_core::custom_headers`]).
    pub headers: Vec<CustomHeader>,
    /// Authentication to the receiver; an OAuth2 token URL is checked like the URL.
    pub auth: ReceiverAuth,
    /// Signature schemes; with `v1a` an Ed25519 key is generated (its public key is in
    /// the returned endpoint's `signing_keys`).
    pub signatures: Signatures,
    /// Client certificate for mutual TLS (a Secrets Manager secret's ARN), if any.
    pub client_certificate: Option<tern_core::client_certificate::ClientCertificate>,
}

/// The refusal of an endpoint URL, with what to change when the guard knows
/// ([`tern_http::refusal_hint`]: `localhost` resolving to a denied `::1` where only
/// 127.0.0.1 is allowed, issue 28).
fn url_refused(
    url: &str,
    error: &tern_http::EndpointCheckError,
    policy: &DestinationPolicy,
) -> OpsError {
    match tern_http::refusal_hint(url, error, policy) {
        Some(hint) => OpsError::Invalid(format!("{error}; {hint}")),
        None => OpsError::Invalid(error.to_string()),
    }
}

/// Validates and stores a new endpoint; returns it (with its secret, to show once). The URL
/// is checked with the sender's destination policy (resolved once; every address must be
/// allowed), so an endpoint the sender would refuse is refused here already.
///
/// # Errors
/// [`OpsError::Invalid`] with the reason, or a store error.
pub async fn add_endpoint(
    store: &dyn EndpointStore,
    new: NewEndpoint,
    policy: &DestinationPolicy,
    lookup: &dyn HostLookup,
) -> Result<Endpoint, OpsError> {
    let endpoint = new_endpoint(EndpointId::generate(), new, policy, lookup).await?;
    store.put(&endpoint).await?;
    Ok(endpoint)
}

/// What [`add_endpoint_once`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreatedOnce {
    /// The endpoint was created now.
    Created(Endpoint),
    /// A create with this key and these settings made it before: here it is, as stored
    /// (its secret too: the first answer may never have reached the caller).
    Replayed(Endpoint),
    /// The key made an endpoint with other settings: nothing was written.
    KeyReused(Endpoint),
}

/// As [`add_endpoint`] for a create under an idempotency key: the endpoint's id `id` is
/// derived from the tenant and the key, and `fingerprint` names the request's settings
/// ([`Endpoint::creation_request`]). A retry finds the endpoint the first try made (no
/// second endpoint, no second secret); concurrent tries write one (a conditional create).
///
/// # Errors
/// As [`add_endpoint`].
pub async fn add_endpoint_once(
    store: &dyn EndpointStore,
    new: NewEndpoint,
    id: EndpointId,
    fingerprint: String,
    policy: &DestinationPolicy,
    lookup: &dyn HostLookup,
) -> Result<CreatedOnce, OpsError> {
    let tenant = TenantId::new(new.tenant.clone()).map_err(|e| OpsError::Invalid(e.to_string()))?;
    let seen = |existing: Endpoint| {
        if existing.creation_request.as_deref() == Some(fingerprint.as_str()) {
            CreatedOnce::Replayed(existing)
        } else {
            CreatedOnce::KeyReused(existing)
        }
    };
    // A retry is answered from the store, before any check of the URL.
    if let Some(existing) = store.get(&tenant, &id).await? {
        return Ok(seen(existing));
    }
    let mut endpoint = new_endpoint(id, new, policy, lookup).await?;
    endpoint.creation_request = Some(fingerprint.clone());
    Ok(match store.create(&endpoint).await? {
        None => CreatedOnce::Created(endpoint),
        Some(existing) => seen(existing),
    })
}

/// A new endpoint `id` from `new`, checked (the URL and the OAuth2 token URL by the SSRF
/// guard, then every setting), not stored.
async fn new_endpoint(
    id: EndpointId,
    new: NewEndpoint,
    policy: &DestinationPolicy,
    lookup: &dyn HostLookup,
) -> Result<Endpoint, OpsError> {
    let bad = |e: &dyn std::fmt::Display| OpsError::Invalid(e.to_string());
    tern_http::check_endpoint_url(&new.url, policy, lookup)
        .await
        .map_err(|e| url_refused(&new.url, &e, policy))?;
    reach::check_auth(&new.auth, policy, lookup).await?;
    let secret = match new.secret {
        Some(s) => Secret::parse(&s).map_err(|e| bad(&e))?,
        None => Secret::generate(),
    };
    let event_types = if new.event_types.is_empty() {
        vec!["*".into()]
    } else {
        new.event_types
    };
    let mut endpoint = Endpoint::new(
        id,
        TenantId::new(new.tenant).map_err(|e| bad(&e))?,
        new.url,
        event_types,
        secret,
        Utc::now(),
    );
    endpoint.timeout_ms = new.timeout_ms;
    endpoint.schedule = new
        .schedule
        .map(|s| RetrySchedule::parse(&s))
        .transpose()
        .map_err(|e| bad(&e))?;
    endpoint.max_attempts = new.max_attempts;
    endpoint.payload_format = new.payload_format;
    endpoint.max_per_second = new.max_per_second;
    endpoint.description = new.description;
    endpoint.headers = new.headers;
    endpoint.auth = new.auth;
    endpoint.signatures = new.signatures;
    endpoint.client_certificate = new.client_certificate;
    if new.signatures.v1a() {
        endpoint
            .rotate_signing_key(SigningKey::generate(), Utc::now(), chrono::Duration::zero())
            .map_err(|e| bad(&e))?;
    }
    endpoint.validate().map_err(|e| bad(&e))?;
    Ok(endpoint)
}

/// Prints endpoints as a table.
pub fn print_endpoints(out: &mut dyn Write, endpoints: &[Endpoint]) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<38} {:<14} {:<8} {:<24} {:<17} URL",
        "ENDPOINT", "TENANT", "ENABLED", "EVENT TYPES", "PAYLOAD FORMAT"
    )?;
    for e in endpoints {
        writeln!(
            out,
            "{:<38} {:<14} {:<8} {:<24} {:<17} {}{}",
            e.id,
            e.tenant_id,
            e.enabled,
            e.event_types.join(","),
            e.payload_format,
            e.url,
            e.disabled_reason
                .as_deref()
                .map(|r| format!("  ({r})"))
                .unwrap_or_default()
        )?;
    }
    Ok(())
}

/// Rotates an endpoint's secret: the new one signs at once, the old one keeps signing
/// for `overlap_hours`. Returns the new secret.
///
/// # Errors
/// Not found, or a store error.
pub async fn rotate_secret(
    store: &dyn EndpointStore,
    tenant: &TenantId,
    id: &EndpointId,
    overlap_hours: i64,
) -> Result<Secret, OpsError> {
    let mut endpoint = store
        .get(tenant, id)
        .await?
        .ok_or_else(|| OpsError::NotFound {
            id: id.to_string(),
            tenant: Some(tenant.to_string()),
        })?;
    let secret = Secret::generate();
    let overlap = chrono::Duration::try_hours(overlap_hours).ok_or_else(|| {
        OpsError::Invalid(tern_core::endpoint::EndpointError::BadOverlap.to_string())
    })?;
    endpoint
        .rotate_secret(secret.clone(), Utc::now(), overlap)
        .map_err(|e| OpsError::Invalid(e.to_string()))?;
    // Only the secrets are written: a disable that lands meanwhile (a 410) stays.
    store.set_secrets(tenant, id, &endpoint.secrets).await?;
    Ok(secret)
}

/// Finds an endpoint by id, in `tenant` when given, else in every tenant (a table scan:
/// fine for an operator, never on a hot path).
///
/// # Errors
/// [`OpsError::NotFound`], [`OpsError::Ambiguous`] (the id exists for several tenants),
/// or a store error.
pub async fn find_endpoint(
    store: &dyn EndpointStore,
    tenant: Option<&TenantId>,
    id: &EndpointId,
) -> Result<Endpoint, OpsError> {
    let not_found = || OpsError::NotFound {
        id: id.to_string(),
        tenant: tenant.map(ToString::to_string),
    };
    if let Some(t) = tenant {
        return store.get(t, id).await?.ok_or_else(not_found);
    }
    let mut found: Vec<Endpoint> = store
        .list_all()
        .await?
        .into_iter()
        .filter(|e| &e.id == id)
        .collect();
    match found.len() {
        0 => Err(not_found()),
        1 => Ok(found.remove(0)),
        _ => Err(OpsError::Ambiguous(
            id.to_string(),
            found
                .iter()
                .map(|e| e.tenant_id.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        )),
    }
}

/// Maps a store's "does not exist" (the endpoint vanished between the lookup and the
/// write) to [`OpsError::NotFound`].
fn vanished(e: PortError, endpoint: &Endpoint) -> OpsError {
    match e {
        PortError::Rejected(why) if why.contains("does not exist") => OpsError::NotFound {
            id: endpoint.id.to_string(),
            tenant: Some(endpoint.tenant_id.to_string()),
        },
        other => OpsError::Port(other),
    }
}

/// `tern endpoints disable`: disables an endpoint. With `reason` it records that reason
/// (replacing an earlier one; the disabled time stays that of the first disable); without
/// one it records [`DEFAULT_DISABLE_REASON`] only when the endpoint has no reason yet, so
/// a repeat never hides why it was disabled (a 410, say). Returns the endpoint as stored.
///
/// # Errors
/// [`OpsError::NotFound`], [`OpsError::Ambiguous`], or a store error.
pub async fn disable_endpoint(
    store: &dyn EndpointStore,
    tenant: Option<&TenantId>,
    id: &EndpointId,
    reason: Option<&str>,
) -> Result<Endpoint, OpsError> {
    let endpoint = find_endpoint(store, tenant, id).await?;
    let result = match reason {
        Some(r) => store.disable(&endpoint.tenant_id, id, r).await,
        None => {
            store
                .disable_keeping_reason(&endpoint.tenant_id, id, DEFAULT_DISABLE_REASON)
                .await
        }
    };
    result.map_err(|e| vanished(e, &endpoint))?;
    find_endpoint(store, Some(&endpoint.tenant_id), id).await
}

/// Reason recorded by `tern endpoints disable` without `--reason`.
pub const DEFAULT_DISABLE_REASON: &str = "disabled by an operator";

/// When deliveries resume after [`enable_endpoint`] (or the console's Enable), as the CLI
/// and the console say it. At once: a sender reads the registry past its endpoint cache
/// before it dead-letters a delivery as disabled (`tern_handlers::sender`), and enable
/// resets the health record. What is still cached: a sender's copy of the old health
/// record, for `TERN_HEALTH_CACHE_SECONDS` (5 s by default, times the time scale), during
/// which it may hold a delivery back to the old record's next probe.
pub const ENABLED_RESUME_NOTE: &str = "Deliveries resume now: a sender checks the registry past its endpoint cache before it \
refuses a delivery as disabled, and the endpoint's health record was reset (closed circuit, empty window; its 24 h history kept). \
For up to 5 s (TERN_HEALTH_CACHE_SECONDS) a sender may still hold a delivery back on its cached copy of the old \
record, until that record's next probe (at most one probe interval, 60 s, plus up to 60 s of spread).";

/// `tern endpoints enable`: turns a disabled endpoint (by a 410, auto-disable or an
/// operator) back on; its reason and time move to `last_disabled_reason` /
/// `last_disabled_at`. Given the health store, first resets the endpoint's health record
/// ([`tern_core::health::HealthStore::reset`]), so it starts with a closed circuit and an
/// empty window, its 24 h history kept. Returns the endpoint as stored.
///
/// # Errors
/// [`OpsError::NotFound`], [`OpsError::Ambiguous`], or a store error.
pub async fn enable_endpoint(
    store: &dyn EndpointStore,
    health: Option<&dyn tern_core::health::HealthStore>,
    tenant: Option<&TenantId>,
    id: &EndpointId,
) -> Result<Endpoint, OpsError> {
    let endpoint = find_endpoint(store, tenant, id).await?;
    // Health first: an endpoint enabled with its old counters would be disabled again by
    // the next failure (still under 50 % over the window).
    if let Some(health) = health {
        health
            .reset(&endpoint.tenant_id, id)
            .await
            .map_err(|e| vanished(e, &endpoint))?;
    }
    store
        .enable(&endpoint.tenant_id, id)
        .await
        .map_err(|e| vanished(e, &endpoint))?;
    find_endpoint(store, Some(&endpoint.tenant_id), id).await
}

/// `tern endpoints delete`: removes an endpoint. Deliveries already queued for it
/// dead-letter as `endpoint_deleted`. Returns what was deleted.
///
/// # Errors
/// [`OpsError::NotFound`], [`OpsError::Ambiguous`], or a store error.
pub async fn delete_endpoint(
    store: &dyn EndpointStore,
    tenant: Option<&TenantId>,
    id: &EndpointId,
) -> Result<Endpoint, OpsError> {
    let endpoint = find_endpoint(store, tenant, id).await?;
    store
        .delete(&endpoint.tenant_id, id)
        .await
        .map_err(|e| vanished(e, &endpoint))?;
    Ok(endpoint)
}

/// `tern endpoints update`: changes the settings `update` names and nothing else. A new
/// URL passes the same SSRF check as `tern endpoints add`; the result is validated as a
/// whole before anything is written; the write touches only the named fields, so a
/// disable or a rotation that lands meanwhile is kept. Returns the endpoint as stored.
///
/// # Errors
/// [`OpsError::Invalid`] (nothing to change, a refused URL, an invalid result),
/// [`OpsError::NotFound`], [`OpsError::Ambiguous`], or a store error.
pub async fn update_endpoint(
    store: &dyn EndpointStore,
    tenant: Option<&TenantId>,
    id: &EndpointId,
    update: &EndpointUpdate,
    policy: &DestinationPolicy,
    lookup: &dyn HostLookup,
) -> Result<Endpoint, OpsError> {
    if update.is_empty() {
        return Err(OpsError::Invalid(
            "nothing to update: pass at least one of --url, --types, --description, \
             --timeout-ms, --schedule, --max-attempts, --payload-format, --max-per-second, \
             --header, --secret-header, --remove-header, --clear-headers, --auth, --signatures"
                .into(),
        ));
    }
    let mut endpoint = find_endpoint(store, tenant, id).await?;
    if let Some(url) = &update.url {
        tern_http::check_endpoint_url(url, policy, lookup)
            .await
            .map_err(|e| url_refused(url, &e, policy))?;
    }
    if let Some(auth) = &update.auth {
        reach::check_auth(auth, policy, lookup).await?;
    }
    if update.signatures.is_some_and(Signatures::v1a) {
        // The first v1a key is written before the setting that needs it (alone, so a
        // concurrent change stays); `show` then prints its public key.
        if reach::ensure_signing_key(store, &endpoint)
            .await
            .map_err(|e| match e {
                OpsError::Port(p) => vanished(p, &endpoint),
                other => other,
            })?
            .is_some()
        {
            endpoint = find_endpoint(store, Some(&endpoint.tenant_id), id).await?;
        }
    }
    let mut preview = endpoint.clone();
    update
        .apply(&mut preview)
        .map_err(|e| OpsError::Invalid(e.to_string()))?;
    store
        .update(&endpoint.tenant_id, id, update)
        .await
        .map_err(|e| vanished(e, &endpoint))?;
    find_endpoint(store, Some(&endpoint.tenant_id), id).await
}

/// One secret as `tern endpoints show` reports it: never the secret itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SecretView {
    /// [`secret_fingerprint`]: `sha256:` + 12 hex digits; tells secrets apart.
    pub fingerprint: String,
    /// `current` (signs, no expiry), `previous` (signs until `expires_at`: a rotation's
    /// overlap) or `expired` (no longer signs).
    pub state: &'static str,
    /// When it was added (RFC 3339).
    pub created_at: DateTime<Utc>,
    /// When it stops signing (RFC 3339); `null` for the current secret.
    pub expires_at: Option<DateTime<Utc>>,
}

/// An endpoint as `tern endpoints show --json` prints it. The field names are stable;
/// `null` means "not set" (for `timeout_ms`, `schedule_seconds`, `max_attempts`: the
/// deployment default applies).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EndpointView {
    /// Endpoint id.
    pub id: String,
    /// Owning tenant.
    pub tenant_id: String,
    /// Receiver URL.
    pub url: String,
    /// Operator note.
    pub description: Option<String>,
    /// Subscribed event types (`*`: all).
    pub event_types: Vec<String>,
    /// False when disabled.
    pub enabled: bool,
    /// Why it is disabled.
    pub disabled_reason: Option<String>,
    /// When it was disabled (RFC 3339).
    pub disabled_at: Option<DateTime<Utc>>,
    /// The reason it had when it was last enabled again.
    pub last_disabled_reason: Option<String>,
    /// When it was disabled before it was last enabled again (RFC 3339).
    pub last_disabled_at: Option<DateTime<Utc>>,
    /// Waits before each retry, seconds (jitter of 0-10 % is added).
    pub schedule_seconds: Option<Vec<u64>>,
    /// Attempt budget.
    pub max_attempts: Option<u32>,
    /// Attempt deadline, milliseconds.
    pub timeout_ms: Option<u64>,
    /// Request body format: `raw` (the payload as written) or `standard_webhooks` (the
    /// payload wrapped as `{"type","timestamp","data"}`).
    pub payload_format: PayloadFormat,
    /// Rate limit: most requests per second across every sender batch; `null`: none.
    pub max_per_second: Option<u32>,
    /// Signing secrets, newest first.
    pub secrets: Vec<SecretView>,
    /// Signature schemes in `webhook-signature`: `v1` (HMAC), `v1a` (Ed25519) or `both`.
    pub signatures: Signatures,
    /// Ed25519 keys, newest first, by their public keys (`whpk_`: what the receiver
    /// verifies `v1a` with).
    pub signing_keys: Vec<reach::SigningKeyView>,
    /// Custom headers; secret values are `null`.
    pub headers: Vec<reach::HeaderView>,
    /// Authentication to the receiver, secrets named but not shown.
    pub auth: reach::AuthView,
    /// The Secrets Manager secret (ARN) of its client certificate for mutual TLS; `null`
    /// for none. The ARN is not a secret; the certificate and key stay in the secret.
    pub client_certificate_arn: Option<String>,
    /// When it was created (RFC 3339).
    pub created_at: DateTime<Utc>,
    /// When its settings were last updated (RFC 3339).
    pub updated_at: Option<DateTime<Utc>>,
}

impl EndpointView {
    /// The view of `e` at `now` (which decides each secret's state).
    pub fn of(e: &Endpoint, now: DateTime<Utc>) -> Self {
        Self {
            id: e.id.to_string(),
            tenant_id: e.tenant_id.to_string(),
            url: e.url.clone(),
            description: e.description.clone(),
            event_types: e.event_types.clone(),
            enabled: e.enabled,
            disabled_reason: e.disabled_reason.clone(),
            disabled_at: e.disabled_at,
            last_disabled_reason: e.last_disabled_reason.clone(),
            last_disabled_at: e.last_disabled_at,
            schedule_seconds: e.schedule.as_ref().map(|s| s.delays().to_vec()),
            max_attempts: e.max_attempts,
            timeout_ms: e.timeout_ms,
            payload_format: e.payload_format,
            max_per_second: e.max_per_second,
            secrets: e
                .secrets
                .iter()
                .map(|s| SecretView {
                    fingerprint: secret_fingerprint(&s.secret),
                    state: match s.expires_at {
                        None => "current",
                        Some(t) if t > now => "previous",
                        Some(_) => "expired",
                    },
                    created_at: s.created_at,
                    expires_at: s.expires_at,
                })
                .collect(),
            signatures: e.signatures,
            signing_keys: reach::signing_key_views(e, now),
            headers: reach::header_views(e),
            auth: reach::AuthView::of(&e.auth),
            client_certificate_arn: e.client_certificate.as_ref().map(|c| c.secret_arn.clone()),
            created_at: e.created_at,
            updated_at: e.updated_at,
        }
    }
}

/// Prints one endpoint, every field (`--json`: one [`EndpointView`] object). Secrets
/// appear as fingerprints with their rotation state, never their value.
///
/// # Errors
/// A write error.
pub fn print_endpoint(out: &mut dyn Write, e: &Endpoint, json: bool) -> std::io::Result<()> {
    let v = EndpointView::of(e, Utc::now());
    if json {
        let text = serde_json::to_string_pretty(&v).map_err(std::io::Error::other)?;
        return writeln!(out, "{text}");
    }
    let opt = |o: Option<String>, none: &str| o.unwrap_or_else(|| none.to_owned());
    let time = |t: Option<DateTime<Utc>>| t.map(|t| t.to_rfc3339());
    writeln!(out, "id:                   {}", v.id)?;
    writeln!(out, "tenant:               {}", v.tenant_id)?;
    writeln!(out, "url:                  {}", v.url)?;
    writeln!(out, "description:          {}", opt(v.description, "-"))?;
    writeln!(out, "event types:          {}", v.event_types.join(","))?;
    writeln!(out, "enabled:              {}", v.enabled)?;
    writeln!(out, "disabled reason:      {}", opt(v.disabled_reason, "-"))?;
    writeln!(
        out,
        "disabled at:          {}",
        opt(time(v.disabled_at), "-")
    )?;
    writeln!(
        out,
        "last disabled reason: {}",
        opt(v.last_disabled_reason, "-")
    )?;
    writeln!(
        out,
        "last disabled at:     {}",
        opt(time(v.last_disabled_at), "-")
    )?;
    writeln!(
        out,
        "schedule (s):         {}",
        opt(
            v.schedule_seconds.map(|s| s
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")),
            "deployment default"
        )
    )?;
    writeln!(
        out,
        "max attempts:         {}",
        opt(v.max_attempts.map(|m| m.to_string()), "schedule length + 1")
    )?;
    writeln!(
        out,
        "timeout (ms):         {}",
        opt(v.timeout_ms.map(|t| t.to_string()), "deployment default")
    )?;
    writeln!(out, "payload format:       {}", v.payload_format)?;
    writeln!(
        out,
        "rate limit:           {}",
        opt(v.max_per_second.map(|r| format!("{r} per second")), "none")
    )?;
    writeln!(out, "created at:           {}", v.created_at.to_rfc3339())?;
    writeln!(
        out,
        "updated at:           {}",
        opt(time(v.updated_at), "-")
    )?;
    writeln!(out, "auth:                 {}", v.auth.line())?;
    writeln!(out, "signatures:           {}", v.signatures)?;
    writeln!(
        out,
        "client certificate:   {}",
        v.client_certificate_arn.as_deref().unwrap_or("none")
    )?;
    writeln!(out, "secrets (newest first, never shown):")?;
    for s in &v.secrets {
        writeln!(
            out,
            "  {}  {:<8}  created {}  {}",
            s.fingerprint,
            s.state,
            s.created_at.to_rfc3339(),
            s.expires_at
                .map(|t| format!("expires {}", t.to_rfc3339()))
                .unwrap_or_else(|| "no expiry".into())
        )?;
    }
    if !v.signing_keys.is_empty() {
        writeln!(
            out,
            "v1a public keys (newest first; give them to the receiver):"
        )?;
        for k in &v.signing_keys {
            writeln!(
                out,
                "  {}  {:<8}  created {}  {}",
                k.public_key,
                k.state,
                k.created_at.to_rfc3339(),
                k.expires_at
                    .map(|t| format!("expires {}", t.to_rfc3339()))
                    .unwrap_or_else(|| "no expiry".into())
            )?;
        }
    }
    if v.headers.is_empty() {
        writeln!(out, "headers:              -")?;
    } else {
        writeln!(out, "headers:")?;
        for h in &v.headers {
            writeln!(
                out,
                "  {}: {}",
                h.name,
                h.value.as_deref().unwrap_or(reach::SECRET_SET)
            )?;
        }
    }
    Ok(())
}

/// Prints an event's attempt history, oldest first: one line per try, a takeover marked
/// `<attempt> takeover <n>`, an abandoned try (its sender stopped before recording the
/// result) with outcome `abandoned`.
///
/// # Errors
/// A ledger error.
pub async fn print_history(
    out: &mut dyn Write,
    ledger: &dyn DeliveryLedger,
    tenant: &TenantId,
    event: &EventId,
) -> Result<(), OpsError> {
    let history = ledger.history(tenant, event).await?;
    let w = |e: std::io::Error| OpsError::Invalid(e.to_string());
    if history.is_empty() {
        writeln!(out, "no attempts recorded for {event}").map_err(w)?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<24} {:<38} {:>6} {:>11} {:>6} {:>8}  {:<22} ERROR / RESPONSE",
        "TIME", "ENDPOINT", "REPLAY", "ATTEMPT", "STATUS", "LATENCY", "OUTCOME"
    )
    .map_err(w)?;
    for r in history {
        let detail = r
            .error
            .clone()
            .or_else(|| {
                r.response_excerpt.clone().map(|x| {
                    format!(
                        "{}{}",
                        x.chars().take(60).collect::<String>(),
                        if r.excerpt_truncated { "…" } else { "" }
                    )
                })
            })
            .unwrap_or_default();
        // A takeover is a second try of the same attempt after its first holder's
        // lease ran out: `1 takeover 1`. Both rows stay in the log.
        let attempt = if r.takeover == 0 {
            r.attempt.to_string()
        } else {
            format!("{} takeover {}", r.attempt, r.takeover)
        };
        writeln!(
            out,
            "{:<24} {:<38} {:>6} {:>11} {:>6} {:>6}ms  {:<22} {}",
            r.started_at.format("%Y-%m-%dT%H:%M:%S%.3f"),
            r.endpoint_id,
            r.replay_count,
            attempt,
            r.status
                .map(|s| s.to_string())
                .unwrap_or_else(|| "-".into()),
            r.latency_ms,
            r.outcome,
            detail.replace('\n', " ")
        )
        .map_err(w)?;
    }
    Ok(())
}

/// How long [`peek`] keeps reading before it shows what it has: 20 s.
pub const PEEK_TIME_BUDGET: std::time::Duration = std::time::Duration::from_secs(20);

/// Reads up to `max` messages of a queue without removing them: each is hidden while
/// the read goes on (so none is read twice), then made visible again.
///
/// # Errors
/// A queue error; messages read so far are released first.
pub async fn peek(
    queue: &dyn DrainableQueue,
    max: usize,
) -> Result<Vec<ReceivedMessage>, PortError> {
    peek_within(queue, max, PEEK_TIME_BUDGET).await
}

/// [`peek`] with its own time budget: no receive starts after `time_budget` (a caller that
/// must answer within a deadline of its own, like the API behind API Gateway's 30 s).
///
/// # Errors
/// A queue error; messages read so far are released first.
pub async fn peek_within(
    queue: &dyn DrainableQueue,
    max: usize,
    time_budget: std::time::Duration,
) -> Result<Vec<ReceivedMessage>, PortError> {
    let mut seen = Vec::new();
    let mut result = Ok(());
    // Long polls, stopping on consecutive empty answers: a short poll may miss messages.
    let rule = DrainRule {
        wait_seconds: DrainRule::WAIT_SECONDS,
        empty_polls_to_stop: DrainRule::EMPTY_POLLS_TO_STOP,
        time_budget,
        visibility_seconds: 30,
    };
    let mut drain = Drain::new(queue, rule, max);
    loop {
        match drain.next_batch().await {
            Ok(Some(batch)) => seen.extend(batch),
            Ok(None) => break,
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    for m in &seen {
        queue.release(&m.receipt_handle).await?;
    }
    result.map(|()| seen)
}

/// Reads up to `max` messages of a queue looking for `message_id` (an SQS message id, or
/// a delivery message's delivery id, `<event id>.<endpoint id>`, as the record's lists
/// name dead letters): every other message is made visible again; the one found stays
/// hidden (for 30 s) so the caller can delete it (or release it with
/// [`DrainableQueue::release`]). Returns it (if found) and how many messages were read.
///
/// # Errors
/// A queue error; messages read so far are released first.
pub async fn take(
    queue: &dyn DrainableQueue,
    message_id: &str,
    max: usize,
) -> Result<(Option<ReceivedMessage>, usize), PortError> {
    let mut seen = Vec::new();
    let mut result = Ok(());
    let rule = DrainRule {
        wait_seconds: DrainRule::WAIT_SECONDS,
        empty_polls_to_stop: DrainRule::EMPTY_POLLS_TO_STOP,
        time_budget: PEEK_TIME_BUDGET,
        visibility_seconds: 30,
    };
    let mut drain = Drain::new(queue, rule, max);
    loop {
        match drain.next_batch().await {
            Ok(Some(batch)) => {
                seen.extend(batch);
                if seen.iter().any(|m| is(m, message_id)) {
                    break;
                }
            }
            Ok(None) => break,
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    let read = seen.len();
    let mut found = None;
    for m in seen {
        if found.is_none() && is(&m, message_id) && result.is_ok() {
            found = Some(m);
        } else {
            queue.release(&m.receipt_handle).await?;
        }
    }
    result.map(|()| (found, read))
}

/// Whether `m` is the message `id` names: its SQS message id or its delivery id.
fn is(m: &ReceivedMessage, id: &str) -> bool {
    m.message_id == id
        || DeliveryMessage::parse(&m.body).is_ok_and(|d| d.delivery_id.as_str() == id)
}

/// Prints up to `max` DLQ messages (payload and dead-letter record) without removing them.
///
/// # Errors
/// A queue error.
pub async fn peek_dlq(
    out: &mut dyn Write,
    dlq: &dyn DrainableQueue,
    max: u32,
) -> Result<u32, OpsError> {
    let w = |e: std::io::Error| OpsError::Invalid(e.to_string());
    let seen = peek(dlq, max as usize).await?;
    for m in &seen {
        match DeliveryMessage::parse(&m.body) {
            Ok(d) => {
                let dl = d.dead_letter.as_ref();
                writeln!(
                    out,
                    "{}  endpoint={} type={} reason={} attempts={} last_status={} last_error={}\n  payload: {}",
                    d.delivery_id,
                    d.endpoint_id,
                    d.event.event_type,
                    dl.map_or("sqs_redrive".into(), |r| r.reason.to_string()),
                    dl.map_or(d.attempt, |r| r.attempts),
                    dl.and_then(|r| r.last_status).map_or("-".into(), |s| s.to_string()),
                    dl.and_then(|r| r.last_error.clone()).unwrap_or_else(|| "-".into()),
                    d.event.payload.as_str().chars().take(200).collect::<String>()
                )
                .map_err(w)?;
            }
            Err(e) => writeln!(
                out,
                "{}  unreadable ({e}): {}",
                m.message_id,
                m.body.chars().take(200).collect::<String>()
            )
            .map_err(w)?,
        }
    }
    Ok(u32::try_from(seen.len()).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod url_refusal_tests {
    use super::*;

    /// Issue 28: `localhost` resolving to `::1` in local mode (which allows 127.0.0.1/32)
    /// was refused as "destination ::1 is in a denied range (loopback)" with nothing to
    /// go on; the refusal now says what to use.
    #[tokio::test]
    async fn localhost_refused_as_ipv6_loopback_says_to_use_the_allowed_address() {
        let policy = DestinationPolicy {
            https_only: false,
            allow: vec!["127.0.0.1/32".parse().expect("net")],
            nat64: false,
        };
        let lookup = tern_http::StaticLookup {
            hosts: vec![(
                "localhost".to_owned(),
                vec!["::1".parse().expect("ip"), "127.0.0.1".parse().expect("ip")],
            )],
        };
        let url = "http://localhost:8000/hook?x=1";
        let error = tern_http::check_endpoint_url(url, &policy, &lookup)
            .await
            .expect_err("::1 is denied");
        let OpsError::Invalid(text) = url_refused(url, &error, &policy) else {
            panic!("not Invalid")
        };
        assert!(text.contains("::1"), "{text}");
        assert!(
            text.contains(
                "this deployment allows 127.0.0.1/32: use http://127.0.0.1:8000/hook?x=1"
            ),
            "{text}"
        );
        // An address literal, or a deployment that allows nothing, gets no hint.
        let literal = "http://[::1]:8000/hook";
        let error = tern_http::check_endpoint_url(literal, &policy, &lookup)
            .await
            .expect_err("denied");
        assert_eq!(tern_http::refusal_hint(literal, &error, &policy), None);
        let strict = DestinationPolicy::default();
        let error = tern_http::check_endpoint_url(url, &strict, &lookup)
            .await
            .expect_err("denied");
        assert_eq!(tern_http::refusal_hint(url, &error, &strict), None);
    }
}
