//! A rate limit per endpoint (`max_per_second`), enforced across every concurrent sender
//! batch: virtual scheduling, the generic cell rate algorithm (GCRA, ITU-T I.371), over
//! one shared time per endpoint, its theoretical arrival time (TAT), kept on the
//! endpoint's health record.
//!
//! - A limit of `r` per second gives slots `1/r` seconds apart ([`RateLimit::interval`]).
//!   The TAT is the end of the last slot given out. A batch that has `k` due deliveries
//!   for a limited endpoint takes `k` slots in **one conditional write**
//!   ([`SlotRequest`]): from `max(TAT, now + lead)` on ([`CLAIM_LEAD_MS`]: the time the
//!   batch needs to claim the attempts before the first POST), `TAT` moves `k` intervals
//!   later. Of concurrent batches each gets its own slots, none the same.
//! - A delivery whose slot begins within [`SEND_HORIZON_MS`] is sent by the batch, at its
//!   slot (the batch waits for it). A later one goes back on the queue holding its slot
//!   ([`RateSlot`] in the message) **without spending an attempt**, with the whole seconds
//!   of `DelaySeconds` that bring it back between [`RETURN_LEAD_MS`] and one second more
//!   before its slot ([`delay_seconds_before`]: SQS delays are whole seconds); the batch
//!   that receives it sends it at its slot, without another write. One that comes back
//!   too late to claim its attempt before its slot takes a new one ([`Returning::Lapsed`]).
//!   So a backlog costs one write per batch and one trip through the queue per delivery,
//!   not one per second of waiting.
//! - Slots are given out at most [`RESERVE_HORIZON_SECONDS`] ahead (the longest
//!   `DelaySeconds`): a burst beyond that waits unscheduled and asks again then
//!   ([`unscheduled_until`]); the TAT never runs away from now.
//!
//! Each request leaves at its slot, so a window of one second holds at most `r` of them;
//! the receiver may count one more ([`MAX_EXTRA_PER_SECOND`]) when the network's or the
//! scheduler's jitter moves a request across a window's edge. A request leaves after its
//! slot only when the claim before it took longer than the lead (the sender counts those:
//! the `RateLimitLate` metric). A slot that goes unused (a duplicate, a disabled endpoint,
//! a delivery that came back too late) is lost: the limit errs towards sending less,
//! never more.
//!
//! The limit is per real second in every deployment: local mode's time scale plays the
//! retry schedule and the failure model faster, not the receiver.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

/// Highest `max_per_second`: 1,000 requests per second. A sender batch writes the health
/// item once per limited endpoint, so at this rate in batches of 10 the item takes 100
/// writes per second, a tenth of what DynamoDB allows one item (1,000 write units per
/// second per partition). EventBridge API destinations default to at most 300.
pub const MAX_PER_SECOND: u32 = 1_000;

/// How long a batch has between taking slots and its first POST, in milliseconds: the
/// first slot a batch takes, and the slot a returning delivery must still have ahead of
/// it, are at least this far from the batch's clock. The claim of the attempt (one
/// DynamoDB write, single-digit milliseconds; a loaded local moto takes up to ~150)
/// comes between.
pub const CLAIM_LEAD_MS: i64 = 250;

/// How long before its slot a delivery holding one comes back, at least, in
/// milliseconds: its `DelaySeconds` are the whole seconds that leave this much (and up to
/// one second more), so the queue's pickup and the claim fit before the slot.
pub const RETURN_LEAD_MS: i64 = 750;

/// How far ahead a batch sends a delivery whose slot has not begun, in milliseconds: one
/// second (the resolution of `DelaySeconds`) plus [`RETURN_LEAD_MS`], so a delivery that
/// comes back for its slot is sent by the batch that receives it. A slot within this is
/// sent by the batch at its time (the batch waits at most this long for it); a later one
/// goes back on the queue.
pub const SEND_HORIZON_MS: i64 = 1_000 + RETURN_LEAD_MS;

/// How far ahead slots are given out, in seconds: 900, the longest SQS `DelaySeconds`
/// (`crate::retry::MAX_QUEUE_DELAY_SECONDS`), so a delivery holding a slot comes back with
/// one queue delay.
pub const RESERVE_HORIZON_SECONDS: i64 = crate::retry::MAX_QUEUE_DELAY_SECONDS as i64;

