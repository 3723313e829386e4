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
//!
//! That was the first format, `tern1`: one data key per write, so a reader unwraps one
//! key per endpoint, and the key service's requests grow with endpoints times warm
//! processes. The second, `tern2` ([`EpochSealed`]), is a hierarchical keyring: one
//! 256-bit **epoch key** per deployment epoch, made and wrapped by the key service once
//! ([`EpochKeys`], encryption context [`CONTEXT_KEYRING`] and [`CONTEXT_EPOCH`]) and kept
//! wrapped where every process finds it (`tern_aws::keyring`). Each endpoint's key is
//! derived from it with HKDF-SHA256 (RFC 5869), the info naming the epoch, the tenant and
//! the endpoint, and the same three are the GCM associated data: a value copied to another
//! endpoint or tenant does not open, as with `tern1`. A process unwraps each epoch key
//! once per cache lifetime, whatever the number of endpoints. Stored text:
//! `tern2.<epoch>.<nonce>.<ciphertext and tag>` (the epoch in decimal, the rest standard
//! base64). Both formats are read ([`SealedValue`]); new values are `tern2`.

use std::time::Duration;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hkdf::Hkdf;
use sha2::Sha256;

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

/// First part of a value sealed under a keyring epoch ([`EpochSealed`]).
pub const EPOCH_SEALED_PREFIX: &str = "tern2";

/// Encryption context key naming the keyring an epoch key belongs to (value
/// [`KEYRING_NAME`]). The stacks' IAM allows `GenerateDataKey` only with it.
pub const CONTEXT_KEYRING: &str = "tern:keyring";

/// The keyring of endpoint secrets, as named in its epoch keys' encryption context.
pub const KEYRING_NAME: &str = "endpoint-secrets";

