//! One HTTP attempt: POST the signed body, never follow a redirect, stop at the deadline,
//! keep only a short excerpt of the answer.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, USER_AGENT};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tern_core::clock::{MonotonicClock, SystemClock};
use tern_core::custom_headers::FieldValue;
use tern_core::outcome::{AttemptResult, ErrorClass};
use tern_core::request::OutgoingHeader;
use tokio::time::timeout_at;

use crate::classify::{classify_failure, error_detail, unprocessed};
use crate::dns::DnsResolver;
use crate::guard::{DestinationPolicy, HostLookup};
use crate::identity::{
    CERTIFICATE_CACHE_SECONDS, CertificateCache, CertificateError, ClientIdentity, IdentityError,
    MAX_CACHED_IDENTITIES,
};
use crate::oauth::TokenCache;
use crate::transport::{ATTEMPT_DEADLINE, CapturedHead, ConnState, ConnTag, Connector};
use std::collections::HashMap;
use tern_core::client_certificate::{
    CertificateSecretError, CertificateSecrets, ClientCertificate,
};

/// Bytes of the response body kept in the attempt log: 1 KiB. The rest is never read, so
/// memory stays flat whatever the receiver sends.
pub const DEFAULT_EXCERPT_BYTES: usize = 1024;

/// How the delivery client is built.
#[derive(Clone)]
pub struct ClientOptions {
    /// Destination policy (https-only, allow-list).
    pub policy: DestinationPolicy,
    /// Name lookup; [`DnsResolver`] in production (one per process: it holds the TTL
    /// cache), a fixed table or a failing resolver in tests.
    pub lookup: Arc<dyn HostLookup>,
    /// Response bytes kept, see [`DEFAULT_EXCERPT_BYTES`].
    pub excerpt_bytes: usize,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            policy: DestinationPolicy::default(),
            lookup: Arc::new(DnsResolver::system()),
            excerpt_bytes: DEFAULT_EXCERPT_BYTES,
        }
    }
}

/// Could not build the HTTP client (the TLS configuration was refused).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the HTTP client: {0}")]
pub struct ClientBuildError(#[from] rustls::Error);

/// Most header lines of a response head parsed: 1,000 (hyper's default is 100). A head
/// with more, or bigger than [`MAX_HEAD_BYTES`], is not a failure: the attempt is
/// classified by its status line (see [`crate::transport`]).
pub const MAX_RESPONSE_HEADERS: usize = 1_000;

/// Most bytes hyper buffers for one response head: 64 KiB (hyper's default is ~400 KiB;
/// Tern needs the status, `Retry-After` and `Location` only). Over HTTP/2 the same bound
/// is the header list size the client advertises (`SETTINGS_MAX_HEADER_LIST_SIZE`,
/// RFC 9113 §6.5.2, counted as §6.5.2 says: name + value + 32 octets per field; hyper's
/// default is 16 KiB), so a receiver's answer fits over either version alike.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Most times one attempt's request is sent again after HTTP/2 proved the receiver did
/// not process it (a `REFUSED_STREAM` reset or a graceful `GOAWAY` below its stream, RFC
/// 9113 §8.7): 2, within the attempt's deadline. A receiver that keeps refusing is then
/// charged the attempt like any other failure.
pub const MAX_UNPROCESSED_RESENDS: u32 = 2;

/// Most characters kept of a receiver-controlled header value (`Retry-After`,
/// `Location`): 512.
pub const MAX_HEADER_VALUE_CHARS: usize = 512;

/// `bytes` as lossy UTF-8, cut to [`MAX_HEADER_VALUE_CHARS`].
pub(crate) fn bounded_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .take(MAX_HEADER_VALUE_CHARS)
        .collect()
}

type Http = Client<Connector, Full<Bytes>>;

/// The pooled and fresh clients of each client certificate, by [`ClientIdentity`] id.
type IdentityClients = HashMap<[u8; 32], (Http, Http)>;

