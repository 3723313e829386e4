//! An endpoint's receiver settings in the API (issue 28): custom headers (plain and secret),
//! authentication to the receiver (basic, bearer, OAuth2 client credentials) and the
//! signature schemes (`v1`, `v1a`, `both`). The request and answer bodies, and how a create
//! or a PATCH becomes the domain's values, checked with the domain's own rules
//! (`tern_core::custom_headers`, `tern_core::receiver_auth`), each refusal naming its field
//! (`headers[2].name`, `auth.token_url`).
//!
//! Secret values (a secret header's value, a basic password, a bearer token, an OAuth2
//! client secret) are write-only: they arrive as [`SecretValue`] (whose `Debug` is
//! redacted), are never in an answer or a log line, and a PATCH may leave them out to keep
//! the stored one ([`headers_of`], [`auth_of`] say exactly when).

use serde::{Deserialize, Deserializer, Serialize};
use tern_core::custom_headers::{self, CustomHeader as DomainHeader, FieldValue, HeaderError};
use tern_core::receiver_auth::{
    AuthError, ClientAuthMethod as DomainClientAuth, OAuth2ClientCredentials, ReceiverAuth,
};
use tern_core::{SecretValue, Signatures as DomainSignatures};
use utoipa::ToSchema;

use crate::problem::ApiError;

/// A custom header to send with every attempt, as a create or a PATCH gives it.
///
/// Names are case-insensitive (stored lowercase) RFC 9110 §5.6.2 tokens of 1-64 bytes.
/// Refused names: Tern's own (`webhook-*`, `idempotency-key`, `x-webhook-signature`,
/// `user-agent`, `content-type`: a receiver must be able to trust them), those the client
/// sets from the URL and the body (`host`, `content-length`, `content-encoding`,
/// `transfer-encoding`, `expect`), hop-by-hop ones (`connection`, `keep-alive`,
/// `proxy-connection`, `te`, `trailer`, `upgrade`, `http2-settings`,
/// `proxy-authorization`, `proxy-authenticate`), and `authorization` when the endpoint has
/// an `auth` of its own. At most 20 headers, 4,096 bytes of names and values together.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"name": "X-Api-Key", "value": "k-7Hq2...", "secret": true}))]
pub struct CustomHeaderSetting {
    /// The header's name: an RFC 9110 token of 1-64 bytes (letters, digits and
    /// ``!#$%&'*+-.^_`|~``), not one of the refused names.
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"
    )]
    pub name: String,
    /// The value: at most 2,048 bytes of visible ASCII, spaces and tabs inside only (RFC
    /// 9110 §5.5, no line breaks). Required, but for a secret header in a PATCH: left out
    /// (or `null`) there, the stored value of the secret header of this name is kept.
    #[serde(default)]
    #[schema(value_type = Option<String>, max_length = 2048, pattern = "^([!-~]+([ \t]+[!-~]+)*)?$")]
    pub value: Option<SecretValue>,
    /// True for a value that is never shown again (an API key): kept like a signing
    /// secret, sent marked sensitive, never logged; answers show it as `value: null`.
    #[serde(default)]
    pub secret: bool,
}

/// A custom header as the endpoint answers it: a secret one's value is never shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CustomHeader {
    /// The name, lowercase.
    pub name: String,
    /// The value of a plain header; `null` for a secret one.
    pub value: Option<String>,
    /// True when the value is secret (stored, never shown).
    pub secret: bool,
}

/// How the client id and secret go to the OAuth2 token endpoint (RFC 6749 §2.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ClientAuthMethod {
    /// HTTP Basic with the form-encoded client id and secret (the default).
    ClientSecretBasic,
    /// `client_id` and `client_secret` in the request body.
    ClientSecretPost,
}

impl From<ClientAuthMethod> for DomainClientAuth {
    fn from(m: ClientAuthMethod) -> Self {
        match m {
            ClientAuthMethod::ClientSecretBasic => Self::ClientSecretBasic,
            ClientAuthMethod::ClientSecretPost => Self::ClientSecretPost,
        }
    }
}

