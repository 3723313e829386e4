//! `/v1/tenants/{tenant_id}/endpoints...`: the tenant's endpoints, their health, test
//! sends, the delivery log by endpoint, and recover.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::Utc;
use tern_core::delivery_log::{EndpointLogQuery, LogPosition};
use tern_core::endpoint::{EndpointError, EndpointUpdate, MAX_ROTATION_OVERLAP_HOURS};
use tern_core::waiting::WaitingScope;
use tern_core::{EndpointId, EventType, RetrySchedule, TenantId, sqs_text};
use tern_ops::OpsError;
use tern_ops::recover::{RecoverDeps, RecoverError};
use tern_ops::resend::ResendDeps;
use tern_ops::test_send::TestSendError;

use super::{
    Conflict, EndpointPath, Problems, TenantPath, decode_cursor, encode_cursor, page_size,
};
use crate::ApiDeps;
use crate::extract::{ApiJson, ApiPath, ApiQuery, endpoint_id, tenant};
use crate::model::{
    DisableRequest, Endpoint, EndpointAttempt, EndpointAttemptList, EndpointAttemptsQuery,
    EndpointCreated, EndpointHealth, EndpointList, EndpointPace, EndpointPatch,
    EndpointStateFilter, LastFailure, ListEndpointsQuery, NewEndpoint, RecoverReport,
    RecoverRequest, ReplayReport, Resend, RotateSecretRequest, RotatedSecret, TestSend,
    WaitingReport,
};
use crate::problem::{ApiError, ApiResult, Kind};
use crate::reach::{self, RotateSigningKeyRequest, RotatedSigningKey};

/// Default overlap of a rotation, hours: 24.
pub const DEFAULT_OVERLAP_HOURS: i64 = 24;

/// Longest description or disable reason, bytes: 1,024 (`tern_core::sqs_text::MAX_TEXT_BYTES`;
/// tenant text is data, bounded).
pub const MAX_TEXT_BYTES: usize = sqs_text::MAX_TEXT_BYTES;

fn text_field(field: &str, text: &str) -> Result<(), ApiError> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(ApiError::invalid(
            field,
            format!(
                "{field} is {} bytes; the limit is {MAX_TEXT_BYTES}",
                text.len()
            ),
        ));
    }
    if !sqs_text::is_clean(text) {
        return Err(ApiError::invalid(
            field,
            format!("{field} holds a control character that cannot be stored"),
        ));
    }
    Ok(())
}

/// Checks each setting on its own, naming the field at fault, with the domain's own rules
/// (`tern_core::endpoint`): what `Endpoint::validate` checks as a whole.
/// The client certificate a `client_certificate_arn` names, checked against the caller's
/// own prefix (`tern/mtls/<tenant id>/`): another tenant's secret gets the same 422 whether
/// or not it exists.
fn client_certificate(
    arn: Option<&str>,
    tenant: &TenantId,
) -> Result<Option<tern_core::client_certificate::ClientCertificate>, ApiError> {
    arn.map(|a| {
        tern_core::client_certificate::ClientCertificate::new(a, tenant)
            .map_err(|e| ApiError::invalid("client_certificate_arn", e.to_string()))
    })
    .transpose()
}

fn check_settings(
    url: Option<&str>,
    event_types: Option<&[String]>,
    timeout_ms: Option<u64>,
    schedule_seconds: Option<&[u64]>,
    max_attempts: Option<u32>,
    max_per_second: Option<u32>,
    description: Option<&str>,
) -> Result<Option<RetrySchedule>, ApiError> {
    if let Some(url) = url {
        tern_core::endpoint::validate_url(url)
            .map_err(|e| ApiError::invalid("url", e.to_string()))?;
    }
    if let Some(types) = event_types {
        if types.is_empty() {
            return Err(ApiError::invalid(
                "event_types",
                EndpointError::NoEventTypes.to_string(),
            ));
        }
        if let Some(bad) = types.iter().find(|t| {
            *t != tern_core::endpoint::ALL_EVENT_TYPES && EventType::new(t.as_str()).is_err()
        }) {
            return Err(ApiError::invalid(
                "event_types",
                EndpointError::BadEventType(bad.clone()).to_string(),
            ));
        }
    }
    if let Some(t) = timeout_ms
        && !(tern_core::endpoint::MIN_TIMEOUT_MS..=tern_core::endpoint::MAX_TIMEOUT_MS).contains(&t)
    {
        return Err(ApiError::invalid(
            "timeout_ms",
            EndpointError::BadTimeout(t).to_string(),
        ));
    }
    if max_attempts == Some(0) {
        return Err(ApiError::invalid(
            "max_attempts",
            EndpointError::ZeroAttempts.to_string(),
        ));
    }
    if let Some(r) = max_per_second {
        tern_core::rate_limit::RateLimit::new(r)
            .map_err(|e| ApiError::invalid("max_per_second", e.to_string()))?;
    }
    if let Some(d) = description {
        text_field("description", d)?;
    }
    schedule_seconds
        .map(|s| RetrySchedule::new(s.to_vec()))
        .transpose()
        .map_err(|e| ApiError::invalid("schedule_seconds", e.to_string()))
}

