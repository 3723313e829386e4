//! What application code sees of `tern-outbox`: everything its API takes and returns is
//! reachable from this crate alone (no `tern-core` dependency), and `@file` payload
//! arguments read absolute and relative paths with readable errors.

use tern_outbox::{
    Event, EventId, IdError, OutboxWriteError, OutboxWriter, PayloadArgumentError, PayloadError,
    payload_argument,
};

#[test]
fn prepare_with_id_needs_only_this_crate() {
    let id: EventId = EventId::new("evt_order_o_1_paid").expect("a valid id");
    let prepared = OutboxWriter::new("outbox")
        .prepare_with_id(id.clone(), "order.paid", "tnt_a", r#"{"order_id":"o_1"}"#)
        .expect("valid event");
    let event: &Event = &prepared.event;
    assert_eq!(event.id, id);
    assert_eq!(event.payload.as_str(), r#"{"order_id":"o_1"}"#);

    let bad_id: IdError = EventId::new("has space").unwrap_err();
    assert!(!bad_id.to_string().is_empty());
    match OutboxWriter::new("outbox").prepare("order.paid", "tnt_a", "[1]") {
        Err(OutboxWriteError::Payload(e)) => {
            let e: PayloadError = e;
            assert!(e.to_string().contains("object"), "{e}");
        }
        other => panic!("expected a payload error, got {other:?}"),
    }
}

#[test]
fn payload_argument_reads_absolute_and_relative_paths() {
    // cargo runs integration tests in the package directory: a relative path is from there.
    let relative = payload_argument("@tests/fixtures/order.json").expect("relative path");
    // The file ends with a line break, as editors write them; the payload does not.
    assert_eq!(relative, r#"{"order_id":"o_file","amount_cents":4200}"#);
    let absolute =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/order.json");
    let text = payload_argument(&format!("@{}", absolute.display())).expect("absolute path");
    assert_eq!(text, relative);
    assert_eq!(payload_argument(r#"{"a":1}"#).unwrap(), r#"{"a":1}"#);
    // The file's text is a payload like any other.
    OutboxWriter::new("outbox")
        .prepare("order.paid", "tnt_a", text)
        .expect("the file holds a JSON object");
}

#[test]
fn payload_argument_errors_are_readable() {
    let e = payload_argument("@tests/fixtures/missing.json").unwrap_err();
    assert!(matches!(e, PayloadArgumentError::File { .. }));
    let text = e.to_string();
    assert!(
        text.starts_with("cannot read the payload file tests/fixtures/missing.json: ")
            && text.to_lowercase().contains("no such file"),
        "{text}"
    );
    assert!(matches!(
        payload_argument("@"),
        Err(PayloadArgumentError::EmptyPath)
    ));
    assert!(
        payload_argument("@")
            .unwrap_err()
            .to_string()
            .contains("@payload.json")
    );
}