impl From<DomainClientAuth> for ClientAuthMethod {
    fn from(m: DomainClientAuth) -> Self {
        match m {
            DomainClientAuth::ClientSecretBasic => Self::ClientSecretBasic,
            DomainClientAuth::ClientSecretPost => Self::ClientSecretPost,
        }
    }
}

/// `none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuthNoneType {
    /// No authentication.
    None,
}

/// `basic`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuthBasicType {
    /// HTTP Basic.
    Basic,
}

/// `bearer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuthBearerType {
    /// A fixed bearer token.
    Bearer,
}

/// `oauth2_client_credentials`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuthOauth2ClientCredentialsType {
    /// An OAuth2 access token from the client credentials grant.
    Oauth2ClientCredentials,
}

/// No `authorization` header: the signatures authenticate the request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AuthNone {
    /// `none`.
    #[serde(rename = "type")]
    pub kind: AuthNoneType,
}

/// `authorization: Basic base64(username:password)` (RFC 7617).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AuthBasic {
    /// `basic`.
    #[serde(rename = "type")]
    pub kind: AuthBasicType,
    /// The user name: 1-1,024 bytes, no `:` (RFC 7617 §2), no control characters.
    #[schema(min_length = 1, max_length = 1024)]
    pub username: String,
    /// The password: at most 8,192 bytes, no control characters. Write-only. Required
    /// at creation; in a PATCH left out (or `null`) keeps the stored password when the
    /// stored authentication is `basic` with the same user name.
    #[serde(default)]
    #[schema(value_type = Option<String>, max_length = 8192, write_only)]
    pub password: Option<SecretValue>,
}

/// `authorization: Bearer <token>` with a fixed token (RFC 6750 §2.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AuthBearer {
    /// `bearer`.
    #[serde(rename = "type")]
    pub kind: AuthBearerType,
    /// The token: 1-8,192 bytes of visible ASCII without spaces. Write-only. Required at
    /// creation; in a PATCH left out (or `null`) keeps the stored token when the stored
    /// authentication is `bearer`.
    #[serde(default)]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 8192, pattern = "^[!-~]+$", write_only)]
    pub token: Option<SecretValue>,
}

/// `authorization: Bearer <access token>`, the token got from the receiver's token
/// endpoint with the client credentials grant (RFC 6749 §4.4), cached and refreshed by
/// the sender.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AuthOauth2ClientCredentials {
    /// `oauth2_client_credentials`.
    #[serde(rename = "type")]
    pub kind: AuthOauth2ClientCredentialsType,
    /// The token endpoint: an http(s) URL of at most 2,048 bytes without credentials,
    /// checked by the same SSRF guard as the endpoint's URL (no private, loopback,
    /// link-local or metadata address unless the deployment allows it).
    #[schema(max_length = 2048, pattern = "^[Hh][Tt][Tt][Pp][Ss]?://")]
    pub token_url: String,
    /// The client id: 1-1,024 bytes of printable ASCII.
    #[schema(min_length = 1, max_length = 1024, pattern = "^[ -~]+$")]
    pub client_id: String,
    /// The client secret: 1-8,192 bytes of printable ASCII. Write-only. Required at
    /// creation; in a PATCH left out (or `null`) keeps the stored secret when the stored
    /// authentication is `oauth2_client_credentials` with the same `token_url` and
    /// `client_id` (a secret never goes to another token endpoint or client unless it is
    /// given again).
    #[serde(default)]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 8192, pattern = "^[ -~]+$", write_only)]
    pub client_secret: Option<SecretValue>,
    /// Space-separated scopes (RFC 6749 §3.3), at most 1,024 bytes; none by default.
    #[serde(default)]
    #[schema(max_length = 1024, pattern = "^[!#-\\[\\]-~]+( [!#-\\[\\]-~]+)*$")]
    pub scope: Option<String>,
    /// The API the token is for, sent as `audience` (Auth0 and others require it):
    /// 1-1,024 bytes of printable ASCII; none by default.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 1024, pattern = "^[ -~]+$")]
    pub audience: Option<String>,
    /// How the client id and secret are sent; default `client_secret_basic`.
    #[serde(default)]
    pub client_auth: Option<ClientAuthMethod>,
}

