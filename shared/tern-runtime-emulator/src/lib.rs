//! A small emulator of the AWS Lambda Runtime API (the `2018-06-01` interface a custom
//! runtime such as `lambda_runtime` talks to), listening on 127.0.0.1. It lets a real
//! function binary run outside AWS: start the emulator, spawn the binary with
//! [`RuntimeApi::lambda_env`] (which sets `AWS_LAMBDA_RUNTIME_API`), then
//! [`RuntimeApi::invoke`] it with an event and read the function's answer.
//!
//! Served routes (the ones a runtime client uses, see the AWS Lambda developer guide,
//! "Using the Lambda runtime API for custom runtimes"):
//! - `GET  /2018-06-01/runtime/invocation/next`: long-polls for the next event;
//! - `POST /2018-06-01/runtime/invocation/{id}/response`: the function's result;
//! - `POST /2018-06-01/runtime/invocation/{id}/error`: an invocation error;
//! - `POST /2018-06-01/runtime/init/error`: an init error.
//!
//! It also records when the first `next` arrived, which is how the benchmarks measure a
//! cold start (process spawn to "ready for the first event").

#![warn(missing_docs)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{Response, StatusCode};
use axum::routing::{get, post};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

/// Deadline given to each invocation (`Lambda-Runtime-Deadline-Ms`), milliseconds from
/// the moment the function receives it: 60,000, the sender's default timeout
/// (`infra/settings.json`, `functions.sender.timeoutSeconds`).
pub const INVOCATION_DEADLINE_MS: u64 = 60_000;

/// What the function answered for one invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `POST .../response`: the result bytes (JSON for Tern's functions).
    Response(Bytes),
    /// `POST .../error`: the error document.
    Error(Bytes),
}

/// The emulator could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    /// Binding the listener failed.
    #[error("cannot listen on 127.0.0.1: {0}")]
    Bind(#[from] std::io::Error),
    /// No answer within the limit.
    #[error("no answer from the function within {0:?}")]
    Timeout(Duration),
    /// The function reported an init error (it will not take events).
    #[error("the function failed to initialise: {0}")]
    Init(String),
    /// The emulator stopped.
    #[error("the emulator stopped")]
    Stopped,
}

struct Invocation {
    id: String,
    payload: Bytes,
}

struct Shared {
    /// Events waiting for a `next`.
    queue: tokio::sync::Mutex<mpsc::UnboundedReceiver<Invocation>>,
    /// Where each pending invocation's outcome goes.
    pending: Mutex<HashMap<String, oneshot::Sender<Outcome>>>,
    /// When the first `next` arrived.
    first_next: watch::Sender<Option<Instant>>,
    /// The body of an init error, if one was posted.
    init_error: watch::Sender<Option<String>>,
    /// Time each invocation gets, milliseconds.
    deadline_ms: u64,
}

