//! How Tern authenticates to a receiver: none, HTTP Basic (RFC 7617), a static bearer
//! token (RFC 6750), or an OAuth2 access token got with the client credentials grant
//! (RFC 6749 §4.4) from the receiver's token endpoint.
//!
//! The model and the pure parts live here: the `authorization` value of basic and bearer,
//! the token request's form and client authentication (RFC 6749 §2.3.1), reading a token
//! response (RFC 6749 §5.1 / §5.2), and how long a token is used. The fetch, the cache per
//! warm sender and the one refresh after a 401 are the delivery client's
//! (`tern_http::oauth`).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};

use crate::secret_value::SecretValue;

/// Longest basic user name, client id, scope or audience, in bytes: 1,024.
pub const MAX_AUTH_FIELD_BYTES: usize = 1_024;
/// Longest bearer token, fetched access token or client secret, in bytes: 8,192, the
/// per-line header limit of common receiver fronts (nginx's default
/// `large_client_header_buffers` of 8 KiB, Apache's `LimitRequestFieldSize` of 8,190):
/// a longer token could not pass them anyway.
pub const MAX_TOKEN_BYTES: usize = 8_192;
/// How long a token whose response has no `expires_in` is used, in seconds: 300. RFC 6749
/// §5.1 makes `expires_in` only RECOMMENDED; five minutes bounds how long a token that
/// expired early is retried on, and a 401 refreshes it sooner.
pub const DEFAULT_TOKEN_LIFETIME_SECONDS: u64 = 300;
/// Longest a fetched token is used, in seconds: 86,400 (a day), whatever `expires_in`
/// says. Token servers answer "never expires" with huge numbers (Java's `Long.MAX_VALUE`,
/// 9,223,372,036,854,775,807, or 1e300 as a float); a day keeps the arithmetic on such a
/// number bounded and still refreshes a token the server revoked silently, while a 401
/// refreshes it sooner.
pub const MAX_TOKEN_LIFETIME_SECONDS: u64 = 86_400;
/// How long before its stated expiry a cached token is replaced, in seconds: 60, so a
/// token handed to an attempt (deadline at most 30 s, `MAX_TIMEOUT_MS`) is still valid
/// when the receiver reads it, with 30 s for clocks that disagree. Half the lifetime for
/// tokens that live less than two minutes.
pub const TOKEN_REFRESH_MARGIN_SECONDS: u64 = 60;
/// Most bytes of a token endpoint's answer read, in bytes: 64 KiB. A token response is a
/// small JSON object; a bigger answer is not one.
pub const MAX_TOKEN_RESPONSE_BYTES: usize = 64 * 1024;

/// How the client authenticates to the token endpoint (RFC 6749 §2.3.1; names from the
/// OAuth registry of RFC 7591 §2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientAuthMethod {
    /// HTTP Basic with the form-encoded client id and secret (the method every
    /// authorization server must support).
    #[default]
    ClientSecretBasic,
    /// `client_id` and `client_secret` in the request body.
    ClientSecretPost,
}

impl ClientAuthMethod {
    /// Its name: `client_secret_basic` or `client_secret_post`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClientSecretBasic => "client_secret_basic",
            Self::ClientSecretPost => "client_secret_post",
        }
    }
}

impl std::str::FromStr for ClientAuthMethod {
    type Err = AuthError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().replace('-', "_").as_str() {
            "client_secret_basic" | "basic" => Ok(Self::ClientSecretBasic),
            "client_secret_post" | "post" => Ok(Self::ClientSecretPost),
            _ => Err(AuthError::BadClientAuth(s.to_owned())),
        }
    }
}

/// An OAuth2 client credentials grant (RFC 6749 §4.4) at the receiver's token endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OAuth2ClientCredentials {
    /// The token endpoint (`https://...`). Checked by the same SSRF guard as endpoint URLs
    /// when it is set, and again at every fetch.
    pub token_url: String,
    /// The client id.
    pub client_id: String,
    /// The client secret.
    pub client_secret: SecretValue,
    /// Space-separated scopes (RFC 6749 §3.3), sent as `scope` when set.
    #[serde(default)]
    pub scope: Option<String>,
    /// The API the token is for, sent as `audience` when set (the parameter Auth0 and
    /// others require for client credentials; not part of RFC 6749).
    #[serde(default)]
    pub audience: Option<String>,
    /// How the client id and secret are sent.
    #[serde(default)]
    pub client_auth: ClientAuthMethod,
}

