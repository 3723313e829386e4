//! The two ledger writes after an attempt that stop a second POST of the same delivery:
//! the delivered marker ([`DeliveryLedger::record_delivered`]) and the claim's finish
//! ([`DeliveryLedger::finish`], after a retry was queued or the delivery dead-lettered).
//!
//! A lost marker is a duplicate POST waiting to happen: a later copy of the message finds
//! the pair undelivered (or the claim unfinished), takes the claim over once its lease
//! runs out, and sends again. Under write throttling (one event fanned out to thousands of
//! endpoints puts all their state items in one partition of the attempts table) the SDK's
//! own three tries are not enough. So each marker is tried again here, with exponential
//! backoff and full jitter, for at most [`MarkerRetry::window`] after its first try; what
//! is still not written is counted (`Counts::markers_lost`, EMF metric `MarkersLost`,
//! alarm `MarkersLost` in both stacks) and logged at error level with the delivery id,
//! never silently dropped. Both writes are safe to repeat (`tern_aws::ledger`), so a try
//! whose answer was lost costs nothing.
//!
//! Why the window fits (numbers from `tern_aws::budget` and `crate::sender`): the claim's
//! lease runs the longest attempt deadline (30 s) plus [`crate::sender::LEASE_MARGIN_SECONDS`]
//! (30 s) from before the claim, and the claim itself takes at most one operation timeout
//! (6 s). A marker takes its window (6 s) plus at most one call started just before the
//! window closes (6 s): 12 s. Before the delivered marker no other call follows the POST,
//! so at worst 30 - 6 = 24 s of lease are left; before a retry's `finish` come the attempt
//! row and the enqueue (6 s each at worst): 30 - 6 - 12 = 12 s left. Both fit. Only a dead
//! letter after a 410 makes one call more first (the endpoint's disable); if every call
//! before it stalled to its full timeout, its `finish` can land after the lease, where the
//! one effect is that a copy which took the claim over meanwhile finds it finished.
//!
//! The window also counts against the handler's own time (the sender's 60 s): the caller
//! passes a [`MarkerRetry`] whose window fits what it has left.

use std::future::Future;
use std::time::{Duration, Instant};

use tern_core::DeliveryMessage;
use tern_core::ports::{AttemptRecord, DeliveryLedger, DeliveryState, PortError};

use crate::metrics::Metrics;

/// How long and how often a marker is tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkerRetry {
    /// No new try starts later than this after the first one (a try already running is
    /// bounded by the SDK's operation timeout, 6 s). Default 6 s; see the module's
    /// derivation for why it fits the claim's lease.
    pub window: Duration,
    /// Backoff before the second try; doubles for each later one. Default 100 ms.
    pub base: Duration,
    /// Longest backoff between two tries. Default 2 s.
    pub cap: Duration,
}

impl Default for MarkerRetry {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(6),
            base: Duration::from_millis(100),
            cap: Duration::from_secs(2),
        }
    }
}

impl MarkerRetry {
    /// The wait before try `next` (2 for the first retry): uniformly random between 0
    /// and `base` × 2^(next - 2), at most `cap` ("full jitter": concurrent writers that
    /// were throttled together spread out instead of returning together).
    pub fn backoff(&self, next: u32, unit_random: f64) -> Duration {
        let exponent = next.saturating_sub(2).min(16);
        let ceiling = self.base.saturating_mul(1 << exponent).min(self.cap);
        ceiling.mul_f64(unit_random.clamp(0.0, 1.0))
    }
}

/// How a marker write ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkerWrite {
    /// Written, after `tries` tries.
    Written {
        /// Tries made, the first included.
        tries: u32,
    },
    /// The ledger refused it for good ([`PortError::Rejected`]): the claim is no longer
    /// this attempt's (a later attempt holds the pair), so there is nothing to mark.
    NotOurs(String),
    /// Still not written when the window closed: counted and logged.
    Lost {
        /// Tries made.
        tries: u32,
        /// The last try's error.
        error: String,
    },
}