/// Encryption context key naming the epoch of an epoch key (decimal).
pub const CONTEXT_EPOCH: &str = "tern:epoch";

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
    /// A `tern2` value names an epoch the keyring does not hold (its item was deleted,
    /// or the value was altered).
    #[error("a sealed secret names key epoch {0}, which the keyring does not hold")]
    UnknownEpoch(Epoch),
    /// The keyring's wrapped key of an epoch does not unwrap for that epoch: its item was
    /// altered, or copied from another epoch.
    #[error("the keyring's key of epoch {0} does not unwrap for that epoch: its item was altered")]
    KeyringAltered(Epoch),
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

    /// What the `tern2` key derivation and associated data name after the tenant: the
    /// endpoint id, or for a record `idempotency`, a NUL and its id (ids never hold NUL,
    /// so a record's text never equals an endpoint's).
    fn subject_text(&self) -> String {
        match &self.subject {
            SealSubject::Endpoint(e) => e.to_string(),
            SealSubject::IdempotencyRecord(r) => format!("idempotency\0{r}"),
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

    /// A fresh random key (the operating system's generator, through `rand`).
    pub fn random() -> Self {
        Self(rand::random())
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

/// A keyring epoch: which epoch key a `tern2` value was sealed under. Starts at 1
/// ([`Epoch::FIRST`]); each rotation adds one. At most `u32::MAX` (a rotation a second
/// for a century would not reach it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Epoch(u32);

impl Epoch {
    /// The first epoch of a deployment.
    pub const FIRST: Epoch = Epoch(1);

    /// Epoch `n`.
    ///
    /// # Errors
    /// [`SealError::Malformed`] for 0.
    pub fn new(n: u32) -> Result<Self, SealError> {
        if n == 0 {
            Err(SealError::Malformed("epoch 0 does not exist"))
        } else {
            Ok(Self(n))
        }
    }

    /// Its number.
    pub fn get(self) -> u32 {
        self.0
    }

    /// The epoch after this one.
    ///
    /// # Errors
    /// [`SealError::Malformed`] past `u32::MAX`.
    pub fn next(self) -> Result<Self, SealError> {
        self.0
            .checked_add(1)
            .map(Self)
            .ok_or(SealError::Malformed("no epoch after the last"))
    }

    /// Parses the decimal text of a stored value (no sign, no leading zero).
    ///
    /// # Errors
    /// [`SealError::Malformed`].
    pub fn parse(text: &str) -> Result<Self, SealError> {
        if text.is_empty()
            || text.len() > 10
            || text.starts_with('0')
            || !text.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(SealError::Malformed("epoch is not a decimal number"));
        }
        text.parse::<u32>()
            .map_err(|_| SealError::Malformed("epoch out of range"))
            .and_then(Self::new)
    }

    /// The key service's encryption context of this epoch's key ([`CONTEXT_KEYRING`],
    /// [`CONTEXT_EPOCH`]).
    pub fn context_pairs(self) -> [(&'static str, String); 2] {
        [
            (CONTEXT_KEYRING, KEYRING_NAME.to_owned()),
            (CONTEXT_EPOCH, self.0.to_string()),
        ]
    }
}

impl std::fmt::Display for Epoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// An epoch's key, unwrapped: seals and opens every `tern2` value of its epoch, for any
/// endpoint, through the endpoint's derived key. `Debug` is redacted.
#[derive(Clone)]
pub struct EpochKey {
    epoch: Epoch,
    key: PlainKey,
}

impl std::fmt::Debug for EpochKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EpochKey({}, ***)", self.epoch)
    }
}

impl EpochKey {
    /// The key of `epoch`.
    pub fn new(epoch: Epoch, key: PlainKey) -> Self {
        Self { epoch, key }
    }

    /// Its epoch.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// The AES-256-GCM key of one endpoint in this epoch: HKDF-SHA256 (RFC 5869) of the
    /// epoch key, no salt (the input is a uniformly random key, §3.1), the info naming the
    /// format, the epoch, the tenant and the endpoint (NUL-separated; ids never hold NUL).
    /// So each endpoint's values are sealed under a key of their own, and GCM's random
    /// nonce budget (2^32 per key, SP 800-38D §8.3) is per endpoint and epoch.
    fn endpoint_cipher(&self, context: &SealContext) -> Aes256Gcm {
        let info = format!(
            "{EPOCH_SEALED_PREFIX}\0endpoint key\0{}\0{}\0{}",
            self.epoch,
            context.tenant,
            context.subject_text()
        );
        let mut okm = [0u8; DATA_KEY_BYTES];
        // A 32-byte output is far below HKDF-SHA256's 8,160-byte limit: never fails.
        if Hkdf::<Sha256>::new(None, &self.key.0)
            .expand(info.as_bytes(), &mut okm)
            .is_err()
        {
            unreachable!("HKDF-SHA256 expands 32 bytes");
        }
        Aes256Gcm::new(&okm.into())
    }

    /// The GCM associated data: the format, the epoch, the tenant and the endpoint.
    fn aad(&self, context: &SealContext) -> Vec<u8> {
        format!(
            "{EPOCH_SEALED_PREFIX}\0{}\0{}\0{}",
            self.epoch,
            context.tenant,
            context.subject_text()
        )
        .into_bytes()
    }
}

/// A value sealed under a keyring epoch, parsed from its stored text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochSealed {
    epoch: Epoch,
    nonce: [u8; NONCE_BYTES],
    ciphertext: Vec<u8>,
}