/// The tolerance of the limit at the receiver, in requests per one-second window: the
/// slots are exactly `1/r` apart, so `r + 1` of them span exactly one second, and the
/// POST's own timing (the sender's wake-up, the connection, the network) moves one
/// request across a window's edge as soon as two requests' latencies differ at all. The
/// tolerance is one request per window as long as no request leaves more than one
/// interval after its slot (see the `RateLimitLate` metric).
pub const MAX_EXTRA_PER_SECOND: u32 = 1;

/// Why a rate limit is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateLimitError {
    /// Outside 1..=[`MAX_PER_SECOND`].
    #[error("max_per_second {0} is outside 1..={MAX_PER_SECOND}")]
    OutOfRange(u32),
}

/// At most `per_second` requests per second to one endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    per_second: u32,
    /// How far ahead its slots are given out, in seconds: [`RESERVE_HORIZON_SECONDS`] for
    /// an endpoint's own limit, [`PACED_HORIZON_SECONDS`] for a pace its receiver taught.
    horizon_seconds: i64,
    /// For a pace, when it was set (Unix milliseconds): its slots carry it, and a slot of
    /// another pace is void even at the same rate ([`returning`]).
    epoch: Option<i64>,
}

/// How far ahead the slots of a learnt pace (`crate::pacing`) are given out, in seconds:
/// ten. A delivery that sleeps on the queue for a slot cannot be woken when the pace
/// changes, so a pace reserves only what it can change its mind about soon: ten seconds
/// after a push-back or a step up, every delivery sent follows the new pace. The others
/// wait unscheduled and come back spread over the same ten seconds.
pub const PACED_HORIZON_SECONDS: i64 = 10;

impl RateLimit {
    /// A limit of `per_second` requests per second.
    ///
    /// # Errors
    /// [`RateLimitError::OutOfRange`] outside 1..=[`MAX_PER_SECOND`].
    pub fn new(per_second: u32) -> Result<Self, RateLimitError> {
        if (1..=MAX_PER_SECOND).contains(&per_second) {
            Ok(Self {
                per_second,
                horizon_seconds: RESERVE_HORIZON_SECONDS,
                epoch: None,
            })
        } else {
            Err(RateLimitError::OutOfRange(per_second))
        }
    }

    /// The limit of a pace a receiver taught (`crate::pacing`): `per_second`, its slots
    /// given out at most [`PACED_HORIZON_SECONDS`] ahead.
    ///
    /// # Errors
    /// [`RateLimitError::OutOfRange`] outside 1..=[`MAX_PER_SECOND`].
    pub fn paced(per_second: u32) -> Result<Self, RateLimitError> {
        Ok(Self {
            horizon_seconds: PACED_HORIZON_SECONDS,
            ..Self::new(per_second)?
        })
    }

    /// The same limit, its slots marked as given under the pace set at `set_at`: a pace
    /// that changes from 3 to 2 and back to 3 a second later starts a new schedule, and
    /// the slots the first 3 gave out must not run beside it.
    #[must_use]
    pub fn with_epoch(self, set_at: DateTime<Utc>) -> Self {
        Self {
            epoch: Some(set_at.timestamp_millis()),
            ..self
        }
    }

    /// When the pace this limit is was set (Unix milliseconds); `None` for an endpoint's
    /// own limit.
    pub fn epoch(self) -> Option<i64> {
        self.epoch
    }

    /// How far ahead its slots are given out.
    pub fn horizon(self) -> Duration {
        Duration::seconds(self.horizon_seconds)
    }

    /// Over how long deliveries without a slot come back to ask again: one second for an
    /// endpoint's own limit (they come back when the horizon has room), the whole horizon
    /// for a pace (they sleep on the queue rather than ask every second).
    fn unscheduled_spread(self) -> Duration {
        if self.horizon_seconds == RESERVE_HORIZON_SECONDS {
            Duration::seconds(1)
        } else {
            self.horizon()
        }
    }

    /// Requests per second.
    pub fn per_second(self) -> u32 {
        self.per_second
    }

    /// Time between two slots: one second / `per_second`, rounded up to whole
    /// microseconds, so the slots are never closer than the limit allows.
    pub fn interval(self) -> Duration {
        Duration::microseconds(1_000_000_u64.div_ceil(u64::from(self.per_second.max(1))) as i64)
    }
}

