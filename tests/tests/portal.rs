//! Issue 19: the customer portal over plain HTTP, on a local deployment (moto, the local
//! API on 127.0.0.1, receivers on 127.0.0.1): the single-use link and its cookie, expired,
//! reused, altered and foreign links, tenant isolation through forged ids in paths and
//! forms, CSRF, read-only and limited sessions, a receiver's markup shown as text, the rate
//! limits, the security headers, and `/v1` closed to a portal cookie in AWS mode.
//! The browser flows (Chromium) are in `portal_browser.rs`.

use std::time::Duration;

use base64::Engine as _;
use chrono::Utc;
use serde_json::json;
use tern_core::TenantId;
use tern_core::portal::{Grant, KeyRing, PortalKey, PortalKeySource, Purpose, new_session_id};
use tern_local::LocalOptions;
use tern_local::local::LocalTern;
use tern_tests::api::ApiClient;
use tern_tests::portal::{PortalClient, mint};
use tern_tests::*;

fn options() -> LocalOptions {
    LocalOptions {
        time_scale: 0.001,
        lookup: Some(no_dns()),
        console_port: None,
        ..LocalOptions::default()
    }
}

async fn portal_deployment(
    test: &str,
    env: &[(&str, &str)],
) -> (
    LocalTern,
    tokio::sync::mpsc::UnboundedReceiver<tern_local::pollers::LocalEvent>,
    ApiClient,
) {
    let (mut local, rx) = deployment(test, options()).await;
    for (k, v) in env {
        local.env.push(((*k).to_owned(), (*v).to_owned()));
    }
    local
        .start_api(0, tern_local::api::local_credentials())
        .expect("the local API starts");
    let api = ApiClient::of(&local);
    (local, rx, api)
}

async fn create(api: &ApiClient, tenant: &str, url: &str, description: &str) -> String {
    let a = api
        .post(
            &format!("/v1/tenants/{tenant}/endpoints"),
            &json!({"url": url, "description": description}),
        )
        .await;
    assert_eq!(a.status, 201, "{}", a.text);
    a.json["endpoint"]["id"].as_str().expect("id").to_owned()
}

async fn ring(local: &LocalTern) -> KeyRing {
    tern_aws::portal::SecretsManagerKeys::new(
        aws_sdk_secretsmanager::Client::new(&local.aws),
        &local.resources.portal_key_secret,
    )
    .ring()
    .await
    .expect("the key ring")
}

fn grant(tenant: &str, expires_at: i64) -> Grant {
    Grant {
        session_id: new_session_id(),
        tenant: TenantId::new(tenant).expect("tenant"),
        endpoints: None,
        read_only: false,
        expires_at,
        brand_color: None,
        logo_url: None,
        event_types: Vec::new(),
    }
}

