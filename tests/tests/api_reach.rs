//! Issue 28: every receiver setting through the API. Custom headers (plain and secret),
//! authentication to the receiver (basic, bearer, OAuth2 client credentials) and `v1a`
//! signatures are set on create and PATCH, shown without their secrets, refused with the
//! field named, kept by a PATCH that does not resend them, and reach real receivers on
//! 127.0.0.1: a test send and a delivery carry the headers, the `authorization` of basic
//! and bearer, an OAuth2 token fetched from a loopback token server, and a `v1a`
//! signature that Python's `cryptography` verifies with the public key the API answered.
//! No secret value is in any answer or in any log line of the run (TRACE, every target).

use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use tern_core::ports::EndpointStore as _;
use tern_core::receiver_auth::ReceiverAuth;
use tern_core::{EndpointId, Secret, TenantId};
use tern_local::LocalOptions;
use tern_local::local::LocalTern;
use tern_tests::api::{Answer, ApiClient};
use tern_tests::*;

const WAIT: Duration = Duration::from_secs(30);

fn options() -> LocalOptions {
    LocalOptions {
        time_scale: 0.001,
        lookup: Some(no_dns()),
        console_port: None,
        ..LocalOptions::default()
    }
}

async fn api_deployment(test: &str) -> (LocalTern, ApiClient) {
    let (mut local, _rx) = deployment(test, options()).await;
    local
        .start_api(0, tern_local::api::local_credentials())
        .expect("the local API starts");
    let api = ApiClient::of(&local);
    (local, api)
}