/// Calls `write` until it succeeds, is [`PortError::Rejected`], or `retry.window` has
/// passed since the first call; backs off between calls ([`MarkerRetry::backoff`]).
pub async fn write_with_retry<F, Fut>(retry: &MarkerRetry, mut write: F) -> MarkerWrite
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), PortError>>,
{
    let started = Instant::now();
    let mut tries = 0u32;
    loop {
        tries += 1;
        match write().await {
            Ok(()) => return MarkerWrite::Written { tries },
            Err(PortError::Rejected(why)) => return MarkerWrite::NotOurs(why),
            Err(e @ PortError::Unavailable(_)) => {
                let wait = retry.backoff(tries + 1, rand::random::<f64>());
                if started.elapsed() + wait >= retry.window {
                    return MarkerWrite::Lost {
                        tries,
                        error: e.to_string(),
                    };
                }
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// Marks the delivery delivered with its successful attempt `record`
/// ([`DeliveryLedger::record_delivered`]), retried within `retry`; a lost marker is
/// counted in `metrics` (`markers_lost`).
pub async fn mark_delivered(
    ledger: &dyn DeliveryLedger,
    message: &DeliveryMessage,
    record: &AttemptRecord,
    retry: &MarkerRetry,
    metrics: &Metrics,
) -> MarkerWrite {
    let result = write_with_retry(retry, || ledger.record_delivered(message, record)).await;
    report(&result, message, "delivered", metrics);
    result
}

/// Marks the claimed attempt finished with `state` ([`DeliveryLedger::finish`]), retried
/// within `retry`; a lost marker is counted in `metrics` (`markers_lost`).
pub async fn mark_finished(
    ledger: &dyn DeliveryLedger,
    message: &DeliveryMessage,
    state: DeliveryState,
    retry: &MarkerRetry,
    metrics: &Metrics,
) -> MarkerWrite {
    let result = write_with_retry(retry, || ledger.finish(message, state)).await;
    report(&result, message, "finished", metrics);
    result
}

/// Marks the claimed attempt finished as retrying and lists the delivery as waiting for
/// attempt `next_attempt`, due at `due_at` ([`DeliveryLedger::finish_retrying`]: one
/// write), retried within `retry`; a lost marker is counted in `metrics` (`markers_lost`).
pub async fn mark_retrying(
    ledger: &dyn DeliveryLedger,
    message: &DeliveryMessage,
    next_attempt: u32,
    due_at: chrono::DateTime<chrono::Utc>,
    retry: &MarkerRetry,
    metrics: &Metrics,
) -> MarkerWrite {
    let result = write_with_retry(retry, || {
        ledger.finish_retrying(message, next_attempt, due_at)
    })
    .await;
    report(&result, message, "finished", metrics);
    result
}

fn report(result: &MarkerWrite, message: &DeliveryMessage, marker: &str, metrics: &Metrics) {
    match result {
        MarkerWrite::Written { tries: 1 } => {}
        MarkerWrite::Written { tries } => {
            tracing::info!(delivery_id = %message.delivery_id, attempt = message.attempt, marker, tries, "marker written after retries");
        }
        MarkerWrite::NotOurs(why) => {
            tracing::info!(delivery_id = %message.delivery_id, attempt = message.attempt, marker, %why, "marker not written: the claim is not this attempt's");
        }
        MarkerWrite::Lost { tries, error } => {
            metrics.update(|c| c.markers_lost += 1);
            tracing::error!(
                delivery_id = %message.delivery_id, event_id = %message.event.id,
                endpoint_id = %message.endpoint_id, attempt = message.attempt, marker, tries,
                %error, "marker lost: a later copy of this message may be sent again"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn quick() -> MarkerRetry {
        MarkerRetry {
            window: Duration::from_millis(300),
            base: Duration::from_millis(1),
            cap: Duration::from_millis(20),
        }
    }

    #[test]
    fn the_backoff_doubles_up_to_its_cap_and_is_jittered_below_it() {
        let r = MarkerRetry::default();
        assert_eq!(r.backoff(2, 1.0), Duration::from_millis(100));
        assert_eq!(r.backoff(3, 1.0), Duration::from_millis(200));
        assert_eq!(r.backoff(6, 1.0), Duration::from_millis(1600));
        assert_eq!(r.backoff(7, 1.0), Duration::from_secs(2));
        assert_eq!(r.backoff(u32::MAX, 1.0), Duration::from_secs(2));
        assert_eq!(r.backoff(5, 0.0), Duration::ZERO);
        assert_eq!(r.backoff(3, 0.5), Duration::from_millis(100));
    }

    #[tokio::test]
    async fn a_throttled_marker_is_tried_again_until_it_lands() {
        let calls = AtomicU32::new(0);
        let result = write_with_retry(&quick(), || async {
            if calls.fetch_add(1, Ordering::SeqCst) < 3 {
                Err(PortError::Unavailable("throttled".into()))
            } else {
                Ok(())
            }
        })
        .await;
        assert_eq!(result, MarkerWrite::Written { tries: 4 });
    }

    #[tokio::test]
    async fn a_marker_throttled_past_its_window_is_lost_and_a_rejected_one_is_not_retried() {
        let calls = AtomicU32::new(0);
        let started = Instant::now();
        let result = write_with_retry(&quick(), || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(PortError::Unavailable("throttled".into()))
        })
        .await;
        let tries = calls.load(Ordering::SeqCst);
        assert!(
            matches!(&result, MarkerWrite::Lost { tries: t, .. } if *t == tries),
            "{result:?}"
        );
        assert!(tries > 1, "retried before giving up");
        assert!(
            started.elapsed() >= quick().window / 2,
            "it kept trying within its window"
        );

        let calls = AtomicU32::new(0);
        let result = write_with_retry(&quick(), || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(PortError::Rejected("not ours".into()))
        })
        .await;
        assert_eq!(result, MarkerWrite::NotOurs("not ours".into()));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
