//! One place decides what happens to a delivery (DESIGN.md §5 and §10), in two pure
//! functions the sender executes:
//!
//! - before a POST, [`gate`]: may anything be sent to this endpoint now? A closed circuit
//!   sends; an open one sends one probe per interval; a receiver's pause (backpressure)
//!   sends nothing until it ends (then the pace it taught spaces the backlog:
//!   [`crate::pacing`]). Whatever is held back is deferred without spending an attempt
//!   ([`deferred_until`]), within its retry window ([`retry_window_end`]).
//! - after it, [`decide`]: from the attempt's result, the delivery's place in its
//!   schedule, the endpoint's policy and the failure model's timings, what happens to the
//!   delivery ([`Next`]) and what the attempt tells the endpoint's health
//!   ([`HealthSignal`]).
//!
//! The model judges receivers by what they did: a `429`, or a `503` with `Retry-After`,
//! is backpressure (the endpoint pauses and learns a pace; never counted as a failure),
//! and a failure on our side ([`ErrorClass::is_ours`]) is never charged to the endpoint.
//! Neither spends an attempt: the same attempt is made again ([`Next::Again`]), after the
//! receiver's pause, or on our own short schedule ([`our_retry_wait`]), never on the
//! receiver's backoff; within the delivery's retry window like every wait.

use chrono::{DateTime, Utc};

use crate::health::{
    EndpointHealth, HealthSignal, LAST_ERROR_BYTES, LAST_EXCERPT_BYTES, LastFailure, Timings,
    chrono_duration,
};
use crate::message::DeadLetterReason;
use crate::outcome::{AttemptResult, ErrorClass};
use crate::retry::{MAX_JITTER_FRACTION, RetrySchedule, next_wait, parse_retry_after, with_jitter};

/// What the sender may do with an endpoint's due deliveries now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Gate {
    /// Closed circuit, no pause: send every due delivery.
    Send,
    /// Open, and the probe time has come: one delivery may be sent once the probe is
    /// claimed ([`crate::health::HealthChange::ClaimProbe`] with this `seen` value).
    ProbeDue {
        /// The `next_probe_at` the decision was based on.
        seen: Option<DateTime<Utc>>,
    },
    /// Every due delivery waits: until the next probe of an open circuit, or the end of
    /// the receiver's pause (whichever is later), then comes back spread over `spread`.
    Wait {
        /// The earliest time anything may be sent.
        until: DateTime<Utc>,
        /// Over how long the held-back deliveries come back after `until`: one probe
        /// interval for an open circuit, the resume window
        /// ([`Timings::resume_window`]) for a pause.
        spread: std::time::Duration,
    },
}

/// The gate of an endpoint whose health record is `health` (`None`: never attempted).
pub fn gate(health: Option<&EndpointHealth>, timings: &Timings, now: DateTime<Utc>) -> Gate {
    let Some(h) = health else {
        return Gate::Send;
    };
    let next_probe = h.opened_at.and(h.next_probe_at).filter(|t| *t > now);
    match (h.paused_until.filter(|p| *p > now), h.opened_at) {
        // The receiver's own word holds everything, an open circuit's probe included.
        // The held-back deliveries come back over the resume window, but never over more
        // than the pause itself lasts: after a one-second pause the pace the receiver
        // taught spaces them (`crate::pacing`), and a minute of spread would only leave
        // the receiver idle.
        (Some(paused_until), _) => Gate::Wait {
            until: next_probe.map_or(paused_until, |p| p.max(paused_until)),
            spread: timings
                .resume_window(h.pauses)
                .min((paused_until - now).to_std().unwrap_or_default()),
        },
        (None, Some(_)) => match next_probe {
            Some(t) => Gate::Wait {
                until: t,
                spread: timings.probe_interval(),
            },
            None => Gate::ProbeDue {
                seen: h.next_probe_at,
            },
        },
        // After a pause the backlog is spaced by the pace the receiver taught (the rate
        // limit's schedule, `crate::pacing`), not by this gate.
        (None, None) => Gate::Send,
    }
}

