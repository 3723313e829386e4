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
//! - **paused** when the receiver pushes back (a `429`, or a `503` with `Retry-After`):
//!   nothing is sent until the time it asked for (capped by
//!   [`HealthPolicy::max_pause_seconds`]); the held-back deliveries come back spread over a
//!   resume window that doubles with each pause in a row. Backpressure never counts as a
//!   failure;
//! - **disabled** once the success rate has stayed below 50 % for a whole window (1 h)
//!   with at least 20 attempts in it (or a 410, or an operator): deliveries dead-letter
//!   `endpoint_disabled` until `tern endpoints enable`, which also starts the health
//!   record afresh (its 24 h history kept, [`HealthStore::reset`]). A short burst of
//!   failures opens the circuit instead.
//!
//! Every duration of the model runs at the deployment's time scale ([`Timings`]), like the
//! retry waits, so local mode plays the model out at the speed of its schedule.
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
    /// Longest pause a receiver's backpressure puts on its endpoint, in seconds (default
    /// 3,600: one window). `Retry-After` (RFC 9110 §10.2.3) sets no upper bound; a
    /// receiver asking for longer is asked again after this (the delivery that got the
    /// answer still waits what it asked, up to the sender's Retry-After ceiling).
    pub max_pause_seconds: u64,
}

/// Default [`HealthPolicy::max_pause_seconds`]: one hour, the default window.
pub const DEFAULT_MAX_PAUSE_SECONDS: u64 = 3600;

/// Most [`HealthPolicy::max_pause_seconds`] may be, in seconds: 24 hours, the default
/// ceiling on a receiver's `Retry-After` ([`crate::retry::DEFAULT_RETRY_AFTER_CEILING_SECONDS`]).
pub const MAX_PAUSE_LIMIT_SECONDS: u64 = crate::retry::DEFAULT_RETRY_AFTER_CEILING_SECONDS;

/// Most doublings of the resume window after pauses in a row: the backlog of a receiver
/// that keeps pushing back comes back over at most 8 probe intervals (8 min by default),
/// so a slowing receiver slows its backlog down without parking it for hours.
pub const MAX_RESUME_DOUBLINGS: u32 = 3;

/// Shortest real probe interval, in milliseconds, whatever the time scale: a circuit is
/// never probed in a tight loop.
pub const MIN_PROBE_INTERVAL_MS: u64 = 100;

/// Longest error text kept as an endpoint's last failure on its health record, in bytes:
/// the record stays under 1 KB (one DynamoDB write unit).
pub const LAST_ERROR_BYTES: usize = 200;

/// Longest response excerpt kept with an endpoint's last failure on its health record, in
/// bytes: what the receiver answered, enough to read "maintenance until 04:00" or the start
/// of an error page, while a busy endpoint's record (a 200-byte error beside it) stays
/// under 1 KB, one DynamoDB write unit (measured by `tests/tests/endpoint_health.rs`). The
/// attempt log keeps the longer excerpt of each attempt.
pub const LAST_EXCERPT_BYTES: usize = 100;