/// One attempt to make.
#[derive(Debug, Clone)]
pub struct AttemptRequest<'a> {
    /// Receiver URL.
    pub url: &'a str,
    /// The exact body bytes that were signed.
    pub body: Bytes,
    /// Headers to send besides `content-type` and `user-agent`
    /// ([`tern_core::request::attempt_headers`]); secret values are sent marked
    /// sensitive (never indexed by HTTP/2's HPACK, RFC 7541 §7.1.3).
    pub headers: &'a [OutgoingHeader],
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
    /// Pools keep-alive connections (idle up to 30 s).
    pooled: Http,
    /// Never reuses a connection: the one re-send after a stale pooled connection.
    fresh: Http,
    policy: Arc<DestinationPolicy>,
    excerpt_bytes: usize,
    /// OAuth2 access tokens of this process's endpoints ([`crate::oauth`]).
    pub(crate) tokens: Arc<TokenCache>,
    /// What builds the clients of a client certificate ([`Self::with_identity`]).
    tls_base: Arc<TlsBase>,
    /// Pooled and fresh clients per client certificate, by [`ClientIdentity`] id.
    identities: Arc<std::sync::Mutex<IdentityClients>>,
    /// Where endpoints' client certificates are read, and the ones read lately.
    certificates: Option<Arc<CertificateCache>>,
    /// The certificate this client offers ([`Self::for_certificate`]), by its secret's
    /// ARN: a refused handshake marks it for an early re-read.
    offering: Option<Arc<str>>,
}

/// The parts of the client a client certificate's clients share with it.
struct TlsBase {
    provider: Arc<rustls::crypto::CryptoProvider>,
    roots: Arc<rustls::RootCertStore>,
    connector: Connector,
}

/// What sending produced before the body is read.
pub(crate) enum Sent {
    /// A response hyper parsed.
    Response(hyper::Response<Incoming>, Option<Arc<ConnState>>),
    /// A status line hyper could not parse the rest of (or that was cut off).
    Head(CapturedHead),
    /// No answer.
    Failed(hyper_util::client::legacy::Error, Option<Arc<ConnState>>),
}

impl DeliveryClient {
    /// Builds the client: redirects never followed (hyper has none to follow), no proxy,
    /// TLS verification on (WebPKI against Mozilla's roots from `webpki-roots`, built
    /// once here), every resolved address checked by the SSRF guard.
    ///
    /// # Errors
    /// [`ClientBuildError`] when the TLS verifier cannot start.
    pub fn new(options: ClientOptions) -> Result<Self, ClientBuildError> {
        Self::build(options, Hooks::default())
    }

