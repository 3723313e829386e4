//! Fuzz target bodies, shared by the cargo-fuzz binaries (`fuzz_targets/`) and the stable
//! smoke test in the workspace (`tests/tests/corpus.rs` includes this file by path and
//! runs every seed through it). Plain functions over bytes: they compile on stable Rust.
//!
//! Each target feeds the bytes to one parser and asserts what must hold for any input:
//! no panic, and for what parses, the payload bytes survive unchanged.

use serde_json::Value;
use tern_core::DeliveryMessage;
use tern_core::event::DEFAULT_MAX_PAYLOAD_BYTES;
use tern_handlers::relay::{POISON_BODY_LIMIT_BYTES, Reading};

/// A target: one input, any bytes.
pub type Target = fn(&[u8]);

/// Every target, by the name of its `fuzz_targets/` binary and seed directory.
pub const TARGETS: &[(&str, Target)] = &[
    ("stream_record", stream_record),
    ("delivery_message", delivery_message),
    ("signature_header", signature_header),
    ("token_response", token_response),
    ("retry_after", retry_after),
];

/// A DynamoDB stream record (Lambda JSON shape) through the relay's record parser and
/// reader. Unparseable records become a failure-queue body that is JSON and fits the
/// queue; readable outbox events keep the payload attribute's bytes through a delivery
/// message round trip.
pub fn stream_record(data: &[u8]) {
    let Ok(raw) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let record = match tern_handlers::relay::parse_record(&raw) {
        Ok(r) => r,
        Err(reason) => {
            let body = tern_handlers::relay::poison_body_value(&raw, &reason);
            assert!(
                body.len() <= POISON_BODY_LIMIT_BYTES,
                "poison body of {} bytes",
                body.len()
            );
            assert!(
                serde_json::from_str::<Value>(&body).is_ok(),
                "poison body is JSON"
            );
            return;
        }
    };
    if let Reading::Event(event) =
        tern_handlers::relay::read_record(&record, DEFAULT_MAX_PAYLOAD_BYTES)
    {
        let image = serde_json::to_value(&record.change.new_image).unwrap_or(Value::Null);
        let attribute = image.pointer("/payload/S").and_then(Value::as_str);
        assert_eq!(
            Some(event.payload.as_str()),
            attribute,
            "payload bytes changed by the reader"
        );
        let Ok(endpoint) = tern_core::EndpointId::new("ep_fuzz") else {
            unreachable!("a valid literal id")
        };
        let message = DeliveryMessage::first(*event, endpoint);
        let back = DeliveryMessage::parse(&message.to_body());
        assert_eq!(
            back.as_ref(),
            Ok(&message),
            "a message the relay writes must parse back"
        );
    }
}

/// A delivery-queue body through `DeliveryMessage::parse`. What parses must write back
/// to a body that parses to the same message, with the payload text verbatim in it.
pub fn delivery_message(data: &[u8]) {
    let Ok(body) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(message) = DeliveryMessage::parse(body) {
        let written = message.to_body();
        assert!(
            written.contains(message.event.payload.as_str()),
            "payload not verbatim"
        );
        assert_eq!(
            DeliveryMessage::parse(&written).as_ref(),
            Ok(&message),
            "round trip"
        );
    }
}

/// Fixed secret of the signature target (the Standard Webhooks reference vector's).
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Signature headers through the receiver's `Verifier`. Input layout: `name: value`
/// lines, an empty line, then the body bytes. Never panics; and a request signed by the
/// verifier itself for a well-formed id verifies.
pub fn signature_header(data: &[u8]) {
    let split = data.windows(2).position(|w| w == b"\n\n");
    let (head, body) = match split {
        Some(i) => (&data[..i], &data[i + 2..]),
        None => (data, &b""[..]),
    };
    let head = String::from_utf8_lossy(head);
    let headers: Vec<(String, String)> = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let Ok(verifier) = tern_receiver::Verifier::new(SECRET) else {
        unreachable!("the reference secret is valid")
    };
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_614_265_330);
    let _ = verifier.verify(&headers, body, at);
    let _ = verifier.verify_body_signature(&headers, body);

    let id = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("webhook-id"))
        .map_or("msg_fuzz", |(_, v)| v.as_str());
    if !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        let signed = [
            ("webhook-id", id.to_owned()),
            ("webhook-timestamp", "1614265330".to_owned()),
            ("webhook-signature", verifier.sign(id, 1_614_265_330, body)),
        ];
        assert!(
            verifier.verify(&signed, body, at).is_ok(),
            "own signature must verify"
        );
    }
}

/// An OAuth2 token endpoint's answer (receiver-controlled bytes) through
/// `parse_token_response`. Never panics; a token that parses is used at most
/// `MAX_TOKEN_LIFETIME_SECONDS`, and its expiry computed from the clock never overflows
/// (issue 28: `Long.MAX_VALUE` panicked the attempt there).
pub fn token_response(data: &[u8]) {
    use tern_core::receiver_auth::{MAX_TOKEN_LIFETIME_SECONDS, parse_token_response};
    let _ = tern_core::receiver_auth::token_error_code(data);
    if let Ok(token) = parse_token_response(data) {
        let usable = token.usable_seconds();
        assert!(usable <= MAX_TOKEN_LIFETIME_SECONDS, "{usable} s");
        assert!(
            std::time::Instant::now()
                .checked_add(std::time::Duration::from_secs(usable))
                .is_some(),
            "expiry overflows the clock"
        );
    }
}

/// A `Retry-After` value (receiver-controlled) through `parse_retry_after` and the wait
/// it leads to. Never panics; the wait never exceeds the ceiling it is given.
pub fn retry_after(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let now = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_764_000_000);
    let asked = tern_core::retry::parse_retry_after(text, now);
    let ceiling = 3_600;
    let wait = tern_core::retry::next_wait(60, asked, ceiling);
    assert!(wait <= ceiling.max(60), "{wait} s");
}