impl Default for HealthPolicy {
    fn default() -> Self {
        Self {
            failure_threshold: 5,
            probe_interval_seconds: 60,
            window_seconds: 3600,
            disable_below: 0.50,
            degraded_below: 0.95,
            min_attempts: 20,
            max_pause_seconds: DEFAULT_MAX_PAUSE_SECONDS,
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
    /// Checks every value's range.
    ///
    /// # Errors
    /// [`HealthPolicyError::OutOfRange`]: threshold 1..=1000; probe interval 1..=900 s
    /// (an SQS `DelaySeconds` carries a deferred delivery to the next probe); window
    /// 60..=86,400 s; rates 0.0..=1.0 with disable <= degraded; longest pause
    /// 1..=[`MAX_PAUSE_LIMIT_SECONDS`] s.
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
        if !(1..=MAX_PAUSE_LIMIT_SECONDS).contains(&self.max_pause_seconds) {
            return bad("longest pause", "1 to 86400 seconds");
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

    /// The model's durations at `time_scale` (values outside (0, 1] mean 1, as for the
    /// retry waits).
    pub fn timings(&self, time_scale: f64) -> Timings {
        Timings {
            time_scale: if time_scale.is_finite() && time_scale > 0.0 && time_scale <= 1.0 {
                time_scale
            } else {
                1.0
            },
            window_seconds: self.window_seconds,
            probe_interval_seconds: self.probe_interval_seconds,
            max_pause_seconds: self.max_pause_seconds,
        }
    }
}

/// The failure model's durations in real time: the policy's (logical) seconds times the
/// time scale. The scale is 1 in production; local mode and the tests play the window, its
/// buckets, the degraded-report interval, the probe interval, pauses and the health cache
/// faster by the same factor as the retry waits, so the model keeps its proportions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timings {
    /// Multiplies every duration, 0 < s <= 1.
    pub time_scale: f64,
    /// The window, logical seconds.
    pub window_seconds: u64,
    /// The probe interval, logical seconds.
    pub probe_interval_seconds: u64,
    /// The longest pause, logical seconds.
    pub max_pause_seconds: u64,
}

impl Timings {
    /// `logical_seconds` in real time.
    pub fn real(&self, logical_seconds: f64) -> std::time::Duration {
        std::time::Duration::try_from_secs_f64(logical_seconds.max(0.0) * self.time_scale)
            .unwrap_or(std::time::Duration::MAX)
    }

    /// The rolling window, real time.
    pub fn window(&self) -> std::time::Duration {
        self.real(self.window_seconds as f64)
    }

    /// Size of one window bucket, in real whole seconds: the window /
    /// [`BUCKETS_PER_WINDOW`], rounded, at least 1 (600 s at scale 1 with the default
    /// window; 6 s at 0.01).
    pub fn bucket_seconds(&self) -> u64 {
        let seconds = self.window().as_secs_f64() / BUCKETS_PER_WINDOW as f64;
        (seconds.round() as u64).max(1)
    }

    /// Time between probes of an open circuit, real time, at least
    /// [`MIN_PROBE_INTERVAL_MS`].
    pub fn probe_interval(&self) -> std::time::Duration {
        self.real(self.probe_interval_seconds as f64)
            .max(std::time::Duration::from_millis(MIN_PROBE_INTERVAL_MS))
    }

    /// The pause a backpressure answer puts on its endpoint, real time: what it asked for
    /// (`Retry-After`, in seconds), or one probe interval when it named no time, at most
    /// [`HealthPolicy::max_pause_seconds`].
    pub fn pause(&self, asked_seconds: Option<u64>) -> std::time::Duration {
        let logical = asked_seconds
            .unwrap_or(self.probe_interval_seconds)
            .min(self.max_pause_seconds);
        self.real(logical as f64)
    }

    /// How long the deliveries held back by the `pauses`-th pause in a row take to come
    /// back, real time: one probe interval for the first, doubling with each pause that
    /// starts before the previous one's resume window is over (a backlog that pushes the
    /// receiver over again comes back slower), up to [`MAX_RESUME_DOUBLINGS`] doublings
    /// (8 probe intervals) and never beyond the longest pause (or one probe interval, if
    /// that is longer).
    pub fn resume_window(&self, pauses: u32) -> std::time::Duration {
        let doublings = pauses.saturating_sub(1).min(MAX_RESUME_DOUBLINGS);
        let logical = self
            .probe_interval_seconds
            .saturating_mul(1u64 << doublings)
            .min(self.max_pause_seconds.max(self.probe_interval_seconds));
        self.real(logical as f64)
            .max(std::time::Duration::from_millis(MIN_PROBE_INTERVAL_MS))
    }

    /// A cache's time to live at this scale: `configured` times the time scale.
    pub fn cache_ttl(&self, configured: std::time::Duration) -> std::time::Duration {
        configured.mul_f64(self.time_scale)
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
    /// Error text, bounded (SQS-safe, at most [`LAST_ERROR_BYTES`]).
    pub error: Option<String>,
    /// The first bytes of what the receiver answered (SQS-safe, at most
    /// [`LAST_EXCERPT_BYTES`]), when it answered with a body.
    #[serde(default)]
    pub excerpt: Option<String>,
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
    /// The receiver pushed back (429, or 503 with `Retry-After`): nothing is sent until
    /// the pause ends.
    Paused,
    /// The endpoint is disabled (auto-disable, a 410, or an operator).
    Disabled,
}

impl std::fmt::Display for HealthState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Healthy => "healthy",
            Self::Degraded => "degraded",
            Self::Open => "open",
            Self::Paused => "paused",
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
    /// When the current run of failures began: the start of the first failed attempt
    /// after the last success (`None` while the last counted attempt succeeded, or before
    /// any failure). Backpressure and failures on our side do not start or end a run.
    #[serde(default)]
    pub failing_since: Option<DateTime<Utc>>,
    /// Set while the circuit is open: when it opened.
    pub opened_at: Option<DateTime<Utc>>,
    /// While open: when the next probe may be sent.
    pub next_probe_at: Option<DateTime<Utc>>,
    /// When the circuit last closed (a probe succeeded); kept until it closes again.
    /// Deliveries held back while it was open come back up to the held-back ceiling
    /// (900 s, [`crate::put_back::held_back_cap`]) after their last hold, which may have
    /// come just before it closed: `tern audit` counts them waiting from here. Absent
    /// from records written before it was kept.
    #[serde(default)]
    pub closed_at: Option<DateTime<Utc>>,
    /// When `endpoint.degraded` was last reported; cleared by `endpoint.recovered`.
    pub degraded_at: Option<DateTime<Utc>>,
    /// When this record auto-disabled the endpoint (cleared by `enable`,
    /// [`HealthStore::reset`]).
    pub disabled_at: Option<DateTime<Utc>>,
    /// Since when the success rate has been below the disable threshold with enough
    /// attempts; cleared once it is not. Auto-disable waits a whole window from here.
    pub below_since: Option<DateTime<Utc>>,
    /// Until when the receiver asked not to be sent anything (backpressure).
    pub paused_until: Option<DateTime<Utc>>,
    /// Pauses in a row: each one that starts within the previous one's resume window
    /// ([`Timings::resume_window`]) counts one more.
    pub pauses: u32,
    /// An operational event decided but not yet published (its owner has not been told).
    pub pending_report: Option<PendingReport>,
    /// The endpoint's rate-limit schedule: the end of the last slot given out
    /// ([`crate::rate_limit`], the theoretical arrival time); `None` for an endpoint never
    /// limited. Not reset by `enable` while it lies ahead (deliveries holding slots may
    /// still be on the queue).
    #[serde(default)]
    pub rate_tat: Option<DateTime<Utc>>,
    /// The pace the receiver's push-backs taught ([`crate::pacing`]): its deliveries are
    /// spaced at the lower of it and the endpoint's own limit. `None` while it has none.
    #[serde(default)]
    pub pace: Option<crate::pacing::Pace>,
    /// Successes per whole Unix second over the last [`RECENT_SECONDS`] seconds (second,
    /// count), any order: what the receiver accepted lately, for the pace a push-back
    /// learns ([`crate::pacing::Pace::estimate`]).
    #[serde(default)]
    pub recent_successes: Vec<(i64, u64)>,
}

/// Seconds of successes a health record keeps per second
/// ([`EndpointHealth::recent_successes`]): ten. A success is counted in the second its
/// request was sent, and its batch writes it when the batch ends, seconds later (a batch
/// waits for its slots and its claims); the pace a push-back learns is read at the second
/// of that push-back ([`crate::pacing::Pace::estimate`]), which a slow batch settles late.
pub const RECENT_SECONDS: i64 = 10;

/// An operational event waiting to be published: written with the change it reports, in
/// the same conditional write, and removed once a publish succeeded, so an SNS outage
/// delays the owner's news but does not lose it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingReport {
    /// The event, as JSON ([`crate::operational::OperationalEvent::to_json`]).
    pub event: String,
    /// When the next publish attempt may be made: a claim by the sender publishing it
    /// now ([`REPORT_CLAIM_SECONDS`]), or after a failed one, one probe interval later.
    pub retry_at: DateTime<Utc>,
}

/// How long a sender that claimed a pending report's publish holds it, in seconds: longer
/// than one publish may take (two SNS calls within the SDK's 6 s budget each,
/// `tern_aws::budget`), so a second sender only tries once the first has crashed.
pub const REPORT_CLAIM_SECONDS: i64 = 30;

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
            failing_since: None,
            opened_at: None,
            next_probe_at: None,
            closed_at: None,
            degraded_at: None,
            disabled_at: None,
            below_since: None,
            paused_until: None,
            pauses: 0,
            pending_report: None,
            rate_tat: None,
            pace: None,
            recent_successes: Vec::new(),
        }
    }

    /// The seconds of [`Self::recent_successes`] no longer kept at `now`: a store removes
    /// them on its next write.
    pub fn expired_seconds(&self, now: DateTime<Utc>) -> Vec<i64> {
        let oldest = now.timestamp() - RECENT_SECONDS + 1;
        self.recent_successes
            .iter()
            .map(|(s, _)| *s)
            .filter(|s| *s < oldest)
            .collect()
    }

    /// True when a batch of only successes can change nothing the model decides on this
    /// record, only its counts ([`transitions`] has nothing to do): the circuit closed, no
    /// pause, no learnt pace, no run of failures, not degraded, not below the disable
    /// threshold, not disabled, nothing left to report, and the window's rate at or above
    /// the degraded threshold (or too few attempts to judge). A sender may then hold such a
    /// batch's counts back for a moment and write them with the next
    /// (`tern_handlers::health`), so a hot healthy endpoint's item is not written once per
    /// batch.
    pub fn is_steady(&self, policy: &HealthPolicy, now: DateTime<Utc>) -> bool {
        let rate = self.window_rate(now);
        let rate_fine = rate.attempts < policy.min_attempts
            || rate.ratio().is_none_or(|r| r >= policy.degraded_below);
        self.opened_at.is_none()
            && self.next_probe_at.is_none()
            && !self.paused(now)
            && self.pace.is_none()
            && self.consecutive_failures == 0
            && self.failing_since.is_none()
            && self.degraded_at.is_none()
            && self.below_since.is_none()
            && self.disabled_at.is_none()
            && self.pending_report.is_none()
            && rate_fine
    }

    /// True while the receiver's pause lasts.
    pub fn paused(&self, now: DateTime<Utc>) -> bool {
        self.paused_until.is_some_and(|t| t > now)
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
        } else if self.paused(now) {
            HealthState::Paused
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

/// What one attempt tells its endpoint's health (decided by [`crate::decision::decide`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthSignal {
    /// Delivered (2xx), in an attempt started at this time.
    Success {
        /// When the attempt started.
        at: DateTime<Utc>,
    },
    /// The receiver failed it: counts in the rate and the consecutive failures.
    Failure(LastFailure),
    /// The receiver pushed back (429, or 503 with `Retry-After`): the endpoint pauses
    /// until this time; counted neither as a success nor as a failure.
    Backpressure {
        /// End of the pause, real time.
        pause_until: DateTime<Utc>,
        /// When the request it answered was sent (the attempt's start).
        sent_at: DateTime<Utc>,
    },
    /// Says nothing about the receiver: a failure on our side, or a destination the SSRF
    /// guard refused (never contacted).
    NotCharged,
}

