//! Write sharding: how the keys that one fan-out, one endpoint or one tenant writes at a
//! rate that grows with its traffic are spread over several DynamoDB partition keys.
//!
//! DynamoDB gives one partition key (of a table or of an index) at most 1,000 write units
//! and 3,000 read units a second, and adaptive capacity never lifts that ("Best practices
//! for designing and using partition keys effectively", DynamoDB developer guide). The
//! rule (`DESIGN.md` §11): no such key may pass half of it (500 write units a second) at
//! the target of 10,000 deliveries a second. The shard functions here are pure and stable
//! across builds and platforms (FNV-1a, 32 bit), so a writer and a reader of different
//! versions agree on where an item lives.
//!
//! | key | written per | shards | at the target |
//! | --- | --- | --- | --- |
//! | a pair's ledger items ([`pair_shard`]) | delivery (claim + delivered: 2 units) | [`PAIR_SHARDS`] = 64 per event of [`SHARDED_FANOUT_MIN`] endpoints or more, else 1 | one event delivered at the whole target (10,000 a second) writes 20,000 units a second, ~313 per shard |
//! | an endpoint's log items ([`log_shard`]) | endpoint per batch (1 unit) | [`LOG_SHARDS`] = 4 | a hot endpoint at 2,000/s in mixed batches: 893 units/s, 223 per shard |
//! | an endpoint's waiting entries ([`waiting_shard`]) | retry or hold (1 index unit each way) | [`WAITING_SHARDS`] = 16 | 2,000 retries/s of one endpoint: 4,000 index writes/s, 250 per shard |

use serde::{Deserialize, Serialize};

use crate::ids::{EndpointId, EventId};

/// FNV-1a (32 bit) of `bytes`: stable, fast, and good enough to spread ids (tested below
/// on sequential and random ids).
pub fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in bytes {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    // FNV's low bits mix less than its high ones: fold the high half in before a modulo
    // by a small power of two takes the low bits.
    hash ^ (hash >> 16)
}

/// Where the delivery ledger keeps a pair's items (its state item, its attempt rows, its
/// duplicate row), fixed for the pair's whole life by the delivery message that carries it
/// ([`crate::DeliveryMessage::ledger_layout`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LedgerLayout {
    /// Message version 1: every pair of an event under the event id alone (shared by every
    /// tenant's event with that id): one partition per event, 500 deliveries a second.
    #[default]
    Unsharded,
    /// Message version 2: under `<tenant>#<event>#<shard>`, a tenant's event its own.
    Sharded {
        /// Partitions the event's pairs spread over: 1 for a fan-out under
        /// [`SHARDED_FANOUT_MIN`] endpoints (shard 0), [`PAIR_SHARDS`] from there (shard
        /// [`pair_shard`] of the endpoint). The relay decides, once per event.
        shards: u32,
    },
}

impl LedgerLayout {
    /// The layout of an event fanned out to `subscribed` endpoints by this build.
    pub fn for_fan_out(subscribed: usize) -> Self {
        Self::Sharded {
            shards: if subscribed >= SHARDED_FANOUT_MIN {
                PAIR_SHARDS
            } else {
                1
            },
        }
    }

    /// The shard of `endpoint`'s pair in this layout; `None` when unsharded.
    pub fn shard_of(self, endpoint: &EndpointId) -> Option<u32> {
        match self {
            Self::Unsharded => None,
            Self::Sharded { shards } if shards > 1 => Some(pair_shard_of(endpoint, shards)),
            Self::Sharded { .. } => Some(0),
        }
    }
}

/// Partitions of one event's pairs in the sharded layout when it has at least
/// [`SHARDED_FANOUT_MIN`] subscribed endpoints: 64. An event fanned out to many endpoints
/// is delivered as fast as the senders go: at the target, 10,000 deliveries a second of one
/// event (a 5,000-endpoint fan-out takes half a second with 300 concurrent batches of 10),
/// 2 units a pair (claim, delivered), 20,000 units a second: about 313 per partition, the
/// most loaded of the 64 under 480 (114 pairs of 5,000 sequential ids: tested below),
/// under half of a partition's 1,000. The scale meter measured the 32 of before at 708
/// units a second on the most loaded (`make bench-scale`, 2026-12-07; 32 was sized for a
/// fan-out spread over a whole second). A reader of such an event's history queries all 64.
pub const PAIR_SHARDS: u32 = 64;

