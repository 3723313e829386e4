//! DynamoDB endpoint registry. Table key: `tenant_id` (partition), `endpoint_id` (sort),
//! so the relay finds a tenant's endpoints with one Query.
//!
//! Each tenant also has a **subscriptions version** (issue 29): one small item under a
//! partition no tenant can name (`#subscriptions#<tenant>`, sort key `version`), whose
//! number every write that can change which endpoints the tenant has or what they
//! subscribe to ([`EndpointStore::create`], [`EndpointStore::put`],
//! [`EndpointStore::update`], [`EndpointStore::delete`]) adds one to **in the same
//! transaction** (`TransactWriteItems`). The relay reads it (one strongly consistent
//! `GetItem`) to know whether the list it keeps is still exact
//! (`tern_handlers::subscription_cache`). Disable, enable and secret or key rotations
//! leave it: they change nothing the relay reads.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, Delete, Put, ReturnValue, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};
use tern_core::endpoint::{EndpointSecret, EndpointUpdate};
use tern_core::ports::{EndpointPage, EndpointStore, PortError};
use tern_core::signing_key::EndpointSigningKey;
use tern_core::{Endpoint, EndpointId, TenantId};

use std::sync::Arc;

use crate::error::port_error;
use crate::keyring::DynamoKeyring;
use crate::sealed_item::{self, SecretsAtRest};
use tern_core::sealed::{Keyring as _, SealContext, SealError};

/// Partition key prefix of a tenant's subscriptions-version item: `#subscriptions#<tenant>`
/// (no tenant can name it: tenant ids are `[A-Za-z0-9_-]`), so a tenant's `Query` never
/// meets it and each tenant's version is its own key (read once per relay batch that holds
/// the tenant's events, written once per endpoint change).
pub const SUBSCRIPTIONS_PARTITION_PREFIX: &str = "#subscriptions#";

/// Sort key of a tenant's subscriptions-version item.
pub const SUBSCRIPTIONS_SORT_KEY: &str = "version";

/// The number attribute of the subscriptions-version item.
const VERSION_ATTRIBUTE: &str = "version";

/// Tries of an endpoint write whose transaction a concurrent write of the same tenant
/// cancelled (`TransactionConflict`): 5, waiting up to 20, 40, 80 and 160 ms between them
/// (full jitter), about 300 ms at most, far inside the API's 25 s deadline.
pub const VERSION_CONFLICT_TRIES: u32 = 5;

/// Why DynamoDB cancelled a transaction, as far as the endpoint writes care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cancelled {
    /// The endpoint write's own condition failed (the first item's reason): an answer.
    ConditionFailed,
    /// Another transaction held an item: nothing written, worth trying again.
    Conflict,
}

/// Reads a `TransactWriteItems` error: `None` when it is not a cancellation or the
/// cancellation is neither of [`Cancelled`]'s (throttling, validation: the caller maps it).
fn cancellation(error: Option<&TransactWriteItemsError>) -> Option<Cancelled> {
    let Some(TransactWriteItemsError::TransactionCanceledException(c)) = error else {
        return None;
    };
    let codes: Vec<&str> = c
        .cancellation_reasons()
        .iter()
        .map(|r| r.code().unwrap_or("None"))
        .collect();
    if codes.first() == Some(&"ConditionalCheckFailed") {
        Some(Cancelled::ConditionFailed)
    } else if codes.contains(&"TransactionConflict") {
        Some(Cancelled::Conflict)
    } else {
        None
    }
}

/// The key of `tenant`'s subscriptions-version item.
pub fn subscriptions_key(tenant: &TenantId) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (
            "tenant_id".to_owned(),
            AttributeValue::S(format!("{SUBSCRIPTIONS_PARTITION_PREFIX}{tenant}")),
        ),
        (
            "endpoint_id".to_owned(),
            AttributeValue::S(SUBSCRIPTIONS_SORT_KEY.to_owned()),
        ),
    ])
}

/// True for an item of a partition no tenant can name (the keyring's, a subscriptions
/// version): not an endpoint, skipped by the scans.
pub fn is_reserved_item(item: &HashMap<String, AttributeValue>) -> bool {
    matches!(item.get("tenant_id"), Some(AttributeValue::S(t)) if t.starts_with('#'))
}

/// Most Query calls one [`EndpointStore::list_page`] makes: 10. With a state filter a read
/// can return fewer items than asked; the page then ends early, with a cursor.
pub const MAX_PAGE_READS: usize = 10;

/// Endpoints in a DynamoDB table (and, under a partition no tenant can name, the keyring
/// that seals their secrets: [`crate::keyring`]).
#[derive(Clone, Debug)]
pub struct DynamoEndpointStore {
    client: Client,
    table: String,
    secrets: SecretsAtRest,
    /// With [`SecretsAtRest::Sealed`]: the keyring in this table, its keys cached for
    /// this store's process.
    keyring: Option<Arc<DynamoKeyring>>,
}