/// The attempts one sender batch made to one endpoint, in the order they finished:
/// what one health write adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthDelta {
    /// Attempts counted (successes and failures; backpressure and our own failures are not).
    pub attempts: u64,
    /// Of which succeeded.
    pub successes: u64,
    /// Failures after the last success of the batch (all of them when none succeeded).
    pub trailing_failures: u64,
    /// Start of the last successful attempt.
    pub last_success_at: Option<DateTime<Utc>>,
    /// The last failed attempt.
    pub last_failure: Option<LastFailure>,
    /// Start of the first failed attempt after the batch's last success (of the first
    /// failure of the batch when none succeeded): where a run of failures that goes on
    /// after this batch began, as far as this batch knows.
    pub failing_since: Option<DateTime<Utc>>,
    /// Answers that pushed back.
    pub backpressure: u64,
    /// The latest pause end they asked for (capped), real time.
    pub pause_until: Option<DateTime<Utc>>,
    /// When the last request they answered was sent: a push-back to a request sent under
    /// an older pace says nothing about the current one ([`crate::pacing::after_batch`]).
    pub pushed_back_sent_at: Option<DateTime<Utc>>,
    /// Successes per whole Unix second their request was sent in (second, count): the
    /// seconds of [`EndpointHealth::recent_successes`] they are added to.
    pub success_seconds: Vec<(i64, u64)>,
    /// Requests this sender saw the receiver accept in the second before the batch's
    /// latest push-back, counted by send time in the sender's memory: exact for what this
    /// sender sent, a lower bound of what the receiver takes per second
    /// ([`crate::pacing::after_batch`]).
    pub accepted_before_push_back: Option<u32>,
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
            failing_since: None,
            backpressure: 0,
            pause_until: None,
            pushed_back_sent_at: None,
            success_seconds: Vec::new(),
            accepted_before_push_back: None,
            at,
        }
    }

    /// Adds what one attempt told.
    pub fn add(&mut self, signal: HealthSignal) {
        match signal {
            HealthSignal::Success { at } => {
                self.attempts += 1;
                self.successes += 1;
                self.trailing_failures = 0;
                self.failing_since = None;
                self.last_success_at = Some(self.last_success_at.map_or(at, |t| t.max(at)));
                let second = at.timestamp();
                match self.success_seconds.iter_mut().find(|(s, _)| *s == second) {
                    Some((_, n)) => *n += 1,
                    None => self.success_seconds.push((second, 1)),
                }
            }
            HealthSignal::Failure(f) => {
                self.attempts += 1;
                if self.trailing_failures == 0 {
                    self.failing_since = Some(f.at);
                }
                self.trailing_failures += 1;
                self.last_failure = Some(f);
            }
            HealthSignal::Backpressure {
                pause_until,
                sent_at,
            } => {
                self.backpressure += 1;
                self.pause_until =
                    Some(self.pause_until.map_or(pause_until, |t| t.max(pause_until)));
                self.pushed_back_sent_at =
                    Some(self.pushed_back_sent_at.map_or(sent_at, |t| t.max(sent_at)));
            }
            HealthSignal::NotCharged => {}
        }
    }

    /// True when the batch had a success.
    pub fn any_success(&self) -> bool {
        self.successes > 0
    }

    /// True when every counted attempt succeeded and nothing pushed back: a batch whose
    /// write a sender may hold back on a steady record ([`EndpointHealth::is_steady`]).
    pub fn only_successes(&self) -> bool {
        self.attempts > 0
            && self.successes == self.attempts
            && self.trailing_failures == 0
            && self.last_failure.is_none()
            && self.failing_since.is_none()
            && self.backpressure == 0
            && self.pause_until.is_none()
            && self.pushed_back_sent_at.is_none()
    }

    /// One delta of `held` (successes only, [`Self::only_successes`], held back from
    /// earlier batches) followed by this one: the counts added, the successes' seconds
    /// merged, the last success the later of the two. What this delta says of failures,
    /// push-backs and the time its counts go to stays (they came after the held successes).
    pub fn after_held(mut self, held: &HealthDelta) -> Self {
        self.attempts += held.attempts;
        self.successes += held.successes;
        self.last_success_at = match (self.last_success_at, held.last_success_at) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        for (second, n) in &held.success_seconds {
            match self.success_seconds.iter_mut().find(|(s, _)| s == second) {
                Some((_, m)) => *m += n,
                None => self.success_seconds.push((*second, *n)),
            }
        }
        self
    }
}

