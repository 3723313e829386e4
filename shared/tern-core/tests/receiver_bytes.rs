//! Fuzzing of every parser of receiver-controlled bytes in `tern-core` (issue 28: a token
//! server's `expires_in` panicked an attempt). Property tests with arbitrary bytes and
//! with inputs shaped like the real thing, run by `make test` on the stable toolchain
//! (proptest, 2,000 cases a property; `PROPTEST_CASES=1000000` runs longer): none may
//! panic, and what each returns stays within its documented bounds.
//!
//! The receiver controls: the token endpoint's answer (`parse_token_response`), a
//! `Retry-After` value (`parse_retry_after`, and through it the whole decision after an
//! attempt, `decide`: pauses, the deferral time, the retry wait), the status code, the
//! body excerpt, and (through the endpoint log) the line an excerpt is written into.
//! `tern-http`'s own harness covers the response head it reads when hyper cannot.

use std::time::{Duration as StdDuration, SystemTime};

use chrono::{DateTime, Duration, Utc};
use proptest::prelude::*;
use tern_core::decision::{AttemptContext, Next, decide, retry_window_end};
use tern_core::delivery_log::{EndpointLogEntry, LOG_EXCERPT_BYTES};
use tern_core::health::{HealthPolicy, HealthSignal, LAST_EXCERPT_BYTES};
use tern_core::ports::AttemptRecord;
use tern_core::receiver_auth::{MAX_TOKEN_LIFETIME_SECONDS, parse_token_response};
use tern_core::retry::{DEFAULT_RETRY_AFTER_CEILING_SECONDS, parse_retry_after};
use tern_core::{AttemptResult, EndpointId, EventId, RetrySchedule};

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 2_000,
        ..ProptestConfig::default()
    }
}

/// Numbers in every form a JSON token response has been seen to carry them, and some it
/// should not: integers of any size, fractions, exponents, negatives, strings of them.
fn json_number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| format!("{f:?}")),
        (any::<u32>(), 0u32..400).prop_map(|(m, e)| format!("{m}e{e}")),
        "[0-9]{1,400}(\\.[0-9]{1,40})?",
        Just("1e308".to_owned()),
        Just("-0.0".to_owned()),
        Just("9223372036854775807".to_owned()),
        Just("18446744073709551616".to_owned()),
        any::<u64>().prop_map(|n| format!("\"{n}\"")),
        "\"[ -~]{0,40}\"",
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("{}".to_owned()),
    ]
}

/// `Retry-After` values: digits of any length, HTTP-dates near and far, junk, text SQS
/// would refuse.
fn retry_after() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{1,40}",
        any::<u64>().prop_map(|n| n.to_string()),
        (0i64..253_402_300_799).prop_map(|s| httpdate::fmt_http_date(
            SystemTime::UNIX_EPOCH + StdDuration::from_secs(s.unsigned_abs())
        )),
        Just("Fri, 31 Dec 9999 23:59:59 GMT".to_owned()),
        Just("Thu, 01 Jan 1970 00:00:00 GMT".to_owned()),
        ".{0,80}",
        "[ \\t]*-?[0-9]{0,30}[ \\t]*",
    ]
}

