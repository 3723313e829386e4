//! Issue 27, item 3: reading the shared DLQ must never hide another tenant's dead letters.
//! Two tenants with dead letters in the one DLQ; tenant B lists its own, dry-runs and runs
//! a replay in a loop while tenant A lists and dry-runs, and the operator lists: every one
//! of A's reads shows all of A's dead letters, every time. Before the dead-letter record
//! (lists received the DLQ's messages and held them hidden for 30 s while they read) A saw
//! 0 to 13 of its 24 and its dry run matched 0 of 4. On moto, through the API as a client
//! calls it, with receivers on 127.0.0.1.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tern_local::LocalOptions;
use tern_tests::api::ApiClient;
use tern_tests::*;

/// Dead letters each tenant has.
const EACH: usize = 24;

/// Rounds of A's reads while B reads and replays.
const ROUNDS: usize = 6;

const WAIT: Duration = Duration::from_secs(60);

fn options() -> LocalOptions {
    LocalOptions {
        time_scale: 0.001,
        lookup: Some(no_dns()),
        console_port: None,
        ..LocalOptions::default()
    }
}

/// Dead letters in a list answer: the sum of its groups' counts.
fn listed(answer: &Value) -> u64 {
    answer["groups"]
        .as_array()
        .map(|g| g.iter().map(|g| g["count"].as_u64().unwrap_or(0)).sum())
        .unwrap_or(0)
}

