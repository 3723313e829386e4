//! The sender's side of endpoint health (`tern_core::health`): before a batch's POSTs,
//! the gate of every endpoint it touches (`tern_core::decision::gate`: closed, probe due,
//! open, or paused by the receiver); after them, one health write per endpoint and the
//! transitions it calls for (pause, open, close, below the disable threshold, degraded,
//! recovered, auto-disable), each applied by a conditional write so that of concurrent
//! senders exactly one acts and reports it.
//!
//! A reported change writes its operational event on the health record in the same
//! conditional write, and removes it once published: when SNS (or the outbox) fails, the
//! event stays pending and a later batch that touches the endpoint (deliveries to a
//! disabled endpoint still read its gate) publishes it, once.
//!
//! Health is advisory: when the health table cannot be read, deliveries go out as if the
//! circuit were closed; when it cannot be written, the batch's counts are lost and logged.
//! Neither ever fails a message.
//!
//! A healthy endpoint's successes are written less often than once per batch (issue 29):
//! a batch whose attempts to an endpoint all succeeded, on a record this instance holds
//! as steady ([`tern_core::health::EndpointHealth::is_steady`]: circuit closed, no pause,
//! no pace, no failure run, not degraded, nothing to report), within
//! [`HEALTH_FLUSH_MS`] of this instance's last write of that endpoint, is held in
//! memory; the next write of the endpoint (any failure, push-back or state change writes
//! at once, held successes first) or the first batch of any endpoint after the interval
//! adds them with `ADD`, as if written one by one. So a hot endpoint's item takes at
//! most one write a second per sender instance while it is healthy (300 a second at the
//! 300 concurrent batches of 10,000 deliveries a second, where once per batch made 893
//! for an endpoint taking 2,000 of them), an endpoint with fewer than one batch a second
//! per instance is written as before, and the circuit breaker and auto-disable see
//! every failure at once and every success at most one interval late. An instance that
//! stops (Lambda freezes or ends it) loses at most one interval of an endpoint's
//! successes from its counts: the rates read slightly low, never high.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tern_core::decision::{Gate, deferred_until, gate};
use tern_core::health::{
    EndpointHealth, HealthChange, HealthDelta, HealthPolicy, HealthSignal, HealthStore,
    PendingReport, REPORT_CLAIM_SECONDS, Timings, Transition, chrono_duration,
};
use tern_core::operational::{
    OperationalEvent, OperationalEventKind, OperationalEventSink, redact_url,
};
use tern_core::pacing::{Pace, PaceChange};
use tern_core::ports::{EndpointStore, PortError};
use tern_core::rate_limit::SEND_HORIZON_MS;
use tern_core::{Endpoint, EndpointId, TenantId};

use crate::metrics::Metrics;

/// How long a sender instance serves an endpoint's health record from memory, in seconds
/// at time scale 1, unless `TERN_HEALTH_CACHE_SECONDS` says otherwise. A record this
/// instance writes replaces its copy at once; the TTL bounds how late it learns of a
/// circuit or a pause another instance set (until then it sends one more batch, whose
/// write tells it).
pub const DEFAULT_HEALTH_CACHE_SECONDS: u64 = 5;

/// Longest wait for the health read and the probe claim before a batch's POSTs, in
/// milliseconds. Health is advisory: a table that does not answer in time counts as a
/// closed circuit (a lost probe claim as an open one), so a stalled table delays a batch
/// by at most this, not by the SDK's 6 s call budget (`tern_aws::budget`). DynamoDB answers
/// in single-digit milliseconds.
pub const HEALTH_GATE_DEADLINE_MS: u64 = 1_000;

/// `(tenant, endpoint)`.
pub type EndpointKey = (TenantId, EndpointId);

/// Longest time a sender instance holds a healthy endpoint's successes before writing
/// them, in milliseconds at time scale 1: one second (the interval the scale rule of
/// `DESIGN.md` §11 allows one write per endpoint per instance in). Played faster in local
/// mode, like the model's other durations.
pub const HEALTH_FLUSH_MS: u64 = 1_000;

/// Endpoints whose last write time an instance keeps before it sweeps out the old ones.
const WRITTEN_SWEEP_AT: usize = 1_024;

/// How long after its receiver pushed back an endpoint whose record has no pace yet is
/// paced at the slowest pace by this instance ([`CircuitBreaker::cached_pace`]), in
/// milliseconds: ten seconds, long enough for the batch's health write to record the
/// pace it learnt (a batch may wait seconds for its slots and writes).
pub const PROVISIONAL_PACE_MS: i64 = 10_000;

