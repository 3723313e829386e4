//! Endpoint health: the per-endpoint failure model (DESIGN.md §10).
//!
//! A delivery's retry schedule says when it may be tried; the endpoint's health says
//! whether anything may be sent to it now. Per endpoint Tern keeps attempts and successes
//! in time buckets (a rolling window, 1 h by default, and 3-hour buckets for 24 h), the
//! run of consecutive failures, the last success and the last failure, and a circuit:
//!
//! - **closed** (`healthy`, or `degraded` below 95 % success over the window): every due
//!   delivery is sent;
//! - **open** after N consecutive failed attempts (5 by default): at most one probe per
//!   probe interval (60 s by default) is sent, claimed by one conditional write; every
//!   other due delivery goes back on the queue until the next probe time plus jitter,
//!   keeping its attempt number. A successful probe closes the circuit;
//! - **disabled** below 50 % success over the window with at least 20 attempts (or a
//!   410, or an operator): deliveries dead-letter `endpoint_disabled` until
//!   `tern endpoints enable`, which also resets the health record.
//!
//! The sender writes health once per endpoint per batch ([`HealthDelta`]), never once per
//! attempt: one hot endpoint must not become a hot item (DynamoDB allows 1,000 write
//! units per second per item). Everything here is pure: the store is a port
//! ([`HealthStore`]).

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::{EndpointId, TenantId};
use crate::outcome::ErrorClass;
use crate::ports::PortError;

/// Number of buckets the rolling window is cut into; the rate covers the last
/// `BUCKETS_PER_WINDOW` full buckets plus the current one (1 h to 1 h 10 min with the
/// default 1 h window and 10-minute buckets).
pub const BUCKETS_PER_WINDOW: u64 = 6;

/// Size of the long-view buckets, in seconds (three hours), kept for
/// [`LONG_WINDOW_SECONDS`]: nine buckets rather than 25 hourly ones keep a busy endpoint's
/// record under 1 KB (one DynamoDB write unit per write). The 24 h rate covers the last
/// 24 to 27 hours.
pub const LONG_BUCKET_SECONDS: u64 = 3 * 3600;

/// The long view shown by `tern endpoints health`, in seconds (24 hours).
pub const LONG_WINDOW_SECONDS: u64 = 24 * 3600;

/// Thresholds and timings of the failure model. Defaults are the design's (DESIGN.md §3
/// and §10); `infra/settings.json` (`health`) and the `TERN_HEALTH_*` variables set them.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthPolicy {
    /// Consecutive failed attempts that open the circuit (default 5).
    pub failure_threshold: u32,
    /// Time between probes of an open circuit, in seconds (default 60).
    pub probe_interval_seconds: u64,
    /// The rolling window success rates are computed over, in seconds (default 3,600).
    pub window_seconds: u64,
    /// Success rate (0.0..=1.0) below which the endpoint is disabled (default 0.50).
    pub disable_below: f64,
    /// Success rate below which the owner is told the endpoint is degraded (default 0.95).
    pub degraded_below: f64,
    /// Attempts in the window below which no rate decision is taken (default 20): a single
    /// failure of a quiet endpoint is not 0 % health.
    pub min_attempts: u64,
}

impl Default for HealthPolicy {
    fn default() -> Self {
        Self {
            failure_threshold: 5,
            probe_interval_seconds: 60,
            window_seconds: 3600,
            disable_below: 0.50,
            degraded_below: 0.95,
            min_attempts: 20,
        }
    }
}

/// Why a [`HealthPolicy`] is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HealthPolicyError {
    /// A value outside its range.
    #[error("{name} must be {range}")]
    OutOfRange {
        /// The setting.
        name: &'static str,
        /// What it must be.
        range: &'static str,
    },
}

impl HealthPolicy {
    /// Size of one window bucket, in seconds: the window / [`BUCKETS_PER_WINDOW`], at least 1.
    pub fn bucket_seconds(&self) -> u64 {
        (self.window_seconds / BUCKETS_PER_WINDOW).max(1)
    }

