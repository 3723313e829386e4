//! A fault-injecting HTTP/1.1 proxy on 127.0.0.1 between the AWS SDK clients and moto.
//!
//! Point a deployment's SDK config at [`FaultProxy::url`] (the same `endpoint_url` the
//! local wiring gives moto; [`FaultProxy::sdk_config`] builds it) and every AWS call
//! goes through the proxy, which forwards it to moto unchanged unless a [`Rule`]
//! matches. A rule picks requests by service (the SigV4 credential scope of the
//! `Authorization` header), operation (the `X-Amz-Target` suffix for JSON protocols:
//! DynamoDB, DynamoDB Streams, SQS, Step Functions; the `Action` parameter for the query
//! protocol: SNS), an optional substring of the body, and how often it fires
//! ([`Times`]: always, the first n matches, or a seeded probability). Then it applies a
//! [`Fault`]:
//!
//! - [`Fault::DelayAnswer`]: forward, let moto apply the request, and hold the answer.
//!   Past the SDK's per-try timeout (2 s, `tern_aws::budget::ATTEMPT_TIMEOUT`) the SDK
//!   gives up on the try and sends the request again, although the first one was applied:
//!   the case a conditional write must survive.
//! - [`Fault::Throttle`]: answer the service's own throttling error without forwarding.
//! - [`Fault::ServerError`]: answer HTTP 500 in the service's error shape, not forwarded.
//! - [`Fault::Drop`]: close the connection without forwarding or answering.
//! - [`Fault::DropAfterForward`]: forward (moto applies it), then close the connection
//!   without answering.
//!
//! Rules are checked in the order they were added; the first that matches and fires
//! applies. They can be added and removed while the proxy runs ([`FaultProxy::add`],
//! [`FaultProxy::remove`], [`FaultProxy::clear`]), and every request is logged
//! ([`FaultProxy::seen`]) so a test can prove that its fault really happened.
//!
//! Everything stays on this machine: the proxy listens on 127.0.0.1 and forwards only to
//! the upstream it was given, which must be a loopback URL.
//!
//! One moto gap to know when holding answers: moto (5.x) ignores `TransactWriteItems`'
//! `ClientRequestToken`, which the SDK fills once per call so that AWS answers a retried
//! transaction with success. Through moto, a transaction whose answer was held fails on
//! its retry (the outbox put's condition meets its own item); on AWS it would not.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};

/// Longest wait for moto's answer to a forwarded request, in seconds. moto answers in
/// milliseconds; past this the proxy answers 502 so a test fails instead of hanging.
pub const UPSTREAM_TIMEOUT_SECONDS: u64 = 30;

/// An AWS service, as the proxy tells them apart.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Service {
    /// DynamoDB (`X-Amz-Target: DynamoDB_20120810.<Operation>`).
    DynamoDb,
    /// DynamoDB Streams (`X-Amz-Target: DynamoDBStreams_20120810.<Operation>`; signed as
    /// `dynamodb`).
    DynamoDbStreams,
    /// SQS (JSON protocol, `X-Amz-Target: AmazonSQS.<Operation>`).
    Sqs,
    /// SNS (query protocol, `Action=<Operation>` in the form body).
    Sns,
    /// Step Functions (`X-Amz-Target: AWSStepFunctions.<Operation>`, signed as `states`).
    StepFunctions,
    /// Any other signing name (as it appears in the credential scope).
    Other(String),
}

impl Service {
    /// The service of a request: its SigV4 signing name, with DynamoDB Streams told
    /// apart from DynamoDB by its target prefix.
    fn of(signing_name: Option<&str>, target: Option<&str>) -> Option<Self> {
        if target.is_some_and(|t| t.starts_with("DynamoDBStreams_")) {
            return Some(Service::DynamoDbStreams);
        }
        Some(match signing_name? {
            "dynamodb" => Service::DynamoDb,
            "sqs" => Service::Sqs,
            "sns" => Service::Sns,
            "states" => Service::StepFunctions,
            other => Service::Other(other.to_owned()),
        })
    }
}

