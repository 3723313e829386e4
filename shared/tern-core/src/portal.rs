//! The customer portal's grants: what a portal link and a portal session allow, signed so
//! that the portal can trust them without a lookup, and the ports behind their one-time
//! use and the portal's rate limits.
//!
//! An application mints a link for one tenant (`POST /v1/tenants/{id}/portal-sessions`):
//! a [`Grant`] signed for [`Purpose::Link`]. The first page load exchanges it, once
//! ([`PortalLedger::claim_link`]), for a cookie holding the same grant signed for
//! [`Purpose::Session`]. Both are `v1.<key id>.<grant>.<signature>`: the grant as
//! base64url JSON, the signature HMAC-SHA256 over the purpose and the grant with the key
//! the id names. A [`KeyRing`] holds the current key (which signs) and the previous ones
//! (which still verify), so a rotation of the key leaves live links and sessions valid.
//!
//! The tenant a portal page acts on is always the grant's: never a path's or a form's.

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::ports::PortError;
use crate::{EndpointId, TenantId};

/// Default life of a portal link and its session, seconds: 3600 (1 hour).
pub const DEFAULT_SESSION_SECONDS: i64 = 3600;

/// Longest life of a portal link and its session, seconds: 86,400 (24 hours).
pub const MAX_SESSION_SECONDS: i64 = 86_400;

/// Shortest life of a portal session, seconds: 60.
pub const MIN_SESSION_SECONDS: i64 = 60;

/// Most endpoints a session may be limited to: 20. The grant travels in a cookie, which
/// browsers keep to 4,096 bytes (RFC 6265 §6.1's minimum that every browser supports).
pub const MAX_SESSION_ENDPOINTS: usize = 20;

/// Most event types a session may offer for subscription: 50 (same cookie bound).
pub const MAX_SESSION_EVENT_TYPES: usize = 50;

/// Longest session cookie value, bytes: 3,800. Browsers keep a cookie's name and value up to
/// 4,096 bytes (RFC 6265 §6.1) and drop a longer one silently; this leaves room for the name.
pub const MAX_SESSION_TOKEN_BYTES: usize = 3800;

/// Longest logo URL, bytes: 512 (same cookie bound).
pub const MAX_LOGO_URL_BYTES: usize = 512;

/// Shortest signing key, bytes: 32 (HMAC-SHA256's output size; RFC 2104 §3 advises keys
/// no shorter than the output).
pub const MIN_KEY_BYTES: usize = 32;

/// What a grant is signed for: a link and a session never stand in for each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// The single-use link the API returns.
    Link,
    /// The cookie the link is exchanged for.
    Session,
}

impl Purpose {
    fn label(self) -> &'static str {
        match self {
            Self::Link => "tern-portal-link",
            Self::Session => "tern-portal-session",
        }
    }
}

/// A new session id: 16 random bytes, hex (128 bits: not guessable, and the key of the
/// link's one-time use).
pub fn new_session_id() -> String {
    let bytes: [u8; 16] = rand::random();
    format!("ps_{}", hex::encode(bytes))
}

/// What a portal session may see and do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The session's id (random): the link's one-time-use key, and what the CSRF token and
    /// the logs name.
    #[serde(rename = "sid")]
    pub session_id: String,
    /// The one tenant.
    #[serde(rename = "t")]
    pub tenant: TenantId,
    /// The endpoints it is limited to; `None` for all of the tenant's (and it may add some).
    #[serde(rename = "e", default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<Vec<EndpointId>>,
    /// No change of any kind, and no secret shown.
    #[serde(rename = "ro", default)]
    pub read_only: bool,
    /// End of the session, Unix seconds.
    #[serde(rename = "exp")]
    pub expires_at: i64,
    /// Brand colour, `#rrggbb`.
    #[serde(rename = "c", default, skip_serializing_if = "Option::is_none")]
    pub brand_color: Option<String>,
    /// Logo, an `https` URL.
    #[serde(rename = "l", default, skip_serializing_if = "Option::is_none")]
    pub logo_url: Option<String>,
    /// Event types the application sends, offered when adding an endpoint.
    #[serde(rename = "ty", default, skip_serializing_if = "Vec::is_empty")]
    pub event_types: Vec<String>,
}

