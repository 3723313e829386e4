//! The sender: SQS batch of delivery messages -> one signed POST each, concurrently.
//!
//! Per message: read it (malformed -> DLQ, `malformed_message`); claim the attempt in the
//! ledger (a duplicate or an already-delivered pair is dropped without a POST) while
//! loading the endpoint (deleted or disabled -> DLQ); POST; then per the failure table: delivered,
//! retry later (DelaySeconds up to 900 s, Step Functions beyond), or dead-letter. A
//! message whose processing fails on our side (an AWS call throttled or failed) is put
//! back as a new message with a short jittered delay ([`tern_core::put_back`]), carrying
//! the lease of the claim it asked for; only a panic, a message not started for want of
//! time, or a put-back SQS refused is reported in `batchItemFailures`, for SQS to retry
//! after the visibility timeout and redrive to the DLQ after `maxReceiveCount`. A put-back
//! SQS refused is hidden for the same short delay first (`ChangeMessageVisibility` of the
//! original, [`MessageQueue::change_visibility`]), so it too comes back in seconds; only
//! when that fails as well does it wait out the visibility timeout (`PutBackFailed`).
//!
//! Every dead letter whose event is known leaves a row in the attempt log, those made
//! before any POST (endpoint disabled or deleted, no active secret, a retry window that
//! ended behind an open circuit) included: `tern attempts <event>` shows each with its
//! reason. The handler answers before the invocation's deadline ([`crate::deadline`]): a
//! message it has no time to start is reported untouched, and after a POST the write
//! that carries the delivery on comes before the writes for people.

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use bytes::Bytes;
use chrono::Utc;
use futures::FutureExt as _;
use tern_core::decision::{AgainBecause, AttemptContext, Next, decide};
use tern_core::endpoint::MAX_TIMEOUT_MS;
use tern_core::health::{HealthPolicy, HealthSignal};
use tern_core::ports::{
    AttemptRecord, Claim, DelayScheduler, DeliveryLedger, DeliveryState, EndpointStore,
    MessageQueue, OUTCOME_ABANDONED, OUTCOME_DELIVERED, OUTCOME_DUPLICATE, OUTCOME_REQUEUED,
    OUTCOME_RETRY, PortError, QueueEntry,
};
use tern_core::rate_limit::{RateSlot, delay_seconds_before};
use tern_core::receiver_auth::ReceiverAuth;
use tern_core::request;
use tern_core::retry::{
    MAX_QUEUE_DELAY_SECONDS, MAX_WAIT_SECONDS, WaitRoute, real_wait_seconds, route_wait,
};
use tern_core::{DeadLetter, DeadLetterReason, DeliveryMessage, Endpoint, ErrorClass, sqs_text};
use tern_http::{AttemptReport, AttemptRequest, DeliveryClient};

use crate::config::SenderPolicy;
use crate::deadline::Deadline;
use crate::endpoint_log::BatchLog;
use crate::health::{BatchHealth, CircuitBreaker, EndpointKey};
use crate::markers;
use crate::metrics::Metrics;
use crate::rate_limit::{EndpointGate, Pass, RateGate};
use crate::telemetry::{self, keys};

/// Added to the longest attempt deadline to get a claim's lease, in seconds. The delivery
/// queue's visibility timeout (360 s) must exceed deadline + margin (60 s), so a message
/// redelivered after a crash finds the lease expired and can take it over.
pub const LEASE_MARGIN_SECONDS: i64 = 30;

/// What the sender needs. Cloning is cheap (shared clients); each batch runs with a copy
/// whose ledger keeps the batch's rows for the endpoint log ([`crate::endpoint_log`]).
#[derive(Clone)]
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
    /// Endpoint health and the circuit breaker (`crate::health`). `None` turns the
    /// per-endpoint failure model off: only the in-memory test and benchmark set-ups do
    /// that; the Lambda and local mode always have one.
    pub breaker: Option<Arc<CircuitBreaker>>,
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
    /// Due, but the endpoint's circuit is open or its receiver asked for a pause: put back
    /// on the queue until after the next probe or the pause's end, keeping its attempt
    /// number (no attempt spent).
    Deferred {
        /// When it comes back.
        until: chrono::DateTime<Utc>,
    },
    /// Claimed, then not counted (the receiver pushed back, or a failure of ours, before
    /// or during the POST): the same attempt back on the queue, no attempt spent.
    Requeued {
        /// The attempt, made again.
        attempt: u32,
        /// When it comes back.
        until: chrono::DateTime<Utc>,
    },
    /// Its processing failed on our side (a throttled or failed AWS call, `error`): the
    /// message was sent again as a new one, due in `delay_seconds` (real seconds, the
    /// `DelaySeconds` it was given), its `put_back`-th time in a row, and the original
    /// is deleted ([`tern_core::put_back`]). Not a batch failure: it does not wait out
    /// the visibility timeout, and the redrive's receive count never sees it.
    PutBack {
        /// Why its processing failed.
        error: String,
        /// The delay it was given, seconds.
        delay_seconds: u32,
        /// Its put-backs in a row, this one included.
        put_back: u32,
    },
}

impl MessageOutcome {
    /// The outcome's name in reports and counters: `delivered`, `retrying`,
    /// `dead_lettered`, `duplicate`, `waiting`, `deferred`, `requeued`, `put_back`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Delivered { .. } => "delivered",
            Self::Retrying { .. } => "retrying",
            Self::DeadLettered { .. } => "dead_lettered",
            Self::Duplicate(_) => "duplicate",
            Self::Waiting { .. } => "waiting",
            Self::Deferred { .. } => "deferred",
            Self::Requeued { .. } => "requeued",
            Self::PutBack { .. } => "put_back",
        }
    }
}

/// Result of one message: its SQS message id and outcome, or the infrastructure error /
/// panic that made it a batch failure.
pub type MessageResult = (String, Result<MessageOutcome, String>);

/// Handles one SQS batch, all messages concurrently, without a deadline (tests and tools
/// that drive the handler directly). Returns the partial batch response (only failed
/// message ids) and every message's result.
pub async fn handle(
    deps: &SenderDeps,
    event: SqsEvent,
    metrics: &Metrics,
) -> (SqsBatchResponse, Vec<MessageResult>) {
    handle_within(deps, event, metrics, Deadline::none()).await
}

/// How far ahead of now a message's `not_before` may be and the message still count as
/// due, in milliseconds: a delivery put back until a time comes back on whole seconds of
/// `DelaySeconds`, rounded up, so a little early only by the clocks' drift.
const DUE_SLACK_MS: i64 = 500;

/// Whether `message` is due at `now`: its `not_before` has come (within
/// [`DUE_SLACK_MS`]), or it was redriven (a replay starts a fresh budget at once).
fn is_due(message: &DeliveryMessage, now: chrono::DateTime<Utc>) -> bool {
    message.dead_letter.is_some()
        || message
            .not_before
            .is_none_or(|t| t <= now + chrono::Duration::milliseconds(DUE_SLACK_MS))
}

/// Error text of a message the handler did not start because the invocation's deadline
/// was too near ([`Deadline::may_start`]): reported in `batchItemFailures` untouched.
pub const NOT_STARTED: &str = "not started: the invocation's deadline is too near";

