//! Local mode's check of AWS Signature Version 4, as API Gateway makes it in AWS for an
//! IAM-authorized route: the request must carry an `Authorization: AWS4-HMAC-SHA256 ...`
//! header for a known access key, scoped to this region and the `execute-api` service, an
//! `x-amz-date` within [`MAX_CLOCK_SKEW`] of now, and a signature that the AWS SDK's own
//! signer (`aws-sigv4`) computes again from the method, path, query, the headers the
//! client signed and the body. So a client's signing path (botocore, the JavaScript SDK's
//! `SignatureV4`, `curl --aws-sigv4`) is exercised locally exactly as against AWS.
//!
//! Not supported locally: presigned URLs (the signature in the query) and session tokens.

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use axum::http::HeaderMap;
use chrono::{NaiveDateTime, TimeZone, Utc};
use subtle::ConstantTimeEq;
use tern_core::TenantId;

/// The only algorithm accepted.
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// Service name a caller signs for: API Gateway's (`execute-api`).
pub const SERVICE: &str = "execute-api";

/// Largest difference between a request's `x-amz-date` and the clock: 5 minutes, as API
/// Gateway allows ("a request must reach AWS within five minutes of the time stamp in the
/// request", IAM User Guide, "AWS Signature Version 4 for API requests"; a later one is
/// refused 403 "Signature expired"). Some other services allow 15 minutes; API Gateway,
/// which local mode stands in for, does not.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(5 * 60);

/// One key pair local mode accepts.
#[derive(Clone)]
pub struct LocalCredential {
    /// `AWS_ACCESS_KEY_ID`.
    pub access_key_id: String,
    /// `AWS_SECRET_ACCESS_KEY`.
    pub secret_access_key: String,
    /// The one tenant this key may act on (what an IAM policy on
    /// `.../v1/tenants/<id>/*` grants in AWS), or `None` for every tenant.
    pub tenant: Option<TenantId>,
}

impl std::fmt::Debug for LocalCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCredential")
            .field("access_key_id", &self.access_key_id)
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

/// Why a request's signature was refused. Each is a 403 `signature-refused`, as API
/// Gateway answers a request its IAM authorization refuses; the text says which rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigV4Error {
    /// No `Authorization` header.
    #[error(
        "the request is not signed: sign it with AWS Signature Version 4 for service execute-api"
    )]
    Missing,
    /// The header is not a SigV4 authorization.
    #[error("the Authorization header is not an AWS4-HMAC-SHA256 signature: {0}")]
    Malformed(String),
    /// The access key is unknown.
    #[error("the access key is not known here")]
    UnknownKey,
    /// The credential scope names another region or service, or another day than
    /// `x-amz-date`.
    #[error("the credential scope {0} does not match {1}")]
    Scope(String, String),
    /// `x-amz-date` is missing, unreadable, or too far from now.
    #[error("x-amz-date {0}")]
    Date(String),
    /// The signature is not the one the request's content gives.
    #[error("the signature does not match the request")]
    Mismatch,
}

/// Checks SigV4 signatures against a set of local credentials.
#[derive(Debug, Clone)]
pub struct SigV4Verifier {
    credentials: Vec<LocalCredential>,
    region: String,
}

/// The parts of an `Authorization` header.
struct Authorization<'a> {
    access_key: &'a str,
    date: &'a str,
    region: &'a str,
    service: &'a str,
    signed_headers: Vec<&'a str>,
    signature: &'a str,
}

fn parse(header: &str) -> Result<Authorization<'_>, SigV4Error> {
    let bad = |why: &str| SigV4Error::Malformed(why.to_owned());
    let rest = header
        .strip_prefix(ALGORITHM)
        .ok_or_else(|| bad("the algorithm must be AWS4-HMAC-SHA256"))?;
    let (mut credential, mut signed, mut signature) = (None, None, None);
    for part in rest.split(',') {
        let (key, value) = part
            .trim()
            .split_once('=')
            .ok_or_else(|| bad("a part is not key=value"))?;
        match key {
            "Credential" => credential = Some(value),
            "SignedHeaders" => signed = Some(value),
            "Signature" => signature = Some(value),
            _ => return Err(bad("unknown part")),
        }
    }
    let credential = credential.ok_or_else(|| bad("no Credential"))?;
    let scope: Vec<&str> = credential.split('/').collect();
    let [access_key, date, region, service, "aws4_request"] = scope.as_slice() else {
        return Err(bad(
            "Credential is not <key>/<date>/<region>/<service>/aws4_request",
        ));
    };
    let signed_headers: Vec<&str> = signed
        .ok_or_else(|| bad("no SignedHeaders"))?
        .split(';')
        .collect();
    let signature = signature.ok_or_else(|| bad("no Signature"))?;
    if signature.len() != 64 || !signature.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad("Signature is not 64 hex digits"));
    }
    Ok(Authorization {
        access_key,
        date,
        region,
        service,
        signed_headers,
        signature,
    })
}

