//! Retry policy: the schedule, jitter, `Retry-After`, and where a wait is carried out.
//!
//! A schedule lists the wait before each retry, in seconds, counted from the end of the
//! previous attempt. The default `[60, 300, 1800, 7200, 36000, 86400]` therefore gives 7
//! attempts spread over about 36.6 hours; each wait gets 0-10 % jitter added (never
//! subtracted, so a receiver is never retried sooner than the schedule says).

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// Largest `DelaySeconds` SQS accepts on SendMessage, in seconds (SQS API reference,
/// `DelaySeconds`: 0 to 900). Longer waits go through the Step Functions wait.
pub const MAX_QUEUE_DELAY_SECONDS: u32 = 900;

/// Largest Step Functions execution input, in bytes (Step Functions quota: 256 KiB for
/// an execution's input). A delivery message too large to ride in one waits through
/// chained queue delays instead.
pub const MAX_STEP_FUNCTIONS_INPUT_BYTES: usize = 262_144;

/// Longest wait a single schedule entry may ask for, in seconds: 7 days. Step Functions
/// Standard runs up to a year, but a longer wait is almost certainly a typo.
pub const MAX_SCHEDULE_DELAY_SECONDS: u64 = 7 * 24 * 3600;

/// Longest wait Tern ever schedules, in seconds: the longest schedule entry or
/// `Retry-After` ceiling (7 days each) plus the most jitter (10 %). A message due later
/// than this is corrupt.
pub const MAX_WAIT_SECONDS: u64 = MAX_SCHEDULE_DELAY_SECONDS + MAX_SCHEDULE_DELAY_SECONDS / 10 + 1;

/// Most retries a schedule may hold. Keeps the attempt budget and the attempt log bounded.
pub const MAX_SCHEDULE_LEN: usize = 50;

/// Default ceiling on a receiver's `Retry-After`, in seconds: 24 hours. A receiver asking
/// for more is retried after the ceiling.
pub const DEFAULT_RETRY_AFTER_CEILING_SECONDS: u64 = 24 * 3600;

/// Jitter added to each wait, as a fraction of the wait (0 to 10 %).
pub const MAX_JITTER_FRACTION: f64 = 0.10;

/// Why a schedule is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// More than [`MAX_SCHEDULE_LEN`] entries.
    #[error("a schedule holds at most {MAX_SCHEDULE_LEN} retries, found {0}")]
    TooLong(usize),
    /// An entry is 0 or above [`MAX_SCHEDULE_DELAY_SECONDS`].
    #[error(
        "schedule entry {index} is {seconds} s; each wait must be 1 to {MAX_SCHEDULE_DELAY_SECONDS} s"
    )]
    BadDelay {
        /// 0-based position.
        index: usize,
        /// The value, in seconds.
        seconds: u64,
    },
    /// An entry is not a whole number of seconds.
    #[error("schedule entry {index} is {text:?}, not a whole number of seconds")]
    NotANumber {
        /// 0-based position.
        index: usize,
        /// The text written.
        text: String,
    },
    /// An unknown preset name.
    #[error("unknown schedule preset {0:?}; expected \"default\" or \"short\"")]
    UnknownPreset(String),
}

/// Waits before each retry, in seconds. Attempt budget = entries + 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<u64>", into = "Vec<u64>")]
pub struct RetrySchedule(Vec<u64>);

impl RetrySchedule {
    /// 1 min, 5 min, 30 min, 2 h, 10 h, 24 h (DESIGN.md §3): 7 attempts over ~36.6 h.
    pub fn standard() -> Self {
        Self(vec![60, 300, 1800, 7200, 36_000, 86_400])
    }

    /// 1, 5, 10, 10, 30, 60 min (DESIGN.md §3): 7 attempts over ~1.9 h.
    pub fn short() -> Self {
        Self(vec![60, 300, 600, 600, 1800, 3600])
    }

    /// A preset by name: `default` or `short`.
    ///
    /// # Errors
    /// [`ScheduleError::UnknownPreset`].
    pub fn preset(name: &str) -> Result<Self, ScheduleError> {
        match name {
            "default" | "standard" => Ok(Self::standard()),
            "short" => Ok(Self::short()),
            other => Err(ScheduleError::UnknownPreset(other.to_owned())),
        }
    }