/// Handles one SQS batch, all messages concurrently, answering before `deadline` (the
/// Lambda invocation's, or local mode's): messages it has no time to start, and only
/// those and the ones whose writes failed, are in the partial batch response. Returns it
/// and every message's result.
pub async fn handle_within(
    deps: &SenderDeps,
    event: SqsEvent,
    metrics: &Metrics,
    deadline: Deadline,
) -> (SqsBatchResponse, Vec<MessageResult>) {
    // The batch's attempt rows go to their endpoints' logs at the end, in one write per
    // endpoint (crate::endpoint_log).
    let log = Arc::new(BatchLog::new(deps.ledger.clone()));
    let deps = &SenderDeps {
        ledger: log.clone(),
        ..deps.clone()
    };
    let parsed: Vec<Result<DeliveryMessage, String>> = event
        .records
        .iter()
        .map(|m| DeliveryMessage::parse(m.body.as_deref().unwrap_or("")).map_err(|e| e.to_string()))
        .collect();
    // One gate per endpoint the batch touches, decided before any POST (the circuit, a
    // pause, and for a limited endpoint the slots its due deliveries need: one write);
    // one health write per endpoint after them all.
    let gates: HashMap<EndpointKey, EndpointGate> = match &deps.breaker {
        // No message will start: no probe is claimed, no slot taken for nothing.
        Some(_) if !deadline.may_start() => HashMap::new(),
        Some(breaker) => {
            let keys: HashSet<EndpointKey> = parsed
                .iter()
                .flatten()
                .map(|m| (m.event.tenant_id.clone(), m.endpoint_id.clone()))
                .collect();
            let now = Utc::now();
            // A message put back to write its delivered marker sends nothing: no slot.
            let due: Vec<&DeliveryMessage> = parsed
                .iter()
                .flatten()
                .filter(|m| m.delivered_attempt.is_none() && is_due(m, now))
                .collect();
            crate::rate_limit::gates(
                breaker,
                deps.endpoints.as_ref(),
                keys.into_iter().collect(),
                &due,
            )
            .await
        }
        None => HashMap::new(),
    };
    let batch = BatchHealth::default();
    let ctx = BatchContext {
        gates: &gates,
        health: &batch,
        deferred: std::sync::Mutex::default(),
        deadline,
        messages: event.records.len(),
        admitted: AtomicUsize::new(0),
        all_admitted: tokio::sync::Notify::new(),
    };
    let tasks = event.records.iter().zip(parsed).map(|(msg, parsed)| {
        let ctx = &ctx;
        async move {
            let id = msg.message_id.clone().unwrap_or_default();
            let raw = msg.body.as_deref().unwrap_or("");
            // Kept to put it back when its processing fails on our side, and, should the
            // put-back fail too, to change the visibility of this receive.
            let received = parsed.as_ref().ok().cloned();
            let receipt_handle = msg.receipt_handle.clone();
            let receive_count = receive_count(msg);
            let admitted = Admitted::new(ctx);
            let result = AssertUnwindSafe(process(deps, &id, raw, parsed, metrics, ctx, &admitted))
                .catch_unwind()
                .await;
            // Whatever became of it, it holds back no more deferrals.
            admitted.mark();
            let (result, failure) = match result {
                Ok(Ok(outcome)) => (Ok(outcome), Failure::None),
                Ok(Err(e)) => {
                    // Not started for want of time: nothing was done, and the invocation
                    // has no time to spare; SQS delivers it again. A rejection (an endpoint
                    // item that does not parse, a secret sealed for another endpoint) is
                    // permanent until someone fixes the item: putting it back every few
                    // seconds would not heal it, so SQS's redrive takes it to the DLQ after
                    // maxReceiveCount receives, to be replayed once it is fixed.
                    let kind = if matches!(&e, PortError::Unavailable(t) if t == NOT_STARTED)
                        || matches!(&e, PortError::Rejected(_))
                    {
                        Failure::LeftToSqs
                    } else {
                        Failure::Ours
                    };
                    (Err(e.to_string()), kind)
                }
                // A panic may be the message itself (a poison message): left to SQS, whose
                // redrive dead-letters it after `maxReceiveCount` receives.
                Err(panic) => (
                    Err(format!("panic: {}", panic_text(&*panic))),
                    Failure::LeftToSqs,
                ),
            };
            if let Err(e) = &result {
                tracing::warn!(message_id = %id, error = %e, "message failed");
            }
            let failed = Failed {
                kind: failure,
                received,
                claim_lease: admitted.claim_lease(),
                delivered: admitted.delivered(),
                receipt_handle,
                receive_count,
            };
            ((id, result), failed)
        }
    });
    // The deferrals are put back as soon as every message is past its gate, while the
    // batch's POSTs (some waiting for their rate-limit slots) go on: a delivery holding a
    // slot comes back on time for it. They must be put back (or reported); the health
    // counts are for people. Both end before the answer's reserve.
    let put_back = async {
        ctx.all_past_their_gates().await;
        let deferred = std::mem::take(
            &mut *ctx
                .deferred
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        match deadline
            .before_answer(flush_deferred(deps, &deferred, metrics))
            .await
        {
            Some(failed) => failed,
            None => deferred
                .iter()
                .map(|d| (d.message_id.clone(), DEADLINE_CUT.to_owned()))
                .collect(),
        }
    };
    let (done, not_put_back) = futures::join!(futures::future::join_all(tasks), put_back);
    let (mut results, mut failed): (Vec<MessageResult>, Vec<Failed>) = done.into_iter().unzip();
    for (id, error) in not_put_back {
        tracing::warn!(message_id = %id, %error, "deferred delivery not put back with the batch's deferrals");
        if let Some(i) = results.iter().position(|(rid, _)| *rid == id) {
            results[i].1 = Err(error);
            failed[i].kind = Failure::Ours;
        }
    }
    // Our failures go back as new messages with a short delay, not as batch failures
    // (tern_core::put_back).
    let returning: Vec<Returning> = results
        .iter()
        .zip(&failed)
        .filter_map(|((id, result), f)| {
            let error = result.as_ref().err()?;
            returning(deps, id, error, f)
        })
        .collect();
    // For people, both: the health write and the endpoint log, together, before the
    // answer; and the put-backs, which keep our failures out of flight.
    let settle = async {
        if let Some(breaker) = &deps.breaker {
            breaker
                .settle(&batch, deps.endpoints.as_ref(), metrics)
                .await;
        }
    };
    let returned = ReturnedLog::default();
    match deadline
        .before_answer(async {
            futures::join!(
                settle,
                log.flush(),
                put_back_all(deps, &returning, metrics, &returned)
            )
        })
        .await
    {
        Some(((), flushed, ())) => {
            if let Err(e) = flushed {
                tracing::warn!(error = %e, "endpoint log not written; the events' histories have the attempts");
            }
        }
        None => tracing::warn!(
            "endpoint health, endpoint log and put-backs cut off: the invocation's deadline is near"
        ),
    }
    let returned = returned
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut hidden = HashSet::new();
    for r in &returning {
        let Some(i) = results.iter().position(|(id, _)| *id == r.message_id) else {
            continue;
        };
        match returned.get(&r.message_id) {
            Some(Returned::PutBack(outcome)) => results[i].1 = Ok(outcome.clone()),
            Some(Returned::Hidden { seconds, why }) => {
                hidden.insert(r.message_id.clone());
                results[i].1 = Err(format!(
                    "{}; not put back ({why}): visible again in {seconds} s",
                    r.error
                ));
            }
            None => {
                // Neither put back nor hidden: the one case of our failures that still
                // waits out the visibility timeout (the PutBackFailed alarm).
                metrics.update(|c| c.put_back_failed += 1);
                tracing::error!(message_id = %r.message_id, delivery_id = %r.message.delivery_id, error = %r.error, "our failure neither put back nor hidden for a short delay: left for the visibility timeout");
            }
        }
    }
    let mut response = SqsBatchResponse::default();
    for (id, r) in &results {
        if let Err(e) = r {
            metrics.update(|c| c.batch_failures += 1);
            if hidden.contains(id) {
                tracing::warn!(message_id = %id, error = %e, "message left to SQS, visible again after a short delay");
            } else {
                tracing::error!(message_id = %id, error = %e, "message left to SQS: it comes back after the visibility timeout");
            }
            response.add_failure(id.clone());
        }
    }
    (response, results)
}

/// How a message's processing failed, for what happens to it next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// It did not fail.
    None,
    /// On our side (an AWS call failed or was cut off): put back with a short delay.
    Ours,
    /// Not started for want of time, or a panic: a batch failure, for SQS to deliver again
    /// after the visibility timeout (and its redrive to bound).
    LeftToSqs,
}

/// What the end of the batch needs of a message that failed.
struct Failed {
    kind: Failure,
    /// The message as received, when it was one.
    received: Option<DeliveryMessage>,
    /// The lease of the last claim its processing asked for ([`Admitted::claim_lease`]).
    claim_lease: Option<chrono::DateTime<Utc>>,
    /// Its successful attempt, when it was delivered and the marker lost.
    delivered: Option<AttemptRecord>,
    /// The receipt handle of this receive (absent only from a hand-made event).
    receipt_handle: Option<String>,
    /// SQS's `ApproximateReceiveCount` of this receive, 1 for the first.
    receive_count: u32,
}

/// SQS's `ApproximateReceiveCount` of a record (1 for its first receive), 1 when the
/// attribute is absent or does not parse (a hand-made event).
fn receive_count(record: &aws_lambda_events::sqs::SqsMessage) -> u32 {
    record
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|c| c.parse::<u32>().ok())
        .unwrap_or(1)
        .max(1)
}

/// A failed message going back on the queue as a new message.
struct Returning {
    /// The failed message's SQS id.
    message_id: String,
    /// Why it failed.
    error: String,
    /// The message to send, its put-back count raised and the lease of the claim its
    /// processing may hold ([`DeliveryMessage::held_lease_ms`]).
    message: DeliveryMessage,
    /// Its `DelaySeconds`.
    delay_seconds: u32,
    /// The receipt handle of the failed message, to hide it for `hide_seconds` when the
    /// put-back is not sent.
    receipt_handle: Option<String>,
    /// The visibility timeout the failed message gets when its put-back is not sent: the
    /// delay of the put-back it stands for, counting the receives of the same message
    /// (each of which was such a fallback) as put-backs in a row.
    hide_seconds: u32,
}

/// The put-back of a message that failed on our side, or `None` when it is left to SQS:
/// not our failure, not a delivery message (SQS's redrive takes it to the DLQ), or past
/// its retry window (its schedule would have dead-lettered it by now; the redrive does).
/// The copy carries the lease its processing gave the claim, so it takes that claim over
/// at once when it comes back, whether the claim landed or not.
fn returning(deps: &SenderDeps, id: &str, error: &str, failed: &Failed) -> Option<Returning> {
    if failed.kind != Failure::Ours {
        return None;
    }
    let received = failed.received.as_ref()?;
    // A redriven message's budget starts when it is processed (DeliveryMessage::replayed).
    let budget = if received.dead_letter.is_some() {
        received.replayed()
    } else {
        received.clone()
    };
    if Utc::now() > window_end(deps, &budget, None) {
        return None;
    }
    let put_back = received.put_back.saturating_add(1);
    // One draw for both: the fallback keeps the put-back's jitter.
    let unit: f64 = rand::random();
    let delay_seconds =
        tern_core::put_back::put_back_delay_seconds(put_back, unit, deps.policy.time_scale);
    let hide_seconds = tern_core::put_back::put_back_delay_seconds(
        received.put_back.saturating_add(failed.receive_count),
        unit,
        deps.policy.time_scale,
    );
    Some(Returning {
        message_id: id.to_owned(),
        error: error.to_owned(),
        message: DeliveryMessage {
            put_back,
            held_lease_ms: failed.claim_lease.map(|l| l.timestamp_millis()),
            delivered_attempt: failed
                .delivered
                .clone()
                .or_else(|| received.delivered_attempt.clone()),
            ..received.clone()
        },
        delay_seconds,
        receipt_handle: failed.receipt_handle.clone(),
        hide_seconds,
    })
}

/// What became of a failed message going back ([`Returning`]) at the end of its batch.
#[derive(Debug, Clone)]
enum Returned {
    /// Sent again as a new message: the original is handled (deleted).
    PutBack(MessageOutcome),
    /// Its put-back was not sent (`why`); the original's visibility was changed instead,
    /// so SQS gives it back after `seconds`. A batch failure all the same.
    Hidden {
        /// Its new visibility timeout, in seconds.
        seconds: u32,
        /// Why the put-back was not sent.
        why: String,
    },
}

/// What became of each failed message going back, by SQS message id, written as each
/// call answers so that the end of the batch knows even when the deadline cut the rest.
type ReturnedLog = std::sync::Mutex<HashMap<String, Returned>>;

fn note_returned(log: &ReturnedLog, id: &str, returned: Returned) {
    log.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(id.to_owned(), returned);
}

/// Sends the batch's failed messages again as new messages, each with its short delay,
/// in `SendMessageBatch` calls of 10, all together: each one SQS took is
/// [`Returned::PutBack`] (the original is then deleted as handled). The ones of a call
/// SQS did not take (refused, throttled, timed out) have their originals hidden for the
/// same short delay at once ([`hide_not_put_back`]). Each outcome goes to `returned`.
async fn put_back_all(
    deps: &SenderDeps,
    returning: &[Returning],
    metrics: &Metrics,
    returned: &ReturnedLog,
) {
    let calls = returning.chunks(MAX_BATCH_ENTRIES).map(|chunk| async move {
        let entries: Vec<QueueEntry> = chunk
            .iter()
            .enumerate()
            .map(|(i, r)| delayed_entry(format!("p{i}"), &r.message, r.delay_seconds))
            .collect();
        let sent = match deps.delivery_queue.send_batch(&entries).await {
            Ok(per_entry) => per_entry,
            Err(e) => vec![Err(e); chunk.len()],
        };
        let mut not_sent = Vec::new();
        for (r, outcome) in chunk.iter().zip(sent) {
            let m = &r.message;
            match outcome {
                Ok(()) => {
                    metrics.update(|c| c.put_back += 1);
                    tracing::warn!(delivery_id = %m.delivery_id, attempt = m.attempt, put_back = m.put_back, delay_seconds = r.delay_seconds, error = %r.error, "our failure; put back with a short delay");
                    note_returned(
                        returned,
                        &r.message_id,
                        Returned::PutBack(MessageOutcome::PutBack {
                            error: r.error.clone(),
                            delay_seconds: r.delay_seconds,
                            put_back: m.put_back,
                        }),
                    );
                }
                Err(e) => {
                    tracing::warn!(delivery_id = %m.delivery_id, error = %e, "not put back; hiding the original for the put-back's delay instead");
                    not_sent.push((r, e));
                }
            }
        }
        hide_not_put_back(deps, &not_sent, metrics, returned).await;
    });
    futures::future::join_all(calls).await;
}