impl SigV4Verifier {
    /// A verifier for `region` (local mode: `us-east-1`, as `.tern/local.env` says).
    pub fn new(region: impl Into<String>, credentials: Vec<LocalCredential>) -> Self {
        Self {
            credentials,
            region: region.into(),
        }
    }

    /// Checks one request (`path_and_query` as sent, e.g. `/v1/tenants/t/endpoints?limit=5`)
    /// at `now`; returns the credential that signed it.
    ///
    /// # Errors
    /// [`SigV4Error`] naming the rule broken.
    pub fn verify(
        &self,
        method: &str,
        path_and_query: &str,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<&LocalCredential, SigV4Error> {
        let header = headers
            .get(axum::http::header::AUTHORIZATION)
            .ok_or(SigV4Error::Missing)?
            .to_str()
            .map_err(|_| SigV4Error::Malformed("not ASCII".into()))?;
        let auth = parse(header)?;
        let credential = self
            .credentials
            .iter()
            .find(|c| c.access_key_id == auth.access_key)
            .ok_or(SigV4Error::UnknownKey)?;
        let amz_date = headers
            .get("x-amz-date")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| SigV4Error::Date("is missing (sign with x-amz-date)".into()))?;
        let at = NaiveDateTime::parse_from_str(amz_date, "%Y%m%dT%H%M%SZ")
            .map_err(|_| SigV4Error::Date(format!("{amz_date:?} is not YYYYMMDDTHHMMSSZ")))?;
        let at: SystemTime = Utc.from_utc_datetime(&at).into();
        let skew = now
            .duration_since(at)
            .or_else(|_| at.duration_since(now))
            .unwrap_or_default();
        if skew > MAX_CLOCK_SKEW {
            return Err(SigV4Error::Date(format!(
                "{amz_date} is more than 5 minutes from the server's clock"
            )));
        }
        let expected_scope = format!("{}/{}/{SERVICE}", &amz_date[..8], self.region);
        let scope = format!("{}/{}/{}", auth.date, auth.region, auth.service);
        if scope != expected_scope {
            return Err(SigV4Error::Scope(scope, expected_scope));
        }
        for required in ["host", "x-amz-date"] {
            if !auth.signed_headers.contains(&required) {
                return Err(SigV4Error::Malformed(format!("{required} must be signed")));
            }
        }
        // The signed headers as received, each value of a repeated header in order.
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        for name in &auth.signed_headers {
            let mut found = false;
            for value in headers.get_all(*name) {
                let value = value
                    .to_str()
                    .map_err(|_| SigV4Error::Malformed(format!("{name} is not ASCII")))?;
                pairs.push((name, value));
                found = true;
            }
            if !found {
                return Err(SigV4Error::Malformed(format!(
                    "signed header {name} is missing"
                )));
            }
        }
        let identity: Identity = Credentials::new(
            &credential.access_key_id,
            &credential.secret_access_key,
            None,
            None,
            "tern-local",
        )
        .into();
        let mut settings = SigningSettings::default();
        // Sign exactly what the client signed, whatever it is (user-agent included).
        settings.excluded_headers = Some(Vec::new());
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(SERVICE)
            .time(at)
            .settings(settings)
            .build()
            .map_err(|e| SigV4Error::Malformed(e.to_string()))?
            .into();
        let request = SignableRequest::new(
            method,
            path_and_query,
            pairs.into_iter(),
            SignableBody::Bytes(body),
        )
        .map_err(|e| SigV4Error::Malformed(e.to_string()))?;
        let (_, signature) = sign(request, &params)
            .map_err(|e| SigV4Error::Malformed(e.to_string()))?
            .into_parts();
        if bool::from(signature.as_bytes().ct_eq(auth.signature.as_bytes())) {
            Ok(credential)
        } else {
            Err(SigV4Error::Mismatch)
        }
    }
}

