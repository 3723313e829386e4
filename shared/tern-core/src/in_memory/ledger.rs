//! [`InMemoryLedger`]: the delivery ledger in memory, with the conditions of the
//! DynamoDB ledger (`tern_aws::DynamoLedger`) applied atomically under one lock: a claim
//! granted only above every earlier claim of the pair and never over a delivered pair
//! (a manual resend excepted) nor over a dead-lettered budget; a takeover of an expired,
//! unfinished lease, with the abandoned try's row unless it was given up on purpose; a
//! finish that never turns a delivered pair back; a release only by the claim's own try;
//! attempt rows that never overwrite a recorded try (an `abandoned` placeholder excepted).
//! It never retries a write, so the claim tokens that let the DynamoDB ledger recognise
//! its own retried write are not needed. The endpoint log keeps counts, not rows.
//!
//! Items live where the DynamoDB ledger puts them (`tern_aws::ledger_keys`): a pair's
//! state item, attempt rows and duplicate row in the partition its message's layout names
//! ([`DeliveryMessage::ledger_layout`]: the event id alone for version 1 messages, shared
//! by every tenant's event with that id; the tenant's event and the pair's shard for
//! version 2). So a pair keeps one item per layout, and the readers read both layouts as
//! the DynamoDB ones do: the unsharded partition (any tenant's) and every shard of the
//! tenant's event, a pair found in both being [`PairState::prevailing`]. The endpoint log
//! counts its writes per log shard ([`crate::spread::log_shard`]).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::delivery_log::PairState;
use crate::ids::{EndpointId, EventId, TenantId};
use crate::message::DeliveryMessage;
use crate::ports::{
    AttemptRecord, Claim, DeliveryLedger, DeliveryState, OUTCOME_ABANDONED, OUTCOME_DELIVERED,
    OUTCOME_DUPLICATE, PortError,
};
use crate::spread::LedgerLayout;

/// One pair's state item.
#[derive(Debug, Clone, Default)]
struct PairItem {
    claim_key: Option<u64>,
    /// The lease's end; the Unix epoch when its holder gave it up ([`DeliveryLedger::release`]).
    lease_until: DateTime<Utc>,
    claim_done: bool,
    claim_takeover: u32,
    claimed_at: Option<DateTime<Utc>>,
    delivery_state: Option<DeliveryState>,
    delivered_at: Option<DateTime<Utc>>,
    /// Listed as waiting: (attempt waited for, due).
    waiting: Option<(u32, DateTime<Utc>)>,
    /// The success stored with the delivered mark.
    delivered_row: Option<AttemptRecord>,
    /// The layout of the message that made the item.
    ledger: LedgerLayout,
}

/// A pair partition of the attempts table (`tern_aws::ledger_keys::pair_partition`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Partition {
    /// `<event id>`: version 1 messages, every tenant's event with that id.
    Unsharded(EventId),
    /// `ev#<tenant>#<event>#<shard>`: version 2 messages.
    Sharded(TenantId, EventId, u32),
}

impl Partition {
    /// The partition of `message`'s pair, in the layout its version fixes.
    fn of(message: &DeliveryMessage) -> Self {
        match message.ledger_layout().shard_of(&message.endpoint_id) {
            None => Self::Unsharded(message.event.id.clone()),
            Some(shard) => Self::Sharded(
                message.event.tenant_id.clone(),
                message.event.id.clone(),
                shard,
            ),
        }
    }

    /// True when a reader of `tenant`'s `event` reads this partition: the unsharded one
    /// (whoever's it is) and every shard of the tenant's event.
    fn read_for(&self, tenant: &TenantId, event: &EventId) -> bool {
        match self {
            Self::Unsharded(e) => e == event,
            Self::Sharded(t, e, _) => t == tenant && e == event,
        }
    }
}

type PairKey = (Partition, EndpointId);
type RowKey = (EndpointId, u32, u32, u32);

