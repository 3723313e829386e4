//! The portal's handlers: authenticate (cookie, CSRF), then call the API's own route
//! functions in process with the session's tenant, then render.

// A refusal is the response itself, built once per request and returned at once: boxing
// it would gain nothing.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, NaiveDateTime, Utc};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tern_core::portal::{Purpose, TokenError};
use tern_core::{EndpointId, EventId};

use super::pages::{self, Banner, Ctx};
use super::{PortalDeps, RATE_WINDOW_SECONDS, Refusal, Session, respond};
use crate::ApiDeps;
use crate::extract::{ApiJson, ApiPath, ApiQuery, from_json};
use crate::model;
use crate::problem::{ApiError, Kind};
use crate::routes::{EndpointPath, EventEndpointPath, TenantPath, endpoints, events};

fn portal(deps: &ApiDeps) -> Result<Arc<PortalDeps>, Response> {
    deps.portal
        .clone()
        .ok_or_else(|| refuse(None, Refusal::NotConfigured))
}

/// The refusal's page: a title, an explanation, no data.
pub(super) fn refuse(portal: Option<&PortalDeps>, refusal: Refusal) -> Response {
    let (status, title, text) = refusal.describe();
    let settings = portal.map(|p| p.settings.clone()).unwrap_or_default();
    respond(status, pages::refusal(title, &text), None, &settings)
}

/// The session of a request, from its cookie.
async fn session(
    deps: &ApiDeps,
    headers: &HeaderMap,
) -> Result<(Arc<PortalDeps>, Session), Response> {
    let portal = portal(deps)?;
    let Some(token) = super::cookie(headers, super::COOKIE) else {
        return Err(refuse(Some(&portal), Refusal::NoSession));
    };
    let (grant, ring) = super::verify(&portal, Purpose::Session, token)
        .await
        .map_err(|r| refuse(Some(&portal), r))?;
    let csrf = ring.csrf_token(&grant.session_id);
    Ok((portal, Session { grant, ring, csrf }))
}

/// A form body: every `name=value` pair, in order (a multi-valued field repeats).
#[derive(Debug, Default)]
pub(super) struct Form(Vec<(String, String)>);

impl Form {
    fn parse(body: &[u8]) -> Self {
        Self(
            form_urlencoded::parse(body)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// The first value of `name`, trimmed; `None` when absent or blank.
    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    }

    /// The first value of `name` as sent (a password may start or end with a space).
    pub(super) fn raw(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// True when the form has a field `name`, blank or not.
    pub(super) fn has(&self, name: &str) -> bool {
        self.0.iter().any(|(k, _)| k == name)
    }

    fn all(&self, name: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, v)| k == name && !v.trim().is_empty())
            .map(|(_, v)| v.trim().to_owned())
            .collect()
    }
}

/// The origin a request to this host has: `http://` for loopback (local mode), else
/// `https://`.
fn own_origin(headers: &HeaderMap) -> Option<String> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    let loopback = host.starts_with("127.0.0.1") || host.starts_with("localhost");
    Some(format!(
        "{}://{host}",
        if loopback { "http" } else { "https" }
    ))
}

/// The `Origin` of a browser's post when it is another site's: neither this host's origin
/// nor the portal's public URL's. `None` for this portal's own pages, and for a request
/// without `Origin` (not a browser's cross-site form).
fn foreign_origin<'h>(portal: &PortalDeps, headers: &'h HeaderMap) -> Option<&'h str> {
    let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok())?;
    let public = portal
        .settings
        .public_url
        .as_deref()
        .and_then(super::url_origin);
    (Some(origin) != own_origin(headers).as_deref() && Some(origin) != public.as_deref())
        .then_some(origin)
}

