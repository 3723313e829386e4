//! How long a delivery stays away when the sender puts it back without an attempt: after
//! a failure of our own (a throttled or failed AWS call), and while its endpoint's circuit
//! is open or its receiver paused (issue 29, "failure paths that scale").
//!
//! **Our failures.** Before, a message whose processing failed on our side was reported in
//! `batchItemFailures` and waited out the delivery queue's visibility timeout (360 s) in
//! flight: at ~325 such failures a second the queue's ~120,000 in-flight messages (the SQS
//! quota for a standard queue) were used up and delivery stopped for every tenant, and
//! after `maxReceiveCount` (5) receives SQS's redrive dead-lettered it, so a throttling
//! storm dead-lettered deliveries. Now the sender sends the message again as a new message
//! with a short `DelaySeconds` ([`put_back_delay_seconds`]) and lets the original be
//! deleted: a delayed message is not in flight (the quota counts received, undeleted
//! messages), and a new message starts at receive count 0, so the redrive never sees our
//! own failures. The count of put-backs rides in the message
//! ([`crate::DeliveryMessage::put_back`]) and bounds it instead: the delay grows with it,
//! and a delivery past its retry window is no longer put back (it is left to SQS's
//! redrive, which dead-letters it after its receives, as its schedule would have).
//!
//! **Held back.** A due delivery whose endpoint's circuit is open (or whose receiver asked
//! for a pause) goes back on the queue without spending an attempt. Before, it came back
//! after the next probe plus up to one probe interval, every ~90 s, so a dead endpoint
//! taking 2,000 deliveries a second cost 10,000 re-receives a second after 7.5 minutes,
//! growing with its backlog. Now each hold after the first keeps it away longer
//! ([`held_back_until`]), doubling from the gate's own wait to the queue's 900 s
//! (`DelaySeconds` maximum); [`model`] counts what that saves.

use chrono::{DateTime, Utc};

use crate::decision::our_retry_wait;
use crate::health::chrono_duration;
use crate::retry::MAX_QUEUE_DELAY_SECONDS;

/// The `DelaySeconds` of the `put_back`-th put-back in a row of one delivery (1 for the
/// first) after a failure of ours, in whole seconds: our own retry schedule
/// ([`our_retry_wait`]: 1 s doubling per put-back up to 60 s, between half and all of
/// it by `unit`, a random draw in 0.0..1.0, so a storm of failures does not come back
/// together), times `time_scale`, rounded up. At most 60 s, a sixth of the delivery
/// queue's visibility timeout (360 s) that a batch failure used to wait out, and well
/// inside SQS's 0-900 s.
pub fn put_back_delay_seconds(put_back: u32, unit: f64, time_scale: f64) -> u32 {
    let wait = our_retry_wait(put_back.saturating_sub(1), unit, time_scale);
    let seconds = wait.as_millis().div_ceil(1000);
    u32::try_from(seconds.min(u128::from(MAX_QUEUE_DELAY_SECONDS))).unwrap_or(0)
}

/// When a delivery held back `held_back` times in a row before (0 for its first hold)
/// comes back, from `now`: the first hold keeps to the gate (`gate_until`: after the open
/// circuit's next probe, or the pause's end, spread as the gate spreads it); each later
/// one waits the gate's own wait (at least 1 s) doubled per earlier hold, at most `cap`
/// (900 s, the queue's longest delay, in real time), between half and all of it by `unit`
/// (a random draw in 0.0..1.0), and never less than the gate asks. The growth follows the
/// gate: behind an open circuit (a probe a minute) 60-120 s, then 120-240 s, ... 450-900 s;
/// behind a receiver's 1 s pauses 1-2 s, 2-4 s, ... so a receiver that pauses briefly is
/// not left idle for minutes. A delivery that returns while the endpoint still holds it
/// back waits longer; the backlog of a dead endpoint costs each of its deliveries about one
/// receive per 675 s instead of one a minute ([`model`]).
pub fn held_back_until(
    gate_until: DateTime<Utc>,
    held_back: u32,
    cap: std::time::Duration,
    unit: f64,
    now: DateTime<Utc>,
) -> DateTime<Utc> {
    if held_back == 0 {
        return gate_until;
    }
    let gate_wait = (gate_until - now)
        .to_std()
        .unwrap_or_default()
        .max(std::time::Duration::from_secs(1));
    let ceiling = gate_wait.saturating_mul(1 << held_back.min(16)).min(cap);
    let wait = ceiling.mul_f64(0.5 + 0.5 * unit.clamp(0.0, 1.0));
    gate_until.max(now + chrono_duration(wait))
}

