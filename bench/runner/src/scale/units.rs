//! DynamoDB capacity units from the facts the local AWS reports for a metered request
//! (`tools/moto_server.py` fix 9 `dynamodb-meter`): which items a request wrote or read,
//! and their sizes. moto's own `ConsumedCapacity` is a constant (1 unit per request, no
//! index), so the meter asks for these facts instead and applies DynamoDB's rules here.
//!
//! The rules (Amazon DynamoDB Developer Guide, "Read and write capacity units" and
//! "Provisioned throughput considerations for global secondary indexes"):
//! - a write costs one unit per started 1 KB of the larger of the item before and after
//!   (at least 1; a refused conditional write costs what the item it met costs);
//! - a read costs one unit per started 4 KB of the items read together (a `Query` adds its
//!   items' sizes before rounding; at least 1), half of that when eventually consistent;
//! - a transaction (`TransactWriteItems`, `TransactGetItems`) costs twice;
//! - a global secondary index costs one write per entry put or removed, two when a write
//!   changes the entry's key (remove and put), one when only its projection changes, none
//!   otherwise; an entry's size is its projected attributes plus 100 bytes. Index writes
//!   are billed once, also inside a transaction (only the table's item write is doubled).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Bytes per write unit.
pub const WRITE_UNIT_BYTES: u64 = 1024;
/// Bytes per read unit.
pub const READ_UNIT_BYTES: u64 = 4096;

/// One item a request wrote (or tried to), as the local AWS reports it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct WriteFact {
    /// Table name.
    pub table: String,
    /// The item's partition key, as a DynamoDB attribute value (`{"S": "..."}`).
    pub key: Value,
    /// Size before the write, bytes; `None` when there was no item.
    pub old_size: Option<u64>,
    /// Size after, bytes; `None` when there is none (deleted, or never made).
    pub new_size: Option<u64>,
    /// Part of a `TransactWriteItems`.
    pub transaction: bool,
    /// The item's entries in the table's global secondary indexes, before and after.
    #[serde(default)]
    pub indexes: Vec<IndexFact>,
}

/// One global secondary index entry of a written item, before and after the write.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct IndexFact {
    /// Index name.
    pub index: String,
    /// The entry's partition key before (`None`: the item was not in the index).
    pub old_key: Option<Value>,
    /// Its size before, bytes, the 100-byte overhead included.
    pub old_size: Option<u64>,
    /// The entry's partition key after (`None`: the item is not in the index).
    pub new_key: Option<Value>,
    /// Its size after, bytes.
    pub new_size: Option<u64>,
    /// Whether the entry (key or projected attributes) changed.
    pub changed: bool,
}

/// One read (a `GetItem`, an item of a batch, a `Query` page, a `Scan` page).
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct ReadFact {
    /// Table name.
    pub table: String,
    /// Index queried, if any.
    pub index: Option<String>,
    /// The partition key read (`None` for a scan).
    pub key: Option<Value>,
    /// Items read (found, or evaluated by a query before its filter).
    pub items: u64,
    /// Their stored size together, bytes.
    pub bytes: u64,
    /// Strongly consistent.
    pub consistent: bool,
    /// Part of a `TransactGetItems`.
    pub transaction: bool,
}

/// What the local AWS reports for one metered request.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct Facts {
    /// Items written.
    #[serde(default)]
    pub writes: Vec<WriteFact>,
    /// Reads.
    #[serde(default)]
    pub reads: Vec<ReadFact>,
}

/// Read or write capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Kind {
    /// Read units (RCU / RRU).
    Read,
    /// Write units (WCU / WRU).
    Write,
}

/// Capacity units charged to one partition key of a table or index.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Charge {
    /// Table name (as the request named it).
    pub table: String,
    /// Index name, for an index's own partition.
    pub index: Option<String>,
    /// The partition key's value as text (`None`: a scan of the whole table).
    pub key: Option<String>,
    /// Read or write.
    pub kind: Kind,
    /// Units.
    pub units: f64,
}