/// Authentication to the receiver, as a create or a PATCH sets it, by `type`: `none`,
/// `basic`, `bearer` or `oauth2_client_credentials`. The whole setting is replaced; a
/// secret left out of a PATCH is kept only where its field says so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(untagged)]
#[schema(discriminator(property_name = "type", mapping(
    ("none" = "#/components/schemas/AuthNone"),
    ("basic" = "#/components/schemas/AuthBasic"),
    ("bearer" = "#/components/schemas/AuthBearer"),
    ("oauth2_client_credentials" = "#/components/schemas/AuthOauth2ClientCredentials")
)))]
pub enum ReceiverAuthSetting {
    /// `none`.
    None(AuthNone),
    /// `basic`.
    Basic(AuthBasic),
    /// `bearer`.
    Bearer(AuthBearer),
    /// `oauth2_client_credentials`.
    Oauth2ClientCredentials(AuthOauth2ClientCredentials),
}

/// The `type` names, in the order the document lists them.
pub const AUTH_TYPES: [&str; 4] = ["none", "basic", "bearer", "oauth2_client_credentials"];

impl<'de> Deserialize<'de> for ReceiverAuthSetting {
    /// By `type`, so that an error names the type (`auth.type`) or the field of that
    /// type (`auth.username`), never "did not match any variant".
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let value = serde_json::Value::deserialize(d)?;
        let kind = match value.get("type") {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(_) => return Err(D::Error::custom("`type` must be a string")),
            None => return Err(D::Error::missing_field("type")),
        };
        // serde_json's own messages: they name a missing or unknown field, and for a
        // value of the wrong type its type, never a string's text. A field inside is
        // named to the caller's path through `crate::extract::NESTED_FIELD`.
        fn read<T: serde::de::DeserializeOwned, E: serde::de::Error>(
            v: serde_json::Value,
        ) -> Result<T, E> {
            serde_path_to_error::deserialize(v).map_err(|e| {
                let path = e.path().to_string();
                let inner = e.into_inner();
                if path.is_empty() || path == "." {
                    E::custom(inner)
                } else {
                    E::custom(format!("{}{path}`: {inner}", crate::extract::NESTED_FIELD))
                }
            })
        }
        match kind.as_str() {
            "none" => read(value).map(Self::None),
            "basic" => read(value).map(Self::Basic),
            "bearer" => read(value).map(Self::Bearer),
            "oauth2_client_credentials" => read(value).map(Self::Oauth2ClientCredentials),
            other => Err(D::Error::custom(format!(
                "{}type`: unknown variant `{}`, expected one of {}",
                crate::extract::NESTED_FIELD,
                tern_core::sqs_text::clean(other, 40),
                AUTH_TYPES.map(|t| format!("`{t}`")).join(", ")
            ))),
        }
    }
}

/// The type of an endpoint's authentication.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReceiverAuthType {
    /// No `authorization` header.
    None,
    /// HTTP Basic.
    Basic,
    /// A fixed bearer token.
    Bearer,
    /// An OAuth2 access token from the client credentials grant.
    Oauth2ClientCredentials,
}

/// An endpoint's authentication as answered: every setting but its secret, which is only
/// named (`secret`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ReceiverAuthView {
    /// `none`, `basic`, `bearer` or `oauth2_client_credentials`.
    #[serde(rename = "type")]
    pub kind: ReceiverAuthType,
    /// Basic: the user name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// OAuth2: the token endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_url: Option<String>,
    /// OAuth2: the client id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// OAuth2: the scopes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// OAuth2: the audience.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
    /// OAuth2: how the client id and secret are sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_auth: Option<ClientAuthMethod>,
    /// Which secret the setting holds, never its value: `password`, `token` or
    /// `client_secret`; absent for `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

