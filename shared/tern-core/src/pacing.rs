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

/// The longest push-back that pauses an endpoint which has a pace already, in
/// milliseconds: two seconds. A paced receiver that refuses a request and asks for a second or
/// two has said its window was full, not that it is down: the pace's decrease answers
/// that ([`after_batch`]), and a pause on top would leave every slot of the pause unused
/// and send the held-back deliveries round the queue (measured in `make bench-pacing`:
/// each such pause cost the 5/s receiver about two seconds of traffic). A longer
/// `Retry-After` pauses it as it would an unpaced one.
pub const PACED_SHORT_PUSH_BACK_MS: i64 = 2_000;

/// Whether a push-back asking for a pause of `asked` pauses an endpoint whose pace is
/// `pace`: always when it has none; only a pause longer than
/// [`PACED_SHORT_PUSH_BACK_MS`] when it has one.
pub fn pauses(pace: Option<Pace>, asked: Duration) -> bool {
    pace.is_none() || asked > Duration::milliseconds(PACED_SHORT_PUSH_BACK_MS)
}

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
    /// What the receiver accepted per second around `at`: the successes sent in `at`'s
    /// Unix second and the one before over the time they span (1 s plus the part of
    /// `at`'s second gone by), `None` when it accepted nothing in them. Read at a
    /// push-back's send time it is the rate the receiver held when it refused; read at a
    /// batch's end it is the traffic the pace carries.
    pub fn estimate(recent: &SecondCounts, at: DateTime<Utc>) -> Option<f64> {
        let second = at.timestamp();
        let accepted: u64 = recent
            .iter()
            .filter(|(s, _)| *s == second || *s == second - 1)
            .map(|(_, n)| *n)
            .sum();
        let span = 1.0 + f64::from(at.timestamp_subsec_millis()) / 1000.0;
        (accepted > 0).then(|| accepted as f64 / span)
    }

    /// The busiest of the last [`BUSY_SECONDS`] whole seconds before `now`'s, in
    /// successes: what the pace carried at its best lately. A success is counted in the
    /// second it was sent but written when its batch ends, so the current second (and
    /// often the one before) is not complete yet; the busiest complete second says
    /// whether the traffic fills the pace.
    pub fn busiest_recent_second(recent: &SecondCounts, now: DateTime<Utc>) -> u64 {
        let second = now.timestamp();
        recent
            .iter()
            .filter(|(s, _)| *s < second && *s >= second - BUSY_SECONDS)
            .map(|(_, n)| *n)
            .max()
            .unwrap_or(0)
    }
}

/// Whole seconds before the current one that [`Pace::busiest_recent_second`] reads:
/// three, more than a batch takes to write its successes.
pub const BUSY_SECONDS: i64 = 3;

