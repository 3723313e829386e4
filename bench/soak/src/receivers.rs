//! The soak's receivers: one HTTP server per endpoint on 127.0.0.1, each in a mode that can
//! change while the soak runs (healthy, flaky, rate-limited with `Retry-After`, refusing
//! connections, hanging, slow). Every request is checked with the endpoint's secret (an
//! independent Standard Webhooks verifier) and counted, so the soak knows, without asking
//! Tern, which deliveries each receiver accepted and how often.
//!
//! A **duplicate** is a request a receiver answered 2xx (accepted) with a `webhook-id` it
//! had already accepted: a receiver that does not dedupe would process that event twice.
//! A retry after a failed attempt is not one (the receiver did not accept the first).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Response, StatusCode};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use serde::Serialize;
use tokio::task::JoinHandle;

/// How an endpoint's receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// 200 at once.
    Healthy,
    /// 500 for `fail_percent` % of requests (seeded), else 200.
    Flaky {
        /// Share of requests answered 500, percent.
        fail_percent: u32,
    },
    /// 429 with `Retry-After: <retry_after_seconds>` for `limited_percent` % of requests,
    /// else 200.
    RateLimited {
        /// Share of requests answered 429, percent.
        limited_percent: u32,
        /// The `Retry-After` sent, seconds (logical: the sender scales it).
        retry_after_seconds: u32,
    },
    /// At most `per_second` requests answered 200 in each wall-clock second; the rest
    /// 429 with `Retry-After: 1` (a receiver's own rate limit).
    Limited {
        /// Requests accepted per second.
        per_second: u32,
    },
    /// Nothing listens on its port: connection refused.
    Refusing,
    /// Accepts the request and never answers.
    Hanging,
    /// 200 after a delay drawn from `min_ms..=max_ms`.
    Slow {
        /// Shortest delay, milliseconds.
        min_ms: u64,
        /// Longest delay, milliseconds.
        max_ms: u64,
    },
}

/// What one receiver saw.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Tally {
    /// Requests received.
    pub requests: u64,
    /// Requests answered 2xx.
    pub accepted: u64,
    /// Distinct webhook ids accepted.
    pub distinct_accepted: u64,
    /// Accepted requests whose webhook id had been accepted before.
    pub duplicates: u64,
    /// Requests whose signature did not verify (must be 0).
    pub bad_signatures: u64,
}

#[derive(Default)]
struct Log {
    requests: u64,
    bad_signatures: u64,
    accepted: HashMap<String, u64>,
}