/// Signs a request as a client would (tests and tools): the headers to add
/// (`authorization`, `x-amz-date`). `headers` must hold `host`.
///
/// # Errors
/// The signer's error text.
pub fn sign_request(
    credential: &LocalCredential,
    region: &str,
    method: &str,
    path_and_query: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    at: SystemTime,
) -> Result<Vec<(String, String)>, String> {
    let identity: Identity = Credentials::new(
        &credential.access_key_id,
        &credential.secret_access_key,
        None,
        None,
        "tern-client",
    )
    .into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(SERVICE)
        .time(at)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| e.to_string())?
        .into();
    let request = SignableRequest::new(
        method,
        path_and_query,
        headers.iter().copied(),
        SignableBody::Bytes(body),
    )
    .map_err(|e| e.to_string())?;
    let (instructions, _) = sign(request, &params)
        .map_err(|e| e.to_string())?
        .into_parts();
    Ok(instructions
        .headers()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tenant: Option<&str>) -> LocalCredential {
        LocalCredential {
            access_key_id: "AKIDLOCAL".into(),
            secret_access_key: "s3cret".into(),
            tenant: tenant.map(|t| TenantId::new(t).unwrap()),
        }
    }

    fn signed(method: &str, path: &str, body: &[u8], at: SystemTime) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("host", "127.0.0.1:8791".parse().unwrap());
        h.insert("content-type", "application/json".parse().unwrap());
        let add = sign_request(
            &key(None),
            "us-east-1",
            method,
            path,
            &[
                ("host", "127.0.0.1:8791"),
                ("content-type", "application/json"),
            ],
            body,
            at,
        )
        .unwrap();
        for (k, v) in add {
            h.insert(
                axum::http::HeaderName::try_from(k).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn a_signed_request_verifies_and_any_change_does_not() {
        let v = SigV4Verifier::new("us-east-1", vec![key(Some("tnt_a"))]);
        let now = SystemTime::now();
        let path = "/v1/tenants/tnt_a/endpoints?limit=5";
        let h = signed("POST", path, b"{}", now);
        let c = v.verify("POST", path, &h, b"{}", now).unwrap();
        assert_eq!(c.tenant.as_ref().map(TenantId::as_str), Some("tnt_a"));
        // Another body, path, method, or an hour later.
        assert_eq!(
            v.verify("POST", path, &h, b"{ }", now).unwrap_err(),
            SigV4Error::Mismatch
        );
        assert_eq!(
            v.verify(
                "POST",
                "/v1/tenants/tnt_b/endpoints?limit=5",
                &h,
                b"{}",
                now
            )
            .unwrap_err(),
            SigV4Error::Mismatch
        );
        assert_eq!(
            v.verify("PUT", path, &h, b"{}", now).unwrap_err(),
            SigV4Error::Mismatch
        );
        assert!(matches!(
            v.verify("POST", path, &h, b"{}", now + Duration::from_secs(3600)),
            Err(SigV4Error::Date(_))
        ));
        // No header; an unknown key; another service.
        assert_eq!(
            v.verify("POST", path, &HeaderMap::new(), b"{}", now)
                .unwrap_err(),
            SigV4Error::Missing
        );
        let other = SigV4Verifier::new(
            "us-east-1",
            vec![LocalCredential {
                access_key_id: "OTHER".into(),
                ..key(None)
            }],
        );
        assert_eq!(
            other.verify("POST", path, &h, b"{}", now).unwrap_err(),
            SigV4Error::UnknownKey
        );
        let mut wrong = h.clone();
        let auth = h["authorization"]
            .to_str()
            .unwrap()
            .replace("/execute-api/", "/s3/");
        wrong.insert("authorization", auth.parse().unwrap());
        assert!(matches!(
            v.verify("POST", path, &wrong, b"{}", now),
            Err(SigV4Error::Scope(..))
        ));
    }
}
