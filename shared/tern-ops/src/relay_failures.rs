//! `tern relay-failures`: the relay-failure queue as an operator reads it. Each parked
//! body names the Tern event (`tern_event_id`, or the outbox item's `event_id` key), the
//! endpoint when one delivery was refused, and the reason. Not the stream record's own
//! `eventID`, which names nothing an operator can look up.

use std::io::Write;

use serde::Serialize;
use serde_json::Value;
use tern_core::ports::ReceivedMessage;

/// One parked item, as `tern relay-failures --json` prints it (field names are stable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RelayFailureView {
    /// SQS message id (`tern relay-failures --retry <message-id>`).
    pub message_id: String,
    /// The Tern event id (the `webhook-id`), when the body names it.
    pub tern_event_id: Option<String>,
    /// The endpoint whose delivery message SQS refused, when that is why it was parked.
    pub endpoint_id: Option<String>,
    /// Why it was parked (the relay's words).
    pub reason: String,
    /// The kind (`tern-reason` attribute): `unreadable_outbox_record`,
    /// `misconfigured_stream` or `refused_delivery_message`.
    pub kind: Option<String>,
    /// The outbox item's keys (DynamoDB JSON), what `--retry` reads the item by.
    pub keys: Option<Value>,
    /// The stream record's sequence number.
    pub sequence_number: Option<String>,
    /// True when the parked record lost its images (too big) or more.
    pub record_truncated: bool,
}

/// Reads one parked body. Never fails: a body that is not JSON keeps its text as reason.
pub fn view(message: &ReceivedMessage) -> RelayFailureView {
    let kind = message
        .attributes
        .iter()
        .find(|(k, _)| k == "tern-reason")
        .map(|(_, v)| v.clone());
    let Ok(body) = serde_json::from_str::<Value>(&message.body) else {
        return RelayFailureView {
            message_id: message.message_id.clone(),
            tern_event_id: None,
            endpoint_id: None,
            reason: format!(
                "unreadable parked body: {}",
                message.body.chars().take(200).collect::<String>()
            ),
            kind,
            keys: None,
            sequence_number: None,
            record_truncated: false,
        };
    };
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    let keys = body.get("keys").filter(|k| !k.is_null()).cloned();
    RelayFailureView {
        message_id: message.message_id.clone(),
        tern_event_id: text(body.get("tern_event_id"))
            .or_else(|| text(keys.as_ref().and_then(|k| k.pointer("/event_id/S"))))
            .or_else(|| text(body.pointer("/record/dynamodb/NewImage/event_id/S"))),
        endpoint_id: text(body.get("endpoint_id")),
        reason: text(body.get("reason")).unwrap_or_else(|| "-".into()),
        kind,
        keys,
        sequence_number: text(body.get("sequence_number")),
        record_truncated: body.get("record_truncated").is_some(),
    }
}

/// Prints parked items as a table.
///
/// # Errors
/// A write error.
pub fn print_list(out: &mut dyn Write, views: &[RelayFailureView]) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<38} {:<38} {:<38} {:<26} REASON",
        "MESSAGE", "TERN EVENT", "ENDPOINT", "KIND"
    )?;
    for v in views {
        writeln!(
            out,
            "{:<38} {:<38} {:<38} {:<26} {}",
            v.message_id,
            v.tern_event_id.as_deref().unwrap_or("-"),
            v.endpoint_id.as_deref().unwrap_or("-"),
            v.kind.as_deref().unwrap_or("-"),
            v.reason.replace(['\n', '\r'], " ")
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(body: &str) -> ReceivedMessage {
        ReceivedMessage {
            message_id: "m1".into(),
            receipt_handle: "r".into(),
            body: body.into(),
            attributes: vec![("tern-reason".into(), "refused_delivery_message".into())],
        }
    }

    #[test]
    fn names_the_tern_event_not_the_stream_record() {
        let v = view(&msg(
            r#"{"source":"tern-relay","reason":"delivery queue refused the message: too big","event_id":"stream-rec-1","keys":{"event_id":{"S":"evt_9"}},"tern_event_id":"evt_9","endpoint_id":"ep_3","sequence_number":"42"}"#,
        ));
        assert_eq!(v.tern_event_id.as_deref(), Some("evt_9"));
        assert_eq!(v.endpoint_id.as_deref(), Some("ep_3"));
        assert_eq!(v.kind.as_deref(), Some("refused_delivery_message"));
        // A poison record has no tern_event_id field: its keys name the item.
        let v = view(&msg(
            r#"{"source":"tern-relay","reason":"bad payload","event_id":"stream-rec-2","keys":{"event_id":{"S":"evt_7"}}}"#,
        ));
        assert_eq!(v.tern_event_id.as_deref(), Some("evt_7"));
        assert_eq!(v.endpoint_id, None);
        let v = view(&msg("not json"));
        assert!(v.reason.starts_with("unreadable parked body"));
    }
}
