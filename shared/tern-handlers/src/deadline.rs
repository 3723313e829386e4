//! The sender invocation's deadline, and the time each step must keep in reserve so the
//! handler answers before it.
//!
//! Lambda stops a function at its timeout (the sender's is 60 s, `infra/settings.json`)
//! and, for an SQS event source, every message of the batch comes back, the ones already
//! POSTed included. So the sender reads the invocation's deadline (`Context::deadline`;
//! local mode's poller gives the function timeout from its own start) and plans against it:
//!
//! - A message is **started** (claimed, then POSTed) only when the whole of its path still
//!   fits: the claim, the longest attempt, the writes that carry its next step (the
//!   retry's Step Functions start and, when that fails, the queue send that replaces it;
//!   or the dead letter), the batch's deferral flush, and the answer
//!   ([`TimeReserve::to_start`]). One that does not fit is reported in
//!   `batchItemFailures` untouched: SQS delivers it again and nothing was done twice.
//! - After a POST, the write that carries the delivery on comes first; the writes for
//!   people (the attempt row, the delivered marker, the claim's finish, the health counts)
//!   follow. Each is cut off when the batch's tail would no longer fit
//!   ([`Deadline::before_tail`]): a cut write for people is logged and lost, never paid
//!   for with a second POST; a cut carrying write makes the message a batch failure (it
//!   cannot happen unless a call outran its own deadline).
//! - The batch's deferral flush must happen (a deferred delivery not put back becomes its
//!   message's batch failure); the health settle is for people. Both end before the
//!   answer's reserve ([`Deadline::before_answer`]), and so do the put-backs of our
//!   failures and their fallback (`ChangeMessageVisibility` of a message whose put-back
//!   SQS did not take): they get what is left, and a message whose calls are cut off there
//!   waits out the visibility timeout (`PutBackFailed`), never the answer.

use std::future::Future;
use std::time::{Duration, Instant, SystemTime};

use tern_core::endpoint::MAX_TIMEOUT_MS;

/// What the sender keeps in hand, per step, against the invocation's deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeReserve {
    /// Longest one AWS call takes, its retries and backoff included: the operation
    /// timeout of every Tern client, 6 s (`tern_aws::budget::OPERATION_TIMEOUT`).
    pub aws_call: Duration,
    /// Longest one attempt may take: 30 s, the largest endpoint timeout
    /// ([`tern_core::endpoint::MAX_TIMEOUT_MS`]). A message is started before its endpoint
    /// is read, so it must leave room for the slowest one.
    pub longest_attempt: Duration,
    /// Kept for answering: building the partial batch response, flushing the metrics line
    /// and handing the answer to the Lambda runtime API, 1 s ([`ANSWER_RESERVE`]).
    pub answer: Duration,
}

/// The answer's reserve: 1 s. Building the response and writing one EMF line take
/// microseconds; the runtime API is a local HTTP call. The rest is margin for a busy
/// instance (2 vCPU shared by the batch's tasks at 256 MB is less than one).
pub const ANSWER_RESERVE: Duration = Duration::from_secs(1);

impl TimeReserve {
    /// The reserve for clients whose calls end within `aws_call` (retries included), with
    /// the longest attempt [`MAX_TIMEOUT_MS`] and the answer's [`ANSWER_RESERVE`].
    pub fn for_aws_calls(aws_call: Duration) -> Self {
        Self {
            aws_call,
            longest_attempt: Duration::from_millis(MAX_TIMEOUT_MS),
            answer: ANSWER_RESERVE,
        }
    }

    /// Time a message needs from its start to the answer: the claim (with the endpoint
    /// read beside it), the longest attempt, the writes that carry its next step (two
    /// calls: a Step Functions start that fails is replaced by a queue send), the batch's
    /// deferral flush, and the answer. With Tern's clients: 6 + 30 + 2 × 6 + 6 + 1 = 55 s,
    /// inside the sender's 60 s timeout with 5 s for the batch's health gates (a read, a
    /// probe claim, a second read: each cut at 1 s, `crate::health::HEALTH_GATE_DEADLINE_MS`).
    pub fn to_start(&self) -> Duration {
        self.aws_call * 4 + self.longest_attempt + self.answer
    }

    /// Time the writes that carry a POSTed delivery on may take: two calls.
    pub fn to_carry(&self) -> Duration {
        self.aws_call * 2
    }

    /// Time the batch's tail needs: its deferral flush (one `SendMessageBatch` call per 10
    /// deferred deliveries, run together) and the answer.
    pub fn tail(&self) -> Duration {
        self.aws_call + self.answer
    }
}

/// When an invocation must have answered, with the reserve it plans by. `Deadline::none`
/// plans as if time were unlimited (tests and tools that drive the handler directly).
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    at: Option<Instant>,
    reserve: TimeReserve,
}

impl Deadline {
    /// No deadline: every message starts and no write is cut.
    pub fn none() -> Self {
        Self {
            at: None,
            reserve: TimeReserve::for_aws_calls(Duration::ZERO),
        }
    }