    /// [`DeliveryClient::new`] with test seams (see [`Hooks`]).
    pub(crate) fn build(options: ClientOptions, hooks: Hooks) -> Result<Self, ClientBuildError> {
        let policy = Arc::new(options.policy);
        let provider = rustls::crypto::CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
        // Mozilla's root program, compiled in (`webpki-roots`): full WebPKI verification with
        // nothing to read from disk at start. The system store costs a Lambda cold start
        // several milliseconds (every file in /etc/ssl/certs) and holds no other roots there.
        let mut roots =
            rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        for root in hooks.extra_roots {
            roots.add(root)?;
        }
        let roots = Arc::new(roots);
        let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots.clone())
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let connector = Connector {
            lookup: options.lookup,
            policy: policy.clone(),
            tls: tokio_rustls::TlsConnector::from(Arc::new(tls)),
            translate: hooks.translate,
        };
        let tls_base = Arc::new(TlsBase {
            provider,
            roots,
            connector: connector.clone(),
        });
        Ok(Self {
            pooled: http_client(&connector, usize::MAX),
            fresh: http_client(&connector, 0),
            policy,
            excerpt_bytes: options.excerpt_bytes,
            tokens: Arc::new(TokenCache::default()),
            tls_base,
            identities: Arc::default(),
            certificates: None,
            offering: None,
        })
    }

    /// This client, reading endpoints' client certificates from `secrets` (kept
    /// [`CERTIFICATE_CACHE_SECONDS`] per certificate) for [`Self::for_certificate`].
    #[must_use]
    pub fn with_certificate_secrets(self, secrets: Arc<dyn CertificateSecrets>) -> Self {
        self.with_certificate_secrets_and_clock(secrets, Arc::new(SystemClock))
    }

    /// [`Self::with_certificate_secrets`], the cache's ages read from `clock` (tests move
    /// it instead of sleeping).
    #[must_use]
    pub fn with_certificate_secrets_and_clock(
        mut self,
        secrets: Arc<dyn CertificateSecrets>,
        clock: Arc<dyn MonotonicClock>,
    ) -> Self {
        self.certificates = Some(Arc::new(CertificateCache::new(
            secrets,
            Duration::from_secs(CERTIFICATE_CACHE_SECONDS),
            clock,
        )));
        self
    }

    /// The client that offers `certificate` (mutual TLS) for an endpoint of `tenant`: its
    /// secret read (or taken from this process's memory), parsed, and its clients built
    /// once ([`Self::with_identity`]). The secret must be under the tenant's own prefix
    /// (`tern/mtls/<tenant id>/`), checked before anything is read, so an endpoint stored
    /// before that rule (or written around the API) never presents another tenant's
    /// certificate.
    ///
    /// # Errors
    /// [`CertificateError`]: no secret store, the store's failure, or a secret that is
    /// not a usable certificate and key. Never the secret's text. A secret outside the
    /// tenant's prefix is [`CertificateSecretError::Refused`], the answer a missing secret
    /// gets: it tells nothing about which secrets exist.
    pub async fn for_certificate(
        &self,
        certificate: &ClientCertificate,
        tenant: &tern_core::TenantId,
    ) -> Result<Self, CertificateError> {
        certificate
            .validate(tenant)
            .map_err(|e| CertificateSecretError::Refused(e.to_string()))?;
        let cache = self
            .certificates
            .as_ref()
            .ok_or(CertificateError::NoStore)?;
        let identity = cache.identity(certificate).await?;
        let mut client = self.with_identity(&identity)?;
        client.offering = Some(Arc::from(certificate.secret_arn.as_str()));
        Ok(client)
    }

    /// This client, offering `identity` to receivers that ask for a client certificate
    /// (mutual TLS): the same SSRF guard, roots, limits, OAuth2 tokens and settings, on
    /// connections of their own (a pooled connection never carries another identity).
    /// The clients of an identity are built once per process and kept.
    ///
    /// # Errors
    /// [`IdentityError::Refused`] when rustls refuses the certificate and key (the key
    /// does not match the leaf, or its algorithm is not supported).
    pub fn with_identity(&self, identity: &ClientIdentity) -> Result<Self, IdentityError> {
        let mut cache = self
            .identities
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (pooled, fresh) = match cache.get(&identity.id()) {
            Some(clients) => clients.clone(),
            None => {
                let base = &self.tls_base;
                let mut tls = rustls::ClientConfig::builder_with_provider(base.provider.clone())
                    .with_safe_default_protocol_versions()
                    .map_err(|e| IdentityError::Refused(e.to_string()))?
                    .with_root_certificates(base.roots.clone())
                    .with_client_auth_cert(identity.chain.clone(), identity.key.clone_key())
                    .map_err(|e| IdentityError::Refused(e.to_string()))?;
                tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
                let connector = Connector {
                    tls: tokio_rustls::TlsConnector::from(Arc::new(tls)),
                    ..base.connector.clone()
                };
                let clients = (
                    http_client(&connector, usize::MAX),
                    http_client(&connector, 0),
                );
                if cache.len() >= MAX_CACHED_IDENTITIES {
                    cache.clear();
                }
                cache.insert(identity.id(), clients.clone());
                clients
            }
        };
        Ok(Self {
            pooled,
            fresh,
            ..self.clone()
        })
    }
}

/// A hyper client over `connector` keeping up to `max_idle` idle connections per host
/// (0: a fresh connection for every request).
fn http_client(connector: &Connector, max_idle: usize) -> Http {
    {
        let build = |max_idle: usize| {
            Client::builder(TokioExecutor::new())
                .pool_timer(TokioTimer::new())
                .timer(TokioTimer::new())
                .pool_idle_timeout(Duration::from_secs(30))
                .pool_max_idle_per_host(max_idle)
                .http1_max_headers(MAX_RESPONSE_HEADERS)
                .http1_max_buf_size(MAX_HEAD_BYTES)
                // Tern reads three headers; a malformed one it does not need is skipped,
                // never a failure of a request the receiver answered.
                .http1_ignore_invalid_headers_in_responses(true)
                .http1_allow_obsolete_multiline_headers_in_responses(true)
                .http1_allow_spaces_after_header_name_in_responses(true)
                // hyper's HTTP/2 default (16 KiB) would fail a head HTTP/1.1 accepts.
                .http2_max_header_list_size(MAX_HEAD_BYTES as u32)
                .build(connector.clone())
        };
        build(max_idle)
    }
}

