//! OAuth2 client credentials (RFC 6749 §4.4) for receivers that want an access token:
//! the token fetch, the cache per warm sender, and the one refresh after a 401.
//!
//! - **Fetch**: a POST of the grant's form to its token URL through the same guarded
//!   client as deliveries (the SSRF guard checks the token URL's scheme and every address
//!   it resolves to, at every fetch), within the attempt's deadline; the answer is read up
//!   to [`MAX_TOKEN_RESPONSE_BYTES`].
//! - **Cache**: one token per endpoint in this process ([`TokenCache`], held by the
//!   [`DeliveryClient`], which a warm sender keeps), used until shortly before it expires
//!   ([`AccessToken::usable_seconds`]). Fetches for one endpoint run one at a time, so a
//!   batch of ten deliveries to a cold endpoint costs one token request, not ten. A change
//!   of the endpoint's grant (another client secret, scope, URL...) is a miss.
//! - **401**: when the receiver answers 401 to a token taken from the cache, that token is
//!   dropped, one new one is fetched and the request is sent once more, within the same
//!   attempt's deadline. A 401 to a token fetched for this attempt is the receiver's
//!   answer, recorded as such.
//! - **Failure**: no token is an attempt failure of class `auth_token` (retried on the
//!   schedule, charged to the endpoint's health: the token server is the receiver's); a
//!   token URL the guard refuses is `blocked` (dead-lettered `blocked_destination`); our
//!   own failures on the way (our resolver, our file descriptors, our TLS set-up) keep
//!   their classes and are never charged.
//!
//! No token, client secret or request form ever reaches a log line or an error text:
//! they travel as [`SecretValue`]s and are sent marked sensitive.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, USER_AGENT};
use http_body_util::{BodyExt, Full};
use tern_core::custom_headers::FieldValue;
use tern_core::outcome::{AttemptResult, ErrorClass};
use tern_core::receiver_auth::{
    AccessToken, MAX_TOKEN_RESPONSE_BYTES, OAuth2ClientCredentials, parse_token_response,
    token_error_code,
};
use tern_core::request::{AUTHORIZATION as AUTHORIZATION_NAME, OutgoingHeader};
use tern_core::{EndpointId, SecretValue, TenantId};
use tokio::time::timeout_at;

use crate::client::{AttemptReport, AttemptRequest, DeliveryClient, Sent, header_value};
use crate::transport::ATTEMPT_DEADLINE;

/// Most endpoints whose tokens one process keeps: 10,000. Past it, tokens that are no
/// longer usable are dropped first, then all of them (each endpoint fetches again on its
/// next delivery): a bound on memory, far above what one sender instance serves.
pub const MAX_CACHED_TOKENS: usize = 10_000;

type Key = (TenantId, EndpointId);

/// A token in the cache.
struct Cached {
    token: SecretValue,
    usable_until: Instant,
    /// Which fetch produced it, to tell a token already replaced by a refresh.
    generation: u64,
}

/// One endpoint's cache slot. Its async lock is held across a fetch, so concurrent
/// deliveries to the endpoint wait for one token request instead of each making one.
#[derive(Default)]
struct Slot {
    /// The grant the cached token was fetched with.
    grant: Option<OAuth2ClientCredentials>,
    cached: Option<Cached>,
}

/// The access tokens of this process's OAuth2 endpoints, one per endpoint, and how many
/// token requests it has sent.
#[derive(Default)]
pub struct TokenCache {
    slots: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<Slot>>>>,
    fetches: AtomicU64,
    generation: AtomicU64,
}

/// A token handed to one send.
struct Token {
    value: SecretValue,
    generation: u64,
    /// Fetched for this call (not taken from the cache).
    fresh: bool,
}

/// Why no token: the class and detail of the attempt's failure.
type NoToken = (ErrorClass, String);

impl TokenCache {
    /// Token requests sent by this process so far (each fetch, failed ones included).
    pub fn fetches(&self) -> u64 {
        self.fetches.load(Ordering::Relaxed)
    }

    fn slot(&self, key: &Key) -> Arc<tokio::sync::Mutex<Slot>> {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if !slots.contains_key(key) && slots.len() >= MAX_CACHED_TOKENS {
            let now = Instant::now();
            // Keep slots in use (locked) and those holding a usable token.
            slots.retain(|_, slot| {
                slot.try_lock().map_or(true, |s| {
                    s.cached.as_ref().is_some_and(|c| c.usable_until > now)
                })
            });
            if slots.len() >= MAX_CACHED_TOKENS {
                slots.clear();
            }
        }
        slots.entry(key.clone()).or_default().clone()
    }

