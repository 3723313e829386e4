//! The customer portal: a tenant's own webhook pages, served by the API function under
//! `/portal/` (and by local mode on 127.0.0.1).
//!
//! - An application mints a link with `POST /v1/tenants/{id}/portal-sessions` (IAM like
//!   every `/v1` route; [`crate::routes`]): a [`Grant`] signed for
//!   [`Purpose::Link`] with the deployment's key ring (Secrets Manager).
//! - `GET /portal/start?token=` checks it, claims its one use
//!   ([`PortalLedger::claim_link`], a conditional write), sets the session cookie
//!   ([`COOKIE`]: the grant signed for [`Purpose::Session`]) and redirects to the endpoints
//!   page, so the token leaves the address bar. An expired, reused or altered link gets
//!   a page saying so, and no data.
//! - Every other page reads the cookie; the tenant is the grant's, never a path's or a
//!   form's, and an endpoint outside the grant is a 404 like one that does not exist.
//!   Every state change is a POST carrying the session's CSRF token.
//! - The pages call the API's own route functions in process: one implementation of each
//!   action, the same checks (the SSRF guard on a URL, the text bounds).
//!
//! API Gateway routes `/portal/{proxy+}` without IAM authorization (the function
//! authenticates those itself); `/v1/...` keeps IAM, and the router refuses a `/v1`
//! request without an IAM caller in AWS mode whatever cookie it carries.

mod handlers;
pub mod pages;
mod reach;

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use maud::Markup;
use sha2::Digest as _;
use tern_core::portal::{Grant, KeyRing, PortalKeySource, PortalLedger, Purpose};

use crate::ApiDeps;

pub use tern_core::portal::{DEFAULT_SESSION_SECONDS, MAX_SESSION_SECONDS};

/// The session cookie's name. The `__Host-` prefix makes the browser accept it only with
/// `Secure`, `Path=/` and no `Domain` (RFC 6265bis §4.1.3.2): no other host can set or
/// shadow it.
pub const COOKIE: &str = "__Host-tern-portal";

/// Length of a rate-limit window, seconds: 60 (limits are per tenant per minute).
pub const RATE_WINDOW_SECONDS: u32 = 60;

/// Default portal links a tenant may mint per minute: 60 (`TERN_PORTAL_SESSIONS_PER_MINUTE`).
pub const DEFAULT_SESSIONS_PER_MINUTE: u32 = 60;

/// Default test sends a tenant may make from the portal per minute: 10
/// (`TERN_PORTAL_TEST_SENDS_PER_MINUTE`). Each is a POST to the customer's receiver.
pub const DEFAULT_TEST_SENDS_PER_MINUTE: u32 = 10;

/// The portal's settings.
#[derive(Debug, Clone, Default)]
pub struct PortalSettings {
    /// Origins allowed to show the portal in an `iframe` (`TERN_PORTAL_FRAME_ANCESTORS`,
    /// comma-separated, e.g. `https://app.example.com`): the CSP's `frame-ancestors`.
    /// Empty: no framing at all.
    pub frame_ancestors: Vec<String>,
    /// Base URL of the links (`TERN_PORTAL_URL`, e.g. a custom domain); `None`: the
    /// request's own host over `https` (or `http` for 127.0.0.1 in local mode).
    pub public_url: Option<String>,
    /// Links a tenant may mint per minute.
    pub sessions_per_minute: u32,
    /// Test sends a tenant may make from the portal per minute.
    pub test_sends_per_minute: u32,
}

/// A portal setting is invalid.
#[derive(Debug, thiserror::Error)]
#[error("{name}: {reason}")]
pub struct PortalConfigError {
    /// The variable.
    pub name: &'static str,
    /// Why.
    pub reason: String,
}

/// Checks an origin for `frame-ancestors`: `https://host[:port]` (or `http://` for
/// loopback hosts), nothing after it.
///
/// # Errors
/// The reason, as text.
pub fn check_origin(origin: &str) -> Result<String, String> {
    let url = url_origin(origin).ok_or_else(|| format!("{origin:?} is not an origin"))?;
    if url != origin.trim_end_matches('/') {
        return Err(format!(
            "{origin:?} is not an origin (scheme://host[:port], nothing after)"
        ));
    }
    let loopback = url.starts_with("http://127.0.0.1") || url.starts_with("http://localhost");
    if !url.starts_with("https://") && !loopback {
        return Err(format!("{origin:?} must be https"));
    }
    Ok(url)
}