impl Grant {
    /// True when the session may see `endpoint` (of its tenant).
    pub fn allows(&self, endpoint: &EndpointId) -> bool {
        self.endpoints
            .as_ref()
            .is_none_or(|list| list.contains(endpoint))
    }

    /// The end of the session.
    pub fn expires(&self) -> DateTime<Utc> {
        DateTime::from_timestamp(self.expires_at, 0).unwrap_or_default()
    }
}

/// Why a grant's settings were refused (the API answers 400 naming the field).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    /// Life out of range.
    #[error("expires_in_seconds must be {MIN_SESSION_SECONDS} to {MAX_SESSION_SECONDS}")]
    BadLife,
    /// Not `#rrggbb`.
    #[error("brand_color must be #rrggbb (six hex digits)")]
    BadColor,
    /// Not an acceptable logo URL.
    #[error("logo_url must be an https URL of at most {MAX_LOGO_URL_BYTES} bytes")]
    BadLogo,
    /// Too many endpoints, or none.
    #[error("endpoint_ids must list 1 to {MAX_SESSION_ENDPOINTS} endpoints")]
    BadEndpoints,
    /// Too many event types, or an invalid one.
    #[error("event_types must list at most {MAX_SESSION_EVENT_TYPES} valid event types")]
    BadEventTypes,
    /// Everything together does not fit in a cookie.
    #[error(
        "the session's endpoint_ids, event_types and logo_url together are too long for a browser cookie ({MAX_SESSION_TOKEN_BYTES} bytes); name fewer"
    )]
    TooLarge,
}

/// Checks a brand colour: `#` and six hex digits.
///
/// # Errors
/// [`GrantError::BadColor`].
pub fn check_color(color: &str) -> Result<(), GrantError> {
    let hex = color.strip_prefix('#').ok_or(GrantError::BadColor)?;
    if hex.len() == 6 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(())
    } else {
        Err(GrantError::BadColor)
    }
}

/// Checks a logo URL: `https`, a host, at most [`MAX_LOGO_URL_BYTES`], no quote,
/// whitespace or backslash (it lands in an attribute and in the CSP's `img-src`).
///
/// # Errors
/// [`GrantError::BadLogo`].
pub fn check_logo(url: &str) -> Result<url::Url, GrantError> {
    if url.len() > MAX_LOGO_URL_BYTES
        || url
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '"' | '\'' | '\\' | ';'))
    {
        return Err(GrantError::BadLogo);
    }
    let parsed = url::Url::parse(url).map_err(|_| GrantError::BadLogo)?;
    if parsed.scheme() != "https" || parsed.host_str().is_none() || !parsed.username().is_empty() {
        return Err(GrantError::BadLogo);
    }
    Ok(parsed)
}

/// One signing key.
#[derive(Clone, PartialEq, Eq)]
pub struct PortalKey {
    /// Its id, written in every token it signs (`[A-Za-z0-9_-]`, 1-32 characters).
    pub id: String,
    secret: Vec<u8>,
}

impl std::fmt::Debug for PortalKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortalKey")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// Why a key ring was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyRingError {
    /// The secret's text is not the expected JSON.
    #[error(
        "the portal key secret is not JSON of the form {{\"keys\":[{{\"id\":...,\"secret\":...}}]}}"
    )]
    NotJson,
    /// No key.
    #[error("the portal key secret holds no key")]
    Empty,
    /// A key id is invalid.
    #[error("portal key id {0:?} must be 1-32 characters of [A-Za-z0-9_-]")]
    BadId(String),
    /// A key is too short.
    #[error("portal key {0:?} is shorter than {MIN_KEY_BYTES} bytes")]
    Short(String),
}

