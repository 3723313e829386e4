//! [`InMemoryQueue`]: the SQS model of [`super::sqs`] behind the queue ports
//! ([`MessageQueue`] for the handlers' sends, [`DrainableQueue`] for a drain), on a
//! monotonic clock, with its dead-letter queue.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::sqs::{QueueCounts, QueueMessage, QueueSettings, SqsError, SqsModel};
use crate::clock::{MonotonicClock, SystemClock};
use crate::ports::{
    DrainableQueue, MessageQueue, PortError, QueueEntry, ReceivedMessage, VisibilityChange,
};

/// Called after every send that put a message on the queue (a long poll's wake-up).
pub type SendListener = Box<dyn Fn() + Send + Sync>;

/// An SQS standard queue in memory ([`SqsModel`]), shared by every caller that holds it.
/// Sends are checked against SQS's limits and refused as SQS refuses them
/// ([`PortError::Rejected`]); a message redriven after `maxReceiveCount` receives goes to
/// the dead-letter queue given to [`Self::with_dead_letter_queue`].
pub struct InMemoryQueue {
    model: Mutex<SqsModel>,
    clock: Arc<dyn MonotonicClock>,
    dead_letters: Option<Arc<InMemoryQueue>>,
    listeners: Mutex<Vec<SendListener>>,
}

impl std::fmt::Debug for InMemoryQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemoryQueue")
            .field("settings", self.lock().settings())
            .finish_non_exhaustive()
    }
}

impl Default for InMemoryQueue {
    /// SQS's defaults ([`QueueSettings::default`]) on the system clock.
    fn default() -> Self {
        Self::new(QueueSettings::default())
    }
}

impl InMemoryQueue {
    /// An empty queue on the system clock.
    pub fn new(settings: QueueSettings) -> Self {
        Self::with_clock(settings, Arc::new(SystemClock))
    }

    /// An empty queue on `clock` (a [`crate::clock::ManualClock`] in tests).
    pub fn with_clock(settings: QueueSettings, clock: Arc<dyn MonotonicClock>) -> Self {
        Self {
            model: Mutex::new(SqsModel::new(settings)),
            clock,
            dead_letters: None,
            listeners: Mutex::new(Vec::new()),
        }
    }

    /// The same queue, redriving to `dlq` (the redrive policy's target).
    #[must_use]
    pub fn with_dead_letter_queue(mut self, dlq: Arc<InMemoryQueue>) -> Self {
        self.dead_letters = Some(dlq);
        self
    }

    fn lock(&self) -> MutexGuard<'_, SqsModel> {
        self.model.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Calls `listener` after every send (a long poll waiting for a message).
    pub fn on_send(&self, listener: SendListener) {
        self.listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(listener);
    }

    fn sent(&self) {
        for l in self
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            l();
        }
    }

    /// The queue's clock.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Receives up to `max` (1 to 10) messages, hiding them for `visibility` (the queue's
    /// when `None`); what the redrive moves instead goes to the dead-letter queue. Answers
    /// at once: a caller that long-polls waits for a send ([`Self::on_send`]) or for
    /// [`Self::next_visible_at`].
    ///
    /// # Errors
    /// What SQS refuses ([`SqsError`]).
    pub fn receive_messages(
        &self,
        max: usize,
        visibility: Option<Duration>,
    ) -> Result<Vec<QueueMessage>, SqsError> {
        let now = self.clock.now();
        let (received, redriven) = self.lock().receive(max, visibility, now)?;
        if let Some(dlq) = &self.dead_letters {
            for m in &redriven {
                dlq.lock().put_redriven(m, now);
            }
            if !redriven.is_empty() {
                dlq.sent();
            }
        }
        Ok(received)
    }

    /// Deletes a received message by its latest receipt handle (`Ok(false)`: the handle
    /// is an older receipt, nothing deleted).
    ///
    /// # Errors
    /// [`SqsError::InvalidReceiptHandle`].
    pub fn delete_message(&self, receipt_handle: &str) -> Result<bool, SqsError> {
        let now = self.clock.now();
        self.lock().delete(receipt_handle, now)
    }

    /// `ChangeMessageVisibility`.
    ///
    /// # Errors
    /// What SQS refuses ([`SqsError`]).
    pub fn change_visibility(
        &self,
        receipt_handle: &str,
        timeout: Duration,
    ) -> Result<(), SqsError> {
        let now = self.clock.now();
        self.lock().change_visibility(receipt_handle, timeout, now)
    }

    /// Visible, in-flight and delayed messages now.
    pub fn counts(&self) -> QueueCounts {
        let now = self.clock.now();
        self.lock().counts(now)
    }

    /// The same, of one `MessageGroupId`.
    pub fn group_counts(&self, group: &str) -> QueueCounts {
        let now = self.clock.now();
        self.lock().group_counts(group, now)
    }

    /// When the next delayed or in-flight message becomes visible.
    pub fn next_visible_at(&self) -> Option<Instant> {
        self.lock().next_visible_at()
    }

    /// The groups the fair-queue ordering treated as noisy at the last receive.
    pub fn noisy_groups(&self) -> Vec<String> {
        self.lock().noisy_groups()
    }
}

