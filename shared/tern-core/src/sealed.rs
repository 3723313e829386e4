//! Secrets at rest: envelope encryption of the credentials an endpoint item holds (its
//! `whsec_` signing secrets, `whsk_` Ed25519 keys, secret header values, basic
//! passwords, bearer tokens and OAuth2 client secrets), and of the API answers an
//! idempotency record keeps for retries (`crate::idempotency`: a new secret, a portal link).
//!
//! Each value is encrypted with AES-256-GCM under a 256-bit data key that a key service
//! (KMS `GenerateDataKey` in AWS, [`DataKeys`]) made for one endpoint: the service's
//! encryption context and the GCM associated data both name the tenant and the endpoint
//! ([`SealContext`]), so a value copied into another endpoint's item does not open. The
//! wrapped (encrypted) data key travels inside every value it sealed, so a value is
//! self-contained: a write seals all the values it writes under one fresh data key, and
//! a later write of other fields never needs the earlier key.
//!
//! Stored text: `tern1.<wrapped key>.<nonce>.<ciphertext and tag>`, each part standard
//! base64. This module is the pure part; where the values sit in the item and who may
//! open them is the endpoint store's (`tern_aws::sealed_item`).

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use crate::ids::{EndpointId, TenantId};

/// First part of a sealed value's text: the format's name and version.
pub const SEALED_PREFIX: &str = "tern1";

/// Length of a data key, in bytes: 32 (AES-256; KMS `GenerateDataKey` with
/// `KeySpec=AES_256`).
pub const DATA_KEY_BYTES: usize = 32;

/// Length of a GCM nonce, in bytes: 12, the 96-bit IV that NIST SP 800-38D §8.2.2 (random
/// IV construction) recommends. Random per value; a data key seals at most a few dozen
/// values (one write), far below the 2^32 random-IV limit of §8.3.
pub const NONCE_BYTES: usize = 12;

/// Length of a GCM tag, in bytes: 16.
pub const TAG_BYTES: usize = 16;

/// Longest wrapped data key accepted, in bytes: 6,144 (KMS `CiphertextBlob`'s maximum,
/// API reference `Decrypt`).
pub const MAX_WRAPPED_KEY_BYTES: usize = 6_144;

/// Encryption context key naming the tenant.
pub const CONTEXT_TENANT: &str = "tern:tenant_id";
/// Encryption context key naming the endpoint.
pub const CONTEXT_ENDPOINT: &str = "tern:endpoint_id";
/// Encryption context key naming an idempotency record (a stored API answer).
pub const CONTEXT_IDEMPOTENCY_RECORD: &str = "tern:idempotency_record";

/// Why a value could not be sealed or opened. Never carries the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The key service did not answer in time, throttled, or failed: our failure,
    /// retry later. Never the receiver's.
    #[error("key service unavailable: {0}")]
    Unavailable(String),
    /// The key service refuses (access denied, the key disabled or pending deletion):
    /// a deployment problem, retrying alone does not help.
    #[error("key service refused: {0}")]
    Refused(String),
    /// The value was sealed for another endpoint, or was altered: the key service did
    /// not unwrap its data key under this endpoint's context (KMS
    /// `InvalidCiphertextException`), or the GCM tag does not match.
    #[error(
        "a sealed secret does not open for this endpoint: it was sealed for another one, or altered"
    )]
    WrongEndpoint,
    /// Not a sealed value of a known format.
    #[error("a sealed secret is malformed: {0}")]
    Malformed(&'static str),
    /// A sealed value, and no key service to open it with.
    #[error("the endpoint holds sealed secrets and this process has no key to open them")]
    NoKey,
}

impl SealError {
    /// True when trying again later may succeed (the key service's outage).
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}

/// What a data key is bound to: one endpoint of one tenant, or one stored API answer of
/// one tenant (an idempotency record, `crate::idempotency`). The key service's encryption
/// context and the GCM associated data.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SealContext {
    /// The tenant.
    pub tenant: TenantId,
    /// What of the tenant's the sealed values belong to.
    pub subject: SealSubject,
}

/// The thing of a tenant's that sealed values belong to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SealSubject {
    /// An endpoint: its signing secrets, keys and receiver credentials.
    Endpoint(EndpointId),
    /// An idempotency record: the API answer it keeps for a retry. The text is the
    /// record's id (hex of the key's SHA-256, `crate::idempotency::RecordKey`).
    IdempotencyRecord(String),
}

impl SealContext {
    /// The context of `endpoint` of `tenant`.
    pub fn new(tenant: &TenantId, endpoint: &EndpointId) -> Self {
        Self {
            tenant: tenant.clone(),
            subject: SealSubject::Endpoint(endpoint.clone()),
        }
    }

