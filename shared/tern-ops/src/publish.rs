//! Publishing an event without a transaction of one's own: the outbox item is written
//! alone (one conditional put), and the event takes the same stream -> relay path as one
//! an application writes in its transaction. Idempotent on the event id.

use chrono::{SubsecRound, Utc};
use tern_core::event_store::{EventStore, Published, same_event};
use tern_core::ids::IdError;
use tern_core::ports::PortError;
use tern_core::{Event, EventId, EventType, Payload, PayloadError, TenantId, TraceContext};

/// What a publish did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishOutcome {
    /// A new event: written to the outbox, the relay delivers it.
    Created(Event),
    /// The same event (same id, tenant, type and payload text) was published before:
    /// nothing written, the original returned.
    Repeated(Event),
}

impl PublishOutcome {
    /// The event, new or original.
    pub fn event(&self) -> &Event {
        match self {
            Self::Created(e) | Self::Repeated(e) => e,
        }
    }
}

/// Why a publish was refused.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The event type or the payload is invalid (not a JSON object, too large, ...).
    #[error(transparent)]
    Payload(#[from] PayloadError),
    /// The event id is invalid.
    #[error(transparent)]
    Id(#[from] IdError),
    /// The event id is taken by a different event: another type or payload, or another
    /// tenant's event (event ids are unique across the deployment: choose unguessable
    /// ones). Which of these is not said.
    #[error(
        "event id {0} is already used by a different event; an idempotent retry must send the same type and payload"
    )]
    Conflict(EventId),
    /// The outbox could not be reached.
    #[error(transparent)]
    Port(#[from] PortError),
}

/// Publishes an event of `tenant` with the id given (or a new `evt_` id), the type, the
/// caller's W3C trace context if it has one (Tern's spans of the event join that trace),
/// and the payload's exact JSON text (a JSON object of at most `max_payload_bytes`, the relay's
/// `TERN_MAX_PAYLOAD_BYTES`). Publishing the same id again with the same type and payload
/// returns the original event ([`PublishOutcome::Repeated`]) while the outbox keeps it
/// (its TTL, 7 days by default); after that the id can be used again.
///
/// # Errors
/// [`PublishError`].
pub async fn publish(
    store: &dyn EventStore,
    tenant: &TenantId,
    id: Option<EventId>,
    event_type: &str,
    payload: &str,
    max_payload_bytes: usize,
    trace: Option<TraceContext>,
) -> Result<PublishOutcome, PublishError> {
    let event = Event {
        id: id.unwrap_or_else(EventId::generate),
        event_type: EventType::new(event_type)?,
        tenant_id: tenant.clone(),
        // The outbox item keeps milliseconds (`OutboxRecord::from_event`): the answer says
        // the time receivers will see and a repeat returns.
        created_at: Utc::now().trunc_subsecs(3),
        payload: Payload::parse(payload, max_payload_bytes)?,
        trace,
    };
    match store.publish(&event).await? {
        Published::Created => Ok(PublishOutcome::Created(event)),
        Published::Existing(stored) if same_event(&stored, tenant, event_type, payload) => {
            Ok(PublishOutcome::Repeated(stored))
        }
        Published::Existing(_) | Published::Taken => Err(PublishError::Conflict(event.id)),
    }
}

/// Most events one batch publish takes: 100, as SQS's and EventBridge's batch calls take at
/// most 10 and DynamoDB's `TransactWriteItems` 100 (the Tern API's `publishEventBatch`).
pub const MAX_BATCH_EVENTS: usize = 100;

/// Conditional puts of one batch in flight at once: 50. Every put has its own 6 s budget
/// (`tern_aws::budget`), so a batch of 100 ends within two budgets (12 s) even when each
/// call runs out of time: inside the API's 25 s request deadline.
pub const BATCH_PUTS_IN_FLIGHT: usize = 50;

/// One event of a batch: what [`publish`] takes, its id chosen (the caller's, or a new
/// `evt_` id made before the write, so that a failed event can be published again with
/// the same id and stay idempotent).
#[derive(Debug, Clone, Copy)]
pub struct BatchEvent<'a> {
    /// The event id.
    pub id: &'a EventId,
    /// The event type, as given.
    pub event_type: &'a str,
    /// The payload's exact JSON text.
    pub payload: &'a str,
    /// The W3C trace context of the code that published it, if any.
    pub trace: Option<&'a TraceContext>,
}