impl PortalKey {
    /// A key.
    ///
    /// # Errors
    /// [`KeyRingError`] for a bad id or a short key.
    pub fn new(id: impl Into<String>, secret: impl Into<Vec<u8>>) -> Result<Self, KeyRingError> {
        let id = id.into();
        let secret = secret.into();
        if id.is_empty()
            || id.len() > 32
            || !id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(KeyRingError::BadId(id));
        }
        if secret.len() < MIN_KEY_BYTES {
            return Err(KeyRingError::Short(id));
        }
        Ok(Self { id, secret })
    }

    /// A new random key named `id`: 32 random bytes, as 64 hex characters.
    ///
    /// # Errors
    /// [`KeyRingError::BadId`].
    pub fn generate(id: impl Into<String>) -> Result<Self, KeyRingError> {
        let bytes: [u8; 32] = rand::random();
        Self::new(id, hex::encode(bytes).into_bytes())
    }

    fn mac(&self, purpose: Purpose, body: &str) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.secret)
            .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
        mac.update(purpose.label().as_bytes());
        mac.update(b"\n");
        mac.update(body.as_bytes());
        mac
    }
}

/// The keys: the first signs, every one verifies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRing {
    keys: Vec<PortalKey>,
}

#[derive(Serialize, Deserialize)]
struct StoredKey {
    id: String,
    secret: String,
}

#[derive(Serialize, Deserialize)]
struct StoredRing {
    keys: Vec<StoredKey>,
}

/// Keys a ring keeps after a rotation: 2 (the new one and the one before). A link or a
/// session lives at most [`MAX_SESSION_SECONDS`], so rotating at most once per day leaves
/// every live one valid.
pub const KEYS_KEPT: usize = 2;

impl KeyRing {
    /// A ring of `keys`, the first signing.
    ///
    /// # Errors
    /// [`KeyRingError::Empty`].
    pub fn new(keys: Vec<PortalKey>) -> Result<Self, KeyRingError> {
        if keys.is_empty() {
            return Err(KeyRingError::Empty);
        }
        Ok(Self { keys })
    }

    /// Reads the secret's text: `{"keys":[{"id":"k2","secret":"..."},{"id":"k1",...}]}`
    /// (newest first), or one key `{"id":"k1","secret":"..."}` (what the stacks generate
    /// at deployment).
    ///
    /// # Errors
    /// [`KeyRingError`].
    pub fn from_secret_text(text: &str) -> Result<Self, KeyRingError> {
        let stored = serde_json::from_str::<StoredRing>(text)
            .or_else(|_| {
                serde_json::from_str::<StoredKey>(text).map(|k| StoredRing { keys: vec![k] })
            })
            .map_err(|_| KeyRingError::NotJson)?;
        let keys = stored
            .keys
            .into_iter()
            .map(|k| PortalKey::new(k.id, k.secret.into_bytes()))
            .collect::<Result<Vec<_>, _>>()?;
        Self::new(keys)
    }

    /// The secret's text for this ring (the form [`Self::from_secret_text`] reads).
    pub fn to_secret_text(&self) -> String {
        let stored = StoredRing {
            keys: self
                .keys
                .iter()
                .map(|k| StoredKey {
                    id: k.id.clone(),
                    secret: String::from_utf8_lossy(&k.secret).into_owned(),
                })
                .collect(),
        };
        serde_json::to_string(&stored).unwrap_or_default()
    }

    /// The ring after a rotation: `new` signs, the current key still verifies, older
    /// ones are dropped ([`KEYS_KEPT`]).
    pub fn rotated(&self, new: PortalKey) -> Self {
        let mut keys = vec![new];
        keys.extend(self.keys.iter().take(KEYS_KEPT - 1).cloned());
        Self { keys }
    }

    /// The key that signs.
    pub fn current(&self) -> &PortalKey {
        &self.keys[0]
    }

    /// The key named `id`.
    pub fn key(&self, id: &str) -> Option<&PortalKey> {
        self.keys.iter().find(|k| k.id == id)
    }