#[derive(Debug, Default)]
struct Store {
    pairs: HashMap<PairKey, PairItem>,
    rows: HashMap<Partition, HashMap<RowKey, AttemptRecord>>,
    /// Copies dropped as duplicates, per (partition, endpoint, replay, attempt).
    duplicates: HashMap<(Partition, EndpointId, u32, u32), u64>,
    dead_letters: HashMap<(TenantId, EventId, EndpointId), DeliveryMessage>,
    endpoint_log_writes: u64,
    endpoint_log_lines: u64,
    /// Endpoint-log writes per (endpoint, log shard).
    endpoint_log_keys: HashMap<(EndpointId, u32), u64>,
}

/// The delivery ledger in memory (see the module doc).
#[derive(Debug, Default)]
pub struct InMemoryLedger {
    store: Mutex<Store>,
}

/// What the ledger holds, in numbers (for a benchmark's accounting).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LedgerCounts {
    /// Pairs with a state item (claimed, or listed as waiting).
    pub pairs: usize,
    /// Of which delivered.
    pub delivered: usize,
    /// Of which listed as waiting.
    pub waiting: usize,
    /// Of which ended dead-lettered (their latest claim).
    pub dead_lettered: usize,
    /// Endpoint-log writes (one per endpoint per batch).
    pub endpoint_log_writes: u64,
    /// Lines they held.
    pub endpoint_log_lines: u64,
    /// Most writes one endpoint-log key (endpoint and log shard) took.
    pub endpoint_log_hottest_key: u64,
}

fn lock(m: &Mutex<Store>) -> MutexGuard<'_, Store> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn pair_key(m: &DeliveryMessage) -> PairKey {
    (Partition::of(m), m.endpoint_id.clone())
}

fn dead_letter_key(m: &DeliveryMessage) -> (TenantId, EventId, EndpointId) {
    (
        m.event.tenant_id.clone(),
        m.event.id.clone(),
        m.endpoint_id.clone(),
    )
}

fn row_key(r: &AttemptRecord) -> RowKey {
    (r.endpoint_id.clone(), r.replay_count, r.attempt, r.takeover)
}

fn no_claim(m: &DeliveryMessage) -> PortError {
    PortError::Rejected(format!(
        "event {} endpoint {}: attempt {} holds no claim to finish",
        m.event.id,
        m.endpoint_id,
        m.attempt_key()
    ))
}

impl Store {
    /// Puts an attempt row into `partition`, never over a recorded try (only an
    /// `abandoned` placeholder, by a real result).
    fn put_row(&mut self, partition: Partition, record: &AttemptRecord) -> Result<(), PortError> {
        let rows = self.rows.entry(partition).or_default();
        let key = row_key(record);
        let replaceable = rows.get(&key).is_none_or(|old| {
            record.outcome != OUTCOME_ABANDONED && old.outcome == OUTCOME_ABANDONED
        });
        if !replaceable {
            return Err(PortError::Rejected(format!(
                "attempt row {key:?} of event {} is already recorded; not overwritten",
                record.event_id
            )));
        }
        rows.insert(key, record.clone());
        Ok(())
    }

    fn finish(
        &mut self,
        message: &DeliveryMessage,
        state: DeliveryState,
        listing: Option<(u32, DateTime<Utc>)>,
    ) -> Result<(), PortError> {
        let k = message.attempt_key();
        let now = Utc::now();
        let Some(item) = self.pairs.get_mut(&pair_key(message)) else {
            return Err(no_claim(message));
        };
        let delivered = state == DeliveryState::Delivered;
        let ours = item.claim_key == Some(k);
        if ours && (delivered || item.delivered_at.is_none()) {
            item.claim_done = true;
            item.delivery_state = Some(state);
            if delivered {
                item.delivered_at.get_or_insert(now);
            }
            if listing.is_some() {
                item.waiting = listing;
            }
            Ok(())
        } else if delivered && item.claim_key.is_some() {
            // Another attempt holds the claim: the receiver got this one, so the pair is
            // delivered; that holder's own end finds it delivered.
            item.delivery_state = Some(DeliveryState::Delivered);
            item.delivered_at.get_or_insert(now);
            Ok(())
        } else if ours && item.delivered_at.is_some() {
            // Delivered meanwhile: the claim ends, the pair stays delivered.
            item.claim_done = true;
            Ok(())
        } else {
            Err(no_claim(message))
        }
    }
}

