//! [`SecretValue`]: the one type every credential an endpoint holds for its receiver goes
//! through (a secret header's value, a basic password, a bearer token, an OAuth2 client
//! secret), so none of them is ever a bare `String` that a log line, a `Debug` print or
//! a `show` could print.
//!
//! Where they live: in the endpoint item of the endpoints table, sealed like the `whsec_`
//! signing secrets ([`crate::Secret`]) and the `whsk_` signing keys
//! ([`crate::signing_key::SigningKey`]): the store adapter encrypts exactly the values of
//! these three types with KMS data keys ([`crate::sealed`]) and the model holds them as
//! text only in the memory of the processes allowed to open them (the sender, the API).

use serde::{Deserialize, Serialize};

/// A credential Tern sends to a receiver. Its `Debug` output is redacted; it has no
/// `Display`. The text is read with [`SecretValue::expose`], at the one place that puts
/// it into a request (and the store that persists it).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SecretValue(String);

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretValue(***)")
    }
}

impl SecretValue {
    /// Wraps `text`. Checks are the caller's: each use has its own rules (a header value,
    /// a basic password, a bearer token).
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The text. Put it into a request or a store; never into a log, an error message or
    /// a view.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Length of the text, in bytes (for bounds checks that must not print it).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when the text is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_text_and_serde_keeps_it() {
        let v = SecretValue::new("s3cr3t-value");
        assert_eq!(format!("{v:?}"), "SecretValue(***)");
        assert!(!format!("{:?}", Some(&v)).contains("s3cr3t"));
        let json = serde_json::to_string(&v).unwrap();
        assert_eq!(json, "\"s3cr3t-value\"");
        assert_eq!(serde_json::from_str::<SecretValue>(&json).unwrap(), v);
    }
}
