//! The HTTP request a receiver gets: its body, shaped by the endpoint's [`PayloadFormat`],
//! and its headers (the signatures over exactly that body, plus the event type).
//!
//! Two body formats:
//! - [`PayloadFormat::Raw`] (the default): the payload bytes exactly as the application
//!   wrote them.
//! - [`PayloadFormat::StandardWebhooks`]: the payload structure the Standard Webhooks spec
//!   recommends (spec v1.0.0, "Payload structure"): `{"type":…,"timestamp":…,"data":…}`,
//!   built by concatenating bytes so that `data` is the application's payload byte for byte.
//!
//! Headers, in the order sent: Tern's own (`webhook-id`, `webhook-timestamp`,
//! `webhook-signature` with a `v1` entry per active HMAC secret and a `v1a` entry per
//! active Ed25519 key as the endpoint's [`crate::Signatures`] setting says,
//! `idempotency-key`, `x-webhook-signature` when `v1` is on, `webhook-event-type`), then
//! the endpoint's custom headers ([`crate::custom_headers`]), then `authorization` for
//! basic and bearer authentication ([`crate::receiver_auth`]; an OAuth2 token is added
//! by the delivery client, which fetches it). Secret values travel as
//! [`FieldValue::Secret`], so the client marks them sensitive.
//!
//! Whatever the format, every request names the event type in the
//! [`header::WEBHOOK_EVENT_TYPE`] header, so a receiver of raw payloads can route on it.
//! That header is not covered by the `webhook-signature` (which signs id, timestamp and
//! body only): a receiver that must trust the type reads it from a `standard_webhooks`
//! body, which is signed.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::custom_headers::FieldValue;
use crate::endpoint::Endpoint;
use crate::event::{Event, MAX_EVENT_TYPE_LEN};
use crate::signing::{Secret, header};
use crate::signing_key::SigningKey;

/// One header of a request: its name (lowercase) and its value, secret or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingHeader {
    /// Lowercase name.
    pub name: Cow<'static, str>,
    /// The value; a [`FieldValue::Secret`] is sent marked sensitive and never logged.
    pub value: FieldValue,
}

impl OutgoingHeader {
    /// A header with a value that may be shown.
    pub fn plain(name: impl Into<Cow<'static, str>>, value: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            value: FieldValue::Plain(value.into()),
        }
    }

    /// A header with a secret value.
    pub fn secret(name: impl Into<Cow<'static, str>>, value: crate::SecretValue) -> Self {
        Self {
            name: name.into(),
            value: FieldValue::Secret(value),
        }
    }
}

/// `authorization`: the header basic, bearer and OAuth2 authentication send.
pub const AUTHORIZATION: &str = "authorization";

/// What signs one attempt: the active HMAC secrets when `v1` is on, the active Ed25519
/// keys when `v1a` is on, each newest first ([`Endpoint::signers`]).
#[derive(Debug, Clone, Default)]
pub struct Signers<'a> {
    /// `whsec_` secrets: one `v1` entry each, and one `x-webhook-signature` entry each.
    pub v1: Vec<&'a Secret>,
    /// `whsk_` keys: one `v1a` entry each.
    pub v1a: Vec<&'a SigningKey>,
}

impl Signers<'_> {
    /// True when nothing would sign: such a request is never sent (a receiver could not
    /// tell it from a forgery).
    pub fn is_empty(&self) -> bool {
        self.v1.is_empty() && self.v1a.is_empty()
    }
}

/// How an endpoint's request body is shaped. Stored with the endpoint; endpoints stored
/// before this setting existed read as [`PayloadFormat::Raw`], so they keep receiving the
/// same bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PayloadFormat {
    /// The body is the application's payload, unchanged (`raw`).
    #[default]
    Raw,
    /// The body is the Standard Webhooks payload structure wrapping the payload
    /// (`standard_webhooks`): `{"type":"<event type>","timestamp":"<created at>","data":<payload>}`.
    StandardWebhooks,
}

/// Why a payload format name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("payload format {0:?} is unknown: use \"raw\" or \"standard_webhooks\"")]
pub struct PayloadFormatError(pub String);

impl PayloadFormat {
    /// Every format, the default first.
    pub const ALL: [Self; 2] = [Self::Raw, Self::StandardWebhooks];

