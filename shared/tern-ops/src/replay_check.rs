//! Before a replay: the endpoints its dead letters would go to that cannot take them now.
//! A delivery replayed to a disabled or deleted endpoint is dead-lettered again at once
//! (a bounce), so `tern replay` refuses such a replay unless forced, and the console's
//! Replay button refuses it (the endpoint is enabled first, from the Endpoints widget).
//! One check, here, for both.

use serde::Serialize;
use tern_core::EndpointId;
use tern_core::ports::{DeliveryLedger, EndpointStore, PortError};
use tern_handlers::replay::{ReplayFilters, record_matches};

/// An endpoint a replay would send dead letters to that cannot take them. Field names are
/// the `--json` contract of `tern replay` (`bad_targets`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BadTarget {
    /// The endpoint.
    pub endpoint_id: String,
    /// Why replaying to it now is pointless, and what to do first.
    pub problem: String,
}

/// The endpoints the dead letters matching `filters` would go to that are disabled or
/// unknown (deleted, or never existed). With an endpoint filter that endpoint is the only
/// target; otherwise the targets come from the dead-letter record (of the filter's tenant,
/// or of every tenant in the registry: [`crate::dlq::read_record`], at most `max`
/// entries). The DLQ itself is never read, so the check hides nothing from anyone.
///
/// # Errors
/// The record or the endpoint registry could not be read.
pub async fn bad_targets(
    ledger: &dyn DeliveryLedger,
    endpoints: &dyn EndpointStore,
    filters: &ReplayFilters,
    max: usize,
) -> Result<Vec<BadTarget>, PortError> {
    let mut targets: Vec<EndpointId> = match &filters.endpoint_id {
        Some(e) => vec![e.clone()],
        None => crate::dlq::read_record(ledger, endpoints, filters.tenant_id.as_ref(), None, max)
            .await?
            .entries
            .into_iter()
            .filter(|r| record_matches(filters, r))
            .map(|r| r.endpoint_id)
            .collect(),
    };
    targets.sort();
    targets.dedup();
    if targets.is_empty() {
        return Ok(Vec::new());
    }
    let known = endpoints.list_all().await?;
    Ok(targets
        .into_iter()
        .filter_map(|id| {
            let problem = match known.iter().find(|e| e.id == id) {
                None => "unknown (deleted, or never existed): deliveries dead-letter again as endpoint_deleted".to_owned(),
                Some(e) if !e.enabled => format!(
                    "disabled ({}): deliveries dead-letter again as endpoint_disabled; `tern endpoints enable {id}` first",
                    e.disabled_reason.as_deref().unwrap_or("no reason recorded")
                ),
                Some(_) => return None,
            };
            Some(BadTarget {
                endpoint_id: id.to_string(),
                problem,
            })
        })
        .collect())
}

/// One line per bad target, each `\n  endpoint <id>: <problem>`.
pub fn list(bad: &[BadTarget]) -> String {
    bad.iter()
        .map(|b| format!("\n  endpoint {}: {}", b.endpoint_id, b.problem))
        .collect()
}
