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
        "rotateEndpointSigningKey",
        "getEndpointHealth",
        "sendTestEvent",
        "listEndpointAttempts",
        "recoverEndpoint",
        "publishEvent",
        "publishEventBatch",
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

/// The document's bounds on the receiver settings, the endpoint's text and the ids are the
/// domain's own constants (so the document cannot drift from `tern_core`), and the refused
/// header names are all described (issue 28).
#[test]
fn the_documented_bounds_are_the_domains_constants() {
    use tern_core::custom_headers::{
        FORBIDDEN_NAMES, MAX_CUSTOM_HEADERS, MAX_HEADER_NAME_BYTES, MAX_HEADER_VALUE_BYTES,
        TERN_HEADER_PREFIX,
    };
    use tern_core::receiver_auth::{MAX_AUTH_FIELD_BYTES, MAX_TOKEN_BYTES};
    let doc: serde_json::Value =
        serde_json::from_str(&tern_api::openapi::openapi_json()).expect("JSON");
    let schemas = &doc["components"]["schemas"];
    let prop = |schema: &str, field: &str| schemas[schema]["properties"][field].clone();
    let max = |schema: &str, field: &str, key: &str| {
        prop(schema, field)[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{schema}.{field} has {key}"))
    };
    let n = |v: usize| u64::try_from(v).unwrap();
    for (schema, field, key, value) in [
        ("NewEndpoint", "headers", "maxItems", MAX_CUSTOM_HEADERS),
        (
            "NewEventBatch",
            "events",
            "maxItems",
            tern_ops::publish::MAX_BATCH_EVENTS,
        ),
        ("NewEventBatch", "events", "minItems", 1),
        ("EndpointPatch", "headers", "maxItems", MAX_CUSTOM_HEADERS),
        (
            "CustomHeaderSetting",
            "name",
            "maxLength",
            MAX_HEADER_NAME_BYTES,
        ),
        (
            "CustomHeaderSetting",
            "value",
            "maxLength",
            MAX_HEADER_VALUE_BYTES,
        ),
        ("AuthBasic", "username", "maxLength", MAX_AUTH_FIELD_BYTES),
        ("AuthBasic", "password", "maxLength", MAX_TOKEN_BYTES),
        ("AuthBearer", "token", "maxLength", MAX_TOKEN_BYTES),
        (
            "AuthOauth2ClientCredentials",
            "token_url",
            "maxLength",
            tern_core::endpoint::MAX_URL_LEN,
        ),
        (
            "AuthOauth2ClientCredentials",
            "client_id",
            "maxLength",
            MAX_AUTH_FIELD_BYTES,
        ),
        (
            "AuthOauth2ClientCredentials",
            "client_secret",
            "maxLength",
            MAX_TOKEN_BYTES,
        ),
        (
            "AuthOauth2ClientCredentials",
            "scope",
            "maxLength",
            MAX_AUTH_FIELD_BYTES,
        ),
        (
            "AuthOauth2ClientCredentials",
            "audience",
            "maxLength",
            MAX_AUTH_FIELD_BYTES,
        ),
        (
            "NewEndpoint",
            "url",
            "maxLength",
            tern_core::endpoint::MAX_URL_LEN,
        ),
        (
            "EndpointPatch",
            "url",
            "maxLength",
            tern_core::endpoint::MAX_URL_LEN,
        ),
        (
            "NewEndpoint",
            "description",
            "maxLength",
            tern_core::sqs_text::MAX_TEXT_BYTES,
        ),
        (
            "EndpointPatch",
            "description",
            "maxLength",
            tern_core::sqs_text::MAX_TEXT_BYTES,
        ),
        (
            "DisableRequest",
            "reason",
            "maxLength",
            tern_core::sqs_text::MAX_TEXT_BYTES,
        ),
    ] {
        assert_eq!(max(schema, field, key), n(value), "{schema}.{field} {key}");
    }
    // The batch publish's body limit is the router's.
    assert_eq!(
        doc["paths"][tern_api::BATCH_PUBLISH_ROUTE]["post"]["requestBody"]
            [tern_api::openapi::MAX_BODY_BYTES_EXTENSION]
            .as_u64(),
        Some(n(tern_api::MAX_BATCH_BODY_BYTES))
    );
    // Every refused header name is named in the document, with the webhook-* family.
    let described = schemas["CustomHeaderSetting"]["description"]
        .as_str()
        .expect("described");
    for (name, _) in FORBIDDEN_NAMES {
        assert!(
            described.contains(&format!("`{name}`")),
            "{name} is not described"
        );
    }
    assert!(described.contains(&format!("`{TERN_HEADER_PREFIX}*`")));
    // The enums are the domain's.
    let values = |schema: &str| -> Vec<String> {
        schemas[schema]["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("{schema} is an enum"))
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        values("Signatures"),
        tern_core::Signatures::ALL.map(|s| s.as_str().to_owned())
    );
    assert_eq!(
        values("ClientAuthMethod"),
        ["client_secret_basic", "client_secret_post"]
    );
    let mapping: BTreeSet<String> = schemas["ReceiverAuthSetting"]["discriminator"]["mapping"]
        .as_object()
        .expect("a discriminator")
        .keys()
        .cloned()
        .collect();
    assert_eq!(
        mapping,
        tern_api::reach::AUTH_TYPES
            .iter()
            .map(|t| (*t).to_owned())
            .collect::<BTreeSet<_>>()
    );
    // Every path id's bound is the ids' own.
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("item") {
            for p in op["parameters"].as_array().into_iter().flatten() {
                if p["in"] == "path" {
                    assert_eq!(
                        p["schema"]["maxLength"].as_u64(),
                        Some(n(tern_core::ids::MAX_ID_LEN)),
                        "{method} {path} {}",
                        p["name"]
                    );
                    assert_eq!(p["schema"]["pattern"], "^[A-Za-z0-9_-]+$");
                }
            }
        }
    }
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