impl From<tern_ops::reach::AuthView> for ReceiverAuthView {
    fn from(v: tern_ops::reach::AuthView) -> Self {
        Self {
            kind: match v.kind {
                "basic" => ReceiverAuthType::Basic,
                "bearer" => ReceiverAuthType::Bearer,
                "oauth2_client_credentials" => ReceiverAuthType::Oauth2ClientCredentials,
                _ => ReceiverAuthType::None,
            },
            username: v.username,
            token_url: v.token_url,
            client_id: v.client_id,
            scope: v.scope,
            audience: v.audience,
            client_auth: v
                .client_auth
                .and_then(|m| m.parse::<DomainClientAuth>().ok().map(Into::into)),
            secret: v.secret.map(str::to_owned),
        }
    }
}

/// Which signature schemes `webhook-signature` carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Signatures {
    /// HMAC-SHA256 with the `whsec_` secrets (and `x-webhook-signature`): the default.
    V1,
    /// Ed25519 with the endpoint's signing key only: receivers verify with its public key
    /// (`signing_keys`), no HMAC signature is sent.
    V1a,
    /// Both, `v1` entries first.
    Both,
}

impl From<Signatures> for DomainSignatures {
    fn from(s: Signatures) -> Self {
        match s {
            Signatures::V1 => Self::V1,
            Signatures::V1a => Self::V1a,
            Signatures::Both => Self::Both,
        }
    }
}

impl From<DomainSignatures> for Signatures {
    fn from(s: DomainSignatures) -> Self {
        match s {
            DomainSignatures::V1 => Self::V1,
            DomainSignatures::V1a => Self::V1a,
            DomainSignatures::Both => Self::Both,
        }
    }
}

/// One Ed25519 signing key of an endpoint, by its public key (never the secret key).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SigningKeyInfo {
    /// `whpk_` and the base64 of the 32-byte Ed25519 public key: what the receiver
    /// verifies `v1a` signatures with.
    #[schema(pattern = "^whpk_[A-Za-z0-9+/]{43}=$")]
    pub public_key: String,
    /// `current` (signs, no expiry), `previous` (signs until `expires_at`) or `expired`.
    pub state: String,
    /// When it was added.
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// When it stops signing; `null` for the current key.
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl From<tern_ops::reach::SigningKeyView> for SigningKeyInfo {
    fn from(k: tern_ops::reach::SigningKeyView) -> Self {
        Self {
            public_key: k.public_key.to_string(),
            state: k.state.to_owned(),
            created_at: k.created_at,
            expires_at: k.expires_at,
        }
    }
}

impl From<tern_ops::reach::HeaderView> for CustomHeader {
    fn from(h: tern_ops::reach::HeaderView) -> Self {
        Self {
            name: h.name,
            value: h.value,
            secret: h.secret,
        }
    }
}

/// Rotating an endpoint's Ed25519 signing key.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateSigningKeyRequest {
    /// Hours the old key keeps signing `v1a` next to the new one, 0..=720 (default 24).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 720)]
    pub overlap_hours: Option<i64>,
}

/// A rotated signing key: give its public key to the receiver (it is no secret; the
/// endpoint's answers show it too).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RotatedSigningKey {
    /// The new public key (`whpk_...`); it signs `v1a` at once.
    #[schema(pattern = "^whpk_[A-Za-z0-9+/]{43}=$")]
    pub public_key: String,
    /// The endpoint after the rotation.
    pub endpoint: crate::model::Endpoint,
}

// ---------------------------------------------------------------- into the domain

/// The field a header refusal is about, in the list as given: `headers[i].name` or
/// `headers[i].value`, or the list itself for its size.
fn header_field(i: usize, e: &HeaderError) -> String {
    match e {
        HeaderError::BadName(_) | HeaderError::Forbidden { .. } | HeaderError::Duplicate(_) => {
            format!("headers[{i}].name")
        }
        HeaderError::BadValue(_) | HeaderError::EmptySecret(_) => format!("headers[{i}].value"),
        HeaderError::TooMany | HeaderError::TooLarge(_) => "headers".to_owned(),
    }
}

