//! The Tern API: everything an application does with Tern, over HTTP, from any language.
//!
//! One `axum` router ([`router`]) over the domain's ports and `tern-ops`: endpoints
//! (create, list, get, update, delete, enable, disable, rotate the secret, health, a test
//! send, the delivery log by endpoint, recover), events (publish, get with each delivery's
//! state, the attempts, resend) and the tenant's dead letters (grouped, replay). Every path
//! is under `/v1/tenants/{tenant_id}/`; an id of another tenant is a 404.
//!
//! Two hosts serve the same router and hold no logic: the `api` Lambda
//! (`functions/api`, through `lambda_http`, behind API Gateway with IAM authorization) and
//! local mode (`tern-local`, on 127.0.0.1, verifying SigV4 itself). They differ only in
//! the [`auth::Authenticator`] they pass. Errors are RFC 9457 problems ([`problem`]); the
//! OpenAPI 3.1 document comes from the code ([`openapi`]) and is committed as
//! `shared/tern-api/openapi.json`.

#![warn(missing_docs)]

pub mod auth;
pub mod aws;
pub mod extract;
pub mod idempotency;
pub mod model;
pub mod openapi;
pub mod portal;
pub mod problem;
pub mod reach;
pub(crate) mod routes;
pub mod sigv4;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use tern_core::event_store::EventStore;
use tern_core::health::{HealthPolicy, HealthStore};
use tern_core::ports::{DeliveryLedger, EndpointStore};
use tern_handlers::replay::ReplayDeps;
use tern_http::{DeliveryClient, DestinationPolicy, HostLookup};

pub use auth::Authenticator;
pub use openapi::openapi;

/// Bytes a request body may hold besides the payload (the event's id, type and the JSON
/// around them): 16 KiB. The body limit is the payload limit plus this.
pub const BODY_OVERHEAD_BYTES: usize = 16 * 1024;

/// The batch publish route (`publishEventBatch`), as registered.
pub const BATCH_PUBLISH_ROUTE: &str = "/v1/tenants/{tenant_id}/event-batches";

/// Largest body of a batch publish, bytes: 2.5 MiB (2,621,440). In AWS the body reaches the
/// function inside API Gateway's event as a JSON string (a JSON body is passed as text, not
/// base64), where each `"` and `\` of it takes two bytes: at worst twice its size, which with
/// the headers and the request context (under 64 KiB: an HTTP API takes at most 10 KB of
/// request line and headers) stays under Lambda's 6 MB limit on a synchronous invocation's
/// request (Lambda quotas, "Invocation payload (request and response)"). API Gateway's own
/// limit, 10 MB (HTTP API quotas), is above it. It is above a single publish's limit at any
/// payload limit a deployment may set, so any event that publishes alone fits in a batch.
pub const MAX_BATCH_BODY_BYTES: usize = 5 * 512 * 1024;

/// What the batch's body limit rests on: Lambda's 6 MB (taken as 6,000,000 bytes) holds
/// twice the body and 64 KiB of headers and context.
const _: () = assert!(2 * MAX_BATCH_BODY_BYTES + 64 * 1024 <= 6_000_000);
const _: () = assert!(
    MAX_BATCH_BODY_BYTES >= tern_core::event::MAX_CONFIGURABLE_PAYLOAD_BYTES + BODY_OVERHEAD_BYTES
);

/// The deployment's settings the API applies.
#[derive(Debug, Clone)]
pub struct ApiSettings {
    /// Where endpoints may point (`TERN_HTTPS_ONLY`, `TERN_ALLOW_DESTINATIONS`,
    /// `TERN_NAT64`): the sender's SSRF guard, applied at create and update.
    pub destinations: DestinationPolicy,
    /// Largest payload, bytes (`TERN_MAX_PAYLOAD_BYTES`, the relay's; 256 KiB default).
    pub max_payload_bytes: usize,
    /// The endpoint health thresholds (`TERN_HEALTH_*`), for the health view.
    pub health: HealthPolicy,
    /// Default attempt deadline (`TERN_ATTEMPT_TIMEOUT_MS`), for a test send.
    pub attempt_timeout: Duration,
    /// The deployment's time scale (`TERN_TIME_SCALE`: local mode's `--time-scale`, 1 in
    /// production): next-attempt times are shown as the sender waits them.
    pub time_scale: f64,
}

