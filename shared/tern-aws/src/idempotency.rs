//! [`DynamoIdempotencyStore`]: the API's idempotency records
//! (`tern_core::idempotency`) in the portal table, the deployment's table of short-lived
//! API records (`infra/settings.json` `tables.portal`: key `pk`, TTL `expires_at`;
//! deployed by both stacks and local mode whether or not the portal's pages are used).
//!
//! One item per tenant and key, `pk` = `idem#<tenant>#<SHA-256 of the key, hex>`:
//!
//! | attribute | |
//! | --- | --- |
//! | `fp` | the request's fingerprint |
//! | `st` | `running` or `done` |
//! | `tok` | the claim's token |
//! | `at`, `lease` | when it was claimed, until when the claim holds (Unix milliseconds) |
//! | `expires_at` | `at` + 24 h (Unix seconds), the table's TTL attribute |
//! | `status`, `hdr`, `body` | the answer (`done` only): status, headers as JSON, body bytes |
//! | `sealed` | instead of `body` when the answer may hold a secret: `tern2....` (older records: `tern1....`) |
//!
//! Every call is one conditional write, and reads nothing else: a claim is a `PutItem`
//! whose condition lets it replace only an absent, expired or abandoned record, and a
//! refused claim returns the live record in the same call
//! (`ReturnValuesOnConditionCheckFailure`); completion is a `PutItem` and release an
//! `UpdateItem`, each conditional on the claim's token. The client comes through
//! [`crate::budget::bounded`]: each call has its deadline and three tries.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use chrono::{DateTime, Utc};
use tern_core::idempotency::{
    Claim, IdempotencyStore, LEASE_SECONDS, Lease, RECORD_TTL_SECONDS, RecordKey, StoredAnswer,
};
use tern_core::ports::PortError;
use tern_core::sealed::{Keyring, SealContext, SealError};

use crate::error::port_error;

/// Prefix of the records' keys in the portal table.
pub const KEY_PREFIX: &str = "idem#";

const RUNNING: &str = "running";
const DONE: &str = "done";

/// The records in one table.
#[derive(Clone)]
pub struct DynamoIdempotencyStore {
    client: Client,
    table: String,
    keyring: Option<Arc<dyn Keyring>>,
}

impl std::fmt::Debug for DynamoIdempotencyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoIdempotencyStore")
            .field("table", &self.table)
            .field("sealed", &self.keyring.is_some())
            .finish()
    }
}

impl DynamoIdempotencyStore {
    /// The records in `table`; answers marked [`StoredAnswer::sealed`] are sealed under
    /// `keyring`'s current epoch when there is one (the endpoint store's keyring,
    /// [`crate::DynamoEndpointStore::keyring`]: the deployment's `TERN_SECRETS_KEY_ID`,
    /// as endpoint secrets are; no KMS request per answer), and stored as they are
    /// otherwise.
    pub fn new(
        client: Client,
        table: impl Into<String>,
        keyring: Option<Arc<dyn Keyring>>,
    ) -> Self {
        Self {
            client,
            table: table.into(),
            keyring,
        }
    }

    /// The item key of `key`: `idem#<tenant>#<digest>`.
    pub fn item_key(key: &RecordKey) -> String {
        format!("{KEY_PREFIX}{}#{}", key.tenant(), key.digest())
    }
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn seal_port_error(e: SealError) -> PortError {
    if e.is_transient() {
        PortError::Unavailable(e.to_string())
    } else {
        PortError::Rejected(e.to_string())
    }
}

fn text<'a>(item: &'a HashMap<String, AttributeValue>, name: &str) -> Option<&'a str> {
    match item.get(name) {
        Some(AttributeValue::S(v)) => Some(v),
        _ => None,
    }
}

fn number(item: &HashMap<String, AttributeValue>, name: &str) -> Option<i64> {
    match item.get(name) {
        Some(AttributeValue::N(v)) => v.parse().ok(),
        _ => None,
    }
}

/// The attributes every state of a record has.
fn claim_item(
    key: &RecordKey,
    lease: &Lease,
    fingerprint: &str,
    state: &str,
) -> HashMap<String, AttributeValue> {
    let at = lease.claimed_at.timestamp_millis();
    HashMap::from([
        ("pk".to_owned(), s(DynamoIdempotencyStore::item_key(key))),
        ("fp".to_owned(), s(fingerprint)),
        ("st".to_owned(), s(state)),
        ("tok".to_owned(), s(&lease.token)),
        ("at".to_owned(), n(at)),
        ("lease".to_owned(), n(at + LEASE_SECONDS * 1000)),
        (
            "expires_at".to_owned(),
            n(lease.claimed_at.timestamp() + RECORD_TTL_SECONDS),
        ),
    ])
}

