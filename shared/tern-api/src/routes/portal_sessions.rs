//! `/v1/tenants/{tenant_id}/portal-sessions`: links to the customer portal.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use chrono::Utc;
use tern_core::portal::{
    DEFAULT_SESSION_SECONDS, Grant, MAX_SESSION_ENDPOINTS, MAX_SESSION_EVENT_TYPES,
    MAX_SESSION_SECONDS, MAX_SESSION_TOKEN_BYTES, MIN_SESSION_SECONDS, Purpose, check_color,
    check_logo, new_session_id,
};
use tern_core::{EventType, portal::GrantError};

use super::{Problems, TenantPath};
use crate::ApiDeps;
use crate::extract::{ApiJson, ApiPath, endpoint_id, tenant};
use crate::model::{PortalSession, PortalSessionRequest};
use crate::problem::{ApiError, ApiResult, Kind};

/// The base of the links: the setting, else this request's host (`https`, or `http` for a
/// loopback host in local mode).
fn base_url(configured: Option<&str>, headers: &HeaderMap) -> Result<String, ApiError> {
    if let Some(url) = configured {
        return Ok(url.to_owned());
    }
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'))
        })
        .ok_or_else(|| ApiError::new(Kind::Validation, "the request has no usable Host header"))?;
    let loopback = host.starts_with("127.0.0.1") || host.starts_with("localhost");
    Ok(format!(
        "{}://{host}",
        if loopback { "http" } else { "https" }
    ))
}

fn grant_error(field: &str, e: &GrantError) -> ApiError {
    ApiError::invalid(field, e.to_string())
}

/// Mint a single-use link to the customer portal for the tenant: its endpoints, their
/// secrets, test sends, the delivery log, resend and recover, in the application's own
/// pages (an iframe) or a tab of their own.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant_id}/portal-sessions",
    operation_id = "createPortalSession",
    tag = "portal",
    params(("tenant_id" = String, Path, description = "Tenant id: 1-128 ASCII letters, digits, `_` and `-` (`tern_core::ids::MAX_ID_LEN`); another is a 400 naming `tenant_id`", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$")),
    request_body = PortalSessionRequest,
    responses(
        (status = 201, description = "The link; it works once, until `expires_at`", body = PortalSession),
        (status = 429, description = "The tenant's sessions per minute are spent (`Retry-After`)", body = crate::problem::Problem, content_type = "application/problem+json"),
        Problems
    ),
    security(("sigv4" = []))
)]
pub(crate) async fn create_portal_session(
    State(deps): State<ApiDeps>,
    headers: HeaderMap,
    ApiPath(p): ApiPath<TenantPath>,
    ApiJson(body): ApiJson<PortalSessionRequest>,
) -> ApiResult<(StatusCode, Json<PortalSession>)> {
    let tenant = tenant(&p.tenant_id)?;
    let portal = deps.portal.clone().ok_or_else(|| {
        ApiError::new(
            Kind::NotFound,
            "the customer portal is not set up in this deployment",
        )
    })?;
    let life = body.expires_in_seconds.unwrap_or(DEFAULT_SESSION_SECONDS);
    if !(MIN_SESSION_SECONDS..=MAX_SESSION_SECONDS).contains(&life) {
        return Err(grant_error("expires_in_seconds", &GrantError::BadLife));
    }
    if let Some(c) = &body.brand_color {
        check_color(c).map_err(|e| grant_error("brand_color", &e))?;
    }
    if let Some(l) = &body.logo_url {
        check_logo(l).map_err(|e| grant_error("logo_url", &e))?;
    }
    let event_types = body.event_types.clone().unwrap_or_default();
    if event_types.len() > MAX_SESSION_EVENT_TYPES
        || event_types
            .iter()
            .any(|t| EventType::new(t.as_str()).is_err())
    {
        return Err(grant_error("event_types", &GrantError::BadEventTypes));
    }
    let endpoints = match &body.endpoint_ids {
        None => None,
        Some(ids) if ids.is_empty() || ids.len() > MAX_SESSION_ENDPOINTS => {
            return Err(grant_error("endpoint_ids", &GrantError::BadEndpoints));
        }
        Some(ids) => {
            let mut out = Vec::with_capacity(ids.len());
            for text in ids {
                let id = endpoint_id(text).map_err(|e| e.with_field("endpoint_ids"))?;
                // Each must be this tenant's: a session never names another's endpoint.
                if deps.endpoints.get(&tenant, &id).await?.is_none() {
                    return Err(ApiError::not_found("endpoint", &id).with_field("endpoint_ids"));
                }
                out.push(id);
            }
            Some(out)
        }
    };
    let now = Utc::now();
    let grant = Grant {
        session_id: new_session_id(),
        tenant: tenant.clone(),
        endpoints,
        read_only: body.read_only,
        expires_at: now.timestamp() + life,
        brand_color: body.brand_color,
        logo_url: body.logo_url,
        event_types,
    };
    let ring = portal.keys.ring().await?;
    if ring.sign(Purpose::Session, &grant).len() > MAX_SESSION_TOKEN_BYTES {
        return Err(grant_error("event_types", &GrantError::TooLarge));
    }
    let base = base_url(portal.settings.public_url.as_deref(), &headers)?;
    // Counted only once the request is valid: a refused one spends nothing.
    let allowed = portal
        .ledger
        .take(
            &format!("sessions#{tenant}"),
            portal.settings.sessions_per_minute,
            crate::portal::RATE_WINDOW_SECONDS,
            now,
        )
        .await?;
    if !allowed {
        return Err(ApiError::new(
            Kind::TooManyRequests,
            format!(
                "at most {} portal sessions a minute per tenant",
                portal.settings.sessions_per_minute
            ),
        ));
    }
    let token = ring.sign(Purpose::Link, &grant);
    tracing::info!(session_id = %grant.session_id, tenant = %grant.tenant, read_only = grant.read_only, "portal link minted");
    Ok((
        StatusCode::CREATED,
        Json(PortalSession {
            url: format!("{base}/portal/start?token={token}"),
            session_id: grant.session_id.clone(),
            expires_at: grant.expires(),
        }),
    ))
}