/// Why one event of a batch was not published.
#[derive(Debug, thiserror::Error)]
pub enum BatchEventError {
    /// What a single publish would have refused.
    #[error(transparent)]
    Publish(#[from] PublishError),
    /// An earlier event of the same batch has this id: this one is not written (which of
    /// two writes of one id would win is not for a batch to decide).
    #[error("event id {id} is used by events[{first}] of this batch already; send each event once")]
    RepeatedInBatch {
        /// The id.
        id: EventId,
        /// The index of the first event with it.
        first: usize,
    },
}

/// Publishes each event of a batch as [`publish`] does, with the same checks and limits and
/// the same idempotency on its id: one conditional put per event, [`BATCH_PUTS_IN_FLIGHT`]
/// at a time. Each event succeeds or fails alone (no transaction: a `TransactWriteItems` of
/// the batch would cost twice the write units and fail whole on one conflict); the answers
/// come back in the batch's order. An event whose id an earlier one in the batch has is
/// refused ([`BatchEventError::RepeatedInBatch`]) and not written.
pub async fn publish_batch(
    store: &dyn EventStore,
    tenant: &TenantId,
    events: &[BatchEvent<'_>],
    max_payload_bytes: usize,
) -> Vec<Result<PublishOutcome, BatchEventError>> {
    use futures::StreamExt as _;
    let mut first_of: std::collections::HashMap<&EventId, usize> = std::collections::HashMap::new();
    let repeated: Vec<Option<usize>> = events
        .iter()
        .enumerate()
        .map(|(i, e)| match first_of.get(e.id) {
            Some(&first) => Some(first),
            None => {
                first_of.insert(e.id, i);
                None
            }
        })
        .collect();
    // By index: a closure over borrowed items is not general enough for a `Send` future.
    futures::stream::iter(0..events.len())
        .map(|i| {
            let (e, repeated) = (events[i], repeated[i]);
            async move {
                if let Some(first) = repeated {
                    return Err(BatchEventError::RepeatedInBatch {
                        id: e.id.clone(),
                        first,
                    });
                }
                publish(
                    store,
                    tenant,
                    Some(e.id.clone()),
                    e.event_type,
                    e.payload,
                    max_payload_bytes,
                    e.trace.cloned(),
                )
                .await
                .map_err(BatchEventError::from)
            }
        })
        .buffered(BATCH_PUTS_IN_FLIGHT)
        .collect()
        .await
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;

    use super::*;

    /// An outbox in memory: a conditional put per id, as the table's; `fail` makes every put
    /// of that event type fail as an unreachable table does.
    #[derive(Default)]
    struct Outbox {
        items: Mutex<HashMap<(TenantId, EventId), Event>>,
        puts: AtomicUsize,
        in_flight: AtomicUsize,
        most_in_flight: AtomicUsize,
        fail: Option<&'static str>,
    }

    #[async_trait]
    impl EventStore for Outbox {
        async fn publish(&self, event: &Event) -> Result<Published, PortError> {
            self.puts.fetch_add(1, Ordering::SeqCst);
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_in_flight.fetch_max(now, Ordering::SeqCst);
            tokio::task::yield_now().await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            if self.fail == Some(event.event_type.as_str()) {
                return Err(PortError::Unavailable("the table did not answer".into()));
            }
            let mut items = self.items.lock().unwrap();
            let key = (event.tenant_id.clone(), event.id.clone());
            if let Some(stored) = items.get(&key) {
                return Ok(Published::Existing(stored.clone()));
            }
            items.insert(key, event.clone());
            Ok(Published::Created)
        }

        async fn get(&self, tenant: &TenantId, id: &EventId) -> Result<Option<Event>, PortError> {
            Ok(self
                .items
                .lock()
                .unwrap()
                .get(&(tenant.clone(), id.clone()))
                .cloned())
        }
    }

    fn id(s: &str) -> EventId {
        EventId::new(s).unwrap()
    }

    #[tokio::test]
    async fn each_event_of_a_batch_succeeds_or_fails_alone_in_order() {
        let store = Outbox {
            fail: Some("t.down"),
            ..Outbox::default()
        };
        let tenant = TenantId::new("tnt_a").unwrap();
        // An existing event: its repeat is "existing", a different one with its id a conflict.
        publish(
            &store,
            &tenant,
            Some(id("e_old")),
            "t.a",
            "{\"n\":0}",
            1024,
            None,
        )
        .await
        .unwrap();
        let ids: Vec<EventId> = ["e_1", "e_old", "e_old2", "e_2", "e_1", "e_3", "e_4", "e_5"]
            .into_iter()
            .map(id)
            .collect();
        publish(
            &store,
            &tenant,
            Some(id("e_old2")),
            "t.a",
            "{\"n\":0}",
            1024,
            None,
        )
        .await
        .unwrap();
        let events = [
            BatchEvent {
                id: &ids[0],
                event_type: "t.a",
                payload: "{\"n\":1}",
                trace: None,
            },
            BatchEvent {
                id: &ids[1],
                event_type: "t.a",
                payload: "{\"n\":0}",
                trace: None,
            },
            BatchEvent {
                id: &ids[2],
                event_type: "t.a",
                payload: "{\"n\":9}",
                trace: None,
            },
            BatchEvent {
                id: &ids[3],
                event_type: "bad type!",
                payload: "{}",
                trace: None,
            },
            BatchEvent {
                id: &ids[4],
                event_type: "t.a",
                payload: "{\"n\":1}",
                trace: None,
            },
            BatchEvent {
                id: &ids[5],
                event_type: "t.a",
                payload: "[1]",
                trace: None,
            },
            BatchEvent {
                id: &ids[6],
                event_type: "t.a",
                payload: "{\"p\":\"aaaaaaaaaa\"}",
                trace: None,
            },
            BatchEvent {
                id: &ids[7],
                event_type: "t.down",
                payload: "{}",
                trace: None,
            },
        ];
        let out = publish_batch(&store, &tenant, &events, 16).await;
        assert_eq!(out.len(), events.len());
        assert!(matches!(&out[0], Ok(PublishOutcome::Created(e)) if e.id == ids[0]));
        assert!(
            matches!(&out[1], Ok(PublishOutcome::Repeated(e)) if e.payload.as_str() == "{\"n\":0}")
        );
        assert!(matches!(
            &out[2],
            Err(BatchEventError::Publish(PublishError::Conflict(_)))
        ));
        assert!(matches!(
            &out[3],
            Err(BatchEventError::Publish(PublishError::Payload(
                PayloadError::BadEventType(_)
            )))
        ));
        assert!(matches!(
            &out[4],
            Err(BatchEventError::RepeatedInBatch { first: 0, .. })
        ));
        assert!(matches!(
            &out[5],
            Err(BatchEventError::Publish(PublishError::Payload(_)))
        ));
        // 18 bytes against a limit of 16.
        assert!(matches!(
            &out[6],
            Err(BatchEventError::Publish(PublishError::Payload(
                PayloadError::TooLarge { .. }
            )))
        ));
        assert!(matches!(
            &out[7],
            Err(BatchEventError::Publish(PublishError::Port(_)))
        ));
        // Written: e_1 alone, besides the two before the batch. The repeat in the batch was not tried.
        let items = store.items.lock().unwrap();
        assert_eq!(items.len(), 3);
        assert!(items.contains_key(&(tenant.clone(), ids[0].clone())));
    }

    #[tokio::test]
    async fn a_full_batch_keeps_at_most_its_bound_of_puts_in_flight() {
        let store = Outbox::default();
        let tenant = TenantId::new("tnt_a").unwrap();
        let ids: Vec<EventId> = (0..MAX_BATCH_EVENTS)
            .map(|i| id(&format!("e_{i}")))
            .collect();
        let events: Vec<BatchEvent<'_>> = ids
            .iter()
            .map(|i| BatchEvent {
                id: i,
                event_type: "t.a",
                payload: "{}",
                trace: None,
            })
            .collect();
        let out = publish_batch(&store, &tenant, &events, 1024).await;
        assert!(
            out.iter()
                .all(|r| matches!(r, Ok(PublishOutcome::Created(_))))
        );
        assert_eq!(store.puts.load(Ordering::SeqCst), MAX_BATCH_EVENTS);
        let most = store.most_in_flight.load(Ordering::SeqCst);
        assert!(most > 1 && most <= BATCH_PUTS_IN_FLIGHT, "{most} in flight");
    }
}