/// The earliest slot a batch deciding at `now` can use: [`CLAIM_LEAD_MS`] later, to the
/// microsecond (what a store keeps).
pub fn earliest(now: DateTime<Utc>) -> DateTime<Utc> {
    let t = now + Duration::milliseconds(CLAIM_LEAD_MS);
    DateTime::from_timestamp_micros(t.timestamp_micros()).unwrap_or(t)
}

/// The slot a delivery holds while it waits on the queue for it: carried in its message,
/// so the sender that receives it back sends it at `at` without another write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateSlot {
    /// When it may be sent.
    pub at: DateTime<Utc>,
    /// The limit the slot was given under: when the endpoint's limit changed since, the
    /// slot is void and the delivery takes a new one ([`returning`]).
    pub per_second: u32,
    /// The pace it was given under ([`RateLimit::epoch`]), `None` for an endpoint's own
    /// limit (and in messages written before paces had epochs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<i64>,
}

/// One conditional write that takes `count` slots for a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotRequest {
    /// Slots wanted, at least 1.
    pub count: u32,
    /// Between two slots ([`RateLimit::interval`]).
    pub interval: Duration,
    /// The earliest slot the writer can use ([`earliest`] of its clock).
    pub from: DateTime<Utc>,
    /// How the TAT moves: `true` when the writer read it as at or after `from` (the
    /// endpoint is busy): `TAT += count × interval`, only while the TAT is still at or
    /// after `from` and stays within the horizon; `false` otherwise (idle, or never
    /// limited): `TAT = from + count × interval`, only while the TAT is absent or at or
    /// before `from`. Either way concurrent writers each get their own slots: a busy TAT
    /// is moved by addition, so busy writers never refuse each other while there is
    /// room.
    pub extend: bool,
    /// How far ahead of `from` the TAT may go ([`RateLimit::horizon`]).
    pub horizon: Duration,
}

impl SlotRequest {
    /// `count` intervals.
    pub fn span(&self) -> Duration {
        self.interval * i32::try_from(self.count).unwrap_or(i32::MAX)
    }

    /// Latest the TAT may be before an extending write: the write leaves it at most the
    /// limit's horizon ([`RESERVE_HORIZON_SECONDS`] or [`PACED_HORIZON_SECONDS`]) after
    /// `from`.
    pub fn ceiling(&self) -> DateTime<Utc> {
        self.from + self.horizon - self.span()
    }

    /// What a store does with this request, given the TAT it holds: the reference
    /// semantics every [`crate::health::HealthStore::reserve_slots`] implements (the
    /// DynamoDB one in one conditional `UpdateItem`). Returns the new TAT (`None`: not
    /// written) and the answer.
    pub fn apply_to(&self, tat: Option<DateTime<Utc>>) -> (Option<DateTime<Utc>>, SlotAnswer) {
        match (self.extend, tat) {
            (true, Some(t)) if t >= self.from && t <= self.ceiling() => {
                (Some(t + self.span()), SlotAnswer::Granted { first: t })
            }
            (false, None) => (
                Some(self.from + self.span()),
                SlotAnswer::Granted { first: self.from },
            ),
            (false, Some(t)) if t <= self.from => (
                Some(self.from + self.span()),
                SlotAnswer::Granted { first: self.from },
            ),
            (_, tat) => (None, SlotAnswer::Refused { tat }),
        }
    }
}

/// What a store answered a [`SlotRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotAnswer {
    /// The slots are the batch's: `first`, `first + interval`, ... (`count` of them).
    Granted {
        /// The first slot.
        first: DateTime<Utc>,
    },
    /// The TAT was not as the writer read it (another batch moved it, or there is no
    /// room): nothing written. `tat` is the TAT the store holds.
    Refused {
        /// The store's TAT.
        tat: Option<DateTime<Utc>>,
    },
}

/// Slots one batch deciding at `now` can take from a TAT read as `tat`: as many as end
/// within the horizon.
pub fn room(tat: Option<DateTime<Utc>>, limit: RateLimit, now: DateTime<Utc>) -> u32 {
    let from = earliest(now);
    let start = tat.map_or(from, |t| t.max(from));
    let free = from + limit.horizon() - start;
    let interval = limit.interval().num_microseconds().unwrap_or(1).max(1);
    let slots = free.num_microseconds().unwrap_or(0).max(0) / interval;
    u32::try_from(slots).unwrap_or(u32::MAX)
}

