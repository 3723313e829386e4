//! The operator side of an endpoint's reach settings: custom headers, authentication to
//! the receiver and Ed25519 (`v1a`) keys. Views that show what is set and never a secret
//! value, the header list edits of `tern endpoints update`, the SSRF check of an OAuth2
//! token URL, and the signing key rotation.

use chrono::{DateTime, Utc};
use serde::Serialize;
use tern_core::custom_headers::{CustomHeader, FieldValue};
use tern_core::ports::EndpointStore;
use tern_core::receiver_auth::{ClientAuthMethod, ReceiverAuth};
use tern_core::signing_key::{PublicKey, SigningKey};
use tern_core::{Endpoint, EndpointId, TenantId};
use tern_http::{DestinationPolicy, HostLookup};

use crate::OpsError;

/// What `show` prints instead of a secret value.
pub const SECRET_SET: &str = "(secret, set)";

/// One custom header as `tern endpoints show` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeaderView {
    /// Lowercase name.
    pub name: String,
    /// The value of a plain header; `null` for a secret one.
    pub value: Option<String>,
    /// True when the value is secret (stored, never shown).
    pub secret: bool,
}

/// An endpoint's authentication as `tern endpoints show` reports it: every setting but
/// the secrets, which are only said to be set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuthView {
    /// `none`, `basic`, `bearer` or `oauth2_client_credentials`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Basic: the user name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// OAuth2: the token endpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_url: Option<String>,
    /// OAuth2: the client id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// OAuth2: the scopes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// OAuth2: the audience.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
    /// OAuth2: `client_secret_basic` or `client_secret_post`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_auth: Option<&'static str>,
    /// Which secret the setting holds, never its value: `password`, `token` or
    /// `client_secret`; `null` for `none`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<&'static str>,
}

impl AuthView {
    /// The view of `auth`.
    pub fn of(auth: &ReceiverAuth) -> Self {
        let mut v = Self {
            kind: auth.kind(),
            username: None,
            token_url: None,
            client_id: None,
            scope: None,
            audience: None,
            client_auth: None,
            secret: None,
        };
        match auth {
            ReceiverAuth::None => {}
            ReceiverAuth::Basic { username, .. } => {
                v.username = Some(username.clone());
                v.secret = Some("password");
            }
            ReceiverAuth::Bearer { .. } => v.secret = Some("token"),
            ReceiverAuth::Oauth2ClientCredentials(g) => {
                v.token_url = Some(g.token_url.clone());
                v.client_id = Some(g.client_id.clone());
                v.scope.clone_from(&g.scope);
                v.audience.clone_from(&g.audience);
                v.client_auth = Some(g.client_auth.as_str());
                v.secret = Some("client_secret");
            }
        }
        v
    }

    /// One line: the type and its settings, the secret as [`SECRET_SET`].
    pub fn line(&self) -> String {
        let mut parts = vec![self.kind.to_owned()];
        let mut add = |k: &str, v: &Option<String>| {
            if let Some(v) = v {
                parts.push(format!("{k}={v}"));
            }
        };
        add("username", &self.username);
        add("token_url", &self.token_url);
        add("client_id", &self.client_id);
        add("scope", &self.scope);
        add("audience", &self.audience);
        if let Some(m) = self.client_auth {
            parts.push(format!("client_auth={m}"));
        }
        if let Some(s) = self.secret {
            parts.push(format!("{s}={SECRET_SET}"));
        }
        parts.join(" ")
    }
}

/// One Ed25519 key as `tern endpoints show` reports it: its public key (what the
/// receiver verifies `v1a` signatures with), never the secret key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SigningKeyView {
    /// `whpk_` + base64 of the public key.
    pub public_key: PublicKey,
    /// `current`, `previous` (signs until `expires_at`) or `expired`.
    pub state: &'static str,
    /// When it was added (RFC 3339).
    pub created_at: DateTime<Utc>,
    /// When it stops signing (RFC 3339); `null` for the current key.
    pub expires_at: Option<DateTime<Utc>>,
}

