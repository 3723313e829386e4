//! `tern relay-failures --retry <message-id>`: re-reads a parked outbox item by its keys
//! (GetItem on the outbox table) and relays it again through the relay handler itself
//! (`tern_handlers::relay::handle_value`, the Lambda's code path), as one INSERT record.
//! When the parked item names one endpoint (SQS refused that delivery message), only
//! that endpoint gets it again; the others had theirs.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;
use serde_json::{Value, json};
use tern_aws::SqsQueue;
use tern_core::endpoint::{EndpointSecret, EndpointUpdate};
use tern_core::ports::{DrainableQueue as _, EndpointStore, PortError};
use tern_core::{Endpoint, EndpointId, TenantId};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::relay::{RecordOutcome, RelayDeps};
use tern_ops::OpsError;

use crate::{Ctx, print_json, write_err};

/// An endpoint store that shows the relay only one endpoint: a retried refused delivery
/// goes to that endpoint alone. Reads only; the relay never writes endpoints.
pub(crate) struct OnlyEndpoint {
    pub(crate) inner: Arc<dyn EndpointStore>,
    pub(crate) only: Option<EndpointId>,
}

#[async_trait::async_trait]
impl EndpointStore for OnlyEndpoint {
    async fn get(&self, tenant: &TenantId, id: &EndpointId) -> Result<Option<Endpoint>, PortError> {
        self.inner.get(tenant, id).await
    }
    async fn list_for_tenant(&self, tenant: &TenantId) -> Result<Vec<Endpoint>, PortError> {
        let list = self.inner.list_for_tenant(tenant).await?;
        Ok(match &self.only {
            Some(only) => list.into_iter().filter(|e| &e.id == only).collect(),
            None => list,
        })
    }
    async fn list_all(&self) -> Result<Vec<Endpoint>, PortError> {
        self.inner.list_all().await
    }
    async fn put(&self, _endpoint: &Endpoint) -> Result<(), PortError> {
        Err(PortError::Rejected("read-only endpoint view".into()))
    }
    async fn disable(&self, _t: &TenantId, _id: &EndpointId, _r: &str) -> Result<(), PortError> {
        Err(PortError::Rejected("read-only endpoint view".into()))
    }
    async fn update(
        &self,
        _t: &TenantId,
        _id: &EndpointId,
        _u: &EndpointUpdate,
    ) -> Result<(), PortError> {
        Err(PortError::Rejected("read-only endpoint view".into()))
    }
    async fn set_secrets(
        &self,
        _t: &TenantId,
        _id: &EndpointId,
        _s: &[EndpointSecret],
    ) -> Result<(), PortError> {
        Err(PortError::Rejected("read-only endpoint view".into()))
    }
}

/// An item attribute in the stream's JSON shape (`{"S": "..."}`). Outbox items hold
/// strings and numbers; the other scalar and nested kinds are mapped too, binary ones
/// are refused (no outbox attribute is binary).
fn stream_json(v: &AttributeValue) -> Result<Value, OpsError> {
    Ok(match v {
        AttributeValue::S(s) => json!({ "S": s }),
        AttributeValue::N(n) => json!({ "N": n }),
        AttributeValue::Bool(b) => json!({ "BOOL": b }),
        AttributeValue::Null(b) => json!({ "NULL": b }),
        AttributeValue::Ss(s) => json!({ "SS": s }),
        AttributeValue::Ns(n) => json!({ "NS": n }),
        AttributeValue::L(l) => {
            json!({ "L": l.iter().map(stream_json).collect::<Result<Vec<_>, _>>()? })
        }
        AttributeValue::M(m) => json!({ "M": image(m)? }),
        _ => {
            return Err(OpsError::Invalid(
                "the outbox item has a binary or unknown attribute type; it is not a Tern outbox item".into(),
            ));
        }
    })
}

/// An item as a stream record's image (DynamoDB JSON).
pub(crate) fn image(item: &HashMap<String, AttributeValue>) -> Result<Value, OpsError> {
    let mut m = serde_json::Map::new();
    for (k, v) in item {
        m.insert(k.clone(), stream_json(v)?);
    }
    Ok(Value::Object(m))
}