impl InMemoryLedger {
    /// What the ledger holds, in numbers.
    pub fn counts(&self) -> LedgerCounts {
        let s = lock(&self.store);
        LedgerCounts {
            pairs: s.pairs.len(),
            delivered: s
                .pairs
                .values()
                .filter(|p| p.delivered_at.is_some())
                .count(),
            waiting: s.pairs.values().filter(|p| p.waiting.is_some()).count(),
            dead_lettered: s
                .pairs
                .values()
                .filter(|p| {
                    p.delivered_at.is_none()
                        && p.claim_done
                        && p.delivery_state == Some(DeliveryState::DeadLettered)
                })
                .count(),
            endpoint_log_writes: s.endpoint_log_writes,
            endpoint_log_lines: s.endpoint_log_lines,
            endpoint_log_hottest_key: s.endpoint_log_keys.values().copied().max().unwrap_or(0),
        }
    }

    /// The listing as waiting of `message`'s pair, in its layout: (attempt, due), if
    /// listed.
    pub fn waiting(&self, message: &DeliveryMessage) -> Option<(u32, DateTime<Utc>)> {
        lock(&self.store)
            .pairs
            .get(&pair_key(message))
            .and_then(|p| p.waiting)
    }
}

#[async_trait]
impl DeliveryLedger for InMemoryLedger {
    async fn claim(
        &self,
        message: &DeliveryMessage,
        lease_until: DateTime<Utc>,
    ) -> Result<Claim, PortError> {
        let now = Utc::now();
        let k = message.attempt_key();
        let budget = u64::from(message.replay_count) << 32;
        let mut s = lock(&self.store);
        let item = s
            .pairs
            .entry(pair_key(message))
            .or_insert_with(|| PairItem {
                ledger: message.ledger_layout(),
                ..PairItem::default()
            });
        let delivered_blocks = !message.resend && item.delivered_at.is_some();
        let earlier = item.claim_key.is_none_or(|c| c < k);
        let budget_dead = item.claim_done
            && item.delivery_state == Some(DeliveryState::DeadLettered)
            && item.claim_key.is_some_and(|c| c >= budget);
        if !delivered_blocks && earlier && !budget_dead {
            item.claim_key = Some(k);
            item.lease_until = lease_until;
            item.claim_done = false;
            item.claim_takeover = 0;
            item.claimed_at = Some(now);
            // A claimed delivery waits no more.
            item.waiting = None;
            return Ok(Claim::Granted);
        }
        if delivered_blocks {
            return Ok(Claim::AlreadyDelivered);
        }
        let expired = item.claim_key == Some(k) && !item.claim_done && item.lease_until < now;
        if !expired {
            return Ok(Claim::AlreadyClaimed);
        }
        // Take it over: the holder's lease ran out unfinished.
        let previous = item.claim_takeover;
        let given_up = item.lease_until.timestamp_millis() == 0;
        let claimed_at = item.claimed_at;
        // As the DynamoDB takeover write: the listing as waiting is left as it is.
        item.lease_until = lease_until;
        item.claimed_at = Some(now);
        item.claim_takeover = previous.saturating_add(1);
        if !given_up {
            // The abandoned try's placeholder, unless its holder recorded it.
            let abandoned = AttemptRecord {
                event_id: message.event.id.clone(),
                endpoint_id: message.endpoint_id.clone(),
                replay_count: message.replay_count,
                attempt: message.attempt,
                takeover: previous,
                started_at: claimed_at.unwrap_or(now),
                latency_ms: 0,
                status: None,
                error_class: None,
                error: Some(format!(
                    "the sender stopped before recording this attempt (crash or timeout); its \
                     lease ran out and it was taken over at {}; the receiver may have received it",
                    now.to_rfc3339()
                )),
                location: None,
                response_excerpt: None,
                excerpt_truncated: false,
                outcome: OUTCOME_ABANDONED.into(),
                next_wait_seconds: None,
            };
            let _ = s.put_row(Partition::of(message), &abandoned);
        }
        Ok(Claim::TakenOver {
            takeover: previous.saturating_add(1),
        })
    }