impl DynamoEndpointStore {
    /// The registry in `table`, secrets written as plain text ([`SecretsAtRest::Plain`]);
    /// set how they are kept with [`Self::with_secrets`].
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            secrets: SecretsAtRest::Plain,
            keyring: None,
        }
    }

    /// The same registry, keeping secrets as `secrets` says (sealed with the stack's
    /// KMS key through the keyring in this table, or hidden from a process that needs
    /// none).
    #[must_use]
    pub fn with_secrets(mut self, secrets: SecretsAtRest) -> Self {
        self.keyring = match &secrets {
            SecretsAtRest::Sealed(keys) => Some(Arc::new(DynamoKeyring::new(
                keys.clone(),
                self.client.clone(),
                self.table.clone(),
            ))),
            SecretsAtRest::Plain | SecretsAtRest::Hidden => None,
        };
        self.secrets = secrets;
        self
    }

    /// The same registry, sealing through `keyring` (one built on this table, e.g. with a
    /// test's clock, or shared with another store of the process). Secrets are then
    /// [`SecretsAtRest::Sealed`] with `keys`.
    #[must_use]
    pub fn with_keyring(
        mut self,
        keys: Arc<dyn tern_core::sealed::KeyService>,
        keyring: Arc<DynamoKeyring>,
    ) -> Self {
        self.secrets = SecretsAtRest::Sealed(keys);
        self.keyring = Some(keyring);
        self
    }

    /// The keyring this store seals with, when it seals ([`DynamoKeyring::rotate`] starts
    /// a new epoch; [`tern_core::sealed::seal_text`] seals a value kept elsewhere).
    pub fn keyring(&self) -> Option<&Arc<DynamoKeyring>> {
        self.keyring.as_ref()
    }

    /// The keyring, or the error of a store that has none.
    fn sealing_keyring(&self) -> Result<&Arc<DynamoKeyring>, SealError> {
        self.keyring.as_ref().ok_or(SealError::NoKey)
    }

    /// Turns a raw item into an endpoint, its secrets opened, hidden or checked as
    /// [`SecretsAtRest`] says.
    async fn read_item(
        &self,
        mut item: HashMap<String, AttributeValue>,
    ) -> Result<Endpoint, PortError> {
        let opened = match &self.secrets {
            SecretsAtRest::Plain => sealed_item::refuse_sealed(&mut item),
            SecretsAtRest::Hidden => {
                sealed_item::hide(&mut item);
                Ok(())
            }
            SecretsAtRest::Sealed(_) => {
                match (sealed_item::item_context(&item), self.sealing_keyring()) {
                    (Ok(context), Ok(keyring)) => {
                        sealed_item::open(keyring.as_ref(), &context, &mut item).await
                    }
                    (Err(e), _) | (_, Err(e)) => Err(e),
                }
            }
        };
        if let Err(e) = opened {
            return Err(unsealing_error(&item, &e));
        }
        from_item(item)
    }

    /// [`Self::read_item`] for the items of a listing: an item that does not parse or
    /// whose secrets do not open is logged and left out (one bad endpoint must not hide
    /// the others), but a key service outage fails the listing.
    async fn read_listed(
        &self,
        item: HashMap<String, AttributeValue>,
        endpoints: &mut Vec<Endpoint>,
    ) -> Result<(), PortError> {
        match self.read_item(item).await {
            Ok(e) => endpoints.push(e),
            Err(PortError::Unavailable(e)) => return Err(PortError::Unavailable(e)),
            Err(e) => tracing::error!(error = %e, "skipping unreadable endpoint item"),
        }
        Ok(())
    }

    /// Seals the secret-holding attributes among `attributes` (an item, or the values of
    /// an update) for endpoint `id` of `tenant`, as [`SecretsAtRest`] says.
    async fn seal_attributes(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        attributes: &mut HashMap<String, AttributeValue>,
    ) -> Result<(), PortError> {
        match &self.secrets {
            SecretsAtRest::Plain => Ok(()),
            SecretsAtRest::Hidden => {
                if attributes
                    .keys()
                    .any(|k| sealed_item::SECRET_ATTRIBUTES.contains(&k.as_str()))
                {
                    Err(PortError::Rejected(
                        "this process reads endpoints without their secrets and may not write them"
                            .into(),
                    ))
                } else {
                    Ok(())
                }
            }
            SecretsAtRest::Sealed(_) => {
                let context = SealContext::new(tenant, id);
                let keyring = self
                    .sealing_keyring()
                    .map_err(|e| seal_port_error(tenant, id, &e))?;
                sealed_item::seal(keyring.as_ref(), &context, attributes)
                    .await
                    .map_err(|e| seal_port_error(tenant, id, &e))
            }
        }
    }

    /// A value of the update of attribute `name`, sealed when it holds secrets.
    async fn sealed_value(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        name: &str,
        value: AttributeValue,
    ) -> Result<AttributeValue, PortError> {
        let mut one = HashMap::from([(name.to_owned(), value)]);
        self.seal_attributes(tenant, id, &mut one).await?;
        one.remove(name)
            .ok_or_else(|| PortError::Rejected(format!("{name} lost while sealing")))
    }
}