    /// The endpoint's token: the cached one while usable (and not `stale`, the
    /// generation a receiver just refused), else a new one from the token endpoint.
    async fn token(
        &self,
        client: &DeliveryClient,
        key: &Key,
        grant: &OAuth2ClientCredentials,
        deadline: Instant,
        stale: Option<u64>,
    ) -> Result<Token, NoToken> {
        let slot = self.slot(key);
        let Ok(mut slot) = timeout_at(deadline.into(), slot.lock()).await else {
            return Err((
                ErrorClass::AuthToken,
                "token endpoint: no token within the attempt's deadline".into(),
            ));
        };
        if let Some(c) = &slot.cached
            && slot.grant.as_ref() == Some(grant)
            && c.usable_until > Instant::now()
            && Some(c.generation) != stale
        {
            return Ok(Token {
                value: c.token.clone(),
                generation: c.generation,
                fresh: false,
            });
        }
        slot.cached = None;
        self.fetches.fetch_add(1, Ordering::Relaxed);
        let fetched = client.fetch_token(grant, deadline).await?;
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let usable = Duration::from_secs(fetched.usable_seconds());
        tracing::info!(
            tenant_id = %key.0, endpoint_id = %key.1, expires_in = fetched.expires_in,
            cached_seconds = usable.as_secs(), "OAuth2 token fetched"
        );
        // Checked: the lifetime is the token server's number (clamped in tern-core, and
        // an overflow here would panic the attempt).
        if let Some(usable_until) = Instant::now()
            .checked_add(usable)
            .filter(|_| !usable.is_zero())
        {
            slot.grant = Some(grant.clone());
            slot.cached = Some(Cached {
                token: fetched.token.clone(),
                usable_until,
                generation,
            });
        }
        Ok(Token {
            value: fetched.token,
            generation,
            fresh: true,
        })
    }
}

/// The class a transport failure on the way to the token endpoint is recorded with: a
/// refused destination stays `blocked`, our own failures stay ours, anything else is
/// the token endpoint's, `auth_token`.
fn token_class(class: ErrorClass) -> ErrorClass {
    if class == ErrorClass::Blocked || class.is_ours() {
        class
    } else {
        ErrorClass::AuthToken
    }
}

/// `failed` as an attempt's report, `latency_ms` from `started`.
fn failed_report(started: Instant, (class, detail): NoToken) -> AttemptReport {
    AttemptReport {
        result: AttemptResult::Failed { class, detail },
        latency_ms: elapsed_ms(started),
        excerpt: None,
        excerpt_truncated: false,
    }
}

