//! The sender: SQS batch of delivery messages -> one signed POST each, concurrently.
//!
//! Per message: read it (malformed -> DLQ, `malformed_message`); claim the attempt in the
//! ledger (a duplicate or an already-delivered pair is dropped without a POST) while
//! loading the endpoint (deleted or disabled -> DLQ); POST; then per the failure table: delivered,
//! retry later (DelaySeconds up to 900 s, Step Functions beyond), or dead-letter. Only a
//! failure to reach our own infrastructure, or a panic, reports the message in
//! `batchItemFailures`; SQS then retries it, and after `maxReceiveCount` redrives it to
//! the DLQ.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use bytes::Bytes;
use chrono::Utc;
use futures::FutureExt as _;
use tern_core::endpoint::MAX_TIMEOUT_MS;
use tern_core::outcome::classify;
use tern_core::ports::{
    AttemptRecord, Claim, DelayScheduler, DeliveryLedger, DeliveryState, EndpointStore,
    MessageQueue, PortError, QueueEntry,
};
use tern_core::retry::{
    MAX_QUEUE_DELAY_SECONDS, MAX_WAIT_SECONDS, WaitRoute, next_wait, parse_retry_after, route_wait,
    with_jitter,
};
use tern_core::signing::signature_headers;
use tern_core::{DeadLetter, DeadLetterReason, DeliveryMessage, Endpoint, Verdict, sqs_text};
use tern_http::{AttemptReport, AttemptRequest, DeliveryClient};

use crate::config::SenderPolicy;
use crate::metrics::Metrics;

/// Added to the longest attempt deadline to get a claim's lease, in seconds. The delivery
/// queue's visibility timeout (360 s) must exceed deadline + margin (60 s), so a message
/// redelivered after a crash finds the lease expired and can take it over.
pub const LEASE_MARGIN_SECONDS: i64 = 30;

/// What the sender needs.
pub struct SenderDeps {
    /// Endpoint registry.
    pub endpoints: Arc<dyn EndpointStore>,
    /// Claims and attempt log.
    pub ledger: Arc<dyn DeliveryLedger>,
    /// The delivery queue, for retries.
    pub delivery_queue: Arc<dyn MessageQueue>,
    /// The DLQ.
    pub dlq: Arc<dyn MessageQueue>,
    /// Waits over 900 s; without one (or for a message too large for an execution input)
    /// they are carried by chained queue delays.
    pub scheduler: Option<Arc<dyn DelayScheduler>>,
    /// The HTTP client.
    pub client: DeliveryClient,
    /// Retry policy.
    pub policy: SenderPolicy,
}

/// What happened to one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageOutcome {
    /// Delivered on this attempt.
    Delivered {
        /// Attempt number.
        attempt: u32,
    },
    /// Failed; the next attempt waits `wait_seconds` (logical, before time scaling).
    Retrying {
        /// Attempt number that failed.
        attempt: u32,
        /// Wait before the next attempt, seconds.
        wait_seconds: u64,
    },
    /// Dead-lettered.
    DeadLettered {
        /// Why.
        reason: DeadLetterReason,
        /// Attempts made in this budget.
        attempts: u32,
    },
    /// Not sent: the pair was delivered, or another message holds this attempt.
    Duplicate(Claim),
    /// Not due yet (a long wait carried by chained queue delays): put back on the queue.
    Waiting {
        /// When the attempt is due.
        until: chrono::DateTime<Utc>,
    },
}

/// Result of one message: its SQS message id and outcome, or the infrastructure error /
/// panic that made it a batch failure.
pub type MessageResult = (String, Result<MessageOutcome, String>);

