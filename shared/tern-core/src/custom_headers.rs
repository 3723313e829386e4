//! Custom headers per endpoint: name/value pairs a receiver's gateway asks for (an API key,
//! a tenant tag), sent with every attempt after Tern's own headers.
//!
//! A header may be marked secret ([`FieldValue::Secret`]): its value is kept in a
//! [`SecretValue`], sent marked sensitive (HTTP/2 never indexes it, RFC 7541 §7.1.3) and
//! never logged or shown (`tern endpoints show` says it is set).
//!
//! Refused names, with why:
//! - Tern's own: `webhook-*` (the Standard Webhooks family, `webhook-event-type`
//!   included), `idempotency-key`, `x-webhook-signature`, `user-agent`, `content-type`: a
//!   receiver must be able to trust that they are Tern's.
//! - Framing: `host`, `content-length`, `content-encoding`, `transfer-encoding`, `expect`:
//!   the client sets them from the URL and the body; another value would misframe or
//!   misdescribe the request.
//! - Hop-by-hop (RFC 9110 §7.6.1; forbidden in HTTP/2 by RFC 9113 §8.2.2): `connection`,
//!   `keep-alive`, `proxy-connection`, `te`, `trailer`, `upgrade`, `http2-settings`,
//!   `proxy-authorization`, `proxy-authenticate`.
//! - `authorization` only when the endpoint has an authentication of its own
//!   ([`crate::receiver_auth::ReceiverAuth`]): it would send two.

use serde::{Deserialize, Serialize};

use crate::secret_value::SecretValue;

/// Most custom headers per endpoint: 20.
pub const MAX_CUSTOM_HEADERS: usize = 20;
/// Longest header name, in bytes: 64.
pub const MAX_HEADER_NAME_BYTES: usize = 64;
/// Longest header value, in bytes: 2,048.
pub const MAX_HEADER_VALUE_BYTES: usize = 2_048;
/// Most bytes of all custom headers together (names and values): 4,096. With Tern's own
/// headers (about 600 bytes with two signatures of each scheme) and an `authorization`
/// header the request head stays well below 10,240 bytes, API Gateway's limit on the
/// request line and headers together (its REST API quota, the strictest common receiver
/// front), and below the 8 KiB per-line limits of nginx and Apache.
pub const MAX_CUSTOM_HEADER_BYTES: usize = 4_096;

/// Names (lowercase) never accepted as custom headers, each with why.
pub const FORBIDDEN_NAMES: [(&str, &str); 18] = [
    ("idempotency-key", "Tern's own header"),
    ("x-webhook-signature", "Tern's own header"),
    ("user-agent", "Tern's own header"),
    ("content-type", "Tern's own header"),
    ("host", "set from the endpoint URL"),
    ("content-length", "set from the body"),
    ("content-encoding", "would misdescribe the body"),
    ("transfer-encoding", "hop-by-hop, set by the client"),
    ("expect", "changes how the request is sent"),
    ("connection", "hop-by-hop (RFC 9110 §7.6.1)"),
    ("keep-alive", "hop-by-hop (RFC 9110 §7.6.1)"),
    ("proxy-connection", "hop-by-hop (RFC 9110 §7.6.1)"),
    ("te", "hop-by-hop (RFC 9110 §7.6.1)"),
    ("trailer", "hop-by-hop (RFC 9110 §7.6.1)"),
    ("upgrade", "hop-by-hop (RFC 9110 §7.6.1)"),
    ("http2-settings", "hop-by-hop (RFC 9110 §7.6.1)"),
    (
        "proxy-authorization",
        "hop-by-hop, for a proxy (RFC 9110 §11.7.2)",
    ),
    (
        "proxy-authenticate",
        "a proxy's response header (RFC 9110 §11.7.1)",
    ),
];

/// Prefix of Tern's Standard Webhooks headers, refused as a custom header name.
pub const TERN_HEADER_PREFIX: &str = "webhook-";

/// A header value that is either shown (`plain`) or kept like a signing secret
/// (`secret`). Stored as `{"plain": "..."}` or `{"secret": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldValue {
    /// Shown by `tern endpoints show` and the console.
    Plain(String),
    /// Never logged or shown; sent marked sensitive.
    Secret(SecretValue),
}

impl FieldValue {
    /// The text to send.
    pub fn expose(&self) -> &str {
        match self {
            Self::Plain(v) => v,
            Self::Secret(v) => v.expose(),
        }
    }

    /// True for a secret value.
    pub fn is_secret(&self) -> bool {
        matches!(self, Self::Secret(_))
    }
}