/// The fallback of a put-back SQS did not take: the original message (still in flight,
/// its receipt handle this receive's) is made visible again after the put-back's own
/// short delay (`ChangeMessageVisibility`, `ChangeMessageVisibilityBatch` for several: one
/// call for up to 10) and stays a batch failure, so Lambda leaves it on the queue. It
/// comes back in seconds, not after the queue's 360 s visibility timeout; unlike a
/// put-back it stays in flight meanwhile and its receive counts towards the redrive. One
/// whose visibility is not changed either (no receipt handle, or the call failed) is left
/// for the visibility timeout: the end of the batch counts it (`PutBackFailed`).
async fn hide_not_put_back(
    deps: &SenderDeps,
    not_sent: &[(&Returning, PortError)],
    metrics: &Metrics,
    returned: &ReturnedLog,
) {
    let hideable: Vec<(&Returning, &PortError, &str)> = not_sent
        .iter()
        .filter_map(|(r, why)| {
            let handle = r.receipt_handle.as_deref().filter(|h| !h.is_empty())?;
            Some((*r, why, handle))
        })
        .collect();
    if hideable.is_empty() {
        return;
    }
    let entries: Vec<tern_core::ports::VisibilityChange> = hideable
        .iter()
        .enumerate()
        .map(|(i, (r, _, handle))| tern_core::ports::VisibilityChange {
            id: format!("v{i}"),
            receipt_handle: (*handle).to_owned(),
            visibility_seconds: r.hide_seconds,
        })
        .collect();
    let changed = match deps.delivery_queue.change_visibility(&entries).await {
        Ok(per_entry) => per_entry,
        Err(e) => vec![Err(e); entries.len()],
    };
    for ((r, why, _), outcome) in hideable.into_iter().zip(changed) {
        let m = &r.message;
        match outcome {
            Ok(()) => {
                metrics.update(|c| c.put_back_by_visibility += 1);
                tracing::warn!(delivery_id = %m.delivery_id, attempt = m.attempt, visibility_seconds = r.hide_seconds, error = %r.error, put_back_error = %why, "our failure; put-back not sent, the original comes back after a short delay");
                note_returned(
                    returned,
                    &r.message_id,
                    Returned::Hidden {
                        seconds: r.hide_seconds,
                        why: why.to_string(),
                    },
                );
            }
            Err(e) => {
                tracing::warn!(delivery_id = %m.delivery_id, error = %e, "visibility not changed either");
            }
        }
    }
}

/// What the messages of one batch share: the endpoints' gates, the health counts, and
/// the deliveries the gates hold back (put back together once every message is past its
/// gate).
struct BatchContext<'a> {
    gates: &'a HashMap<EndpointKey, EndpointGate>,
    health: &'a BatchHealth,
    deferred: std::sync::Mutex<Vec<Deferred>>,
    deadline: Deadline,
    /// Messages in the batch.
    messages: usize,
    /// Messages past their gate: deferred, or on their way to a claim, or done.
    admitted: AtomicUsize,
    /// Told when the last message is past its gate.
    all_admitted: tokio::sync::Notify,
}

/// Marks one message past its gate, once: from then on it adds no deferral. Also keeps
/// the lease of the claim its processing asked for, which a put-back copy carries.
struct Admitted<'a> {
    done: AtomicBool,
    batch: &'a BatchContext<'a>,
    claim_lease: std::sync::Mutex<Option<chrono::DateTime<Utc>>>,
    delivered: std::sync::Mutex<Option<AttemptRecord>>,
}

impl<'a> Admitted<'a> {
    fn new(batch: &'a BatchContext<'a>) -> Self {
        Self {
            done: AtomicBool::new(false),
            batch,
            claim_lease: std::sync::Mutex::default(),
            delivered: std::sync::Mutex::default(),
        }
    }

    /// The lease for a claim about to be asked for ([`lease_from_now`]), remembered: the
    /// claim may land even when its call fails, and a put-back copy must be able to take
    /// it over.
    fn new_lease(&self) -> chrono::DateTime<Utc> {
        let lease = lease_from_now();
        *self
            .claim_lease
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(lease);
        lease
    }

    /// Keeps the successful attempt whose delivered marker was lost, for the put-back.
    fn keep_delivered(&self, record: AttemptRecord) {
        *self
            .delivered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(record);
    }

    /// The successful attempt whose delivered marker was lost, if any.
    fn delivered(&self) -> Option<AttemptRecord> {
        self.delivered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The lease of the last claim asked for, if any.
    fn claim_lease(&self) -> Option<chrono::DateTime<Utc>> {
        *self
            .claim_lease
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn mark(&self) {
        if !self.done.swap(true, Ordering::SeqCst) {
            let past = self.batch.admitted.fetch_add(1, Ordering::SeqCst) + 1;
            if past >= self.batch.messages {
                self.batch.all_admitted.notify_one();
            }
        }
    }
}

/// A due delivery held back by its endpoint's gate, to put back on the queue.
struct Deferred {
    /// Its SQS message id (the batch's).
    message_id: String,
    /// The message to put back (with `not_before`, or the rate-limit slot it holds).
    message: DeliveryMessage,
    /// When it is due again.
    until: chrono::DateTime<Utc>,
    /// Held back by the rate limit (else the circuit or a pause).
    by_rate_limit: bool,
}

impl BatchContext<'_> {
    /// Returns once every message of the batch is past its gate.
    async fn all_past_their_gates(&self) {
        while self.admitted.load(Ordering::SeqCst) < self.messages {
            self.all_admitted.notified().await;
        }
    }

    fn defer(&self, deferred: Deferred) {
        self.deferred
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(deferred);
    }
}

/// Why a due delivery goes back on the queue without spending an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deferral {
    /// Until after `until`: its endpoint's circuit is open, its receiver asked for a
    /// pause, or (`by_rate_limit`) it has no rate-limit slot yet.
    Until {
        /// When it comes back.
        until: chrono::DateTime<Utc>,
        /// Held back by the rate limit.
        by_rate_limit: bool,
    },
    /// It holds a rate-limit slot too far ahead for this batch: it comes back for it.
    Slot(RateSlot),
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
    message_id: &str,
    raw: &str,
    parsed: Result<DeliveryMessage, String>,
    metrics: &Metrics,
    ctx: &BatchContext<'_>,
    admitted: &Admitted<'_>,
) -> Result<MessageOutcome, PortError> {
    let deadline = &ctx.deadline;
    if !deadline.may_start() {
        // Nothing done yet: SQS delivers it again, whole.
        return Err(PortError::Unavailable(NOT_STARTED.into()));
    }
    let message = match parsed {
        Ok(m) => m,
        Err(e) => return dead_letter_malformed(deps, raw, &e, metrics, deadline).await,
    };
    // Put back because its delivered marker was lost: the receiver has it; only the
    // marker is left to write.
    if let Some(record) = message.delivered_attempt.clone() {
        return mark_delivered_or_put_back(deps, &message, record, metrics, deadline, admitted)
            .await;
    }
    // A message that carries its dead-letter record was redriven (console or replay):
    // it starts a fresh budget with the same webhook-id.
    let message = if message.dead_letter.is_some() {
        message.replayed()
    } else {
        message
    };
    if let Some(until) = message.not_before
        && !is_due(&message, Utc::now())
    {
        // No wait Tern schedules is longer than MAX_WAIT_SECONDS: a later due time is
        // corrupt, and parking it forever would hide it from every alarm.
        let latest = Utc::now()
            + chrono::Duration::seconds(
                i64::try_from(MAX_WAIT_SECONDS).unwrap_or(i64::MAX / 1000) + 3600,
            );
        if until > latest {
            return dead_letter_unclaimed(
                deps,
                &message,
                DeadLetterReason::MalformedMessage,
                metrics,
                deadline,
                admitted,
            )
            .await;
        }
        carry(deadline, "requeue", requeue_until(deps, &message, until)).await?;
        return Ok(MessageOutcome::Waiting { until });
    }

    // The schedule says the delivery is due; the endpoint's gate (its circuit, its
    // receiver's pause, its rate limit) says whether it may be sent now. Decided before
    // the claim, so a deferred delivery keeps its attempt.
    let key = (message.event.tenant_id.clone(), message.endpoint_id.clone());
    let gate = ctx.gates.get(&key);
    let pass = gate.map_or(
        Pass::Send {
            at: None,
            probe: false,
        },
        |g| g.admit(&message),
    );
    let slot_at = match pass {
        Pass::Defer {
            until,
            by_rate_limit,
        } => {
            let deferral = Deferral::Until {
                until,
                by_rate_limit,
            };
            return defer(deps, message_id, message, deferral, metrics, ctx, admitted).await;
        }
        Pass::Hold(slot) => {
            return defer(
                deps,
                message_id,
                message,
                Deferral::Slot(slot),
                metrics,
                ctx,
                admitted,
            )
            .await;
        }
        Pass::Send { at, probe } => {
            if probe {
                metrics.update(|c| c.probes += 1);
                tracing::info!(delivery_id = %message.delivery_id, attempt = message.attempt, "probe of an open circuit");
            }
            at
        }
    };
    if gate.is_some_and(|g| !g.limit_known) {
        // The gate could not read the endpoint's rate limit: read it before the claim, so
        // a limited endpoint's delivery never goes out without a slot (it waits a few
        // seconds instead, keeping its attempt).
        let endpoint = carry(
            deadline,
            "endpoint read",
            deps.endpoints
                .get(&message.event.tenant_id, &message.endpoint_id),
        )
        .await?;
        if endpoint.is_some_and(|e| e.max_per_second.is_some()) {
            let deferral = Deferral::Until {
                until: tern_core::decision::deferred_until(
                    Utc::now(),
                    Duration::from_secs(crate::rate_limit::UNAVAILABLE_SPREAD_SECONDS),
                    rand::random(),
                ),
                by_rate_limit: true,
            };
            return defer(deps, message_id, message, deferral, metrics, ctx, admitted).await;
        }
    }
    // Past its gate: the batch's deferrals need not wait for this one's POST.
    admitted.mark();

    let lease = admitted.new_lease();
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
        return Ok(duplicate(deps, &message, claim, metrics, deadline).await);
    };

    // The endpoint could not be read (DynamoDB, or KMS opening its secrets): our failure.
    // The attempt log says so, and the same attempt comes back on our own short schedule.
    let endpoint = match endpoint {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(error = %e, delivery_id = %message.delivery_id, attempt = message.attempt, "endpoint not read; not sent");
            return not_sent(
                deps,
                message,
                takeover,
                None,
                NotSent::NotRead,
                metrics,
                deadline,
            )
            .await;
        }
    };
    let endpoint = match usable_endpoint(deps, &message, endpoint, deadline).await? {
        Ok(e) => e,
        Err(reason) => {
            return dead_letter_unsent(deps, &message, reason, takeover, metrics, deadline).await;
        }
    };
    // A takeover past the retry window repeats what its earlier try decided, without a
    // POST: that try may have dead-lettered it `exhausted` and stopped before its finish
    // (the DLQ message sent, the claim left to lapse), and a POST now would deliver a pair
    // the DLQ also holds (the soak's last 2 of 2,940 such pairs). A second copy in the
    // DLQ is harmless; the replay moves both and the claim lets one through.
    if takeover > 0 && Utc::now() > window_end(deps, &message, Some(&endpoint)) {
        let reason = DeadLetterReason::Exhausted;
        return dead_letter_unsent(deps, &message, reason, takeover, metrics, deadline).await;
    }
    let attempt_deadline = endpoint
        .timeout_ms
        .map_or(deps.policy.attempt_timeout, Duration::from_millis);
    let limit = gate.and_then(|g| g.rate.as_ref()).map(RateGate::limit);
    if let Some(at) = slot_at
        && !wait_for_slot(
            deps,
            &key,
            at,
            limit,
            &message,
            metrics,
            deadline,
            attempt_deadline,
        )
        .await
    {
        // Late for its slot and no later one fits this invocation: not sent, so the
        // limit holds. It goes back on the queue for a slot a few seconds on, like any
        // delivery the limit holds back (no attempt spent).
        return not_sent(
            deps,
            message,
            takeover,
            Some(&endpoint),
            NotSent::LateForSlot,
            metrics,
            deadline,
        )
        .await;
    }
    if !deadline.may_send(attempt_deadline) {
        // Only when a call before the POST outran its own deadline.
        tracing::warn!(delivery_id = %message.delivery_id, attempt = message.attempt, "not sent: the invocation's deadline is too near");
        return not_sent(
            deps,
            message,
            takeover,
            Some(&endpoint),
            NotSent::OutOfTime,
            metrics,
            deadline,
        )
        .await;
    }
    attempt(
        deps, message, takeover, &endpoint, metrics, ctx.health, deadline, admitted,
    )
    .await
}