/// Handles one SQS batch, all messages concurrently. Returns the partial batch response
/// (only failed message ids) and every message's result.
pub async fn handle(
    deps: &SenderDeps,
    event: SqsEvent,
    metrics: &Metrics,
) -> (SqsBatchResponse, Vec<MessageResult>) {
    let tasks = event.records.iter().map(|msg| async move {
        let id = msg.message_id.clone().unwrap_or_default();
        let result = AssertUnwindSafe(process(deps, msg, metrics))
            .catch_unwind()
            .await;
        let result = match result {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(e)) => Err(e.to_string()),
            Err(panic) => Err(format!("panic: {}", panic_text(&*panic))),
        };
        if let Err(e) = &result {
            tracing::error!(message_id = %id, error = %e, "message failed; SQS will retry it");
        }
        (id, result)
    });
    let results = futures::future::join_all(tasks).await;
    let mut response = SqsBatchResponse::default();
    for (id, r) in &results {
        if r.is_err() {
            response.add_failure(id.clone());
        }
    }
    (response, results)
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".into())
}

async fn process(
    deps: &SenderDeps,
    sqs: &SqsMessage,
    metrics: &Metrics,
) -> Result<MessageOutcome, PortError> {
    let raw = sqs.body.as_deref().unwrap_or("");
    let message = match DeliveryMessage::parse(raw) {
        Ok(m) => m,
        Err(e) => return dead_letter_malformed(deps, raw, &e.to_string(), metrics).await,
    };
    // A message that carries its dead-letter record was redriven (console or replay):
    // it starts a fresh budget with the same webhook-id.
    let message = if message.dead_letter.is_some() {
        message.replayed()
    } else {
        message
    };
    if let Some(until) = message.not_before
        && until > Utc::now() + chrono::Duration::milliseconds(500)
    {
        // No wait Tern schedules is longer than MAX_WAIT_SECONDS: a later due time is
        // corrupt, and parking it forever would hide it from every alarm.
        let latest = Utc::now()
            + chrono::Duration::seconds(
                i64::try_from(MAX_WAIT_SECONDS).unwrap_or(i64::MAX / 1000) + 3600,
            );
        if until > latest {
            return dead_letter(
                deps,
                &message,
                DeadLetterReason::MalformedMessage,
                None,
                metrics,
            )
            .await;
        }
        requeue_until(deps, &message, until).await?;
        return Ok(MessageOutcome::Waiting { until });
    }

    let lease = Utc::now()
        + chrono::Duration::milliseconds(i64::try_from(MAX_TIMEOUT_MS).unwrap_or(30_000))
        + chrono::Duration::seconds(LEASE_MARGIN_SECONDS);
    // The claim and the endpoint read run together: neither needs the other, and with
    // the endpoint cache warm the read costs nothing. A read made for a message that
    // turns out to be a duplicate is the price of not waiting for both in turn.
    let (claim, endpoint) = futures::join!(
        deps.ledger.claim(&message, lease),
        deps.endpoints
            .get(&message.event.tenant_id, &message.endpoint_id)
    );
    let claim = claim?;
    let Some(takeover) = claim.granted_takeover() else {
        metrics.update(|c| c.duplicates += 1);
        tracing::info!(delivery_id = %message.delivery_id, attempt = message.attempt, ?claim, "duplicate; not sent");
        return Ok(MessageOutcome::Duplicate(claim));
    };

    let endpoint = match endpoint? {
        None => {
            return dead_letter(
                deps,
                &message,
                DeadLetterReason::EndpointDeleted,
                None,
                metrics,
            )
            .await;
        }
        Some(e) if !e.enabled => {
            return dead_letter(
                deps,
                &message,
                DeadLetterReason::EndpointDisabled,
                None,
                metrics,
            )
            .await;
        }
        Some(e) => e,
    };
    attempt(deps, message, takeover, &endpoint, metrics).await
}

