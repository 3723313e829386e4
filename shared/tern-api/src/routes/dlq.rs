//! `/v1/tenants/{tenant_id}/dead-letters...`: the tenant's dead letters grouped by endpoint
//! and reason (`tern dlq`), and a replay with filters (`tern replay`), always confined to
//! the tenant. The DLQ is shared by every tenant, so a list, a dry run and the target
//! check read the tenant's dead-letter record ([`tern_core::dead_letters`]) and never
//! receive a message: one tenant reading never hides another's dead letters. A replay
//! receives the DLQ and makes every message it does not take visible again at once.

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

/// Default most dead letters listed in the grouped view: 100.
pub const DEFAULT_DLQ_READ: u32 = 100;
/// Most dead letters listed in the grouped view, and read by the replay's target check:
/// 500 (`tern_console::MAX_DEAD_LETTERS_READ`).
pub const MAX_DLQ_READ: u32 = 500;

/// Time budget of one API replay, in seconds: 10 (the answer comes within API Gateway's
/// 30 s; a larger DLQ reports `stopped: time_budget`: call again).
pub const API_REPLAY_SECONDS: u32 = tern_ops::recover::RECOVER_REPLAY_SECONDS;

/// This tenant's dead letters, grouped by endpoint and reason, largest group first.
///
/// Read from the tenant's dead-letter record, never from the shared DLQ: a list hides nothing
/// from another tenant's list or replay. Messages SQS moved to the DLQ itself (after its
/// `maxReceiveCount`) are not in the record.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant_id}/dead-letters",
    operation_id = "listDeadLetters",
    tag = "dead-letters",
    params(("tenant_id" = String, Path, description = "Tenant id: 1-128 ASCII letters, digits, `_` and `-` (`tern_core::ids::MAX_ID_LEN`); another is a 400 naming `tenant_id`", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$"), DeadLettersQuery),
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
    let view = TenantEndpoints {
        inner: deps.endpoints.clone(),
        tenant: tenant.clone(),
    };
    let record =
        tern_ops::dlq::read_record(deps.ledger.as_ref(), &view, Some(&tenant), None, max).await?;
    let views: Vec<_> = record
        .entries
        .iter()
        .map(tern_ops::dlq::recorded_view)
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
        read: record.read,
        matched: views.len(),
        truncated: !record.complete,
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
    params(("tenant_id" = String, Path, description = "Tenant id: 1-128 ASCII letters, digits, `_` and `-` (`tern_core::ids::MAX_ID_LEN`); another is a 400 naming `tenant_id`", min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$")),
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
        let bad = tern_ops::replay_check::bad_targets(
            deps.ledger.as_ref(),
            &view,
            &filters,
            usize::try_from(MAX_DLQ_READ).unwrap_or(usize::MAX),
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
