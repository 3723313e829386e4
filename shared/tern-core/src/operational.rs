//! Operational events: what Tern tells an endpoint's owner when the endpoint's health
//! changes (`endpoint.degraded`, `endpoint.disabled`, `endpoint.recovered`), like the
//! operational webhooks of hosted webhook services. Published to an SNS topic with a
//! `tenant_id` message attribute (each owner subscribes with a filter policy) and written
//! to the tenant's outbox as a Tern event of type `tern.<kind>`, so a tenant can have it
//! delivered to another endpoint of theirs.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::{EndpointId, TenantId};
use crate::ports::PortError;

/// Prefix of the Tern event types operational events are delivered as (`tern.endpoint.disabled`).
pub const TERN_EVENT_TYPE_PREFIX: &str = "tern.";

/// Which change of an endpoint's health an event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OperationalEventKind {
    /// Success rate below the degraded threshold (95 % by default) over the window; sent
    /// at most once per window.
    #[serde(rename = "endpoint.degraded")]
    Degraded,
    /// Disabled automatically (success rate below the disable threshold, 50 % by default,
    /// with enough attempts). Deliveries dead-letter `endpoint_disabled` until
    /// `tern endpoints enable`.
    #[serde(rename = "endpoint.disabled")]
    Disabled,
    /// Back to normal: a probe succeeded and closed the circuit, or the success rate rose
    /// above the degraded threshold again.
    #[serde(rename = "endpoint.recovered")]
    Recovered,
}

impl OperationalEventKind {
    /// Every kind.
    pub const ALL: [Self; 3] = [Self::Degraded, Self::Disabled, Self::Recovered];

    /// `endpoint.degraded`, ...: the `type` field and the SNS `event_type` attribute.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Degraded => "endpoint.degraded",
            Self::Disabled => "endpoint.disabled",
            Self::Recovered => "endpoint.recovered",
        }
    }

    /// The Tern event type it is delivered as through the outbox: `tern.endpoint.disabled`.
    pub fn tern_event_type(self) -> String {
        format!("{TERN_EVENT_TYPE_PREFIX}{}", self.as_str())
    }
}

impl std::fmt::Display for OperationalEventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One operational event. Serialized as the SNS message and the outbox event's payload:
/// `{"type":"endpoint.disabled","tenant_id":...,"endpoint_id":...,"url":...,"reason":...,
/// "last_status":503,"last_success_at":"...","success_rate":0.12,"attempts":25,
/// "window_seconds":3600,"at":"..."}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperationalEvent {
    /// What changed.
    #[serde(rename = "type")]
    pub kind: OperationalEventKind,
    /// The endpoint's tenant (the SNS `tenant_id` attribute).
    pub tenant_id: TenantId,
    /// The endpoint.
    pub endpoint_id: EndpointId,
    /// The endpoint's URL with its query string and fragment removed ([`redact_url`]):
    /// tokens often ride in the query.
    pub url: String,
    /// Human-readable cause (`auto_disabled: 12 % success over 1 h, last status 503`).
    pub reason: String,
    /// HTTP status of the last failed attempt, when it got an answer.
    pub last_status: Option<u16>,
    /// Error of the last failed attempt (`timeout: ...`), bounded, when there was one.
    pub last_error: Option<String>,
    /// When a delivery to this endpoint last succeeded, if ever (within the health record).
    pub last_success_at: Option<DateTime<Utc>>,
    /// Successes / attempts over the window, 0.0..=1.0; `None` without attempts.
    pub success_rate: Option<f64>,
    /// Attempts counted in the window.
    pub attempts: u64,
    /// The window the rate covers, in seconds (3600 by default).
    pub window_seconds: u64,
    /// When the change was decided.
    pub at: DateTime<Utc>,
}

impl OperationalEvent {
    /// A deterministic id for the outbox event: the same change reported twice (a retried
    /// call) gets the same id, so receivers can deduplicate. Shape:
    /// `op_<kind>_<endpoint>_<unix seconds of at>`, reduced to the event-id alphabet.
    pub fn event_id_text(&self) -> String {
        let raw = format!(
            "op_{}_{}_{}",
            self.kind.as_str().replace('.', "_"),
            self.endpoint_id,
            self.at.timestamp()
        );
        raw.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .take(128)
            .collect()
    }

    /// The event as JSON text (the SNS message and the outbox payload).
    pub fn to_json(&self) -> String {
        // Serializing plain fields (strings, numbers, dates) cannot fail.
        serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
    }
}

/// `url` without its query string, fragment or credentials: `https://h.example/hook?token=x`
/// becomes `https://h.example/hook?…`. A URL that does not parse is cut at the first `?`
/// or `#`.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            let had_query = u.query().is_some();
            u.set_query(None);
            u.set_fragment(None);
            let _ = u.set_username("");
            let _ = u.set_password(None);
            let mut s = u.to_string();
            if had_query {
                s.push_str("?…");
            }
            s
        }
        Err(_) => url.split(['?', '#']).next().unwrap_or("").to_owned(),
    }
}

/// Where operational events go (SNS in AWS, plus the tenant's outbox).
#[async_trait]
pub trait OperationalEventSink: Send + Sync {
    /// Publishes one event. [`PortError::Unavailable`] when the service could not be
    /// reached; the caller logs it and goes on (an unreported change is not a lost delivery).
    async fn publish(&self, event: &OperationalEvent) -> Result<(), PortError>;
}

/// Publishes to every sink in turn; the first error is returned after all were tried.
pub struct FanOut(pub Vec<std::sync::Arc<dyn OperationalEventSink>>);

#[async_trait]
impl OperationalEventSink for FanOut {
    async fn publish(&self, event: &OperationalEvent) -> Result<(), PortError> {
        let mut first_error = None;
        for sink in &self.0 {
            if let Err(e) = sink.publish(event).await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_query_fragment_and_credentials() {
        assert_eq!(
            redact_url("https://u:p@h.example/hook?token=abc#x"),
            "https://h.example/hook?…"
        );
        assert_eq!(redact_url("https://h.example/a"), "https://h.example/a");
        assert_eq!(redact_url("not a url?secret"), "not a url");
    }

    #[test]
    fn kinds_name_their_tern_event_types() {
        assert_eq!(
            OperationalEventKind::Disabled.tern_event_type(),
            "tern.endpoint.disabled"
        );
        let json = serde_json::to_value(OperationalEventKind::Recovered).unwrap();
        assert_eq!(json, "endpoint.recovered");
    }
}
