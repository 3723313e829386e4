//! The customer portal in local mode (`make bench-portal`): for each page, its weight
//! (HTML, CSS and JS, uncompressed and gzip-compressed), its render time as a browser
//! gets it (the request on 127.0.0.1, median and p95 of [`VIEWS`]), and the AWS calls one
//! view makes: the portal's own API router, its AWS clients going through a counting proxy
//! in front of moto, so every DynamoDB, SQS and Secrets Manager request is counted.
//!
//! The data: a tenant with three endpoints (one failing), 30 events delivered or retried,
//! so the log pages are full pages ([`crate::portal::LOG_ROWS`] rows).

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;
use tern_api::aws::{ApiConfig, api_deps};
use tern_local::local::{LocalOptions, LocalTern};
use tern_local::moto::MotoServer;

use crate::BoxError;
use crate::api::{Client, percentile};
use crate::proxy::CountingProxy;
use crate::stats::Sample;

/// Views of each page measured: 30 (after one unmeasured view).
pub const VIEWS: usize = 30;

/// Rows of a full delivery-log page (`tern_api::portal` shows 25 per page).
pub const LOG_ROWS: usize = 25;

/// One page's figures.
#[derive(Debug, Clone, Serialize)]
pub struct PageRow {
    /// Which page.
    pub page: String,
    /// HTML bytes, uncompressed (the CSS is inline; the portal has no JS).
    pub html_bytes: usize,
    /// The same, gzip-compressed (`gzip -6`, what a server would send).
    pub gzip_bytes: usize,
    /// Of which the inline stylesheet, bytes.
    pub css_bytes: usize,
    /// `<script>` elements: 0 by design (the CSP allows none).
    pub scripts: usize,
    /// Request to last byte on 127.0.0.1, milliseconds.
    pub render_ms: Sample,
    /// AWS requests of one view, by operation (`dynamodb:GetItem`: 3, ...).
    pub aws_calls: std::collections::BTreeMap<String, u64>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct PortalReport {
    /// Per page.
    pub pages: Vec<PageRow>,
}

fn gzip_len(bytes: &[u8]) -> Result<usize, BoxError> {
    // The system's gzip: the workspace has no deflate crate, and the size is all we need.
    let mut child = Command::new("gzip")
        .arg("-6")
        .arg("-c")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    child.stdin.take().ok_or("gzip stdin")?.write_all(bytes)?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err("gzip failed".into());
    }
    Ok(out.stdout.len())
}