    /// The deadline `at`, planned with `reserve`.
    pub fn at(at: Instant, reserve: TimeReserve) -> Self {
        Self {
            at: Some(at),
            reserve,
        }
    }

    /// The deadline Lambda gives an invocation (`Context::deadline()`, wall-clock time),
    /// planned with `reserve`. A deadline already past leaves no time at all.
    pub fn at_system_time(deadline: SystemTime, reserve: TimeReserve) -> Self {
        let left = deadline
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        Self::at(Instant::now() + left, reserve)
    }

    /// The reserve this deadline plans with.
    pub fn reserve(&self) -> TimeReserve {
        self.reserve
    }

    /// Time left until the deadline; `None` without one.
    pub fn remaining(&self) -> Option<Duration> {
        self.at
            .map(|at| at.saturating_duration_since(Instant::now()))
    }

    /// Whether a message may start now: its whole path ([`TimeReserve::to_start`]) fits.
    pub fn may_start(&self) -> bool {
        self.remaining()
            .is_none_or(|left| left >= self.reserve.to_start())
    }

    /// Whether an attempt with this deadline may be made now, once claimed: the attempt,
    /// the writes after it and the batch's tail fit. False only when a call before it
    /// outran [`TimeReserve::aws_call`] (a claim that takes over an expired lease makes
    /// three).
    pub fn may_send(&self, attempt: Duration) -> bool {
        self.remaining()
            .is_none_or(|left| left >= attempt + self.reserve.to_carry() + self.reserve.tail())
    }

    /// Runs `work`, a write of one message (the write that carries a POSTed delivery on,
    /// or one for people after it), unless the batch's tail would no longer fit: `None`
    /// when it was cut off or could not start. A cut write may or may not have landed.
    pub async fn before_tail<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        self.within(self.reserve.tail(), work).await
    }

    /// Runs `work`, a step of the batch's tail, unless the answer's reserve would be
    /// touched: `None` when it was cut off.
    pub async fn before_answer<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        self.within(self.reserve.answer, work).await
    }

    async fn within<T>(&self, keep: Duration, work: impl Future<Output = T>) -> Option<T> {
        match self.remaining() {
            None => Some(work.await),
            Some(left) => {
                let budget = left.saturating_sub(keep);
                if budget.is_zero() {
                    return None;
                }
                tokio::time::timeout(budget, work).await.ok()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reserve() -> TimeReserve {
        TimeReserve {
            aws_call: Duration::from_millis(100),
            longest_attempt: Duration::from_millis(300),
            answer: Duration::from_millis(50),
        }
    }

    #[test]
    fn the_production_reserve_fits_the_senders_timeout() {
        let r = TimeReserve::for_aws_calls(Duration::from_secs(6));
        assert_eq!(r.to_start(), Duration::from_secs(55));
        // 60 s: the sender's timeout in infra/settings.json; the health gates make up to
        // three calls in turn, each cut at HEALTH_GATE_DEADLINE_MS.
        let gates = Duration::from_millis(crate::health::HEALTH_GATE_DEADLINE_MS) * 3;
        assert!(r.to_start() + gates < Duration::from_secs(60));
    }

    #[test]
    fn a_message_starts_only_when_its_whole_path_fits() {
        let now = Instant::now();
        let r = reserve();
        assert!(Deadline::at(now + Duration::from_secs(5), r).may_start());
        // 4 × 100 + 300 + 50 = 750 ms needed.
        assert!(!Deadline::at(now + Duration::from_millis(700), r).may_start());
        assert!(Deadline::at(now + Duration::from_millis(800), r).may_start());
        assert!(Deadline::none().may_start());
        assert!(
            !Deadline::at_system_time(SystemTime::UNIX_EPOCH, r).may_start(),
            "a past deadline"
        );
        // An attempt of 100 ms needs 100 + 200 + 150 = 450 ms.
        let d = Deadline::at(now + Duration::from_millis(600), r);
        assert!(d.may_send(Duration::from_millis(100)));
        assert!(!d.may_send(Duration::from_millis(300)));
    }

    #[tokio::test]
    async fn a_write_is_cut_before_the_tail() {
        let d = Deadline::at(Instant::now() + Duration::from_millis(400), reserve());
        let started = Instant::now();
        let cut = d
            .before_tail(tokio::time::sleep(Duration::from_secs(30)))
            .await;
        assert!(cut.is_none());
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "it did not wait for the write"
        );
        let late = Deadline::at(Instant::now() + Duration::from_millis(100), reserve());
        assert_eq!(
            late.before_tail(async { 7 }).await,
            None,
            "no time: not started"
        );
        let d = Deadline::at(Instant::now() + Duration::from_secs(30), reserve());
        assert_eq!(d.before_tail(async { 7 }).await, Some(7));
        assert_eq!(Deadline::none().before_answer(async { 8 }).await, Some(8));
    }
}