/// A conditional change of a health record; the store applies it only when its condition
/// holds, so of concurrent senders exactly one wins (and reports the change). A change
/// that is reported to the endpoint's owner writes its event as the record's
/// [`PendingReport`] in the same write.
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
    Close {
        /// `endpoint.recovered`.
        report: PendingReport,
    },
    /// Record that `endpoint.degraded` was reported (only when not reported since
    /// `not_since`, the window's start, and not disabled).
    Degrade {
        /// Start of the current window.
        not_since: DateTime<Utc>,
        /// `endpoint.degraded`.
        report: PendingReport,
    },
    /// Clear the degraded mark (only when set).
    Recover {
        /// `endpoint.recovered`.
        report: PendingReport,
    },
    /// Record the auto-disable (only when not already recorded).
    Disable {
        /// `endpoint.disabled`.
        report: PendingReport,
    },
    /// Pause the endpoint until `until` (only when not already paused as long).
    Pause {
        /// End of the pause.
        until: DateTime<Utc>,
        /// Pauses in a row, this one included.
        pauses: u32,
    },
    /// Change the endpoint's learnt pace ([`crate::pacing`]) at `at`, only while the pace's
    /// last change is still `seen` (its `changed_at` as read; `None`: no pace), so of the
    /// concurrent batches that saw the same answers exactly one changes it.
    /// The same write starts the rate-limit schedule afresh at `restart_at` (its TAT), so
    /// the new pace governs the slots given out from then on.
    SetPace {
        /// The new pace, or forget it.
        change: crate::pacing::PaceChange,
        /// The pace's `changed_at` the caller read.
        seen: Option<DateTime<Utc>>,
        /// The schedule's new TAT: after the slots already handed out to POSTs about to
        /// leave ([`crate::rate_limit::SEND_HORIZON_MS`] at most), so old and new slots do
        /// not overlap.
        restart_at: DateTime<Utc>,
    },
    /// Record that the rate fell below the disable threshold now (only when not recorded).
    MarkBelow,
    /// Clear that mark (only when set).
    ClearBelow,
    /// Move a pending report's next publish attempt to `retry_at` (only while `event` is
    /// still pending and, when `seen` is given, its retry time is still `seen`): a claim
    /// before publishing, or the back-off after a failed publish.
    DeferReport {
        /// The pending event's JSON.
        event: String,
        /// The retry time the caller read, for a claim.
        seen: Option<DateTime<Utc>>,
        /// The next attempt.
        retry_at: DateTime<Utc>,
    },
    /// Remove a pending report once published (only while `event` is still the pending one).
    Reported {
        /// The published event's JSON.
        event: String,
    },
}

impl HealthChange {
    /// The operational event this change reports, written with it.
    pub fn report(&self) -> Option<&PendingReport> {
        match self {
            Self::Close { report }
            | Self::Degrade { report, .. }
            | Self::Recover { report }
            | Self::Disable { report } => Some(report),
            _ => None,
        }
    }
}