/// Writes the delivered marker of `message`'s successful attempt `record` (retried,
/// [`crate::markers`]). Written, or refused because the pair is marked already: the
/// delivery is delivered. Still not written (throttled past its retries, or cut off by
/// the deadline): the message is put back carrying `record`
/// ([`DeliveryMessage::delivered_attempt`]), so the sender that receives it writes the
/// marker and sends nothing; a delivered pair is not forgotten.
async fn mark_delivered_or_put_back(
    deps: &SenderDeps,
    message: &DeliveryMessage,
    record: AttemptRecord,
    metrics: &Metrics,
    deadline: &Deadline,
    admitted: &Admitted<'_>,
) -> Result<MessageOutcome, PortError> {
    let retry = markers::MarkerRetry::default();
    let write = markers::mark_delivered(deps.ledger.as_ref(), message, &record, &retry, metrics);
    match deadline.before_tail(write).await {
        Some(markers::MarkerWrite::Written { .. } | markers::MarkerWrite::NotOurs(_)) => {
            Ok(MessageOutcome::Delivered {
                attempt: record.attempt,
            })
        }
        lost => {
            if lost.is_none() {
                metrics.update(|c| c.markers_lost += 1);
            }
            tracing::error!(delivery_id = %message.delivery_id, attempt = record.attempt, "delivered marker not written; the message goes back to write it");
            admitted.keep_delivered(record);
            Err(PortError::Unavailable(
                "delivered, but its delivered marker was not written".into(),
            ))
        }
    }
}

/// A copy of a message that must not be sent ([`Claim::AlreadyDelivered`], or another
/// message holds this or a later attempt): dropped, counted, and when its pair is
/// delivered, recorded in the attempt log ([`DeliveryLedger::record_duplicate`], for
/// people).
async fn duplicate(
    deps: &SenderDeps,
    message: &DeliveryMessage,
    claim: Claim,
    metrics: &Metrics,
    deadline: &Deadline,
) -> MessageOutcome {
    metrics.update(|c| c.duplicates += 1);
    tracing::info!(delivery_id = %message.delivery_id, attempt = message.attempt, ?claim, "duplicate; not sent");
    if claim == Claim::AlreadyDelivered {
        let write = deps.ledger.record_duplicate(message);
        for_people(deadline, write, message, "dropped duplicate not logged").await;
    }
    MessageOutcome::Duplicate(claim)
}

/// The end of `message`'s retry window under `endpoint`'s schedule (the deployment's when
/// the endpoint is not known): [`tern_core::decision::retry_window_end`].
fn window_end(
    deps: &SenderDeps,
    message: &DeliveryMessage,
    endpoint: Option<&Endpoint>,
) -> chrono::DateTime<Utc> {
    let schedule = endpoint.map_or_else(
        || deps.policy.schedule.clone(),
        |e| e.retry_policy(&deps.policy.schedule).0,
    );
    let probe = deps
        .breaker
        .as_ref()
        .map_or(Duration::ZERO, |b| b.probe_interval());
    tern_core::decision::retry_window_end(
        message.retry_window_start(),
        &schedule,
        deps.policy.time_scale,
        probe,
    )
}

/// Puts a claimed try of `message` back on the queue as `again` (the same attempt, due at
/// `until`), no attempt spent: the claim is given up first and the delivery listed as
/// waiting, in one write ([`DeliveryLedger::release`]), so the copy that returns takes
/// the attempt over; then one `SendMessage` (a wait beyond 900 s is carried by chained
/// queue delays, `not_before`). A claim no longer this try's (taken over, finished, or
/// the pair delivered) means another copy carries the pair: this one is dropped. A release
/// or send that fails fails the message: it is put back with a short delay (or, failing
/// that, left to SQS), and its copy takes the attempt over.
#[allow(clippy::too_many_arguments)]
async fn requeue(
    deps: &SenderDeps,
    message: &DeliveryMessage,
    again: DeliveryMessage,
    takeover: u32,
    until: chrono::DateTime<Utc>,
    why: &str,
    metrics: &Metrics,
    deadline: &Deadline,
) -> Result<MessageOutcome, PortError> {
    match carry(
        deadline,
        "claim release",
        deps.ledger.release(message, takeover, until),
    )
    .await
    {
        Ok(()) => {}
        Err(PortError::Rejected(reason)) => {
            metrics.update(|c| c.duplicates += 1);
            tracing::info!(delivery_id = %message.delivery_id, attempt = message.attempt, %reason, "not requeued: another copy carries the pair");
            return Ok(MessageOutcome::Duplicate(Claim::AlreadyClaimed));
        }
        Err(e) => {
            tracing::warn!(error = %e, delivery_id = %message.delivery_id, attempt = message.attempt, "claim not released: SQS delivers it again after its visibility timeout");
            return Err(e);
        }
    }
    carry(deadline, "requeue", requeue_until(deps, &again, until)).await?;
    metrics.update(|c| c.requeued += 1);
    tracing::info!(delivery_id = %message.delivery_id, attempt = message.attempt, until = %until.to_rfc3339(), why, "the same attempt again, no attempt spent");
    Ok(MessageOutcome::Requeued {
        attempt: message.attempt,
        until,
    })
}

/// The endpoint a delivery may go to, or (`Err`) why the delivery is dead-lettered
/// instead: its endpoint was deleted or is disabled.
///
/// A "disabled" may come from the endpoint cache, up to its TTL old; before refusing the
/// delivery the registry is read past the cache ([`EndpointStore::get_current`]), so an
/// endpoint enabled a moment ago elsewhere (`tern endpoints enable`, then a replay) gets
/// its deliveries. That costs one strongly consistent read (one read unit) per delivery
/// dead-lettered `endpoint_disabled`. A missing endpoint needs no second read: the cache
/// never keeps one, so "deleted" was read from the registry.
async fn usable_endpoint(
    deps: &SenderDeps,
    message: &DeliveryMessage,
    endpoint: Option<Endpoint>,
    deadline: &Deadline,
) -> Result<Result<Endpoint, DeadLetterReason>, PortError> {
    let endpoint = match endpoint {
        Some(e) if !e.enabled => {
            carry(
                deadline,
                "endpoint read",
                deps.endpoints
                    .get_current(&message.event.tenant_id, &message.endpoint_id),
            )
            .await?
        }
        other => other,
    };
    Ok(match endpoint {
        Some(e) if e.enabled => Ok(e),
        Some(_) => Err(DeadLetterReason::EndpointDisabled),
        None => Err(DeadLetterReason::EndpointDeleted),
    })
}

/// Waits for a delivery's rate-limit slot `at` (at most
/// [`tern_core::rate_limit::SEND_HORIZON_MS`] away) and says whether it may be POSTed:
/// sent at its slot, not before, so the receiver sees the limit's spacing. A delivery
/// that reaches its POST later than [`tern_core::rate_limit::late_after`] its slot (the
/// claim before it took longer than [`tern_core::rate_limit::CLAIM_LEAD_MS`]) does not
/// go out on it: sent at once it would share a second with the slots after its own,
/// and several such put more than the limit into one second at the receiver. It is
/// counted (`RateLimitLate`) and takes a new slot (one more conditional write); it is
/// sent at that slot when the invocation can wait for it and still make the attempt
/// ([`Deadline::may_send`]), else (`false`) not at all by this invocation.
#[allow(clippy::too_many_arguments)]
async fn wait_for_slot(
    deps: &SenderDeps,
    key: &EndpointKey,
    at: chrono::DateTime<Utc>,
    limit: Option<tern_core::rate_limit::RateLimit>,
    message: &DeliveryMessage,
    metrics: &Metrics,
    deadline: &Deadline,
    attempt_deadline: Duration,
) -> bool {
    let now = Utc::now();
    let at = match (limit, &deps.breaker) {
        // The limit was removed meanwhile: nothing to keep to.
        (None, _) | (_, None) => return true,
        (Some(limit), Some(breaker)) => {
            if at + tern_core::rate_limit::late_after(limit) >= now {
                breaker.relax_slot_lead();
                at
            } else {
                metrics.update(|c| c.rate_late += 1);
                breaker.learn_lateness(now - at);
                let late_ms = (now - at).num_milliseconds();
                match later_slot(breaker, key, limit, deadline, attempt_deadline).await {
                    Some(again) => {
                        tracing::info!(delivery_id = %message.delivery_id, late_ms, slot = %again, "late for its rate-limit slot; sent at a new one");
                        again
                    }
                    None => {
                        tracing::warn!(delivery_id = %message.delivery_id, late_ms, "late for its rate-limit slot and no new one fits this invocation; not sent, SQS delivers it again");
                        return false;
                    }
                }
            }
        }
    };
    if let Ok(wait) = (at - Utc::now()).to_std() {
        tokio::time::sleep(wait).await;
    }
    true
}

