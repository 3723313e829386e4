//! Verify Tern webhooks on the receiving side.
//!
//! Tern signs every request with the [Standard Webhooks] v1 scheme (spec v1.0.0,
//! "Signature scheme"): the signed content is `"<webhook-id>.<webhook-timestamp>.<body>"`,
//! the key is the base64-decoded part of a `whsec_` secret, the MAC is HMAC-SHA256, and the
//! `webhook-signature` header holds space-separated `v1,<base64 MAC>` entries, one per
//! secret that is active on Tern's side (two during a rotation).
//!
//! This crate checks, over the **raw body bytes**:
//! - the three headers, whatever the case of their names;
//! - the `webhook-timestamp` against a tolerance ([`DEFAULT_TOLERANCE`], 300 seconds, as the
//!   reference libraries), in both directions, with distinct errors for too old
//!   ([`VerifyError::TimestampTooOld`]) and too new ([`VerifyError::TimestampTooNew`]);
//! - every `v1` entry of the signature header against every secret you hold, in constant
//!   time (via `subtle`); entries of other versions (e.g. `v1a,...`) are ignored, as the spec
//!   says.
//!
//! It does not remember ids: deduplicate on [`VerifiedWebhook::id`] (the `webhook-id`, which
//! is the same on every retry and replay of an event) in your own store.
//!
//! ```
//! use std::time::{Duration, SystemTime, UNIX_EPOCH};
//! use tern_receiver::{Verifier, VerifyError};
//!
//! let verifier = Verifier::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")?;
//! let body = br#"{"test": 2432232314}"#;
//! let headers = [
//!     ("Webhook-Id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
//!     ("Webhook-Timestamp", "1614265330"),
//!     ("Webhook-Signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="),
//! ];
//! // In a server, call `verifier.verify_now(&headers, body)` instead.
//! let at = UNIX_EPOCH + Duration::from_secs(1614265330 + 10);
//! let webhook = verifier.verify(&headers, body, at)?;
//! assert_eq!(webhook.id, "msg_p5jXN8AQM9LWM0D4loKWxJek");
//!
//! // The same request an hour later is refused.
//! let later = at + Duration::from_secs(3600);
//! assert!(matches!(
//!     verifier.verify(&headers, body, later),
//!     Err(VerifyError::TimestampTooOld { .. })
//! ));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [Standard Webhooks]: https://www.standardwebhooks.com/

#![warn(missing_docs)]
#![forbid(unsafe_code)]

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::{Choice, ConstantTimeEq};

type HmacSha256 = Hmac<Sha256>;

/// Prefix of a Standard Webhooks HMAC secret (spec v1.0.0, "Symmetric signatures").
pub const SECRET_PREFIX: &str = "whsec_";
/// Shortest accepted key, in bytes after base64 decoding (spec v1.0.0: secrets are 24 to
/// 64 random bytes).
pub const MIN_SECRET_BYTES: usize = 24;
/// Longest accepted key, in bytes after base64 decoding (same source).
pub const MAX_SECRET_BYTES: usize = 64;
/// Default timestamp tolerance: 300 seconds either way, the value used by the Standard
/// Webhooks reference libraries (Rust, Python, JavaScript, Go).
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);
/// Length of an HMAC-SHA256 tag, in bytes.
const MAC_BYTES: usize = 32;

/// Names of the headers Tern sends, lowercase. Lookups in this crate ignore case.
pub mod header {
    /// Standard Webhooks message id: Tern's event id, the same on every retry and replay.
    /// Deduplicate on it.
    pub const WEBHOOK_ID: &str = "webhook-id";
    /// Standard Webhooks timestamp: integer Unix seconds, set afresh on every attempt.
    pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
    /// Standard Webhooks signatures: space-separated `v1,<base64>` entries, one per secret
    /// active on Tern's side.
    pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";
    /// The event id again, for receivers whose framework dedupes on a generic header.
    pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
    /// `sha256=<lowercase hex HMAC-SHA256(key, body)>` entries joined by `", "`, for simple
    /// receivers. It signs the body only: no id, no timestamp, so no replay protection.
    pub const X_WEBHOOK_SIGNATURE: &str = "x-webhook-signature";
    /// The event type (`order.paid`), on every request whatever the endpoint's payload
    /// format. **Not signed**: `webhook-signature` covers the id, the timestamp and the
    /// body only, so anyone on the path could change it without failing verification. Use
    /// it to route raw payloads; where the type must be trusted, set the endpoint's payload
    /// format to `standard_webhooks` and read `type` from the (signed) body.
    pub const WEBHOOK_EVENT_TYPE: &str = "webhook-event-type";
}