async fn make_dead_letters(api: &ApiClient, tenant: &str, url: &str) {
    let created = api
        .post(
            &format!("/v1/tenants/{tenant}/endpoints"),
            &json!({"url": url, "max_attempts": 1}),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
    for i in 0..EACH {
        let published = api
            .post(
                &format!("/v1/tenants/{tenant}/events"),
                &json!({"id": format!("evt_{tenant}_{i}"), "type": "order.paid", "payload": {"n": i}}),
            )
            .await;
        assert_eq!(published.status, 202, "{}", published.text);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_sees_all_its_dead_letters_while_another_lists_and_replays() {
    let receiver = Receiver::start().await.expect("receiver");
    receiver.set("/dead", Behavior::Always(Reply::status(500)));
    let (mut local, _rx) = deployment("dlq-tenants", options()).await;
    local
        .start_api(0, tern_local::api::local_credentials())
        .expect("the local API starts");
    let api = ApiClient::of(&local);
    make_dead_letters(&api, "tnt_a", &receiver.url("/dead")).await;
    make_dead_letters(&api, "tnt_b", &receiver.url("/dead")).await;
    // Both tenants' dead letters are listed (each list reads the tenant's own record).
    for tenant in ["tnt_a", "tnt_b"] {
        let path = format!("/v1/tenants/{tenant}/dead-letters");
        assert!(
            eventually(WAIT, async || listed(&api.get(&path).await.json)
                == EACH as u64)
            .await,
            "{tenant}'s {EACH} dead letters are listed: {}",
            api.get(&path).await.text
        );
    }

    // B lists, dry-runs and replays its own, in a loop, until A is done.
    let stop = Arc::new(AtomicBool::new(false));
    let b_rounds = Arc::new(AtomicUsize::new(0));
    let b = {
        let (api, stop, b_rounds) = (api.clone(), stop.clone(), b_rounds.clone());
        tokio::spawn(async move {
            let path = "/v1/tenants/tnt_b/dead-letters";
            let mut replayed = 0;
            while !stop.load(Ordering::Relaxed) {
                let list = api.get(path).await;
                assert_eq!(list.status, 200, "{}", list.text);
                let dry = api
                    .post(&format!("{path}/replay"), &json!({"dry_run": true}))
                    .await;
                assert_eq!(dry.status, 200, "{}", dry.text);
                let list = api.get(path).await;
                assert_eq!(list.status, 200, "{}", list.text);
                // Each run replays at most one of B's (a replay of B's moves B's only).
                let run = api
                    .post(
                        &format!("{path}/replay"),
                        &json!({"force": true, "event_id": format!("evt_tnt_b_{}", replayed % EACH)}),
                    )
                    .await;
                assert_eq!(run.status, 200, "{}", run.text);
                replayed += 1;
                b_rounds.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    // B is under way before A reads.
    assert!(
        eventually(WAIT, async || b_rounds.load(Ordering::Relaxed) >= 1).await,
        "B's loop runs"
    );
    let mut seen = Vec::new();
    let mut matched = Vec::new();
    let mut operator = Vec::new();
    for _ in 0..ROUNDS {
        let list = api.get("/v1/tenants/tnt_a/dead-letters").await;
        assert_eq!(list.status, 200, "{}", list.text);
        seen.push(listed(&list.json));
        let dry = api
            .post(
                "/v1/tenants/tnt_a/dead-letters/replay",
                &json!({"dry_run": true}),
            )
            .await;
        assert_eq!(dry.status, 200, "{}", dry.text);
        matched.push(dry.json["matched"].as_u64().unwrap_or(0));
        let all = operator_list(&local).await;
        operator.push(all.iter().filter(|t| t.as_str() == "tnt_a").count());
    }
    stop.store(true, Ordering::Relaxed);
    b.await.expect("B's loop");
    assert_eq!(
        seen,
        vec![EACH as u64; ROUNDS],
        "A's lists: all of A's, every time"
    );
    assert_eq!(
        matched,
        vec![EACH as u64; ROUNDS],
        "A's dry runs: all of A's, every time"
    );
    assert_eq!(
        operator,
        vec![EACH; ROUNDS],
        "the operator's list: all of A's, every time"
    );
    // Nothing of A's moved.
    let a_left = dead_letters(&local)
        .await
        .iter()
        .filter(|m| m.event.tenant_id.as_str() == "tnt_a")
        .count();
    assert_eq!(a_left, EACH, "A's dead letters are all in the DLQ");
}

/// The tenants of the dead letters the operator's list shows (`tern dlq`: every tenant's
/// record), one per dead letter.
async fn operator_list(local: &tern_local::local::LocalTern) -> Vec<String> {
    let read = tern_ops::dlq::read_record(
        local.sender.ledger.as_ref(),
        local.sender.endpoints.as_ref(),
        None,
        None,
        500,
    )
    .await
    .expect("the operator reads the record");
    read.entries
        .iter()
        .map(|r| r.tenant_id.to_string())
        .collect()
}

/// What one tenant's list costs, counted on the wire (moto behind the fault proxy): 32
/// DynamoDB Queries (one per shard of the record), one `BatchGetItem` for its 24 entries'
/// state items, and not one `ChangeMessageVisibility` (before the record: a receive per 10
/// messages of every tenant and a `ChangeMessageVisibility` per message).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_reads_the_record_and_touches_no_queue_message() {
    use tern_tests::fault_proxy::Service;
    let receiver = Receiver::start().await.expect("receiver");
    receiver.set("/dead", Behavior::Always(Reply::status(500)));
    let proxy = moto_proxy().await;
    let (mut local, _rx) = deployment_through(&proxy, "dlq-cost", options()).await;
    local
        .start_api(0, tern_local::api::local_credentials())
        .expect("the local API starts");
    let api = ApiClient::of(&local);
    make_dead_letters(&api, "tnt_a", &receiver.url("/dead")).await;
    let path = "/v1/tenants/tnt_a/dead-letters";
    assert!(
        eventually(WAIT, async || listed(&api.get(path).await.json)
            == EACH as u64)
        .await,
        "A's dead letters are listed"
    );
    let count = |service: &Service, op: &str| proxy.count(service, op);
    let before = (
        count(&Service::DynamoDb, "Query"),
        count(&Service::DynamoDb, "BatchGetItem"),
        count(&Service::Sqs, "ChangeMessageVisibility"),
    );
    let list = api.get(path).await;
    assert_eq!(listed(&list.json), EACH as u64, "{}", list.text);
    let after = (
        count(&Service::DynamoDb, "Query"),
        count(&Service::DynamoDb, "BatchGetItem"),
        count(&Service::Sqs, "ChangeMessageVisibility"),
    );
    assert_eq!(
        (after.0 - before.0, after.1 - before.1, after.2 - before.2),
        (tern_core::dead_letters::DEAD_LETTER_SHARDS as usize, 1, 0),
        "one list: a Query per shard, one BatchGetItem, no message hidden or released"
    );
}
