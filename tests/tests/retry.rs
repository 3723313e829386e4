//! The sender's retry behaviour, provable end to end (DESIGN.md §3-§5): the default
//! schedule played out through SQS delays and the Step Functions Standard wait on moto
//! with scaled time; the delay invariant (no SendMessage outside 0-900 s) as a property
//! over the whole sender and on every hand-off of the moto runs; `Retry-After` (H1); long
//! delays (Q2); the attempt budget and replays (Q3, S4); no double POSTs.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use proptest::prelude::*;
use tern_core::ports::{
    AttemptRecord, Claim, DelayScheduler, DeliveryLedger, DeliveryState, EndpointStore,
    MessageQueue, OUTCOME_REQUEUED, PortError, QueueEntry,
};
use tern_core::retry::{MAX_QUEUE_DELAY_SECONDS, MAX_SCHEDULE_DELAY_SECONDS, parse_retry_after};
use tern_core::{
    DeadLetterReason, DeliveryMessage, Endpoint, EndpointId, EventId, RetrySchedule, Secret,
    TenantId,
};
use tern_handlers::config::SenderPolicy;
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::replay::ReplayRequest;
use tern_handlers::sender::{MessageOutcome, SenderDeps};
use tern_http::{ClientOptions, DeliveryClient, DestinationPolicy, StaticLookup};
use tern_local::LocalOptions;
use tern_tests::*;

/// Real seconds a logical wait takes at `scale` (the sender's rule: ceil).
fn real_seconds(logical: u64, scale: f64) -> u64 {
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let real = (logical as f64 * scale).ceil() as u64;
    real
}