    /// A custom schedule.
    ///
    /// # Errors
    /// [`ScheduleError`] when too long or an entry is out of range.
    pub fn new(delays_seconds: Vec<u64>) -> Result<Self, ScheduleError> {
        if delays_seconds.len() > MAX_SCHEDULE_LEN {
            return Err(ScheduleError::TooLong(delays_seconds.len()));
        }
        if let Some((index, &seconds)) = delays_seconds
            .iter()
            .enumerate()
            .find(|(_, s)| **s == 0 || **s > MAX_SCHEDULE_DELAY_SECONDS)
        {
            return Err(ScheduleError::BadDelay { index, seconds });
        }
        Ok(Self(delays_seconds))
    }

    /// Parses `"60,300,1800"` (seconds) or a preset name.
    ///
    /// # Errors
    /// [`ScheduleError`].
    pub fn parse(text: &str) -> Result<Self, ScheduleError> {
        let text = text.trim();
        if text.chars().next().is_some_and(|c| c.is_ascii_alphabetic()) {
            return Self::preset(text);
        }
        let delays = text
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .enumerate()
            .map(|(index, s)| {
                s.trim()
                    .parse::<u64>()
                    .map_err(|_| ScheduleError::NotANumber {
                        index,
                        text: s.trim().to_owned(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::new(delays)
    }

    /// Waits in seconds.
    pub fn delays(&self) -> &[u64] {
        &self.0
    }

    /// Attempts in one budget: the first attempt plus one per entry.
    pub fn max_attempts(&self) -> u32 {
        u32::try_from(self.0.len()).unwrap_or(u32::MAX - 1) + 1
    }

    /// Scheduled wait (no jitter) after failed attempt `attempt` (1-based), in seconds, or
    /// `None` when that was the last attempt of the budget.
    pub fn wait_after(&self, attempt: u32) -> Option<u64> {
        let index = usize::try_from(attempt).ok()?.checked_sub(1)?;
        self.0.get(index).copied()
    }
}

impl Default for RetrySchedule {
    fn default() -> Self {
        Self::standard()
    }
}

impl TryFrom<Vec<u64>> for RetrySchedule {
    type Error = ScheduleError;
    fn try_from(v: Vec<u64>) -> Result<Self, Self::Error> {
        Self::new(v)
    }
}

impl From<RetrySchedule> for Vec<u64> {
    fn from(s: RetrySchedule) -> Vec<u64> {
        s.0
    }
}

/// `wait_seconds` plus jitter: `unit` in `[0, 1)` picks a point in 0-10 % of the wait.
/// Rounds up, so the result is never below `wait_seconds`.
pub fn with_jitter(wait_seconds: u64, unit: f64) -> u64 {
    let unit = if unit.is_finite() {
        unit.clamp(0.0, 1.0)
    } else {
        0.0
    };
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let extra = (wait_seconds as f64 * MAX_JITTER_FRACTION * unit).ceil() as u64;
    wait_seconds.saturating_add(extra)
}

/// Parses a `Retry-After` value (RFC 9110 §10.2.3): delta-seconds or an HTTP-date.
/// Returns the wait it asks for, in seconds from `now`, or `None` for junk. A date in
/// the past asks for 0 s.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<u64> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Absurdly long digit strings saturate instead of being junk: they ask for "long".
        return Some(value.parse::<u64>().unwrap_or(u64::MAX));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(now)
            .map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0))
            .unwrap_or(0),
    )
}

/// The wait before the next attempt, in seconds: the jittered schedule wait, or the
/// receiver's `Retry-After` when it asks for longer, but never above `ceiling_seconds`
/// for the `Retry-After` part.
pub fn next_wait(
    scheduled_seconds: u64,
    retry_after_seconds: Option<u64>,
    ceiling_seconds: u64,
) -> u64 {
    match retry_after_seconds {
        Some(asked) => scheduled_seconds.max(asked.min(ceiling_seconds)),
        None => scheduled_seconds,
    }
}

/// Where a wait is carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitRoute {
    /// SendMessage with `DelaySeconds` (always 0..=900).
    Queue {
        /// `DelaySeconds`, in seconds.
        delay_seconds: u32,
    },
    /// A Step Functions Standard execution waits, then sends the message.
    StepFunctions {
        /// The Wait state's seconds.
        wait_seconds: u64,
    },
}

/// The real wait, in whole seconds, of a wait of `logical_seconds` at `time_scale`:
/// `ceil(logical * time_scale)` (a scale outside (0, 1] means 1). What the sender waits
/// before a retry, and so what an operator's tools add to a logical wait (the attempt log
/// stores the logical one) to say when the next attempt is due.
pub fn real_wait_seconds(logical_seconds: u64, time_scale: f64) -> u64 {
    let scale = if time_scale.is_finite() && time_scale > 0.0 {
        time_scale.min(1.0)
    } else {
        1.0
    };
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let real = (logical_seconds as f64 * scale).ceil() as u64;
    real
}