impl EpochSealed {
    /// Parses `tern2.<epoch>.<nonce>.<ciphertext>`.
    ///
    /// # Errors
    /// [`SealError::Malformed`].
    pub fn parse(text: &str) -> Result<Self, SealError> {
        let mut parts = text.split('.');
        if parts.next() != Some(EPOCH_SEALED_PREFIX) {
            return Err(SealError::Malformed("not a tern2 sealed value"));
        }
        let epoch = Epoch::parse(parts.next().ok_or(SealError::Malformed("epoch missing"))?)?;
        let mut part = |what: &'static str| {
            parts
                .next()
                .ok_or(SealError::Malformed(what))
                .and_then(|p| B64.decode(p).map_err(|_| SealError::Malformed(what)))
        };
        let nonce = part("nonce missing or not base64")?;
        let ciphertext = part("ciphertext missing or not base64")?;
        if parts.next().is_some() {
            return Err(SealError::Malformed("more than four parts"));
        }
        let nonce: [u8; NONCE_BYTES] = nonce
            .as_slice()
            .try_into()
            .map_err(|_| SealError::Malformed("nonce is not 12 bytes"))?;
        if ciphertext.len() < TAG_BYTES {
            return Err(SealError::Malformed("ciphertext shorter than its tag"));
        }
        Ok(Self {
            epoch,
            nonce,
            ciphertext,
        })
    }

    /// The epoch whose key opens it.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// The stored text.
    pub fn to_text(&self) -> String {
        format!(
            "{EPOCH_SEALED_PREFIX}.{}.{}.{}",
            self.epoch,
            B64.encode(self.nonce),
            B64.encode(&self.ciphertext)
        )
    }

    /// Seals `plaintext` for `context` under `key`'s epoch, with a random nonce.
    ///
    /// # Errors
    /// [`SealError::Malformed`] if the cipher refuses the input (longer than GCM's
    /// 2^36 - 32 bytes: never for an endpoint's values).
    pub fn seal(key: &EpochKey, context: &SealContext, plaintext: &str) -> Result<Self, SealError> {
        let nonce: [u8; NONCE_BYTES] = rand::random();
        let ciphertext = key
            .endpoint_cipher(context)
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: plaintext.as_bytes(),
                    aad: &key.aad(context),
                },
            )
            .map_err(|_| SealError::Malformed("value too long to seal"))?;
        Ok(Self {
            epoch: key.epoch,
            nonce,
            ciphertext,
        })
    }

    /// The plaintext, with the key of [`Self::epoch`], for `context`.
    ///
    /// # Errors
    /// [`SealError::WrongEndpoint`] when the tag does not match (sealed for another
    /// endpoint or tenant, or altered) or `key` is another epoch's;
    /// [`SealError::Malformed`] when it is not UTF-8.
    pub fn open(&self, key: &EpochKey, context: &SealContext) -> Result<String, SealError> {
        if key.epoch != self.epoch {
            return Err(SealError::WrongEndpoint);
        }
        let plain = key
            .endpoint_cipher(context)
            .decrypt(
                Nonce::from_slice(&self.nonce),
                Payload {
                    msg: &self.ciphertext,
                    aad: &key.aad(context),
                },
            )
            .map_err(|_| SealError::WrongEndpoint)?;
        String::from_utf8(plain).map_err(|_| SealError::Malformed("plaintext is not UTF-8"))
    }
}

/// A stored sealed value of either format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SealedValue {
    /// `tern1`: carries its own wrapped data key, bound to its endpoint by the key
    /// service's encryption context.
    DataKey(Sealed),
    /// `tern2`: sealed under a keyring epoch.
    Epoch(EpochSealed),
}

impl SealedValue {
    /// Parses a stored sealed value, telling the formats apart by their prefix.
    ///
    /// # Errors
    /// [`SealError::Malformed`].
    pub fn parse(text: &str) -> Result<Self, SealError> {
        match text.split_once('.').map(|(prefix, _)| prefix) {
            Some(SEALED_PREFIX) => Sealed::parse(text).map(Self::DataKey),
            Some(EPOCH_SEALED_PREFIX) => EpochSealed::parse(text).map(Self::Epoch),
            _ => Err(SealError::Malformed("not a sealed value of a known format")),
        }
    }
}