    /// The context of `tenant`'s idempotency record `record` (its id, never the key).
    pub fn idempotency_record(tenant: &TenantId, record: &str) -> Self {
        Self {
            tenant: tenant.clone(),
            subject: SealSubject::IdempotencyRecord(record.to_owned()),
        }
    }

    /// The endpoint, when the context is an endpoint's.
    pub fn endpoint(&self) -> Option<&EndpointId> {
        match &self.subject {
            SealSubject::Endpoint(e) => Some(e),
            SealSubject::IdempotencyRecord(_) => None,
        }
    }

    /// The encryption context pairs: ([`CONTEXT_TENANT`], and [`CONTEXT_ENDPOINT`] or
    /// [`CONTEXT_IDEMPOTENCY_RECORD`]).
    pub fn pairs(&self) -> [(&'static str, String); 2] {
        let subject = match &self.subject {
            SealSubject::Endpoint(e) => (CONTEXT_ENDPOINT, e.to_string()),
            SealSubject::IdempotencyRecord(r) => (CONTEXT_IDEMPOTENCY_RECORD, r.clone()),
        };
        [(CONTEXT_TENANT, self.tenant.to_string()), subject]
    }

    /// The GCM associated data: the format, the tenant and the endpoint, NUL-separated
    /// (ids never hold NUL); for a record, `idempotency` and its id after the tenant (one
    /// NUL more, so it never equals an endpoint's).
    fn aad(&self) -> Vec<u8> {
        match &self.subject {
            SealSubject::Endpoint(e) => format!("{SEALED_PREFIX}\0{}\0{e}", self.tenant),
            SealSubject::IdempotencyRecord(r) => {
                format!("{SEALED_PREFIX}\0{}\0idempotency\0{r}", self.tenant)
            }
        }
        .into_bytes()
    }
}

/// A data key's plaintext. `Debug` is redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct PlainKey([u8; DATA_KEY_BYTES]);

impl std::fmt::Debug for PlainKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PlainKey(***)")
    }
}

impl PlainKey {
    /// Wraps key bytes.
    ///
    /// # Errors
    /// [`SealError::Malformed`] unless exactly [`DATA_KEY_BYTES`] long.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, SealError> {
        let key: [u8; DATA_KEY_BYTES] = bytes
            .try_into()
            .map_err(|_| SealError::Malformed("data key is not 32 bytes"))?;
        Ok(Self(key))
    }

    fn cipher(&self) -> Aes256Gcm {
        Aes256Gcm::new(&self.0.into())
    }
}

/// A fresh data key: its plaintext, to seal with, and its wrapped form, to store.
#[derive(Debug, Clone)]
pub struct DataKey {
    /// The key.
    pub plain: PlainKey,
    /// The key as the key service encrypted it (KMS `CiphertextBlob`).
    pub wrapped: Vec<u8>,
}

/// The key service: makes data keys for an endpoint and unwraps them again. In AWS,
/// KMS with the stack's key (`tern_aws::kms::KmsDataKeys`).
#[async_trait]
pub trait DataKeys: Send + Sync {
    /// A fresh data key bound to `context`.
    ///
    /// # Errors
    /// [`SealError::Unavailable`] or [`SealError::Refused`].
    async fn generate(&self, context: &SealContext) -> Result<DataKey, SealError>;

    /// The plaintext of `wrapped`, which unwraps only under the context it was made for.
    ///
    /// # Errors
    /// [`SealError::WrongEndpoint`] for another context or an altered key;
    /// [`SealError::Unavailable`] or [`SealError::Refused`].
    async fn unwrap(&self, wrapped: &[u8], context: &SealContext) -> Result<PlainKey, SealError>;
}

/// A sealed value, parsed from its stored text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    wrapped: Vec<u8>,
    nonce: [u8; NONCE_BYTES],
    ciphertext: Vec<u8>,
}