/// The link opens once: a cookie with the right attributes and a redirect that drops the
/// token; a second load, an altered link, an expired link, a foreign key's link and a link
/// used as a cookie each get their page and no data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_opens_once_and_bad_links_show_no_data() {
    let receiver = Receiver::start().await.expect("receiver");
    let (local, _rx, api) = portal_deployment("portal-links", &[]).await;
    create(&api, "tnt_a", &receiver.url("/a"), "tenant A's hook").await;
    let minted = mint(&api, "tnt_a", &json!({"brand_color": "#0b6e4f"})).await;
    let url = minted["url"].as_str().expect("url").to_owned();
    assert!(
        url.starts_with(&format!("{}/portal/start?token=v1.", api.base)),
        "{url}"
    );

    let mut browser = PortalClient::new(&api.base);
    let first = browser.open(&url).await;
    assert_eq!(first.status, 303, "{}", first.html);
    assert_eq!(first.location.as_deref(), Some("/portal/endpoints"));
    let cookie = first.set_cookies.first().expect("a session cookie");
    for attribute in [
        "__Host-tern-portal=",
        "HttpOnly",
        "Secure",
        "SameSite=None",
        "Partitioned",
        "Path=/",
    ] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    let page = browser.get("/portal/endpoints").await;
    assert_eq!(page.status, 200);
    assert!(
        page.html.contains("tenant A&#39;s hook") || page.html.contains("tenant A's hook"),
        "{}",
        page.html
    );
    assert!(page.csp.contains("frame-ancestors 'none'"), "{}", page.csp);
    assert!(page.html.contains("--brand:#0b6e4f"));

    // Reused.
    let again = PortalClient::new(&api.base).get(&url).await;
    assert_eq!(again.status, 410, "{}", again.html);
    assert!(again.html.contains("used already"));
    assert!(again.set_cookies.is_empty());
    assert!(!again.html.contains("tenant A"), "no data on a refusal");

    // Altered: one character of the grant changed.
    let fresh = mint(&api, "tnt_a", &json!({})).await["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let token_at = fresh.find("token=").unwrap() + "token=".len() + 10;
    let mut altered = fresh.clone().into_bytes();
    altered[token_at] = if altered[token_at] == b'A' {
        b'B'
    } else {
        b'A'
    };
    let altered = String::from_utf8(altered).unwrap();
    let page = PortalClient::new(&api.base).get(&altered).await;
    assert_eq!(page.status, 401, "{}", page.html);
    assert!(page.html.contains("not valid") && !page.html.contains("tenant A"));
    // The real one still opens (the altered one did not use it up).
    assert_eq!(PortalClient::new(&api.base).open(&fresh).await.status, 303);

    // Expired: signed with the deployment's own key, ended a second ago.
    let ring = ring(&local).await;
    let expired = ring.sign(Purpose::Link, &grant("tnt_a", Utc::now().timestamp() - 1));
    let page = PortalClient::new(&api.base)
        .get(&format!("/portal/start?token={expired}"))
        .await;
    assert_eq!(page.status, 410, "{}", page.html);
    assert!(page.html.contains("expired"));

    // Forged: signed with a key of its own making, under the deployment's key id.
    let forger = KeyRing::new(vec![
        PortalKey::new(ring.current().id.clone(), vec![7u8; 32]).unwrap(),
    ])
    .unwrap();
    let forged = forger.sign(Purpose::Link, &grant("tnt_a", Utc::now().timestamp() + 600));
    let page = PortalClient::new(&api.base)
        .get(&format!("/portal/start?token={forged}"))
        .await;
    assert_eq!(page.status, 401, "{}", page.html);

    // A link is not a cookie, and no cookie is no session.
    let link_token = ring.sign(Purpose::Link, &grant("tnt_a", Utc::now().timestamp() + 600));
    let mut as_cookie = PortalClient::new(&api.base);
    as_cookie.cookie = Some(format!("__Host-tern-portal={link_token}"));
    assert_eq!(as_cookie.get("/portal/endpoints").await.status, 401);
    assert_eq!(
        PortalClient::new(&api.base)
            .get("/portal/endpoints")
            .await
            .status,
        401
    );
}

/// Issue 28: mail and chat link scanners (Microsoft Safe Links, Barracuda) fetch every
/// link first, some with `HEAD`. Before, either method spent the single-use link and took
/// the session, and the customer then read "used already". Now `GET` and `HEAD` spend
/// nothing: the customer's click on the page's button does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_scanners_do_not_spend_the_link() {
    let receiver = Receiver::start().await.expect("receiver");
    let (_local, _rx, api) = portal_deployment("portal-scanners", &[]).await;
    create(&api, "tnt_a", &receiver.url("/a"), "tenant A's hook").await;
    let url = mint(&api, "tnt_a", &json!({})).await["url"]
        .as_str()
        .expect("url")
        .to_owned();
    let scanner = PortalClient::new(&api.base);
    for _ in 0..3 {
        let head = scanner.head(&url).await;
        assert_eq!(head.status, 200, "HEAD");
        assert!(head.set_cookies.is_empty(), "HEAD opens no session");
        let get = scanner.get(&url).await;
        assert_eq!(get.status, 200, "{}", get.html);
        assert!(get.set_cookies.is_empty(), "GET opens no session");
        assert!(
            !get.html.contains("tenant A"),
            "the page before the click shows no data"
        );
        assert!(get.html.contains("id=\"open\""), "{}", get.html);
    }
    // The customer, after the scanners.
    let mut customer = PortalClient::new(&api.base);
    let opened = customer.open(&url).await;
    assert_eq!(opened.status, 303, "{}", opened.html);
    assert_eq!(opened.location.as_deref(), Some("/portal/endpoints"));
    let page = customer.get("/portal/endpoints").await;
    assert_eq!(page.status, 200);
    assert!(page.html.contains("tenant A"), "{}", page.html);
    // Once spent, a load says so, and a second post is refused.
    let again = scanner.get(&url).await;
    assert_eq!(again.status, 410, "{}", again.html);
    assert!(again.html.contains("used already"));
    let mut late = PortalClient::new(&api.base);
    let reposted = late.open(&url).await;
    assert_eq!(reposted.status, 410);
    assert!(reposted.set_cookies.is_empty());
    // The button's post from another site is refused (a login CSRF).
    let fresh = mint(&api, "tnt_a", &json!({})).await["url"]
        .as_str()
        .expect("url")
        .to_owned();
    let token = fresh.split_once("token=").expect("token").1.to_owned();
    let forged = PortalClient::new(&api.base)
        .post(
            "/portal/start",
            &[("token", token.as_str())],
            Some("https://evil.example"),
        )
        .await;
    assert!(forged.set_cookies.is_empty(), "{}", forged.html);
    assert_ne!(forged.status, 303);
    assert_eq!(
        PortalClient::new(&api.base).open(&fresh).await.status,
        303,
        "the link still opens"
    );
}