    async fn finish(
        &self,
        message: &DeliveryMessage,
        state: DeliveryState,
    ) -> Result<(), PortError> {
        lock(&self.store).finish(message, state, None)
    }

    async fn finish_retrying(
        &self,
        message: &DeliveryMessage,
        next_attempt: u32,
        due_at: DateTime<Utc>,
    ) -> Result<(), PortError> {
        lock(&self.store).finish(
            message,
            DeliveryState::Retrying,
            Some((next_attempt, due_at)),
        )
    }

    async fn list_waiting(
        &self,
        message: &DeliveryMessage,
        due_at: DateTime<Utc>,
    ) -> Result<(), PortError> {
        let mut s = lock(&self.store);
        let item = s
            .pairs
            .entry(pair_key(message))
            .or_insert_with(|| PairItem {
                ledger: message.ledger_layout(),
                ..PairItem::default()
            });
        // Never over a claim of this or a later attempt, nor over a delivered pair.
        if item.delivered_at.is_none() && item.claim_key.is_none_or(|c| c < message.attempt_key()) {
            item.waiting = Some((message.attempt, due_at));
        }
        Ok(())
    }

    async fn unlist_waiting(&self, message: &DeliveryMessage) -> Result<(), PortError> {
        if let Some(item) = lock(&self.store).pairs.get_mut(&pair_key(message)) {
            item.waiting = None;
        }
        Ok(())
    }

    async fn release(
        &self,
        message: &DeliveryMessage,
        takeover: u32,
        due_at: DateTime<Utc>,
    ) -> Result<(), PortError> {
        let mut s = lock(&self.store);
        let held = s.pairs.get_mut(&pair_key(message)).filter(|item| {
            item.claim_key == Some(message.attempt_key())
                && !item.claim_done
                && item.delivered_at.is_none()
                && item.claim_takeover == takeover
        });
        match held {
            Some(item) => {
                item.lease_until = DateTime::<Utc>::UNIX_EPOCH;
                item.waiting = Some((message.attempt, due_at));
                Ok(())
            }
            None => Err(PortError::Rejected(
                "the claim is no longer this try's (finished, taken over, or the pair delivered)"
                    .into(),
            )),
        }
    }

    async fn record_duplicate(&self, message: &DeliveryMessage) -> Result<(), PortError> {
        let key = (
            Partition::of(message),
            message.endpoint_id.clone(),
            message.replay_count,
            message.attempt,
        );
        *lock(&self.store).duplicates.entry(key).or_default() += 1;
        Ok(())
    }

    async fn record_attempt(
        &self,
        message: &DeliveryMessage,
        record: &AttemptRecord,
    ) -> Result<(), PortError> {
        lock(&self.store).put_row(Partition::of(message), record)
    }

    async fn record_delivered(
        &self,
        message: &DeliveryMessage,
        record: &AttemptRecord,
    ) -> Result<(), PortError> {
        let mut s = lock(&self.store);
        let k = message.attempt_key();
        if let Some(item) = s.pairs.get_mut(&pair_key(message))
            && item.claim_key == Some(k)
            && item.delivered_at.is_none()
            && item.claim_takeover == record.takeover
        {
            item.claim_done = true;
            item.delivery_state = Some(DeliveryState::Delivered);
            item.delivered_at = Some(Utc::now());
            item.delivered_row = Some(AttemptRecord {
                response_excerpt: None,
                outcome: OUTCOME_DELIVERED.into(),
                ..record.clone()
            });
            return Ok(());
        }
        // Taken over meanwhile, or delivered by another try: its own row, then the finish.
        let logged = match s.put_row(Partition::of(message), record) {
            Err(PortError::Rejected(_)) => Ok(()),
            other => other,
        };
        let finished = s.finish(message, DeliveryState::Delivered, None);
        logged.and(finished)
    }