/// The custom headers `given` sets, checked as `tern endpoints add/update` checks them
/// (`tern_core::custom_headers`). `stored` are the endpoint's headers before a PATCH
/// (empty at creation): a secret entry without a value keeps the stored value of the
/// secret header of that name.
///
/// # Errors
/// A 400 naming the entry and field at fault (`headers[1].value`), or `headers` for the
/// list's count or size. Never repeats a value.
pub fn headers_of(
    given: &[CustomHeaderSetting],
    stored: &[DomainHeader],
    creating: bool,
) -> Result<Vec<DomainHeader>, ApiError> {
    if given.len() > custom_headers::MAX_CUSTOM_HEADERS {
        return Err(ApiError::invalid(
            "headers",
            HeaderError::TooMany.to_string(),
        ));
    }
    let mut out: Vec<DomainHeader> = Vec::with_capacity(given.len());
    for (i, h) in given.iter().enumerate() {
        let invalid = |e: HeaderError| ApiError::invalid(header_field(i, &e), e.to_string());
        let lower = custom_headers::header_name(&h.name).map_err(invalid)?;
        let value = match (&h.value, h.secret) {
            (Some(v), false) => FieldValue::Plain(v.expose().to_owned()),
            (Some(v), true) => FieldValue::Secret(v.clone()),
            (None, false) => {
                return Err(ApiError::invalid(
                    format!("headers[{i}].value"),
                    format!("the plain header {lower:?} needs a value"),
                ));
            }
            (None, true) => {
                let kept = (!creating)
                    .then(|| {
                        stored
                            .iter()
                            .find(|s| s.name == lower && s.value.is_secret())
                    })
                    .flatten();
                match kept {
                    Some(s) => s.value.clone(),
                    None => {
                        return Err(ApiError::invalid(
                            format!("headers[{i}].value"),
                            if creating {
                                format!("the secret header {lower:?} needs a value")
                            } else {
                                format!(
                                    "the secret header {lower:?} needs a value: the endpoint has no secret header of that name to keep"
                                )
                            },
                        ));
                    }
                }
            }
        };
        let header = DomainHeader::new(&lower, value).map_err(invalid)?;
        if out.iter().any(|o| o.name == header.name) {
            return Err(invalid(HeaderError::Duplicate(header.name)));
        }
        out.push(header);
    }
    custom_headers::validate(&out).map_err(|e| {
        let at = match &e {
            HeaderError::BadName(n) | HeaderError::Duplicate(n) | HeaderError::BadValue(n) => {
                out.iter().position(|h| &h.name == n)
            }
            _ => None,
        };
        match at {
            Some(i) => ApiError::invalid(header_field(i, &e), e.to_string()),
            None => ApiError::invalid("headers", e.to_string()),
        }
    })?;
    Ok(out)
}

/// The field of `auth` an [`AuthError`] is about.
fn auth_field(e: &AuthError) -> &'static str {
    match e {
        AuthError::BadUsername => "auth.username",
        AuthError::BadPassword => "auth.password",
        AuthError::BadToken => "auth.token",
        AuthError::BadTokenUrl(_) => "auth.token_url",
        AuthError::BadClientId => "auth.client_id",
        AuthError::BadClientSecret => "auth.client_secret",
        AuthError::BadScope => "auth.scope",
        AuthError::BadAudience => "auth.audience",
        AuthError::BadClientAuth(_) => "auth.client_auth",
        AuthError::BadType(_) => "auth.type",
    }
}

/// The secret of a setting, given or kept.
fn secret_or_kept(
    given: Option<&SecretValue>,
    kept: Option<&SecretValue>,
    field: &str,
    why_not_kept: &str,
) -> Result<SecretValue, ApiError> {
    given
        .or(kept)
        .cloned()
        .ok_or_else(|| ApiError::invalid(field, why_not_kept.to_owned()))
}

