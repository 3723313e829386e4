//! Known-answer vectors, interop with the `standardwebhooks` crate (v1.0.1), header-name case,
//! rotation and tampering.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tern_receiver::{Verifier, VerifyError, header};

/// Copy of the project's `shared/cases/signatures.json`, kept in the crate so its tests do
/// not depend on files outside the repository.
const VECTORS: &str = include_str!("data/signatures.json");

struct Vector {
    id: String,
    timestamp: i64,
    body: Vec<u8>,
    signature: String,
}

fn load() -> (String, Vec<Vector>, Value) {
    let doc: Value = serde_json::from_str(VECTORS).unwrap();
    let secret = doc["secret"].as_str().unwrap().to_owned();
    let vectors = doc["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| Vector {
            id: v["id"].as_str().unwrap().to_owned(),
            timestamp: v["timestamp"].as_i64().unwrap(),
            body: match (v.get("body"), v.get("body_hex")) {
                (Some(b), None) => b.as_str().unwrap().as_bytes().to_vec(),
                (None, Some(h)) => hex::decode(h.as_str().unwrap()).unwrap(),
                _ => panic!("a vector needs exactly one of body / body_hex"),
            },
            signature: v["signature"].as_str().unwrap().to_owned(),
        })
        .collect();
    (secret, vectors, doc["must_not_match"].clone())
}

fn at(secs: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).unwrap())
}

fn now_secs() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap()
}

fn headers<'a>(id: &'a str, ts: &'a str, sig: &'a str) -> [(&'static str, &'a str); 3] {
    [
        (header::WEBHOOK_ID, id),
        (header::WEBHOOK_TIMESTAMP, ts),
        (header::WEBHOOK_SIGNATURE, sig),
    ]
}

fn random_secret(seed: u8) -> String {
    use base64::Engine as _;
    let key: Vec<u8> = (0..32u8)
        .map(|i| i.wrapping_mul(31).wrapping_add(seed))
        .collect();
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(key)
    )
}

#[test]
fn every_vector_verifies_and_signs_identically() {
    let (secret, vectors, _) = load();
    assert!(
        vectors.len() >= 7,
        "expected the 7 vectors of signatures.json"
    );
    let v = Verifier::new(&secret).unwrap();
    for vec in &vectors {
        let ts = vec.timestamp.to_string();
        let ok = v
            .verify(
                headers(&vec.id, &ts, &vec.signature),
                &vec.body,
                at(vec.timestamp),
            )
            .unwrap_or_else(|e| panic!("vector {} {:?}: {e}", vec.id, vec.signature));
        assert_eq!(ok.id, vec.id);
        assert_eq!(ok.timestamp, vec.timestamp);
        assert_eq!(v.sign(&vec.id, vec.timestamp, &vec.body), vec.signature);
    }
}

#[test]
fn vectors_do_not_verify_against_another_vectors_body() {
    // Key order, number spelling and escaping change the bytes, so the signature: the
    // receiver must verify the raw body, never a re-serialization.
    let (secret, vectors, _) = load();
    let v = Verifier::new(&secret).unwrap();
    for (i, a) in vectors.iter().enumerate() {
        for (j, b) in vectors.iter().enumerate() {
            if i == j || a.body == b.body {
                continue;
            }
            let ts = a.timestamp.to_string();
            assert_eq!(
                v.verify(headers(&a.id, &ts, &a.signature), &b.body, at(a.timestamp)),
                Err(VerifyError::NoValidSignature),
                "vector {i} signature accepted for vector {j} body"
            );
        }
    }
}

#[test]
fn must_not_match_values_are_refused() {
    let (secret, vectors, must_not) = load();
    let v = Verifier::new(&secret).unwrap();
    let first = &vectors[0];
    let ts = first.timestamp.to_string();
    let mut n = 0;
    for (name, sig) in must_not.as_object().unwrap() {
        let Some(sig) = sig.as_str().filter(|s| s.starts_with("v1,")) else {
            continue; // the "about" text
        };
        n += 1;
        assert_eq!(
            v.verify(
                headers(&first.id, &ts, sig),
                &first.body,
                at(first.timestamp)
            ),
            Err(VerifyError::NoValidSignature),
            "{name} was accepted"
        );
        assert_ne!(
            v.sign(&first.id, first.timestamp, &first.body),
            sig,
            "{name}"
        );
    }
    assert_eq!(n, 3);
}