/// `tern relay-failures --retry --json`.
#[derive(Debug, Serialize)]
struct Retried {
    /// The parked message (removed from the queue).
    message_id: String,
    /// The Tern event relayed again.
    tern_event_id: String,
    /// The only endpoint it went to, when the parked item named one.
    endpoint_id: Option<String>,
    /// Delivery messages now on the delivery queue.
    deliveries: usize,
}

/// Relays a parked item again and removes it from the relay-failure queue. When the
/// relay parks it again (still unreadable, or refused again), the new parked message
/// replaces this one and the command fails with the reason.
pub async fn retry(
    ctx: &Ctx,
    message_id: &str,
    max: u32,
    out: &mut dyn Write,
) -> Result<(), OpsError> {
    let sqs = ctx.sqs();
    let failure_url = ctx.names.get("TERN_RELAY_FAILURE_QUEUE_URL")?;
    let failures = SqsQueue::new(sqs.clone(), failure_url.clone());
    let (found, read) = tern_ops::take(&failures, message_id, max as usize).await?;
    let Some(message) = found else {
        return Err(OpsError::Invalid(format!(
            "message {message_id} is not in the relay-failure queue (read {read} messages; raise --max to read more)"
        )));
    };
    if let Some(batch) = tern_ops::relay_failures::view(&message).stream_batch {
        // A batch the stream mapping gave up on: every event of its range.
        let result =
            crate::relay_redrive::redrive(ctx, &sqs, &failure_url, &message.message_id, &batch)
                .await;
        match &result {
            Ok(_) => failures.delete(&message.receipt_handle).await?,
            Err(_) => failures.release(&message.receipt_handle).await?,
        }
        return crate::relay_redrive::print(ctx, &result?, out);
    }
    let result = relay_again(ctx, &sqs, &failure_url, &message).await;
    match &result {
        // Relayed, or parked again as a new message: this one is done either way.
        Ok(_) | Err(Settled::Parked(_)) => failures.delete(&message.receipt_handle).await?,
        Err(Settled::NotRelayed(_)) => failures.release(&message.receipt_handle).await?,
    }
    let done = match result {
        Ok(done) => done,
        Err(Settled::Parked(e) | Settled::NotRelayed(e)) => return Err(e),
    };
    if ctx.json {
        return print_json(out, &done);
    }
    writeln!(
        out,
        "relayed event {} again{}: {} delivery message(s) queued; parked message {} removed",
        done.tern_event_id,
        done.endpoint_id
            .as_deref()
            .map_or_else(String::new, |e| format!(" to endpoint {e}")),
        done.deliveries,
        done.message_id
    )
    .map_err(write_err)
}

/// How a retry that did not relay ended.
enum Settled {
    /// The relay parked it again (a new parked message replaces this one).
    Parked(OpsError),
    /// Nothing happened; the parked message stays.
    NotRelayed(OpsError),
}