/// A refusal of the endpoint as a whole (`Endpoint::validate` after the fields were
/// checked one by one), naming the field: what is left is a combination, a custom
/// `authorization` header beside an authentication of the endpoint's own (named at the
/// header when the request set headers, else at `auth`).
fn endpoint_problem(
    e: &EndpointError,
    headers: Option<&[tern_core::custom_headers::CustomHeader]>,
) -> ApiError {
    let field = match e {
        EndpointError::BadUrl(_) | EndpointError::UrlCredentials => Some("url".to_owned()),
        EndpointError::BadEventType(_) | EndpointError::NoEventTypes => {
            Some("event_types".to_owned())
        }
        EndpointError::BadTimeout(_) => Some("timeout_ms".to_owned()),
        EndpointError::ZeroAttempts => Some("max_attempts".to_owned()),
        EndpointError::BadRateLimit(_) => Some("max_per_second".to_owned()),
        EndpointError::Header(_) => Some("headers".to_owned()),
        EndpointError::Auth(_) => Some("auth".to_owned()),
        EndpointError::AuthorizationTwice(_) => Some(
            headers
                .and_then(|h| h.iter().position(|h| h.name == "authorization"))
                .map_or_else(|| "auth".to_owned(), |i| format!("headers[{i}].name")),
        ),
        EndpointError::ClientCertificate(_) => Some("client_certificate_arn".to_owned()),
        EndpointError::NoActiveSigningKey => Some("signatures".to_owned()),
        EndpointError::NoSecret | EndpointError::NoActiveSecret | EndpointError::BadOverlap => None,
    };
    match field {
        Some(f) => ApiError::invalid(f, e.to_string()),
        None => ApiError::new(Kind::Validation, e.to_string()),
    }
}

/// Checks an OAuth2 token URL with the SSRF guard (the deployment's policy, every
/// resolved address), naming `auth.token_url`.
async fn check_token_url(
    deps: &ApiDeps,
    auth: &tern_core::receiver_auth::ReceiverAuth,
) -> ApiResult<()> {
    tern_ops::reach::check_auth(auth, &deps.settings.destinations, deps.lookup.as_ref())
        .await
        .map_err(|e| ops_error(e, Some("auth.token_url")))
}

/// An operator command's error as a problem: not found, or (after the fields were checked
/// one by one) the URL the SSRF guard refused.
fn ops_error(e: OpsError, invalid_field: Option<&str>) -> ApiError {
    match e {
        OpsError::NotFound { id, .. } => ApiError::not_found("endpoint", id),
        OpsError::Invalid(why) => match invalid_field {
            Some(f) => ApiError::invalid(f, why),
            None => ApiError::new(Kind::Validation, why),
        },
        OpsError::Port(p) => p.into(),
        other => {
            tracing::error!(error = %other, "unexpected operator error");
            ApiError::new(Kind::Internal, "the request could not be completed")
        }
    }
}

/// The tenant's endpoint `id`, or a 404.
async fn owned(
    deps: &ApiDeps,
    tenant: &TenantId,
    id: &EndpointId,
) -> ApiResult<tern_core::Endpoint> {
    deps.endpoints
        .get(tenant, id)
        .await?
        .ok_or_else(|| ApiError::not_found("endpoint", id))
}

/// The id of the endpoint `tenant`'s create under `key` makes: `ep_` and 32 hex digits of
/// SHA-256 over the tenant and the key, so every retry names the same endpoint and two
/// tenants' keys never meet.
fn keyed_endpoint_id(tenant: &TenantId, key: &str) -> ApiResult<EndpointId> {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("tern-idempotency-key\0{tenant}\0{key}"));
    EndpointId::new(format!("ep_{}", &hex::encode(digest)[..32]))
        .map_err(|e| ApiError::new(Kind::Internal, e.to_string()))
}

/// The fingerprint of a create's settings under `key`: SHA-256 hex of the key and the
/// body as parsed (so spacing and key order do not count, a field's value does).
fn creation_fingerprint(key: &str, body: &NewEndpoint) -> ApiResult<String> {
    use sha2::Digest;
    let settings =
        serde_json::to_string(body).map_err(|e| ApiError::new(Kind::Internal, e.to_string()))?;
    Ok(hex::encode(sha2::Sha256::digest(format!(
        "{key}\0{settings}"
    ))))
}