async fn attempt(
    deps: &SenderDeps,
    message: DeliveryMessage,
    takeover: u32,
    endpoint: &Endpoint,
    metrics: &Metrics,
) -> Result<MessageOutcome, PortError> {
    let (schedule, max_attempts) = endpoint.retry_policy(&deps.policy.schedule);
    let deadline = endpoint
        .timeout_ms
        .map_or(deps.policy.attempt_timeout, Duration::from_millis);
    let started = Utc::now();
    let secrets = endpoint.active_secrets(started);
    if secrets.is_empty() {
        // Never send an unsigned webhook: the receiver could not tell it from a forgery.
        return dead_letter(
            deps,
            &message,
            DeadLetterReason::NoActiveSecret,
            None,
            metrics,
        )
        .await;
    }
    let body = Bytes::from(message.event.payload.as_str().to_owned());
    let headers = signature_headers(&message.event.id, started.timestamp(), &body, &secrets);
    let report = deps
        .client
        .attempt(AttemptRequest {
            url: &endpoint.url,
            body,
            headers: &headers,
            deadline,
        })
        .await;
    // From here on, receiver-controlled text (Location, Retry-After, error detail, excerpt)
    // goes into queue messages, attributes, the attempt log and log lines: reduced once, here,
    // to what SQS accepts and bounded (tern_core::sqs_text).
    let report = AttemptReport {
        result: report.result.cleaned(),
        excerpt: sqs_text::clean_opt(report.excerpt.as_deref()),
        ..report
    };
    let status = report.result.status();
    let error = report.result.error_text();

    let verdict = classify(&report.result);
    let wait = match &verdict {
        Verdict::Retry { retry_after } if message.attempt < max_attempts => {
            schedule.wait_after(message.attempt).map(|w| {
                let asked = retry_after
                    .as_deref()
                    .and_then(|v| parse_retry_after(v, SystemTime::now()));
                next_wait(
                    with_jitter(w, rand::random::<f64>()),
                    asked,
                    deps.policy.retry_after_ceiling_seconds,
                )
            })
        }
        _ => None,
    };
    let outcome = match (&verdict, wait) {
        (Verdict::Delivered, _) => MessageOutcome::Delivered {
            attempt: message.attempt,
        },
        (Verdict::DeadLetter(reason), _) => MessageOutcome::DeadLettered {
            reason: *reason,
            attempts: message.attempt,
        },
        (Verdict::Retry { .. }, Some(wait_seconds)) => MessageOutcome::Retrying {
            attempt: message.attempt,
            wait_seconds,
        },
        (Verdict::Retry { .. }, None) => MessageOutcome::DeadLettered {
            reason: DeadLetterReason::Exhausted,
            attempts: message.attempt,
        },
    };

    metrics.update(|c| {
        c.attempts += 1;
        c.latencies_ms.push(report.latency_ms);
        if verdict == Verdict::Delivered {
            c.attempts_succeeded += 1;
        } else {
            c.attempts_failed += 1;
        }
    });
    let delivered = verdict == Verdict::Delivered;
    let record = AttemptRecord {
        event_id: message.event.id.clone(),
        endpoint_id: message.endpoint_id.clone(),
        replay_count: message.replay_count,
        attempt: message.attempt,
        takeover,
        started_at: started,
        latency_ms: report.latency_ms,
        status,
        error_class: match &report.result {
            tern_core::AttemptResult::Failed { class, .. } => Some(*class),
            tern_core::AttemptResult::Response { .. } => None,
        },
        error: error.clone(),
        location: match &report.result {
            tern_core::AttemptResult::Response {
                status: 300..=399,
                location,
                ..
            } => location.clone(),
            _ => None,
        },
        // The excerpt is for diagnosing failures; a success's body is not kept, which
        // keeps the delivered record under 1 KB (one DynamoDB write unit).
        response_excerpt: if delivered {
            None
        } else {
            report.excerpt.clone()
        },
        excerpt_truncated: !delivered && report.excerpt_truncated,
        outcome: match &outcome {
            MessageOutcome::Delivered { .. } => "delivered".into(),
            MessageOutcome::Retrying { .. } => "retry".into(),
            MessageOutcome::DeadLettered { reason, .. } => format!("dead_letter:{reason}"),
            // Not produced after an attempt; named for completeness.
            MessageOutcome::Duplicate(_) => "duplicate".into(),
            MessageOutcome::Waiting { .. } => "waiting".into(),
        },
        next_wait_seconds: wait,
    };
    // The attempt log is for people; losing one row must not cause a second POST. A
    // success is recorded together with the delivered state (one write), below.
    if !delivered && let Err(e) = deps.ledger.record_attempt(&record).await {
        tracing::warn!(error = %e, delivery_id = %message.delivery_id, "attempt not logged");
    }
    tracing::info!(
        delivery_id = %message.delivery_id, attempt = message.attempt, status, error = error.as_deref(),
        latency_ms = report.latency_ms, outcome = %record.outcome, "attempt"
    );

    match &outcome {
        MessageOutcome::Delivered { .. } => {
            // Best effort, like `finish`: the POST succeeded; a lost marker can at worst
            // let a late duplicate through after the lease expires.
            if let Err(e) = deps.ledger.record_delivered(&message, &record).await {
                tracing::warn!(error = %e, delivery_id = %message.delivery_id, "delivery not recorded");
            }
        }
        MessageOutcome::Retrying { wait_seconds, .. } => {
            let first = message.first_attempt_at.unwrap_or(started);
            let next = message.next_attempt(first, status, error);
            enqueue_retry(deps, &next, *wait_seconds).await?;
            metrics.update(|c| c.retries += 1);
            finish(deps, &message, DeliveryState::Retrying).await;
        }
        MessageOutcome::DeadLettered { reason, .. } => {
            let last = Some((status, error));
            return dead_letter(deps, &message, *reason, last, metrics).await;
        }
        MessageOutcome::Duplicate(_) | MessageOutcome::Waiting { .. } => {}
    }
    Ok(outcome)
}