    async fn history(
        &self,
        tenant: &TenantId,
        event: &EventId,
    ) -> Result<Vec<AttemptRecord>, PortError> {
        let s = lock(&self.store);
        let mut out: Vec<AttemptRecord> = s
            .rows
            .iter()
            .filter(|(p, _)| p.read_for(tenant, event))
            .flat_map(|(_, rows)| rows.values().cloned())
            .collect();
        out.extend(
            s.pairs
                .iter()
                .filter(|((p, _), _)| p.read_for(tenant, event))
                .filter_map(|(_, item)| item.delivered_row.clone()),
        );
        out.extend(
            s.duplicates
                .iter()
                .filter(|((p, ..), _)| p.read_for(tenant, event))
                .map(|((_, ep, replay, attempt), copies)| AttemptRecord {
                    event_id: event.clone(),
                    endpoint_id: ep.clone(),
                    replay_count: *replay,
                    attempt: *attempt,
                    takeover: 0,
                    started_at: DateTime::<Utc>::UNIX_EPOCH,
                    latency_ms: 0,
                    status: None,
                    error_class: None,
                    error: Some(format!(
                        "not sent: {copies} copies of this attempt found the pair delivered and were dropped"
                    )),
                    location: None,
                    response_excerpt: None,
                    excerpt_truncated: false,
                    outcome: OUTCOME_DUPLICATE.into(),
                    next_wait_seconds: None,
                }),
        );
        out.sort_by_key(|r| (r.started_at, r.replay_count, r.attempt, r.takeover));
        Ok(out)
    }

    async fn pair_states(
        &self,
        tenant: &TenantId,
        event: &EventId,
    ) -> Result<Vec<PairState>, PortError> {
        let s = lock(&self.store);
        let mut states: HashMap<EndpointId, PairState> = HashMap::new();
        for ((_, endpoint), p) in s
            .pairs
            .iter()
            .filter(|((part, _), p)| part.read_for(tenant, event) && p.claim_key.is_some())
        {
            let key = p.claim_key.unwrap_or(0);
            // Delivered wins, as the DynamoDB reader says: a pair a slow holder delivered
            // while a later attempt holds the claim is delivered.
            let state = if p.delivered_at.is_some() {
                Some(DeliveryState::Delivered)
            } else if p.claim_done {
                p.delivery_state
            } else {
                None
            };
            let state = PairState {
                endpoint_id: endpoint.clone(),
                state,
                replay_count: u32::try_from(key >> 32).unwrap_or(u32::MAX),
                attempt: u32::try_from(key & u64::from(u32::MAX)).unwrap_or(u32::MAX),
                delivered_at: p.delivered_at,
                ledger: p.ledger,
            };
            let state = match states.remove(endpoint) {
                Some(other) => state.prevailing(other),
                None => state,
            };
            states.insert(endpoint.clone(), state);
        }
        let mut out: Vec<PairState> = states.into_values().collect();
        out.sort_by(|a, b| a.endpoint_id.cmp(&b.endpoint_id));
        Ok(out)
    }

    async fn append_endpoint_log(&self, records: &[AttemptRecord]) -> Result<(), PortError> {
        let mut s = lock(&self.store);
        let mut endpoints: Vec<&EndpointId> = records.iter().map(|r| &r.endpoint_id).collect();
        endpoints.sort();
        endpoints.dedup();
        s.endpoint_log_writes += endpoints.len() as u64;
        s.endpoint_log_lines += records.len() as u64;
        // One item per endpoint, in the log shard of its unique id (a fresh one each).
        for endpoint in endpoints {
            let shard = crate::spread::log_shard(&uuid::Uuid::now_v7().simple().to_string());
            *s.endpoint_log_keys
                .entry((endpoint.clone(), shard))
                .or_default() += 1;
        }
        Ok(())
    }

