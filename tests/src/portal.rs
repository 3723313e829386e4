//! A client of the customer portal for the tests: plain HTTP to the local API's
//! `/portal/...` pages, holding the session cookie as a browser does (without following
//! redirects, so each step's answer can be checked), and a helper that mints a portal
//! link through the signed API.

use serde_json::Value;

use crate::api::ApiClient;

/// One page.
#[derive(Debug, Clone)]
pub struct Page {
    /// Status code.
    pub status: u16,
    /// `Location`, for a redirect.
    pub location: Option<String>,
    /// Every `Set-Cookie`.
    pub set_cookies: Vec<String>,
    /// `Content-Security-Policy`.
    pub csp: String,
    /// The HTML.
    pub html: String,
}

impl Page {
    /// The value of the first form's CSRF field.
    pub fn csrf(&self) -> Option<String> {
        let at = self.html.find("name=\"csrf\" value=\"")? + "name=\"csrf\" value=\"".len();
        let rest = &self.html[at..];
        Some(rest[..rest.find('"')?].to_owned())
    }
}

/// Percent-encodes a form value (everything but unreserved characters, RFC 3986 §2.3).
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A browser-like client of one portal.
#[derive(Clone)]
pub struct PortalClient {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    /// The session cookie (`name=value`), once a link was opened.
    pub cookie: Option<String>,
    http: reqwest::Client,
}

impl PortalClient {
    /// A client of the portal at `base`, without a session.
    pub fn new(base: &str) -> Self {
        Self {
            base: base.trim_end_matches('/').to_owned(),
            cookie: None,
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
        }
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Page {
        let request = match &self.cookie {
            Some(c) => request.header("cookie", c),
            None => request,
        };
        let response = request.send().await.expect("the portal answers");
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let location = header("location");
        let csp = header("content-security-policy").unwrap_or_default();
        let set_cookies = response
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_owned)
            .collect();
        let status = response.status().as_u16();
        let html = response.text().await.unwrap_or_default();
        Page {
            status,
            location,
            set_cookies,
            csp,
            html,
        }
    }

    /// `GET path` (a path, or a whole URL).
    pub async fn get(&self, path: &str) -> Page {
        let url = if path.starts_with("http") {
            path.to_owned()
        } else {
            format!("{}{path}", self.base)
        };
        self.send(self.http.get(url)).await
    }

    /// Opens a portal link as a customer does: loads it (a safe `GET`, which spends
    /// nothing), then presses its button, which posts the link's token; keeps the session
    /// cookie it sets. A link refused on load returns that page.
    pub async fn open(&mut self, url: &str) -> Page {
        let page = self.get(url).await;
        if page.status != 200 || !page.html.contains("id=\"open\"") {
            return page;
        }
        let token = url
            .split_once("token=")
            .map(|(_, t)| t.split('&').next().unwrap_or(t).to_owned())
            .expect("a link with a token");
        let origin = self.base.clone();
        let page = self
            .post("/portal/start", &[("token", token.as_str())], Some(&origin))
            .await;
        if let Some(c) = page.set_cookies.first() {
            self.cookie = c.split(';').next().map(str::to_owned);
        }
        page
    }

    /// `HEAD path` (a path, or a whole URL), as a link scanner sends it.
    pub async fn head(&self, path: &str) -> Page {
        let url = if path.starts_with("http") {
            path.to_owned()
        } else {
            format!("{}{path}", self.base)
        };
        self.send(self.http.head(url)).await
    }

    /// `POST path` with a form, and an `Origin` header when given.
    pub async fn post(&self, path: &str, form: &[(&str, &str)], origin: Option<&str>) -> Page {
        let body = form
            .iter()
            .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let mut request = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        if let Some(o) = origin {
            request = request.header("origin", o);
        }
        self.send(request).await
    }

    /// The CSRF token of the session, read from the endpoints page.
    pub async fn csrf(&self) -> String {
        self.get("/portal/endpoints")
            .await
            .csrf()
            .expect("the endpoints page has a form with the CSRF token")
    }
}

/// Mints a portal link for `tenant` through the signed API; returns the answer's JSON.
///
/// # Panics
/// When the API does not answer 201.
pub async fn mint(api: &ApiClient, tenant: &str, body: &Value) -> Value {
    let answer = api
        .post(&format!("/v1/tenants/{tenant}/portal-sessions"), body)
        .await;
    assert_eq!(answer.status, 201, "{}", answer.text);
    answer.json
}
