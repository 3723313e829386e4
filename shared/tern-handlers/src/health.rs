//! The sender's side of endpoint health (`tern_core::health`): before a batch's POSTs,
//! the gate of every endpoint it touches (closed, probe due, or open); after them, one
//! health write per endpoint and the transitions it calls for (open, close, degraded,
//! recovered, auto-disable), each applied by a conditional write so that of concurrent
//! senders exactly one acts and reports it.
//!
//! Health is advisory: when the health table cannot be read, deliveries go out as if the
//! circuit were closed; when it cannot be written, the batch's counts are lost and logged.
//! Neither ever fails a message.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tern_core::health::{
    EndpointHealth, Gate, HealthChange, HealthDelta, HealthPolicy, HealthStore, LastFailure,
    Transition, gate,
};
use tern_core::operational::{
    OperationalEvent, OperationalEventKind, OperationalEventSink, redact_url,
};
use tern_core::ports::{EndpointStore, PortError};
use tern_core::{Endpoint, EndpointId, TenantId};

use crate::metrics::Metrics;

/// How long a sender instance serves an endpoint's health record from memory, in seconds,
/// unless `TERN_HEALTH_CACHE_SECONDS` says otherwise. A record this instance writes
/// replaces its copy at once; the TTL bounds how late it learns of a circuit another
/// instance opened or closed (until then it sends one more batch, whose write tells it).
pub const DEFAULT_HEALTH_CACHE_SECONDS: u64 = 5;

/// Longest wait for the health read and the probe claim before a batch's POSTs, in
/// milliseconds. Health is advisory: a table that does not answer in time counts as a
/// closed circuit (a lost probe claim as an open one), so a stalled table delays a batch
/// by at most this, not by the SDK's 6 s call budget (`tern_aws::budget`). DynamoDB answers
/// in single-digit milliseconds.
pub const HEALTH_GATE_DEADLINE_MS: u64 = 1_000;

/// `(tenant, endpoint)`.
pub type EndpointKey = (TenantId, EndpointId);

/// Endpoint health for the sender: the store, where operational events go, the policy,
/// and a per-instance cache of records.
pub struct CircuitBreaker {
    store: Arc<dyn HealthStore>,
    events: Arc<dyn OperationalEventSink>,
    policy: HealthPolicy,
    /// Multiplies the probe interval (local mode's and the tests' `TERN_TIME_SCALE`).
    time_scale: f64,
    cache_ttl: Duration,
    cache: Mutex<HashMap<EndpointKey, (Instant, Option<EndpointHealth>)>>,
}

/// What one batch may do with one endpoint's deliveries.
#[derive(Debug)]
pub enum BatchGate {
    /// Closed circuit: send.
    Send,
    /// Open; this batch holds the probe: the first delivery to take `slot` is sent, the
    /// others wait until `next_probe_at`.
    Probe {
        /// Taken by the probe.
        slot: AtomicBool,
        /// The probe after this one.
        next_probe_at: DateTime<Utc>,
    },
    /// Open: wait until the next probe time.
    Wait {
        /// The next probe time.
        next_probe_at: DateTime<Utc>,
    },
}

/// The decision for one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Send it.
    Send,
    /// Send it as the open circuit's probe.
    Probe,
    /// Put it back until after this time, without spending an attempt.
    Defer(DateTime<Utc>),
}

impl BatchGate {
    /// The decision for the next delivery of this endpoint in the batch.
    pub fn admit(&self, breaker: &CircuitBreaker) -> Admission {
        match self {
            Self::Send => Admission::Send,
            Self::Probe {
                slot,
                next_probe_at,
            } => {
                if slot.swap(true, Ordering::SeqCst) {
                    Admission::Defer(breaker.deferred_until(*next_probe_at))
                } else {
                    Admission::Probe
                }
            }
            Self::Wait { next_probe_at } => {
                Admission::Defer(breaker.deferred_until(*next_probe_at))
            }
        }
    }
}

