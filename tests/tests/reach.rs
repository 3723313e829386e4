//! Issue 20, items 1, 2 and 4: custom headers, authentication to the receiver (basic,
//! bearer, OAuth2 client credentials against a token server of our own) and Ed25519
//! `v1a` signatures, end to end on moto with receivers on 127.0.0.1.
//!
//! - Custom headers arrive as set; forbidden names are refused when set.
//! - Basic and bearer reach receivers that require them.
//! - OAuth2: one token request for many deliveries (the cache), a 401 to a cached token
//!   is one refresh and one re-send within the same attempt, a failing token endpoint is
//!   an `auth_token` failure that retries and counts in the endpoint's health, a token URL
//!   to a refused address is refused when set and at fetch, without a connection.
//! - Secret values (secret headers, basic password, bearer token, client secret, fetched
//!   token) never reach a log line at TRACE, the operator's views or the console.
//! - `v1a` verified by Python's `cryptography` (not our code), with a rotation: both keys
//!   sign during the overlap, only the new one after.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use chrono::Utc;
use tern_core::custom_headers::{CustomHeader, FieldValue};
use tern_core::health::HealthStore as _;
use tern_core::receiver_auth::{ClientAuthMethod, OAuth2ClientCredentials, ReceiverAuth};
use tern_core::{
    AttemptResult, Endpoint, EndpointId, ErrorClass, Secret, SecretValue, Signatures, SigningKey,
    TenantId,
};
use tern_http::{
    AttemptRequest, ClientOptions, DeliveryClient, DestinationPolicy, HostLookup, StaticLookup,
};
use tern_local::LocalOptions;
use tern_local::ops as tern_ops;
use tern_ops::{NewEndpoint, OpsError};
use tern_tests::*;

fn fast() -> LocalOptions {
    LocalOptions {
        time_scale: 0.001,
        ..LocalOptions::default()
    }
}

fn loopback_policy() -> DestinationPolicy {
    DestinationPolicy {
        https_only: false,
        allow: vec!["127.0.0.1/32".parse().expect("net")],
        nat64: false,
    }
}

/// A new endpoint of `tenant` at `url` with `set` applied, validated and stored.
async fn endpoint_with(
    local: &tern_local::LocalTern,
    tenant: &str,
    url: &str,
    set: impl FnOnce(&mut Endpoint),
) -> Endpoint {
    let mut e = Endpoint::new(
        EndpointId::generate(),
        TenantId::new(tenant).expect("tenant"),
        url,
        vec!["*".into()],
        Secret::generate(),
        Utc::now(),
    );
    set(&mut e);
    e.validate().expect("valid endpoint");
    local.sender.endpoints.put(&e).await.expect("put endpoint");
    e
}

fn plain(name: &str, value: &str) -> CustomHeader {
    CustomHeader::new(name, FieldValue::Plain(value.into())).expect("header")
}

fn secret_header(name: &str, value: &str) -> CustomHeader {
    CustomHeader::new(name, FieldValue::Secret(SecretValue::new(value))).expect("header")
}

/// A token endpoint's 200 with `token`, valid for an hour.
fn token_reply(token: &str) -> Reply {
    Reply::status(200)
        .header("content-type", "application/json")
        .header("cache-control", "no-store")
        .body(&format!(
            r#"{{"access_token":"{token}","token_type":"Bearer","expires_in":3600}}"#
        ))
}

fn grant(token_url: String, secret: &str) -> OAuth2ClientCredentials {
    OAuth2ClientCredentials {
        token_url,
        client_id: "tern-client".into(),
        client_secret: SecretValue::new(secret),
        scope: Some("webhooks:write".into()),
        audience: Some("https://api.receiver.example".into()),
        client_auth: ClientAuthMethod::ClientSecretBasic,
    }
}