/// Endpoint health for the sender: the store, where operational events go, the policy and
/// its timings at the deployment's time scale, and a per-instance cache of records.
pub struct CircuitBreaker {
    store: Arc<dyn HealthStore>,
    events: Arc<dyn OperationalEventSink>,
    policy: HealthPolicy,
    timings: Timings,
    cache_ttl: Duration,
    cache: Mutex<HashMap<EndpointKey, (Instant, Option<EndpointHealth>)>>,
    /// Reports seen pending (and due another publish attempt) on records read for a gate;
    /// the batch's settle publishes them.
    pending: Mutex<HashMap<EndpointKey, PendingReport>>,
    /// Longest wait for a gate's call ([`HEALTH_GATE_DEADLINE_MS`] unless
    /// [`CircuitBreaker::with_gate_deadline`] says otherwise).
    gate_deadline: Duration,
    /// Lead added to [`tern_core::rate_limit::CLAIM_LEAD_MS`] when this instance takes
    /// rate-limit slots, in milliseconds: learnt from deliveries that reached their slot
    /// late (a slow table), so the next slots lie far enough ahead to be kept
    /// (`crate::rate_limit`).
    pub(crate) slot_lead_ms: std::sync::atomic::AtomicI64,
    /// Pauses this instance's own attempts were asked for, until the batch's health write
    /// records them ([`CircuitBreaker::note_backpressure`]).
    noted_pauses: Mutex<HashMap<EndpointKey, NotedPause>>,
    /// Operational events this instance failed to publish, with their failed tries: each
    /// batch's settle tries the due ones again, whichever endpoints the batch touched, on
    /// their own short schedule ([`tern_core::decision::our_retry_wait`]).
    unpublished: Mutex<HashMap<EndpointKey, (PendingReport, u32)>>,
    /// The send times of this instance's successes per endpoint over the last
    /// [`ACCEPTED_MEMORY_MS`], at most [`ACCEPTED_MEMORY_ENTRIES`] each: what
    /// the receiver took just before it pushed back ([`CircuitBreaker::note_backpressure`]).
    accepted: Mutex<HashMap<EndpointKey, VecDeque<DateTime<Utc>>>>,
    /// How long successes may be held ([`HEALTH_FLUSH_MS`] at the time scale).
    flush_interval: Duration,
    /// Successes held back per endpoint: since when, and their counts.
    held: Mutex<HashMap<EndpointKey, (Instant, HealthDelta)>>,
    /// When this instance last wrote each endpoint's counts.
    written: Mutex<HashMap<EndpointKey, Instant>>,
}

/// How long an instance remembers its successes' send times per endpoint, in
/// milliseconds: ten seconds, the second a push-back's estimate counts and the time its
/// batch may take to settle (the estimate is read again then, when every answer to a
/// request sent before the push-back has come).
pub const ACCEPTED_MEMORY_MS: i64 = 10_000;

/// Most success send times an instance remembers per endpoint: four seconds at the
/// highest rate limit ([`tern_core::rate_limit::MAX_PER_SECOND`]), 48 KB.
pub const ACCEPTED_MEMORY_ENTRIES: usize = 4 * tern_core::rate_limit::MAX_PER_SECOND as usize;

/// How many endpoints' success times an instance keeps before it sweeps out those with
/// none in the last [`ACCEPTED_MEMORY_MS`].
const ACCEPTED_SWEEP_AT: usize = 256;

/// A pause one of this instance's attempts was asked for ([`CircuitBreaker::note_backpressure`]).
#[derive(Debug, Clone, Copy)]
struct NotedPause {
    /// Its end.
    until: DateTime<Utc>,
    /// When the push-back was noted.
    noted_at: DateTime<Utc>,
    /// When the latest pushed-back request was sent.
    sent_at: DateTime<Utc>,
}

/// What one batch may do with one endpoint's deliveries.
#[derive(Debug)]
pub enum BatchGate {
    /// Closed circuit, no pause: send.
    Send,
    /// Open; this batch holds the probe: the first delivery to take `slot` is sent, the
    /// others wait until `next_probe_at`.
    Probe {
        /// Taken by the probe.
        slot: AtomicBool,
        /// The probe after this one.
        next_probe_at: DateTime<Utc>,
        /// Over how long the others come back after it.
        spread: Duration,
    },
    /// Open or paused: wait until `until`, coming back spread over `spread`.
    Wait {
        /// The earliest time anything may be sent.
        until: DateTime<Utc>,
        /// Over how long the held-back deliveries come back.
        spread: Duration,
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
    pub fn admit(&self) -> Admission {
        match self {
            Self::Send => Admission::Send,
            Self::Probe {
                slot,
                next_probe_at,
                spread,
            } => {
                if slot.swap(true, Ordering::SeqCst) {
                    Admission::Defer(deferred_until(*next_probe_at, *spread, rand::random()))
                } else {
                    Admission::Probe
                }
            }
            Self::Wait { until, spread } => {
                Admission::Defer(deferred_until(*until, *spread, rand::random()))
            }
        }
    }
}

/// What the attempts of one batch told, per endpoint, as they finish.
#[derive(Debug, Default)]
pub struct BatchHealth {
    deltas: Mutex<HashMap<EndpointKey, HealthDelta>>,
}

impl BatchHealth {
    /// Adds what one attempt told its endpoint's health ([`tern_core::decision::decide`]).
    pub fn add(&self, key: EndpointKey, signal: HealthSignal) {
        if signal == HealthSignal::NotCharged {
            return;
        }
        let mut deltas = self.deltas.lock().unwrap_or_else(PoisonError::into_inner);
        deltas
            .entry(key)
            .or_insert_with(|| HealthDelta::new(Utc::now()))
            .add(signal);
    }