/// What [`DynamoEndpointStore::seal_stored`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SealReport {
    /// The keyring epoch every value it sealed is now under (the current one).
    pub epoch: u32,
    /// Endpoint items read.
    pub scanned: usize,
    /// Items whose secrets it sealed: plain text, `tern1` values (a data key each) and
    /// values of older epochs, all re-sealed under [`Self::epoch`].
    pub sealed: usize,
    /// Items that held nothing to seal (every secret already under [`Self::epoch`]).
    pub already_sealed: usize,
    /// Items changed by another write while it worked: left as that write made them
    /// (which sealed what it wrote); run it again to seal what remains.
    pub changed_meanwhile: usize,
    /// Items whose sealed secrets do not open (sealed for another endpoint, altered, or
    /// of an epoch the keyring lacks): left as they are, each logged with its ids.
    pub unreadable: usize,
}

impl DynamoEndpointStore {
    /// Seals every endpoint secret not yet under the keyring's current epoch (`tern
    /// endpoints encrypt-secrets`): plain text (a deployment from before sealing), `tern1`
    /// values (per-write data keys, before the keyring) and values of older epochs (after
    /// [`DynamoKeyring::rotate`]). A scan, and for each such item one conditional
    /// `UpdateItem` of its secret-holding attributes, applied only if they are still as
    /// read (a rotation that lands meanwhile wins). Opening costs a `Decrypt` per `tern1`
    /// data key and one per older epoch; sealing costs none. Safe to run again; it changes
    /// no setting, state or time of an endpoint.
    ///
    /// # Errors
    /// [`PortError::Rejected`] when this store has no key ([`SecretsAtRest::Sealed`]);
    /// a DynamoDB or KMS outage stops it (what it sealed so far stays sealed).
    pub async fn seal_stored(&self) -> Result<SealReport, PortError> {
        let Some(keyring) = self.keyring.as_ref() else {
            return Err(PortError::Rejected(
                "no key to seal with: set TERN_SECRETS_KEY_ID (the stack's SecretsKeyArn output)"
                    .into(),
            ));
        };
        let unavailable = |e: SealError| PortError::Unavailable(format!("secrets keyring: {e}"));
        let current = keyring.current().await.map_err(unavailable)?.epoch();
        let mut report = SealReport {
            epoch: current.get(),
            ..SealReport::default()
        };
        let mut start = None;
        loop {
            let out = self
                .client
                .scan()
                .table_name(&self.table)
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(port_error)?;
            for mut item in out.items.unwrap_or_default() {
                if is_reserved_item(&item) {
                    continue;
                }
                report.scanned += 1;
                if !sealed_item::needs_sealing(&mut item, current) {
                    report.already_sealed += 1;
                    continue;
                }
                let (context, endpoint) = match sealed_item::item_context(&item) {
                    Ok(c) => match c.endpoint().cloned() {
                        Some(e) => (c, e),
                        None => continue,
                    },
                    Err(e) => {
                        tracing::error!(error = %e, "skipping an endpoint item without valid keys");
                        report.unreadable += 1;
                        continue;
                    }
                };
                let old: HashMap<String, AttributeValue> = sealed_item::SECRET_ATTRIBUTES
                    .iter()
                    .filter_map(|name| item.remove(*name).map(|v| ((*name).to_owned(), v)))
                    .collect();
                let mut new = old.clone();
                match sealed_item::reseal(keyring.as_ref(), &context, &mut new).await {
                    Ok(_) => {}
                    Err(e) if e.is_transient() || matches!(e, SealError::Refused(_)) => {
                        return Err(seal_port_error(&context.tenant, &endpoint, &e));
                    }
                    Err(e) => {
                        tracing::error!(
                            tenant_id = %context.tenant,
                            endpoint_id = %endpoint,
                            error = %e,
                            "endpoint secrets do not open: left as they are"
                        );
                        report.unreadable += 1;
                        continue;
                    }
                }
                match self
                    .replace_secrets(&context.tenant, &endpoint, &old, new)
                    .await?
                {
                    true => report.sealed += 1,
                    false => report.changed_meanwhile += 1,
                }
            }
            start = out.last_evaluated_key;
            if start.is_none() {
                return Ok(report);
            }
        }
    }

