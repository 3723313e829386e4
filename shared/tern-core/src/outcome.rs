//! The observable result of one attempt and its error classes. What it means for the
//! delivery and for its endpoint's health is decided in one place, [`crate::decision`].

use serde::{Deserialize, Serialize};

/// Class of an attempt that got no usable HTTP answer. Each is retryable except
/// [`ErrorClass::Blocked`].
///
/// Some classes are failures on Tern's side, not the receiver's ([`ErrorClass::is_ours`]):
/// they are retried like the others but never count against the endpoint's health
/// (DESIGN.md §10: the model judges receivers by what they did).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// The host name did not resolve.
    Dns,
    /// The TCP connection failed (refused, reset, unreachable).
    Connect,
    /// The TLS handshake failed (certificate, protocol).
    Tls,
    /// The attempt's total deadline passed.
    Timeout,
    /// The request was sent but the response could not be read (reset mid-body, bad HTTP).
    Protocol,
    /// The destination is not allowed: the SSRF guard refused it (the endpoint URL's, or
    /// an OAuth2 token URL's address). Never retried.
    Blocked,
    /// The receiver's OAuth2 token endpoint gave no token: it answered an error or
    /// something that is not a token, or could not be reached in time. Retried on the
    /// schedule and charged to the endpoint: the token server is the receiver's side. (A
    /// receiver that answers 401 even to a token fetched a moment ago is recorded with
    /// that status, like any answer.)
    AuthToken,
    /// Ours: our resolver failed temporarily (`EAI_AGAIN`, SERVFAIL, a resolver timeout,
    /// e.g. a throttled VPC resolver). Says nothing about the receiver's name.
    DnsTemporary,
    /// Ours: this host ran out of a local resource (file descriptors, ephemeral ports,
    /// socket buffers, memory) before the request could leave.
    LocalResource,
    /// Ours: our own TLS set-up is unusable (no trust roots, a client configuration the
    /// TLS library refuses), as opposed to a certificate the receiver presented.
    TlsConfig,
}

impl ErrorClass {
    /// The `snake_case` name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dns => "dns",
            Self::Connect => "connect",
            Self::Tls => "tls",
            Self::Timeout => "timeout",
            Self::Protocol => "protocol",
            Self::Blocked => "blocked",
            Self::AuthToken => "auth_token",
            Self::DnsTemporary => "dns_temporary",
            Self::LocalResource => "local_resource",
            Self::TlsConfig => "tls_config",
        }
    }

    /// True for a failure on Tern's side ([`ErrorClass::DnsTemporary`],
    /// [`ErrorClass::LocalResource`], [`ErrorClass::TlsConfig`]): retried, counted in its
    /// own metric, never charged to the endpoint's health.
    pub fn is_ours(self) -> bool {
        matches!(
            self,
            Self::DnsTemporary | Self::LocalResource | Self::TlsConfig
        )
    }

    /// True when an attempt that failed this way says something about the receiver and
    /// so counts in its endpoint's health: not ours ([`ErrorClass::is_ours`]) and not
    /// [`ErrorClass::Blocked`] (the receiver was never contacted).
    pub fn charged_to_receiver(self) -> bool {
        !self.is_ours() && self != Self::Blocked
    }
}

impl std::fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The observable result of one HTTP attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptResult {
    /// The receiver answered with a status line.
    Response {
        /// HTTP status code.
        status: u16,
        /// The `Retry-After` header, as received, if any.
        retry_after: Option<String>,
        /// The `Location` header of a 3xx, as received, if any. Never followed.
        location: Option<String>,
    },
    /// No usable answer.
    Failed {
        /// What went wrong.
        class: ErrorClass,
        /// A short human-readable detail, free of secrets.
        detail: String,
    },
}

impl AttemptResult {
    /// The same result with every receiver-controlled text (`Retry-After`, `Location`, the
    /// error detail) reduced to characters SQS accepts and bounded to
    /// [`crate::sqs_text::MAX_TEXT_BYTES`] bytes, so it can go into a queue message, a
    /// message attribute or a log field as it is.
    pub fn cleaned(self) -> Self {
        use crate::sqs_text::{MAX_TEXT_BYTES, clean};
        match self {
            Self::Response {
                status,
                retry_after,
                location,
            } => Self::Response {
                status,
                retry_after: retry_after.map(|t| clean(&t, MAX_TEXT_BYTES).into_owned()),
                location: location.map(|t| clean(&t, MAX_TEXT_BYTES).into_owned()),
            },
            Self::Failed { class, detail } => Self::Failed {
                class,
                detail: clean(&detail, MAX_TEXT_BYTES).into_owned(),
            },
        }
    }

    /// HTTP status, when there was an answer.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Response { status, .. } => Some(*status),
            Self::Failed { .. } => None,
        }
    }

    /// `"<class>: <detail>"` for a failure, `"redirect to <location>"` for a 3xx, else `None`.
    pub fn error_text(&self) -> Option<String> {
        match self {
            Self::Failed { class, detail } => Some(format!("{class}: {detail}")),
            Self::Response {
                status: 300..=399,
                location,
                ..
            } => Some(format!(
                "redirect to {} (not followed)",
                location.as_deref().unwrap_or("<no location>")
            )),
            Self::Response { status, .. } if !(200..=299).contains(status) => {
                Some(format!("http status {status}"))
            }
            Self::Response { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_failures_are_not_charged_to_the_receiver() {
        for class in [
            ErrorClass::DnsTemporary,
            ErrorClass::LocalResource,
            ErrorClass::TlsConfig,
        ] {
            assert!(class.is_ours(), "{class}");
            assert!(!class.charged_to_receiver(), "{class}");
        }
        assert!(!ErrorClass::Blocked.is_ours());
        assert!(!ErrorClass::Blocked.charged_to_receiver());
        for class in [
            ErrorClass::Dns,
            ErrorClass::Connect,
            ErrorClass::Tls,
            ErrorClass::Timeout,
            ErrorClass::Protocol,
            ErrorClass::AuthToken,
        ] {
            assert!(!class.is_ours(), "{class}");
            assert!(class.charged_to_receiver(), "{class}");
        }
    }
}
