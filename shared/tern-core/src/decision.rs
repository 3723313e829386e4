//! One place decides what happens to a delivery (DESIGN.md §5 and §10), in two pure
//! functions the sender executes:
//!
//! - before a POST, [`gate`]: may anything be sent to this endpoint now? A closed circuit
//!   sends; an open one sends one probe per interval; a receiver's pause (backpressure)
//!   sends nothing until it ends, then one delivery per batch until its resume window is
//!   over. Whatever is held back is deferred without spending an attempt
//!   ([`deferred_until`]), within its retry window ([`retry_window_end`]).
//! - after it, [`decide`]: from the attempt's result, the delivery's place in its
//!   schedule, the endpoint's policy and the failure model's timings, what happens to the
//!   delivery ([`Next`]) and what the attempt tells the endpoint's health
//!   ([`HealthSignal`]).
//!
//! The model judges receivers by what they did: a `429`, or a `503` with `Retry-After`,
//! is backpressure (the endpoint pauses; never counted as a failure), and a failure on our
//! side ([`ErrorClass::is_ours`]) is retried but never charged to the endpoint.

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
    /// The receiver's pause is over but its resume window is not: one delivery per
    /// batch is sent, the others come back spread over `spread`, so the backlog resumes
    /// at a walk, not all at once.
    Paced {
        /// Over how long the others come back.
        spread: std::time::Duration,
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
        (Some(paused_until), _) => Gate::Wait {
            until: next_probe.map_or(paused_until, |p| p.max(paused_until)),
            spread: timings.resume_window(h.pauses),
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
        (None, None) => match h.paused_until {
            Some(p) if now < p + chrono_duration(timings.resume_window(h.pauses)) => Gate::Paced {
                spread: timings.resume_window(h.pauses),
            },
            _ => Gate::Send,
        },
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
/// `gone`; a blocked destination dead-lettered `blocked_destination`; every other answer
/// and transport error (a failing OAuth2 token endpoint, `auth_token`, included) retried
/// on the schedule (a `429`, and a `503` with `Retry-After`,
/// no sooner than it asks, up to the ceiling), or dead-lettered `exhausted` after the
/// last attempt of the budget. For health: a 2xx is a success; backpressure pauses the
/// endpoint ([`Timings::pause`]) and counts as nothing else; a failure on our side or a
/// blocked destination counts as nothing; every other failure is the receiver's.
pub fn decide(result: &AttemptResult, ctx: &AttemptContext<'_>) -> Decision {
    let retry_or_exhausted = |asked: Option<u64>| match ctx.schedule.wait_after(ctx.attempt) {
        Some(wait) if ctx.attempt < ctx.max_attempts => Next::Retry {
            wait_seconds: next_wait(
                with_jitter(wait, ctx.jitter),
                asked,
                ctx.retry_after_ceiling_seconds,
            ),
        },
        _ => Next::DeadLetter(DeadLetterReason::Exhausted),
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
        let pause = chrono_duration(ctx.timings.pause(asked));
        return Decision {
            next: retry_or_exhausted(asked),
            health: HealthSignal::Backpressure {
                pause_until: ctx.now + pause,
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
                next: retry_or_exhausted(None),
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
        AttemptResult::Failed { class, .. } => Decision {
            next: retry_or_exhausted(None),
            health: if class.charged_to_receiver() {
                failure()
            } else {
                HealthSignal::NotCharged
            },
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
            HealthSignal::Backpressure { pause_until } => {
                format!(
                    "pause {}",
                    (pause_until - t(1)).num_milliseconds() as f64 / 1000.0
                )
            }
            HealthSignal::NotCharged => "-".to_owned(),
        };
        (d.next, health)
    }

    fn retry(wait_seconds: u64) -> Next {
        Next::Retry { wait_seconds }
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
            // Backpressure: paused for what it asked (capped at one hour), not a failure;
            // the delivery itself waits no less than the schedule, no less than it asked.
            (resp(429, Some("1")),             1, 1.0, retry(60),                                     "pause 1"),
            (resp(429, Some("3600")),          1, 1.0, retry(3600),                                   "pause 3600"),
            (resp(429, Some("90000")),         1, 1.0, retry(86_400),                                 "pause 3600"),
            (resp(429, Some(&later)),          1, 1.0, retry(120),                                    "pause 120"),
            (resp(429, None),                  1, 1.0, retry(60),                                     "pause 60"),
            (resp(429, Some("soon")),          1, 1.0, retry(60),                                     "pause 60"),
            (resp(429, Some("1")),             7, 1.0, dead(DeadLetterReason::Exhausted),             "pause 1"),
            (resp(503, Some("30")),            1, 1.0, retry(60),                                     "pause 30"),
            (resp(503, Some("600")),           2, 1.0, retry(600),                                    "pause 600"),
            (resp(503, None),                  1, 1.0, retry(60),                                     "failure"),
            (resp(503, Some("soon")),          1, 1.0, retry(60),                                     "failure"),
            // Pauses run at the time scale, like the waits.
            (resp(429, Some("100")),           1, 0.01, retry(100),                                   "pause 1"),
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
            // Ours: retried, never charged.
            (failed(DnsTemporary),             1, 1.0, retry(60),                                     "-"),
            (failed(LocalResource),            1, 1.0, retry(60),                                     "-"),
            (failed(TlsConfig),                1, 1.0, retry(60),                                     "-"),
            (failed(TlsConfig),                7, 1.0, dead(DeadLetterReason::Exhausted),             "-"),
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
    fn the_last_failure_is_bounded_for_the_health_record() {
        let schedule = RetrySchedule::standard();
        let timings = HealthPolicy::default().timings(1.0);
        let ctx = AttemptContext {
            attempt: 1,
            max_attempts: 7,
            schedule: &schedule,
            retry_after_ceiling_seconds: 86_400,
            timings: &timings,
            started_at: t(0),
            now: t(1),
            jitter: 0.0,
            excerpt: None,
        };
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
        // the resume window.
        h.paused_until = Some(t(90));
        h.pauses = 2;
        assert_eq!(
            gate(Some(&h), &timings, t(60)),
            Gate::Wait {
                until: t(90),
                spread: std::time::Duration::from_secs(120)
            }
        );
        h.opened_at = None;
        h.next_probe_at = None;
        assert_eq!(
            gate(Some(&h), &timings, t(10)),
            Gate::Wait {
                until: t(90),
                spread: std::time::Duration::from_secs(120)
            }
        );
        // Over: one per batch for the resume window (120 s), then send.
        assert_eq!(
            gate(Some(&h), &timings, t(90)),
            Gate::Paced {
                spread: std::time::Duration::from_secs(120)
            }
        );
        assert_eq!(gate(Some(&h), &timings, t(210)), Gate::Send);
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
