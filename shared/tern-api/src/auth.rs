//! Who is calling: the one place where the two hosts differ.
//!
//! - In AWS ([`Authenticator::ApiGatewayIam`]) the API sits behind API Gateway (HTTP API)
//!   with IAM authorization: API Gateway checks the caller's SigV4 signature and its IAM
//!   policy (which can confine a role to `.../v1/tenants/<id>/*`) before the function runs,
//!   and passes the caller in the request context. The function trusts that and refuses a
//!   request without an IAM caller in its context (a misconfigured route).
//! - In local mode ([`Authenticator::LocalSigV4`]) nothing stands in front: the function
//!   checks the signature itself ([`crate::sigv4`]) against the credentials `tern local`
//!   writes to `.tern/local.env`, and a credential scoped to one tenant gets a 403 on
//!   another tenant's paths, as an IAM policy denial does.
//!
//! Every route, the fallback included, is behind [`authenticate`].

use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use lambda_http::RequestExt;
use lambda_http::request::RequestContext;
use tern_core::TenantId;

use crate::problem::{ApiError, Kind};
use crate::sigv4::SigV4Verifier;

/// How callers are authenticated.
#[derive(Clone, Debug)]
pub enum Authenticator {
    /// Trust API Gateway's IAM authorization; read the caller from the request context.
    ApiGatewayIam,
    /// Verify SigV4 here (local mode). The body is read (up to `body_limit` bytes) to check
    /// its hash.
    LocalSigV4 {
        /// The keys and their scopes.
        verifier: Arc<SigV4Verifier>,
        /// Largest body read, in bytes.
        body_limit: usize,
    },
}

/// The authenticated caller, put in the request's extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// Who: the IAM principal's ARN (or caller id) in AWS, the access key in local mode.
    pub principal: String,
    /// The one tenant it may act on, when it is scoped (local mode only: in AWS, the IAM
    /// policy is enforced by API Gateway).
    pub tenant: Option<TenantId>,
}

/// The tenant a path names (`/v1/tenants/<id>/...`), as text.
pub(crate) fn path_tenant(path: &str) -> Option<&str> {
    path.strip_prefix("/v1/tenants/")?.split('/').next()
}

/// The caller API Gateway authorized, from the Lambda request context.
///
/// # Errors
/// A 401 when the context has no IAM caller.
pub fn iam_caller(request: &http::Request<Body>) -> Result<Caller, ApiError> {
    let iam = match request.extensions().request_context_ref() {
        Some(RequestContext::ApiGatewayV2(ctx)) => {
            ctx.authorizer.as_ref().and_then(|a| a.iam.as_ref())
        }
        _ => None,
    };
    let principal = iam
        .and_then(|i| {
            i.user_arn
                .clone()
                .or_else(|| i.caller_id.clone())
                .or_else(|| i.access_key.clone())
        })
        .ok_or_else(|| {
            ApiError::new(
                Kind::Unauthorized,
                "no IAM caller in the request context: the route must use IAM authorization",
            )
        })?;
    Ok(Caller {
        principal,
        tenant: None,
    })
}

/// Authenticates every request before it reaches a route (`axum::middleware::from_fn_with_state`).
pub async fn authenticate(
    State(auth): State<Authenticator>,
    request: Request,
    next: Next,
) -> Response {
    let (caller, request) = match &auth {
        Authenticator::ApiGatewayIam => match iam_caller(&request) {
            Ok(c) => (c, request),
            Err(e) => return e.into_response(),
        },
        Authenticator::LocalSigV4 {
            verifier,
            body_limit,
        } => {
            let (parts, body) = request.into_parts();
            let bytes = match axum::body::to_bytes(body, *body_limit).await {
                Ok(b) => b,
                Err(_) => {
                    return ApiError::new(
                        Kind::PayloadTooLarge,
                        format!("the body is larger than {body_limit} bytes"),
                    )
                    .into_response();
                }
            };
            let path = parts
                .uri
                .path_and_query()
                .map_or_else(|| parts.uri.path().to_owned(), |p| p.as_str().to_owned());
            let verified = verifier.verify(
                parts.method.as_str(),
                &path,
                &parts.headers,
                &bytes,
                SystemTime::now(),
            );
            let caller = match verified {
                Ok(c) => Caller {
                    principal: c.access_key_id.clone(),
                    tenant: c.tenant.clone(),
                },
                Err(e) => {
                    return ApiError::new(Kind::SignatureRefused, e.to_string()).into_response();
                }
            };
            (caller, Request::from_parts(parts, Body::from(bytes)))
        }
    };
    if let (Some(scope), Some(asked)) = (&caller.tenant, path_tenant(request.uri().path()))
        && scope.as_str() != asked
    {
        return ApiError::new(
            Kind::Forbidden,
            format!("these credentials may act on tenant {scope} only"),
        )
        .into_response();
    }
    let mut request = request;
    request.extensions_mut().insert(caller);
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use lambda_http::aws_lambda_events::apigw::{
        ApiGatewayRequestAuthorizer, ApiGatewayRequestAuthorizerIamDescription,
        ApiGatewayV2httpRequestContext,
    };

    #[test]
    fn the_iam_caller_comes_from_the_request_context_only() {
        let bare = http::Request::new(Body::empty());
        assert_eq!(iam_caller(&bare).unwrap_err().kind, Kind::Unauthorized);
        let mut iam = ApiGatewayRequestAuthorizerIamDescription::default();
        iam.user_arn = Some("arn:aws:sts::123456789012:assumed-role/tenant-a/app".into());
        let mut authorizer = ApiGatewayRequestAuthorizer::default();
        authorizer.iam = Some(iam);
        let mut ctx = ApiGatewayV2httpRequestContext::default();
        ctx.authorizer = Some(authorizer);
        let request = http::Request::new(Body::empty())
            .with_request_context(RequestContext::ApiGatewayV2(ctx.clone()));
        let caller = iam_caller(&request).unwrap();
        assert!(caller.principal.ends_with("tenant-a/app"));
        // A context without an IAM authorizer (a route left open) is refused.
        ctx.authorizer = None;
        let open = http::Request::new(Body::empty())
            .with_request_context(RequestContext::ApiGatewayV2(ctx));
        assert_eq!(iam_caller(&open).unwrap_err().kind, Kind::Unauthorized);
        assert_eq!(path_tenant("/v1/tenants/tnt_a/endpoints"), Some("tnt_a"));
        assert_eq!(path_tenant("/v2/x"), None);
    }
}