/// `scheme://host[:port]` of `text`, when it is an http(s) URL.
fn url_origin(text: &str) -> Option<String> {
    let (scheme, rest) = text.split_once("://")?;
    if scheme != "https" && scheme != "http" {
        return None;
    }
    let host = rest.split('/').next()?;
    if host.is_empty()
        || !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'))
    {
        return None;
    }
    Some(format!("{scheme}://{host}"))
}

impl PortalSettings {
    /// Reads `TERN_PORTAL_FRAME_ANCESTORS`, `TERN_PORTAL_URL`,
    /// `TERN_PORTAL_SESSIONS_PER_MINUTE` and `TERN_PORTAL_TEST_SENDS_PER_MINUTE` through `get`.
    ///
    /// # Errors
    /// [`PortalConfigError`] naming the variable.
    pub fn from_env(get: &dyn Fn(&str) -> Option<String>) -> Result<Self, PortalConfigError> {
        let set = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        let frame_ancestors = set("TERN_PORTAL_FRAME_ANCESTORS")
            .map(|v| {
                v.split([',', ' '])
                    .filter(|o| !o.is_empty())
                    .map(check_origin)
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()
            .map_err(|reason| PortalConfigError {
                name: "TERN_PORTAL_FRAME_ANCESTORS",
                reason,
            })?
            .unwrap_or_default();
        let public_url = set("TERN_PORTAL_URL")
            .map(|v| {
                url_origin(v.trim())
                    .map(|_| v.trim().trim_end_matches('/').to_owned())
                    .ok_or_else(|| PortalConfigError {
                        name: "TERN_PORTAL_URL",
                        reason: format!("{v:?} is not an http(s) URL"),
                    })
            })
            .transpose()?;
        let rate = |name: &'static str, default: u32| -> Result<u32, PortalConfigError> {
            set(name).map_or(Ok(default), |v| {
                v.trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=100_000).contains(n))
                    .ok_or_else(|| PortalConfigError {
                        name,
                        reason: format!("{v:?} is not a number from 1 to 100000"),
                    })
            })
        };
        Ok(Self {
            frame_ancestors,
            public_url,
            sessions_per_minute: rate(
                "TERN_PORTAL_SESSIONS_PER_MINUTE",
                DEFAULT_SESSIONS_PER_MINUTE,
            )?,
            test_sends_per_minute: rate(
                "TERN_PORTAL_TEST_SENDS_PER_MINUTE",
                DEFAULT_TEST_SENDS_PER_MINUTE,
            )?,
        })
    }
}

/// What the portal needs besides the API's dependencies.
#[derive(Clone)]
pub struct PortalDeps {
    /// The key ring (Secrets Manager).
    pub keys: Arc<dyn PortalKeySource>,
    /// Link uses and rate-limit counters (the portal table).
    pub ledger: Arc<dyn PortalLedger>,
    /// Settings.
    pub settings: PortalSettings,
}

/// The portal's pages, under `/portal`.
pub fn router() -> Router<ApiDeps> {
    use handlers as h;
    Router::new()
        .route("/portal", get(h::home))
        .route("/portal/", get(h::home))
        .route("/portal/start", get(h::start).post(h::start_session))
        .route("/portal/endpoints", get(h::list).post(h::create))
        .route("/portal/endpoints/{endpoint_id}", get(h::detail))
        .route("/portal/endpoints/{endpoint_id}/{action}", post(h::act))
        .route("/portal/endpoints/{endpoint_id}/log", get(h::log))
        .route(
            "/portal/endpoints/{endpoint_id}/log/{event_id}",
            get(h::attempt),
        )
        .route(
            "/portal/endpoints/{endpoint_id}/log/{event_id}/resend",
            post(h::resend),
        )
        .route("/portal/events", get(h::operational_events))
        // Any other path under /portal: the portal's own 404 page (never the API's).
        .route("/portal/{*rest}", axum::routing::any(h::not_found))
}

/// An authenticated portal request: the grant, the ring that verified it, its CSRF token.
#[derive(Clone)]
pub struct Session {
    /// What it may see and do.
    pub grant: Grant,
    /// The key ring (for the CSRF check).
    pub ring: KeyRing,
    /// The CSRF token its forms carry.
    pub csrf: String,
}