/// A change the sender should make after a batch's health write, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Transition {
    /// The receiver pushed back: pause the endpoint.
    Pause {
        /// End of the pause.
        until: DateTime<Utc>,
        /// Pauses in a row, this one included.
        pauses: u32,
    },
    /// The receiver's answers change the endpoint's learnt pace ([`crate::pacing`]).
    Pace {
        /// The change.
        change: crate::pacing::PaceChange,
        /// The pace's `changed_at` as the batch's write returned it.
        seen: Option<DateTime<Utc>>,
    },
    /// N consecutive failures: open the circuit.
    Open,
    /// A probe (or any attempt) succeeded while open: close it (reports `endpoint.recovered`).
    Close,
    /// The success rate fell below the disable threshold with enough attempts: the window
    /// before auto-disable starts now.
    MarkBelow,
    /// The success rate is no longer below the disable threshold (or the volume fell
    /// under the minimum): forget when it fell below.
    ClearBelow,
    /// Below the disable threshold, with enough attempts, for a whole window (reports
    /// `endpoint.disabled`).
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
/// batch), for an endpoint that is `enabled` with its own rate limit `own_limit`, with the
/// model's `timings`:
///
/// - a pause when the receiver pushed back (longer than any pause in force), and the
///   learnt pace's decrease ([`crate::pacing::after_batch`]); its increase, or its end,
///   when the receiver stayed quiet;
/// - below the disable threshold with at least `min_attempts` in the window: the mark
///   when it first falls below, and `Disable` only once it has stayed below for a whole
///   window (a short burst of failures opens the circuit instead);
/// - the circuit: open after `failure_threshold` consecutive failures, close on a success;
/// - `endpoint.degraded` once per window, but only once in all while below the disable
///   threshold (the owner's next news is `endpoint.disabled`, never both at once);
///   `endpoint.recovered` when back at or above the degraded threshold.
pub fn transitions(
    after: &EndpointHealth,
    delta: &HealthDelta,
    enabled: bool,
    own_limit: Option<crate::rate_limit::RateLimit>,
    policy: &HealthPolicy,
    timings: &Timings,
    now: DateTime<Utc>,
) -> Vec<Transition> {
    let mut out = Vec::new();
    if !enabled {
        return out;
    }
    if let Some(until) = delta.pause_until
        && after.paused_until.is_none_or(|p| p < until)
        && crate::pacing::pauses(after.pace, until - delta.pushed_back_sent_at.unwrap_or(now))
    {
        // A pause that starts while the previous one's backlog is still coming back
        // means that backlog pushed the receiver over again: the next comes back slower.
        // Answers to requests already on their way when the pause began extend it and
        // count nothing.
        let pauses = match after.paused_until {
            Some(p) if now <= p => after.pauses.max(1),
            Some(p) if now <= p + chrono_duration(timings.resume_window(after.pauses)) => {
                after.pauses.saturating_add(1)
            }
            _ => 1,
        };
        out.push(Transition::Pause { until, pauses });
    }
    if let Some(change) = crate::pacing::after_batch(
        after.pace,
        &after.recent_successes,
        own_limit,
        delta.pushed_back_sent_at,
        delta.accepted_before_push_back.map(f64::from),
        delta.any_success(),
        now,
    ) {
        out.push(Transition::Pace {
            change,
            seen: after.pace.map(|p| p.changed_at),
        });
    }
    if delta.attempts == 0 {
        // Only backpressure: no counts were written, so `after` is the record as last
        // read, and the rate has nothing new to say.
        return out;
    }
    let rate = after.window_rate(now);
    let enough = rate.attempts >= policy.min_attempts;
    let ratio = rate.ratio().unwrap_or(1.0);
    let below = enough && ratio < policy.disable_below;
    let window = chrono_duration(timings.window());
    if below {
        match after.below_since {
            None => out.push(Transition::MarkBelow),
            Some(since) if now - since >= window && after.disabled_at.is_none() => {
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
            Some(_) => {}
        }
    } else if after.below_since.is_some() {
        out.push(Transition::ClearBelow);
    }
    if after.opened_at.is_some() {
        if delta.any_success() {
            out.push(Transition::Close);
        }
    } else if after.consecutive_failures >= u64::from(policy.failure_threshold) {
        out.push(Transition::Open);
    }
    let window_start = now - window;
    if enough && ratio < policy.degraded_below {
        let due = match after.degraded_at {
            None => true,
            Some(t) => !below && t < window_start,
        };
        if due {
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

/// `d` as a chrono duration (saturating).
pub fn chrono_duration(d: std::time::Duration) -> Duration {
    Duration::from_std(d).unwrap_or(Duration::MAX)
}

/// Where health records live (a DynamoDB table in AWS).
#[async_trait]
pub trait HealthStore: Send + Sync {
    /// One endpoint's record, `None` when it has none (never attempted).
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

    /// Takes slots of the endpoint's rate limit for one batch, in one conditional write
    /// that is safe to retry ([`crate::rate_limit::SlotRequest::apply_to`] says what it
    /// must do). `Ok(Refused)`: the schedule was not as the caller read it; nothing
    /// written.
    async fn reserve_slots(
        &self,
        tenant: &TenantId,
        endpoint: &EndpointId,
        request: &crate::rate_limit::SlotRequest,
    ) -> Result<crate::rate_limit::SlotAnswer, PortError>;

    /// Starts the endpoint afresh (`tern endpoints enable`): deletes everything that
    /// decides (the window, consecutive failures, the circuit, pauses, the learnt pace, the
    /// disable) and keeps its history: the 24 h view ([`EndpointHealth::hourly`]), the
    /// last success and failure, an operational event not yet published, and a rate-limit
    /// schedule that lies ahead ([`EndpointHealth::rate_tat`]).
    async fn reset(&self, tenant: &TenantId, endpoint: &EndpointId) -> Result<(), PortError>;
}

#[cfg(test)]
mod hold_tests {
    use super::*;

    fn success(at: DateTime<Utc>) -> HealthSignal {
        HealthSignal::Success { at }
    }

    #[test]
    fn held_successes_merge_before_the_next_batch() {
        let t0: DateTime<Utc> = "2026-12-01T10:00:00Z".parse().unwrap();
        let mut held = HealthDelta::new(t0);
        held.add(success(t0));
        held.add(success(t0 + Duration::milliseconds(300)));
        assert!(held.only_successes());
        let mut next = HealthDelta::new(t0 + Duration::seconds(1));
        next.add(success(t0 + Duration::milliseconds(900)));
        next.add(HealthSignal::Failure(LastFailure {
            at: t0 + Duration::seconds(1),
            status: Some(500),
            error_class: None,
            error: None,
            excerpt: None,
        }));
        assert!(!next.only_successes());
        let merged = next.clone().after_held(&held);
        assert_eq!((merged.attempts, merged.successes), (4, 3));
        assert_eq!(merged.trailing_failures, 1, "the failure came last");
        assert!(merged.failing_since.is_some() && merged.last_failure.is_some());
        assert_eq!(merged.success_seconds, vec![(t0.timestamp(), 3)]);
        assert_eq!(
            merged.last_success_at,
            Some(t0 + Duration::milliseconds(900))
        );
        assert_eq!(merged.at, next.at, "counted where the later batch goes");
        let mut pushed = HealthDelta::new(t0);
        pushed.add(success(t0));
        pushed.add(HealthSignal::Backpressure {
            pause_until: t0 + Duration::seconds(5),
            sent_at: t0,
        });
        assert!(
            !pushed.only_successes(),
            "a push-back is a change: written at once"
        );
    }

    #[test]
    fn only_a_quiet_healthy_record_is_steady() {
        let now: DateTime<Utc> = "2026-12-01T10:00:00Z".parse().unwrap();
        let policy = HealthPolicy::default();
        let fresh = EndpointHealth::empty(
            TenantId::new("tnt_a").unwrap(),
            EndpointId::new("ep_1").unwrap(),
            600,
        );
        assert!(fresh.is_steady(&policy, now));
        let with = |f: &dyn Fn(&mut EndpointHealth)| {
            let mut h = fresh.clone();
            f(&mut h);
            h.is_steady(&policy, now)
        };
        assert!(!with(&|h| h.opened_at = Some(now)));
        assert!(!with(&|h| h.paused_until = Some(now + Duration::seconds(1))));
        assert!(with(&|h| h.paused_until = Some(now - Duration::seconds(1))));
        assert!(!with(&|h| h.consecutive_failures = 1));
        assert!(!with(&|h| h.degraded_at = Some(now)));
        assert!(!with(&|h| h.below_since = Some(now)));
        assert!(!with(&|h| h.disabled_at = Some(now)));
        assert!(!with(&|h| h.pace = Some(crate::pacing::Pace {
            per_second: 5,
            changed_at: now,
            slow_start: true,
        })));
        // A window rate under the degraded threshold: a success batch may report.
        let start = bucket_start(now, 600);
        assert!(!with(&|h| h.buckets = vec![Bucket {
            start,
            attempts: 100,
            successes: 90,
        }]));
        assert!(with(&|h| h.buckets = vec![Bucket {
            start,
            attempts: 100,
            successes: 99,
        }]));
    }
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

    fn last_failure(status: u16) -> LastFailure {
        LastFailure {
            at: t(0),
            status: Some(status),
            error_class: None,
            error: None,
            excerpt: None,
        }
    }

    fn failure(status: u16) -> HealthSignal {
        HealthSignal::Failure(last_failure(status))
    }

    fn success(at: DateTime<Utc>) -> HealthSignal {
        HealthSignal::Success { at }
    }

    /// A batch of one failed attempt: what most settles that decide on the rate saw.
    fn failed_batch(now: DateTime<Utc>) -> HealthDelta {
        let mut d = HealthDelta::new(now);
        d.add(failure(503));
        d
    }

    fn timings() -> Timings {
        HealthPolicy::default().timings(1.0)
    }

    /// A record holding one current bucket of `attempts` with `successes`.
    fn with_rate(now: DateTime<Utc>, attempts: u64, successes: u64) -> EndpointHealth {
        record(
            vec![Bucket {
                start: bucket_start(now, 600),
                attempts,
                successes,
            }],
            0,
        )
    }

    #[test]
    fn delta_counts_trailing_failures_in_order() {
        let mut d = HealthDelta::new(t(0));
        d.add(failure(503));
        d.add(success(t(1)));
        d.add(failure(500));
        d.add(HealthSignal::NotCharged);
        d.add(failure(500));
        assert_eq!((d.attempts, d.successes, d.trailing_failures), (4, 1, 2));
        assert_eq!(d.last_success_at, Some(t(1)));
    }

    #[test]
    fn failing_since_is_the_first_failure_after_the_last_success() {
        let at = |secs: i64, status: u16| {
            HealthSignal::Failure(LastFailure {
                at: t(secs),
                ..last_failure(status)
            })
        };
        let mut d = HealthDelta::new(t(0));
        d.add(at(1, 503));
        d.add(at(2, 503));
        assert_eq!(d.failing_since, Some(t(1)), "the run's first failure");
        d.add(success(t(3)));
        assert_eq!(d.failing_since, None, "a success ends the run");
        d.add(at(4, 500));
        d.add(HealthSignal::Backpressure {
            pause_until: t(9),
            sent_at: t(0),
        });
        d.add(HealthSignal::NotCharged);
        d.add(at(5, 500));
        assert_eq!(
            d.failing_since,
            Some(t(4)),
            "backpressure and our own failures neither start nor end a run"
        );
    }

    #[test]
    fn backpressure_is_neither_a_success_nor_a_failure() {
        let mut d = HealthDelta::new(t(0));
        d.add(HealthSignal::Backpressure {
            pause_until: t(5),
            sent_at: t(0),
        });
        d.add(HealthSignal::Backpressure {
            pause_until: t(3),
            sent_at: t(0),
        });
        assert_eq!((d.attempts, d.successes, d.trailing_failures), (0, 0, 0));
        assert_eq!((d.backpressure, d.pause_until), (2, Some(t(5))));
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
        d.add(failure(503));
        let h = record(vec![], 4);
        assert!(transitions(&h, &d, true, None, &policy, &timings(), t(0)).is_empty());
        let h = record(vec![], 5);
        assert_eq!(
            transitions(&h, &d, true, None, &policy, &timings(), t(0)),
            vec![Transition::Open]
        );
        let mut open = record(vec![], 0);
        open.opened_at = Some(t(0));
        let mut ok = HealthDelta::new(t(0));
        ok.add(success(t(0)));
        assert_eq!(
            transitions(&open, &ok, true, None, &policy, &timings(), t(0)),
            vec![Transition::Close]
        );
    }

    #[test]
    fn below_the_threshold_is_marked_then_disabled_only_after_a_whole_window() {
        let policy = HealthPolicy::default();
        let now = t(100);
        let mut h = with_rate(now, 19, 2);
        h.last_failure = Some(last_failure(503));
        let d = failed_batch(now);
        // 19 attempts: below the minimum of 20, no rate decision.
        assert!(transitions(&h, &d, true, None, &policy, &timings(), now).is_empty());
        // 20 at 10 %: the window before auto-disable starts, and the owner hears it is degraded.
        h.buckets[0].attempts = 20;
        assert_eq!(
            transitions(&h, &d, true, None, &policy, &timings(), now),
            vec![Transition::MarkBelow, Transition::Degrade]
        );
        // Still below 59 min later: nothing new (degraded is not repeated while below).
        h.below_since = Some(now);
        h.degraded_at = Some(now);
        let later = now + Duration::minutes(59);
        h.buckets[0].start = bucket_start(later, 600);
        assert!(transitions(&h, &d, true, None, &policy, &timings(), later).is_empty());
        // A whole window below: disabled, and nothing else reported beside it.
        let hour = now + Duration::hours(1);
        h.buckets[0].start = bucket_start(hour, 600);
        assert_eq!(
            transitions(&h, &d, true, None, &policy, &timings(), hour),
            vec![Transition::Disable {
                reason: "auto_disabled: 10 % success over 1 h, last status 503".into()
            }]
        );
        // Exactly at the threshold is not below it: the mark is cleared.
        h.buckets[0].successes = 10;
        assert_eq!(
            transitions(&h, &d, true, None, &policy, &timings(), hour),
            vec![Transition::ClearBelow]
        );
    }

    #[test]
    fn a_short_burst_opens_the_circuit_and_never_disables() {
        let policy = HealthPolicy::default();
        let now = t(100);
        // 11 of 23 succeeded, the last 5 failed: below 50 % for a moment.
        let mut h = with_rate(now, 23, 11);
        h.consecutive_failures = 5;
        let d = failed_batch(now);
        let got = transitions(&h, &d, true, None, &policy, &timings(), now);
        assert!(got.contains(&Transition::Open), "{got:?}");
        assert!(got.contains(&Transition::MarkBelow), "{got:?}");
        assert!(!got.iter().any(|t| matches!(t, Transition::Disable { .. })));
        // Ten minutes later the rate is back above 50 %: the mark goes, no disable.
        h.below_since = Some(now);
        let later = now + Duration::minutes(10);
        h.buckets.push(Bucket {
            start: bucket_start(later, 600),
            attempts: 20,
            successes: 20,
        });
        let got = transitions(&h, &d, true, None, &policy, &timings(), later);
        assert!(got.contains(&Transition::ClearBelow), "{got:?}");
        assert!(!got.iter().any(|t| matches!(t, Transition::Disable { .. })));
    }

    #[test]
    fn degraded_once_per_window_then_recovered() {
        let policy = HealthPolicy::default();
        let now = t(100);
        let mut h = with_rate(now, 100, 90);
        let d = failed_batch(now);
        assert_eq!(
            transitions(&h, &d, true, None, &policy, &timings(), now),
            vec![Transition::Degrade]
        );
        h.degraded_at = Some(now);
        assert!(transitions(&h, &d, true, None, &policy, &timings(), now).is_empty());
        h.buckets[0].successes = 96;
        assert_eq!(
            transitions(&h, &d, true, None, &policy, &timings(), now),
            vec![Transition::Recover]
        );
    }

    #[test]
    fn the_window_and_the_degraded_interval_run_at_the_time_scale() {
        let policy = HealthPolicy::default();
        let scaled = policy.timings(0.01);
        assert_eq!(scaled.window(), std::time::Duration::from_secs(36));
        assert_eq!(scaled.bucket_seconds(), 6);
        assert!((599..=600).contains(&scaled.probe_interval().as_millis()));
        assert_eq!(policy.timings(1.0).bucket_seconds(), 600);
        // Values outside (0, 1] mean 1, as for the retry waits.
        assert_eq!(policy.timings(0.0).window(), policy.timings(1.0).window());
        // Below since 40 s at scale 0.01 is more than a (36 s) window: disabled.
        let now = t(100);
        let mut h = with_rate(now, 30, 0);
        h.bucket_seconds = scaled.bucket_seconds();
        h.buckets[0].start = bucket_start(now, 6);
        h.below_since = Some(now - Duration::seconds(40));
        let got = transitions(&h, &failed_batch(now), true, None, &policy, &scaled, now);
        assert!(matches!(got[..], [Transition::Disable { .. }]), "{got:?}");
        // At scale 1 the same 40 s is not a window.
        let got = transitions(&h, &failed_batch(now), true, None, &policy, &timings(), now);
        assert!(
            !got.iter().any(|t| matches!(t, Transition::Disable { .. })),
            "{got:?}"
        );
        // Degraded again after one scaled window, not one hour.
        let mut h = with_rate(now, 100, 90);
        h.bucket_seconds = 6;
        h.buckets[0].start = bucket_start(now, 6);
        h.degraded_at = Some(now - Duration::seconds(37));
        let got = transitions(&h, &failed_batch(now), true, None, &policy, &scaled, now);
        assert_eq!(got, vec![Transition::Degrade]);
    }

    /// The transitions but the learnt pace's (`pacing_follows_the_answers` checks those).
    fn pauses_of(all: Vec<Transition>) -> Vec<Transition> {
        all.into_iter()
            .filter(|t| !matches!(t, Transition::Pace { .. }))
            .collect()
    }

    #[test]
    fn pacing_follows_the_answers() {
        let policy = HealthPolicy::default();
        let tm = timings();
        let now = t(100);
        let mut pushed = HealthDelta::new(now);
        pushed.add(HealthSignal::Backpressure {
            pause_until: t(101),
            sent_at: now,
        });
        pushed.add(HealthSignal::Success { at: now });
        // Five accepted in the second before: the first push-back learns 9/10 of it.
        let mut h = record(vec![], 0);
        h.recent_successes = vec![(now.timestamp() - 1, 5), (now.timestamp(), 1)];
        let got = transitions(&h, &pushed, true, None, &policy, &tm, now);
        assert!(
            got.contains(&Transition::Pace {
                change: crate::pacing::PaceChange::Set {
                    per_second: 5,
                    slow_start: true
                },
                seen: None
            }),
            "{got:?}"
        );
        // The endpoint's own limit caps it, and the pace read is the condition.
        h.pace = Some(crate::pacing::Pace {
            per_second: 3,
            changed_at: t(90),
            slow_start: false,
        });
        let got = transitions(
            &h,
            &pushed,
            true,
            crate::rate_limit::RateLimit::new(2).ok(),
            &policy,
            &tm,
            now,
        );
        assert!(
            got.contains(&Transition::Pace {
                change: crate::pacing::PaceChange::Set {
                    per_second: 2,
                    slow_start: false
                },
                seen: Some(t(90))
            }),
            "{got:?}"
        );
        // A disabled endpoint learns nothing.
        assert!(transitions(&h, &pushed, false, None, &policy, &tm, now).is_empty());
    }

    #[test]
    fn a_paced_endpoint_is_not_paused_by_a_short_push_back_but_by_a_long_one() {
        let policy = HealthPolicy::default();
        let tm = timings();
        let now = t(100);
        let push_back = |seconds: i64| {
            let mut d = HealthDelta::new(now);
            d.add(HealthSignal::Backpressure {
                pause_until: now + Duration::seconds(seconds),
                sent_at: now,
            });
            d
        };
        let is_pause = |t: &Transition| matches!(t, Transition::Pause { .. });
        let mut h = record(vec![], 0);
        // Unpaced: even a one-second push-back pauses it (and teaches a pace).
        let got = transitions(&h, &push_back(1), true, None, &policy, &tm, now);
        assert!(got.iter().any(is_pause), "{got:?}");
        // Paced: a one- or two-second push-back lowers the pace and pauses nothing.
        h.pace = Some(crate::pacing::Pace {
            per_second: 5,
            changed_at: t(90),
            slow_start: false,
        });
        for seconds in [1, 2] {
            let got = transitions(&h, &push_back(seconds), true, None, &policy, &tm, now);
            assert!(!got.iter().any(is_pause), "{got:?}");
            assert!(
                got.contains(&Transition::Pace {
                    change: crate::pacing::PaceChange::Set {
                        per_second: 4,
                        slow_start: false
                    },
                    seen: Some(t(90))
                }),
                "{got:?}"
            );
        }
        // A longer one is the receiver's word that it is down: paused.
        let got = transitions(&h, &push_back(30), true, None, &policy, &tm, now);
        assert!(got.iter().any(is_pause), "{got:?}");
    }

    #[test]
    fn pauses_in_a_row_come_back_slower() {
        let policy = HealthPolicy::default();
        let tm = timings();
        let now = t(100);
        let mut d = HealthDelta::new(now);
        d.add(HealthSignal::Backpressure {
            pause_until: t(101),
            sent_at: t(0),
        });
        let mut h = record(vec![], 0);
        assert_eq!(
            pauses_of(transitions(&h, &d, true, None, &policy, &tm, now)),
            vec![Transition::Pause {
                until: t(101),
                pauses: 1
            }]
        );
        // The backlog of that pause comes back over 60 s; pushed back again within it: 2.
        h.paused_until = Some(t(101));
        h.pauses = 1;
        let mut d2 = HealthDelta::new(t(130));
        d2.add(HealthSignal::Backpressure {
            pause_until: t(131),
            sent_at: t(0),
        });
        assert_eq!(
            pauses_of(transitions(&h, &d2, true, None, &policy, &tm, t(130))),
            vec![Transition::Pause {
                until: t(131),
                pauses: 2
            }]
        );
        // Long after: a fresh start.
        let mut d3 = HealthDelta::new(t(1000));
        d3.add(HealthSignal::Backpressure {
            pause_until: t(1001),
            sent_at: t(0),
        });
        assert_eq!(
            pauses_of(transitions(&h, &d3, true, None, &policy, &tm, t(1000))),
            vec![Transition::Pause {
                until: t(1001),
                pauses: 1
            }]
        );
        // Answers to requests sent before the pause began extend it, not the count.
        let mut d4 = HealthDelta::new(t(100));
        d4.add(HealthSignal::Backpressure {
            pause_until: t(102),
            sent_at: t(0),
        });
        assert_eq!(
            pauses_of(transitions(&h, &d4, true, None, &policy, &tm, t(100))),
            vec![Transition::Pause {
                until: t(102),
                pauses: 1
            }]
        );
        // A backpressure-only batch decides nothing from the (unchanged) rate.
        let mut below = with_rate(now, 30, 0);
        below.below_since = Some(now - Duration::hours(2));
        assert_eq!(
            pauses_of(transitions(&below, &d, true, None, &policy, &tm, now)),
            vec![Transition::Pause {
                until: t(101),
                pauses: 1
            }]
        );
        // A shorter pause than the one in force changes nothing.
        h.paused_until = Some(t(2000));
        assert!(pauses_of(transitions(&h, &d3, true, None, &policy, &tm, t(1000))).is_empty());
        assert_eq!(tm.resume_window(1), std::time::Duration::from_secs(60));
        assert_eq!(tm.resume_window(3), std::time::Duration::from_secs(240));
        assert_eq!(tm.resume_window(30), std::time::Duration::from_secs(480));
        // The pause: what was asked, one probe interval when nothing was, at most the cap.
        assert_eq!(tm.pause(Some(3)), std::time::Duration::from_secs(3));
        assert_eq!(tm.pause(None), std::time::Duration::from_secs(60));
        assert_eq!(tm.pause(Some(86_400)), std::time::Duration::from_secs(3600));
        assert_eq!(
            policy.timings(0.01).pause(Some(100)),
            std::time::Duration::from_secs(1)
        );
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
        for max_pause_seconds in [0, 86_401] {
            let p = HealthPolicy {
                max_pause_seconds,
                ..HealthPolicy::default()
            };
            assert!(p.validate().is_err());
        }
    }
}
