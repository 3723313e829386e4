//! The keys one endpoint writes at the rate of its traffic are spread (issue 29, "no hot
//! key"), and their readers read every shard exactly, on moto: the waiting list (an
//! endpoint's entries over 8 index partitions, and the entries written before).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::Utc;
use tern_core::waiting::{WaitingList, WaitingScope};
use tern_core::{DeliveryMessage, EndpointId, TenantId};
use tern_local::LocalOptions;
use tern_tests::*;

fn options() -> LocalOptions {
    LocalOptions {
        time_scale: 0.001,
        lookup: Some(no_dns()),
        console_port: None,
        ..LocalOptions::default()
    }
}

/// 64 held-back deliveries of one endpoint (listed as waiting by the ledger, as the
/// sender lists them) and one listed before the index was spread: the entries sit on the
/// 8 index partitions, and the endpoint's waiting list (`tern waiting --endpoint`, the
/// API's `waiting` count, recover) holds all 65, soonest due first; a read capped below
/// that says it is incomplete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoints_waiting_deliveries_spread_over_the_index_and_all_are_read() {
    let local = deployment_without_pollers("waiting-shards", options()).await;
    let tenant = TenantId::new("tnt_wait").unwrap();
    let endpoint = EndpointId::generate();
    let now = Utc::now();
    let mut due = Vec::new();
    for i in 0..64i64 {
        let event: tern_core::Event = serde_json::from_value(serde_json::json!({
            "id": format!("evt_wait_{i:03}"), "type": "order.paid", "tenant_id": tenant.as_str(),
            "created_at": now, "payload": {},
        }))
        .unwrap();
        let m = DeliveryMessage::first(event, endpoint.clone());
        let at = now + chrono::Duration::seconds(600 - i * 7);
        local.sender.ledger.list_waiting(&m, at).await.unwrap();
        due.push(at.timestamp_millis());
    }
    // One an older build listed, under `<tenant>#<endpoint>`.
    let old_due = now + chrono::Duration::seconds(5);
    local
        .dynamodb()
        .put_item()
        .table_name(&local.resources.attempts_table)
        .item("event_id", AttributeValue::S("evt_wait_old".into()))
        .item("sk", AttributeValue::S(format!("state#{endpoint}")))
        .item("endpoint_id", AttributeValue::S(endpoint.to_string()))
        .item("wait_ep", AttributeValue::S(format!("{tenant}#{endpoint}")))
        .item(
            "wait_due",
            AttributeValue::N(old_due.timestamp_millis().to_string()),
        )
        .item("wait_att", AttributeValue::N("1".into()))
        .send()
        .await
        .unwrap();
    due.push(old_due.timestamp_millis());
    due.sort_unstable();

    let mut keys: HashMap<String, usize> = HashMap::new();
    let scan = local
        .dynamodb()
        .scan()
        .table_name(&local.resources.attempts_table)
        .index_name(tern_aws::waiting::WAITING_INDEX)
        .send()
        .await
        .unwrap();
    for item in scan.items() {
        if let Some(AttributeValue::S(k)) = item.get("wait_ep") {
            *keys.entry(k.clone()).or_default() += 1;
        }
    }
    eprintln!("waiting entries per index partition: {keys:?}");
    assert!(
        keys.len() >= 7,
        "spread over the 8 shards (and the old key): {keys:?}"
    );
    assert!(keys.values().all(|c| *c <= 16), "{keys:?}");

    let list = tern_aws::DynamoLedger::new(local.dynamodb(), &local.resources.attempts_table, 30);
    let ledger: &dyn WaitingList = &list;
    let scope = WaitingScope::Endpoint(tenant.clone(), endpoint.clone());
    let read = ledger.waiting(&scope, 1000).await.unwrap();
    assert!(read.complete);
    let got: Vec<i64> = read
        .entries
        .iter()
        .map(|d| d.due_at.timestamp_millis())
        .collect();
    assert_eq!(got, due, "every entry, soonest due first");
    assert_eq!(read.entries[0].event_id.as_str(), "evt_wait_old");
    let capped = ledger.waiting(&scope, 10).await.unwrap();
    assert!(!capped.complete);
    assert_eq!(
        capped
            .entries
            .iter()
            .map(|d| d.due_at.timestamp_millis())
            .collect::<Vec<_>>(),
        due[..10],
        "the soonest ten"
    );
    // The tenant's and everyone's reads (a Scan) see them all too.
    let tenant_read = ledger
        .waiting(&WaitingScope::Tenant(tenant.clone()), 1000)
        .await
        .unwrap();
    assert_eq!(tenant_read.entries.len(), 65);
}
