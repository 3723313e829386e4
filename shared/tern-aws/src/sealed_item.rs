//! Where an endpoint item holds secrets, and what the endpoint store does with them on the
//! way to and from DynamoDB ([`SecretsAtRest`]).
//!
//! The slots (attribute paths of the item as `serde_dynamo` writes an
//! [`tern_core::Endpoint`]): `secrets[].secret`, `signing_keys[].key`,
//! `headers[].value.secret`, and `auth.password`, `auth.token`, `auth.client_secret`.
//! A slot holds either the plain text (`S`, as every item written before sealing existed)
//! or `{"sealed": "tern2...."}` (`M`; `tern1....` for values sealed before the keyring,
//! [`tern_core::sealed::SealedValue`]). Plain slots are read as they are, and sealed on
//! the next write of their attribute (or by [`crate::DynamoEndpointStore::seal_stored`],
//! `tern endpoints encrypt-secrets`, which also re-seals `tern1` values and values of
//! older epochs under the current one).
//!
//! Keys: a write seals every plain value it writes under the keyring's current epoch
//! ([`Keyring::current`], kept in memory, so a write normally calls no key service); a
//! read opens each value with its epoch's key (one unwrap per epoch per process per cache
//! lifetime, whatever the number of endpoints) or, for a `tern1` value, its own data key
//! ([`crate::keyring::DynamoKeyring`], [`crate::kms::KmsDataKeys`]).

use std::collections::HashMap;
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use tern_core::sealed::{
    Epoch, EpochKey, EpochSealed, KeyService, Keyring, PlainKey, SealContext, SealError,
    SealedValue,
};
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
    /// Writes seal under the keyring's current epoch, reads open values of every epoch
    /// and `tern1` values: the key service's keys (KMS), the keyring kept by the endpoint
    /// store ([`crate::DynamoEndpointStore::with_secrets`]). The sender and the API.
    Sealed(Arc<dyn KeyService>),
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
/// the keyring's current epoch for `context`; sealed slots stay as they are. No plain
/// slot, no keyring call.
///
/// # Errors
/// [`SealError`] from the keyring; `item` is unchanged then.
pub async fn seal(
    keyring: &dyn Keyring,
    context: &SealContext,
    item: &mut HashMap<String, AttributeValue>,
) -> Result<(), SealError> {
    if !has_plain_slots(item) {
        return Ok(());
    }
    let key = keyring.current().await?;
    seal_with(&key, context, item)
}