    /// Checks every value's range.
    ///
    /// # Errors
    /// [`HealthPolicyError::OutOfRange`]: threshold 1..=1000; probe interval 1..=900 s
    /// (an SQS `DelaySeconds` carries a deferred delivery to the next probe); window
    /// 60..=86,400 s; rates 0.0..=1.0 with disable <= degraded.
    pub fn validate(&self) -> Result<(), HealthPolicyError> {
        let bad = |name, range| Err(HealthPolicyError::OutOfRange { name, range });
        if !(1..=1000).contains(&self.failure_threshold) {
            return bad("failure threshold", "1 to 1000 attempts");
        }
        if !(1..=900).contains(&self.probe_interval_seconds) {
            return bad("probe interval", "1 to 900 seconds");
        }
        if !(60..=86_400).contains(&self.window_seconds) {
            return bad("window", "60 to 86400 seconds");
        }
        if !(0.0..=1.0).contains(&self.disable_below)
            || !(0.0..=1.0).contains(&self.degraded_below)
            || self.disable_below > self.degraded_below
        {
            return bad(
                "success-rate thresholds",
                "0 to 100 percent, disable at or below degraded",
            );
        }
        Ok(())
    }
}

/// Attempts and successes in one time bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    /// Start of the bucket, Unix seconds (a multiple of the bucket size).
    pub start: i64,
    /// Attempts made in it.
    pub attempts: u64,
    /// Of which succeeded (2xx).
    pub successes: u64,
}

/// The last failed attempt of an endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastFailure {
    /// When the attempt started.
    pub at: DateTime<Utc>,
    /// HTTP status, when there was an answer.
    pub status: Option<u16>,
    /// Error class, when there was no usable answer.
    pub error_class: Option<ErrorClass>,
    /// Error text, bounded (SQS-safe, at most 1 KiB).
    pub error: Option<String>,
}

impl LastFailure {
    /// `status 503`, `timeout`, ...: the short cause used in reasons.
    pub fn summary(&self) -> String {
        match (self.status, self.error_class) {
            (Some(s), _) => format!("last status {s}"),
            (None, Some(c)) => format!("last error {c}"),
            (None, None) => "last attempt failed".into(),
        }
    }
}

/// The state an operator sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthState {
    /// Closed circuit, success rate at or above the degraded threshold (or too few attempts).
    Healthy,
    /// Closed circuit, success rate below the degraded threshold over the window.
    Degraded,
    /// Circuit open: one probe per interval.
    Open,
    /// The endpoint is disabled (auto-disable, a 410, or an operator).
    Disabled,
}

impl std::fmt::Display for HealthState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Healthy => "healthy",
            Self::Degraded => "degraded",
            Self::Open => "open",
            Self::Disabled => "disabled",
        })
    }
}

/// One endpoint's health record, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointHealth {
    /// Tenant.
    pub tenant_id: TenantId,
    /// Endpoint.
    pub endpoint_id: EndpointId,
    /// Size of the window buckets, in seconds.
    pub bucket_seconds: u64,
    /// Window buckets (any order; old ones are ignored and removed by later writes).
    pub buckets: Vec<Bucket>,
    /// Long-view buckets ([`LONG_BUCKET_SECONDS`]) for the 24 h view.
    pub hourly: Vec<Bucket>,
    /// Failed attempts since the last success.
    pub consecutive_failures: u64,
    /// Last successful attempt.
    pub last_success_at: Option<DateTime<Utc>>,
    /// Last failed attempt.
    pub last_failure: Option<LastFailure>,
    /// Set while the circuit is open: when it opened.
    pub opened_at: Option<DateTime<Utc>>,
    /// While open: when the next probe may be sent.
    pub next_probe_at: Option<DateTime<Utc>>,
    /// When `endpoint.degraded` was last reported; cleared by `endpoint.recovered`.
    pub degraded_at: Option<DateTime<Utc>>,
    /// When this record auto-disabled the endpoint (cleared by `enable`, which deletes
    /// the record).
    pub disabled_at: Option<DateTime<Utc>>,
}