/// The spread of events fanned out by builds before [`PAIR_SHARDS`] was 64: their
/// messages and fan-out records say 32, and every build since reads and writes such a
/// pair where they put it ([`LedgerLayout::shard_of`]).
pub const EARLIER_PAIR_SHARDS: u32 = 32;

/// True for a spread width some build wrote for an event of [`SHARDED_FANOUT_MIN`]
/// endpoints or more: [`PAIR_SHARDS`] or [`EARLIER_PAIR_SHARDS`].
pub fn is_pair_spread(shards: u32) -> bool {
    shards == PAIR_SHARDS || shards == EARLIER_PAIR_SHARDS
}

/// Fewest subscribed endpoints for which an event's pairs are spread over
/// [`PAIR_SHARDS`] partitions: 50 (the relay's fan-out checkpoint threshold,
/// [`crate::fanout::CHECKPOINT_MIN_FANOUT`], where it already reads one item per event; it
/// then records the spread there for readers). A smaller fan-out writes at most 98 units
/// (49 pairs), all in one partition, under half of one partition's second whatever its
/// speed; and a reader of its history queries one partition, not 32.
pub const SHARDED_FANOUT_MIN: usize = crate::fanout::CHECKPOINT_MIN_FANOUT;

/// The shard (0..[`PAIR_SHARDS`]) of the pair of `endpoint` in an event spread by this
/// build: by the endpoint alone, so all of one pair's items live in one partition (its
/// claim and delivered marker are conditional writes on one item) and a reader that knows
/// the pair reads one partition.
pub fn pair_shard(endpoint: &EndpointId) -> u32 {
    pair_shard_of(endpoint, PAIR_SHARDS)
}

/// The shard (0..`shards`) of the pair of `endpoint` in an event spread over `shards`
/// partitions (an earlier build's [`EARLIER_PAIR_SHARDS`], or [`PAIR_SHARDS`]).
pub fn pair_shard_of(endpoint: &EndpointId, shards: u32) -> u32 {
    fnv1a(endpoint.as_str().bytes()) % shards.max(1)
}

/// Partitions of one endpoint's log: 4. A hot endpoint taking 2,000 of 10,000 deliveries
/// a second in mixed batches writes 893 log items a second (one per batch that holds one
/// of its deliveries), 223 per partition; 457 in a burst of twice that.
pub const LOG_SHARDS: u32 = 4;

/// The shard (0..[`LOG_SHARDS`]) of an endpoint log item: by its unique id (a UUID), so
/// the batches spread evenly whatever their endpoints.
pub fn log_shard(item_id: &str) -> u32 {
    fnv1a(item_id.bytes()) % LOG_SHARDS
}

/// Partitions of one endpoint's entries in the waiting index: 16. An endpoint taking 2,000
/// deliveries a second that all fail (its circuit still closed) lists and unlists each:
/// 4,000 index writes a second, 250 per partition. The scale meter measured 8 at 649
/// units a second on the most loaded (a hot endpoint answering `429`, `make bench-scale`
/// 2026-12-07): entries are bigger than one unit's worth of key. Readers query every
/// shard, so entries an earlier build put in shards 0-7 are found.
pub const WAITING_SHARDS: u32 = 16;

