//! The relay's cache of a tenant's endpoints (issue 29; `tern_handlers::subscription_cache`)
//! on moto, through the relay as local mode and the Lambda wire it
//! (`tern_aws::wiring::relay_deps`):
//!
//! - **exact**: an endpoint created, replaced, re-subscribed or deleted before an event's
//!   outbox item is written is honoured for that event by a relay that already keeps the
//!   tenant's list, written through the store the API, the portal and the `tern` CLI use;
//!   a disabled endpoint still gets the event (the sender dead-letters it
//!   `endpoint_disabled`), as before the cache;
//! - **bounded**: a second batch of the same tenant reads no endpoint list (no `Query`),
//!   only the tenant's subscriptions version (one `GetItem`), counted on the wire.

use std::sync::Arc;

use chrono::Utc;
use serde_json::{Value, json};
use tern_core::endpoint::EndpointUpdate;
use tern_core::ports::EndpointStore as _;
use tern_core::{DeliveryMessage, Endpoint, EndpointId, Secret, TenantId};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::relay::{RecordOutcome, RelayDeps};
use tern_local::LocalOptions;
use tern_tests::fakes::MemQueue;
use tern_tests::fault_proxy::Service;
use tern_tests::*;

fn endpoint(tenant: &str, id: &str, types: &[&str]) -> Endpoint {
    Endpoint::new(
        EndpointId::new(id).unwrap(),
        TenantId::new(tenant).unwrap(),
        "https://receiver.test/hook",
        types.iter().map(|t| (*t).to_owned()).collect(),
        Secret::generate(),
        Utc::now(),
    )
}

/// An outbox INSERT as Lambda delivers it (NEW_IMAGE view).
fn insert(sequence: usize, event_id: &str, tenant: &str, event_type: &str) -> Value {
    json!({
        "eventID": format!("ev{sequence}"),
        "eventName": "INSERT",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/outbox/stream/2026",
        "dynamodb": {
            "ApproximateCreationDateTime": 1767225600.0,
            "Keys": {"event_id": {"S": event_id}},
            "SequenceNumber": format!("{:021}", 1000 + sequence),
            "SizeBytes": 300,
            "StreamViewType": "NEW_IMAGE",
            "NewImage": {
                "event_id": {"S": event_id},
                "tern_record": {"S": "outbox_event"},
                "schema_version": {"N": "1"},
                "event_type": {"S": event_type},
                "tenant_id": {"S": tenant},
                "created_at": {"S": "2026-01-01T00:00:00.000Z"},
                "payload": {"S": "{\"n\":1}"},
                "expires_at": {"N": "1767830400"}
            }
        }
    })
}

fn metrics() -> Metrics {
    Metrics::new("Tern", MetricsSink::Discard)
}

/// The deployment's relay with its endpoint store as wired (the cache over DynamoDB),
/// sending into memory so each event's fan-out can be read back exactly.
struct Relay {
    deps: RelayDeps,
    queue: Arc<MemQueue>,
    sequence: usize,
}

impl Relay {
    fn of(local: &tern_local::LocalTern) -> Self {
        let queue = Arc::new(MemQueue::default());
        Self {
            deps: RelayDeps {
                endpoints: local.relay.endpoints.clone(),
                delivery_queue: queue.clone(),
                failure_queue: Arc::new(MemQueue::default()),
                max_payload_bytes: local.relay.max_payload_bytes,
                checkpoints: None,
            },
            queue,
            sequence: 0,
        }
    }

    /// Relays one batch of one event of `tenant`; the endpoints it was sent to, sorted.
    async fn relay(&mut self, tenant: &str, event_type: &str) -> Vec<String> {
        self.sequence += 1;
        let event_id = format!("evt_rs_{}", self.sequence);
        let batch = json!({"Records": [insert(self.sequence, &event_id, tenant, event_type)]});
        let (response, outcomes) =
            tern_handlers::relay::handle_value(&self.deps, batch, &metrics()).await;
        assert!(response.batch_item_failures.is_empty(), "{response:?}");
        assert!(
            matches!(
                outcomes.as_slice(),
                [RecordOutcome::Relayed { parked: 0, .. }]
            ),
            "{outcomes:?}"
        );
        let mut to: Vec<String> = self
            .queue
            .entries()
            .iter()
            .map(|e| DeliveryMessage::parse(&e.body).expect("the relay writes valid messages"))
            .filter(|m| m.event.id.as_str() == event_id)
            .map(|m| m.endpoint_id.as_str().to_owned())
            .collect();
        to.sort();
        to
    }
}

