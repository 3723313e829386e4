//! Local mode's event source mappings for the soak, started and stopped by the soak: the
//! stream poller (relay) and the queue pollers (sender), with the same settings as
//! `LocalTern::start_pollers`. A restart aborts the tasks wherever they are (a batch half
//! handled, as a crashed or timed-out Lambda leaves it: its messages come back after the
//! visibility timeout) and starts new ones. A restarted stream poller starts again at the
//! trim horizon (local mode keeps no checkpoint): every event so far is relayed again.

use std::sync::Arc;
use std::time::Duration;

use tern_core::ports::MessageQueue;
use tern_local::pollers::{
    LocalEvent, QueuePollerOptions, StreamPollerOptions, spawn_queue_pollers, spawn_stream_poller,
};
use tern_local::settings::infra_settings;
use tern_local::{LocalOptions, LocalTern};
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;

/// The running pollers.
pub struct Pollers {
    stream: Option<JoinHandle<()>>,
    queue: Vec<JoinHandle<()>>,
    events: UnboundedSender<LocalEvent>,
}

impl Pollers {
    /// Starts both, with `local`'s relay and sender (wrapped or not).
    pub fn start(
        local: &LocalTern,
        options: &LocalOptions,
        events: UnboundedSender<LocalEvent>,
    ) -> Self {
        Self {
            stream: Some(stream(local, events.clone())),
            queue: queue(local, options, events.clone()),
            events,
        }
    }

    /// Stops the sender pollers (and the stream poller when `stream`) and starts them again.
    pub fn restart(&mut self, local: &LocalTern, options: &LocalOptions, stream_too: bool) {
        for t in self.queue.drain(..) {
            t.abort();
        }
        if stream_too && let Some(t) = self.stream.take() {
            t.abort();
        }
        if self.stream.is_none() {
            self.stream = Some(stream(local, self.events.clone()));
        }
        self.queue = queue(local, options, self.events.clone());
    }

    /// Stops every poller.
    pub fn stop(&mut self) {
        for t in self.queue.drain(..).chain(self.stream.take()) {
            t.abort();
        }
    }
}

fn stream(local: &LocalTern, events: UnboundedSender<LocalEvent>) -> JoinHandle<()> {
    let settings = infra_settings();
    let failure_queue: Arc<dyn MessageQueue> = Arc::new(tern_aws::SqsQueue::new(
        local.sqs(),
        &local.resources.relay_failure_queue_url,
    ));
    spawn_stream_poller(
        &local.aws,
        local.resources.outbox_stream_arn.clone(),
        local.relay.clone(),
        failure_queue,
        StreamPollerOptions {
            batch_size: settings.event_sources.relay.batch_size,
            max_retries: settings.event_sources.relay.maximum_retry_attempts,
            insert_filter: true,
            idle: Duration::from_millis(100),
            invocation_timeout: Duration::from_secs(settings.functions.relay.timeout_seconds),
        },
        Some(events),
    )
}

fn queue(
    local: &LocalTern,
    options: &LocalOptions,
    events: UnboundedSender<LocalEvent>,
) -> Vec<JoinHandle<()>> {
    let settings = infra_settings();
    spawn_queue_pollers(
        &local.aws,
        local.resources.delivery_queue_url.clone(),
        local.sender.clone(),
        QueuePollerOptions {
            batch_size: settings.event_sources.sender.batch_size,
            visibility_timeout_seconds: options
                .visibility_timeout_seconds
                .unwrap_or(settings.queues.delivery.visibility_timeout_seconds),
            concurrency: options.sender_concurrency,
            function_timeout: Duration::from_secs(settings.functions.sender.timeout_seconds),
        },
        Some(events),
    )
}