/// How an endpoint's requests are authenticated to its receiver. Stored with the
/// endpoint as `{"type": "none" | "basic" | "bearer" | "oauth2_client_credentials", ...}`;
/// endpoints stored before this setting existed read as [`ReceiverAuth::None`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ReceiverAuth {
    /// No `authorization` header (the signatures authenticate the request).
    #[default]
    None,
    /// `authorization: Basic base64(username:password)` (RFC 7617).
    Basic {
        /// User name: no `:` (RFC 7617 §2), no control characters.
        username: String,
        /// Password.
        password: SecretValue,
    },
    /// `authorization: Bearer <token>` with a fixed token (RFC 6750 §2.1).
    Bearer {
        /// The token.
        token: SecretValue,
    },
    /// `authorization: Bearer <access token>` from a client credentials grant.
    Oauth2ClientCredentials(OAuth2ClientCredentials),
}

/// Why an authentication setting is refused. Never repeats a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// A basic user name that is empty, too long, holds `:` or a control character.
    #[error(
        "basic user name must be 1-{MAX_AUTH_FIELD_BYTES} bytes without ':' or control characters (RFC 7617 §2)"
    )]
    BadUsername,
    /// A basic password too long or with a control character.
    #[error("basic password must be at most {MAX_TOKEN_BYTES} bytes without control characters")]
    BadPassword,
    /// A bearer token that is empty, too long, or not visible ASCII without spaces.
    #[error(
        "bearer token must be 1-{MAX_TOKEN_BYTES} bytes of visible ASCII without spaces (RFC 6750 §2.1)"
    )]
    BadToken,
    /// The token URL does not parse, is not http(s), or holds credentials.
    #[error("OAuth2 token URL is invalid: {0}")]
    BadTokenUrl(String),
    /// A client id that is empty, too long or not printable ASCII.
    #[error(
        "OAuth2 client id must be 1-{MAX_AUTH_FIELD_BYTES} bytes of printable ASCII (RFC 6749 Appendix A.1)"
    )]
    BadClientId,
    /// A client secret that is empty, too long or not printable ASCII.
    #[error(
        "OAuth2 client secret must be 1-{MAX_TOKEN_BYTES} bytes of printable ASCII (RFC 6749 Appendix A.2)"
    )]
    BadClientSecret,
    /// A scope that is not space-separated scope tokens.
    #[error(
        "OAuth2 scope must be space-separated tokens of printable ASCII without '\"' or '\\' (RFC 6749 §3.3), at most {MAX_AUTH_FIELD_BYTES} bytes"
    )]
    BadScope,
    /// An audience that is empty, too long or not printable ASCII.
    #[error("OAuth2 audience must be 1-{MAX_AUTH_FIELD_BYTES} bytes of printable ASCII")]
    BadAudience,
    /// An unknown client authentication method.
    #[error(
        "client authentication {0:?} is unknown: use client_secret_basic or client_secret_post"
    )]
    BadClientAuth(String),
    /// An unknown authentication type.
    #[error(
        "authentication type {0:?} is unknown: use none, basic, bearer or oauth2_client_credentials"
    )]
    BadType(String),
}

/// True for printable ASCII, space included (RFC 6749 Appendix A `VSCHAR`, 0x20-0x7E).
fn vschar(s: &str) -> bool {
    s.bytes().all(|b| (0x20..=0x7E).contains(&b))
}

/// True for 1..=`max` bytes of visible ASCII without spaces.
fn visible_token(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && s.bytes().all(|b| (0x21..=0x7E).contains(&b))
}

