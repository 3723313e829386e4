//! One HTTP attempt: POST the signed body, never follow a redirect, stop at the deadline,
//! keep only a short excerpt of the answer.

use std::error::Error as StdError;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::redirect::Policy;
use tern_core::outcome::{AttemptResult, ErrorClass};
use tokio::time::timeout_at;

use crate::guard::{
    BlockedError, DestinationPolicy, DnsError, GuardedResolver, HostLookup, SystemLookup,
};

/// Bytes of the response body kept in the attempt log: 1 KiB. The rest is never read, so
/// memory stays flat whatever the receiver sends.
pub const DEFAULT_EXCERPT_BYTES: usize = 1024;

/// How the delivery client is built.
#[derive(Clone)]
pub struct ClientOptions {
    /// Destination policy (https-only, allow-list).
    pub policy: DestinationPolicy,
    /// Name lookup; [`SystemLookup`] in production, a fixed table in tests.
    pub lookup: Arc<dyn HostLookup>,
    /// Response bytes kept, see [`DEFAULT_EXCERPT_BYTES`].
    pub excerpt_bytes: usize,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            policy: DestinationPolicy::default(),
            lookup: Arc::new(SystemLookup),
            excerpt_bytes: DEFAULT_EXCERPT_BYTES,
        }
    }
}

/// Could not build the HTTP client (TLS roots missing).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the HTTP client: {0}")]
pub struct ClientBuildError(#[from] reqwest::Error);

/// One attempt to make.
#[derive(Debug, Clone)]
pub struct AttemptRequest<'a> {
    /// Receiver URL.
    pub url: &'a str,
    /// The exact body bytes that were signed.
    pub body: Bytes,
    /// Headers to send besides `content-type` and `user-agent`.
    pub headers: &'a [(&'static str, String)],
    /// Total deadline of the attempt: connect, send, response head and excerpt.
    pub deadline: Duration,
}

/// What an attempt produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptReport {
    /// Status line or error class.
    pub result: AttemptResult,
    /// Time from start to the end of the attempt, in milliseconds.
    pub latency_ms: u64,
    /// The first bytes of the response body, lossy UTF-8.
    pub excerpt: Option<String>,
    /// True when the body was longer than the excerpt or could not be read to its end
    /// before the deadline.
    pub excerpt_truncated: bool,
}

/// The HTTP client Tern delivers with. Build once per process and share: it pools
/// connections.
#[derive(Clone)]
pub struct DeliveryClient {
    http: reqwest::Client,
    policy: Arc<DestinationPolicy>,
    excerpt_bytes: usize,
}

impl DeliveryClient {
    /// Builds the client: redirects off, proxies off, TLS verification on, every resolved
    /// address checked by the SSRF guard.
    ///
    /// # Errors
    /// [`ClientBuildError`] when the TLS backend cannot start.
    pub fn new(options: ClientOptions) -> Result<Self, ClientBuildError> {
        let policy = Arc::new(options.policy);
        let http = reqwest::Client::builder()
            .redirect(Policy::none())
            .no_proxy()
            .user_agent(tern_core::USER_AGENT)
            .dns_resolver(Arc::new(GuardedResolver::new(
                options.lookup,
                policy.clone(),
            )))
            .pool_idle_timeout(Duration::from_secs(30))
            .build()?;
        Ok(Self {
            http,
            policy,
            excerpt_bytes: options.excerpt_bytes,
        })
    }

    /// The destination policy in force.
    pub fn policy(&self) -> &DestinationPolicy {
        &self.policy
    }

    /// Checks what can be checked without a lookup: the URL parses, the scheme is allowed,
    /// and an IP-literal host is not denied. (Named hosts are checked at connect time by
    /// the guarded resolver.)
    ///
    /// # Errors
    /// A [`BlockedError`], or the URL parse error as text.
    pub fn precheck(&self, url: &str) -> Result<url::Url, String> {
        let parsed = url::Url::parse(url).map_err(|e| format!("invalid URL: {e}"))?;
        self.policy
            .check_scheme(&parsed)
            .map_err(|e| e.to_string())?;
        let ip = match parsed.host() {
            Some(url::Host::Ipv4(v4)) => Some(std::net::IpAddr::V4(v4)),
            Some(url::Host::Ipv6(v6)) => Some(std::net::IpAddr::V6(v6)),
            Some(url::Host::Domain(_)) => None,
            None => return Err("URL has no host".into()),
        };
        if let Some(ip) = ip {
            self.policy.check_ip(ip).map_err(|e| e.to_string())?;
        }
        Ok(parsed)
    }

