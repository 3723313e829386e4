//! Where an endpoint item holds secrets, and what the endpoint store does with them on the
//! way to and from DynamoDB ([`SecretsAtRest`]).
//!
//! The slots (attribute paths of the item as `serde_dynamo` writes an
//! [`tern_core::Endpoint`]): `secrets[].secret`, `signing_keys[].key`,
//! `headers[].value.secret`, and `auth.password`, `auth.token`, `auth.client_secret`.
//! A slot holds either the plain text (`S`, as every item written before sealing existed)
//! or `{"sealed": "tern1...."}` (`M`, [`tern_core::sealed::Sealed`]). Plain slots are read
//! as they are, and sealed on the next write of their attribute (or by
//! [`crate::DynamoEndpointStore::seal_stored`], `tern endpoints encrypt-secrets`).
//!
//! Granularity: one data key per write. A write (a new endpoint, a rotation, new headers
//! or authentication) makes one `GenerateDataKey` and seals every value it writes under
//! it; each sealed value carries its wrapped key, so a rotation never needs the earlier
//! keys and needs no `Decrypt`. A reader unwraps each distinct wrapped key of an item once
//! (an endpoint written in three steps: three `Decrypt`s on a cold read), and keeps it
//! for its cache's lifetime ([`crate::kms::KmsDataKeys`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use tern_core::sealed::{DataKeys, PlainKey, SealContext, SealError, Sealed};
use tern_core::{EndpointId, TenantId};

/// The attributes of an endpoint item that hold secrets.
pub const SECRET_ATTRIBUTES: [&str; 4] = ["secrets", "signing_keys", "headers", "auth"];

/// The map key of a sealed slot.
pub const SEALED_KEY: &str = "sealed";

/// The fields of `auth` that hold a secret (basic, bearer, OAuth2 client credentials).
const AUTH_SECRET_FIELDS: [&str; 3] = ["password", "token", "client_secret"];

/// What an endpoint store does with the secrets of the items it writes and reads.
#[derive(Clone, Default)]
pub enum SecretsAtRest {
    /// No key configured: writes store plain text (a deployment without a key, the unit
    /// and older tests); reading a sealed value fails ([`SealError::NoKey`]).
    #[default]
    Plain,
    /// Writes seal with data keys from the key service; reads open them. The sender
    /// and the API.
    Sealed(Arc<dyn DataKeys>),
    /// Reads leave every secret out (empty lists, empty values) and never call the key
    /// service; writes of secret-holding attributes are refused, so a secret left out is
    /// never written back as missing. For processes that need the endpoints but not their
    /// secrets: the relay (subscriptions) and the console (states, header names).
    Hidden,
}

impl std::fmt::Debug for SecretsAtRest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Plain => "Plain",
            Self::Sealed(_) => "Sealed",
            Self::Hidden => "Hidden",
        })
    }
}

/// Calls `f` on every secret slot of attribute `name`'s `value`.
fn for_each_slot(name: &str, value: &mut AttributeValue, f: &mut dyn FnMut(&mut AttributeValue)) {
    match name {
        "secrets" | "signing_keys" => {
            let field = if name == "secrets" { "secret" } else { "key" };
            if let AttributeValue::L(list) = value {
                for entry in list {
                    if let AttributeValue::M(m) = entry
                        && let Some(slot) = m.get_mut(field)
                    {
                        f(slot);
                    }
                }
            }
        }
        "headers" => {
            if let AttributeValue::L(list) = value {
                for entry in list {
                    if let AttributeValue::M(m) = entry
                        && let Some(AttributeValue::M(v)) = m.get_mut("value")
                        && let Some(slot) = v.get_mut("secret")
                    {
                        f(slot);
                    }
                }
            }
        }
        "auth" => {
            if let AttributeValue::M(m) = value {
                for field in AUTH_SECRET_FIELDS {
                    if let Some(slot) = m.get_mut(field) {
                        f(slot);
                    }
                }
            }
        }
        _ => {}
    }
}

/// Calls `f` on every secret slot of `item`'s secret-holding attributes.
fn for_each_item_slot(
    item: &mut HashMap<String, AttributeValue>,
    f: &mut dyn FnMut(&mut AttributeValue),
) {
    for name in SECRET_ATTRIBUTES {
        if let Some(value) = item.get_mut(name) {
            for_each_slot(name, value, f);
        }
    }
}

/// The sealed text of a slot, if it is sealed.
fn sealed_text(slot: &AttributeValue) -> Option<&str> {
    match slot {
        AttributeValue::M(m) => match m.get(SEALED_KEY) {
            Some(AttributeValue::S(text)) => Some(text),
            _ => None,
        },
        _ => None,
    }
}