impl ReceiverAuth {
    /// Its type name, as stored and shown: `none`, `basic`, `bearer` or
    /// `oauth2_client_credentials`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Basic { .. } => "basic",
            Self::Bearer { .. } => "bearer",
            Self::Oauth2ClientCredentials(_) => "oauth2_client_credentials",
        }
    }

    /// True unless [`ReceiverAuth::None`]: the endpoint sends an `authorization` header of
    /// its own, so no custom header may.
    pub fn sends_authorization(&self) -> bool {
        !matches!(self, Self::None)
    }

    /// Checks every field.
    ///
    /// # Errors
    /// The first [`AuthError`].
    pub fn validate(&self) -> Result<(), AuthError> {
        match self {
            Self::None => Ok(()),
            Self::Basic { username, password } => {
                if username.is_empty()
                    || username.len() > MAX_AUTH_FIELD_BYTES
                    || username.contains(':')
                    || username.chars().any(char::is_control)
                {
                    return Err(AuthError::BadUsername);
                }
                if password.len() > MAX_TOKEN_BYTES
                    || password.expose().chars().any(char::is_control)
                {
                    return Err(AuthError::BadPassword);
                }
                Ok(())
            }
            Self::Bearer { token } => {
                if visible_token(token.expose(), MAX_TOKEN_BYTES) {
                    Ok(())
                } else {
                    Err(AuthError::BadToken)
                }
            }
            Self::Oauth2ClientCredentials(grant) => grant.validate(),
        }
    }

    /// The `authorization` value of a basic or bearer endpoint; `None` for no
    /// authentication and for OAuth2, whose token is fetched at send time.
    pub fn static_authorization(&self) -> Option<SecretValue> {
        match self {
            Self::Basic { username, password } => {
                Some(basic_authorization(username, password.expose()))
            }
            Self::Bearer { token } => Some(bearer_authorization(token.expose())),
            Self::None | Self::Oauth2ClientCredentials(_) => None,
        }
    }
}

/// `Basic base64(user-id ":" password)` (RFC 7617 §2, UTF-8 as §2.1's `charset` names).
pub fn basic_authorization(user: &str, password: &str) -> SecretValue {
    SecretValue::new(format!(
        "Basic {}",
        B64.encode(format!("{user}:{password}"))
    ))
}

/// `Bearer <token>` (RFC 6750 §2.1).
pub fn bearer_authorization(token: &str) -> SecretValue {
    SecretValue::new(format!("Bearer {token}"))
}

impl OAuth2ClientCredentials {
    /// Checks every field (the token URL's address policy is the SSRF guard's job).
    ///
    /// # Errors
    /// The first [`AuthError`].
    pub fn validate(&self) -> Result<(), AuthError> {
        crate::endpoint::validate_url(&self.token_url)
            .map_err(|e| AuthError::BadTokenUrl(e.to_string()))?;
        if self.client_id.is_empty()
            || self.client_id.len() > MAX_AUTH_FIELD_BYTES
            || !vschar(&self.client_id)
        {
            return Err(AuthError::BadClientId);
        }
        let secret = self.client_secret.expose();
        if secret.is_empty() || secret.len() > MAX_TOKEN_BYTES || !vschar(secret) {
            return Err(AuthError::BadClientSecret);
        }
        if let Some(scope) = &self.scope {
            let token_ok = |t: &str| {
                !t.is_empty()
                    && t.bytes().all(|b| {
                        b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b)
                    })
            };
            if scope.len() > MAX_AUTH_FIELD_BYTES || !scope.split(' ').all(token_ok) {
                return Err(AuthError::BadScope);
            }
        }
        if let Some(audience) = &self.audience
            && (audience.is_empty() || audience.len() > MAX_AUTH_FIELD_BYTES || !vschar(audience))
        {
            return Err(AuthError::BadAudience);
        }
        Ok(())
    }

    /// The token request's body, `application/x-www-form-urlencoded` (RFC 6749 §4.4.2):
    /// `grant_type=client_credentials`, `scope` and `audience` when set, and for
    /// [`ClientAuthMethod::ClientSecretPost`] the client id and secret. A secret, so it
    /// is never logged.
    pub fn token_request_body(&self) -> SecretValue {
        let mut form = url::form_urlencoded::Serializer::new(String::new());
        form.append_pair("grant_type", "client_credentials");
        if let Some(scope) = &self.scope {
            form.append_pair("scope", scope);
        }
        if let Some(audience) = &self.audience {
            form.append_pair("audience", audience);
        }
        if self.client_auth == ClientAuthMethod::ClientSecretPost {
            form.append_pair("client_id", &self.client_id);
            form.append_pair("client_secret", self.client_secret.expose());
        }
        SecretValue::new(form.finish())
    }

    /// The token request's `authorization` for [`ClientAuthMethod::ClientSecretBasic`]:
    /// Basic over the client id and secret, each form-encoded first (RFC 6749 §2.3.1).
    pub fn token_request_authorization(&self) -> Option<SecretValue> {
        (self.client_auth == ClientAuthMethod::ClientSecretBasic).then(|| {
            let encode =
                |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
            basic_authorization(
                &encode(&self.client_id),
                &encode(self.client_secret.expose()),
            )
        })
    }
}