// ---------------------------------------------------------------- custom headers

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_headers_arrive_as_set_and_forbidden_names_are_refused() {
    let (local, _rx) = deployment("headers", fast()).await;
    let receiver = Receiver::start().await.expect("receiver");
    let ep = endpoint_with(&local, "tnt_h", &receiver.url("/h"), |e| {
        e.headers = vec![
            plain("X-Tenant", "acme corp"),
            secret_header("X-Api-Key", "k-7Hq2-secret"),
            // With no authentication of its own, an endpoint may send its own
            // authorization header (an API gateway's API key scheme).
            plain("Authorization", "ApiKey abc123"),
        ];
    })
    .await;
    publish(&local, "order.paid", "tnt_h", r#"{"n":1}"#).await;
    let got = receiver.wait_for("/h", 1, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 1);
    let req = &got[0];
    assert_eq!(req.header("x-tenant"), Some("acme corp"));
    assert_eq!(req.header("x-api-key"), Some("k-7Hq2-secret"));
    assert_eq!(req.header("authorization"), Some("ApiKey abc123"));
    // Tern's own headers are still Tern's, and the request still verifies.
    assert_eq!(req.header("user-agent"), Some(tern_core::USER_AGENT));
    assert_eq!(req.header("content-type"), Some("application/json"));
    verify_reference(&ep.secrets[0].secret, req).expect("reference verifier accepts");

    // Forbidden names are refused when set, by `add` and `update`, and nothing is written.
    let store = local.sender.endpoints.as_ref();
    let policy = loopback_policy();
    let before = store.list_for_tenant(&ep.tenant_id).await.expect("list");
    for name in [
        "webhook-id",
        "Webhook-Signature",
        "idempotency-key",
        "x-webhook-signature",
        "user-agent",
        "content-type",
        "host",
        "content-length",
        "connection",
        "transfer-encoding",
        "upgrade",
    ] {
        // Past the CLI's own check: a header built by hand (as an API body would be).
        let forged = CustomHeader {
            name: name.to_ascii_lowercase(),
            value: FieldValue::Plain("x".into()),
        };
        let err = tern_ops::add_endpoint(
            store,
            NewEndpoint {
                tenant: "tnt_h".into(),
                url: receiver.url("/h2"),
                event_types: vec!["*".into()],
                max_attempts: None,
                timeout_ms: None,
                schedule: None,
                description: None,
                payload_format: tern_core::PayloadFormat::Raw,
                max_per_second: None,
                secret: None,
                headers: vec![forged.clone()],
                auth: ReceiverAuth::None,
                signatures: Signatures::V1,
                client_certificate: None,
            },
            &policy,
            no_dns().as_ref(),
        )
        .await
        .expect_err(name);
        assert!(
            matches!(&err, OpsError::Invalid(m) if m.contains("cannot be set")),
            "{name}: {err}"
        );
        let err = tern_ops::update_endpoint(
            store,
            None,
            &ep.id,
            &tern_core::endpoint::EndpointUpdate {
                headers: Some(vec![forged]),
                ..Default::default()
            },
            &policy,
            no_dns().as_ref(),
        )
        .await
        .expect_err(name);
        assert!(matches!(err, OpsError::Invalid(_)), "{name}: {err}");
    }
    // A header value that would split the request is refused, and the error does not
    // repeat it.
    assert!(
        CustomHeader::new("x-evil", FieldValue::Plain("a\r\nhost: b".into()))
            .unwrap_err()
            .to_string()
            .contains("x-evil")
    );
    // A custom authorization header cannot go with an authentication of its own.
    let err = tern_ops::update_endpoint(
        store,
        None,
        &ep.id,
        &tern_core::endpoint::EndpointUpdate {
            auth: Some(ReceiverAuth::Bearer {
                token: SecretValue::new("t0ken"),
            }),
            ..Default::default()
        },
        &policy,
        no_dns().as_ref(),
    )
    .await
    .expect_err("two authorization headers");
    assert!(err.to_string().contains("two"), "{err}");
    assert_eq!(
        store.list_for_tenant(&ep.tenant_id).await.expect("list"),
        before,
        "nothing refused was written"
    );
}

// ---------------------------------------------------------------- basic and bearer

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_and_bearer_authenticate_to_receivers_that_require_them() {
    let (local, _rx) = deployment("basic-bearer", fast()).await;
    let receiver = Receiver::start().await.expect("receiver");
    // RFC 7617 §2's example pair.
    receiver.set(
        "/basic",
        Behavior::RequireAuthorization("Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==".into()),
    );
    receiver.set(
        "/bearer",
        Behavior::RequireAuthorization("Bearer mF_9.B5f-4.1JqM".into()),
    );
    receiver.set(
        "/none",
        Behavior::RequireAuthorization("Bearer mF_9.B5f-4.1JqM".into()),
    );
    endpoint_with(&local, "tnt_b", &receiver.url("/basic"), |e| {
        e.auth = ReceiverAuth::Basic {
            username: "Aladdin".into(),
            password: SecretValue::new("open sesame"),
        };
    })
    .await;
    endpoint_with(&local, "tnt_b", &receiver.url("/bearer"), |e| {
        e.auth = ReceiverAuth::Bearer {
            token: SecretValue::new("mF_9.B5f-4.1JqM"),
        };
    })
    .await;
    let none = endpoint_with(&local, "tnt_b", &receiver.url("/none"), |e| {
        e.max_attempts = Some(1);
    })
    .await;
    let event = publish(&local, "order.paid", "tnt_b", r#"{"n":1}"#).await;
    for path in ["/basic", "/bearer"] {
        let got = receiver.wait_for(path, 1, Duration::from_secs(30)).await;
        assert_eq!(
            got.iter().map(|r| r.answered).collect::<Vec<_>>(),
            [200],
            "{path}"
        );
    }
    // The same receiver without the credential: 401, recorded as the receiver's answer.
    assert!(history_reaches(&local, "tnt_b", &event, 3, Duration::from_secs(30)).await);
    let rows = attempts_of(&local, &event, &none).await;
    assert_eq!(rows[0].status, Some(401), "{rows:?}");
}

// ---------------------------------------------------------------- OAuth2

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_tokens_are_cached_refreshed_once_on_401_and_a_failing_token_endpoint_is_auth_token()
{
    let (local, _rx) = deployment("oauth", fast()).await;
    let receiver = Receiver::start().await.expect("receiver");
    let tokens = Receiver::start().await.expect("token server");
    tokens.set(
        "/token",
        Behavior::Script(vec![token_reply("tok-1"), token_reply("tok-2")]),
    );
    receiver.set(
        "/hook",
        Behavior::RequireAuthorization("Bearer tok-1".into()),
    );
    let ep = endpoint_with(&local, "tnt_o", &receiver.url("/hook"), |e| {
        e.auth = ReceiverAuth::Oauth2ClientCredentials(grant(tokens.url("/token"), "cs-1"));
    })
    .await;

    // Five deliveries, one token request: the cache (and one fetch at a time per endpoint).
    for n in 0..5 {
        publish(&local, "order.paid", "tnt_o", &format!(r#"{{"n":{n}}}"#)).await;
    }
    let got = receiver.wait_for("/hook", 5, Duration::from_secs(30)).await;
    assert_eq!(
        got.iter().filter(|r| r.answered == 200).count(),
        5,
        "{got:?}"
    );
    let token_requests = tokens.requests("/token");
    assert_eq!(token_requests.len(), 1, "one token for five deliveries");
    // The request RFC 6749 §4.4.2 describes, with client_secret_basic (§2.3.1).
    let t = &token_requests[0];
    assert_eq!(t.method, "POST");
    assert_eq!(
        t.header("content-type"),
        Some("application/x-www-form-urlencoded")
    );
    let form: Vec<(String, String)> = url_pairs(&t.body);
    assert_eq!(
        form,
        [
            ("grant_type".to_owned(), "client_credentials".to_owned()),
            ("scope".to_owned(), "webhooks:write".to_owned()),
            (
                "audience".to_owned(),
                "https://api.receiver.example".to_owned()
            ),
        ]
    );
    let basic = t
        .header("authorization")
        .and_then(|v| v.strip_prefix("Basic "))
        .expect("client authentication");
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(basic)
            .expect("base64"),
        b"tern-client:cs-1"
    );

    // The receiver's gateway moves on to a new token: the cached one gets a 401, Tern
    // fetches once and sends again, within the same attempt.
    receiver.set(
        "/hook",
        Behavior::RequireAuthorization("Bearer tok-2".into()),
    );
    let event = publish(&local, "order.paid", "tnt_o", r#"{"n":"after"}"#).await;
    let got = receiver.wait_for("/hook", 7, Duration::from_secs(30)).await;
    let got = &got[5..];
    assert_eq!(
        got.iter().map(|r| r.answered).collect::<Vec<_>>(),
        [401, 200]
    );
    assert_eq!(got[0].header("webhook-id"), got[1].header("webhook-id"));
    assert_eq!(got[1].header("authorization"), Some("Bearer tok-2"));
    assert_eq!(tokens.requests("/token").len(), 2, "one refresh");
    assert!(history_reaches(&local, "tnt_o", &event, 1, Duration::from_secs(10)).await);
    let rows = attempts_of(&local, &event, &ep).await;
    assert_eq!(
        rows.iter()
            .map(|r| (r.attempt, r.status, r.outcome.as_str()))
            .collect::<Vec<_>>(),
        [(1, Some(200), "delivered")],
        "the refresh is inside one attempt"
    );

    // A token endpoint that fails: attempt 1 is an auth_token failure (no request reaches
    // the receiver), retried on the schedule, then delivered; counted in its health.
    tokens.set(
        "/flaky",
        Behavior::Script(vec![
            Reply::status(503)
                .header("content-type", "application/json")
                .body(r#"{"error":"temporarily_unavailable"}"#),
            token_reply("tok-f"),
        ]),
    );
    receiver.set(
        "/hook2",
        Behavior::RequireAuthorization("Bearer tok-f".into()),
    );
    let flaky = endpoint_with(&local, "tnt_o2", &receiver.url("/hook2"), |e| {
        e.auth = ReceiverAuth::Oauth2ClientCredentials(grant(tokens.url("/flaky"), "cs-2"));
    })
    .await;
    let event = publish(&local, "order.paid", "tnt_o2", r#"{"n":"flaky"}"#).await;
    assert!(history_reaches(&local, "tnt_o2", &event, 2, Duration::from_secs(30)).await);
    let rows = attempts_of(&local, &event, &flaky).await;
    assert_eq!(rows[0].error_class, Some(ErrorClass::AuthToken), "{rows:?}");
    assert_eq!(rows[0].outcome, "retry");
    assert_eq!(rows[0].status, None);
    let error = rows[0].error.as_deref().unwrap_or_default();
    assert!(
        error.contains("token endpoint answered 503 (temporarily_unavailable)"),
        "{error}"
    );
    assert_eq!(rows[1].outcome, "delivered", "{rows:?}");
    assert_eq!(
        receiver.requests("/hook2").len(),
        1,
        "nothing was sent without a token"
    );
    let health = tern_aws::DynamoHealthStore::new(
        aws_sdk_dynamodb::Client::new(&local.aws),
        &local.resources.health_table,
    );
    let counted = eventually(Duration::from_secs(10), async || {
        health
            .get(&flaky.tenant_id, &flaky.id)
            .await
            .ok()
            .flatten()
            .and_then(|h| h.last_failure)
            .is_some_and(|f| f.error_class == Some(ErrorClass::AuthToken))
    })
    .await;
    assert!(counted, "the token endpoint's failure is the endpoint's");
}

/// `application/x-www-form-urlencoded` pairs of a body.
fn url_pairs(body: &[u8]) -> Vec<(String, String)> {
    let text = std::str::from_utf8(body).expect("form is UTF-8");
    text.split('&')
        .map(|pair| {
            let (k, v) = pair.split_once('=').expect("k=v");
            let decode = |s: &str| {
                let s = s.replace('+', " ");
                let mut out = Vec::new();
                let b = s.as_bytes();
                let mut i = 0;
                while i < b.len() {
                    if b[i] == b'%' {
                        out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).expect("hex"));
                        i += 3;
                    } else {
                        out.push(b[i]);
                        i += 1;
                    }
                }
                String::from_utf8(out).expect("utf-8")
            };
            (decode(k), decode(v))
        })
        .collect()
}

fn client(policy: DestinationPolicy, lookup: Arc<dyn HostLookup>) -> DeliveryClient {
    DeliveryClient::new(ClientOptions {
        policy,
        lookup,
        ..ClientOptions::default()
    })
    .expect("client")
}

async fn oauth_attempt(client: &DeliveryClient, url: &str, token_url: String) -> AttemptResult {
    client
        .attempt_oauth(
            AttemptRequest {
                url,
                body: bytes::Bytes::from_static(b"{}"),
                headers: &[],
                deadline: Duration::from_secs(5),
            },
            &TenantId::new("tnt_x").expect("tenant"),
            &EndpointId::generate(),
            &grant(token_url, "cs-x"),
        )
        .await
        .result
}

fn class_of(r: &AttemptResult) -> Option<ErrorClass> {
    match r {
        AttemptResult::Failed { class, .. } => Some(*class),
        AttemptResult::Response { .. } => None,
    }
}

fn detail_of(r: &AttemptResult) -> String {
    match r {
        AttemptResult::Failed { detail, .. } => detail.clone(),
        AttemptResult::Response { status, .. } => format!("status {status}"),
    }
}

/// Issue 28: token servers in the wild. `expires_in` as `3600.0` (Reddit's form) made the
/// receiver unreachable (`auth_token`), and Java's `Long.MAX_VALUE` ("never expires")
/// panicked the attempt; each form now gets the token used, and cached at most a day.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_lifetimes_in_every_form_real_servers_send_are_used() {
    let receiver = Receiver::start().await.expect("receiver");
    let tokens = Receiver::start().await.expect("token server");
    receiver.set(
        "/hook",
        Behavior::RequireAuthorization("Bearer tok-w".into()),
    );
    let c = client(loopback_policy(), no_dns());
    for (name, expires_in) in [
        ("float", "3600.0"),
        ("fraction", "0.25"),
        ("exponent", "3.6e3"),
        ("long-max", "9223372036854775807"),
        ("beyond-u64", "1e300"),
        ("string", "\"3600.0\""),
    ] {
        let path = format!("/token-{name}");
        tokens.set(
            &path,
            Behavior::Always(
                Reply::status(200)
                    .header("content-type", "application/json")
                    .body(&format!(
                        r#"{{"access_token":"tok-w","token_type":"Bearer","expires_in":{expires_in}}}"#
                    )),
            ),
        );
        let r = oauth_attempt(&c, &receiver.url("/hook"), tokens.url(&path)).await;
        assert!(
            matches!(r, AttemptResult::Response { status: 200, .. }),
            "{name} ({expires_in}): {r:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_endpoint_failures_are_auth_token_and_token_urls_pass_the_guard() {
    let receiver = Receiver::start().await.expect("receiver");
    let tokens = Receiver::start().await.expect("token server");
    let c = client(loopback_policy(), no_dns());
    let hook = receiver.url("/hook");

    // Down (nothing listens), an error answer, not a token: each `auth_token`, and the
    // receiver never sees a request.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    let closed_url = format!("http://{}/token", closed.local_addr().expect("addr"));
    drop(closed);
    tokens.set(
        "/denied",
        Behavior::Always(
            Reply::status(401)
                .header("content-type", "application/json")
                .body(r#"{"error":"invalid_client"}"#),
        ),
    );
    tokens.set("/html", Behavior::Always(Reply::status(200).body("<html>")));
    tokens.set(
        "/mac",
        Behavior::Always(Reply::status(200).body(r#"{"access_token":"x","token_type":"mac"}"#)),
    );
    for (token_url, says) in [
        (closed_url, "token endpoint: connect"),
        (
            tokens.url("/denied"),
            "token endpoint answered 401 (invalid_client)",
        ),
        (tokens.url("/html"), "not a JSON object"),
        (tokens.url("/mac"), "is not Bearer"),
    ] {
        let r = oauth_attempt(&c, &hook, token_url.clone()).await;
        assert_eq!(
            class_of(&r),
            Some(ErrorClass::AuthToken),
            "{token_url}: {r:?}"
        );
        assert!(detail_of(&r).contains(says), "{token_url}: {r:?}");
    }
    assert!(receiver.requests("/hook").is_empty());

    // A token URL to an address the guard refuses: `blocked` (dead-lettered as a blocked
    // destination), refused before any connection. By IP literal, and by a name that
    // resolves to an address outside the allow-list (127.0.0.2 here, on this machine).
    let listener = CountingListener::start(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)))
        .await
        .expect("listener");
    let port = listener.addr.port();
    let lookup: Arc<dyn HostLookup> = Arc::new(StaticLookup {
        hosts: vec![(
            "auth.internal.example".to_owned(),
            vec![IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))],
        )]
        .into_iter()
        .collect(),
    });
    let c = client(loopback_policy(), lookup.clone());
    for token_url in [
        format!("http://127.0.0.2:{port}/token"),
        format!("http://auth.internal.example:{port}/token"),
        "http://169.254.169.254/latest/token".to_owned(),
    ] {
        let r = oauth_attempt(&c, &hook, token_url.clone()).await;
        assert_eq!(
            class_of(&r),
            Some(ErrorClass::Blocked),
            "{token_url}: {r:?}"
        );
    }
    assert_eq!(
        listener.connections(),
        0,
        "no connection to a refused token URL"
    );

    // Refused when set, by `add` (and `update`) with the deployment's policy.
    let local = deployment_without_pollers("oauth-guard", fast()).await;
    let store = local.sender.endpoints.as_ref();
    for token_url in [
        "http://10.0.0.5/token".to_owned(),
        "http://169.254.169.254/latest".to_owned(),
        format!("http://auth.internal.example:{port}/token"),
    ] {
        let err = tern_ops::add_endpoint(
            store,
            NewEndpoint {
                tenant: "tnt_g".into(),
                url: receiver.url("/hook"),
                event_types: vec!["*".into()],
                max_attempts: None,
                timeout_ms: None,
                schedule: None,
                description: None,
                payload_format: tern_core::PayloadFormat::Raw,
                max_per_second: None,
                secret: None,
                headers: vec![],
                auth: ReceiverAuth::Oauth2ClientCredentials(grant(token_url.clone(), "cs")),
                signatures: Signatures::V1,
                client_certificate: None,
            },
            &loopback_policy(),
            lookup.as_ref(),
        )
        .await
        .expect_err(&token_url);
        assert!(
            matches!(&err, OpsError::Invalid(m) if m.contains("OAuth2 token URL")),
            "{token_url}: {err}"
        );
    }
    assert!(
        store
            .list_for_tenant(&TenantId::new("tnt_g").expect("tenant"))
            .await
            .expect("list")
            .is_empty()
    );
    assert_eq!(listener.connections(), 0);
}

// ---------------------------------------------------------------- secrets

/// Every credential of this test, and the forms a careless log line could show.
fn secret_forms(values: &[&str]) -> Vec<String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    values
        .iter()
        .flat_map(|v| [(*v).to_owned(), b64.encode(v)])
        .collect()
}

/// A full run at TRACE for every target (the Lambda binaries' guard on): secret
/// headers, basic, bearer and OAuth2 endpoints deliver, retry, refresh a token after a
/// 401 and dead-letter. No secret value (nor its base64) is in the logs, in `show`'s
/// text or JSON, in `list --json`, or in the console's Endpoints widget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_values_never_reach_the_logs_the_operators_views_or_the_console() {
    let logs = capture_logs();
    let options = LocalOptions {
        console_port: Some(0),
        ..fast()
    };
    let (local, _rx) = deployment("reach-secrets", options).await;
    let receiver = Receiver::start().await.expect("receiver");
    let tokens = Receiver::start().await.expect("token server");
    let (header_secret, password, bearer, client_secret) = (
        "hdr-Zq81-secret-value",
        "pw-Vx52-secret-value",
        "bearer-Kt09-secret-value",
        "client-Wm33-secret-value",
    );
    let (token_1, token_2) = ("access-Rr71-token-one", "access-Rr72-token-two");
    tokens.set(
        "/token",
        Behavior::Script(vec![token_reply(token_1), token_reply(token_2)]),
    );
    receiver.set(
        "/oauth",
        Behavior::Script(vec![
            Reply::status(200),
            Reply::status(401),
            Reply::status(200),
        ]),
    );
    receiver.set("/basic", Behavior::Always(Reply::status(500)));
    let with_headers = endpoint_with(&local, "tnt_s", &receiver.url("/headers"), |e| {
        e.headers = vec![
            plain("x-tenant", "acme"),
            secret_header("x-api-key", header_secret),
        ];
    })
    .await;
    let basic = endpoint_with(&local, "tnt_s", &receiver.url("/basic"), |e| {
        e.max_attempts = Some(2);
        e.auth = ReceiverAuth::Basic {
            username: "tern".into(),
            password: SecretValue::new(password),
        };
    })
    .await;
    let bearer_ep = endpoint_with(&local, "tnt_s", &receiver.url("/bearer"), |e| {
        e.auth = ReceiverAuth::Bearer {
            token: SecretValue::new(bearer),
        };
    })
    .await;
    let oauth = endpoint_with(&local, "tnt_s", &receiver.url("/oauth"), |e| {
        e.auth = ReceiverAuth::Oauth2ClientCredentials(grant(tokens.url("/token"), client_secret));
    })
    .await;

    publish(&local, "order.paid", "tnt_s", r#"{"n":1}"#).await;
    // One at a time, so the second delivery is the one that meets the 401 with a cached
    // token (two in one batch would share the first token and race for the answers).
    assert_eq!(
        receiver
            .wait_for("/oauth", 1, Duration::from_secs(30))
            .await
            .len(),
        1
    );
    publish(&local, "order.paid", "tnt_s", r#"{"n":2}"#).await;
    // Two deliveries and a refresh after the 401 at /oauth; the basic endpoint exhausts.
    assert_eq!(
        receiver
            .wait_for("/oauth", 3, Duration::from_secs(30))
            .await
            .len(),
        3
    );
    assert_eq!(
        receiver
            .wait_for("/bearer", 2, Duration::from_secs(30))
            .await
            .len(),
        2
    );
    assert_eq!(
        receiver
            .wait_for("/headers", 2, Duration::from_secs(30))
            .await
            .len(),
        2
    );
    let dlq = local.resources.dlq_url.clone();
    assert!(
        eventually(Duration::from_secs(30), async || peek_queue(&local, &dlq)
            .await
            .len()
            == 2)
        .await,
        "the basic endpoint's two deliveries dead-letter"
    );
    assert_eq!(tokens.requests("/token").len(), 2);
    // The credentials did reach the receivers: the search below looks for real values.
    assert_eq!(
        receiver.requests("/headers")[0].header("x-api-key"),
        Some(header_secret)
    );
    assert_eq!(
        receiver.requests("/oauth")[2].header("authorization"),
        Some(format!("Bearer {token_2}").as_str())
    );

    // The operator's views: `tern endpoints show` (text and --json) and `list --json`.
    let mut views = String::new();
    for e in [&with_headers, &basic, &bearer_ep, &oauth] {
        let stored = local
            .sender
            .endpoints
            .get(&e.tenant_id, &e.id)
            .await
            .expect("get")
            .expect("stored");
        let mut text = Vec::new();
        tern_ops::print_endpoint(&mut text, &stored, false).expect("show");
        let mut json = Vec::new();
        tern_ops::print_endpoint(&mut json, &stored, true).expect("show --json");
        views.push_str(&String::from_utf8_lossy(&text));
        views.push_str(&String::from_utf8_lossy(&json));
        views.push_str(
            &serde_json::to_string(&tern_ops::EndpointView::of(&stored, Utc::now())).expect("json"),
        );
    }
    assert!(views.contains("x-api-key: (secret, set)"), "{views}");
    assert!(views.contains("x-tenant: acme"), "{views}");
    assert!(
        views.contains("basic username=tern password=(secret, set)"),
        "{views}"
    );
    assert!(
        views.contains("\"client_secret\""),
        "the JSON names the secret: {views}"
    );

    // The console's Endpoints widget (the basic endpoint has dead letters: it is listed).
    let console = local.console.expect("the console started");
    let page = reqwest::get(format!(
        "{}widgets/endpoints",
        tern_local::console::url(console)
    ))
    .await
    .expect("console")
    .text()
    .await
    .expect("page");
    assert!(page.contains(basic.id.as_str()), "{page}");
    assert!(
        page.contains("<td class=\"auth\"><code>basic</code></td>"),
        "{page}"
    );

    tokio::time::sleep(Duration::from_millis(300)).await;
    let text = logs.text();
    assert!(
        text.contains("OAuth2 token fetched") && text.contains("TRACE"),
        "the capture saw the run ({} bytes)",
        text.len()
    );
    let all = secret_forms(&[
        header_secret,
        password,
        bearer,
        client_secret,
        token_1,
        token_2,
        // The basic header's base64 and the token request's client authentication.
        &format!("tern:{password}"),
        &format!("tern-client:{client_secret}"),
    ]);
    for (place, haystack) in [("logs", &text), ("views", &views), ("console", &page)] {
        for form in &all {
            let lines: Vec<String> = haystack
                .lines()
                .filter(|l| l.contains(form.as_str()))
                .map(|l| {
                    l.replace(form.as_str(), "<SECRET>")
                        .chars()
                        .take(300)
                        .collect()
                })
                .take(5)
                .collect();
            assert!(
                lines.is_empty(),
                "a secret value appears in the {place}:\n{}",
                lines.join("\n")
            );
        }
    }
}

// ---------------------------------------------------------------- v1a

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1a_signatures_verify_with_python_cryptography_and_rotate_with_two_keys() {
    let (local, _rx) = deployment("v1a", fast()).await;
    let receiver = Receiver::start().await.expect("receiver");
    let store = local.sender.endpoints.as_ref();
    let first = SigningKey::generate();
    let ep = endpoint_with(&local, "tnt_a", &receiver.url("/a"), |e| {
        e.signatures = Signatures::V1a;
        e.rotate_signing_key(first.clone(), Utc::now(), chrono::Duration::zero())
            .expect("key");
    })
    .await;
    let k1 = first.public_key().to_string();

    // v1a alone: one Ed25519 entry, no HMAC anywhere; it verifies with the public key.
    publish(&local, "order.paid", "tnt_a", r#"{"b": 1,"a":"é"}"#).await;
    let got = receiver.wait_for("/a", 1, Duration::from_secs(30)).await;
    let req = &got[0];
    let sig = req.header("webhook-signature").expect("signature");
    assert!(sig.starts_with("v1a,") && !sig.contains(' '), "{sig}");
    assert_eq!(
        req.header("x-webhook-signature"),
        None,
        "no HMAC with v1a alone"
    );
    assert_eq!(verify_v1a_in_python(req, std::slice::from_ref(&k1)), [true]);
    // The check can fail: another key does not verify, nor a changed body.
    let stranger = SigningKey::generate().public_key().to_string();
    assert_eq!(verify_v1a_in_python(req, &[stranger]), [false]);
    let mut tampered = req.clone();
    tampered.body = bytes::Bytes::from(r#"{"b": 2,"a":"é"}"#.as_bytes());
    assert_eq!(
        verify_v1a_in_python(&tampered, std::slice::from_ref(&k1)),
        [false]
    );

    // Rotation, as `tern endpoints rotate-signing-key` does it: both keys sign during the
    // overlap, v1 alongside (both).
    let k2 = tern_ops::reach::rotate_signing_key(store, &ep.tenant_id, &ep.id, 24)
        .await
        .expect("rotate")
        .to_string();
    tern_ops::update_endpoint(
        store,
        None,
        &ep.id,
        &tern_core::endpoint::EndpointUpdate {
            signatures: Some(Signatures::Both),
            ..Default::default()
        },
        &loopback_policy(),
        no_dns().as_ref(),
    )
    .await
    .expect("both");
    publish(&local, "order.paid", "tnt_a", r#"{"step":"overlap"}"#).await;
    let got = receiver.wait_for("/a", 2, Duration::from_secs(30)).await;
    let req = &got[1];
    let kinds: Vec<&str> = req
        .header("webhook-signature")
        .expect("signature")
        .split(' ')
        .map(|e| e.split(',').next().unwrap_or_default())
        .collect();
    assert_eq!(kinds, ["v1", "v1a", "v1a"]);
    assert_eq!(
        verify_v1a_in_python(req, &[k1.clone(), k2.clone()]),
        [true, true]
    );
    verify_reference(&ep.secrets[0].secret, req).expect("v1 still verifies beside v1a");

    // The overlap ends (its expiry set in the past, as time would): only the new key.
    let mut stored = store
        .get(&ep.tenant_id, &ep.id)
        .await
        .expect("get")
        .expect("stored");
    assert_eq!(stored.signing_keys.len(), 2);
    stored.signing_keys[1].expires_at = Some(Utc::now() - chrono::Duration::seconds(1));
    store
        .set_signing_keys(&ep.tenant_id, &ep.id, &stored.signing_keys)
        .await
        .expect("keys");
    publish(&local, "order.paid", "tnt_a", r#"{"step":"after"}"#).await;
    let got = receiver.wait_for("/a", 3, Duration::from_secs(30)).await;
    let req = &got[2];
    assert_eq!(
        verify_v1a_in_python(req, &[k1.clone(), k2.clone()]),
        [false, true]
    );
    // `show` lists both public keys with their state, and never a whsk_ key.
    let mut out = Vec::new();
    let now_stored = store
        .get(&ep.tenant_id, &ep.id)
        .await
        .expect("get")
        .expect("stored");
    tern_ops::print_endpoint(&mut out, &now_stored, false).expect("show");
    let shown = String::from_utf8(out).expect("utf-8");
    assert!(shown.contains(&format!("{k2}  current")), "{shown}");
    assert!(shown.contains(&format!("{k1}  expired")), "{shown}");
    assert!(!shown.contains("whsk_"), "{shown}");
}
