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

/// The whole document: the routes' own, on every POST the `Idempotency-Key` that
/// [`crate::idempotency`] honours on every POST route, and the batch publish's body limit.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut doc = crate::routes::api().split_for_parts().1;
    idempotency_on_posts(&mut doc);
    batch_body_limit(&mut doc);
    doc
}

/// The request body extension that states a route's own byte limit (OpenAPI has no keyword
/// for a body's size): on the batch publish, [`crate::MAX_BATCH_BODY_BYTES`]. A body over it
/// is a 413.
pub const MAX_BODY_BYTES_EXTENSION: &str = "x-max-body-bytes";

/// Writes [`MAX_BODY_BYTES_EXTENSION`] on the batch publish's request body.
fn batch_body_limit(doc: &mut utoipa::openapi::OpenApi) {
    if let Some(utoipa::openapi::RefOr::T(body)) = doc
        .paths
        .paths
        .get_mut(crate::BATCH_PUBLISH_ROUTE)
        .and_then(|item| item.post.as_mut())
        .and_then(|op| op.request_body.as_mut())
    {
        body.extensions.get_or_insert_with(Default::default).insert(
            MAX_BODY_BYTES_EXTENSION.to_owned(),
            serde_json::json!(crate::MAX_BATCH_BODY_BYTES),
        );
    }
}

/// The `Idempotency-Key` header's pattern: 1-255 visible ASCII characters other than `"`
/// and `\`, bare or in double quotes (`tern_core::idempotency::parse_key`).
pub const IDEMPOTENCY_KEY_PATTERN: &str = r#"^(?:[!#-\[\]-~]{1,255}|"[!#-\[\]-~]{1,255}")$"#;

/// Adds to every POST operation, whatever route declared it (so a route added later gets
/// it): the optional `Idempotency-Key` header, the `Idempotent-Replayed` header on its 2xx
/// answers, its 409 (`idempotency-key-in-use`) and its 422 (`idempotency-key-reused`),
/// merged with a 409 or 422 the route declares itself.
fn idempotency_on_posts(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::header::HeaderBuilder;
    use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
    use utoipa::openapi::response::ResponseBuilder;
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    use utoipa::openapi::{ContentBuilder, Ref, RefOr, Required};

    let string = || ObjectBuilder::new().schema_type(Type::String);
    let problem = || {
        ContentBuilder::new()
            .schema(Some(Ref::from_schema_name("Problem")))
            .build()
    };
    // (status, problem type, what it means): the text of a new answer, or added to the
    // route's own 409 or 422.
    let extra = [
        (
            "409",
            "idempotency-key-in-use",
            "a request with this `Idempotency-Key` is still running: retry after `Retry-After` seconds for its answer.",
        ),
        (
            "422",
            "idempotency-key-reused",
            "the `Idempotency-Key` was used in the last 24 hours for another request (another route, path or body).",
        ),
    ];
    for item in doc.paths.paths.values_mut() {
        let Some(op) = item.post.as_mut() else {
            continue;
        };
        let parameters = op.parameters.get_or_insert_with(Vec::new);
        parameters.retain(|p| !matches!(p, RefOr::T(p) if p.name == "Idempotency-Key"));
        parameters.push(RefOr::T(
            ParameterBuilder::new()
                .name("Idempotency-Key")
                .parameter_in(ParameterIn::Header)
                .required(Required::False)
                .description(Some(
                    "Makes retries of this request safe (Stripe's semantics; draft-ietf-httpapi-idempotency-key-header): 1-255 visible ASCII characters (a UUID), bare or in double quotes, per tenant. For 24 hours the same key with the same request (route, path and body) answers what the first request answered (its status and body, with `Idempotent-Replayed: true`) and does nothing again; with another request it is a 422 `idempotency-key-reused`; while the first still runs, a 409 `idempotency-key-in-use`. An answer of 5xx (or 429) is not kept: a retry runs again.",
                ))
                .schema(Some(
                    string()
                        .min_length(Some(1))
                        .max_length(Some(257))
                        .pattern(Some(IDEMPOTENCY_KEY_PATTERN)),
                ))
                .build(),
        ));
        for (code, response) in &mut op.responses.responses {
            if code.starts_with('2')
                && let RefOr::T(r) = response
            {
                r.headers.insert(
                    "Idempotent-Replayed".to_owned(),
                    HeaderBuilder::new()
                        .schema(Some(string()))
                        .description(Some(
                            "`true` when this is the answer kept for the request's `Idempotency-Key`, replayed",
                        ))
                        .build()
                        .into(),
                );
            }
        }
        for (code, kind, meaning) in extra {
            match op.responses.responses.get_mut(code) {
                Some(RefOr::T(r)) => {
                    r.description = format!("{} Also `{kind}`: {meaning}", r.description);
                }
                _ => {
                    op.responses.responses.insert(
                        code.to_owned(),
                        RefOr::T(
                            ResponseBuilder::new()
                                .description(format!("`{kind}`: {meaning}"))
                                .content("application/problem+json", problem())
                                .build(),
                        ),
                    );
                }
            }
        }
    }
}

/// The document as the committed file holds it: pretty JSON and a final line break.
pub fn openapi_json() -> String {
    let mut text = openapi()
        .to_pretty_json()
        .unwrap_or_else(|e| unreachable!("the document serializes: {e}"));
    text.push('\n');
    text
}