/// A state change: the session, its form, after the checks every one passes: an
/// `Origin` (when the browser sends one) of this portal, the session's CSRF token, and a
/// session that may change things.
async fn change(
    deps: &ApiDeps,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(Arc<PortalDeps>, Session, Form), Response> {
    let (portal, session) = session(deps, headers).await?;
    let form = Form::parse(body);
    if let Some(origin) = foreign_origin(&portal, headers) {
        tracing::warn!(session_id = %session.grant.session_id, origin, "portal change from another origin refused");
        return Err(refuse(Some(&portal), Refusal::Csrf));
    }
    if !form
        .get("csrf")
        .is_some_and(|t| session.ring.check_csrf(&session.grant.session_id, t))
    {
        tracing::warn!(session_id = %session.grant.session_id, "portal change without a valid CSRF token refused");
        return Err(refuse(Some(&portal), Refusal::Csrf));
    }
    if session.grant.read_only {
        return Err(refuse(Some(&portal), Refusal::ReadOnly));
    }
    Ok((portal, session, form))
}

fn ctx<'a>(session: &'a Session) -> Ctx<'a> {
    Ctx {
        grant: &session.grant,
        csrf: &session.csrf,
    }
}

fn html(
    portal: &PortalDeps,
    session: &Session,
    status: StatusCode,
    markup: maud::Markup,
) -> Response {
    respond(status, markup, Some(&session.grant), &portal.settings)
}

/// A 404 page for an endpoint or event the session may not see (or that does not exist:
/// the same answer).
fn missing(portal: &PortalDeps, session: &Session, what: &str) -> Response {
    html(
        portal,
        session,
        StatusCode::NOT_FOUND,
        pages::not_found(&ctx(session), what),
    )
}

/// The endpoint id of a path, when the session may see it.
fn allowed(session: &Session, text: &str) -> Option<EndpointId> {
    EndpointId::new(text)
        .ok()
        .filter(|id| session.grant.allows(id))
}

fn endpoint_path(session: &Session, id: &EndpointId) -> ApiPath<EndpointPath> {
    ApiPath(EndpointPath {
        tenant_id: session.grant.tenant.to_string(),
        endpoint_id: id.to_string(),
    })
}

/// `/portal`: to the endpoints.
pub(super) async fn home() -> Response {
    (
        StatusCode::SEE_OTHER,
        [(header::LOCATION, "/portal/endpoints")],
    )
        .into_response()
}

/// A path that is no page.
pub(super) async fn not_found(State(deps): State<ApiDeps>, headers: HeaderMap) -> Response {
    match session(&deps, &headers).await {
        Ok((portal, s)) => missing(&portal, &s, "page"),
        Err(r) => r,
    }
}

#[derive(Deserialize)]
pub(super) struct StartQuery {
    #[serde(default)]
    token: Option<String>,
}

/// `GET` (and `HEAD`) `/portal/start?token=`: the link, checked but never spent. Mail and
/// chat link scanners (Microsoft Safe Links, Barracuda) fetch every link before the
/// customer does, some with `HEAD`; a safe method must not use the link up (RFC 9110
/// §9.2.1). A valid, unused link shows a page whose button posts it
/// ([`start_session`]); a bad, expired or used one shows its refusal, as before.
pub(super) async fn start(State(deps): State<ApiDeps>, Query(q): Query<StartQuery>) -> Response {
    let portal = match portal(&deps) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let Some(token) = q.token else {
        return refuse(Some(&portal), Refusal::Token(TokenError::Malformed));
    };
    let grant = match super::verify(&portal, Purpose::Link, &token).await {
        Ok((grant, _)) => grant,
        Err(r) => {
            tracing::info!(refusal = ?r, "portal link refused");
            return refuse(Some(&portal), r);
        }
    };
    match portal.ledger.link_used(&grant.session_id).await {
        Ok(false) => {}
        Ok(true) => return refuse(Some(&portal), Refusal::Token(TokenError::Used)),
        Err(e) => {
            tracing::warn!(error = %e, "the portal table could not be read");
            return refuse(Some(&portal), Refusal::Unavailable);
        }
    }
    respond(
        StatusCode::OK,
        pages::open_link(&token),
        Some(&grant),
        &portal.settings,
    )
}