fn created(answer: &Answer) -> (String, Secret) {
    assert_eq!(answer.status, 201, "{}", answer.text);
    let id = answer.json["endpoint"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let secret = Secret::parse(answer.json["secret"].as_str().expect("secret")).expect("whsec_");
    (id, secret)
}

async fn stored(local: &LocalTern, tenant: &str, id: &str) -> tern_core::Endpoint {
    local
        .endpoint_table()
        .get(
            &TenantId::new(tenant).expect("tenant"),
            &EndpointId::new(id).expect("id"),
        )
        .await
        .expect("get")
        .expect("stored")
}

/// The stored value of custom header `name`, and whether it is secret.
fn stored_header(e: &tern_core::Endpoint, name: &str) -> Option<(String, bool)> {
    e.headers
        .iter()
        .find(|h| h.name == name)
        .map(|h| (h.value.expose().to_owned(), h.value.is_secret()))
}

fn token_reply(token: &str) -> Reply {
    Reply::status(200)
        .header("content-type", "application/json")
        .body(&format!(
            r#"{{"access_token":"{token}","token_type":"Bearer","expires_in":3600}}"#
        ))
}

/// Create and PATCH of each setting: shown without secrets, stored with them, and a PATCH
/// that leaves a secret out keeps it (a secret header by name, a basic password with the
/// same user name, a bearer token, an OAuth2 client secret with the same token URL and
/// client id).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_setting_is_created_shown_changed_and_a_patch_keeps_the_secrets_it_leaves_out() {
    let receiver = Receiver::start().await.expect("receiver");
    let (local, api) = api_deployment("api-reach-settings").await;
    let answer = api
        .post(
            "/v1/tenants/tnt_a/endpoints",
            &json!({
                "url": receiver.url("/hook"),
                "headers": [
                    {"name": "X-Tenant", "value": "acme corp"},
                    {"name": "X-Api-Key", "value": "key-Pq81-secret", "secret": true},
                ],
                "auth": {"type": "bearer", "token": "bearer-Lm22-secret"},
                "signatures": "both",
            }),
        )
        .await;
    let (id, _) = created(&answer);
    let view = &answer.json["endpoint"];
    assert_eq!(
        view["headers"],
        json!([
            {"name": "x-tenant", "value": "acme corp", "secret": false},
            {"name": "x-api-key", "value": null, "secret": true},
        ])
    );
    assert_eq!(view["auth"], json!({"type": "bearer", "secret": "token"}));
    assert_eq!(view["signatures"], "both");
    let keys = view["signing_keys"].as_array().expect("keys");
    assert_eq!(keys.len(), 1, "v1a made a key: {view}");
    assert_eq!(keys[0]["state"], "current");
    assert!(
        keys[0]["public_key"]
            .as_str()
            .is_some_and(|k| k.starts_with("whpk_"))
    );
    for secret in ["key-Pq81-secret", "bearer-Lm22-secret"] {
        assert!(!answer.text.contains(secret), "{}", answer.text);
    }
    let e = stored(&local, "tnt_a", &id).await;
    assert_eq!(
        stored_header(&e, "x-api-key"),
        Some(("key-Pq81-secret".into(), true))
    );
    assert_eq!(
        e.auth,
        ReceiverAuth::Bearer {
            token: tern_core::SecretValue::new("bearer-Lm22-secret")
        }
    );

    let path = format!("/v1/tenants/tnt_a/endpoints/{id}");
    let patch = async |body: Value| {
        let a = api.call("PATCH", &path, Some(&body)).await;
        assert_eq!(a.status, 200, "{body}: {}", a.text);
        a
    };
    // Headers: a plain one changed, a new one, the secret one kept without its value.
    let a = patch(json!({"headers": [
        {"name": "x-tenant", "value": "acme inc"},
        {"name": "X-API-KEY", "secret": true},
        {"name": "x-region", "value": "eu"},
    ]}))
    .await;
    assert_eq!(
        a.json["headers"],
        json!([
            {"name": "x-tenant", "value": "acme inc", "secret": false},
            {"name": "x-api-key", "value": null, "secret": true},
            {"name": "x-region", "value": "eu", "secret": false},
        ])
    );
    let e = stored(&local, "tnt_a", &id).await;
    assert_eq!(
        stored_header(&e, "x-api-key"),
        Some(("key-Pq81-secret".into(), true)),
        "kept"
    );
    // A bearer PATCH without the token keeps it; other settings stay.
    let a = patch(json!({"auth": {"type": "bearer"}, "description": "d"})).await;
    assert_eq!(a.json["auth"], json!({"type": "bearer", "secret": "token"}));
    assert_eq!(
        stored(&local, "tnt_a", &id).await.auth,
        e.auth,
        "the bearer token is kept"
    );
    // Basic; then the same user without the password keeps it.
    patch(json!({"auth": {"type": "basic", "username": "tern", "password": "pw-Zx19-secret"}}))
        .await;
    let a = patch(json!({"auth": {"type": "basic", "username": "tern"}})).await;
    assert_eq!(
        a.json["auth"],
        json!({"type": "basic", "username": "tern", "secret": "password"})
    );
    assert_eq!(
        stored(&local, "tnt_a", &id)
            .await
            .auth
            .static_authorization()
            .map(|v| v.expose().to_owned()),
        Some(format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("tern:pw-Zx19-secret")
        ))
    );
    // OAuth2; then a scope change without the client secret keeps it.
    let token_url = receiver.url("/token");
    patch(json!({"auth": {
        "type": "oauth2_client_credentials", "token_url": token_url, "client_id": "tern-client",
        "client_secret": "cs-Wq40-secret", "scope": "a b", "client_auth": "client_secret_post",
    }}))
    .await;
    let a = patch(json!({"auth": {
        "type": "oauth2_client_credentials", "token_url": token_url, "client_id": "tern-client",
        "audience": "https://api.receiver.example",
    }}))
    .await;
    assert_eq!(
        a.json["auth"],
        json!({
            "type": "oauth2_client_credentials", "token_url": token_url, "client_id": "tern-client",
            "audience": "https://api.receiver.example", "client_auth": "client_secret_basic",
            "secret": "client_secret",
        }),
        "the setting is replaced whole: the scope went, the method is the default"
    );
    match stored(&local, "tnt_a", &id).await.auth {
        ReceiverAuth::Oauth2ClientCredentials(g) => {
            assert_eq!(g.client_secret.expose(), "cs-Wq40-secret");
            assert_eq!(g.scope, None);
        }
        other => panic!("{other:?}"),
    }
    // Signatures back to v1: the keys stay (turning v1a on again keeps the receiver's key).
    let a = patch(json!({"signatures": "v1"})).await;
    assert_eq!(a.json["signatures"], "v1");
    assert_eq!(a.json["signing_keys"], view["signing_keys"]);
    // null returns each to its default.
    let a = patch(json!({"headers": null, "auth": null, "signatures": null})).await;
    assert_eq!(a.json["headers"], json!([]));
    assert_eq!(a.json["auth"], json!({"type": "none"}));
    assert_eq!(a.json["signatures"], "v1");
    let e = stored(&local, "tnt_a", &id).await;
    assert!(e.headers.is_empty() && e.auth == ReceiverAuth::None);
    assert_eq!(e.description.as_deref(), Some("d"), "nothing else changed");
    // GET and list show the same view.
    let got = api.get(&path).await;
    assert_eq!(got.json["auth"], json!({"type": "none"}));
    // A v1a PATCH on an endpoint without a key makes one.
    let (plain, _) = created(
        &api.post(
            "/v1/tenants/tnt_a/endpoints",
            &json!({"url": receiver.url("/plain")}),
        )
        .await,
    );
    let a = api
        .call(
            "PATCH",
            &format!("/v1/tenants/tnt_a/endpoints/{plain}"),
            Some(&json!({"signatures": "v1a"})),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.json["signing_keys"].as_array().map(Vec::len), Some(1));
}