    /// Signs `grant` for `purpose` with the current key.
    pub fn sign(&self, purpose: Purpose, grant: &Grant) -> String {
        let key = self.current();
        let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(grant).unwrap_or_default());
        let signed = format!("v1.{}.{body}", key.id);
        let sig = URL_SAFE_NO_PAD.encode(key.mac(purpose, &signed).finalize().into_bytes());
        format!("{signed}.{sig}")
    }

    /// The grant `token` carries, when a key of the ring signed it for `purpose` and it
    /// has not expired at `now`.
    ///
    /// # Errors
    /// [`TokenError`]; its text never repeats the token.
    pub fn verify(
        &self,
        purpose: Purpose,
        token: &str,
        now: DateTime<Utc>,
    ) -> Result<Grant, TokenError> {
        let mut parts = token.split('.');
        let (Some("v1"), Some(kid), Some(body), Some(sig), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(TokenError::Malformed);
        };
        let key = self.key(kid).ok_or(TokenError::UnknownKey)?;
        let sig = URL_SAFE_NO_PAD
            .decode(sig)
            .map_err(|_| TokenError::Malformed)?;
        key.mac(purpose, &format!("v1.{kid}.{body}"))
            .verify_slice(&sig)
            .map_err(|_| TokenError::BadSignature)?;
        let bytes = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| TokenError::Malformed)?;
        let grant: Grant = serde_json::from_slice(&bytes).map_err(|_| TokenError::Malformed)?;
        if grant.expires_at <= now.timestamp() {
            return Err(TokenError::Expired);
        }
        Ok(grant)
    }

    /// The session's CSRF token: HMAC of its id with the current key, base64url. Sent in
    /// every form; a state change without it is refused ([`Self::check_csrf`]).
    pub fn csrf_token(&self, session_id: &str) -> String {
        URL_SAFE_NO_PAD.encode(
            self.current()
                .mac(Purpose::Session, &format!("csrf\n{session_id}"))
                .finalize()
                .into_bytes(),
        )
    }

    /// True when `token` is the CSRF token of `session_id` under any key of the ring
    /// (compared in constant time).
    pub fn check_csrf(&self, session_id: &str, token: &str) -> bool {
        let Ok(sig) = URL_SAFE_NO_PAD.decode(token) else {
            return false;
        };
        self.keys.iter().any(|k| {
            k.mac(Purpose::Session, &format!("csrf\n{session_id}"))
                .verify_slice(&sig)
                .is_ok()
        })
    }
}

/// Why a link or a session cookie was refused. The portal shows one clear page for each
/// and no data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a token of this form.
    #[error("the link is not valid")]
    Malformed,
    /// Signed with a key this deployment does not hold (forged, or older than the ring).
    #[error("the link was not issued by this deployment, or its key was retired")]
    UnknownKey,
    /// The signature does not match: the token was changed.
    #[error("the link was altered")]
    BadSignature,
    /// Past its end.
    #[error("the link has expired")]
    Expired,
    /// The link was used already.
    #[error("the link was used already")]
    Used,
}

/// The portal's one-time uses and counters (a DynamoDB table with a TTL in AWS).
#[async_trait]
pub trait PortalLedger: Send + Sync {
    /// Records the first use of the link of session `session_id`: true the first time,
    /// false ever after (a conditional write). The record may be forgotten after
    /// `expires_at` (the link is refused as expired by then).
    async fn claim_link(
        &self,
        session_id: &str,
        expires_at: DateTime<Utc>,
    ) -> Result<bool, PortError>;

    /// True when the link of session `session_id` was used already ([`Self::claim_link`]
    /// recorded it): a read that changes nothing, for the page a `GET` of the link shows.
    async fn link_used(&self, session_id: &str) -> Result<bool, PortError>;

    /// Counts one use of `scope` (e.g. `sessions#<tenant>`) in the window of
    /// `window_seconds` that holds `now`: true when it is at most the `limit`-th of that
    /// window, false (and not counted) beyond. Shared by every instance of the function.
    async fn take(
        &self,
        scope: &str,
        limit: u32,
        window_seconds: u32,
        now: DateTime<Utc>,
    ) -> Result<bool, PortError>;
}

/// Where the portal's key ring comes from (Secrets Manager in AWS).
#[async_trait]
pub trait PortalKeySource: Send + Sync {
    /// The ring as it is now (an implementation may cache it for a short time).
    async fn ring(&self) -> Result<KeyRing, PortError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(exp: i64) -> Grant {
        Grant {
            session_id: "s1".into(),
            tenant: TenantId::new("tnt_a").unwrap(),
            endpoints: Some(vec![EndpointId::new("ep_a").unwrap()]),
            read_only: false,
            expires_at: exp,
            brand_color: Some("#112233".into()),
            logo_url: None,
            event_types: vec!["order.paid".into()],
        }
    }