/// Runs the benchmark on a moto of its own.
///
/// # Errors
/// A setup or call that failed.
pub async fn run() -> Result<PortalReport, BoxError> {
    let moto = MotoServer::start().await?;
    let proxy = CountingProxy::start(&moto.url, &["portal"]).await?;
    let options = LocalOptions {
        prefix: "bench-portal-".into(),
        console_port: None,
        time_scale: 0.001,
        ..LocalOptions::default()
    };
    let mut local = LocalTern::create(moto.sdk_config().await, &options).await?;
    let _events = local.start_pollers(&options);
    let addr = local
        .start_api(0, tern_local::api::local_credentials())
        .ok_or("the local API did not start")?;
    let base = tern_local::api::url(addr);
    let client = Client {
        host: base.trim_start_matches("http://").to_owned(),
        base: base.clone(),
        credential: tern_local::api::local_credentials().remove(0),
        http: reqwest::Client::new(),
    };
    let receiver = crate::ChildReceiver::start(0).await?;
    let t = "tnt_bench";
    let mut ids = Vec::new();
    for (i, url) in [
        receiver.url(),
        receiver.url(),
        "http://127.0.0.1:9/refused".to_owned(),
    ]
    .into_iter()
    .enumerate()
    {
        let (status, body) = client
            .call(
                "POST",
                &format!("/v1/tenants/{t}/endpoints"),
                Some(&json!({"url": url, "description": format!("endpoint {i}")})),
            )
            .await?;
        if status != 201 {
            return Err(format!("create: {status} {body}").into());
        }
        ids.push(body["endpoint"]["id"].as_str().ok_or("id")?.to_owned());
    }
    let mut events = Vec::new();
    for i in 0..30 {
        let (status, body) = client
            .call(
                "POST",
                &format!("/v1/tenants/{t}/events"),
                Some(&json!({"type": "order.paid", "payload": {"order": i, "note": "x".repeat(200)}})),
            )
            .await?;
        if status != 202 {
            return Err(format!("publish: {status} {body}").into());
        }
        events.push(body["id"].as_str().ok_or("event id")?.to_owned());
    }
    // Wait until the first endpoint's log holds a full page.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, body) = client
            .call(
                "GET",
                &format!("/v1/tenants/{t}/endpoints/{}/attempts?limit=100", ids[0]),
                None,
            )
            .await?;
        if body["items"].as_array().map_or(0, Vec::len) >= LOG_ROWS {
            break;
        }
        if Instant::now() > deadline {
            return Err("the events were not delivered within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The portal as the api function serves it, its AWS clients through the proxy.
    let env = local.env.clone();
    let get = move |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let config = ApiConfig::from_env(&get)?;
    let aws = tern_local::moto::sdk_config_for(&proxy.url("portal")).await;
    let deps = api_deps(&config, &aws, None)?;
    let auth = tern_local::api::authenticator(&deps, tern_local::api::local_credentials());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let portal_base = format!("http://{}", listener.local_addr()?);
    let _server = tern_local::api::spawn(listener, tern_api::router(deps, auth));

    let (status, body) = client
        .call(
            "POST",
            &format!("/v1/tenants/{t}/portal-sessions"),
            Some(&json!({})),
        )
        .await?;
    if status != 201 {
        return Err(format!("portal session: {status} {body}").into());
    }
    let token = body["url"]
        .as_str()
        .and_then(|u| u.split("token=").nth(1))
        .ok_or("token")?
        .to_owned();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let opened = http
        .get(format!("{portal_base}/portal/start?token={token}"))
        .send()
        .await?;
    let cookie = opened
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|c| c.split(';').next())
        .ok_or("no session cookie")?
        .to_owned();

    let pages = [
        ("Endpoints (3, with health)", "/portal/endpoints".to_owned()),
        ("Endpoint", format!("/portal/endpoints/{}", ids[0])),
        (
            "Delivery log (25 rows)",
            format!("/portal/endpoints/{}/log", ids[0]),
        ),
        (
            "Delivery log, failing endpoint",
            format!("/portal/endpoints/{}/log", ids[2]),
        ),
        (
            "One delivery (attempts, payload)",
            format!("/portal/endpoints/{}/log/{}", ids[0], events[0]),
        ),
        ("Operational events", "/portal/events".to_owned()),
    ];
    let css_bytes = tern_api::portal::STYLE.len();
    let mut rows = Vec::new();
    for (name, path) in pages {
        let url = format!("{portal_base}{path}");
        let view = async || -> Result<String, BoxError> {
            let r = http.get(&url).header("cookie", &cookie).send().await?;
            let status = r.status().as_u16();
            let text = r.text().await?;
            if status != 200 {
                return Err(format!("{path}: {status}").into());
            }
            Ok(text)
        };
        // Unmeasured first view: connections, the key ring's cache.
        view().await?;
        proxy.reset();
        let html = view().await?;
        let aws_calls = proxy.counts().remove("portal").unwrap_or_default();
        let mut render = Sample::default();
        for _ in 0..VIEWS {
            let start = Instant::now();
            view().await?;
            render.push(start.elapsed().as_secs_f64() * 1e3);
        }
        rows.push(PageRow {
            page: name.to_owned(),
            html_bytes: html.len(),
            gzip_bytes: gzip_len(html.as_bytes())?,
            css_bytes,
            scripts: html.matches("<script").count(),
            render_ms: render,
            aws_calls,
        });
    }
    Ok(PortalReport { pages: rows })
}

impl PortalReport {
    /// The report as a markdown table.
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "\nEach page of the customer portal in local mode (moto, 127.0.0.1), as the api function serves it.\n\
             Weight: the HTML with its inline stylesheet (no JS, no font, no image but an optional logo).\n\
             Render: request to last byte, median and p95 of 30 views. AWS calls: one view, counted by a proxy in front of moto \
             (the session is a signed cookie: no read for it; the key ring is cached for 5 minutes).\n\n\
             | page | HTML+CSS+JS | gzip | render p50 | p95 | AWS calls per view |\n|---|---|---|---|---|---|\n",
        );
        for r in &self.pages {
            let calls: Vec<String> = r
                .aws_calls
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            out.push_str(&format!(
                "| {} | {:.1} KB | {:.1} KB | {:.1} ms | {:.1} ms | {} |\n",
                r.page,
                r.html_bytes as f64 / 1000.0,
                r.gzip_bytes as f64 / 1000.0,
                r.render_ms.median(),
                percentile(&r.render_ms, 95.0),
                if calls.is_empty() {
                    "none".to_owned()
                } else {
                    calls.join(", ")
                },
            ));
        }
        out
    }
}