/// The header views of `e`.
pub fn header_views(e: &Endpoint) -> Vec<HeaderView> {
    e.headers
        .iter()
        .map(|h| HeaderView {
            name: h.name.clone(),
            value: match &h.value {
                FieldValue::Plain(v) => Some(v.clone()),
                FieldValue::Secret(_) => None,
            },
            secret: h.value.is_secret(),
        })
        .collect()
}

/// The signing key views of `e` at `now`.
pub fn signing_key_views(e: &Endpoint, now: DateTime<Utc>) -> Vec<SigningKeyView> {
    e.signing_keys
        .iter()
        .map(|k| SigningKeyView {
            public_key: k.key.public_key(),
            state: match k.expires_at {
                None => "current",
                Some(t) if t > now => "previous",
                Some(_) => "expired",
            },
            created_at: k.created_at,
            expires_at: k.expires_at,
        })
        .collect()
}

/// `current` with the headers in `set` added or replaced (by name), those named in
/// `remove` taken out, all first when `clear`: the list `tern endpoints update` writes.
///
/// # Errors
/// [`OpsError::Invalid`] for a name to remove that is not set.
pub fn edit_headers(
    current: &[CustomHeader],
    set: Vec<CustomHeader>,
    remove: &[String],
    clear: bool,
) -> Result<Vec<CustomHeader>, OpsError> {
    let mut out: Vec<CustomHeader> = if clear { Vec::new() } else { current.to_vec() };
    for name in remove {
        let lower = name.to_ascii_lowercase();
        let before = out.len();
        out.retain(|h| h.name != lower);
        if out.len() == before && !clear {
            return Err(OpsError::Invalid(format!(
                "no custom header {lower:?} to remove"
            )));
        }
    }
    for h in set {
        match out.iter_mut().find(|x| x.name == h.name) {
            Some(x) => *x = h,
            None => out.push(h),
        }
    }
    Ok(out)
}

/// Checks an OAuth2 token URL as an endpoint URL is checked (the SSRF guard with the
/// deployment's policy, every resolved address), so a token endpoint the sender would
/// refuse is refused when it is set. Other authentications pass.
///
/// # Errors
/// [`OpsError::Invalid`] naming the token URL.
pub async fn check_auth(
    auth: &ReceiverAuth,
    policy: &DestinationPolicy,
    lookup: &dyn HostLookup,
) -> Result<(), OpsError> {
    if let ReceiverAuth::Oauth2ClientCredentials(grant) = auth {
        grant
            .validate()
            .map_err(|e| OpsError::Invalid(e.to_string()))?;
        tern_http::check_endpoint_url(&grant.token_url, policy, lookup)
            .await
            .map_err(|e| OpsError::Invalid(format!("OAuth2 token URL: {e}")))?;
    }
    Ok(())
}

/// Parses a `--auth` type name: `none`, `basic`, `bearer`, `oauth2` or
/// `oauth2_client_credentials`.
///
/// # Errors
/// [`OpsError::Invalid`].
pub fn auth_kind(name: &str) -> Result<&'static str, OpsError> {
    match name.trim().replace('-', "_").as_str() {
        "none" => Ok("none"),
        "basic" => Ok("basic"),
        "bearer" => Ok("bearer"),
        "oauth2" | "oauth2_client_credentials" => Ok("oauth2_client_credentials"),
        other => Err(OpsError::Invalid(
            tern_core::receiver_auth::AuthError::BadType(other.to_owned()).to_string(),
        )),
    }
}

/// Parses a `--oauth-client-auth` value.
///
/// # Errors
/// [`OpsError::Invalid`].
pub fn client_auth(name: &str) -> Result<ClientAuthMethod, OpsError> {
    name.parse()
        .map_err(|e: tern_core::receiver_auth::AuthError| OpsError::Invalid(e.to_string()))
}

