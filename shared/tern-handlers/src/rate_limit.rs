//! The sender's side of the per-endpoint rate limit (`tern_core::rate_limit`): one more
//! admission of the endpoint's gate. The limit is the endpoint's own (`max_per_second`)
//! or the pace its receiver taught by pushing back (`tern_core::pacing`), whichever is
//! lower. Before a batch's POSTs, after the circuit breaker's
//! gate ([`crate::health`]), each limited endpoint whose gate lets deliveries through
//! takes the slots they need in one conditional write of its health item; an unlimited
//! endpoint, or a batch whose deliveries to it all hold slots already, writes nothing.
//! Then each delivery is sent at its slot (the batch waits for it, at most a second), or
//! goes back on the queue holding its slot, or, without one (no room, a write refused on
//! a stale read, the table unavailable), goes back to ask again in the next seconds. None
//! of these spends an attempt.
//!
//! Unlike the breaker, the limit fails closed: when the health table cannot be written, a
//! limited endpoint's deliveries wait a few seconds rather than go out unaccounted (the
//! ledger, on the same service, could not claim them either).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};

use chrono::{DateTime, Utc};
use tern_core::DeliveryMessage;
use tern_core::decision::deferred_until;
use tern_core::pacing::effective_limit;
use tern_core::ports::EndpointStore;
use tern_core::rate_limit::{
    RateLimit, RateSlot, Returning, SlotAnswer, SlotUse, returning, slot_use, unscheduled_until,
};

use crate::health::{Admission, BatchGate, CircuitBreaker, EndpointKey};

/// How long a limited endpoint's deliveries wait when its slots could not be taken (the
/// health table did not answer in time), in seconds: they come back spread over this.
pub const UNAVAILABLE_SPREAD_SECONDS: u64 = 5;

/// What one batch got from a limited endpoint's schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// Slots `first`, `first + interval`, ... (`count` of them), this batch's alone.
    Slots {
        /// The first slot.
        first: DateTime<Utc>,
        /// How many.
        count: u32,
    },
    /// None: the schedule was full, or not as this instance read it (`tat`: the
    /// schedule's end as the store holds it, or as last read).
    Refused {
        /// The end of the schedule.
        tat: Option<DateTime<Utc>>,
    },
    /// None: the health table could not be written or read in time.
    Unavailable,
    /// None was asked for: every delivery of the batch to it holds a slot already.
    NotNeeded,
}

/// The rate limit's part of one endpoint's gate for one batch.
#[derive(Debug)]
pub struct RateGate {
    limit: RateLimit,
    /// The batch's clock when the gate was decided: a delivery's slot is judged against
    /// it both when counting what to ask for and when handing slots out.
    now: DateTime<Utc>,
    grant: Grant,
    /// Slots of the grant handed out so far.
    next: AtomicU32,
    /// Deliveries that got none so far.
    without: AtomicU32,
}

/// The decision for one delivery the breaker lets through, on a limited endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateAdmission {
    /// Send at this time (now, or after waiting for its slot).
    SendAt(DateTime<Utc>),
    /// Back on the queue holding this slot.
    Hold(RateSlot),
    /// Back on the queue without a slot, to ask again after this time.
    Unscheduled(DateTime<Utc>),
}

/// Whether `message` needs a new slot of `limit` at `now`: it holds none, or holds one
/// that lapsed ([`returning`]).
pub fn needs_slot(message: &DeliveryMessage, limit: RateLimit, now: DateTime<Utc>) -> bool {
    message
        .rate_slot
        .is_none_or(|slot| returning(slot, Some(limit), now) == Returning::Lapsed)
}

impl RateGate {
    /// A gate over `grant` for `limit`, decided at `now`.
    pub fn new(limit: RateLimit, grant: Grant, now: DateTime<Utc>) -> Self {
        Self {
            limit,
            now,
            grant,
            next: AtomicU32::new(0),
            without: AtomicU32::new(0),
        }
    }

    /// The limit its slots are spaced by: the endpoint's own, or its learnt pace.
    pub fn limit(&self) -> RateLimit {
        self.limit
    }

    /// What the batch got.
    pub fn grant(&self) -> Grant {
        self.grant
    }

