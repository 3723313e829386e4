//! The routes, each documented where it is defined (`#[utoipa::path]`) and registered
//! with its documentation in [`api`].

mod dlq;
pub(crate) mod endpoints;
pub(crate) mod events;
mod portal_sessions;

use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde::Deserialize;
use utoipa::IntoResponses;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::ApiDeps;
use crate::problem::{ApiError, Kind, Problem};

/// Every route, with its documentation.
pub(crate) fn api() -> OpenApiRouter<ApiDeps> {
    OpenApiRouter::with_openapi(<crate::openapi::ApiDoc as utoipa::OpenApi>::openapi())
        .routes(routes!(
            endpoints::create_endpoint,
            endpoints::list_endpoints
        ))
        .routes(routes!(
            endpoints::get_endpoint,
            endpoints::update_endpoint,
            endpoints::delete_endpoint
        ))
        .routes(routes!(endpoints::enable_endpoint))
        .routes(routes!(endpoints::disable_endpoint))
        .routes(routes!(endpoints::rotate_endpoint_secret))
        .routes(routes!(endpoints::rotate_endpoint_signing_key))
        .routes(routes!(endpoints::get_endpoint_health))
        .routes(routes!(endpoints::send_test_event))
        .routes(routes!(endpoints::list_endpoint_attempts))
        .routes(routes!(endpoints::recover_endpoint))
        .routes(routes!(events::publish_event))
        // The batch publish takes more than one event's body (`crate::MAX_BATCH_BODY_BYTES`):
        // its own limit, over the router's.
        .merge(
            OpenApiRouter::new()
                .routes(routes!(events::publish_event_batch))
                .layer(axum::extract::DefaultBodyLimit::max(
                    crate::MAX_BATCH_BODY_BYTES,
                )),
        )
        .routes(routes!(events::get_event))
        .routes(routes!(events::list_event_attempts))
        .routes(routes!(events::resend_event))
        .routes(routes!(dlq::list_dead_letters))
        .routes(routes!(dlq::replay_dead_letters))
        .routes(routes!(portal_sessions::create_portal_session))
}

/// The answer for a path that is no route.
pub(crate) async fn not_found() -> Response {
    ApiError::new(Kind::NotFound, "no such resource").into_response()
}

/// The answer for a method a route does not have.
pub(crate) async fn method_not_allowed() -> Response {
    ApiError::new(
        Kind::MethodNotAllowed,
        "this resource does not take this method",
    )
    .into_response()
}

/// `{tenant_id}`.
#[derive(Debug, Deserialize)]
pub(crate) struct TenantPath {
    pub tenant_id: String,
}

/// `{tenant_id}` and `{endpoint_id}`.
#[derive(Debug, Deserialize)]
pub(crate) struct EndpointPath {
    pub tenant_id: String,
    pub endpoint_id: String,
}

/// `{tenant_id}` and `{event_id}`.
#[derive(Debug, Deserialize)]
pub(crate) struct EventPath {
    pub tenant_id: String,
    pub event_id: String,
}

/// `{tenant_id}`, `{event_id}` and `{endpoint_id}`.
#[derive(Debug, Deserialize)]
pub(crate) struct EventEndpointPath {
    pub tenant_id: String,
    pub event_id: String,
    pub endpoint_id: String,
}

/// Page size from a query: default [`crate::model::DEFAULT_PAGE`], 1..=[`crate::model::MAX_PAGE`].
pub(crate) fn page_size(limit: Option<u32>) -> Result<usize, ApiError> {
    let limit = limit.unwrap_or(crate::model::DEFAULT_PAGE);
    if !(1..=crate::model::MAX_PAGE).contains(&limit) {
        return Err(ApiError::invalid(
            "limit",
            format!("limit must be 1 to {}", crate::model::MAX_PAGE),
        ));
    }
    usize::try_from(limit).map_err(|_| ApiError::invalid("limit", "limit is too large"))
}

/// An opaque cursor of a list of `scope` (the tenant's endpoints: the tenant id; an
/// endpoint's log: `<tenant id>/<endpoint id>`) at `position`: base64url without padding of
/// `<scope>\n<position>`. Ids never hold a newline or `/` (`tern_core::ids`), so the scope
/// reads back exactly.
pub(crate) fn encode_cursor(scope: &str, position: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{scope}\n{position}"))
}

/// Reads a cursor of `scope` back. A cursor not made here, or made for another list (another
/// tenant's, another endpoint's: a reference one tenant could take from another), is the
/// same 400 naming `cursor`, so it tells nothing about the list it came from.
pub(crate) fn decode_cursor<T>(
    scope: &str,
    cursor: &str,
    read: impl Fn(&str) -> Option<T>,
) -> Result<T, ApiError> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|t| {
            t.split_once('\n')
                .filter(|(s, _)| *s == scope)
                .and_then(|(_, position)| read(position))
        })
        .ok_or_else(|| {
            ApiError::invalid("cursor", "not a cursor from a previous page of this list")
        })
}

/// Problems any route may answer with; each body is `#/components/schemas/Problem`.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub(crate) enum Problems {
    /// An input is invalid; `field` names it.
    #[response(status = 400, content_type = "application/problem+json")]
    BadRequest(Problem),
    /// The request reached the function without an IAM caller (a route left without IAM
    /// authorization).
    #[response(status = 401, content_type = "application/problem+json")]
    Unauthorized(Problem),
    /// The caller may not act on this tenant, or the request is not signed, or not signed
    /// right (`signature-refused`: API Gateway's IAM authorization in AWS, answering
    /// `{"message": ...}`; local mode's check, a problem).
    #[response(status = 403, content_type = "application/problem+json")]
    Forbidden(Problem),
    /// No such resource in this tenant (another tenant's id is one).
    #[response(status = 404, content_type = "application/problem+json")]
    NotFound(Problem),
    /// The body is larger than the limit.
    #[response(status = 413, content_type = "application/problem+json")]
    TooLarge(Problem),
    /// The body is not JSON.
    #[response(status = 415, content_type = "application/problem+json")]
    NotJson(Problem),
    /// A service Tern depends on did not answer in time; retry (after `Retry-After`).
    #[response(status = 503, content_type = "application/problem+json")]
    Unavailable(Problem),
}

/// A 409 of a route that can conflict.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub(crate) enum Conflict {
    /// The state of a resource refuses the request (`type` says which).
    #[response(status = 409, content_type = "application/problem+json")]
    Conflict(Problem),
}