    /// Notes that this sender saw `key`'s receiver accept `count` requests in the second
    /// before it pushed back ([`CircuitBreaker::note_backpressure`]); the batch keeps
    /// the largest.
    pub fn note_accepted_before_push_back(&self, key: EndpointKey, count: u32) {
        let mut deltas = self.deltas.lock().unwrap_or_else(PoisonError::into_inner);
        let delta = deltas
            .entry(key)
            .or_insert_with(|| HealthDelta::new(Utc::now()));
        delta.accepted_before_push_back = delta.accepted_before_push_back.max(Some(count));
    }

    fn take(&self) -> Vec<(EndpointKey, HealthDelta)> {
        let mut deltas = self.deltas.lock().unwrap_or_else(PoisonError::into_inner);
        deltas.drain().collect()
    }
}

impl CircuitBreaker {
    /// A breaker over `store`, publishing to `events`; `policy` must be valid
    /// ([`HealthPolicy::validate`]); `time_scale` (0 < s <= 1) plays every duration of the
    /// model faster in local mode ([`Timings`]), the cache's included; `cache_ttl` zero
    /// reads the store for every batch.
    pub fn new(
        store: Arc<dyn HealthStore>,
        events: Arc<dyn OperationalEventSink>,
        policy: HealthPolicy,
        time_scale: f64,
        cache_ttl: Duration,
    ) -> Self {
        let timings = policy.timings(time_scale);
        Self {
            store,
            events,
            cache_ttl: timings.cache_ttl(cache_ttl),
            timings,
            policy,
            cache: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            gate_deadline: Duration::from_millis(HEALTH_GATE_DEADLINE_MS),
            slot_lead_ms: std::sync::atomic::AtomicI64::new(0),
            noted_pauses: Mutex::new(HashMap::new()),
            unpublished: Mutex::new(HashMap::new()),
            accepted: Mutex::new(HashMap::new()),
            flush_interval: timings.cache_ttl(Duration::from_millis(HEALTH_FLUSH_MS)),
            held: Mutex::new(HashMap::new()),
            written: Mutex::new(HashMap::new()),
        }
    }

    /// The same breaker holding healthy endpoints' successes for at most `interval`
    /// (instead of [`HEALTH_FLUSH_MS`] at the time scale); zero writes every batch.
    #[must_use]
    pub fn with_flush_interval(mut self, interval: Duration) -> Self {
        self.flush_interval = interval;
        self
    }

    /// The same breaker with gate calls (health read, probe claim, rate-limit read and
    /// slots) cut at `deadline` instead of [`HEALTH_GATE_DEADLINE_MS`]. For tests on the
    /// local AWS, whose answers on a loaded machine can take longer than DynamoDB's
    /// milliseconds: they test what the gate decides, not that a stalled table is passed
    /// over (the deployed functions keep the 1 s the sender's deadline plan counts on).
    #[must_use]
    pub fn with_gate_deadline(mut self, deadline: Duration) -> Self {
        self.gate_deadline = deadline;
        self
    }

    /// Longest wait for one of a gate's calls.
    pub(crate) fn gate_deadline(&self) -> Duration {
        self.gate_deadline
    }

    /// The model's durations at this deployment's time scale.
    pub fn timings(&self) -> &Timings {
        &self.timings
    }

    /// The probe interval in real time (the policy's, times the time scale), at least 100 ms.
    pub fn probe_interval(&self) -> Duration {
        self.timings.probe_interval()
    }

    /// One probe interval after `now`: the next probe time of a circuit that opens, or
    /// whose probe this caller claims or could not claim, now.
    fn next_probe_from(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        now + chrono_duration(self.probe_interval())
    }

    fn cached(&self, key: &EndpointKey) -> Option<Option<EndpointHealth>> {
        let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache
            .get(key)
            .filter(|(at, _)| at.elapsed() < self.cache_ttl)
            .map(|(_, h)| h.clone())
    }

    /// The store of the records.
    pub(crate) fn store(&self) -> &Arc<dyn HealthStore> {
        &self.store
    }

    /// The end of the endpoint's rate-limit schedule as this instance last read or wrote
    /// it (`None`: no record, or none cached).
    pub(crate) fn cached_tat(&self, key: &EndpointKey) -> Option<DateTime<Utc>> {
        self.cached(key).flatten().and_then(|h| h.rate_tat)
    }

    /// Keeps `tat` as the endpoint's rate-limit schedule in this instance's copy of its
    /// record (a copy that said "no record" becomes a record holding only it), so the
    /// next batch asks on what the last write said.
    pub(crate) fn remember_tat(&self, key: &EndpointKey, tat: Option<DateTime<Utc>>) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        match cache.get_mut(key) {
            Some((_, Some(h))) => h.rate_tat = tat,
            Some((_, record @ None)) => {
                let mut h = EndpointHealth::empty(
                    key.0.clone(),
                    key.1.clone(),
                    self.timings.bucket_seconds(),
                );
                h.rate_tat = tat;
                *record = Some(h);
            }
            None => {}
        }
    }