/// Create an endpoint; its signing secret is returned this once. With an
/// `Idempotency-Key`, a retry of the same create (same key, same body) answers what the
/// first did (the same endpoint and secret, `Idempotent-Replayed: true`) and creates
/// nothing, for 24 hours like every POST, and after that for as long as the endpoint
/// exists (its id is derived from the tenant and the key); the key with another body is a
/// 422.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant_id}/endpoints",
    operation_id = "createEndpoint",
    tag = "endpoints",
    params(("tenant_id" = String, Path, description = "Tenant id: 1-128 ASCII letters, digits, `_` and `-` (`tern_core::ids::MAX_ID_LEN`); another is a 400 naming `tenant_id`", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$")),
    request_body = NewEndpoint,
    responses(
        (status = 201, description = "Created; `secret` is shown only now (and to a retry under the same `Idempotency-Key`)", body = EndpointCreated),
        Problems
    ),
    security(("sigv4" = []))
)]
pub(crate) async fn create_endpoint(
    State(deps): State<ApiDeps>,
    ApiPath(p): ApiPath<TenantPath>,
    headers: axum::http::HeaderMap,
    ApiJson(body): ApiJson<NewEndpoint>,
) -> ApiResult<(StatusCode, axum::http::HeaderMap, Json<EndpointCreated>)> {
    let tenant = tenant(&p.tenant_id)?;
    let key = crate::idempotency::key(&headers)?;
    check_settings(
        Some(&body.url),
        body.event_types.as_deref(),
        body.timeout_ms,
        body.schedule_seconds.as_deref(),
        body.max_attempts,
        body.max_per_second,
        body.description.as_deref(),
    )?;
    let certificate = client_certificate(body.client_certificate_arn.as_deref(), &tenant)?;
    let headers = body
        .headers
        .as_deref()
        .map(|h| reach::headers_of(h, &[], true))
        .transpose()?
        .unwrap_or_default();
    let auth = body
        .auth
        .as_ref()
        .map(|a| reach::auth_of(a, None))
        .transpose()?
        .unwrap_or_default();
    if auth.sends_authorization() && headers.iter().any(|h| h.name == "authorization") {
        return Err(endpoint_problem(
            &EndpointError::AuthorizationTwice(auth.kind()),
            Some(&headers),
        ));
    }
    check_token_url(&deps, &auth).await?;
    let once = match &key {
        Some(k) => Some((
            keyed_endpoint_id(&tenant, k)?,
            creation_fingerprint(k, &body)?,
        )),
        None => None,
    };
    let new = tern_ops::NewEndpoint {
        tenant: tenant.to_string(),
        url: body.url,
        event_types: body.event_types.unwrap_or_default(),
        max_attempts: body.max_attempts,
        timeout_ms: body.timeout_ms,
        schedule: body
            .schedule_seconds
            .map(|s| s.iter().map(u64::to_string).collect::<Vec<_>>().join(",")),
        description: body.description,
        payload_format: body.payload_format.map(Into::into).unwrap_or_default(),
        max_per_second: body.max_per_second,
        secret: None,
        headers,
        auth,
        // With v1a, add_endpoint makes the Ed25519 key.
        signatures: body.signatures.map(Into::into).unwrap_or_default(),
        client_certificate: certificate,
        send_traceparent: body.send_traceparent.unwrap_or(false),
    };
    // Every field but the URL's destination was checked above: what add_endpoint still
    // refuses is the SSRF guard's verdict on the URL.
    let mut answer_headers = axum::http::HeaderMap::new();
    let created = match once {
        None => tern_ops::add_endpoint(
            deps.endpoints.as_ref(),
            new,
            &deps.settings.destinations,
            deps.lookup.as_ref(),
        )
        .await
        .map_err(|e| ops_error(e, Some("url")))?,
        Some((id, fingerprint)) => match tern_ops::add_endpoint_once(
            deps.endpoints.as_ref(),
            new,
            id,
            fingerprint,
            &deps.settings.destinations,
            deps.lookup.as_ref(),
        )
        .await
        .map_err(|e| ops_error(e, Some("url")))?
        {
            tern_ops::CreatedOnce::Created(e) => e,
            tern_ops::CreatedOnce::Replayed(e) => {
                answer_headers.insert(
                    crate::idempotency::IDEMPOTENT_REPLAYED,
                    axum::http::HeaderValue::from_static("true"),
                );
                e
            }
            tern_ops::CreatedOnce::KeyReused(_) => {
                return Err(ApiError::new(
                    Kind::IdempotencyKeyReused,
                    "this Idempotency-Key created an endpoint with other settings: use a new key for a new endpoint",
                )
                .with_field("Idempotency-Key"));
            }
        },
    };
    let secret = created
        .secrets
        .first()
        .map(|s| s.secret.expose().to_owned())
        .ok_or_else(|| ApiError::new(Kind::Internal, "the endpoint has no secret"))?;
    Ok((
        StatusCode::CREATED,
        answer_headers,
        Json(EndpointCreated {
            endpoint: Endpoint::of(&created),
            secret,
        }),
    ))
}

/// List the tenant's endpoints, a page at a time, in id order.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant_id}/endpoints",
    operation_id = "listEndpoints",
    tag = "endpoints",
    params(("tenant_id" = String, Path, description = "Tenant id: 1-128 ASCII letters, digits, `_` and `-` (`tern_core::ids::MAX_ID_LEN`); another is a 400 naming `tenant_id`", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$"), ListEndpointsQuery),
    responses((status = 200, description = "A page", body = EndpointList), Problems),
    security(("sigv4" = []))
)]
pub(crate) async fn list_endpoints(
    State(deps): State<ApiDeps>,
    ApiPath(p): ApiPath<TenantPath>,
    ApiQuery(q): ApiQuery<ListEndpointsQuery>,
) -> ApiResult<Json<EndpointList>> {
    let tenant = tenant(&p.tenant_id)?;
    let limit = page_size(q.limit)?;
    let after = q
        .cursor
        .as_deref()
        .map(|c| decode_cursor(tenant.as_str(), c, |t| EndpointId::new(t).ok()))
        .transpose()?;
    let enabled = q.state.map(|s| s == EndpointStateFilter::Enabled);
    let page = deps
        .endpoints
        .list_page(&tenant, after.as_ref(), limit, enabled)
        .await?;
    Ok(Json(EndpointList {
        items: page.endpoints.iter().map(Endpoint::of).collect(),
        next_cursor: page
            .next
            .map(|id| encode_cursor(tenant.as_str(), id.as_str())),
    }))
}

