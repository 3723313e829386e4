//! `tern relay-failures`: the relay-failure queue as an operator reads it. Each parked
//! body names the Tern event (`tern_event_id`, or the outbox item's `event_id` key), the
//! endpoint when one delivery was refused, and the reason. Not the stream record's own
//! `eventID`, which names nothing an operator can look up.
//!
//! The queue also holds what Lambda sends when the stream mapping gives up on a batch
//! (its retries exhausted, or the records too old): an [`OnFailureRecord`], metadata of
//! the batch (shard and sequence range), never its records. Its events are found by
//! reading that range of the stream again, or, once the stream no longer holds it
//! (24 h), the outbox items created in its time window.

use std::io::Write;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tern_core::ports::ReceivedMessage;

/// `kind` of a batch the stream mapping gave up on (Lambda's on-failure record carries
/// no `tern-reason` attribute; the view names it so).
pub const DISCARDED_BATCH_KIND: &str = "discarded_stream_batch";

/// The record Lambda sends to a DynamoDB stream mapping's on-failure destination (AWS
/// Lambda developer guide, "Retain discarded records for a DynamoDB event source"), field
/// names as Lambda writes them. Local mode's stream poller writes the same shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OnFailureRecord {
    /// The invocation that failed.
    #[serde(rename = "requestContext", default)]
    pub request_context: RequestContext,
    /// The function's last answer.
    #[serde(rename = "responseContext", default)]
    pub response_context: ResponseContext,
    /// Record format version (`1.0`).
    #[serde(default)]
    pub version: String,
    /// When Lambda gave up, RFC 3339.
    #[serde(default)]
    pub timestamp: String,
    /// The batch.
    #[serde(rename = "DDBStreamBatchInfo")]
    pub batch: StreamBatchInfo,
}

/// `requestContext` of an [`OnFailureRecord`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RequestContext {
    /// The last invocation's request id.
    pub request_id: String,
    /// The function.
    pub function_arn: String,
    /// Why Lambda gave up: `RetryAttemptsExhausted`, `RecordAgeExceeded` or
    /// `FunctionTimeout`-like conditions.
    pub condition: String,
    /// Invocations made.
    pub approximate_invoke_count: u32,
}

/// `responseContext` of an [`OnFailureRecord`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResponseContext {
    /// HTTP status of the last invocation.
    pub status_code: u16,
    /// Function version.
    pub executed_version: String,
    /// `Unhandled` when the function failed (timeout, crash), absent when it answered
    /// with a partial batch failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function_error: Option<String>,
}

/// `DDBStreamBatchInfo`: which records of which shard the batch held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamBatchInfo {
    /// The shard.
    pub shard_id: String,
    /// First record's sequence number.
    pub start_sequence_number: String,
    /// Last record's sequence number.
    pub end_sequence_number: String,
    /// When the first record reached the stream, RFC 3339.
    #[serde(default)]
    pub approximate_arrival_of_first_record: Option<String>,
    /// When the last record reached the stream, RFC 3339.
    #[serde(default)]
    pub approximate_arrival_of_last_record: Option<String>,
    /// Records in the batch.
    #[serde(default)]
    pub batch_size: u32,
    /// The stream.
    pub stream_arn: String,
}

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
    /// For a batch the stream mapping gave up on ([`DISCARDED_BATCH_KIND`]): its shard,
    /// sequence range and time window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_batch: Option<StreamBatchInfo>,
    /// The Tern events of that batch, once the tool has read them from the stream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<String>>,
    /// Why the events of that batch are not listed (the stream no longer holds it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_unavailable: Option<String>,
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
            stream_batch: None,
            events: None,
            events_unavailable: None,
        };
    };
    if body.get("DDBStreamBatchInfo").is_some() {
        return discarded_batch(message, &body);
    }
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    let keys = body.get("keys").filter(|k| !k.is_null()).cloned();
    RelayFailureView {
        message_id: message.message_id.clone(),
        // The key is `<tenant>#<event id>` from outbox schema version 2: its event id.
        tern_event_id: text(body.get("tern_event_id"))
            .or_else(|| text(keys.as_ref().and_then(|k| k.pointer("/event_id/S"))))
            .or_else(|| text(body.pointer("/record/dynamodb/NewImage/event_id/S")))
            .map(|key| tern_core::outbox::event_id_part(&key).to_owned()),
        endpoint_id: text(body.get("endpoint_id")),
        reason: text(body.get("reason")).unwrap_or_else(|| "-".into()),
        kind,
        keys,
        sequence_number: text(body.get("sequence_number")),
        record_truncated: body.get("record_truncated").is_some(),
        stream_batch: None,
        events: None,
        events_unavailable: None,
    }
}