/// A session of tenant A, given tenant B's ids in every path and form field, sees and
/// changes nothing of B's: every answer is the 404 page, and B's endpoint is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_ids_in_paths_and_forms_never_reach_another_tenant() {
    let receiver = Receiver::start().await.expect("receiver");
    let (local, _rx, api) = portal_deployment("portal-isolation", &[]).await;
    let a = create(&api, "tnt_a", &receiver.url("/a"), "A").await;
    let b = create(&api, "tnt_b", &receiver.url("/b"), "secret-b-description").await;
    let event = publish(&local, "order.paid", "tnt_b", r#"{"for":"b"}"#).await;
    assert!(
        eventually(Duration::from_secs(20), async || !receiver
            .requests("/b")
            .is_empty())
        .await,
        "B's event delivered"
    );
    let mut browser = PortalClient::new(&api.base);
    browser
        .open(
            mint(&api, "tnt_a", &json!({})).await["url"]
                .as_str()
                .unwrap(),
        )
        .await;
    let csrf = browser.csrf().await;
    for path in [
        format!("/portal/endpoints/{b}"),
        format!("/portal/endpoints/{b}/log"),
        format!("/portal/endpoints/{b}/log/{event}"),
        format!("/portal/endpoints/{a}/log/{event}"),
    ] {
        let page = browser.get(&path).await;
        assert_eq!(page.status, 404, "{path}: {}", page.html);
        assert!(
            !page.html.contains("secret-b-description") && !page.html.contains("\"for\""),
            "{path}"
        );
    }
    for action in [
        "disable",
        "delete",
        "reveal",
        "rotate",
        "test",
        "update",
        "recover",
        "headers",
        "auth",
        "signatures",
        "rotate-signing-key",
    ] {
        let page = browser
            .post(
                &format!("/portal/endpoints/{b}/{action}"),
                &[
                    ("csrf", &csrf),
                    ("confirm", "yes"),
                    ("url", "http://127.0.0.1:1/x"),
                    ("since", "2026-01-01T00:00"),
                    ("h0_name", "x-k"),
                    ("h0_secret", "yes"),
                    ("auth_type", "bearer"),
                    ("signatures", "v1a"),
                ],
                None,
            )
            .await;
        assert_eq!(page.status, 404, "{action}: {}", page.html);
        assert!(!page.html.contains("whsec_"), "{action}");
    }
    let page = browser
        .post(
            &format!("/portal/endpoints/{a}/log/{event}/resend"),
            &[("csrf", &csrf)],
            None,
        )
        .await;
    assert_eq!(page.status, 404, "{}", page.html);
    // A tenant field in the add form is ignored: the endpoint is the session's tenant's.
    let page = browser
        .post(
            "/portal/endpoints",
            &[
                ("csrf", &csrf),
                ("url", &receiver.url("/new")),
                ("tenant_id", "tnt_b"),
                ("event_types", "*"),
            ],
            None,
        )
        .await;
    assert_eq!(page.status, 201, "{}", page.html);
    let b_list = api.get("/v1/tenants/tnt_b/endpoints").await;
    assert_eq!(
        b_list.json["items"].as_array().unwrap().len(),
        1,
        "{}",
        b_list.text
    );
    assert_eq!(b_list.json["items"][0]["enabled"], true);
    assert_eq!(
        b_list.json["items"][0]["description"],
        "secret-b-description"
    );
    let a_list = api.get("/v1/tenants/tnt_a/endpoints").await;
    assert_eq!(
        a_list.json["items"].as_array().unwrap().len(),
        2,
        "{}",
        a_list.text
    );
}