/// Get one endpoint.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant_id}/endpoints/{endpoint_id}",
    operation_id = "getEndpoint",
    tag = "endpoints",
    params(
        ("tenant_id" = String, Path, description = "Tenant id: 1-128 ASCII letters, digits, `_` and `-` (`tern_core::ids::MAX_ID_LEN`); another is a 400 naming `tenant_id`", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$"),
        ("endpoint_id" = String, Path, description = "Endpoint id: 1-128 ASCII letters, digits, `_` and `-`; another, like an unknown or another tenant's id, is a 404", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$")
    ),
    responses((status = 200, description = "The endpoint", body = Endpoint), Problems),
    security(("sigv4" = []))
)]
pub(crate) async fn get_endpoint(
    State(deps): State<ApiDeps>,
    ApiPath(p): ApiPath<EndpointPath>,
) -> ApiResult<Json<Endpoint>> {
    let tenant = tenant(&p.tenant_id)?;
    let id = endpoint_id(&p.endpoint_id)?;
    Ok(Json(Endpoint::of(&owned(&deps, &tenant, &id).await?)))
}

/// Change the settings named in the body, nothing else: a disable or a rotation that
/// lands meanwhile is kept. A new URL passes the same checks as at creation.
#[utoipa::path(
    patch,
    path = "/v1/tenants/{tenant_id}/endpoints/{endpoint_id}",
    operation_id = "updateEndpoint",
    tag = "endpoints",
    params(
        ("tenant_id" = String, Path, description = "Tenant id: 1-128 ASCII letters, digits, `_` and `-` (`tern_core::ids::MAX_ID_LEN`); another is a 400 naming `tenant_id`", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$"),
        ("endpoint_id" = String, Path, description = "Endpoint id: 1-128 ASCII letters, digits, `_` and `-`; another, like an unknown or another tenant's id, is a 404", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$")
    ),
    request_body = EndpointPatch,
    responses((status = 200, description = "The endpoint as stored", body = Endpoint), Problems),
    security(("sigv4" = []))
)]
pub(crate) async fn update_endpoint(
    State(deps): State<ApiDeps>,
    ApiPath(p): ApiPath<EndpointPath>,
    ApiJson(body): ApiJson<EndpointPatch>,
) -> ApiResult<Json<Endpoint>> {
    let tenant = tenant(&p.tenant_id)?;
    let id = endpoint_id(&p.endpoint_id)?;
    let schedule = check_settings(
        body.url.as_deref(),
        body.event_types.as_deref(),
        body.timeout_ms.flatten(),
        body.schedule_seconds.as_ref().and_then(|s| s.as_deref()),
        body.max_attempts.flatten(),
        body.max_per_second.flatten(),
        body.description.as_ref().and_then(|d| d.as_deref()),
    )?;
    let mut update = EndpointUpdate {
        url: body.url.clone(),
        event_types: body.event_types,
        description: body.description,
        timeout_ms: body.timeout_ms,
        schedule: body.schedule_seconds.map(|s| s.and(schedule)),
        max_attempts: body.max_attempts,
        payload_format: body.payload_format.map(Into::into),
        max_per_second: body.max_per_second,
        send_traceparent: body.send_traceparent,
        client_certificate: body
            .client_certificate_arn
            .map(|arn| client_certificate(arn.as_deref(), &tenant))
            .transpose()?,
        signatures: body
            .signatures
            .map(|s| s.map(Into::into).unwrap_or_default()),
        ..EndpointUpdate::default()
    };
    if update.is_empty() && body.headers.is_none() && body.auth.is_none() {
        return Err(ApiError::new(
            Kind::Validation,
            "nothing to update: name at least one field",
        ));
    }
    // The endpoint must be this tenant's before its URL is even resolved; its stored
    // headers and authentication hold the secrets a PATCH may keep without resending.
    let current = owned(&deps, &tenant, &id).await?;
    if let Some(headers) = &body.headers {
        update.headers = Some(match headers {
            Some(list) => reach::headers_of(list, &current.headers, false)?,
            None => Vec::new(),
        });
    }
    if let Some(auth) = &body.auth {
        let auth = match auth {
            Some(a) => reach::auth_of(a, Some(&current.auth))?,
            None => tern_core::receiver_auth::ReceiverAuth::None,
        };
        check_token_url(&deps, &auth).await?;
        update.auth = Some(auth);
    }
    // The result as a whole, checked here to name the field (a custom authorization header
    // beside an authentication of the endpoint's own). A first v1a key is made by the
    // update itself.
    let mut preview = current.clone();
    if update.signatures.is_some_and(tern_core::Signatures::v1a)
        && preview.signing_keys.iter().all(|k| k.expires_at.is_some())
    {
        preview
            .rotate_signing_key(
                tern_core::SigningKey::generate(),
                Utc::now(),
                chrono::Duration::zero(),
            )
            .map_err(|e| endpoint_problem(&e, None))?;
    }
    update
        .apply(&mut preview)
        .map_err(|e| endpoint_problem(&e, update.headers.as_deref()))?;
    let stored = tern_ops::update_endpoint(
        deps.endpoints.as_ref(),
        Some(&tenant),
        &id,
        &update,
        &deps.settings.destinations,
        deps.lookup.as_ref(),
    )
    .await
    .map_err(|e| ops_error(e, body.url.as_ref().map(|_| "url")))?;
    Ok(Json(Endpoint::of(&stored)))
}

