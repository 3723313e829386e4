//! `Idempotency-Key` on every POST, with Stripe's semantics
//! (draft-ietf-httpapi-idempotency-key-header), as one route layer ([`idempotent`]) that
//! every `/v1` route gets, routes added later included; only POSTs carrying the header
//! are touched.
//!
//! - The first request under a key claims it (one conditional write,
//!   `tern_core::idempotency::IdempotencyStore::claim`), runs, and its answer is kept for
//!   24 h when it is a 2xx or a 4xx (but 429, which says "later"): the status, the
//!   headers of [`REPLAYED_HEADERS`] and the body, byte for byte.
//! - A retry with the same key and the same request (method, path with its parameters and
//!   query, body as JSON: `tern_core::idempotency::fingerprint`) gets that answer again
//!   with `Idempotent-Replayed: true`, and nothing runs.
//! - The key with another request: 422 `idempotency-key-reused`. A retry while the first
//!   still runs: 409 `idempotency-key-in-use` with `Retry-After: 1`; safe to retry.
//! - A 5xx (our failure), or a route cut by the deadline, keeps nothing: the key is let go
//!   and a retry runs again. A request that never finished (its instance crashed) holds
//!   the key for its lease (`tern_core::idempotency::LEASE_SECONDS`), then a retry runs.
//! - Keys are per tenant: the tenant of the path, which authentication checked before
//!   this layer runs.
//! - A 2xx answer is sealed at rest with the deployment's KMS key (as endpoint secrets
//!   are) unless its route is one of [`ANSWERS_WITHOUT_SECRETS`]: a new route's answers
//!   are sealed until it is listed there.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use tern_core::TenantId;
use tern_core::idempotency::{Claim, RecordKey, StoredAnswer, fingerprint, parse_key};

use crate::ApiDeps;
use crate::problem::{ApiError, ApiResult, Kind};

/// The request header (draft-ietf-httpapi-idempotency-key-header §2).
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The header on an answer replayed from a key's first request (Stripe's name).
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

/// Headers of an answer kept and replayed with it (besides the status and the body):
/// the ones that say what the body is and where a created thing is. `Retry-After` is not
/// among them: the answers that carry it (429, 503) are not kept.
pub const REPLAYED_HEADERS: [&str; 2] = ["content-type", "location"];

/// Largest answer body kept, bytes: 256 KiB. A kept answer, sealed (base64, a third
/// larger) with its wrapped data key, stays below DynamoDB's 400 KB item limit; no route
/// answers a POST with more (a recover lists at most 100 resends). A larger one is not
/// kept: the key is let go, and a retry runs again.
pub const MAX_STORED_BODY_BYTES: usize = 256 * 1024;

/// Time kept at the end of the request deadline ([`crate::REQUEST_DEADLINE`]) to let a
/// key go when its route has not answered: 3 s, one release write's budget (a try is 2 s,
/// `tern_aws::budget::ATTEMPT_TIMEOUT`) and some.
pub const RELEASE_RESERVE: Duration = Duration::from_secs(3);

/// The routes (as registered) whose answers hold no secret: kept as they are. Every other
/// route's 2xx answer is sealed before it is written (`createEndpoint`'s and
/// `rotateEndpointSecret`'s `secret`, `createPortalSession`'s single-use link, and
/// whatever a route added later answers, until it is listed here).
pub const ANSWERS_WITHOUT_SECRETS: &[&str] = &[
    "/v1/tenants/{tenant_id}/endpoints/{endpoint_id}/enable",
    "/v1/tenants/{tenant_id}/endpoints/{endpoint_id}/disable",
    "/v1/tenants/{tenant_id}/endpoints/{endpoint_id}/test",
    "/v1/tenants/{tenant_id}/endpoints/{endpoint_id}/recover",
    "/v1/tenants/{tenant_id}/events",
    crate::BATCH_PUBLISH_ROUTE,
    "/v1/tenants/{tenant_id}/events/{event_id}/endpoints/{endpoint_id}/resend",
    "/v1/tenants/{tenant_id}/dead-letters/replay",
];

