//! Idempotency keys of the API's POSTs, with Stripe's semantics
//! (draft-ietf-httpapi-idempotency-key-header): the first request under a key runs and its
//! answer is kept for [`RECORD_TTL_SECONDS`]; a retry with the same key and the same
//! request gets that answer again and runs nothing; the key with another request is
//! refused; a retry while the first still runs is told to wait.
//!
//! This module is the pure part and the port: the key's syntax ([`parse_key`]), the
//! record's identity ([`RecordKey`]), what makes two requests the same
//! ([`fingerprint`]), the record's life ([`Claim`], [`Lease`]) and the store
//! ([`IdempotencyStore`]; DynamoDB in `tern_aws::idempotency`). The HTTP side (which
//! requests, which answers are kept) is the API's (`tern_api::idempotency`).

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sha2::{Digest as _, Sha256};

use crate::ids::TenantId;
use crate::ports::PortError;

/// How long a record answers retries, seconds: 86,400 (24 h, Stripe's retention of
/// idempotency keys). Counted from the first request's start; a record past it is absent,
/// whether or not DynamoDB's TTL has deleted it yet (its deletion lags, typically by days).
pub const RECORD_TTL_SECONDS: i64 = 86_400;

/// How long a claim holds a key while its request runs, seconds: 30. Nothing of a request
/// runs longer: the `api` function's timeout is 28 s (settings.json `functions.api`) and
/// API Gateway gives up on an integration after 30 s (HTTP API quota). A request that
/// never finished (a crashed or timed-out instance) leaves its claim, and a retry after
/// the lease runs anew.
pub const LEASE_SECONDS: i64 = 30;

/// Longest key, in characters: 255 (Stripe's limit).
pub const MAX_KEY_LEN: usize = 255;

/// Why a key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Empty (or `""`), longer than [`MAX_KEY_LEN`], or holding a character that is not
    /// visible ASCII (or is `"` or `\` inside the quotes).
    #[error(
        "Idempotency-Key must be 1-255 visible ASCII characters (a UUID is a good key), bare or in double quotes"
    )]
    Malformed,
}

/// The key of an `Idempotency-Key` header value: 1-255 visible ASCII characters, bare
/// (Stripe's form) or as a Structured Field string in double quotes (the IETF draft's
/// form, RFC 8941 §3.3.3), which is unquoted; surrounding spaces are ignored.
///
/// # Errors
/// [`KeyError::Malformed`].
pub fn parse_key(text: &str) -> Result<String, KeyError> {
    let text = text.trim();
    let key = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    if key.is_empty()
        || key.len() > MAX_KEY_LEN
        || !key
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
    {
        return Err(KeyError::Malformed);
    }
    Ok(key.to_owned())
}

/// Where a tenant's key is kept: the tenant and the SHA-256 of the key (hex), so keys of
/// two tenants never meet and the stored id has one length whatever the key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RecordKey {
    tenant: TenantId,
    digest: String,
}

impl RecordKey {
    /// The record of `key` (as [`parse_key`] returns it) for `tenant`.
    pub fn new(tenant: &TenantId, key: &str) -> Self {
        Self {
            tenant: tenant.clone(),
            digest: hex::encode(Sha256::digest(key.as_bytes())),
        }
    }

    /// The tenant.
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// The key's SHA-256, 64 hex digits: the record's id within the tenant (and the
    /// sealing context of its answer, `crate::sealed::SealContext::idempotency_record`).
    pub fn digest(&self) -> &str {
        &self.digest
    }
}

/// What makes two requests the same: SHA-256 (hex) of the method, the path with its
/// query, and the body as JSON with object keys in order and no spacing (so spacing and
/// key order do not count, a value does). An empty body reads as `{}`, as the API's JSON
/// extractor reads it; a body that is not JSON counts byte for byte.
pub fn fingerprint(method: &str, path_and_query: &str, body: &[u8]) -> String {
    let mut hash = Sha256::new();
    hash.update(method.as_bytes());
    hash.update([0]);
    hash.update(path_and_query.as_bytes());
    hash.update([0]);
    if body.iter().all(u8::is_ascii_whitespace) {
        hash.update(b"json:{}");
    } else if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) {
        hash.update(b"json:");
        let mut text = String::new();
        canonical(&value, &mut text);
        hash.update(text.as_bytes());
    } else {
        hash.update(b"raw:");
        hash.update(body);
    }
    hex::encode(hash.finalize())
}