proptest! {
    #![proptest_config(config())]

    /// Any bytes as a token response: a token or a typed error, never a panic; a lifetime
    /// at most a day.
    #[test]
    fn any_bytes_as_a_token_response(body in proptest::collection::vec(any::<u8>(), 0..600)) {
        if let Ok(token) = parse_token_response(&body) {
            prop_assert!(token.expires_in.is_none_or(|s| s <= MAX_TOKEN_LIFETIME_SECONDS));
            prop_assert!(token.usable_seconds() <= MAX_TOKEN_LIFETIME_SECONDS);
        }
    }

    /// Token responses shaped like real ones, with `expires_in` in every number form.
    #[test]
    fn token_responses_with_any_expires_in(
        expires in json_number(),
        kind in prop_oneof![Just("\"Bearer\""), Just("\"bearer\""), Just("\"mac\""), Just("7")],
        token in "[!-~]{0,64}",
    ) {
        let body = format!(
            r#"{{"access_token":"{}","token_type":{kind},"expires_in":{expires}}}"#,
            token.replace(['\\', '"'], "")
        );
        if let Ok(t) = parse_token_response(body.as_bytes()) {
            prop_assert!(t.expires_in.is_none_or(|s| s <= MAX_TOKEN_LIFETIME_SECONDS));
            prop_assert!(t.usable_seconds() <= MAX_TOKEN_LIFETIME_SECONDS);
        }
    }

    /// Any text as `Retry-After`, at any time: a wait or `None`, never a panic.
    #[test]
    fn any_retry_after_at_any_time(value in retry_after(), now_s in 0u64..253_402_300_799) {
        let now = SystemTime::UNIX_EPOCH + StdDuration::from_secs(now_s);
        let _ = parse_retry_after(&value, now);
    }

    /// The whole decision after an attempt, over everything the receiver controls (status,
    /// `Retry-After`, the body excerpt) at any attempt and time scale: no panic; a retry
    /// waits no longer than the schedule allows; a pause or deferral ends after now.
    #[test]
    fn the_decision_after_any_answer(
        status in any::<u16>(),
        retry_after in proptest::option::of(retry_after()),
        excerpt in proptest::option::of(".{0,300}"),
        attempt in 1u32..20,
        scale in prop_oneof![Just(1.0f64), Just(0.001f64), 0.0001f64..1.0],
        jitter in 0.0f64..1.0,
        tries in any::<u32>(),
        now_offset_s in 0i64..(200 * 365 * 86_400),
    ) {
        let schedule = RetrySchedule::standard();
        let timings = HealthPolicy::default().timings(scale);
        let started = DateTime::<Utc>::from_timestamp(1_764_547_200, 0).unwrap()
            + Duration::seconds(now_offset_s);
        let now = started + Duration::milliseconds(250);
        let ctx = AttemptContext {
            attempt,
            max_attempts: schedule.max_attempts(),
            schedule: &schedule,
            retry_after_ceiling_seconds: DEFAULT_RETRY_AFTER_CEILING_SECONDS,
            timings: &timings,
            started_at: started,
            now,
            jitter,
            excerpt: excerpt.as_deref(),
            tries,
            window_end: retry_window_end(started, &schedule, scale, timings.probe_interval()),
        };
        let result = AttemptResult::Response { status, retry_after, location: None }.cleaned();
        let d = decide(&result, &ctx);
        match d.next {
            Next::Retry { wait_seconds } => {
                let longest = schedule.delays().iter().copied().max().unwrap_or(0);
                prop_assert!(wait_seconds <= longest + longest / 10 + 1, "{wait_seconds}");
            }
            Next::Again { at, .. } => prop_assert!(at >= now && at <= ctx.window_end),
            Next::Delivered | Next::DeadLetter(_) => {}
        }
        match d.health {
            HealthSignal::Backpressure { pause_until, .. } => prop_assert!(pause_until >= now),
            HealthSignal::Failure(f) => {
                prop_assert!(f.excerpt.is_none_or(|x| x.len() <= LAST_EXCERPT_BYTES));
            }
            HealthSignal::Success { .. } | HealthSignal::NotCharged => {}
        }
    }

    /// Any answer text in an endpoint log line: one line, bounded, read back as written;
    /// and any line at all read without a panic.
    #[test]
    fn any_excerpt_in_an_endpoint_log_line(
        excerpt in proptest::option::of(any::<String>()),
        line in ".{0,300}",
    ) {
        let record = AttemptRecord {
            event_id: EventId::new("evt_1").unwrap(),
            endpoint_id: EndpointId::new("ep_1").unwrap(),
            replay_count: 0,
            attempt: 1,
            takeover: 0,
            started_at: DateTime::<Utc>::from_timestamp(1_764_547_200, 0).unwrap(),
            latency_ms: 5,
            status: Some(500),
            error_class: None,
            error: None,
            location: None,
            response_excerpt: excerpt,
            excerpt_truncated: false,
            outcome: "retry".into(),
            next_wait_seconds: Some(5),
        };
        let entry = EndpointLogEntry::of(&record);
        prop_assert!(entry.response_excerpt.as_ref().is_none_or(|x| x.len() <= LOG_EXCERPT_BYTES));
        let written = entry.to_line();
        prop_assert_eq!(written.lines().count(), 1);
        let ep = EndpointId::new("ep_1").unwrap();
        prop_assert_eq!(EndpointLogEntry::from_line(&ep, &written), Some(entry));
        let _ = EndpointLogEntry::from_line(&ep, &line);
    }
}