impl DynamoIdempotencyStore {
    /// The record a refused claim found, its answer opened.
    async fn found(
        &self,
        key: &RecordKey,
        item: &HashMap<String, AttributeValue>,
    ) -> Result<Claim, PortError> {
        let malformed = |what: &str| PortError::Rejected(format!("idempotency record: {what}"));
        let fingerprint = text(item, "fp")
            .ok_or_else(|| malformed("no fingerprint"))?
            .to_owned();
        if text(item, "st") != Some(DONE) {
            return Ok(Claim::Running { fingerprint });
        }
        let status = number(item, "status")
            .and_then(|v| u16::try_from(v).ok())
            .ok_or_else(|| malformed("no status"))?;
        let headers: Vec<(String, String)> = text(item, "hdr")
            .map(serde_json::from_str)
            .transpose()
            .map_err(|_| malformed("headers are not JSON"))?
            .unwrap_or_default();
        let (body, sealed) = match (item.get("body"), text(item, "sealed")) {
            (Some(AttributeValue::B(b)), _) => (b.clone().into_inner(), false),
            (_, Some(sealed)) => {
                let keyring = self
                    .keyring
                    .as_ref()
                    .ok_or_else(|| seal_port_error(SealError::NoKey))?;
                let context = SealContext::idempotency_record(key.tenant(), key.digest());
                let text = tern_core::sealed::open_text(keyring.as_ref(), &context, sealed)
                    .await
                    .map_err(seal_port_error)?;
                (text.into_bytes(), true)
            }
            _ => (Vec::new(), false),
        };
        Ok(Claim::Done {
            fingerprint,
            answer: StoredAnswer {
                status,
                headers,
                body,
                sealed,
            },
        })
    }
}

#[async_trait]
impl IdempotencyStore for DynamoIdempotencyStore {
    async fn claim(
        &self,
        key: &RecordKey,
        fingerprint: &str,
        now: DateTime<Utc>,
    ) -> Result<Claim, PortError> {
        let lease = Lease {
            token: tern_core::idempotency::new_token(),
            claimed_at: now,
        };
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(claim_item(key, &lease, fingerprint, RUNNING)))
            // Absent, past its 24 h (TTL deletion lags), or a claim that never finished
            // and whose lease ran out (`tern_core::idempotency::claimable`).
            .condition_expression(
                "attribute_not_exists(pk) OR expires_at <= :now_s \
                 OR (st = :running AND #lease <= :now_ms)",
            )
            .expression_attribute_names("#lease", "lease")
            .expression_attribute_values(":now_s", n(now.timestamp()))
            .expression_attribute_values(":now_ms", n(now.timestamp_millis()))
            .expression_attribute_values(":running", s(RUNNING))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Claim::Claimed(lease)),
            Err(e) => match e.as_service_error() {
                Some(PutItemError::ConditionalCheckFailedException(c)) => match c.item() {
                    Some(item) => self.found(key, item).await,
                    // Refused without the record (it went between the check and the
                    // answer): as if running; the client retries.
                    None => Ok(Claim::Running {
                        fingerprint: fingerprint.to_owned(),
                    }),
                },
                _ => Err(port_error(e)),
            },
        }
    }

    async fn complete(
        &self,
        key: &RecordKey,
        lease: &Lease,
        fingerprint: &str,
        answer: &StoredAnswer,
    ) -> Result<bool, PortError> {
        let mut item = claim_item(key, lease, fingerprint, DONE);
        item.insert("status".to_owned(), n(answer.status));
        let headers = serde_json::to_string(&answer.headers)
            .map_err(|e| PortError::Rejected(format!("idempotency record headers: {e}")))?;
        item.insert("hdr".to_owned(), s(headers));
        match (&self.keyring, answer.sealed) {
            (Some(keyring), true) => {
                let text = std::str::from_utf8(&answer.body).map_err(|_| {
                    PortError::Rejected("an answer to seal is not UTF-8 text".into())
                })?;
                let context = SealContext::idempotency_record(key.tenant(), key.digest());
                // Under the keyring's epoch key, with this record's own derived key and
                // associated data: a sealed answer copied to another record (or an
                // endpoint) does not open.
                let sealed = tern_core::sealed::seal_text(keyring.as_ref(), &context, text)
                    .await
                    .map_err(seal_port_error)?;
                item.insert("sealed".to_owned(), s(sealed));
            }
            _ => {
                item.insert(
                    "body".to_owned(),
                    AttributeValue::B(Blob::new(answer.body.clone())),
                );
            }
        }
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("tok = :tok")
            .expression_attribute_values(":tok", s(&lease.token))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|se| se.is_conditional_check_failed_exception()) =>
            {
                Ok(false)
            }
            Err(e) => Err(port_error(e)),
        }
    }

    async fn release(&self, key: &RecordKey, lease: &Lease) -> Result<(), PortError> {
        // The lease ends now: the next claim's condition takes the record. An UpdateItem,
        // which the api role holds on the table already (no DeleteItem there).
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(Self::item_key(key)))
            .update_expression("SET #lease = :zero")
            .condition_expression("tok = :tok AND st = :running")
            .expression_attribute_names("#lease", "lease")
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":tok", s(&lease.token))
            .expression_attribute_values(":running", s(RUNNING))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|se| se.is_conditional_check_failed_exception()) =>
            {
                Ok(())
            }
            Err(e) => Err(port_error(e)),
        }
    }
}