/// `value` as JSON text with every object's keys sorted, whatever order the map keeps.
fn canonical(value: &serde_json::Value, out: &mut String) {
    match value {
        serde_json::Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&map[k], out);
            }
            out.push('}');
        }
        serde_json::Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// An answer kept for retries: its status, the headers that matter, the body's bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredAnswer {
    /// HTTP status.
    pub status: u16,
    /// Headers replayed with it (names in lower case).
    pub headers: Vec<(String, String)>,
    /// The body, byte for byte.
    pub body: Vec<u8>,
    /// True when the body may hold a secret (a signing secret, a portal link): the store
    /// seals it with the deployment's key before it is written.
    pub sealed: bool,
}

impl std::fmt::Debug for StoredAnswer {
    // The body may hold a secret: its length only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredAnswer")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .field("body_bytes", &self.body.len())
            .field("sealed", &self.sealed)
            .finish()
    }
}

/// A claim on a key: the request holding it completes or releases it with this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Random, unique to this claim: a completion or release of an older claim whose lease
    /// ran out (and that another request claimed since) changes nothing.
    pub token: String,
    /// When the request claimed the key: the record expires [`RECORD_TTL_SECONDS`] after.
    pub claimed_at: DateTime<Utc>,
}

/// What a claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// No live record (none, expired, or a claim whose lease ran out): this request
    /// runs, holding the lease.
    Claimed(Lease),
    /// A request under this key is running (its lease has not run out).
    Running {
        /// The running request's [`fingerprint`].
        fingerprint: String,
    },
    /// A request under this key finished within [`RECORD_TTL_SECONDS`].
    Done {
        /// Its [`fingerprint`].
        fingerprint: String,
        /// Its answer (opened, when it was sealed).
        answer: StoredAnswer,
    },
}

/// The records of keys (the portal table in AWS, under `idem#`).
#[async_trait]
pub trait IdempotencyStore: Send + Sync {
    /// Claims `key` for a request with `fingerprint` at `now`, or returns the live record
    /// that holds it: one conditional write, so of concurrent claims exactly one wins.
    ///
    /// # Errors
    /// [`PortError`] when the store, or the key service opening a sealed answer, fails.
    async fn claim(
        &self,
        key: &RecordKey,
        fingerprint: &str,
        now: DateTime<Utc>,
    ) -> Result<Claim, PortError>;

    /// Keeps `answer` as the key's, if `lease` still holds it (false, and nothing written,
    /// when another claim took it over after the lease ran out). A sealed answer is
    /// sealed before it is written.
    ///
    /// # Errors
    /// [`PortError`].
    async fn complete(
        &self,
        key: &RecordKey,
        lease: &Lease,
        fingerprint: &str,
        answer: &StoredAnswer,
    ) -> Result<bool, PortError>;

    /// Lets the key go without an answer (the request failed on our side, 5xx), if
    /// `lease` still holds it: the next request under it runs.
    ///
    /// # Errors
    /// [`PortError`].
    async fn release(&self, key: &RecordKey, lease: &Lease) -> Result<(), PortError>;
}

/// A new lease token: 32 random hex digits.
pub fn new_token() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

/// True when a claim at `now` may take a record that was claimed at `claimed_at`, holds a
/// lease until `lease_until` and is `done` or not: it has expired, or it never finished
/// and its lease ran out. The store's conditional write states the same rule.
pub fn claimable(
    claimed_at: DateTime<Utc>,
    lease_until: DateTime<Utc>,
    done: bool,
    now: DateTime<Utc>,
) -> bool {
    claimed_at.timestamp() + RECORD_TTL_SECONDS <= now.timestamp() || (!done && lease_until <= now)
}