/// Attempts and successes over a span.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Rate {
    /// Attempts.
    pub attempts: u64,
    /// Successes.
    pub successes: u64,
}

impl Rate {
    /// successes / attempts, `None` without attempts.
    pub fn ratio(self) -> Option<f64> {
        (self.attempts > 0).then(|| self.successes as f64 / self.attempts as f64)
    }

    /// `12 %`, or `-` without attempts.
    pub fn percent_text(self) -> String {
        self.ratio()
            .map_or_else(|| "-".into(), |r| format!("{:.0} %", r * 100.0))
    }
}

fn sum_since(buckets: &[Bucket], since: i64) -> Rate {
    buckets
        .iter()
        .filter(|b| b.start >= since)
        .fold(Rate::default(), |r, b| Rate {
            attempts: r.attempts + b.attempts,
            successes: r.successes + b.successes,
        })
}

/// Start of the bucket of size `size` seconds holding `at`.
pub fn bucket_start(at: DateTime<Utc>, size: u64) -> i64 {
    let size = i64::try_from(size.max(1)).unwrap_or(i64::MAX);
    at.timestamp().div_euclid(size) * size
}

impl EndpointHealth {
    /// A record with nothing in it.
    pub fn empty(tenant_id: TenantId, endpoint_id: EndpointId, bucket_seconds: u64) -> Self {
        Self {
            tenant_id,
            endpoint_id,
            bucket_seconds,
            buckets: Vec::new(),
            hourly: Vec::new(),
            consecutive_failures: 0,
            last_success_at: None,
            last_failure: None,
            opened_at: None,
            next_probe_at: None,
            degraded_at: None,
            disabled_at: None,
        }
    }

    /// Oldest window-bucket start still counted at `now`.
    pub fn window_since(&self, now: DateTime<Utc>) -> i64 {
        let size = i64::try_from(self.bucket_seconds.max(1)).unwrap_or(i64::MAX);
        bucket_start(now, self.bucket_seconds)
            - size * i64::try_from(BUCKETS_PER_WINDOW).unwrap_or(6)
    }

    /// Oldest long-view bucket start still counted at `now`.
    pub fn long_since(now: DateTime<Utc>) -> i64 {
        bucket_start(now, LONG_BUCKET_SECONDS)
            - i64::try_from(LONG_WINDOW_SECONDS).unwrap_or(86_400)
    }

    /// Attempts and successes over the rolling window.
    pub fn window_rate(&self, now: DateTime<Utc>) -> Rate {
        sum_since(&self.buckets, self.window_since(now))
    }

    /// Attempts and successes over the last 24 hours (to 27: 3-hour buckets).
    pub fn long_rate(&self, now: DateTime<Utc>) -> Rate {
        sum_since(&self.hourly, Self::long_since(now))
    }

    /// Bucket starts no longer counted at `now`: (window buckets, long-view buckets). A
    /// store removes them on its next write, so a record stays under 1 KB.
    pub fn expired(&self, now: DateTime<Utc>) -> (Vec<i64>, Vec<i64>) {
        let since = self.window_since(now);
        let long_since = Self::long_since(now);
        (
            self.buckets
                .iter()
                .filter(|b| b.start < since)
                .map(|b| b.start)
                .collect(),
            self.hourly
                .iter()
                .filter(|b| b.start < long_since)
                .map(|b| b.start)
                .collect(),
        )
    }