    /// The decision for the next delivery of this endpoint the breaker lets through. A
    /// delivery that holds a valid slot keeps it; any other takes the next slot of the
    /// grant, or goes back without one.
    pub fn admit(&self, message: &DeliveryMessage) -> RateAdmission {
        if let Some(slot) = message.rate_slot {
            match returning(slot, Some(self.limit), self.now) {
                Returning::SendAt(at) => return RateAdmission::SendAt(at),
                Returning::Hold(slot) => return RateAdmission::Hold(slot),
                Returning::Lapsed | Returning::Unlimited => {}
            }
        }
        if let Grant::Slots { first, count } = self.grant {
            let index = self.next.fetch_add(1, Ordering::SeqCst);
            if index < count {
                return match slot_use(first, index, self.limit, self.now) {
                    SlotUse::SendAt(at) => RateAdmission::SendAt(at),
                    SlotUse::Hold(slot) => RateAdmission::Hold(slot),
                };
            }
        }
        let index = self.without.fetch_add(1, Ordering::SeqCst);
        let unit: f64 = rand::random();
        RateAdmission::Unscheduled(match self.grant {
            Grant::Unavailable => deferred_until(
                self.now,
                std::time::Duration::from_secs(UNAVAILABLE_SPREAD_SECONDS),
                unit,
            ),
            Grant::Refused { tat } => unscheduled_until(tat, self.limit, index, unit, self.now),
            // More deliveries than slots (the schedule's horizon capped the grant): ask
            // again when the horizon has room past the grant's end.
            Grant::Slots { first, count } => {
                let end = first + self.limit.interval() * i32::try_from(count).unwrap_or(0);
                unscheduled_until(Some(end), self.limit, index, unit, self.now)
            }
            Grant::NotNeeded => unscheduled_until(None, self.limit, index, unit, self.now),
        })
    }
}

/// One endpoint's gate for one batch: the breaker's, and for a limited endpoint the rate
/// limit's.
#[derive(Debug)]
pub struct EndpointGate {
    /// The circuit and pause.
    pub breaker: BatchGate,
    /// The rate limit; `None` for an unlimited endpoint (or when the breaker sends
    /// nothing anyway).
    pub rate: Option<RateGate>,
    /// False when the endpoint's limit could not be read for the gate: the sender reads
    /// it again before claiming a delivery, and one found limited waits a few seconds
    /// instead of going out without a slot.
    pub limit_known: bool,
}

/// The decision for one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// Send it: at `at` when it holds a rate-limit slot (wait until then), as the open
    /// circuit's probe when `probe`.
    Send {
        /// Its slot.
        at: Option<DateTime<Utc>>,
        /// The open circuit's probe.
        probe: bool,
    },
    /// Back on the queue until after `until`, without spending an attempt.
    Defer {
        /// When it comes back.
        until: DateTime<Utc>,
        /// Held back by the rate limit (else by the circuit or a pause).
        by_rate_limit: bool,
    },
    /// Back on the queue holding this rate-limit slot, without spending an attempt.
    Hold(RateSlot),
}

impl EndpointGate {
    /// The decision for the next delivery of this endpoint in the batch.
    pub fn admit(&self, message: &DeliveryMessage) -> Pass {
        let probe = match self.breaker.admit() {
            Admission::Defer(until) => {
                return Pass::Defer {
                    until,
                    by_rate_limit: false,
                };
            }
            Admission::Probe => true,
            Admission::Send => false,
        };
        match &self.rate {
            None => Pass::Send { at: None, probe },
            Some(rate) => match rate.admit(message) {
                RateAdmission::SendAt(at) => Pass::Send {
                    at: Some(at),
                    probe,
                },
                RateAdmission::Hold(slot) => Pass::Hold(slot),
                RateAdmission::Unscheduled(until) => Pass::Defer {
                    until,
                    by_rate_limit: true,
                },
            },
        }
    }
}