    /// The endpoint's learnt pace as this instance last read or wrote it
    /// ([`tern_core::pacing`]); `None` when it has none or none is cached. Until the
    /// first push-back's pace is on the record (the batch's settle writes it), an endpoint
    /// this instance saw push back is paced at what it saw the receiver accept (nine
    /// tenths of it, [`tern_core::pacing::ESTIMATE_FACTOR`]; the slowest pace when it saw
    /// nothing), so the backlog does not rush the receiver again the moment its pause
    /// ends.
    pub fn cached_pace(&self, key: &EndpointKey) -> Option<Pace> {
        self.cached(key).flatten().and_then(|h| h.pace).or_else(|| {
            let noted = self
                .noted_pauses
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(key)
                .copied()?;
            let seen = self.accepted_before(key, noted.sent_at);
            let per_second = seen.map_or(tern_core::pacing::MIN_PER_SECOND, |s| {
                ((f64::from(s) * tern_core::pacing::ESTIMATE_FACTOR).floor() as u32).clamp(
                    tern_core::pacing::MIN_PER_SECOND,
                    tern_core::rate_limit::MAX_PER_SECOND,
                )
            });
            (Utc::now() - noted.noted_at < chrono::Duration::milliseconds(PROVISIONAL_PACE_MS))
                .then_some(Pace {
                    per_second,
                    changed_at: noted.noted_at,
                    slow_start: true,
                })
        })
    }

    /// The receiver of `key` pushed back, asking for a pause until `until`: this
    /// instance holds its deliveries back from now on, before the batch's health write
    /// (the batch's other POSTs that have not left, and the gates of batches starting
    /// meanwhile, see it at once). Kept beside the record's copy, not in it: the batch's
    /// settle decides the pause's transition on the record as stored.
    /// `sent_at` is the pushed-back request's send time: until the record holds a pace,
    /// this instance paces the endpoint at what it saw accepted in the second before it
    /// ([`Self::note_success`]), which it returns (`None`: it saw nothing accepted).
    pub fn note_backpressure(
        &self,
        key: &EndpointKey,
        until: DateTime<Utc>,
        sent_at: DateTime<Utc>,
    ) -> Option<u32> {
        let seen = self.accepted_before(key, sent_at);
        let pace = self.cached(key).flatten().and_then(|h| h.pace);
        if !tern_core::pacing::pauses(pace, until - sent_at) {
            // Paced already: the pace's decrease answers a short push-back, not a pause.
            return seen;
        }
        let mut noted = self
            .noted_pauses
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = Utc::now();
        let keep = chrono::Duration::milliseconds(PROVISIONAL_PACE_MS);
        noted.retain(|_, p| p.until > now || now - p.noted_at < keep);
        let entry = noted.entry(key.clone()).or_insert(NotedPause {
            until,
            noted_at: now,
            sent_at,
        });
        *entry = NotedPause {
            until: entry.until.max(until),
            noted_at: now,
            sent_at: entry.sent_at.max(sent_at),
        };
        seen
    }

    /// Notes a success of this instance's to `key`, its request sent at `sent_at`.
    pub fn note_success(&self, key: &EndpointKey, sent_at: DateTime<Utc>) {
        let mut accepted = self.accepted.lock().unwrap_or_else(PoisonError::into_inner);
        let oldest = Utc::now() - chrono::Duration::milliseconds(ACCEPTED_MEMORY_MS);
        // Endpoints with no success lately take no memory: swept when a new one comes
        // and many are kept, not on every success (a warm sender serves thousands).
        if !accepted.contains_key(key) && accepted.len() >= ACCEPTED_SWEEP_AT {
            accepted.retain(|_, times| times.back().is_some_and(|t| *t >= oldest));
        }
        let times = accepted.entry(key.clone()).or_default();
        while times.front().is_some_and(|t| *t < oldest) || times.len() >= ACCEPTED_MEMORY_ENTRIES {
            times.pop_front();
        }
        // Answers arrive out of order: kept sorted by send time.
        let at = times.partition_point(|t| *t <= sent_at);
        times.insert(at, sent_at);
    }

    /// Successes of this instance's to `key` sent in the second before `sent_at`; `None`
    /// when there were none.
    fn accepted_before(&self, key: &EndpointKey, sent_at: DateTime<Utc>) -> Option<u32> {
        let accepted = self.accepted.lock().unwrap_or_else(PoisonError::into_inner);
        let from = sent_at - chrono::Duration::seconds(1);
        let n = accepted
            .get(key)?
            .iter()
            .filter(|t| **t > from && **t <= sent_at)
            .count();
        (n > 0).then(|| u32::try_from(n).unwrap_or(u32::MAX))
    }

    /// Until when this instance knows the receiver of `key` asked for a pause (noted by
    /// [`Self::note_backpressure`], or on its copy of the record), if it is still paused
    /// at `now`: a delivery about to be POSTed waits for it instead.
    pub fn paused_until(&self, key: &EndpointKey, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let noted = self
            .noted_pauses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .map(|p| p.until);
        let cached = self
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .and_then(|(_, h)| h.as_ref())
            .and_then(|h| h.paused_until);
        noted.max(cached).filter(|p| *p > now)
    }

