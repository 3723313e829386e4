//! The relay's send path: one delivery message per (event, endpoint), put on the delivery
//! queue in full `SendMessageBatch` calls, a bounded number of calls at a time, stopping
//! in time for the invocation's deadline.
//!
//! Memory stays bounded whatever the fan-out: a message body is built only when the call
//! that carries it is assembled, and dropped when that call is answered. At most
//! [`MAX_CONCURRENT_SENDS`] calls (each at most [`SQS_BATCH_MAX_BYTES`] of entries) are
//! alive at once, plus one entry built ahead. An entry to send again is kept as an index
//! (which fan-out, which endpoint) and built again for its retry.
//!
//! Messages go out in order: fan-out by fan-out (stream order), endpoint by endpoint
//! (each fan-out's endpoints are sorted by id). So when the send stops at the deadline,
//! what went out is a prefix of that order, apart from the calls still in flight.

use std::time::Duration;

use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use tern_core::ports::{MessageQueue, PortError, QueueEntry};
use tern_core::{DeliveryMessage, EndpointId, Event};
use tokio::time::Instant;

/// Most entries in one SendMessageBatch call (SQS quota).
pub const SQS_BATCH_LIMIT: usize = 10;

/// Most bytes in one SendMessageBatch call, all bodies and attributes together: 1 MiB
/// (SQS quota: "the total size of all messages in a batch" is at most 1,048,576 bytes).
pub const SQS_BATCH_MAX_BYTES: usize = 1_048_576;

/// `SendMessageBatch` calls the relay keeps in flight at once: 8.
///
/// Memory: each call holds at most 1 MiB of entries ([`SQS_BATCH_MAX_BYTES`]), and the SDK
/// its serialized request (about as much again), so 8 calls hold about 16 MiB: a small
/// part of the function's 256 MB (`functions.relay.memoryMb` in infra/settings.json),
/// whatever the fan-out. Time: a call answers in tens of milliseconds in-region, so 8 in
/// flight carry 50,000 messages (5,000 calls) in seconds, well within the time the relay
/// sends per invocation (its 30 s timeout less [`SEND_RESERVE`]); one after another they
/// took longer than the timeout (issue 15 item 5). SQS sets no request-rate quota on a
/// standard queue's `SendMessageBatch`.
pub const MAX_CONCURRENT_SENDS: usize = 8;

/// `SendMessageBatch` calls an entry gets within one invocation: the first and two
/// retries of the entries that failed transiently (`SenderFault: false`, throttling, a
/// failed call). Bounded so a lasting outage goes to Lambda's own retry of the record
/// (`eventSources.relay.maximumRetryAttempts` in infra/settings.json) instead of using
/// up the invocation.
pub const SEND_ATTEMPTS: usize = 3;

/// Wait before each retry, in milliseconds: 50 ms, then 200 ms (250 ms at most per
/// invocation): enough to ride out a throttling blip, small against the relay's 30 s
/// timeout (`functions.relay.timeoutSeconds` in infra/settings.json).
pub const RETRY_BACKOFF_MS: [u64; SEND_ATTEMPTS - 1] = [50, 200];

/// No `SendMessageBatch` call starts later than 8 s before the invocation's deadline.
/// What follows needs that time: calls in flight get until [`DRAIN_RESERVE`], the parks
/// of refused messages until [`PARK_RESERVE`], the checkpoint write until
/// [`CHECKPOINT_RESERVE`]. With the relay's 30 s timeout, 22 s are left for sending.
pub const SEND_RESERVE: Duration = Duration::from_secs(8);

/// Calls in flight are awaited until 5 s before the deadline: at least 3 s each, more
/// than one try's deadline (2 s, `tern_aws::budget::ATTEMPT_TIMEOUT`). A call still
/// unanswered then is abandoned; its messages count as not sent (they may have been, and
/// are sent again by the retry: the sender's claim stops a second POST).
pub const DRAIN_RESERVE: Duration = Duration::from_secs(5);

/// Parking refused messages in the relay-failure queue stops 3 s before the deadline; a
/// record whose park did not finish is retried from that message.
pub const PARK_RESERVE: Duration = Duration::from_secs(3);

/// The fan-out checkpoint is written by 1 s before the deadline (one try of 2 s at most
/// would not fit; a write still unanswered then is abandoned, and the retry sends the
/// messages again), leaving the last second to answer.
pub const CHECKPOINT_RESERVE: Duration = Duration::from_secs(1);