/// The key service's part of the keyring: makes an epoch's key and unwraps it again, bound
/// to that epoch by the encryption context ([`Epoch::context_pairs`]). In AWS, KMS with
/// the stack's key (`tern_aws::kms::KmsDataKeys`).
#[async_trait]
pub trait EpochKeys: Send + Sync {
    /// A fresh key for `epoch`: its plaintext, and its wrapped form for the keyring.
    ///
    /// # Errors
    /// [`SealError::Unavailable`] or [`SealError::Refused`].
    async fn generate_epoch(&self, epoch: Epoch) -> Result<DataKey, SealError>;

    /// The plaintext of `wrapped`, which unwraps only for the epoch it was made for.
    ///
    /// # Errors
    /// [`SealError::KeyringAltered`] for another epoch's or an altered key;
    /// [`SealError::Unavailable`] or [`SealError::Refused`].
    async fn unwrap_epoch(&self, wrapped: &[u8], epoch: Epoch) -> Result<PlainKey, SealError>;

    /// How long a process keeps an unwrapped epoch key (and a `tern1` data key) before it
    /// asks the key service again, in seconds as a [`Duration`].
    fn key_ttl(&self) -> Duration;
}

/// Everything the endpoint store needs from the key service: `tern1` data keys (read
/// only, for values sealed before the keyring) and the keyring's epoch keys.
pub trait KeyService: DataKeys + EpochKeys {}

impl<T: DataKeys + EpochKeys + ?Sized> KeyService for T {}

/// The keys of endpoint secrets as the endpoint store uses them: the current epoch's key
/// to seal with, any epoch's key and any `tern1` data key to open with. In AWS,
/// `tern_aws::keyring::DynamoKeyring` (epoch keys kept wrapped in the endpoints table,
/// unwrapped by KMS once per process per cache lifetime).
#[async_trait]
pub trait Keyring: Send + Sync {
    /// The key new values are sealed under (the newest epoch; the first is made when
    /// there is none).
    ///
    /// # Errors
    /// [`SealError::Unavailable`], [`SealError::Refused`], [`SealError::KeyringAltered`].
    async fn current(&self) -> Result<EpochKey, SealError>;

    /// The key of `epoch`.
    ///
    /// # Errors
    /// [`SealError::UnknownEpoch`], [`SealError::KeyringAltered`], or the key service's.
    async fn epoch(&self, epoch: Epoch) -> Result<EpochKey, SealError>;

    /// The data key of a `tern1` value sealed for `context`.
    ///
    /// # Errors
    /// As [`DataKeys::unwrap`].
    async fn data_key(&self, wrapped: &[u8], context: &SealContext) -> Result<PlainKey, SealError>;
}

/// Seals `plaintext` for `context` under `keyring`'s current epoch: the text to store.
/// What a store of another kind of secret (not an endpoint item) uses.
///
/// # Errors
/// As [`Keyring::current`].
pub async fn seal_text(
    keyring: &dyn Keyring,
    context: &SealContext,
    plaintext: &str,
) -> Result<String, SealError> {
    let key = keyring.current().await?;
    EpochSealed::seal(&key, context, plaintext).map(|s| s.to_text())
}

/// Opens a stored sealed text of either format for `context`.
///
/// # Errors
/// [`SealError::Malformed`], [`SealError::WrongEndpoint`], or the keyring's.
pub async fn open_text(
    keyring: &dyn Keyring,
    context: &SealContext,
    text: &str,
) -> Result<String, SealError> {
    match SealedValue::parse(text)? {
        SealedValue::DataKey(sealed) => {
            let key = keyring.data_key(sealed.wrapped_key(), context).await?;
            sealed.open(&key, context)
        }
        SealedValue::Epoch(sealed) => {
            let key = keyring.epoch(sealed.epoch()).await?;
            sealed.open(&key, context)
        }
    }
}