/// Why a secret is refused. Messages never repeat the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// The secret does not start with `whsec_`.
    #[error("secret must start with \"whsec_\"")]
    MissingPrefix,
    /// The part after `whsec_` is not standard (padded) base64.
    #[error(
        "secret is not standard base64 after \"whsec_\" (check for stray whitespace or a newline)"
    )]
    NotBase64,
    /// The decoded key is shorter than [`MIN_SECRET_BYTES`] (24) or longer than
    /// [`MAX_SECRET_BYTES`] (64) bytes.
    #[error("secret key is {bytes} bytes; Standard Webhooks requires 24 to 64")]
    BadLength {
        /// Length of the decoded key, in bytes.
        bytes: usize,
    },
    /// [`Verifier::with_secrets`] was given an empty list.
    #[error("at least one secret is required")]
    NoSecrets,
}

/// Why a request is refused. Messages name headers and numbers, never a secret or a
/// signature value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// A required header is absent. Holds its lowercase name, e.g. `"webhook-id"`.
    #[error("missing header {0}")]
    MissingHeader(&'static str),
    /// `webhook-id` or `webhook-timestamp` appears more than once with different values.
    /// Holds the lowercase name.
    #[error("header {0} appears more than once with different values")]
    ConflictingHeader(&'static str),
    /// `webhook-id` is empty or contains `.` (spec v1.0.0: the id may not contain `.`,
    /// which separates the parts of the signed content).
    #[error("webhook-id is empty or contains '.'")]
    InvalidId,
    /// `webhook-timestamp` is not integer Unix seconds written as plain decimal digits
    /// (no sign, no fraction, no leading zero).
    #[error("webhook-timestamp is not integer Unix seconds")]
    InvalidTimestamp,
    /// `webhook-timestamp` is older than the tolerance: a replay, a very late retry, or a
    /// receiver clock running fast.
    #[error("webhook-timestamp is {age_seconds} s old; tolerance is {tolerance_seconds} s")]
    TimestampTooOld {
        /// How far the timestamp lies behind the verifier's clock, in seconds.
        age_seconds: u64,
        /// The tolerance in force, in seconds.
        tolerance_seconds: u64,
    },
    /// `webhook-timestamp` is further in the future than the tolerance: a sender or receiver
    /// clock is wrong, or the value is in milliseconds rather than seconds.
    #[error(
        "webhook-timestamp is {ahead_seconds} s in the future; tolerance is {tolerance_seconds} s"
    )]
    TimestampTooNew {
        /// How far the timestamp lies ahead of the verifier's clock, in seconds.
        ahead_seconds: u64,
        /// The tolerance in force, in seconds.
        tolerance_seconds: u64,
    },
    /// The named signature header has no well-formed entry at all (`version,value` for
    /// `webhook-signature`, `algorithm=value` for `x-webhook-signature`).
    #[error("header {0} has no well-formed signature entry")]
    MalformedSignatureHeader(&'static str),
    /// The named signature header has well-formed entries, but none of a version this crate
    /// checks (`v1` for `webhook-signature`, `sha256` for `x-webhook-signature`).
    #[error("header {0} has no signature of a supported version")]
    UnsupportedSignatureVersion(&'static str),
    /// No supported signature entry matches any of the secrets: wrong secret, or the body,
    /// id or timestamp was changed (or the body was re-serialized before verifying).
    #[error("no signature matches")]
    NoValidSignature,
}

/// One header as a `(name, value)` pair of strings. Implemented for tuples of anything that
/// is `AsRef<str>` (`(&str, &str)`, `(String, String)`, `(&String, &String)`, ...) and for
/// references to them, so `&[(name, value)]`, `Vec<(String, String)>` and a `HashMap`'s
/// `iter()` can be passed as they are.
pub trait HeaderPair {
    /// The header name, in any case.
    fn name(&self) -> &str;
    /// The header value.
    fn value(&self) -> &str;
}

impl<K: AsRef<str>, V: AsRef<str>> HeaderPair for (K, V) {
    fn name(&self) -> &str {
        self.0.as_ref()
    }
    fn value(&self) -> &str {
        self.1.as_ref()
    }
}

impl<T: HeaderPair + ?Sized> HeaderPair for &T {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn value(&self) -> &str {
        (**self).value()
    }
}

/// A request whose signature and timestamp were accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifiedWebhook {
    /// The `webhook-id`: Tern's event id, the same on every retry and replay. Deduplicate on
    /// it before acting on the event.
    pub id: String,
    /// The `webhook-timestamp` of this attempt, in Unix seconds.
    pub timestamp: i64,
    /// Position, in the list given to [`Verifier::with_secrets`], of the first secret that
    /// matched (0 for [`Verifier::new`]). Watch it during a rotation to see when the old
    /// secret stops being used.
    pub secret_index: usize,
}