/// State changes need the session's CSRF token and this origin; a read-only session
/// changes nothing and sees no secret; a session limited to one endpoint sees only it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csrf_read_only_and_limited_sessions() {
    let receiver = Receiver::start().await.expect("receiver");
    let (local, _rx, api) = portal_deployment("portal-csrf", &[]).await;
    let a1 = create(&api, "tnt_a", &receiver.url("/a1"), "first").await;
    let a2 = create(&api, "tnt_a", &receiver.url("/a2"), "second").await;
    let mut browser = PortalClient::new(&api.base);
    browser
        .open(
            mint(&api, "tnt_a", &json!({})).await["url"]
                .as_str()
                .unwrap(),
        )
        .await;
    let csrf = browser.csrf().await;
    let disable = format!("/portal/endpoints/{a1}/disable");
    for (form, origin) in [
        (vec![], None),
        (vec![("csrf", "AAAA")], None),
        (vec![("csrf", csrf.as_str())], Some("http://evil.example")),
    ] {
        let page = browser.post(&disable, &form, origin).await;
        assert_eq!(page.status, 403, "{form:?} {origin:?}: {}", page.html);
    }
    let a1_now = api.get(&format!("/v1/tenants/tnt_a/endpoints/{a1}")).await;
    assert_eq!(
        a1_now.json["enabled"], true,
        "nothing changed without the token"
    );
    let page = browser
        .post(&disable, &[("csrf", &csrf)], Some(&api.base))
        .await;
    assert_eq!(page.status, 200, "{}", page.html);
    let a1_now = api.get(&format!("/v1/tenants/tnt_a/endpoints/{a1}")).await;
    assert_eq!(a1_now.json["enabled"], false);
    // Reveal, with the token: the secret, and the log says so without the value.
    let page = browser
        .post(
            &format!("/portal/endpoints/{a1}/reveal"),
            &[("csrf", &csrf)],
            None,
        )
        .await;
    assert_eq!(page.status, 200);
    assert!(page.html.contains("whsec_"));

    // Read-only.
    let mut reader = PortalClient::new(&api.base);
    reader
        .open(
            mint(&api, "tnt_a", &json!({"read_only": true})).await["url"]
                .as_str()
                .unwrap(),
        )
        .await;
    let page = reader.get(&format!("/portal/endpoints/{a2}")).await;
    assert_eq!(page.status, 200);
    assert!(
        !page.html.contains("<form method=\"post\""),
        "no change forms"
    );
    assert!(
        !reader
            .get("/portal/endpoints")
            .await
            .html
            .contains("id=\"add\"")
    );
    // Even with its own valid CSRF token (made with the deployment's key from the session
    // id its cookie carries), a read-only session may not act.
    let cookie = reader.cookie.clone().unwrap();
    let grant_b64 = cookie.split('.').nth(2).unwrap();
    let grant: Grant = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(grant_b64)
            .unwrap(),
    )
    .unwrap();
    assert!(grant.read_only);
    let reader_csrf = ring(&local).await.csrf_token(&grant.session_id);
    for action in ["reveal", "disable"] {
        let page = reader
            .post(
                &format!("/portal/endpoints/{a2}/{action}"),
                &[("csrf", &reader_csrf)],
                None,
            )
            .await;
        assert_eq!(page.status, 403, "{action}: {}", page.html);
        assert!(!page.html.contains("whsec_"));
    }

    // Limited to a1: a2 is not there.
    let mut limited = PortalClient::new(&api.base);
    limited
        .open(
            mint(&api, "tnt_a", &json!({"endpoint_ids": [a1]})).await["url"]
                .as_str()
                .unwrap(),
        )
        .await;
    let page = limited.get("/portal/endpoints").await;
    assert!(
        page.html.contains(&a1) && !page.html.contains(&a2),
        "{}",
        page.html
    );
    assert!(
        !page.html.contains("id=\"add\""),
        "a limited session adds nothing"
    );
    assert_eq!(
        limited.get(&format!("/portal/endpoints/{a2}")).await.status,
        404
    );
    // The API refuses a session naming another tenant's endpoint, or none of its own.
    let b = create(&api, "tnt_b", &receiver.url("/b"), "b").await;
    let a = api
        .post(
            "/v1/tenants/tnt_a/portal-sessions",
            &json!({"endpoint_ids": [b]}),
        )
        .await;
    assert_eq!((a.status, a.field()), (404, "endpoint_ids"), "{}", a.text);
    for (body, field) in [
        (json!({"expires_in_seconds": 86_401}), "expires_in_seconds"),
        (json!({"brand_color": "red"}), "brand_color"),
        (json!({"logo_url": "javascript:alert(1)"}), "logo_url"),
        // Fifty long types would make a cookie browsers drop: refused at minting.
        (
            json!({"event_types": (0..50).map(|i| format!("{i:02}.{}", "t".repeat(120))).collect::<Vec<_>>()}),
            "event_types",
        ),
    ] {
        let a = api.post("/v1/tenants/tnt_a/portal-sessions", &body).await;
        assert_eq!((a.status, a.field()), (400, field), "{}", a.text);
    }
}

