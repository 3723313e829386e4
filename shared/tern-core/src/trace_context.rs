//! W3C Trace Context (<https://www.w3.org/TR/trace-context/>): the `traceparent` and
//! `tracestate` of the code that wrote an event, carried by the outbox item, the event and
//! every delivery message made from it, so that Tern's spans (the relay's fan-out, each
//! attempt, the dead letter, a replay) join the application's trace.
//!
//! Only what the spec's version `00` allows is accepted: a parser that guessed at other
//! shapes would put a wrong parent on every span of the event.

use serde::{Deserialize, Serialize};

/// Length of a version `00` `traceparent`, in characters: `00-` + 32 + `-` + 16 + `-` + 2
/// (W3C Trace Context §3.2.2).
pub const TRACEPARENT_LEN: usize = 55;

/// Longest `tracestate` accepted, in characters: 512 (W3C Trace Context §3.3.1.1, the
/// smallest length every vendor must propagate; longer ones may be truncated by anyone).
pub const MAX_TRACESTATE_LEN: usize = 512;

/// Most list members in a `tracestate`: 32 (W3C Trace Context §3.3.1.1).
pub const MAX_TRACESTATE_MEMBERS: usize = 32;

/// Why a `traceparent` or `tracestate` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceContextError {
    /// Not 55 bytes.
    #[error(
        "traceparent must be {TRACEPARENT_LEN} bytes (00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>), found {0}"
    )]
    Length(usize),
    /// A version other than `00`.
    #[error("traceparent version {0:?} is not supported (only 00, W3C Trace Context §3.2.2.1)")]
    Version(String),
    /// Not `00-<32 hex>-<16 hex>-<2 hex>` in lowercase hex.
    #[error(
        "traceparent must be 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags> in lowercase hex"
    )]
    Format,
    /// The trace id is all zeros (W3C Trace Context §3.2.2.3).
    #[error("traceparent trace id is all zeros, which W3C Trace Context forbids")]
    ZeroTraceId,
    /// The parent id is all zeros (W3C Trace Context §3.2.2.4).
    #[error("traceparent parent id is all zeros, which W3C Trace Context forbids")]
    ZeroParentId,
    /// Above [`MAX_TRACESTATE_LEN`] characters.
    #[error(
        "tracestate is {0} characters; the limit is {MAX_TRACESTATE_LEN} (W3C Trace Context §3.3.1.1)"
    )]
    TraceStateLength(usize),
    /// More than [`MAX_TRACESTATE_MEMBERS`] list members.
    #[error(
        "tracestate has {0} members; the limit is {MAX_TRACESTATE_MEMBERS} (W3C Trace Context §3.3.1.1)"
    )]
    TraceStateMembers(usize),
    /// A list member that is not `key=value` by the spec's grammar.
    #[error(
        "tracestate member {0} is not key=value (key: lowercase letters, digits, _-*/ and one optional @; value: printable ASCII without , or =)"
    )]
    TraceStateMember(usize),
}

/// A valid version `00` `traceparent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceParent {
    /// The trace id, 16 bytes, never all zeros.
    pub trace_id: [u8; 16],
    /// The span id of the parent, 8 bytes, never all zeros.
    pub parent_id: [u8; 8],
    /// Trace flags; bit 0 is `sampled`.
    pub flags: u8,
}

impl TraceParent {
    /// Parses a `traceparent` header value.
    ///
    /// # Errors
    /// [`TraceContextError`]: length, version, format, or an all-zero id.
    pub fn parse(text: &str) -> Result<Self, TraceContextError> {
        if text.len() != TRACEPARENT_LEN {
            return Err(TraceContextError::Length(text.len()));
        }
        let bytes = text.as_bytes();
        let lower_hex = |s: &[u8]| s.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !lower_hex(&bytes[0..2]) {
            return Err(TraceContextError::Format);
        }
        if &bytes[0..2] != b"00" {
            return Err(TraceContextError::Version(text[0..2].to_owned()));
        }
        if bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
            return Err(TraceContextError::Format);
        }
        let (trace, parent, flags) = (&bytes[3..35], &bytes[36..52], &bytes[53..55]);
        if !(lower_hex(trace) && lower_hex(parent) && lower_hex(flags)) {
            return Err(TraceContextError::Format);
        }
        let mut trace_id = [0u8; 16];
        let mut parent_id = [0u8; 8];
        let mut flag = [0u8; 1];
        hex::decode_to_slice(trace, &mut trace_id).map_err(|_| TraceContextError::Format)?;
        hex::decode_to_slice(parent, &mut parent_id).map_err(|_| TraceContextError::Format)?;
        hex::decode_to_slice(flags, &mut flag).map_err(|_| TraceContextError::Format)?;
        if trace_id == [0; 16] {
            return Err(TraceContextError::ZeroTraceId);
        }
        if parent_id == [0; 8] {
            return Err(TraceContextError::ZeroParentId);
        }
        Ok(Self {
            trace_id,
            parent_id,
            flags: flag[0],
        })
    }

    /// True when the `sampled` flag (bit 0) is set.
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The trace id as 32 lowercase hex characters.
    pub fn trace_id_hex(&self) -> String {
        hex::encode(self.trace_id)
    }
}