/// The value of cookie `name` in `headers`.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The `Set-Cookie` value of a session: `HttpOnly` (no script reads it), `Secure`,
/// `SameSite=None` with `Partitioned` (CHIPS): the portal works inside an `iframe` of the
/// application's own site, where a `Lax` or `Strict` cookie is never sent, and the
/// partition keys the cookie to that top-level site, so it is not a third-party cookie
/// shared across sites. CSRF tokens (and the `Origin` check) protect the state changes
/// that `SameSite` would otherwise have covered. `Max-Age` ends with the grant.
pub fn session_cookie(value: &str, max_age_seconds: i64) -> String {
    format!(
        "{COOKIE}={value}; Path=/; Max-Age={}; HttpOnly; Secure; SameSite=None; Partitioned",
        max_age_seconds.max(0)
    )
}

/// The whole stylesheet (one inline `<style>`, allowed by its hash in the CSP).
pub const STYLE: &str = include_str!("portal.css");

fn style_hash(text: &str) -> String {
    let digest = sha2::Sha256::digest(text.as_bytes());
    format!(
        "'sha256-{}'",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

/// The brand's stylesheet: the colour as a custom property, and the text colour on it
/// (black or white, whichever contrasts more: at least 4.5:1 for any colour, WCAG 2.2
/// §1.4.3).
pub fn brand_style(grant: Option<&Grant>) -> String {
    let color = grant
        .and_then(|g| g.brand_color.as_deref())
        .filter(|c| tern_core::portal::check_color(c).is_ok())
        .unwrap_or(pages::DEFAULT_BRAND);
    format!(":root{{--brand:{color};--brand-text:{}}}", text_on(color))
}

/// `#000` or `#fff`, whichever contrasts more with `#rrggbb` (WCAG relative luminance).
fn text_on(color: &str) -> &'static str {
    let channel = |i: usize| {
        let v = f64::from(u8::from_str_radix(color.get(i..i + 2).unwrap_or("00"), 16).unwrap_or(0))
            / 255.0;
        if v <= 0.04045 {
            v / 12.92
        } else {
            ((v + 0.055) / 1.055).powf(2.4)
        }
    };
    let l = 0.2126 * channel(1) + 0.7152 * channel(3) + 0.0722 * channel(5);
    // Contrast with white (1.05 / (l + 0.05)) against contrast with black ((l + 0.05) / 0.05).
    if 1.05 / (l + 0.05) >= (l + 0.05) / 0.05 {
        "#fff"
    } else {
        "#000"
    }
}

/// The page's Content-Security-Policy: nothing by default; the two inline stylesheets by
/// hash; no script at all; images only from the logo's origin; forms to this origin only;
/// framing by the allowed parents only.
pub fn content_security_policy(grant: Option<&Grant>, frame_ancestors: &[String]) -> String {
    let img = grant
        .and_then(|g| g.logo_url.as_deref())
        .and_then(url_origin)
        .unwrap_or_else(|| "'none'".to_owned());
    let ancestors = if frame_ancestors.is_empty() {
        "'none'".to_owned()
    } else {
        frame_ancestors.join(" ")
    };
    format!(
        "default-src 'none'; style-src {} {}; img-src {img}; form-action 'self'; frame-ancestors {ancestors}; base-uri 'none'",
        style_hash(STYLE),
        style_hash(&brand_style(grant))
    )
}

/// A page with the portal's headers: the CSP, `no-store` (pages hold tenant data and
/// secrets), `Referrer-Policy: same-origin` (no portal address, a link's token included,
/// leaves in a `Referer` to another origin; `no-referrer` would also make the browser send
/// `Origin: null` on the portal's own form posts, Fetch §3.2.5), `nosniff`.
pub fn respond(
    status: StatusCode,
    markup: Markup,
    grant: Option<&Grant>,
    settings: &PortalSettings,
) -> Response {
    let mut response = (status, markup.into_string()).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    if let Ok(v) = HeaderValue::from_str(&content_security_policy(grant, &settings.frame_ancestors))
    {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    if settings.frame_ancestors.is_empty() {
        h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// Verifies a link or a cookie for `purpose` with the deployment's ring.
pub(crate) async fn verify(
    portal: &PortalDeps,
    purpose: Purpose,
    token: &str,
) -> Result<(Grant, KeyRing), Refusal> {
    let ring = portal.keys.ring().await.map_err(|e| {
        tracing::warn!(error = %e, "the portal key ring could not be read");
        Refusal::Unavailable
    })?;
    let grant = ring
        .verify(purpose, token, chrono::Utc::now())
        .map_err(Refusal::Token)?;
    Ok((grant, ring))
}

/// Why a portal request was refused; each has its page, and none shows data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No session cookie.
    NoSession,
    /// A link or cookie that does not verify, expired or was used.
    Token(tern_core::portal::TokenError),
    /// A state change without the session's CSRF token, or from another origin.
    Csrf,
    /// A change in a read-only session.
    ReadOnly,
    /// The portal is not configured in this deployment.
    NotConfigured,
    /// The key ring or the portal table could not be read.
    Unavailable,
    /// A rate limit is spent.
    RateLimited,
}

impl Refusal {
    /// Status, title and explanation.
    pub fn describe(self) -> (StatusCode, &'static str, String) {
        match self {
            Self::NoSession => (
                StatusCode::UNAUTHORIZED,
                "Sign-in needed",
                "This page needs a portal session. Open the portal again from the application that sent you here.".into(),
            ),
            Self::Token(e) => (
                match e {
                    tern_core::portal::TokenError::Expired => StatusCode::GONE,
                    tern_core::portal::TokenError::Used => StatusCode::GONE,
                    _ => StatusCode::UNAUTHORIZED,
                },
                match e {
                    tern_core::portal::TokenError::Expired => "This link has expired",
                    tern_core::portal::TokenError::Used => "This link was used already",
                    _ => "This link is not valid",
                },
                format!(
                    "{e}. A portal link works once and for a limited time. Open the portal again from the application that sent you here."
                ),
            ),
            Self::Csrf => (
                StatusCode::FORBIDDEN,
                "Request refused",
                "The form was not sent from this portal's own page (its security token is missing or wrong). Reload the page and try again.".into(),
            ),
            Self::ReadOnly => (
                StatusCode::FORBIDDEN,
                "Read-only session",
                "This session may look but not change anything.".into(),
            ),
            Self::NotConfigured => (
                StatusCode::NOT_FOUND,
                "Portal not available",
                "The customer portal is not set up in this deployment.".into(),
            ),
            Self::Unavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "Try again",
                "A service the portal depends on did not answer in time. Reload the page in a moment.".into(),
            ),
            Self::RateLimited => (
                StatusCode::TOO_MANY_REQUESTS,
                "Too many requests",
                "The limit for this action is spent for this minute. Try again in a minute.".into(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_ancestors_are_origins_only() {
        assert_eq!(
            check_origin("https://app.example.com").unwrap(),
            "https://app.example.com"
        );
        assert!(check_origin("http://127.0.0.1:9000").is_ok());
        for bad in [
            "http://app.example.com",
            "https://app.example.com/path",
            "*",
            "https://a.example; script-src *",
            "'self'",
        ] {
            assert!(check_origin(bad).is_err(), "{bad}");
        }
        let s = PortalSettings::from_env(&|k| {
            (k == "TERN_PORTAL_FRAME_ANCESTORS")
                .then(|| "https://a.example, https://b.example:8443".to_owned())
        })
        .unwrap();
        assert_eq!(s.frame_ancestors.len(), 2);
        assert_eq!(s.sessions_per_minute, DEFAULT_SESSIONS_PER_MINUTE);
    }

    #[test]
    fn the_policy_allows_no_script_and_names_the_parents() {
        let csp = content_security_policy(None, &[]);
        assert!(csp.contains("default-src 'none'"));
        assert!(csp.contains("frame-ancestors 'none'"));
        assert!(
            !csp.contains("script-src"),
            "default-src 'none' covers scripts"
        );
        assert!(!csp.contains("unsafe"));
        let csp = content_security_policy(None, &["https://app.example".into()]);
        assert!(csp.contains("frame-ancestors https://app.example;"));
    }

    #[test]
    fn brand_text_contrasts() {
        assert_eq!(text_on("#ffff00"), "#000");
        assert_eq!(text_on("#1f4fd1"), "#fff");
        assert_eq!(text_on("#000000"), "#fff");
    }

    #[test]
    fn the_cookie_is_host_only_http_only_and_partitioned() {
        let c = session_cookie("v", 60);
        for part in [
            "__Host-tern-portal=v",
            "Path=/",
            "HttpOnly",
            "Secure",
            "SameSite=None",
            "Partitioned",
            "Max-Age=60",
        ] {
            assert!(c.contains(part), "{c}");
        }
        assert!(!c.contains("Domain"));
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            "a=1; __Host-tern-portal=xyz".parse().unwrap(),
        );
        assert_eq!(cookie(&h, COOKIE), Some("xyz"));
    }
}