impl VerifiedWebhook {
    /// The `webhook-timestamp` as a [`SystemTime`].
    #[must_use]
    pub fn time(&self) -> SystemTime {
        let secs = Duration::from_secs(self.timestamp.unsigned_abs());
        if self.timestamp >= 0 {
            UNIX_EPOCH + secs
        } else {
            UNIX_EPOCH - secs
        }
    }
}

/// Checks Tern's signature headers with one or more `whsec_` secrets.
///
/// Cheap to clone; build it once at start-up and share it. Its `Debug` output shows how many
/// secrets it holds, never the secrets.
#[derive(Clone)]
pub struct Verifier {
    keys: Vec<Vec<u8>>,
    tolerance_seconds: u64,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("secrets", &format_args!("{} x whsec_***", self.keys.len()))
            .field("tolerance_seconds", &self.tolerance_seconds)
            .finish()
    }
}

fn mac(key: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length; keys here are 24-64 bytes anyway.
    match HmacSha256::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC-SHA256 accepts keys of any length"),
    }
}

fn parse_secret(text: &str) -> Result<Vec<u8>, SecretError> {
    let encoded = text
        .strip_prefix(SECRET_PREFIX)
        .ok_or(SecretError::MissingPrefix)?;
    let key = B64.decode(encoded).map_err(|_| SecretError::NotBase64)?;
    if !(MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&key.len()) {
        return Err(SecretError::BadLength { bytes: key.len() });
    }
    Ok(key)
}

/// Header values we need, copied out of the caller's iterator in one pass.
#[derive(Default)]
struct Found {
    id: Option<String>,
    timestamp: Option<String>,
    signatures: Vec<String>,
}

/// Keeps a single-valued header; a repeat with another value is an error.
fn keep_single(
    slot: &mut Option<String>,
    value: &str,
    name: &'static str,
) -> Result<(), VerifyError> {
    match slot {
        Some(existing) if existing != value => Err(VerifyError::ConflictingHeader(name)),
        Some(_) => Ok(()),
        None => {
            *slot = Some(value.to_owned());
            Ok(())
        }
    }
}

/// Parses a `webhook-timestamp`: plain decimal digits, no sign, no leading zero.
fn parse_timestamp(text: &str) -> Result<i64, VerifyError> {
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    if !canonical {
        return Err(VerifyError::InvalidTimestamp);
    }
    text.parse::<i64>()
        .map_err(|_| VerifyError::InvalidTimestamp)
}

/// Whole Unix seconds of `t`, rounded down (also before 1970).
fn unix_seconds(t: SystemTime) -> i128 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i128::from(d.as_secs()),
        Err(e) => {
            let d = e.duration();
            -i128::from(d.as_secs()) - i128::from(d.subsec_nanos() > 0)
        }
    }
}

