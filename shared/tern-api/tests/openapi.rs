//! The committed OpenAPI document is the one the code generates. `make openapi` (or
//! `TERN_WRITE_OPENAPI=1 cargo test -p tern-api --test openapi`) writes it again.

use std::collections::BTreeSet;

const FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json");

#[test]
fn the_committed_openapi_file_is_the_generated_one() {
    let generated = tern_api::openapi::openapi_json();
    if std::env::var_os("TERN_WRITE_OPENAPI").is_some() {
        std::fs::write(FILE, &generated).expect("write openapi.json");
    }
    let committed = std::fs::read_to_string(FILE).unwrap_or_default();
    if committed != generated {
        let first = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "shared/tern-api/openapi.json is not the document the code generates (first \
             difference at line {}): run `make openapi` and commit the file",
            first + 1
        );
    }
}

/// What clients are generated against: OpenAPI 3.1, stable operation ids, every operation
/// signed, every path under a tenant.
#[test]
fn every_operation_is_named_signed_and_under_a_tenant() {
    let doc: serde_json::Value =
        serde_json::from_str(&tern_api::openapi::openapi_json()).expect("JSON");
    assert_eq!(doc["openapi"], "3.1.0");
    let mut ids = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        assert!(path.starts_with("/v1/tenants/{tenant_id}/"), "{path}");
        for (method, op) in item.as_object().expect("path item") {
            let id = op["operationId"]
                .as_str()
                .unwrap_or_else(|| panic!("{method} {path}"));
            assert!(ids.insert(id.to_owned()), "duplicate operation id {id}");
            assert_eq!(op["security"], serde_json::json!([{"sigv4": []}]), "{id}");
            assert!(op["responses"]["401"].is_object(), "{id} documents 401");
            assert!(
                op["responses"]["404"]["content"]["application/problem+json"].is_object(),
                "{id} documents its problems"
            );
        }
    }
    let expected: BTreeSet<String> = [
        "createEndpoint",
        "listEndpoints",
        "getEndpoint",
        "updateEndpoint",
        "deleteEndpoint",
        "enableEndpoint",
        "disableEndpoint",
        "rotateEndpointSecret",
        "getEndpointHealth",
        "sendTestEvent",
        "listEndpointAttempts",
        "recoverEndpoint",
        "publishEvent",
        "getEvent",
        "listEventAttempts",
        "resendEvent",
        "listDeadLetters",
        "replayDeadLetters",
        "createPortalSession",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(ids, expected);
}

/// Every POST, whatever route declares it, documents the `Idempotency-Key` the API honours
/// on every POST (`tern_api::idempotency`), its replay header and its 409 and 422.
#[test]
fn every_post_declares_its_idempotency_key() {
    let doc: serde_json::Value =
        serde_json::from_str(&tern_api::openapi::openapi_json()).expect("JSON");
    let mut posts = 0;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        let Some(op) = item.get("post") else { continue };
        posts += 1;
        let keys: Vec<&serde_json::Value> = op["parameters"]
            .as_array()
            .expect("parameters")
            .iter()
            .filter(|p| p["name"] == "Idempotency-Key")
            .collect();
        assert_eq!(keys.len(), 1, "{path}: one Idempotency-Key");
        assert_eq!(
            (&keys[0]["in"], &keys[0]["required"]),
            (&serde_json::json!("header"), &serde_json::json!(false)),
            "{path}"
        );
        for (code, kind) in [
            ("409", "idempotency-key-in-use"),
            ("422", "idempotency-key-reused"),
        ] {
            let answer = &op["responses"][code];
            assert!(
                answer["description"]
                    .as_str()
                    .is_some_and(|d| d.contains(kind))
                    && answer["content"]["application/problem+json"].is_object(),
                "{path} documents {code} {kind}: {answer}"
            );
        }
        for (code, answer) in op["responses"].as_object().expect("responses") {
            if code.starts_with('2') {
                assert!(
                    answer["headers"]["Idempotent-Replayed"].is_object(),
                    "{path} {code} documents Idempotent-Replayed"
                );
            }
        }
    }
    assert!(posts >= 10, "every POST route: {posts}");
}
