//! `/v1/tenants/{tenant_id}/dead-letters...`: the tenant's dead letters grouped by endpoint
//! and reason (`tern dlq`), and a replay with filters (`tern replay`), always confined to
//! the tenant. The DLQ is shared by every tenant: a read goes through other tenants'
//! messages (hidden while read, then made visible again) and counts them only in `read`.

use std::sync::Arc;

use async_trait::async_trait;
use axum::Json;
use axum::extract::State;
use tern_core::ports::{EndpointStore, PortError};
use tern_core::{DeadLetterReason, Endpoint, EndpointId, EventId, EventType, TenantId};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::replay::{ReplayFilters, ReplayRequest as HandlerRequest};

use super::{Conflict, Problems, TenantPath};
use crate::ApiDeps;
use crate::extract::{ApiJson, ApiPath, ApiQuery, tenant};
use crate::model::{
    DeadLetter, DeadLetterGroup, DeadLetterGroups, DeadLettersQuery, ReplayReport, ReplayRequest,
};
use crate::problem::{ApiError, ApiResult, Kind};

/// Default most DLQ messages read for the grouped view: 100.
pub const DEFAULT_DLQ_READ: u32 = 100;
/// Most DLQ messages read for the grouped view: 500 (`tern_console::MAX_DEAD_LETTERS_READ`).
pub const MAX_DLQ_READ: u32 = 500;
/// Time budget of a read of the DLQ by the API: 10 s (no receive starts after it). With a
/// replay's 10 s after it, a route answers within API Gateway's 30 s.
pub const DLQ_READ_BUDGET: std::time::Duration = std::time::Duration::from_secs(10);

/// Time budget of one API replay, in seconds: 10 (the answer comes within API Gateway's
/// 30 s; a larger DLQ reports `stopped: time_budget`: call again).
pub const API_REPLAY_SECONDS: u32 = tern_ops::recover::RECOVER_REPLAY_SECONDS;

/// This tenant's dead letters, grouped by endpoint and reason, largest group first.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant_id}/dead-letters",
    operation_id = "listDeadLetters",
    tag = "dead-letters",
    params(("tenant_id" = String, Path, description = "Tenant id"), DeadLettersQuery),
    responses((status = 200, description = "The groups", body = DeadLetterGroups), Problems),
    security(("sigv4" = []))
)]
pub(crate) async fn list_dead_letters(
    State(deps): State<ApiDeps>,
    ApiPath(p): ApiPath<TenantPath>,
    ApiQuery(q): ApiQuery<DeadLettersQuery>,
) -> ApiResult<Json<DeadLetterGroups>> {
    let tenant = tenant(&p.tenant_id)?;
    let max = q.max.unwrap_or(DEFAULT_DLQ_READ);
    if !(1..=MAX_DLQ_READ).contains(&max) {
        return Err(ApiError::invalid(
            "max",
            format!("max must be 1 to {MAX_DLQ_READ}"),
        ));
    }
    let max = usize::try_from(max).unwrap_or(usize::MAX);
    let read = tern_ops::peek_within(deps.queues.dlq.as_ref(), max, DLQ_READ_BUDGET).await?;
    let views: Vec<_> = read
        .iter()
        .map(tern_ops::dlq::view)
        .filter(|v| v.tenant_id.as_deref() == Some(tenant.as_str()))
        .collect();
    let groups = tern_ops::dlq::group(&views)
        .into_iter()
        .map(|g| DeadLetterGroup {
            endpoint_id: g.endpoint_id,
            reason: g.reason,
            count: g.count,
            oldest: g.oldest,
            newest: g.newest,
            last_status: g.last_status,
            last_error: g.last_error,
            sample: DeadLetter {
                event_id: g.sample.event_id,
                event_type: g.sample.event_type,
                endpoint_id: g.sample.endpoint_id,
                reason: g.sample.reason,
                last_status: g.sample.last_status,
                last_error: g.sample.last_error,
                attempts: g.sample.attempts,
                dead_lettered_at: g.sample.dead_lettered_at,
                replay_count: g.sample.replay_count,
                payload_sample: g.sample.payload_sample,
                payload_truncated: g.sample.payload_truncated,
            },
        })
        .collect();
    Ok(Json(DeadLetterGroups {
        read: read.len(),
        matched: views.len(),
        truncated: read.len() >= max,
        groups,
    }))
}

/// The endpoint registry seen from one tenant: "every endpoint" is the tenant's, so the
/// replay's target check (`tern_ops::replay_check`) never reads another tenant's.
struct TenantEndpoints {
    inner: Arc<dyn EndpointStore>,
    tenant: TenantId,
}