    fn ring(id: &str, fill: u8) -> KeyRing {
        KeyRing::new(vec![PortalKey::new(id, vec![fill; 32]).unwrap()]).unwrap()
    }

    #[test]
    fn a_signed_grant_verifies_for_its_purpose_only() {
        let now = Utc::now();
        let r = ring("k1", 1);
        let g = grant(now.timestamp() + 60);
        let link = r.sign(Purpose::Link, &g);
        assert_eq!(r.verify(Purpose::Link, &link, now).unwrap(), g);
        assert_eq!(
            r.verify(Purpose::Session, &link, now).unwrap_err(),
            TokenError::BadSignature,
            "a link is not a session cookie"
        );
        assert_eq!(
            r.verify(Purpose::Link, &link, now + chrono::Duration::seconds(61))
                .unwrap_err(),
            TokenError::Expired
        );
        assert_eq!(
            ring("k1", 2).verify(Purpose::Link, &link, now).unwrap_err(),
            TokenError::BadSignature,
            "another deployment's key"
        );
        assert_eq!(
            ring("k9", 1).verify(Purpose::Link, &link, now).unwrap_err(),
            TokenError::UnknownKey
        );
    }

    #[test]
    fn a_changed_grant_is_refused() {
        let now = Utc::now();
        let r = ring("k1", 1);
        let link = r.sign(Purpose::Link, &grant(now.timestamp() + 60));
        let parts: Vec<&str> = link.split('.').collect();
        let mut other = grant(now.timestamp() + 60);
        other.tenant = TenantId::new("tnt_b").unwrap();
        let forged_body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&other).unwrap());
        let forged = format!("v1.k1.{forged_body}.{}", parts[3]);
        assert_eq!(
            r.verify(Purpose::Link, &forged, now).unwrap_err(),
            TokenError::BadSignature
        );
        assert_eq!(
            r.verify(Purpose::Link, "v1.k1.x", now).unwrap_err(),
            TokenError::Malformed
        );
    }

    #[test]
    fn a_rotation_keeps_live_grants_valid_and_retires_the_oldest() {
        let now = Utc::now();
        let first = ring("k1", 1);
        let old = first.sign(Purpose::Session, &grant(now.timestamp() + 60));
        let csrf = first.csrf_token("s1");
        let second = first.rotated(PortalKey::new("k2", vec![2; 32]).unwrap());
        assert_eq!(second.current().id, "k2");
        assert!(second.verify(Purpose::Session, &old, now).is_ok());
        assert!(second.check_csrf("s1", &csrf));
        assert!(!second.check_csrf("s2", &csrf));
        let third = second.rotated(PortalKey::new("k3", vec![3; 32]).unwrap());
        assert_eq!(
            third.verify(Purpose::Session, &old, now).unwrap_err(),
            TokenError::UnknownKey
        );
        let text = third.to_secret_text();
        assert_eq!(KeyRing::from_secret_text(&text).unwrap(), third);
    }

    #[test]
    fn the_stacks_generated_secret_reads_as_one_key() {
        let ring = KeyRing::from_secret_text(
            r#"{"id":"k1","secret":"abcdefghijklmnopqrstuvwxyz0123456789ABCDEF"}"#,
        )
        .unwrap();
        assert_eq!(ring.current().id, "k1");
        assert_eq!(
            KeyRing::from_secret_text(r#"{"id":"k1","secret":"short"}"#).unwrap_err(),
            KeyRingError::Short("k1".into())
        );
        assert!(!format!("{ring:?}").contains("abcdefgh"), "never printed");
    }

    #[test]
    fn brand_settings_are_checked() {
        assert!(check_color("#0a0B0c").is_ok());
        for bad in ["0a0b0c", "#0a0b0", "#0a0b0g", "red", "#0a0b0c;x"] {
            assert!(check_color(bad).is_err(), "{bad}");
        }
        assert!(check_logo("https://app.example/logo.svg").is_ok());
        for bad in [
            "http://app.example/logo.svg",
            "javascript:alert(1)",
            "https://app.example/a b",
            "https://app.example/\"onerror=x",
            "data:image/png;base64,AAAA",
        ] {
            assert!(check_logo(bad).is_err(), "{bad}");
        }
    }
}