#[test]
fn header_names_in_any_case() {
    let (secret, vectors, _) = load();
    let v = Verifier::new(&secret).unwrap();
    let vec = &vectors[0];
    let ts = vec.timestamp.to_string();
    for (idn, tsn, sign) in [
        ("webhook-id", "webhook-timestamp", "webhook-signature"),
        ("Webhook-Id", "Webhook-Timestamp", "Webhook-Signature"),
        ("WEBHOOK-ID", "WEBHOOK-TIMESTAMP", "WEBHOOK-SIGNATURE"),
        ("wEbHoOk-iD", "WeBhOoK-TiMeStAmP", "webhook-SIGNATURE"),
    ] {
        // Owned pairs, and other headers around them.
        let h: Vec<(String, String)> = vec![
            ("Content-Type".into(), "application/json".into()),
            (idn.into(), vec.id.clone()),
            (tsn.into(), ts.clone()),
            (sign.into(), vec.signature.clone()),
            ("User-Agent".into(), "Tern/0.1.0".into()),
        ];
        assert!(
            v.verify(&h, &vec.body, at(vec.timestamp)).is_ok(),
            "{idn} {tsn} {sign}"
        );
    }
    // A HashMap works too.
    let map: std::collections::HashMap<String, String> = [
        ("Webhook-ID".to_owned(), vec.id.clone()),
        ("webhook-timestamp".to_owned(), ts.clone()),
        ("Webhook-Signature".to_owned(), vec.signature.clone()),
    ]
    .into();
    assert!(v.verify(map.iter(), &vec.body, at(vec.timestamp)).is_ok());
}

#[test]
fn tolerance_both_directions_distinct_errors() {
    let secret = random_secret(1);
    let v = Verifier::new(&secret).unwrap();
    let now = now_secs();
    let body = b"{\"type\":\"invoice.paid\"}";
    for (offset, expect) in [
        (0, Ok(())),
        (-300, Ok(())),
        (300, Ok(())),
        (
            -301,
            Err(VerifyError::TimestampTooOld {
                age_seconds: 301,
                tolerance_seconds: 300,
            }),
        ),
        (
            301,
            Err(VerifyError::TimestampTooNew {
                ahead_seconds: 301,
                tolerance_seconds: 300,
            }),
        ),
        (
            -86_400,
            Err(VerifyError::TimestampTooOld {
                age_seconds: 86_400,
                tolerance_seconds: 300,
            }),
        ),
    ] {
        let ts = now + offset;
        let sig = v.sign("evt_1", ts, body);
        let got = v
            .verify(headers("evt_1", &ts.to_string(), &sig), body, at(now))
            .map(|_| ());
        assert_eq!(got, expect, "offset {offset}");
    }
    // The messages tell the two apart.
    let old = VerifyError::TimestampTooOld {
        age_seconds: 301,
        tolerance_seconds: 300,
    }
    .to_string();
    let new = VerifyError::TimestampTooNew {
        ahead_seconds: 301,
        tolerance_seconds: 300,
    }
    .to_string();
    assert!(
        old.contains("old") && new.contains("future"),
        "{old} / {new}"
    );
}

#[test]
fn rotation_several_signatures_in_one_header() {
    let (old, new) = (random_secret(1), random_secret(2));
    let body = b"{\"a\":1}";
    let ts = now_secs();
    let tern = Verifier::with_secrets(&[new.as_str(), old.as_str()]).unwrap();
    let both = tern.sign("evt_r", ts, body);
    assert_eq!(both.split(' ').count(), 2);
    let ts_s = ts.to_string();
    let h = headers("evt_r", &ts_s, &both);
    // A receiver holding either key accepts the request.
    assert!(Verifier::new(&old).unwrap().verify_now(h, body).is_ok());
    assert!(Verifier::new(&new).unwrap().verify_now(h, body).is_ok());
    // One wrong entry and one right one: accepted, whatever the order.
    let good = Verifier::new(&old).unwrap().sign("evt_r", ts, body);
    let wrong = Verifier::new(&random_secret(3))
        .unwrap()
        .sign("evt_r", ts, body);
    for sig in [format!("{wrong} {good}"), format!("{good} {wrong}")] {
        let ok = Verifier::new(&old)
            .unwrap()
            .verify_now(headers("evt_r", &ts.to_string(), &sig), body)
            .unwrap();
        assert_eq!(ok.id, "evt_r");
    }
    // A receiver-side rotation: two secrets held, the request signed with the second.
    let receiver = Verifier::with_secrets(&[random_secret(3), old.clone()]).unwrap();
    assert_eq!(receiver.verify_now(h, body).unwrap().secret_index, 1);
    // Neither key held: refused.
    assert_eq!(
        Verifier::new(&random_secret(4))
            .unwrap()
            .verify_now(h, body),
        Err(VerifyError::NoValidSignature)
    );
}

#[test]
fn tampered_body_id_or_timestamp_fails() {
    let secret = random_secret(5);
    let v = Verifier::new(&secret).unwrap();
    let ts = now_secs();
    let body = b"{\"amount\":100}";
    let sig = v.sign("evt_t", ts, body);
    let ts_s = ts.to_string();
    assert!(v.verify_now(headers("evt_t", &ts_s, &sig), body).is_ok());
    let refused = Err(VerifyError::NoValidSignature);
    assert_eq!(
        v.verify_now(headers("evt_t", &ts_s, &sig), b"{\"amount\":900}")
            .map(|_| ()),
        refused
    );
    assert_eq!(
        v.verify_now(headers("evt_t", &ts_s, &sig), b"{\"amount\":100} ")
            .map(|_| ()),
        refused
    );
    assert_eq!(
        v.verify_now(headers("evt_t", &ts_s, &sig), b"").map(|_| ()),
        refused
    );
    assert_eq!(
        v.verify_now(headers("evt_u", &ts_s, &sig), body)
            .map(|_| ()),
        refused
    );
    assert_eq!(
        v.verify_now(headers("evt_t", &(ts - 1).to_string(), &sig), body)
            .map(|_| ()),
        refused
    );
    assert_eq!(
        v.verify_now(headers("evt_t", &(ts + 1).to_string(), &sig), body)
            .map(|_| ()),
        refused
    );
}