/// The write that takes `wanted` slots from a TAT read as `tat`, or `None` when there is
/// no room (the deliveries wait unscheduled: [`unscheduled_until`]).
pub fn request(
    tat: Option<DateTime<Utc>>,
    wanted: u32,
    limit: RateLimit,
    now: DateTime<Utc>,
) -> Option<SlotRequest> {
    let count = wanted.min(room(tat, limit, now));
    let from = earliest(now);
    (count > 0).then(|| SlotRequest {
        count,
        interval: limit.interval(),
        from,
        extend: tat.is_some_and(|t| t >= from),
        horizon: limit.horizon(),
    })
}

/// What a batch does with the `index`-th slot of its grant (`first + index × interval`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotUse {
    /// Sent by this batch at this time (it begins within [`SEND_HORIZON_MS`]).
    SendAt(DateTime<Utc>),
    /// Put back on the queue holding the slot.
    Hold(RateSlot),
}

/// The `index`-th slot from `first`, and whether the batch sends it or holds it.
pub fn slot_use(first: DateTime<Utc>, index: u32, limit: RateLimit, now: DateTime<Utc>) -> SlotUse {
    let at = first + limit.interval() * i32::try_from(index).unwrap_or(i32::MAX);
    if at < now + Duration::milliseconds(SEND_HORIZON_MS) {
        SlotUse::SendAt(at)
    } else {
        SlotUse::Hold(RateSlot {
            at,
            per_second: limit.per_second(),
            epoch: limit.epoch(),
        })
    }
}

/// The `DelaySeconds` that bring a delivery back at least [`RETURN_LEAD_MS`] before its
/// slot `at`: the whole seconds until then, rounded down, at most 900. It comes back
/// between the lead and one second more early, and the batch that receives it waits for
/// the slot; rounding up instead would bring it back late, past its slot.
pub fn delay_seconds_before(at: DateTime<Utc>, now: DateTime<Utc>) -> u32 {
    let seconds = (at - now - Duration::milliseconds(RETURN_LEAD_MS))
        .num_seconds()
        .clamp(0, RESERVE_HORIZON_SECONDS);
    u32::try_from(seconds).unwrap_or(0)
}

/// What a delivery that comes back holding `slot` does, for an endpoint whose limit is
/// now `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Returning {
    /// The endpoint has no limit any more: send it.
    Unlimited,
    /// Send it at its slot (now, or after waiting for it).
    SendAt(DateTime<Utc>),
    /// Its slot is still more than [`SEND_HORIZON_MS`] away: back on the queue, still
    /// holding it.
    Hold(RateSlot),
    /// The slot is nearer than [`CLAIM_LEAD_MS`] (or past), too near to claim the attempt
    /// before it, or was given under another limit (the endpoint's limit changed, or the
    /// pace its receiver taught, `crate::pacing`, which starts the schedule afresh): the
    /// delivery takes a new one, like one that never had a slot.
    Lapsed,
}

/// How late after its slot a POST may still leave on it: half an interval (50 ms at 10 a
/// second). While every POST leaves within this of its slot, the slots being exactly one
/// interval apart, one second at the receiver holds at most `r + 1` of them
/// ([`MAX_EXTRA_PER_SECOND`]), with the other half interval left for the network. A
/// later one takes a new slot instead (the sender's `wait_for_slot`).
pub fn late_after(limit: RateLimit) -> Duration {
    limit.interval() / 2
}

/// Decides [`Returning`] for `slot` at `now`.
pub fn returning(slot: RateSlot, limit: Option<RateLimit>, now: DateTime<Utc>) -> Returning {
    let Some(limit) = limit else {
        return Returning::Unlimited;
    };
    if slot.per_second != limit.per_second()
        || slot.epoch != limit.epoch()
        || slot.at < earliest(now)
    {
        Returning::Lapsed
    } else if slot.at >= now + Duration::milliseconds(SEND_HORIZON_MS) {
        Returning::Hold(slot)
    } else {
        Returning::SendAt(slot.at)
    }
}

