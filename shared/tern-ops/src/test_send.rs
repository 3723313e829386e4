//! A test event sent to one endpoint now, with the answer: "is my endpoint set up?". Signed
//! like any delivery (every active signer, the same headers and receiver authentication), sent through the same
//! delivery client and SSRF guard, and never recorded as a delivery: no ledger row, no
//! retry, no endpoint health.

use std::time::Duration;

use bytes::Bytes;
use chrono::Utc;
use serde::Serialize;
use tern_core::receiver_auth::ReceiverAuth;
use tern_core::{Endpoint, ErrorClass, Event, EventId, EventType, Payload, request};
use tern_http::{AttemptRequest, CertificateError, DeliveryClient};

/// Event type of a test event.
pub const TEST_EVENT_TYPE: &str = "tern.test";

/// Longest a test send waits for the receiver, in milliseconds: 10,000 (or the endpoint's
/// own shorter deadline). The API answers synchronously behind API Gateway, whose
/// integration timeout is 30 s (HTTP API quota); this leaves room for the reads around it.
pub const MAX_TEST_SEND_MS: u64 = 10_000;

/// What the receiver did with the test event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TestSendReport {
    /// The test event's id (its `webhook-id`).
    pub event_id: String,
    /// The event type sent: `tern.test`.
    pub event_type: String,
    /// True for a 2xx answer.
    pub delivered: bool,
    /// HTTP status, when the receiver answered.
    pub status: Option<u16>,
    /// Start to end of the answer (or the error), milliseconds.
    pub latency_ms: u64,
    /// Error class when there was no usable answer (`timeout`, `connect`, `blocked`...).
    pub error_class: Option<ErrorClass>,
    /// Error text, when there was no usable answer.
    pub error: Option<String>,
    /// First bytes of the answer's body (lossy UTF-8, at most a few hundred bytes).
    pub response_excerpt: Option<String>,
    /// True when the body was longer than the excerpt.
    pub excerpt_truncated: bool,
}

/// Why a test event was not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TestSendError {
    /// The endpoint has no secret that signs now: Tern never sends an unsigned webhook.
    #[error("the endpoint has no secret that signs now; rotate its secret first")]
    NoActiveSecret,
    /// The endpoint's client certificate (mutual TLS) could not be read or used: nothing
    /// was sent. As for a delivery, this is never the receiver's failure. Never the
    /// secret's text.
    #[error("the endpoint's client certificate: {0}")]
    ClientCertificate(#[from] CertificateError),
}

/// The test event for `endpoint`: type `tern.test`, a small JSON payload naming it.
pub fn test_event(endpoint: &Endpoint) -> Event {
    let id = EventId::generate();
    let payload = serde_json::json!({
        "type": TEST_EVENT_TYPE,
        "endpoint_id": endpoint.id.as_str(),
        "message": "A test event from Tern. Its signature verifies like any other delivery's.",
    })
    .to_string();
    Event {
        id,
        // Both are valid by construction: a fixed type and a small JSON object.
        event_type: EventType::new(TEST_EVENT_TYPE)
            .unwrap_or_else(|e| unreachable!("{TEST_EVENT_TYPE} is a valid type: {e}")),
        tenant_id: endpoint.tenant_id.clone(),
        created_at: Utc::now(),
        payload: Payload::parse(payload, 4096)
            .unwrap_or_else(|e| unreachable!("the test payload is a small object: {e}")),
        trace: None,
    }
}

/// Sends a test event to `endpoint` and returns what happened. The deadline is the
/// endpoint's own (or `default_deadline`), at most [`MAX_TEST_SEND_MS`].
///
/// An endpoint with a client certificate (mutual TLS) is sent to with it, read through
/// `client`'s certificate store as the sender reads it ([`DeliveryClient::for_certificate`]).
///
/// # Errors
/// [`TestSendError::NoActiveSecret`]; [`TestSendError::ClientCertificate`] when the
/// endpoint's certificate cannot be read or used. A receiver's failure is a report, not an
/// error.
pub async fn send_test(
    client: &DeliveryClient,
    endpoint: &Endpoint,
    default_deadline: Duration,
) -> Result<TestSendReport, TestSendError> {
    let now = Utc::now();
    let event = test_event(endpoint);
    let body = Bytes::from(request::body(&event, endpoint.payload_format));
    // The sender's headers: every active signer (v1 secrets, v1a keys), then the
    // endpoint's own headers and its receiver authentication. Nothing signs: not sent.
    let headers = request::attempt_headers(endpoint, &event, now.timestamp(), &body, now)
        .map_err(|_| TestSendError::NoActiveSecret)?;
    // The client certificate is read before anything is sent, as the sender does.
    let with_certificate;
    let client = match &endpoint.client_certificate {
        None => client,
        Some(certificate) => {
            with_certificate = client
                .for_certificate(certificate, &endpoint.tenant_id)
                .await?;
            &with_certificate
        }
    };
    let deadline = endpoint
        .timeout_ms
        .map_or(default_deadline, Duration::from_millis)
        .min(Duration::from_millis(MAX_TEST_SEND_MS));
    let attempt = AttemptRequest {
        url: &endpoint.url,
        body,
        headers: &headers,
        deadline,
    };
    // An OAuth2 endpoint's token is fetched (or taken from the cache) within the same
    // deadline, as the sender does.
    let report = match &endpoint.auth {
        ReceiverAuth::Oauth2ClientCredentials(grant) => {
            client
                .attempt_oauth(attempt, &endpoint.tenant_id, &endpoint.id, grant)
                .await
        }
        _ => client.attempt(attempt).await,
    };
    let result = report.result.cleaned();
    let status = result.status();
    Ok(TestSendReport {
        event_id: event.id.to_string(),
        event_type: TEST_EVENT_TYPE.to_owned(),
        delivered: status.is_some_and(|s| (200..300).contains(&s)),
        status,
        latency_ms: report.latency_ms,
        error_class: match &result {
            tern_core::AttemptResult::Failed { class, .. } => Some(*class),
            tern_core::AttemptResult::Response { .. } => None,
        },
        error: result.error_text(),
        response_excerpt: tern_core::sqs_text::clean_opt(report.excerpt.as_deref()),
        excerpt_truncated: report.excerpt_truncated,
    })
}