/// The request's `Idempotency-Key`, when it has one (`tern_core::idempotency::parse_key`).
///
/// # Errors
/// A 400 naming `Idempotency-Key` for an empty, too long or non-ASCII key.
pub fn key(headers: &HeaderMap) -> ApiResult<Option<String>> {
    let Some(raw) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    raw.to_str()
        .map_err(|_| tern_core::idempotency::KeyError::Malformed)
        .and_then(parse_key)
        .map(Some)
        .map_err(|e| ApiError::invalid("Idempotency-Key", e.to_string()))
}

/// True when an answer with `status` is kept for retries: a 2xx, or a 4xx other than 429
/// (a rate limit says "try later": kept, it would refuse the retries for 24 h).
pub fn kept(status: StatusCode) -> bool {
    status.is_success() || (status.is_client_error() && status != StatusCode::TOO_MANY_REQUESTS)
}

/// The layer: see the module. Runs after authentication (the path's tenant is the
/// caller's), on matched routes only (`Router::route_layer`).
pub(crate) async fn idempotent(
    State(deps): State<ApiDeps>,
    request: Request,
    next: Next,
) -> Response {
    let started = tokio::time::Instant::now();
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let key = match key(request.headers()) {
        Ok(Some(k)) => k,
        Ok(None) => return next.run(request).await,
        Err(e) => return e.into_response(),
    };
    // Every /v1 path names its tenant; one that is not an id is the route's 400 to give.
    let Some(tenant) =
        crate::auth::path_tenant(request.uri().path()).and_then(|t| TenantId::new(t).ok())
    else {
        return next.run(request).await;
    };
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned());
    let sealed = route
        .as_deref()
        .is_none_or(|p| !ANSWERS_WITHOUT_SECRETS.contains(&p));
    let (parts, body) = request.into_parts();
    // The route's own limit: the batch publish takes more than one event's.
    let limit = route.as_deref().map_or_else(
        || deps.settings.body_limit(),
        |r| deps.settings.body_limit_of(r),
    );
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
        return ApiError::new(
            Kind::PayloadTooLarge,
            format!("the body is larger than {limit} bytes"),
        )
        .into_response();
    };
    let target = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path(), |p| p.as_str());
    let fingerprint = fingerprint(parts.method.as_str(), target, &bytes);
    let record = RecordKey::new(&tenant, &key);
    let lease = match deps
        .idempotency
        .claim(&record, &fingerprint, Utc::now())
        .await
    {
        Err(e) => return ApiError::from(e).into_response(),
        Ok(Claim::Done {
            fingerprint: f,
            answer,
        }) if f == fingerprint => return replay(answer),
        Ok(Claim::Done { .. }) => return reused(),
        Ok(Claim::Running { fingerprint: f }) if f != fingerprint => return reused(),
        Ok(Claim::Running { .. }) => {
            return ApiError::new(
                Kind::IdempotencyKeyInUse,
                "a request with this Idempotency-Key is still running: retry it shortly for its answer",
            )
            .with_field("Idempotency-Key")
            .into_response();
        }
        Ok(Claim::Claimed(lease)) => lease,
    };
    let request = Request::from_parts(parts, Body::from(bytes));
    let cut = started + crate::REQUEST_DEADLINE.saturating_sub(RELEASE_RESERVE);
    let response = match tokio::time::timeout_at(cut, next.run(request)).await {
        Ok(r) => r,
        Err(_) => {
            release(&deps, &record, &lease).await;
            return ApiError::new(
                Kind::Unavailable,
                "the request did not finish in time; retry it",
            )
            .into_response();
        }
    };
    if !kept(response.status()) {
        release(&deps, &record, &lease).await;
        return response;
    }
    let (parts, body) = response.into_parts();
    let body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(e) => {
            tracing::error!(error = %e, "an answer's body could not be read");
            release(&deps, &record, &lease).await;
            return ApiError::new(Kind::Internal, "the request could not be completed")
                .into_response();
        }
    };
    if body.len() > MAX_STORED_BODY_BYTES {
        tracing::warn!(
            bytes = body.len(),
            "an answer too large to keep for its Idempotency-Key; a retry runs again"
        );
        release(&deps, &record, &lease).await;
    } else {
        let answer = StoredAnswer {
            status: parts.status.as_u16(),
            headers: REPLAYED_HEADERS
                .iter()
                .filter_map(|name| {
                    parts
                        .headers
                        .get(*name)
                        .and_then(|v| v.to_str().ok())
                        .map(|v| ((*name).to_owned(), v.to_owned()))
                })
                .collect(),
            body: body.to_vec(),
            sealed: sealed && parts.status.is_success(),
        };
        // The route ran: its answer goes back whatever happens to the record. A record
        // not written stays claimed until its lease ends, then a retry runs again.
        match deps
            .idempotency
            .complete(&record, &lease, &fingerprint, &answer)
            .await
        {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                "an Idempotency-Key's claim was taken over before its answer was kept"
            ),
            Err(e) => tracing::warn!(error = %e, "an Idempotency-Key's answer was not kept"),
        }
    }
    Response::from_parts(parts, Body::from(body))
}

