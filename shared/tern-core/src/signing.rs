//! Standard Webhooks v1 signing (spec v1.0.0, "Signature scheme") plus Tern's two extra
//! headers.
//!
//! The signed content is `"<webhook-id>.<webhook-timestamp>.<body>"`, the key is the
//! base64-decoded part of a `whsec_` secret, the MAC is HMAC-SHA256, and the header value
//! is `v1,<base64 MAC>`, one space-separated entry per active secret.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::ids::EventId;

type HmacSha256 = Hmac<Sha256>;

/// Prefix of a Standard Webhooks HMAC secret.
pub const SECRET_PREFIX: &str = "whsec_";
/// Shortest key, in bytes (Standard Webhooks spec: secrets are 24-64 random bytes).
pub const MIN_SECRET_BYTES: usize = 24;
/// Longest key, in bytes (same source).
pub const MAX_SECRET_BYTES: usize = 64;

/// Header names Tern sends. Lowercase, as HTTP/2 requires and HTTP/1.1 allows.
pub mod header {
    /// Standard Webhooks message id: the event id.
    pub const WEBHOOK_ID: &str = "webhook-id";
    /// Standard Webhooks timestamp: integer Unix seconds, fresh per attempt.
    pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
    /// Standard Webhooks signatures: `v1,<base64>` entries separated by spaces.
    pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";
    /// The event id again, for receivers that dedupe on a generic idempotency header.
    pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
    /// `sha256=<hex HMAC-SHA256 of the body>` for receivers that only check the body.
    pub const X_WEBHOOK_SIGNATURE: &str = "x-webhook-signature";
    /// The event type (`order.paid`), on every request whatever the payload format, so a
    /// receiver of raw payloads can route without parsing the body. Not covered by any
    /// signature. Named in the `webhook-` family of the Standard Webhooks headers, like
    /// Hookdeck Outpost's `webhook-topic` in its Standard Webhooks mode; GitHub sends
    /// `X-GitHub-Event` for the same purpose (and RFC 6648 advises against new `X-` names).
    pub const WEBHOOK_EVENT_TYPE: &str = "webhook-event-type";
}

/// Why a secret is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// The secret does not start with `whsec_`.
    #[error("secret must start with \"whsec_\"")]
    MissingPrefix,
    /// The part after the prefix is not standard base64.
    #[error("secret is not base64 after \"whsec_\"")]
    NotBase64,
    /// The decoded key is shorter than 24 or longer than 64 bytes.
    #[error("secret key is {0} bytes; Standard Webhooks requires 24 to 64")]
    BadLength(usize),
}

/// An endpoint's signing secret (`whsec_` + base64 of 24-64 bytes). Its `Debug` output
/// is redacted, so the secret cannot leak through a log of a struct that holds it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Secret {
    text: String,
    key: Vec<u8>,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(whsec_***)")
    }
}

impl Secret {
    /// Parses and validates a `whsec_` secret.
    ///
    /// # Errors
    /// [`SecretError`] saying which rule is broken; the message never repeats the secret.
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        let encoded = text
            .strip_prefix(SECRET_PREFIX)
            .ok_or(SecretError::MissingPrefix)?;
        let key = B64.decode(encoded).map_err(|_| SecretError::NotBase64)?;
        if !(MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&key.len()) {
            return Err(SecretError::BadLength(key.len()));
        }
        Ok(Self {
            text: text.to_owned(),
            key,
        })
    }

    /// A new random secret of 32 bytes.
    pub fn generate() -> Self {
        let key: [u8; 32] = rand::random();
        Self {
            text: format!("{SECRET_PREFIX}{}", B64.encode(key)),
            key: key.to_vec(),
        }
    }

    /// The `whsec_...` text. Show it to the endpoint's owner once; never log it.
    pub fn expose(&self) -> &str {
        &self.text
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC accepts keys of any length, so this cannot fail.
        HmacSha256::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes any key length"))
    }

    /// `v1,<base64 HMAC-SHA256(key, "id.timestamp.body")>`.
    pub fn sign_v1(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut mac = self.mac();
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", B64.encode(mac.finalize().into_bytes()))
    }

    /// `sha256=<hex HMAC-SHA256(key, body)>`, for the `X-Webhook-Signature` header.
    pub fn sign_body_hex(&self, body: &[u8]) -> String {
        let mut mac = self.mac();
        mac.update(body);
        format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
    }
}

impl TryFrom<String> for Secret {
    type Error = SecretError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<Secret> for String {
    fn from(s: Secret) -> String {
        s.text
    }
}

/// The signature headers of one attempt, as `(name, value)` pairs in a fixed order.
///
/// `secrets` are the endpoint's active secrets, newest first; each yields one
/// `webhook-signature` entry and one `x-webhook-signature` entry (joined by `", "`), so
/// receivers holding either key verify during a rotation. `timestamp` is integer Unix
/// seconds (never milliseconds).
pub fn signature_headers(
    id: &EventId,
    timestamp: i64,
    body: &[u8],
    secrets: &[&Secret],
) -> Vec<(&'static str, String)> {
    let v1: Vec<String> = secrets
        .iter()
        .map(|s| s.sign_v1(id.as_str(), timestamp, body))
        .collect();
    let hex: Vec<String> = secrets.iter().map(|s| s.sign_body_hex(body)).collect();
    vec![
        (header::WEBHOOK_ID, id.to_string()),
        (header::WEBHOOK_TIMESTAMP, timestamp.to_string()),
        (header::WEBHOOK_SIGNATURE, v1.join(" ")),
        (header::IDEMPOTENCY_KEY, id.to_string()),
        (header::X_WEBHOOK_SIGNATURE, hex.join(", ")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_rules() {
        assert_eq!(
            Secret::parse("abc").unwrap_err(),
            SecretError::MissingPrefix
        );
        assert_eq!(
            Secret::parse("whsec_!!").unwrap_err(),
            SecretError::NotBase64
        );
        assert_eq!(
            Secret::parse("whsec_AAAA").unwrap_err(),
            SecretError::BadLength(3)
        );
        let s = Secret::generate();
        assert_eq!(Secret::parse(s.expose()).unwrap(), s);
        assert!(!format!("{s:?}").contains(&s.expose()[6..]));
    }

    #[test]
    fn rotation_signs_with_every_secret() {
        let (a, b) = (Secret::generate(), Secret::generate());
        let id = EventId::new("evt_x").unwrap();
        let h = signature_headers(&id, 1, b"{}", &[&a, &b]);
        let sig = &h[2].1;
        assert_eq!(sig.split(' ').count(), 2);
        assert!(sig.starts_with(&a.sign_v1("evt_x", 1, b"{}")));
    }
}