async fn enqueue_retry(
    deps: &SenderDeps,
    next: &DeliveryMessage,
    wait_seconds: u64,
) -> Result<(), PortError> {
    let route = route_wait(wait_seconds, deps.policy.time_scale);
    let real_wait = match (route, &deps.scheduler) {
        (WaitRoute::Queue { delay_seconds }, _) => {
            return send_delayed(deps, next, delay_seconds).await;
        }
        (WaitRoute::StepFunctions { wait_seconds }, Some(scheduler)) => {
            match scheduler.schedule(next, wait_seconds).await {
                // Too large for an execution's input: chain queue delays instead.
                Err(PortError::Rejected(why)) => {
                    tracing::info!(delivery_id = %next.delivery_id, %why, "long wait carried by chained queue delays");
                    wait_seconds
                }
                other => return other,
            }
        }
        (WaitRoute::StepFunctions { wait_seconds }, None) => {
            tracing::warn!(
                wait_seconds,
                "no delay state machine configured; chaining queue delays"
            );
            wait_seconds
        }
    };
    let until =
        Utc::now() + chrono::Duration::seconds(i64::try_from(real_wait).unwrap_or(i64::MAX / 1000));
    let waiting = DeliveryMessage {
        not_before: Some(until),
        ..next.clone()
    };
    requeue_until(deps, &waiting, until).await
}

/// Puts a message that is not due yet back on the queue for at most 900 s; it comes back
/// and is put back again until `until` (the chained-delay path for long waits).
async fn requeue_until(
    deps: &SenderDeps,
    message: &DeliveryMessage,
    until: chrono::DateTime<Utc>,
) -> Result<(), PortError> {
    let remaining_ms = (until - Utc::now()).num_milliseconds().max(0);
    let seconds = u64::try_from(remaining_ms).unwrap_or(0).div_ceil(1000);
    let delay = u32::try_from(seconds.min(u64::from(MAX_QUEUE_DELAY_SECONDS)))
        .unwrap_or(MAX_QUEUE_DELAY_SECONDS);
    send_delayed(deps, message, delay).await
}

