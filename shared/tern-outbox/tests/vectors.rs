//! The outbox test vectors (`clients/outbox/vectors/*.json`): the Rust writer reproduces
//! every one byte for byte. The TypeScript and Python builders check the same files
//! (`clients/typescript/test/vectors.test.ts`, `clients/python/tests/test_vectors.py`), so
//! an item any of them builds is the item this writer builds.
//!
//! A vector gives the inputs and either the error every builder must refuse them with
//! (`OutboxWriteError::code`) or the `TransactWriteItem` in DynamoDB JSON, serialized
//! canonically (`clients/outbox/README.md`: keys sorted, no whitespace, UTF-8, strings
//! escaped as `JSON.stringify` does), as its SHA-256 and length and, for literal
//! payloads, the object itself.
//!
//! Every item the writer builds is also valid under the schema
//! (`clients/outbox/outbox-item.v2.schema.json`, draft 2020-12, checked with the
//! `jsonschema` crate), as the other builders check it with ajv and Python's jsonschema.
//!
//! `TERN_WRITE_VECTORS=1 cargo test -p tern-outbox --test vectors` writes the expected
//! output of the valid vectors from this writer (after a deliberate change of the item
//! format, which also needs a new schema version); review the diff.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem};
use chrono::DateTime;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tern_outbox::{EventId, OutboxWriteError, OutboxWriter};

fn outbox_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/outbox")
}

fn vectors_dir() -> PathBuf {
    outbox_dir().join("vectors")
}

fn schema() -> Value {
    let text = std::fs::read_to_string(outbox_dir().join("outbox-item.v2.schema.json"))
        .expect("read the schema");
    serde_json::from_str(&text).expect("schema JSON")
}

/// Validators of the item (the schema's root) and of the whole `TransactWriteItem`
/// (`$defs/transactWriteItem`, whose `Item` refers back to the root).
fn validators() -> (jsonschema::Validator, jsonschema::Validator) {
    let schema = schema();
    let item = jsonschema::draft202012::new(&schema).expect("the schema compiles");
    let mut put_schema = schema["$defs"]["transactWriteItem"].clone();
    put_schema["$defs"] = schema["$defs"].clone();
    put_schema["properties"]["Put"]["properties"]["Item"] = schema.clone();
    let put = jsonschema::draft202012::new(&put_schema).expect("the Put schema compiles");
    (item, put)
}

/// The payload text of a vector: literal, or `prefix + unit x count + suffix`.
fn payload(input: &Value) -> String {
    match &input["payload"] {
        Value::String(s) => s.clone(),
        Value::Object(recipe) => {
            let text = |k: &str| recipe[k].as_str().expect("recipe text").to_owned();
            let count = usize::try_from(recipe["count"].as_u64().expect("count")).expect("usize");
            format!(
                "{}{}{}",
                text("prefix"),
                text("unit").repeat(count),
                text("suffix")
            )
        }
        other => panic!("payload is neither text nor a recipe: {other}"),
    }
}

/// Builds the vector's item with this writer: the `TransactWriteItem`, or the error code.
fn build(input: &Value) -> Result<TransactWriteItem, &'static str> {
    let text = |k: &str| input[k].as_str().expect("text input");
    let mut writer = OutboxWriter::new(text("table"));
    if let Some(days) = input.get("ttl_days") {
        writer = writer.with_ttl_days(days.as_i64().expect("ttl_days"));
    }
    if let Some(limit) = input.get("max_payload_bytes") {
        writer = writer.with_max_payload_bytes(
            usize::try_from(limit.as_u64().expect("max_payload_bytes")).expect("usize"),
        );
    }
    let id = EventId::new(text("event_id")).map_err(|e| OutboxWriteError::from(e).code())?;
    let created_at = DateTime::from_timestamp_millis(
        input["created_at_unix_ms"]
            .as_i64()
            .expect("created_at_unix_ms"),
    )
    .expect("a time chrono holds");
    let prepared = writer
        .prepare_at(
            id,
            text("event_type"),
            text("tenant_id"),
            created_at,
            payload(input),
        )
        .map_err(|e| e.code())?;
    let prepared = match input.get("traceparent") {
        Some(parent) => prepared
            .with_trace_context(
                parent.as_str().expect("traceparent text"),
                input.get("tracestate").and_then(Value::as_str),
            )
            .map_err(|e| e.code())?,
        None => prepared,
    };
    prepared.transact_item().map_err(|e| e.code())
}

fn attribute(value: &AttributeValue) -> BTreeMap<&'static str, String> {
    match value {
        AttributeValue::S(s) => BTreeMap::from([("S", s.clone())]),
        AttributeValue::N(n) => BTreeMap::from([("N", n.clone())]),
        other => panic!("the outbox item holds only S and N attributes, found {other:?}"),
    }
}

/// The canonical bytes of a `TransactWriteItem` with a `Put`, as DynamoDB's JSON protocol
/// writes it: BTreeMaps sort the keys; serde_json writes no whitespace, raw UTF-8, and
/// escapes only `"`, `\` and control characters (`\b \f \n \r \t`, else `\u00xx`), as
/// `JSON.stringify` does.
fn canonical(item: &TransactWriteItem) -> String {
    let put = item.put().expect("a Put");
    let attributes: BTreeMap<&str, BTreeMap<&str, String>> = put
        .item()
        .iter()
        .map(|(k, v)| (k.as_str(), attribute(v)))
        .collect();
    let mut fields = BTreeMap::new();
    fields.insert("TableName", json!(put.table_name()));
    fields.insert("Item", serde_json::to_value(&attributes).expect("json"));
    if let Some(c) = put.condition_expression() {
        fields.insert("ConditionExpression", json!(c));
    }
    let mut out = BTreeMap::new();
    out.insert("Put", fields);
    serde_json::to_string(&out).expect("json")
}