/// Every refusal names its field (`headers[1].name`, `auth.token_url`, ...), changes
/// nothing, and never repeats a secret value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_name_the_field_and_never_repeat_a_secret() {
    let receiver = Receiver::start().await.expect("receiver");
    let (local, api) = api_deployment("api-reach-refusals").await;
    let url = receiver.url("/hook");
    let token_url = receiver.url("/token");
    let secret = "sv-Hk33-secret";
    let many: Vec<Value> = (0..21)
        .map(|i| json!({"name": format!("x-h{i}"), "value": "v"}))
        .collect();
    let big: Vec<Value> = (0..3)
        .map(|i| json!({"name": format!("x-b{i}"), "value": "v".repeat(2000)}))
        .collect();
    let create_cases: Vec<(Value, &str)> = vec![
        (
            json!({"headers": [{"name": "x-a", "value": "1"}, {"name": "Host", "value": secret}]}),
            "headers[1].name",
        ),
        (
            json!({"headers": [{"name": "webhook-id", "value": secret}]}),
            "headers[0].name",
        ),
        (
            json!({"headers": [{"name": "x a", "value": secret}]}),
            "headers[0].name",
        ),
        (
            json!({"headers": [{"name": "x-a", "value": "1"}, {"name": "X-A", "value": secret}]}),
            "headers[1].name",
        ),
        (
            json!({"headers": [{"name": "x-a", "value": format!("{secret}\r\nx-evil: 1"), "secret": true}]}),
            "headers[0].value",
        ),
        (
            json!({"headers": [{"name": "x-a", "secret": true}]}),
            "headers[0].value",
        ),
        (
            json!({"headers": [{"name": "x-a", "value": "", "secret": true}]}),
            "headers[0].value",
        ),
        (json!({"headers": [{"name": "x-a"}]}), "headers[0].value"),
        (json!({"headers": many}), "headers"),
        (json!({"headers": big}), "headers"),
        (
            json!({"headers": [{"name": "x-a", "value": secret, "colour": "red"}]}),
            "headers[0].colour",
        ),
        (
            json!({"auth": {"type": "magic", "token": secret}}),
            "auth.type",
        ),
        (json!({"auth": {"token": secret}}), "auth.type"),
        (
            json!({"auth": {"type": "basic", "password": secret}}),
            "auth.username",
        ),
        (
            json!({"auth": {"type": "basic", "username": "u:v", "password": secret}}),
            "auth.username",
        ),
        (
            json!({"auth": {"type": "basic", "username": "u"}}),
            "auth.password",
        ),
        (
            json!({"auth": {"type": "basic", "username": "u", "password": format!("{secret}\n")}}),
            "auth.password",
        ),
        (json!({"auth": {"type": "bearer"}}), "auth.token"),
        (
            json!({"auth": {"type": "bearer", "token": format!("{secret} x")}}),
            "auth.token",
        ),
        (
            json!({"auth": {"type": "oauth2_client_credentials", "token_url": "ftp://127.0.0.1/t", "client_id": "c", "client_secret": secret}}),
            "auth.token_url",
        ),
        // The SSRF guard: a private address local mode does not allow.
        (
            json!({"auth": {"type": "oauth2_client_credentials", "token_url": "http://10.1.2.3/token", "client_id": "c", "client_secret": secret}}),
            "auth.token_url",
        ),
        (
            json!({"auth": {"type": "oauth2_client_credentials", "token_url": token_url, "client_id": "", "client_secret": secret}}),
            "auth.client_id",
        ),
        (
            json!({"auth": {"type": "oauth2_client_credentials", "token_url": token_url, "client_id": "c"}}),
            "auth.client_secret",
        ),
        (
            json!({"auth": {"type": "oauth2_client_credentials", "token_url": token_url, "client_id": "c", "client_secret": secret, "scope": "a  b"}}),
            "auth.scope",
        ),
        (
            json!({"auth": {"type": "oauth2_client_credentials", "token_url": token_url, "client_id": "c", "client_secret": secret, "client_auth": "jwt"}}),
            "auth.client_auth",
        ),
        (json!({"signatures": "v2"}), "signatures"),
        (
            json!({"headers": [{"name": "Authorization", "value": secret}], "auth": {"type": "bearer", "token": secret}}),
            "headers[0].name",
        ),
    ];
    for (mut body, field) in create_cases {
        body["url"] = json!(url);
        let a = api.post("/v1/tenants/tnt_a/endpoints", &body).await;
        assert_eq!(
            (a.status, a.problem(), a.field()),
            (400, "validation", field),
            "{body}: {}",
            a.text
        );
        assert!(!a.text.contains(secret), "a secret repeated: {}", a.text);
    }
    let list = api.get("/v1/tenants/tnt_a/endpoints").await;
    assert_eq!(list.json["items"], json!([]), "nothing was created");

    // PATCH: what can only be kept when it is there to keep.
    let (id, _) = created(
        &api.post(
            "/v1/tenants/tnt_a/endpoints",
            &json!({
                "url": url,
                "headers": [{"name": "authorization", "value": "ApiKey k"}, {"name": "x-k", "value": secret, "secret": true}],
            }),
        )
        .await,
    );
    let before = stored(&local, "tnt_a", &id).await;
    let path = format!("/v1/tenants/tnt_a/endpoints/{id}");
    for (body, field) in [
        // The stored custom authorization header and an authentication of its own.
        (json!({"auth": {"type": "bearer", "token": secret}}), "auth"),
        (
            json!({"headers": [{"name": "x-other", "secret": true}]}),
            "headers[0].value",
        ),
        // x-k is kept only as a secret: a plain entry needs its value.
        (json!({"headers": [{"name": "x-k"}]}), "headers[0].value"),
        (json!({"auth": {"type": "bearer"}}), "auth.token"),
        (
            json!({"auth": {"type": "basic", "username": "u"}}),
            "auth.password",
        ),
    ] {
        let a = api.call("PATCH", &path, Some(&body)).await;
        assert_eq!(
            (a.status, a.problem(), a.field()),
            (400, "validation", field),
            "{body}: {}",
            a.text
        );
        assert!(!a.text.contains(secret));
    }
    // OAuth2: the client secret is not kept for another token URL or client id.
    let oauth = |token_url: &str, client_id: &str, secret: Option<&str>| {
        let mut auth = json!({"type": "oauth2_client_credentials", "token_url": token_url, "client_id": client_id});
        if let Some(s) = secret {
            auth["client_secret"] = json!(s);
        }
        json!({"headers": [], "auth": auth})
    };
    let a = api
        .call("PATCH", &path, Some(&oauth(&token_url, "c", Some(secret))))
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    let kept = stored(&local, "tnt_a", &id).await;
    for (body, field) in [
        (
            oauth(&receiver.url("/elsewhere"), "c", None),
            "auth.client_secret",
        ),
        (oauth(&token_url, "other", None), "auth.client_secret"),
    ] {
        let a = api.call("PATCH", &path, Some(&body)).await;
        assert_eq!((a.status, a.field()), (400, field), "{}", a.text);
    }
    assert_eq!(
        stored(&local, "tnt_a", &id).await,
        kept,
        "refusals change nothing"
    );
    assert_ne!(kept, before);
}

