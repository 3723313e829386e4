//! Reading the outbox stream (DynamoDB Streams) outside Lambda: records in the JSON shape
//! Lambda delivers them to the relay ([`lambda_record`]), and a shard's records between
//! two sequence numbers ([`read_range`]), to re-drive a batch the stream mapping gave up
//! on. Only with the `streams` feature: the Lambda functions never read the stream
//! themselves.

use std::cmp::Ordering;
use std::collections::HashMap;

use aws_sdk_dynamodbstreams::Client;
use aws_sdk_dynamodbstreams::error::ProvideErrorMetadata as _;
use aws_sdk_dynamodbstreams::types::{Record, ShardIteratorType};
use serde_json::{Value, json};

/// Converts a DynamoDB Streams record to the JSON shape Lambda delivers. A field the
/// record lacks (moto leaves some out) is left out too, as in AWS's records, never written
/// as `null`; `ApproximateCreationDateTime` is whole seconds since the epoch, as Lambda
/// writes it.
pub fn lambda_record(record: &Record, stream_arn: &str) -> Value {
    let change = record.dynamodb();
    let image = |m: &HashMap<String, aws_sdk_dynamodbstreams::types::AttributeValue>| {
        serde_json::to_value(serde_dynamo::Item::from(m.clone())).ok()
    };
    let mut dynamodb = serde_json::Map::new();
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(value) = value {
            dynamodb.insert(key.to_owned(), value);
        }
    };
    put(
        "ApproximateCreationDateTime",
        change
            .and_then(|c| c.approximate_creation_date_time())
            .map(|t| json!(t.secs())),
    );
    put("Keys", change.and_then(|c| c.keys.as_ref()).and_then(image));
    put(
        "NewImage",
        change.and_then(|c| c.new_image.as_ref()).and_then(image),
    );
    put(
        "OldImage",
        change.and_then(|c| c.old_image.as_ref()).and_then(image),
    );
    put(
        "SequenceNumber",
        change.and_then(|c| c.sequence_number()).map(|s| json!(s)),
    );
    put(
        "SizeBytes",
        change.and_then(|c| c.size_bytes()).map(|n| json!(n)),
    );
    put(
        "StreamViewType",
        change
            .and_then(|c| c.stream_view_type())
            .map(|v| json!(v.as_str())),
    );
    let mut value = json!({
        "eventSource": "aws:dynamodb",
        "awsRegion": record.aws_region().unwrap_or("us-east-1"),
        "eventSourceARN": stream_arn,
        "eventVersion": record.event_version().unwrap_or("1.1"),
        "dynamodb": dynamodb,
    });
    if let Some(id) = record.event_id() {
        value["eventID"] = json!(id);
    }
    if let Some(name) = record.event_name() {
        value["eventName"] = json!(name.as_str());
    }
    if let Some(id) = record.user_identity() {
        value["userIdentity"] = json!({"type": id.r#type(), "principalId": id.principal_id()});
    }
    value
}

/// Orders two stream sequence numbers (decimal strings of up to 40 digits, too long for
/// an integer type): the shorter is the smaller, equal lengths compare digit by digit.
pub fn sequence_order(a: &str, b: &str) -> Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// A range could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    /// The stream no longer holds the range: its records are past the 24 h retention
    /// (`TrimmedDataAccessException`) or the stream or shard is gone
    /// (`ResourceNotFoundException`). Look for the events elsewhere (the outbox items).
    #[error("the stream no longer holds this range: {0}")]
    Gone(String),
    /// A call failed or the range was not reached; trying again later may succeed.
    #[error("the stream range could not be read: {0}")]
    Unavailable(String),
}

/// Empty `GetRecords` pages in a row after which [`read_range`] stops: 10. A page may come
/// back empty before the records it points at (DynamoDB Streams API reference,
/// GetRecords); ten in a row without reaching the range's end means it is not there.
pub const MAX_EMPTY_PAGES: usize = 10;

/// Records per `GetRecords` call: 1,000, the API's most.
const PAGE: i32 = 1000;

/// The records of `shard_id` from sequence number `start` through `end` (both included),
/// in the JSON shape Lambda delivers: `GetShardIterator` `AT_SEQUENCE_NUMBER`, then
/// `GetRecords` until a record past `end`, the shard's end, or [`MAX_EMPTY_PAGES`] empty
/// pages. Every call has the deadline and bounded retries of the client's configuration
/// (`crate::budget`).
///
/// # Errors
/// [`RangeError::Gone`] when the stream no longer holds the range;
/// [`RangeError::Unavailable`] for a failed call, or a range whose end was not reached.
pub async fn read_range(
    client: &Client,
    stream_arn: &str,
    shard_id: &str,
    start: &str,
    end: &str,
) -> Result<Vec<Value>, RangeError> {
    let classify = |code: Option<&str>, text: String| match code {
        Some("TrimmedDataAccessException" | "ResourceNotFoundException") => RangeError::Gone(text),
        _ => RangeError::Unavailable(text),
    };
    let iterator = client
        .get_shard_iterator()
        .stream_arn(stream_arn)
        .shard_id(shard_id)
        .shard_iterator_type(ShardIteratorType::AtSequenceNumber)
        .sequence_number(start)
        .send()
        .await
        .map_err(|e| {
            let code = e.code().map(str::to_owned);
            let text = aws_sdk_dynamodbstreams::error::DisplayErrorContext(&e).to_string();
            classify(code.as_deref(), text)
        })?
        .shard_iterator;
    let mut iterator = iterator;
    let mut records = Vec::new();
    let mut empty = 0;
    while let Some(it) = iterator.take() {
        let out = client
            .get_records()
            .shard_iterator(it)
            .limit(PAGE)
            .send()
            .await
            .map_err(|e| {
                let code = e.code().map(str::to_owned);
                let text = aws_sdk_dynamodbstreams::error::DisplayErrorContext(&e).to_string();
                classify(code.as_deref(), text)
            })?;
        if out.records().is_empty() {
            empty += 1;
            if empty >= MAX_EMPTY_PAGES {
                break;
            }
        } else {
            empty = 0;
        }
        for record in out.records() {
            let Some(sequence) = record.dynamodb().and_then(|c| c.sequence_number()) else {
                continue;
            };
            if sequence_order(sequence, start) == Ordering::Less {
                continue;
            }
            if sequence_order(sequence, end) == Ordering::Greater {
                return Ok(records);
            }
            records.push(lambda_record(record, stream_arn));
            if sequence_order(sequence, end) == Ordering::Equal {
                return Ok(records);
            }
        }
        iterator = out.next_shard_iterator;
    }
    // A closed shard ended, or the pages stayed empty, before the range's last record.
    Err(RangeError::Unavailable(format!(
        "read {} record(s) of shard {shard_id} from {start} without reaching {end}",
        records.len()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_order_as_numbers() {
        assert_eq!(sequence_order("99", "100"), Ordering::Less);
        assert_eq!(
            sequence_order("800000000003126276363", "800000000003126276362"),
            Ordering::Greater
        );
        assert_eq!(sequence_order("7", "7"), Ordering::Equal);
    }
}