    /// Sets the secret-holding attributes of `endpoint`'s item to `new` if they are still
    /// `old`: `Ok(false)` when another write changed them (or the item is gone).
    async fn replace_secrets(
        &self,
        tenant: &TenantId,
        endpoint: &EndpointId,
        old: &HashMap<String, AttributeValue>,
        new: HashMap<String, AttributeValue>,
    ) -> Result<bool, PortError> {
        let mut set = Vec::new();
        let mut condition = vec!["attribute_exists(endpoint_id)".to_owned()];
        let mut request = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("tenant_id", AttributeValue::S(tenant.to_string()))
            .key("endpoint_id", AttributeValue::S(endpoint.to_string()));
        for (name, value) in new {
            set.push(format!("#{name} = :new_{name}"));
            condition.push(format!("#{name} = :old_{name}"));
            request = request
                .expression_attribute_names(format!("#{name}"), &name)
                .expression_attribute_values(format!(":new_{name}"), value);
            if let Some(before) = old.get(&name) {
                request =
                    request.expression_attribute_values(format!(":old_{name}"), before.clone());
            }
        }
        match request
            .update_expression(format!("SET {}", set.join(", ")))
            .condition_expression(condition.join(" AND "))
            .send()
            .await
        {
            Ok(_) => Ok(true),
            Err(e)
                if matches!(
                    e.as_service_error(),
                    Some(UpdateItemError::ConditionalCheckFailedException(_))
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(port_error(e)),
        }
    }
}

/// A [`SealError`] of endpoint `id` as a port error: the key service's outage or refusal
/// is [`PortError::Unavailable`] (ours, retried; never the receiver's), the rest
/// [`PortError::Rejected`]. Never holds a secret.
fn seal_port_error(tenant: &TenantId, id: &EndpointId, e: &SealError) -> PortError {
    let text = format!("endpoint {id} of tenant {tenant}: secrets: {e}");
    match e {
        SealError::Unavailable(_) | SealError::Refused(_) => PortError::Unavailable(text),
        _ => PortError::Rejected(text),
    }
}

/// [`seal_port_error`] for an item read.
fn unsealing_error(item: &HashMap<String, AttributeValue>, e: &SealError) -> PortError {
    let text = |name: &str| match item.get(name) {
        Some(AttributeValue::S(s)) => s.clone(),
        _ => "?".to_owned(),
    };
    let text = format!(
        "endpoint {} of tenant {}: secrets: {e}",
        text("endpoint_id"),
        text("tenant_id")
    );
    match e {
        SealError::Unavailable(_) | SealError::Refused(_) => PortError::Unavailable(text),
        _ => PortError::Rejected(text),
    }
}

fn to_item(endpoint: &Endpoint) -> Result<HashMap<String, AttributeValue>, PortError> {
    let mut item: HashMap<String, AttributeValue> = serde_dynamo::to_item(endpoint)
        .map_err(|e| PortError::Rejected(format!("endpoint does not serialize: {e}")))?;
    item.insert(
        "endpoint_id".into(),
        AttributeValue::S(endpoint.id.to_string()),
    );
    Ok(item)
}

impl DynamoEndpointStore {
    /// Applies `update` to an endpoint that exists; a missing one is
    /// [`PortError::Rejected`] (bad input), not an outage.
    async fn update_existing(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        update: &str,
        values: Vec<(&str, AttributeValue)>,
    ) -> Result<(), PortError> {
        self.update_existing_returning_old(tenant, id, update, values)
            .await
            .map(|_| ())
    }

    /// As [`Self::update_existing`], returning the item as it was before.
    async fn update_existing_returning_old(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        update: &str,
        values: Vec<(&str, AttributeValue)>,
    ) -> Result<HashMap<String, AttributeValue>, PortError> {
        self.update_existing_named(tenant, id, update, Vec::new(), values)
            .await
    }

    /// As [`Self::update_existing_returning_old`], with `#name` placeholders for attribute
    /// names (`names` as `(placeholder, attribute)` pairs).
    async fn update_existing_named(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        update: &str,
        names: Vec<(String, String)>,
        values: Vec<(impl Into<String>, AttributeValue)>,
    ) -> Result<HashMap<String, AttributeValue>, PortError> {
        let mut request = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("tenant_id", AttributeValue::S(tenant.to_string()))
            .key("endpoint_id", AttributeValue::S(id.to_string()))
            .update_expression(update)
            .condition_expression("attribute_exists(endpoint_id)")
            .return_values(ReturnValue::AllOld);
        for (placeholder, attribute) in names {
            request = request.expression_attribute_names(placeholder, attribute);
        }
        for (name, value) in values {
            request = request.expression_attribute_values(name, value);
        }
        match request.send().await {
            Ok(out) => Ok(out.attributes.unwrap_or_default()),
            Err(e)
                if matches!(
                    e.as_service_error(),
                    Some(UpdateItemError::ConditionalCheckFailedException(_))
                ) =>
            {
                Err(not_found(tenant, id))
            }
            Err(e) => Err(port_error(e)),
        }
    }
}

impl DynamoEndpointStore {
    /// `change` and the tenant's subscriptions version plus one, in one transaction
    /// (`TransactWriteItems`: both or neither; it bills each write twice, for writes that
    /// are rare). `Ok(false)` when `change`'s own condition failed: nothing was written.
    /// A transaction that a concurrent one on the same tenant's version cancelled
    /// (`TransactionConflict`: two writes to one tenant's endpoints at once) wrote nothing
    /// and is tried again, [`VERSION_CONFLICT_TRIES`] tries in all, then is
    /// [`PortError::Unavailable`] as any outage.
    async fn write_with_version(
        &self,
        tenant: &TenantId,
        change: TransactWriteItem,
    ) -> Result<bool, PortError> {
        let bump = Update::builder()
            .table_name(&self.table)
            .set_key(Some(subscriptions_key(tenant)))
            .update_expression("ADD #v :one")
            .expression_attribute_names("#v", VERSION_ATTRIBUTE)
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .build()
            .map_err(|e| PortError::Rejected(format!("version update does not build: {e}")))?;
        let bump = TransactWriteItem::builder().update(bump).build();
        let mut tried = 0;
        loop {
            tried += 1;
            let result = self
                .client
                .transact_write_items()
                .transact_items(change.clone())
                .transact_items(bump.clone())
                .send()
                .await;
            let e = match result {
                Ok(_) => return Ok(true),
                Err(e) => e,
            };
            match cancellation(e.as_service_error()) {
                Some(Cancelled::ConditionFailed) => return Ok(false),
                Some(Cancelled::Conflict) if tried < VERSION_CONFLICT_TRIES => {
                    // Full jitter over 20 ms doubling: the other writer's transaction
                    // takes milliseconds.
                    let cap = 20u64 << (tried - 1);
                    let wait = rand::random_range(0..=cap);
                    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
                }
                _ => return Err(port_error(e)),
            }
        }
    }

