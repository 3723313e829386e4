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
use tern_core::clock::MonotonicClock;

/// Most certificates in a chain accepted: 10 (a leaf and its intermediates; a longer
/// chain is not one a receiver would verify).
pub const MAX_CHAIN_CERTIFICATES: usize = 10;

/// Longest PEM text accepted, in bytes: 64 KiB (Secrets Manager's `SecretString` limit,
/// Secrets Manager quotas).
pub const MAX_PEM_BYTES: usize = 65_536;

/// Most identities one process keeps clients for: 256. Past it the cache is emptied and
/// refilled as endpoints are served (a rebuild costs a TLS configuration, no request).
pub const MAX_CACHED_IDENTITIES: usize = 256;

/// Most client certificates one process keeps as read from their secrets: 4,096 (a parsed
/// chain and key, about 3 KB each: 12 MB at most in a 256 MB sender). Past it the one
/// read longest ago goes; it costs one more `GetSecretValue` when next used.
pub const MAX_CACHED_CERTIFICATES: usize = 4_096;

/// How long a warm process keeps a client certificate read from its secret, in seconds:
/// 3,600. Each read is one `GetSecretValue`, so a warm sender reads each certificate it
/// uses about once an hour (DESIGN.md §11: a cost per endpoint per instance is bounded
/// per instance). A certificate rotated in Secrets Manager is picked up early when a
/// receiver refuses the handshake ([`EARLY_REFRESH_SECONDS`]), else within the hour; until
/// then the previous one (still valid during a rotation's overlap) is offered.
pub const CERTIFICATE_CACHE_SECONDS: u64 = 3_600;

/// A TLS handshake refused with a certificate read at least this long ago, in seconds
/// (300), makes its next use read the secret again; one read less than this ago is
/// kept. So a receiver that refuses every handshake costs at most one `GetSecretValue`
/// per certificate per 5 minutes per process, as often as the cache of before did.
/// (Secrets Manager has no cheaper way to learn that a secret's version changed:
/// `DescribeSecret` is priced and throttled as `GetSecretValue` is.)
pub const EARLY_REFRESH_SECONDS: u64 = 300;

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

/// A certificate as read, and what happened since.
struct CachedCertificate {
    identity: ClientIdentity,
    read_at: Instant,
    /// A handshake with it was refused since it was read.
    refused: bool,
}

/// Client certificates read from their secrets, kept for [`CERTIFICATE_CACHE_SECONDS`]
/// (or until a refused handshake, [`EARLY_REFRESH_SECONDS`]), at most
/// [`MAX_CACHED_CERTIFICATES`].
pub(crate) struct CertificateCache {
    pub(crate) secrets: Arc<dyn CertificateSecrets>,
    ttl: Duration,
    clock: Arc<dyn MonotonicClock>,
    read: std::sync::Mutex<std::collections::HashMap<String, CachedCertificate>>,
}

impl CertificateCache {
    pub(crate) fn new(
        secrets: Arc<dyn CertificateSecrets>,
        ttl: Duration,
        clock: Arc<dyn MonotonicClock>,
    ) -> Self {
        Self {
            secrets,
            ttl,
            clock,
            read: std::sync::Mutex::default(),
        }
    }