/// The text of a key attribute value: the string or number itself, else its JSON.
pub fn key_text(value: &Value) -> String {
    match value {
        Value::Object(m) if m.len() == 1 => match m.values().next() {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => value.to_string(),
        },
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn started(bytes: u64, unit: u64) -> f64 {
    bytes.div_ceil(unit).max(1) as f64
}

/// The charges of one written item: the table's partition, and each index partition whose
/// entry was put, removed or changed.
pub fn write_charges(fact: &WriteFact) -> Vec<Charge> {
    let size = fact.old_size.max(fact.new_size).unwrap_or(0);
    let factor = if fact.transaction { 2.0 } else { 1.0 };
    let mut out = vec![Charge {
        table: fact.table.clone(),
        index: None,
        key: Some(key_text(&fact.key)),
        kind: Kind::Write,
        units: started(size, WRITE_UNIT_BYTES) * factor,
    }];
    for entry in &fact.indexes {
        let charge = |key: &Value, size: Option<u64>| Charge {
            table: fact.table.clone(),
            index: Some(entry.index.clone()),
            key: Some(key_text(key)),
            kind: Kind::Write,
            units: started(size.unwrap_or(0), WRITE_UNIT_BYTES),
        };
        match (&entry.old_key, &entry.new_key) {
            (None, Some(new)) => out.push(charge(new, entry.new_size)),
            (Some(old), None) => out.push(charge(old, entry.old_size)),
            (Some(old), Some(new)) if old != new => {
                out.push(charge(old, entry.old_size));
                out.push(charge(new, entry.new_size));
            }
            (Some(_), Some(new)) if entry.changed => out.push(charge(new, entry.new_size)),
            _ => {}
        }
    }
    out
}

/// The charge of one read.
pub fn read_charge(fact: &ReadFact) -> Charge {
    let consistency = if fact.consistent { 1.0 } else { 0.5 };
    let factor = if fact.transaction { 2.0 } else { 1.0 };
    Charge {
        table: fact.table.clone(),
        index: fact.index.clone(),
        key: fact.key.as_ref().map(key_text),
        kind: Kind::Read,
        units: started(fact.bytes, READ_UNIT_BYTES) * consistency * factor,
    }
}

/// Every charge of a request's facts.
pub fn charges(facts: &Facts) -> Vec<Charge> {
    let mut out: Vec<Charge> = facts.writes.iter().flat_map(write_charges).collect();
    out.extend(facts.reads.iter().map(read_charge));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write(old: Option<u64>, new: Option<u64>, transaction: bool) -> WriteFact {
        WriteFact {
            table: "attempts".into(),
            key: json!({"S": "evt_1"}),
            old_size: old,
            new_size: new,
            transaction,
            indexes: vec![],
        }
    }

    fn index(old: Option<&str>, new: Option<&str>, changed: bool) -> IndexFact {
        IndexFact {
            index: "waiting".into(),
            old_key: old.map(|k| json!({"S": k})),
            old_size: old.map(|_| 300),
            new_key: new.map(|k| json!({"S": k})),
            new_size: new.map(|_| 1500),
            changed,
        }
    }

    #[test]
    fn a_write_costs_a_unit_per_started_kilobyte_of_the_larger_image() {
        let units = |old, new| write_charges(&write(old, new, false))[0].units;
        assert_eq!(units(None, Some(1)), 1.0);
        assert_eq!(units(None, Some(1024)), 1.0);
        assert_eq!(units(None, Some(1025)), 2.0);
        // An update that shrinks the item is billed by the item before.
        assert_eq!(units(Some(3000), Some(10)), 3.0);
        // A delete, and a refused write on nothing: at least one unit.
        assert_eq!(units(Some(2048), None), 2.0);
        assert_eq!(units(None, None), 1.0);
        let charge = &write_charges(&write(None, Some(10), false))[0];
        assert_eq!(charge.key.as_deref(), Some("evt_1"));
        assert_eq!((charge.kind, charge.index.as_deref()), (Kind::Write, None));
    }

    #[test]
    fn a_transaction_doubles_the_item_but_not_its_index_writes() {
        let mut fact = write(None, Some(1300), true);
        fact.indexes.push(index(None, Some("tnt#ep"), true));
        let c = write_charges(&fact);
        assert_eq!(c[0].units, 4.0);
        assert_eq!((c[1].index.as_deref(), c[1].units), (Some("waiting"), 2.0));
    }

    #[test]
    fn index_entries_cost_by_what_happened_to_them() {
        let units = |entry: IndexFact| -> Vec<(String, f64)> {
            let mut fact = write(Some(500), Some(500), false);
            fact.indexes.push(entry);
            write_charges(&fact)
                .into_iter()
                .skip(1)
                .map(|c| (c.key.unwrap_or_default(), c.units))
                .collect()
        };
        // Put into the index, removed from it.
        assert_eq!(units(index(None, Some("a"), true)), vec![("a".into(), 2.0)]);
        assert_eq!(units(index(Some("a"), None, true)), vec![("a".into(), 1.0)]);
        // Key changed: the old entry removed, the new one put.
        assert_eq!(
            units(index(Some("a"), Some("b"), true)),
            vec![("a".into(), 1.0), ("b".into(), 2.0)]
        );
        // Same key, projection changed: one write; nothing changed: none.
        assert_eq!(
            units(index(Some("a"), Some("a"), true)),
            vec![("a".into(), 2.0)]
        );
        assert!(units(index(Some("a"), Some("a"), false)).is_empty());
    }

    #[test]
    fn reads_round_the_sum_to_four_kilobytes_and_halve_when_eventual() {
        let read = |bytes, consistent, transaction| ReadFact {
            table: "endpoints".into(),
            index: None,
            key: Some(json!({"S": "tnt_1"})),
            items: 1,
            bytes,
            consistent,
            transaction,
        };
        assert_eq!(read_charge(&read(100, true, false)).units, 1.0);
        assert_eq!(read_charge(&read(100, false, false)).units, 0.5);
        assert_eq!(read_charge(&read(4097, true, false)).units, 2.0);
        assert_eq!(read_charge(&read(0, false, false)).units, 0.5);
        assert_eq!(read_charge(&read(5000, false, true)).units, 2.0);
        // A query of 5,000 items of 1.5 KB: 7.3 MB, 1,832 units consistent, 916 eventual.
        assert_eq!(read_charge(&read(5000 * 1500, false, false)).units, 916.0);
        assert_eq!(
            read_charge(&read(1, true, false)).key.as_deref(),
            Some("tnt_1")
        );
    }

    #[test]
    fn facts_parse_as_the_local_aws_reports_them() {
        let text = r#"{"writes":[{"table":"t","key":{"S":"k"},"old_size":null,"new_size":20,"transaction":false,
            "indexes":[{"index":"i","old_key":null,"old_size":null,"new_key":{"S":"x"},"new_size":130,"changed":true}]}],
            "reads":[{"table":"t","index":null,"key":{"N":"7"},"items":1,"bytes":20,"consistent":false,"transaction":false}]}"#;
        let facts: Facts = serde_json::from_str(text).expect("facts parse");
        let c = charges(&facts);
        assert_eq!(c.len(), 3);
        assert_eq!(c[1].key.as_deref(), Some("x"));
        assert_eq!((c[2].kind, c[2].key.as_deref()), (Kind::Read, Some("7")));
    }
}