/// Delete an endpoint; deliveries still queued for it are dead-lettered
/// `endpoint_deleted`.
#[utoipa::path(
    delete,
    path = "/v1/tenants/{tenant_id}/endpoints/{endpoint_id}",
    operation_id = "deleteEndpoint",
    tag = "endpoints",
    params(
        ("tenant_id" = String, Path, description = "Tenant id: 1-128 ASCII letters, digits, `_` and `-` (`tern_core::ids::MAX_ID_LEN`); another is a 400 naming `tenant_id`", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$"),
        ("endpoint_id" = String, Path, description = "Endpoint id: 1-128 ASCII letters, digits, `_` and `-`; another, like an unknown or another tenant's id, is a 404", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$")
    ),
    responses((status = 204, description = "Deleted"), Problems),
    security(("sigv4" = []))
)]
pub(crate) async fn delete_endpoint(
    State(deps): State<ApiDeps>,
    ApiPath(p): ApiPath<EndpointPath>,
) -> ApiResult<StatusCode> {
    let tenant = tenant(&p.tenant_id)?;
    let id = endpoint_id(&p.endpoint_id)?;
    tern_ops::delete_endpoint(deps.endpoints.as_ref(), Some(&tenant), &id)
        .await
        .map_err(|e| ops_error(e, None))?;
    Ok(StatusCode::NO_CONTENT)
}

/// Enable an endpoint: its disabled reason is kept as `last_disabled_reason`, its health
/// reset (a closed circuit, an empty window; its 24 h history kept).
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant_id}/endpoints/{endpoint_id}/enable",
    operation_id = "enableEndpoint",
    tag = "endpoints",
    params(
        ("tenant_id" = String, Path, description = "Tenant id: 1-128 ASCII letters, digits, `_` and `-` (`tern_core::ids::MAX_ID_LEN`); another is a 400 naming `tenant_id`", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$"),
        ("endpoint_id" = String, Path, description = "Endpoint id: 1-128 ASCII letters, digits, `_` and `-`; another, like an unknown or another tenant's id, is a 404", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$")
    ),
    responses((status = 200, description = "The endpoint", body = Endpoint), Problems),
    security(("sigv4" = []))
)]
pub(crate) async fn enable_endpoint(
    State(deps): State<ApiDeps>,
    ApiPath(p): ApiPath<EndpointPath>,
) -> ApiResult<Json<Endpoint>> {
    let tenant = tenant(&p.tenant_id)?;
    let id = endpoint_id(&p.endpoint_id)?;
    let e = tern_ops::enable_endpoint(
        deps.endpoints.as_ref(),
        Some(deps.health.as_ref()),
        Some(&tenant),
        &id,
    )
    .await
    .map_err(|e| ops_error(e, None))?;
    Ok(Json(Endpoint::of(&e)))
}

/// Disable an endpoint: its deliveries are dead-lettered `endpoint_disabled` (replayable
/// after enabling it).
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant_id}/endpoints/{endpoint_id}/disable",
    operation_id = "disableEndpoint",
    tag = "endpoints",
    params(
        ("tenant_id" = String, Path, description = "Tenant id: 1-128 ASCII letters, digits, `_` and `-` (`tern_core::ids::MAX_ID_LEN`); another is a 400 naming `tenant_id`", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$"),
        ("endpoint_id" = String, Path, description = "Endpoint id: 1-128 ASCII letters, digits, `_` and `-`; another, like an unknown or another tenant's id, is a 404", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$")
    ),
    request_body(content = DisableRequest, description = "Optional: the reason"),
    responses((status = 200, description = "The endpoint", body = Endpoint), Problems),
    security(("sigv4" = []))
)]
pub(crate) async fn disable_endpoint(
    State(deps): State<ApiDeps>,
    ApiPath(p): ApiPath<EndpointPath>,
    ApiJson(body): ApiJson<DisableRequest>,
) -> ApiResult<Json<Endpoint>> {
    let tenant = tenant(&p.tenant_id)?;
    let id = endpoint_id(&p.endpoint_id)?;
    if let Some(r) = &body.reason {
        text_field("reason", r)?;
    }
    let e = tern_ops::disable_endpoint(
        deps.endpoints.as_ref(),
        Some(&tenant),
        &id,
        body.reason.as_deref(),
    )
    .await
    .map_err(|e| ops_error(e, None))?;
    Ok(Json(Endpoint::of(&e)))
}