/// True when some slot of `item` holds plain text.
pub fn has_plain_slots(item: &mut HashMap<String, AttributeValue>) -> bool {
    let mut plain = false;
    for_each_item_slot(item, &mut |slot| {
        plain |= matches!(slot, AttributeValue::S(_));
    });
    plain
}

/// True when some slot of `item` is sealed.
pub fn has_sealed_slots(item: &mut HashMap<String, AttributeValue>) -> bool {
    let mut sealed = false;
    for_each_item_slot(item, &mut |slot| {
        sealed |= sealed_text(slot).is_some();
    });
    sealed
}

/// The context of an item, from its key attributes.
///
/// # Errors
/// [`SealError::Malformed`] when they are missing or not valid ids.
pub fn item_context(item: &HashMap<String, AttributeValue>) -> Result<SealContext, SealError> {
    let text = |name: &str| match item.get(name) {
        Some(AttributeValue::S(s)) => Some(s.clone()),
        _ => None,
    };
    let tenant = text("tenant_id")
        .and_then(|t| TenantId::new(t).ok())
        .ok_or(SealError::Malformed("item has no valid tenant_id"))?;
    let endpoint = text("endpoint_id")
        .or_else(|| text("id"))
        .and_then(|e| EndpointId::new(e).ok())
        .ok_or(SealError::Malformed("item has no valid endpoint_id"))?;
    Ok(SealContext::new(&tenant, &endpoint))
}

/// Seals every plain slot of `item` (all of it, or the attributes a write sets) under
/// one fresh data key for `context`; sealed slots stay as they are. No plain slot, no
/// key service call.
///
/// # Errors
/// [`SealError`] from the key service; `item` is unchanged then.
pub async fn seal(
    keys: &dyn DataKeys,
    context: &SealContext,
    item: &mut HashMap<String, AttributeValue>,
) -> Result<(), SealError> {
    if !has_plain_slots(item) {
        return Ok(());
    }
    let key = keys.generate(context).await?;
    let mut failed = None;
    for_each_item_slot(item, &mut |slot| {
        if let AttributeValue::S(plain) = slot {
            match Sealed::seal(&key, context, plain) {
                Ok(sealed) => {
                    *slot = AttributeValue::M(HashMap::from([(
                        SEALED_KEY.to_owned(),
                        AttributeValue::S(sealed.to_text()),
                    )]));
                }
                Err(e) => failed = Some(e),
            }
        }
    });
    failed.map_or(Ok(()), Err)
}

/// Opens every sealed slot of `item` in place, unwrapping each distinct data key once.
///
/// # Errors
/// [`SealError::WrongEndpoint`] for a value sealed for another endpoint (or altered),
/// [`SealError::Malformed`], or the key service's error.
pub async fn open(
    keys: &dyn DataKeys,
    context: &SealContext,
    item: &mut HashMap<String, AttributeValue>,
) -> Result<(), SealError> {
    let mut sealed = Vec::new();
    let mut bad = None;
    for_each_item_slot(item, &mut |slot| {
        if let Some(text) = sealed_text(slot) {
            match Sealed::parse(text) {
                Ok(s) => sealed.push(s),
                Err(e) => bad = Some(e),
            }
        }
    });
    if let Some(e) = bad {
        return Err(e);
    }
    if sealed.is_empty() {
        return Ok(());
    }
    let wrapped: HashSet<&[u8]> = sealed.iter().map(Sealed::wrapped_key).collect();
    let mut plain_keys: HashMap<Vec<u8>, PlainKey> = HashMap::new();
    for w in wrapped {
        plain_keys.insert(w.to_vec(), keys.unwrap(w, context).await?);
    }
    let mut opened = Vec::with_capacity(sealed.len());
    for s in &sealed {
        let key = plain_keys
            .get(s.wrapped_key())
            .ok_or(SealError::Malformed("data key not unwrapped"))?;
        opened.push(s.open(key, context)?);
    }
    let mut opened = opened.into_iter();
    for_each_item_slot(item, &mut |slot| {
        if sealed_text(slot).is_some()
            && let Some(plain) = opened.next()
        {
            *slot = AttributeValue::S(plain);
        }
    });
    Ok(())
}

/// Leaves every secret of `item` out: the signing secret and key lists emptied, secret
/// header values and authentication secrets made empty text (so the console still shows
/// a header's name and the authentication type).
pub fn hide(item: &mut HashMap<String, AttributeValue>) {
    for name in ["secrets", "signing_keys"] {
        if item.contains_key(name) {
            item.insert(name.to_owned(), AttributeValue::L(Vec::new()));
        }
    }
    for_each_item_slot(item, &mut |slot| {
        *slot = AttributeValue::S(String::new());
    });
}