    /// The state to show, given whether the endpoint is enabled.
    pub fn state(&self, enabled: bool, policy: &HealthPolicy, now: DateTime<Utc>) -> HealthState {
        if !enabled {
            HealthState::Disabled
        } else if self.opened_at.is_some() {
            HealthState::Open
        } else {
            let rate = self.window_rate(now);
            match rate.ratio() {
                Some(r) if rate.attempts >= policy.min_attempts && r < policy.degraded_below => {
                    HealthState::Degraded
                }
                _ => HealthState::Healthy,
            }
        }
    }
}

/// The attempts one sender batch made to one endpoint, in the order they finished:
/// what one health write adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthDelta {
    /// Attempts made.
    pub attempts: u64,
    /// Of which succeeded.
    pub successes: u64,
    /// Failures after the last success of the batch (all of them when none succeeded).
    pub trailing_failures: u64,
    /// Start of the last successful attempt.
    pub last_success_at: Option<DateTime<Utc>>,
    /// The last failed attempt.
    pub last_failure: Option<LastFailure>,
    /// When the batch's attempts were counted (their bucket).
    pub at: DateTime<Utc>,
}

impl HealthDelta {
    /// Nothing yet, counted in the buckets of `at`.
    pub fn new(at: DateTime<Utc>) -> Self {
        Self {
            attempts: 0,
            successes: 0,
            trailing_failures: 0,
            last_success_at: None,
            last_failure: None,
            at,
        }
    }

    /// Adds one attempt: a success (`failure` = `None`) or a failure.
    pub fn add(&mut self, started_at: DateTime<Utc>, failure: Option<LastFailure>) {
        self.attempts += 1;
        match failure {
            None => {
                self.successes += 1;
                self.trailing_failures = 0;
                self.last_success_at = Some(
                    self.last_success_at
                        .map_or(started_at, |t| t.max(started_at)),
                );
            }
            Some(f) => {
                self.trailing_failures += 1;
                self.last_failure = Some(f);
            }
        }
    }

    /// True when the batch had a success.
    pub fn any_success(&self) -> bool {
        self.successes > 0
    }
}

/// What the sender may do with an endpoint's due deliveries now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Closed circuit: send every due delivery.
    Send,
    /// Open, and the probe time has come: one delivery may be sent once the probe is
    /// claimed ([`HealthChange::ClaimProbe`] with this `seen` value).
    ProbeDue {
        /// The `next_probe_at` the decision was based on.
        seen: Option<DateTime<Utc>>,
    },
    /// Open: every due delivery waits until `next_probe_at` (plus jitter).
    Wait {
        /// The next probe time.
        next_probe_at: DateTime<Utc>,
    },
}

/// The gate for an endpoint whose health record is `health` (`None`: never failed).
pub fn gate(health: Option<&EndpointHealth>, now: DateTime<Utc>) -> Gate {
    match health {
        Some(h) if h.opened_at.is_some() => match h.next_probe_at {
            Some(t) if t > now => Gate::Wait { next_probe_at: t },
            seen => Gate::ProbeDue { seen },
        },
        _ => Gate::Send,
    }
}

/// When a delivery held back by an open circuit comes back: after the next probe time,
/// spread over one probe interval (`unit` in 0.0..1.0, a random draw), so the waiting
/// deliveries do not all return in the same second once the probe closes the circuit.
pub fn deferred_until(
    next_probe_at: DateTime<Utc>,
    probe_interval: std::time::Duration,
    unit: f64,
) -> DateTime<Utc> {
    let spread_ms = probe_interval.as_millis() as f64 * unit.clamp(0.0, 1.0);
    // A deferred delivery comes back at least a little after the probe, so the probe's
    // result is usually known when it does.
    next_probe_at + Duration::milliseconds(spread_ms as i64 + 250)
}

