//! Mutual TLS: a client certificate per endpoint, offered to receivers that ask for one
//! (TLS 1.3 `CertificateRequest`, RFC 8446 §4.3.2; TLS 1.2 §7.4.4 of RFC 5246).
//!
//! The certificate and its key live in AWS Secrets Manager, never in the endpoints table:
//! the endpoint holds the secret's ARN only. The secret's value (`SecretString`) is PEM
//! text: the certificate chain, leaf first, then the private key (PKCS #8 `PRIVATE KEY`,
//! PKCS #1 `RSA PRIVATE KEY` or SEC 1 `EC PRIVATE KEY`). Its name must start with the
//! owning tenant's prefix, `tern/mtls/<tenant id>/` ([`tenant_prefix`]): the sender may read
//! only secrets under [`MTLS_SECRET_PREFIX`] (its IAM policy in both stacks), so an endpoint
//! can never make it read a secret that is not a client certificate, and the tenant part is
//! checked when the endpoint is set ([`ClientCertificate::new`]) and again before each read
//! (`tern_http::DeliveryClient::for_certificate`), so one tenant's endpoint can never present
//! another tenant's certificate.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::TenantId;
use crate::secret_value::SecretValue;

/// The name prefix of every client certificate secret: `tern/mtls/`. The sender's IAM
/// policy allows `secretsmanager:GetSecretValue` on
/// `arn:<partition>:secretsmanager:<region>:<account>:secret:tern/mtls/*` only.
pub const MTLS_SECRET_PREFIX: &str = "tern/mtls/";

/// Longest secret ARN accepted, in bytes: 2,048 (a secret name is at most 512 characters,
/// Secrets Manager quotas; the ARN adds the partition, region, account and a suffix).
pub const MAX_SECRET_ARN_BYTES: usize = 2_048;

/// Why a client certificate reference is refused. Never a secret: an ARN is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientCertificateError {
    /// Not a Secrets Manager secret ARN.
    #[error(
        "client certificate must be a Secrets Manager secret ARN (arn:<partition>:secretsmanager:<region>:<12-digit account>:secret:<name>): {0}"
    )]
    BadArn(String),
    /// The secret's name is outside the tenant's own prefix ([`tenant_prefix`]). The same
    /// answer whether or not such a secret exists: it tells nothing about other secrets.
    #[error(
        "the client certificate secret's name must start with \"{expected}\" (this tenant's own prefix): {name}"
    )]
    WrongPrefix {
        /// The name given.
        name: String,
        /// The prefix it must start with: `tern/mtls/<tenant id>/`.
        expected: String,
    },
}

/// The prefix every client certificate secret of `tenant` starts with:
/// `tern/mtls/<tenant id>/`. A tenant id holds only `[A-Za-z0-9_-]` (`crate::ids`), all
/// characters Secrets Manager allows in a name, and never `/`: the trailing `/` keeps
/// `acme` from naming `acme-2`'s secrets.
pub fn tenant_prefix(tenant: &TenantId) -> String {
    format!("{MTLS_SECRET_PREFIX}{tenant}/")
}

/// An endpoint's client certificate: where it is kept.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ClientCertificate {
    /// The Secrets Manager secret's ARN (its full ARN, with the six-character suffix
    /// Secrets Manager adds, or the partial one without it).
    pub secret_arn: String,
}

impl ClientCertificate {
    /// A reference to `secret_arn` for an endpoint of `tenant`, checked with
    /// [`validate_secret_arn`].
    ///
    /// # Errors
    /// [`ClientCertificateError`].
    pub fn new(
        secret_arn: impl Into<String>,
        tenant: &TenantId,
    ) -> Result<Self, ClientCertificateError> {
        let secret_arn = secret_arn.into().trim().to_owned();
        validate_secret_arn(&secret_arn, tenant)?;
        Ok(Self { secret_arn })
    }

    /// Checks the stored ARN again, for an endpoint of `tenant`: an endpoint stored before
    /// the tenant prefix was required, naming a secret outside it, is refused here.
    ///
    /// # Errors
    /// [`ClientCertificateError`].
    pub fn validate(&self, tenant: &TenantId) -> Result<(), ClientCertificateError> {
        validate_secret_arn(&self.secret_arn, tenant)
    }
}

/// Why a client certificate secret could not be read. Never the secret's value. Either
/// way it is our failure, never the receiver's: the delivery is retried, no attempt spent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertificateSecretError {
    /// The secret store did not answer in time, throttled, or failed: retry later.
    #[error("secret store unavailable: {0}")]
    Unavailable(String),
    /// The secret store refuses: the secret does not exist, is marked for deletion, has
    /// no text value, or the sender may not read it (a deployment problem).
    #[error("secret store refused: {0}")]
    Refused(String),
}

