//! Issue 19: the customer portal in a real browser. Headless Chromium (Debian's
//! `/usr/bin/chromium`, driven by `tests/browser/portal.mjs` with playwright-core) opens a
//! portal link of a local deployment (moto, the local API on 127.0.0.1):
//!
//! 1. the customer adds an endpoint on a loopback receiver, reads its secret once, sends a
//!    test event and sees it delivered;
//! 2. the receiver starts failing (answering with markup): the log shows the failures, the
//!    attempt page shows the answer as text (no script runs), the endpoint's health state
//!    changes;
//! 3. the receiver is fixed, the customer recovers the window, and every event arrives
//!    exactly once, verified by the Standard Webhooks library with the secret the page
//!    showed;
//! 4. the portal inside an `iframe` of an allowed parent origin (another site: `localhost`
//!    against `127.0.0.1`, so the cookie is a cross-site, partitioned one) works, and a
//!    refused parent gets nothing; a narrow screen and the keyboard;
//! 5. (issue 28) the customer sets a secret header and bearer authentication on its
//!    endpoint's page: a test send and a delivery reach a receiver that requires them, and
//!    neither secret is in any page afterwards (nor in any input's value).
//!
//! `make test-portal` installs Chromium and the npm package and runs this; screenshots go
//! to `$TERN_SCREENSHOTS_DIR` (`make portal-screenshots` points it at `docs/portal`), else
//! to a temporary directory. A missing Chromium or Node package fails the test with the
//! command that installs it: it never skips.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use tern_core::health::HealthPolicy;
use tern_core::{RetrySchedule, Secret};
use tern_local::LocalOptions;
use tern_tests::api::ApiClient;
use tern_tests::portal::mint;
use tern_tests::*;

const MARKUP: &str = "<script>alert('x')</script><img src=x onerror=alert(1)>down for maintenance";

fn screenshots_dir() -> PathBuf {
    std::env::var_os("TERN_SCREENSHOTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("tern-portal-screenshots"))
}

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("browser")
}

/// Runs the browser through `steps`; returns its report.
async fn browse(base: &str, steps: serde_json::Value) -> serde_json::Value {
    assert!(
        Path::new("/usr/bin/chromium").exists(),
        "headless Chromium is required at /usr/bin/chromium: run `make chromium` (apt-get install -y chromium)"
    );
    assert!(
        browser_dir().join("node_modules/playwright-core").exists(),
        "playwright-core is required: run `make test-portal` (npm ci in tests/browser)"
    );
    let out = tokio::process::Command::new("node")
        .arg(browser_dir().join("portal.mjs"))
        .arg(base)
        .arg(screenshots_dir())
        .arg(steps.to_string())
        .output()
        .await
        .expect("node runs");
    assert!(
        out.status.success(),
        "browser run failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).expect("browser report is JSON")
}

fn text<'a>(report: &'a serde_json::Value, name: &str) -> &'a str {
    report["captures"][name]["text"].as_str().unwrap_or("")
}

fn html<'a>(report: &'a serde_json::Value, name: &str) -> &'a str {
    report["captures"][name]["html"].as_str().unwrap_or("")
}