struct Shared {
    mode: Mutex<Mode>,
    rng: Mutex<StdRng>,
    log: Mutex<Log>,
    /// The current wall-clock second and the requests counted in it ([`Mode::Limited`]).
    window: Mutex<(u64, u32)>,
    verifier: tern_receiver::Verifier,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One endpoint's receiver.
pub struct EndpointReceiver {
    /// The endpoint's name in the soak (`healthy`, `flaky`, ...).
    pub name: String,
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for EndpointReceiver {
    fn drop(&mut self) {
        if let Some(task) = lock(&self.server).take() {
            task.abort();
        }
    }
}

async fn answer(State(shared): State<Arc<Shared>>, request: Request) -> Response<Body> {
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
    let id = headers
        .iter()
        .find(|(n, _)| n == "webhook-id")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let body = axum::body::to_bytes(request.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    let verified = shared.verifier.verify_now(&headers, &body).is_ok();
    let mode = *lock(&shared.mode);
    let draw = |percent: u32| lock(&shared.rng).random_range(0..100) < percent;
    // Decided, and counted, when the request arrives: what the receiver does with it.
    let (status, retry_after, delay) = match mode {
        Mode::Healthy | Mode::Refusing => (200, None, None),
        Mode::Flaky { fail_percent } => (if draw(fail_percent) { 500 } else { 200 }, None, None),
        Mode::RateLimited {
            limited_percent,
            retry_after_seconds,
        } => {
            if draw(limited_percent) {
                (429, Some(retry_after_seconds), None)
            } else {
                (200, None, None)
            }
        }
        Mode::Limited { per_second } => {
            let second = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let mut window = lock(&shared.window);
            if window.0 != second {
                *window = (second, 0);
            }
            window.1 += 1;
            if window.1 > per_second {
                (429, Some(1), None)
            } else {
                (200, None, None)
            }
        }
        Mode::Hanging => (0, None, None),
        Mode::Slow { min_ms, max_ms } => {
            let ms = lock(&shared.rng).random_range(min_ms..=max_ms.max(min_ms));
            (200, None, Some(Duration::from_millis(ms)))
        }
    };
    {
        let mut log = lock(&shared.log);
        log.requests += 1;
        if !verified {
            log.bad_signatures += 1;
        }
        if (200..300).contains(&status) && verified {
            *log.accepted.entry(id).or_default() += 1;
        }
    }
    if status == 0 {
        // Hanging: the sender's attempt deadline ends it.
        std::future::pending::<()>().await;
    }
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    if let Some(s) = retry_after
        && let Ok(v) = s.to_string().parse()
    {
        response.headers_mut().insert("retry-after", v);
    }
    response
}

impl EndpointReceiver {
    /// Starts a receiver for the endpoint `name` signed with `secret`, in `mode`, on a
    /// free port of 127.0.0.1 (bound even when refusing, to reserve the port; then closed).
    ///
    /// # Errors
    /// A bind error, or a secret the verifier refuses.
    pub async fn start(
        name: &str,
        secret: &str,
        mode: Mode,
        seed: u64,
    ) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let receiver = Self {
            name: name.to_owned(),
            addr,
            shared: Arc::new(Shared {
                mode: Mutex::new(mode),
                rng: Mutex::new(StdRng::seed_from_u64(seed)),
                log: Mutex::default(),
                window: Mutex::default(),
                verifier: tern_receiver::Verifier::new(secret)?,
            }),
            server: Mutex::new(None),
        };
        if mode != Mode::Refusing {
            receiver.serve(listener);
        }
        Ok(receiver)
    }

    fn serve(&self, listener: tokio::net::TcpListener) {
        let app = Router::new()
            .fallback(answer)
            .with_state(self.shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        if let Some(old) = lock(&self.server).replace(task) {
            old.abort();
        }
    }

    /// `http://127.0.0.1:<port>/<name>`.
    pub fn url(&self) -> String {
        format!("http://{}/{}", self.addr, self.name)
    }

    /// Switches the mode: a refusing receiver closes its port, one coming back from
    /// refusing listens on the same port again.
    ///
    /// # Errors
    /// The port could not be bound again.
    pub async fn set_mode(&self, mode: Mode) -> std::io::Result<()> {
        let was = std::mem::replace(&mut *lock(&self.shared.mode), mode);
        if mode == Mode::Refusing {
            if let Some(task) = lock(&self.server).take() {
                task.abort();
            }
        } else if was == Mode::Refusing {
            // The old listener is closed (its task aborted): bind the port again, retried
            // briefly while the kernel releases it.
            let mut tries = 0;
            let listener = loop {
                match tokio::net::TcpListener::bind(self.addr).await {
                    Ok(l) => break l,
                    Err(e) if tries < 50 => {
                        tries += 1;
                        let _ = e;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => return Err(e),
                }
            };
            self.serve(listener);
        }
        Ok(())
    }

    /// What it saw so far.
    pub fn tally(&self) -> Tally {
        let log = lock(&self.shared.log);
        let accepted: u64 = log.accepted.values().sum();
        let distinct = log.accepted.len() as u64;
        Tally {
            requests: log.requests,
            accepted,
            distinct_accepted: distinct,
            duplicates: accepted - distinct,
            bad_signatures: log.bad_signatures,
        }
    }

    /// The webhook ids it accepted, with how often.
    pub fn accepted(&self) -> HashMap<String, u64> {
        lock(&self.shared.log).accepted.clone()
    }
}