/// The same canonical form of any JSON value (the vector's expected object).
fn canonical_value(value: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let b: BTreeMap<&String, Value> = m.iter().map(|(k, v)| (k, sorted(v))).collect();
                serde_json::to_value(b).expect("json")
            }
            other => other.clone(),
        }
    }
    serde_json::to_string(&sorted(value)).expect("json")
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn vector_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(vectors_dir())
        .expect("clients/outbox/vectors")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

#[test]
fn the_rust_writer_reproduces_every_vector_byte_for_byte() {
    let write = std::env::var_os("TERN_WRITE_VECTORS").is_some();
    let files = vector_files();
    assert!(
        files.len() >= 30,
        "expected the vectors, found {}",
        files.len()
    );
    let mut failures = Vec::new();
    let (mut valid, mut refused) = (0, 0);
    let (item_schema, put_schema) = validators();
    for path in &files {
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(path).expect("read vector");
        let mut vector: Value = serde_json::from_str(&text).expect("vector JSON");
        let built = build(&vector["input"]);
        if let Some(code) = vector["expected"].get("error").and_then(Value::as_str) {
            refused += 1;
            match built {
                Err(got) if got == code => {}
                Err(got) => failures.push(format!("{name}: refused with {got}, expected {code}")),
                Ok(_) => failures.push(format!("{name}: built, expected the error {code}")),
            }
            continue;
        }
        valid += 1;
        let item = match built {
            Ok(item) => item,
            Err(code) => {
                failures.push(format!("{name}: refused with {code}, expected an item"));
                continue;
            }
        };
        let bytes = canonical(&item);
        let built_json: Value = serde_json::from_str(&bytes).expect("canonical JSON parses");
        for (what, validator, value) in [
            ("item", &item_schema, &built_json["Put"]["Item"]),
            ("TransactWriteItem", &put_schema, &built_json),
        ] {
            let errors: Vec<String> = validator
                .iter_errors(value)
                .map(|e| e.to_string())
                .collect();
            if !errors.is_empty() {
                failures.push(format!("{name}: the {what} breaks the schema: {errors:?}"));
            }
        }
        let mut expected = serde_json::Map::new();
        expected.insert(
            "canonical_sha256".into(),
            json!(sha256_hex(bytes.as_bytes())),
        );
        expected.insert("canonical_length".into(), json!(bytes.len()));
        if vector["input"]["payload"].is_string() {
            expected.insert(
                "transact_write_item".into(),
                serde_json::from_str(&bytes).expect("canonical JSON parses"),
            );
        }
        let expected = Value::Object(expected);
        if write {
            vector["expected"] = expected;
            let mut out = serde_json::to_string_pretty(&vector).expect("json");
            out.push('\n');
            std::fs::write(path, out).expect("write vector");
            continue;
        }
        if vector["expected"] != expected {
            let head: String = bytes.chars().take(400).collect();
            failures.push(format!(
                "{name}: the writer's item differs from the vector:\n  built    {head}...\n  expected {:.400}",
                vector["expected"].to_string()
            ));
        }
        if let Some(object) = vector["expected"].get("transact_write_item") {
            // The committed object, serialized canonically, is the same bytes.
            assert_eq!(canonical_value(object), bytes, "{name}");
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        valid >= 10 && refused >= 10,
        "valid {valid}, refused {refused}"
    );
}

/// The schema refuses items no builder writes: it is not a schema that accepts anything.
#[test]
fn the_schema_refuses_items_no_builder_writes() {
    let (item_schema, put_schema) = validators();
    let good = OutboxWriter::new("t")
        .prepare("a.b", "tnt_a", "{}")
        .expect("valid event")
        .transact_item()
        .expect("item");
    let good: Value = serde_json::from_str(&canonical(&good)).expect("json");
    assert!(put_schema.is_valid(&good));
    let item = &good["Put"]["Item"];
    assert!(item_schema.is_valid(item));
    for (attribute, value) in [
        ("schema_version", json!({"N": "1"})),
        ("schema_version", json!({"N": "3"})),
        ("event_id", json!({"S": "evt.1"})),
        // Version 2 keys name the tenant: a bare id is a version 1 key.
        ("event_id", json!({"S": "evt_1"})),
        ("event_id", json!({"S": "tnt_a#evt_1#x"})),
        ("payload", json!({"S": "[1]"})),
        ("expires_at", json!({"S": "1"})),
        ("created_at", json!({"S": "2026-12-01T14:35:00Z"})),
        ("extra", json!({"S": "x"})),
    ] {
        let mut broken = item.clone();
        broken[attribute] = value;
        assert!(!item_schema.is_valid(&broken), "{attribute}");
    }
    let mut unconditional = good.clone();
    unconditional["Put"]
        .as_object_mut()
        .expect("Put")
        .remove("ConditionExpression");
    assert!(!put_schema.is_valid(&unconditional));
}

/// Every error code a vector names is one the writer can return: the vectors cover
/// each way an item is refused.
#[test]
fn the_vectors_cover_every_error_code() {
    let mut codes: Vec<String> = vector_files()
        .iter()
        .filter_map(|p| {
            let v: Value =
                serde_json::from_str(&std::fs::read_to_string(p).expect("read")).expect("json");
            v["expected"]["error"].as_str().map(str::to_owned)
        })
        .collect();
    codes.sort();
    codes.dedup();
    assert_eq!(
        codes,
        [
            "bad_created_at",
            "bad_event_id",
            "bad_event_type",
            "bad_tenant_id",
            "bad_traceparent",
            "bad_tracestate",
            "payload_not_json",
            "payload_not_object",
            "payload_padded",
            "payload_too_large",
            "payload_unsendable_character",
        ]
    );
}