/// Rotate the signing secret: the new one signs at once, the old one keeps signing for
/// the overlap. The new secret is returned this once.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant_id}/endpoints/{endpoint_id}/rotate-secret",
    operation_id = "rotateEndpointSecret",
    tag = "endpoints",
    params(
        ("tenant_id" = String, Path, description = "Tenant id: 1-128 ASCII letters, digits, `_` and `-` (`tern_core::ids::MAX_ID_LEN`); another is a 400 naming `tenant_id`", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$"),
        ("endpoint_id" = String, Path, description = "Endpoint id: 1-128 ASCII letters, digits, `_` and `-`; another, like an unknown or another tenant's id, is a 404", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$")
    ),
    request_body(content = RotateSecretRequest, description = "Optional: the overlap"),
    responses((status = 200, description = "Rotated; `secret` is shown only now", body = RotatedSecret), Problems),
    security(("sigv4" = []))
)]
pub(crate) async fn rotate_endpoint_secret(
    State(deps): State<ApiDeps>,
    ApiPath(p): ApiPath<EndpointPath>,
    ApiJson(body): ApiJson<RotateSecretRequest>,
) -> ApiResult<Json<RotatedSecret>> {
    let tenant = tenant(&p.tenant_id)?;
    let id = endpoint_id(&p.endpoint_id)?;
    let overlap = body.overlap_hours.unwrap_or(DEFAULT_OVERLAP_HOURS);
    if !(0..=MAX_ROTATION_OVERLAP_HOURS).contains(&overlap) {
        return Err(ApiError::invalid(
            "overlap_hours",
            EndpointError::BadOverlap.to_string(),
        ));
    }
    let secret = tern_ops::rotate_secret(deps.endpoints.as_ref(), &tenant, &id, overlap)
        .await
        .map_err(|e| ops_error(e, Some("overlap_hours")))?;
    let endpoint = owned(&deps, &tenant, &id).await?;
    Ok(Json(RotatedSecret {
        secret: secret.expose().to_owned(),
        endpoint: Endpoint::of(&endpoint),
    }))
}

/// Rotate the Ed25519 signing key (`v1a`): the new key signs at once, the old one keeps
/// signing for the overlap, so a receiver holding either public key verifies meanwhile.
/// Adds the endpoint's first key when it has none. The new public key is in the answer
/// (it is no secret: the endpoint's answers show every key's).
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant_id}/endpoints/{endpoint_id}/rotate-signing-key",
    operation_id = "rotateEndpointSigningKey",
    tag = "endpoints",
    params(
        ("tenant_id" = String, Path, description = "Tenant id: 1-128 ASCII letters, digits, `_` and `-` (`tern_core::ids::MAX_ID_LEN`); another is a 400 naming `tenant_id`", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$"),
        ("endpoint_id" = String, Path, description = "Endpoint id: 1-128 ASCII letters, digits, `_` and `-`; another, like an unknown or another tenant's id, is a 404", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$")
    ),
    request_body(content = RotateSigningKeyRequest, description = "Optional: the overlap"),
    responses((status = 200, description = "Rotated; give `public_key` to the receiver", body = RotatedSigningKey), Problems),
    security(("sigv4" = []))
)]
pub(crate) async fn rotate_endpoint_signing_key(
    State(deps): State<ApiDeps>,
    ApiPath(p): ApiPath<EndpointPath>,
    ApiJson(body): ApiJson<RotateSigningKeyRequest>,
) -> ApiResult<Json<RotatedSigningKey>> {
    let tenant = tenant(&p.tenant_id)?;
    let id = endpoint_id(&p.endpoint_id)?;
    let overlap = body.overlap_hours.unwrap_or(DEFAULT_OVERLAP_HOURS);
    if !(0..=MAX_ROTATION_OVERLAP_HOURS).contains(&overlap) {
        return Err(ApiError::invalid(
            "overlap_hours",
            EndpointError::BadOverlap.to_string(),
        ));
    }
    let public_key =
        tern_ops::reach::rotate_signing_key(deps.endpoints.as_ref(), &tenant, &id, overlap)
            .await
            .map_err(|e| ops_error(e, Some("overlap_hours")))?;
    let endpoint = owned(&deps, &tenant, &id).await?;
    Ok(Json(RotatedSigningKey {
        public_key: public_key.to_string(),
        endpoint: Endpoint::of(&endpoint),
    }))
}

/// The endpoint's health: its state, success rates, last success and failure, the next
/// probe (`tern endpoints health`).
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant_id}/endpoints/{endpoint_id}/health",
    operation_id = "getEndpointHealth",
    tag = "endpoints",
    params(
        ("tenant_id" = String, Path, description = "Tenant id: 1-128 ASCII letters, digits, `_` and `-` (`tern_core::ids::MAX_ID_LEN`); another is a 400 naming `tenant_id`", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$"),
        ("endpoint_id" = String, Path, description = "Endpoint id: 1-128 ASCII letters, digits, `_` and `-`; another, like an unknown or another tenant's id, is a 404", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$")
    ),
    responses((status = 200, description = "Its health", body = EndpointHealth), Problems),
    security(("sigv4" = []))
)]
pub(crate) async fn get_endpoint_health(
    State(deps): State<ApiDeps>,
    ApiPath(p): ApiPath<EndpointPath>,
) -> ApiResult<Json<EndpointHealth>> {
    let tenant = tenant(&p.tenant_id)?;
    let id = endpoint_id(&p.endpoint_id)?;
    let endpoint = owned(&deps, &tenant, &id).await?;
    let record = deps.health.get(&tenant, &id).await?;
    let mut row = tern_ops::health::HealthRow::of(
        &endpoint,
        record.as_ref(),
        &deps.settings.health,
        Utc::now(),
    );
    // One Query of the waiting index, the endpoint's partition alone.
    let waiting = deps
        .waiting
        .waiting(
            &WaitingScope::Endpoint(tenant.clone(), id.clone()),
            HEALTH_WAITING_READ,
        )
        .await?;
    tern_ops::health::add_waiting(std::slice::from_mut(&mut row), &waiting);
    Ok(Json(EndpointHealth {
        endpoint_id: row.endpoint_id.to_string(),
        state: row.state.to_string(),
        success_rate_window: row.success_rate_window,
        success_rate_24h: row.success_rate_24h,
        attempts_window: row.attempts_window,
        attempts_24h: row.attempts_24h,
        window_seconds: row.window_seconds,
        consecutive_failures: row.consecutive_failures,
        failing_since: row.failing_since,
        circuit_opened_at: row.circuit_opened_at,
        last_success_at: row.last_success_at,
        last_failure: row.last_failure.map(|f| LastFailure {
            at: f.at,
            status: f.status,
            error_class: f.error_class.map(|c| c.to_string()),
            error: f.error,
            response_excerpt: f.excerpt,
        }),
        next_probe_at: row.next_probe_at,
        paused_until: row.paused_until,
        waiting: row.waiting.unwrap_or(0),
        waiting_complete: waiting.complete,
        next_due_at: row.next_due_at,
        below_since: row.below_since,
        report_pending: row.report_pending,
        disabled_reason: row.disabled_reason,
        pace: row.pace.map(|p| EndpointPace {
            per_second: p.per_second,
            changed_at: p.changed_at,
            slow_start: p.slow_start,
        }),
    }))
}