/// A new slot of `limit` for one delivery that came late to its own, when the invocation
/// can wait for it and still make the attempt; `None` otherwise (no room, the table did
/// not answer, or the slot lies too far ahead: it goes unused, the limit errs towards
/// sending less). A write refused on a stale copy of the schedule is asked once more,
/// on the store's value; so is a slot already behind the clock when the write is answered
/// (a write slower than the lead): it goes unused, and the instance's learnt lead
/// ([`CircuitBreaker::learn_lateness`]) puts the next ask further ahead.
async fn later_slot(
    breaker: &CircuitBreaker,
    key: &EndpointKey,
    limit: tern_core::rate_limit::RateLimit,
    deadline: &Deadline,
    attempt_deadline: Duration,
) -> Option<chrono::DateTime<Utc>> {
    for _ in 0..2 {
        let now = Utc::now();
        match breaker.take_slots(key, limit, 1, now).await {
            crate::rate_limit::Grant::Slots { first, .. } => {
                // A write slower than the lead hands out a slot already behind: sent
                // now, it would go out together with the slots after it. Not used (the
                // limit errs towards sending less); the next ask lies further ahead.
                let returned = Utc::now();
                if first + tern_core::rate_limit::late_after(limit) < returned {
                    breaker.learn_lateness(returned - first);
                    continue;
                }
                let wait = (first - returned).to_std().unwrap_or_default();
                let fits = deadline.remaining().is_none_or(|left| {
                    left >= wait
                        + attempt_deadline
                        + deadline.reserve().to_carry()
                        + deadline.reserve().tail()
                });
                return fits.then_some(first);
            }
            crate::rate_limit::Grant::Refused { .. } => {}
            crate::rate_limit::Grant::Unavailable | crate::rate_limit::Grant::NotNeeded => {
                return None;
            }
        }
    }
    None
}

/// Puts a due delivery back, without spending an attempt, because its endpoint's circuit
/// is open, its receiver asked for a pause, or its rate limit gives it a later slot (or
/// none yet): per `deferral`. Dead-letters it instead when the endpoint is gone or
/// disabled, or (`exhausted`) when its retry window
/// ([`tern_core::decision::retry_window_end`]) has passed, or would pass before its
/// rate-limit slot, so nothing waits forever.
async fn defer(
    deps: &SenderDeps,
    message_id: &str,
    message: DeliveryMessage,
    deferral: Deferral,
    metrics: &Metrics,
    ctx: &BatchContext<'_>,
    admitted: &Admitted<'_>,
) -> Result<MessageOutcome, PortError> {
    let deadline = &ctx.deadline;
    let endpoint = carry(
        deadline,
        "endpoint read",
        deps.endpoints
            .get(&message.event.tenant_id, &message.endpoint_id),
    )
    .await?;
    let endpoint = match usable_endpoint(deps, &message, endpoint, deadline).await? {
        Ok(e) => e,
        Err(reason) => {
            return dead_letter_unclaimed(deps, &message, reason, metrics, deadline, admitted)
                .await;
        }
    };
    let window_end = window_end(deps, &message, Some(&endpoint));
    let (until, slot, by_rate_limit) = match deferral {
        Deferral::Until {
            until,
            by_rate_limit,
        } => (until, None, by_rate_limit),
        Deferral::Slot(slot) => (slot.at, Some(slot), true),
    };
    if Utc::now() > window_end || slot.is_some_and(|s| s.at > window_end) {
        return dead_letter_unclaimed(
            deps,
            &message,
            DeadLetterReason::Exhausted,
            metrics,
            deadline,
            admitted,
        )
        .await;
    }
    // Held back by the circuit or a pause again and again: each hold after the first
    // keeps it away longer, towards the queue's 900 s (tern_core::put_back), so a dead
    // endpoint's backlog is not received every probe interval. Never past its window's
    // end by more than a moment: it is dead-lettered `exhausted` when it comes back.
    let (until, held_back) = if by_rate_limit {
        (until, message.held_back)
    } else {
        let now = Utc::now();
        let grown = tern_core::put_back::held_back_until(
            until,
            message.held_back,
            tern_core::put_back::held_back_cap(deps.policy.time_scale),
            rand::random(),
            now,
        );
        let grown = if grown > window_end {
            until.max(window_end + chrono::Duration::seconds(1))
        } else {
            grown
        };
        (grown, message.held_back.saturating_add(1))
    };
    if !message.listed_waiting {
        // Held back before an attempt of its own was claimed (a first attempt, or a
        // replayed one): listed once, so "what is waiting" counts it. A retry was listed
        // when it was queued; a copy that comes back held again carries the flag.
        list_as_waiting(deps, &message, until, deadline).await;
    }
    let waiting = DeliveryMessage {
        // A delivery holding a slot comes back before it (and waits for it): it is due
        // when it comes back.
        not_before: slot.is_none().then_some(until),
        listed_waiting: true,
        rate_slot: slot,
        held_back,
        put_back: 0,
        held_lease_ms: None,
        ..message
    };
    // Put back with the batch's other deferrals, in as few calls as possible.
    ctx.defer(Deferred {
        message_id: message_id.to_owned(),
        message: waiting,
        until,
        by_rate_limit,
    });
    Ok(MessageOutcome::Deferred { until })
}

/// Lists a held-back delivery as waiting until `until`, so "what is waiting" counts it.
/// For people: a write that fails is logged.
async fn list_as_waiting(
    deps: &SenderDeps,
    message: &DeliveryMessage,
    until: chrono::DateTime<Utc>,
    deadline: &Deadline,
) {
    let write = deps.ledger.list_waiting(message, until);
    for_people(
        deadline,
        write,
        message,
        "held-back delivery not listed as waiting",
    )
    .await;
}

