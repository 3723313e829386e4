//! Adaptive pacing: a receiver that pushes back (a `429`, or a `503` with `Retry-After`)
//! teaches its endpoint a rate, and the endpoint's rate-limit schedule
//! ([`crate::rate_limit`], one GCRA schedule shared by every sender) then spaces its
//! deliveries at that rate. Additive increase, multiplicative decrease (AIMD, the rule
//! TCP congestion control made standard, RFC 5681 §3.1):
//!
//! - **slow start** after the first push-back of an unpaced endpoint: its pace begins at
//!   [`ESTIMATE_FACTOR`] of what the receiver accepted over the last two seconds
//!   ([`Pace::estimate`]; at the first push-back most of the receiver's recent successes
//!   may not be counted yet, so this can be far too low) and doubles every
//!   [`SLOW_START_EVERY_MS`] while the receiver takes it, until the next push-back (the
//!   start of TCP's congestion control too, RFC 5681 §3.1).
//! - **decrease at once** on a push-back: to [`DECREASE_FACTOR`] of the pace in force.
//!   Only a push-back to a request sent [`DECREASE_GUARD_MS`] or more after the last
//!   change counts: the answers to requests sent under the old pace arrive together and
//!   must not cut it again and again.
//! - **increase slowly** while the receiver stays quiet: one step ([`increase_step`]) per
//!   [`INCREASE_EVERY_MS`] of deliveries without a push-back, only while the endpoint's
//!   traffic fills most of the pace (a pace nobody uses says nothing about the receiver).
//!   The pace is forgotten once it reaches the endpoint's own limit (the operator's or the
//!   customer's `max_per_second`, always the ceiling) or [`crate::rate_limit::MAX_PER_SECOND`],
//!   or after [`FORGET_AFTER_MS`] without a push-back.
//!
//! Every change starts the endpoint's schedule afresh at the new pace: slots given under
//! the old one are void ([`crate::rate_limit::returning`]), and a pace gives out slots only
//! [`crate::rate_limit::PACED_HORIZON_SECONDS`] ahead, so a change governs every delivery
//! within seconds.
//!
//! Every duration here is real time, in every deployment: like the rate limit, pacing
//! follows the receiver's clock, not local mode's time scale. Pure: the sender's settle
//! step applies the change with one conditional write of the health record
//! ([`crate::health::HealthChange::SetPace`]).

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use crate::rate_limit::{MAX_PER_SECOND, RateLimit};

/// What a push-back leaves of the pace in force: three quarters (85 % measured no
/// better against a 5/s receiver in `make bench-pacing`: 2.06 x the ideal against 1.64).
pub const DECREASE_FACTOR: f64 = 0.75;

/// The highest pace a push-back leaves, as a share of what the receiver accepted over the
/// last two seconds: nine tenths, a little under what it showed it takes.
pub const ESTIMATE_FACTOR: f64 = 0.9;

/// How long after a change of the pace a request must have been sent for a push-back to
/// it to change the pace again, in milliseconds: two seconds, more than the slots handed
/// out under the old pace to POSTs about to leave
/// ([`crate::rate_limit::SEND_HORIZON_MS`]), and the window of the `Retry-After: 1`
/// receivers most rate limiters are.
pub const DECREASE_GUARD_MS: i64 = 2_000;

/// Time without a push-back before the pace steps up, in milliseconds: five seconds.
pub const INCREASE_EVERY_MS: i64 = 5_000;

/// Time without a push-back before a pace in slow start doubles, in milliseconds: one
/// second, the receivers' window (at two, a first estimate far too low took 8 s to reach a
/// 50/s receiver's rate).
pub const SLOW_START_EVERY_MS: i64 = 1_000;

/// Share of the pace the accepted traffic must fill for a pace in slow start to double:
/// half (a new pace's first slots begin only after the old schedule's last ones).
pub const UTILISATION_TO_DOUBLE: f64 = 0.5;

