//! TLS to the outbox database, on the rustls stack the delivery client already uses
//! (`tokio-rustls`, aws-lc-rs). Written here rather than taken from `tokio-postgres-rustls`,
//! which would bring a second hash stack (sha2 0.11) into the tree for channel binding,
//! which this connector does not offer (SCRAM-SHA-256 without `-PLUS`, which RDS accepts).
//!
//! The server's certificate is verified against the roots given: the PEM bundle of
//! `TERN_OUTBOX_DATABASE_CA_FILE` (Amazon RDS's `global-bundle.pem` for RDS, Aurora and RDS
//! Proxy, whose certificates no public root signs), else Mozilla's roots (`webpki-roots`,
//! for databases with public certificates), and its name against the URL's host. Whether
//! TLS is required is the URL's `sslmode`: `require` refuses a server without TLS;
//! `prefer` (the default) falls back to plain TCP only when the server offers no TLS at all.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

/// Why the TLS settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    /// The CA file cannot be read.
    #[error("cannot read the database CA file {path}: {source}")]
    Read {
        /// The path given.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// The CA file holds no certificate, or one that does not parse.
    #[error("the database CA file {path} holds no usable PEM certificate")]
    NoCertificate {
        /// The path given.
        path: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration refused: {0}")]
    Rustls(#[from] rustls::Error),
}

/// Makes a TLS connection per database connection (`tokio_postgres::connect`'s `tls`).
#[derive(Clone)]
pub struct RustlsConnect {
    config: Arc<rustls::ClientConfig>,
}

impl RustlsConnect {
    /// Trusting the certificates of the PEM file at `ca_file`, or Mozilla's roots when
    /// `None`.
    ///
    /// # Errors
    /// [`TlsSetupError`] naming the file and the reason.
    pub fn new(ca_file: Option<&str>) -> Result<Self, TlsSetupError> {
        let mut roots = rustls::RootCertStore::empty();
        match ca_file {
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
            Some(path) => {
                let pem = std::fs::read(path).map_err(|source| TlsSetupError::Read {
                    path: path.to_owned(),
                    source,
                })?;
                let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
                    .collect::<Result<_, _>>()
                    .map_err(|_| TlsSetupError::NoCertificate {
                        path: path.to_owned(),
                    })?;
                let (added, _) = roots.add_parsable_certificates(certs);
                if added == 0 {
                    return Err(TlsSetupError::NoCertificate {
                        path: path.to_owned(),
                    });
                }
            }
        }
        let provider = rustls::crypto::CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Self {
            config: Arc::new(config),
        })
    }
}

impl<S> MakeTlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnector;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnector, io::Error> {
        let name = ServerName::try_from(domain.to_owned())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(RustlsConnector {
            config: self.config.clone(),
            name,
        })
    }
}

/// One connection's TLS handshake.
pub struct RustlsConnector {
    config: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
}

impl<S> TlsConnect<S> for RustlsConnector
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let tls = tokio_rustls::TlsConnector::from(self.config)
                .connect(self.name, stream)
                .await?;
            Ok(RustlsStream(tls))
        })
    }
}

/// A TLS connection to the database.
pub struct RustlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for RustlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        // No `tls-server-end-point` binding: SCRAM-SHA-256 without `-PLUS`.
        ChannelBinding::none()
    }
}