/// `POST /portal/start` with the link's `token` (the button of [`start`]'s page): the
/// link's one use. Sets the session cookie and redirects to the endpoints, the token gone
/// from the address bar. A form from another origin is refused, as every portal change
/// is.
pub(super) async fn start_session(
    State(deps): State<ApiDeps>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let portal = match portal(&deps) {
        Ok(p) => p,
        Err(r) => return r,
    };
    if let Some(origin) = foreign_origin(&portal, &headers) {
        tracing::warn!(origin, "portal link posted from another origin refused");
        return refuse(Some(&portal), Refusal::Csrf);
    }
    let form = Form::parse(&body);
    let Some(token) = form.get("token") else {
        return refuse(Some(&portal), Refusal::Token(TokenError::Malformed));
    };
    let (grant, ring) = match super::verify(&portal, Purpose::Link, token).await {
        Ok(v) => v,
        Err(r) => {
            tracing::info!(refusal = ?r, "portal link refused");
            return refuse(Some(&portal), r);
        }
    };
    match portal
        .ledger
        .claim_link(&grant.session_id, grant.expires())
        .await
    {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(session_id = %grant.session_id, tenant = %grant.tenant, "portal link used a second time: refused");
            return refuse(Some(&portal), Refusal::Token(TokenError::Used));
        }
        Err(e) => {
            tracing::warn!(error = %e, "the portal table could not be written");
            return refuse(Some(&portal), Refusal::Unavailable);
        }
    }
    tracing::info!(session_id = %grant.session_id, tenant = %grant.tenant, read_only = grant.read_only, "portal session opened");
    let cookie = super::session_cookie(
        &ring.sign(Purpose::Session, &grant),
        grant.expires_at - Utc::now().timestamp(),
    );
    let mut response = respond(
        StatusCode::SEE_OTHER,
        pages::redirecting(),
        Some(&grant),
        &portal.settings,
    );
    let h = response.headers_mut();
    h.insert(
        header::LOCATION,
        HeaderValue::from_static("/portal/endpoints"),
    );
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        h.insert(header::SET_COOKIE, v);
    }
    response
}

/// The session's endpoints with their health.
async fn rows(deps: &ApiDeps, session: &Session) -> Result<Vec<pages::Row>, ApiError> {
    let tenant = &session.grant.tenant;
    let endpoints = match &session.grant.endpoints {
        Some(ids) => {
            let mut out = Vec::new();
            for id in ids {
                if let Some(e) = deps.endpoints.get(tenant, id).await? {
                    out.push(e);
                }
            }
            out
        }
        None => deps.endpoints.list_for_tenant(tenant).await?,
    };
    let now = Utc::now();
    let mut rows = Vec::with_capacity(endpoints.len());
    for e in &endpoints {
        let record = deps.health.get(tenant, &e.id).await?;
        let health =
            tern_ops::health::HealthRow::of(e, record.as_ref(), &deps.settings.health, now);
        rows.push(pages::Row {
            endpoint: model::Endpoint::of(e),
            state: health.state.to_string(),
            success_rate: health.success_rate_24h,
            attempts: health.attempts_24h,
        });
    }
    Ok(rows)
}

/// Event types offered when adding or editing an endpoint: the session's, those its
/// endpoints subscribe to, and the operational events.
fn type_choices(session: &Session, rows: &[pages::Row]) -> Vec<String> {
    let mut set: BTreeSet<String> = session.grant.event_types.iter().cloned().collect();
    for r in rows {
        set.extend(
            r.endpoint
                .event_types
                .iter()
                .filter(|t| *t != tern_core::endpoint::ALL_EVENT_TYPES)
                .cloned(),
        );
    }
    set.extend(
        tern_core::operational::OperationalEventKind::ALL
            .iter()
            .map(|k| k.tern_event_type()),
    );
    set.into_iter().collect()
}

async fn list_page(
    deps: &ApiDeps,
    portal: &PortalDeps,
    session: &Session,
    status: StatusCode,
    banner: Option<Banner>,
) -> Response {
    match rows(deps, session).await {
        Ok(rows) => {
            let choices = type_choices(session, &rows);
            html(
                portal,
                session,
                status,
                pages::endpoints(&ctx(session), &rows, &choices, banner.as_ref()),
            )
        }
        Err(e) => error_page(portal, session, &e),
    }
}