/// Checks that each request came no sooner after the previous one than the logged wait,
/// scaled, allows; returns the gaps in milliseconds.
fn assert_never_earlier(requests: &[Captured], log: &[AttemptRecord], scale: f64) -> Vec<i64> {
    assert!(
        log.len() >= requests.len(),
        "every request is logged: {} requests, {} records",
        requests.len(),
        log.len()
    );
    requests
        .windows(2)
        .zip(log)
        .map(|(pair, record)| {
            let logical = record.next_wait_seconds.unwrap_or_else(|| panic!("attempt {} scheduled no wait", record.attempt));
            let gap = (pair[1].at - pair[0].at).num_milliseconds();
            // Exact, not rounded up to whole seconds: a push-back's requeue logs the
            // real wait it was given, which need not be whole seconds.
            #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
            let real_ms = (logical as f64 * scale * 1000.0).floor() as i64;
            assert!(gap >= real_ms, "attempt {} came {gap} ms after the previous one; the wait was {real_ms} ms ({logical} s logical)", record.attempt + 1);
            gap
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// The default schedule, end to end, through Step Functions on moto.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_schedule_plays_out_end_to_end_through_step_functions_with_scaled_time() {
    // 60, 300, 1800, 7200, 36000, 86400 s (+0-10 % jitter) -> 1, 1, 1, 4, 18, 44 s (ceil),
    // plus jitter: about 75 s in all. 1800 s and up are over 900 s: Step Functions.
    let scale = 0.0005;
    let options = LocalOptions {
        time_scale: scale,
        ..LocalOptions::default()
    };
    let (local, _rx, handoffs) = deployment_recording("schedule", options).await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set("/down", Behavior::Always(Reply::status(500)));
    // No per-endpoint schedule or budget: the deployment default (infra/settings.json).
    let ep = add_endpoint(&local, "tnt_sched", &receiver.url("/down"), &["*"], None).await;
    assert_eq!(local.sender.policy.schedule, RetrySchedule::standard());
    let id = publish(&local, "order.paid", "tnt_sched", r#"{"s":1}"#).await;

    let got = receiver
        .wait_for("/down", 7, Duration::from_secs(150))
        .await;
    assert_eq!(got.len(), 7, "every attempt of the default budget happened");
    assert!(
        eventually(Duration::from_secs(15), async || dead_letters(&local)
            .await
            .len()
            == 1)
        .await,
        "dead-lettered"
    );
    let log = attempts_of(&local, &id, &ep).await;
    assert_eq!(
        log.iter().map(|r| r.attempt).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5, 6, 7]
    );
    for (record, scheduled) in log.iter().zip(RetrySchedule::standard().delays()) {
        let wait = record.next_wait_seconds.unwrap();
        assert!(
            wait >= *scheduled && wait <= scheduled + scheduled / 10 + 1,
            "attempt {}: wait {wait} for {scheduled}",
            record.attempt
        );
        assert_eq!(record.outcome, "retry");
    }
    assert_eq!(log[6].outcome, "dead_letter:exhausted");
    assert_eq!(log[6].next_wait_seconds, None);
    let gaps = assert_never_earlier(&got, &log, scale);
    eprintln!(
        "default schedule at scale {scale}: logical waits {:?} s, scaled {:?} s, observed gaps {:?} ms",
        log.iter()
            .filter_map(|r| r.next_wait_seconds)
            .collect::<Vec<_>>(),
        log.iter()
            .filter_map(|r| r.next_wait_seconds)
            .map(|w| real_seconds(w, scale))
            .collect::<Vec<_>>(),
        gaps
    );
    for r in &got {
        assert_eq!(r.header("webhook-id"), Some(id.as_str()));
    }

    // The hand-offs: 60 and 300 s as SQS delays, every longer wait as a Step Functions wait.
    let h = handoffs.lock().unwrap().clone();
    assert_queue_delays_in_range(&handoffs);
    let routes: Vec<(u32, bool)> = h
        .iter()
        .map(|x| match x {
            Handoff::Queue { attempt, .. } => (*attempt, false),
            Handoff::StepFunctions { attempt, .. } => (*attempt, true),
        })
        .collect();
    assert_eq!(
        routes,
        vec![
            (2, false),
            (3, false),
            (4, true),
            (5, true),
            (6, true),
            (7, true)
        ]
    );

    // Moto ran each execution: the Wait state, then sqs:sendMessage, then success.
    let sfn = aws_sdk_sfn::Client::new(&local.aws);
    let executions = sfn
        .list_executions()
        .state_machine_arn(&local.resources.state_machine_arn)
        .send()
        .await
        .unwrap()
        .executions;
    assert_eq!(executions.len(), 4, "{executions:#?}");
    for e in &executions {
        assert_eq!(
            e.status,
            aws_sdk_sfn::types::ExecutionStatus::Succeeded,
            "{e:#?}"
        );
        let history = sfn
            .get_execution_history()
            .execution_arn(&e.execution_arn)
            .send()
            .await
            .unwrap();
        let kinds: Vec<String> = history
            .events
            .iter()
            .map(|ev| ev.r#type.as_str().to_owned())
            .collect();
        for wanted in [
            "WaitStateEntered",
            "WaitStateExited",
            "TaskSucceeded",
            "ExecutionSucceeded",
        ] {
            assert!(
                kinds.iter().any(|k| k == wanted),
                "{wanted} missing in {kinds:?}"
            );
        }
        let task = history
            .events
            .iter()
            .find_map(|ev| ev.task_succeeded_event_details())
            .expect("task details");
        assert_eq!(
            (task.resource_type.as_str(), task.resource.as_str()),
            ("sqs", "sendMessage")
        );
    }
}

// ---------------------------------------------------------------------------------------
// Q2: long delays never ride on DelaySeconds.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q2_long_delays_and_a_long_retry_after_never_put_more_than_900_in_delay_seconds() {
    // 5 s, 5 min, 30 min, 2 h, 5 h, 10 h -> 1, 1, 1, 2, 4, 8 s real (+ jitter).
    let scale = 0.0002;
    let options = LocalOptions {
        time_scale: scale,
        ..LocalOptions::default()
    };
    let (local, _rx, handoffs) = deployment_recording("q2", options).await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set(
        "/q2",
        Behavior::Script(vec![
            Reply::status(500),
            Reply::status(429).header("retry-after", "7200"),
            Reply::status(500),
            Reply::status(500),
            Reply::status(500),
            Reply::status(500),
            Reply::status(200),
        ]),
    );
    let schedule = RetrySchedule::new(vec![5, 300, 1800, 7200, 18_000, 36_000]).unwrap();
    let ep = add_endpoint_with(
        &local,
        EndpointId::generate(),
        "tnt_q2",
        &receiver.url("/q2"),
        &["*"],
        None,
        Some(schedule.clone()),
    )
    .await;
    let id = publish(&local, "order.paid", "tnt_q2", r#"{"q":2}"#).await;

    let got = receiver.wait_for("/q2", 7, Duration::from_secs(60)).await;
    assert_eq!(
        got.iter().map(|r| r.answered).collect::<Vec<_>>(),
        vec![500, 429, 500, 500, 500, 500, 200]
    );
    assert!(
        eventually(Duration::from_secs(10), async || attempts_of(
            &local, &id, &ep
        )
        .await
        .len()
            == 7)
        .await
    );
    let log = attempts_of(&local, &id, &ep).await;
    assert_eq!(log[6].outcome, "delivered");
    // The push-back on attempt 2 spent no attempt: attempt 2 again after the 7200 s it
    // asked for (more than the longest pause of the endpoint, 1 h: the delivery waits all
    // it was asked), then the schedule goes on from attempt 2's 300 s slot.
    assert_eq!(
        log.iter()
            .map(|r| (r.attempt, r.outcome.as_str()))
            .collect::<Vec<_>>(),
        [
            (1, "retry"),
            (2, OUTCOME_REQUEUED),
            (2, "retry"),
            (3, "retry"),
            (4, "retry"),
            (5, "retry"),
            (6, "delivered")
        ]
    );
    assert_asked_wait(log[1].next_wait_seconds, 7200, scale);
    let gaps = assert_never_earlier(&got, &log, scale);
    eprintln!("q2 at scale {scale}: observed gaps {gaps:?} ms");

    assert_queue_delays_in_range(&handoffs);
    let h = handoffs.lock().unwrap().clone();
    let mut queued = 0;
    for (x, record) in h.iter().zip(&log) {
        let logical = record.next_wait_seconds.unwrap();
        let requeued = record.outcome == OUTCOME_REQUEUED;
        match x {
            Handoff::Queue {
                delay_seconds,
                attempt,
            } if requeued => {
                // The same attempt again, on chained queue delays (each at most 900 s:
                // a message that comes back early is put back until it is due).
                queued += 1;
                assert!(*delay_seconds <= MAX_QUEUE_DELAY_SECONDS);
                assert_eq!(*attempt, record.attempt);
            }
            Handoff::Queue {
                delay_seconds,
                attempt,
            } => {
                queued += 1;
                assert!(
                    logical <= u64::from(MAX_QUEUE_DELAY_SECONDS),
                    "{logical} s went through DelaySeconds"
                );
                assert_eq!(u64::from(*delay_seconds), real_seconds(logical, scale));
                assert_eq!(*attempt, record.attempt + 1);
            }
            Handoff::StepFunctions {
                wait_seconds,
                attempt,
            } => {
                assert!(
                    !requeued,
                    "a push-back's requeue never goes to Step Functions"
                );
                assert!(logical > u64::from(MAX_QUEUE_DELAY_SECONDS));
                assert_eq!(*wait_seconds, real_seconds(logical, scale));
                assert_eq!(*attempt, record.attempt + 1);
            }
        }
    }
    assert_eq!(
        (h.len(), queued),
        (6, 3),
        "only the 5 s and 300 s waits and the push-back's requeue ride on DelaySeconds: {h:?}"
    );
}

// ---------------------------------------------------------------------------------------
// H1: Retry-After.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1_retry_after_is_honoured_in_both_forms_capped_and_junk_waits_one_probe_interval() {
    // 120 s -> 12 ms, 86,400 s -> 8.6 s real. Every answer is a push-back: none spends an
    // attempt, and each waits what it asked for, up to the ceiling.
    let scale = 0.0001;
    let options = LocalOptions {
        time_scale: scale,
        ..LocalOptions::default()
    };
    let (local, _rx, handoffs) = deployment_recording("h1", options).await;
    let ceiling = local.sender.policy.retry_after_ceiling_seconds;
    assert_eq!(ceiling, 86_400, "the documented default ceiling");
    let receiver = Receiver::start().await.unwrap();
    let far = SystemTime::now() + Duration::from_secs(30 * 86_400);
    let near = SystemTime::now() + Duration::from_secs(3_000);
    receiver.set(
        "/h1",
        Behavior::Script(vec![
            Reply::status(429).header("retry-after", "120"),
            Reply::status(503).header("retry-after", &httpdate::fmt_http_date(far)),
            Reply::status(503).header("retry-after", &httpdate::fmt_http_date(near)),
            Reply::status(429).header("retry-after", "86400"),
            Reply::status(429).header("retry-after", "abc"),
            Reply::status(200),
        ]),
    );
    // A retry window long enough for two waits at the ceiling (the default is 1.5 days).
    let week = RetrySchedule::new(vec![86_400; 7]).unwrap();
    let ep = add_endpoint_with(
        &local,
        EndpointId::generate(),
        "tnt_h1",
        &receiver.url("/h1"),
        &["*"],
        None,
        Some(week),
    )
    .await;
    let id = publish(&local, "order.paid", "tnt_h1", r#"{"h":1}"#).await;

    let got = receiver.wait_for("/h1", 6, Duration::from_secs(90)).await;
    assert_eq!(
        got.iter().map(|r| r.answered).collect::<Vec<_>>(),
        vec![429, 503, 503, 429, 429, 200]
    );
    assert!(
        eventually(Duration::from_secs(10), async || attempts_of(
            &local, &id, &ep
        )
        .await
        .len()
            == 6)
        .await
    );
    let log = attempts_of(&local, &id, &ep).await;
    assert_eq!(
        log.iter()
            .map(|r| (r.attempt, r.outcome.as_str()))
            .collect::<Vec<_>>(),
        [
            (1, OUTCOME_REQUEUED),
            (1, OUTCOME_REQUEUED),
            (1, OUTCOME_REQUEUED),
            (1, OUTCOME_REQUEUED),
            (1, OUTCOME_REQUEUED),
            (1, "delivered")
        ],
        "no push-back spends an attempt"
    );
    let waits: Vec<u64> = log.iter().filter_map(|r| r.next_wait_seconds).collect();
    // Delta-seconds: what was asked (longer than the 60 s slot).
    assert_asked_wait(Some(waits[0]), 120, scale);
    // HTTP-date 30 days out: capped at the ceiling.
    assert_asked_wait(Some(waits[1]), ceiling, scale);
    // HTTP-date 50 min out: never earlier than the date.
    let retry_at = log[2].started_at
        + chrono::Duration::milliseconds(i64::try_from(log[2].latency_ms).unwrap())
        + chrono::Duration::seconds(i64::try_from(waits[2]).unwrap());
    assert!(
        retry_at >= DateTime::<Utc>::from(near) - chrono::Duration::seconds(1),
        "{retry_at} is before {near:?}"
    );
    assert_asked_wait(Some(waits[2]), 3_000 - 60, scale);
    // 86,400 s: at the ceiling, honoured in full.
    assert_asked_wait(Some(waits[3]), 86_400, scale);
    // Junk: no time named, so one probe interval (60 s), like a bare 429.
    assert_asked_wait(Some(waits[4]), 60, scale);
    let gaps = assert_never_earlier(&got, &log, scale);
    eprintln!("h1 at scale {scale}: logical waits {waits:?} s, observed gaps {gaps:?} ms");
    assert_queue_delays_in_range(&handoffs);
}

/// Asserts a push-back's logged wait (logical seconds) is what was `asked`, plus at most
/// the spread over one probe interval (60 s, at least 100 ms real:
/// [`tern_core::health::MIN_PROBE_INTERVAL_MS`]) and the 250 ms (real) every held-back
/// delivery adds ([`tern_core::decision::deferred_until`]), in logical seconds at `scale`.
fn assert_asked_wait(logged: Option<u64>, asked: u64, scale: f64) {
    let logged = logged.expect("a requeue logs its wait");
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let slack = 60u64.max((0.1 / scale).ceil() as u64) + (0.25 / scale).ceil() as u64 + 1;
    assert!(
        (asked..=asked + slack).contains(&logged),
        "waited {logged} s for {asked} s asked (slack {slack} s)"
    );
}

// ---------------------------------------------------------------------------------------
// S4: retries and replays carry one webhook-id, each with its own timestamp.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_retries_and_replays_keep_the_webhook_id_with_a_fresh_verifiable_signature_each() {
    // Ten minutes -> 3 s (+ jitter).
    let scale = 0.005;
    let options = LocalOptions {
        time_scale: scale,
        ..LocalOptions::default()
    };
    let (local, _rx, handoffs) = deployment_recording("s4", options).await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set(
        "/a",
        Behavior::FailFirst {
            count: 1,
            status: 500,
        },
    );
    receiver.set("/b", Behavior::Always(Reply::status(503)));
    let ten_minutes = RetrySchedule::new(vec![600]).unwrap();
    let a = add_endpoint_with(
        &local,
        EndpointId::generate(),
        "tnt_s4",
        &receiver.url("/a"),
        &["*"],
        None,
        Some(ten_minutes.clone()),
    )
    .await;
    let b = add_endpoint_with(
        &local,
        EndpointId::generate(),
        "tnt_s4",
        &receiver.url("/b"),
        &["*"],
        None,
        Some(ten_minutes),
    )
    .await;
    let id = publish(&local, "order.paid", "tnt_s4", r#"{"s":4}"#).await;

    let got_a = receiver.wait_for("/a", 2, Duration::from_secs(30)).await;
    assert_eq!(
        got_a.iter().map(|r| r.answered).collect::<Vec<_>>(),
        vec![500, 200]
    );
    assert!(
        eventually(Duration::from_secs(30), async || dead_letters(&local)
            .await
            .len()
            == 1)
        .await,
        "b dead-lettered"
    );
    receiver.set("/b", Behavior::Always(Reply::status(200)));
    let metrics = Metrics::new("Tern", MetricsSink::Discard);
    let summary = tern_handlers::replay::handle(&local.replay, ReplayRequest::default(), &metrics)
        .await
        .unwrap();
    assert_eq!(summary.replayed, 1);
    let got_b = receiver.wait_for("/b", 3, Duration::from_secs(20)).await;
    assert_eq!(
        got_b.iter().map(|r| r.answered).collect::<Vec<_>>(),
        vec![503, 503, 200]
    );

    let timestamp =
        |r: &Captured| -> i64 { r.header("webhook-timestamp").unwrap().parse().unwrap() };
    for (requests, ep) in [(&got_a, &a), (&got_b, &b)] {
        for r in requests.iter() {
            assert_eq!(r.header("webhook-id"), Some(id.as_str()));
            assert_eq!(r.header("idempotency-key"), Some(id.as_str()));
            // Its own current timestamp, not the first attempt's.
            assert!(
                (timestamp(r) - r.at.timestamp()).abs() <= 2,
                "stale timestamp {} at {}",
                timestamp(r),
                r.at
            );
            // The reference verifier (5 min tolerance) accepts it.
            verify_reference(&ep.secrets[0].secret, r).expect("verifies");
        }
    }
    assert!(
        timestamp(&got_a[1]) - timestamp(&got_a[0]) >= 3,
        "the retry was signed afresh"
    );
    assert_ne!(
        got_b[0].header("webhook-signature"),
        got_b[2].header("webhook-signature")
    );
    let log_b = attempts_of(&local, &id, &b).await;
    assert_eq!(
        log_b
            .iter()
            .map(|r| (r.replay_count, r.attempt))
            .collect::<Vec<_>>(),
        vec![(0, 1), (0, 2), (1, 1)]
    );
    assert_queue_delays_in_range(&handoffs);
}

// ---------------------------------------------------------------------------------------
// Q3: the attempt budget is the endpoint's, not maxReceiveCount's; a replay starts afresh.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q3_attempt_budget_ignores_max_receive_count_and_replays_get_a_fresh_budget() {
    let options = LocalOptions {
        time_scale: 0.001,
        max_receive_count: Some(3),
        ..LocalOptions::default()
    };
    let (local, _rx, handoffs) = deployment_recording("q3", options).await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set("/q3", Behavior::Always(Reply::status(500)));
    // Five attempts: more than maxReceiveCount, to show the two are independent.
    let schedule = RetrySchedule::new(vec![60, 60, 60, 60]).unwrap();
    let ep = add_endpoint_with(
        &local,
        EndpointId::generate(),
        "tnt_q3",
        &receiver.url("/q3"),
        &["*"],
        None,
        Some(schedule),
    )
    .await;
    let id = publish(&local, "order.paid", "tnt_q3", r#"{"q":3}"#).await;

    assert!(
        eventually(Duration::from_secs(40), async || dead_letters(&local)
            .await
            .len()
            == 1)
        .await,
        "dead-lettered"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        receiver.requests("/q3").len(),
        5,
        "exactly the budget: schedule length + 1"
    );
    let dead = dead_letters(&local).await;
    assert_eq!(dead.len(), 1);
    let record = dead[0].dead_letter.clone().unwrap();
    assert_eq!(
        (record.reason, record.attempts, record.last_status),
        (DeadLetterReason::Exhausted, 5, Some(500))
    );

    // Console redrive while still failing: the message carries its dead-letter record, so
    // the sender starts a fresh budget of 5 (replay 1).
    assert_eq!(console_redrive(&local).await, 1);
    assert!(
        eventually(Duration::from_secs(40), async || dead_letters(&local)
            .await
            .len()
            == 1)
        .await,
        "dead-lettered again"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(receiver.requests("/q3").len(), 10, "a second full budget");
    let again = dead_letters(&local).await[0].clone();
    assert_eq!(
        (
            again.replay_count,
            again.dead_letter.as_ref().unwrap().attempts
        ),
        (1, 5)
    );

    // Fixed: a replay (console redrive again) is delivered on its first attempt.
    receiver.set("/q3", Behavior::Always(Reply::status(200)));
    assert_eq!(console_redrive(&local).await, 1);
    let got = receiver.wait_for("/q3", 11, Duration::from_secs(20)).await;
    assert_eq!(got.len(), 11);
    assert_eq!(got[10].answered, 200);
    assert!(
        got.iter()
            .all(|r| r.header("webhook-id") == Some(id.as_str()))
    );
    assert!(
        eventually(Duration::from_secs(10), async || attempts_of(
            &local, &id, &ep
        )
        .await
        .len()
            == 11)
        .await
    );
    let log = attempts_of(&local, &id, &ep).await;
    let keys: Vec<(u32, u32)> = log.iter().map(|r| (r.replay_count, r.attempt)).collect();
    let mut expected: Vec<(u32, u32)> = (0..2).flat_map(|r| (1..=5).map(move |a| (r, a))).collect();
    expected.push((2, 1));
    assert_eq!(keys, expected);
    assert_eq!(log[10].outcome, "delivered");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(receiver.requests("/q3").len(), 11, "nothing after delivery");
    assert!(dead_letters(&local).await.is_empty());
    assert_queue_delays_in_range(&handoffs);
}

// ---------------------------------------------------------------------------------------
// No double POSTs.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_message_twice_or_a_replay_of_a_delivered_pair_is_not_posted_again() {
    let options = LocalOptions {
        lookup: Some(no_dns()),
        ..LocalOptions::default()
    };
    let local = deployment_without_pollers("dup", options).await;
    let receiver = Receiver::start().await.unwrap();
    let ep = add_endpoint(&local, "tnt_dup", &receiver.url("/dup"), &["*"], None).await;
    let event = tern_outbox::OutboxWriter::new(&local.resources.outbox_table)
        .prepare("order.paid", "tnt_dup", r#"{"d":1}"#)
        .unwrap()
        .event;
    let message = DeliveryMessage::first(event.clone(), ep.id.clone());

    // The same message twice in one batch (SQS at-least-once), handled concurrently.
    let metrics = Metrics::new("Tern", MetricsSink::Discard);
    let (response, results) = tern_handlers::sender::handle(
        &local.sender,
        sqs_event(&[message.to_body(), message.to_body()]),
        &metrics,
    )
    .await;
    assert!(response.batch_item_failures.is_empty());
    let outcomes: Vec<MessageOutcome> = results.into_iter().map(|(_, r)| r.unwrap()).collect();
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| matches!(o, MessageOutcome::Delivered { attempt: 1 }))
            .count(),
        1,
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| matches!(o, MessageOutcome::Duplicate(_)))
            .count(),
        1,
        "{outcomes:?}"
    );
    assert_eq!(metrics.snapshot().duplicates, 1);
    assert_eq!(receiver.requests("/dup").len(), 1);

    // Again later; then a replay of the delivered pair, in both forms: the replay
    // function's (replay count raised) and a console redrive's (dead-letter record kept).
    let replayed = message.replayed();
    let redriven = message.dead_lettered(tern_core::DeadLetter {
        reason: DeadLetterReason::Exhausted,
        last_status: Some(500),
        last_error: None,
        attempts: 1,
        at: Utc::now(),
    });
    let metrics = Metrics::new("Tern", MetricsSink::Discard);
    for body in [message.to_body(), replayed.to_body(), redriven.to_body()] {
        let (response, results) =
            tern_handlers::sender::handle(&local.sender, sqs_event(&[body]), &metrics).await;
        assert!(response.batch_item_failures.is_empty());
        assert_eq!(
            results[0].1,
            Ok(MessageOutcome::Duplicate(Claim::AlreadyDelivered))
        );
    }
    assert_eq!(metrics.snapshot().duplicates, 3);
    assert_eq!(metrics.snapshot().attempts, 0);
    assert_eq!(receiver.requests("/dup").len(), 1, "never POSTed again");
    // The one attempt, and one row per (replay, attempt) that says its copies found the
    // pair delivered and were dropped.
    let history = local
        .sender
        .ledger
        .history(&event.tenant_id, &event.id)
        .await
        .unwrap();
    let mut rows: Vec<(u32, u32, &str)> = history
        .iter()
        .map(|r| (r.replay_count, r.attempt, r.outcome.as_str()))
        .collect();
    rows.sort_unstable();
    assert_eq!(
        rows,
        [
            (0, 1, tern_core::ports::OUTCOME_DELIVERED),
            (0, 1, tern_core::ports::OUTCOME_DUPLICATE),
            (1, 1, tern_core::ports::OUTCOME_DUPLICATE)
        ],
        "{history:?}"
    );
    assert!(
        history
            .iter()
            .all(|r| r.outcome == "delivered" || r.status.is_none()),
        "a dropped copy was never sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_of_a_retried_attempt_is_not_posted_again() {
    let options = LocalOptions {
        lookup: Some(no_dns()),
        time_scale: 0.001,
        ..LocalOptions::default()
    };
    let local = deployment_without_pollers("dupretry", options).await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set("/r", Behavior::Always(Reply::status(500)));
    let ep = add_endpoint(&local, "tnt_dupr", &receiver.url("/r"), &["*"], None).await;
    let event = tern_outbox::OutboxWriter::new(&local.resources.outbox_table)
        .prepare("order.paid", "tnt_dupr", r#"{"d":2}"#)
        .unwrap()
        .event;
    let message = DeliveryMessage::first(event, ep.id.clone());
    let metrics = Metrics::new("Tern", MetricsSink::Discard);
    let (_, first) =
        tern_handlers::sender::handle(&local.sender, sqs_event(&[message.to_body()]), &metrics)
            .await;
    assert!(
        matches!(first[0].1, Ok(MessageOutcome::Retrying { attempt: 1, .. })),
        "{first:?}"
    );
    // Attempt 1 arrives again (redelivered after its retry was queued): dropped.
    let (_, again) =
        tern_handlers::sender::handle(&local.sender, sqs_event(&[message.to_body()]), &metrics)
            .await;
    assert_eq!(
        again[0].1,
        Ok(MessageOutcome::Duplicate(Claim::AlreadyClaimed))
    );
    assert_eq!(receiver.requests("/r").len(), 1);
}

// ---------------------------------------------------------------------------------------
// The delay invariant as a property of the whole sender (no AWS: in-memory ports, a real
// HTTP attempt against a loopback receiver).
// ---------------------------------------------------------------------------------------

#[derive(Default)]
struct Fakes {
    endpoint: Mutex<Option<Endpoint>>,
    queued: Mutex<Vec<QueueEntry>>,
    scheduled: Mutex<Vec<(u32, u64)>>,
    dead: Mutex<Vec<QueueEntry>>,
}

struct FakeEndpoints(Arc<Fakes>);
struct FakeLedger;
struct FakeQueue(Arc<Fakes>, bool);
struct FakeScheduler(Arc<Fakes>);

#[async_trait]
impl EndpointStore for FakeEndpoints {
    async fn get(&self, _: &TenantId, _: &EndpointId) -> Result<Option<Endpoint>, PortError> {
        Ok(self.0.endpoint.lock().unwrap().clone())
    }
    async fn list_for_tenant(&self, _: &TenantId) -> Result<Vec<Endpoint>, PortError> {
        Ok(vec![])
    }
    async fn list_all(&self) -> Result<Vec<Endpoint>, PortError> {
        Ok(vec![])
    }
    async fn put(&self, _: &Endpoint) -> Result<(), PortError> {
        Ok(())
    }
    async fn disable(&self, _: &TenantId, _: &EndpointId, _: &str) -> Result<(), PortError> {
        Ok(())
    }
    async fn set_secrets(
        &self,
        _: &TenantId,
        _: &EndpointId,
        _: &[tern_core::endpoint::EndpointSecret],
    ) -> Result<(), PortError> {
        Ok(())
    }
}

#[async_trait]
impl DeliveryLedger for FakeLedger {
    async fn claim(&self, _: &DeliveryMessage, _: DateTime<Utc>) -> Result<Claim, PortError> {
        Ok(Claim::Granted)
    }
    async fn finish(&self, _: &DeliveryMessage, _: DeliveryState) -> Result<(), PortError> {
        Ok(())
    }
    async fn release(
        &self,
        _: &DeliveryMessage,
        _: u32,
        _: DateTime<Utc>,
    ) -> Result<(), PortError> {
        Ok(())
    }
    async fn record_attempt(
        &self,
        _: &tern_core::DeliveryMessage,
        _: &AttemptRecord,
    ) -> Result<(), PortError> {
        Ok(())
    }
    async fn history(
        &self,
        _: &tern_core::TenantId,
        _: &EventId,
    ) -> Result<Vec<AttemptRecord>, PortError> {
        Ok(vec![])
    }
}

#[async_trait]
impl MessageQueue for FakeQueue {
    async fn send_batch(
        &self,
        entries: &[QueueEntry],
    ) -> Result<Vec<Result<(), PortError>>, PortError> {
        let mut out = Vec::new();
        for e in entries {
            out.push(self.send(e).await);
        }
        Ok(out)
    }
    async fn send(&self, entry: &QueueEntry) -> Result<(), PortError> {
        // Same rule as SQS (moto and AWS reject 901).
        if self.1 && entry.delay_seconds > MAX_QUEUE_DELAY_SECONDS {
            return Err(PortError::Rejected(format!(
                "DelaySeconds {}",
                entry.delay_seconds
            )));
        }
        let list = if self.1 { &self.0.queued } else { &self.0.dead };
        list.lock().unwrap().push(entry.clone());
        Ok(())
    }
}

#[async_trait]
impl DelayScheduler for FakeScheduler {
    async fn schedule(
        &self,
        message: &DeliveryMessage,
        wait_seconds: u64,
    ) -> Result<(), PortError> {
        self.0
            .scheduled
            .lock()
            .unwrap()
            .push((message.attempt, wait_seconds));
        Ok(())
    }
}

/// One generated case: an endpoint policy, the attempt, the receiver's answer, and the
/// deployment's scale, ceiling and scheduler.
#[derive(Debug, Clone)]
struct Case {
    delays: Vec<u64>,
    max_attempts: Option<u32>,
    attempt: u32,
    status: u16,
    retry_after: Option<String>,
    time_scale: f64,
    ceiling: u64,
    has_scheduler: bool,
}

fn retry_after_values() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..200_000).prop_map(|s| s.to_string()),
        (0u64..u64::MAX).prop_map(|s| s.to_string()),
        Just("99999999999999999999999999".to_owned()),
        (-1_000_000i64..100_000_000).prop_map(|offset| {
            let when = if offset >= 0 {
                SystemTime::now() + Duration::from_secs(offset.unsigned_abs())
            } else {
                SystemTime::now() - Duration::from_secs(offset.unsigned_abs())
            };
            httpdate::fmt_http_date(when)
        }),
        prop_oneof![
            Just("abc"),
            Just("-5"),
            Just("1.5"),
            Just(""),
            Just(" 120 "),
            Just("Wed, 99 Foo 2026 00:00:00 GMT"),
            Just("120, 300")
        ]
        .prop_map(str::to_owned),
    ]
}