    /// Its name, as stored, printed and accepted by the CLI: `raw` or `standard_webhooks`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Raw => "raw",
            Self::StandardWebhooks => "standard_webhooks",
        }
    }
}

impl std::fmt::Display for PayloadFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl std::str::FromStr for PayloadFormat {
    type Err = PayloadFormatError;

    /// Parses `raw` or `standard_webhooks` (also with `-` for `_`, as typed on a command
    /// line).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let normal = s.trim().replace('-', "_");
        Self::ALL
            .into_iter()
            .find(|f| f.as_str() == normal)
            .ok_or_else(|| PayloadFormatError(s.to_owned()))
    }
}

/// The envelope's bytes around the type, the timestamp and the payload, in order.
const ENVELOPE_OPEN: &str = r#"{"type":"#;
const ENVELOPE_TIMESTAMP: &str = r#","timestamp":""#;
const ENVELOPE_DATA: &str = r#"","data":"#;
const ENVELOPE_CLOSE: &str = "}";

/// Length of the envelope's `timestamp` value, in bytes: `YYYY-MM-DDTHH:MM:SS.mmmZ`.
const TIMESTAMP_LEN: usize = 24;

/// Most bytes the `standard_webhooks` envelope adds around a payload: 186 (the fixed
/// punctuation and keys, 2 quotes around the type, a type of at most
/// [`MAX_EVENT_TYPE_LEN`] = 128 bytes, and the 24-byte timestamp). So a payload at the
/// 256 KiB limit arrives as a body of at most 256 KiB + 186 bytes; receivers that cap
/// bodies at exactly 256 KiB need that much room. The delivery queue carries the raw
/// payload, never the envelope, so no SQS or DynamoDB limit sees it.
pub const MAX_ENVELOPE_OVERHEAD_BYTES: usize = ENVELOPE_OPEN.len()
    + 2
    + MAX_EVENT_TYPE_LEN
    + ENVELOPE_TIMESTAMP.len()
    + TIMESTAMP_LEN
    + ENVELOPE_DATA.len()
    + ENVELOPE_CLOSE.len();

