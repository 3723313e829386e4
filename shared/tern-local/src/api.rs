//! The Tern API in local mode: the same router as the `api` Lambda (`tern-api`), served on
//! 127.0.0.1 with the deployment's stores, and checking SigV4 signatures itself against the
//! credentials `.tern/local.env` holds (where in AWS API Gateway's IAM authorization does).

use std::net::SocketAddr;
use std::sync::Arc;

use tern_api::aws::{ApiConfig, ApiConfigError, api_deps};
use tern_api::sigv4::{LocalCredential, SigV4Verifier};
use tern_api::{ApiDeps, Authenticator};
use tokio::task::JoinHandle;

/// Port the API asks for first: 8791 (the console's is 8790). When it is taken, any free
/// port; `tern local` prints the address and writes it to `.tern/local.env` as
/// `TERN_API_URL`.
pub const DEFAULT_API_PORT: u16 = 8791;

/// Region local mode signs for (and `.tern/local.env` names).
pub const LOCAL_REGION: &str = "us-east-1";

/// The access key `.tern/local.env` holds (`AWS_ACCESS_KEY_ID`): moto ignores it; the local
/// API accepts signatures made with it, for every tenant.
pub const LOCAL_ACCESS_KEY_ID: &str = "testing";

/// Its secret (`AWS_SECRET_ACCESS_KEY`).
pub const LOCAL_SECRET_ACCESS_KEY: &str = "testing";

/// Environment variable holding the local API's address (`http://127.0.0.1:<port>`).
pub const API_URL_VAR: &str = "TERN_API_URL";

/// The key pair of `.tern/local.env`, good for every tenant.
pub fn local_credentials() -> Vec<LocalCredential> {
    vec![LocalCredential {
        access_key_id: LOCAL_ACCESS_KEY_ID.to_owned(),
        secret_access_key: LOCAL_SECRET_ACCESS_KEY.to_owned(),
        tenant: None,
    }]
}

/// Could not wire the API.
#[derive(Debug, thiserror::Error)]
pub enum LocalApiError {
    /// A setting in the deployment's environment is invalid.
    #[error(transparent)]
    Config(#[from] ApiConfigError),
    /// The HTTP client for test sends did not start.
    #[error(transparent)]
    Client(#[from] tern_http::client::ClientBuildError),
}

/// The API's dependencies in a local deployment: the same wiring as the Lambda
/// (`tern_api::aws::api_deps`) from the same environment the functions get.
///
/// # Errors
/// [`LocalApiError`].
pub fn deps(local: &crate::LocalTern) -> Result<ApiDeps, LocalApiError> {
    let env = local.env.clone();
    let get = move |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let config = ApiConfig::from_env(&get)?;
    Ok(api_deps(&config, &local.aws, local.lookup.clone())?)
}

/// The local authenticator for `credentials`. It reads a body before the routes do (to
/// check its hash), so it takes the largest any route takes (a batch publish's); each route
/// then applies its own.
pub fn authenticator(deps: &ApiDeps, credentials: Vec<LocalCredential>) -> Authenticator {
    Authenticator::LocalSigV4 {
        verifier: Arc::new(SigV4Verifier::new(LOCAL_REGION, credentials)),
        body_limit: deps.settings.largest_body_limit(),
    }
}

/// Serves the router on `listener` until the task is aborted, to requests with a loopback
/// `Host` only ([`crate::loopback`]: a DNS-rebinding page gets a 403).
pub fn spawn(listener: tokio::net::TcpListener, router: axum::Router) -> JoinHandle<()> {
    let router = router.layer(axum::middleware::from_fn(
        crate::loopback::only_loopback_host,
    ));
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::warn!(error = %e, "the local API stopped");
        }
    })
}

/// The address's URL, without a trailing slash (paths start with `/v1/`).
pub fn url(addr: SocketAddr) -> String {
    format!("http://{addr}")
}