/// One custom header of an endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CustomHeader {
    /// The name, lowercase (RFC 9110 §5.1: names are case-insensitive; HTTP/2 sends them
    /// lowercase).
    pub name: String,
    /// The value.
    pub value: FieldValue,
}

/// Why a custom header is refused. Never repeats a value (it may be secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The name is empty, too long, or not an RFC 9110 §5.6.2 token.
    #[error(
        "header name {0:?} is not a token: 1-{MAX_HEADER_NAME_BYTES} characters of letters, digits and !#$%&'*+-.^_`|~ (RFC 9110 §5.6.2)"
    )]
    BadName(String),
    /// Tern sets this header itself, or it is hop-by-hop.
    #[error("header {name:?} cannot be set: {why}")]
    Forbidden {
        /// The name.
        name: String,
        /// Why.
        why: &'static str,
    },
    /// The same name twice.
    #[error("header {0:?} is given twice")]
    Duplicate(String),
    /// More than [`MAX_CUSTOM_HEADERS`].
    #[error("at most {MAX_CUSTOM_HEADERS} custom headers per endpoint")]
    TooMany,
    /// The value is longer than [`MAX_HEADER_VALUE_BYTES`], or holds a character a
    /// header value cannot carry.
    #[error(
        "the value of header {0:?} is not a valid header value: at most {MAX_HEADER_VALUE_BYTES} bytes of visible ASCII, spaces and tabs inside (RFC 9110 §5.5), no line breaks"
    )]
    BadValue(String),
    /// A secret header with an empty value.
    #[error("the secret header {0:?} has an empty value")]
    EmptySecret(String),
    /// All custom headers together are over [`MAX_CUSTOM_HEADER_BYTES`].
    #[error("custom headers take {0} bytes together; at most {MAX_CUSTOM_HEADER_BYTES}")]
    TooLarge(usize),
}

/// True for an RFC 9110 §5.6.2 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Checks a header name and returns it lowercase.
///
/// # Errors
/// [`HeaderError::BadName`] or [`HeaderError::Forbidden`].
pub fn header_name(name: &str) -> Result<String, HeaderError> {
    if name.is_empty() || name.len() > MAX_HEADER_NAME_BYTES || !name.bytes().all(is_tchar) {
        return Err(HeaderError::BadName(
            crate::sqs_text::clean(name, 80).into_owned(),
        ));
    }
    let lower = name.to_ascii_lowercase();
    if lower.starts_with(TERN_HEADER_PREFIX) {
        return Err(HeaderError::Forbidden {
            name: lower,
            why: "the webhook-* headers are Tern's own (Standard Webhooks)",
        });
    }
    if let Some((_, why)) = FORBIDDEN_NAMES.iter().find(|(n, _)| *n == lower) {
        return Err(HeaderError::Forbidden { name: lower, why });
    }
    Ok(lower)
}

/// True when `value` can be sent as a header value: at most [`MAX_HEADER_VALUE_BYTES`]
/// bytes of visible ASCII, with spaces and tabs only inside (RFC 9110 §5.5 `field-value`
/// without `obs-text`: bytes over 0x7F are read differently by different servers).
pub fn is_header_value(value: &str) -> bool {
    let b = value.as_bytes();
    let inner = |c: &u8| (0x21..=0x7E).contains(c) || *c == b' ' || *c == b'\t';
    b.len() <= MAX_HEADER_VALUE_BYTES
        && b.iter().all(inner)
        && !b.first().is_some_and(|c| *c == b' ' || *c == b'\t')
        && !b.last().is_some_and(|c| *c == b' ' || *c == b'\t')
}

impl CustomHeader {
    /// A checked header: the name lowercase, the value a valid header value.
    ///
    /// # Errors
    /// The first [`HeaderError`].
    pub fn new(name: &str, value: FieldValue) -> Result<Self, HeaderError> {
        let name = header_name(name)?;
        if !is_header_value(value.expose()) {
            return Err(HeaderError::BadValue(name));
        }
        if value.is_secret() && value.expose().is_empty() {
            return Err(HeaderError::EmptySecret(name));
        }
        Ok(Self { name, value })
    }

    /// Bytes it takes in the request, name and value.
    pub fn size(&self) -> usize {
        self.name.len() + self.value.expose().len()
    }
}

