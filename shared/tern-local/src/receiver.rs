//! A scriptable webhook receiver on 127.0.0.1 for the demo and the tests: every request
//! is captured with its exact body bytes; each path answers per its script.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Response, StatusCode};
use chrono::{DateTime, Utc};
use tokio::task::JoinHandle;

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// Body bytes.
    pub body: Vec<u8>,
}

impl Reply {
    /// A reply with a status and an empty body.
    pub fn status(status: u16) -> Self {
        Self {
            status,
            headers: vec![],
            body: vec![],
        }
    }

    /// Adds a header.
    #[must_use]
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Sets the body.
    #[must_use]
    pub fn body(mut self, text: &str) -> Self {
        self.body = text.as_bytes().to_vec();
        self
    }
}

/// How a path answers.
#[derive(Debug, Clone)]
pub enum Behavior {
    /// Always this reply.
    Always(Reply),
    /// These replies in turn; the last one repeats.
    Script(Vec<Reply>),
    /// `fail` for the first `count` requests, then 200.
    FailFirst {
        /// Failing requests.
        count: usize,
        /// Their status.
        status: u16,
    },
    /// `status` for the first request of each `webhook-id` on the path, then 200: every
    /// delivery fails once and succeeds on its retry, however its attempts interleave with
    /// the others' (unlike [`Behavior::FailFirst`], which counts requests of any delivery).
    FailFirstOfEach {
        /// The first request's status.
        status: u16,
    },
    /// A rate limiter: 200 for at most `per_second` requests in any one-second window,
    /// `429` with `Retry-After: <retry_after>` beyond (the rejected ones do not count).
    RateLimit {
        /// Requests accepted per second.
        per_second: usize,
        /// The `Retry-After` value sent with each 429.
        retry_after: String,
    },
    /// Takes the request and never answers (for `hang`: an hour), so the sender's attempt
    /// deadline ends it: a receiver that hangs.
    Hang,
    /// A receiver behind an API gateway: 200 when the request's `authorization` header is
    /// exactly this value, else 401 with `www-authenticate: Bearer` (RFC 6750 §3).
    RequireAuthorization(String),
}

/// A captured request.
#[derive(Debug, Clone)]
pub struct Captured {
    /// Method.
    pub method: String,
    /// Path.
    pub path: String,
    /// Headers, names lowercase.
    pub headers: Vec<(String, String)>,
    /// Exact body bytes.
    pub body: Bytes,
    /// When it arrived.
    pub at: DateTime<Utc>,
    /// Status answered (0: none, the path hangs: [`Behavior::Hang`]).
    pub answered: u16,
}

impl Captured {
    /// First value of a header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct Inner {
    behaviors: HashMap<String, Behavior>,
    captured: Vec<Captured>,
    seen: HashMap<String, usize>,
    /// Per path, when the requests a [`Behavior::RateLimit`] accepted arrived.
    accepted: HashMap<String, std::collections::VecDeque<std::time::Instant>>,
}