impl DeliveryClient {
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
    /// [`AttemptResult::Failed`] with its class. A TLS failure of a client that offers a
    /// client certificate ([`Self::for_certificate`]) marks that certificate to be read
    /// again from its secret ([`crate::identity::EARLY_REFRESH_SECONDS`]): the receiver
    /// may expect a rotated one.
    pub async fn attempt(&self, req: AttemptRequest<'_>) -> AttemptReport {
        let report = self.attempt_once(req).await;
        if let (Some(arn), Some(cache)) = (&self.offering, &self.certificates)
            && matches!(
                report.result,
                AttemptResult::Failed {
                    class: ErrorClass::Tls | ErrorClass::TlsConfig,
                    ..
                }
            )
        {
            cache.handshake_refused(arn);
        }
        report
    }

    /// [`Self::attempt`], without the certificate's bookkeeping.
    async fn attempt_once(&self, req: AttemptRequest<'_>) -> AttemptReport {
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
        let mut request = http::Request::post(url.as_str())
            .header(CONTENT_TYPE, "application/json")
            .header(USER_AGENT, tern_core::USER_AGENT);
        for h in req.headers {
            let value = match header_value(&h.value) {
                Ok(v) => v,
                // The name only: the value may be secret.
                Err(()) => {
                    return failed(
                        ErrorClass::Protocol,
                        format!("invalid request: header {} has an invalid value", h.name),
                    );
                }
            };
            request = request.header(h.name.as_ref(), value);
        }
        // Checked once here so the re-send below cannot fail to build. The error names no
        // header value.
        let request = match request.body(Full::new(req.body)) {
            Ok(r) => r,
            Err(e) => return failed(ErrorClass::Protocol, format!("invalid request: {e}")),
        };
        // The connector reads the deadline (hyper gives it the URI alone): a lookup that
        // outlives it is our resolver's failure, and no address may use more of it.
        let sent = match timeout_at(
            deadline,
            ATTEMPT_DEADLINE.scope(deadline, self.send(request)),
        )
        .await
        {
            Err(_) => {
                return failed(
                    ErrorClass::Timeout,
                    format!("no response within {} ms", req.deadline.as_millis()),
                );
            }
            Ok(sent) => sent,
        };
        let (response, conn) = match sent {
            Sent::Response(r, conn) => (r, conn),
            Sent::Head(head) => {
                return AttemptReport {
                    result: AttemptResult::Response {
                        status: head.status,
                        retry_after: head.retry_after,
                        location: head.location,
                    },
                    latency_ms: elapsed_ms(),
                    excerpt: None,
                    excerpt_truncated: true,
                };
            }
            Sent::Failed(e, conn) => {
                let (class, detail) = classify_failure(&e, conn.as_deref());
                return failed(class, detail);
            }
        };

        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .map(|v| bounded_text(v.as_bytes()))
        };
        let retry_after = header("retry-after");
        let location = header("location");

        // Read at most excerpt_bytes + 1 bytes, by the same deadline. The outcome already
        // depends on the status alone; the body is only for the log.
        let mut body = response.into_body();
        let mut kept: Vec<u8> = Vec::new();
        let mut truncated = false;
        loop {
            match timeout_at(deadline, body.frame()).await {
                Ok(Some(Ok(frame))) => {
                    let Ok(chunk) = frame.into_data() else {
                        continue; // trailers
                    };
                    let room = self.excerpt_bytes.saturating_sub(kept.len());
                    kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    if chunk.len() > room {
                        truncated = true;
                        break;
                    }
                }
                Ok(None) => {
                    if let Some(conn) = &conn {
                        conn.response_completed();
                    }
                    break;
                }
                Ok(Some(Err(_))) | Err(_) => {
                    truncated = true;
                    break;
                }
            }
        }
        drop(body);
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