/// Candidate MACs from signature header values.
///
/// `split` yields the entries of one header value; `sep` splits an entry into version and
/// value; `decode` turns a supported entry's value into bytes. Entries that are not
/// `version<sep>value` are skipped, as are entries of other versions; an entry whose value
/// does not decode to 32 bytes can never match and is skipped too.
fn candidates<'a>(
    values: &'a [String],
    header: &'static str,
    split: fn(&'a str) -> Box<dyn Iterator<Item = &'a str> + 'a>,
    sep: char,
    version: &str,
    decode: fn(&str) -> Option<Vec<u8>>,
) -> Result<Vec<[u8; MAC_BYTES]>, VerifyError> {
    let mut well_formed = false;
    let mut supported = false;
    let mut out = Vec::new();
    for entry in values.iter().flat_map(|v| split(v.as_str())) {
        let Some((ver, value)) = entry.split_once(sep) else {
            continue;
        };
        if ver.is_empty() || value.is_empty() {
            continue;
        }
        well_formed = true;
        if ver != version {
            continue;
        }
        supported = true;
        if let Some(bytes) = decode(value)
            && let Ok(mac) = <[u8; MAC_BYTES]>::try_from(bytes.as_slice())
        {
            out.push(mac);
        }
    }
    if !well_formed {
        Err(VerifyError::MalformedSignatureHeader(header))
    } else if !supported {
        Err(VerifyError::UnsupportedSignatureVersion(header))
    } else {
        Ok(out)
    }
}

impl Verifier {
    /// A verifier for one `whsec_` secret (`whsec_` + standard base64 of 24 to 64 bytes,
    /// spec v1.0.0), with the [`DEFAULT_TOLERANCE`] of 300 seconds.
    ///
    /// # Errors
    /// [`SecretError`] naming the broken rule; the message never repeats the secret.
    pub fn new(secret: &str) -> Result<Self, SecretError> {
        Self::with_secrets(&[secret])
    }

    /// A verifier that accepts a signature made with any of `secrets`, for a receiver that
    /// rotates its secret: hold the old and the new one until Tern signs with the new one
    /// only. Order them as you like; [`VerifiedWebhook::secret_index`] says which matched.
    ///
    /// # Errors
    /// [`SecretError::NoSecrets`] for an empty list, else the first invalid secret's error.
    pub fn with_secrets<S: AsRef<str>>(secrets: &[S]) -> Result<Self, SecretError> {
        if secrets.is_empty() {
            return Err(SecretError::NoSecrets);
        }
        let keys = secrets
            .iter()
            .map(|s| parse_secret(s.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            keys,
            tolerance_seconds: DEFAULT_TOLERANCE.as_secs(),
        })
    }