/// Most waiting deliveries one health answer counts: 10,000 (about 1 MB of index
/// entries, some 125 eventually consistent read units); beyond it the count is a lower
/// bound (`waiting_complete` false) and `tern waiting` counts them all.
pub const HEALTH_WAITING_READ: usize = 10_000;

/// Send a `tern.test` event to the endpoint now, signed like any delivery, and return
/// what the receiver did. Not a delivery: no attempt log row, no retry, no health.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant_id}/endpoints/{endpoint_id}/test",
    operation_id = "sendTestEvent",
    tag = "endpoints",
    params(
        ("tenant_id" = String, Path, description = "Tenant id: 1-128 ASCII letters, digits, `_` and `-` (`tern_core::ids::MAX_ID_LEN`); another is a 400 naming `tenant_id`", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$"),
        ("endpoint_id" = String, Path, description = "Endpoint id: 1-128 ASCII letters, digits, `_` and `-`; another, like an unknown or another tenant's id, is a 404", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$")
    ),
    responses((status = 200, description = "The attempt (a receiver's failure is a result, not an error)", body = TestSend), Problems, Conflict),
    security(("sigv4" = []))
)]
pub(crate) async fn send_test_event(
    State(deps): State<ApiDeps>,
    ApiPath(p): ApiPath<EndpointPath>,
) -> ApiResult<Json<TestSend>> {
    let tenant = tenant(&p.tenant_id)?;
    let id = endpoint_id(&p.endpoint_id)?;
    let endpoint = owned(&deps, &tenant, &id).await?;
    let r = tern_ops::test_send::send_test(&deps.client, &endpoint, deps.settings.attempt_timeout)
        .await
        .map_err(test_send_problem)?;
    Ok(Json(TestSend {
        event_id: r.event_id,
        event_type: r.event_type,
        delivered: r.delivered,
        status: r.status,
        latency_ms: r.latency_ms,
        error_class: r.error_class.map(|c| c.to_string()),
        error: r.error,
        response_excerpt: r.response_excerpt,
        excerpt_truncated: r.excerpt_truncated,
    }))
}

/// The problem for a test event that was not sent. A client certificate the store refuses
/// or that is not usable is the endpoint's setting to fix (409); a store that did not
/// answer is ours (503, the detail in the log); no store at all is a deployment bug (500).
fn test_send_problem(e: TestSendError) -> ApiError {
    use tern_core::client_certificate::CertificateSecretError as Store;
    use tern_http::CertificateError as Cert;
    match e {
        TestSendError::NoActiveSecret => ApiError::new(Kind::NoActiveSecret, e.to_string()),
        TestSendError::ClientCertificate(Cert::Secret(Store::Unavailable(why))) => {
            tern_core::ports::PortError::Unavailable(format!("client certificate: {why}")).into()
        }
        TestSendError::ClientCertificate(Cert::NoStore) => {
            tracing::error!("test send: no client certificate store in this deployment");
            ApiError::new(Kind::Internal, "the request could not be completed")
        }
        TestSendError::ClientCertificate(Cert::Secret(Store::Refused(why))) => {
            // The store's own text stays in the log: an access denial names the role and
            // the account.
            tracing::warn!(error = %why, "test send: the client certificate's secret was refused");
            ApiError::new(
                Kind::ClientCertificateUnusable,
                "Secrets Manager refused to read the client certificate's secret: it does not \
                 exist, is scheduled for deletion, has no text value, or Tern may not read it",
            )
        }
        TestSendError::ClientCertificate(Cert::Identity(why)) => {
            tracing::warn!(error = %why, "test send: the client certificate is not usable");
            ApiError::new(
                Kind::ClientCertificateUnusable,
                "the client certificate's secret is not a PEM certificate chain (leaf first) \
                 and its private key, or the key does not match the certificate",
            )
        }
    }
}