/// Fails on a sealed slot: a store without a key reads plain items only.
///
/// # Errors
/// [`SealError::NoKey`].
pub fn refuse_sealed(item: &mut HashMap<String, AttributeValue>) -> Result<(), SealError> {
    if has_sealed_slots(item) {
        Err(SealError::NoKey)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_core::sealed::InMemoryDataKeys;

    fn s(text: &str) -> AttributeValue {
        AttributeValue::S(text.to_owned())
    }

    fn m(pairs: &[(&str, AttributeValue)]) -> AttributeValue {
        AttributeValue::M(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        )
    }

    fn item() -> HashMap<String, AttributeValue> {
        HashMap::from([
            ("tenant_id".to_owned(), s("tnt_a")),
            ("endpoint_id".to_owned(), s("ep_1")),
            ("url".to_owned(), s("https://example.invalid/")),
            (
                "secrets".to_owned(),
                AttributeValue::L(vec![m(&[
                    ("secret", s("whsec_AAAAsecret1")),
                    ("created_at", s("2026-01-01T00:00:00Z")),
                ])]),
            ),
            (
                "signing_keys".to_owned(),
                AttributeValue::L(vec![m(&[("key", s("whsk_BBBBkey1"))])]),
            ),
            (
                "headers".to_owned(),
                AttributeValue::L(vec![
                    m(&[
                        ("name", s("x-api-key")),
                        ("value", m(&[("secret", s("header-secret-1"))])),
                    ]),
                    m(&[
                        ("name", s("x-tenant")),
                        ("value", m(&[("plain", s("shown"))])),
                    ]),
                ]),
            ),
            (
                "auth".to_owned(),
                m(&[("type", s("bearer")), ("token", s("bearer-token-1"))]),
            ),
        ])
    }

    const SECRETS: [&str; 4] = [
        "whsec_AAAAsecret1",
        "whsk_BBBBkey1",
        "header-secret-1",
        "bearer-token-1",
    ];

    #[tokio::test]
    async fn a_write_seals_every_slot_under_one_key_and_a_read_opens_them() {
        let keys = InMemoryDataKeys::default();
        let mut it = item();
        let ctx = item_context(&it).unwrap();
        seal(&keys, &ctx, &mut it).await.unwrap();
        let text = format!("{it:?}");
        for secret in SECRETS {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert!(text.contains("shown"), "plain headers stay plain");
        assert!(!has_plain_slots(&mut it));
        assert_eq!(keys.generated.load(std::sync::atomic::Ordering::Relaxed), 1);
        // Sealing again makes no key: nothing is plain.
        seal(&keys, &ctx, &mut it).await.unwrap();
        assert_eq!(keys.generated.load(std::sync::atomic::Ordering::Relaxed), 1);

        open(&keys, &ctx, &mut it).await.unwrap();
        assert_eq!(it, item());
        assert_eq!(
            keys.unwrapped.load(std::sync::atomic::Ordering::Relaxed),
            1,
            "one data key, one unwrap"
        );
    }

    #[tokio::test]
    async fn a_slot_moved_to_another_endpoint_does_not_open() {
        let keys = InMemoryDataKeys::default();
        let mut it = item();
        let ctx = item_context(&it).unwrap();
        seal(&keys, &ctx, &mut it).await.unwrap();
        let mut other = it.clone();
        other.insert("endpoint_id".into(), s("ep_2"));
        let other_ctx = item_context(&other).unwrap();
        assert_eq!(
            open(&keys, &other_ctx, &mut other).await,
            Err(SealError::WrongEndpoint)
        );
    }

    #[test]
    fn hidden_reads_keep_names_and_types_and_drop_every_secret() {
        let mut it = item();
        hide(&mut it);
        let text = format!("{it:?}");
        for secret in SECRETS {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert!(text.contains("x-api-key") && text.contains("bearer"));
        assert_eq!(it["secrets"], AttributeValue::L(Vec::new()));
    }

    #[tokio::test]
    async fn a_store_without_a_key_refuses_sealed_items_only() {
        let mut plain = item();
        refuse_sealed(&mut plain).unwrap();
        let mut sealed = item();
        let ctx = item_context(&sealed).unwrap();
        seal(&InMemoryDataKeys::default(), &ctx, &mut sealed)
            .await
            .unwrap();
        assert_eq!(refuse_sealed(&mut sealed), Err(SealError::NoKey));
    }
}