async fn relay_again(
    ctx: &Ctx,
    sqs: &aws_sdk_sqs::Client,
    failure_url: &str,
    message: &tern_core::ports::ReceivedMessage,
) -> Result<Retried, Settled> {
    let stay = Settled::NotRelayed;
    let view = tern_ops::relay_failures::view(message);
    let event_id = view.tern_event_id.clone().ok_or_else(|| {
        stay(OpsError::Invalid(format!(
            "parked message {} names no outbox item (its record was cut to nothing); \
             write the event again under a new id",
            view.message_id
        )))
    })?;
    // The item's own key, as the stream record gave it (`<tenant>#<event id>` from outbox
    // schema version 2); a body cut to its event id alone names a version 1 key.
    let key = view
        .keys
        .as_ref()
        .and_then(|k| k.pointer("/event_id/S"))
        .and_then(Value::as_str)
        .map_or_else(|| event_id.clone(), str::to_owned);
    let outbox = ctx.names.get("TERN_OUTBOX_TABLE").map_err(stay)?;
    let item = ctx
        .dynamodb()
        .get_item()
        .table_name(&outbox)
        .key("event_id", AttributeValue::S(key.clone()))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| stay(OpsError::Port(tern_aws::error::port_error(e))))?;
    let Some(item) = item.item() else {
        return Err(stay(OpsError::Invalid(format!(
            "outbox item {event_id} is gone from {outbox} (removed by its TTL?): write the event again"
        ))));
    };
    let record = insert_record(
        &format!("tern-relay-retry-{}", view.message_id),
        &key,
        image(item).map_err(stay)?,
        view.sequence_number.as_deref().unwrap_or("0"),
        ctx,
    );
    let max_payload_bytes = max_payload_bytes().map_err(stay)?;
    let only = view
        .endpoint_id
        .clone()
        .map(EndpointId::new)
        .transpose()
        .map_err(|e| stay(OpsError::Invalid(e.to_string())))?;
    // A refused message goes to its one endpoint whatever a checkpoint says (it counts
    // as handled there: it was parked); a whole record is relayed as the relay would.
    let checkpoints: Option<Arc<dyn tern_core::fanout::FanOutCheckpoints>> = match &only {
        Some(_) => None,
        None => Some(Arc::new(tern_aws::DynamoFanOutCheckpoints::new(
            ctx.dynamodb(),
            ctx.names.get("TERN_ATTEMPTS_TABLE").map_err(stay)?,
            // The ledger's TTL the deployment uses by default (delivery.attemptLogTtlDays).
            30,
        ))),
    };
    let deps = RelayDeps {
        endpoints: Arc::new(OnlyEndpoint {
            inner: Arc::new(ctx.endpoints().map_err(stay)?),
            only,
        }),
        delivery_queue: Arc::new(SqsQueue::new(
            sqs.clone(),
            ctx.names.get("TERN_DELIVERY_QUEUE_URL").map_err(stay)?,
        )),
        failure_queue: Arc::new(SqsQueue::new(sqs.clone(), failure_url)),
        max_payload_bytes,
        checkpoints,
    };
    let (response, outcomes) = tern_handlers::relay::handle_value(
        &deps,
        json!({ "Records": [record] }),
        &Metrics::new("Tern", MetricsSink::Discard),
    )
    .await;
    if !response.batch_item_failures.is_empty() {
        return Err(stay(OpsError::Invalid(
            "the relay could not finish (endpoint table or delivery queue unavailable; RUST_LOG=warn shows why); \
             the parked item stays"
                .into(),
        )));
    }
    match outcomes.into_iter().next() {
        Some(RecordOutcome::Relayed {
            deliveries,
            parked: 0,
        }) => Ok(Retried {
            message_id: view.message_id,
            tern_event_id: event_id,
            endpoint_id: view.endpoint_id,
            deliveries,
        }),
        Some(RecordOutcome::Relayed { parked, .. }) => {
            Err(Settled::Parked(OpsError::Invalid(format!(
                "the delivery queue refused {parked} delivery message(s) again; parked again as new messages"
            ))))
        }
        Some(RecordOutcome::Poison { reason } | RecordOutcome::Misconfigured { reason }) => {
            Err(Settled::Parked(OpsError::Invalid(format!(
                "outbox item {event_id} still cannot be relayed: {reason}; parked again as a new message"
            ))))
        }
        Some(RecordOutcome::Ignored) | None => Err(stay(OpsError::Invalid(format!(
            "outbox item {event_id} is not a Tern outbox item (no tern_record = outbox_event); nothing relayed"
        )))),
    }
}

/// An outbox item as the INSERT record Lambda would deliver for it (NEW_IMAGE stream).
pub(crate) fn insert_record(
    stream_event_id: &str,
    key: &str,
    image: Value,
    sequence: &str,
    ctx: &Ctx,
) -> Value {
    json!({
        "eventID": stream_event_id,
        "eventName": "INSERT",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": ctx.aws.region().map_or("us-east-1", |r| r.as_ref()),
        "dynamodb": {
            "Keys": { "event_id": { "S": key } },
            "NewImage": image,
            "SequenceNumber": sequence,
            "SizeBytes": 0,
            "StreamViewType": "NEW_IMAGE",
        }
    })
}

/// The relay's payload limit: `TERN_MAX_PAYLOAD_BYTES` as the functions read it, or the
/// default.
pub(crate) fn max_payload_bytes() -> Result<usize, OpsError> {
    match std::env::var("TERN_MAX_PAYLOAD_BYTES") {
        Ok(v) => v.parse().map_err(|_| {
            OpsError::Invalid(format!(
                "TERN_MAX_PAYLOAD_BYTES={v:?} is not a number of bytes"
            ))
        }),
        Err(_) => Ok(tern_core::event::DEFAULT_MAX_PAYLOAD_BYTES),
    }
}