/// The gates of every endpoint a batch touches: the breaker's ([`CircuitBreaker::gates`]),
/// then, for each limited endpoint it lets deliveries through to, the slots those
/// deliveries need: all of them when the circuit is closed, one for a probe or a paced
/// resume. `due` are the batch's deliveries due now (those not due are put back before
/// any gate is asked).
pub async fn gates(
    breaker: &CircuitBreaker,
    endpoints: &dyn EndpointStore,
    keys: Vec<EndpointKey>,
    due: &[&DeliveryMessage],
) -> HashMap<EndpointKey, EndpointGate> {
    let breaker_gates = breaker.gates(keys).await;
    let now = Utc::now();
    let work = breaker_gates.into_iter().map(|(key, gate)| async move {
        let sends = match &gate {
            BatchGate::Send => None,
            BatchGate::Probe { .. } => Some(1),
            // Held back whole: no slot is needed.
            BatchGate::Wait { .. } => {
                return (
                    key,
                    EndpointGate {
                        breaker: gate,
                        rate: None,
                        limit_known: true,
                    },
                );
            }
        };
        // The endpoint's own limit, or the pace its receiver taught when that is lower
        // (tern_core::pacing): one schedule either way.
        let pace = breaker.cached_pace(&key);
        let limit = match crate::health::within_gate_deadline(
            breaker.gate_deadline(),
            endpoints.get(&key.0, &key.1),
            "endpoint read",
        )
        .await
        {
            Ok(endpoint) => Ok(effective_limit(
                endpoint.and_then(|e| e.rate_limit().ok().flatten()),
                pace,
            )),
            Err(e) => Err(e),
        };
        let (rate, limit_known) = match limit {
            Ok(Some(limit)) => {
                let mine = due
                    .iter()
                    .filter(|m| m.event.tenant_id == key.0 && m.endpoint_id == key.1);
                let wanted = match sends {
                    // One is sent: it needs a slot unless it holds one (the breaker
                    // decides which is sent, so ask for one whenever any needs one).
                    Some(n) => u32::from(mine.clone().any(|m| needs_slot(m, limit, now))).min(n),
                    None => u32::try_from(mine.filter(|m| needs_slot(m, limit, now)).count())
                        .unwrap_or(u32::MAX),
                };
                let grant = if wanted == 0 {
                    Grant::NotNeeded
                } else {
                    breaker.take_slots(&key, limit, wanted, now).await
                };
                (Some(RateGate::new(limit, grant, now)), true)
            }
            Ok(None) => (None, true),
            Err(e) => {
                tracing::warn!(error = %e, endpoint_id = %key.1, "endpoint not read for its rate limit; a limited one's deliveries wait");
                (None, false)
            }
        };
        (
            key,
            EndpointGate {
                breaker: gate,
                rate,
                limit_known,
            },
        )
    });
    futures::future::join_all(work).await.into_iter().collect()
}

impl CircuitBreaker {
    /// Takes up to `wanted` slots of `limit` for `key` at `now` from the endpoint's
    /// schedule on its health item: at most one conditional write
    /// ([`tern_core::rate_limit::request`]), none when the schedule has no room by this
    /// instance's last read of it. The write is bounded by
    /// the breaker's gate deadline ([`crate::health::HEALTH_GATE_DEADLINE_MS`]); a failed or late one is
    /// [`Grant::Unavailable`].
    pub async fn take_slots(
        &self,
        key: &EndpointKey,
        limit: RateLimit,
        wanted: u32,
        now: DateTime<Utc>,
    ) -> Grant {
        let seen = self.cached_tat(key);
        // The lead learnt from late deliveries: slots that lie ahead of this instance's
        // own delays are kept, slots that lie behind them would go out late, together.
        let now = now + self.slot_lead();
        let Some(request) = tern_core::rate_limit::request(seen, wanted, limit, now) else {
            return Grant::Refused { tat: seen };
        };
        let write = self.store().reserve_slots(&key.0, &key.1, &request);
        match crate::health::within_gate_deadline(self.gate_deadline(), write, "rate-limit slots")
            .await
        {
            Ok(SlotAnswer::Granted { first }) => {
                self.remember_tat(key, Some(first + request.span()));
                Grant::Slots {
                    first,
                    count: request.count,
                }
            }
            Ok(SlotAnswer::Refused { tat }) => {
                // Another batch moved the schedule since this instance read it: the
                // deliveries ask again in a moment, on the store's value.
                self.remember_tat(key, tat);
                Grant::Refused { tat }
            }
            Err(e) => {
                tracing::warn!(error = %e, endpoint_id = %key.1, "rate-limit slots not taken; the deliveries wait");
                Grant::Unavailable
            }
        }
    }

    /// The lead this instance adds to [`tern_core::rate_limit::CLAIM_LEAD_MS`] when it
    /// takes slots (0 until a delivery reached its slot late).
    pub fn slot_lead(&self) -> chrono::Duration {
        chrono::Duration::milliseconds(self.slot_lead_ms.load(Ordering::Relaxed))
    }

