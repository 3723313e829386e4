//! [`SecretsManagerCertificates`]: the client certificates of mutual TLS, read from AWS
//! Secrets Manager (`GetSecretValue`, the current version's `SecretString`).
//!
//! The sender's client keeps each certificate for an hour
//! (`tern_http::identity::CERTIFICATE_CACHE_SECONDS`), or until a receiver refuses a
//! handshake with it (then at most every 5 minutes, `EARLY_REFRESH_SECONDS`), so this is
//! called about once per certificate per warm sender per hour, and only for endpoints
//! that have one.

use async_trait::async_trait;
use aws_sdk_secretsmanager::Client;
use aws_sdk_secretsmanager::error::{ProvideErrorMetadata, SdkError};
use tern_core::SecretValue;
use tern_core::client_certificate::{CertificateSecretError, CertificateSecrets};

/// Secrets Manager error codes that mean the request will not succeed as it is (API
/// reference, `GetSecretValue`): the secret is missing or deleted, has no value, or the
/// caller may not read it.
const REFUSING_CODES: &[&str] = &[
    "ResourceNotFoundException",
    "InvalidRequestException",
    "InvalidParameterException",
    "AccessDeniedException",
    "DecryptionFailure",
];

/// Client certificates in Secrets Manager.
#[derive(Debug, Clone)]
pub struct SecretsManagerCertificates {
    client: Client,
}

impl SecretsManagerCertificates {
    /// Reads secrets with `client`; build it from a config passed through
    /// [`crate::budget::bounded`], so each call has its deadline and bounded retries.
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

fn secret_error<E, R>(err: SdkError<E, R>) -> CertificateSecretError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let code = err.code().unwrap_or_default().to_owned();
    let text = match &err {
        SdkError::ServiceError(se) => format!(
            "{}: {}",
            se.err().code().unwrap_or("unknown"),
            se.err().message().unwrap_or("")
        ),
        other => aws_sdk_secretsmanager::error::DisplayErrorContext(other).to_string(),
    };
    if REFUSING_CODES.contains(&code.as_str()) {
        CertificateSecretError::Refused(text)
    } else {
        CertificateSecretError::Unavailable(text)
    }
}

#[async_trait]
impl CertificateSecrets for SecretsManagerCertificates {
    async fn pem(&self, secret_arn: &str) -> Result<SecretValue, CertificateSecretError> {
        let out = self
            .client
            .get_secret_value()
            .secret_id(secret_arn)
            .send()
            .await
            .map_err(secret_error)?;
        out.secret_string.map(SecretValue::new).ok_or_else(|| {
            CertificateSecretError::Refused(
                "the secret has no text value (SecretString): store the PEM as text".into(),
            )
        })
    }
}