/// A receiver answering with markup: the test send shows it as text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receivers_markup_is_shown_as_text() {
    let receiver = Receiver::start().await.expect("receiver");
    const MARKUP: &str = "<script>alert(1)</script><img src=x onerror=alert(2)>";
    receiver.set("/x", Behavior::Always(Reply::status(500).body(MARKUP)));
    let (_local, _rx, api) = portal_deployment("portal-markup", &[]).await;
    let id = create(
        &api,
        "tnt_a",
        &receiver.url("/x"),
        "<b>bold</b> description",
    )
    .await;
    let mut browser = PortalClient::new(&api.base);
    browser
        .open(
            mint(&api, "tnt_a", &json!({})).await["url"]
                .as_str()
                .unwrap(),
        )
        .await;
    let csrf = browser.csrf().await;
    let page = browser
        .post(
            &format!("/portal/endpoints/{id}/test"),
            &[("csrf", &csrf)],
            None,
        )
        .await;
    assert_eq!(page.status, 200, "{}", page.html);
    assert!(
        page.html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{}",
        page.html
    );
    assert!(!page.html.contains("<script>") && !page.html.contains("<img src=x"));
    assert!(page.html.contains("&lt;b&gt;bold&lt;/b&gt;"));
    assert!(page.html.contains("data-delivered=\"false\""));
    assert!(
        !page.csp.contains("script-src"),
        "no script source at all: {}",
        page.csp
    );
}

