//! The OpenAPI 3.1 document, generated from the routes' `#[utoipa::path]` attributes and
//! the bodies' `ToSchema` derives (utoipa: derive macros on the types and handlers we
//! already have, no second router type; utoipa-axum registers each route together with
//! its documentation, so nothing is served undocumented). Committed as
//! `shared/tern-api/openapi.json`; `cargo test -p tern-api --test openapi` fails when the
//! committed file differs, and `make openapi` writes it again.

use utoipa::Modify;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, SecurityScheme};

/// The document's skeleton: title, version, tags, the security scheme. The paths and
/// schemas come from the routes ([`openapi`]).
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Tern API",
        version = "1",
        description = "Everything an application does with Tern: endpoints, publishing, the delivery log, resends, recovery, test sends and dead letters. Every path is under /v1/tenants/{tenant_id}/; another tenant's id is a 404. Requests are signed with AWS Signature Version 4 for service execute-api (API Gateway with IAM authorization in AWS; local mode checks the same signatures). Errors are RFC 9457 problems (application/problem+json) with a stable type (urn:tern:problem:<name>) and, where one input is at fault, its name in `field`.",
        license(name = "Apache-2.0", identifier = "Apache-2.0")
    ),
    modifiers(&SigV4),
    components(schemas(
        crate::problem::Problem,
        crate::model::EndpointStateFilter,
        crate::model::OutcomeFilter
    )),
    tags(
        (name = "endpoints", description = "Where a tenant's events are delivered: settings, secrets, health, test sends, the delivery log, recovery."),
        (name = "events", description = "Publishing events, where each delivery stands, attempts, resends."),
        (name = "dead-letters", description = "The tenant's dead letters and their replay."),
        (name = "portal", description = "Single-use links to the customer portal, where a tenant manages its own endpoints.")
    )
)]
pub struct ApiDoc;

/// The `sigv4` security scheme every operation requires.
struct SigV4;

impl Modify for SigV4 {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "sigv4",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "Authorization",
                "AWS Signature Version 4 (AWS4-HMAC-SHA256) for service execute-api, with x-amz-date signed: botocore's SigV4Auth, the JavaScript SDK's SignatureV4, or curl --aws-sigv4 \"aws:amz:<region>:execute-api\".",
            ))),
        );
    }
}

/// The whole document.
pub fn openapi() -> utoipa::openapi::OpenApi {
    crate::routes::api().split_for_parts().1
}

/// The document as the committed file holds it: pretty JSON and a final line break.
pub fn openapi_json() -> String {
    let mut text = openapi()
        .to_pretty_json()
        .unwrap_or_else(|e| unreachable!("the document serializes: {e}"));
    text.push('\n');
    text
}