/// The longest a held-back delivery stays away, in real time: the queue's 900 s
/// (`DelaySeconds` maximum, SQS quota) times `time_scale`. A longer wait would cost a
/// Step Functions execution (25 state transitions per million are dearer than the one
/// receive it saves) or a chained delay (a receive anyway).
pub fn held_back_cap(time_scale: f64) -> std::time::Duration {
    std::time::Duration::from_secs_f64(
        f64::from(MAX_QUEUE_DELAY_SECONDS) * time_scale.clamp(0.0, 1.0),
    )
}

/// A model of what a dead endpoint's backlog costs in receives: deliveries arrive at a
/// steady rate while its circuit stays open (probes every `probe_interval`, each failing),
/// and every return of a held-back delivery is one receive (and one re-send). Jitter is
/// taken at its mean (`unit` 0.5), the probe phase uniformly.
pub mod model {
    use std::time::Duration;

    use chrono::{DateTime, TimeZone, Utc};

    use super::{held_back_cap, held_back_until};
    use crate::decision::deferred_until;

    /// Returns within `horizon` of one delivery first held at `start` seconds after the
    /// circuit opened, the circuit probing every `probe` from then on; `growing` uses
    /// [`held_back_until`], else every hold keeps to the gate (the behaviour before).
    pub fn returns_of_one(start: f64, horizon: f64, probe: Duration, growing: bool) -> u32 {
        let t0: DateTime<Utc> = Utc
            .timestamp_opt(1_800_000_000, 0)
            .single()
            .unwrap_or_default();
        let at = |s: f64| t0 + chrono::Duration::milliseconds((s * 1000.0) as i64);
        let secs = |t: DateTime<Utc>| (t - t0).num_milliseconds() as f64 / 1000.0;
        let probe_s = probe.as_secs_f64();
        let mut now = start;
        let mut held = 0u32;
        let mut returns = 0u32;
        loop {
            // The next probe after now: probes at every multiple of the interval.
            let next_probe = ((now / probe_s).floor() + 1.0) * probe_s;
            let gate = deferred_until(at(next_probe), probe, 0.5);
            let until = if growing {
                held_back_until(gate, held, held_back_cap(1.0), 0.5, at(now))
            } else {
                gate
            };
            // SQS takes whole seconds of delay, rounded up.
            now = secs(until).ceil().max(now + 1.0);
            if now >= horizon {
                return returns;
            }
            returns += 1;
            held += 1;
        }
    }

