//! S1: every known-answer vector comes out exactly, none of the must-not-match values do,
//! and the reference `standardwebhooks` crate agrees.

use base64::Engine as _;
use tern_core::EventId;
use tern_core::signing::{Secret, signature_headers};

fn vectors() -> serde_json::Value {
    // A copy of ../shared/cases/signatures.json kept in the repo (the receiver crate's tests use it too).
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/tern-receiver/tests/data/signatures.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn body(v: &serde_json::Value) -> Vec<u8> {
    match (v.get("body"), v.get("body_hex")) {
        (Some(b), _) => b.as_str().unwrap().as_bytes().to_vec(),
        (None, Some(h)) => hex::decode(h.as_str().unwrap()).unwrap(),
        _ => panic!("vector without body"),
    }
}

#[test]
fn s1_every_vector_comes_out_exactly() {
    let v = vectors();
    let secret = Secret::parse(v["secret"].as_str().unwrap()).unwrap();
    let reference = standardwebhooks::Webhook::new(v["secret"].as_str().unwrap()).unwrap();
    let vectors = v["vectors"].as_array().unwrap();
    assert_eq!(vectors.len(), 7);
    for vector in vectors {
        let id = vector["id"].as_str().unwrap();
        let ts = vector["timestamp"].as_i64().unwrap();
        let b = body(vector);
        let ours = secret.sign_v1(id, ts, &b);
        assert_eq!(
            ours,
            vector["signature"].as_str().unwrap(),
            "vector {vector}"
        );
        // The headers the sender puts on the wire carry the same value.
        let headers = signature_headers(&EventId::new(id).unwrap(), ts, &b, &[&secret]);
        assert_eq!(
            headers
                .iter()
                .find(|(n, _)| *n == "webhook-signature")
                .unwrap()
                .1,
            ours
        );
        if let Ok(text) = std::str::from_utf8(&b) {
            assert_eq!(
                reference.sign(id, ts, text.as_bytes()).unwrap(),
                ours,
                "reference crate agrees"
            );
        }
    }
}

#[test]
fn s1_no_must_not_match_value_is_produced() {
    let v = vectors();
    let secret = Secret::parse(v["secret"].as_str().unwrap()).unwrap();
    let first = &v["vectors"][0];
    let ours = secret.sign_v1(
        first["id"].as_str().unwrap(),
        first["timestamp"].as_i64().unwrap(),
        &body(first),
    );
    let bad = v["must_not_match"].as_object().unwrap();
    let bad_values: Vec<&str> = bad
        .iter()
        .filter(|(k, _)| *k != "about")
        .map(|(_, x)| x.as_str().unwrap())
        .collect();
    assert_eq!(bad_values.len(), 3);
    for b in bad_values {
        assert_ne!(ours, b);
    }
}

#[test]
fn body_signature_is_hex_hmac_of_the_body() {
    let secret = Secret::generate();
    let key = base64::engine::general_purpose::STANDARD
        .decode(&secret.expose()[6..])
        .unwrap();
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(br#"{"a":1}"#);
    let expected = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    assert_eq!(secret.sign_body_hex(br#"{"a":1}"#), expected);
}