/// An access token as the token endpoint issued it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessToken {
    /// The token.
    pub token: SecretValue,
    /// `expires_in`, in whole seconds (a fraction rounded down), when the response named
    /// it; at most [`MAX_TOKEN_LIFETIME_SECONDS`].
    pub expires_in: Option<u64>,
}

impl AccessToken {
    /// How long it is used, in seconds, from when it was received: its lifetime
    /// (`expires_in`, else [`DEFAULT_TOKEN_LIFETIME_SECONDS`]) less
    /// [`TOKEN_REFRESH_MARGIN_SECONDS`] (half the lifetime for short ones). 0: use it for
    /// the attempt at hand only.
    pub fn usable_seconds(&self) -> u64 {
        let lifetime = self
            .expires_in
            .unwrap_or(DEFAULT_TOKEN_LIFETIME_SECONDS)
            .min(MAX_TOKEN_LIFETIME_SECONDS);
        lifetime - TOKEN_REFRESH_MARGIN_SECONDS.min(lifetime / 2)
    }
}

/// Why a token endpoint's answer gave no token. The text never holds a token or secret:
/// only the status, the RFC 6749 §5.2 `error` code and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenResponseError {
    /// Not a JSON object.
    #[error("token response is not a JSON object")]
    NotJson,
    /// No `access_token` string.
    #[error("token response has no access_token")]
    NoToken,
    /// The token is too long or not visible ASCII.
    #[error("access_token is not usable in a header (1-{MAX_TOKEN_BYTES} bytes of visible ASCII)")]
    BadToken,
    /// A `token_type` other than `Bearer`.
    #[error("token_type {0:?} is not Bearer")]
    NotBearer(String),
    /// An `expires_in` that is not a non-negative, finite number of seconds.
    #[error("expires_in is not a number of seconds")]
    BadExpiry,
}

/// Reads a successful token response (RFC 6749 §5.1): `access_token` (required),
/// `token_type` (must be `Bearer`, any case, RFC 6749 §7.1; a missing one is taken as
/// Bearer, which some servers omit), `expires_in` (seconds, [`expires_in_seconds`]: any
/// JSON number form, `3600`, `3600.0` (Reddit's), `3.6e3`, a fraction, or the same as a
/// string, as some servers send it; clamped to [`MAX_TOKEN_LIFETIME_SECONDS`]).
///
/// # Errors
/// [`TokenResponseError`].
pub fn parse_token_response(body: &[u8]) -> Result<AccessToken, TokenResponseError> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| TokenResponseError::NotJson)?;
    let obj = value.as_object().ok_or(TokenResponseError::NotJson)?;
    let token = obj
        .get("access_token")
        .and_then(serde_json::Value::as_str)
        .ok_or(TokenResponseError::NoToken)?;
    if !visible_token(token, MAX_TOKEN_BYTES) {
        return Err(TokenResponseError::BadToken);
    }
    if let Some(kind) = obj.get("token_type").and_then(serde_json::Value::as_str)
        && !kind.eq_ignore_ascii_case("bearer")
    {
        return Err(TokenResponseError::NotBearer(
            crate::sqs_text::clean(kind, 40).into_owned(),
        ));
    }
    let expires_in = match obj.get("expires_in") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::Number(n)) => Some(expires_in_seconds(&n.to_string())?),
        Some(serde_json::Value::String(s)) => Some(expires_in_seconds(s)?),
        Some(_) => return Err(TokenResponseError::BadExpiry),
    };
    Ok(AccessToken {
        token: SecretValue::new(token),
        expires_in,
    })
}

/// A token's lifetime from the text of its `expires_in`, in whole seconds: an integer of
/// any size, or a decimal or exponent form, rounded down (0.5 is 0: the token is used for
/// the attempt at hand only), clamped to [`MAX_TOKEN_LIFETIME_SECONDS`]. Never panics on
/// what a token server sends: the number is compared, never added to a clock.
///
/// # Errors
/// [`TokenResponseError::BadExpiry`] for a negative, non-finite (`NaN`, `inf`) or
/// non-numeric value.
pub fn expires_in_seconds(text: &str) -> Result<u64, TokenResponseError> {
    let text = text.trim();
    if let Ok(whole) = text.parse::<u64>() {
        return Ok(whole.min(MAX_TOKEN_LIFETIME_SECONDS));
    }
    // Only the forms JSON allows (digits, '.', an exponent, a sign): Rust's float parser
    // would also take "inf" and "NaN".
    if text.is_empty()
        || !text
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
    {
        return Err(TokenResponseError::BadExpiry);
    }
    let seconds: f64 = text.parse().map_err(|_| TokenResponseError::BadExpiry)?;
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(TokenResponseError::BadExpiry);
    }
    let cap = MAX_TOKEN_LIFETIME_SECONDS as f64;
    // In 0..=cap after the clamp, so the conversion is exact and cannot overflow.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(seconds.min(cap).floor() as u64)
}