impl ApiSettings {
    /// Largest request body of every route but the batch publish, bytes: the payload limit
    /// plus [`BODY_OVERHEAD_BYTES`].
    pub fn body_limit(&self) -> usize {
        self.max_payload_bytes.saturating_add(BODY_OVERHEAD_BYTES)
    }

    /// Largest request body of the route registered as `route`, bytes:
    /// [`MAX_BATCH_BODY_BYTES`] for the batch publish, [`Self::body_limit`] for the others.
    pub fn body_limit_of(&self, route: &str) -> usize {
        if route == BATCH_PUBLISH_ROUTE {
            self.largest_body_limit()
        } else {
            self.body_limit()
        }
    }

    /// Largest request body of any route, bytes: what a layer that reads bodies before
    /// routing (local mode's SigV4 check) must take.
    pub fn largest_body_limit(&self) -> usize {
        MAX_BATCH_BODY_BYTES.max(self.body_limit())
    }
}

/// What the routes use: the same ports and clients the functions use, built once.
#[derive(Clone)]
pub struct ApiDeps {
    /// Endpoints.
    pub endpoints: Arc<dyn EndpointStore>,
    /// The delivery ledger and attempt log.
    pub ledger: Arc<dyn DeliveryLedger>,
    /// The outbox.
    pub events: Arc<dyn EventStore>,
    /// Endpoint health records.
    pub health: Arc<dyn HealthStore>,
    /// The waiting list (an endpoint's health counts its waiting deliveries).
    pub waiting: Arc<dyn tern_core::waiting::WaitingList>,
    /// The DLQ and the delivery queue (replays, resends).
    pub queues: Arc<ReplayDeps>,
    /// The delivery client, for test sends (its SSRF guard applies).
    pub client: DeliveryClient,
    /// The resolver behind the SSRF check of an endpoint URL.
    pub lookup: Arc<dyn HostLookup>,
    /// Settings.
    pub settings: Arc<ApiSettings>,
    /// The customer portal's keys, table and settings; `None`: no portal in this
    /// deployment (its pages and the session route answer 404).
    pub portal: Option<Arc<portal::PortalDeps>>,
    /// The records of `Idempotency-Key`s ([`idempotency`]).
    pub idempotency: Arc<dyn tern_core::idempotency::IdempotencyStore>,
}

/// The API: every `/v1` route (and every unknown path) behind `auth`, problems for
/// unknown paths and methods, the body limit of `deps.settings`, an answer within
/// [`REQUEST_DEADLINE`]; every `/v1` route's POSTs honour an `Idempotency-Key`
/// ([`idempotency`], a route layer: routes added to [`routes`] get it too). The customer portal's pages (`/portal/...`, [`portal`]) are the
/// only paths outside `auth`: they authenticate by their own session cookie, which opens
/// nothing under `/v1`.
pub fn router(deps: ApiDeps, auth: Authenticator) -> Router {
    let limit = deps.settings.body_limit();
    let (router, _) = routes::api().split_for_parts();
    let api = router
        .route_layer(axum::middleware::from_fn_with_state(
            deps.clone(),
            idempotency::idempotent,
        ))
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .with_state(deps.clone())
        .layer(axum::middleware::from_fn_with_state(
            auth,
            auth::authenticate,
        ));
    portal::router()
        .with_state(deps)
        .merge(api)
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn(deadline))
}

/// Longest a request may take before the API answers 503 (`unavailable`): 25 s. API
/// Gateway waits at most 30 s for an integration (HTTP API quota) and the function's own
/// budgets (`tern-aws`' 6 s per AWS call, a test send's 10 s, a DLQ read's and a replay's
/// 10 s each) keep every route well inside; this is the guarantee when AWS is slow. A cut
/// route has made only whole writes, each safe to make again.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(25);

/// Answers 503 when the route has not answered within [`REQUEST_DEADLINE`].
async fn deadline(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    match tokio::time::timeout(REQUEST_DEADLINE, next.run(request)).await {
        Ok(response) => response,
        Err(_) => problem::ApiError::new(
            problem::Kind::Unavailable,
            "the request did not finish in time; retry it",
        )
        .into_response(),
    }
}