#[allow(clippy::too_many_arguments)]
async fn attempt(
    deps: &SenderDeps,
    message: DeliveryMessage,
    takeover: u32,
    endpoint: &Endpoint,
    metrics: &Metrics,
    health: &BatchHealth,
    invocation: &Deadline,
    admitted: &Admitted<'_>,
) -> Result<MessageOutcome, PortError> {
    let (schedule, max_attempts) = endpoint.retry_policy(&deps.policy.schedule);
    let deadline = endpoint
        .timeout_ms
        .map_or(deps.policy.attempt_timeout, Duration::from_millis);
    let started = Utc::now();
    let body = Bytes::from(request::body(&message.event, endpoint.payload_format));
    let Ok(headers) = request::attempt_headers(
        endpoint,
        &message.event,
        started.timestamp(),
        &body,
        started,
    ) else {
        // Never send an unsigned webhook: the receiver could not tell it from a forgery.
        let reason = DeadLetterReason::NoActiveSecret;
        return dead_letter_unsent(deps, &message, reason, takeover, metrics, invocation).await;
    };
    // A client certificate (mutual TLS) is read from its secret (or this process's memory)
    // before anything is sent. Failing that is our failure, never the receiver's: no
    // attempt is spent, the endpoint's health is not touched, and the same attempt comes
    // back on our own schedule.
    // Then, the receiver may have pushed back on another delivery since this one passed
    // its gate (this instance learnt it a moment ago): it waits for the pause too, rather
    // than meet another refusal. Either way it is not sent, one path.
    let with_certificate;
    let ready = match &endpoint.client_certificate {
        None => Ok(&deps.client),
        Some(certificate) => match deps
            .client
            .for_certificate(certificate, &endpoint.tenant_id)
            .await
        {
            Ok(c) => {
                with_certificate = c;
                Ok(&with_certificate)
            }
            Err(e) => {
                tracing::warn!(error = %e, endpoint_id = %endpoint.id, tenant_id = %endpoint.tenant_id, "client certificate not usable; not sent");
                Err(NotSent::NoCertificate)
            }
        },
    };
    let key = (message.event.tenant_id.clone(), message.endpoint_id.clone());
    let ready = ready.and_then(|client| {
        match deps
            .breaker
            .as_ref()
            .and_then(|b| b.paused_until(&key, Utc::now()))
        {
            Some(until) => Err(NotSent::HeldByPause(until)),
            None => Ok(client),
        }
    });
    let client = match ready {
        Ok(client) => client,
        Err(why) => {
            return not_sent(
                deps,
                message,
                takeover,
                Some(endpoint),
                why,
                metrics,
                invocation,
            )
            .await;
        }
    };
    // The attempt's span starts here, so that its context can go to the receiver; it
    // ends with the attempt, as of its start plus its latency. The next message of the
    // pair (a retry, a requeue, the dead letter) links to it.
    let mut message = message;
    let mut span = attempt_span(&message, endpoint, started);
    let this_attempt = span
        .as_ref()
        .and_then(|s| telemetry::trace_context_of(opentelemetry::trace::Span::span_context(s)));
    if this_attempt.is_some() {
        message.previous_attempt.clone_from(&this_attempt);
    }
    let mut headers = headers;
    if endpoint.send_traceparent
        && let Some(trace) = this_attempt.as_ref().or(message.trace.as_ref())
    {
        // The receiver's own spans become children of this attempt (or, when Tern does
        // not trace, of the span the event carries). Its tracestate is not sent: it is the
        // application's vendors' data, not the receiver's.
        headers.push(request::OutgoingHeader::plain(
            "traceparent",
            trace.traceparent().to_string(),
        ));
    }
    let request = AttemptRequest {
        url: &endpoint.url,
        body,
        headers: &headers,
        deadline,
    };
    // An OAuth2 endpoint's token is fetched (or taken from this process's cache) within
    // the same deadline; basic and bearer are already among the headers.
    let report = match &endpoint.auth {
        ReceiverAuth::Oauth2ClientCredentials(grant) => {
            client
                .attempt_oauth(request, &endpoint.tenant_id, &endpoint.id, grant)
                .await
        }
        _ => client.attempt(request).await,
    };
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

    // One place decides what happens to the delivery and what the attempt tells its
    // endpoint's health (tern_core::decision); this function carries it out.
    let timings = deps.breaker.as_ref().map_or_else(
        || HealthPolicy::default().timings(deps.policy.time_scale),
        |b| *b.timings(),
    );
    let decision = decide(
        &report.result,
        &AttemptContext {
            attempt: message.attempt,
            max_attempts,
            schedule: &schedule,
            retry_after_ceiling_seconds: deps.policy.retry_after_ceiling_seconds,
            timings: &timings,
            started_at: started,
            now: Utc::now(),
            jitter: rand::random::<f64>(),
            excerpt: report.excerpt.as_deref(),
            tries: takeover,
            window_end: window_end(deps, &message, Some(endpoint)),
        },
    );
    let outcome = match decision.next {
        Next::Delivered => MessageOutcome::Delivered {
            attempt: message.attempt,
        },
        Next::Retry { wait_seconds } => MessageOutcome::Retrying {
            attempt: message.attempt,
            wait_seconds,
        },
        Next::Again { at, .. } => MessageOutcome::Requeued {
            attempt: message.attempt,
            until: at,
        },
        Next::DeadLetter(reason) => MessageOutcome::DeadLettered {
            reason,
            attempts: message.attempt,
        },
    };
    let delivered = decision.next == Next::Delivered;
    let wait = match decision.next {
        Next::Retry { wait_seconds } => Some(wait_seconds),
        // The attempt log's waits are logical: the real wait over the time scale.
        Next::Again { at, .. } => {
            let real_ms = (at - Utc::now()).num_milliseconds().max(0) as f64;
            Some((real_ms / 1000.0 / deps.policy.time_scale.max(f64::MIN_POSITIVE)).ceil() as u64)
        }
        _ => None,
    };

    metrics.update(|c| {
        c.attempts += 1;
        c.latencies_ms.push(report.latency_ms);
        if delivered {
            c.attempts_succeeded += 1;
        } else {
            c.attempts_failed += 1;
        }
    });
    let error_class = match &report.result {
        tern_core::AttemptResult::Failed { class, .. } => Some(*class),
        tern_core::AttemptResult::Response { .. } => None,
    };
    if error_class.is_some_and(ErrorClass::is_ours) {
        metrics.update(|c| c.our_failures += 1);
    }
    if let HealthSignal::Backpressure {
        pause_until,
        sent_at,
    } = &decision.health
    {
        tracing::info!(delivery_id = %message.delivery_id, endpoint_id = %message.endpoint_id, status, pause_until = %pause_until.to_rfc3339(), "receiver pushed back; not counted against its health");
        // This instance holds the endpoint's other deliveries back at once, before the
        // batch's health write tells every sender.
        if let Some(breaker) = &deps.breaker
            && let Some(seen) = breaker.note_backpressure(&key, *pause_until, *sent_at)
        {
            health.note_accepted_before_push_back(key.clone(), seen);
        }
    }
    if let (HealthSignal::Success { at }, Some(breaker)) = (&decision.health, &deps.breaker) {
        // What the receiver took, for the pace its next push-back teaches.
        breaker.note_success(&key, *at);
    }
    health.add(
        (message.event.tenant_id.clone(), message.endpoint_id.clone()),
        decision.health,
    );
    let record = AttemptRecord {
        event_id: message.event.id.clone(),
        endpoint_id: message.endpoint_id.clone(),
        replay_count: message.replay_count,
        attempt: message.attempt,
        takeover,
        started_at: started,
        latency_ms: report.latency_ms,
        status,
        error_class,
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
            MessageOutcome::Delivered { .. } => OUTCOME_DELIVERED.into(),
            MessageOutcome::Retrying { .. } => OUTCOME_RETRY.into(),
            MessageOutcome::Requeued { .. } => OUTCOME_REQUEUED.into(),
            MessageOutcome::DeadLettered { reason, .. } => format!("dead_letter:{reason}"),
            // Not produced after an attempt; named for completeness.
            MessageOutcome::Duplicate(_) => OUTCOME_DUPLICATE.into(),
            MessageOutcome::Waiting { .. } => "waiting".into(),
            MessageOutcome::Deferred { .. } => "deferred".into(),
            MessageOutcome::PutBack { .. } => "put_back".into(),
        },
        next_wait_seconds: wait,
    };
    if let Some(span) = span.as_mut() {
        end_attempt_span(span, &report, &record.outcome, started);
    }
    // tenant_id and endpoint_id feed the Contributor Insights rules (top endpoints by
    // failed attempts, top tenants by volume).
    tracing::info!(
        delivery_id = %message.delivery_id, tenant_id = %message.event.tenant_id,
        endpoint_id = %message.endpoint_id, attempt = message.attempt, status,
        error = error.as_deref(), latency_ms = report.latency_ms, outcome = %record.outcome,
        "attempt"
    );

    // The step that carries the delivery on (its retry, its dead letter) comes first;
    // the attempt log is for people and follows, bounded by the time left: losing a row
    // must not cause a second POST. A success is recorded with the delivered state (one
    // write).
    let carried = match &outcome {
        MessageOutcome::Delivered { .. } => {
            // The POST succeeded: the marker stops a second one. Retried within the
            // attempt's budget and the invocation's time; a lost one is counted
            // (crate::markers) and the message goes back to write it.
            mark_delivered_or_put_back(
                deps,
                &message,
                record.clone(),
                metrics,
                invocation,
                admitted,
            )
            .await
        }
        MessageOutcome::Retrying { wait_seconds, .. } => {
            let first = message.first_attempt_at.unwrap_or(started);
            let next = message.next_attempt(first, status, error);
            let sent = carry(
                invocation,
                "retry",
                enqueue_retry(deps, &next, *wait_seconds),
            )
            .await;
            if sent.is_ok() {
                metrics.update(|c| c.retries += 1);
                // Due when the queue delay or the Step Functions wait just started ends.
                let due_at = Utc::now()
                    + chrono::Duration::seconds(
                        i64::try_from(real_wait_seconds(*wait_seconds, deps.policy.time_scale))
                            .unwrap_or(i64::MAX / 1000),
                    );
                wait_span(&message, *wait_seconds, due_at);
                let retry = markers::MarkerRetry::default();
                let write = markers::mark_retrying(
                    deps.ledger.as_ref(),
                    &message,
                    next.attempt,
                    due_at,
                    &retry,
                    metrics,
                );
                marker_before_tail(invocation, write, &message, metrics).await;
            }
            sent.map(|()| outcome)
        }
        MessageOutcome::Requeued { until, .. } => {
            let first = message.first_attempt_at.unwrap_or(started);
            let again = message.again(first, status, error, *until);
            let why = match decision.next {
                Next::Again {
                    because: AgainBecause::Backpressure,
                    ..
                } => "the receiver pushed back",
                _ => "our failure",
            };
            let until = *until;
            requeue(
                deps, &message, again, takeover, until, why, metrics, invocation,
            )
            .await
        }
        MessageOutcome::DeadLettered { reason, .. } => {
            let last = Some((status, error));
            dead_letter(deps, &message, *reason, last, metrics, invocation).await
        }
        MessageOutcome::Duplicate(_)
        | MessageOutcome::Waiting { .. }
        | MessageOutcome::Deferred { .. }
        | MessageOutcome::PutBack { .. } => Ok(outcome),
    };
    if !delivered {
        let write = deps.ledger.record_attempt(&message, &record);
        for_people(invocation, write, &message, "attempt not logged").await;
    }
    carried
}

/// `write`, the step that carries a delivery on, unless the batch's tail would no longer
/// fit ([`Deadline::before_tail`]): cut off, it fails like an unreachable service, and the
/// message becomes a batch failure.
async fn carry<T>(
    deadline: &Deadline,
    what: &str,
    write: impl std::future::Future<Output = Result<T, PortError>>,
) -> Result<T, PortError> {
    deadline
        .before_tail(write)
        .await
        .unwrap_or_else(|| Err(PortError::Unavailable(format!("{what}: {DEADLINE_CUT}"))))
}

/// Why a claimed attempt was not sent: [`not_sent`] writes it into the attempt's row.
/// Every case spends no attempt and leaves the receiver's health untouched; each says
/// what happened in a fixed text, never an error's (see [`not_sent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NotSent {
    /// The endpoint (or its sealed secrets) could not be read: our failure.
    NotRead,
    /// The endpoint's client certificate could not be read or used: our failure.
    NoCertificate,
    /// The POST would have come late for its rate-limit slot and no later slot fits
    /// this invocation ([`wait_for_slot`]).
    LateForSlot,
    /// A call before the POST was slow and the invocation's deadline is too near for the
    /// attempt ([`Deadline::may_send`]).
    OutOfTime,
    /// The endpoint's receiver pushed back on another delivery since this one passed its
    /// gate, asking for a pause until this time ([`CircuitBreaker::paused_until`]).
    HeldByPause(chrono::DateTime<Utc>),
}

impl NotSent {
    /// The attempt row's error text: "not sent, <cause> (no attempt spent, the receiver's
    /// health untouched): <what>; the same attempt comes back shortly".
    fn row_text(self) -> String {
        let (cause, what) = match self {
            Self::NotRead => (
                "our failure",
                "the endpoint or its secrets could not be read (DynamoDB or KMS)",
            ),
            Self::NoCertificate => (
                "our failure",
                "the endpoint's client certificate could not be read from Secrets Manager or used",
            ),
            Self::LateForSlot => (
                "held by the endpoint's rate limit",
                "the POST would have come late for its slot and no later slot fits this invocation",
            ),
            Self::OutOfTime => (
                "out of time",
                "a call before the POST was slow and the invocation's deadline is too near for the attempt",
            ),
            Self::HeldByPause(_) => (
                "held by the receiver's pause",
                "the receiver pushed back on another delivery just before this one was sent",
            ),
        };
        format!(
            "not sent, {cause} (no attempt spent, the receiver's health untouched): {what}; \
             the same attempt comes back shortly"
        )
    }

    /// When the same attempt comes back after try `takeover`, from `now`: after the pause
    /// it waits for (spread over as long again, at most a probe interval); within a few
    /// seconds for a rate-limit slot; on our own retry schedule for our failures
    /// ([`tern_core::decision::our_retry_wait`]).
    fn back_at(
        self,
        takeover: u32,
        probe: Duration,
        time_scale: f64,
        now: chrono::DateTime<Utc>,
    ) -> chrono::DateTime<Utc> {
        let unit = rand::random::<f64>();
        match self {
            Self::HeldByPause(until) => {
                let spread = (until - now).to_std().unwrap_or_default().min(probe);
                tern_core::decision::deferred_until(until, spread, unit)
            }
            Self::LateForSlot => tern_core::decision::deferred_until(
                now,
                Duration::from_secs(crate::rate_limit::UNAVAILABLE_SPREAD_SECONDS),
                unit,
            ),
            Self::NotRead | Self::NoCertificate | Self::OutOfTime => {
                now + tern_core::health::chrono_duration(tern_core::decision::our_retry_wait(
                    takeover, unit, time_scale,
                ))
            }
        }
    }
}