fn elapsed_ms(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl DeliveryClient {
    /// Token requests this process has sent ([`TokenCache::fetches`]).
    pub fn token_fetches(&self) -> u64 {
        self.tokens.fetches()
    }

    /// Makes one attempt to an endpoint that authenticates with `grant`: a token from
    /// the cache or the token endpoint as `authorization: Bearer`, then the request; on a
    /// 401 to a cached token, one refresh and one re-send. Everything, token fetches
    /// included, within `req.deadline`; `latency_ms` covers it all. Never fails otherwise
    /// than as an [`AttemptResult::Failed`] (see the module documentation for the classes).
    pub async fn attempt_oauth(
        &self,
        req: AttemptRequest<'_>,
        tenant: &TenantId,
        endpoint: &EndpointId,
        grant: &OAuth2ClientCredentials,
    ) -> AttemptReport {
        let started = Instant::now();
        let deadline = started + req.deadline;
        let key = (tenant.clone(), endpoint.clone());
        let token = match self.tokens.token(self, &key, grant, deadline, None).await {
            Ok(t) => t,
            Err(no) => return failed_report(started, no),
        };
        let first = self.send_with_token(&req, &token.value, deadline).await;
        let refused = matches!(first.result, AttemptResult::Response { status: 401, .. });
        let report = if refused && !token.fresh {
            tracing::info!(
                tenant_id = %tenant, endpoint_id = %endpoint,
                "receiver answered 401 to a cached OAuth2 token; fetching a new one and sending again"
            );
            match self
                .tokens
                .token(self, &key, grant, deadline, Some(token.generation))
                .await
            {
                Ok(new) => self.send_with_token(&req, &new.value, deadline).await,
                Err(no) => return failed_report(started, no),
            }
        } else {
            first
        };
        AttemptReport {
            latency_ms: elapsed_ms(started),
            ..report
        }
    }

    /// `req` with `authorization: Bearer <token>` added, within what is left until
    /// `deadline`.
    async fn send_with_token(
        &self,
        req: &AttemptRequest<'_>,
        token: &SecretValue,
        deadline: Instant,
    ) -> AttemptReport {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return failed_report(
                Instant::now(),
                (
                    ErrorClass::Timeout,
                    "no time left for the request after the token fetch".into(),
                ),
            );
        }
        let mut headers = req.headers.to_vec();
        headers.retain(|h| h.name != AUTHORIZATION_NAME);
        headers.push(OutgoingHeader::secret(
            AUTHORIZATION_NAME,
            tern_core::receiver_auth::bearer_authorization(token.expose()),
        ));
        self.attempt(AttemptRequest {
            url: req.url,
            body: req.body.clone(),
            headers: &headers,
            deadline: left,
        })
        .await
    }

    /// One token request for `grant` (RFC 6749 §4.4.2), answered by `deadline`.
    ///
    /// # Errors
    /// The class and detail of the failure: `blocked` for a token URL the guard refuses,
    /// our own classes for our failures, `auth_token` otherwise. The detail holds the
    /// status and the RFC 6749 §5.2 `error` code, never a token or secret.
    pub(crate) async fn fetch_token(
        &self,
        grant: &OAuth2ClientCredentials,
        deadline: Instant,
    ) -> Result<AccessToken, NoToken> {
        let url = self
            .precheck(&grant.token_url)
            .map_err(|detail| (ErrorClass::Blocked, format!("token URL: {detail}")))?;
        let mut request = http::Request::post(url.as_str())
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(ACCEPT, "application/json")
            .header(USER_AGENT, tern_core::USER_AGENT);
        if let Some(auth) = grant.token_request_authorization() {
            let value = header_value(&FieldValue::Secret(auth)).map_err(|()| {
                (
                    ErrorClass::AuthToken,
                    "token request: the client id or secret cannot be sent in a header".into(),
                )
            })?;
            request = request.header(AUTHORIZATION, value);
        }
        let form = grant.token_request_body();
        let request = request
            .body(Full::new(Bytes::from(form.expose().to_owned())))
            .map_err(|e| (ErrorClass::AuthToken, format!("token request: {e}")))?;
        let deadline = tokio::time::Instant::from_std(deadline);
        let no_answer = || {
            (
                ErrorClass::AuthToken,
                "token endpoint: no answer within the attempt's deadline".to_owned(),
            )
        };
        let sent = timeout_at(
            deadline,
            ATTEMPT_DEADLINE.scope(deadline, self.send(request)),
        )
        .await
        .map_err(|_| no_answer())?;
        let (response, conn) = match sent {
            Sent::Response(r, conn) => (r, conn),
            Sent::Head(head) => {
                return Err((
                    ErrorClass::AuthToken,
                    format!(
                        "token endpoint answered {} with a head that could not be read",
                        head.status
                    ),
                ));
            }
            Sent::Failed(e, conn) => {
                let (class, detail) = crate::classify::classify_failure(&e, conn.as_deref());
                return Err((
                    token_class(class),
                    format!("token endpoint: {class}: {detail}"),
                ));
            }
        };
        let status = response.status().as_u16();
        let mut body = response.into_body();
        let mut read: Vec<u8> = Vec::new();
        loop {
            match timeout_at(deadline, body.frame()).await {
                Ok(Some(Ok(frame))) => {
                    let Ok(chunk) = frame.into_data() else {
                        continue; // trailers
                    };
                    if read.len() + chunk.len() > MAX_TOKEN_RESPONSE_BYTES {
                        return Err((
                            ErrorClass::AuthToken,
                            format!(
                                "token endpoint answered {status} with more than {MAX_TOKEN_RESPONSE_BYTES} bytes"
                            ),
                        ));
                    }
                    read.extend_from_slice(&chunk);
                }
                Ok(None) => {
                    if let Some(conn) = &conn {
                        conn.response_completed();
                    }
                    break;
                }
                Ok(Some(Err(_))) => {
                    return Err((
                        ErrorClass::AuthToken,
                        format!("token endpoint answered {status} and broke off its body"),
                    ));
                }
                Err(_) => return Err(no_answer()),
            }
        }
        if !(200..=299).contains(&status) {
            let code = token_error_code(&read)
                .map(|c| format!(" ({c})"))
                .unwrap_or_default();
            return Err((
                ErrorClass::AuthToken,
                format!("token endpoint answered {status}{code}"),
            ));
        }
        parse_token_response(&read).map_err(|e| {
            (
                ErrorClass::AuthToken,
                format!("token endpoint answered {status}: {e}"),
            )
        })
    }
}