/// The authentication `given` sets, checked as `tern endpoints add/update` checks it
/// (`ReceiverAuth::validate`; the token URL's SSRF check is the caller's, with
/// `tern_ops::reach::check_auth`). `stored` is the endpoint's before a PATCH (`None` at
/// creation). A secret left out is kept from `stored` when it has the same type and, for
/// basic, the same user name, for OAuth2 the same token URL and client id; otherwise it
/// is required.
///
/// # Errors
/// A 400 naming the field (`auth.password`, `auth.token_url`, ...). Never repeats a
/// secret.
pub fn auth_of(
    given: &ReceiverAuthSetting,
    stored: Option<&ReceiverAuth>,
) -> Result<ReceiverAuth, ApiError> {
    let auth = match given {
        ReceiverAuthSetting::None(_) => ReceiverAuth::None,
        ReceiverAuthSetting::Basic(b) => {
            let kept = match stored {
                Some(ReceiverAuth::Basic { username, password }) if *username == b.username => {
                    Some(password)
                }
                _ => None,
            };
            ReceiverAuth::Basic {
                username: b.username.clone(),
                password: secret_or_kept(
                    b.password.as_ref(),
                    kept,
                    "auth.password",
                    if stored.is_some() {
                        "give the password: the endpoint has no basic authentication with this user name whose password could be kept"
                    } else {
                        "basic authentication needs a password"
                    },
                )?,
            }
        }
        ReceiverAuthSetting::Bearer(b) => {
            let kept = match stored {
                Some(ReceiverAuth::Bearer { token }) => Some(token),
                _ => None,
            };
            ReceiverAuth::Bearer {
                token: secret_or_kept(
                    b.token.as_ref(),
                    kept,
                    "auth.token",
                    if stored.is_some() {
                        "give the token: the endpoint has no bearer token to keep"
                    } else {
                        "bearer authentication needs a token"
                    },
                )?,
            }
        }
        ReceiverAuthSetting::Oauth2ClientCredentials(o) => {
            let kept = match stored {
                Some(ReceiverAuth::Oauth2ClientCredentials(g))
                    if g.token_url == o.token_url && g.client_id == o.client_id =>
                {
                    Some(&g.client_secret)
                }
                _ => None,
            };
            ReceiverAuth::Oauth2ClientCredentials(OAuth2ClientCredentials {
                token_url: o.token_url.clone(),
                client_id: o.client_id.clone(),
                client_secret: secret_or_kept(
                    o.client_secret.as_ref(),
                    kept,
                    "auth.client_secret",
                    if stored.is_some() {
                        "give the client secret: it is kept only while the token URL and the client id stay the same"
                    } else {
                        "OAuth2 client credentials need a client secret"
                    },
                )?,
                scope: o.scope.clone(),
                audience: o.audience.clone(),
                client_auth: o.client_auth.map(Into::into).unwrap_or_default(),
            })
        }
    };
    auth.validate()
        .map_err(|e| ApiError::invalid(auth_field(&e), e.to_string()))?;
    Ok(auth)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting(name: &str, value: Option<&str>, secret: bool) -> CustomHeaderSetting {
        CustomHeaderSetting {
            name: name.into(),
            value: value.map(SecretValue::new),
            secret,
        }
    }

    #[test]
    fn headers_name_the_entry_at_fault_and_keep_stored_secrets() {
        let ok = headers_of(
            &[
                setting("X-A", Some("1"), false),
                setting("x-k", Some("s3"), true),
            ],
            &[],
            true,
        )
        .unwrap();
        assert_eq!(ok[0].name, "x-a");
        assert!(ok[1].value.is_secret());
        for (given, field) in [
            (vec![setting("host", Some("x"), false)], "headers[0].name"),
            (
                vec![
                    setting("x-a", Some("1"), false),
                    setting("X-A", Some("2"), false),
                ],
                "headers[1].name",
            ),
            (vec![setting("x-a", Some("a\nb"), true)], "headers[0].value"),
            (vec![setting("x-a", None, false)], "headers[0].value"),
            (vec![setting("x-a", None, true)], "headers[0].value"),
            (vec![setting("x-a", Some(""), true)], "headers[0].value"),
        ] {
            let e = headers_of(&given, &[], true).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field), "{given:?}");
            assert!(!e.detail.contains("a\nb"));
        }
        let many: Vec<_> = (0..21)
            .map(|i| setting(&format!("x-{i}"), Some("v"), false))
            .collect();
        assert_eq!(
            headers_of(&many, &[], true).unwrap_err().field.as_deref(),
            Some("headers")
        );
        // A PATCH keeps the stored secret of the same name, and only a secret one.
        let stored = ok;
        let kept = headers_of(&[setting("X-K", None, true)], &stored, false).unwrap();
        assert_eq!(kept[0].value.expose(), "s3");
        assert!(headers_of(&[setting("x-a", None, true)], &stored, false).is_err());
        assert!(headers_of(&[setting("x-k", None, true)], &stored, true).is_err());
    }

    #[test]
    fn auth_keeps_a_secret_only_for_the_same_place_and_identity() {
        let basic = |u: &str, p: Option<&str>| {
            ReceiverAuthSetting::Basic(AuthBasic {
                kind: AuthBasicType::Basic,
                username: u.into(),
                password: p.map(SecretValue::new),
            })
        };
        assert_eq!(
            auth_of(&basic("u", None), None)
                .unwrap_err()
                .field
                .as_deref(),
            Some("auth.password")
        );
        let stored = auth_of(&basic("u", Some("pw")), None).unwrap();
        assert_eq!(auth_of(&basic("u", None), Some(&stored)).unwrap(), stored);
        assert_eq!(
            auth_of(&basic("v", None), Some(&stored))
                .unwrap_err()
                .field
                .as_deref(),
            Some("auth.password")
        );
        let oauth = |url: &str, secret: Option<&str>| {
            ReceiverAuthSetting::Oauth2ClientCredentials(AuthOauth2ClientCredentials {
                kind: AuthOauth2ClientCredentialsType::Oauth2ClientCredentials,
                token_url: url.into(),
                client_id: "c".into(),
                client_secret: secret.map(SecretValue::new),
                scope: Some("a b".into()),
                audience: None,
                client_auth: None,
            })
        };
        let stored = auth_of(&oauth("https://a.example/t", Some("cs")), None).unwrap();
        assert!(auth_of(&oauth("https://a.example/t", None), Some(&stored)).is_ok());
        assert_eq!(
            auth_of(&oauth("https://evil.example/t", None), Some(&stored))
                .unwrap_err()
                .field
                .as_deref(),
            Some("auth.client_secret")
        );
        assert_eq!(
            auth_of(&oauth("ftp://a.example/t", Some("cs")), None)
                .unwrap_err()
                .field
                .as_deref(),
            Some("auth.token_url")
        );
    }

    #[test]
    fn auth_is_read_by_type_and_names_the_field() {
        let read = |text: &str| crate::extract::from_json::<Wrapper>(text.as_bytes());
        #[derive(Deserialize)]
        #[allow(dead_code)]
        struct Wrapper {
            auth: ReceiverAuthSetting,
        }
        assert!(read(r#"{"auth":{"type":"bearer","token":"t"}}"#).is_ok());
        for (text, field) in [
            (r#"{"auth":{"type":"magic"}}"#, "auth.type"),
            (
                r#"{"auth":{"type":"oauth2_client_credentials","token_url":"u","client_id":"c","client_auth":"jwt"}}"#,
                "auth.client_auth",
            ),
            (r#"{"auth":{"token":"t"}}"#, "auth.type"),
            (
                r#"{"auth":{"type":"basic","password":"pw"}}"#,
                "auth.username",
            ),
            (r#"{"auth":{"type":"none","token":"pw"}}"#, "auth.token"),
            (r#"{"auth":{"type":"bearer","token":5}}"#, "auth.token"),
        ] {
            let e = read(text).err().unwrap();
            assert_eq!(e.field.as_deref(), Some(field), "{text}: {}", e.detail);
            assert!(!e.detail.contains("pw\""), "{}", e.detail);
        }
    }
}