/// The endpoint's attempts over a time range, newest first, filtered by outcome.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant_id}/endpoints/{endpoint_id}/attempts",
    operation_id = "listEndpointAttempts",
    tag = "endpoints",
    params(
        ("tenant_id" = String, Path, description = "Tenant id: 1-128 ASCII letters, digits, `_` and `-` (`tern_core::ids::MAX_ID_LEN`); another is a 400 naming `tenant_id`", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$"),
        ("endpoint_id" = String, Path, description = "Endpoint id: 1-128 ASCII letters, digits, `_` and `-`; another, like an unknown or another tenant's id, is a 404", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$"),
        EndpointAttemptsQuery
    ),
    responses((status = 200, description = "A page, newest first", body = EndpointAttemptList), Problems),
    security(("sigv4" = []))
)]
pub(crate) async fn list_endpoint_attempts(
    State(deps): State<ApiDeps>,
    ApiPath(p): ApiPath<EndpointPath>,
    ApiQuery(q): ApiQuery<EndpointAttemptsQuery>,
) -> ApiResult<Json<EndpointAttemptList>> {
    let tenant = tenant(&p.tenant_id)?;
    let id = endpoint_id(&p.endpoint_id)?;
    let limit = page_size(q.limit)?;
    if let (Some(s), Some(u)) = (q.since, q.until)
        && s >= u
    {
        return Err(ApiError::invalid("until", "until must be after since"));
    }
    // A cursor of this endpoint's log only.
    let scope = format!("{tenant}/{id}");
    let before = q
        .cursor
        .as_deref()
        .map(|c| decode_cursor(&scope, c, LogPosition::from_text))
        .transpose()?;
    // The log is keyed by endpoint: the endpoint must be this tenant's.
    owned(&deps, &tenant, &id).await?;
    let page = deps
        .ledger
        .endpoint_log(&EndpointLogQuery {
            endpoint_id: id,
            since: q.since,
            until: q.until,
            outcome: q.outcome.map(Into::into),
            limit,
            before,
        })
        .await?;
    Ok(Json(EndpointAttemptList {
        items: page
            .entries
            .into_iter()
            .map(|e| EndpointAttempt {
                event_id: e.event_id.to_string(),
                endpoint_id: e.endpoint_id.to_string(),
                replay_count: e.replay_count,
                attempt: e.attempt,
                takeover: e.takeover,
                started_at: e.started_at,
                latency_ms: e.latency_ms,
                status: e.status,
                error_class: e.error_class.map(|c| c.to_string()),
                outcome: e.outcome,
                response_excerpt: e.response_excerpt,
            })
            .collect(),
        next_cursor: page.next.map(|p| encode_cursor(&scope, &p.to_text())),
    }))
}

/// Send again every delivery to the endpoint that failed in the window and has not
/// succeeded since: its dead letters (replayed) and the deliveries still waiting for
/// their next attempt (resent now).
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant_id}/endpoints/{endpoint_id}/recover",
    operation_id = "recoverEndpoint",
    tag = "endpoints",
    params(
        ("tenant_id" = String, Path, description = "Tenant id: 1-128 ASCII letters, digits, `_` and `-` (`tern_core::ids::MAX_ID_LEN`); another is a 400 naming `tenant_id`", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$"),
        ("endpoint_id" = String, Path, description = "Endpoint id: 1-128 ASCII letters, digits, `_` and `-`; another, like an unknown or another tenant's id, is a 404", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$")
    ),
    request_body = RecoverRequest,
    responses((status = 200, description = "What was sent again", body = RecoverReport), Problems, Conflict),
    security(("sigv4" = []))
)]
pub(crate) async fn recover_endpoint(
    State(deps): State<ApiDeps>,
    ApiPath(p): ApiPath<EndpointPath>,
    ApiJson(body): ApiJson<RecoverRequest>,
) -> ApiResult<Json<RecoverReport>> {
    let tenant = tenant(&p.tenant_id)?;
    let id = endpoint_id(&p.endpoint_id)?;
    let until = body.until.unwrap_or_else(Utc::now);
    if body.since >= until {
        return Err(ApiError::invalid(
            "since",
            "since must be before until (default now)",
        ));
    }
    let recover_deps = RecoverDeps {
        resend: ResendDeps {
            events: deps.events.as_ref(),
            ledger: deps.ledger.as_ref(),
            endpoints: deps.endpoints.as_ref(),
            delivery_queue: deps.queues.delivery_queue.as_ref(),
        },
        health: Some(deps.health.as_ref()),
        replay: &deps.queues,
    };
    let report = tern_ops::recover::recover(
        &recover_deps,
        &tenant,
        &id,
        &tern_ops::recover::RecoverRequest {
            since: body.since,
            until,
            enable: body.enable,
        },
    )
    .await
    .map_err(|e| match e {
        RecoverError::EndpointNotFound(id) => ApiError::not_found("endpoint", id),
        RecoverError::EndpointDisabled(_) => ApiError::new(Kind::EndpointDisabled, e.to_string()),
        RecoverError::EmptyWindow => ApiError::invalid("since", e.to_string()),
        RecoverError::Port(p) => p.into(),
    })?;
    Ok(Json(RecoverReport {
        endpoint_id: report.endpoint_id,
        since: report.since,
        until: report.until,
        enabled: report.enabled,
        dead_letters: ReplayReport::from(report.dead_letters),
        waiting: WaitingReport {
            attempts_examined: report.waiting.attempts_examined,
            still_waiting: report.waiting.still_waiting,
            resent: report
                .waiting
                .resent
                .into_iter()
                .map(Resend::from)
                .collect(),
            not_resendable: report.waiting.not_resendable,
            complete: report.waiting.complete,
        },
    }))
}
