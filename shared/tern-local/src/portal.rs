//! The customer portal in local mode: a link for a tenant, minted as an application mints
//! one (`POST /v1/tenants/{id}/portal-sessions` on the local API, signed with SigV4 and the
//! keys of `.tern/local.env`), for `tern local` and the demo to print.

use std::time::SystemTime;

use tern_api::sigv4::sign_request;

/// The tenant `tern local` and the demo print a portal link for.
pub const DEMO_TENANT: &str = "tnt_demo";

/// Life of the printed link and its session, seconds: 86,400 (the longest a portal
/// session may last, `tern_core::portal::MAX_SESSION_SECONDS`).
pub const DEMO_LINK_SECONDS: i64 = tern_core::portal::MAX_SESSION_SECONDS;

/// Why no link could be minted.
#[derive(Debug, thiserror::Error)]
pub enum PortalLinkError {
    /// The local API is not running.
    #[error("the local API is not running")]
    NoApi,
    /// The request could not be signed or sent, or the API refused it.
    #[error("minting a portal link: {0}")]
    Mint(String),
}

/// A single-use portal link for `tenant` on `local`'s API (started with
/// [`crate::LocalTern::start_api`]), valid [`DEMO_LINK_SECONDS`].
///
/// # Errors
/// [`PortalLinkError`].
pub async fn link(local: &crate::LocalTern, tenant: &str) -> Result<String, PortalLinkError> {
    let addr = local.api.ok_or(PortalLinkError::NoApi)?;
    let path = format!("/v1/tenants/{tenant}/portal-sessions");
    let body = serde_json::json!({
        "expires_in_seconds": DEMO_LINK_SECONDS,
        "event_types": ["order.paid", "order.refunded"],
    })
    .to_string();
    let host = addr.to_string();
    let credential = crate::api::local_credentials().remove(0);
    let signed = sign_request(
        &credential,
        crate::api::LOCAL_REGION,
        "POST",
        &path,
        &[
            ("host", host.as_str()),
            ("content-type", "application/json"),
        ],
        body.as_bytes(),
        SystemTime::now(),
    )
    .map_err(PortalLinkError::Mint)?;
    let mut request = reqwest::Client::new()
        .post(format!("{}{path}", crate::api::url(addr)))
        .header("content-type", "application/json")
        .body(body);
    for (k, v) in signed {
        request = request.header(k, v);
    }
    let response = request
        .send()
        .await
        .map_err(|e| PortalLinkError::Mint(e.to_string()))?;
    let status = response.status();
    let text = response
        .text()
        .await
        .map_err(|e| PortalLinkError::Mint(e.to_string()))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| PortalLinkError::Mint(format!("{e}: {text}")))?;
    if !status.is_success() {
        return Err(PortalLinkError::Mint(format!("{status}: {json}")));
    }
    json["url"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| PortalLinkError::Mint("the answer has no url".into()))
}
