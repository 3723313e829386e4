//! The dead-letter record: one entry per dead-lettered (event, endpoint) pair, kept by the
//! ledger next to the DLQ's messages, so that lists, counts, filters and dry runs read the
//! record and never receive (so never hide) the shared DLQ's messages. A tenant's entries
//! are read without a scan: [`DEAD_LETTER_SHARDS`] partitions per tenant, each read with one
//! Query (by endpoint, with a key condition, for the endpoint filter).
//!
//! The sender writes an entry before it sends the dead letter to the DLQ
//! ([`crate::ports::DeliveryLedger::record_dead_letter`]), so whatever its own code put in
//! the DLQ is in the record; a replay removes the entry of each dead letter it moves
//! ([`crate::ports::DeliveryLedger::remove_dead_letter`]). A reader drops the entries of
//! pairs that were delivered since (delivered wins) or replayed since (a later budget was
//! claimed), checked on the pairs' state items as they are now.
//!
//! Not in the record: messages SQS moved to the DLQ itself after `maxReceiveCount`
//! receives (a crash or poison message: no code of ours saw them go) and bodies that are
//! no delivery message. The DLQ's depth (SQS `ApproximateNumberOfMessages`) counts them;
//! `tern dlq` shows both numbers, and a replay still moves them (it receives the DLQ).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::{EndpointId, EventId, TenantId};
use crate::message::{DeadLetterReason, DeliveryMessage};

/// Partitions of one tenant's record: 32. The scale rule (`DESIGN.md` §11): no key one
/// tenant or endpoint writes may pass half of DynamoDB's 1,000 write units a second per
/// partition (500) at the target of 10,000 deliveries a second. In an outage of one big
/// endpoint every delivery dead-letters: 10,000 entries a second of one tenant and one
/// endpoint, each at most [`MAX_ENTRY_BYTES`] (one write unit), spread by
/// [`shard`] over 32 partitions: 10,000 / 32 = 313 write units a second on each, under
/// 500. A list reads all 32 (32 Queries, eventually consistent).
pub const DEAD_LETTER_SHARDS: u32 = 32;

/// Largest stored entry, bytes: 1,024, one DynamoDB write unit ("Item sizes and
/// formats", DynamoDB developer guide). The payload sample is cut to what fits.
pub const MAX_ENTRY_BYTES: usize = 1024;

/// Most bytes of the last error kept in an entry: 200 (cut on a character boundary).
pub const MAX_ERROR_BYTES: usize = 200;

/// Most characters of the payload kept in an entry: 500 (`tern_ops::dlq::SAMPLE_CHARS`),
/// fewer when the entry would pass [`MAX_ENTRY_BYTES`].
pub const MAX_SAMPLE_CHARS: usize = 500;

/// The shard (0..[`DEAD_LETTER_SHARDS`]) of a pair's entry: FNV-1a (32 bit) of
/// `<event id>.<endpoint id>`, modulo the shard count. Stable across builds and
/// platforms (a reader and a writer of different versions agree). One event fanned out
/// to many endpoints spreads over the shards too.
pub fn shard(event: &EventId, endpoint: &EndpointId) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in event
        .as_str()
        .bytes()
        .chain(std::iter::once(b'.'))
        .chain(endpoint.as_str().bytes())
    {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash % DEAD_LETTER_SHARDS
}

/// `text` cut to at most `max_bytes` bytes and `max_chars` characters, on a character
/// boundary; true when it was cut.
pub fn cut(text: &str, max_bytes: usize, max_chars: usize) -> (&str, bool) {
    let mut end = 0;
    for (chars, (i, c)) in text.char_indices().enumerate() {
        if chars >= max_chars || i + c.len_utf8() > max_bytes {
            return (&text[..end], true);
        }
        end = i + c.len_utf8();
    }
    (text, false)
}

