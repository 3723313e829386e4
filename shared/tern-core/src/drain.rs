//! Reading a queue to its end: when an empty answer may be believed.
//!
//! A short poll of SQS (`WaitTimeSeconds=0`) samples a subset of the queue's servers and can
//! answer empty while messages exist. A reader that stops at the first empty answer (the
//! replay function, `tern dlq`) can leave messages behind. [`Drain`] long-polls, and stops
//! only when the requested number was read, its time budget is spent, or the queue answered
//! empty to [`DrainRule::empty_polls_to_stop`] long polls in a row.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::ports::{DrainableQueue, PortError, ReceivedMessage};

/// How a [`Drain`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainRule {
    /// Long-poll wait of each receive, in seconds (1..=20, SQS `WaitTimeSeconds`).
    pub wait_seconds: i32,
    /// Consecutive empty long polls that end the drain.
    pub empty_polls_to_stop: u32,
    /// Time after which no new receive starts.
    pub time_budget: Duration,
    /// Visibility timeout given to each message read, in seconds.
    pub visibility_seconds: i32,
}

impl DrainRule {
    /// Long-poll wait used by Tern's readers: 1 s. Any wait > 0 asks every server, and one
    /// second keeps an empty queue's answer quick.
    pub const WAIT_SECONDS: i32 = 1;
    /// Empty long polls in a row that end a drain: 2.
    pub const EMPTY_POLLS_TO_STOP: u32 = 2;
}

/// Why a drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DrainStop {
    /// The requested number of messages was read.
    MaxReached,
    /// The time budget was spent; messages may remain.
    TimeBudget,
    /// The queue answered empty to consecutive long polls.
    QueueEmpty,
}

/// One pass over a queue, batch by batch.
pub struct Drain<'a> {
    queue: &'a dyn DrainableQueue,
    rule: DrainRule,
    max: usize,
    read: usize,
    empty_in_row: u32,
    started: Instant,
    stop: Option<DrainStop>,
}

impl<'a> Drain<'a> {
    /// Starts a drain of at most `max` messages.
    pub fn new(queue: &'a dyn DrainableQueue, rule: DrainRule, max: usize) -> Self {
        Self {
            queue,
            rule,
            max,
            read: 0,
            empty_in_row: 0,
            started: Instant::now(),
            stop: None,
        }
    }

    /// The next batch (1..=10 messages), or `None` once the drain is over; then
    /// [`Drain::stopped`] says why.
    ///
    /// # Errors
    /// The queue's [`PortError`]; the drain can be continued or abandoned.
    pub async fn next_batch(&mut self) -> Result<Option<Vec<ReceivedMessage>>, PortError> {
        loop {
            if self.stop.is_some() {
                return Ok(None);
            }
            if self.read >= self.max {
                self.stop = Some(DrainStop::MaxReached);
                continue;
            }
            if self.started.elapsed() >= self.rule.time_budget {
                self.stop = Some(DrainStop::TimeBudget);
                continue;
            }
            let want = i32::try_from((self.max - self.read).min(10)).unwrap_or(10);
            let batch = self
                .queue
                .receive(want, self.rule.visibility_seconds, self.rule.wait_seconds)
                .await?;
            if batch.is_empty() {
                self.empty_in_row += 1;
                if self.empty_in_row >= self.rule.empty_polls_to_stop {
                    self.stop = Some(DrainStop::QueueEmpty);
                }
                continue;
            }
            self.empty_in_row = 0;
            self.read += batch.len();
            return Ok(Some(batch));
        }
    }

    /// Why the drain ended; `None` while it goes on.
    pub fn stopped(&self) -> Option<DrainStop> {
        self.stop
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;

    /// A queue that answers from a script: `None` is an empty answer.
    struct Scripted(Mutex<VecDeque<Option<usize>>>, Mutex<Vec<i32>>);

    #[async_trait]
    impl DrainableQueue for Scripted {
        async fn receive(
            &self,
            max: i32,
            _visibility: i32,
            wait: i32,
        ) -> Result<Vec<ReceivedMessage>, PortError> {
            self.1.lock().unwrap().push(wait);
            let n = self.0.lock().unwrap().pop_front().flatten().unwrap_or(0);
            Ok((0..n.min(usize::try_from(max).unwrap()))
                .map(|i| ReceivedMessage {
                    message_id: format!("m{i}"),
                    receipt_handle: format!("r{i}"),
                    body: String::new(),
                    attributes: vec![],
                })
                .collect())
        }
        async fn delete(&self, _: &str) -> Result<(), PortError> {
            Ok(())
        }
        async fn release(&self, _: &str) -> Result<(), PortError> {
            Ok(())
        }
    }

    fn rule() -> DrainRule {
        DrainRule {
            wait_seconds: DrainRule::WAIT_SECONDS,
            empty_polls_to_stop: DrainRule::EMPTY_POLLS_TO_STOP,
            time_budget: Duration::from_secs(60),
            visibility_seconds: 30,
        }
    }

    async fn read_all(queue: &Scripted, max: usize) -> (usize, Option<DrainStop>) {
        let mut drain = Drain::new(queue, rule(), max);
        let mut n = 0;
        while let Some(batch) = drain.next_batch().await.unwrap() {
            n += batch.len();
        }
        (n, drain.stopped())
    }

    #[tokio::test]
    async fn a_first_empty_answer_does_not_end_the_drain() {
        let queue = Scripted(Mutex::new([None, Some(3)].into()), Mutex::default());
        assert_eq!(
            read_all(&queue, 100).await,
            (3, Some(DrainStop::QueueEmpty))
        );
        let waits = queue.1.lock().unwrap().clone();
        assert!(
            waits.iter().all(|w| *w > 0),
            "every receive long-polls: {waits:?}"
        );
    }

    #[tokio::test]
    async fn stops_at_the_maximum_and_after_consecutive_empty_polls() {
        let queue = Scripted(Mutex::new([Some(10), Some(10)].into()), Mutex::default());
        assert_eq!(
            read_all(&queue, 15).await,
            (15, Some(DrainStop::MaxReached))
        );
        let queue = Scripted(
            Mutex::new([Some(2), None, Some(1), None, None, Some(5)].into()),
            Mutex::default(),
        );
        // One empty answer between batches does not stop it; two in a row do.
        assert_eq!(
            read_all(&queue, 100).await,
            (3, Some(DrainStop::QueueEmpty))
        );
    }

    #[tokio::test]
    async fn a_spent_budget_starts_no_new_receive() {
        let queue = Scripted(Mutex::new([Some(1)].into()), Mutex::default());
        let mut drain = Drain::new(
            &queue,
            DrainRule {
                time_budget: Duration::ZERO,
                ..rule()
            },
            10,
        );
        assert!(drain.next_batch().await.unwrap().is_none());
        assert_eq!(drain.stopped(), Some(DrainStop::TimeBudget));
        assert!(queue.1.lock().unwrap().is_empty());
    }
}
