//! The partition keys of the delivery ledger's pair items in the attempts table, in each
//! layout ([`LedgerLayout`]): the `event_id` attribute (the table's partition key) of a
//! pair's state item, attempt rows and duplicate row.
//!
//! | layout | `event_id` | written by |
//! | --- | --- | --- |
//! | [`LedgerLayout::Unsharded`] | `<event id>` | version 1 messages (before the upgrade, and every message derived from one) |
//! | [`LedgerLayout::Sharded`] | `ev#<tenant id>#<event id>#<shard, 2 digits>`: shard 0 for an event of fewer than [`tern_core::spread::SHARDED_FANOUT_MIN`] endpoints, else [`tern_core::spread::pair_shard`] of the endpoint (0..32) | version 2 messages |
//!
//! Which of the two spreads an event has is recorded by the relay on the event's fan-out
//! checkpoint item (`crate::fanout`, in the unsharded partition) before it sends any of
//! its messages; a reader of the event reads that item first.
//!
//! Ids hold only `[A-Za-z0-9_-]`, so `#` splits them, and the first segment tells every
//! partition of the table apart: a bare event id (no `#`), `ev#` (a sharded pair
//! partition), `dl#` (the dead-letter record, `crate::dead_letters`), `log#` (the endpoint
//! log, `crate::endpoint_log`). Sort keys are the same in both layouts (`state#<endpoint>`,
//! `attempt#<endpoint>#…`).

use aws_sdk_dynamodb::types::AttributeValue;
use tern_core::spread::LedgerLayout;
use tern_core::{DeliveryMessage, EndpointId, EventId, TenantId};

/// First segment of a sharded pair partition.
pub const SHARDED_PREFIX: &str = "ev#";

/// The partition of `tenant`'s `event` shard `shard` in the sharded layout.
pub fn sharded_partition(tenant: &TenantId, event: &EventId, shard: u32) -> String {
    format!("{SHARDED_PREFIX}{tenant}#{event}#{shard:02}")
}

/// The partition holding the items of the pair (`tenant`'s `event`, `endpoint`) in
/// `layout`.
pub fn pair_partition(
    layout: LedgerLayout,
    tenant: &TenantId,
    event: &EventId,
    endpoint: &EndpointId,
) -> String {
    match layout.shard_of(endpoint) {
        None => event.to_string(),
        Some(shard) => sharded_partition(tenant, event, shard),
    }
}

/// The partition of `message`'s pair, in the layout its version fixes.
pub fn message_partition(message: &DeliveryMessage) -> String {
    pair_partition(
        message.ledger_layout(),
        &message.event.tenant_id,
        &message.event.id,
        &message.endpoint_id,
    )
}

/// The sharded partitions of `tenant`'s `event` spread over `shards` (1 or 32).
pub fn sharded_partitions(tenant: &TenantId, event: &EventId, shards: u32) -> Vec<String> {
    (0..shards.max(1))
        .map(|s| sharded_partition(tenant, event, s))
        .collect()
}

/// The tenant (sharded layout only) and event id of a pair partition's `event_id` value
/// (what an index entry of the waiting list carries); `None` for a partition that is not a
/// pair's (the dead-letter record, the endpoint log) or does not parse.
pub fn parse_partition(value: &str) -> Option<(Option<TenantId>, EventId)> {
    match value.strip_prefix(SHARDED_PREFIX) {
        Some(rest) => {
            let (tenant, rest) = rest.split_once('#')?;
            let (event, shard) = rest.split_once('#')?;
            shard
                .parse::<u32>()
                .ok()
                .filter(|s| *s < tern_core::spread::PAIR_SHARDS && shard.len() == 2)?;
            Some((Some(TenantId::new(tenant).ok()?), EventId::new(event).ok()?))
        }
        None => Some((None, EventId::new(value).ok()?)),
    }
}

/// `value` as a string attribute.
pub fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_round_trip_and_never_meet_the_other_item_kinds() {
        use tern_core::spread::{PAIR_SHARDS, pair_shard};
        let t = TenantId::new("tnt_a").unwrap();
        let e = EventId::new("evt_1").unwrap();
        let ep = EndpointId::new("ep_1").unwrap();
        let wide = LedgerLayout::Sharded {
            shards: PAIR_SHARDS,
        };
        let sharded = pair_partition(wide, &t, &e, &ep);
        assert_eq!(sharded, format!("ev#tnt_a#evt_1#{:02}", pair_shard(&ep)));
        assert_eq!(
            parse_partition(&sharded),
            Some((Some(t.clone()), e.clone()))
        );
        let narrow = LedgerLayout::Sharded { shards: 1 };
        assert_eq!(pair_partition(narrow, &t, &e, &ep), "ev#tnt_a#evt_1#00");
        assert_eq!(
            pair_partition(LedgerLayout::Unsharded, &t, &e, &ep),
            "evt_1"
        );
        assert_eq!(parse_partition("evt_1"), Some((None, e.clone())));
        let all = sharded_partitions(&t, &e, PAIR_SHARDS);
        assert_eq!(all.len(), PAIR_SHARDS as usize);
        assert!(all.contains(&sharded));
        assert_eq!(sharded_partitions(&t, &e, 1), ["ev#tnt_a#evt_1#00"]);
        // The other partitions of the table are no pair's.
        for other in [
            "dl#tnt_a#05",
            "log#ep_1",
            "log#ep_1#2",
            "ev#tnt_a#evt_1#99",
            "ev#tnt_a#evt_1#5",
        ] {
            assert_eq!(parse_partition(other), None, "{other}");
        }
    }
}
