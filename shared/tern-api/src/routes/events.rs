//! `/v1/tenants/{tenant_id}/events...`: publish, one event with its deliveries, its
//! attempts, and a resend to one endpoint.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::value::RawValue;
use tern_core::ports::DeliveryState as LedgerState;
use tern_core::{EndpointId, EventId, PayloadError, TenantId};
use tern_ops::publish::{PublishError, PublishOutcome};
use tern_ops::resend::{ResendDeps, ResendError};

use super::{Conflict, EventEndpointPath, EventPath, Problems, TenantPath};
use crate::ApiDeps;
use crate::extract::{ApiJson, ApiPath, endpoint_id, event_id, tenant};
use crate::model::{
    Attempt, DeadLetteredBudget, DeliveryState, DeliveryStatus, Event, EventAttempts, NewEvent,
    PublishedEvent, Resend,
};
use crate::problem::{ApiError, ApiResult, Kind};

/// Publish an event: its outbox item is written, and the relay delivers it to every
/// subscribed endpoint, as for an event written in the application's own transaction.
/// Idempotent on `id`.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant_id}/events",
    operation_id = "publishEvent",
    tag = "events",
    params(("tenant_id" = String, Path, description = "Tenant id: 1-128 ASCII letters, digits, `_` and `-` (`tern_core::ids::MAX_ID_LEN`); another is a 400 naming `tenant_id`", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$")),
    request_body = NewEvent,
    responses(
        (status = 202, description = "Published; delivery follows", body = PublishedEvent),
        (status = 200, description = "The same event was published before with this id: the original, nothing written", body = PublishedEvent),
        Problems,
        Conflict
    ),
    security(("sigv4" = []))
)]
pub(crate) async fn publish_event(
    State(deps): State<ApiDeps>,
    ApiPath(p): ApiPath<TenantPath>,
    ApiJson(body): ApiJson<NewEvent>,
) -> ApiResult<(StatusCode, Json<PublishedEvent>)> {
    let tenant = tenant(&p.tenant_id)?;
    let id = body
        .id
        .as_deref()
        .map(EventId::new)
        .transpose()
        .map_err(|e| ApiError::invalid("id", e.to_string()))?;
    let outcome = tern_ops::publish::publish(
        deps.events.as_ref(),
        &tenant,
        id,
        &body.event_type,
        body.payload.get(),
        deps.settings.max_payload_bytes,
    )
    .await
    .map_err(|e| match e {
        PublishError::Payload(PayloadError::BadEventType(_)) => {
            ApiError::invalid("type", e.to_string())
        }
        PublishError::Payload(PayloadError::TooLarge { .. }) => {
            ApiError::new(Kind::PayloadTooLarge, e.to_string()).with_field("payload")
        }
        PublishError::Payload(_) => ApiError::invalid("payload", e.to_string()),
        PublishError::Id(_) => ApiError::invalid("id", e.to_string()),
        PublishError::Conflict(_) => {
            ApiError::new(Kind::EventIdConflict, e.to_string()).with_field("id")
        }
        PublishError::Port(p) => p.into(),
    })?;
    let (status, created) = match &outcome {
        PublishOutcome::Created(_) => (StatusCode::ACCEPTED, true),
        PublishOutcome::Repeated(_) => (StatusCode::OK, false),
    };
    let e = outcome.event();
    Ok((
        status,
        Json(PublishedEvent {
            id: e.id.to_string(),
            event_type: e.event_type.to_string(),
            tenant_id: e.tenant_id.to_string(),
            created_at: e.created_at,
            created,
        }),
    ))
}

/// The ids of the tenant's endpoints.
async fn tenant_endpoints(
    deps: &ApiDeps,
    tenant: &TenantId,
) -> ApiResult<BTreeMap<EndpointId, tern_core::Endpoint>> {
    Ok(deps
        .endpoints
        .list_for_tenant(tenant)
        .await?
        .into_iter()
        .map(|e| (e.id.clone(), e))
        .collect())
}