/// What a rule does to a request it picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward the request (moto applies it), then hold the answer this long before
    /// returning it. A client that gave up meanwhile never sees it.
    DelayAnswer(Duration),
    /// Answer the service's throttling error (HTTP 400, or 429 for SNS) without
    /// forwarding: DynamoDB `ProvisionedThroughputExceededException`, SQS
    /// `RequestThrottled`, SNS `ThrottledException`, Step Functions and others
    /// `ThrottlingException`. The SDK retries each as a throttling error.
    Throttle,
    /// Answer HTTP 500 in the service's error shape (`InternalServerError` /
    /// `InternalFailure`) without forwarding.
    ServerError,
    /// Close the connection without forwarding or answering.
    Drop,
    /// Forward the request (moto applies it), then close the connection without
    /// answering.
    DropAfterForward,
}

/// How often a matching rule fires.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Times {
    /// On every matching request.
    Always,
    /// On the first `n` matching requests; later ones pass through.
    First(usize),
    /// On each matching request with this probability (0.0-1.0), drawn from a generator
    /// seeded with `seed`, so a run can be repeated exactly.
    Chance {
        /// Probability of firing, 0.0 to 1.0.
        probability: f64,
        /// Seed of the rule's own generator.
        seed: u64,
    },
}

/// One fault rule: which requests ([`Rule::service`], [`Rule::operation`],
/// [`Rule::body_contains`]), how often ([`Times`]) and what happens ([`Fault`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Only requests to this service; `None` for any.
    pub service: Option<Service>,
    /// Only this operation (`UpdateItem`, `SendMessage`, `Publish`, `StartExecution`);
    /// `None` for any.
    pub operation: Option<String>,
    /// Only requests whose body contains this text; `None` for any.
    pub body_contains: Option<String>,
    /// How often it fires.
    pub times: Times,
    /// What it does.
    pub fault: Fault,
}

impl Rule {
    /// A rule that applies `fault` to every request of `operation` on `service`;
    /// narrow it with [`Rule::body_contains`], [`Rule::first`] or [`Rule::chance`].
    pub fn on(service: Service, operation: &str, fault: Fault) -> Self {
        Self {
            service: Some(service),
            operation: Some(operation.to_owned()),
            body_contains: None,
            times: Times::Always,
            fault,
        }
    }

    /// A rule that applies `fault` to every request, of any service and operation;
    /// narrow it like [`Rule::on`]'s.
    pub fn any(fault: Fault) -> Self {
        Self {
            service: None,
            operation: None,
            body_contains: None,
            times: Times::Always,
            fault,
        }
    }

    /// Only requests whose body contains `text` (a condition expression, an attribute
    /// value, a queue URL).
    #[must_use]
    pub fn body_contains(mut self, text: &str) -> Self {
        self.body_contains = Some(text.to_owned());
        self
    }

    /// Fires on the first `n` matching requests only.
    #[must_use]
    pub fn first(mut self, n: usize) -> Self {
        self.times = Times::First(n);
        self
    }

    /// Fires on each matching request with `probability` (0.0-1.0), seeded.
    #[must_use]
    pub fn chance(mut self, probability: f64, seed: u64) -> Self {
        self.times = Times::Chance { probability, seed };
        self
    }

    fn matches(&self, request: &Seen, body: &[u8]) -> bool {
        self.service
            .as_ref()
            .is_none_or(|s| request.service.as_ref() == Some(s))
            && self
                .operation
                .as_ref()
                .is_none_or(|o| request.operation.as_ref() == Some(o))
            && self.body_contains.as_ref().is_none_or(|text| {
                !text.is_empty() && body.windows(text.len()).any(|w| w == text.as_bytes())
            })
    }
}

/// Handle of an added rule, for [`FaultProxy::remove`] and [`FaultProxy::fired`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RuleId(u64);

/// One request the proxy received, and the fault applied to it (`None`: forwarded
/// unchanged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Its service, when the request was signed.
    pub service: Option<Service>,
    /// Its operation, when the proxy could read it.
    pub operation: Option<String>,
    /// The rule that fired on it, and its fault.
    pub fault: Option<(RuleId, Fault)>,
}

struct ActiveRule {
    id: RuleId,
    rule: Rule,
    matched: usize,
    fired: usize,
    rng: Option<StdRng>,
}

impl ActiveRule {
    /// Whether the rule fires on its next matching request (counts the match).
    fn fires(&mut self) -> bool {
        self.matched += 1;
        let fire = match self.rule.times {
            Times::Always => true,
            Times::First(n) => self.matched <= n,
            Times::Chance { probability, .. } => self
                .rng
                .as_mut()
                .is_some_and(|r| r.random_bool(probability.clamp(0.0, 1.0))),
        };
        if fire {
            self.fired += 1;
        }
        fire
    }
}