    /// Receives in the first `horizon` seconds of a dead endpoint taking `per_second`
    /// deliveries, and the rate of receives at `horizon` (per second), by sampling one
    /// delivery per `step` seconds of arrivals.
    pub fn backlog_receives(
        per_second: f64,
        horizon: f64,
        probe: Duration,
        growing: bool,
    ) -> (f64, f64) {
        let step = 1.0;
        let mut total = 0.0;
        let mut start = 0.0;
        while start < horizon {
            total += f64::from(returns_of_one(start, horizon, probe, growing)) * per_second * step;
            start += step;
        }
        // The rate at the horizon: receives in its last minute, per second.
        let earlier = {
            let h = horizon - 60.0;
            let mut sum = 0.0;
            let mut start = 0.0;
            while start < h {
                sum += f64::from(returns_of_one(start, h, probe, growing)) * per_second * step;
                start += step;
            }
            sum
        };
        let rate = (total - earlier) / 60.0;
        (total, rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn put_backs_come_back_within_seconds_and_never_past_a_minute() {
        for n in 1..=40 {
            for unit in [0.0, 0.3, 1.0] {
                let d = put_back_delay_seconds(n, unit, 1.0);
                assert!((1..=60).contains(&d), "put-back {n}: {d} s");
            }
        }
        // The first within 1 s, then doubling: 2, 4, 8, ... 60.
        assert_eq!(put_back_delay_seconds(1, 1.0, 1.0), 1);
        assert_eq!(put_back_delay_seconds(3, 1.0, 1.0), 4);
        assert_eq!(put_back_delay_seconds(20, 1.0, 1.0), 60);
        assert!(
            put_back_delay_seconds(20, 0.0, 1.0) >= 30,
            "half of it at least"
        );
        assert_eq!(
            put_back_delay_seconds(5, 1.0, 0.001),
            1,
            "scaled, rounded up"
        );
    }

    #[test]
    fn holds_grow_from_the_gate_towards_900_seconds() {
        let now = Utc::now();
        let gate = now + chrono::Duration::seconds(60);
        let cap = held_back_cap(1.0);
        assert_eq!(
            held_back_until(gate, 0, cap, 0.7, now),
            gate,
            "first hold: the gate"
        );
        let mut last = 0;
        for held in 1..=12 {
            let until = held_back_until(gate, held, cap, 1.0, now);
            let s = (until - now).num_seconds();
            assert!(s >= last, "hold {held}: {s} s after {last} s");
            assert!(s <= 900, "hold {held}: {s} s");
            assert!(s >= (60i64 << held).min(900) / 2, "hold {held}: {s} s");
            last = s;
        }
        assert_eq!(last, 900, "capped at the queue's longest delay");
        // A receiver's 1 s pause grows from 1 s, not from minutes.
        let pause = now + chrono::Duration::seconds(1);
        let s = (held_back_until(pause, 2, cap, 1.0, now) - now).num_seconds();
        assert_eq!(s, 4, "1 s doubled twice");
        // Never earlier than the gate: a pause longer than the backoff keeps to the pause.
        let long = now + chrono::Duration::seconds(3000);
        assert_eq!(held_back_until(long, 3, cap, 1.0, now), long);
    }

    /// The model's numbers for docs/delivery.md: a dead endpoint taking 2,000 deliveries
    /// a second, probing every 60 s.
    #[test]
    fn a_dead_endpoints_backlog_costs_far_fewer_receives() {
        let probe = Duration::from_secs(60);
        let one_before = model::returns_of_one(0.0, 3600.0, probe, false);
        let one_after = model::returns_of_one(0.0, 3600.0, probe, true);
        let (hour_before, rate_before) = model::backlog_receives(2000.0, 3600.0, probe, false);
        let (hour_after, rate_after) = model::backlog_receives(2000.0, 3600.0, probe, true);
        let (_, at_7_5_before) = model::backlog_receives(2000.0, 450.0, probe, false);
        let (_, at_7_5_after) = model::backlog_receives(2000.0, 450.0, probe, true);
        eprintln!(
            "one delivery held an hour: {one_before} returns before, {one_after} after; \
             2,000/s for an hour: {hour_before:.3e} receives before, {hour_after:.3e} after; \
             rate at 7.5 min {at_7_5_before:.0}/s before, {at_7_5_after:.0}/s after; \
             at 1 h {rate_before:.0}/s before, {rate_after:.0}/s after"
        );
        assert!(one_before >= 40, "{one_before}");
        assert!(one_after <= 12, "{one_after}");
        assert!(
            hour_after * 4.0 < hour_before,
            "{hour_after} vs {hour_before}"
        );
        assert!(
            rate_after * 5.0 < rate_before,
            "{rate_after} vs {rate_before}"
        );
    }
}