/// A claimed attempt that was not sent ([`NotSent`]: our failure before the POST, the
/// endpoint or its secrets or its client certificate unreadable; a rate-limit slot or the
/// invocation's deadline missed; the receiver's pause): its row says why, and the same
/// attempt goes back on the queue ([`requeue`]) for [`NotSent::back_at`], no attempt
/// spent, unless that is past its retry window (then it is dead-lettered `exhausted`,
/// so nothing waits forever). Before, our failures waited out SQS's visibility timeout
/// (360 s) as a batch failure. The row holds the fixed text of `why`, never an error's:
/// the customer portal shows attempt rows, and an AWS error can name tables, roles and
/// the account (the error is in the sender's log line). `endpoint` is the endpoint when
/// it was read (its retry schedule bounds the window). The row is for people: one that
/// cannot be written is logged ([`for_people`]).
async fn not_sent(
    deps: &SenderDeps,
    message: DeliveryMessage,
    takeover: u32,
    endpoint: Option<&Endpoint>,
    why: NotSent,
    metrics: &Metrics,
    deadline: &Deadline,
) -> Result<MessageOutcome, PortError> {
    let now = Utc::now();
    let probe = deps
        .breaker
        .as_ref()
        .map_or(Duration::ZERO, |b| b.probe_interval());
    let until = why.back_at(takeover, probe, deps.policy.time_scale, now);
    if until > window_end(deps, &message, endpoint) {
        let reason = DeadLetterReason::Exhausted;
        return dead_letter_unsent(deps, &message, reason, takeover, metrics, deadline).await;
    }
    let record = row_without_post(&message, takeover, OUTCOME_ABANDONED.into(), why.row_text());
    for_people(
        deadline,
        deps.ledger.record_attempt(&message, &record),
        &message,
        "the not-sent attempt was not logged",
    )
    .await;
    let again = DeliveryMessage {
        not_before: Some(until),
        listed_waiting: true,
        rate_slot: None,
        put_back: 0,
        held_lease_ms: None,
        held_back: 0,
        ..message.clone()
    };
    requeue(
        deps, &message, again, takeover, until, "not sent", metrics, deadline,
    )
    .await
}

/// Why a step was cut off.
const DEADLINE_CUT: &str = "cut off: the invocation's deadline is near";

/// `write`, for people (the attempt log, a claim's finish): logged when it fails or is
/// cut off by the deadline, never a reason to fail the message.
async fn for_people(
    deadline: &Deadline,
    write: impl std::future::Future<Output = Result<(), PortError>>,
    message: &DeliveryMessage,
    what: &str,
) {
    match deadline.before_tail(write).await {
        Some(Ok(())) => {}
        Some(Err(e)) => {
            tracing::warn!(error = %e, delivery_id = %message.delivery_id, "{what}");
        }
        None => {
            tracing::warn!(error = DEADLINE_CUT, delivery_id = %message.delivery_id, "{what}");
        }
    }
}

/// Runs a marker write (its retries included) unless the batch's tail would no longer
/// fit; a marker cut off by the deadline is counted as lost, like one the retries could
/// not write.
async fn marker_before_tail(
    deadline: &Deadline,
    write: impl std::future::Future<Output = markers::MarkerWrite>,
    message: &DeliveryMessage,
    metrics: &Metrics,
) {
    if deadline.before_tail(write).await.is_none() {
        metrics.update(|c| c.markers_lost += 1);
        tracing::error!(error = DEADLINE_CUT, delivery_id = %message.delivery_id, attempt = message.attempt, "marker not written before the deadline");
    }
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
                Ok(()) => return Ok(()),
                // Too large for an execution's input, or Step Functions throttled or
                // unreachable: chain queue delays instead. Reporting the message as a
                // batch failure would POST the attempt again on every redelivery. If the
                // execution did start (its answer was lost), two copies of the next
                // attempt wait; the ledger's claim lets one of them through.
                Err(why) => {
                    tracing::info!(delivery_id = %next.delivery_id, %why, "long wait carried by chained queue delays");
                    wait_seconds
                }
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
    send_delayed(deps, message, delay_until(until)).await
}

/// Seconds from now until `until`, rounded up, at most the SQS maximum of 900: the
/// `DelaySeconds` that brings a message back at `until` (or, beyond 900 s, on the way).
fn delay_until(until: chrono::DateTime<Utc>) -> u32 {
    let remaining_ms = (until - Utc::now()).num_milliseconds().max(0);
    let seconds = u64::try_from(remaining_ms).unwrap_or(0).div_ceil(1000);
    u32::try_from(seconds.min(u64::from(MAX_QUEUE_DELAY_SECONDS)))
        .unwrap_or(MAX_QUEUE_DELAY_SECONDS)
}

/// The delivery-queue entry that brings `message` back after `delay_seconds`, in its
/// tenant's group.
fn delayed_entry(id: String, message: &DeliveryMessage, delay_seconds: u32) -> QueueEntry {
    QueueEntry {
        id,
        body: message.to_body(),
        delay_seconds,
        attributes: vec![],
        group_id: Some(message.group_id()),
    }
}

async fn send_delayed(
    deps: &SenderDeps,
    message: &DeliveryMessage,
    delay_seconds: u32,
) -> Result<(), PortError> {
    deps.delivery_queue
        .send(&delayed_entry("retry".into(), message, delay_seconds))
        .await
}

/// Sends the batch's deferred deliveries in `SendMessageBatch` calls of 10 (an open
/// circuit, a pause or a rate limit can hold back most of a batch: one call instead of
/// ten), all calls together. A delivery holding a rate-limit slot gets the whole seconds
/// that bring it back ahead of its slot, counted now (the batch may have waited for other
/// slots since it was held back: [`delay_seconds_before`]); any other, those that bring it
/// back at or after its time. Returns each message SQS did not take, with why: the caller
/// makes it a batch failure, so SQS delivers it again and nothing is lost.
async fn flush_deferred(
    deps: &SenderDeps,
    deferred: &[Deferred],
    metrics: &Metrics,
) -> Vec<(String, String)> {
    let calls = deferred.chunks(MAX_BATCH_ENTRIES).map(|chunk| async move {
        let now = Utc::now();
        let entries: Vec<QueueEntry> = chunk
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let delay = match d.message.rate_slot {
                    Some(slot) => delay_seconds_before(slot.at, now),
                    None => delay_until(d.until),
                };
                delayed_entry(format!("d{i}"), &d.message, delay)
            })
            .collect();
        let sent = match deps.delivery_queue.send_batch(&entries).await {
            Ok(per_entry) => per_entry,
            Err(e) => vec![Err(e); chunk.len()],
        };
        let mut failed = Vec::new();
        for (d, outcome) in chunk.iter().zip(sent) {
            let m = &d.message;
            match outcome {
                Ok(()) => {
                    metrics.update(|c| {
                        c.deferred += 1;
                        c.rate_limited += u64::from(d.by_rate_limit);
                    });
                    let by = if d.by_rate_limit {
                        "the endpoint's rate limit"
                    } else {
                        "the endpoint's circuit or pause"
                    };
                    tracing::info!(delivery_id = %m.delivery_id, attempt = m.attempt, until = %d.until.to_rfc3339(), slot = m.rate_slot.is_some(), "held back by {by}; deferred");
                }
                Err(e) => failed.push((d.message_id.clone(), e.to_string())),
            }
        }
        failed
    });
    futures::future::join_all(calls)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// Most entries of one `SendMessageBatch` call (SQS quota).
const MAX_BATCH_ENTRIES: usize = 10;

/// Marks the claimed attempt finished: the marker stops a later copy of the message from
/// taking the claim over and POSTing again. Retried within the attempt's budget and the
/// invocation's time; a lost one is counted (crate::markers).
async fn finish(
    deps: &SenderDeps,
    message: &DeliveryMessage,
    state: DeliveryState,
    deadline: &Deadline,
    metrics: &Metrics,
) {
    let retry = markers::MarkerRetry::default();
    let write = markers::mark_finished(deps.ledger.as_ref(), message, state, &retry, metrics);
    marker_before_tail(deadline, write, message, metrics).await;
}

/// Dead-letters a delivery after its attempt, records it, and for 410 Gone disables the
/// endpoint.
async fn dead_letter(
    deps: &SenderDeps,
    message: &DeliveryMessage,
    reason: DeadLetterReason,
    last: Option<(Option<u16>, Option<String>)>,
    metrics: &Metrics,
    deadline: &Deadline,
) -> Result<MessageOutcome, PortError> {
    let (last_status, last_error) =
        last.unwrap_or((message.last_status, message.last_error.clone()));
    let record = DeadLetter {
        reason,
        last_status,
        last_error,
        attempts: message.attempt,
        at: Utc::now(),
    };
    dead_letter_after(deps, message, record, metrics, deadline).await
}

/// Dead-letters a delivery whose attempt was not made: its endpoint is disabled or
/// deleted, it has no secret that signs now, its retry window ended while its endpoint's
/// circuit was open (`exhausted`), or its due time is corrupt (`malformed_message`). A
/// replayed budget that ends so keeps the status, error and time of the dead letter it
/// was replayed from ([`DeliveryMessage::bounced`]). Then it leaves a row in the attempt
/// log with the reason, so `tern attempts` shows the pair ([`unsent_record`]): the
/// dead letter comes first, the row is for people.
async fn dead_letter_unsent(
    deps: &SenderDeps,
    message: &DeliveryMessage,
    reason: DeadLetterReason,
    takeover: u32,
    metrics: &Metrics,
    deadline: &Deadline,
) -> Result<MessageOutcome, PortError> {
    let record = message.bounced(reason, Utc::now());
    let outcome = dead_letter_after(deps, message, record, metrics, deadline).await?;
    let row = unsent_record(message, reason, takeover);
    let write = deps.ledger.record_attempt(message, &row);
    for_people(deadline, write, message, "dead letter not logged").await;
    Ok(outcome)
}

/// Dead-letters a delivery that holds no claim of its attempt (held back past its retry
/// window, its endpoint disabled or deleted, a corrupt due time): it claims the attempt
/// first, so a pair that ended already is never dead-lettered over it. Of a copy whose pair
/// was delivered, or whose attempt another message holds or finished, nothing reaches the
/// DLQ: it is dropped as a duplicate ([`duplicate`]). The claim also takes the delivery off
/// the waiting list. Then [`dead_letter_unsent`]. One conditional write more than before,
/// on these paths only.
async fn dead_letter_unclaimed(
    deps: &SenderDeps,
    message: &DeliveryMessage,
    reason: DeadLetterReason,
    metrics: &Metrics,
    deadline: &Deadline,
    admitted: &Admitted<'_>,
) -> Result<MessageOutcome, PortError> {
    let claim = carry(
        deadline,
        "claim",
        deps.ledger.claim(message, admitted.new_lease()),
    )
    .await?;
    let Some(takeover) = claim.granted_takeover() else {
        return Ok(duplicate(deps, message, claim, metrics, deadline).await);
    };
    dead_letter_unsent(deps, message, reason, takeover, metrics, deadline).await
}