/// Seals every plain slot of `item` under `key`.
fn seal_with(
    key: &EpochKey,
    context: &SealContext,
    item: &mut HashMap<String, AttributeValue>,
) -> Result<(), SealError> {
    let mut sealed = Vec::new();
    let mut failed = None;
    for_each_item_slot(item, &mut |slot| {
        if let AttributeValue::S(plain) = slot {
            match EpochSealed::seal(key, context, plain) {
                Ok(s) => sealed.push(s.to_text()),
                Err(e) => failed = Some(e),
            }
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    let mut sealed = sealed.into_iter();
    for_each_item_slot(item, &mut |slot| {
        if matches!(slot, AttributeValue::S(_))
            && let Some(text) = sealed.next()
        {
            *slot = AttributeValue::M(HashMap::from([(
                SEALED_KEY.to_owned(),
                AttributeValue::S(text),
            )]));
        }
    });
    Ok(())
}

/// True when some slot of `item` is not sealed under `current`: plain text, a `tern1`
/// value, a value of another epoch, or one that does not parse.
pub fn needs_sealing(item: &mut HashMap<String, AttributeValue>, current: Epoch) -> bool {
    let mut stale = false;
    for_each_item_slot(item, &mut |slot| {
        stale |= match sealed_text(slot) {
            None => matches!(slot, AttributeValue::S(_)),
            Some(text) => !matches!(
                SealedValue::parse(text),
                Ok(SealedValue::Epoch(e)) if e.epoch() == current
            ),
        };
    });
    stale
}

/// Re-seals every slot of `item` under the keyring's current epoch: opens what is
/// sealed (any format, any epoch), then seals it all again.
///
/// # Errors
/// As [`open`] and [`seal`]; `item` may be left opened then, so drop it.
pub async fn reseal(
    keyring: &dyn Keyring,
    context: &SealContext,
    item: &mut HashMap<String, AttributeValue>,
) -> Result<Epoch, SealError> {
    open(keyring, context, item).await?;
    let key = keyring.current().await?;
    seal_with(&key, context, item)?;
    Ok(key.epoch())
}

/// Opens every sealed slot of `item` in place: each distinct epoch key and each distinct
/// `tern1` data key is asked of the keyring once.
///
/// # Errors
/// [`SealError::WrongEndpoint`] for a value sealed for another endpoint (or altered),
/// [`SealError::Malformed`], or the keyring's error.
pub async fn open(
    keyring: &dyn Keyring,
    context: &SealContext,
    item: &mut HashMap<String, AttributeValue>,
) -> Result<(), SealError> {
    let mut sealed = Vec::new();
    let mut bad = None;
    for_each_item_slot(item, &mut |slot| {
        if let Some(text) = sealed_text(slot) {
            match SealedValue::parse(text) {
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
    let mut data_keys: HashMap<Vec<u8>, PlainKey> = HashMap::new();
    let mut epoch_keys: HashMap<Epoch, EpochKey> = HashMap::new();
    let mut opened = Vec::with_capacity(sealed.len());
    for value in &sealed {
        let plain = match value {
            SealedValue::DataKey(s) => {
                let key = match data_keys.entry(s.wrapped_key().to_vec()) {
                    std::collections::hash_map::Entry::Occupied(k) => k.into_mut(),
                    std::collections::hash_map::Entry::Vacant(slot) => {
                        slot.insert(keyring.data_key(s.wrapped_key(), context).await?)
                    }
                };
                s.open(key, context)?
            }
            SealedValue::Epoch(s) => {
                let key = match epoch_keys.entry(s.epoch()) {
                    std::collections::hash_map::Entry::Occupied(k) => k.into_mut(),
                    std::collections::hash_map::Entry::Vacant(slot) => {
                        slot.insert(keyring.epoch(s.epoch()).await?)
                    }
                };
                s.open(key, context)?
            }
        };
        opened.push(plain);
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
    use tern_core::sealed::{DataKeys as _, InMemoryKeyring, Sealed};

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
    async fn a_write_seals_every_slot_under_the_current_epoch_and_a_read_opens_them() {
        let keyring = InMemoryKeyring::default();
        let mut it = item();
        let ctx = item_context(&it).unwrap();
        seal(&keyring, &ctx, &mut it).await.unwrap();
        let text = format!("{it:?}");
        for secret in SECRETS {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert!(text.contains("shown"), "plain headers stay plain");
        assert_eq!(text.matches("tern2.1.").count(), SECRETS.len(), "{text}");
        assert!(!has_plain_slots(&mut it));
        assert!(!needs_sealing(&mut it, Epoch::FIRST));
        // Sealing again changes nothing.
        let before = it.clone();
        seal(&keyring, &ctx, &mut it).await.unwrap();
        assert_eq!(it, before);

        open(&keyring, &ctx, &mut it).await.unwrap();
        assert_eq!(it, item());
        assert_eq!(
            keyring
                .data_keys
                .generated
                .load(std::sync::atomic::Ordering::Relaxed),
            0,
            "no data key per write"
        );
    }

    #[tokio::test]
    async fn a_slot_moved_to_another_endpoint_does_not_open() {
        let keyring = InMemoryKeyring::default();
        let mut it = item();
        let ctx = item_context(&it).unwrap();
        seal(&keyring, &ctx, &mut it).await.unwrap();
        for (tenant, endpoint) in [("tnt_a", "ep_2"), ("tnt_b", "ep_1")] {
            let mut other = it.clone();
            other.insert("tenant_id".into(), s(tenant));
            other.insert("endpoint_id".into(), s(endpoint));
            let other_ctx = item_context(&other).unwrap();
            assert_eq!(
                open(&keyring, &other_ctx, &mut other).await,
                Err(SealError::WrongEndpoint),
                "{tenant}/{endpoint}"
            );
        }
    }

    #[tokio::test]
    async fn old_values_open_and_a_reseal_moves_them_to_the_current_epoch() {
        let keyring = InMemoryKeyring::default();
        let mut it = item();
        let ctx = item_context(&it).unwrap();
        // `secrets` as tern1 (a data key of its own), `auth` under epoch 1, the rest plain.
        let data_key = keyring.data_keys.generate(&ctx).await.unwrap();
        let old = Sealed::seal(&data_key, &ctx, "whsec_AAAAsecret1").unwrap();
        if let Some(AttributeValue::L(list)) = it.get_mut("secrets")
            && let Some(AttributeValue::M(m)) = list.first_mut()
        {
            m.insert("secret".into(), m_sealed(&old.to_text()));
        }
        let mut auth = HashMap::from([("auth".to_owned(), it["auth"].clone())]);
        seal(&keyring, &ctx, &mut auth).await.unwrap();
        it.insert("auth".into(), auth["auth"].clone());
        keyring.rotate();
        assert!(needs_sealing(&mut it, Epoch::new(2).unwrap()));

        let mut opened = it.clone();
        open(&keyring, &ctx, &mut opened).await.unwrap();
        assert_eq!(opened, item(), "tern1, epoch 1 and plain values all read");

        let epoch = reseal(&keyring, &ctx, &mut it).await.unwrap();
        assert_eq!(epoch, Epoch::new(2).unwrap());
        assert!(!needs_sealing(&mut it, epoch));
        let text = format!("{it:?}");
        assert!(
            !text.contains("tern1.") && !text.contains("tern2.1."),
            "{text}"
        );
        open(&keyring, &ctx, &mut it).await.unwrap();
        assert_eq!(it, item());
    }

    fn m_sealed(text: &str) -> AttributeValue {
        m(&[(SEALED_KEY, s(text))])
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
        seal(&InMemoryKeyring::default(), &ctx, &mut sealed)
            .await
            .unwrap();
        assert_eq!(refuse_sealed(&mut sealed), Err(SealError::NoKey));
    }
}