#[derive(Default)]
struct State {
    rules: Vec<ActiveRule>,
    seen: Vec<Seen>,
    fired: HashMap<RuleId, usize>,
}

struct Shared {
    upstream: http::Uri,
    state: Mutex<State>,
    next_id: AtomicU64,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The proxy: listening on 127.0.0.1 until dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

/// The proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum FaultProxyError {
    /// The upstream is not an `http://` URL on a loopback address.
    #[error("upstream {0} is not an http:// URL on this machine")]
    Upstream(String),
    /// Binding 127.0.0.1 failed.
    #[error("cannot listen on 127.0.0.1: {0}")]
    Bind(#[from] std::io::Error),
}

impl FaultProxy {
    /// Starts a proxy on a free port of 127.0.0.1 in front of `upstream` (moto's URL,
    /// e.g. [`crate::moto_url`]), with no rules: every request is forwarded unchanged.
    ///
    /// # Errors
    /// [`FaultProxyError`] when `upstream` is not an `http://` loopback URL (no traffic
    /// leaves this machine) or the port cannot be bound.
    pub async fn start(upstream: &str) -> Result<Self, FaultProxyError> {
        let uri: http::Uri = upstream
            .parse()
            .map_err(|_| FaultProxyError::Upstream(upstream.to_owned()))?;
        let loopback = uri.host().is_some_and(|h| {
            h == "localhost"
                || h.trim_matches(['[', ']'])
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        });
        if uri.scheme_str() != Some("http") || !loopback {
            return Err(FaultProxyError::Upstream(upstream.to_owned()));
        }
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream: uri,
            state: Mutex::default(),
            next_id: AtomicU64::new(1),
            client: Client::builder(TokioExecutor::new()).build_http(),
        });
        let s = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let s = s.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let s = s.clone();
                        async move { handle(&s, req).await }
                    });
                    // An error here is a client that went away, or a Drop fault: the
                    // connection ends either way.
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Self { addr, shared, task })
    }

    /// The proxy's base URL (`http://127.0.0.1:<port>`), to use as the SDK endpoint.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// An SDK config whose clients all go through the proxy: what
    /// `tern_local::moto::sdk_config_for` builds for moto, pointed here.
    pub async fn sdk_config(&self) -> aws_config::SdkConfig {
        tern_local::moto::sdk_config_for(&self.url()).await
    }

    /// Adds a rule after the existing ones; returns its handle.
    pub fn add(&self, rule: Rule) -> RuleId {
        let id = RuleId(self.shared.next_id.fetch_add(1, Ordering::SeqCst));
        let rng = match rule.times {
            Times::Chance { seed, .. } => Some(StdRng::seed_from_u64(seed)),
            _ => None,
        };
        self.shared.state().rules.push(ActiveRule {
            id,
            rule,
            matched: 0,
            fired: 0,
            rng,
        });
        id
    }

    /// Removes a rule; false when it was not there. What it fired on stays counted.
    pub fn remove(&self, id: RuleId) -> bool {
        let mut state = self.shared.state();
        let before = state.rules.len();
        state.rules.retain(|r| r.id != id);
        state.rules.len() != before
    }

    /// Removes every rule: from now on every request is forwarded unchanged.
    pub fn clear(&self) {
        self.shared.state().rules.clear();
    }

    /// How many requests rule `id` has fired on so far (also after its removal).
    pub fn fired(&self, id: RuleId) -> usize {
        self.shared.state().fired.get(&id).copied().unwrap_or(0)
    }

    /// Every request received so far, in order of arrival.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.state().seen.clone()
    }

    /// How many requests of `operation` on `service` arrived so far, faulted or not.
    pub fn count(&self, service: &Service, operation: &str) -> usize {
        self.shared
            .state()
            .seen
            .iter()
            .filter(|s| {
                s.service.as_ref() == Some(service) && s.operation.as_deref() == Some(operation)
            })
            .count()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The connection is to be closed without an answer.
#[derive(Debug, thiserror::Error)]
#[error("connection dropped by a fault rule")]
struct Dropped;

/// The SigV4 signing name in an `Authorization` header:
/// `Credential=<key>/<date>/<region>/<service>/aws4_request`.
fn signing_name(authorization: &str) -> Option<&str> {
    let scope = authorization.split("Credential=").nth(1)?;
    let scope = scope.split([',', ' ']).next()?;
    scope.split('/').nth(3)
}

/// `Action=<value>` in a form-encoded body or query string.
fn action(text: &str) -> Option<String> {
    text.split('&')
        .find_map(|pair| pair.strip_prefix("Action="))
        .map(str::to_owned)
}

async fn handle(
    shared: &Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Dropped> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await.map_err(|_| Dropped)?.to_bytes();
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let target = header("x-amz-target");
    let service = Service::of(header("authorization").and_then(signing_name), target);
    let operation = target
        .and_then(|t| t.rsplit_once('.'))
        .map(|(_, op)| op.to_owned())
        .or_else(|| parts.uri.query().and_then(action))
        .or_else(|| std::str::from_utf8(&body).ok().and_then(action));
    let mut seen = Seen {
        service,
        operation,
        fault: None,
    };
    {
        let mut state = shared.state();
        let fired = state.rules.iter_mut().find_map(|r| {
            (r.rule.matches(&seen, &body) && r.fires()).then_some((r.id, r.rule.fault))
        });
        if let Some((id, _)) = fired {
            *state.fired.entry(id).or_default() += 1;
        }
        seen.fault = fired;
        state.seen.push(seen.clone());
    }
    let service = seen.service.clone();
    match seen.fault.map(|(_, f)| f) {
        None => Ok(forward(shared, parts, body).await),
        Some(Fault::DelayAnswer(delay)) => {
            let answer = forward(shared, parts, body).await;
            tokio::time::sleep(delay).await;
            Ok(answer)
        }
        Some(Fault::Throttle) => Ok(error_answer(service.as_ref(), false)),
        Some(Fault::ServerError) => Ok(error_answer(service.as_ref(), true)),
        Some(Fault::Drop) => Err(Dropped),
        Some(Fault::DropAfterForward) => {
            let _ = forward(shared, parts, body).await;
            Err(Dropped)
        }
    }
}

/// Sends the request to moto and returns its answer. Runs in its own task, so a client
/// that gives up (its per-try timeout) does not cancel a request moto is applying: as in
/// AWS, a request that arrived is applied whether or not anyone reads the answer.
async fn forward(
    shared: &Arc<Shared>,
    parts: http::request::Parts,
    body: Bytes,
) -> Response<Full<Bytes>> {
    let shared = shared.clone();
    let task = tokio::spawn(async move {
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", http::uri::PathAndQuery::as_str);
        let mut uri = shared.upstream.clone().into_parts();
        uri.path_and_query = path.parse().ok();
        let uri = http::Uri::from_parts(uri).map_err(|e| e.to_string())?;
        let mut upstream = Request::builder().method(parts.method).uri(uri);
        for (name, value) in &parts.headers {
            upstream = upstream.header(name, value);
        }
        let upstream = upstream.body(Full::new(body)).map_err(|e| e.to_string())?;
        let answer = tokio::time::timeout(
            Duration::from_secs(UPSTREAM_TIMEOUT_SECONDS),
            shared.client.request(upstream),
        )
        .await
        .map_err(|_| "moto did not answer in time".to_owned())?
        .map_err(|e| e.to_string())?;
        let (mut head, body) = answer.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        // The body is whole now: the length is re-derived, hop-by-hop headers dropped.
        for name in [
            "content-length",
            "transfer-encoding",
            "connection",
            "keep-alive",
        ] {
            head.headers.remove(name);
        }
        Ok::<_, String>(Response::from_parts(head, Full::new(body)))
    });
    match task.await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => plain(StatusCode::BAD_GATEWAY, &format!("fault proxy: {e}")),
        Err(e) => plain(StatusCode::BAD_GATEWAY, &format!("fault proxy: {e}")),
    }
}