/// An event: its type, time and payload while the outbox keeps it, and where each of its
/// deliveries stands (one per endpoint of the tenant subscribed to it, or attempted).
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant_id}/events/{event_id}",
    operation_id = "getEvent",
    tag = "events",
    params(
        ("tenant_id" = String, Path, description = "Tenant id: 1-128 ASCII letters, digits, `_` and `-` (`tern_core::ids::MAX_ID_LEN`); another is a 400 naming `tenant_id`", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$"),
        ("event_id" = String, Path, description = "Event id: 1-128 ASCII letters, digits, `_` and `-`; another, like an unknown id, is a 404", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$")
    ),
    responses((status = 200, description = "The event", body = Event), Problems),
    security(("sigv4" = []))
)]
pub(crate) async fn get_event(
    State(deps): State<ApiDeps>,
    ApiPath(p): ApiPath<EventPath>,
) -> ApiResult<Json<Event>> {
    let tenant = tenant(&p.tenant_id)?;
    let id = event_id(&p.event_id)?;
    let event = deps.events.get(&tenant, &id).await?;
    let endpoints = tenant_endpoints(&deps, &tenant).await?;
    // Another tenant's pairs are left out: their endpoints are not this tenant's.
    let states: Vec<_> = deps
        .ledger
        .pair_states(&tenant, &id)
        .await?
        .into_iter()
        .filter(|s| endpoints.contains_key(&s.endpoint_id))
        .collect();
    if event.is_none() && states.is_empty() {
        return Err(ApiError::not_found("event", &id));
    }
    let mut deliveries: BTreeMap<EndpointId, DeliveryStatus> = BTreeMap::new();
    if let Some(e) = &event {
        for endpoint in endpoints.values().filter(|ep| ep.subscribes(e)) {
            deliveries.insert(
                endpoint.id.clone(),
                DeliveryStatus {
                    endpoint_id: endpoint.id.to_string(),
                    state: DeliveryState::Pending,
                    replay_count: None,
                    attempt: None,
                    delivered_at: None,
                },
            );
        }
    }
    for s in states {
        let state = match s.state {
            None => DeliveryState::InFlight,
            Some(LedgerState::Retrying) => DeliveryState::Retrying,
            Some(LedgerState::Delivered) => DeliveryState::Delivered,
            Some(LedgerState::DeadLettered) => DeliveryState::DeadLettered,
        };
        deliveries.insert(
            s.endpoint_id.clone(),
            DeliveryStatus {
                endpoint_id: s.endpoint_id.to_string(),
                state,
                replay_count: Some(s.replay_count),
                attempt: Some(s.attempt),
                delivered_at: s.delivered_at,
            },
        );
    }
    Ok(Json(Event {
        id: id.to_string(),
        tenant_id: tenant.to_string(),
        event_type: event.as_ref().map(|e| e.event_type.to_string()),
        created_at: event.as_ref().map(|e| e.created_at),
        payload: event
            .as_ref()
            .and_then(|e| RawValue::from_string(e.payload.as_str().to_owned()).ok()),
        deliveries: deliveries.into_values().collect(),
    }))
}