/// One recorded dead letter: what a list shows of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedDeadLetter {
    /// Tenant.
    pub tenant_id: TenantId,
    /// Endpoint.
    pub endpoint_id: EndpointId,
    /// Event (the `webhook-id`).
    pub event_id: EventId,
    /// Event type.
    pub event_type: String,
    /// Why it was dead-lettered.
    pub reason: DeadLetterReason,
    /// HTTP status of the last attempt.
    pub last_status: Option<u16>,
    /// Error of the last attempt, at most [`MAX_ERROR_BYTES`].
    pub last_error: Option<String>,
    /// Attempts made in the budget that ended here.
    pub attempts: u32,
    /// When it was dead-lettered (UTC).
    pub dead_lettered_at: DateTime<Utc>,
    /// Replays before this dead letter (the budget that ended).
    pub replay_count: u32,
    /// The payload's first characters (at most [`MAX_SAMPLE_CHARS`], fewer to fit the
    /// entry in [`MAX_ENTRY_BYTES`]).
    pub payload_sample: String,
    /// True when the sample was cut.
    pub payload_truncated: bool,
    /// Where the ledger keeps the pair's state item (its message's layout): the reader
    /// checks there whether the pair was delivered or replayed since. Not shown.
    #[serde(skip)]
    pub ledger: crate::spread::LedgerLayout,
}

impl RecordedDeadLetter {
    /// The entry of a dead-lettered message (one that carries its dead-letter record);
    /// `None` for a message without one. The sample is whole here; the store cuts it to
    /// fit its entry.
    pub fn of(message: &DeliveryMessage) -> Option<Self> {
        let record = message.dead_letter.as_ref()?;
        let (last_error, _) = record
            .last_error
            .as_deref()
            .map(|e| cut(e, MAX_ERROR_BYTES, usize::MAX))
            .unzip();
        let (sample, truncated) = cut(message.event.payload.as_str(), usize::MAX, MAX_SAMPLE_CHARS);
        Some(Self {
            tenant_id: message.event.tenant_id.clone(),
            endpoint_id: message.endpoint_id.clone(),
            event_id: message.event.id.clone(),
            event_type: message.event.event_type.to_string(),
            reason: record.reason,
            last_status: record.last_status,
            last_error: last_error.map(str::to_owned),
            attempts: record.attempts,
            dead_lettered_at: record.at,
            replay_count: message.replay_count,
            payload_sample: sample.to_owned(),
            payload_truncated: truncated,
            ledger: message.ledger_layout(),
        })
    }
}

/// What to read of the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterQuery {
    /// The tenant (the record is per tenant).
    pub tenant: TenantId,
    /// Only this endpoint's entries.
    pub endpoint: Option<EndpointId>,
    /// Most entries returned.
    pub max: usize,
}

/// What a read of the record found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadLetterRead {
    /// The dead letters still in the DLQ (delivered and replayed pairs dropped), by
    /// endpoint, then event; at most the query's `max`.
    pub entries: Vec<RecordedDeadLetter>,
    /// Entries read from the record, before dropping delivered and replayed pairs.
    pub read: usize,
    /// True when every entry was read (none left past `max`).
    pub complete: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_stable_and_spread() {
        let ep = EndpointId::new("ep_1").unwrap();
        // Fixed values: a writer and a reader of another build must agree.
        let first = shard(&EventId::new("evt_1").unwrap(), &ep);
        assert_eq!(first, shard(&EventId::new("evt_1").unwrap(), &ep));
        let mut counts = [0u32; DEAD_LETTER_SHARDS as usize];
        for i in 0..3200 {
            counts[shard(&EventId::new(format!("evt_{i}")).unwrap(), &ep) as usize] += 1;
        }
        // 100 expected per shard: none empty, none above twice that.
        assert!(counts.iter().all(|&c| (1..=200).contains(&c)), "{counts:?}");
    }

    #[test]
    fn cut_keeps_characters_whole() {
        assert_eq!(cut("héllo", 2, 10), ("h", true));
        assert_eq!(cut("héllo", 3, 10), ("hé", true));
        assert_eq!(cut("héllo", 100, 2), ("hé", true));
        assert_eq!(cut("héllo", 100, 5), ("héllo", false));
        assert_eq!(cut("", 0, 0), ("", false));
    }
}