fn cases() -> impl Strategy<Value = Case> {
    (
        proptest::collection::vec(
            prop_oneof![1u64..=1_200, 1u64..=MAX_SCHEDULE_DELAY_SECONDS],
            0..8,
        ),
        proptest::option::of(1u32..10),
        1u32..10,
        prop_oneof![Just(429u16), Just(503), Just(500), Just(302), Just(404)],
        proptest::option::of(retry_after_values()),
        prop_oneof![Just(1.0f64), 0.0001f64..1.0],
        prop_oneof![Just(86_400u64), 1u64..=MAX_SCHEDULE_DELAY_SECONDS],
        any::<bool>(),
    )
        .prop_map(
            |(
                delays,
                max_attempts,
                attempt,
                status,
                retry_after,
                time_scale,
                ceiling,
                has_scheduler,
            )| Case {
                delays,
                max_attempts,
                attempt,
                status,
                retry_after,
                time_scale,
                ceiling,
                has_scheduler,
            },
        )
}

#[test]
fn property_no_send_message_ever_carries_a_delay_outside_0_to_900() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let receiver = rt.block_on(Receiver::start()).unwrap();
    let client = DeliveryClient::new(ClientOptions {
        policy: DestinationPolicy {
            https_only: false,
            allow: vec!["127.0.0.1/32".parse().unwrap()],
            nat64: false,
        },
        lookup: Arc::new(StaticLookup::default()),
        ..ClientOptions::default()
    })
    .unwrap();
    let secret = Secret::generate();
    let event = tern_outbox::OutboxWriter::new("unused")
        .prepare("order.paid", "tnt_prop", r#"{"p":1}"#)
        .unwrap()
        .event;
    let serial = std::sync::atomic::AtomicU32::new(0);

    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 256,
        ..ProptestConfig::default()
    });
    runner
        .run(&cases(), |case| {
            let path = format!(
                "/p{}",
                serial.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            );
            let mut reply = Reply::status(case.status);
            if let Some(v) = &case.retry_after {
                reply = reply.header("retry-after", v);
            }
            receiver.set(&path, Behavior::Always(reply));
            let fakes = Arc::new(Fakes::default());
            let mut endpoint = Endpoint::new(
                EndpointId::new("ep_prop").unwrap(),
                TenantId::new("tnt_prop").unwrap(),
                receiver.url(&path),
                vec!["*".into()],
                secret.clone(),
                Utc::now(),
            );
            endpoint.schedule = Some(RetrySchedule::new(case.delays.clone()).unwrap());
            endpoint.max_attempts = case.max_attempts;
            *fakes.endpoint.lock().unwrap() = Some(endpoint.clone());
            let deps = SenderDeps {
                endpoints: Arc::new(FakeEndpoints(fakes.clone())),
                ledger: Arc::new(FakeLedger),
                delivery_queue: Arc::new(FakeQueue(fakes.clone(), true)),
                dlq: Arc::new(FakeQueue(fakes.clone(), false)),
                scheduler: case
                    .has_scheduler
                    .then(|| Arc::new(FakeScheduler(fakes.clone())) as Arc<dyn DelayScheduler>),
                client: client.clone(),
                policy: SenderPolicy {
                    schedule: RetrySchedule::standard(),
                    attempt_timeout: Duration::from_secs(15),
                    retry_after_ceiling_seconds: case.ceiling,
                    time_scale: case.time_scale,
                },
                breaker: None,
            };
            let mut message = DeliveryMessage::first(event.clone(), endpoint.id.clone());
            message.attempt = case.attempt;
            message.first_attempt_at = Some(Utc::now());
            let metrics = Metrics::new("Tern", MetricsSink::Discard);
            let before = Utc::now();
            let (response, results) = rt.block_on(tern_handlers::sender::handle(
                &deps,
                sqs_event(&[message.to_body()]),
                &metrics,
            ));
            prop_assert!(response.batch_item_failures.is_empty(), "{:?}", results);
            let outcome = results[0].1.clone().unwrap();

            let queued = fakes.queued.lock().unwrap().clone();
            let scheduled = fakes.scheduled.lock().unwrap().clone();
            // The invariant itself.
            for q in &queued {
                prop_assert!(
                    q.delay_seconds <= MAX_QUEUE_DELAY_SECONDS,
                    "DelaySeconds {}",
                    q.delay_seconds
                );
            }

            let (schedule, budget) = endpoint.retry_policy(&deps.policy.schedule);
            // A push-back (a 429; a 503 with a Retry-After) spends no attempt: the same
            // attempt again after what it asked (up to the ceiling; one probe interval,
            // 60 s, when it named no time), or dead-lettered `exhausted` when that is past
            // the retry window.
            let asked = case
                .retry_after
                .as_deref()
                .filter(|_| matches!(case.status, 429 | 503))
                .and_then(|v| parse_retry_after(v, SystemTime::now()));
            if case.status == 429 || (case.status == 503 && asked.is_some()) {
                #[allow(clippy::cast_precision_loss)]
                let honoured = tern_core::health::chrono_duration(
                    Duration::try_from_secs_f64(
                        asked.map_or(60, |a| a.min(case.ceiling)) as f64 * case.time_scale,
                    )
                    .unwrap_or(Duration::MAX),
                );
                match outcome {
                    MessageOutcome::Requeued { attempt, until } => {
                        prop_assert_eq!(attempt, case.attempt);
                        prop_assert!(
                            until >= before + honoured,
                            "back at {} before what was asked",
                            until
                        );
                        prop_assert!(scheduled.is_empty());
                        prop_assert_eq!(queued.len(), 1);
                        let next = DeliveryMessage::parse(&queued[0].body).unwrap();
                        prop_assert_eq!(next.attempt, case.attempt, "no attempt spent");
                        prop_assert_eq!(next.not_before, Some(until));
                    }
                    MessageOutcome::DeadLettered { reason, attempts } => {
                        prop_assert_eq!(
                            (reason, attempts),
                            (DeadLetterReason::Exhausted, case.attempt)
                        );
                        let window_end = tern_core::decision::retry_window_end(
                            message.retry_window_start(),
                            &schedule,
                            case.time_scale,
                            Duration::ZERO,
                        );
                        // Beyond the window with the 250 ms every held-back delivery adds
                        // and a spread of at most one probe interval (60 s logical, at
                        // least 100 ms real).
                        let probe = Duration::from_secs_f64(60.0 * case.time_scale)
                            .max(Duration::from_millis(100));
                        let most = honoured
                            + tern_core::health::chrono_duration(probe)
                            + chrono::Duration::milliseconds(250 + 1_000);
                        prop_assert!(
                            Utc::now() + most > window_end,
                            "dead-lettered with its window open until {}",
                            window_end
                        );
                        prop_assert!(queued.is_empty() && scheduled.is_empty());
                        prop_assert_eq!(fakes.dead.lock().unwrap().len(), 1);
                    }
                    other => prop_assert!(false, "a push-back gave {:?}", other),
                }
                return Ok(());
            }
            match (
                schedule
                    .wait_after(case.attempt)
                    .filter(|_| case.attempt < budget),
                outcome,
            ) {
                (None, MessageOutcome::DeadLettered { reason, attempts }) => {
                    prop_assert_eq!(
                        (reason, attempts),
                        (DeadLetterReason::Exhausted, case.attempt)
                    );
                    prop_assert!(queued.is_empty() && scheduled.is_empty());
                    prop_assert_eq!(fakes.dead.lock().unwrap().len(), 1);
                }
                (
                    Some(slot),
                    MessageOutcome::Retrying {
                        attempt,
                        wait_seconds,
                    },
                ) => {
                    prop_assert_eq!(attempt, case.attempt);
                    // Never earlier than the schedule.
                    prop_assert!(wait_seconds >= slot);
                    // Junk on a 503, and other statuses, leave the jittered schedule.
                    let honoured = asked.map_or(0, |a| a.min(case.ceiling));
                    prop_assert!(
                        wait_seconds >= honoured,
                        "wait {} < asked {:?} (ceiling {})",
                        wait_seconds,
                        asked,
                        case.ceiling
                    );
                    prop_assert!(
                        wait_seconds <= (slot + slot / 10 + 1).max(case.ceiling),
                        "wait {} over the cap",
                        wait_seconds
                    );
                    if asked.is_none() {
                        prop_assert!(wait_seconds <= slot + slot / 10 + 1);
                    }
                    let real = real_seconds(wait_seconds, case.time_scale.min(1.0));
                    let over = wait_seconds > u64::from(MAX_QUEUE_DELAY_SECONDS);
                    match (over, case.has_scheduler) {
                        (true, true) => {
                            prop_assert!(queued.is_empty());
                            prop_assert_eq!(scheduled, vec![(case.attempt + 1, real)]);
                        }
                        (true, false) => {
                            // No state machine: chained queue delays carry the wait. The
                            // message says when it is due and goes back for at most 900 s.
                            prop_assert_eq!(queued.len(), 1);
                            let delay = u64::from(queued[0].delay_seconds);
                            prop_assert!(delay <= u64::from(MAX_QUEUE_DELAY_SECONDS));
                            prop_assert!(delay + 1 >= real.min(u64::from(MAX_QUEUE_DELAY_SECONDS)));
                            let next = DeliveryMessage::parse(&queued[0].body).unwrap();
                            prop_assert_eq!(next.attempt, case.attempt + 1);
                            let due = next
                                .not_before
                                .expect("a chained wait carries its due time");
                            let ahead = (due - chrono::Utc::now()).num_seconds();
                            prop_assert!(
                                ahead + 2 >= i64::try_from(real).unwrap_or(i64::MAX),
                                "due in {} s, wait {} s",
                                ahead,
                                real
                            );
                        }
                        (false, _) => {
                            prop_assert!(scheduled.is_empty());
                            prop_assert_eq!(queued.len(), 1);
                            prop_assert_eq!(u64::from(queued[0].delay_seconds), real);
                            prop_assert_eq!(
                                DeliveryMessage::parse(&queued[0].body).unwrap().attempt,
                                case.attempt + 1
                            );
                        }
                    }
                }
                (expected, got) => {
                    prop_assert!(false, "expected wait {:?}, got {:?}", expected, got)
                }
            }
            Ok(())
        })
        .unwrap();
}