/// When the `index`-th delivery a batch could not give a slot comes back to ask again:
/// when the first slot can be had by the TAT the store holds (`tat`: right away unless
/// the horizon is full), spread over the next seconds by `index` intervals and `unit`
/// (0.0..1.0, a random draw) of a second (of the whole horizon for a pace), so the
/// batch's deliveries and those of concurrent batches do not all come back in the same
/// second.
pub fn unscheduled_until(
    tat: Option<DateTime<Utc>>,
    limit: RateLimit,
    index: u32,
    unit: f64,
    now: DateTime<Utc>,
) -> DateTime<Utc> {
    let free_from = tat.map_or(now, |t| (t - limit.horizon()).max(now));
    let spread_ms = limit.unscheduled_spread().num_milliseconds() as f64;
    let spread = Duration::milliseconds((unit.clamp(0.0, 1.0) * spread_ms) as i64);
    free_from + limit.interval() * i32::try_from(index).unwrap_or(i32::MAX) + spread
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ms` milliseconds after a fixed time.
    fn t(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_764_547_200_000 + ms).unwrap()
    }

    fn ten() -> RateLimit {
        RateLimit::new(10).unwrap()
    }

    /// The lead, in milliseconds after `t(0)`.
    const L: i64 = CLAIM_LEAD_MS;

    /// The interval of ten a second, in milliseconds.
    const I: i64 = 100;

    #[test]
    fn limits_and_intervals() {
        assert_eq!(RateLimit::new(0), Err(RateLimitError::OutOfRange(0)));
        assert_eq!(RateLimit::new(1001), Err(RateLimitError::OutOfRange(1001)));
        assert_eq!(ten().interval(), Duration::milliseconds(I));
        // Rounded up: 3 per second are 333,334 µs apart, never closer.
        assert_eq!(
            RateLimit::new(3).unwrap().interval(),
            Duration::microseconds(333_334)
        );
        assert_eq!(
            RateLimit::new(MAX_PER_SECOND).unwrap().interval(),
            Duration::milliseconds(1)
        );
    }

    #[test]
    fn an_idle_endpoint_restarts_after_the_lead_and_a_busy_one_extends() {
        let r = request(None, 10, ten(), t(0)).unwrap();
        assert!(!r.extend);
        assert_eq!(r.from, t(L));
        assert_eq!(
            r.apply_to(None),
            (Some(t(L + 10 * I)), SlotAnswer::Granted { first: t(L) })
        );
        // A TAT in the past, or before the lead, is idle too.
        let r = request(Some(t(-5000)), 3, ten(), t(0)).unwrap();
        assert_eq!(
            r.apply_to(Some(t(L - 1))),
            (Some(t(L + 3 * I)), SlotAnswer::Granted { first: t(L) })
        );
        // Busy: the slots follow the TAT.
        let r = request(Some(t(1000)), 4, ten(), t(50)).unwrap();
        assert!(r.extend);
        assert_eq!(
            r.apply_to(Some(t(1000))),
            (
                Some(t(1000 + 4 * I)),
                SlotAnswer::Granted { first: t(1000) }
            )
        );
        // Another batch moved it meanwhile: extending still gives distinct slots.
        assert_eq!(
            r.apply_to(Some(t(1700))),
            (
                Some(t(1700 + 4 * I)),
                SlotAnswer::Granted { first: t(1700) }
            )
        );
    }

    #[test]
    fn a_write_made_on_a_stale_read_is_refused_with_the_stores_tat() {
        // Read idle, but another batch has just made it busy: restarting would give out
        // its slots again.
        let r = request(None, 5, ten(), t(0)).unwrap();
        assert_eq!(
            r.apply_to(Some(t(800))),
            (None, SlotAnswer::Refused { tat: Some(t(800)) })
        );
        // Read busy, but it went idle (the TAT is now nearer than the lead).
        let r = request(Some(t(L + 100)), 5, ten(), t(50)).unwrap();
        assert!(r.extend);
        let late = SlotRequest {
            from: earliest(t(200)),
            ..r
        };
        assert_eq!(
            late.apply_to(Some(t(L + 100))),
            (
                None,
                SlotAnswer::Refused {
                    tat: Some(t(L + 100))
                }
            )
        );
    }

    #[test]
    fn slots_are_given_at_most_the_horizon_ahead() {
        let now = t(0);
        let horizon = earliest(now) + Duration::seconds(RESERVE_HORIZON_SECONDS);
        assert_eq!(room(None, ten(), now), 9000);
        assert_eq!(
            room(Some(horizon - Duration::milliseconds(250)), ten(), now),
            2
        );
        assert_eq!(request(Some(horizon), 10, ten(), now), None);
        let r = request(Some(horizon - Duration::milliseconds(250)), 10, ten(), now).unwrap();
        assert_eq!(r.count, 2);
        // The store checks the same bound: a TAT that moved closer to it refuses.
        assert!(matches!(
            r.apply_to(Some(horizon - Duration::milliseconds(150))).1,
            SlotAnswer::Refused { .. }
        ));
    }

    #[test]
    fn slots_within_the_send_horizon_are_sent_later_ones_held() {
        let now = t(0);
        assert_eq!(slot_use(t(L), 0, ten(), now), SlotUse::SendAt(t(L)));
        let last_sent = (SEND_HORIZON_MS - L - 1) / I;
        let index = u32::try_from(last_sent).unwrap();
        assert_eq!(
            slot_use(t(L), index, ten(), now),
            SlotUse::SendAt(t(L + last_sent * I))
        );
        assert_eq!(
            slot_use(t(L), index + 1, ten(), now),
            SlotUse::Hold(RateSlot {
                at: t(L + (last_sent + 1) * I),
                per_second: 10,
                epoch: None,
            })
        );
        // Held: the whole seconds that bring it back at least the return lead before its
        // slot, never after it.
        assert_eq!(delay_seconds_before(t(SEND_HORIZON_MS), now), 1);
        assert_eq!(delay_seconds_before(t(RETURN_LEAD_MS + 999), now), 0);
        assert_eq!(delay_seconds_before(t(RETURN_LEAD_MS + 2999), now), 2);
        assert_eq!(delay_seconds_before(t(10_000_000), now), 900);
    }

    #[test]
    fn a_slot_of_an_earlier_pace_is_void_even_at_the_same_rate() {
        // Paced at 3 (set at t(0)), then 2, then 3 again (set at t(2000)): a delivery
        // holding a slot of the first 3 would run beside the new schedule.
        let first = RateLimit::paced(3).unwrap().with_epoch(t(0));
        let again = RateLimit::paced(3).unwrap().with_epoch(t(2000));
        let SlotUse::Hold(slot) = slot_use(t(4000), 0, first, t(0)) else {
            panic!("four seconds ahead is held");
        };
        assert_eq!(slot.epoch, Some(t(0).timestamp_millis()));
        assert_eq!(
            returning(slot, Some(first), t(3000)),
            Returning::SendAt(t(4000))
        );
        assert_eq!(returning(slot, Some(again), t(3000)), Returning::Lapsed);
        // An endpoint's own limit has no epoch: its slots stay valid.
        let own = RateLimit::new(3).unwrap();
        assert_eq!(own.epoch(), None);
        // A message written before epochs reads as none.
        let old: RateSlot =
            serde_json::from_str(r#"{"at":"2025-12-01T00:00:04Z","per_second":3}"#).unwrap();
        assert_eq!(old.epoch, None);
        assert_eq!(returning(old, Some(own), t(0)), Returning::Hold(old));
        assert_eq!(returning(old, Some(first), t(0)), Returning::Lapsed);
    }

    #[test]
    fn a_returning_delivery_keeps_its_slot_while_it_can_claim_before_it() {
        let slot = RateSlot {
            at: t(5000),
            per_second: 10,
            epoch: None,
        };
        assert_eq!(returning(slot, None, t(0)), Returning::Unlimited);
        assert_eq!(returning(slot, Some(ten()), t(3000)), Returning::Hold(slot));
        let back = 5000 - SEND_HORIZON_MS + 1;
        assert_eq!(
            returning(slot, Some(ten()), t(back)),
            Returning::SendAt(t(5000))
        );
        assert_eq!(
            returning(slot, Some(ten()), t(5000 - L)),
            Returning::SendAt(t(5000))
        );
        assert_eq!(returning(slot, Some(ten()), t(5001 - L)), Returning::Lapsed);
        assert_eq!(returning(slot, Some(ten()), t(6000)), Returning::Lapsed);
        // A changed limit voids the slot.
        assert_eq!(
            returning(slot, Some(RateLimit::new(5).unwrap()), t(back)),
            Returning::Lapsed
        );
    }

    #[test]
    fn unscheduled_deliveries_come_back_spread_when_room_is_expected() {
        let now = t(0);
        // Refused on a stale read: room right away, spread over the next second.
        assert_eq!(unscheduled_until(Some(t(900)), ten(), 0, 0.0, now), now);
        assert_eq!(
            unscheduled_until(Some(t(900)), ten(), 3, 0.5, now),
            t(3 * I + 500)
        );
        // A full horizon: when it has room again.
        let full = now + Duration::seconds(RESERVE_HORIZON_SECONDS + 20);
        assert_eq!(unscheduled_until(Some(full), ten(), 0, 0.0, now), t(20_000));
    }

    /// Concurrent batches through a store with the reference semantics, each on its own
    /// stale view of the TAT, at random times and sizes; held deliveries come back with
    /// their delay and a pickup latency of up to 1.2 s, and every claim takes up to the
    /// lead: no
    /// one-second window holds more than the limit, and no slot is given twice.
    #[test]
    fn concurrent_batches_never_exceed_the_limit() {
        use rand::{Rng, SeedableRng};
        use std::cmp::Reverse;
        let mut rng = rand::rngs::StdRng::seed_from_u64(20);
        for per_second in [1, 3, 10, 77] {
            let limit = RateLimit::new(per_second).unwrap();
            let mut store: Option<DateTime<Utc>> = None;
            let mut views: Vec<Option<DateTime<Utc>>> = vec![None; 4];
            let mut sent: Vec<DateTime<Utc>> = Vec::new();
            // Held deliveries by the time they are visible again, earliest first.
            let mut held: std::collections::BinaryHeap<Reverse<(DateTime<Utc>, DateTime<Utc>)>> =
                std::collections::BinaryHeap::new();
            let mut now = t(0);
            let claim = |rng: &mut rand::rngs::StdRng, gate: DateTime<Utc>| {
                gate + Duration::milliseconds(rng.random_range(0..=CLAIM_LEAD_MS))
            };
            for _ in 0..3000 {
                now += Duration::milliseconds(rng.random_range(0..120));
                let batch = rng.random_range(0..4);
                let mut wanted = rng.random_range(0..=10u32);
                while let Some(Reverse((visible, at))) = held.peek().copied()
                    && visible <= now
                {
                    held.pop();
                    // The queue's pickup: up to a second and more (moto's long poll).
                    let gate = now + Duration::milliseconds(rng.random_range(0..1200));
                    let slot = RateSlot {
                        at,
                        per_second,
                        epoch: None,
                    };
                    match returning(slot, Some(limit), gate) {
                        Returning::SendAt(at) => sent.push(at.max(claim(&mut rng, gate))),
                        Returning::Hold(s) => held.push(Reverse((
                            gate + Duration::seconds(i64::from(delay_seconds_before(s.at, gate))),
                            s.at,
                        ))),
                        Returning::Lapsed => wanted += 1,
                        Returning::Unlimited => unreachable!(),
                    }
                }
                let Some(req) = request(views[batch], wanted, limit, now) else {
                    continue;
                };
                let (written, answer) = req.apply_to(store);
                store = written.or(store);
                match answer {
                    SlotAnswer::Granted { first } => {
                        views[batch] = Some(first + req.span());
                        let ready = claim(&mut rng, now);
                        for i in 0..req.count {
                            match slot_use(first, i, limit, now) {
                                SlotUse::SendAt(at) => sent.push(at.max(ready)),
                                SlotUse::Hold(s) => {
                                    // Put back once the batch's admissions are decided.
                                    let visible = now
                                        + Duration::seconds(i64::from(delay_seconds_before(
                                            s.at, now,
                                        )));
                                    let lead = Duration::milliseconds(RETURN_LEAD_MS);
                                    assert!(visible <= s.at - lead);
                                    held.push(Reverse((visible, s.at)));
                                }
                            }
                        }
                    }
                    SlotAnswer::Refused { tat } => views[batch] = tat,
                }
            }
            sent.sort();
            assert!(sent.len() > 50, "{per_second}/s: {} sent", sent.len());
            // The busiest window starts at a request: count forward from each.
            let mut end = 0;
            let mut most = 0;
            for (i, start) in sent.iter().enumerate() {
                while end < sent.len() && sent[end] < *start + Duration::seconds(1) {
                    end += 1;
                }
                most = most.max(end - i);
            }
            assert!(
                most <= per_second as usize,
                "{per_second}/s: {most} in one second"
            );
        }
    }
}