fn plain(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut answer = Response::new(Full::new(Bytes::from(text.to_owned())));
    *answer.status_mut() = status;
    answer
}

/// A throttling error (or with `server`, an internal error) as `service` words it: the
/// JSON protocol's `__type` body, the query protocol's XML `ErrorResponse` (AWS API
/// references, "Common Errors" and each service's error list).
fn error_answer(service: Option<&Service>, server: bool) -> Response<Full<Bytes>> {
    let status = match (service, server) {
        (_, true) => StatusCode::INTERNAL_SERVER_ERROR,
        (Some(Service::Sns), false) => StatusCode::TOO_MANY_REQUESTS,
        (_, false) => StatusCode::BAD_REQUEST,
    };
    let (content_type, body, query_error) = match (service, server) {
        (Some(Service::Sns), _) => {
            let code = if server {
                "InternalError"
            } else {
                "ThrottledException"
            };
            (
                "text/xml",
                format!(
                    "<ErrorResponse xmlns=\"http://sns.amazonaws.com/doc/2010-03-31/\"><Error><Type>{}</Type><Code>{code}</Code><Message>injected by the fault proxy</Message></Error><RequestId>fault-proxy</RequestId></ErrorResponse>",
                    if server { "Receiver" } else { "Sender" }
                ),
                None,
            )
        }
        (Some(s @ (Service::DynamoDb | Service::DynamoDbStreams)), _) => {
            let code = match (s, server) {
                (_, true) => "InternalServerError",
                (Service::DynamoDb, false) => "ProvisionedThroughputExceededException",
                _ => "ThrottlingException",
            };
            (
                "application/x-amz-json-1.0",
                format!(
                    r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{code}","message":"injected by the fault proxy"}}"#
                ),
                None,
            )
        }
        (Some(Service::Sqs), _) => {
            let code = if server {
                "InternalFailure"
            } else {
                "RequestThrottled"
            };
            (
                "application/x-amz-json-1.0",
                format!(
                    r#"{{"__type":"com.amazonaws.sqs#{code}","message":"injected by the fault proxy"}}"#
                ),
                // SQS's JSON protocol also names the query-compatible code here.
                Some(format!(
                    "{code};{}",
                    if server { "Receiver" } else { "Sender" }
                )),
            )
        }
        _ => {
            let code = if server {
                "InternalFailure"
            } else {
                "ThrottlingException"
            };
            (
                "application/x-amz-json-1.0",
                format!(r#"{{"__type":"{code}","message":"injected by the fault proxy"}}"#),
                None,
            )
        }
    };
    let mut answer = Response::new(Full::new(Bytes::from(body)));
    *answer.status_mut() = status;
    let headers = answer.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    headers.insert(
        "x-amzn-requestid",
        http::HeaderValue::from_static("fault-proxy"),
    );
    if let Some(q) = query_error.and_then(|q| http::HeaderValue::try_from(q).ok()) {
        headers.insert("x-amzn-query-error", q);
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signing_name_is_read_from_the_credential_scope() {
        let auth = "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=abc";
        assert_eq!(signing_name(auth), Some("dynamodb"));
        assert_eq!(signing_name("Bearer x"), None);
        assert_eq!(
            Service::of(
                Some("dynamodb"),
                Some("DynamoDBStreams_20120810.GetRecords")
            ),
            Some(Service::DynamoDbStreams)
        );
        assert_eq!(
            Service::of(Some("states"), None),
            Some(Service::StepFunctions)
        );
        assert_eq!(
            action("Version=2010-03-31&Action=Publish&TopicArn=x").as_deref(),
            Some("Publish")
        );
    }

    #[test]
    fn a_rule_fires_on_its_first_matches_only_and_a_seeded_chance_repeats() {
        let seen = Seen {
            service: Some(Service::DynamoDb),
            operation: Some("UpdateItem".into()),
            fault: None,
        };
        let rule =
            Rule::on(Service::DynamoDb, "UpdateItem", Fault::Throttle).body_contains("claim_key");
        assert!(rule.matches(&seen, b"SET claim_key = :k"));
        assert!(!rule.matches(&seen, b"SET other = :k"));
        assert!(!Rule::on(Service::Sqs, "UpdateItem", Fault::Throttle).matches(&seen, b""));
        let mut first = ActiveRule {
            id: RuleId(1),
            rule: rule.clone().first(2),
            matched: 0,
            fired: 0,
            rng: None,
        };
        let fired: Vec<bool> = (0..4).map(|_| first.fires()).collect();
        assert_eq!(fired, [true, true, false, false]);
        let draw = |seed| {
            let mut r = ActiveRule {
                id: RuleId(2),
                rule: rule.clone().chance(0.5, seed),
                matched: 0,
                fired: 0,
                rng: Some(StdRng::seed_from_u64(seed)),
            };
            (0..64).map(|_| r.fires()).collect::<Vec<bool>>()
        };
        assert_eq!(draw(7), draw(7), "same seed, same faults");
        let fired = draw(7).iter().filter(|f| **f).count();
        assert!((16..=48).contains(&fired), "{fired} of 64 at p = 0.5");
    }
}