    fn entries(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, CachedCertificate>> {
        self.read
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The identity kept in `certificate`'s secret, from memory while it is fresh.
    pub(crate) async fn identity(
        &self,
        certificate: &ClientCertificate,
    ) -> Result<ClientIdentity, CertificateError> {
        let arn = &certificate.secret_arn;
        {
            let now = self.clock.now();
            let early = Duration::from_secs(EARLY_REFRESH_SECONDS);
            if let Some(entry) = self.entries().get(arn) {
                let age = now.saturating_duration_since(entry.read_at);
                if age < self.ttl && !(entry.refused && age >= early) {
                    return Ok(entry.identity.clone());
                }
            }
        }
        let pem = self.secrets.pem(arn).await?;
        let identity = ClientIdentity::from_pem(pem.expose())?;
        let now = self.clock.now();
        let mut read = self.entries();
        if read.len() >= MAX_CACHED_CERTIFICATES && !read.contains_key(arn) {
            let oldest = read
                .iter()
                .min_by_key(|(_, e)| e.read_at)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                read.remove(&oldest);
            }
        }
        read.insert(
            arn.clone(),
            CachedCertificate {
                identity: identity.clone(),
                read_at: now,
                refused: false,
            },
        );
        Ok(identity)
    }

    /// A receiver refused a TLS handshake in which `arn`'s certificate was offered: its
    /// next use reads the secret again, unless it was read less than
    /// [`EARLY_REFRESH_SECONDS`] ago (then once that has passed).
    pub(crate) fn handshake_refused(&self, arn: &str) {
        if let Some(entry) = self.entries().get_mut(arn) {
            entry.refused = true;
        }
    }

    /// How many certificates are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries().len()
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tern_core::SecretValue;
    use tern_core::clock::ManualClock;

    /// A secret store that counts its reads and answers a PEM (blocks only: parsing the
    /// certificate is the TLS stack's, at handshake time).
    #[derive(Default)]
    struct Counting {
        reads: AtomicUsize,
    }

    #[async_trait::async_trait]
    impl CertificateSecrets for Counting {
        async fn pem(&self, _arn: &str) -> Result<SecretValue, CertificateSecretError> {
            self.reads.fetch_add(1, Ordering::Relaxed);
            Ok(SecretValue::new(
                "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n\
                 -----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            ))
        }
    }

    fn certificate(n: usize) -> ClientCertificate {
        ClientCertificate {
            secret_arn: format!(
                "arn:aws:secretsmanager:us-east-1:123456789012:secret:tern/mtls/tnt_a/c{n}-AbCdEf"
            ),
        }
    }

    fn cache() -> (CertificateCache, Arc<Counting>, Arc<ManualClock>) {
        let secrets = Arc::new(Counting::default());
        let clock = Arc::new(ManualClock::default());
        let cache = CertificateCache::new(
            secrets.clone(),
            Duration::from_secs(CERTIFICATE_CACHE_SECONDS),
            clock.clone(),
        );
        (cache, secrets, clock)
    }

    #[tokio::test]
    async fn a_certificate_is_read_once_an_hour_and_early_after_a_refused_handshake() {
        let (cache, secrets, clock) = cache();
        let reads = || secrets.reads.load(Ordering::Relaxed);
        let one = certificate(1);
        cache.identity(&one).await.unwrap();
        clock.advance(Duration::from_secs(59 * 60));
        cache.identity(&one).await.unwrap();
        assert_eq!(reads(), 1, "kept for the hour");
        clock.advance(Duration::from_secs(60));
        cache.identity(&one).await.unwrap();
        assert_eq!(reads(), 2, "read again after it");

        // Refused at once: kept until 5 minutes have passed since the read, then read.
        cache.handshake_refused(&one.secret_arn);
        clock.advance(Duration::from_secs(EARLY_REFRESH_SECONDS - 1));
        cache.identity(&one).await.unwrap();
        assert_eq!(reads(), 2, "no re-read within 5 minutes of the last");
        clock.advance(Duration::from_secs(1));
        cache.identity(&one).await.unwrap();
        assert_eq!(reads(), 3, "re-read early after the refusal");
        clock.advance(Duration::from_secs(EARLY_REFRESH_SECONDS));
        cache.identity(&one).await.unwrap();
        assert_eq!(reads(), 3, "the new read is kept again");
    }

    #[tokio::test]
    async fn the_cache_keeps_at_most_its_bound_and_drops_the_oldest_read() {
        let (cache, secrets, clock) = cache();
        for n in 0..=MAX_CACHED_CERTIFICATES {
            cache.identity(&certificate(n)).await.unwrap();
            clock.advance(Duration::from_millis(1));
        }
        assert_eq!(cache.len(), MAX_CACHED_CERTIFICATES);
        let reads = secrets.reads.load(Ordering::Relaxed);
        cache.identity(&certificate(1)).await.unwrap();
        assert_eq!(
            secrets.reads.load(Ordering::Relaxed),
            reads,
            "a recent one stays"
        );
        cache.identity(&certificate(0)).await.unwrap();
        assert_eq!(
            secrets.reads.load(Ordering::Relaxed),
            reads + 1,
            "the oldest went"
        );
    }
}
