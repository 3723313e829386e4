//! A counting HTTP proxy in front of moto: each listener has a label (who sends through
//! it: the relay, the sender, the local event source mappings, the application), every
//! request is counted by `(label, operation)` and forwarded unchanged. The operation is
//! read the way AWS routes it: the `X-Amz-Target` header of the JSON protocols
//! (`DynamoDB_20120810.GetItem`, `AmazonSQS.SendMessage`, `AWSStepFunctions.StartExecution`)
//! or the `Action` parameter of the query protocol (older SQS clients).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderName, Response, StatusCode};
use tokio::task::JoinHandle;

/// Counts by label, then operation (`dynamodb:GetItem`, `sqs:SendMessageBatch`, ...).
pub type Counts = BTreeMap<String, BTreeMap<String, u64>>;

#[derive(Clone)]
struct Shared {
    upstream: String,
    http: reqwest::Client,
    counts: Arc<Mutex<Counts>>,
}

/// A running proxy with one listener per label. Stops when dropped.
pub struct CountingProxy {
    urls: BTreeMap<String, String>,
    counts: Arc<Mutex<Counts>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The AWS operation of a request: `service:Operation`.
pub fn operation(headers: &axum::http::HeaderMap, body: &[u8]) -> String {
    if let Some(target) = headers.get("x-amz-target").and_then(|v| v.to_str().ok())
        && let Some((service, op)) = target.split_once('.')
    {
        let service = match service {
            s if s.starts_with("DynamoDBStreams") => "streams",
            s if s.starts_with("DynamoDB") => "dynamodb",
            "AmazonSQS" => "sqs",
            "AWSStepFunctions" => "states",
            // KMS's JSON protocol target prefix.
            "TrentService" => "kms",
            other => other,
        };
        return format!("{service}:{op}");
    }
    let text = String::from_utf8_lossy(body);
    text.split('&')
        .find_map(|kv| kv.strip_prefix("Action="))
        .map_or_else(|| "other:unknown".to_owned(), |a| format!("sqs:{a}"))
}

fn lock(m: &Mutex<Counts>) -> std::sync::MutexGuard<'_, Counts> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn forward(State((shared, label)): State<(Shared, String)>, req: Request) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let body: Bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(_) => return status(StatusCode::BAD_REQUEST),
    };
    let op = operation(&parts.headers, &body);
    *lock(&shared.counts)
        .entry(label)
        .or_default()
        .entry(op)
        .or_default() += 1;
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let mut out = shared
        .http
        .request(parts.method.clone(), format!("{}{path}", shared.upstream));
    for (name, value) in &parts.headers {
        if !hop_by_hop(name) {
            out = out.header(name, value);
        }
    }
    let answer = match out.body(body).send().await {
        Ok(a) => a,
        Err(_) => return status(StatusCode::BAD_GATEWAY),
    };
    let mut response = Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        if !hop_by_hop(name) {
            response = response.header(name, value);
        }
    }
    let bytes = answer.bytes().await.unwrap_or_default();
    response
        .body(Body::from(bytes))
        .unwrap_or_else(|_| status(StatusCode::BAD_GATEWAY))
}

fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "host" | "connection" | "content-length" | "transfer-encoding" | "keep-alive"
    )
}

fn status(code: StatusCode) -> Response<Body> {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = code;
    r
}

impl CountingProxy {
    /// Starts one listener on 127.0.0.1 per label, all forwarding to `upstream`
    /// (`http://127.0.0.1:<moto port>`).
    ///
    /// # Errors
    /// When a listener cannot bind.
    pub async fn start(upstream: &str, labels: &[&str]) -> std::io::Result<Self> {
        let shared = Shared {
            upstream: upstream.trim_end_matches('/').to_owned(),
            http: reqwest::Client::new(),
            counts: Arc::default(),
        };
        let mut urls = BTreeMap::new();
        let mut tasks = Vec::new();
        for label in labels {
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
            urls.insert(
                (*label).to_owned(),
                format!("http://{}", listener.local_addr()?),
            );
            let app = Router::new()
                .fallback(forward)
                .with_state((shared.clone(), (*label).to_owned()));
            tasks.push(tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            }));
        }
        Ok(Self {
            urls,
            counts: shared.counts,
            tasks,
        })
    }

    /// URL of the listener for `label`.
    pub fn url(&self, label: &str) -> String {
        self.urls.get(label).cloned().unwrap_or_default()
    }

    /// Counts so far.
    pub fn counts(&self) -> Counts {
        lock(&self.counts).clone()
    }

    /// Forgets the counts so far.
    pub fn reset(&self) {
        lock(&self.counts).clear();
    }
}