/// Share of the pace the endpoint's accepted traffic must fill for it to step up.
pub const UTILISATION_TO_INCREASE: f64 = 0.8;

/// Time without a push-back after which a pace is forgotten, in milliseconds: ten minutes.
pub const FORGET_AFTER_MS: i64 = 600_000;

/// Slowest pace, in requests per second: one. A receiver that takes less than that
/// answers with its `Retry-After`, which pauses the endpoint as long as it asks.
pub const MIN_PER_SECOND: u32 = 1;

/// An endpoint's learnt pace, kept on its health record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pace {
    /// Requests per second, [`MIN_PER_SECOND`]..=[`MAX_PER_SECOND`].
    pub per_second: u32,
    /// When it was last changed (decreased or increased).
    pub changed_at: DateTime<Utc>,
    /// In slow start: doubling while the receiver takes it (until the next push-back).
    #[serde(default)]
    pub slow_start: bool,
}

/// Successes the receiver accepted, per whole Unix second, as the health record keeps
/// them for the last seconds ([`crate::health::EndpointHealth::recent_successes`]).
pub type SecondCounts = [(i64, u64)];

impl Pace {
    /// What the receiver accepted per second lately: the successes of the current and
    /// the previous Unix second over the time they span (1 s plus the part of the current
    /// second gone by), `None` when it accepted nothing in them.
    pub fn estimate(recent: &SecondCounts, now: DateTime<Utc>) -> Option<f64> {
        let second = now.timestamp();
        let accepted: u64 = recent
            .iter()
            .filter(|(s, _)| *s == second || *s == second - 1)
            .map(|(_, n)| *n)
            .sum();
        let span = 1.0 + f64::from(now.timestamp_subsec_millis()) / 1000.0;
        (accepted > 0).then(|| accepted as f64 / span)
    }
}

/// One step up from `per_second`: one request per second, or a twentieth of the pace when
/// that is more, so a fast receiver regains its pace in minutes, not hours.
pub fn increase_step(per_second: u32) -> u32 {
    (per_second / 20).max(1)
}

/// The limit an endpoint's deliveries are spaced by: the lower of its own limit
/// (`max_per_second`) and its learnt pace; `None` when it has neither.
/// The pace's own is given out [`crate::rate_limit::PACED_HORIZON_SECONDS`] ahead
/// ([`RateLimit::paced`]), the endpoint's [`crate::rate_limit::RESERVE_HORIZON_SECONDS`].
pub fn effective_limit(own: Option<RateLimit>, pace: Option<Pace>) -> Option<RateLimit> {
    let paced = pace
        .and_then(|p| RateLimit::paced(p.per_second.clamp(MIN_PER_SECOND, MAX_PER_SECOND)).ok());
    match (own, paced) {
        (Some(a), Some(b)) => Some(if b.per_second() < a.per_second() {
            b
        } else {
            a
        }),
        (a, b) => a.or(b),
    }
}

/// A change of an endpoint's pace, to write conditionally on the pace's `changed_at` as
/// read ([`crate::health::HealthChange::SetPace`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaceChange {
    /// Pace the endpoint at this many requests per second, in slow start or not.
    Set {
        /// Requests per second.
        per_second: u32,
        /// In slow start.
        slow_start: bool,
    },
    /// Forget the pace: the endpoint is sent at its own limit, or unlimited.
    Forget,
}