    /// Endpoint `id`'s key.
    fn endpoint_key(tenant: &TenantId, id: &EndpointId) -> HashMap<String, AttributeValue> {
        HashMap::from([
            (
                "tenant_id".to_owned(),
                AttributeValue::S(tenant.to_string()),
            ),
            ("endpoint_id".to_owned(), AttributeValue::S(id.to_string())),
        ])
    }

    /// A tenant's endpoints, read strongly consistent or not.
    async fn list_tenant(
        &self,
        tenant: &TenantId,
        consistent: bool,
    ) -> Result<Vec<Endpoint>, PortError> {
        let mut endpoints = Vec::new();
        let mut start = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("tenant_id = :t")
                .expression_attribute_values(":t", AttributeValue::S(tenant.to_string()))
                .consistent_read(consistent)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(port_error)?;
            // One corrupt endpoint must not stop delivery to the others.
            for item in out.items.unwrap_or_default() {
                self.read_listed(item, &mut endpoints).await?;
            }
            start = out.last_evaluated_key;
            if start.is_none() {
                return Ok(endpoints);
            }
        }
    }
}

impl DynamoEndpointStore {
    /// Applies `update` when the endpoint exists and `condition` holds: `Ok(true)` when
    /// applied, `Ok(false)` when the endpoint exists but `condition` does not hold,
    /// [`PortError::Rejected`] when it does not exist.
    async fn update_if(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        update: &str,
        condition: &str,
        values: Vec<(&str, AttributeValue)>,
    ) -> Result<bool, PortError> {
        let mut request = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("tenant_id", AttributeValue::S(tenant.to_string()))
            .key("endpoint_id", AttributeValue::S(id.to_string()))
            .update_expression(update)
            .condition_expression(format!("attribute_exists(endpoint_id) AND ({condition})"))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        for (name, value) in values {
            request = request.expression_attribute_values(name, value);
        }
        match request.send().await {
            Ok(_) => Ok(true),
            Err(e) => match e.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(c)) => {
                    if c.item().is_some_and(|i| i.contains_key("endpoint_id")) {
                        Ok(false)
                    } else {
                        Err(not_found(tenant, id))
                    }
                }
                _ => Err(port_error(e)),
            },
        }
    }
}

/// The error for an endpoint that does not exist: bad input, not an outage.
fn not_found(tenant: &TenantId, id: &EndpointId) -> PortError {
    PortError::Rejected(format!("endpoint {id} of tenant {tenant} does not exist"))
}

/// Now as stored in the endpoint item (RFC 3339 text, as serde writes `DateTime<Utc>`).
fn now_value() -> Result<AttributeValue, PortError> {
    serde_dynamo::to_attribute_value(chrono::Utc::now())
        .map_err(|e| PortError::Rejected(format!("time does not serialize: {e}")))
}

fn from_item(item: HashMap<String, AttributeValue>) -> Result<Endpoint, PortError> {
    serde_dynamo::from_item(item)
        .map_err(|e| PortError::Rejected(format!("endpoint item does not parse: {e}")))
}