fn rejected(e: SqsError) -> PortError {
    PortError::Rejected(e.to_string())
}

#[async_trait]
impl MessageQueue for InMemoryQueue {
    async fn send_batch(
        &self,
        entries: &[QueueEntry],
    ) -> Result<Vec<Result<(), PortError>>, PortError> {
        SqsModel::check_batch(entries).map_err(rejected)?;
        let now = self.clock.now();
        let results: Vec<Result<(), PortError>> = {
            let mut model = self.lock();
            entries
                .iter()
                .map(|e| model.send(e, now).map(|_| ()).map_err(rejected))
                .collect()
        };
        if results.iter().any(Result::is_ok) {
            self.sent();
        }
        Ok(results)
    }

    async fn send(&self, entry: &QueueEntry) -> Result<(), PortError> {
        let now = self.clock.now();
        self.lock().send(entry, now).map_err(rejected)?;
        self.sent();
        Ok(())
    }

    /// Each entry as [`Self::change_visibility`]; more than 10 is refused as SQS refuses
    /// a batch that large.
    async fn change_visibility(
        &self,
        entries: &[VisibilityChange],
    ) -> Result<Vec<Result<(), PortError>>, PortError> {
        if entries.is_empty() || entries.len() > 10 {
            return Err(PortError::Rejected(format!(
                "{} entries: ChangeMessageVisibilityBatch takes 1 to 10",
                entries.len()
            )));
        }
        Ok(entries
            .iter()
            .map(|e| {
                self.change_visibility(
                    &e.receipt_handle,
                    Duration::from_secs(u64::from(e.visibility_seconds)),
                )
                .map_err(rejected)
            })
            .collect())
    }
}

#[async_trait]
impl DrainableQueue for InMemoryQueue {
    /// Never waits: the model has one server, which a short poll asks too.
    async fn receive(
        &self,
        max: i32,
        visibility_seconds: i32,
        wait_seconds: i32,
    ) -> Result<Vec<ReceivedMessage>, PortError> {
        if !(0..=20).contains(&wait_seconds) {
            return Err(PortError::Rejected(format!(
                "WaitTimeSeconds {wait_seconds} is outside 0-20"
            )));
        }
        let max = usize::try_from(max).map_err(|_| rejected(SqsError::MaxMessagesOutOfRange(0)))?;
        let visibility = u64::try_from(visibility_seconds)
            .map_err(|_| rejected(SqsError::VisibilityOutOfRange(0)))?;
        Ok(self
            .receive_messages(max, Some(Duration::from_secs(visibility)))
            .map_err(rejected)?
            .into_iter()
            .map(|m| ReceivedMessage {
                message_id: m.message_id,
                receipt_handle: m.receipt_handle,
                body: m.body,
                attributes: m.attributes,
            })
            .collect())
    }

    async fn delete(&self, receipt_handle: &str) -> Result<(), PortError> {
        self.delete_message(receipt_handle)
            .map(|_| ())
            .map_err(rejected)
    }