/// The shard (0..[`WAITING_SHARDS`]) of `event`'s entry in its endpoint's waiting list: by
/// the event, so one endpoint's many waiting deliveries spread.
pub fn waiting_shard(event: &EventId) -> u32 {
    fnv1a(event.as_str().bytes()) % WAITING_SHARDS
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The most and fewest of `ids` that land in one of `shards` shards.
    fn extremes(ids: impl Iterator<Item = u32>, shards: u32) -> (usize, usize) {
        let mut counts = vec![0usize; shards as usize];
        for s in ids {
            counts[s as usize] += 1;
        }
        (*counts.iter().max().unwrap(), *counts.iter().min().unwrap())
    }

    /// Endpoint ids as Tern makes them (`ep_` and a UUIDv7: time-ordered, so they share
    /// their first characters), made deterministic here.
    fn generated_ids(n: usize) -> Vec<EndpointId> {
        (0..n)
            .map(|i| {
                let ms = 0x0193_0000_0000_u64 + i as u64 * 7;
                let rand = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                EndpointId::new(format!(
                    "ep_{:08x}{:04x}7{:03x}8{:015x}",
                    ms >> 16,
                    ms & 0xffff,
                    rand & 0xfff,
                    rand >> 4 & 0x0fff_ffff_ffff_ffff
                ))
                .unwrap()
            })
            .collect()
    }

    #[test]
    fn shards_are_stable() {
        // Pinned: a change here moves every pair's items, and readers of a deployed
        // ledger would no longer find them.
        let ep = EndpointId::new("ep_1").unwrap();
        assert_eq!(
            pair_shard(&ep),
            pair_shard(&EndpointId::new("ep_1").unwrap())
        );
        // FNV-1a of "ep_1" is 0x36b4_a2e4 (computed independently), folded.
        assert_eq!(fnv1a(*b"ep_1"), 0x36b4_a2e4 ^ (0x36b4_a2e4 >> 16));
        assert_eq!(pair_shard(&ep), 16);
        // The waiting shard may move between builds (readers query every shard): 0 of 8
        // before, 8 of 16 now.
        assert_eq!(waiting_shard(&EventId::new("evt_1").unwrap()), 8);
        assert_eq!(log_shard("0190f3a2b4c47d8e9f0a1b2c3d4e5f60"), 2);
    }

    #[test]
    fn a_big_fan_out_spreads_over_the_pair_shards() {
        // 5,000 endpoints over 64 shards: 78 on average; a uniform hash keeps every
        // shard within about 4 standard deviations (8.8): 114 at most for sequential ids.
        for ids in [
            generated_ids(5_000),
            (0..5_000)
                .map(|i| EndpointId::new(format!("ep_{i}")).unwrap())
                .collect(),
        ] {
            let (most, fewest) = extremes(ids.iter().map(pair_shard), PAIR_SHARDS);
            assert!(most <= 120, "most loaded shard holds {most} of 5,000");
            assert!(fewest >= 47, "least loaded shard holds {fewest} of 5,000");
            // Delivered at the whole target (10,000 a second: the 5,000 in half a second),
            // 2 units a pair (claim, delivered): under half a partition's 1,000 a second.
            assert!(most * 2 * 2 < 500, "{most} pairs a half second");
        }
    }

    #[test]
    fn events_spread_by_an_earlier_build_keep_their_places() {
        let ids = generated_ids(2_000);
        for ep in &ids {
            let earlier = LedgerLayout::Sharded {
                shards: EARLIER_PAIR_SHARDS,
            };
            assert_eq!(earlier.shard_of(ep), Some(pair_shard_of(ep, 32)));
            assert!(earlier.shard_of(ep) < Some(32));
            // Widening keeps the low bits: a pair's 64-shard is its 32-shard or 32 more.
            assert_eq!(pair_shard(ep) % 32, pair_shard_of(ep, 32));
        }
        assert!(is_pair_spread(32) && is_pair_spread(64));
        assert!(!is_pair_spread(1) && !is_pair_spread(16) && !is_pair_spread(128));
    }

    #[test]
    fn small_fan_outs_keep_one_partition_and_big_ones_spread() {
        let ep = EndpointId::new("ep_1").unwrap();
        assert_eq!(
            LedgerLayout::for_fan_out(1),
            LedgerLayout::Sharded { shards: 1 }
        );
        assert_eq!(LedgerLayout::for_fan_out(49).shard_of(&ep), Some(0));
        assert_eq!(
            LedgerLayout::for_fan_out(50),
            LedgerLayout::Sharded {
                shards: PAIR_SHARDS
            }
        );
        assert_eq!(
            LedgerLayout::for_fan_out(5_000).shard_of(&ep),
            Some(pair_shard(&ep))
        );
        assert_eq!(LedgerLayout::Unsharded.shard_of(&ep), None);
    }

    // 49 pairs in one partition (2 units each): under half a partition's second however
    // fast they go. Checked when the build compiles.
    const _: () = assert!((SHARDED_FANOUT_MIN - 1) * 2 < 500);

    #[test]
    fn log_items_and_waiting_entries_spread() {
        let (most, fewest) = extremes(
            (0..4_000u64)
                .map(|i| log_shard(&format!("{:032x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15)))),
            LOG_SHARDS,
        );
        assert!(
            (900..=1_100).contains(&fewest) && most <= 1_100,
            "{fewest}..{most}"
        );
        let (most, fewest) = extremes(
            (0..16_000).map(|i| waiting_shard(&EventId::new(format!("evt_{i}")).unwrap())),
            WAITING_SHARDS,
        );
        assert!(fewest >= 900 && most <= 1_100, "{fewest}..{most}");
    }
}