/// Session creation and test sends are limited per tenant per minute, in the portal table
/// (shared by every instance); another tenant is not affected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_creation_and_test_sends_are_rate_limited() {
    let receiver = Receiver::start().await.expect("receiver");
    let (_local, _rx, api) = portal_deployment(
        "portal-rate",
        &[
            ("TERN_PORTAL_SESSIONS_PER_MINUTE", "3"),
            ("TERN_PORTAL_TEST_SENDS_PER_MINUTE", "2"),
        ],
    )
    .await;
    let id = create(&api, "tnt_a", &receiver.url("/a"), "a").await;
    // Counted per minute: when a minute boundary falls inside the burst, try again.
    let mut limited = false;
    for _ in 0..3 {
        let minute = Utc::now().timestamp() / 60;
        let mut statuses = Vec::new();
        for _ in 0..4 {
            statuses.push(
                api.post("/v1/tenants/tnt_a/portal-sessions", &json!({}))
                    .await
                    .status,
            );
        }
        if Utc::now().timestamp() / 60 == minute {
            assert_eq!(
                statuses.iter().filter(|s| **s == 201).count(),
                3,
                "{statuses:?}"
            );
            assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
            limited = true;
            break;
        }
    }
    assert!(limited, "a burst within one minute was seen");
    let other = api
        .post("/v1/tenants/tnt_other/portal-sessions", &json!({}))
        .await;
    assert_eq!(other.status, 201, "another tenant's limit is its own");
    let answer = api
        .post("/v1/tenants/tnt_a/portal-sessions", &json!({}))
        .await;
    if answer.status == 429 {
        assert_eq!(answer.problem(), "too-many-requests");
    }

    let mut limited = false;
    for _ in 0..3 {
        let mut browser = PortalClient::new(&api.base);
        // A new minute for the session limit too.
        let link = loop {
            let a = api
                .post("/v1/tenants/tnt_a/portal-sessions", &json!({}))
                .await;
            if a.status == 201 {
                break a.json["url"].as_str().unwrap().to_owned();
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        browser.open(&link).await;
        let csrf = browser.csrf().await;
        let minute = Utc::now().timestamp() / 60;
        let mut statuses = Vec::new();
        for _ in 0..3 {
            statuses.push(
                browser
                    .post(
                        &format!("/portal/endpoints/{id}/test"),
                        &[("csrf", &csrf)],
                        None,
                    )
                    .await
                    .status,
            );
        }
        if Utc::now().timestamp() / 60 == minute {
            assert_eq!(statuses, vec![200, 200, 429]);
            limited = true;
            break;
        }
    }
    assert!(limited, "a burst of test sends within one minute was seen");
    assert_eq!(
        receiver.requests("/a").len(),
        2,
        "the refused test send sent nothing"
    );
}

/// In AWS mode (`ApiGatewayIam`) the `/v1` routes need API Gateway's IAM caller: a
/// request without one is refused even with a valid portal cookie, while the portal's
/// pages (routed without IAM) work with the cookie alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_portal_cookie_opens_no_v1_route_in_aws_mode() {
    let receiver = Receiver::start().await.expect("receiver");
    let (local, _rx, api) = portal_deployment("portal-iam", &[]).await;
    create(&api, "tnt_a", &receiver.url("/a"), "A").await;
    let link = mint(&api, "tnt_a", &json!({})).await["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let token = link.split("token=").nth(1).unwrap().to_owned();

    // The same router the Lambda runs, with the Lambda's authenticator.
    let deps = tern_local::api::deps(&local).expect("deps");
    let router = tern_api::router(deps, tern_api::Authenticator::ApiGatewayIam);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let _server = tern_local::api::spawn(listener, router);

    let mut browser = PortalClient::new(&base);
    let opened = browser.open(&format!("/portal/start?token={token}")).await;
    assert_eq!(opened.status, 303, "{}", opened.html);
    let cookie = browser.cookie.clone().expect("cookie");
    assert_eq!(browser.get("/portal/endpoints").await.status, 200);
    let http = reqwest::Client::new();
    for path in [
        "/v1/tenants/tnt_a/endpoints",
        "/v1/tenants/tnt_a/portal-sessions",
        "/portal/../v1/tenants/tnt_a/endpoints",
        "/v1/nothing",
    ] {
        let r = http
            .get(format!("{base}{path}"))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        assert_eq!(status, 401, "{path}: {text}");
        assert!(
            text.contains("urn:tern:problem:unauthorized"),
            "{path}: {text}"
        );
    }
}

/// A rotation of the key ring (`tern portal-rotate-key`: `SecretsManagerKeys::rotate`)
/// leaves a live session and an unused link valid on a function instance that read the
/// new ring, signs new links with the new key, and a second rotation retires the first key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_rotation_keeps_live_sessions_and_links() {
    let receiver = Receiver::start().await.expect("receiver");
    let (local, _rx, api) = portal_deployment("portal-rotation", &[]).await;
    create(&api, "tnt_a", &receiver.url("/a"), "A").await;
    let mut browser = PortalClient::new(&api.base);
    browser
        .open(
            mint(&api, "tnt_a", &json!({})).await["url"]
                .as_str()
                .unwrap(),
        )
        .await;
    let unused = mint(&api, "tnt_a", &json!({})).await["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let first_key = ring(&local).await.current().id.clone();
    let keys = tern_aws::portal::SecretsManagerKeys::new(
        aws_sdk_secretsmanager::Client::new(&local.aws),
        &local.resources.portal_key_secret,
    );
    let second_key = keys.rotate().await.expect("rotate");
    assert_ne!(second_key, first_key);

    // A fresh instance (its own key cache) of the same deployment.
    let fresh = async || {
        let deps = tern_local::api::deps(&local).expect("deps");
        let auth = tern_local::api::authenticator(&deps, tern_local::api::local_credentials());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        (
            base,
            tern_local::api::spawn(listener, tern_api::router(deps, auth)),
        )
    };
    let (base, _server) = fresh().await;
    let mut after = browser.clone();
    after.base = base.clone();
    assert_eq!(
        after.get("/portal/endpoints").await.status,
        200,
        "the live session goes on"
    );
    let path = unused
        .split_once("/portal/")
        .map(|(_, p)| format!("/portal/{p}"))
        .unwrap();
    assert_eq!(
        PortalClient::new(&base).open(&path).await.status,
        303,
        "the unused link opens"
    );
    let new_api = ApiClient::new(&base, tern_local::api::local_credentials().remove(0));
    let new_link = mint(&new_api, "tnt_a", &json!({})).await["url"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        new_link.contains(&format!("token=v1.{second_key}.")),
        "{new_link}"
    );

    // A second rotation drops the first key: its session ends.
    keys.rotate().await.expect("rotate again");
    let (base, _server2) = fresh().await;
    let mut later = browser.clone();
    later.base = base;
    assert_eq!(later.get("/portal/endpoints").await.status, 401);
}

/// Revealing and rotating a secret in the portal are logged as actions of the session,
/// never with the value (every target at TRACE, behind the SDK guard as in the functions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revealed_secret_is_logged_as_an_action_never_as_a_value() {
    let logs = capture_logs();
    let receiver = Receiver::start().await.expect("receiver");
    let (_local, _rx, api) = portal_deployment("portal-logs", &[]).await;
    let created = api
        .post(
            "/v1/tenants/tnt_a/endpoints",
            &json!({"url": receiver.url("/a")}),
        )
        .await;
    let id = created.json["endpoint"]["id"].as_str().unwrap().to_owned();
    let first = created.json["secret"].as_str().unwrap().to_owned();
    let mut browser = PortalClient::new(&api.base);
    browser
        .open(
            mint(&api, "tnt_a", &json!({})).await["url"]
                .as_str()
                .unwrap(),
        )
        .await;
    let csrf = browser.csrf().await;
    let page = browser
        .post(
            &format!("/portal/endpoints/{id}/reveal"),
            &[("csrf", &csrf)],
            None,
        )
        .await;
    assert!(
        page.html.contains(&first),
        "the secret is revealed on the page"
    );
    let page = browser
        .post(
            &format!("/portal/endpoints/{id}/rotate"),
            &[("csrf", &csrf), ("overlap_hours", "1")],
            None,
        )
        .await;
    let at = page
        .html
        .find("class=\"secret\">")
        .expect("the new secret is shown")
        + 15;
    let second = page.html[at..at + page.html[at..].find('<').unwrap()].to_owned();
    assert!(second.starts_with("whsec_") && second != first);
    let text = logs.text();
    assert!(
        text.contains("reveal-secret") && text.contains("portal action"),
        "the reveal is logged"
    );
    for secret in [&first, &second] {
        let key = secret.trim_start_matches("whsec_");
        assert!(!text.contains(key), "a secret in the logs");
    }
}