/// The settings an API client set reach real receivers: a test send and a delivery carry
/// the custom headers and the `authorization` of basic and bearer; an OAuth2 endpoint
/// fetches its token from a loopback token server; `v1a` verifies (Python's
/// `cryptography`) with the public key the API answered, and after a rotation with both
/// keys. No secret is in any answer or any captured log line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_set_settings_reach_real_receivers_and_no_secret_is_shown_or_logged() {
    let logs = capture_logs();
    let receiver = Receiver::start().await.expect("receiver");
    let tokens = Receiver::start().await.expect("token server");
    let (header_secret, bearer, password, client_secret, access) = (
        "hdr-Tq55-secret-value",
        "bearer-Nn61-secret-value",
        "pw-Rr73-secret-value",
        "client-Jj84-secret-value",
        "access-Gg96-token-value",
    );
    tokens.set("/token", Behavior::Always(token_reply(access)));
    receiver.set(
        "/bearer",
        Behavior::RequireAuthorization(format!("Bearer {bearer}")),
    );
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("tern:{password}"))
    );
    receiver.set("/basic", Behavior::RequireAuthorization(basic.clone()));
    receiver.set(
        "/oauth",
        Behavior::RequireAuthorization(format!("Bearer {access}")),
    );
    let (_local, api) = api_deployment("api-reach-receivers").await;
    let mut answers: Vec<Answer> = Vec::new();

    // Bearer, headers, both signatures: a test send, then a delivery.
    let a = api
        .post(
            "/v1/tenants/tnt_r/endpoints",
            &json!({
                "url": receiver.url("/bearer"),
                "event_types": ["order.paid"],
                "headers": [{"name": "X-Tenant", "value": "acme"}, {"name": "X-Api-Key", "value": header_secret, "secret": true}],
                "auth": {"type": "bearer", "token": bearer},
                "signatures": "both",
            }),
        )
        .await;
    let (bearer_ep, whsec) = created(&a);
    let first_key = a.json["endpoint"]["signing_keys"][0]["public_key"]
        .as_str()
        .expect("a public key")
        .to_owned();
    answers.push(a);
    let test = api
        .post(
            &format!("/v1/tenants/tnt_r/endpoints/{bearer_ep}/test"),
            &json!({}),
        )
        .await;
    assert_eq!(
        (test.status, &test.json["delivered"]),
        (200, &json!(true)),
        "{}",
        test.text
    );
    answers.push(test);
    let published = api
        .post(
            "/v1/tenants/tnt_r/events",
            &json!({"type": "order.paid", "payload": {"n": 1}}),
        )
        .await;
    assert_eq!(published.status, 202, "{}", published.text);
    let got = receiver.wait_for("/bearer", 2, WAIT).await;
    for req in &got {
        assert_eq!(req.answered, 200, "the receiver took the bearer token");
        assert_eq!(req.header("x-tenant"), Some("acme"));
        assert_eq!(req.header("x-api-key"), Some(header_secret));
        verify_reference(&whsec, req).expect("v1 verifies");
        assert_eq!(
            verify_v1a_in_python(req, std::slice::from_ref(&first_key)),
            [true],
            "v1a verifies with the public key the API answered"
        );
    }
    // Rotate the signing key: both keys sign during the overlap.
    let rotated = api
        .post(
            &format!("/v1/tenants/tnt_r/endpoints/{bearer_ep}/rotate-signing-key"),
            &json!({"overlap_hours": 1}),
        )
        .await;
    assert_eq!(rotated.status, 200, "{}", rotated.text);
    let second_key = rotated.json["public_key"]
        .as_str()
        .expect("public_key")
        .to_owned();
    assert_ne!(second_key, first_key);
    let states: Vec<&str> = rotated.json["endpoint"]["signing_keys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| k["state"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(states, ["current", "previous"]);
    answers.push(rotated);
    let test = api
        .post(
            &format!("/v1/tenants/tnt_r/endpoints/{bearer_ep}/test"),
            &json!({}),
        )
        .await;
    assert_eq!(test.json["delivered"], true, "{}", test.text);
    answers.push(test);
    let got = receiver.requests("/bearer");
    let last = got.last().expect("the test send");
    assert_eq!(
        verify_v1a_in_python(last, &[second_key.clone(), first_key.clone()]),
        [true, true],
        "both keys sign during the overlap"
    );

    // Basic, set by a PATCH.
    let (basic_ep, _) = created(
        &api.post(
            "/v1/tenants/tnt_r/endpoints",
            &json!({"url": receiver.url("/basic"), "event_types": ["x.y"]}),
        )
        .await,
    );
    let a = api
        .call(
            "PATCH",
            &format!("/v1/tenants/tnt_r/endpoints/{basic_ep}"),
            Some(&json!({"auth": {"type": "basic", "username": "tern", "password": password}})),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    answers.push(a);
    let test = api
        .post(
            &format!("/v1/tenants/tnt_r/endpoints/{basic_ep}/test"),
            &json!({}),
        )
        .await;
    assert_eq!(test.json["delivered"], true, "{}", test.text);
    assert_eq!(
        receiver.requests("/basic")[0].header("authorization"),
        Some(basic.as_str())
    );
    answers.push(test);

    // OAuth2 client credentials from the loopback token server.
    let (oauth_ep, _) = created(
        &api.post(
            "/v1/tenants/tnt_r/endpoints",
            &json!({
                "url": receiver.url("/oauth"),
                "event_types": ["x.y"],
                "auth": {
                    "type": "oauth2_client_credentials", "token_url": tokens.url("/token"),
                    "client_id": "tern-client", "client_secret": client_secret, "scope": "webhooks:write",
                },
            }),
        )
        .await,
    );
    let test = api
        .post(
            &format!("/v1/tenants/tnt_r/endpoints/{oauth_ep}/test"),
            &json!({}),
        )
        .await;
    assert_eq!(test.json["delivered"], true, "{}", test.text);
    answers.push(test);
    let token_requests = tokens.requests("/token");
    assert_eq!(token_requests.len(), 1);
    assert_eq!(
        token_requests[0].header("authorization"),
        Some(
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD
                    .encode(format!("tern-client:{client_secret}"))
            )
            .as_str()
        ),
        "client_secret_basic (RFC 6749 §2.3.1)"
    );
    assert_eq!(
        receiver.requests("/oauth")[0].header("authorization"),
        Some(format!("Bearer {access}").as_str())
    );

    // Every read of these endpoints, then every answer so far: no secret.
    for path in [
        "/v1/tenants/tnt_r/endpoints".to_owned(),
        format!("/v1/tenants/tnt_r/endpoints/{bearer_ep}"),
        format!("/v1/tenants/tnt_r/endpoints/{basic_ep}"),
        format!("/v1/tenants/tnt_r/endpoints/{oauth_ep}"),
        format!("/v1/tenants/tnt_r/endpoints/{bearer_ep}/health"),
        format!("/v1/tenants/tnt_r/endpoints/{bearer_ep}/attempts"),
    ] {
        answers.push(api.get(&path).await);
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    let forms: Vec<String> = [header_secret, bearer, password, client_secret, access]
        .iter()
        .flat_map(|s| [(*s).to_owned(), b64.encode(s)])
        .chain([b64.encode(format!("tern:{password}"))])
        .collect();
    for answer in &answers {
        for form in &forms {
            assert!(
                !answer.text.contains(form.as_str()),
                "a secret in an answer: {}",
                answer.text
            );
        }
    }
    // The logs of the whole run (API, sender, token fetch), at TRACE.
    let text = logs.text();
    assert!(
        text.contains(&bearer_ep),
        "the capture holds this run's lines"
    );
    for form in &forms {
        assert!(
            !text.contains(form.as_str()),
            "a secret in the logs: {form}"
        );
    }
}