/// The pace after a push-back to `per_second`, given `estimate`, what the receiver
/// accepted per second just before it (the larger of the record's estimate at the
/// push-back and what this sender saw, `None` when neither knows): always at least one
/// less. Without an estimate, [`DECREASE_FACTOR`] of it, rounded to the nearest whole
/// request (three quarters of 5 is 4, not 3: at small rates rounding down cuts a third).
/// With one, [`ESTIMATE_FACTOR`] of the estimate, but never less than half the pace in
/// one step: a pace far above what the receiver takes comes down in one or two steps
/// instead of many, and an estimate that misses other senders' successes cannot take it
/// down to a fraction of what the receiver takes.
pub fn decreased(per_second: u32, estimate: Option<f64>) -> u32 {
    let target = match estimate {
        Some(e) => ((e * ESTIMATE_FACTOR).floor() as u32).max(per_second.div_ceil(2)),
        None => (f64::from(per_second) * DECREASE_FACTOR).round() as u32,
    };
    target.min(per_second.saturating_sub(1))
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
    let paced = pace.and_then(|p| {
        RateLimit::paced(p.per_second.clamp(MIN_PER_SECOND, MAX_PER_SECOND))
            .ok()
            .map(|l| l.with_epoch(p.changed_at))
    });
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
/// `seen` (what this sender saw the receiver accept per second before that push-back,
/// [`crate::health::HealthDelta::accepted_before_push_back`]), `accepted` (any success),
/// with the record's `pace` and `recent` successes per second, under the endpoint's own
/// limit `own`. A push-back to a request sent sooner than [`DECREASE_GUARD_MS`] after the
/// pace's last change answers the old pace (its slots were handed out under it), not the
/// current one: it changes nothing.
///
/// The first push-back learns [`ESTIMATE_FACTOR`] of the larger of the record's estimate
/// at the push-back ([`Pace::estimate`]: every sender's successes) and `seen`. When this
/// sender saw at least as much as the record holds, the estimate is the receiver's rate
/// and the pace starts there; when the record holds more (other senders' successes) or
/// nothing was accepted, the estimate may be low and the pace starts in slow start.
#[allow(clippy::too_many_arguments)]
pub fn after_batch(
    pace: Option<Pace>,
    recent: &SecondCounts,
    own: Option<RateLimit>,
    pushed_back: Option<DateTime<Utc>>,
    seen: Option<f64>,
    accepted: bool,
    now: DateTime<Utc>,
) -> Option<PaceChange> {
    let ceiling = own.map_or(MAX_PER_SECOND, RateLimit::per_second);
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
        let recorded = Pace::estimate(recent, sent_at);
        let estimate = match (recorded, seen) {
            (Some(r), Some(s)) => Some(r.max(s)),
            (r, s) => r.or(s),
        };
        return match pace {
            // The first push-back: the estimate, then slow start finds what it missed.
            None => {
                let complete = seen.is_some_and(|s| recorded.is_none_or(|r| s >= r));
                set(
                    estimate.map_or(MIN_PER_SECOND, |e| (e * ESTIMATE_FACTOR).floor() as u32),
                    !complete || estimate.is_none_or(|e| e * ESTIMATE_FACTOR < 2.0),
                )
            }
            // Not the estimate: what the receiver accepted lags a pace that just rose.
            Some(p) => set(decreased(p.per_second, estimate), false),
        };
    }
    let p = pace?;
    let quiet = now - p.changed_at;
    if quiet >= Duration::milliseconds(FORGET_AFTER_MS) {
        return Some(PaceChange::Forget);
    }
    let busiest = Pace::busiest_recent_second(recent, now) as f64;
    let used = |share: f64| busiest >= f64::from(p.per_second) * share;
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
        let got = after_batch(
            None,
            &accepted(500, 5),
            None,
            Some(t(500)),
            None,
            true,
            t(500),
        );
        assert_eq!(got, set(6, true));
        // Nothing accepted yet: the slowest pace.
        assert_eq!(
            after_batch(None, &[], None, Some(t(0)), None, false, t(0)),
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
                None,
                true,
                t(2_000)
            ),
            set(4, true)
        );
        // Not yet a second (SLOW_START_EVERY_MS), or the pace not half used: nothing.
        assert_eq!(
            after_batch(
                starting(2, 0),
                &accepted(999, 1),
                None,
                None,
                None,
                true,
                t(999)
            ),
            None
        );
        assert_eq!(
            after_batch(
                starting(8, 0),
                &accepted(2_000, 1),
                None,
                None,
                None,
                true,
                t(2_000)
            ),
            None
        );
        // A push-back with 5 a second accepted before it: nine tenths of 5 but at most
        // halving, 4, and slow start is over.
        let five = vec![(t(3_000).timestamp() - 1, 5)];
        assert_eq!(
            after_batch(
                starting(8, 0),
                &five,
                None,
                Some(t(3_000)),
                None,
                true,
                t(3_000)
            ),
            set(4, false)
        );
        // Nothing on the record: three quarters of 8.
        assert_eq!(
            after_batch(
                starting(8, 0),
                &[],
                None,
                Some(t(3_000)),
                None,
                true,
                t(3_000)
            ),
            set(6, false)
        );
    }

    #[test]
    fn a_push_back_cuts_the_pace_once_per_guard() {
        // Paced at 8 with 20 a second accepted around the push-back: one less.
        let got = after_batch(
            pace(8, 0),
            &accepted(5_000, 10),
            None,
            Some(t(5_000)),
            None,
            true,
            t(5_000),
        );
        assert_eq!(got, set(7, false));
        let got = after_batch(
            pace(8, 0),
            &accepted(5_000, 1),
            None,
            Some(t(5_000)),
            None,
            true,
            t(5_000),
        );
        // Two a second accepted: half of 8 at most in one step.
        assert_eq!(got, set(4, false));
        // Within two seconds of the last change: the answers of the old pace cut nothing.
        assert_eq!(
            after_batch(
                pace(8, 0),
                &accepted(1_999, 10),
                None,
                Some(t(1_999)),
                None,
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
                None,
                true,
                t(9_000)
            ),
            None
        );
        // Never below one a second.
        assert_eq!(
            after_batch(pace(1, 0), &[], None, Some(t(2_000)), None, false, t(2_000)),
            None
        );
    }

    #[test]
    fn quiet_busy_seconds_raise_the_pace_up_to_the_ceiling() {
        // Five seconds quiet, traffic at the pace: one step.
        assert_eq!(
            after_batch(
                pace(5, 0),
                &accepted(5_000, 5),
                None,
                None,
                None,
                true,
                t(5_000)
            ),
            set(6, false)
        );
        // A fast receiver steps by a twentieth.
        assert_eq!(
            after_batch(
                pace(200, 0),
                &accepted(5_000, 200),
                None,
                None,
                None,
                true,
                t(5_000)
            ),
            set(210, false)
        );
        // Not yet five seconds, or the pace not used: nothing.
        assert_eq!(
            after_batch(
                pace(5, 0),
                &accepted(4_999, 5),
                None,
                None,
                None,
                true,
                t(4_999)
            ),
            None
        );
        assert_eq!(
            after_batch(
                pace(5, 0),
                &accepted(5_000, 1),
                None,
                None,
                None,
                true,
                t(5_000)
            ),
            None
        );
        // Reaching the endpoint's own limit: forgotten, the limit rules again.
        let own = RateLimit::new(6).ok();
        assert_eq!(
            after_batch(
                pace(5, 0),
                &accepted(5_000, 5),
                own,
                None,
                None,
                true,
                t(5_000)
            ),
            Some(PaceChange::Forget)
        );
        // Ten minutes without a push-back: forgotten.
        assert_eq!(
            after_batch(pace(5, 0), &[], None, None, None, false, t(FORGET_AFTER_MS)),
            Some(PaceChange::Forget)
        );
    }

    #[test]
    fn the_own_limit_is_the_ceiling_of_every_pace() {
        let own = RateLimit::new(4).ok();
        assert_eq!(
            after_batch(None, &accepted(0, 50), own, Some(t(0)), None, true, t(0)),
            set(4, true)
        );
        assert_eq!(effective_limit(own, pace(10, 0)), own);
        let two = RateLimit::paced(2).ok().map(|l| l.with_epoch(t(0)));
        assert_eq!(effective_limit(own, pace(2, 0)), two);
        assert_eq!(effective_limit(None, pace(2, 0)), two);
        assert_eq!(effective_limit(None, None), None);
    }

    #[test]
    fn what_this_sender_saw_accepted_sets_the_first_pace_without_slow_start() {
        // The record has nothing yet (its batches have not written), this sender saw 5
        // accepted in the second before: four a second, not one, and no slow start.
        assert_eq!(
            after_batch(None, &[], None, Some(t(500)), Some(5.0), false, t(6_500)),
            set(4, false)
        );
        // The record holds more than this sender saw (others sent too): slow start.
        assert_eq!(
            after_batch(
                None,
                &accepted(500, 5),
                None,
                Some(t(500)),
                Some(3.0),
                true,
                t(500)
            ),
            set(6, true)
        );
        // Fifty seen: forty-five, in congestion avoidance at once.
        assert_eq!(
            after_batch(None, &[], None, Some(t(0)), Some(50.0), false, t(0)),
            set(45, false)
        );
        // Too little seen to tell: slow start from it.
        assert_eq!(
            after_batch(None, &[], None, Some(t(0)), Some(2.0), false, t(0)),
            set(1, true)
        );
    }

    #[test]
    fn the_first_estimate_reads_the_seconds_of_the_push_back_not_of_the_late_settle() {
        // Successes sent in the two seconds before a push-back at t(1_500), the batch
        // settling six seconds later: the estimate is still theirs (10 over 1.5 s).
        let recent = accepted(1_500, 5);
        assert_eq!(
            after_batch(None, &recent, None, Some(t(1_500)), None, true, t(7_500)),
            set(6, true)
        );
    }

    #[test]
    fn a_decrease_goes_to_what_was_accepted_at_most_halving_and_never_stays_put() {
        assert_eq!(decreased(5, None), 4);
        assert_eq!(decreased(8, None), 6);
        assert_eq!(decreased(2, None), 1);
        assert_eq!(decreased(1, None), 0);
        // With an estimate: nine tenths of it, still below the refused pace...
        assert_eq!(decreased(40, Some(38.0)), 34);
        assert_eq!(decreased(5, Some(10.0)), 4);
        assert_eq!(decreased(5, Some(5.0)), 4);
        // ...and never below half the pace in one step.
        assert_eq!(decreased(12, Some(5.0)), 6);
        assert_eq!(decreased(6, Some(5.0)), 4);
        assert_eq!(decreased(100, Some(1.0)), 50);
    }

    #[test]
    fn the_busiest_complete_second_says_whether_the_pace_is_used() {
        let s = t(5_500).timestamp();
        let recent = [(s, 9), (s - 1, 2), (s - 2, 4), (s - 4, 8)];
        // The current second (9, still counting) and one older than three are not read.
        assert_eq!(Pace::busiest_recent_second(&recent, t(5_500)), 4);
        assert_eq!(Pace::busiest_recent_second(&[], t(5_500)), 0);
    }
}
