//! Errors as RFC 9457 problem details (`application/problem+json`): a stable `type` URI per
//! kind of problem, its `title` and `status`, a `detail` for this occurrence, and, where one
//! input is at fault, its name in the `field` extension member. Never an internal: an AWS
//! error is logged and answered with a generic `unavailable` or `internal` problem.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tern_core::ports::PortError;
use utoipa::ToSchema;

/// `Content-Type` of a problem (RFC 9457 §3).
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// Prefix of every problem `type`: a URN, stable and not meant to be dereferenced; each
/// kind is described in `docs/api.md`.
pub const TYPE_PREFIX: &str = "urn:tern:problem:";

/// The kinds of problem the API answers with. The names (after [`TYPE_PREFIX`]) are
/// stable: clients branch on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// 400: an input is invalid (`field` names it).
    Validation,
    /// 401: the request reached the function without an authenticated caller: in AWS, a
    /// route left without IAM authorization (a deployment mistake).
    Unauthorized,
    /// 403: the request is not signed, or not signed right (local mode's SigV4 check, which
    /// answers as API Gateway's IAM authorization does: 403 for a missing, unknown, stale
    /// or wrong signature).
    SignatureRefused,
    /// 403: the caller may not act on this tenant (local mode's scoped credentials; in AWS
    /// the IAM policy, checked by API Gateway).
    Forbidden,
    /// 404: no such resource in this tenant (another tenant's id is this too).
    NotFound,
    /// 405: the path exists, the method does not.
    MethodNotAllowed,
    /// 409: the event id is taken by a different event.
    EventIdConflict,
    /// 409: the endpoint is disabled; enable it first.
    EndpointDisabled,
    /// 409: the endpoint does not subscribe to the event's type.
    NotSubscribed,
    /// 409: the endpoint has no secret that signs now.
    NoActiveSecret,
    /// 409: the endpoint's client certificate (mutual TLS) cannot be read or used: its
    /// secret does not exist, may not be read, or is not a certificate and its key.
    ClientCertificateUnusable,
    /// 422: the `Idempotency-Key` was used for a request with other settings (IETF
    /// draft-ietf-httpapi-idempotency-key-header §2.7: a key reused with another payload).
    IdempotencyKeyReused,
    /// 409: a request with this `Idempotency-Key` is still running (Stripe's answer to a
    /// concurrent retry); retry after `Retry-After` seconds.
    IdempotencyKeyInUse,
    /// 413: the body is larger than the limit.
    PayloadTooLarge,
    /// 415: the body is not `application/json`.
    UnsupportedMediaType,
    /// 429: a per-tenant rate limit (portal sessions, portal test sends) is spent for
    /// this minute; retry after `Retry-After` seconds.
    TooManyRequests,
    /// 503: an AWS service did not answer in time; retry.
    Unavailable,
    /// 500: a bug; the detail says nothing more.
    Internal,
}

impl Kind {
    /// The stable name in the `type` URI.
    pub fn name(self) -> &'static str {
        match self {
            Self::Validation => "validation",
            Self::Unauthorized => "unauthorized",
            Self::SignatureRefused => "signature-refused",
            Self::Forbidden => "forbidden",
            Self::NotFound => "not-found",
            Self::MethodNotAllowed => "method-not-allowed",
            Self::EventIdConflict => "event-id-conflict",
            Self::EndpointDisabled => "endpoint-disabled",
            Self::NotSubscribed => "not-subscribed",
            Self::NoActiveSecret => "no-active-secret",
            Self::ClientCertificateUnusable => "client-certificate-unusable",
            Self::IdempotencyKeyReused => "idempotency-key-reused",
            Self::IdempotencyKeyInUse => "idempotency-key-in-use",
            Self::PayloadTooLarge => "payload-too-large",
            Self::UnsupportedMediaType => "unsupported-media-type",
            Self::TooManyRequests => "too-many-requests",
            Self::Unavailable => "unavailable",
            Self::Internal => "internal",
        }
    }

    /// Its HTTP status.
    pub fn status(self) -> StatusCode {
        match self {
            Self::Validation => StatusCode::BAD_REQUEST,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::Forbidden | Self::SignatureRefused => StatusCode::FORBIDDEN,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::EventIdConflict
            | Self::EndpointDisabled
            | Self::NotSubscribed
            | Self::NoActiveSecret
            | Self::ClientCertificateUnusable
            | Self::IdempotencyKeyInUse => StatusCode::CONFLICT,
            Self::IdempotencyKeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Its title: the same for every occurrence (RFC 9457 §3.1.3).
    pub fn title(self) -> &'static str {
        match self {
            Self::Validation => "Invalid input",
            Self::Unauthorized => "Not authenticated",
            Self::SignatureRefused => "Signature refused",
            Self::Forbidden => "Not allowed for this tenant",
            Self::NotFound => "Not found",
            Self::MethodNotAllowed => "Method not allowed",
            Self::EventIdConflict => "Event id already used",
            Self::EndpointDisabled => "Endpoint disabled",
            Self::NotSubscribed => "Endpoint not subscribed",
            Self::NoActiveSecret => "No signing secret",
            Self::ClientCertificateUnusable => "Client certificate unusable",
            Self::IdempotencyKeyReused => "Idempotency key used for another request",
            Self::IdempotencyKeyInUse => "Idempotency key in use",
            Self::PayloadTooLarge => "Body too large",
            Self::UnsupportedMediaType => "Body must be JSON",
            Self::TooManyRequests => "Too many requests",
            Self::Unavailable => "Service unavailable",
            Self::Internal => "Internal error",
        }
    }

    /// The `type` URI.
    pub fn type_uri(self) -> String {
        format!("{TYPE_PREFIX}{}", self.name())
    }
}