    /// Sets how far, in seconds and in either direction, `webhook-timestamp` may be from the
    /// verifier's clock (default [`DEFAULT_TOLERANCE`], 300 s). Fractions of a second are
    /// dropped. A timestamp exactly `tolerance` seconds away is accepted.
    #[must_use]
    pub fn with_tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance_seconds = tolerance.as_secs();
        self
    }

    /// The tolerance in force, in whole seconds.
    #[must_use]
    pub fn tolerance(&self) -> Duration {
        Duration::from_secs(self.tolerance_seconds)
    }

    /// Verifies a Tern request at time `now`: `webhook-id`, `webhook-timestamp` and
    /// `webhook-signature` (names in any case) over `body`, the **raw** request bytes, not a
    /// re-serialized parse of them.
    ///
    /// Checks, in this order: the headers are present (a repeated `webhook-signature`
    /// contributes all its entries), the id is non-empty without `.`, the timestamp is
    /// integer Unix seconds within the tolerance of `now` in both directions, and at least
    /// one `v1` entry matches one of the secrets (constant-time comparison; entries of other
    /// versions are ignored).
    ///
    /// On success, deduplicate on [`VerifiedWebhook::id`] before acting on the event.
    ///
    /// # Errors
    /// The first failed check, as a [`VerifyError`]. Answer a failure with HTTP 400.
    pub fn verify<I>(
        &self,
        headers: I,
        body: &[u8],
        now: SystemTime,
    ) -> Result<VerifiedWebhook, VerifyError>
    where
        I: IntoIterator,
        I::Item: HeaderPair,
    {
        let mut found = Found::default();
        for h in headers {
            let (name, value) = (h.name().trim(), h.value().trim());
            if name.eq_ignore_ascii_case(header::WEBHOOK_ID) {
                keep_single(&mut found.id, value, header::WEBHOOK_ID)?;
            } else if name.eq_ignore_ascii_case(header::WEBHOOK_TIMESTAMP) {
                keep_single(&mut found.timestamp, value, header::WEBHOOK_TIMESTAMP)?;
            } else if name.eq_ignore_ascii_case(header::WEBHOOK_SIGNATURE) {
                found.signatures.push(value.to_owned());
            }
        }
        let id = found
            .id
            .ok_or(VerifyError::MissingHeader(header::WEBHOOK_ID))?;
        let ts_text = found
            .timestamp
            .ok_or(VerifyError::MissingHeader(header::WEBHOOK_TIMESTAMP))?;
        if found.signatures.is_empty() {
            return Err(VerifyError::MissingHeader(header::WEBHOOK_SIGNATURE));
        }
        if id.is_empty() || id.contains('.') {
            return Err(VerifyError::InvalidId);
        }
        let timestamp = parse_timestamp(&ts_text)?;
        self.check_timestamp(timestamp, now)?;

        let candidates = candidates(
            &found.signatures,
            header::WEBHOOK_SIGNATURE,
            |v| Box::new(v.split_ascii_whitespace()),
            ',',
            "v1",
            |b64| B64.decode(b64).ok(),
        )?;
        let secret_index = self
            .first_match(&candidates, |mac| {
                mac.update(id.as_bytes());
                mac.update(b".");
                mac.update(ts_text.as_bytes());
                mac.update(b".");
                mac.update(body);
            })
            .ok_or(VerifyError::NoValidSignature)?;
        Ok(VerifiedWebhook {
            id,
            timestamp,
            secret_index,
        })
    }

    /// [`Verifier::verify`] at the current system time.
    ///
    /// # Errors
    /// As [`Verifier::verify`].
    pub fn verify_now<I>(&self, headers: I, body: &[u8]) -> Result<VerifiedWebhook, VerifyError>
    where
        I: IntoIterator,
        I::Item: HeaderPair,
    {
        self.verify(headers, body, SystemTime::now())
    }

    /// Verifies Tern's simpler `x-webhook-signature` header (`sha256=<hex HMAC-SHA256(key,
    /// body)>` entries joined by `", "`, name in any case) over the raw `body`.
    ///
    /// Prefer [`Verifier::verify`]: this header signs the body only, so it cannot detect a
    /// replay of an old request and there is no id to deduplicate on beyond
    /// `idempotency-key`, which it does not cover. Returns the index of the first secret
    /// that matched.
    ///
    /// # Errors
    /// [`VerifyError::MissingHeader`], [`VerifyError::MalformedSignatureHeader`],
    /// [`VerifyError::UnsupportedSignatureVersion`] (no `sha256=` entry) or
    /// [`VerifyError::NoValidSignature`].
    pub fn verify_body_signature<I>(&self, headers: I, body: &[u8]) -> Result<usize, VerifyError>
    where
        I: IntoIterator,
        I::Item: HeaderPair,
    {
        let values: Vec<String> = headers
            .into_iter()
            .filter(|h| {
                h.name()
                    .trim()
                    .eq_ignore_ascii_case(header::X_WEBHOOK_SIGNATURE)
            })
            .map(|h| h.value().to_owned())
            .collect();
        if values.is_empty() {
            return Err(VerifyError::MissingHeader(header::X_WEBHOOK_SIGNATURE));
        }
        let candidates = candidates(
            &values,
            header::X_WEBHOOK_SIGNATURE,
            |v| Box::new(v.split(',').map(str::trim).filter(|e| !e.is_empty())),
            '=',
            "sha256",
            |h| hex::decode(h).ok(),
        )?;
        self.first_match(&candidates, |mac| mac.update(body))
            .ok_or(VerifyError::NoValidSignature)
    }

    /// The `webhook-signature` value Tern would send for this id, timestamp (Unix seconds)
    /// and body: one `v1,<base64>` entry per secret, space-separated. For tests of your
    /// receiver.
    #[must_use]
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        self.keys
            .iter()
            .map(|key| {
                let mut mac = mac(key);
                mac.update(format!("{id}.{timestamp}.").as_bytes());
                mac.update(body);
                format!("v1,{}", B64.encode(mac.finalize().into_bytes()))
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The `x-webhook-signature` value Tern would send for this body: one
    /// `sha256=<lowercase hex>` entry per secret, joined by `", "`. For tests of your
    /// receiver.
    #[must_use]
    pub fn sign_body(&self, body: &[u8]) -> String {
        self.keys
            .iter()
            .map(|key| {
                let mut mac = mac(key);
                mac.update(body);
                format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn check_timestamp(&self, timestamp: i64, now: SystemTime) -> Result<(), VerifyError> {
        let tolerance = i128::from(self.tolerance_seconds);
        let age = unix_seconds(now) - i128::from(timestamp);
        let clamp = |v: i128| u64::try_from(v).unwrap_or(u64::MAX);
        if age > tolerance {
            Err(VerifyError::TimestampTooOld {
                age_seconds: clamp(age),
                tolerance_seconds: self.tolerance_seconds,
            })
        } else if -age > tolerance {
            Err(VerifyError::TimestampTooNew {
                ahead_seconds: clamp(-age),
                tolerance_seconds: self.tolerance_seconds,
            })
        } else {
            Ok(())
        }
    }

    /// Index of the first secret whose MAC over the content fed by `feed` equals one of
    /// `candidates`. Each comparison is constant-time and every candidate is compared.
    fn first_match(
        &self,
        candidates: &[[u8; MAC_BYTES]],
        feed: impl Fn(&mut HmacSha256),
    ) -> Option<usize> {
        let mut first = None;
        for (index, key) in self.keys.iter().enumerate() {
            let mut mac = mac(key);
            feed(&mut mac);
            let expected = mac.finalize().into_bytes();
            let matched = candidates
                .iter()
                .fold(Choice::from(0), |acc, c| acc | expected.as_slice().ct_eq(c));
            if bool::from(matched) && first.is_none() {
                first = Some(index);
            }
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: i64 = 1_614_265_330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn at(secs: i64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).unwrap())
    }

    fn verifier() -> Verifier {
        Verifier::new(SECRET).unwrap()
    }

    fn headers(id: &str, ts: &str, sig: &str) -> Vec<(String, String)> {
        vec![
            ("webhook-id".into(), id.into()),
            ("webhook-timestamp".into(), ts.into()),
            ("webhook-signature".into(), sig.into()),
        ]
    }

    fn check(h: &[(String, String)]) -> Result<VerifiedWebhook, VerifyError> {
        verifier().verify(h, BODY, at(TS))
    }

    #[test]
    fn reference_vector_verifies() {
        let ok = check(&headers(ID, "1614265330", SIG)).unwrap();
        assert_eq!(ok.id, ID);
        assert_eq!(ok.timestamp, TS);
        assert_eq!(ok.secret_index, 0);
        assert_eq!(ok.time(), at(TS));
        assert_eq!(verifier().sign(ID, TS, BODY), SIG);
    }

    // ---- SecretError, one test per variant ----

    #[test]
    fn secret_missing_prefix() {
        assert_eq!(
            Verifier::new("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap_err(),
            SecretError::MissingPrefix
        );
    }

    #[test]
    fn secret_not_base64() {
        assert_eq!(
            Verifier::new("whsec_!!!!").unwrap_err(),
            SecretError::NotBase64
        );
        // A trailing newline from an env file is not silently accepted.
        assert_eq!(
            Verifier::new(&format!("{SECRET}\n")).unwrap_err(),
            SecretError::NotBase64
        );
    }

    #[test]
    fn secret_bad_length() {
        // 23 and 65 bytes are refused; 24 and 64 are accepted.
        for (n, ok) in [(23, false), (24, true), (64, true), (65, false)] {
            let s = format!("whsec_{}", B64.encode(vec![7u8; n]));
            match Verifier::new(&s) {
                Ok(_) => assert!(ok, "{n} bytes accepted"),
                Err(e) => {
                    assert!(!ok, "{n} bytes refused");
                    assert_eq!(e, SecretError::BadLength { bytes: n });
                }
            }
        }
    }

    #[test]
    fn secret_list_empty() {
        let none: [&str; 0] = [];
        assert_eq!(
            Verifier::with_secrets(&none).unwrap_err(),
            SecretError::NoSecrets
        );
    }

    #[test]
    fn secret_list_reports_first_bad_secret() {
        assert_eq!(
            Verifier::with_secrets(&[SECRET, "nope"]).unwrap_err(),
            SecretError::MissingPrefix
        );
    }

    #[test]
    fn debug_and_errors_never_show_the_secret() {
        let v = Verifier::with_secrets(&[SECRET.to_owned(), SECRET.to_owned()]).unwrap();
        let dbg = format!("{v:?}");
        assert!(!dbg.contains("MfKQ9r8G"), "{dbg}");
        assert!(dbg.contains("2 x whsec_***"), "{dbg}");
        for bad in [
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS!",
            "whsec_MfKQ9r8G",
        ] {
            let e = Verifier::new(bad).unwrap_err();
            assert!(!e.to_string().contains("MfKQ9r8G"));
            assert!(!format!("{e:?}").contains("MfKQ9r8G"));
        }
        let e = check(&headers(ID, "1614265330", "v1,AAAA")).unwrap_err();
        assert!(!format!("{e} {e:?}").contains("AAAA"));
    }

    // ---- VerifyError, one test per variant ----

    #[test]
    fn error_missing_header_names_which() {
        for missing in [
            header::WEBHOOK_ID,
            header::WEBHOOK_TIMESTAMP,
            header::WEBHOOK_SIGNATURE,
        ] {
            let h: Vec<_> = headers(ID, "1614265330", SIG)
                .into_iter()
                .filter(|(n, _)| n != missing)
                .collect();
            assert_eq!(check(&h).unwrap_err(), VerifyError::MissingHeader(missing));
        }
        assert_eq!(
            verifier()
                .verify_body_signature(headers(ID, "1", SIG), BODY)
                .unwrap_err(),
            VerifyError::MissingHeader(header::X_WEBHOOK_SIGNATURE)
        );
    }

    #[test]
    fn error_conflicting_header() {
        let mut h = headers(ID, "1614265330", SIG);
        h.push(("Webhook-Id".into(), "msg_other".into()));
        assert_eq!(
            check(&h).unwrap_err(),
            VerifyError::ConflictingHeader(header::WEBHOOK_ID)
        );
        let mut h = headers(ID, "1614265330", SIG);
        h.push(("WEBHOOK-TIMESTAMP".into(), "1614265331".into()));
        assert_eq!(
            check(&h).unwrap_err(),
            VerifyError::ConflictingHeader(header::WEBHOOK_TIMESTAMP)
        );
        // The same value twice is harmless.
        let mut h = headers(ID, "1614265330", SIG);
        h.push(("webhook-id".into(), ID.into()));
        assert!(check(&h).is_ok());
    }

    #[test]
    fn error_invalid_id() {
        for id in ["", "msg.1", "."] {
            assert_eq!(
                check(&headers(id, "1614265330", SIG)).unwrap_err(),
                VerifyError::InvalidId
            );
        }
    }

    #[test]
    fn error_invalid_timestamp() {
        for ts in [
            "",
            "abc",
            "1614265330.5",
            "+1614265330",
            "-1",
            "01614265330",
            "1614265330 1",
            "1e9",
            "99999999999999999999",
        ] {
            assert_eq!(
                check(&headers(ID, ts, SIG)).unwrap_err(),
                VerifyError::InvalidTimestamp,
                "{ts:?}"
            );
        }
        // Surrounding whitespace (HTTP optional whitespace) is not part of the value.
        assert!(check(&headers(ID, " 1614265330 ", SIG)).is_ok());
    }

    #[test]
    fn error_timestamp_too_old_and_too_new_with_boundaries() {
        let v = verifier();
        let h = headers(ID, "1614265330", SIG);
        assert!(v.verify(&h, BODY, at(TS + 300)).is_ok());
        assert!(v.verify(&h, BODY, at(TS - 300)).is_ok());
        assert_eq!(
            v.verify(&h, BODY, at(TS + 301)).unwrap_err(),
            VerifyError::TimestampTooOld {
                age_seconds: 301,
                tolerance_seconds: 300
            }
        );
        assert_eq!(
            v.verify(&h, BODY, at(TS - 301)).unwrap_err(),
            VerifyError::TimestampTooNew {
                ahead_seconds: 301,
                tolerance_seconds: 300
            }
        );
        // Fractions of a second of `now` are rounded down.
        assert!(
            v.verify(&h, BODY, at(TS + 300) + Duration::from_millis(999))
                .is_ok()
        );
    }

    #[test]
    fn timestamp_in_milliseconds_is_too_new() {
        let ms = (TS * 1000).to_string();
        let sig = verifier().sign(ID, TS * 1000, BODY);
        assert!(matches!(
            check(&headers(ID, &ms, &sig)).unwrap_err(),
            VerifyError::TimestampTooNew { .. }
        ));
    }

    #[test]
    fn custom_tolerance() {
        let v = verifier().with_tolerance(Duration::from_millis(10_900));
        assert_eq!(v.tolerance(), Duration::from_secs(10));
        let h = headers(ID, "1614265330", SIG);
        assert!(v.verify(&h, BODY, at(TS + 10)).is_ok());
        assert_eq!(
            v.verify(&h, BODY, at(TS + 11)).unwrap_err(),
            VerifyError::TimestampTooOld {
                age_seconds: 11,
                tolerance_seconds: 10
            }
        );
        // Before 1970 on the verifier's clock: still a clean error, no panic.
        assert!(matches!(
            v.verify(&h, BODY, UNIX_EPOCH - Duration::from_millis(1500)).unwrap_err(),
            VerifyError::TimestampTooNew { ahead_seconds, .. } if ahead_seconds == 1_614_265_332
        ));
    }

    #[test]
    fn error_malformed_signature_header() {
        for sig in [
            "",
            "   ",
            "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
            "v1, ",
            ",abc",
            "v1,",
        ] {
            assert_eq!(
                check(&headers(ID, "1614265330", sig)).unwrap_err(),
                VerifyError::MalformedSignatureHeader(header::WEBHOOK_SIGNATURE),
                "{sig:?}"
            );
        }
        let h = [(header::X_WEBHOOK_SIGNATURE, "deadbeef")];
        assert_eq!(
            verifier().verify_body_signature(h, BODY).unwrap_err(),
            VerifyError::MalformedSignatureHeader(header::X_WEBHOOK_SIGNATURE)
        );
    }

    #[test]
    fn error_unsupported_signature_version() {
        let sig = "v1a,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= v2,abc";
        assert_eq!(
            check(&headers(ID, "1614265330", sig)).unwrap_err(),
            VerifyError::UnsupportedSignatureVersion(header::WEBHOOK_SIGNATURE)
        );
        let h = [(header::X_WEBHOOK_SIGNATURE, "sha512=abcd")];
        assert_eq!(
            verifier().verify_body_signature(h, BODY).unwrap_err(),
            VerifyError::UnsupportedSignatureVersion(header::X_WEBHOOK_SIGNATURE)
        );
    }

    #[test]
    fn error_no_valid_signature() {
        for sig in [
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA=", // last byte changed
            "v1,not-base64!",
            "v1,g0hM9SsE", // a prefix of the right signature
            "v1,AAAA",
        ] {
            assert_eq!(
                check(&headers(ID, "1614265330", sig)).unwrap_err(),
                VerifyError::NoValidSignature,
                "{sig:?}"
            );
        }
    }

    #[test]
    fn unknown_versions_and_junk_entries_are_ignored_next_to_a_good_one() {
        let sig = format!("v1a,AAAA  junk {SIG}\tv2,zzz");
        assert!(check(&headers(ID, "1614265330", &sig)).is_ok());
    }

    #[test]
    fn repeated_signature_headers_are_merged() {
        let mut h = headers(ID, "1614265330", "v1,AAAA");
        h.push(("Webhook-Signature".into(), SIG.into()));
        assert!(check(&h).is_ok());
    }

    #[test]
    fn secret_index_reports_which_secret_matched() {
        let other = format!("whsec_{}", B64.encode([9u8; 32]));
        let v = Verifier::with_secrets(&[other.as_str(), SECRET]).unwrap();
        let ok = v
            .verify(headers(ID, "1614265330", SIG), BODY, at(TS))
            .unwrap();
        assert_eq!(ok.secret_index, 1);
        // sign() emits one entry per secret, in order.
        let both = v.sign(ID, TS, BODY);
        assert_eq!(both.split(' ').nth(1), Some(SIG));
    }

    #[test]
    fn body_signature_round_trip_and_rotation() {
        let other = format!("whsec_{}", B64.encode([9u8; 32]));
        let tern = Verifier::with_secrets(&[other.as_str(), SECRET]).unwrap();
        let value = tern.sign_body(BODY);
        assert_eq!(value.split(", ").count(), 2);
        assert!(
            value
                .split(", ")
                .all(|e| e.starts_with("sha256=") && e.len() == 7 + 64)
        );
        // A receiver holding only the second secret accepts it.
        let h = [("X-Webhook-Signature", value.as_str())];
        assert_eq!(verifier().verify_body_signature(h, BODY), Ok(0));
        assert_eq!(
            verifier().verify_body_signature(h, b"{\"test\": 2432232315}"),
            Err(VerifyError::NoValidSignature)
        );
    }
}

/// Compiles the Rust examples of README.md as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