    async fn release(&self, receipt_handle: &str) -> Result<(), PortError> {
        self.change_visibility(receipt_handle, Duration::ZERO)
            .map_err(rejected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn entry(id: &str, delay: u32) -> QueueEntry {
        QueueEntry {
            id: id.into(),
            body: format!("body {id}"),
            delay_seconds: delay,
            attributes: vec![],
            group_id: Some("tnt_a".into()),
        }
    }

    #[tokio::test]
    async fn the_ports_keep_sqs_limits_and_redrive_to_the_dead_letter_queue() {
        let clock = Arc::new(ManualClock::default());
        let dlq = Arc::new(InMemoryQueue::with_clock(
            QueueSettings::default(),
            clock.clone(),
        ));
        let queue = InMemoryQueue::with_clock(
            QueueSettings {
                visibility_timeout: Duration::from_secs(360),
                max_receive_count: Some(5),
                ..QueueSettings::default()
            },
            clock.clone(),
        )
        .with_dead_letter_queue(dlq.clone());
        let woken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let w = woken.clone();
        queue.on_send(Box::new(move || {
            w.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }));

        let results = queue
            .send_batch(&[entry("a", 0), entry("b", 901), entry("c", 900)])
            .await
            .unwrap();
        assert!(results[0].is_ok() && results[2].is_ok());
        assert!(matches!(results[1], Err(PortError::Rejected(_))));
        assert_eq!(woken.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(matches!(
            queue.send_batch(&[]).await,
            Err(PortError::Rejected(_))
        ));
        assert_eq!(
            queue.counts(),
            QueueCounts {
                visible: 1,
                in_flight: 0,
                delayed: 1
            }
        );

        // A message never deleted is received 5 times (a visibility timeout apart), then
        // redriven instead of received.
        let visibility = Some(Duration::from_secs(100));
        for _ in 0..5 {
            let got = queue.receive_messages(10, visibility).unwrap();
            assert_eq!(got.len(), 1, "{got:?}");
            assert_eq!(got[0].body, "body a");
            clock.advance(Duration::from_secs(100));
        }
        assert!(queue.receive_messages(10, visibility).unwrap().is_empty());
        // c's delay ends at 900 s; received with the queue's own 360 s.
        clock.advance(Duration::from_secs(400));
        let got = queue.receive_messages(10, None).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].body, "body c");
        let dead = DrainableQueue::receive(dlq.as_ref(), 10, 30, 0)
            .await
            .unwrap();
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].body, "body a");
        DrainableQueue::delete(dlq.as_ref(), &dead[0].receipt_handle)
            .await
            .unwrap();
        assert_eq!(dlq.counts(), QueueCounts::default());
        // The drain port's release makes a message visible at once.
        DrainableQueue::release(&queue, &got[0].receipt_handle)
            .await
            .unwrap();
        assert_eq!(queue.counts().visible, 1);
    }

    /// The sender's fallback for a put-back SQS did not take: the received message is
    /// hidden for a few seconds, not the queue's visibility timeout.
    #[tokio::test]
    async fn change_visibility_hides_received_messages_for_the_seconds_asked() {
        let clock = Arc::new(ManualClock::default());
        let queue = InMemoryQueue::with_clock(QueueSettings::default(), clock.clone());
        queue
            .send_batch(&[entry("a", 0), entry("b", 0)])
            .await
            .unwrap();
        let got = queue.receive_messages(10, None).unwrap();
        assert_eq!(got.len(), 2);
        let change = |m: &QueueMessage, seconds: u32| VisibilityChange {
            id: m.message_id.clone(),
            receipt_handle: m.receipt_handle.clone(),
            visibility_seconds: seconds,
        };
        let bad = VisibilityChange {
            receipt_handle: "not-a-handle".into(),
            ..change(&got[1], 1)
        };
        let results = MessageQueue::change_visibility(
            &queue,
            &[change(&got[0], 2), change(&got[1], 43_201), bad],
        )
        .await
        .unwrap();
        assert!(results[0].is_ok(), "{results:?}");
        assert!(
            matches!(results[1], Err(PortError::Rejected(_))),
            "above 12 h"
        );
        assert!(matches!(results[2], Err(PortError::Rejected(_))));
        assert!(matches!(
            MessageQueue::change_visibility(&queue, &[]).await,
            Err(PortError::Rejected(_))
        ));
        clock.advance(Duration::from_secs(1));
        assert_eq!(queue.counts().visible, 0);
        clock.advance(Duration::from_secs(1));
        assert_eq!(queue.counts().visible, 1, "a is back after 2 s");
        assert_eq!(queue.counts().in_flight, 1, "b keeps its 360 s");
    }
}