/// A running emulator. Stops when dropped.
pub struct RuntimeApi {
    addr: SocketAddr,
    shared: Arc<Shared>,
    events: mpsc::UnboundedSender<Invocation>,
    next_id: std::sync::atomic::AtomicU64,
    task: JoinHandle<()>,
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn next(State(shared): State<Arc<Shared>>) -> Response<Body> {
    shared.first_next.send_if_modified(|t| {
        if t.is_none() {
            *t = Some(Instant::now());
            true
        } else {
            false
        }
    });
    // One `next` at a time takes from the queue; a runtime polls one at a time anyway.
    let invocation = shared.queue.lock().await.recv().await;
    let Some(invocation) = invocation else {
        return status(StatusCode::SERVICE_UNAVAILABLE);
    };
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .header("lambda-runtime-aws-request-id", &invocation.id)
        .header(
            "lambda-runtime-deadline-ms",
            (now_ms + shared.deadline_ms).to_string(),
        )
        .header(
            "lambda-runtime-invoked-function-arn",
            "arn:aws:lambda:us-east-1:123456789012:function:emulated",
        )
        .header(
            "lambda-runtime-trace-id",
            "Root=1-00000000-000000000000000000000000;Parent=0000000000000000;Sampled=0",
        )
        .body(Body::from(invocation.payload))
        .unwrap_or_else(|_| status(StatusCode::INTERNAL_SERVER_ERROR))
}

fn status(code: StatusCode) -> Response<Body> {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = code;
    r
}

fn finish(shared: &Shared, id: &str, outcome: Outcome) -> Response<Body> {
    match lock(&shared.pending).remove(id) {
        Some(tx) => {
            let _ = tx.send(outcome);
            status(StatusCode::ACCEPTED)
        }
        None => status(StatusCode::BAD_REQUEST),
    }
}

async fn response(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response<Body> {
    finish(&shared, &id, Outcome::Response(body))
}

async fn error(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response<Body> {
    finish(&shared, &id, Outcome::Error(body))
}

async fn init_error(State(shared): State<Arc<Shared>>, body: Bytes) -> Response<Body> {
    let _ = shared
        .init_error
        .send(Some(String::from_utf8_lossy(&body).into_owned()));
    status(StatusCode::ACCEPTED)
}

impl RuntimeApi {
    /// Starts an emulator on a free port of 127.0.0.1.
    ///
    /// # Errors
    /// [`EmulatorError::Bind`].
    pub async fn start() -> Result<Self, EmulatorError> {
        Self::start_with_deadline(INVOCATION_DEADLINE_MS).await
    }

    /// Starts an emulator whose invocations each get `deadline_ms` milliseconds (a
    /// function's timeout, e.g. the relay's 30,000).
    ///
    /// # Errors
    /// [`EmulatorError::Bind`].
    pub async fn start_with_deadline(deadline_ms: u64) -> Result<Self, EmulatorError> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (events, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            queue: tokio::sync::Mutex::new(rx),
            pending: Mutex::new(HashMap::new()),
            first_next: watch::Sender::new(None),
            init_error: watch::Sender::new(None),
            deadline_ms,
        });
        let app = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next))
            .route(
                "/2018-06-01/runtime/invocation/{id}/response",
                post(response),
            )
            .route("/2018-06-01/runtime/invocation/{id}/error", post(error))
            .route("/2018-06-01/runtime/init/error", post(init_error))
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            addr,
            shared,
            events,
            next_id: std::sync::atomic::AtomicU64::new(1),
            task,
        })
    }

    /// `host:port`, the value of `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    /// The variables Lambda sets for a function (the ones `lambda_runtime` requires),
    /// pointing the runtime at this emulator. `memory_mb` is the configured memory, MB.
    pub fn lambda_env(&self, function_name: &str, memory_mb: u32) -> Vec<(String, String)> {
        vec![
            ("AWS_LAMBDA_RUNTIME_API".into(), self.address()),
            ("AWS_LAMBDA_FUNCTION_NAME".into(), function_name.into()),
            (
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE".into(),
                memory_mb.to_string(),
            ),
            ("AWS_LAMBDA_FUNCTION_VERSION".into(), "$LATEST".into()),
            (
                "AWS_LAMBDA_LOG_GROUP_NAME".into(),
                format!("/aws/lambda/{function_name}"),
            ),
            ("AWS_LAMBDA_LOG_STREAM_NAME".into(), "emulated".into()),
        ]
    }

    /// When the first `GET .../invocation/next` arrived, waiting up to `limit` for it.
    /// `None` when none came in time.
    pub async fn first_next(&self, limit: Duration) -> Option<Instant> {
        let mut rx = self.shared.first_next.subscribe();
        let waited = tokio::time::timeout(limit, rx.wait_for(Option::is_some)).await;
        match waited {
            Ok(Ok(t)) => *t,
            _ => None,
        }
    }

    /// Queues `payload` as the next event and waits up to `limit` for the function's
    /// outcome.
    ///
    /// # Errors
    /// [`EmulatorError::Timeout`] without an answer in time, [`EmulatorError::Init`] when
    /// the function reported an init error.
    pub async fn invoke(
        &self,
        payload: impl Into<Bytes>,
        limit: Duration,
    ) -> Result<Outcome, EmulatorError> {
        let id = format!(
            "00000000-0000-4000-8000-{:012}",
            self.next_id
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let (tx, rx) = oneshot::channel();
        lock(&self.shared.pending).insert(id.clone(), tx);
        self.events
            .send(Invocation {
                id,
                payload: payload.into(),
            })
            .map_err(|_| EmulatorError::Stopped)?;
        let mut init = self.shared.init_error.subscribe();
        tokio::select! {
            r = tokio::time::timeout(limit, rx) => match r {
                Ok(Ok(outcome)) => Ok(outcome),
                Ok(Err(_)) => Err(EmulatorError::Stopped),
                Err(_) => Err(EmulatorError::Timeout(limit)),
            },
            Ok(e) = init.wait_for(Option::is_some) => {
                Err(EmulatorError::Init(e.clone().unwrap_or_default()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn http(addr: &str, request: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    /// The round trip a runtime client makes: next (gets the event and its request id),
    /// then response; `invoke` returns what was posted.
    #[tokio::test]
    async fn next_then_response_round_trip() {
        let api = RuntimeApi::start().await.unwrap();
        let addr = api.address();
        let invoke = api.invoke(&b"{\"x\":1}"[..], Duration::from_secs(10));
        let client = async {
            let got = http(
                &addr,
                "GET /2018-06-01/runtime/invocation/next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            )
            .await;
            assert!(got.starts_with("HTTP/1.1 200"), "{got}");
            assert!(got.ends_with("{\"x\":1}"), "{got}");
            let id = got
                .lines()
                .find_map(|l| l.strip_prefix("lambda-runtime-aws-request-id: "))
                .unwrap()
                .to_owned();
            let body = "{\"ok\":true}";
            let posted = http(
                &addr,
                &format!(
                    "POST /2018-06-01/runtime/invocation/{id}/response HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                ),
            )
            .await;
            assert!(posted.starts_with("HTTP/1.1 202"), "{posted}");
        };
        let (outcome, ()) = tokio::join!(invoke, client);
        assert_eq!(
            outcome.unwrap(),
            Outcome::Response(Bytes::from_static(b"{\"ok\":true}"))
        );
        assert!(api.first_next(Duration::ZERO).await.is_some());
    }

    /// An init error ends the wait at once with the function's message.
    #[tokio::test]
    async fn init_error_is_reported() {
        let api = RuntimeApi::start().await.unwrap();
        let addr = api.address();
        let invoke = api.invoke(&b"{}"[..], Duration::from_secs(10));
        let client = http(
            &addr,
            "POST /2018-06-01/runtime/init/error HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nConnection: close\r\n\r\nboom",
        );
        let (outcome, _) = tokio::join!(invoke, client);
        assert!(matches!(outcome, Err(EmulatorError::Init(m)) if m == "boom"));
    }
}