#[test]
fn body_signature_header_from_tern_format() {
    let (a, b) = (random_secret(6), random_secret(7));
    let body = b"{\"x\":true}";
    let tern = Verifier::with_secrets(&[a.as_str(), b.as_str()]).unwrap();
    let value = tern.sign_body(body);
    assert!(value.contains(", "));
    let h = [("X-Webhook-Signature", value.as_str())];
    assert_eq!(
        Verifier::new(&a).unwrap().verify_body_signature(h, body),
        Ok(0)
    );
    assert_eq!(
        Verifier::new(&b).unwrap().verify_body_signature(h, body),
        Ok(0)
    );
    assert_eq!(
        Verifier::new(&a)
            .unwrap()
            .verify_body_signature(h, b"{\"x\":false}"),
        Err(VerifyError::NoValidSignature)
    );
}

// ---- interop with the `standardwebhooks` crate (reference library, v1.0.1) ----

#[test]
fn signatures_made_by_standardwebhooks_verify_with_ours() {
    let (secret, vectors, _) = load();
    let theirs = standardwebhooks::Webhook::new(&secret).unwrap();
    let ours = Verifier::new(&secret).unwrap();
    for vec in vectors
        .iter()
        .filter(|v| std::str::from_utf8(&v.body).is_ok())
    {
        let sig = theirs.sign(&vec.id, vec.timestamp, &vec.body).unwrap();
        assert_eq!(sig, vec.signature);
        let ts = vec.timestamp.to_string();
        assert!(
            ours.verify(headers(&vec.id, &ts, &sig), &vec.body, at(vec.timestamp))
                .is_ok()
        );
    }
    // Fresh timestamps and a 64-byte key.
    let secret = format!("whsec_{}", {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode([0xA5u8; 64])
    });
    let theirs = standardwebhooks::Webhook::new(&secret).unwrap();
    let ts = now_secs();
    let body = "{\"é\":\"ü\",\"n\":[1,2,3]}".as_bytes();
    let sig = theirs.sign("msg_interop", ts, body).unwrap();
    assert!(
        Verifier::new(&secret)
            .unwrap()
            .verify_now(headers("msg_interop", &ts.to_string(), &sig), body)
            .is_ok()
    );
}

fn header_map(id: &str, ts: &str, sig: &str) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    h.insert("webhook-id", id.parse().unwrap());
    h.insert("webhook-timestamp", ts.parse().unwrap());
    h.insert("webhook-signature", sig.parse().unwrap());
    h
}

#[test]
fn signatures_made_by_ours_verify_with_standardwebhooks() {
    let (a, b) = (random_secret(8), random_secret(9));
    let tern = Verifier::with_secrets(&[a.as_str(), b.as_str()]).unwrap();
    let ts = now_secs();
    let body = br#"{"type":"order.created","data":{"id":42}}"#;
    let sig = tern.sign("evt_01J", ts, body);
    for secret in [&a, &b] {
        standardwebhooks::Webhook::new(secret)
            .unwrap()
            .verify(body, &header_map("evt_01J", &ts.to_string(), &sig))
            .unwrap();
    }
    // And both libraries refuse the same tampered body.
    let theirs = standardwebhooks::Webhook::new(&a).unwrap();
    assert!(
        theirs
            .verify(b"{}", &header_map("evt_01J", &ts.to_string(), &sig))
            .is_err()
    );
}

#[test]
fn tolerance_agrees_with_standardwebhooks() {
    // Their clock is the wall clock, so stay 2 s away from the boundary.
    let secret = random_secret(10);
    let ours = Verifier::new(&secret).unwrap();
    let theirs = standardwebhooks::Webhook::new(&secret).unwrap();
    let body = b"{}";
    for offset in [-302_i64, -298, 0, 298, 302] {
        let ts = now_secs() + offset;
        let sig = ours.sign("evt_tol", ts, body);
        let ts_s = ts.to_string();
        let ours_ok = ours
            .verify_now(headers("evt_tol", &ts_s, &sig), body)
            .is_ok();
        let theirs_ok = theirs
            .verify(body, &header_map("evt_tol", &ts_s, &sig))
            .is_ok();
        assert_eq!(ours_ok, theirs_ok, "offset {offset}");
        assert_eq!(ours_ok, offset.abs() < 300, "offset {offset}");
    }
}
