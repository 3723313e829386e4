//! Mutual TLS: the client certificate an endpoint offers ([`ClientIdentity`]), and the
//! HTTP clients that offer it ([`crate::DeliveryClient::with_identity`]): one pair of
//! pooled and fresh clients per identity, built on first use and kept for the process,
//! with the same SSRF-guarded connector, roots and limits as the client without one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::Digest as _;
use tern_core::client_certificate::{
    CertificateSecretError, CertificateSecrets, ClientCertificate,
};

/// Most certificates in a chain accepted: 10 (a leaf and its intermediates; a longer
/// chain is not one a receiver would verify).
pub const MAX_CHAIN_CERTIFICATES: usize = 10;

/// Longest PEM text accepted, in bytes: 64 KiB (Secrets Manager's `SecretString` limit,
/// Secrets Manager quotas).
pub const MAX_PEM_BYTES: usize = 65_536;

/// Most identities one process keeps clients for: 256. Past it the cache is emptied and
/// refilled as endpoints are served (a rebuild costs a TLS configuration, no request).
pub const MAX_CACHED_IDENTITIES: usize = 256;

/// How long a warm sender keeps a client certificate read from its secret, in seconds:
/// 300. A certificate rotated in Secrets Manager reaches every warm sender within 5
/// minutes; until then the previous one (still valid during a rotation's overlap) is
/// offered. Each read is one `GetSecretValue`.
pub const CERTIFICATE_CACHE_SECONDS: u64 = 300;

/// Why an endpoint's client certificate could not be offered. Our failure, never the
/// receiver's: the delivery is retried without spending an attempt.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertificateError {
    /// This process has no secret store configured.
    #[error("no secret store configured for client certificates")]
    NoStore,
    /// The secret could not be read.
    #[error(transparent)]
    Secret(#[from] CertificateSecretError),
    /// The secret's text is not a usable certificate and key.
    #[error(transparent)]
    Identity(#[from] IdentityError),
}

/// Client certificates read from their secrets, kept for [`CERTIFICATE_CACHE_SECONDS`].
pub(crate) struct CertificateCache {
    pub(crate) secrets: Arc<dyn CertificateSecrets>,
    ttl: Duration,
    read: std::sync::Mutex<std::collections::HashMap<String, (ClientIdentity, Instant)>>,
}

impl CertificateCache {
    pub(crate) fn new(secrets: Arc<dyn CertificateSecrets>, ttl: Duration) -> Self {
        Self {
            secrets,
            ttl,
            read: std::sync::Mutex::default(),
        }
    }

    /// The identity kept in `certificate`'s secret, from memory while it is fresh.
    pub(crate) async fn identity(
        &self,
        certificate: &ClientCertificate,
    ) -> Result<ClientIdentity, CertificateError> {
        let arn = &certificate.secret_arn;
        {
            let read = self
                .read
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some((identity, at)) = read.get(arn)
                && at.elapsed() < self.ttl
            {
                return Ok(identity.clone());
            }
        }
        let pem = self.secrets.pem(arn).await?;
        let identity = ClientIdentity::from_pem(pem.expose())?;
        let mut read = self
            .read
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if read.len() >= MAX_CACHED_IDENTITIES {
            read.clear();
        }
        read.insert(arn.clone(), (identity.clone(), Instant::now()));
        Ok(identity)
    }
}

/// Why a client certificate secret cannot be used. Never repeats the PEM text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// Longer than [`MAX_PEM_BYTES`].
    #[error("the client certificate secret is longer than {MAX_PEM_BYTES} bytes")]
    TooLong,
    /// No `CERTIFICATE` block, or one that does not parse.
    #[error("the client certificate secret holds no PEM certificate (chain, leaf first)")]
    NoCertificate,
    /// More than [`MAX_CHAIN_CERTIFICATES`] certificates.
    #[error("the client certificate chain has more than {MAX_CHAIN_CERTIFICATES} certificates")]
    ChainTooLong,
    /// No private key block, or one that does not parse.
    #[error(
        "the client certificate secret holds no PEM private key (PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY)"
    )]
    NoKey,
    /// rustls refuses the certificate and key together (the key does not match, or its
    /// algorithm is not supported).
    #[error("the client certificate and key are refused: {0}")]
    Refused(String),
}

/// A client certificate chain and its private key, parsed from the PEM text of a
/// Secrets Manager secret. `Debug` shows its id only.
pub struct ClientIdentity {
    pub(crate) chain: Vec<CertificateDer<'static>>,
    pub(crate) key: PrivateKeyDer<'static>,
    id: [u8; 32],
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClientIdentity({})", self.fingerprint())
    }
}

impl Clone for ClientIdentity {
    fn clone(&self) -> Self {
        Self {
            chain: self.chain.clone(),
            key: self.key.clone_key(),
            id: self.id,
        }
    }
}

impl ClientIdentity {
    /// Parses the certificate chain (leaf first) and the private key from `pem`.
    ///
    /// # Errors
    /// [`IdentityError`] saying what is missing; never the text.
    pub fn from_pem(pem: &str) -> Result<Self, IdentityError> {
        if pem.len() > MAX_PEM_BYTES {
            return Err(IdentityError::TooLong);
        }
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|_| IdentityError::NoCertificate)?;
        if chain.is_empty() {
            return Err(IdentityError::NoCertificate);
        }
        if chain.len() > MAX_CHAIN_CERTIFICATES {
            return Err(IdentityError::ChainTooLong);
        }
        let key =
            PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|_| IdentityError::NoKey)?;
        // The id names the pair, so one client is built per identity; a digest over the
        // DER, never kept as text.
        let mut digest = sha2::Sha256::new();
        for cert in &chain {
            digest.update(cert.as_ref());
        }
        digest.update(key.secret_der());
        Ok(Self {
            chain,
            key,
            id: digest.finalize().into(),
        })
    }

    /// The SHA-256 of the leaf certificate (DER), as hex: the certificate's usual public
    /// fingerprint, to tell identities apart in logs and views.
    pub fn fingerprint(&self) -> String {
        self.chain
            .first()
            .map(|leaf| {
                format!(
                    "sha256:{}",
                    hex_prefix(&sha2::Sha256::digest(leaf.as_ref()))
                )
            })
            .unwrap_or_default()
    }

    /// The cache key of this identity's clients.
    pub(crate) fn id(&self) -> [u8; 32] {
        self.id
    }
}

fn hex_prefix(bytes: &[u8]) -> String {
    bytes.iter().take(8).map(|b| format!("{b:02x}")).collect()
}
