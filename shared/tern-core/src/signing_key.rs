//! Standard Webhooks asymmetric signatures (spec v1.0.0, "Signature scheme", the
//! Asymmetric column): Ed25519 (RFC 8032) over the same signed content as `v1`,
//! `"<webhook-id>.<webhook-timestamp>.<body>"`, sent as `v1a,<base64 signature>` entries
//! in `webhook-signature`.
//!
//! Keys are serialized as the spec asks: `whsk_` + base64 of the secret key, `whpk_` +
//! base64 of the public key. The secret key is the RFC 8032 §5.1.5 32-byte private key
//! (the seed); a 64-byte form (seed followed by its public key, as libsodium writes it)
//! is accepted when its halves agree. The secret key stays with Tern; the receiver gets
//! the public key and needs no secret at all.
//!
//! Which schemes an endpoint signs with is its [`Signatures`] setting: `v1` (HMAC, the
//! default), `v1a` (Ed25519 only) or `both`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use chrono::{DateTime, Utc};
use ed25519_dalek::Signer as _;
use serde::{Deserialize, Serialize};

/// Prefix of a serialized Ed25519 secret key.
pub const SIGNING_KEY_PREFIX: &str = "whsk_";
/// Prefix of a serialized Ed25519 public key.
pub const PUBLIC_KEY_PREFIX: &str = "whpk_";

/// Why a signing key is refused. Never repeats the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigningKeyError {
    /// It does not start with `whsk_`.
    #[error("signing key must start with \"whsk_\"")]
    MissingPrefix,
    /// The part after the prefix is not standard base64.
    #[error("signing key is not base64 after \"whsk_\"")]
    NotBase64,
    /// Not 32 bytes (or 64 with a matching public half).
    #[error("signing key is {0} bytes; Ed25519 secret keys are 32 (RFC 8032 §5.1.5)")]
    BadLength(usize),
    /// A 64-byte key whose second half is not the first half's public key.
    #[error("the 64-byte signing key's public half does not match its secret half")]
    Mismatch,
}

/// An endpoint's Ed25519 secret key (`whsk_` + base64). `Debug` is redacted; it has no
/// `Display`.
#[derive(Clone)]
pub struct SigningKey(ed25519_dalek::SigningKey);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey(whsk_***, {})", self.public_key())
    }
}

impl PartialEq for SigningKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bytes() == other.0.to_bytes()
    }
}

impl Eq for SigningKey {}

impl SigningKey {
    /// A new random key (32 bytes from the operating system's generator, through `rand`).
    pub fn generate() -> Self {
        let seed: [u8; 32] = rand::random();
        Self(ed25519_dalek::SigningKey::from_bytes(&seed))
    }

    /// Parses a `whsk_` key.
    ///
    /// # Errors
    /// [`SigningKeyError`].
    pub fn parse(text: &str) -> Result<Self, SigningKeyError> {
        let encoded = text
            .strip_prefix(SIGNING_KEY_PREFIX)
            .ok_or(SigningKeyError::MissingPrefix)?;
        let bytes = B64
            .decode(encoded)
            .map_err(|_| SigningKeyError::NotBase64)?;
        match bytes.len() {
            32 | 64 => {
                let mut seed = [0u8; 32];
                seed.copy_from_slice(&bytes[..32]);
                let key = ed25519_dalek::SigningKey::from_bytes(&seed);
                if bytes.len() == 64 && key.verifying_key().as_bytes()[..] != bytes[32..] {
                    return Err(SigningKeyError::Mismatch);
                }
                Ok(Self(key))
            }
            n => Err(SigningKeyError::BadLength(n)),
        }
    }

    /// The `whsk_...` text (32-byte form). For the store only; never log or show it.
    pub fn expose(&self) -> String {
        format!("{SIGNING_KEY_PREFIX}{}", B64.encode(self.0.to_bytes()))
    }

    /// The public key the receiver verifies with.
    pub fn public_key(&self) -> PublicKey {
        PublicKey(self.0.verifying_key().to_bytes())
    }

    /// `v1a,<base64 Ed25519 signature of "id.timestamp.body">`.
    pub fn sign_v1a(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut content = Vec::with_capacity(id.len() + 24 + body.len());
        content.extend_from_slice(id.as_bytes());
        content.push(b'.');
        content.extend_from_slice(timestamp.to_string().as_bytes());
        content.push(b'.');
        content.extend_from_slice(body);
        format!("v1a,{}", B64.encode(self.0.sign(&content).to_bytes()))
    }
}

impl Serialize for SigningKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.expose())
    }
}

impl<'de> Deserialize<'de> for SigningKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// An Ed25519 public key, shown as `whpk_` + base64 of its 32 bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey([u8; 32]);