/// The view of Lambda's on-failure record: its range, and why Lambda gave up.
fn discarded_batch(message: &ReceivedMessage, body: &Value) -> RelayFailureView {
    let record = serde_json::from_value::<OnFailureRecord>(body.clone());
    let (reason, batch) = match record {
        Ok(r) => {
            let error = r
                .response_context
                .function_error
                .as_deref()
                .map_or_else(String::new, |e| format!(", function error {e}"));
            (
                format!(
                    "the stream mapping gave up on {} record(s) after {} invocation(s): {}{error}",
                    r.batch.batch_size,
                    r.request_context.approximate_invoke_count,
                    if r.request_context.condition.is_empty() {
                        "-"
                    } else {
                        &r.request_context.condition
                    }
                ),
                Some(r.batch),
            )
        }
        Err(e) => (
            format!(
                "unreadable DDBStreamBatchInfo (needs shardId, startSequenceNumber, endSequenceNumber, streamArn): {e}"
            ),
            None,
        ),
    };
    RelayFailureView {
        message_id: message.message_id.clone(),
        tern_event_id: None,
        endpoint_id: None,
        reason,
        kind: Some(DISCARDED_BATCH_KIND.to_owned()),
        keys: None,
        sequence_number: batch.as_ref().map(|b| b.start_sequence_number.clone()),
        record_truncated: false,
        stream_batch: batch,
        events: None,
        events_unavailable: None,
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
        if let Some(b) = &v.stream_batch {
            writeln!(
                out,
                "    range: shard {} sequence {}..{} ({} record(s), arrived {} .. {}), stream {}",
                b.shard_id,
                b.start_sequence_number,
                b.end_sequence_number,
                b.batch_size,
                b.approximate_arrival_of_first_record
                    .as_deref()
                    .unwrap_or("?"),
                b.approximate_arrival_of_last_record
                    .as_deref()
                    .unwrap_or("?"),
                b.stream_arn
            )?;
        }
        match (&v.events, &v.events_unavailable) {
            (Some(events), _) => writeln!(
                out,
                "    events ({}): {}",
                events.len(),
                if events.is_empty() {
                    "none (no outbox INSERT in the range)".to_owned()
                } else {
                    events.join(" ")
                }
            )?,
            (None, Some(why)) => writeln!(out, "    events: not listed: {why}")?,
            (None, None) => {}
        }
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

    /// Lambda's on-failure record for a DynamoDB stream (the documented example's shape):
    /// no event id in it, but its range, which `--retry` re-reads.
    #[test]
    fn a_discarded_batch_shows_its_range() {
        let body = r#"{
          "requestContext": {"requestId": "316aa6d0-8154-xmpl-9af7-85d5f4a6bc81",
            "functionArn": "arn:aws:lambda:us-east-2:123456789012:function:myfunction",
            "condition": "RetryAttemptsExhausted", "approximateInvokeCount": 11},
          "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
          "version": "1.0", "timestamp": "2019-11-14T00:13:49.717Z",
          "DDBStreamBatchInfo": {"shardId": "shardId-00000001573689847184-864758bb",
            "startSequenceNumber": "800000000003126276362", "endSequenceNumber": "800000000003126276363",
            "approximateArrivalOfFirstRecord": "2019-11-14T00:13:19Z",
            "approximateArrivalOfLastRecord": "2019-11-14T00:13:19Z", "batchSize": 2,
            "streamArn": "arn:aws:dynamodb:us-east-2:123456789012:table/mytable/stream/2019-11-14T00:04:06.388"}
        }"#;
        let mut m = msg(body);
        m.attributes.clear();
        let v = view(&m);
        assert_eq!(v.kind.as_deref(), Some(DISCARDED_BATCH_KIND));
        let b = v.stream_batch.clone().expect("the range");
        assert_eq!(b.start_sequence_number, "800000000003126276362");
        assert_eq!(b.end_sequence_number, "800000000003126276363");
        assert_eq!(b.batch_size, 2);
        assert!(v.reason.contains("RetryAttemptsExhausted"), "{}", v.reason);
        let mut out = Vec::new();
        print_list(&mut out, &[v]).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("sequence 800000000003126276362..800000000003126276363"),
            "{text}"
        );
    }
}