impl Sealed {
    /// Parses `tern1.<wrapped>.<nonce>.<ciphertext>`.
    ///
    /// # Errors
    /// [`SealError::Malformed`].
    pub fn parse(text: &str) -> Result<Self, SealError> {
        let mut parts = text.split('.');
        if parts.next() != Some(SEALED_PREFIX) {
            return Err(SealError::Malformed("not a tern1 sealed value"));
        }
        let mut part = |what: &'static str| {
            parts
                .next()
                .ok_or(SealError::Malformed(what))
                .and_then(|p| B64.decode(p).map_err(|_| SealError::Malformed(what)))
        };
        let wrapped = part("wrapped key missing or not base64")?;
        let nonce = part("nonce missing or not base64")?;
        let ciphertext = part("ciphertext missing or not base64")?;
        if parts.next().is_some() {
            return Err(SealError::Malformed("more than four parts"));
        }
        if wrapped.is_empty() || wrapped.len() > MAX_WRAPPED_KEY_BYTES {
            return Err(SealError::Malformed("wrapped key length out of range"));
        }
        let nonce: [u8; NONCE_BYTES] = nonce
            .as_slice()
            .try_into()
            .map_err(|_| SealError::Malformed("nonce is not 12 bytes"))?;
        if ciphertext.len() < TAG_BYTES {
            return Err(SealError::Malformed("ciphertext shorter than its tag"));
        }
        Ok(Self {
            wrapped,
            nonce,
            ciphertext,
        })
    }

    /// The wrapped data key it was sealed under.
    pub fn wrapped_key(&self) -> &[u8] {
        &self.wrapped
    }

    /// The stored text.
    pub fn to_text(&self) -> String {
        format!(
            "{SEALED_PREFIX}.{}.{}.{}",
            B64.encode(&self.wrapped),
            B64.encode(self.nonce),
            B64.encode(&self.ciphertext)
        )
    }

    /// Seals `plaintext` under `key` for `context`, with a random nonce.
    ///
    /// # Errors
    /// [`SealError::Malformed`] if the cipher refuses the input (longer than GCM's
    /// 2^36 - 32 bytes, SP 800-38D §5.2.1.1: never for an endpoint's values).
    pub fn seal(key: &DataKey, context: &SealContext, plaintext: &str) -> Result<Self, SealError> {
        let nonce: [u8; NONCE_BYTES] = rand::random();
        let ciphertext = key
            .plain
            .cipher()
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: plaintext.as_bytes(),
                    aad: &context.aad(),
                },
            )
            .map_err(|_| SealError::Malformed("value too long to seal"))?;
        Ok(Self {
            wrapped: key.wrapped.clone(),
            nonce,
            ciphertext,
        })
    }

    /// The plaintext, with `key` (the unwrapped [`Self::wrapped_key`]) for `context`.
    ///
    /// # Errors
    /// [`SealError::WrongEndpoint`] when the tag does not match (another endpoint's
    /// value, or altered); [`SealError::Malformed`] when it is not UTF-8.
    pub fn open(&self, key: &PlainKey, context: &SealContext) -> Result<String, SealError> {
        let plain = key
            .cipher()
            .decrypt(
                Nonce::from_slice(&self.nonce),
                Payload {
                    msg: &self.ciphertext,
                    aad: &context.aad(),
                },
            )
            .map_err(|_| SealError::WrongEndpoint)?;
        String::from_utf8(plain).map_err(|_| SealError::Malformed("plaintext is not UTF-8"))
    }
}

/// A [`DataKeys`] without a key service, for tests and benchmarks of code that seals:
/// wraps data keys with AES-256-GCM under a master key it holds, the context as
/// associated data (so, like KMS, a key wraps open only under their own context).
/// Counts its calls. Never use it to protect anything.
#[derive(Debug)]
pub struct InMemoryDataKeys {
    master: PlainKey,
    /// `generate` calls so far.
    pub generated: std::sync::atomic::AtomicUsize,
    /// `unwrap` calls so far.
    pub unwrapped: std::sync::atomic::AtomicUsize,
}

impl Default for InMemoryDataKeys {
    fn default() -> Self {
        Self {
            master: PlainKey(rand::random()),
            generated: std::sync::atomic::AtomicUsize::new(0),
            unwrapped: std::sync::atomic::AtomicUsize::new(0),
        }
    }
}

#[async_trait]
impl DataKeys for InMemoryDataKeys {
    async fn generate(&self, context: &SealContext) -> Result<DataKey, SealError> {
        use std::sync::atomic::Ordering;
        self.generated.fetch_add(1, Ordering::Relaxed);
        let plain = PlainKey(rand::random());
        let master = DataKey {
            plain: self.master.clone(),
            wrapped: Vec::new(),
        };
        let sealed = Sealed::seal(&master, context, &B64.encode(plain.0))?;
        let mut wrapped = sealed.nonce.to_vec();
        wrapped.extend_from_slice(&sealed.ciphertext);
        Ok(DataKey { plain, wrapped })
    }