/// A running receiver. Stops when dropped.
pub struct Receiver {
    addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
    task: JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock(inner: &Mutex<Inner>) -> std::sync::MutexGuard<'_, Inner> {
    inner
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn answer(State(inner): State<Arc<Mutex<Inner>>>, request: Request) -> Response<Body> {
    let method = request.method().to_string();
    let path = request.uri().path().to_owned();
    let headers: Vec<(String, String)> = request
        .headers()
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let authorization = request
        .headers()
        .get("authorization")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let body = axum::body::to_bytes(request.into_body(), 8 * 1024 * 1024)
        .await
        .unwrap_or_default();
    let reply = {
        let mut g = lock(&inner);
        let n = *g
            .seen
            .entry(path.clone())
            .and_modify(|c| *c += 1)
            .or_insert(1);
        let reply = match g.behaviors.get(&path) {
            None => Reply::status(200),
            Some(Behavior::Always(r)) => r.clone(),
            Some(Behavior::Script(list)) => list
                .get(n - 1)
                .or(list.last())
                .cloned()
                .unwrap_or(Reply::status(200)),
            Some(Behavior::FailFirst { count, status }) => {
                Reply::status(if n <= *count { *status } else { 200 })
            }
            Some(Behavior::FailFirstOfEach { status }) => {
                let id = headers
                    .iter()
                    .find(|(k, _)| k == "webhook-id")
                    .map(|(_, v)| v.as_str());
                let before = g
                    .captured
                    .iter()
                    .any(|c| c.path == path && id.is_some() && c.header("webhook-id") == id);
                Reply::status(if before { 200 } else { *status })
            }
            // Recorded as 0: nothing was answered.
            Some(Behavior::Hang) => Reply::status(0),
            Some(Behavior::RequireAuthorization(expected)) => {
                if authorization.as_deref() == Some(expected.as_str()) {
                    Reply::status(200)
                } else {
                    Reply::status(401).header("www-authenticate", "Bearer")
                }
            }
            Some(Behavior::RateLimit {
                per_second,
                retry_after,
            }) => {
                let (per_second, retry_after) = (*per_second, retry_after.clone());
                let now = std::time::Instant::now();
                let window = g.accepted.entry(path.clone()).or_default();
                while window
                    .front()
                    .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(1))
                {
                    window.pop_front();
                }
                if window.len() < per_second {
                    window.push_back(now);
                    Reply::status(200)
                } else {
                    Reply::status(429).header("retry-after", &retry_after)
                }
            }
        };
        g.captured.push(Captured {
            method,
            path,
            headers,
            body,
            at: Utc::now(),
            answered: reply.status,
        });
        reply
    };
    if reply.status == 0 {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    let mut response = Response::new(Body::from(reply.body));
    *response.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (n, v) in reply.headers {
        if let (Ok(n), Ok(v)) = (HeaderName::try_from(n), HeaderValue::try_from(v)) {
            response.headers_mut().append(n, v);
        }
    }
    response
}

impl Receiver {
    /// Starts on a free port of 127.0.0.1.
    ///
    /// # Errors
    /// The bind error.
    pub async fn start() -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let inner = Arc::new(Mutex::new(Inner::default()));
        let app = Router::new().fallback(answer).with_state(inner.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, inner, task })
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets how `path` answers (from its next request on; the request count restarts).
    pub fn set(&self, path: &str, behavior: Behavior) {
        let mut g = lock(&self.inner);
        g.behaviors.insert(path.to_owned(), behavior);
        g.seen.remove(path);
        g.accepted.remove(path);
    }

    /// Every request to `path`, in arrival order.
    pub fn requests(&self, path: &str) -> Vec<Captured> {
        lock(&self.inner)
            .captured
            .iter()
            .filter(|c| c.path == path)
            .cloned()
            .collect()
    }

    /// Every request.
    pub fn all_requests(&self) -> Vec<Captured> {
        lock(&self.inner).captured.clone()
    }

    /// Waits until `path` has received at least `n` requests, or `limit` passes.
    pub async fn wait_for(&self, path: &str, n: usize, limit: Duration) -> Vec<Captured> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let got = self.requests(path);
            if got.len() >= n || tokio::time::Instant::now() >= deadline {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each delivery's first request fails and its second succeeds, in any order.
    #[tokio::test]
    async fn fail_first_of_each_fails_every_webhook_id_once() {
        let receiver = Receiver::start().await.unwrap();
        receiver.set("/r", Behavior::FailFirstOfEach { status: 500 });
        let http = reqwest::Client::new();
        let post = async |id: &str| {
            http.post(receiver.url("/r"))
                .header("webhook-id", id)
                .body("{}")
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        };
        let statuses = [
            post("a").await,
            post("b").await,
            post("a").await,
            post("b").await,
            post("a").await,
        ];
        assert_eq!(statuses, [500, 500, 200, 200, 200]);
    }
}