    fn remember(&self, key: EndpointKey, health: Option<EndpointHealth>) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache.insert(key, (Instant::now(), health));
    }

    /// Applies a change this instance made to its copy of the record; a copy that says
    /// "no record" is dropped instead, so the next gate reads the record the change made.
    fn update_cached(&self, key: &EndpointKey, f: impl FnOnce(&mut EndpointHealth)) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        match cache.get_mut(key) {
            Some((_, Some(h))) => f(h),
            Some((_, None)) => {
                cache.remove(key);
            }
            None => {}
        }
    }

    async fn snapshot(&self, key: &EndpointKey, now: DateTime<Utc>) -> Option<EndpointHealth> {
        let health = match self.cached(key) {
            Some(h) => h,
            None => match within_gate_deadline(
                self.gate_deadline,
                self.store.get(&key.0, &key.1),
                "health read",
            )
            .await
            {
                Ok(h) => {
                    self.remember(key.clone(), h.clone());
                    h
                }
                Err(e) => {
                    // Fail open: an unreadable health table must not stop deliveries.
                    tracing::warn!(error = %e, endpoint_id = %key.1, "endpoint health not read; sending as if healthy");
                    None
                }
            },
        };
        if let Some(report) = health
            .as_ref()
            .and_then(|h| h.pending_report.as_ref())
            .filter(|r| r.retry_at <= now)
        {
            let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            pending.insert(key.clone(), report.clone());
        }
        health
    }

    /// The gate of each endpoint a batch touches. An open circuit whose probe time has
    /// come is claimed here (one conditional write): the batch that wins sends one probe.
    pub async fn gates(&self, keys: Vec<EndpointKey>) -> HashMap<EndpointKey, BatchGate> {
        let now = Utc::now();
        let decisions = keys.into_iter().map(|key| async move {
            let mut health = self.snapshot(&key, now).await;
            // A pause this instance's own attempts were just asked for holds the gate too.
            if let Some(noted) = self.paused_until(&key, now) {
                let h = health.get_or_insert_with(|| {
                    EndpointHealth::empty(
                        key.0.clone(),
                        key.1.clone(),
                        self.timings.bucket_seconds(),
                    )
                });
                h.paused_until = Some(h.paused_until.map_or(noted, |p| p.max(noted)));
            }
            let decision = match gate(health.as_ref(), &self.timings, now) {
                Gate::Send => BatchGate::Send,
                Gate::Wait { until, spread } => BatchGate::Wait { until, spread },
                Gate::ProbeDue { seen } => self.claim_probe(&key, seen, now).await,
            };
            (key, decision)
        });
        futures::future::join_all(decisions)
            .await
            .into_iter()
            .collect()
    }

    async fn claim_probe(
        &self,
        key: &EndpointKey,
        seen: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> BatchGate {
        let next_probe_at = self.next_probe_from(now);
        let spread = self.probe_interval();
        let change = HealthChange::ClaimProbe {
            seen,
            next_probe_at,
        };
        let claim = self.store.apply(&key.0, &key.1, &change, now);
        match within_gate_deadline(self.gate_deadline, claim, "probe claim").await {
            Ok(true) => {
                self.update_cached(key, |h| h.next_probe_at = Some(next_probe_at));
                tracing::info!(endpoint_id = %key.1, "circuit open; this batch sends the probe");
                BatchGate::Probe {
                    slot: AtomicBool::new(false),
                    next_probe_at,
                    spread,
                }
            }
            Ok(false) => {
                // Another sender took this probe, or closed the circuit: our copy is
                // stale, so decide again on the store's record.
                self.forget(key);
                match gate(self.snapshot(key, now).await.as_ref(), &self.timings, now) {
                    Gate::Send => BatchGate::Send,
                    Gate::Wait { until, spread } => BatchGate::Wait { until, spread },
                    Gate::ProbeDue { .. } => BatchGate::Wait {
                        until: next_probe_at,
                        spread,
                    },
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, endpoint_id = %key.1, "probe not claimed; waiting");
                BatchGate::Wait {
                    until: next_probe_at,
                    spread,
                }
            }
        }
    }

    /// After a batch: one health write per endpoint it attempted, then the transitions;
    /// then the reports still pending on the records its gates read.
    pub async fn settle(
        &self,
        batch: &BatchHealth,
        endpoints: &dyn EndpointStore,
        metrics: &Metrics,
    ) {
        let to_write = self.to_write(batch.take(), Instant::now());
        let work = to_write.into_iter().map(|(key, mut delta)| async move {
            metrics.update(|c| c.backpressure += delta.backpressure);
            // Read now, not when the push-back came: by the batch's end the answers to
            // requests sent before it have all been noted.
            let again = delta
                .pushed_back_sent_at
                .and_then(|sent_at| self.accepted_before(&key, sent_at));
            delta.accepted_before_push_back = delta.accepted_before_push_back.max(again);
            let Some(after) = self.record(&key, &delta).await else {
                return;
            };
            let endpoint = match endpoints.get(&key.0, &key.1).await {
                Ok(Some(e)) => e,
                // Deleted meanwhile, or unreadable: nothing to disable or report.
                _ => return,
            };
            let now = Utc::now();
            for transition in tern_core::health::transitions(
                &after,
                &delta,
                endpoint.enabled,
                endpoint.rate_limit().ok().flatten(),
                &self.policy,
                &self.timings,
                now,
            ) {
                self.apply(&key, transition, &after, &endpoint, endpoints, metrics, now)
                    .await;
            }
        });
        futures::future::join_all(work).await;
        let mut pending: HashMap<EndpointKey, PendingReport> = {
            let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            pending.drain().collect()
        };
        // This instance's own unpublished events, due again: whatever this batch touched,
        // so the owner hears within seconds of SNS coming back, not at the endpoint's
        // next traffic.
        let now = Utc::now();
        {
            let unpublished = self
                .unpublished
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            // This instance's copy is the latest it wrote: it replaces an older report a
            // gate read (one the record no longer holds).
            for (key, (report, _)) in unpublished.iter() {
                if report.retry_at <= now {
                    pending.insert(key.clone(), report.clone());
                } else if pending.get(key).is_some_and(|p| p.event != report.event) {
                    pending.remove(key);
                }
            }
        }
        let retries = pending
            .into_iter()
            .map(|(key, report)| async move { self.publish_pending(&key, report, metrics).await });
        futures::future::join_all(retries).await;
    }

    /// Of a batch's deltas, those to write now, each after the successes held for its
    /// endpoint; the others are held ([`HEALTH_FLUSH_MS`]). Held successes whose interval
    /// is over are written too, whichever endpoints the batch touched.
    fn to_write(
        &self,
        batch: Vec<(EndpointKey, HealthDelta)>,
        now: Instant,
    ) -> Vec<(EndpointKey, HealthDelta)> {
        let at = Utc::now();
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = Vec::new();
        for (key, delta) in batch {
            let recent = written
                .get(&key)
                .is_some_and(|t| now.duration_since(*t) < self.flush_interval);
            let steady = || {
                self.cached(&key)
                    .flatten()
                    .is_some_and(|h| h.is_steady(&self.policy, at))
            };
            if delta.only_successes() && recent && steady() {
                match held.get_mut(&key) {
                    Some((_, counts)) => {
                        *counts = std::mem::replace(counts, HealthDelta::new(at)).after_held(&delta)
                    }
                    None => {
                        held.insert(key, (now, delta));
                    }
                }
                continue;
            }
            let delta = match held.remove(&key) {
                Some((_, counts)) => delta.after_held(&counts),
                None => delta,
            };
            out.push((key, delta));
        }
        let due: Vec<EndpointKey> = held
            .iter()
            .filter(|(_, (since, _))| now.duration_since(*since) >= self.flush_interval)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            if let Some((_, counts)) = held.remove(&key) {
                out.push((key, counts));
            }
        }
        if written.len() >= WRITTEN_SWEEP_AT {
            written.retain(|_, t| now.duration_since(*t) < self.flush_interval);
        }
        for (key, delta) in &out {
            if delta.attempts > 0 {
                written.insert(key.clone(), now);
            }
        }
        out
    }

    /// Adds `delta` to the endpoint's record and returns the record after the write; a
    /// batch that only met backpressure writes no counts and returns the record as last
    /// read. `None` when the write failed.
    async fn record(&self, key: &EndpointKey, delta: &HealthDelta) -> Option<EndpointHealth> {
        let previous = self.cached(key).flatten();
        if delta.attempts == 0 {
            return Some(previous.unwrap_or_else(|| {
                EndpointHealth::empty(key.0.clone(), key.1.clone(), self.timings.bucket_seconds())
            }));
        }
        match self
            .store
            .record(
                &key.0,
                &key.1,
                delta,
                self.timings.bucket_seconds(),
                previous.as_ref(),
            )
            .await
        {
            Ok(h) => {
                self.remember(key.clone(), Some(h.clone()));
                Some(h)
            }
            Err(e) => {
                tracing::warn!(error = %e, endpoint_id = %key.1, attempts = delta.attempts, "endpoint health not recorded");
                None
            }
        }
    }

    /// The operational event reporting `kind` for `key`, decided `now`.
    fn event(
        &self,
        kind: OperationalEventKind,
        reason: String,
        key: &EndpointKey,
        after: &EndpointHealth,
        endpoint: &Endpoint,
        now: DateTime<Utc>,
    ) -> OperationalEvent {
        let rate = after.window_rate(now);
        OperationalEvent {
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
        }
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
        let window = tern_core::health::window_text(self.policy.window_seconds);
        let report = |kind, reason: String| {
            let event = self.event(kind, reason, key, after, endpoint, now);
            let pending = PendingReport {
                event: event.to_json(),
                // Claimed by this sender while it publishes.
                retry_at: now + chrono::Duration::seconds(REPORT_CLAIM_SECONDS),
            };
            (event, pending)
        };
        let (change, event) = match &transition {
            Transition::Pause { until, pauses } => (
                HealthChange::Pause {
                    until: *until,
                    pauses: *pauses,
                },
                None,
            ),
            Transition::Open => (
                HealthChange::Open {
                    next_probe_at: self.next_probe_from(now),
                },
                None,
            ),
            Transition::Pace { change, seen } => {
                // After the slots already handed out to POSTs about to leave, not before.
                let in_flight = now + chrono::Duration::milliseconds(SEND_HORIZON_MS);
                let restart_at = after.rate_tat.map_or(now, |t| t.min(in_flight)).max(now);
                (
                    HealthChange::SetPace {
                        change: *change,
                        seen: *seen,
                        restart_at,
                    },
                    None,
                )
            }
            Transition::MarkBelow => (HealthChange::MarkBelow, None),
            Transition::ClearBelow => (HealthChange::ClearBelow, None),
            Transition::Close => {
                let open_for = after
                    .opened_at
                    .map_or(0, |t| (now - t).num_seconds().max(0));
                let (event, report) = report(
                    OperationalEventKind::Recovered,
                    format!("probe succeeded; circuit closed after {open_for} s open"),
                );
                (HealthChange::Close { report }, Some(event))
            }
            Transition::Disable { reason } => {
                let (event, report) = report(OperationalEventKind::Disabled, reason.clone());
                (HealthChange::Disable { report }, Some(event))
            }
            Transition::Degrade => {
                let (event, report) = report(
                    OperationalEventKind::Degraded,
                    format!(
                        "{} success over {window}, below {:.0} %",
                        after.window_rate(now).percent_text(),
                        self.policy.degraded_below * 100.0
                    ),
                );
                let not_since = now - chrono_duration(self.timings.window());
                (HealthChange::Degrade { not_since, report }, Some(event))
            }
            Transition::Recover => {
                let (event, report) = report(
                    OperationalEventKind::Recovered,
                    format!(
                        "{} success over {window}",
                        after.window_rate(now).percent_text()
                    ),
                );
                (HealthChange::Recover { report }, Some(event))
            }
        };
        match self.store.apply(&key.0, &key.1, &change, now).await {
            Ok(true) => {}
            // Another sender made this change (and reports it). Our copy of the record
            // misses it: forget it, so this instance's next gate reads the change (a pause
            // another instance wrote first must hold this one back too).
            Ok(false) => {
                self.forget(key);
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, endpoint_id = %key.1, ?transition, "health change not recorded");
                return;
            }
        }
        match &change {
            HealthChange::Pause { until, pauses } => {
                metrics.update(|c| c.endpoints_paused += 1);
                self.update_cached(key, |h| {
                    h.paused_until = Some(*until);
                    h.pauses = *pauses;
                });
                tracing::info!(tenant_id = %key.0, endpoint_id = %key.1, until = %until.to_rfc3339(), pauses, "receiver pushed back; endpoint paused");
            }
            HealthChange::Open { next_probe_at } => {
                metrics.update(|c| c.circuits_opened += 1);
                self.update_cached(key, |h| {
                    h.opened_at = Some(now);
                    h.next_probe_at = Some(*next_probe_at);
                });
                tracing::warn!(tenant_id = %key.0, endpoint_id = %key.1, consecutive_failures = after.consecutive_failures, "circuit opened");
            }
            HealthChange::SetPace {
                change, restart_at, ..
            } => {
                let pace = match change {
                    PaceChange::Set {
                        per_second,
                        slow_start,
                    } => Some(Pace {
                        per_second: *per_second,
                        changed_at: now,
                        slow_start: *slow_start,
                    }),
                    PaceChange::Forget => None,
                };
                metrics.update(|c| c.pace_changes += 1);
                self.update_cached(key, |h| {
                    h.pace = pace;
                    h.rate_tat = Some(*restart_at);
                });
                tracing::info!(tenant_id = %key.0, endpoint_id = %key.1, per_second = pace.map(|p| p.per_second), "endpoint's pace changed");
            }
            HealthChange::MarkBelow => {
                self.update_cached(key, |h| h.below_since = Some(now));
                tracing::warn!(tenant_id = %key.0, endpoint_id = %key.1, "success rate below the disable threshold; disabled if it stays there for the window");
            }
            HealthChange::ClearBelow => self.update_cached(key, |h| h.below_since = None),
            HealthChange::Close { report } => {
                metrics.update(|c| c.circuits_closed += 1);
                self.update_cached(key, |h| {
                    h.opened_at = None;
                    h.next_probe_at = None;
                    h.closed_at = Some(now);
                    h.consecutive_failures = 0;
                    h.pending_report = Some(report.clone());
                });
                tracing::info!(tenant_id = %key.0, endpoint_id = %key.1, "circuit closed");
            }
            HealthChange::Disable { report } => {
                metrics.update(|c| c.endpoints_auto_disabled += 1);
                self.update_cached(key, |h| {
                    h.disabled_at = Some(now);
                    h.pending_report = Some(report.clone());
                });
                let reason = event.as_ref().map_or("", |e| e.reason.as_str());
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
            HealthChange::Degrade { report, .. } => self.update_cached(key, |h| {
                h.degraded_at = Some(now);
                h.pending_report = Some(report.clone());
            }),
            HealthChange::Recover { report } => self.update_cached(key, |h| {
                h.degraded_at = None;
                h.pending_report = Some(report.clone());
            }),
            HealthChange::ClaimProbe { .. }
            | HealthChange::DeferReport { .. }
            | HealthChange::Reported { .. } => {}
        }
        if let (Some(event), Some(report)) = (event, change.report()) {
            self.publish(key, &event, &report.event, metrics).await;
        }
    }

    /// Publishes a report this sender holds the claim of; removes it from the record once
    /// published, or moves its next attempt one probe interval on.
    async fn publish(
        &self,
        key: &EndpointKey,
        event: &OperationalEvent,
        json: &str,
        metrics: &Metrics,
    ) {
        let now = Utc::now();
        let published = self.events.publish(event).await;
        let change = match &published {
            Ok(()) => {
                let mut unpublished = self
                    .unpublished
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if unpublished.get(key).is_some_and(|(r, _)| r.event == json) {
                    unpublished.remove(key);
                }
                drop(unpublished);
                metrics.update(|c| c.operational_events += 1);
                tracing::info!(tenant_id = %key.0, endpoint_id = %key.1, kind = %event.kind, "operational event");
                HealthChange::Reported {
                    event: json.to_owned(),
                }
            }
            Err(e) => {
                metrics.update(|c| c.operational_events_unpublished += 1);
                // Kept on the record (any sender may publish it) and in this instance's
                // memory, tried again on our own schedule: 1 s doubling to 60 s (scaled).
                let mut unpublished = self
                    .unpublished
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                let tries = unpublished
                    .get(key)
                    .filter(|(r, _)| r.event == json)
                    .map_or(0, |(_, t)| *t);
                let retry_at = now
                    + chrono_duration(tern_core::decision::our_retry_wait(
                        tries,
                        rand::random(),
                        self.timings.time_scale,
                    ));
                unpublished.insert(
                    key.clone(),
                    (
                        PendingReport {
                            event: json.to_owned(),
                            retry_at,
                        },
                        tries.saturating_add(1),
                    ),
                );
                drop(unpublished);
                tracing::warn!(error = %e, kind = %event.kind, endpoint_id = %key.1, %retry_at, "operational event not published; tried again shortly");
                HealthChange::DeferReport {
                    event: json.to_owned(),
                    seen: None,
                    retry_at,
                }
            }
        };
        let written = self.store.apply(&key.0, &key.1, &change, now).await;
        if let Err(e) = &written {
            // Published but still marked pending: at worst a later batch publishes it once
            // more (the outbox copy has the same id; receivers deduplicate on it).
            tracing::warn!(error = %e, endpoint_id = %key.1, "operational event's state not recorded");
        }
        self.update_cached(key, |h| match &change {
            HealthChange::DeferReport { retry_at, .. } => {
                if let Some(r) = h.pending_report.as_mut().filter(|r| r.event == json) {
                    r.retry_at = *retry_at;
                }
            }
            _ => {
                if h.pending_report.as_ref().is_some_and(|r| r.event == json) {
                    h.pending_report = None;
                }
            }
        });
    }

    /// Publishes a report a gate found pending on the record (an earlier publish failed):
    /// claims it first (one conditional write), so of concurrent senders one publishes.
    async fn publish_pending(&self, key: &EndpointKey, report: PendingReport, metrics: &Metrics) {
        let now = Utc::now();
        let event: OperationalEvent = match serde_json::from_str(&report.event) {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(error = %e, endpoint_id = %key.1, "pending operational event unreadable; dropped");
                let drop = HealthChange::Reported {
                    event: report.event,
                };
                let _ = self.store.apply(&key.0, &key.1, &drop, now).await;
                return;
            }
        };
        let claim = HealthChange::DeferReport {
            event: report.event.clone(),
            seen: Some(report.retry_at),
            retry_at: now + chrono::Duration::seconds(REPORT_CLAIM_SECONDS),
        };
        match self.store.apply(&key.0, &key.1, &claim, now).await {
            Ok(true) => {
                tracing::info!(endpoint_id = %key.1, kind = %event.kind, "publishing an operational event kept from an earlier batch");
                self.publish(key, &event, &report.event, metrics).await;
            }
            // Another sender claimed or published it; our copy is stale.
            Ok(false) => {
                self.forget(key);
                let mut unpublished = self
                    .unpublished
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if unpublished
                    .get(key)
                    .is_some_and(|(r, _)| r.event == report.event)
                {
                    unpublished.remove(key);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, endpoint_id = %key.1, "pending operational event not claimed");
            }
        }
    }

    /// Forgets this instance's copy of an endpoint's record (after `enable` reset it).
    pub fn forget(&self, key: &EndpointKey) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache.remove(key);
    }
}

/// `call`, or [`PortError::Unavailable`] once `deadline` (a breaker's gate deadline,
/// [`HEALTH_GATE_DEADLINE_MS`] by default) has passed.
pub(crate) async fn within_gate_deadline<T>(
    deadline: Duration,
    call: impl std::future::Future<Output = Result<T, PortError>>,
    what: &str,
) -> Result<T, PortError> {
    tokio::time::timeout(deadline, call)
        .await
        .unwrap_or_else(|_| Err(PortError::Unavailable(format!("{what} timed out"))))
}