    /// Makes one attempt. Never panics and never returns an error: every failure is an
    /// [`AttemptResult::Failed`] with its class.
    pub async fn attempt(&self, req: AttemptRequest<'_>) -> AttemptReport {
        let started = Instant::now();
        let deadline = tokio::time::Instant::from_std(started + req.deadline);
        let elapsed_ms = || u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let failed = |class, detail: String| AttemptReport {
            result: AttemptResult::Failed { class, detail },
            latency_ms: elapsed_ms(),
            excerpt: None,
            excerpt_truncated: false,
        };

        let url = match self.precheck(req.url) {
            Ok(u) => u,
            Err(detail) => return failed(ErrorClass::Blocked, detail),
        };
        let mut builder = self
            .http
            .post(url)
            .header("content-type", "application/json");
        for (name, value) in req.headers {
            builder = builder.header(*name, value);
        }
        let sent = timeout_at(deadline, builder.body(req.body).send()).await;
        let mut response = match sent {
            Err(_) => {
                return failed(
                    ErrorClass::Timeout,
                    format!("no response within {} ms", req.deadline.as_millis()),
                );
            }
            Ok(Err(e)) => {
                let (class, detail) = classify_error(&e);
                return failed(class, detail);
            }
            Ok(Ok(r)) => r,
        };

        let status = response.status().as_u16();
        let header = |name: &str| {
            response.headers().get(name).map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .chars()
                    .take(512)
                    .collect::<String>()
            })
        };
        let retry_after = header("retry-after");
        let location = header("location");

        // Read at most excerpt_bytes + 1 bytes, by the same deadline. The outcome already
        // depends on the status alone; the body is only for the log.
        let mut kept: Vec<u8> = Vec::new();
        let mut truncated = false;
        loop {
            match timeout_at(deadline, response.chunk()).await {
                Ok(Ok(Some(chunk))) => {
                    let room = self.excerpt_bytes.saturating_sub(kept.len());
                    kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    if chunk.len() > room {
                        truncated = true;
                        break;
                    }
                }
                Ok(Ok(None)) => break,
                Ok(Err(_)) | Err(_) => {
                    truncated = true;
                    break;
                }
            }
        }
        drop(response);
        AttemptReport {
            result: AttemptResult::Response {
                status,
                retry_after,
                location,
            },
            latency_ms: elapsed_ms(),
            excerpt: (!kept.is_empty()).then(|| String::from_utf8_lossy(&kept).into_owned()),
            excerpt_truncated: truncated,
        }
    }
}

/// Maps a reqwest error to an error class by walking its source chain.
fn classify_error(e: &reqwest::Error) -> (ErrorClass, String) {
    let mut source: Option<&(dyn StdError + 'static)> = Some(e);
    let mut innermost = e.to_string();
    while let Some(err) = source {
        if let Some(b) = err.downcast_ref::<BlockedError>() {
            return (ErrorClass::Blocked, b.to_string());
        }
        if let Some(d) = err.downcast_ref::<DnsError>() {
            return (ErrorClass::Dns, d.to_string());
        }
        if let Some(t) = rustls_error(err) {
            return (ErrorClass::Tls, t.to_string());
        }
        innermost = err.to_string();
        source = err.source();
    }
    let class = if e.is_timeout() {
        ErrorClass::Timeout
    } else if e.is_connect() {
        ErrorClass::Connect
    } else {
        ErrorClass::Protocol
    };
    (class, innermost)
}

/// The rustls error inside `err`, if any. `io::Error::source()` skips the error it wraps
/// (it returns the wrapped error's own source), and the TLS stack nests io errors, so
/// each `io::Error` is unwrapped through `get_ref` until something else appears.
fn rustls_error<'a>(err: &'a (dyn StdError + 'static)) -> Option<&'a rustls::Error> {
    let mut current = err;
    loop {
        if let Some(t) = current.downcast_ref::<rustls::Error>() {
            return Some(t);
        }
        let io = current.downcast_ref::<std::io::Error>()?;
        current = io.get_ref()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_rustls_errors_inside_nested_io_errors() {
        let tls = || rustls::Error::General("bad handshake".into());
        let direct = tls();
        assert!(rustls_error(&direct).is_some());
        let nested =
            std::io::Error::other(std::io::Error::new(std::io::ErrorKind::InvalidData, tls()));
        assert_eq!(
            rustls_error(&nested).map(ToString::to_string),
            Some(tls().to_string())
        );
        let plain = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert!(rustls_error(&plain).is_none());
    }
}