#[async_trait]
impl EndpointStore for TenantEndpoints {
    async fn get(&self, tenant: &TenantId, id: &EndpointId) -> Result<Option<Endpoint>, PortError> {
        if *tenant == self.tenant {
            self.inner.get(tenant, id).await
        } else {
            Ok(None)
        }
    }
    async fn list_for_tenant(&self, tenant: &TenantId) -> Result<Vec<Endpoint>, PortError> {
        if *tenant == self.tenant {
            self.inner.list_for_tenant(tenant).await
        } else {
            Ok(Vec::new())
        }
    }
    async fn list_all(&self) -> Result<Vec<Endpoint>, PortError> {
        self.inner.list_for_tenant(&self.tenant).await
    }
    async fn put(&self, _: &Endpoint) -> Result<(), PortError> {
        Err(PortError::Rejected("read-only view".into()))
    }
    async fn disable(&self, _: &TenantId, _: &EndpointId, _: &str) -> Result<(), PortError> {
        Err(PortError::Rejected("read-only view".into()))
    }
    async fn set_secrets(
        &self,
        _: &TenantId,
        _: &EndpointId,
        _: &[tern_core::EndpointSecret],
    ) -> Result<(), PortError> {
        Err(PortError::Rejected("read-only view".into()))
    }
}

fn filters(tenant: &TenantId, body: &ReplayRequest) -> ApiResult<ReplayFilters> {
    Ok(ReplayFilters {
        tenant_id: Some(tenant.clone()),
        endpoint_id: body
            .endpoint_id
            .as_deref()
            .map(EndpointId::new)
            .transpose()
            .map_err(|e| ApiError::invalid("endpoint_id", e.to_string()))?,
        event_type: body
            .event_type
            .as_deref()
            .map(EventType::new)
            .transpose()
            .map_err(|e| ApiError::invalid("event_type", e.to_string()))?,
        reason: body
            .reason
            .as_deref()
            .map(str::parse::<DeadLetterReason>)
            .transpose()
            .map_err(|e| ApiError::invalid("reason", e))?,
        event_id: body
            .event_id
            .as_deref()
            .map(EventId::new)
            .transpose()
            .map_err(|e| ApiError::invalid("event_id", e.to_string()))?,
        dead_lettered_since: body.dead_lettered_since,
        dead_lettered_until: body.dead_lettered_until,
    })
}

/// Replay this tenant's dead letters that match the filters: each goes back to the
/// delivery queue with a fresh attempt budget and its `webhook-id`. Refused (409) when a
/// matching dead letter's endpoint is disabled or deleted, unless `force`.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant_id}/dead-letters/replay",
    operation_id = "replayDeadLetters",
    tag = "dead-letters",
    params(("tenant_id" = String, Path, description = "Tenant id")),
    request_body = ReplayRequest,
    responses((status = 200, description = "What moved", body = ReplayReport), Problems, Conflict),
    security(("sigv4" = []))
)]
pub(crate) async fn replay_dead_letters(
    State(deps): State<ApiDeps>,
    ApiPath(p): ApiPath<TenantPath>,
    ApiJson(body): ApiJson<ReplayRequest>,
) -> ApiResult<Json<ReplayReport>> {
    let tenant = tenant(&p.tenant_id)?;
    let filters = filters(&tenant, &body)?;
    if !body.dry_run && !body.force {
        let view = TenantEndpoints {
            inner: deps.endpoints.clone(),
            tenant: tenant.clone(),
        };
        let bad = tern_ops::replay_check::bad_targets_within(
            deps.queues.dlq.as_ref(),
            &view,
            &filters,
            usize::try_from(MAX_DLQ_READ).unwrap_or(usize::MAX),
            DLQ_READ_BUDGET,
        )
        .await?;
        if !bad.is_empty() {
            return Err(ApiError::new(
                Kind::EndpointDisabled,
                format!(
                    "not replayed: these endpoints cannot take their dead letters now (enable them, or send force: true):{}",
                    tern_ops::replay_check::list(&bad)
                ),
            ));
        }
    }
    let metrics = Metrics::new("Tern", MetricsSink::Discard);
    let summary = tern_handlers::replay::handle(
        &deps.queues,
        HandlerRequest {
            dry_run: body.dry_run,
            max_messages: Some(tern_handlers::replay::DEFAULT_MAX_MESSAGES),
            max_seconds: Some(API_REPLAY_SECONDS),
            filters,
        },
        &metrics,
    )
    .await?;
    Ok(Json(ReplayReport::from(summary)))
}