    async fn unwrap(&self, wrapped: &[u8], context: &SealContext) -> Result<PlainKey, SealError> {
        use std::sync::atomic::Ordering;
        self.unwrapped.fetch_add(1, Ordering::Relaxed);
        if wrapped.len() < NONCE_BYTES + TAG_BYTES {
            return Err(SealError::WrongEndpoint);
        }
        let (nonce, ciphertext) = wrapped.split_at(NONCE_BYTES);
        let sealed = Sealed {
            wrapped: Vec::new(),
            nonce: nonce.try_into().map_err(|_| SealError::WrongEndpoint)?,
            ciphertext: ciphertext.to_vec(),
        };
        let text = sealed.open(&self.master, context)?;
        PlainKey::from_slice(
            &B64.decode(text)
                .map_err(|_| SealError::Malformed("wrapped key"))?,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(endpoint: &str) -> SealContext {
        SealContext::new(
            &TenantId::new("tnt_a").unwrap(),
            &EndpointId::new(endpoint).unwrap(),
        )
    }

    #[tokio::test]
    async fn a_value_opens_for_its_endpoint_only() {
        let keys = InMemoryDataKeys::default();
        let here = ctx("ep_1");
        let key = keys.generate(&here).await.unwrap();
        let sealed = Sealed::seal(&key, &here, "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQ=").unwrap();
        let text = sealed.to_text();
        assert!(text.starts_with("tern1."));
        assert!(!text.contains("c2VjcmV0"), "no plaintext in {text}");
        let back = Sealed::parse(&text).unwrap();
        let plain = keys.unwrap(back.wrapped_key(), &here).await.unwrap();
        assert_eq!(
            back.open(&plain, &here).unwrap(),
            "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQ="
        );
        // Another endpoint: the key does not unwrap, and even with the key the tag fails.
        let there = ctx("ep_2");
        assert_eq!(
            keys.unwrap(back.wrapped_key(), &there).await,
            Err(SealError::WrongEndpoint)
        );
        assert_eq!(back.open(&plain, &there), Err(SealError::WrongEndpoint));
    }

    #[tokio::test]
    async fn a_stored_answer_opens_for_its_record_only_never_for_an_endpoint() {
        let keys = InMemoryDataKeys::default();
        let tenant = TenantId::new("tnt_a").unwrap();
        let record = SealContext::idempotency_record(&tenant, "ab12");
        assert_eq!(record.pairs()[1].0, CONTEXT_IDEMPOTENCY_RECORD);
        let key = keys.generate(&record).await.unwrap();
        let sealed = Sealed::seal(&key, &record, r#"{"secret":"whsec_x"}"#).unwrap();
        let plain = keys.unwrap(sealed.wrapped_key(), &record).await.unwrap();
        assert_eq!(
            sealed.open(&plain, &record).unwrap(),
            r#"{"secret":"whsec_x"}"#
        );
        for other in [
            SealContext::idempotency_record(&tenant, "ab13"),
            SealContext::idempotency_record(&TenantId::new("tnt_b").unwrap(), "ab12"),
            ctx("ep_1"),
        ] {
            assert_eq!(
                keys.unwrap(sealed.wrapped_key(), &other).await,
                Err(SealError::WrongEndpoint)
            );
            assert_eq!(sealed.open(&plain, &other), Err(SealError::WrongEndpoint));
        }
    }

    #[test]
    fn two_seals_of_one_value_differ_and_altered_text_does_not_open() {
        let key = DataKey {
            plain: PlainKey([7; 32]),
            wrapped: vec![1, 2, 3],
        };
        let here = ctx("ep_1");
        let a = Sealed::seal(&key, &here, "token").unwrap();
        let b = Sealed::seal(&key, &here, "token").unwrap();
        assert_ne!(a.to_text(), b.to_text(), "random nonces");
        let mut altered = a.clone();
        altered.ciphertext[0] ^= 1;
        assert_eq!(
            altered.open(&key.plain, &here),
            Err(SealError::WrongEndpoint)
        );
        assert_eq!(a.open(&key.plain, &here).unwrap(), "token");
    }

    #[test]
    fn malformed_texts_are_refused_without_panicking() {
        for bad in [
            "",
            "whsec_abc",
            "tern1",
            "tern1.AAAA",
            "tern1.AAAA.AAAA.AAAA",
            "tern1.AAAA.AAAAAAAAAAAAAAAA.AAAA",
            "tern1.AAAA.AAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAA==.x",
            "tern1..AAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAA==",
            "tern1.!!!.AAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAA==",
        ] {
            assert!(
                matches!(Sealed::parse(bad), Err(SealError::Malformed(_))),
                "{bad:?}"
            );
        }
        assert!(Sealed::parse("tern1.AAAA.AAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAA==").is_ok());
    }

    #[test]
    fn debug_never_shows_a_key() {
        assert_eq!(format!("{:?}", PlainKey([9; 32])), "PlainKey(***)");
    }
}