/// The 422 for a key used with another request.
fn reused() -> Response {
    ApiError::new(
        Kind::IdempotencyKeyReused,
        "this Idempotency-Key was used for another request (another route, path or body) in the last 24 hours: use a new key for a new request",
    )
    .with_field("Idempotency-Key")
    .into_response()
}

/// The kept answer again, with `Idempotent-Replayed: true`.
fn replay(answer: StoredAnswer) -> Response {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK);
    let mut response = (status, Bytes::from(answer.body)).into_response();
    let headers = response.headers_mut();
    headers.remove(axum::http::header::CONTENT_TYPE);
    for (name, value) in answer.headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::try_from(name),
            HeaderValue::try_from(value.as_str()),
        ) {
            headers.insert(n, v);
        }
    }
    headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    response
}

/// Lets the key go; a failure only leaves it claimed until its lease ends.
async fn release(deps: &ApiDeps, record: &RecordKey, lease: &tern_core::idempotency::Lease) {
    if let Err(e) = deps.idempotency.release(record, lease).await {
        tracing::warn!(error = %e, "an Idempotency-Key was not let go; it frees itself after its lease");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_answers_are_2xx_and_4xx_but_429() {
        for (status, keep) in [
            (200, true),
            (201, true),
            (202, true),
            (400, true),
            (404, true),
            (409, true),
            (422, true),
            (429, false),
            (500, false),
            (503, false),
        ] {
            assert_eq!(
                kept(StatusCode::from_u16(status).unwrap()),
                keep,
                "{status}"
            );
        }
    }

    #[test]
    fn the_header_is_read_bare_or_quoted_and_refused_with_its_name() {
        let mut headers = HeaderMap::new();
        assert_eq!(key(&headers).unwrap(), None);
        headers.insert(IDEMPOTENCY_KEY, HeaderValue::from_static("\"k-1\""));
        assert_eq!(key(&headers).unwrap().as_deref(), Some("k-1"));
        headers.insert(IDEMPOTENCY_KEY, HeaderValue::from_static("a key"));
        let e = key(&headers).unwrap_err();
        assert_eq!(
            (e.kind, e.field.as_deref()),
            (Kind::Validation, Some("Idempotency-Key"))
        );
        headers.insert(
            IDEMPOTENCY_KEY,
            HeaderValue::from_bytes("clé".as_bytes()).unwrap(),
        );
        assert!(key(&headers).is_err());
    }

    #[test]
    fn a_replay_carries_the_kept_headers_and_the_replayed_mark() {
        let r = replay(StoredAnswer {
            status: 201,
            headers: vec![("content-type".into(), "application/json".into())],
            body: b"{\"a\":1}".to_vec(),
            sealed: true,
        });
        assert_eq!(r.status(), StatusCode::CREATED);
        assert_eq!(r.headers()["content-type"], "application/json");
        assert_eq!(r.headers()[IDEMPOTENT_REPLAYED], "true");
    }
}