fn error_page(portal: &PortalDeps, session: &Session, e: &ApiError) -> Response {
    html(
        portal,
        session,
        e.kind.status(),
        pages::problem(&ctx(session), e),
    )
}

/// `GET /portal/endpoints`.
pub(super) async fn list(State(deps): State<ApiDeps>, headers: HeaderMap) -> Response {
    let (portal, s) = match session(&deps, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    list_page(&deps, &portal, &s, StatusCode::OK, None).await
}

/// `POST /portal/endpoints`: add an endpoint (sessions not limited to some endpoints).
pub(super) async fn create(
    State(deps): State<ApiDeps>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (portal, s, form) = match change(&deps, &headers, &body).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    if s.grant.endpoints.is_some() {
        return refuse(Some(&portal), Refusal::ReadOnly);
    }
    let mut body = Map::new();
    body.insert("url".into(), json!(form.get("url").unwrap_or_default()));
    let types = form.all("event_types");
    if !types.is_empty() {
        body.insert("event_types".into(), json!(types));
    }
    if let Some(d) = form.get("description") {
        body.insert("description".into(), json!(d));
    }
    let result = match from_json::<model::NewEndpoint>(Value::Object(body).to_string().as_bytes()) {
        Ok(new) => {
            endpoints::create_endpoint(
                State(deps.clone()),
                ApiPath(TenantPath {
                    tenant_id: s.grant.tenant.to_string(),
                }),
                axum::http::HeaderMap::new(),
                ApiJson(new),
            )
            .await
        }
        Err(e) => Err(e),
    };
    match result {
        Ok((_, _, Json(created))) => {
            tracing::info!(session_id = %s.grant.session_id, tenant = %s.grant.tenant, endpoint_id = %created.endpoint.id, "portal: endpoint added");
            html(
                &portal,
                &s,
                StatusCode::CREATED,
                pages::created(&ctx(&s), &created),
            )
        }
        Err(e) => list_page(&deps, &portal, &s, e.kind.status(), Some(Banner::error(&e))).await,
    }
}

/// The endpoint's page, with an optional result of an action at its top.
async fn detail_page(
    deps: &ApiDeps,
    portal: &PortalDeps,
    session: &Session,
    id: &EndpointId,
    status: StatusCode,
    banner: Option<Banner>,
) -> Response {
    let endpoint =
        match endpoints::get_endpoint(State(deps.clone()), endpoint_path(session, id)).await {
            Ok(Json(e)) => e,
            Err(e) if e.kind == Kind::NotFound => return missing(portal, session, "endpoint"),
            Err(e) => return error_page(portal, session, &e),
        };
    let health = endpoints::get_endpoint_health(State(deps.clone()), endpoint_path(session, id))
        .await
        .map(|Json(h)| h)
        .ok();
    let row = pages::Row {
        state: health
            .as_ref()
            .map_or_else(|| "unknown".to_owned(), |h| h.state.clone()),
        success_rate: health.as_ref().and_then(|h| h.success_rate_24h),
        attempts: health.as_ref().map_or(0, |h| h.attempts_24h),
        endpoint,
    };
    let choices = type_choices(session, std::slice::from_ref(&row));
    html(
        portal,
        session,
        status,
        pages::detail(
            &ctx(session),
            &row,
            health.as_ref(),
            &choices,
            banner.as_ref(),
        ),
    )
}

/// `GET /portal/endpoints/{id}`.
pub(super) async fn detail(
    State(deps): State<ApiDeps>,
    headers: HeaderMap,
    Path(endpoint_id): Path<String>,
) -> Response {
    let (portal, s) = match session(&deps, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let Some(id) = allowed(&s, &endpoint_id) else {
        return missing(&portal, &s, "endpoint");
    };
    detail_page(&deps, &portal, &s, &id, StatusCode::OK, None).await
}

/// A `datetime-local` field (`YYYY-MM-DDTHH:MM`, taken as UTC) or RFC 3339.
fn form_time(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .ok()
        .or_else(|| {
            NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M")
                .or_else(|_| NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S"))
                .ok()
                .map(|n| n.and_utc())
        })
}

/// The API's PATCH with `patch` (a JSON object) on the session's endpoint `id`.
async fn patch(
    deps: &ApiDeps,
    session: &Session,
    id: &EndpointId,
    patch: Value,
) -> Result<model::Endpoint, ApiError> {
    let body = from_json::<model::EndpointPatch>(patch.to_string().as_bytes())?;
    endpoints::update_endpoint(
        State(deps.clone()),
        endpoint_path(session, id),
        ApiJson(body),
    )
    .await
    .map(|Json(e)| e)
}

/// `POST /portal/endpoints/{id}/{action}`: `update`, `enable`, `disable`, `delete`,
/// `reveal`, `rotate`, `test`, `recover`, and the receiver settings: `headers`, `auth`,
/// `signatures`, `rotate-signing-key`.
pub(super) async fn act(
    State(deps): State<ApiDeps>,
    headers: HeaderMap,
    Path((endpoint_id, action)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let (portal, s, form) = match change(&deps, &headers, &body).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let Some(id) = allowed(&s, &endpoint_id) else {
        return missing(&portal, &s, "endpoint");
    };
    let log = |what: &str| {
        tracing::info!(session_id = %s.grant.session_id, tenant = %s.grant.tenant, endpoint_id = %id, action = what, "portal action");
    };
    let state = || State(deps.clone());
    let banner: Result<Banner, ApiError> = match action.as_str() {
        "update" => {
            let mut patch = Map::new();
            if let Some(u) = form.get("url") {
                patch.insert("url".into(), json!(u));
            }
            patch.insert("description".into(), json!(form.get("description")));
            let types = form.all("event_types");
            if !types.is_empty() {
                patch.insert("event_types".into(), json!(types));
            }
            // The rate limit and the payload format, when the form has them (blank: no
            // limit).
            if form.has("max_per_second") {
                let limit = match form.get("max_per_second") {
                    None => Ok(Value::Null),
                    Some(n) => n.parse::<u32>().map(|n| json!(n)).map_err(|_| {
                        ApiError::invalid("max_per_second", "a whole number of requests a second, 1 to 1000, or empty for no limit")
                    }),
                };
                match limit {
                    Ok(v) => {
                        patch.insert("max_per_second".into(), v);
                    }
                    Err(e) => return detail_page(&deps, &portal, &s, &id, e.kind.status(), Some(Banner::error(&e))).await,
                }
            }
            if let Some(f) = form.get("payload_format") {
                patch.insert("payload_format".into(), json!(f));
            }
            self::patch(&deps, &s, &id, Value::Object(patch))
                .await
                .map(|_| Banner::ok("Saved."))
        }
        "headers" => self::patch(&deps, &s, &id, super::reach::headers_patch(&form))
            .await
            .map(|_| Banner::ok("Custom headers saved. Secret values are not shown again.")),
        "auth" => self::patch(&deps, &s, &id, super::reach::auth_patch(&form))
            .await
            .map(|_| Banner::ok("Authentication saved. Secrets are not shown again.")),
        "signatures" => self::patch(&deps, &s, &id, super::reach::signatures_patch(&form))
            .await
            .map(|_| Banner::ok("Signatures saved.")),
        "rotate-signing-key" => {
            let overlap = form
                .get("overlap_hours")
                .map(|h| h.parse::<i64>().map_err(|_| ApiError::invalid("overlap_hours", "a whole number of hours")))
                .transpose();
            match overlap {
                Ok(overlap_hours) => endpoints::rotate_endpoint_signing_key(
                    state(),
                    endpoint_path(&s, &id),
                    ApiJson(model::RotateSigningKeyRequest { overlap_hours }),
                )
                .await
                .map(|Json(r)| {
                    Banner::Ok(format!(
                        "New signing key: give its public key {} to your verifier. The previous key keeps signing during the overlap.",
                        r.public_key
                    ))
                }),
                Err(e) => Err(e),
            }
        }
        "enable" => endpoints::enable_endpoint(state(), endpoint_path(&s, &id))
            .await
            .map(|_| Banner::ok("Enabled: deliveries resume.")),
        "disable" => endpoints::disable_endpoint(
            state(),
            endpoint_path(&s, &id),
            ApiJson(model::DisableRequest {
                reason: Some(
                    form.get("reason")
                        .unwrap_or("disabled in the customer portal")
                        .to_owned(),
                ),
            }),
        )
        .await
        .map(|_| Banner::ok("Disabled: new deliveries are held as dead letters until you enable it and recover.")),
        "delete" => {
            if form.get("confirm") != Some("yes") {
                Err(ApiError::invalid(
                    "confirm",
                    "tick the box to confirm the deletion",
                ))
            } else {
                match endpoints::delete_endpoint(state(), endpoint_path(&s, &id)).await {
                    Ok(_) => {
                        log("delete");
                        return list_page(
                            &deps,
                            &portal,
                            &s,
                            StatusCode::OK,
                            Some(Banner::ok(&format!("Endpoint {id} deleted."))),
                        )
                        .await;
                    }
                    Err(e) => Err(e),
                }
            }
        }
        "reveal" => match deps.endpoints.get(&s.grant.tenant, &id).await {
            Ok(Some(e)) => {
                // Logged that it happened, never the value.
                log("reveal-secret");
                let now = Utc::now();
                Ok(Banner::secrets(
                    "Signing secrets that sign now (newest first). Keep them out of logs and source control.",
                    e.secrets
                        .iter()
                        .filter(|sec| sec.expires_at.is_none_or(|t| t > now))
                        .map(|sec| sec.secret.expose().to_owned())
                        .collect(),
                ))
            }
            Ok(None) => Err(ApiError::not_found("endpoint", &id)),
            Err(e) => Err(e.into()),
        },
        "rotate" => {
            let overlap = form
                .get("overlap_hours")
                .map(|h| h.parse::<i64>().map_err(|_| ApiError::invalid("overlap_hours", "a whole number of hours")))
                .transpose();
            match overlap {
                Ok(overlap_hours) => endpoints::rotate_endpoint_secret(
                    state(),
                    endpoint_path(&s, &id),
                    ApiJson(model::RotateSecretRequest { overlap_hours }),
                )
                .await
                .map(|Json(r)| {
                    Banner::secrets(
                        "New signing secret, shown this once (Reveal shows it again). The previous one keeps signing during the overlap.",
                        vec![r.secret],
                    )
                }),
                Err(e) => Err(e),
            }
        }
        "test" => {
            match portal
                .ledger
                .take(
                    &format!("test#{}", s.grant.tenant),
                    portal.settings.test_sends_per_minute,
                    RATE_WINDOW_SECONDS,
                    Utc::now(),
                )
                .await
            {
                Ok(true) => endpoints::send_test_event(state(), endpoint_path(&s, &id))
                    .await
                    .map(|Json(t)| Banner::Test(Box::new(t))),
                Ok(false) => Err(ApiError::new(
                    Kind::TooManyRequests,
                    format!(
                        "at most {} test events a minute; try again in a minute",
                        portal.settings.test_sends_per_minute
                    ),
                )),
                Err(e) => Err(e.into()),
            }
        }
        "recover" => {
            let since = form.get("since").and_then(form_time);
            let until = form.get("until").and_then(form_time);
            match since {
                None => Err(ApiError::invalid(
                    "since",
                    "give the start of the window (YYYY-MM-DDTHH:MM, UTC)",
                )),
                Some(since) => endpoints::recover_endpoint(
                    state(),
                    endpoint_path(&s, &id),
                    ApiJson(model::RecoverRequest {
                        since,
                        until,
                        enable: form.get("enable") == Some("yes"),
                    }),
                )
                .await
                .map(|Json(r)| Banner::Recovered(Box::new(r))),
            }
        }
        _ => return missing(&portal, &s, "page"),
    };
    match banner {
        Ok(b) => {
            if action != "reveal" {
                log(&action);
            }
            detail_page(&deps, &portal, &s, &id, StatusCode::OK, Some(b)).await
        }
        Err(e) if e.kind == Kind::NotFound => missing(&portal, &s, "endpoint"),
        Err(e) => {
            let status = e.kind.status();
            detail_page(&deps, &portal, &s, &id, status, Some(Banner::error(&e))).await
        }
    }
}

/// Filters of the delivery log page.
#[derive(Debug, Default, Deserialize)]
pub(super) struct LogQuery {
    #[serde(default)]
    outcome: Option<String>,
    #[serde(default)]
    event_type: Option<String>,
    #[serde(default)]
    since: Option<String>,
    #[serde(default)]
    until: Option<String>,
    #[serde(default)]
    cursor: Option<String>,
}

/// Rows of one log page: 25 (each row's event type is one outbox read).
pub const LOG_PAGE: u32 = 25;

/// `GET /portal/endpoints/{id}/log`: newest first, by outcome, event type and time.
pub(super) async fn log(
    State(deps): State<ApiDeps>,
    headers: HeaderMap,
    Path(endpoint_id): Path<String>,
    Query(q): Query<LogQuery>,
) -> Response {
    let (portal, s) = match session(&deps, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let Some(id) = allowed(&s, &endpoint_id) else {
        return missing(&portal, &s, "endpoint");
    };
    let blank = |v: &Option<String>| {
        v.as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
    };
    let mut query = Map::new();
    query.insert("limit".into(), json!(LOG_PAGE));
    if let Some(o) = blank(&q.outcome) {
        query.insert("outcome".into(), json!(o));
    }
    for (name, v) in [("since", &q.since), ("until", &q.until)] {
        if let Some(text) = blank(v) {
            match form_time(&text) {
                Some(t) => {
                    query.insert(name.into(), json!(t));
                }
                None => {
                    let e = ApiError::invalid(name, "a time as YYYY-MM-DDTHH:MM (UTC)");
                    return error_page(&portal, &s, &e);
                }
            }
        }
    }
    if let Some(c) = blank(&q.cursor) {
        query.insert("cursor".into(), json!(c));
    }
    let page = match from_json::<model::EndpointAttemptsQuery>(
        Value::Object(query).to_string().as_bytes(),
    ) {
        Ok(query) => endpoints::list_endpoint_attempts(
            State(deps.clone()),
            endpoint_path(&s, &id),
            ApiQuery(query),
        )
        .await
        .map(|Json(p)| p),
        Err(e) => Err(e),
    };
    let page = match page {
        Ok(p) => p,
        Err(e) if e.kind == Kind::NotFound => return missing(&portal, &s, "endpoint"),
        Err(e) => return error_page(&portal, &s, &e),
    };
    // The log rows carry no event type: each distinct event is read once from the outbox
    // (kept 7 days by default; an older event shows no type).
    let mut types: HashMap<String, Option<String>> = HashMap::new();
    for item in &page.items {
        if types.contains_key(&item.event_id) {
            continue;
        }
        let ty = match EventId::new(item.event_id.clone()) {
            Ok(eid) => deps
                .events
                .get(&s.grant.tenant, &eid)
                .await
                .ok()
                .flatten()
                .map(|e| e.event_type.to_string()),
            Err(_) => None,
        };
        types.insert(item.event_id.clone(), ty);
    }
    let wanted = blank(&q.event_type);
    let rows: Vec<(model::EndpointAttempt, Option<String>)> = page
        .items
        .into_iter()
        .map(|a| {
            let ty = types.get(&a.event_id).cloned().flatten();
            (a, ty)
        })
        .filter(|(_, ty)| {
            wanted
                .as_ref()
                .is_none_or(|w| ty.as_deref() == Some(w.as_str()))
        })
        .collect();
    let filters = pages::LogFilters {
        outcome: blank(&q.outcome),
        event_type: wanted,
        since: blank(&q.since),
        until: blank(&q.until),
    };
    html(
        &portal,
        &s,
        StatusCode::OK,
        pages::log(&ctx(&s), &id, &rows, &filters, page.next_cursor.as_deref()),
    )
}

/// `GET /portal/endpoints/{id}/log/{event_id}`: every attempt of the event to the endpoint
/// in full.
pub(super) async fn attempt(
    State(deps): State<ApiDeps>,
    headers: HeaderMap,
    Path((endpoint_id, event_id)): Path<(String, String)>,
) -> Response {
    let (portal, s) = match session(&deps, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    attempt_page(
        &deps,
        &portal,
        &s,
        &endpoint_id,
        &event_id,
        StatusCode::OK,
        None,
    )
    .await
}

async fn attempt_page(
    deps: &ApiDeps,
    portal: &PortalDeps,
    s: &Session,
    endpoint_id: &str,
    event_id: &str,
    status: StatusCode,
    banner: Option<Banner>,
) -> Response {
    let Some(id) = allowed(s, endpoint_id) else {
        return missing(portal, s, "endpoint");
    };
    let Ok(eid) = EventId::new(event_id) else {
        return missing(portal, s, "event");
    };
    let endpoint = match deps.endpoints.get(&s.grant.tenant, &id).await {
        Ok(Some(e)) => e,
        Ok(None) => return missing(portal, s, "endpoint"),
        Err(e) => return error_page(portal, s, &e.into()),
    };
    // The tenant's own event with this id (another tenant's is another event). Past the
    // outbox's TTL the attempts are still shown when the log holds them for this
    // endpoint, which is the tenant's.
    let event = match deps.events.get(&s.grant.tenant, &eid).await {
        Ok(e) => e,
        Err(e) => return error_page(portal, s, &e.into()),
    };
    let history = match deps.ledger.history(&s.grant.tenant, &eid).await {
        Ok(h) => h,
        Err(e) => return error_page(portal, s, &e.into()),
    };
    let attempts: Vec<_> = history
        .into_iter()
        .filter(|a| a.endpoint_id == id)
        .collect();
    if event.is_none() && attempts.is_empty() {
        return missing(portal, s, "event");
    }
    html(
        portal,
        s,
        status,
        pages::attempt(
            &ctx(s),
            &endpoint,
            &eid,
            event.as_ref(),
            &attempts,
            deps.settings.time_scale,
            banner.as_ref(),
        ),
    )
}

/// `POST /portal/endpoints/{id}/log/{event_id}/resend`.
pub(super) async fn resend(
    State(deps): State<ApiDeps>,
    headers: HeaderMap,
    Path((endpoint_id, event_id)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let (portal, s, _) = match change(&deps, &headers, &body).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    if allowed(&s, &endpoint_id).is_none() {
        return missing(&portal, &s, "endpoint");
    }
    let result = events::resend_event(
        State(deps.clone()),
        ApiPath(EventEndpointPath {
            tenant_id: s.grant.tenant.to_string(),
            event_id: event_id.clone(),
            endpoint_id: endpoint_id.clone(),
        }),
    )
    .await;
    let (status, banner) = match result {
        Ok((_, Json(r))) => {
            tracing::info!(session_id = %s.grant.session_id, tenant = %s.grant.tenant, endpoint_id, event_id, "portal action resend");
            (
                StatusCode::OK,
                Banner::ok(&format!(
                    "Queued again (it was {}). The new attempt appears here once made.",
                    r.previous_state
                )),
            )
        }
        Err(e) if e.kind == Kind::NotFound => return missing(&portal, &s, "event"),
        Err(e) => (e.kind.status(), Banner::error(&e)),
    };
    attempt_page(
        &deps,
        &portal,
        &s,
        &endpoint_id,
        &event_id,
        status,
        Some(banner),
    )
    .await
}

/// `GET /portal/events`: the operational events and how to subscribe.
pub(super) async fn operational_events(
    State(deps): State<ApiDeps>,
    headers: HeaderMap,
) -> Response {
    let (portal, s) = match session(&deps, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    html(&portal, &s, StatusCode::OK, pages::operational(&ctx(&s)))
}