#[async_trait]
impl EndpointStore for DynamoEndpointStore {
    async fn get(&self, tenant: &TenantId, id: &EndpointId) -> Result<Option<Endpoint>, PortError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("tenant_id", AttributeValue::S(tenant.to_string()))
            .key("endpoint_id", AttributeValue::S(id.to_string()))
            .consistent_read(true)
            .send()
            .await
            .map_err(port_error)?;
        match out.item {
            Some(item) => self.read_item(item).await.map(Some),
            None => Ok(None),
        }
    }

    async fn list_for_tenant(&self, tenant: &TenantId) -> Result<Vec<Endpoint>, PortError> {
        self.list_tenant(tenant, false).await
    }

    async fn list_for_tenant_current(&self, tenant: &TenantId) -> Result<Vec<Endpoint>, PortError> {
        self.list_tenant(tenant, true).await
    }

    /// One strongly consistent `GetItem` of the tenant's version item (1 read unit): 0
    /// when no write has made it yet (a tenant without endpoints, or whose endpoints were
    /// all written before versions existed).
    async fn subscriptions_version(&self, tenant: &TenantId) -> Result<Option<u64>, PortError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(subscriptions_key(tenant)))
            .projection_expression("#v")
            .expression_attribute_names("#v", VERSION_ATTRIBUTE)
            .consistent_read(true)
            .send()
            .await
            .map_err(port_error)?;
        match out.item.as_ref().and_then(|i| i.get(VERSION_ATTRIBUTE)) {
            None => Ok(Some(0)),
            Some(AttributeValue::N(n)) => n.parse::<u64>().map(Some).map_err(|e| {
                PortError::Rejected(format!(
                    "subscriptions version of tenant {tenant} is not a whole number: {e}"
                ))
            }),
            Some(_) => Err(PortError::Rejected(format!(
                "subscriptions version of tenant {tenant} is not a number"
            ))),
        }
    }

    async fn list_page(
        &self,
        tenant: &TenantId,
        after: Option<&EndpointId>,
        limit: usize,
        enabled: Option<bool>,
    ) -> Result<EndpointPage, PortError> {
        let limit = limit.max(1);
        let mut endpoints = Vec::new();
        let mut start = after.map(|a| {
            HashMap::from([
                (
                    "tenant_id".to_owned(),
                    AttributeValue::S(tenant.to_string()),
                ),
                ("endpoint_id".to_owned(), AttributeValue::S(a.to_string())),
            ])
        });
        // A state filter is applied after `Limit` counts the items read, so a page may need
        // several reads; bounded, and the cursor carries on where they stopped.
        for _ in 0..MAX_PAGE_READS {
            let remaining = i32::try_from(limit - endpoints.len()).unwrap_or(i32::MAX);
            let mut request = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("tenant_id = :t")
                .expression_attribute_values(":t", AttributeValue::S(tenant.to_string()))
                .consistent_read(true)
                .limit(remaining)
                .set_exclusive_start_key(start);
            if let Some(on) = enabled {
                request = request
                    .filter_expression("enabled = :on")
                    .expression_attribute_values(":on", AttributeValue::Bool(on));
            }
            let out = request.send().await.map_err(port_error)?;
            for item in out.items.unwrap_or_default() {
                self.read_listed(item, &mut endpoints).await?;
            }
            start = out.last_evaluated_key;
            if start.is_none() || endpoints.len() >= limit {
                break;
            }
        }
        let next = start.and_then(|key| match key.get("endpoint_id") {
            Some(AttributeValue::S(id)) => EndpointId::new(id.clone()).ok(),
            _ => None,
        });
        Ok(EndpointPage { endpoints, next })
    }

    async fn list_all(&self) -> Result<Vec<Endpoint>, PortError> {
        let mut endpoints = Vec::new();
        let mut start = None;
        loop {
            let out = self
                .client
                .scan()
                .table_name(&self.table)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(port_error)?;
            // As in list_for_tenant: one corrupt item must not hide the others. The
            // keyring's items and the subscriptions versions are not endpoints.
            for item in out.items.unwrap_or_default() {
                if is_reserved_item(&item) {
                    continue;
                }
                self.read_listed(item, &mut endpoints).await?;
            }
            start = out.last_evaluated_key;
            if start.is_none() {
                endpoints.sort_by(|a, b| (&a.tenant_id, &a.id).cmp(&(&b.tenant_id, &b.id)));
                return Ok(endpoints);
            }
        }
    }

    async fn put(&self, endpoint: &Endpoint) -> Result<(), PortError> {
        let mut item = to_item(endpoint)?;
        self.seal_attributes(&endpoint.tenant_id, &endpoint.id, &mut item)
            .await?;
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .build()
            .map_err(|e| PortError::Rejected(format!("endpoint put does not build: {e}")))?;
        self.write_with_version(
            &endpoint.tenant_id,
            TransactWriteItem::builder().put(put).build(),
        )
        .await?;
        Ok(())
    }

    async fn create(&self, endpoint: &Endpoint) -> Result<Option<Endpoint>, PortError> {
        let mut item = to_item(endpoint)?;
        self.seal_attributes(&endpoint.tenant_id, &endpoint.id, &mut item)
            .await?;
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(endpoint_id)")
            .build()
            .map_err(|e| PortError::Rejected(format!("endpoint put does not build: {e}")))?;
        if self
            .write_with_version(
                &endpoint.tenant_id,
                TransactWriteItem::builder().put(put).build(),
            )
            .await?
        {
            return Ok(None);
        }
        // Read back whole (its secrets opened), as every other read.
        self.get(&endpoint.tenant_id, &endpoint.id)
            .await?
            .map(Some)
            .ok_or_else(|| {
                PortError::Unavailable(format!(
                    "endpoint {} was there and is gone: try again",
                    endpoint.id
                ))
            })
    }

    async fn disable(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        reason: &str,
    ) -> Result<(), PortError> {
        // An enabled endpoint also gets its disabled time; an already disabled one only
        // the new reason, so the time stays that of the first disable. (A condition, not
        // if_not_exists: items hold absent options as NULL attributes.)
        let first = self
            .update_if(
                tenant,
                id,
                "SET enabled = :f, disabled_reason = :r, disabled_at = :now",
                "enabled = :t",
                vec![
                    (":f", AttributeValue::Bool(false)),
                    (":t", AttributeValue::Bool(true)),
                    (":r", AttributeValue::S(reason.to_owned())),
                    (":now", now_value()?),
                ],
            )
            .await?;
        if first {
            return Ok(());
        }
        self.update_existing(
            tenant,
            id,
            "SET enabled = :f, disabled_reason = :r",
            vec![
                (":f", AttributeValue::Bool(false)),
                (":r", AttributeValue::S(reason.to_owned())),
            ],
        )
        .await
    }

    async fn disable_keeping_reason(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        reason: &str,
    ) -> Result<(), PortError> {
        let first = self
            .update_if(
                tenant,
                id,
                "SET enabled = :f, disabled_reason = :r, disabled_at = :now",
                "attribute_not_exists(disabled_reason) OR attribute_type(disabled_reason, :null)",
                vec![
                    (":f", AttributeValue::Bool(false)),
                    (":r", AttributeValue::S(reason.to_owned())),
                    (":now", now_value()?),
                    (":null", AttributeValue::S("NULL".into())),
                ],
            )
            .await?;
        if first {
            return Ok(());
        }
        // It has a reason already: keep it (and its time); only make sure it is off.
        self.update_existing(
            tenant,
            id,
            "SET enabled = :f",
            vec![(":f", AttributeValue::Bool(false))],
        )
        .await
    }

    async fn enable(&self, tenant: &TenantId, id: &EndpointId) -> Result<(), PortError> {
        // Two writes: an expression cannot copy an attribute that may be missing. The
        // first is the one that matters (enabled, reason gone) and returns what it
        // removed; the second keeps that for operators and touches nothing else.
        let old = self
            .update_existing_returning_old(
                tenant,
                id,
                "SET enabled = :t REMOVE disabled_reason, disabled_at",
                vec![(":t", AttributeValue::Bool(true))],
            )
            .await?;
        // Absent options are stored as NULL attributes: only text counts.
        let text = |name: &str| match old.get(name) {
            Some(v @ AttributeValue::S(_)) => Some(v.clone()),
            _ => None,
        };
        let Some(reason) = text("disabled_reason") else {
            return Ok(());
        };
        let mut update = "SET last_disabled_reason = :r".to_owned();
        let mut values = vec![(":r", reason)];
        if let Some(at) = text("disabled_at") {
            update.push_str(", last_disabled_at = :at");
            values.push((":at", at));
        } else {
            update.push_str(" REMOVE last_disabled_at");
        }
        self.update_existing(tenant, id, &update, values).await
    }

    async fn delete(&self, tenant: &TenantId, id: &EndpointId) -> Result<(), PortError> {
        let delete = Delete::builder()
            .table_name(&self.table)
            .set_key(Some(Self::endpoint_key(tenant, id)))
            .condition_expression("attribute_exists(endpoint_id)")
            .build()
            .map_err(|e| PortError::Rejected(format!("endpoint delete does not build: {e}")))?;
        if self
            .write_with_version(tenant, TransactWriteItem::builder().delete(delete).build())
            .await?
        {
            Ok(())
        } else {
            Err(not_found(tenant, id))
        }
    }

    async fn update(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        update: &EndpointUpdate,
    ) -> Result<(), PortError> {
        fn value(v: &impl serde::Serialize) -> Result<AttributeValue, PortError> {
            serde_dynamo::to_attribute_value(v)
                .map_err(|e| PortError::Rejected(format!("update does not serialize: {e}")))
        }
        // Only the named fields are written (SET, or REMOVE for "back to the default"),
        // so a disable or a rotation that lands meanwhile stays.
        let mut set = vec!["updated_at = :updated_at".to_owned()];
        let mut remove = Vec::new();
        let mut names = Vec::new();
        let mut values = vec![(":updated_at".to_owned(), now_value()?)];
        let mut field = |name: &str, v: Option<AttributeValue>| {
            // `url` is a DynamoDB reserved word: every field goes through a #name.
            names.push((format!("#{name}"), name.to_owned()));
            match v {
                Some(v) => {
                    set.push(format!("#{name} = :{name}"));
                    values.push((format!(":{name}"), v));
                }
                None => remove.push(format!("#{name}")),
            }
        };
        if let Some(url) = &update.url {
            field("url", Some(AttributeValue::S(url.clone())));
        }
        if let Some(types) = &update.event_types {
            field("event_types", Some(value(types)?));
        }
        if let Some(d) = &update.description {
            field("description", d.clone().map(AttributeValue::S));
        }
        if let Some(t) = update.timeout_ms {
            field("timeout_ms", t.map(|t| AttributeValue::N(t.to_string())));
        }
        if let Some(s) = &update.schedule {
            field("schedule", s.as_ref().map(value).transpose()?);
        }
        if let Some(m) = update.max_attempts {
            field("max_attempts", m.map(|m| AttributeValue::N(m.to_string())));
        }
        if let Some(f) = update.payload_format {
            field(
                "payload_format",
                Some(AttributeValue::S(f.as_str().to_owned())),
            );
        }
        if let Some(t) = update.send_traceparent {
            field("send_traceparent", Some(AttributeValue::Bool(t)));
        }
        if let Some(r) = update.max_per_second {
            field(
                "max_per_second",
                r.map(|r| AttributeValue::N(r.to_string())),
            );
        }
        // Headers and authentication together under one data key.
        let mut secret_values = HashMap::new();
        if let Some(h) = &update.headers {
            secret_values.insert("headers".to_owned(), value(h)?);
        }
        if let Some(a) = &update.auth {
            secret_values.insert("auth".to_owned(), value(a)?);
        }
        self.seal_attributes(tenant, id, &mut secret_values).await?;
        for name in ["headers", "auth"] {
            if let Some(v) = secret_values.remove(name) {
                field(name, Some(v));
            }
        }
        if let Some(s) = update.signatures {
            field("signatures", Some(AttributeValue::S(s.as_str().to_owned())));
        }
        if let Some(c) = &update.client_certificate {
            field("client_certificate", c.as_ref().map(value).transpose()?);
        }
        let mut expression = format!("SET {}", set.join(", "));
        if !remove.is_empty() {
            expression.push_str(&format!(" REMOVE {}", remove.join(", ")));
        }
        // With the subscriptions version: a PATCH may change the event types.
        let mut change = Update::builder()
            .table_name(&self.table)
            .set_key(Some(Self::endpoint_key(tenant, id)))
            .update_expression(expression)
            .condition_expression("attribute_exists(endpoint_id)");
        for (placeholder, attribute) in names {
            change = change.expression_attribute_names(placeholder, attribute);
        }
        for (name, value) in values {
            change = change.expression_attribute_values(name, value);
        }
        let change = change
            .build()
            .map_err(|e| PortError::Rejected(format!("endpoint update does not build: {e}")))?;
        if self
            .write_with_version(tenant, TransactWriteItem::builder().update(change).build())
            .await?
        {
            Ok(())
        } else {
            Err(not_found(tenant, id))
        }
    }

    async fn set_secrets(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        secrets: &[EndpointSecret],
    ) -> Result<(), PortError> {
        let value: AttributeValue = serde_dynamo::to_attribute_value(secrets)
            .map_err(|e| PortError::Rejected(format!("secrets do not serialize: {e}")))?;
        let value = self.sealed_value(tenant, id, "secrets", value).await?;
        self.update_existing(tenant, id, "SET secrets = :s", vec![(":s", value)])
            .await
    }

    async fn set_signing_keys(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        keys: &[EndpointSigningKey],
    ) -> Result<(), PortError> {
        let value: AttributeValue = serde_dynamo::to_attribute_value(keys)
            .map_err(|e| PortError::Rejected(format!("signing keys do not serialize: {e}")))?;
        let value = self.sealed_value(tenant, id, "signing_keys", value).await?;
        self.update_existing(tenant, id, "SET signing_keys = :k", vec![(":k", value)])
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::CancellationReason;
    use aws_sdk_dynamodb::types::error::TransactionCanceledException;

    fn cancelled(codes: &[&str]) -> TransactWriteItemsError {
        let mut e = TransactionCanceledException::builder();
        for code in codes {
            e = e.cancellation_reasons(CancellationReason::builder().code(*code).build());
        }
        TransactWriteItemsError::TransactionCanceledException(e.build())
    }

    #[test]
    fn a_cancelled_transaction_is_told_apart_by_its_reasons() {
        // The endpoint write is always the first item, the version the second.
        assert_eq!(
            cancellation(Some(&cancelled(&["ConditionalCheckFailed", "None"]))),
            Some(Cancelled::ConditionFailed)
        );
        assert_eq!(
            cancellation(Some(&cancelled(&["None", "TransactionConflict"]))),
            Some(Cancelled::Conflict)
        );
        assert_eq!(
            cancellation(Some(&cancelled(&["TransactionConflict", "None"]))),
            Some(Cancelled::Conflict)
        );
        // Throttled: the SDK's own retries already ran; the caller maps it to Unavailable.
        assert_eq!(
            cancellation(Some(&cancelled(&["ThrottlingError", "None"]))),
            None
        );
        assert_eq!(cancellation(None), None);
    }

    #[test]
    fn reserved_items_are_not_endpoints() {
        let item = |t: &str| HashMap::from([("tenant_id".to_owned(), AttributeValue::S(t.into()))]);
        assert!(is_reserved_item(&subscriptions_key(
            &TenantId::new("tnt_a").unwrap()
        )));
        assert!(is_reserved_item(&item(crate::keyring::KEYRING_PARTITION)));
        assert!(!is_reserved_item(&item("tnt_a")));
    }
}