/// Where client certificates are kept (Secrets Manager in AWS,
/// `tern_aws::certificates::SecretsManagerCertificates`).
#[async_trait]
pub trait CertificateSecrets: Send + Sync {
    /// The PEM text of the secret `secret_arn` (its current version).
    ///
    /// # Errors
    /// [`CertificateSecretError`].
    async fn pem(&self, secret_arn: &str) -> Result<SecretValue, CertificateSecretError>;
}

/// Checks `arn` is `arn:<partition>:secretsmanager:<region>:<account>:secret:<name>` with
/// a 12-digit account, a region, and a name under `tenant`'s own prefix
/// ([`tenant_prefix`]: `tern/mtls/<tenant id>/`, then at least one character) made of the
/// characters Secrets Manager allows in names (letters, digits, `/_+=.@-`).
///
/// # Errors
/// [`ClientCertificateError::BadArn`] or [`ClientCertificateError::WrongPrefix`].
pub fn validate_secret_arn(arn: &str, tenant: &TenantId) -> Result<(), ClientCertificateError> {
    let bad = |why: &str| ClientCertificateError::BadArn(why.to_owned());
    if arn.len() > MAX_SECRET_ARN_BYTES {
        return Err(bad("too long"));
    }
    let parts: Vec<&str> = arn.splitn(7, ':').collect();
    let [scheme, partition, service, region, account, kind, name] = parts.as_slice() else {
        return Err(bad("not seven colon-separated parts"));
    };
    if *scheme != "arn" || !matches!(*partition, "aws" | "aws-cn" | "aws-us-gov") {
        return Err(bad("not an arn:aws... ARN"));
    }
    if *service != "secretsmanager" || *kind != "secret" {
        return Err(bad("not a secretsmanager secret"));
    }
    if region.is_empty()
        || !region
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(bad("no valid region"));
    }
    if account.len() != 12 || !account.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad("the account is not 12 digits"));
    }
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/_+=.@-".contains(c))
    {
        return Err(bad(
            "the secret name holds characters Secrets Manager refuses",
        ));
    }
    let expected = tenant_prefix(tenant);
    if !name.starts_with(&expected) || name.len() == expected.len() {
        return Err(ClientCertificateError::WrongPrefix {
            name: (*name).to_owned(),
            expected,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acme() -> TenantId {
        TenantId::new("acme").unwrap()
    }

    #[test]
    fn secret_arns_are_checked() {
        let good =
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:tern/mtls/acme/client-AbC123";
        assert_eq!(
            ClientCertificate::new(good, &acme()).unwrap().secret_arn,
            good
        );
        assert!(
            ClientCertificate::new(
                "arn:aws-us-gov:secretsmanager:us-gov-west-1:123456789012:secret:tern/mtls/acme/x",
                &acme()
            )
            .is_ok()
        );
        for bad in [
            "",
            "tern/mtls/acme/x",
            "arn:aws:s3:::bucket",
            "arn:aws:secretsmanager:eu-west-1:123:secret:tern/mtls/acme/x",
            "arn:aws:secretsmanager::123456789012:secret:tern/mtls/acme/x",
            "arn:aws:secretsmanager:eu-west-1:123456789012:parameter:tern/mtls/acme/x",
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:tern/mtls/acme/a b",
            "arn:evil:secretsmanager:eu-west-1:123456789012:secret:tern/mtls/acme/x",
        ] {
            assert!(
                matches!(
                    ClientCertificate::new(bad, &acme()),
                    Err(ClientCertificateError::BadArn(_))
                ),
                "{bad}"
            );
        }
        for outside in [
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:prod/db-password",
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:tern/mtls/",
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:tern/mtlsX",
            // Under tern/mtls/ but not this tenant's: another tenant's, one whose id
            // starts with this one's, the bare prefix, and the tenant-less form of before.
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:tern/mtls/globex/client",
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:tern/mtls/acme-2/client",
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:tern/mtls/acme/",
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:tern/mtls/acme-AbC123",
        ] {
            assert!(
                matches!(
                    ClientCertificate::new(outside, &acme()),
                    Err(ClientCertificateError::WrongPrefix { .. })
                ),
                "{outside}"
            );
        }
    }

    #[test]
    fn a_stored_reference_is_checked_against_the_endpoints_tenant() {
        let c = ClientCertificate {
            secret_arn: "arn:aws:secretsmanager:eu-west-1:123456789012:secret:tern/mtls/globex/c"
                .into(),
        };
        assert!(c.validate(&TenantId::new("globex").unwrap()).is_ok());
        let refused = c.validate(&acme()).unwrap_err();
        assert!(refused.to_string().contains("tern/mtls/acme/"), "{refused}");
    }
}