    /// Sends `request` on a pooled connection, and again when it provably never reached
    /// the receiver's processing; the caller's deadline covers every send:
    /// - HTTP/2 refused it ([`Unprocessed`]: a `REFUSED_STREAM` or a `GOAWAY` below its
    ///   stream): again at once on a new connection, at most [`MAX_UNPROCESSED_RESENDS`]
    ///   times (the client keeps to the `MAX_CONCURRENT_STREAMS` a receiver advertises:
    ///   hyper's h2 queues streams beyond it);
    /// - the pooled connection was stale (it had completed a response, and failed before
    ///   one byte of this one): once more on a fresh connection.
    pub(crate) async fn send(&self, request: http::Request<Full<Bytes>>) -> Sent {
        let (parts, body) = request.into_parts();
        let copy = || {
            let mut r = http::Request::new(body.clone());
            *r.method_mut() = parts.method.clone();
            *r.uri_mut() = parts.uri.clone();
            *r.headers_mut() = parts.headers.clone();
            r
        };
        let mut client = &self.pooled;
        let mut resends = 0;
        let mut stale_resent = false;
        loop {
            let (err, conn) = match answer(client.request(copy()).await) {
                Ok(sent) => return sent,
                Err(failed) => failed,
            };
            if let Some(how) = unprocessed(&err)
                && resends < MAX_UNPROCESSED_RESENDS
            {
                resends += 1;
                tracing::info!(
                    error = %error_detail(&err), resend = resends, ?how,
                    "the receiver did not process the request (HTTP/2); sending it again on a new connection"
                );
                // A new connection either way (RFC 9113 §8.7): a receiver that refuses a
                // stream is often one that takes fewer streams per connection than it
                // advertises (a load-shedding proxy), and the pooled connection is the
                // crowded one. Before, a refused stream went back on the pool: against a
                // receiver taking one stream at a time, 2 of 10 concurrent deliveries
                // got through.
                client = &self.fresh;
                continue;
            }
            if !stale_resent && conn.as_ref().is_some_and(|c| c.failed_stale()) {
                stale_resent = true;
                tracing::info!(
                    error = %error_detail(&err),
                    "pooled connection closed before any answer; sending again on a new connection"
                );
                client = &self.fresh;
                continue;
            }
            return Sent::Failed(err, conn);
        }
    }
}

/// `value` as a header value, marked sensitive when it is secret: hyper's HTTP/2 encoder
/// then never puts it in the HPACK table (RFC 7541 §7.1.3), and `http`'s `Debug` prints
/// `Sensitive`. `Err` when it is not a valid header value (validated endpoints never
/// hold one).
pub(crate) fn header_value(value: &FieldValue) -> Result<http::HeaderValue, ()> {
    let mut v = http::HeaderValue::from_str(value.expose()).map_err(|_| ())?;
    if value.is_secret() {
        v.set_sensitive(true);
    }
    Ok(v)
}

/// Test seams of the client, set only through [`crate::test_support`] (the
/// `test-support` feature): production builds the client with the defaults.
pub(crate) struct Hooks {
    /// Trust roots added to Mozilla's (a test certificate authority).
    pub extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    /// Maps each checked address to the one connected to (the identity in production).
    pub translate: fn(SocketAddr) -> SocketAddr,
}

impl Default for Hooks {
    fn default() -> Self {
        Self {
            extra_roots: Vec::new(),
            translate: |addr| addr,
        }
    }
}

/// The connection state a response or error carries, if the connection was ours.
fn conn_of(extensions: &http::Extensions) -> Option<Arc<ConnState>> {
    extensions.get::<ConnTag>().map(|t| t.0.clone())
}

/// A response, or the status line the receiver sent before the error, or the error and
/// the connection it happened on.
fn answer(
    result: Result<hyper::Response<Incoming>, hyper_util::client::legacy::Error>,
) -> Result<Sent, (hyper_util::client::legacy::Error, Option<Arc<ConnState>>)> {
    match result {
        Ok(r) => {
            let conn = conn_of(r.extensions());
            Ok(Sent::Response(r, conn))
        }
        Err(e) => {
            let conn = e.connect_info().and_then(|c| {
                let mut ext = http::Extensions::new();
                c.get_extras(&mut ext);
                conn_of(&ext)
            });
            // Once a status line has arrived, the receiver has answered: headers hyper
            // refused, or a connection cut mid-head, do not turn that into a failure.
            if let Some(head) = conn.as_ref().and_then(|c| c.captured_head()) {
                tracing::info!(
                    status = head.status,
                    error = %error_detail(&e),
                    "response head not parsed; classified by its status line"
                );
                return Ok(Sent::Head(head));
            }
            Err((e, conn))
        }
    }
}