/// When a held-back delivery comes back: after `until`, spread over `spread` (`unit` in
/// 0.0..1.0, a random draw), so the waiting deliveries do not all return in the same
/// second once the circuit closes or the pause ends.
pub fn deferred_until(
    until: DateTime<Utc>,
    spread: std::time::Duration,
    unit: f64,
) -> DateTime<Utc> {
    let spread_ms = spread.as_millis() as f64 * unit.clamp(0.0, 1.0);
    // A deferred delivery comes back at least a little after the probe, so the probe's
    // result is usually known when it does.
    until + chrono::Duration::milliseconds(spread_ms as i64 + 250)
}

/// The end of a delivery's retry window: `first` (its first attempt, or its event's
/// creation) plus `schedule`'s span with the largest jitter (+10 %,
/// [`MAX_JITTER_FRACTION`]), scaled by `time_scale`, plus one `probe_interval`. A delivery
/// held back by an open circuit or a pause past this time is dead-lettered `exhausted`;
/// the margins mean one that kept to its schedule is never cut short by a short deferral
/// of its last attempt.
pub fn retry_window_end(
    first: DateTime<Utc>,
    schedule: &RetrySchedule,
    time_scale: f64,
    probe_interval: std::time::Duration,
) -> DateTime<Utc> {
    let span_seconds: u64 = schedule.delays().iter().sum();
    let span = std::time::Duration::from_secs_f64(
        span_seconds as f64 * (1.0 + MAX_JITTER_FRACTION) * time_scale,
    ) + probe_interval;
    first + chrono_duration(span)
}

/// What the sender knows when an attempt's result comes back.
#[derive(Debug, Clone, Copy)]
pub struct AttemptContext<'a> {
    /// This attempt's number, 1-based.
    pub attempt: u32,
    /// The attempt budget of the delivery (its endpoint's, at most the schedule's).
    pub max_attempts: u32,
    /// The endpoint's retry schedule (its own, or the deployment's).
    pub schedule: &'a RetrySchedule,
    /// Most a receiver's `Retry-After` can push this delivery's next attempt out, in
    /// seconds (the sender's `TERN_RETRY_AFTER_CEILING_SECONDS`).
    pub retry_after_ceiling_seconds: u64,
    /// The failure model's durations (pauses).
    pub timings: &'a Timings,
    /// When the attempt started (the health counts' time).
    pub started_at: DateTime<Utc>,
    /// When its result came back.
    pub now: DateTime<Utc>,
    /// A random draw in 0.0..1.0 for the retry's jitter.
    pub jitter: f64,
    /// The first bytes of the receiver's answer, when it sent a body (already reduced to
    /// SQS-safe text): kept with a failure on the endpoint's health record, cut to
    /// [`crate::health::LAST_EXCERPT_BYTES`].
    pub excerpt: Option<&'a str>,
    /// Earlier tries of this attempt that were not counted (pushed back, our failures,
    /// taken over): the ledger's takeover number of this try. Our own retry schedule
    /// ([`our_retry_wait`]) backs off with it.
    pub tries: u32,
    /// The end of the delivery's retry window ([`retry_window_end`]): an attempt made
    /// again later than this is dead-lettered `exhausted` instead.
    pub window_end: DateTime<Utc>,
}

/// First wait of our own retry schedule, in milliseconds: one second.
pub const OUR_RETRY_BASE_MS: u64 = 1_000;

/// Longest wait of our own retry schedule, in milliseconds: one minute.
pub const OUR_RETRY_CAP_MS: u64 = 60_000;

/// The wait before an attempt that failed on our side (our resolver, our local resources,
/// our TLS set-up, our AWS calls) is made again, real time: [`OUR_RETRY_BASE_MS`] doubled
/// per earlier try (`tries`), at most [`OUR_RETRY_CAP_MS`], between half and all of it by
/// `unit` (0.0..1.0, a random draw: "equal jitter", so a burst of our failures does not come
/// back at once), times `time_scale` like every wait of a deployment (1.0 in production;
/// tests and demos compress it with the rest). It never depends on the receiver's schedule.
pub fn our_retry_wait(tries: u32, unit: f64, time_scale: f64) -> std::time::Duration {
    let ceiling = OUR_RETRY_BASE_MS
        .saturating_mul(1 << tries.min(16))
        .min(OUR_RETRY_CAP_MS);
    let ms = ceiling as f64 * (0.5 + 0.5 * unit.clamp(0.0, 1.0)) * time_scale.clamp(0.0, 1.0);
    std::time::Duration::from_millis(ms as u64)
}