impl PublicKey {
    /// The 32 bytes (RFC 8032 §5.1.5).
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl std::fmt::Display for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{PUBLIC_KEY_PREFIX}{}", B64.encode(self.0))
    }
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl Serialize for PublicKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One Ed25519 key of an endpoint. During a rotation the endpoint holds the new key and
/// the old one with an `expires_at`; both sign until then, like HMAC secrets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointSigningKey {
    /// The secret key.
    pub key: SigningKey,
    /// When it was added.
    pub created_at: DateTime<Utc>,
    /// When it stops signing; `None` while it is the current key.
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
}

/// Which signature schemes an endpoint's requests carry in `webhook-signature`.
/// Endpoints stored before this setting existed read as [`Signatures::V1`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signatures {
    /// HMAC-SHA256 with the `whsec_` secrets (and `x-webhook-signature`).
    #[default]
    V1,
    /// Ed25519 with the `whsk_` keys only: no HMAC signature is sent.
    V1a,
    /// Both, `v1` entries first.
    Both,
}

/// Why a signatures name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("signatures {0:?} is unknown: use \"v1\", \"v1a\" or \"both\"")]
pub struct SignaturesError(pub String);

impl Signatures {
    /// Every setting, the default first.
    pub const ALL: [Self; 3] = [Self::V1, Self::V1a, Self::Both];

    /// Its name: `v1`, `v1a` or `both`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V1 => "v1",
            Self::V1a => "v1a",
            Self::Both => "both",
        }
    }

    /// True when HMAC `v1` signatures are sent.
    pub fn v1(self) -> bool {
        matches!(self, Self::V1 | Self::Both)
    }

    /// True when Ed25519 `v1a` signatures are sent.
    pub fn v1a(self) -> bool {
        matches!(self, Self::V1a | Self::Both)
    }
}

impl std::fmt::Display for Signatures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl std::str::FromStr for Signatures {
    type Err = SignaturesError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let normal = s.trim().to_ascii_lowercase();
        Self::ALL
            .into_iter()
            .find(|x| x.as_str() == normal)
            .ok_or_else(|| SignaturesError(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::Verifier as _;

    #[test]
    fn keys_round_trip_and_never_print() {
        let k = SigningKey::generate();
        let text = k.expose();
        assert!(text.starts_with("whsk_"));
        assert_eq!(SigningKey::parse(&text).unwrap(), k);
        assert!(!format!("{k:?}").contains(&text[5..]));
        assert!(k.public_key().to_string().starts_with("whpk_"));
        let json = serde_json::to_string(&k).unwrap();
        assert_eq!(serde_json::from_str::<SigningKey>(&json).unwrap(), k);
    }

    #[test]
    fn the_64_byte_form_is_accepted_when_its_halves_agree() {
        let k = SigningKey::generate();
        let mut both = k.0.to_bytes().to_vec();
        both.extend_from_slice(k.public_key().as_bytes());
        let text = format!("whsk_{}", B64.encode(&both));
        assert_eq!(SigningKey::parse(&text).unwrap(), k);
        both[40] ^= 1;
        let text = format!("whsk_{}", B64.encode(&both));
        assert_eq!(SigningKey::parse(&text), Err(SigningKeyError::Mismatch));
        assert_eq!(
            SigningKey::parse("whsk_AAAA"),
            Err(SigningKeyError::BadLength(3))
        );
        assert_eq!(
            SigningKey::parse("whsec_AAAA"),
            Err(SigningKeyError::MissingPrefix)
        );
    }

    /// RFC 8032 §7.1, TEST 2: the one-byte message 0x72 under its key gives this signature.
    #[test]
    fn rfc_8032_test_vector() {
        let seed = hex::decode("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb")
            .unwrap();
        let k = SigningKey::parse(&format!("whsk_{}", B64.encode(&seed))).unwrap();
        assert_eq!(
            hex::encode(k.public_key().as_bytes()),
            "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c"
        );
        let sig = k.0.sign(&[0x72]);
        assert_eq!(
            hex::encode(sig.to_bytes()),
            "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da\
             085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"
        );
    }

    #[test]
    fn v1a_signs_id_timestamp_body() {
        let k = SigningKey::generate();
        let header = k.sign_v1a("msg_1", 1_700_000_000, b"{\"a\":1}");
        let b64 = header.strip_prefix("v1a,").unwrap();
        let sig = ed25519_dalek::Signature::from_slice(&B64.decode(b64).unwrap()).unwrap();
        let public = ed25519_dalek::VerifyingKey::from_bytes(k.public_key().as_bytes()).unwrap();
        assert!(public.verify(b"msg_1.1700000000.{\"a\":1}", &sig).is_ok());
        assert!(public.verify(b"msg_1.1700000001.{\"a\":1}", &sig).is_err());
    }

    #[test]
    fn signature_names() {
        for s in Signatures::ALL {
            assert_eq!(s.as_str().parse::<Signatures>(), Ok(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        assert!("v2".parse::<Signatures>().is_err());
        assert!(Signatures::Both.v1() && Signatures::Both.v1a());
        assert!(!Signatures::V1a.v1());
    }
}