/// Bytes an entry counts towards [`SQS_BATCH_MAX_BYTES`]: its body, and each attribute's
/// name, data type (`String`) and value.
pub(crate) fn entry_bytes(entry: &QueueEntry) -> usize {
    entry.body.len()
        + entry
            .attributes
            .iter()
            .map(|(k, v)| k.len() + "String".len() + v.len())
            .sum::<usize>()
}

/// Splits entries into SendMessageBatch calls that respect both the count (10) and the
/// total-size (1 MiB) limits, in order. A single entry is always its own batch, however
/// large; SQS judges it alone.
pub fn sqs_batches(entries: &[QueueEntry]) -> Vec<&[QueueEntry]> {
    let mut batches = Vec::new();
    let mut start = 0;
    let mut bytes = 0;
    for (i, entry) in entries.iter().enumerate() {
        let size = entry_bytes(entry);
        let full =
            i - start == SQS_BATCH_LIMIT || (i > start && bytes + size > SQS_BATCH_MAX_BYTES);
        if full {
            batches.push(&entries[start..i]);
            start = i;
            bytes = 0;
        }
        bytes += size;
    }
    if start < entries.len() {
        batches.push(&entries[start..]);
    }
    batches
}

/// One event's fan-out: the stream record it came from and the endpoints to send it to
/// now, sorted by id.
pub(crate) struct FanOut<'a> {
    /// Index of the stream record in its batch (names the entries).
    pub record: usize,
    /// The event.
    pub event: &'a Event,
    /// The endpoints, sorted by id.
    pub endpoints: &'a [EndpointId],
    /// The ledger layout its messages carry.
    pub layout: tern_core::spread::LedgerLayout,
}

/// One message: fan-out `fan_out`, endpoint `endpoint` of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Item {
    pub fan_out: usize,
    pub endpoint: usize,
}

/// The final result of each message, per fan-out and endpoint: `None` when it was not
/// sent (the invocation stopped before it, or its call was abandoned at the deadline).
pub(crate) type Results = Vec<Vec<Option<Result<(), PortError>>>>;

/// When the send must stop: no call starts after `stop_sending`, calls in flight are
/// awaited until `drain_by`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stops {
    pub stop_sending: Instant,
    pub drain_by: Instant,
}

impl Stops {
    /// The stops for an invocation that must answer by `deadline`.
    pub fn before(deadline: Instant) -> Self {
        Self {
            stop_sending: deadline.checked_sub(SEND_RESERVE).unwrap_or(deadline),
            drain_by: deadline.checked_sub(DRAIN_RESERVE).unwrap_or(deadline),
        }
    }
}