/// Attempts of one batch, per endpoint, as they finish.
#[derive(Debug, Default)]
pub struct BatchHealth {
    deltas: Mutex<HashMap<EndpointKey, HealthDelta>>,
}

impl BatchHealth {
    /// Counts one attempt: `failure` is `None` for a success.
    pub fn add(&self, key: EndpointKey, started_at: DateTime<Utc>, failure: Option<LastFailure>) {
        let mut deltas = self.deltas.lock().unwrap_or_else(PoisonError::into_inner);
        deltas
            .entry(key)
            .or_insert_with(|| HealthDelta::new(Utc::now()))
            .add(started_at, failure);
    }

    fn take(&self) -> Vec<(EndpointKey, HealthDelta)> {
        let mut deltas = self.deltas.lock().unwrap_or_else(PoisonError::into_inner);
        deltas.drain().collect()
    }
}

impl CircuitBreaker {
    /// A breaker over `store`, publishing to `events`; `policy` must be valid
    /// ([`HealthPolicy::validate`]); `time_scale` (0 < s <= 1) shortens the probe interval
    /// in local mode; `cache_ttl` zero reads the store for every batch.
    pub fn new(
        store: Arc<dyn HealthStore>,
        events: Arc<dyn OperationalEventSink>,
        policy: HealthPolicy,
        time_scale: f64,
        cache_ttl: Duration,
    ) -> Self {
        Self {
            store,
            events,
            policy,
            time_scale,
            cache_ttl,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The probe interval in real time (the policy's, times the time scale), at least 100 ms.
    pub fn probe_interval(&self) -> Duration {
        Duration::from_secs_f64(self.policy.probe_interval_seconds as f64 * self.time_scale)
            .max(Duration::from_millis(100))
    }

    /// One probe interval after `now`: the next probe time of a circuit that opens, or
    /// whose probe this caller claims or could not claim, now.
    fn next_probe_from(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        now + chrono_duration(self.probe_interval())
    }

    fn deferred_until(&self, next_probe_at: DateTime<Utc>) -> DateTime<Utc> {
        tern_core::health::deferred_until(next_probe_at, self.probe_interval(), rand::random())
    }

    fn cached(&self, key: &EndpointKey) -> Option<Option<EndpointHealth>> {
        let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache
            .get(key)
            .filter(|(at, _)| at.elapsed() < self.cache_ttl)
            .map(|(_, h)| h.clone())
    }

    fn remember(&self, key: EndpointKey, health: Option<EndpointHealth>) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache.insert(key, (Instant::now(), health));
    }

    fn update_cached(&self, key: &EndpointKey, f: impl FnOnce(&mut EndpointHealth)) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, Some(h))) = cache.get_mut(key) {
            f(h);
        }
    }

    async fn snapshot(&self, key: &EndpointKey) -> Option<EndpointHealth> {
        if let Some(h) = self.cached(key) {
            return h;
        }
        match within_gate_deadline(self.store.get(&key.0, &key.1), "health read").await {
            Ok(h) => {
                self.remember(key.clone(), h.clone());
                h
            }
            Err(e) => {
                // Fail open: an unreadable health table must not stop deliveries.
                tracing::warn!(error = %e, endpoint_id = %key.1, "endpoint health not read; sending as if healthy");
                None
            }
        }
    }

    /// The gate of each endpoint a batch touches. An open circuit whose probe time has
    /// come is claimed here (one conditional write): the batch that wins sends one probe.
    pub async fn gates(&self, keys: Vec<EndpointKey>) -> HashMap<EndpointKey, BatchGate> {
        let now = Utc::now();
        let decisions = keys.into_iter().map(|key| async move {
            let health = self.snapshot(&key).await;
            let decision = match gate(health.as_ref(), now) {
                Gate::Send => BatchGate::Send,
                Gate::Wait { next_probe_at } => BatchGate::Wait { next_probe_at },
                Gate::ProbeDue { seen } => {
                    let next_probe_at = self.next_probe_from(now);
                    let change = HealthChange::ClaimProbe {
                        seen,
                        next_probe_at,
                    };
                    let claim = self.store.apply(&key.0, &key.1, &change, now);
                    match within_gate_deadline(claim, "probe claim").await {
                        Ok(true) => {
                            self.update_cached(&key, |h| h.next_probe_at = Some(next_probe_at));
                            tracing::info!(endpoint_id = %key.1, "circuit open; this batch sends the probe");
                            BatchGate::Probe {
                                slot: AtomicBool::new(false),
                                next_probe_at,
                            }
                        }
                        Ok(false) => {
                            // Another sender took this probe, or closed the circuit: our copy
                            // is stale, so decide again on the store's record.
                            self.forget(&key);
                            match gate(self.snapshot(&key).await.as_ref(), now) {
                                Gate::Send => BatchGate::Send,
                                Gate::Wait { next_probe_at } => BatchGate::Wait { next_probe_at },
                                Gate::ProbeDue { .. } => BatchGate::Wait {
                                    next_probe_at: self.next_probe_from(now),
                                },
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, endpoint_id = %key.1, "probe not claimed; waiting");
                            BatchGate::Wait {
                                next_probe_at: self.next_probe_from(now),
                            }
                        }
                    }
                }
            };
            (key, decision)
        });
        futures::future::join_all(decisions)
            .await
            .into_iter()
            .collect()
    }

    /// After a batch: one health write per endpoint it attempted, then the transitions.
    pub async fn settle(
        &self,
        batch: &BatchHealth,
        endpoints: &dyn EndpointStore,
        metrics: &Metrics,
    ) {
        let work = batch.take().into_iter().map(|(key, delta)| async move {
            let previous = self.cached(&key).flatten();
            let after = match self
                .store
                .record(
                    &key.0,
                    &key.1,
                    &delta,
                    self.policy.bucket_seconds(),
                    previous.as_ref(),
                )
                .await
            {
                Ok(h) => h,
                Err(e) => {
                    tracing::warn!(error = %e, endpoint_id = %key.1, attempts = delta.attempts, "endpoint health not recorded");
                    return;
                }
            };
            self.remember(key.clone(), Some(after.clone()));
            let endpoint = match endpoints.get(&key.0, &key.1).await {
                Ok(Some(e)) => e,
                // Deleted meanwhile, or unreadable: nothing to disable or report.
                _ => return,
            };
            let now = Utc::now();
            for transition in
                tern_core::health::transitions(&after, &delta, endpoint.enabled, &self.policy, now)
            {
                self.apply(&key, transition, &after, &endpoint, endpoints, metrics, now)
                    .await;
            }
        });
        futures::future::join_all(work).await;
    }

    #[allow(clippy::too_many_arguments)]
    async fn apply(
        &self,
        key: &EndpointKey,
        transition: Transition,
        after: &EndpointHealth,
        endpoint: &Endpoint,
        endpoints: &dyn EndpointStore,
        metrics: &Metrics,
        now: DateTime<Utc>,
    ) {
        let window_start = now
            - chrono::Duration::seconds(i64::try_from(self.policy.window_seconds).unwrap_or(3600));
        let (change, report) = match &transition {
            Transition::Open => (
                HealthChange::Open {
                    next_probe_at: self.next_probe_from(now),
                },
                None,
            ),
            Transition::Close => (
                HealthChange::Close,
                Some((
                    OperationalEventKind::Recovered,
                    format!(
                        "probe succeeded; circuit closed after {} s open",
                        after
                            .opened_at
                            .map_or(0, |t| (now - t).num_seconds().max(0))
                    ),
                )),
            ),
            Transition::Disable { reason } => (
                HealthChange::Disable,
                Some((OperationalEventKind::Disabled, reason.clone())),
            ),
            Transition::Degrade => (
                HealthChange::Degrade {
                    not_since: window_start,
                },
                Some((
                    OperationalEventKind::Degraded,
                    format!(
                        "{} success over {}, below {:.0} %",
                        after.window_rate(now).percent_text(),
                        tern_core::health::window_text(self.policy.window_seconds),
                        self.policy.degraded_below * 100.0
                    ),
                )),
            ),
            Transition::Recover => (
                HealthChange::Recover,
                Some((
                    OperationalEventKind::Recovered,
                    format!(
                        "{} success over {}",
                        after.window_rate(now).percent_text(),
                        tern_core::health::window_text(self.policy.window_seconds)
                    ),
                )),
            ),
        };
        match self.store.apply(&key.0, &key.1, &change, now).await {
            Ok(true) => {}
            Ok(false) => return, // another sender made this change (and reported it)
            Err(e) => {
                tracing::warn!(error = %e, endpoint_id = %key.1, ?transition, "health change not recorded");
                return;
            }
        }
        match &transition {
            Transition::Open => {
                metrics.update(|c| c.circuits_opened += 1);
                if let HealthChange::Open { next_probe_at } = change {
                    self.update_cached(key, |h| {
                        h.opened_at = Some(now);
                        h.next_probe_at = Some(next_probe_at);
                    });
                }
                tracing::warn!(tenant_id = %key.0, endpoint_id = %key.1, consecutive_failures = after.consecutive_failures, "circuit opened");
            }
            Transition::Close => {
                metrics.update(|c| c.circuits_closed += 1);
                self.update_cached(key, |h| {
                    h.opened_at = None;
                    h.next_probe_at = None;
                    h.consecutive_failures = 0;
                });
                tracing::info!(tenant_id = %key.0, endpoint_id = %key.1, "circuit closed");
            }
            Transition::Disable { reason } => {
                metrics.update(|c| c.endpoints_auto_disabled += 1);
                let stored = match after.last_success_at {
                    Some(t) => format!("{reason}; last success {}", t.to_rfc3339()),
                    None => format!("{reason}; no successful delivery on record"),
                };
                if let Err(e) = endpoints
                    .disable_keeping_reason(&key.0, &key.1, &stored)
                    .await
                {
                    tracing::warn!(error = %e, endpoint_id = %key.1, "endpoint not auto-disabled");
                }
                tracing::warn!(tenant_id = %key.0, endpoint_id = %key.1, reason = %stored, "endpoint auto-disabled");
            }
            Transition::Degrade | Transition::Recover => {}
        }
        if let Some((kind, reason)) = report {
            let rate = after.window_rate(now);
            let event = OperationalEvent {
                kind,
                tenant_id: key.0.clone(),
                endpoint_id: key.1.clone(),
                url: redact_url(&endpoint.url),
                reason,
                last_status: after.last_failure.as_ref().and_then(|f| f.status),
                last_error: after.last_failure.as_ref().and_then(|f| f.error.clone()),
                last_success_at: after.last_success_at,
                success_rate: rate.ratio(),
                attempts: rate.attempts,
                window_seconds: self.policy.window_seconds,
                at: now,
            };
            match self.events.publish(&event).await {
                Ok(()) => metrics.update(|c| c.operational_events += 1),
                Err(e) => {
                    tracing::warn!(error = %e, kind = %kind, endpoint_id = %key.1, "operational event not published");
                }
            }
            tracing::info!(tenant_id = %key.0, endpoint_id = %key.1, kind = %kind, "operational event");
        }
    }

    /// Forgets this instance's copy of an endpoint's record (after `enable` reset it).
    pub fn forget(&self, key: &EndpointKey) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache.remove(key);
    }
}

/// `call`, or [`PortError::Unavailable`] once [`HEALTH_GATE_DEADLINE_MS`] have passed.
async fn within_gate_deadline<T>(
    call: impl std::future::Future<Output = Result<T, PortError>>,
    what: &str,
) -> Result<T, PortError> {
    tokio::time::timeout(Duration::from_millis(HEALTH_GATE_DEADLINE_MS), call)
        .await
        .unwrap_or_else(|_| Err(PortError::Unavailable(format!("{what} timed out"))))
}

fn chrono_duration(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::seconds(60))
}