/// A problem document (RFC 9457).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, ToSchema)]
#[schema(as = Problem)]
pub struct Problem {
    /// Stable URI of the kind of problem (`urn:tern:problem:<name>`).
    #[serde(rename = "type")]
    pub r#type: String,
    /// Short summary of the kind.
    pub title: String,
    /// HTTP status code.
    pub status: u16,
    /// What went wrong this time.
    pub detail: String,
    /// The input at fault: a body field (`url`, `payload`, `event_types`), a query or path
    /// parameter (`cursor`, `tenant_id`), when one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// An error answered as a problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{detail}")]
pub struct ApiError {
    /// The kind.
    pub kind: Kind,
    /// What went wrong this time: never an internal (an AWS error text, a stack).
    pub detail: String,
    /// The input at fault.
    pub field: Option<String>,
}

impl ApiError {
    /// A problem of `kind`.
    pub fn new(kind: Kind, detail: impl Into<String>) -> Self {
        Self {
            kind,
            detail: detail.into(),
            field: None,
        }
    }

    /// A 400 naming `field`.
    pub fn invalid(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            kind: Kind::Validation,
            detail: detail.into(),
            field: Some(field.into()),
        }
    }

    /// A 404 for an id of this tenant that does not exist (or is another tenant's).
    pub fn not_found(what: &str, id: impl std::fmt::Display) -> Self {
        Self::new(Kind::NotFound, format!("{what} {id} not found"))
    }

    /// Names the input at fault.
    #[must_use]
    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// The document.
    pub fn problem(&self) -> Problem {
        Problem {
            r#type: self.kind.type_uri(),
            title: self.kind.title().to_owned(),
            status: self.kind.status().as_u16(),
            detail: self.detail.clone(),
            field: self.field.clone(),
        }
    }
}

impl From<PortError> for ApiError {
    fn from(e: PortError) -> Self {
        // The AWS error's text stays in the log: it can name tables, queues and accounts.
        match e {
            PortError::Unavailable(why) => {
                tracing::warn!(error = %why, "an AWS call failed; answering 503");
                Self::new(
                    Kind::Unavailable,
                    "a service Tern depends on did not answer in time; retry the request",
                )
            }
            PortError::Rejected(why) => {
                tracing::error!(error = %why, "an AWS call was refused; answering 500");
                Self::new(Kind::Internal, "the request could not be completed")
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.kind.status();
        let body = serde_json::to_vec(&self.problem()).unwrap_or_default();
        let mut response = (status, body).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(PROBLEM_CONTENT_TYPE),
        );
        if matches!(self.kind, Kind::Unavailable | Kind::IdempotencyKeyInUse) {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if self.kind == Kind::TooManyRequests {
            // The rate limits count per minute (`crate::portal::RATE_WINDOW_SECONDS`).
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("60"));
        }
        response
    }
}

/// A handler's result.
pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_name_their_field_and_hide_internals() {
        let p = ApiError::invalid("url", "not https").problem();
        assert_eq!(p.r#type, "urn:tern:problem:validation");
        assert_eq!((p.status, p.field.as_deref()), (400, Some("url")));
        let p = ApiError::from(PortError::Unavailable(
            "dispatch failure: arn:aws:dynamodb:eu-west-1:123456789012:table/x".into(),
        ))
        .problem();
        assert_eq!(p.status, 503);
        assert!(
            !p.detail.contains("arn:") && !p.detail.contains("dynamodb"),
            "{}",
            p.detail
        );
        let json = serde_json::to_value(ApiError::not_found("endpoint", "ep_1").problem()).unwrap();
        assert_eq!(json["type"], "urn:tern:problem:not-found");
        assert!(json.get("field").is_none());
    }
}
