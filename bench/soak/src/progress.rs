//! What the pollers report while the soak runs (relayed records, the sender's outcomes,
//! batch failures), and the delivery queue's depth: printed every few seconds, so a run
//! shows where its time goes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use tern_handlers::relay::RecordOutcome;
use tern_local::pollers::LocalEvent;
use tokio::sync::mpsc::UnboundedReceiver;

/// Counts by kind (`relayed`, `delivered`, `retrying`, `duplicate`, `batch_failure`, ...).
#[derive(Clone, Default)]
pub struct Progress(Arc<Mutex<BTreeMap<&'static str, u64>>>);

impl Progress {
    /// Counts what arrives on `events` until the channel closes.
    pub fn follow(&self, mut events: UnboundedReceiver<LocalEvent>) {
        let counts = self.0.clone();
        tokio::spawn(async move {
            while let Some(e) = events.recv().await {
                let mut c = counts.lock().unwrap_or_else(PoisonError::into_inner);
                let mut add = |k: &'static str, n: u64| *c.entry(k).or_default() += n;
                match e {
                    LocalEvent::Relayed(outcomes) => {
                        for o in outcomes {
                            if let RecordOutcome::Relayed { deliveries, parked } = o {
                                add("relayed_records", 1);
                                add("relayed_messages", deliveries as u64);
                                add("parked", parked as u64);
                            }
                        }
                    }
                    LocalEvent::RelayBatchFailed { records } => {
                        add("relay_batches_given_up", records as u64)
                    }
                    LocalEvent::Sent(results) => {
                        for (_, r) in results {
                            add(
                                match r {
                                    Ok(outcome) => outcome.kind(),
                                    Err(_) => "batch_failure",
                                },
                                1,
                            );
                        }
                    }
                }
            }
        });
    }

    /// The counts, as one line.
    pub fn line(&self) -> String {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The delivery queue's visible, in-flight and delayed messages (SQS's approximations).
pub async fn depth(sqs: &aws_sdk_sqs::Client, url: &str) -> (u64, u64, u64) {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let Ok(answer) = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(A::ApproximateNumberOfMessages)
        .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
        .attribute_names(A::ApproximateNumberOfMessagesDelayed)
        .send()
        .await
    else {
        return (0, 0, 0);
    };
    let n = |a: A| {
        answer
            .attributes()
            .and_then(|m| m.get(&a))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (
        n(A::ApproximateNumberOfMessages),
        n(A::ApproximateNumberOfMessagesNotVisible),
        n(A::ApproximateNumberOfMessagesDelayed),
    )
}