/// The lease of a claim made now: the longest attempt deadline plus
/// [`LEASE_MARGIN_SECONDS`].
fn lease_from_now() -> chrono::DateTime<Utc> {
    Utc::now()
        + chrono::Duration::milliseconds(i64::try_from(MAX_TIMEOUT_MS).unwrap_or(30_000))
        + chrono::Duration::seconds(LEASE_MARGIN_SECONDS)
}

/// `error` of the attempt-log row of an attempt that was not made, by reason.
fn unsent_note(reason: DeadLetterReason) -> &'static str {
    match reason {
        DeadLetterReason::EndpointDisabled => {
            "not sent: the endpoint is disabled; `tern endpoints enable`, then replay"
        }
        DeadLetterReason::EndpointDeleted => "not sent: the endpoint does not exist",
        DeadLetterReason::NoActiveSecret => {
            "not sent: the endpoint has no secret or key that signs now (never sent unsigned)"
        }
        DeadLetterReason::Exhausted => {
            "not sent: its retry window ended while it was held back (the endpoint's circuit, its receiver's pause or its rate limit)"
        }
        DeadLetterReason::MalformedMessage => {
            "not sent: its due time is later than any wait Tern schedules"
        }
        DeadLetterReason::Gone | DeadLetterReason::BlockedDestination => "not sent",
    }
}

/// The attempt-log row of attempt `message.attempt` (try `takeover`), dead-lettered for
/// `reason` without a POST: no status, no latency, outcome `dead_letter:<reason>`.
fn unsent_record(
    message: &DeliveryMessage,
    reason: DeadLetterReason,
    takeover: u32,
) -> AttemptRecord {
    row_without_post(
        message,
        takeover,
        format!("dead_letter:{reason}"),
        unsent_note(reason).to_owned(),
    )
}

/// An attempt-log row of attempt `message.attempt` (try `takeover`) that made no POST: no
/// status, no latency, `outcome`, and `error` saying why.
fn row_without_post(
    message: &DeliveryMessage,
    takeover: u32,
    outcome: String,
    error: String,
) -> AttemptRecord {
    AttemptRecord {
        event_id: message.event.id.clone(),
        endpoint_id: message.endpoint_id.clone(),
        replay_count: message.replay_count,
        attempt: message.attempt,
        takeover,
        started_at: Utc::now(),
        latency_ms: 0,
        status: None,
        error_class: None,
        error: Some(error),
        location: None,
        response_excerpt: None,
        excerpt_truncated: false,
        outcome,
        next_wait_seconds: None,
    }
}

async fn dead_letter_after(
    deps: &SenderDeps,
    message: &DeliveryMessage,
    record: DeadLetter,
    metrics: &Metrics,
    deadline: &Deadline,
) -> Result<MessageOutcome, PortError> {
    let (reason, attempts) = (record.reason, record.attempts);
    let dead = message.dead_lettered(record);
    let entry = QueueEntry {
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
    };
    // The tenant's dead-letter record first (`tern_core::dead_letters`): lists, counts and
    // dry runs read it, never the shared DLQ, so what reaches the DLQ must be in it. A
    // failure here is a failure to dead-letter: the message comes back and tries again.
    carry(
        deadline,
        "dead-letter record",
        deps.ledger.record_dead_letter(&dead),
    )
    .await?;
    carry(deadline, "dead letter", deps.dlq.send(&entry)).await?;
    metrics.update(|c| c.dead_letters += 1);
    dead_letter_span(message, reason, attempts);
    tracing::warn!(delivery_id = %message.delivery_id, %reason, attempts, "dead-lettered");
    if reason == DeadLetterReason::Gone {
        // Starts with the dead-letter reason so operators can filter on it.
        let why = format!(
            "{}: receiver answered 410 Gone at {}",
            DeadLetterReason::Gone,
            Utc::now().to_rfc3339()
        );
        let write = deps
            .endpoints
            .disable(&message.event.tenant_id, &message.endpoint_id, &why);
        for_people(deadline, write, message, "endpoint not disabled after 410").await;
    }
    finish(
        deps,
        message,
        DeliveryState::DeadLettered,
        deadline,
        metrics,
    )
    .await;
    Ok(MessageOutcome::DeadLettered { reason, attempts })
}

async fn dead_letter_malformed(
    deps: &SenderDeps,
    raw: &str,
    error: &str,
    metrics: &Metrics,
    deadline: &Deadline,
) -> Result<MessageOutcome, PortError> {
    tracing::error!(%error, "malformed delivery message dead-lettered");
    let body = if raw.is_empty() { "(empty body)" } else { raw };
    let entry = QueueEntry {
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
    };
    carry(deadline, "dead letter", deps.dlq.send(&entry)).await?;
    metrics.update(|c| c.dead_letters += 1);
    Ok(MessageOutcome::DeadLettered {
        reason: DeadLetterReason::MalformedMessage,
        attempts: 0,
    })
}

/// The span of one attempt ([`crate::telemetry`]): an HTTP client span (OpenTelemetry's
/// HTTP semantic conventions) started at `started`, child of the delivery's trace context,
/// linked to the pair's previous attempt. The receiver is named by scheme, host and port
/// only: a webhook URL's path or query often holds a token. `None` when tracing is off.
fn attempt_span(
    message: &DeliveryMessage,
    endpoint: &Endpoint,
    started: chrono::DateTime<Utc>,
) -> Option<opentelemetry_sdk::trace::Span> {
    use opentelemetry::KeyValue;
    telemetry::tracer()?;
    let mut attributes = vec![
        KeyValue::new("http.request.method", "POST"),
        KeyValue::new(keys::EVENT_ID, message.event.id.to_string()),
        KeyValue::new(keys::EVENT_TYPE, message.event.event_type.to_string()),
        KeyValue::new(keys::TENANT_ID, message.event.tenant_id.to_string()),
        KeyValue::new(keys::ENDPOINT_ID, message.endpoint_id.to_string()),
        KeyValue::new(keys::ATTEMPT, i64::from(message.attempt)),
        KeyValue::new(keys::REPLAY_COUNT, i64::from(message.replay_count)),
        // Semantic conventions: the ordinal of a resend of the same request, 0 for the first.
        KeyValue::new(
            "http.request.resend_count",
            i64::from(message.attempt.saturating_sub(1)),
        ),
    ];
    if let Ok(url) = url::Url::parse(&endpoint.url) {
        attributes.push(KeyValue::new("url.scheme", url.scheme().to_owned()));
        if let Some(host) = url.host_str() {
            attributes.push(KeyValue::new("server.address", host.to_owned()));
        }
        if let Some(port) = url.port_or_known_default() {
            attributes.push(KeyValue::new("server.port", i64::from(port)));
        }
    }
    let links = message
        .previous_attempt
        .iter()
        .map(telemetry::link)
        .collect();
    telemetry::start(
        "POST",
        opentelemetry::trace::SpanKind::Client,
        message.trace.as_ref(),
        Some(started.into()),
        attributes,
        links,
    )
}

/// Ends an attempt's span: its status code or error class, its outcome, and an error
/// status unless delivered. No receiver text (error detail, body excerpt) goes in.
fn end_attempt_span(
    span: &mut opentelemetry_sdk::trace::Span,
    report: &AttemptReport,
    outcome: &str,
    started: chrono::DateTime<Utc>,
) {
    use opentelemetry::KeyValue;
    use opentelemetry::trace::Span as _;
    let error_type = match &report.result {
        tern_core::AttemptResult::Response { status, .. } => {
            span.set_attribute(KeyValue::new(
                "http.response.status_code",
                i64::from(*status),
            ));
            // Semantic conventions: the status code as the error type for a 4xx or 5xx.
            (*status >= 400).then(|| status.to_string())
        }
        tern_core::AttemptResult::Failed { class, .. } => Some(class.to_string()),
    };
    span.set_attribute(KeyValue::new(keys::OUTCOME, outcome.to_owned()));
    if outcome != OUTCOME_DELIVERED {
        let description = error_type.clone().unwrap_or_else(|| outcome.to_owned());
        telemetry::fail(span, description);
    }
    if let Some(error_type) = error_type {
        span.set_attribute(KeyValue::new("error.type", error_type));
    }
    let ended = started + chrono::Duration::milliseconds(report.latency_ms as i64);
    span.end_with_timestamp(ended.into());
}

/// The span of the wait before a pair's next attempt: from now until the retry is due
/// (real time), child of the delivery's trace context, linked to the attempt that failed.
fn wait_span(message: &DeliveryMessage, wait_seconds: u64, due_at: chrono::DateTime<Utc>) {
    use opentelemetry::KeyValue;
    use opentelemetry::trace::Span as _;
    let Some(mut span) = telemetry::start(
        "retry wait",
        opentelemetry::trace::SpanKind::Internal,
        message.trace.as_ref(),
        None,
        vec![
            KeyValue::new(keys::EVENT_ID, message.event.id.to_string()),
            KeyValue::new(keys::ENDPOINT_ID, message.endpoint_id.to_string()),
            KeyValue::new(keys::TENANT_ID, message.event.tenant_id.to_string()),
            KeyValue::new(keys::ATTEMPT, i64::from(message.attempt.saturating_add(1))),
            KeyValue::new(
                keys::WAIT_SECONDS,
                i64::try_from(wait_seconds).unwrap_or(i64::MAX),
            ),
        ],
        message
            .previous_attempt
            .iter()
            .map(telemetry::link)
            .collect(),
    ) else {
        return;
    };
    span.end_with_timestamp(due_at.into());
}

/// The span of a dead letter, child of the delivery's trace context, linked to the last
/// attempt when there was one.
fn dead_letter_span(message: &DeliveryMessage, reason: DeadLetterReason, attempts: u32) {
    use opentelemetry::KeyValue;
    telemetry::instant(
        "dead-letter",
        message.trace.as_ref(),
        vec![
            KeyValue::new(keys::EVENT_ID, message.event.id.to_string()),
            KeyValue::new(keys::ENDPOINT_ID, message.endpoint_id.to_string()),
            KeyValue::new(keys::TENANT_ID, message.event.tenant_id.to_string()),
            KeyValue::new(keys::DEAD_LETTER_REASON, reason.as_str()),
            KeyValue::new(keys::ATTEMPT, i64::from(attempts)),
            KeyValue::new(keys::REPLAY_COUNT, i64::from(message.replay_count)),
        ],
        message
            .previous_attempt
            .iter()
            .map(telemetry::link)
            .collect(),
    );
}
