//! Extractors whose rejections are problems (`crate::problem`): a JSON body (naming the
//! field that does not deserialize), a query string (naming the parameter), path
//! parameters, and the tenant and resource ids of a path.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use serde::de::DeserializeOwned;
use tern_core::{EndpointId, EventId, TenantId};

use crate::problem::{ApiError, Kind};

/// A JSON request body. An empty body reads as `{}`, so a body whose fields are all
/// optional may be left out (`POST .../disable`). Refused: a body that is not
/// `application/json` (415), larger than the limit (413), or that does not deserialize
/// (400, `field` naming the JSON path of the first field at fault).
pub struct ApiJson<T>(pub T);

/// True for `application/json` and `application/<anything>+json`, any parameters.
fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// How a value read in two steps (a union read by its `type`,
/// `crate::reach::ReceiverAuthSetting`) names a field inside it: its message starts with
/// this, the field's path and a backtick, and [`field_at_fault`] appends that path.
pub(crate) const NESTED_FIELD: &str = "in `";

/// The field a deserialization error is about: its path, or for a missing field (which
/// serde reports at its parent) the parent's path and the name in the message; a field
/// inside a value read in two steps ([`NESTED_FIELD`]) is appended to the path.
fn field_at_fault(path: &str, message: &str) -> Option<String> {
    if let Some((nested, rest)) = message
        .strip_prefix(NESTED_FIELD)
        .and_then(|m| m.split_once("`: "))
    {
        let inner = if path == "." || path.is_empty() {
            nested.to_owned()
        } else {
            format!("{path}.{nested}")
        };
        return field_at_fault(&inner, rest);
    }
    let parent = (path != "." && !path.is_empty()).then_some(path);
    let missing = message
        .strip_prefix("missing field `")
        .and_then(|m| m.split('`').next());
    match (parent, missing) {
        (Some(p), Some(m)) => Some(format!("{p}.{m}")),
        (None, Some(m)) => Some(m.to_owned()),
        (Some(p), None) => Some(p.to_owned()),
        (None, None) => None,
    }
}

/// Reads `bytes` as `T`, the problem naming the field at fault.
///
/// # Errors
/// A 400 [`ApiError`].
pub fn from_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    let mut de = serde_json::Deserializer::from_slice(text);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let detail = format!("the body is not valid: {inner}");
        match field_at_fault(&path, &inner) {
            Some(field) => ApiError::invalid(field, detail),
            None => ApiError::new(Kind::Validation, detail),
        }
    })?;
    de.end()
        .map_err(|e| ApiError::new(Kind::Validation, format!("the body is not valid: {e}")))?;
    Ok(value)
}

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(Kind::PayloadTooLarge, e.body_text())
            } else {
                ApiError::new(Kind::Validation, e.body_text())
            }
        })?;
        if !bytes.is_empty() && !content_type.as_deref().is_some_and(is_json) {
            return Err(ApiError::new(
                Kind::UnsupportedMediaType,
                "send the body as JSON, with content-type: application/json",
            ));
        }
        from_json(&bytes).map(Self)
    }
}

/// A query string read into `T`; a parameter that does not parse is a 400 naming it.
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or_default();
        let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(de).map(Self).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner().to_string();
            let detail = format!("the query is not valid: {inner}");
            match field_at_fault(&path, &inner) {
                Some(field) => ApiError::invalid(field, detail),
                None => ApiError::new(Kind::Validation, detail),
            }
        })
    }
}

/// Path parameters; a path that does not decode is a 400.
pub struct ApiPath<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiPath<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(t)| Self(t))
            .map_err(|e| ApiError::new(Kind::Validation, e.body_text()))
    }
}

/// The path's tenant: a 400 naming `tenant_id` when it is not an id.
///
/// # Errors
/// [`ApiError`].
pub fn tenant(text: &str) -> Result<TenantId, ApiError> {
    TenantId::new(text).map_err(|e| ApiError::invalid("tenant_id", e.to_string()))
}

/// An endpoint id of the path: one that cannot exist is a 404, like one that does not.
///
/// # Errors
/// [`ApiError`].
pub fn endpoint_id(text: &str) -> Result<EndpointId, ApiError> {
    EndpointId::new(text).map_err(|_| ApiError::not_found("endpoint", text))
}

/// An event id of the path: one that cannot exist is a 404.
///
/// # Errors
/// [`ApiError`].
pub fn event_id(text: &str) -> Result<EventId, ApiError> {
    EventId::new(text).map_err(|_| ApiError::not_found("event", text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Body {
        url: String,
        #[serde(default)]
        timeout_ms: Option<u64>,
    }

    #[test]
    fn a_bad_field_is_named() {
        let e = from_json::<Body>(br#"{"url":"x","timeout_ms":"soon"}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("timeout_ms"), "{e:?}");
        let e = from_json::<Body>(br#"{"timeout_ms":5}"#).unwrap_err();
        assert_eq!(
            (e.kind, e.field.as_deref()),
            (Kind::Validation, Some("url"))
        );
        assert!(from_json::<Body>(br#"{"url":"x"} trailing"#).is_err());
        assert!(is_json("application/json; charset=utf-8"));
        assert!(is_json("application/merge-patch+json"));
        assert!(!is_json("text/plain"));
    }
}