async fn send_delayed(
    deps: &SenderDeps,
    message: &DeliveryMessage,
    delay_seconds: u32,
) -> Result<(), PortError> {
    deps.delivery_queue
        .send(&QueueEntry {
            id: "retry".into(),
            body: message.to_body(),
            delay_seconds,
            attributes: vec![],
            group_id: Some(message.group_id()),
        })
        .await
}

async fn finish(deps: &SenderDeps, message: &DeliveryMessage, state: DeliveryState) {
    // Best effort: the work is done and queued; a lost marker can at worst let a late
    // duplicate through after the lease expires, never lose a delivery.
    if let Err(e) = deps.ledger.finish(message, state).await {
        tracing::warn!(error = %e, delivery_id = %message.delivery_id, "delivery state not recorded");
    }
}

/// Dead-letters a delivery, records it, and for 410 Gone disables the endpoint.
async fn dead_letter(
    deps: &SenderDeps,
    message: &DeliveryMessage,
    reason: DeadLetterReason,
    last: Option<(Option<u16>, Option<String>)>,
    metrics: &Metrics,
) -> Result<MessageOutcome, PortError> {
    let (last_status, last_error) =
        last.unwrap_or((message.last_status, message.last_error.clone()));
    let attempts = match reason {
        // Dead-lettered before this message's attempt was made.
        DeadLetterReason::EndpointDeleted
        | DeadLetterReason::EndpointDisabled
        | DeadLetterReason::NoActiveSecret
        | DeadLetterReason::MalformedMessage => message.attempt - 1,
        _ => message.attempt,
    };
    let dead = message.dead_lettered(DeadLetter {
        reason,
        last_status,
        last_error,
        attempts,
        at: Utc::now(),
    });
    deps.dlq
        .send(&QueueEntry {
            id: "dead".into(),
            body: dead.to_body(),
            delay_seconds: 0,
            attributes: vec![
                ("tern-reason".into(), reason.to_string()),
                ("tern-endpoint-id".into(), message.endpoint_id.to_string()),
                (
                    "tern-event-type".into(),
                    message.event.event_type.to_string(),
                ),
            ],
            group_id: Some(message.group_id()),
        })
        .await?;
    metrics.update(|c| c.dead_letters += 1);
    tracing::warn!(delivery_id = %message.delivery_id, %reason, attempts, "dead-lettered");
    if reason == DeadLetterReason::Gone {
        // Starts with the dead-letter reason so operators can filter on it.
        let why = format!(
            "{}: receiver answered 410 Gone at {}",
            DeadLetterReason::Gone,
            Utc::now().to_rfc3339()
        );
        if let Err(e) = deps
            .endpoints
            .disable(&message.event.tenant_id, &message.endpoint_id, &why)
            .await
        {
            tracing::warn!(error = %e, endpoint_id = %message.endpoint_id, "endpoint not disabled after 410");
        }
    }
    finish(deps, message, DeliveryState::DeadLettered).await;
    Ok(MessageOutcome::DeadLettered { reason, attempts })
}

async fn dead_letter_malformed(
    deps: &SenderDeps,
    raw: &str,
    error: &str,
    metrics: &Metrics,
) -> Result<MessageOutcome, PortError> {
    tracing::error!(%error, "malformed delivery message dead-lettered");
    let body = if raw.is_empty() { "(empty body)" } else { raw };
    deps.dlq
        .send(&QueueEntry {
            id: "malformed".into(),
            body: body.to_owned(),
            delay_seconds: 0,
            attributes: vec![
                (
                    "tern-reason".into(),
                    DeadLetterReason::MalformedMessage.to_string(),
                ),
                (
                    "tern-error".into(),
                    sqs_text::clean(error, sqs_text::MAX_TEXT_BYTES).into_owned(),
                ),
            ],
            group_id: None,
        })
        .await?;
    metrics.update(|c| c.dead_letters += 1);
    Ok(MessageOutcome::DeadLettered {
        reason: DeadLetterReason::MalformedMessage,
        attempts: 0,
    })
}