/// `tern endpoints rotate-signing-key`: a new Ed25519 key signs `v1a` at once, the old
/// current one keeps signing for `overlap_hours` (both `v1a` entries are sent meanwhile,
/// so receivers holding either public key verify). Also adds an endpoint's first key.
/// Only the keys are written: a disable or an update that lands meanwhile stays. Returns
/// the new public key, to give to the receiver.
///
/// # Errors
/// Not found, a bad overlap, or a store error.
pub async fn rotate_signing_key(
    store: &dyn EndpointStore,
    tenant: &TenantId,
    id: &EndpointId,
    overlap_hours: i64,
) -> Result<PublicKey, OpsError> {
    let mut endpoint = store
        .get(tenant, id)
        .await?
        .ok_or_else(|| OpsError::NotFound {
            id: id.to_string(),
            tenant: Some(tenant.to_string()),
        })?;
    let key = SigningKey::generate();
    let public = key.public_key();
    let overlap = chrono::Duration::try_hours(overlap_hours).ok_or_else(|| {
        OpsError::Invalid(tern_core::endpoint::EndpointError::BadOverlap.to_string())
    })?;
    endpoint
        .rotate_signing_key(key, Utc::now(), overlap)
        .map_err(|e| OpsError::Invalid(e.to_string()))?;
    store
        .set_signing_keys(tenant, id, &endpoint.signing_keys)
        .await?;
    Ok(public)
}

/// Gives `endpoint` a current Ed25519 key when its signatures include `v1a` and it has
/// none (an endpoint switched to `v1a` for the first time): written alone, before the
/// setting that needs it. Returns the new public key, if one was made.
///
/// # Errors
/// A store error.
pub(crate) async fn ensure_signing_key(
    store: &dyn EndpointStore,
    endpoint: &Endpoint,
) -> Result<Option<PublicKey>, OpsError> {
    if endpoint.signing_keys.iter().any(|k| k.expires_at.is_none()) {
        return Ok(None);
    }
    let mut with_key = endpoint.clone();
    let key = SigningKey::generate();
    let public = key.public_key();
    with_key
        .rotate_signing_key(key, Utc::now(), chrono::Duration::zero())
        .map_err(|e| OpsError::Invalid(e.to_string()))?;
    store
        .set_signing_keys(&endpoint.tenant_id, &endpoint.id, &with_key.signing_keys)
        .await?;
    Ok(Some(public))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_core::SecretValue;
    use tern_core::receiver_auth::OAuth2ClientCredentials;

    #[test]
    fn views_name_secrets_without_their_values() {
        let auth = ReceiverAuth::Oauth2ClientCredentials(OAuth2ClientCredentials {
            token_url: "https://auth.example/token".into(),
            client_id: "tern".into(),
            client_secret: SecretValue::new("cs-very-secret"),
            scope: Some("a b".into()),
            audience: None,
            client_auth: ClientAuthMethod::ClientSecretPost,
        });
        let v = AuthView::of(&auth);
        let json = serde_json::to_string(&v).unwrap();
        assert!(!json.contains("cs-very-secret"), "{json}");
        assert_eq!(
            v.line(),
            "oauth2_client_credentials token_url=https://auth.example/token client_id=tern scope=a b client_auth=client_secret_post client_secret=(secret, set)"
        );
        let none = serde_json::to_value(AuthView::of(&ReceiverAuth::None)).unwrap();
        assert_eq!(none, serde_json::json!({"type": "none"}));
    }

    #[test]
    fn header_edits() {
        let h = |n: &str, v: &str| CustomHeader::new(n, FieldValue::Plain(v.into())).unwrap();
        let current = vec![h("x-a", "1"), h("x-b", "2")];
        let out = edit_headers(
            &current,
            vec![h("X-A", "3"), h("x-c", "4")],
            &["x-b".into()],
            false,
        )
        .unwrap();
        assert_eq!(out, vec![h("x-a", "3"), h("x-c", "4")]);
        assert!(edit_headers(&current, vec![], &["x-z".into()], false).is_err());
        assert_eq!(
            edit_headers(&current, vec![h("x-d", "5")], &[], true).unwrap(),
            vec![h("x-d", "5")]
        );
    }
}