/// Every attempt of the event to the tenant's endpoints, oldest first, with error texts and
/// response excerpts, and the budgets that ended in the DLQ.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant_id}/events/{event_id}/attempts",
    operation_id = "listEventAttempts",
    tag = "events",
    params(
        ("tenant_id" = String, Path, description = "Tenant id: 1-128 ASCII letters, digits, `_` and `-` (`tern_core::ids::MAX_ID_LEN`); another is a 400 naming `tenant_id`", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$"),
        ("event_id" = String, Path, description = "Event id: 1-128 ASCII letters, digits, `_` and `-`; another, like an unknown id, is a 404", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$")
    ),
    responses((status = 200, description = "The attempts", body = EventAttempts), Problems),
    security(("sigv4" = []))
)]
pub(crate) async fn list_event_attempts(
    State(deps): State<ApiDeps>,
    ApiPath(p): ApiPath<EventPath>,
) -> ApiResult<Json<EventAttempts>> {
    let tenant = tenant(&p.tenant_id)?;
    let id = event_id(&p.event_id)?;
    let endpoints = tenant_endpoints(&deps, &tenant).await?;
    let rows: Vec<_> = deps
        .ledger
        .history(&tenant, &id)
        .await?
        .into_iter()
        .filter(|r| endpoints.contains_key(&r.endpoint_id))
        .collect();
    if rows.is_empty() {
        // No attempt yet, or not this tenant's event: only the outbox can tell.
        let own = deps.events.get(&tenant, &id).await?.is_some();
        if !own {
            return Err(ApiError::not_found("event", &id));
        }
    }
    let report =
        tern_ops::attempts::report_scaled(id.as_str(), None, &rows, deps.settings.time_scale);
    Ok(Json(EventAttempts {
        event_id: report.event_id,
        attempts: report
            .attempts
            .into_iter()
            .map(|a| Attempt {
                endpoint_id: a.endpoint_id,
                replay_count: a.replay_count,
                attempt: a.attempt,
                takeover: a.takeover,
                started_at: a.started_at,
                latency_ms: a.latency_ms,
                status: a.status,
                outcome: a.outcome,
                error: a.error,
                response_excerpt: a.response_excerpt,
                excerpt_truncated: a.excerpt_truncated,
                location: a.location,
                next_wait_seconds: a.next_wait_seconds,
                next_attempt_due_at: a.next_attempt_due_at,
            })
            .collect(),
        dead_letters: report
            .dead_letters
            .into_iter()
            .map(|d| DeadLetteredBudget {
                endpoint_id: d.endpoint_id,
                replay_count: d.replay_count,
                reason: d.reason,
                dead_lettered_at: d.dead_lettered_at,
                replayed_since: d.replayed_since,
            })
            .collect(),
    }))
}

/// Send the event to the endpoint again, delivered before or not: the same `webhook-id`,
/// a fresh attempt budget, recorded as a replay.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant_id}/events/{event_id}/endpoints/{endpoint_id}/resend",
    operation_id = "resendEvent",
    tag = "events",
    params(
        ("tenant_id" = String, Path, description = "Tenant id: 1-128 ASCII letters, digits, `_` and `-` (`tern_core::ids::MAX_ID_LEN`); another is a 400 naming `tenant_id`", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$"),
        ("event_id" = String, Path, description = "Event id: 1-128 ASCII letters, digits, `_` and `-`; another, like an unknown id, is a 404", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$"),
        ("endpoint_id" = String, Path, description = "Endpoint id: 1-128 ASCII letters, digits, `_` and `-`; another, like an unknown or another tenant's id, is a 404", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$")
    ),
    responses((status = 202, description = "Queued", body = Resend), Problems, Conflict),
    security(("sigv4" = []))
)]
pub(crate) async fn resend_event(
    State(deps): State<ApiDeps>,
    ApiPath(p): ApiPath<EventEndpointPath>,
) -> ApiResult<(StatusCode, Json<Resend>)> {
    let tenant = tenant(&p.tenant_id)?;
    let event = event_id(&p.event_id)?;
    let endpoint = endpoint_id(&p.endpoint_id)?;
    let resent = tern_ops::resend::resend(
        &ResendDeps {
            events: deps.events.as_ref(),
            ledger: deps.ledger.as_ref(),
            endpoints: deps.endpoints.as_ref(),
            delivery_queue: deps.queues.delivery_queue.as_ref(),
        },
        &tenant,
        &event,
        &endpoint,
    )
    .await
    .map_err(|e| match e {
        ResendError::EndpointNotFound(id) => ApiError::not_found("endpoint", id),
        ResendError::EventNotFound(id) => ApiError::new(
            Kind::NotFound,
            format!("event {id} not found (the outbox keeps an event's payload 7 days by default)"),
        ),
        ResendError::NotSubscribed { .. } => ApiError::new(Kind::NotSubscribed, e.to_string()),
        ResendError::EndpointDisabled(_) => ApiError::new(Kind::EndpointDisabled, e.to_string()),
        ResendError::Port(p) => p.into(),
    })?;
    Ok((StatusCode::ACCEPTED, Json(Resend::from(resent))))
}