/// Why an attempt is made again without counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgainBecause {
    /// The receiver pushed back (429, or 503 with `Retry-After`).
    Backpressure,
    /// The failure was ours ([`ErrorClass::is_ours`]).
    OurFailure,
}

/// What happens to the delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// 2xx: done.
    Delivered,
    /// Try again after `wait_seconds` (logical, before time scaling): the jittered
    /// schedule wait, or the receiver's `Retry-After` when it asks for longer (capped).
    Retry {
        /// The wait, in seconds.
        wait_seconds: u64,
    },
    /// Not counted: the same attempt is made again at `at` (real time), no attempt spent.
    Again {
        /// When it comes back.
        at: DateTime<Utc>,
        /// Why.
        because: AgainBecause,
    },
    /// Stop now and dead-letter.
    DeadLetter(DeadLetterReason),
}

/// The decision after one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// What happens to the delivery.
    pub next: Next,
    /// What the attempt tells its endpoint's health.
    pub health: HealthSignal,
}

/// The `Retry-After` of a backpressure answer, in seconds from `now` (`Some(None)`: a
/// 429 that named no time), or `None` when the answer is not backpressure: a `429`
/// always is; a `503` only with a `Retry-After` that parses (RFC 9110 §15.6.4: the server
/// says how long it expects to be unavailable); nothing else is.
fn backpressure(result: &AttemptResult, now: DateTime<Utc>) -> Option<Option<u64>> {
    let AttemptResult::Response {
        status,
        retry_after,
        ..
    } = result
    else {
        return None;
    };
    let asked = retry_after
        .as_deref()
        .and_then(|v| parse_retry_after(v, now.into()));
    match (status, asked) {
        (429, asked) => Some(asked),
        (503, Some(asked)) => Some(Some(asked)),
        _ => None,
    }
}