/// What one sender batch's answers from an endpoint do to its pace:
/// `pushed_back` (when the last request a backpressure answer answered was sent, if any),
/// `accepted` (any success), with the record's `pace` and `recent` successes per second,
/// under the endpoint's own limit `own`. A push-back to a request sent sooner than
/// [`DECREASE_GUARD_MS`] after the pace's last change answers the old pace (its slots
/// were handed out under it), not the current one: it changes nothing.
pub fn after_batch(
    pace: Option<Pace>,
    recent: &SecondCounts,
    own: Option<RateLimit>,
    pushed_back: Option<DateTime<Utc>>,
    accepted: bool,
    now: DateTime<Utc>,
) -> Option<PaceChange> {
    let ceiling = own.map_or(MAX_PER_SECOND, RateLimit::per_second);
    let estimate = Pace::estimate(recent, now);
    let set = |per_second: u32, slow_start: bool| {
        let per_second = per_second.clamp(MIN_PER_SECOND, ceiling.max(MIN_PER_SECOND));
        let same = pace.is_some_and(|p| p.per_second == per_second && p.slow_start == slow_start);
        (!same).then_some(PaceChange::Set {
            per_second,
            slow_start,
        })
    };
    if let Some(sent_at) = pushed_back {
        if let Some(p) = pace
            && sent_at - p.changed_at < Duration::milliseconds(DECREASE_GUARD_MS)
        {
            return None;
        }
        return match pace {
            // The first push-back: the estimate, then slow start finds the rest.
            None => set(
                estimate.map_or(MIN_PER_SECOND, |e| (e * ESTIMATE_FACTOR).floor() as u32),
                true,
            ),
            // Not the estimate: what the receiver accepted lags a pace that just rose.
            Some(p) => set(
                (f64::from(p.per_second) * DECREASE_FACTOR).floor() as u32,
                false,
            ),
        };
    }
    let p = pace?;
    let quiet = now - p.changed_at;
    if quiet >= Duration::milliseconds(FORGET_AFTER_MS) {
        return Some(PaceChange::Forget);
    }
    let used = |share: f64| estimate.is_some_and(|e| e >= f64::from(p.per_second) * share);
    let next = if p.slow_start {
        (accepted
            && used(UTILISATION_TO_DOUBLE)
            && quiet >= Duration::milliseconds(SLOW_START_EVERY_MS))
        .then(|| p.per_second.saturating_mul(2))
    } else {
        (accepted
            && used(UTILISATION_TO_INCREASE)
            && quiet >= Duration::milliseconds(INCREASE_EVERY_MS))
        .then(|| p.per_second.saturating_add(increase_step(p.per_second)))
    }?;
    if next >= ceiling {
        Some(PaceChange::Forget)
    } else {
        set(next, p.slow_start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_764_547_200_000 + ms).unwrap()
    }

    /// A pace out of slow start.
    fn pace(per_second: u32, changed: i64) -> Option<Pace> {
        Some(Pace {
            per_second,
            changed_at: t(changed),
            slow_start: false,
        })
    }

    /// A pace in slow start.
    fn starting(per_second: u32, changed: i64) -> Option<Pace> {
        Some(Pace {
            slow_start: true,
            ..pace(per_second, changed)?
        })
    }

    fn set(per_second: u32, slow_start: bool) -> Option<PaceChange> {
        Some(PaceChange::Set {
            per_second,
            slow_start,
        })
    }

    /// `n` successes in each of the two seconds before `t(ms)`'s.
    fn accepted(ms: i64, per_second: u64) -> Vec<(i64, u64)> {
        let s = t(ms).timestamp();
        vec![(s - 1, per_second), (s, per_second), (s - 5, 1_000)]
    }

    #[test]
    fn the_first_push_back_learns_nine_tenths_of_what_was_accepted_and_starts_slow() {
        // Five accepted in each of the last two seconds, read half a second in: 10 / 1.5.
        let got = after_batch(None, &accepted(500, 5), None, Some(t(500)), true, t(500));
        assert_eq!(got, set(6, true));
        // Nothing accepted yet: the slowest pace.
        assert_eq!(
            after_batch(None, &[], None, Some(t(0)), false, t(0)),
            set(MIN_PER_SECOND, true)
        );
    }

    #[test]
    fn slow_start_doubles_while_the_receiver_takes_it_and_ends_at_the_next_push_back() {
        // Two seconds quiet at 2 a second, 1 a second accepted (half of it): 4.
        assert_eq!(
            after_batch(
                starting(2, 0),
                &accepted(2_000, 1),
                None,
                None,
                true,
                t(2_000)
            ),
            set(4, true)
        );
        // Not yet a second (SLOW_START_EVERY_MS), or the pace not half used: nothing.
        assert_eq!(
            after_batch(starting(2, 0), &accepted(999, 1), None, None, true, t(999)),
            None
        );
        assert_eq!(
            after_batch(
                starting(8, 0),
                &accepted(2_000, 1),
                None,
                None,
                true,
                t(2_000)
            ),
            None
        );
        // A push-back: three quarters of 8, and slow start is over.
        let five = vec![(t(3_000).timestamp() - 1, 5)];
        assert_eq!(
            after_batch(starting(8, 0), &five, None, Some(t(3_000)), true, t(3_000)),
            set(6, false)
        );
    }

    #[test]
    fn a_push_back_cuts_the_pace_once_per_guard() {
        // Paced at 8: three quarters of 8, whatever was accepted.
        let got = after_batch(
            pace(8, 0),
            &accepted(5_000, 10),
            None,
            Some(t(5_000)),
            true,
            t(5_000),
        );
        assert_eq!(got, set(6, false));
        let got = after_batch(
            pace(8, 0),
            &accepted(5_000, 1),
            None,
            Some(t(5_000)),
            true,
            t(5_000),
        );
        assert_eq!(got, set(6, false));
        // Within two seconds of the last change: the answers of the old pace cut nothing.
        assert_eq!(
            after_batch(
                pace(8, 0),
                &accepted(1_999, 10),
                None,
                Some(t(1_999)),
                true,
                t(1_999)
            ),
            None
        );
        // Answered long after, but sent under the old pace: still nothing.
        assert_eq!(
            after_batch(
                pace(8, 0),
                &accepted(9_000, 10),
                None,
                Some(t(1_000)),
                true,
                t(9_000)
            ),
            None
        );
        // Never below one a second.
        assert_eq!(
            after_batch(pace(1, 0), &[], None, Some(t(2_000)), false, t(2_000)),
            None
        );
    }

    #[test]
    fn quiet_busy_seconds_raise_the_pace_up_to_the_ceiling() {
        // Five seconds quiet, traffic at the pace: one step.
        assert_eq!(
            after_batch(pace(5, 0), &accepted(5_000, 5), None, None, true, t(5_000)),
            set(6, false)
        );
        // A fast receiver steps by a twentieth.
        assert_eq!(
            after_batch(
                pace(200, 0),
                &accepted(5_000, 200),
                None,
                None,
                true,
                t(5_000)
            ),
            set(210, false)
        );
        // Not yet five seconds, or the pace not used: nothing.
        assert_eq!(
            after_batch(pace(5, 0), &accepted(4_999, 5), None, None, true, t(4_999)),
            None
        );
        assert_eq!(
            after_batch(pace(5, 0), &accepted(5_000, 1), None, None, true, t(5_000)),
            None
        );
        // Reaching the endpoint's own limit: forgotten, the limit rules again.
        let own = RateLimit::new(6).ok();
        assert_eq!(
            after_batch(pace(5, 0), &accepted(5_000, 5), own, None, true, t(5_000)),
            Some(PaceChange::Forget)
        );
        // Ten minutes without a push-back: forgotten.
        assert_eq!(
            after_batch(pace(5, 0), &[], None, None, false, t(FORGET_AFTER_MS)),
            Some(PaceChange::Forget)
        );
    }

    #[test]
    fn the_own_limit_is_the_ceiling_of_every_pace() {
        let own = RateLimit::new(4).ok();
        assert_eq!(
            after_batch(None, &accepted(0, 50), own, Some(t(0)), true, t(0)),
            set(4, true)
        );
        assert_eq!(effective_limit(own, pace(10, 0)), own);
        assert_eq!(effective_limit(own, pace(2, 0)), RateLimit::paced(2).ok());
        assert_eq!(effective_limit(None, pace(2, 0)), RateLimit::paced(2).ok());
        assert_eq!(effective_limit(None, None), None);
    }
}