/// Checks an endpoint's custom headers as a whole: each one ([`CustomHeader::new`]'s
/// rules, again, for headers read from a store or an API body), no name twice, at most
/// [`MAX_CUSTOM_HEADERS`] and [`MAX_CUSTOM_HEADER_BYTES`].
///
/// # Errors
/// The first [`HeaderError`].
pub fn validate(headers: &[CustomHeader]) -> Result<(), HeaderError> {
    if headers.len() > MAX_CUSTOM_HEADERS {
        return Err(HeaderError::TooMany);
    }
    let mut seen = std::collections::HashSet::new();
    for h in headers {
        let checked = CustomHeader::new(&h.name, h.value.clone())?;
        if checked.name != h.name {
            // Stored names are lowercase: a mixed-case one did not come through `new`.
            return Err(HeaderError::BadName(h.name.clone()));
        }
        if !seen.insert(h.name.as_str()) {
            return Err(HeaderError::Duplicate(h.name.clone()));
        }
    }
    let total: usize = headers.iter().map(CustomHeader::size).sum();
    if total > MAX_CUSTOM_HEADER_BYTES {
        return Err(HeaderError::TooLarge(total));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(v: &str) -> FieldValue {
        FieldValue::Plain(v.into())
    }

    #[test]
    fn names_are_tokens_kept_lowercase() {
        assert_eq!(
            CustomHeader::new("X-Api-Key", plain("a")).unwrap().name,
            "x-api-key"
        );
        for bad in [
            "",
            "x api",
            "x:y",
            "x\r\nfoo",
            "é",
            ":authority",
            &"x".repeat(65),
        ] {
            assert!(
                matches!(header_name(bad), Err(HeaderError::BadName(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn terns_own_framing_and_hop_by_hop_names_are_refused() {
        for name in [
            "webhook-id",
            "Webhook-Signature",
            "webhook-event-type",
            "webhook-anything",
            "idempotency-key",
            "X-Webhook-Signature",
            "user-agent",
            "content-type",
            "host",
            "Content-Length",
            "transfer-encoding",
            "connection",
            "keep-alive",
            "te",
            "trailer",
            "upgrade",
            "proxy-authorization",
        ] {
            assert!(
                matches!(header_name(name), Err(HeaderError::Forbidden { .. })),
                "{name}"
            );
        }
        assert!(header_name("authorization").is_ok(), "checked per endpoint");
        assert!(header_name("x-webhook-tenant").is_ok());
    }

    #[test]
    fn values_must_be_header_values_and_errors_never_repeat_them() {
        for bad in ["a\r\nx-evil: 1", "a\nb", "nul\0", " lead", "trail\t", "é"] {
            let err =
                CustomHeader::new("x-k", FieldValue::Secret(SecretValue::new(bad))).unwrap_err();
            assert_eq!(err, HeaderError::BadValue("x-k".into()));
            assert!(!err.to_string().contains(bad.trim()), "{err}");
        }
        assert!(CustomHeader::new("x-k", plain("a b\tc")).is_ok());
        assert!(CustomHeader::new("x-k", plain("")).is_ok());
        assert_eq!(
            CustomHeader::new("x-k", FieldValue::Secret(SecretValue::new(""))),
            Err(HeaderError::EmptySecret("x-k".into()))
        );
        assert!(CustomHeader::new("x-k", plain(&"v".repeat(2049))).is_err());
    }

    #[test]
    fn the_set_is_bounded_and_has_no_duplicates() {
        let h = |n: &str, v: &str| CustomHeader::new(n, plain(v)).unwrap();
        assert_eq!(
            validate(&[h("x-a", "1"), h("X-A", "2")]),
            Err(HeaderError::Duplicate("x-a".into()))
        );
        let many: Vec<_> = (0..21).map(|i| h(&format!("x-{i}"), "v")).collect();
        assert_eq!(validate(&many), Err(HeaderError::TooMany));
        let big: Vec<_> = (0..3)
            .map(|i| h(&format!("x-{i}"), &"v".repeat(2000)))
            .collect();
        assert!(matches!(validate(&big), Err(HeaderError::TooLarge(_))));
        // A stored header that skipped `new` is checked again.
        let sneaky = CustomHeader {
            name: "host".into(),
            value: plain("evil.example"),
        };
        assert!(matches!(
            validate(&[sneaky]),
            Err(HeaderError::Forbidden { .. })
        ));
    }

    #[test]
    fn stored_as_tagged_values() {
        let h = CustomHeader::new("x-api-key", FieldValue::Secret(SecretValue::new("k"))).unwrap();
        assert_eq!(
            serde_json::to_value(&h).unwrap(),
            serde_json::json!({"name": "x-api-key", "value": {"secret": "k"}})
        );
        assert!(!format!("{h:?}").contains("\"k\""));
    }
}
