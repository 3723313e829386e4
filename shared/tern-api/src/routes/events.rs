//! `/v1/tenants/{tenant_id}/events...`: publish (one event, or a batch at
//! `/event-batches`), one event with its deliveries, its attempts, and a resend to one
//! endpoint.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::value::RawValue;
use tern_core::ports::DeliveryState as LedgerState;
use tern_core::{EndpointId, EventId, PayloadError, TenantId, TraceContext, TraceContextError};
use tern_ops::publish::{
    BatchEvent, BatchEventError, MAX_BATCH_EVENTS, PublishError, PublishOutcome,
};
use tern_ops::resend::{ResendDeps, ResendError};

use super::{Conflict, EventEndpointPath, EventPath, Problems, TenantPath};
use crate::ApiDeps;
use crate::extract::{ApiJson, ApiPath, endpoint_id, event_id, tenant};
use crate::model::{
    Attempt, DeadLetteredBudget, DeliveryState, DeliveryStatus, Event, EventAttempts,
    EventBatchResult, NewEvent, NewEventBatch, PublishedEvent, PublishedEventBatch, Resend,
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
    headers: HeaderMap,
    ApiPath(p): ApiPath<TenantPath>,
    ApiJson(body): ApiJson<NewEvent>,
) -> ApiResult<(StatusCode, Json<PublishedEvent>)> {
    let tenant = tenant(&p.tenant_id)?;
    let trace = publish_trace_context(&body, &headers)?;
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
        trace,
    )
    .await
    .map_err(|e| publish_problem(e, ""))?;
    let (status, published) = published(&outcome);
    Ok((status, Json(published)))
}

/// A refused publish as a problem; `prefix` goes before the field's name (`events[3].`
/// for an event of a batch).
fn publish_problem(e: PublishError, prefix: &str) -> ApiError {
    let field = |name: &str| format!("{prefix}{name}");
    match e {
        PublishError::Payload(PayloadError::BadEventType(_)) => {
            ApiError::invalid(field("type"), e.to_string())
        }
        PublishError::Payload(PayloadError::TooLarge { .. }) => {
            ApiError::new(Kind::PayloadTooLarge, e.to_string()).with_field(field("payload"))
        }
        PublishError::Payload(_) => ApiError::invalid(field("payload"), e.to_string()),
        PublishError::Id(_) => ApiError::invalid(field("id"), e.to_string()),
        PublishError::Conflict(_) => {
            ApiError::new(Kind::EventIdConflict, e.to_string()).with_field(field("id"))
        }
        PublishError::Port(p) => p.into(),
    }
}

/// A publish's status (202 new, 200 a repeat) and the event as answered.
fn published(outcome: &PublishOutcome) -> (StatusCode, PublishedEvent) {
    let (status, created) = match outcome {
        PublishOutcome::Created(_) => (StatusCode::ACCEPTED, true),
        PublishOutcome::Repeated(_) => (StatusCode::OK, false),
    };
    let e = outcome.event();
    (
        status,
        PublishedEvent {
            id: e.id.to_string(),
            event_type: e.event_type.to_string(),
            tenant_id: e.tenant_id.to_string(),
            created_at: e.created_at,
            created,
        },
    )
}