/// The envelope's `timestamp`: when the event was created (the outbox item's
/// `created_at`, not the attempt's time), RFC 3339 in UTC with milliseconds and a `Z`,
/// e.g. `2026-03-01T12:00:00.250Z`. RFC 3339 is a profile of ISO 8601, the format the
/// spec asks for ("the timestamp of when the event occurred (not necessarily the same of
/// when it was delivered), it should be ISO 8601 formatted"). Milliseconds are the
/// precision the outbox stores.
pub fn envelope_timestamp(event: &Event) -> String {
    event
        .created_at
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The request body for `event` in `format`. The signature headers must be computed over
/// these exact bytes ([`headers`]), and the same bytes sent.
///
/// For [`PayloadFormat::StandardWebhooks`] the payload is copied in, never parsed and
/// written again, so its key order, spacing, number spelling and escapes arrive as the
/// application wrote them. The body is the same on every attempt and replay of the event
/// (only `webhook-timestamp` changes).
pub fn body(event: &Event, format: PayloadFormat) -> Vec<u8> {
    let payload = event.payload.as_str().as_bytes();
    match format {
        PayloadFormat::Raw => payload.to_vec(),
        PayloadFormat::StandardWebhooks => {
            let mut out = Vec::with_capacity(payload.len() + MAX_ENVELOPE_OVERHEAD_BYTES);
            out.extend_from_slice(ENVELOPE_OPEN.as_bytes());
            // An event type is `[A-Za-z0-9._:-]`, so this writes it between two quotes
            // unchanged; serde_json escapes anyway, should the rule ever widen.
            if serde_json::to_writer(&mut out, event.event_type.as_str()).is_err() {
                // Writing a &str into a Vec cannot fail; keep the body well-formed anyway.
                out.extend_from_slice(b"\"\"");
            }
            out.extend_from_slice(ENVELOPE_TIMESTAMP.as_bytes());
            out.extend_from_slice(envelope_timestamp(event).as_bytes());
            out.extend_from_slice(ENVELOPE_DATA.as_bytes());
            out.extend_from_slice(payload);
            out.extend_from_slice(ENVELOPE_CLOSE.as_bytes());
            out
        }
    }
}

/// Tern's headers of one attempt besides `content-type` and `user-agent`: `webhook-id`,
/// `webhook-timestamp`, `webhook-signature` over `body` (`v1` entries, then `v1a`
/// entries, space-separated, per the Standard Webhooks spec's "Webhook headers"),
/// `idempotency-key`, `x-webhook-signature` (HMAC of the body, only when `v1` signs) and
/// [`header::WEBHOOK_EVENT_TYPE`] with the event type, sent whatever the payload format.
///
/// `timestamp` is the attempt's time in integer Unix seconds. The event type is always a
/// valid header value: an [`crate::EventType`] is 1-128 bytes of `[A-Za-z0-9._:-]`, all
/// visible ASCII (RFC 9110 §5.5 `field-vchar`).
pub fn headers(
    event: &Event,
    timestamp: i64,
    body: &[u8],
    signers: &Signers<'_>,
) -> Vec<OutgoingHeader> {
    let id = event.id.as_str();
    let signatures: Vec<String> = signers
        .v1
        .iter()
        .map(|s| s.sign_v1(id, timestamp, body))
        .chain(signers.v1a.iter().map(|k| k.sign_v1a(id, timestamp, body)))
        .collect();
    let mut out = vec![
        OutgoingHeader::plain(header::WEBHOOK_ID, id),
        OutgoingHeader::plain(header::WEBHOOK_TIMESTAMP, timestamp.to_string()),
        OutgoingHeader::plain(header::WEBHOOK_SIGNATURE, signatures.join(" ")),
        OutgoingHeader::plain(header::IDEMPOTENCY_KEY, id),
    ];
    if !signers.v1.is_empty() {
        let hex: Vec<String> = signers.v1.iter().map(|s| s.sign_body_hex(body)).collect();
        out.push(OutgoingHeader::plain(
            header::X_WEBHOOK_SIGNATURE,
            hex.join(", "),
        ));
    }
    out.push(OutgoingHeader::plain(
        header::WEBHOOK_EVENT_TYPE,
        event.event_type.to_string(),
    ));
    out
}

/// Nothing signs the attempt: the endpoint has no active secret or key for its
/// signature schemes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no secret or key signs now for the endpoint's signature schemes")]
pub struct Unsigned;

/// Every header of one attempt to `endpoint` besides `content-type`, `user-agent` and an
/// OAuth2 token: Tern's ([`headers`], signed by [`Endpoint::signers`] at `now`), the
/// endpoint's custom headers, and `authorization` for basic or bearer authentication.
///
/// # Errors
/// [`Unsigned`] when nothing would sign: never send an unsigned webhook.
pub fn attempt_headers(
    endpoint: &Endpoint,
    event: &Event,
    timestamp: i64,
    body: &[u8],
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<OutgoingHeader>, Unsigned> {
    let signers = endpoint.signers(now);
    if signers.is_empty() {
        return Err(Unsigned);
    }
    let mut out = headers(event, timestamp, body, &signers);
    out.extend(endpoint.headers.iter().map(|h| OutgoingHeader {
        name: Cow::Owned(h.name.clone()),
        value: h.value.clone(),
    }));
    if let Some(value) = endpoint.auth.static_authorization() {
        out.push(OutgoingHeader::secret(AUTHORIZATION, value));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;
    use crate::event::{EventType, Payload};
    use crate::ids::{EventId, TenantId};

    fn event(ty: &str, payload: &str) -> Event {
        Event {
            id: EventId::new("evt_1").unwrap(),
            event_type: EventType::new(ty).unwrap(),
            tenant_id: TenantId::new("tnt_a").unwrap(),
            created_at: Utc.timestamp_millis_opt(1_772_366_400_250).unwrap(),
            payload: Payload::parse(payload, 1 << 20).unwrap(),
            trace: None,
        }
    }

    #[test]
    fn raw_is_the_payload_bytes() {
        let text = r#"{"b": 1,"a":2 , "n":1e2,"s":"\u00e9\"x"}"#;
        assert_eq!(
            body(&event("order.paid", text), PayloadFormat::Raw),
            text.as_bytes()
        );
    }

    #[test]
    fn standard_webhooks_wraps_the_payload_bytes_unchanged() {
        let text = r#"{"b": 1,"a":2 , "n":1e2,"s":"\u00e9\"x","é":"😀"}"#;
        let got = body(&event("order.paid", text), PayloadFormat::StandardWebhooks);
        let expected = format!(
            r#"{{"type":"order.paid","timestamp":"2026-03-01T12:00:00.250Z","data":{text}}}"#
        );
        assert_eq!(String::from_utf8(got.clone()).unwrap(), expected);
        // It is JSON, and `data` is the payload's text exactly (read back raw).
        #[derive(serde::Deserialize)]
        struct Envelope<'a> {
            #[serde(rename = "type")]
            ty: &'a str,
            timestamp: &'a str,
            #[serde(borrow)]
            data: &'a serde_json::value::RawValue,
        }
        let e: Envelope<'_> = serde_json::from_slice(&got).unwrap();
        assert_eq!(e.ty, "order.paid");
        assert_eq!(e.timestamp, "2026-03-01T12:00:00.250Z");
        assert_eq!(e.data.get(), text);
        assert!(chrono::DateTime::parse_from_rfc3339(e.timestamp).is_ok());
    }

    #[test]
    fn the_timestamp_is_the_creation_time_with_milliseconds_even_when_whole() {
        let mut e = event("a", "{}");
        e.created_at = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
        assert_eq!(envelope_timestamp(&e), "2026-01-02T03:04:05.000Z");
        assert_eq!(envelope_timestamp(&e).len(), TIMESTAMP_LEN);
        // Sub-millisecond digits are dropped, so the length never changes.
        e.created_at = Utc.timestamp_nanos(1_772_366_400_123_456_789);
        assert_eq!(envelope_timestamp(&e), "2026-03-01T12:00:00.123Z");
    }

    #[test]
    fn the_overhead_bound_holds_for_the_longest_type() {
        let longest = "t".repeat(MAX_EVENT_TYPE_LEN);
        let mut e = event(&longest, "{}");
        e.created_at = Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59).unwrap();
        let wrapped = body(&e, PayloadFormat::StandardWebhooks);
        assert_eq!(wrapped.len() - 2, MAX_ENVELOPE_OVERHEAD_BYTES);
        assert_eq!(MAX_ENVELOPE_OVERHEAD_BYTES, 186);
    }

    #[test]
    fn headers_name_the_event_type_and_sign_the_body_sent() {
        let e = event("invoice.paid", r#"{"x":1}"#);
        let secret = Secret::generate();
        for format in PayloadFormat::ALL {
            let b = body(&e, format);
            let signers = Signers {
                v1: vec![&secret],
                v1a: vec![],
            };
            let h = headers(&e, 1_700_000_000, &b, &signers);
            let get = |name: &str| h.iter().find(|x| x.name == name).map(|x| x.value.expose());
            assert_eq!(get("webhook-event-type"), Some("invoice.paid"));
            assert_eq!(
                get("webhook-signature"),
                Some(secret.sign_v1("evt_1", 1_700_000_000, &b).as_str())
            );
        }
    }

    #[test]
    fn v1_headers_are_the_reference_signature_headers_plus_the_event_type() {
        let e = event("invoice.paid", r#"{"x":1}"#);
        let (a, b) = (Secret::generate(), Secret::generate());
        let signers = Signers {
            v1: vec![&a, &b],
            v1a: vec![],
        };
        let got: Vec<(String, String)> = headers(&e, 7, b"{}", &signers)
            .into_iter()
            .map(|h| (h.name.into_owned(), h.value.expose().to_owned()))
            .collect();
        let mut expected: Vec<(String, String)> =
            crate::signing::signature_headers(&e.id, 7, b"{}", &[&a, &b])
                .into_iter()
                .map(|(n, v)| (n.to_owned(), v))
                .collect();
        expected.push(("webhook-event-type".into(), "invoice.paid".into()));
        assert_eq!(got, expected);
    }

    fn endpoint_for(e: &Event) -> Endpoint {
        Endpoint::new(
            crate::EndpointId::new("ep_1").unwrap(),
            e.tenant_id.clone(),
            "https://example.invalid/hook",
            vec!["*".into()],
            Secret::generate(),
            Utc::now(),
        )
    }

    #[test]
    fn attempt_headers_add_custom_headers_and_basic_auth_after_terns_own() {
        use crate::custom_headers::CustomHeader;
        let e = event("order.paid", "{}");
        let mut ep = endpoint_for(&e);
        ep.headers = vec![
            CustomHeader::new("X-Tenant", FieldValue::Plain("acme".into())).unwrap(),
            CustomHeader::new(
                "x-api-key",
                FieldValue::Secret(crate::SecretValue::new("k-123")),
            )
            .unwrap(),
        ];
        ep.auth = crate::receiver_auth::ReceiverAuth::Basic {
            username: "Aladdin".into(),
            password: crate::SecretValue::new("open sesame"),
        };
        let h = attempt_headers(&ep, &e, 1, b"{}", Utc::now()).unwrap();
        let names: Vec<&str> = h.iter().map(|x| x.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                "webhook-id",
                "webhook-timestamp",
                "webhook-signature",
                "idempotency-key",
                "x-webhook-signature",
                "webhook-event-type",
                "x-tenant",
                "x-api-key",
                "authorization"
            ]
        );
        assert_eq!(h[6].value, FieldValue::Plain("acme".into()));
        assert!(h[7].value.is_secret() && h[8].value.is_secret());
        assert_eq!(h[8].value.expose(), "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
        assert!(!format!("{h:?}").contains("k-123"));
        assert!(!format!("{h:?}").contains("QWxhZGRpbjpvcGVuIHNlc2FtZQ"));
    }

    #[test]
    fn v1a_only_sends_ed25519_entries_and_no_hmac() {
        let e = event("order.paid", "{}");
        let mut ep = endpoint_for(&e);
        let now = Utc::now();
        ep.rotate_signing_key(crate::SigningKey::generate(), now, chrono::Duration::zero())
            .unwrap();
        ep.signatures = crate::Signatures::V1a;
        ep.validate().unwrap();
        let h = attempt_headers(&ep, &e, 1, b"{}", now).unwrap();
        let sig = h.iter().find(|x| x.name == "webhook-signature").unwrap();
        assert!(sig.value.expose().starts_with("v1a,"), "{sig:?}");
        assert_eq!(sig.value.expose().split(' ').count(), 1);
        assert!(!h.iter().any(|x| x.name == "x-webhook-signature"));
        ep.signatures = crate::Signatures::Both;
        let h = attempt_headers(&ep, &e, 1, b"{}", now).unwrap();
        let sig = h.iter().find(|x| x.name == "webhook-signature").unwrap();
        let kinds: Vec<&str> = sig
            .value
            .expose()
            .split(' ')
            .map(|s| s.split(',').next().unwrap())
            .collect();
        assert_eq!(kinds, ["v1", "v1a"]);
        // Nothing signs: never sent.
        ep.signing_keys.clear();
        ep.signatures = crate::Signatures::V1a;
        assert_eq!(attempt_headers(&ep, &e, 1, b"{}", now), Err(Unsigned));
    }

    #[test]
    fn every_event_type_character_is_a_header_value_and_needs_no_json_escape() {
        // RFC 9110 §5.5: field-vchar is VCHAR (0x21-0x7E) or obs-text; JSON (RFC 8259 §7)
        // escapes '"', '\\' and control characters only.
        for b in 0u8..=255 {
            let c = char::from(b);
            if EventType::new(c.to_string()).is_ok() {
                assert!((0x21..=0x7E).contains(&b), "{c:?}");
                assert!(!matches!(c, '"' | '\\'), "{c:?}");
            }
        }
    }

    #[test]
    fn format_names() {
        assert_eq!(PayloadFormat::default(), PayloadFormat::Raw);
        for f in PayloadFormat::ALL {
            assert_eq!(f.as_str().parse::<PayloadFormat>(), Ok(f));
            assert_eq!(
                serde_json::to_string(&f).unwrap(),
                format!("\"{}\"", f.as_str())
            );
        }
        assert_eq!(
            "standard-webhooks".parse::<PayloadFormat>(),
            Ok(PayloadFormat::StandardWebhooks)
        );
        let err = "json".parse::<PayloadFormat>().unwrap_err();
        assert!(err.to_string().contains("standard_webhooks"), "{err}");
    }
}