#[derive(Debug, Clone)]
struct MemoryRecord {
    fingerprint: String,
    lease: Lease,
    lease_until: DateTime<Utc>,
    answer: Option<StoredAnswer>,
}

/// An [`IdempotencyStore`] in memory, for tests of code that uses the port; the same
/// rules as the DynamoDB store, without sealing. Never for a deployment: its records are
/// one process's.
#[derive(Debug, Default)]
pub struct InMemoryIdempotencyStore {
    records: Mutex<HashMap<RecordKey, MemoryRecord>>,
}

#[async_trait]
impl IdempotencyStore for InMemoryIdempotencyStore {
    async fn claim(
        &self,
        key: &RecordKey,
        fingerprint: &str,
        now: DateTime<Utc>,
    ) -> Result<Claim, PortError> {
        let mut records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = records.get(key)
            && !claimable(r.lease.claimed_at, r.lease_until, r.answer.is_some(), now)
        {
            return Ok(match &r.answer {
                Some(answer) => Claim::Done {
                    fingerprint: r.fingerprint.clone(),
                    answer: answer.clone(),
                },
                None => Claim::Running {
                    fingerprint: r.fingerprint.clone(),
                },
            });
        }
        let lease = Lease {
            token: new_token(),
            claimed_at: now,
        };
        records.insert(
            key.clone(),
            MemoryRecord {
                fingerprint: fingerprint.to_owned(),
                lease: lease.clone(),
                lease_until: now + chrono::Duration::seconds(LEASE_SECONDS),
                answer: None,
            },
        );
        Ok(Claim::Claimed(lease))
    }

