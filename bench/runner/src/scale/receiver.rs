//! Receivers on 127.0.0.1 for the scale scenarios: one server, one path per endpoint
//! (`/h/<endpoint id>`), each answering as its endpoint is set to (200 by default, `429`
//! with `Retry-After`, or `503`), counting every POST.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::task::JoinHandle;

/// How an endpoint's receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// `200 OK`.
    Ok,
    /// `429 Too Many Requests` with `Retry-After: <seconds>`.
    TooMany {
        /// The `Retry-After` value, seconds.
        retry_after_seconds: u64,
    },
    /// `503 Service Unavailable` without `Retry-After` (a dead endpoint).
    Unavailable,
}

#[derive(Default)]
struct Shared {
    answers: Mutex<HashMap<String, Answer>>,
    posts: Mutex<HashMap<String, u64>>,
    total: AtomicU64,
}

/// A running receiver. Stops when dropped.
pub struct Receivers {
    base: String,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Drop for Receivers {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn post(State(shared): State<Arc<Shared>>, Path(endpoint): Path<String>) -> Response {
    shared.total.fetch_add(1, Ordering::Relaxed);
    let answer = shared
        .answers
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&endpoint)
        .copied()
        .unwrap_or(Answer::Ok);
    *shared
        .posts
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(endpoint)
        .or_default() += 1;
    match answer {
        Answer::Ok => StatusCode::OK.into_response(),
        Answer::TooMany {
            retry_after_seconds,
        } => {
            let mut r = StatusCode::TOO_MANY_REQUESTS.into_response();
            if let Ok(v) = HeaderValue::from_str(&retry_after_seconds.to_string()) {
                r.headers_mut().insert("retry-after", v);
            }
            r
        }
        Answer::Unavailable => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

impl Receivers {
    /// Starts the server on a free port of 127.0.0.1.
    ///
    /// # Errors
    /// When it cannot bind.
    pub async fn start() -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let base = format!("http://{}", listener.local_addr()?);
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route("/h/{endpoint}", axum::routing::post(post))
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { base, shared, task })
    }

    /// The URL of `endpoint`'s receiver.
    pub fn url(&self, endpoint: &str) -> String {
        format!("{}/h/{endpoint}", self.base)
    }

    /// Sets how `endpoint`'s receiver answers from now on.
    pub fn set(&self, endpoint: &str, answer: Answer) {
        self.shared
            .answers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(endpoint.to_owned(), answer);
    }

    /// POSTs received so far.
    pub fn total(&self) -> u64 {
        self.shared.total.load(Ordering::Relaxed)
    }

    /// POSTs `endpoint` received so far.
    pub fn posts(&self, endpoint: &str) -> u64 {
        self.shared
            .posts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(endpoint)
            .copied()
            .unwrap_or(0)
    }
}