/// A [`Keyring`] in memory, for tests of code that seals: epoch keys held in plain,
/// `tern1` data keys from an [`InMemoryDataKeys`]. Never use it to protect anything.
#[derive(Debug, Default)]
pub struct InMemoryKeyring {
    /// The `tern1` data keys (and their call counts).
    pub data_keys: InMemoryDataKeys,
    epochs: std::sync::Mutex<Vec<EpochKey>>,
}

impl InMemoryKeyring {
    fn epochs(&self) -> std::sync::MutexGuard<'_, Vec<EpochKey>> {
        self.epochs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts a new epoch: new values are sealed under it; older ones still open.
    pub fn rotate(&self) -> Epoch {
        let mut epochs = self.epochs();
        let epoch = epochs
            .last()
            .map_or(Ok(Epoch::FIRST), |k| k.epoch().next())
            .unwrap_or_else(|_| unreachable!("tests make a few epochs"));
        epochs.push(EpochKey::new(epoch, PlainKey::random()));
        epoch
    }
}

#[async_trait]
impl Keyring for InMemoryKeyring {
    async fn current(&self) -> Result<EpochKey, SealError> {
        if self.epochs().is_empty() {
            self.rotate();
        }
        self.epochs()
            .last()
            .cloned()
            .ok_or(SealError::Malformed("no epoch"))
    }

    async fn epoch(&self, epoch: Epoch) -> Result<EpochKey, SealError> {
        self.epochs()
            .iter()
            .find(|k| k.epoch() == epoch)
            .cloned()
            .ok_or(SealError::UnknownEpoch(epoch))
    }

    async fn data_key(&self, wrapped: &[u8], context: &SealContext) -> Result<PlainKey, SealError> {
        self.data_keys.unwrap(wrapped, context).await
    }
}

/// A [`KeyService`] without a key service, for tests and benchmarks of code that seals:
/// wraps keys with AES-256-GCM under a master key it holds, the context (the endpoint's,
/// or the epoch's) as associated data (so, like KMS, a wrapped key opens only under its
/// own context). Counts its calls. Never use it to protect anything.
#[derive(Debug)]
pub struct InMemoryDataKeys {
    master: PlainKey,
    ttl: Duration,
    /// `generate` and `generate_epoch` calls so far.
    pub generated: std::sync::atomic::AtomicUsize,
    /// `unwrap` and `unwrap_epoch` calls so far.
    pub unwrapped: std::sync::atomic::AtomicUsize,
}

impl Default for InMemoryDataKeys {
    fn default() -> Self {
        Self {
            master: PlainKey(rand::random()),
            ttl: Duration::from_secs(3_600),
            generated: std::sync::atomic::AtomicUsize::new(0),
            unwrapped: std::sync::atomic::AtomicUsize::new(0),
        }
    }
}

impl InMemoryDataKeys {
    /// Wraps `plain` under the master key with `aad`: nonce then ciphertext.
    fn wrap(&self, aad: &[u8], plain: &PlainKey) -> Result<Vec<u8>, SealError> {
        let nonce: [u8; NONCE_BYTES] = rand::random();
        let ciphertext = self
            .master
            .cipher()
            .encrypt(Nonce::from_slice(&nonce), Payload { msg: &plain.0, aad })
            .map_err(|_| SealError::Malformed("key does not wrap"))?;
        let mut wrapped = nonce.to_vec();
        wrapped.extend_from_slice(&ciphertext);
        Ok(wrapped)
    }