/// Decides, per the failure table (DESIGN.md §5): 2xx delivered; 410 dead-lettered
/// `gone`; a blocked destination dead-lettered `blocked_destination`; backpressure (a
/// `429`, and a `503` with `Retry-After`) made again after the pause it asks for
/// ([`Timings::pause`], up to the ceiling), and a failure of ours on our own schedule
/// ([`our_retry_wait`]), neither spending an attempt ([`Next::Again`]), both
/// dead-lettered `exhausted` when that would be past the retry window; every other answer
/// and transport error (a failing OAuth2 token endpoint, `auth_token`, included) retried
/// on the schedule, or dead-lettered `exhausted` after the last attempt of the budget.
/// For health: a 2xx is a success; backpressure pauses the endpoint and counts as
/// nothing else; a failure on our side or a blocked destination counts as nothing; every
/// other failure is the receiver's.
pub fn decide(result: &AttemptResult, ctx: &AttemptContext<'_>) -> Decision {
    let retry_or_exhausted = || match ctx.schedule.wait_after(ctx.attempt) {
        Some(wait) if ctx.attempt < ctx.max_attempts => Next::Retry {
            wait_seconds: next_wait(with_jitter(wait, ctx.jitter), None, 0),
        },
        _ => Next::DeadLetter(DeadLetterReason::Exhausted),
    };
    let again = |at: DateTime<Utc>, because| {
        if at > ctx.window_end {
            Next::DeadLetter(DeadLetterReason::Exhausted)
        } else {
            Next::Again { at, because }
        }
    };
    let failure = || {
        HealthSignal::Failure(LastFailure {
            at: ctx.started_at,
            status: result.status(),
            error_class: match result {
                AttemptResult::Failed { class, .. } => Some(*class),
                AttemptResult::Response { .. } => None,
            },
            error: result
                .error_text()
                .map(|e| crate::sqs_text::clean(&e, LAST_ERROR_BYTES).into_owned()),
            excerpt: ctx
                .excerpt
                .filter(|x| !x.is_empty())
                .map(|x| crate::sqs_text::clean(x, LAST_EXCERPT_BYTES).into_owned()),
        })
    };
    if let Some(asked) = backpressure(result, ctx.now) {
        let asked = asked.map(|a| a.min(ctx.retry_after_ceiling_seconds));
        let pause = ctx.timings.pause(asked);
        let pause_until = ctx.now + chrono_duration(pause);
        // The endpoint's pause is bounded by the health policy's longest pause, but this
        // delivery waits all it was asked (up to the Retry-After ceiling, RFC 9110
        // §10.2.3), as it did when a push-back spent an attempt.
        let asked_wait = asked.map_or(pause, |a| ctx.timings.real(a as f64).max(pause));
        // Back right after the wait, spread over as long again (at most one probe
        // interval), so the deliveries it pushed back do not all return at once.
        let spread = pause.min(ctx.timings.probe_interval());
        return Decision {
            next: again(
                deferred_until(ctx.now + chrono_duration(asked_wait), spread, ctx.jitter),
                AgainBecause::Backpressure,
            ),
            health: HealthSignal::Backpressure {
                pause_until,
                sent_at: ctx.started_at,
            },
        };
    }
    match result {
        AttemptResult::Response { status, .. } => match status {
            200..=299 => Decision {
                next: Next::Delivered,
                health: HealthSignal::Success { at: ctx.started_at },
            },
            410 => Decision {
                next: Next::DeadLetter(DeadLetterReason::Gone),
                health: failure(),
            },
            _ => Decision {
                next: retry_or_exhausted(),
                health: failure(),
            },
        },
        AttemptResult::Failed {
            class: ErrorClass::Blocked,
            ..
        } => Decision {
            next: Next::DeadLetter(DeadLetterReason::BlockedDestination),
            health: HealthSignal::NotCharged,
        },
        AttemptResult::Failed { class, .. } if class.is_ours() => Decision {
            next: again(
                ctx.now
                    + chrono_duration(our_retry_wait(
                        ctx.tries,
                        ctx.jitter,
                        ctx.timings.time_scale,
                    )),
                AgainBecause::OurFailure,
            ),
            health: HealthSignal::NotCharged,
        },
        AttemptResult::Failed { .. } => Decision {
            next: retry_or_exhausted(),
            health: failure(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::HealthPolicy;

    fn t(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_764_547_200 + secs, 0).unwrap()
    }

    fn resp(status: u16, retry_after: Option<&str>) -> AttemptResult {
        AttemptResult::Response {
            status,
            retry_after: retry_after.map(str::to_owned),
            location: None,
        }
    }

    fn failed(class: ErrorClass) -> AttemptResult {
        AttemptResult::Failed {
            class,
            detail: "boom".into(),
        }
    }

    /// A compact view of a decision for the table: next step, and the health signal as
    /// `success`, `failure`, `pause <seconds>` or `-`.
    fn row(result: &AttemptResult, attempt: u32, scale: f64) -> (Next, String) {
        let schedule = RetrySchedule::standard();
        let timings = HealthPolicy::default().timings(scale);
        let ctx = AttemptContext {
            attempt,
            max_attempts: schedule.max_attempts(),
            schedule: &schedule,
            retry_after_ceiling_seconds: 86_400,
            timings: &timings,
            started_at: t(0),
            now: t(1),
            jitter: 0.0,
            excerpt: None,
            tries: 0,
            window_end: t(1_000_000),
        };
        let d = decide(result, &ctx);
        let health = match d.health {
            HealthSignal::Success { at } => {
                assert_eq!(at, t(0));
                "success".to_owned()
            }
            HealthSignal::Failure(f) => {
                assert_eq!((f.at, f.status), (t(0), result.status()));
                "failure".to_owned()
            }
            HealthSignal::Backpressure { pause_until, .. } => {
                format!(
                    "pause {}",
                    (pause_until - t(1)).num_milliseconds() as f64 / 1000.0
                )
            }
            HealthSignal::NotCharged => "-".to_owned(),
        };
        (d.next, health)
    }

    /// Attempt 1 of 7 on `schedule`, sent at `t(0)` and answered at `t(1)`, no jitter, the
    /// first try, the window far off.
    fn base_ctx<'a>(schedule: &'a RetrySchedule, timings: &'a Timings) -> AttemptContext<'a> {
        AttemptContext {
            attempt: 1,
            max_attempts: 7,
            schedule,
            retry_after_ceiling_seconds: 86_400,
            timings,
            started_at: t(0),
            now: t(1),
            jitter: 0.0,
            excerpt: None,
            tries: 0,
            window_end: t(1_000_000),
        }
    }

    fn retry(wait_seconds: u64) -> Next {
        Next::Retry { wait_seconds }
    }

    /// Made again `ms` milliseconds after the result came back (at `t(1)`), pushed back.
    fn pushed(ms: i64) -> Next {
        Next::Again {
            at: t(1) + chrono::Duration::milliseconds(ms),
            because: AgainBecause::Backpressure,
        }
    }

    /// Made again `ms` milliseconds after the result, our failure.
    fn ours(ms: i64) -> Next {
        Next::Again {
            at: t(1) + chrono::Duration::milliseconds(ms),
            because: AgainBecause::OurFailure,
        }
    }

    #[test]
    fn the_decision_table() {
        use ErrorClass::*;
        let dead = Next::DeadLetter;
        let later = httpdate::fmt_http_date((t(1) + chrono::Duration::seconds(120)).into());
        #[rustfmt::skip]
        let table: Vec<(AttemptResult, u32, f64, Next, &str)> = vec![
            // result                          attempt scale  next                                   health
            (resp(200, None),                  1, 1.0, Next::Delivered,                               "success"),
            (resp(204, Some("60")),            3, 1.0, Next::Delivered,                               "success"),
            (resp(410, None),                  1, 1.0, dead(DeadLetterReason::Gone),                  "failure"),
            (resp(500, None),                  1, 1.0, retry(60),                                     "failure"),
            (resp(500, Some("600")),           1, 1.0, retry(60),                                     "failure"),
            (resp(403, None),                  2, 1.0, retry(300),                                    "failure"),
            (resp(302, None),                  1, 1.0, retry(60),                                     "failure"),
            (resp(500, None),                  7, 1.0, dead(DeadLetterReason::Exhausted),             "failure"),
            // Backpressure: the endpoint paused for what it asked (capped at one hour), not
            // a failure, no attempt spent: the same attempt again right after what it
            // asked (+ 250 ms; up to the Retry-After ceiling, a day), whatever its number.
            (resp(429, Some("1")),             1, 1.0, pushed(1_250),                                 "pause 1"),
            (resp(429, Some("3600")),          1, 1.0, pushed(3_600_250),                             "pause 3600"),
            (resp(429, Some("7200")),          1, 1.0, pushed(7_200_250),                             "pause 3600"),
            (resp(429, Some("90000")),         1, 1.0, pushed(86_400_250),                            "pause 3600"),
            (resp(429, Some(&later)),          1, 1.0, pushed(120_250),                               "pause 120"),
            (resp(429, None),                  1, 1.0, pushed(60_250),                                "pause 60"),
            (resp(429, Some("soon")),          1, 1.0, pushed(60_250),                                "pause 60"),
            (resp(429, Some("1")),             7, 1.0, pushed(1_250),                                 "pause 1"),
            (resp(503, Some("30")),            1, 1.0, pushed(30_250),                                "pause 30"),
            (resp(503, Some("600")),           2, 1.0, pushed(600_250),                               "pause 600"),
            (resp(503, None),                  1, 1.0, retry(60),                                     "failure"),
            (resp(503, Some("soon")),          1, 1.0, retry(60),                                     "failure"),
            // Pauses run at the time scale, like the waits.
            (resp(429, Some("100")),           1, 0.01, pushed(1_250),                                "pause 1"),
            // Transport errors: the receiver's, retried on the schedule.
            (failed(Dns),                      1, 1.0, retry(60),                                     "failure"),
            (failed(Connect),                  1, 1.0, retry(60),                                     "failure"),
            (failed(Tls),                      1, 1.0, retry(60),                                     "failure"),
            (failed(Timeout),                  2, 1.0, retry(300),                                    "failure"),
            (failed(Protocol),                 1, 1.0, retry(60),                                     "failure"),
            // The receiver's token endpoint failed: its own class, retried and charged.
            (failed(AuthToken),                1, 1.0, retry(60),                                     "failure"),
            (failed(AuthToken),                3, 1.0, retry(1800),                                   "failure"),
            (failed(AuthToken),                7, 1.0, dead(DeadLetterReason::Exhausted),             "failure"),
            // Ours: made again on our own schedule (half a second to a second at first),
            // never charged, no attempt spent, whatever the attempt's number.
            (failed(DnsTemporary),             1, 1.0, ours(500),                                     "-"),
            (failed(LocalResource),            1, 1.0, ours(500),                                     "-"),
            (failed(TlsConfig),                1, 1.0, ours(500),                                     "-"),
            (failed(TlsConfig),                7, 1.0, ours(500),                                     "-"),
            // Never contacted: dead-lettered, not charged.
            (failed(Blocked),                  1, 1.0, dead(DeadLetterReason::BlockedDestination),    "-"),
        ];
        for (result, attempt, scale, next, health) in table {
            assert_eq!(
                row(&result, attempt, scale),
                (next, health.to_owned()),
                "{result:?} at attempt {attempt}"
            );
        }
    }

    #[test]
    fn the_endpoints_budget_ends_the_retries() {
        let schedule = RetrySchedule::standard();
        let timings = HealthPolicy::default().timings(1.0);
        let ctx = AttemptContext {
            attempt: 2,
            max_attempts: 2,
            schedule: &schedule,
            retry_after_ceiling_seconds: 86_400,
            timings: &timings,
            started_at: t(0),
            now: t(1),
            jitter: 0.5,
            excerpt: None,
            tries: 0,
            window_end: t(1_000_000),
        };
        assert_eq!(
            decide(&resp(500, None), &ctx).next,
            Next::DeadLetter(DeadLetterReason::Exhausted)
        );
        let first = AttemptContext { attempt: 1, ..ctx };
        // Jitter only adds: 60 s + up to 10 %.
        assert_eq!(decide(&resp(500, None), &first).next, retry(63));
    }

    #[test]
    fn what_is_not_counted_still_ends_with_the_retry_window() {
        let schedule = RetrySchedule::standard();
        let timings = HealthPolicy::default().timings(1.0);
        let ctx = AttemptContext {
            jitter: 1.0,
            tries: 3,
            window_end: t(10),
            ..base_ctx(&schedule, &timings)
        };
        // Our schedule doubles per try: 8 s at the fourth try (tries 3), all of it at
        // jitter 1.0, within the window.
        assert_eq!(
            decide(&failed(ErrorClass::DnsTemporary), &ctx).next,
            ours(8_000)
        );
        assert_eq!(
            our_retry_wait(30, 1.0, 1.0),
            std::time::Duration::from_secs(60)
        );
        assert_eq!(
            our_retry_wait(30, 1.0, 0.01),
            std::time::Duration::from_millis(600)
        );
        assert_eq!(
            our_retry_wait(0, 0.0, 1.0),
            std::time::Duration::from_millis(500)
        );
        // Past the window's end: exhausted, pushed back or ours.
        let late = AttemptContext { tries: 4, ..ctx };
        assert_eq!(
            decide(&failed(ErrorClass::DnsTemporary), &late).next,
            Next::DeadLetter(DeadLetterReason::Exhausted)
        );
        assert_eq!(
            decide(&resp(429, Some("60")), &ctx).next,
            Next::DeadLetter(DeadLetterReason::Exhausted)
        );
    }

    #[test]
    fn the_last_failure_is_bounded_for_the_health_record() {
        let schedule = RetrySchedule::standard();
        let timings = HealthPolicy::default().timings(1.0);
        let ctx = base_ctx(&schedule, &timings);
        let long = AttemptResult::Failed {
            class: ErrorClass::Connect,
            detail: "x".repeat(5000),
        };
        match decide(&long, &ctx).health {
            HealthSignal::Failure(f) => {
                assert!(f.error.unwrap().len() <= LAST_ERROR_BYTES);
                assert_eq!(f.error_class, Some(ErrorClass::Connect));
                assert_eq!(f.excerpt, None);
            }
            other => panic!("{other:?}"),
        }
        // What the receiver answered is kept beside its status, cut to the record's size.
        let page = format!("maintenance until 04:00 {}", "x".repeat(500));
        let answered = AttemptContext {
            excerpt: Some(&page),
            ..ctx
        };
        match decide(&resp(503, None), &answered).health {
            HealthSignal::Failure(f) => {
                assert_eq!(f.status, Some(503));
                let x = f.excerpt.unwrap();
                assert!(x.starts_with("maintenance until 04:00"), "{x}");
                assert!(x.len() <= LAST_EXCERPT_BYTES, "{}", x.len());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_gate_admits_per_circuit_and_pause() {
        let timings = HealthPolicy::default().timings(1.0);
        let mut h = EndpointHealth::empty(
            crate::TenantId::new("acme").unwrap(),
            crate::EndpointId::new("ep_1").unwrap(),
            600,
        );
        assert_eq!(gate(None, &timings, t(0)), Gate::Send);
        assert_eq!(gate(Some(&h), &timings, t(0)), Gate::Send);
        // Open circuit: wait for the probe, then one probe.
        h.opened_at = Some(t(0));
        h.next_probe_at = Some(t(60));
        assert_eq!(
            gate(Some(&h), &timings, t(10)),
            Gate::Wait {
                until: t(60),
                spread: std::time::Duration::from_secs(60)
            }
        );
        assert_eq!(
            gate(Some(&h), &timings, t(60)),
            Gate::ProbeDue { seen: Some(t(60)) }
        );
        // A pause holds everything, the probe included, and its backlog comes back over
        // the resume window (120 s for the second pause in a row), at most over as long as
        // what is left of the pause (30 s at t(60), 80 s at t(10)).
        h.paused_until = Some(t(90));
        h.pauses = 2;
        assert_eq!(
            gate(Some(&h), &timings, t(60)),
            Gate::Wait {
                until: t(90),
                spread: std::time::Duration::from_secs(30)
            }
        );
        h.opened_at = None;
        h.next_probe_at = None;
        assert_eq!(
            gate(Some(&h), &timings, t(10)),
            Gate::Wait {
                until: t(90),
                spread: std::time::Duration::from_secs(80)
            }
        );
        h.paused_until = Some(t(1000));
        assert_eq!(
            gate(Some(&h), &timings, t(10)),
            Gate::Wait {
                until: t(1000),
                spread: std::time::Duration::from_secs(120)
            }
        );
        h.paused_until = Some(t(90));
        // Over: send (the pace the receiver taught spaces the backlog, not the gate).
        assert_eq!(gate(Some(&h), &timings, t(90)), Gate::Send);
    }

    #[test]
    fn a_deferred_delivery_comes_back_after_the_gate_opens_spread_over_its_window() {
        let spread = std::time::Duration::from_secs(60);
        assert_eq!(
            deferred_until(t(100), spread, 0.0),
            t(100) + chrono::Duration::milliseconds(250)
        );
        assert_eq!(
            deferred_until(t(100), spread, 0.5),
            t(130) + chrono::Duration::milliseconds(250)
        );
    }

    #[test]
    fn the_retry_window_covers_the_jittered_schedule_and_one_probe() {
        let schedule = RetrySchedule::new(vec![60, 300]).unwrap();
        let end = retry_window_end(t(0), &schedule, 1.0, std::time::Duration::from_secs(60));
        // 360 s + 10 % jitter (36 s) + one probe interval (60 s).
        assert_eq!(end, t(456));
        let scaled = retry_window_end(t(0), &schedule, 0.5, std::time::Duration::from_secs(30));
        assert_eq!(scaled, t(228));
    }
}