    /// A delivery reached its slot `late` after it (past
    /// [`tern_core::rate_limit::late_after`]): the slots this instance takes from now on
    /// lie that much further ahead, plus [`SLOT_LEAD_MARGIN_MS`], at most
    /// [`MAX_SLOT_LEAD_MS`].
    pub fn learn_lateness(&self, late: chrono::Duration) {
        let want = (late.num_milliseconds() + SLOT_LEAD_MARGIN_MS).clamp(0, MAX_SLOT_LEAD_MS);
        self.slot_lead_ms.fetch_max(want, Ordering::Relaxed);
    }

    /// A delivery reached its slot on time: the learnt lead shrinks by an eighth, so it
    /// follows the table's delays down again.
    pub fn relax_slot_lead(&self) {
        let _ = self
            .slot_lead_ms
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |ms| {
                (ms > 0).then_some(ms - (ms + 7) / 8)
            });
    }
}

/// Margin over a late delivery's lateness when the lead is learnt, in milliseconds.
pub const SLOT_LEAD_MARGIN_MS: i64 = 100;

/// Most lead learnt, in milliseconds: a first slot this far ahead (plus
/// [`tern_core::rate_limit::CLAIM_LEAD_MS`]) still lies within
/// [`tern_core::rate_limit::SEND_HORIZON_MS`], so the batch sends it rather than putting
/// it back on the queue.
pub const MAX_SLOT_LEAD_MS: i64 = 1_000;

#[cfg(test)]
mod tests {
    use super::*;
    use tern_core::{EndpointId, Event, EventId, EventType, Payload, TenantId};

    fn t(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_764_547_200_000 + ms).unwrap()
    }

    fn message() -> DeliveryMessage {
        let event = Event {
            id: EventId::generate(),
            event_type: EventType::new("order.paid").unwrap(),
            tenant_id: TenantId::new("tnt_a").unwrap(),
            created_at: t(0),
            payload: Payload::parse("{}", 10).unwrap(),
            trace: None,
        };
        DeliveryMessage::first(event, EndpointId::new("ep_1").unwrap())
    }

    fn ten() -> RateLimit {
        RateLimit::new(10).unwrap()
    }

    #[test]
    fn a_grant_is_handed_out_slot_by_slot_then_the_rest_waits_unscheduled() {
        // Fifteen slots from 0.5 s, 100 ms apart: those before the send horizon (1.75 s)
        // are sent at their time, the later ones held, the sixteenth delivery gets none.
        let gate = RateGate::new(
            ten(),
            Grant::Slots {
                first: t(500),
                count: 15,
            },
            t(0),
        );
        let m = message();
        let got: Vec<RateAdmission> = (0..16).map(|_| gate.admit(&m)).collect();
        assert_eq!(got[0], RateAdmission::SendAt(t(500)));
        assert_eq!(got[12], RateAdmission::SendAt(t(1700)));
        assert_eq!(
            got[13],
            RateAdmission::Hold(RateSlot {
                at: t(1800),
                per_second: 10,
                epoch: None,
            })
        );
        assert_eq!(
            got[14],
            RateAdmission::Hold(RateSlot {
                at: t(1900),
                per_second: 10,
                epoch: None,
            })
        );
        // The sixteenth got no slot: the schedule has room (its end is not 900 s ahead),
        // so it asks again within the next second, spread by a random draw.
        match got[15] {
            RateAdmission::Unscheduled(until) => {
                assert!(until >= t(0) && until <= t(1000), "{until}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_held_slot_is_kept_and_a_lapsed_one_takes_a_new_slot() {
        let gate = RateGate::new(
            ten(),
            Grant::Slots {
                first: t(0),
                count: 1,
            },
            t(0),
        );
        let mut held = message();
        held.rate_slot = Some(RateSlot {
            at: t(300),
            per_second: 10,
            epoch: None,
        });
        assert!(!needs_slot(&held, ten(), t(0)));
        assert_eq!(gate.admit(&held), RateAdmission::SendAt(t(300)));
        let mut lapsed = message();
        lapsed.rate_slot = Some(RateSlot {
            at: t(-500),
            per_second: 10,
            epoch: None,
        });
        assert!(needs_slot(&lapsed, ten(), t(0)));
        assert_eq!(gate.admit(&lapsed), RateAdmission::SendAt(t(0)));
    }

    #[test]
    fn without_the_table_a_limited_endpoint_waits_seconds_not_forever() {
        let gate = RateGate::new(ten(), Grant::Unavailable, t(0));
        match gate.admit(&message()) {
            RateAdmission::Unscheduled(until) => {
                assert!(until > t(0) && until <= t(5250), "{until}");
            }
            other => panic!("{other:?}"),
        }
    }
}