/// The end of a delivery's retry window: `first` (its first attempt, or its event's
/// creation) plus `schedule`'s span with the largest jitter (+10 %,
/// [`crate::retry::MAX_JITTER_FRACTION`]), scaled by `time_scale`, plus one
/// `probe_interval`. A delivery held back by an open circuit past this time is
/// dead-lettered `exhausted`; the margins mean one that kept to its schedule is never cut
/// short by a short deferral of its last attempt.
pub fn retry_window_end(
    first: DateTime<Utc>,
    schedule: &crate::RetrySchedule,
    time_scale: f64,
    probe_interval: std::time::Duration,
) -> DateTime<Utc> {
    let span_seconds: u64 = schedule.delays().iter().sum();
    let span = std::time::Duration::from_secs_f64(
        span_seconds as f64 * (1.0 + crate::retry::MAX_JITTER_FRACTION) * time_scale,
    ) + probe_interval;
    first + Duration::from_std(span).unwrap_or(Duration::MAX)
}

/// A conditional change of a health record; the store applies it only when its condition
/// holds, so of concurrent senders exactly one wins (and reports the change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthChange {
    /// Open the circuit (only when closed): the first probe at `next_probe_at`.
    Open {
        /// First probe time.
        next_probe_at: DateTime<Utc>,
    },
    /// Claim the probe (only when open and `next_probe_at` still equals `seen`), moving
    /// the next probe to `next_probe_at`.
    ClaimProbe {
        /// What the caller read.
        seen: Option<DateTime<Utc>>,
        /// The probe after this one.
        next_probe_at: DateTime<Utc>,
    },
    /// Close the circuit (only when open), resetting consecutive failures.
    Close,
    /// Record that `endpoint.degraded` was reported (only when not reported since
    /// `not_since`, the window's start).
    Degrade {
        /// Start of the current window.
        not_since: DateTime<Utc>,
    },
    /// Clear the degraded mark (only when set).
    Recover,
    /// Record the auto-disable (only when not already recorded).
    Disable,
}

/// A change the sender should make after a batch's health write, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Transition {
    /// N consecutive failures: open the circuit.
    Open,
    /// A probe (or any attempt) succeeded while open: close it (reports `endpoint.recovered`).
    Close,
    /// Below the disable threshold with enough attempts (reports `endpoint.disabled`).
    Disable {
        /// `auto_disabled: 12 % success over 1 h, last status 503`.
        reason: String,
    },
    /// Below the degraded threshold, not reported in this window (reports `endpoint.degraded`).
    Degrade,
    /// Reported degraded before, now at or above the threshold (reports `endpoint.recovered`).
    Recover,
}

/// `1 h`, `30 min`, `90 s`: a window's length for people.
pub fn window_text(seconds: u64) -> String {
    if seconds.is_multiple_of(3600) {
        format!("{} h", seconds / 3600)
    } else if seconds.is_multiple_of(60) {
        format!("{} min", seconds / 60)
    } else {
        format!("{seconds} s")
    }
}

/// What follows from `after` (the record as the batch's write left it) and `delta` (that
/// batch), for an endpoint that is `enabled`.
pub fn transitions(
    after: &EndpointHealth,
    delta: &HealthDelta,
    enabled: bool,
    policy: &HealthPolicy,
    now: DateTime<Utc>,
) -> Vec<Transition> {
    let mut out = Vec::new();
    if !enabled {
        return out;
    }
    let rate = after.window_rate(now);
    let enough = rate.attempts >= policy.min_attempts;
    let ratio = rate.ratio().unwrap_or(1.0);
    if enough && ratio < policy.disable_below && after.disabled_at.is_none() {
        let last = after
            .last_failure
            .as_ref()
            .map_or_else(|| "no failure recorded".into(), LastFailure::summary);
        out.push(Transition::Disable {
            reason: format!(
                "auto_disabled: {} success over {}, {last}",
                rate.percent_text(),
                window_text(policy.window_seconds)
            ),
        });
        return out;
    }
    if after.opened_at.is_some() {
        if delta.any_success() {
            out.push(Transition::Close);
        }
    } else if after.consecutive_failures >= u64::from(policy.failure_threshold) {
        out.push(Transition::Open);
    }
    let window_start =
        now - Duration::seconds(i64::try_from(policy.window_seconds).unwrap_or(3600));
    if enough && ratio < policy.degraded_below {
        if after.degraded_at.is_none_or(|t| t < window_start) {
            out.push(Transition::Degrade);
        }
    } else if after.degraded_at.is_some()
        && enough
        && ratio >= policy.degraded_below
        && !out.contains(&Transition::Close)
    {
        out.push(Transition::Recover);
    }
    out
}