/// Issue 28: the customer sets its receiver settings on the endpoint's page: a secret
/// header and a plain one, bearer then basic authentication, `v1a` signatures with the
/// public key shown to copy, a key rotation, the rate limit and the payload format. Each
/// form goes through the API's PATCH (its checks, its rules for keeping a secret) with the
/// CSRF token; a secret input left empty keeps the stored secret; the settings reach the
/// receiver; no secret value is ever in a page or a log line afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receiver_settings_set_in_the_portal_reach_the_receiver_and_never_show_a_secret() {
    let logs = capture_logs();
    let receiver = Receiver::start().await.expect("receiver");
    let (header_secret, token, password) = (
        "hdr-Portal-41-secret",
        "tok-Portal-52-secret",
        "pw Portal-63 secret",
    );
    receiver.set(
        "/hook",
        Behavior::RequireAuthorization(format!("Bearer {token}")),
    );
    let (_local, _rx, api) = portal_deployment("portal-reach", &[]).await;
    let id = create(&api, "tnt_a", &receiver.url("/hook"), "reach").await;
    let mut browser = PortalClient::new(&api.base);
    browser
        .open(
            mint(&api, "tnt_a", &json!({})).await["url"]
                .as_str()
                .unwrap(),
        )
        .await;
    let csrf = browser.csrf().await;
    let base = format!("/portal/endpoints/{id}");
    let page = browser.get(&base).await;
    for form in [
        "id=\"headers\"",
        "id=\"auth\"",
        "id=\"signatures\"",
        "id=\"rotate-key\"",
    ] {
        assert!(page.html.contains(form), "{form} on the page");
    }
    let mut pages = Vec::new();
    let post = async |action: &str, fields: &[(&str, &str)]| {
        let mut form = vec![("csrf", csrf.as_str())];
        form.extend_from_slice(fields);
        let page = browser
            .post(&format!("{base}/{action}"), &form, Some(&api.base))
            .await;
        assert_eq!(page.status, 200, "{action}: {}", page.html);
        assert!(
            page.html.contains("class=\"banner ok\""),
            "{action}: {}",
            page.html
        );
        page
    };

    // Without the CSRF token: refused, nothing set.
    let refused = browser
        .post(
            &format!("{base}/headers"),
            &[
                ("new_secret_name", "x-api-key"),
                ("new_secret_value", header_secret),
            ],
            None,
        )
        .await;
    assert_eq!(refused.status, 403);
    let view = api.get(&format!("/v1/tenants/tnt_a/endpoints/{id}")).await;
    assert_eq!(view.json["headers"], json!([]));

    // A secret header and a plain one; bearer authentication.
    let page = post(
        "headers",
        &[
            ("new_name", "X-Tenant"),
            ("new_value", "acme"),
            ("new_secret_name", "X-Api-Key"),
            ("new_secret_value", header_secret),
        ],
    )
    .await;
    assert!(
        page.html.contains("name=\"h1_value\" type=\"password\""),
        "the secret header's input is a password input: {}",
        page.html
    );
    pages.push(page);
    pages.push(post("auth", &[("auth_type", "bearer"), ("bearer_token", token)]).await);
    let view = api.get(&format!("/v1/tenants/tnt_a/endpoints/{id}")).await;
    assert_eq!(
        view.json["headers"],
        json!([
            {"name": "x-tenant", "value": "acme", "secret": false},
            {"name": "x-api-key", "value": null, "secret": true},
        ])
    );
    assert_eq!(
        view.json["auth"],
        json!({"type": "bearer", "secret": "token"})
    );
    let page = post("test", &[]).await;
    assert!(
        page.html.contains("data-delivered=\"true\""),
        "{}",
        page.html
    );
    pages.push(page);
    let got = receiver.requests("/hook");
    assert_eq!(
        got.last().unwrap().answered,
        200,
        "the bearer token was sent"
    );
    assert_eq!(got.last().unwrap().header("x-api-key"), Some(header_secret));

    // The page again, saved as shown: the empty secret inputs keep the stored secrets; the
    // plain header's value changes.
    pages.push(
        post(
            "headers",
            &[
                ("h0_name", "x-tenant"),
                ("h0_value", "acme inc"),
                ("h1_name", "x-api-key"),
                ("h1_secret", "yes"),
                ("h1_value", ""),
            ],
        )
        .await,
    );
    pages.push(post("auth", &[("auth_type", "bearer"), ("bearer_token", "")]).await);
    // v1a: the public key is on the page to copy.
    let page = post("signatures", &[("signatures", "both")]).await;
    let at = page
        .html
        .find("class=\"public-key\" data-state=\"current\">")
        .expect("the public key is shown")
        + "class=\"public-key\" data-state=\"current\">".len();
    let public_key = page.html[at..at + page.html[at..].find('<').unwrap()].to_owned();
    assert!(public_key.starts_with("whpk_"), "{public_key}");
    pages.push(page);
    let page = post("test", &[]).await;
    assert!(
        page.html.contains("data-delivered=\"true\""),
        "{}",
        page.html
    );
    pages.push(page);
    let last = receiver
        .requests("/hook")
        .last()
        .cloned()
        .expect("a request");
    assert_eq!(last.header("x-api-key"), Some(header_secret), "kept");
    assert_eq!(last.header("x-tenant"), Some("acme inc"));
    assert_eq!(
        verify_v1a_in_python(&last, std::slice::from_ref(&public_key)),
        [true],
        "v1a verifies with the key the page showed"
    );
    let page = post("rotate-signing-key", &[("overlap_hours", "1")]).await;
    assert!(page.html.contains("New signing key"), "{}", page.html);
    assert_eq!(
        page.html.matches("class=\"public-key\"").count(),
        2,
        "the new key and the previous one"
    );
    pages.push(page);
    // Basic, with a password holding spaces (sent as typed), then a refusal that names
    // its field and repeats nothing.
    pages.push(
        post(
            "auth",
            &[
                ("auth_type", "basic"),
                ("basic_username", "tern"),
                ("basic_password", password),
            ],
        )
        .await,
    );
    let refused = browser
        .post(
            &format!("{base}/auth"),
            &[
                ("csrf", csrf.as_str()),
                ("auth_type", "basic"),
                ("basic_username", "other"),
                ("basic_password", ""),
            ],
            None,
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.html);
    assert!(
        refused.html.contains("data-field=\"auth.password\""),
        "{}",
        refused.html
    );
    pages.push(refused);
    // The rate limit and the payload format are the customer's too.
    pages.push(
        post(
            "update",
            &[
                ("url", &receiver.url("/hook")),
                ("max_per_second", "5"),
                ("payload_format", "standard_webhooks"),
            ],
        )
        .await,
    );
    let view = api.get(&format!("/v1/tenants/tnt_a/endpoints/{id}")).await;
    assert_eq!(view.json["max_per_second"], 5);
    assert_eq!(view.json["payload_format"], "standard_webhooks");
    assert_eq!(
        view.json["auth"],
        json!({"type": "basic", "username": "tern", "secret": "password"})
    );

    // Every page afterwards, and every page of the run: no secret value.
    for path in [
        "/portal/endpoints".to_owned(),
        base.clone(),
        format!("{base}/log"),
    ] {
        pages.push(browser.get(&path).await);
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    let forms = [
        header_secret.to_owned(),
        token.to_owned(),
        password.to_owned(),
        b64.encode(format!("tern:{password}")),
    ];
    for page in &pages {
        for secret in &forms {
            assert!(
                !page.html.contains(secret.as_str()),
                "a secret in a page: {}",
                page.html
            );
        }
    }
    let text = logs.text();
    assert!(text.contains("portal action") && text.contains("headers"));
    for secret in &forms {
        assert!(
            !text.contains(secret.as_str()),
            "a secret in the logs: {secret}"
        );
    }
}