    async fn complete(
        &self,
        key: &RecordKey,
        lease: &Lease,
        fingerprint: &str,
        answer: &StoredAnswer,
    ) -> Result<bool, PortError> {
        let mut records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        match records.get_mut(key) {
            Some(r) if r.lease.token == lease.token => {
                r.fingerprint = fingerprint.to_owned();
                r.answer = Some(answer.clone());
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn release(&self, key: &RecordKey, lease: &Lease) -> Result<(), PortError> {
        let mut records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        if records
            .get(key)
            .is_some_and(|r| r.lease.token == lease.token)
        {
            records.remove(key);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(t: &str) -> TenantId {
        TenantId::new(t).unwrap()
    }

    #[test]
    fn keys_bare_or_quoted_and_nothing_else() {
        assert_eq!(parse_key("abc-123").unwrap(), "abc-123");
        assert_eq!(parse_key(" \"abc-123\" ").unwrap(), "abc-123");
        assert_eq!(parse_key(&"k".repeat(255)).unwrap().len(), 255);
        for bad in ["", "\"\"", "a key", "é", "a\\b", "a\"b", &"k".repeat(256)] {
            assert_eq!(parse_key(bad), Err(KeyError::Malformed), "{bad:?}");
        }
    }

    #[test]
    fn records_are_per_tenant_and_of_fixed_length() {
        let a = RecordKey::new(&tenant("tnt_a"), "k1");
        assert_eq!(a, RecordKey::new(&tenant("tnt_a"), "k1"));
        assert_ne!(a, RecordKey::new(&tenant("tnt_b"), "k1"));
        assert_ne!(a.digest(), RecordKey::new(&tenant("tnt_a"), "k2").digest());
        assert_eq!(
            RecordKey::new(&tenant("tnt_a"), &"k".repeat(255))
                .digest()
                .len(),
            64
        );
    }

    #[test]
    fn the_fingerprint_counts_values_not_spacing_or_key_order() {
        let p = "/v1/tenants/tnt_a/endpoints/ep_1/rotate-secret";
        let one = fingerprint("POST", p, br#"{"a":1,"b":{"y":2,"x":[1,2]}}"#);
        assert_eq!(
            one,
            fingerprint("POST", p, b"{ \"b\": {\"x\": [1, 2], \"y\": 2}, \"a\": 1 }")
        );
        assert_ne!(
            one,
            fingerprint("POST", p, br#"{"a":2,"b":{"y":2,"x":[1,2]}}"#)
        );
        assert_ne!(
            one,
            fingerprint("POST", p, br#"{"a":1,"b":{"y":2,"x":[2,1]}}"#)
        );
        assert_ne!(
            one,
            fingerprint(
                "POST",
                "/v1/tenants/tnt_a/endpoints/ep_2/rotate-secret",
                br#"{"a":1,"b":{"y":2,"x":[1,2]}}"#
            ),
            "another path parameter is another request"
        );
        assert_ne!(
            one,
            fingerprint("PUT", p, br#"{"a":1,"b":{"y":2,"x":[1,2]}}"#)
        );
        // An empty body is `{}`, as the JSON extractor reads it.
        assert_eq!(fingerprint("POST", p, b""), fingerprint("POST", p, b"{}"));
        assert_eq!(
            fingerprint("POST", p, b" \n"),
            fingerprint("POST", p, b"{ }")
        );
        // Not JSON: byte for byte, and never equal to a JSON body of the same text.
        assert_ne!(
            fingerprint("POST", p, b"x=1"),
            fingerprint("POST", p, b"x=2")
        );
        assert_ne!(
            fingerprint("POST", p, b"{}"),
            fingerprint("POST", p, b"{}x")
        );
    }

    fn answer(body: &str) -> StoredAnswer {
        StoredAnswer {
            status: 200,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.as_bytes().to_vec(),
            sealed: true,
        }
    }

    #[tokio::test]
    async fn a_claim_is_held_completed_replayed_released_and_expires() {
        let store = InMemoryIdempotencyStore::default();
        let key = RecordKey::new(&tenant("tnt_a"), "k1");
        let t0 = Utc::now();
        let Claim::Claimed(lease) = store.claim(&key, "fp", t0).await.unwrap() else {
            panic!("the first claim wins")
        };
        // A second claim while it runs: running, with the first's fingerprint.
        assert_eq!(
            store.claim(&key, "other", t0).await.unwrap(),
            Claim::Running {
                fingerprint: "fp".into()
            }
        );
        assert!(
            store
                .complete(&key, &lease, "fp", &answer("{}"))
                .await
                .unwrap()
        );
        let later = t0 + chrono::Duration::seconds(RECORD_TTL_SECONDS - 1);
        assert_eq!(
            store.claim(&key, "fp", later).await.unwrap(),
            Claim::Done {
                fingerprint: "fp".into(),
                answer: answer("{}")
            }
        );
        // 24 h after the first claim: absent.
        let expired = t0 + chrono::Duration::seconds(RECORD_TTL_SECONDS);
        let Claim::Claimed(renewed) = store.claim(&key, "fp", expired).await.unwrap() else {
            panic!("an expired record is absent")
        };
        // The old lease can no longer complete it.
        assert!(
            !store
                .complete(&key, &lease, "fp", &answer("x"))
                .await
                .unwrap()
        );
        // Released: the next claim runs.
        store.release(&key, &renewed).await.unwrap();
        assert!(matches!(
            store.claim(&key, "fp", expired).await.unwrap(),
            Claim::Claimed(_)
        ));
    }

    #[tokio::test]
    async fn a_claim_that_never_finished_is_taken_after_its_lease() {
        let store = InMemoryIdempotencyStore::default();
        let key = RecordKey::new(&tenant("tnt_a"), "k1");
        let t0 = Utc::now();
        assert!(matches!(
            store.claim(&key, "fp", t0).await.unwrap(),
            Claim::Claimed(_)
        ));
        let inside = t0 + chrono::Duration::seconds(LEASE_SECONDS - 1);
        assert!(matches!(
            store.claim(&key, "fp", inside).await.unwrap(),
            Claim::Running { .. }
        ));
        let after = t0 + chrono::Duration::seconds(LEASE_SECONDS);
        assert!(matches!(
            store.claim(&key, "fp", after).await.unwrap(),
            Claim::Claimed(_)
        ));
    }

    #[test]
    fn debug_never_shows_a_body() {
        let text = format!("{:?}", answer(r#"{"secret":"whsec_abc"}"#));
        assert!(!text.contains("whsec_abc"), "{text}");
    }
}