impl std::fmt::Display for TraceParent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            hex::encode(self.trace_id),
            hex::encode(self.parent_id),
            self.flags
        )
    }
}

/// Checks a `tracestate` value by W3C Trace Context §3.3.1: at most 512 characters and 32
/// members, each `key=value`; empty members (`a=1,,b=2`) are allowed, as the spec says.
///
/// # Errors
/// [`TraceContextError::TraceStateLength`], [`TraceContextError::TraceStateMembers`],
/// [`TraceContextError::TraceStateMember`].
pub fn check_tracestate(text: &str) -> Result<(), TraceContextError> {
    if text.len() > MAX_TRACESTATE_LEN {
        return Err(TraceContextError::TraceStateLength(text.len()));
    }
    let mut members = 0;
    for (index, member) in text.split(',').enumerate() {
        let member = member.trim_matches(|c| c == ' ' || c == '\t');
        if member.is_empty() {
            continue;
        }
        members += 1;
        let ok = member
            .split_once('=')
            .is_some_and(|(key, value)| tracestate_key(key) && tracestate_value(value));
        if !ok {
            return Err(TraceContextError::TraceStateMember(index + 1));
        }
    }
    if members > MAX_TRACESTATE_MEMBERS {
        return Err(TraceContextError::TraceStateMembers(members));
    }
    Ok(())
}

/// `simple-key = lcalpha 0*255(lcalpha / DIGIT / "_" / "-"/ "*" / "/")` or
/// `multi-tenant-key = tenant-id "@" system-id` (tenant 1-241 chars starting with a
/// letter or digit, system 1-14 starting with a letter).
fn tracestate_key(key: &str) -> bool {
    let tail = |s: &str| {
        s.bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'*' | b'/'))
    };
    match key.split_once('@') {
        None => {
            (1..=256).contains(&key.len()) && key.as_bytes()[0].is_ascii_lowercase() && tail(key)
        }
        Some((tenant, system)) => {
            (1..=241).contains(&tenant.len())
                && matches!(tenant.as_bytes()[0], b'a'..=b'z' | b'0'..=b'9')
                && tail(tenant)
                && (1..=14).contains(&system.len())
                && system.as_bytes()[0].is_ascii_lowercase()
                && tail(system)
        }
    }
}