/// Publish up to 100 events in one request, each as `publishEvent` publishes one (the same
/// checks and limits, idempotent on its `id`), each on its own: one event's problem does
/// not stop the others. The answer is 200 with a result per event, in order, whose `status`
/// is what `publishEvent` would have answered for it (202, 200, or its problem's); `failed`
/// counts the events not published. A body that is not a batch (no `events`, 0 or more
/// than 100, an event without `type` or `payload`, a bad `traceparent` or `tracestate`)
/// is refused whole, nothing written.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant_id}/event-batches",
    operation_id = "publishEventBatch",
    tag = "events",
    params(("tenant_id" = String, Path, description = "Tenant id: 1-128 ASCII letters, digits, `_` and `-` (`tern_core::ids::MAX_ID_LEN`); another is a 400 naming `tenant_id`", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$")),
    request_body(
        content = NewEventBatch,
        description = "1-100 events; the whole body at most 2,621,440 bytes (`x-max-body-bytes`), each payload at most the deployment's payload limit (256 KiB by default)."
    ),
    responses(
        (status = 200, description = "Each event's result, in order; `failed` counts those not published (retry them, with the ids answered)", body = PublishedEventBatch),
        Problems
    ),
    security(("sigv4" = []))
)]
pub(crate) async fn publish_event_batch(
    State(deps): State<ApiDeps>,
    headers: HeaderMap,
    ApiPath(p): ApiPath<TenantPath>,
    ApiJson(body): ApiJson<NewEventBatch>,
) -> ApiResult<Json<PublishedEventBatch>> {
    let tenant = tenant(&p.tenant_id)?;
    if body.events.is_empty() || body.events.len() > MAX_BATCH_EVENTS {
        return Err(ApiError::invalid(
            "events",
            format!(
                "a batch holds 1 to {MAX_BATCH_EVENTS} events, this one {}",
                body.events.len()
            ),
        ));
    }
    // Each event's trace context, as `publishEvent` takes it: a bad one is the body's
    // form, not the event's content, so it refuses the whole batch (400 naming
    // `events[i].traceparent`), nothing written.
    let traces = body
        .events
        .iter()
        .enumerate()
        .map(|(i, e)| trace_context(e, &headers, &format!("events[{i}].")))
        .collect::<ApiResult<Vec<Option<TraceContext>>>>()?;
    // Each event's id: the one given, or one made now, so that an event whose write failed
    // can be sent again with it (an error: the id given is bad, that event's problem).
    let ids: Vec<Result<(EventId, Option<TraceContext>), ApiError>> = body
        .events
        .iter()
        .zip(traces)
        .enumerate()
        .map(|(i, (e, trace))| {
            let id = e.id.as_deref().map_or_else(
                || Ok(EventId::generate()),
                |given| {
                    EventId::new(given).map_err(|err| {
                        ApiError::invalid(format!("events[{i}].id"), err.to_string())
                    })
                },
            )?;
            Ok((id, trace))
        })
        .collect();
    let (batch, at): (Vec<BatchEvent<'_>>, Vec<usize>) = body
        .events
        .iter()
        .zip(&ids)
        .enumerate()
        .filter_map(|(i, (e, id))| {
            id.as_ref().ok().map(|(id, trace)| {
                (
                    BatchEvent {
                        id,
                        event_type: &e.event_type,
                        payload: e.payload.get(),
                        trace: trace.as_ref(),
                    },
                    i,
                )
            })
        })
        .unzip();
    let outcomes = tern_ops::publish::publish_batch(
        deps.events.as_ref(),
        &tenant,
        &batch,
        deps.settings.max_payload_bytes,
    )
    .await;
    let mut results: Vec<Option<EventBatchResult>> = ids
        .iter()
        .map(|id| {
            id.as_ref().err().map(|problem| EventBatchResult {
                id: None,
                status: problem.kind.status().as_u16(),
                event: None,
                problem: Some(problem.problem()),
            })
        })
        .collect();
    for ((outcome, i), event) in outcomes.into_iter().zip(at).zip(&batch) {
        let id = Some(event.id.to_string());
        results[i] = Some(match outcome {
            Ok(o) => {
                let (status, published) = published(&o);
                EventBatchResult {
                    id,
                    status: status.as_u16(),
                    event: Some(published),
                    problem: None,
                }
            }
            Err(e) => {
                let problem = match e {
                    BatchEventError::Publish(p) => publish_problem(p, &format!("events[{i}].")),
                    BatchEventError::RepeatedInBatch { .. } => {
                        ApiError::invalid(format!("events[{i}].id"), e.to_string())
                    }
                };
                EventBatchResult {
                    id,
                    status: problem.kind.status().as_u16(),
                    event: None,
                    problem: Some(problem.problem()),
                }
            }
        });
    }
    let results: Vec<EventBatchResult> = results.into_iter().flatten().collect();
    let count = |f: &dyn Fn(u16) -> bool| {
        u32::try_from(results.iter().filter(|r| f(r.status)).count()).unwrap_or(u32::MAX)
    };
    let created = count(&|s| s == StatusCode::ACCEPTED.as_u16());
    let existing = count(&|s| s == StatusCode::OK.as_u16());
    let failed = count(&|s| s >= 300);
    if failed > 0 {
        tracing::info!(
            tenant = %tenant,
            events = results.len(),
            failed,
            "a batch publish left events unpublished"
        );
    }
    Ok(Json(PublishedEventBatch {
        results,
        created,
        existing,
        failed,
    }))
}

/// The trace context a publish carries: the body's `traceparent` and `tracestate` (a bad
/// one is the caller's error, a 400 naming the field), else the request's own headers when
/// they are valid (put there by the caller's HTTP instrumentation or a proxy; a bad header
/// is not the caller's choice, so it is ignored), else none.
fn publish_trace_context(body: &NewEvent, headers: &HeaderMap) -> ApiResult<Option<TraceContext>> {
    trace_context(body, headers, "")
}

/// [`publish_trace_context`] with `prefix` before the field a problem names (`events[3].`
/// for an event of a batch).
fn trace_context(
    body: &NewEvent,
    headers: &HeaderMap,
    prefix: &str,
) -> ApiResult<Option<TraceContext>> {
    match (&body.traceparent, &body.tracestate) {
        (Some(parent), state) => TraceContext::parse(parent, state.as_deref())
            .map(Some)
            .map_err(|e| {
                let field = match e {
                    TraceContextError::TraceStateLength(_)
                    | TraceContextError::TraceStateMembers(_)
                    | TraceContextError::TraceStateMember(_) => "tracestate",
                    _ => "traceparent",
                };
                ApiError::invalid(format!("{prefix}{field}"), e.to_string())
            }),
        (None, state) => {
            // A tracestate belongs to its traceparent (W3C Trace Context §3.3: without a
            // traceparent it is not read): checked as the document bounds it, then not used.
            if let Some(state) = state {
                tern_core::trace_context::check_tracestate(state)
                    .map_err(|e| ApiError::invalid(format!("{prefix}tracestate"), e.to_string()))?;
            }
            let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
            Ok(header("traceparent")
                .and_then(|parent| TraceContext::parse(parent, header("tracestate")).ok()))
        }
    }
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
