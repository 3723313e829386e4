//! The AWS SDK's HTTPS client for the Lambda functions, trusting only the Amazon Trust
//! Services roots.
//!
//! The SDK's default client loads the system's whole certificate store when it starts:
//! on Linux `rustls-native-certs` reads the bundle file and then every file in
//! `/etc/ssl/certs` (hundreds of them), about 7 ms of a Lambda cold start that has nothing
//! else to do (measured by `make bench`). Every AWS service endpoint's certificate chains to
//! an Amazon Trust Services root (<https://www.amazontrust.com/repository/>), so the functions
//! trust those five roots, compiled in: certificate verification stays on and trusts fewer
//! roots, not more. The `tern` tool keeps the SDK's default client, since an operator may
//! point `AWS_ENDPOINT_URL` at anything.

use aws_config::{BehaviorVersion, SdkConfig};
use aws_smithy_http_client::tls::{self, TlsContext, TrustStore, rustls_provider::CryptoMode};
use aws_smithy_runtime_api::client::http::SharedHttpClient;

/// Amazon Root CA 1-4 and Starfield Services Root Certificate Authority - G2, PEM, as
/// Debian's `ca-certificates` (Mozilla's CA list) ships them.
pub const AMAZON_TRUST_SERVICES_PEM: &[u8] = include_bytes!("../certs/amazon-trust-services.pem");

/// The HTTPS client: rustls with aws-lc (the SDK's default provider), trusting
/// [`AMAZON_TRUST_SERVICES_PEM`] only.
///
/// # Panics
/// Never with the compiled-in roots; a corrupt PEM would panic at build time of the client
/// in every test that builds one.
pub fn http_client() -> SharedHttpClient {
    let trust = TrustStore::empty()
        .with_native_roots(false)
        .with_pem_certificate(AMAZON_TRUST_SERVICES_PEM);
    let context = TlsContext::builder()
        .with_trust_store(trust)
        .build()
        .unwrap_or_else(|e| unreachable!("the compiled-in Amazon roots are valid: {e}"));
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::AwsLc))
        .tls_context(context)
        .build_https()
}

/// What a function's `main` loads once: the environment's region, credentials and
/// endpoint settings (as `aws_config::load_from_env`), with [`http_client`].
pub async fn load_for_lambda() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .http_client(http_client())
        .load()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compiled_in_roots_are_the_five_amazon_roots() {
        let text = std::str::from_utf8(AMAZON_TRUST_SERVICES_PEM).expect("PEM is text");
        assert_eq!(text.matches("-----BEGIN CERTIFICATE-----").count(), 5);
        // Builds without touching the system's store.
        let _client = http_client();
    }
}