/// The entry of one message. Entry ids are `r<record>e<n>`: unique within the batch (so
/// within any call) and within the SQS id rules (`[A-Za-z0-9_-]`, at most 80 characters).
fn build(fan_outs: &[FanOut<'_>], item: Item) -> QueueEntry {
    let f = &fan_outs[item.fan_out];
    let endpoint = &f.endpoints[item.endpoint];
    let message = DeliveryMessage::first(f.event.clone(), endpoint.clone()).in_layout(f.layout);
    QueueEntry {
        id: format!("r{}e{}", f.record, item.endpoint),
        body: message.to_body(),
        delay_seconds: 0,
        attributes: vec![],
        group_id: Some(message.group_id()),
    }
}

/// Builds the next call from `todo`: entries in order until 10, or until the next would
/// take the call over 1 MiB (that one is kept in `ahead` for the next call). A single
/// entry is always a call of its own, however large; SQS judges it alone.
fn next_call(
    fan_outs: &[FanOut<'_>],
    todo: &mut dyn Iterator<Item = Item>,
    ahead: &mut Option<(Item, QueueEntry)>,
) -> (Vec<Item>, Vec<QueueEntry>) {
    let (mut items, mut entries) = (Vec::new(), Vec::new());
    let mut bytes = 0;
    while entries.len() < SQS_BATCH_LIMIT {
        let Some((item, entry)) = ahead
            .take()
            .or_else(|| todo.next().map(|i| (i, build(fan_outs, i))))
        else {
            break;
        };
        let size = entry_bytes(&entry);
        if !entries.is_empty() && bytes + size > SQS_BATCH_MAX_BYTES {
            *ahead = Some((item, entry));
            break;
        }
        bytes += size;
        items.push(item);
        entries.push(entry);
    }
    (items, entries)
}

/// Sends every message of `fan_outs`, in order, at most [`MAX_CONCURRENT_SENDS`] calls at
/// a time, then sends again the messages that failed transiently, up to [`SEND_ATTEMPTS`]
/// calls per message with [`RETRY_BACKOFF_MS`] between rounds. With `stops`, no call
/// starts after `stop_sending` and none is awaited after `drain_by`. Returns each
/// message's final result and how many message sends were retries.
pub(crate) async fn send_fan_outs(
    queue: &dyn MessageQueue,
    fan_outs: &[FanOut<'_>],
    stops: Option<Stops>,
) -> (Results, u64) {
    let mut results: Results = fan_outs
        .iter()
        .map(|f| vec![None; f.endpoints.len()])
        .collect();
    let all = fan_outs.iter().enumerate().flat_map(|(fan_out, f)| {
        (0..f.endpoints.len()).map(move |endpoint| Item { fan_out, endpoint })
    });
    let mut todo: Box<dyn Iterator<Item = Item> + Send + '_> = Box::new(all);
    let mut retried = 0;
    // The first round, then one more after each backoff while messages failed transiently.
    let mut backoffs = RETRY_BACKOFF_MS.iter();
    loop {
        let again = send_round(queue, fan_outs, todo.as_mut(), stops, &mut results).await;
        let Some(wait) = backoffs.next().map(|ms| Duration::from_millis(*ms)) else {
            break;
        };
        if again.is_empty() || stops.is_some_and(|s| Instant::now() + wait > s.stop_sending) {
            break;
        }
        tokio::time::sleep(wait).await;
        retried += again.len() as u64;
        todo = Box::new(again.into_iter());
    }
    (results, retried)
}

/// One round: the messages of `todo` in calls, a bounded number at a time. Returns the
/// messages that failed transiently (to send again).
async fn send_round(
    queue: &dyn MessageQueue,
    fan_outs: &[FanOut<'_>],
    todo: &mut (dyn Iterator<Item = Item> + Send),
    stops: Option<Stops>,
    results: &mut Results,
) -> Vec<Item> {
    let mut again = Vec::new();
    let mut ahead = None;
    let mut in_flight = FuturesUnordered::new();
    loop {
        let sending = stops.is_none_or(|s| Instant::now() < s.stop_sending);
        while sending && in_flight.len() < MAX_CONCURRENT_SENDS {
            let (items, entries) = next_call(fan_outs, todo, &mut ahead);
            if items.is_empty() {
                break;
            }
            in_flight.push(async move {
                let answer = send_call(queue, &entries).await;
                // The bodies are dropped here, as soon as the call is answered.
                drop(entries);
                (items, answer)
            });
        }
        // Calls in flight are awaited until `drain_by` at most, sending or not: a stalled
        // call (up to the SDK's 6 s) must not carry the invocation past its reserve.
        let answered = match stops {
            Some(s) => match tokio::time::timeout_at(s.drain_by, in_flight.next()).await {
                Ok(answered) => answered,
                Err(_) => {
                    tracing::warn!(
                        calls = in_flight.len(),
                        "SendMessageBatch calls still unanswered near the invocation deadline: abandoned, their messages count as not sent"
                    );
                    return again;
                }
            },
            None => in_flight.next().await,
        };
        let Some((items, answer)) = answered else {
            return again;
        };
        for (item, result) in items.into_iter().zip(answer) {
            if matches!(result, Err(PortError::Unavailable(_))) {
                again.push(item);
            }
            results[item.fan_out][item.endpoint] = Some(result);
        }
    }
}

/// One `SendMessageBatch` call, answered per entry. A failed call fails each entry with
/// its error; a call refused as a whole (a sender fault of the request, which no entry
/// can be blamed for from the answer) is split so each entry gets its own verdict.
async fn send_call(queue: &dyn MessageQueue, call: &[QueueEntry]) -> Vec<Result<(), PortError>> {
    match queue.send_batch(call).await {
        Ok(results) if results.len() == call.len() => results,
        Ok(results) => {
            let why = format!(
                "SendMessageBatch answered {} results for {} entries",
                results.len(),
                call.len()
            );
            vec![Err(PortError::Unavailable(why)); call.len()]
        }
        Err(PortError::Rejected(_)) if call.len() > 1 => {
            let mut out = Vec::with_capacity(call.len());
            for entry in call {
                let one = std::slice::from_ref(entry);
                out.push(match queue.send_batch(one).await {
                    Ok(mut r) if r.len() == 1 => r.pop().unwrap_or(Ok(())),
                    Ok(_) => Err(PortError::Unavailable(
                        "SendMessageBatch answered no result for the entry".into(),
                    )),
                    Err(e) => Err(e),
                });
            }
            out
        }
        Err(e) => vec![Err(e); call.len()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tern_core::outbox::OutboxRecord;

    fn entry(bytes: usize) -> QueueEntry {
        QueueEntry {
            id: "x".into(),
            body: "a".repeat(bytes),
            delay_seconds: 0,
            attributes: vec![],
            group_id: None,
        }
    }

    #[test]
    fn batches_respect_count_and_total_size() {
        let small: Vec<_> = (0..25).map(|_| entry(10)).collect();
        let sizes: Vec<usize> = sqs_batches(&small).iter().map(|b| b.len()).collect();
        assert_eq!(sizes, vec![10, 10, 5]);

        // Five 262 KB messages: 1.31 MB in one call would be refused (BatchRequestTooLong).
        let big: Vec<_> = (0..5).map(|_| entry(262_200)).collect();
        let batches = sqs_batches(&big);
        assert!(
            batches
                .iter()
                .all(|b| b.iter().map(entry_bytes).sum::<usize>() <= SQS_BATCH_MAX_BYTES)
        );
        assert_eq!(batches.iter().map(|b| b.len()).sum::<usize>(), 5);
        assert_eq!(batches.len(), 2);

        assert!(sqs_batches(&[]).is_empty());
        assert_eq!(sqs_batches(&[entry(2_000_000)]).len(), 1);
    }

    fn event(id: &str, payload_bytes: usize) -> Event {
        let payload = format!("{{\"x\":\"{}\"}}", "p".repeat(payload_bytes));
        let record: OutboxRecord = serde_json::from_value(json!({
            "event_id": id, "tern_record": "outbox_event", "schema_version": 1,
            "event_type": "order.paid", "tenant_id": "tnt_a",
            "created_at": "2026-01-01T00:00:00.000Z", "payload": payload, "expires_at": 1767830400
        }))
        .unwrap();
        record.into_event(1 << 20).unwrap()
    }

    fn endpoints(names: &[&str]) -> Vec<EndpointId> {
        names.iter().map(|e| EndpointId::new(*e).unwrap()).collect()
    }

    /// Answers each call after `delay`, fails the endpoints named per call number
    /// transiently, refuses as a whole any call holding endpoint `whole`, and records the
    /// calls (as endpoint names) and the most calls in flight at once.
    #[derive(Default)]
    struct Script {
        fail: Vec<Vec<&'static str>>,
        delay: Duration,
        calls: Mutex<Vec<Vec<String>>>,
        in_flight: AtomicUsize,
        peak: AtomicUsize,
    }

    fn endpoint_of(e: &QueueEntry) -> String {
        DeliveryMessage::parse(&e.body)
            .unwrap()
            .endpoint_id
            .as_str()
            .to_owned()
    }

    #[async_trait::async_trait]
    impl MessageQueue for Script {
        async fn send_batch(
            &self,
            entries: &[QueueEntry],
        ) -> Result<Vec<Result<(), PortError>>, PortError> {
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.peak.fetch_max(now, Ordering::SeqCst);
            let names: Vec<String> = entries.iter().map(endpoint_of).collect();
            let n = {
                let mut calls = self.calls.lock().unwrap();
                calls.push(names.clone());
                calls.len() - 1
            };
            tokio::time::sleep(self.delay).await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            if names.len() > 1 && names.iter().any(|e| e == "whole") {
                return Err(PortError::Rejected("BatchRequestTooLong".into()));
            }
            let fail = self.fail.get(n).cloned().unwrap_or_default();
            Ok(names
                .iter()
                .map(|e| match e.as_str() {
                    "whole" => Err(PortError::Rejected("too long".into())),
                    e if fail.contains(&e) => Err(PortError::Unavailable("x".into())),
                    _ => Ok(()),
                })
                .collect())
        }
        async fn send(&self, _: &QueueEntry) -> Result<(), PortError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn only_transiently_failed_entries_are_sent_again() {
        let q = Script {
            fail: vec![vec!["b", "c"], vec!["c"]],
            ..Script::default()
        };
        let e = event("evt_a", 10);
        let eps = endpoints(&["a", "b", "c", "d"]);
        let fan_outs = [FanOut {
            record: 0,
            event: &e,
            endpoints: &eps,
            layout: tern_core::spread::LedgerLayout::for_fan_out(1),
        }];
        let (results, retried) = send_fan_outs(&q, &fan_outs, None).await;
        assert_eq!(results, vec![vec![Some(Ok(())); 4]]);
        assert_eq!(retried, 3);
        assert_eq!(
            *q.calls.lock().unwrap(),
            vec![vec!["a", "b", "c", "d"], vec!["b", "c"], vec!["c"]]
        );
    }

    #[tokio::test]
    async fn a_call_refused_as_a_whole_is_split_to_find_the_entry() {
        let q = Script::default();
        let e = event("evt_a", 10);
        let eps = endpoints(&["a", "whole", "c"]);
        let fan_outs = [FanOut {
            record: 0,
            event: &e,
            endpoints: &eps,
            layout: tern_core::spread::LedgerLayout::for_fan_out(1),
        }];
        let (results, retried) = send_fan_outs(&q, &fan_outs, None).await;
        assert_eq!(retried, 0);
        assert!(results[0][0] == Some(Ok(())) && results[0][2] == Some(Ok(())));
        assert!(matches!(results[0][1], Some(Err(PortError::Rejected(_)))));
    }

    /// 300 KiB bodies: three per call (a fourth would pass 1 MiB), built per call.
    #[tokio::test]
    async fn calls_are_packed_to_the_size_limit() {
        let q = Script::default();
        let e = event("evt_a", 300 * 1024);
        let names: Vec<String> = (0..7).map(|i| format!("ep_{i}")).collect();
        let eps: Vec<EndpointId> = names.iter().map(|n| EndpointId::new(n).unwrap()).collect();
        let fan_outs = [FanOut {
            record: 0,
            event: &e,
            endpoints: &eps,
            layout: tern_core::spread::LedgerLayout::for_fan_out(1),
        }];
        let (results, _) = send_fan_outs(&q, &fan_outs, None).await;
        assert!(results[0].iter().all(|r| r == &Some(Ok(()))));
        let mut sizes: Vec<usize> = q.calls.lock().unwrap().iter().map(Vec::len).collect();
        sizes.sort_unstable();
        assert_eq!(sizes, vec![1, 3, 3]);
    }

    /// Calls that take 1 s each: none starts after `stop_sending`, the ones in flight are
    /// awaited, and what went out is a prefix of the order.
    #[tokio::test(start_paused = true)]
    async fn no_call_starts_after_the_stop() {
        let q = Script {
            delay: Duration::from_secs(1),
            ..Script::default()
        };
        let e = event("evt_a", 10);
        let names: Vec<String> = (0..1000).map(|i| format!("ep_{i:04}")).collect();
        let eps: Vec<EndpointId> = names.iter().map(|n| EndpointId::new(n).unwrap()).collect();
        let fan_outs = [FanOut {
            record: 0,
            event: &e,
            endpoints: &eps,
            layout: tern_core::spread::LedgerLayout::for_fan_out(1),
        }];
        let start = Instant::now();
        let stops = Stops {
            stop_sending: start + Duration::from_millis(2500),
            drain_by: start + Duration::from_secs(10),
        };
        let (results, _) = send_fan_outs(&q, &fan_outs, Some(stops)).await;
        // Three waves of 8 calls (at 0 s, 1 s, 2 s) of 10 messages.
        let sent = results[0].iter().take_while(|r| r.is_some()).count();
        assert_eq!(sent, 3 * MAX_CONCURRENT_SENDS * SQS_BATCH_LIMIT);
        assert!(results[0][sent..].iter().all(Option::is_none));
        assert_eq!(Instant::now() - start, Duration::from_secs(3));
    }

    /// Calls that stall (20 s, past the SDK's own deadline in this fake) are abandoned at
    /// `drain_by`: their messages count as not sent, and the send returns in time.
    #[tokio::test(start_paused = true)]
    async fn stalled_calls_are_abandoned_at_the_drain_time() {
        let q = Script {
            delay: Duration::from_secs(20),
            ..Script::default()
        };
        let e = event("evt_a", 10);
        let names: Vec<String> = (0..200).map(|i| format!("ep_{i:04}")).collect();
        let eps: Vec<EndpointId> = names.iter().map(|n| EndpointId::new(n).unwrap()).collect();
        let fan_outs = [FanOut {
            record: 0,
            event: &e,
            endpoints: &eps,
            layout: tern_core::spread::LedgerLayout::for_fan_out(1),
        }];
        let start = Instant::now();
        let stops = Stops {
            stop_sending: start + Duration::from_secs(10),
            drain_by: start + Duration::from_secs(12),
        };
        let (results, _) = send_fan_outs(&q, &fan_outs, Some(stops)).await;
        assert!(results[0].iter().all(Option::is_none));
        assert_eq!(Instant::now() - start, Duration::from_secs(12));
        assert_eq!(q.calls.lock().unwrap().len(), MAX_CONCURRENT_SENDS);
    }
}