fn utc_minute(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_portal_customer_adds_tests_sees_failures_recovers_and_embeds() {
    // Two quick retries (scaled) and a failure threshold that keeps the circuit closed,
    // so the outage plays out in seconds and every event dead-letters `exhausted`; three
    // attempts are enough for a health state.
    let options = LocalOptions {
        time_scale: 0.001,
        lookup: Some(no_dns()),
        console_port: None,
        schedule: Some(RetrySchedule::new(vec![1, 1]).unwrap()),
        // Health windows are scaled too: the longest (24 h) is 86 s here, so the failures are
        // still in it when the page is read; no auto-disable, so the state the customer sees
        // is "degraded" and nothing but the customer's recovery moves.
        health: Some(HealthPolicy {
            failure_threshold: 1000,
            min_attempts: 3,
            window_seconds: 86_400,
            disable_below: 0.0,
            ..HealthPolicy::default()
        }),
        ..LocalOptions::default()
    };
    let (mut local, _rx) = deployment("portal-browser", options).await;
    // The allowed parent is bound first: its origin goes into the frame-ancestors setting.
    let allowed_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let allowed_port = allowed_listener.local_addr().unwrap().port();
    drop(allowed_listener);
    local.env.push((
        "TERN_PORTAL_FRAME_ANCESTORS".into(),
        format!("http://localhost:{allowed_port}"),
    ));
    local
        .start_api(0, tern_local::api::local_credentials())
        .expect("the local API starts");
    let api = ApiClient::of(&local);
    let receiver = Receiver::start().await.expect("receiver");
    let tenant = "tnt_shop";
    let link = mint(
        &api,
        tenant,
        &json!({"brand_color": "#0b6e4f", "event_types": ["order.paid", "order.refunded"]}),
    )
    .await["url"]
        .as_str()
        .unwrap()
        .to_owned();

    // 1. Add an endpoint, read its secret, send a test event.
    let report = browse(
        &api.base,
        json!([
            {"goto": link},
            {"click": "#open button"},
            {"capture": "empty"},
            {"screenshot": "endpoints-empty.png"},
            {"fill": "#url", "value": receiver.url("/hook")},
            {"fill": "#description", "value": "Orders <b>hook</b>"},
            {"click": "#add button[type=submit]"},
            {"capture": "created"},
            {"screenshot": "endpoint-created.png"},
            {"click": "#to-endpoint"},
            {"click": "#test button[type=submit]"},
            {"capture": "tested"},
            {"screenshot": "test-send.png"},
        ]),
    )
    .await;
    assert!(
        report["captures"]["empty"]["url"]
            .as_str()
            .unwrap()
            .ends_with("/portal/endpoints"),
        "the token left the address bar: {}",
        report["captures"]["empty"]["url"]
    );
    assert!(html(&report, "empty").contains("id=\"no-endpoints\""));
    let created = html(&report, "created");
    let secret_at = created
        .find("id=\"new-secret\">")
        .expect("the secret is shown")
        + 16;
    let secret_text = &created[secret_at..secret_at + created[secret_at..].find('<').unwrap()];
    let secret = Secret::parse(secret_text).expect("a whsec_ secret");
    assert!(
        html(&report, "tested").contains("data-delivered=\"true\""),
        "{}",
        text(&report, "tested")
    );
    assert!(text(&report, "tested").contains("Test event delivered"));
    let test_posts = receiver.requests("/hook");
    assert_eq!(test_posts.len(), 1);
    verify_reference(&secret, &test_posts[0]).expect("the test event verifies");
    let endpoint_id = api
        .get(&format!("/v1/tenants/{tenant}/endpoints"))
        .await
        .json["items"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let base = format!("/portal/endpoints/{endpoint_id}");

    // 2. The receiver fails, with markup in its answer; three events dead-letter.
    receiver.set("/hook", Behavior::Always(Reply::status(503).body(MARKUP)));
    let since = chrono::Utc::now() - chrono::Duration::minutes(1);
    let mut events = Vec::new();
    for i in 0..3 {
        events.push(publish(&local, "order.paid", tenant, &format!(r#"{{"order":{i}}}"#)).await);
    }
    assert!(
        eventually(Duration::from_secs(40), async || dead_letters(&local)
            .await
            .len()
            >= 3)
        .await,
        "the three events dead-letter"
    );
    let report = browse(
        &api.base,
        json!([
            {"goto": link_for(&api, tenant).await},
            {"click": "#open button"},
            {"goto": format!("{base}/log")},
            {"capture": "log"},
            {"screenshot": "log-failures.png"},
            {"goto": format!("{base}/log?outcome=delivered")},
            {"capture": "log-delivered"},
            {"goto": format!("{base}/log/{}", events[0])},
            {"capture": "attempt"},
            {"screenshot": "attempt.png"},
            {"goto": base},
            {"capture": "health"},
        ]),
    )
    .await;
    let log = html(&report, "log");
    for e in &events {
        assert!(
            log.contains(&format!("data-event=\"{e}\"")),
            "{e} in the log"
        );
    }
    assert!(
        log.contains("data-outcome=\"dead_letter:exhausted\""),
        "{log}"
    );
    assert!(log.contains("data-outcome=\"retry\""));
    // What the customer reads: words, not the raw outcomes (issue 28).
    let log_text = text(&report, "log");
    assert!(
        log_text.contains("Gave up: every attempt failed")
            && log_text.contains("Failed: tried again later")
            && !log_text.contains("dead_letter:"),
        "{log_text}"
    );
    assert!(
        !html(&report, "log-delivered").contains("data-outcome=\"retry\""),
        "filtered by outcome"
    );
    let attempt = text(&report, "attempt");
    assert!(
        attempt.contains("<script>alert('x')</script>"),
        "the answer shown as text: {attempt}"
    );
    assert_eq!(
        report["captures"]["attempt"]["images"], 0,
        "no <img> from the answer"
    );
    assert_eq!(report["captures"]["attempt"]["scripts"], 0);
    assert!(
        report["dialogs"].as_array().unwrap().is_empty(),
        "no script ran: {}",
        report["dialogs"]
    );
    assert!(attempt.contains("webhook-signature") && attempt.contains("(hidden)"));
    assert!(
        !html(&report, "attempt").contains(secret.expose()),
        "no secret in the attempt page"
    );
    let health = html(&report, "health");
    assert!(
        health.contains("class=\"state degraded\""),
        "{}",
        text(&report, "health")
    );

    // 3. Fixed; the customer recovers the window; each event arrives once.
    receiver.set("/hook", Behavior::Always(Reply::status(204)));
    let report = browse(
        &api.base,
        json!([
            {"goto": link_for(&api, tenant).await},
            {"click": "#open button"},
            {"goto": base},
            {"fill": "#since", "value": utc_minute(since)},
            {"click": "#recover button[type=submit]"},
            {"capture": "recovered"},
            {"screenshot": "recovered.png"},
        ]),
    )
    .await;
    assert!(
        html(&report, "recovered").contains("data-replayed=\"3\""),
        "{}",
        text(&report, "recovered")
    );
    assert!(
        eventually(Duration::from_secs(30), async || {
            receiver
                .requests("/hook")
                .iter()
                .filter(|r| r.answered == 204)
                .count()
                >= 3
        })
        .await,
        "the three events arrive after the recovery"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut delivered: HashMap<String, usize> = HashMap::new();
    for r in receiver
        .requests("/hook")
        .iter()
        .filter(|r| r.answered == 204)
    {
        verify_reference(&secret, r).expect("each delivery verifies with the shown secret");
        *delivered
            .entry(r.header("webhook-id").unwrap().to_owned())
            .or_default() += 1;
    }
    for e in &events {
        assert_eq!(
            delivered.get(e.as_str()),
            Some(&1),
            "{e} delivered exactly once: {delivered:?}"
        );
    }

    // 3b. Reused, altered and foreign links; another tenant's ids; a forged form.
    let other = api
        .post(
            "/v1/tenants/tnt_other/endpoints",
            &json!({"url": receiver.url("/other"), "description": "other tenant's hook"}),
        )
        .await;
    let other_id = other.json["endpoint"]["id"].as_str().unwrap().to_owned();
    let used = link_for(&api, tenant).await;
    let token_at = used.find("token=").unwrap() + "token=".len() + 12;
    let mut altered = used.clone().into_bytes();
    altered[token_at] = if altered[token_at] == b'A' {
        b'B'
    } else {
        b'A'
    };
    let altered = String::from_utf8(altered).unwrap();
    let (evil, _e) = attacker(format!("{}{base}/disable", api.base)).await;
    let report = browse(
        &api.base,
        json!([
            {"goto": altered},
            {"capture": "altered"},
            {"goto": used},
            {"click": "#open button"},
            {"goto": used},
            {"capture": "reused"},
            {"screenshot": "link-used.png"},
            {"goto": format!("/portal/endpoints/{other_id}")},
            {"capture": "forged"},
            {"goto": format!("/portal/endpoints/{other_id}/log")},
            {"capture": "forged-log"},
            {"goto": format!("{evil}/")},
            {"click": "#evil button"},
            {"capture": "csrf"},
        ]),
    )
    .await;
    assert!(
        text(&report, "altered").contains("This link is not valid"),
        "{}",
        text(&report, "altered")
    );
    assert!(
        text(&report, "reused").contains("This link was used already"),
        "{}",
        text(&report, "reused")
    );
    assert!(
        text(&report, "forged").contains("No such endpoint"),
        "{}",
        text(&report, "forged")
    );
    assert!(text(&report, "forged-log").contains("No such endpoint"));
    assert!(!html(&report, "forged").contains("other tenant"));
    assert!(
        text(&report, "csrf").contains("Request refused"),
        "{}",
        text(&report, "csrf")
    );
    let still = api
        .get(&format!("/v1/tenants/{tenant}/endpoints/{endpoint_id}"))
        .await;
    assert_eq!(
        still.json["enabled"], true,
        "the forged form changed nothing"
    );

    // 4. Embedded: an allowed parent (another site) and a refused one; narrow; keyboard.
    let (allowed, _a) = parent_on(allowed_port, link_for(&api, tenant).await).await;
    let (refused, _r) = parent_on(0, link_for(&api, tenant).await).await;
    let report = browse(
        &api.base,
        json!([
            {"goto": format!("{allowed}/")},
            {"frameClick": "#open button"},
            {"frames": "allowed"},
            {"cookies": "framed_cookies"},
            {"screenshot": "iframe.png"},
            {"goto": format!("{refused}/")},
            {"frames": "refused"},
            {"viewport": [360, 740]},
            {"goto": link_for(&api, tenant).await},
            {"click": "#open button"},
            {"screenshot": "narrow.png"},
            {"eval": "document.documentElement.scrollWidth <= window.innerWidth + 1", "as": "fits"},
            {"eval": "[...document.querySelectorAll('input:not([type=hidden]),select')].filter(e => !(e.labels && e.labels.length)).length", "as": "unlabelled"},
            {"tab": 3, "as": "focus"},
        ]),
    )
    .await;
    let allowed_frames = report["captures"]["allowed"].as_array().unwrap();
    assert_eq!(allowed_frames.len(), 1, "{allowed_frames:?}");
    assert!(
        allowed_frames[0]["url"]
            .as_str()
            .unwrap()
            .ends_with("/portal/endpoints")
            && allowed_frames[0]["text"]
                .as_str()
                .unwrap_or("")
                .contains("Orders <b>hook</b>"),
        "the portal works inside the allowed parent (its cookie set and sent in the frame): {allowed_frames:?}"
    );
    // The session cookie set inside the cross-site frame: partitioned under the parent's site.
    let framed: Vec<&serde_json::Value> = report["captures"]["framed_cookies"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"] == "__Host-tern-portal")
        .collect();
    assert!(
        framed.iter().any(|c| c["partitionKey"]
            .as_str()
            .unwrap_or("")
            .contains("localhost")
            && c["sameSite"] == "None"
            && c["httpOnly"] == true
            && c["secure"] == true),
        "a partitioned SameSite=None cookie keyed to the parent's site: {framed:?}"
    );
    let refused_frames = report["captures"]["refused"].as_array().unwrap();
    assert!(
        refused_frames
            .iter()
            .all(|f| !f["text"].as_str().unwrap_or("").contains("Orders")),
        "a refused parent shows nothing of the portal: {refused_frames:?}"
    );
    assert!(
        report["console"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m.as_str().unwrap_or("").contains("frame-ancestors")),
        "Chromium reports the frame-ancestors refusal: {}",
        report["console"]
    );
    assert_eq!(
        report["captures"]["fits"], true,
        "no horizontal scroll at 360 px"
    );
    assert_eq!(
        report["captures"]["unlabelled"], 0,
        "every input has a label"
    );
    let focus: Vec<&str> = report["captures"]["focus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(focus[0].starts_with("a#|Skip to content"), "{focus:?}");
}

/// Issue 28, in Chromium: a secret header typed into a password input and a bearer token
/// set on the endpoint's page reach a loopback receiver that requires the token (a test
/// send and a delivery), and no page shows either secret afterwards: not the endpoint page,
/// its inputs' values, the list, the log, nor the delivery's page (its headers hidden).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_portal_customer_sets_a_secret_header_and_bearer_auth_that_reach_the_receiver() {
    let options = LocalOptions {
        time_scale: 0.001,
        lookup: Some(no_dns()),
        console_port: None,
        ..LocalOptions::default()
    };
    let (mut local, _rx) = deployment("portal-browser-reach", options).await;
    local
        .start_api(0, tern_local::api::local_credentials())
        .expect("the local API starts");
    let api = ApiClient::of(&local);
    let receiver = Receiver::start().await.expect("receiver");
    let (header_secret, token) = ("hdr-Chromium-77-secret", "tok-Chromium-88-secret");
    receiver.set(
        "/hook",
        Behavior::RequireAuthorization(format!("Bearer {token}")),
    );
    let tenant = "tnt_reach";
    let created = api
        .post(
            &format!("/v1/tenants/{tenant}/endpoints"),
            &json!({"url": receiver.url("/hook"), "description": "Orders"}),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let id = created.json["endpoint"]["id"].as_str().unwrap().to_owned();
    let whsec = Secret::parse(created.json["secret"].as_str().unwrap()).unwrap();
    let base = format!("/portal/endpoints/{id}");

    let report = browse(
        &api.base,
        json!([
            {"goto": link_for(&api, tenant).await},
            {"click": "#open button"},
            {"goto": base},
            {"eval": "document.querySelector('#new-secret-value').type", "as": "new-secret-type"},
            {"fill": "#new-secret-name", "value": "X-Api-Key"},
            {"fill": "#new-secret-value", "value": header_secret},
            {"fill": "#new-header-name", "value": "X-Tenant"},
            {"fill": "#new-header-value", "value": "acme"},
            {"click": "#headers button[type=submit]"},
            {"capture": "headers-saved"},
            {"check": "#auth-bearer"},
            {"eval": "document.querySelector('#bearer-token').type", "as": "token-type"},
            {"fill": "#bearer-token", "value": token},
            {"click": "#auth button[type=submit]"},
            {"capture": "auth-saved"},
            {"screenshot": "receiver-settings.png"},
            {"click": "#test button[type=submit]"},
            {"capture": "tested"},
            {"goto": "/portal/endpoints"},
            {"capture": "list"},
            {"goto": base},
            {"capture": "detail"},
            {"eval": "document.querySelector('#h1-value').type", "as": "stored-secret-type"},
            {"eval": "[...document.querySelectorAll('input')].map(i => i.value).join('\\n')", "as": "input-values"},
        ]),
    )
    .await;
    for (name, expected) in [
        ("new-secret-type", "password"),
        ("token-type", "password"),
        ("stored-secret-type", "password"),
    ] {
        assert_eq!(report["captures"][name], expected, "{name}");
    }
    assert!(
        text(&report, "auth-saved").contains("Authentication saved"),
        "{}",
        text(&report, "auth-saved")
    );
    assert!(
        html(&report, "tested").contains("data-delivered=\"true\""),
        "the test send got past the receiver's bearer check: {}",
        text(&report, "tested")
    );
    let test_send = receiver.requests("/hook");
    let last = test_send.last().expect("the test send");
    assert_eq!(last.answered, 200);
    assert_eq!(last.header("x-api-key"), Some(header_secret));
    assert_eq!(last.header("x-tenant"), Some("acme"));
    verify_reference(&whsec, last).expect("signed like any delivery");

    // A delivery too, then its page.
    let event = publish(&local, "order.paid", tenant, r#"{"order":1}"#).await;
    let got = receiver.wait_for("/hook", 2, Duration::from_secs(30)).await;
    let delivered = got
        .iter()
        .find(|r| r.header("webhook-id") == Some(event.as_str()))
        .expect("the delivery");
    assert_eq!(delivered.answered, 200);
    assert_eq!(delivered.header("x-api-key"), Some(header_secret));
    assert!(
        eventually(Duration::from_secs(30), async || {
            api.get(&format!("/v1/tenants/{tenant}/events/{event}"))
                .await
                .json["deliveries"][0]["state"]
                == "delivered"
        })
        .await
    );
    let report2 = browse(
        &api.base,
        json!([
            {"goto": link_for(&api, tenant).await},
            {"click": "#open button"},
            {"goto": format!("{base}/log")},
            {"capture": "log"},
            {"goto": format!("{base}/log/{event}")},
            {"capture": "delivery"},
        ]),
    )
    .await;
    assert!(
        text(&report2, "delivery").contains("x-api-key")
            && text(&report2, "delivery").contains("(hidden)"),
        "{}",
        text(&report2, "delivery")
    );
    for (r, captures) in [
        (
            &report,
            vec!["headers-saved", "auth-saved", "tested", "list", "detail"],
        ),
        (&report2, vec!["log", "delivery"]),
    ] {
        for c in captures {
            let page = html(r, c);
            assert!(!page.is_empty(), "{c} captured");
            for secret in [header_secret, token] {
                assert!(!page.contains(secret), "{secret} in the {c} page: {page}");
            }
        }
        assert!(r["dialogs"].as_array().unwrap().is_empty());
    }
    let values = report["captures"]["input-values"].as_str().unwrap_or("");
    assert!(
        !values.contains(header_secret) && !values.contains(token),
        "no secret in any input's value: {values}"
    );
}

/// A page at `127.0.0.1:<port>` (the portal's site, another origin) whose form posts to
/// `action` without the portal's CSRF token.
async fn attacker(action: String) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let page = format!(
        "<!doctype html><html><body><form id=\"evil\" method=\"post\" action=\"{action}\">\
         <input type=\"hidden\" name=\"reason\" value=\"forged\"><button type=\"submit\">Win a prize</button></form></body></html>"
    );
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let page = page.clone();
            async move { axum::response::Html(page) }
        }),
    );
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://127.0.0.1:{port}"), task)
}

/// A fresh link (each opens once) for another browser run.
async fn link_for(api: &ApiClient, tenant: &str) -> String {
    mint(api, tenant, &json!({"brand_color": "#0b6e4f"})).await["url"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A parent page on `127.0.0.1:<port>` (any free port for 0), reached as
/// `localhost:<port>` (another site than the portal's `127.0.0.1`), framing `src`.
async fn parent_on(port: u16, src: String) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let page = format!(
        "<!doctype html><html><head><title>Acme app</title></head><body><h1>Acme settings</h1>\
         <iframe title=\"Webhooks\" src=\"{src}\" width=\"1000\" height=\"600\"></iframe></body></html>"
    );
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let page = page.clone();
            async move { axum::response::Html(page) }
        }),
    );
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://localhost:{port}"), task)
}