/// Where health records live (a DynamoDB table in AWS).
#[async_trait]
pub trait HealthStore: Send + Sync {
    /// One endpoint's record, `None` when it has none (never attempted, or reset).
    async fn get(
        &self,
        tenant: &TenantId,
        endpoint: &EndpointId,
    ) -> Result<Option<EndpointHealth>, PortError>;

    /// Every record of `tenant`, or every record when `None`.
    async fn list(&self, tenant: Option<&TenantId>) -> Result<Vec<EndpointHealth>, PortError>;

    /// Adds a batch's attempts in one atomic write (counters in the buckets of
    /// `delta.at`, consecutive failures, last success and failure), removing the buckets
    /// `previous` holds that are no longer counted, and returns the record after the write.
    async fn record(
        &self,
        tenant: &TenantId,
        endpoint: &EndpointId,
        delta: &HealthDelta,
        bucket_seconds: u64,
        previous: Option<&EndpointHealth>,
    ) -> Result<EndpointHealth, PortError>;

    /// Applies `change` when its condition holds. `Ok(true)`: applied by this call;
    /// `Ok(false)`: its condition did not hold (another sender was first).
    async fn apply(
        &self,
        tenant: &TenantId,
        endpoint: &EndpointId,
        change: &HealthChange,
        now: DateTime<Utc>,
    ) -> Result<bool, PortError>;