/// Routes a wait of `logical_seconds`. The choice is made on the logical wait so that
/// scaled time (`time_scale` < 1, local mode and tests only) exercises the same path as
/// production; the real wait is `ceil(logical * time_scale)` seconds.
pub fn route_wait(logical_seconds: u64, time_scale: f64) -> WaitRoute {
    let real = real_wait_seconds(logical_seconds, time_scale);
    if logical_seconds <= u64::from(MAX_QUEUE_DELAY_SECONDS) {
        WaitRoute::Queue {
            delay_seconds: u32::try_from(real.min(u64::from(MAX_QUEUE_DELAY_SECONDS)))
                .unwrap_or(MAX_QUEUE_DELAY_SECONDS),
        }
    } else {
        WaitRoute::StepFunctions { wait_seconds: real }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    #[test]
    fn default_schedule_shape() {
        let s = RetrySchedule::standard();
        assert_eq!(s.max_attempts(), 7);
        assert_eq!(s.wait_after(1), Some(60));
        assert_eq!(s.wait_after(6), Some(86_400));
        assert_eq!(s.wait_after(7), None);
        assert_eq!(s.wait_after(0), None);
    }

    #[test]
    fn parses_schedules() {
        assert_eq!(
            RetrySchedule::parse("short").unwrap(),
            RetrySchedule::short()
        );
        assert_eq!(RetrySchedule::parse("5, 300").unwrap().delays(), &[5, 300]);
        assert!(RetrySchedule::parse("5,0").is_err());
        assert!(RetrySchedule::parse("5,x").is_err());
        assert!(RetrySchedule::parse("weekly").is_err());
    }

    #[test]
    fn retry_after_forms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        assert_eq!(parse_retry_after("120", now), Some(120));
        assert_eq!(parse_retry_after(" 120 ", now), Some(120));
        assert_eq!(parse_retry_after("abc", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
        assert_eq!(parse_retry_after("", now), None);
        let later = httpdate::fmt_http_date(now + Duration::from_secs(3600));
        assert_eq!(parse_retry_after(&later, now), Some(3600));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(3600));
        assert_eq!(parse_retry_after(&earlier, now), Some(0));
    }

    #[test]
    fn next_wait_rules() {
        assert_eq!(next_wait(60, None, 100), 60);
        assert_eq!(next_wait(60, Some(120), 1000), 120);
        assert_eq!(next_wait(600, Some(120), 1000), 600);
        assert_eq!(next_wait(60, Some(5000), 1000), 1000);
    }

    proptest! {
        #[test]
        fn jitter_within_ten_percent(wait in 0u64..10_000_000, unit in 0.0f64..1.0) {
            let j = with_jitter(wait, unit);
            prop_assert!(j >= wait);
            prop_assert!(j <= wait + wait / 10 + 1);
        }

        /// No SendMessage ever carries a DelaySeconds outside 0..=900, whatever the
        /// schedule, jitter, attempt, Retry-After and time scale.
        #[test]
        fn queue_delay_never_exceeds_900(
            delays in proptest::collection::vec(1u64..=MAX_SCHEDULE_DELAY_SECONDS, 0..12),
            attempt in 1u32..15,
            unit in 0.0f64..1.0,
            retry_after in proptest::option::of(any::<u64>()),
            ceiling in 0u64..10_000_000,
            scale in prop_oneof![Just(1.0f64), 0.0001f64..1.0],
        ) {
            let schedule = RetrySchedule::new(delays).unwrap();
            if let Some(wait) = schedule.wait_after(attempt) {
                let logical = next_wait(with_jitter(wait, unit), retry_after, ceiling);
                prop_assert!(logical >= wait);
                match route_wait(logical, scale) {
                    WaitRoute::Queue { delay_seconds } => {
                        prop_assert!(delay_seconds <= MAX_QUEUE_DELAY_SECONDS);
                        prop_assert!(logical <= u64::from(MAX_QUEUE_DELAY_SECONDS));
                    }
                    WaitRoute::StepFunctions { wait_seconds } => {
                        prop_assert!(logical > u64::from(MAX_QUEUE_DELAY_SECONDS));
                        if scale == 1.0 { prop_assert_eq!(wait_seconds, logical); }
                    }
                }
            }
        }
    }
}