/// Every kind of change made before an event, through the store the API, the portal and
/// the CLI write with, is in the event's fan-out although the relay keeps the tenant's
/// list from the batch before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_change_made_before_an_event_is_honoured_by_a_warm_relay() {
    let local = deployment_without_pollers("relaysubs", LocalOptions::default()).await;
    let writer = local.endpoint_table();
    let t = "tnt_rs";
    let mut relay = Relay::of(&local);
    writer
        .create(&endpoint(t, "ep_rs_a", &["order.paid"]))
        .await
        .unwrap();
    writer
        .create(&endpoint("tnt_rs_other", "ep_rs_x", &["*"]))
        .await
        .unwrap();

    assert_eq!(relay.relay(t, "order.paid").await, ["ep_rs_a"], "cold");
    assert_eq!(relay.relay(t, "order.paid").await, ["ep_rs_a"], "warm");

    // Created.
    writer
        .create(&endpoint(t, "ep_rs_b", &["order.paid"]))
        .await
        .unwrap();
    assert_eq!(
        relay.relay(t, "order.paid").await,
        ["ep_rs_a", "ep_rs_b"],
        "an endpoint created before the event gets it"
    );

    // Its subscription changed (a PATCH of the event types).
    let shipped_only = EndpointUpdate {
        event_types: Some(vec!["order.shipped".into()]),
        ..EndpointUpdate::default()
    };
    writer
        .update(
            &TenantId::new(t).unwrap(),
            &EndpointId::new("ep_rs_a").unwrap(),
            &shipped_only,
        )
        .await
        .unwrap();
    assert_eq!(relay.relay(t, "order.paid").await, ["ep_rs_b"]);
    assert_eq!(relay.relay(t, "order.shipped").await, ["ep_rs_a"]);

    // Replaced whole (put).
    writer
        .put(&endpoint(t, "ep_rs_b", &["order.refunded"]))
        .await
        .unwrap();
    assert!(relay.relay(t, "order.paid").await.is_empty());
    assert_eq!(relay.relay(t, "order.refunded").await, ["ep_rs_b"]);

    // Deleted.
    writer
        .delete(
            &TenantId::new(t).unwrap(),
            &EndpointId::new("ep_rs_a").unwrap(),
        )
        .await
        .unwrap();
    assert!(
        relay.relay(t, "order.shipped").await.is_empty(),
        "a deleted endpoint gets nothing"
    );

    // Disabled: relayed as before the cache; the sender reads the current state and
    // dead-letters it `endpoint_disabled`.
    writer
        .disable(
            &TenantId::new(t).unwrap(),
            &EndpointId::new("ep_rs_b").unwrap(),
            "test",
        )
        .await
        .unwrap();
    assert_eq!(relay.relay(t, "order.refunded").await, ["ep_rs_b"]);

    // The other tenant's list was never disturbed by these changes.
    assert_eq!(relay.relay("tnt_rs_other", "order.paid").await, ["ep_rs_x"]);
}

/// A second batch of the same tenant reads no endpoint list: one `GetItem` of the tenant's
/// subscriptions version instead of a `Query` of its 100 endpoints, counted on the wire;
/// an endpoint created meanwhile makes the next batch read the list again. Prints the read
/// units of each (DynamoDB's rounding of the items' sizes, `tern_aws::ledger::item_size_bytes`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_batch_of_the_same_tenant_reads_no_endpoint_list() {
    let proxy = moto_proxy().await;
    let local =
        deployment_through_without_pollers(&proxy, "relaycount", LocalOptions::default()).await;
    let writer = local.endpoint_table();
    let t = "tnt_rc";
    // 100 endpoints, each subscribed to its own type: an event goes to one of them, and
    // the relay reads all 100 to know which.
    for i in 0..100 {
        writer
            .create(&endpoint(
                t,
                &format!("ep_rc_{i:03}"),
                &[&format!("type.{i}")],
            ))
            .await
            .unwrap();
    }
    let queries = || proxy.count(&Service::DynamoDb, "Query");
    let gets = || proxy.count(&Service::DynamoDb, "GetItem");
    let mut relay = Relay::of(&local);

    let (q0, g0) = (queries(), gets());
    assert_eq!(relay.relay(t, "type.7").await, ["ep_rc_007"]);
    let (q1, g1) = (queries(), gets());
    assert_eq!(q1 - q0, 1, "a cold relay reads the tenant's list once");
    assert_eq!(g1 - g0, 1, "and the tenant's version before it");

    for i in 0..3 {
        assert_eq!(
            relay.relay(t, &format!("type.{i}")).await,
            [format!("ep_rc_{i:03}")]
        );
    }
    let (q2, g2) = (queries(), gets());
    assert_eq!(q2 - q1, 0, "warm batches of the same tenant read no list");
    assert_eq!(g2 - g1, 3, "one version read per batch");

    writer
        .create(&endpoint(t, "ep_rc_new", &["type.7"]))
        .await
        .unwrap();
    let (q3, g3) = (queries(), gets());
    assert_eq!(relay.relay(t, "type.7").await, ["ep_rc_007", "ep_rc_new"]);
    assert_eq!(
        queries() - q3,
        1,
        "a change makes the next batch read the list"
    );
    assert_eq!(gets() - g3, 1);

    // What each read costs, in read units: the list's items and the version's.
    let items = local
        .dynamodb()
        .query()
        .table_name(&local.resources.endpoints_table)
        .key_condition_expression("tenant_id = :t")
        .expression_attribute_values(":t", aws_sdk_dynamodb::types::AttributeValue::S(t.into()))
        .send()
        .await
        .unwrap()
        .items
        .unwrap_or_default();
    assert_eq!(items.len(), 101);
    let list_bytes: usize = items.iter().map(tern_aws::ledger::item_size_bytes).sum();
    let version = local
        .dynamodb()
        .get_item()
        .table_name(&local.resources.endpoints_table)
        .set_key(Some(tern_aws::endpoints::subscriptions_key(
            &TenantId::new(t).unwrap(),
        )))
        .send()
        .await
        .unwrap()
        .item
        .expect("the version item exists after the writes");
    let version_bytes = tern_aws::ledger::item_size_bytes(&version);
    let units = |bytes: usize| bytes.div_ceil(4096) as f64;
    eprintln!(
        "tenant of 101 endpoints: list {list_bytes} bytes = {} read units eventually consistent \
         (before: every batch), {} strongly consistent (after: once per change per warm relay); \
         version item {version_bytes} bytes = {} read unit strongly consistent (after: every batch)",
        units(list_bytes) / 2.0,
        units(list_bytes),
        units(version_bytes)
    );
    assert!(version_bytes < 4096);
}