    /// Deletes the record (`tern endpoints enable` starts the endpoint afresh).
    async fn reset(&self, tenant: &TenantId, endpoint: &EndpointId) -> Result<(), PortError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_764_547_200 + secs, 0).unwrap()
    }

    fn record(buckets: Vec<Bucket>, cf: u64) -> EndpointHealth {
        let mut h = EndpointHealth::empty(
            TenantId::new("acme").unwrap(),
            EndpointId::new("ep_1").unwrap(),
            600,
        );
        h.buckets = buckets;
        h.consecutive_failures = cf;
        h
    }

    fn failure(status: u16) -> Option<LastFailure> {
        Some(LastFailure {
            at: t(0),
            status: Some(status),
            error_class: None,
            error: None,
        })
    }

    #[test]
    fn delta_counts_trailing_failures_in_order() {
        let mut d = HealthDelta::new(t(0));
        d.add(t(0), failure(503));
        d.add(t(1), None);
        d.add(t(2), failure(500));
        d.add(t(3), failure(500));
        assert_eq!((d.attempts, d.successes, d.trailing_failures), (4, 1, 2));
        assert_eq!(d.last_success_at, Some(t(1)));
    }

    #[test]
    fn window_counts_six_full_buckets_and_the_current_one() {
        let now = t(7 * 600 + 30);
        let b = |i: i64, a, s| Bucket {
            start: bucket_start(t(0), 600) + i * 600,
            attempts: a,
            successes: s,
        };
        let h = record(vec![b(0, 100, 0), b(1, 10, 5), b(7, 10, 10)], 0);
        assert_eq!(
            h.window_rate(now),
            Rate {
                attempts: 20,
                successes: 15
            }
        );
        assert_eq!(h.expired(now).0, vec![bucket_start(t(0), 600)]);
    }

    #[test]
    fn opens_after_the_threshold_and_closes_on_success() {
        let policy = HealthPolicy::default();
        let mut d = HealthDelta::new(t(0));
        d.add(t(0), failure(503));
        let h = record(vec![], 4);
        assert!(transitions(&h, &d, true, &policy, t(0)).is_empty());
        let h = record(vec![], 5);
        assert_eq!(
            transitions(&h, &d, true, &policy, t(0)),
            vec![Transition::Open]
        );
        let mut open = record(vec![], 0);
        open.opened_at = Some(t(0));
        let mut ok = HealthDelta::new(t(0));
        ok.add(t(0), None);
        assert_eq!(
            transitions(&open, &ok, true, &policy, t(0)),
            vec![Transition::Close]
        );
    }

    #[test]
    fn disables_below_half_only_with_enough_attempts() {
        let policy = HealthPolicy::default();
        let now = t(100);
        let start = bucket_start(now, 600);
        let mut h = record(
            vec![Bucket {
                start,
                attempts: 19,
                successes: 2,
            }],
            1,
        );
        h.last_failure = failure(503);
        let d = HealthDelta::new(now);
        // 19 attempts: below the minimum of 20, no rate decision.
        assert!(transitions(&h, &d, true, &policy, now).is_empty());
        h.buckets[0].attempts = 20;
        let got = transitions(&h, &d, true, &policy, now);
        assert_eq!(
            got,
            vec![Transition::Disable {
                reason: "auto_disabled: 10 % success over 1 h, last status 503".into()
            }]
        );
        // Exactly at the threshold is not below it.
        h.buckets[0].successes = 10;
        assert_eq!(
            transitions(&h, &d, true, &policy, now),
            vec![Transition::Degrade]
        );
    }

    #[test]
    fn degraded_once_per_window_then_recovered() {
        let policy = HealthPolicy::default();
        let now = t(100);
        let start = bucket_start(now, 600);
        let mut h = record(
            vec![Bucket {
                start,
                attempts: 100,
                successes: 90,
            }],
            0,
        );
        let d = HealthDelta::new(now);
        assert_eq!(
            transitions(&h, &d, true, &policy, now),
            vec![Transition::Degrade]
        );
        h.degraded_at = Some(now);
        assert!(transitions(&h, &d, true, &policy, now).is_empty());
        h.buckets[0].successes = 96;
        assert_eq!(
            transitions(&h, &d, true, &policy, now),
            vec![Transition::Recover]
        );
    }

    #[test]
    fn gate_follows_the_circuit() {
        let mut h = record(vec![], 0);
        assert_eq!(gate(Some(&h), t(0)), Gate::Send);
        assert_eq!(gate(None, t(0)), Gate::Send);
        h.opened_at = Some(t(0));
        h.next_probe_at = Some(t(60));
        assert_eq!(
            gate(Some(&h), t(10)),
            Gate::Wait {
                next_probe_at: t(60)
            }
        );
        assert_eq!(gate(Some(&h), t(60)), Gate::ProbeDue { seen: Some(t(60)) });
    }

    #[test]
    fn the_retry_window_covers_the_jittered_schedule_and_one_probe() {
        let schedule = crate::RetrySchedule::new(vec![60, 300]).unwrap();
        let end = retry_window_end(t(0), &schedule, 1.0, std::time::Duration::from_secs(60));
        // 360 s + 10 % jitter (36 s) + one probe interval (60 s).
        assert_eq!(end, t(456));
        let scaled = retry_window_end(t(0), &schedule, 0.5, std::time::Duration::from_secs(30));
        assert_eq!(scaled, t(228));
    }

    #[test]
    fn policy_ranges() {
        assert!(HealthPolicy::default().validate().is_ok());
        let p = HealthPolicy {
            probe_interval_seconds: 901,
            ..HealthPolicy::default()
        };
        assert!(p.validate().is_err());
        let p = HealthPolicy {
            disable_below: 0.96,
            ..HealthPolicy::default()
        };
        assert!(p.validate().is_err());
    }
}