/// `value = 0*255(chr) nblk-chr`: 1-256 printable ASCII characters other than `,` and `=`,
/// not ending in a space.
fn tracestate_value(value: &str) -> bool {
    (1..=256).contains(&value.len())
        && value
            .bytes()
            .all(|b| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=')
        && !value.ends_with(' ')
}

/// The trace context an event carries: the `traceparent` of the span that wrote it and
/// that span's `tracestate`, both as their header text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawTraceContext", into = "RawTraceContext")]
pub struct TraceContext {
    traceparent: TraceParent,
    tracestate: Option<String>,
}

/// The wire form of [`TraceContext`], checked on the way in.
#[derive(Serialize, Deserialize)]
struct RawTraceContext {
    traceparent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tracestate: Option<String>,
}

impl TryFrom<RawTraceContext> for TraceContext {
    type Error = TraceContextError;
    fn try_from(raw: RawTraceContext) -> Result<Self, Self::Error> {
        Self::parse(&raw.traceparent, raw.tracestate.as_deref())
    }
}

impl From<TraceContext> for RawTraceContext {
    fn from(c: TraceContext) -> Self {
        Self {
            traceparent: c.traceparent.to_string(),
            tracestate: c.tracestate,
        }
    }
}

impl TraceContext {
    /// Checks a `traceparent` and an optional `tracestate`. An empty `tracestate` is the
    /// same as none.
    ///
    /// # Errors
    /// [`TraceContextError`].
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Result<Self, TraceContextError> {
        let traceparent = TraceParent::parse(traceparent)?;
        let tracestate = match tracestate {
            Some(s) if !s.trim().is_empty() => {
                check_tracestate(s)?;
                Some(s.to_owned())
            }
            _ => None,
        };
        Ok(Self {
            traceparent,
            tracestate,
        })
    }

    /// A context for `parent`, with no `tracestate`.
    pub fn new(traceparent: TraceParent) -> Self {
        Self {
            traceparent,
            tracestate: None,
        }
    }

    /// The same context with `tracestate` kept from `other` (a child span keeps its
    /// parent's state).
    #[must_use]
    pub fn with_tracestate(mut self, tracestate: Option<String>) -> Self {
        self.tracestate = tracestate;
        self
    }

    /// The parsed `traceparent`.
    pub fn traceparent(&self) -> &TraceParent {
        &self.traceparent
    }

    /// The `tracestate` text, if any.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_spec_example_round_trips() {
        let p = TraceParent::parse(GOOD).unwrap();
        assert!(p.sampled());
        assert_eq!(p.to_string(), GOOD);
        assert_eq!(p.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        let unsampled = TraceParent::parse(&GOOD.replace("-01", "-00")).unwrap();
        assert!(!unsampled.sampled());
    }

    #[test]
    fn every_rule_of_version_00_is_checked() {
        let cases = [
            (&GOOD[..54], TraceContextError::Length(54)),
            (&format!("{GOOD}0")[..], TraceContextError::Length(56)),
            (
                &GOOD.replacen("00", "01", 1)[..],
                TraceContextError::Version("01".into()),
            ),
            (
                &GOOD.replacen("00", "ff", 1)[..],
                TraceContextError::Version("ff".into()),
            ),
            (&GOOD.to_uppercase()[..], TraceContextError::Format),
            (&GOOD.replace("4bf9", "4BF9")[..], TraceContextError::Format),
            (
                &GOOD.replace("-00f0", "_00f0")[..],
                TraceContextError::Format,
            ),
            (&GOOD.replace("4bf9", "4bg9")[..], TraceContextError::Format),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                TraceContextError::ZeroTraceId,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                TraceContextError::ZeroParentId,
            ),
        ];
        for (text, want) in cases {
            assert_eq!(TraceParent::parse(text), Err(want), "{text}");
        }
    }

    #[test]
    fn tracestate_grammar() {
        for ok in [
            "rojo=00f067aa0ba902b7",
            "congo=t61rcWkgMzE, rojo=00f067aa0ba902b7",
            "a=1,,b=2",
            "fw529a3039@dt=abc",
            "vendor/x=1 2",
        ] {
            assert_eq!(check_tracestate(ok), Ok(()), "{ok}");
        }
        for (bad, want) in [
            ("Rojo=1", TraceContextError::TraceStateMember(1)),
            ("a=1,b", TraceContextError::TraceStateMember(2)),
            ("a=", TraceContextError::TraceStateMember(1)),
            ("a=x=y", TraceContextError::TraceStateMember(1)),
            ("a=\u{e9}", TraceContextError::TraceStateMember(1)),
            ("t@Sys=1", TraceContextError::TraceStateMember(1)),
        ] {
            assert_eq!(check_tracestate(bad), Err(want), "{bad}");
        }
        let many = (0..33)
            .map(|i| format!("k{i}=v"))
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(
            check_tracestate(&many),
            Err(TraceContextError::TraceStateMembers(33))
        );
        let long = format!("a={}", "x".repeat(511));
        assert_eq!(
            check_tracestate(&long),
            Err(TraceContextError::TraceStateLength(513))
        );
    }

    #[test]
    fn serde_checks_on_the_way_in() {
        let c = TraceContext::parse(GOOD, Some("rojo=1")).unwrap();
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(
            json,
            format!(r#"{{"traceparent":"{GOOD}","tracestate":"rojo=1"}}"#)
        );
        assert_eq!(serde_json::from_str::<TraceContext>(&json).unwrap(), c);
        assert!(serde_json::from_str::<TraceContext>(r#"{"traceparent":"00-x"}"#).is_err());
        let empty_state = TraceContext::parse(GOOD, Some("")).unwrap();
        assert_eq!(empty_state.tracestate(), None);
    }
}