/// The RFC 6749 §5.2 `error` code of an error response (`invalid_client`, ...), cut to 64
/// SQS-safe bytes; `None` when the body is not one.
pub fn token_error_code(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let code = value.get("error")?.as_str()?;
    Some(crate::sqs_text::clean(code, 64).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant() -> OAuth2ClientCredentials {
        OAuth2ClientCredentials {
            token_url: "https://auth.example/oauth/token".into(),
            client_id: "tern client".into(),
            client_secret: SecretValue::new("s3cr:t/+"),
            scope: Some("webhooks:write read".into()),
            audience: Some("https://api.example".into()),
            client_auth: ClientAuthMethod::ClientSecretBasic,
        }
    }

    #[test]
    fn basic_and_bearer_headers() {
        // RFC 7617 §2's example.
        assert_eq!(
            basic_authorization("Aladdin", "open sesame").expose(),
            "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
        );
        let bearer = ReceiverAuth::Bearer {
            token: SecretValue::new("mF_9.B5f-4.1JqM"),
        };
        assert_eq!(
            bearer.static_authorization().unwrap().expose(),
            "Bearer mF_9.B5f-4.1JqM"
        );
        assert_eq!(
            ReceiverAuth::Oauth2ClientCredentials(grant()).static_authorization(),
            None
        );
    }

    #[test]
    fn validation() {
        let basic = |u: &str, p: &str| ReceiverAuth::Basic {
            username: u.into(),
            password: SecretValue::new(p),
        };
        assert_eq!(basic("a:b", "p").validate(), Err(AuthError::BadUsername));
        assert_eq!(basic("", "p").validate(), Err(AuthError::BadUsername));
        assert_eq!(basic("u", "p\r\n").validate(), Err(AuthError::BadPassword));
        assert!(basic("üser", "pässword with spaces").validate().is_ok());
        let bearer = |t: &str| ReceiverAuth::Bearer {
            token: SecretValue::new(t),
        };
        assert_eq!(bearer("a b").validate(), Err(AuthError::BadToken));
        assert_eq!(bearer("").validate(), Err(AuthError::BadToken));
        assert!(bearer("eyJhbGciOi.J9-_~+/=").validate().is_ok());
        assert!(grant().validate().is_ok());
        let mut g = grant();
        g.token_url = "ftp://x/".into();
        assert!(matches!(g.validate(), Err(AuthError::BadTokenUrl(_))));
        let mut g = grant();
        g.scope = Some("a\"b".into());
        assert_eq!(g.validate(), Err(AuthError::BadScope));
        let mut g = grant();
        g.scope = Some("a  b".into());
        assert_eq!(g.validate(), Err(AuthError::BadScope));
        let mut g = grant();
        g.client_secret = SecretValue::new("");
        assert_eq!(g.validate(), Err(AuthError::BadClientSecret));
        let err = AuthError::BadClientSecret.to_string();
        assert!(!err.contains("s3cr"), "{err}");
    }

    #[test]
    fn token_request_forms() {
        let g = grant();
        assert_eq!(
            g.token_request_body().expose(),
            "grant_type=client_credentials&scope=webhooks%3Awrite+read&audience=https%3A%2F%2Fapi.example"
        );
        // RFC 6749 §2.3.1: each part form-encoded, then Basic.
        assert_eq!(
            g.token_request_authorization().unwrap().expose(),
            basic_authorization("tern+client", "s3cr%3At%2F%2B").expose()
        );
        let post = OAuth2ClientCredentials {
            client_auth: ClientAuthMethod::ClientSecretPost,
            scope: None,
            audience: None,
            ..grant()
        };
        assert_eq!(post.token_request_authorization(), None);
        assert_eq!(
            post.token_request_body().expose(),
            "grant_type=client_credentials&client_id=tern+client&client_secret=s3cr%3At%2F%2B"
        );
    }

    #[test]
    fn token_responses() {
        let t = parse_token_response(
            br#"{"access_token":"2YotnFZFEjr1zCsicMWpAA","token_type":"bearer","expires_in":3600}"#,
        )
        .unwrap();
        assert_eq!(t.token.expose(), "2YotnFZFEjr1zCsicMWpAA");
        assert_eq!(t.expires_in, Some(3600));
        assert_eq!(t.usable_seconds(), 3540);
        let s = parse_token_response(br#"{"access_token":"x","expires_in":"90"}"#).unwrap();
        assert_eq!((s.expires_in, s.usable_seconds()), (Some(90), 45));
        let none = parse_token_response(br#"{"access_token":"x","token_type":"Bearer"}"#).unwrap();
        assert_eq!(none.usable_seconds(), DEFAULT_TOKEN_LIFETIME_SECONDS - 60);
        let zero = parse_token_response(br#"{"access_token":"x","expires_in":0}"#).unwrap();
        assert_eq!(zero.usable_seconds(), 0);
        assert_eq!(
            parse_token_response(br#"{"access_token":"x","token_type":"mac"}"#),
            Err(TokenResponseError::NotBearer("mac".into()))
        );
        assert_eq!(
            parse_token_response(b"<html>"),
            Err(TokenResponseError::NotJson)
        );
        assert_eq!(
            parse_token_response(br#"{"token":"x"}"#),
            Err(TokenResponseError::NoToken)
        );
        assert_eq!(
            parse_token_response(br#"{"access_token":"a b"}"#),
            Err(TokenResponseError::BadToken)
        );
        assert_eq!(
            parse_token_response(br#"{"access_token":"x","expires_in":-5}"#),
            Err(TokenResponseError::BadExpiry)
        );
    }

    /// Issue 28: the forms real token servers send. `3600.0` was refused (the receiver
    /// unreachable) and `Long.MAX_VALUE` panicked the attempt when added to the clock.
    #[test]
    fn token_lifetimes_in_every_json_number_form() {
        let day = MAX_TOKEN_LIFETIME_SECONDS;
        for (expires_in, seconds) in [
            ("3600", 3600),
            ("3600.0", 3600),
            ("3.6e3", 3600),
            ("3600.9", 3600),
            ("0.5", 0),
            ("0", 0),
            ("\"3600.0\"", 3600),
            ("\" 90 \"", 90),
            ("9223372036854775807", day),
            ("18446744073709551616", day),
            ("1e300", day),
            ("1E+30", day),
        ] {
            let body = format!(r#"{{"access_token":"x","expires_in":{expires_in}}}"#);
            let t = parse_token_response(body.as_bytes())
                .unwrap_or_else(|e| panic!("{expires_in}: {e}"));
            assert_eq!(t.expires_in, Some(seconds), "{expires_in}");
            assert!(t.usable_seconds() <= day, "{expires_in}");
        }
        for bad in [
            "-1", "-0.5", "\"NaN\"", "\"inf\"", "\"soon\"", "\"\"", "true", "[]",
        ] {
            let body = format!(r#"{{"access_token":"x","expires_in":{bad}}}"#);
            assert_eq!(
                parse_token_response(body.as_bytes()),
                Err(TokenResponseError::BadExpiry),
                "{bad}"
            );
        }
        // A lifetime set by hand (not parsed) is clamped too.
        let forever = AccessToken {
            token: SecretValue::new("x"),
            expires_in: Some(u64::MAX),
        };
        assert_eq!(forever.usable_seconds(), day - TOKEN_REFRESH_MARGIN_SECONDS);
        assert_eq!(
            token_error_code(br#"{"error":"invalid_client","error_description":"no"}"#),
            Some("invalid_client".into())
        );
        assert_eq!(token_error_code(b"oops"), None);
    }

    #[test]
    fn stored_with_a_type_tag_and_no_secret_in_debug() {
        let a = ReceiverAuth::Oauth2ClientCredentials(grant());
        let v = serde_json::to_value(&a).unwrap();
        assert_eq!(v["type"], "oauth2_client_credentials");
        assert_eq!(v["client_auth"], "client_secret_basic");
        assert_eq!(serde_json::from_value::<ReceiverAuth>(v).unwrap(), a);
        assert_eq!(
            serde_json::to_value(ReceiverAuth::None).unwrap(),
            serde_json::json!({"type": "none"})
        );
        assert!(!format!("{a:?}").contains("s3cr"));
    }
}