    async fn record_dead_letter(&self, message: &DeliveryMessage) -> Result<(), PortError> {
        lock(&self.store)
            .dead_letters
            .insert(dead_letter_key(message), message.clone());
        Ok(())
    }

    async fn remove_dead_letter(&self, message: &DeliveryMessage) -> Result<(), PortError> {
        let mut s = lock(&self.store);
        let key = dead_letter_key(message);
        if s.dead_letters
            .get(&key)
            .is_some_and(|kept| kept.replay_count <= message.replay_count)
        {
            s.dead_letters.remove(&key);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, EventType, Payload};
    use crate::spread::{PAIR_SHARDS, pair_shard};

    fn message_of(tenant: &str, endpoint: &str, attempt: u32) -> DeliveryMessage {
        let event = Event {
            id: EventId::new("evt_1").unwrap(),
            event_type: EventType::new("order.paid").unwrap(),
            tenant_id: TenantId::new(tenant).unwrap(),
            created_at: Utc::now(),
            payload: Payload::parse("{}", 100).unwrap(),
            trace: None,
        };
        DeliveryMessage {
            attempt,
            ..DeliveryMessage::first(event, EndpointId::new(endpoint).unwrap())
        }
    }

    fn message(attempt: u32) -> DeliveryMessage {
        message_of("tnt_a", "ep_1", attempt)
    }

    fn row(m: &DeliveryMessage, takeover: u32, outcome: &str) -> AttemptRecord {
        AttemptRecord {
            event_id: m.event.id.clone(),
            endpoint_id: m.endpoint_id.clone(),
            replay_count: m.replay_count,
            attempt: m.attempt,
            takeover,
            started_at: Utc::now(),
            latency_ms: 5,
            status: Some(200),
            error_class: None,
            error: None,
            location: None,
            response_excerpt: None,
            excerpt_truncated: false,
            outcome: outcome.into(),
            next_wait_seconds: None,
        }
    }

    fn later(s: i64) -> DateTime<Utc> {
        Utc::now() + chrono::Duration::seconds(s)
    }

    #[tokio::test]
    async fn one_claim_per_attempt_and_none_over_a_delivered_pair() {
        let ledger = InMemoryLedger::default();
        let first = message(1);
        assert_eq!(ledger.claim(&first, later(60)).await, Ok(Claim::Granted));
        // A copy of the same attempt while the lease runs: not sent.
        assert_eq!(
            ledger.claim(&first, later(60)).await,
            Ok(Claim::AlreadyClaimed)
        );
        ledger
            .record_delivered(&first, &row(&first, 0, OUTCOME_DELIVERED))
            .await
            .unwrap();
        assert_eq!(
            ledger.claim(&message(2), later(60)).await,
            Ok(Claim::AlreadyDelivered)
        );
        // A retry of a delivered pair never turns it back.
        assert!(ledger.finish(&first, DeliveryState::Retrying).await.is_ok());
        assert_eq!(ledger.counts().delivered, 1);
        assert_eq!(
            ledger
                .history(&first.event.tenant_id, &first.event.id)
                .await
                .unwrap()
                .len(),
            1
        );
    }

    #[tokio::test]
    async fn an_expired_lease_is_taken_over_and_a_released_one_leaves_no_placeholder() {
        let ledger = InMemoryLedger::default();
        let m = message(1);
        assert_eq!(ledger.claim(&m, later(-1)).await, Ok(Claim::Granted));
        assert_eq!(
            ledger.claim(&m, later(60)).await,
            Ok(Claim::TakenOver { takeover: 1 })
        );
        let rows = ledger
            .history(&m.event.tenant_id, &m.event.id)
            .await
            .unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].outcome, OUTCOME_ABANDONED);
        // Only the claim's own try may release it; then its copy takes it over at once.
        assert!(matches!(
            ledger.release(&m, 0, later(5)).await,
            Err(PortError::Rejected(_))
        ));
        ledger.release(&m, 1, later(5)).await.unwrap();
        assert_eq!(ledger.waiting(&m).map(|w| w.0), Some(1));
        assert_eq!(
            ledger.claim(&m, later(60)).await,
            Ok(Claim::TakenOver { takeover: 2 })
        );
        assert_eq!(
            ledger
                .history(&m.event.tenant_id, &m.event.id)
                .await
                .unwrap()
                .len(),
            1
        );
    }

    #[tokio::test]
    async fn a_dead_lettered_budget_refuses_its_later_attempts() {
        let ledger = InMemoryLedger::default();
        let m = message(2);
        assert_eq!(ledger.claim(&m, later(60)).await, Ok(Claim::Granted));
        ledger
            .finish(&m, DeliveryState::DeadLettered)
            .await
            .unwrap();
        assert_eq!(
            ledger.claim(&message(3), later(60)).await,
            Ok(Claim::AlreadyClaimed)
        );
        // A replay (a later budget) claims it again.
        let replayed = DeliveryMessage {
            replay_count: 1,
            ..message(1)
        };
        assert_eq!(ledger.claim(&replayed, later(60)).await, Ok(Claim::Granted));
        // A finish of an attempt that holds no claim is refused.
        assert!(matches!(
            ledger.finish(&message(7), DeliveryState::Retrying).await,
            Err(PortError::Rejected(_))
        ));
    }

    #[tokio::test]
    async fn rows_are_never_overwritten_but_an_abandoned_placeholder_is() {
        let ledger = InMemoryLedger::default();
        let m = message(1);
        ledger
            .record_attempt(&m, &row(&m, 0, OUTCOME_ABANDONED))
            .await
            .unwrap();
        ledger
            .record_attempt(&m, &row(&m, 0, "retry"))
            .await
            .unwrap();
        assert!(matches!(
            ledger.record_attempt(&m, &row(&m, 0, "retry")).await,
            Err(PortError::Rejected(_))
        ));
        assert!(matches!(
            ledger
                .record_attempt(&m, &row(&m, 0, OUTCOME_ABANDONED))
                .await,
            Err(PortError::Rejected(_))
        ));
        let rows = ledger
            .history(&m.event.tenant_id, &m.event.id)
            .await
            .unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].outcome, "retry");
    }

    #[tokio::test]
    async fn a_pair_keeps_one_item_per_layout_and_readers_read_both() {
        let ledger = InMemoryLedger::default();
        // The same pair, one message per layout (a relay retried across the upgrade).
        let new = message(1);
        assert_eq!(new.ledger_layout(), LedgerLayout::Sharded { shards: 1 });
        let old = message(1).in_layout(LedgerLayout::Unsharded);
        assert_eq!(ledger.claim(&old, later(60)).await, Ok(Claim::Granted));
        // Another item: the sharded layout's claim is its own.
        assert_eq!(ledger.claim(&new, later(60)).await, Ok(Claim::Granted));
        ledger
            .record_delivered(&old, &row(&old, 0, OUTCOME_DELIVERED))
            .await
            .unwrap();
        ledger.finish(&new, DeliveryState::Retrying).await.unwrap();
        let tenant = TenantId::new("tnt_a").unwrap();
        let states = ledger.pair_states(&tenant, &new.event.id).await.unwrap();
        assert_eq!(states.len(), 1, "one pair, found in both layouts");
        assert_eq!(
            states[0].state,
            Some(DeliveryState::Delivered),
            "delivered wins"
        );
        assert_eq!(states[0].ledger, LedgerLayout::Unsharded);
        assert_eq!(
            ledger.history(&tenant, &new.event.id).await.unwrap().len(),
            1
        );

        // Another tenant's event with the same id: its sharded items are its own, the
        // unsharded partition is every tenant's (a caller keeps its own endpoints' rows).
        let other = message_of("tnt_b", "ep_2", 1);
        assert_eq!(ledger.claim(&other, later(60)).await, Ok(Claim::Granted));
        let b = TenantId::new("tnt_b").unwrap();
        let theirs = ledger.pair_states(&b, &other.event.id).await.unwrap();
        let endpoints: Vec<&str> = theirs.iter().map(|s| s.endpoint_id.as_str()).collect();
        assert_eq!(endpoints, ["ep_1", "ep_2"]);
        let ours = ledger.pair_states(&tenant, &new.event.id).await.unwrap();
        assert_eq!(ours.len(), 1);
        assert_eq!(
            ledger
                .pair_state(&tenant, &new.event.id, &other.endpoint_id)
                .await,
            Ok(None)
        );
    }

    #[tokio::test]
    async fn a_spread_event_keeps_each_pair_in_its_shard() {
        let ledger = InMemoryLedger::default();
        let wide = LedgerLayout::Sharded {
            shards: PAIR_SHARDS,
        };
        // Two endpoints in different shards of one event.
        let (a, b) = (1..100)
            .map(|i| format!("ep_{i}"))
            .map(|e| message_of("tnt_a", &e, 1).in_layout(wide))
            .fold((None, None), |(a, b), m| match (&a, &b) {
                (None, _) => (Some(m), b),
                (Some(x), None) if pair_shard(&x.endpoint_id) != pair_shard(&m.endpoint_id) => {
                    (a, Some(m))
                }
                _ => (a, b),
            });
        let (a, b) = (a.unwrap(), b.unwrap());
        for m in [&a, &b] {
            assert_eq!(ledger.claim(m, later(60)).await, Ok(Claim::Granted));
            ledger.record_attempt(m, &row(m, 0, "retry")).await.unwrap();
        }
        assert_eq!(
            lock(&ledger.store)
                .rows
                .keys()
                .filter(|p| matches!(p, Partition::Sharded(..)))
                .count(),
            2,
            "two partitions"
        );
        let tenant = TenantId::new("tnt_a").unwrap();
        assert_eq!(ledger.history(&tenant, &a.event.id).await.unwrap().len(), 2);
        let state = ledger
            .pair_state(&tenant, &a.event.id, &b.endpoint_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((state.attempt, state.ledger), (1, wide));
        // A copy of the pair in the narrow layout is another item (the relay never makes
        // one: a pair's layout is fixed for life by its first message).
        assert!(
            ledger
                .history(&TenantId::new("tnt_b").unwrap(), &a.event.id)
                .await
                .unwrap()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn a_pair_delivered_under_a_later_claim_reads_delivered() {
        // A slow holder of attempt 1 delivers while attempt 2 holds the claim: the
        // DynamoDB reader says delivered (its `delivered_at`), whatever the claim's state.
        let ledger = InMemoryLedger::default();
        let (first, second) = (message(1), message(2));
        assert_eq!(ledger.claim(&first, later(60)).await, Ok(Claim::Granted));
        assert_eq!(ledger.claim(&second, later(60)).await, Ok(Claim::Granted));
        ledger
            .record_delivered(&first, &row(&first, 0, OUTCOME_DELIVERED))
            .await
            .unwrap();
        let states = ledger
            .pair_states(&first.event.tenant_id, &first.event.id)
            .await
            .unwrap();
        assert_eq!(states[0].attempt, 2);
        assert_eq!(states[0].state, Some(DeliveryState::Delivered));
    }

    #[tokio::test]
    async fn endpoint_log_writes_spread_over_the_log_shards() {
        let ledger = InMemoryLedger::default();
        let m = message(1);
        for _ in 0..400 {
            ledger
                .append_endpoint_log(&[row(&m, 0, "delivered"), row(&m, 0, "delivered")])
                .await
                .unwrap();
        }
        let c = ledger.counts();
        assert_eq!((c.endpoint_log_writes, c.endpoint_log_lines), (400, 800));
        // 4 shards, 100 each on average.
        assert!(
            (60..=140).contains(&c.endpoint_log_hottest_key),
            "{}",
            c.endpoint_log_hottest_key
        );
    }
}