    /// Unwraps what [`Self::wrap`] made with the same `aad`; `None` otherwise.
    fn unwrap_with(&self, aad: &[u8], wrapped: &[u8]) -> Option<PlainKey> {
        if wrapped.len() < NONCE_BYTES + TAG_BYTES {
            return None;
        }
        let (nonce, ciphertext) = wrapped.split_at(NONCE_BYTES);
        let plain = self
            .master
            .cipher()
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad,
                },
            )
            .ok()?;
        PlainKey::from_slice(&plain).ok()
    }

    fn count(counter: &std::sync::atomic::AtomicUsize) {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

fn epoch_aad(epoch: Epoch) -> Vec<u8> {
    format!("{CONTEXT_KEYRING}\0{KEYRING_NAME}\0{epoch}").into_bytes()
}

#[async_trait]
impl DataKeys for InMemoryDataKeys {
    async fn generate(&self, context: &SealContext) -> Result<DataKey, SealError> {
        Self::count(&self.generated);
        let plain = PlainKey::random();
        let wrapped = self.wrap(&context.aad(), &plain)?;
        Ok(DataKey { plain, wrapped })
    }

    async fn unwrap(&self, wrapped: &[u8], context: &SealContext) -> Result<PlainKey, SealError> {
        Self::count(&self.unwrapped);
        self.unwrap_with(&context.aad(), wrapped)
            .ok_or(SealError::WrongEndpoint)
    }
}

#[async_trait]
impl EpochKeys for InMemoryDataKeys {
    async fn generate_epoch(&self, epoch: Epoch) -> Result<DataKey, SealError> {
        Self::count(&self.generated);
        let plain = PlainKey::random();
        let wrapped = self.wrap(&epoch_aad(epoch), &plain)?;
        Ok(DataKey { plain, wrapped })
    }

    async fn unwrap_epoch(&self, wrapped: &[u8], epoch: Epoch) -> Result<PlainKey, SealError> {
        Self::count(&self.unwrapped);
        self.unwrap_with(&epoch_aad(epoch), wrapped)
            .ok_or(SealError::KeyringAltered(epoch))
    }

    fn key_ttl(&self) -> Duration {
        self.ttl
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
        let key = EpochKey::new(Epoch::FIRST, PlainKey([9; 32]));
        assert_eq!(format!("{key:?}"), "EpochKey(1, ***)");
    }

    fn tenant_ctx(tenant: &str, endpoint: &str) -> SealContext {
        SealContext::new(
            &TenantId::new(tenant).unwrap(),
            &EndpointId::new(endpoint).unwrap(),
        )
    }

    #[test]
    fn an_epoch_value_opens_for_its_endpoint_tenant_and_epoch_only() {
        let key = EpochKey::new(Epoch::new(3).unwrap(), PlainKey::random());
        let here = ctx("ep_1");
        let sealed = EpochSealed::seal(&key, &here, "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQ=").unwrap();
        let text = sealed.to_text();
        assert!(text.starts_with("tern2.3."), "{text}");
        assert!(!text.contains("c2VjcmV0"), "no plaintext in {text}");
        let back = EpochSealed::parse(&text).unwrap();
        assert_eq!(back, sealed);
        assert_eq!(back.epoch(), Epoch::new(3).unwrap());
        assert_eq!(
            back.open(&key, &here).unwrap(),
            "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQ="
        );
        // Another endpoint of the tenant, the same endpoint id under another tenant.
        for other in [ctx("ep_2"), tenant_ctx("tnt_b", "ep_1")] {
            assert_eq!(
                back.open(&key, &other),
                Err(SealError::WrongEndpoint),
                "{other:?}"
            );
        }
        // Another epoch's key, and the same key bytes claimed as another epoch.
        let other_epoch = EpochKey::new(Epoch::new(4).unwrap(), PlainKey::random());
        assert_eq!(
            back.open(&other_epoch, &here),
            Err(SealError::WrongEndpoint)
        );
        let relabelled = EpochSealed {
            epoch: Epoch::new(4).unwrap(),
            ..back.clone()
        };
        let same_bytes = EpochKey::new(Epoch::new(4).unwrap(), key.key.clone());
        assert_eq!(
            relabelled.open(&same_bytes, &here),
            Err(SealError::WrongEndpoint),
            "the epoch is bound too"
        );
        // Two endpoints' derived keys differ: the same plaintext and nonce give different
        // ciphertexts.
        let a = key.endpoint_cipher(&here);
        let b = key.endpoint_cipher(&ctx("ep_2"));
        let nonce = Nonce::from_slice(&[0; NONCE_BYTES]);
        assert_ne!(
            a.encrypt(nonce, b"x".as_slice()).unwrap(),
            b.encrypt(nonce, b"x".as_slice()).unwrap()
        );
    }

    #[test]
    fn both_formats_parse_and_malformed_epoch_texts_are_refused() {
        let v1 = "tern1.AAAA.AAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAA==";
        assert!(matches!(
            SealedValue::parse(v1),
            Ok(SealedValue::DataKey(_))
        ));
        let v2 = "tern2.12.AAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAA==";
        assert!(
            matches!(SealedValue::parse(v2), Ok(SealedValue::Epoch(e)) if e.epoch().get() == 12)
        );
        for bad in [
            "",
            "tern2",
            "tern3.1.AAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAA==",
            "tern2.0.AAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAA==",
            "tern2.01.AAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAA==",
            "tern2.-1.AAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAA==",
            "tern2.4294967296.AAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAA==",
            "tern2.1.AAAA.AAAAAAAAAAAAAAAAAAAAAA==",
            "tern2.1.AAAAAAAAAAAAAAAA.AAAA",
            "tern2.1.AAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAA==.x",
            "tern2.1.!!!.AAAAAAAAAAAAAAAAAAAAAA==",
        ] {
            assert!(
                matches!(SealedValue::parse(bad), Err(SealError::Malformed(_))),
                "{bad:?}"
            );
        }
        assert_eq!(Epoch::parse("4294967295").unwrap().get(), u32::MAX);
        assert!(Epoch::new(u32::MAX).unwrap().next().is_err());
    }

    #[tokio::test]
    async fn texts_of_both_formats_open_and_new_ones_use_the_current_epoch() {
        let keyring = InMemoryKeyring::default();
        let here = ctx("ep_1");
        // A tern1 value, as written before the keyring.
        let data_key = keyring.data_keys.generate(&here).await.unwrap();
        let old = Sealed::seal(&data_key, &here, "old-secret")
            .unwrap()
            .to_text();
        let first = seal_text(&keyring, &here, "first-secret").await.unwrap();
        assert!(first.starts_with("tern2.1."), "{first}");
        assert_eq!(keyring.rotate(), Epoch::new(2).unwrap());
        let second = seal_text(&keyring, &here, "second-secret").await.unwrap();
        assert!(second.starts_with("tern2.2."), "{second}");
        for (text, plain) in [
            (&old, "old-secret"),
            (&first, "first-secret"),
            (&second, "second-secret"),
        ] {
            assert_eq!(open_text(&keyring, &here, text).await.unwrap(), plain);
            assert_eq!(
                open_text(&keyring, &ctx("ep_2"), text).await,
                Err(SealError::WrongEndpoint)
            );
        }
        let unknown = second.replacen("tern2.2.", "tern2.9.", 1);
        assert_eq!(
            open_text(&keyring, &here, &unknown).await,
            Err(SealError::UnknownEpoch(Epoch::new(9).unwrap()))
        );
    }

    #[tokio::test]
    async fn an_epoch_key_unwraps_for_its_epoch_only() {
        let keys = InMemoryDataKeys::default();
        let one = Epoch::FIRST;
        let two = one.next().unwrap();
        let made = keys.generate_epoch(one).await.unwrap();
        assert_eq!(
            keys.unwrap_epoch(&made.wrapped, one).await.unwrap(),
            made.plain
        );
        assert_eq!(
            keys.unwrap_epoch(&made.wrapped, two).await,
            Err(SealError::KeyringAltered(two))
        );
        // Nor as an endpoint's data key.
        assert_eq!(
            keys.unwrap(&made.wrapped, &ctx("ep_1")).await,
            Err(SealError::WrongEndpoint)
        );
    }
}
