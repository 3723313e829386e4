//! The delivery ledger's keys (issue 29, "no hot key"), on moto with real receivers on
//! 127.0.0.1: a big fan-out spreads its pairs over the sharded partitions and is still
//! accounted for pair by pair; a pair that began under the old layout (a version 1
//! message: queued, delayed or dead-lettered before the upgrade) keeps it to the end, its
//! claim and its delivered marker on one item; the readers (history, pair states, one
//! pair's state, the dead-letter record, resend) see both layouts.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use tern_core::ports::DeliveryState;
use tern_core::spread::{LedgerLayout, PAIR_SHARDS};
use tern_core::{DeliveryMessage, TenantId};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::sender::MessageOutcome;
use tern_local::LocalOptions;
use tern_local::local::LocalTern;
use tern_tests::*;

fn options() -> LocalOptions {
    LocalOptions {
        time_scale: 0.001,
        lookup: Some(no_dns()),
        console_port: None,
        ..LocalOptions::default()
    }
}

fn metrics() -> Metrics {
    Metrics::new("Tern", MetricsSink::Discard)
}

/// Every item of the attempts table, by its partition key: the sort keys under each.
async fn partitions(local: &LocalTern) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut start = None;
    loop {
        let page = local
            .dynamodb()
            .scan()
            .table_name(&local.resources.attempts_table)
            .set_exclusive_start_key(start)
            .send()
            .await
            .expect("scan the attempts table");
        for item in page.items() {
            let text = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
            if let (Some(pk), Some(sk)) = (text("event_id"), text("sk")) {
                out.entry(pk).or_default().push(sk);
            }
        }
        start = page.last_evaluated_key.filter(|k| !k.is_empty());
        if start.is_none() {
            return out;
        }
    }
}

/// One event fanned out to 200 endpoints through the relay and the sender: its pairs land
/// on most of the 64 sharded partitions (none under the event id), and `tern audit`'s code
/// accounts for every one of them as delivered. Before the sharded layout every item of
/// the fan-out had one partition key, the event id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_fan_out_spreads_its_pairs_and_the_audit_accounts_for_every_one() {
    const ENDPOINTS: usize = 200;
    let receiver = Receiver::start().await.expect("receiver");
    let (local, _events) = deployment("ledger-fan-out", options()).await;
    let tenant = "tnt_fan";
    for _ in 0..ENDPOINTS {
        add_endpoint(&local, tenant, &receiver.url("/ok"), &["*"], None).await;
    }
    let since = chrono::Utc::now() - chrono::Duration::seconds(5);
    let id = publish(&local, "order.paid", tenant, r#"{"fan":"out"}"#).await;
    let got = receiver
        .wait_for("/ok", ENDPOINTS, Duration::from_secs(240))
        .await;
    assert_eq!(got.len(), ENDPOINTS, "every endpoint received the event");
    let t = TenantId::new(tenant).unwrap();
    let ledger = local.sender.ledger.clone();
    assert!(
        eventually(Duration::from_secs(60), async || {
            ledger.pair_states(&t, &id).await.is_ok_and(|s| {
                s.len() == ENDPOINTS && s.iter().all(|p| p.state == Some(DeliveryState::Delivered))
            })
        })
        .await,
        "every pair is delivered in the ledger"
    );

    let all = partitions(&local).await;
    let prefix = format!("ev#{tenant}#{id}#");
    let shards: HashMap<&String, usize> = all
        .iter()
        .filter(|(pk, _)| pk.starts_with(&prefix))
        .map(|(pk, sks)| (pk, sks.iter().filter(|sk| sk.starts_with("state#")).count()))
        .collect();
    let most = shards.values().max().copied().unwrap_or(0);
    eprintln!(
        "200-endpoint fan-out: pair items on {} distinct partition keys (of {PAIR_SHARDS}), at most {most} pairs on one; before: 1",
        shards.len()
    );
    // 200 endpoints over 64 shards: each shard is empty with probability (63/64)^200,
    // 4.4 % (2.8 expected empty); fewer than 48 in use would take 17 empty ones.
    assert!(
        shards.len() >= 48,
        "{} partitions: {shards:?}",
        shards.len()
    );
    assert_eq!(
        shards.values().sum::<usize>(),
        ENDPOINTS,
        "one state item per pair"
    );
    // The event id's own partition holds only the relay's record (the spread, for
    // readers): no pair.
    let unsharded = all.get(id.as_str()).cloned().unwrap_or_default();
    assert_eq!(
        unsharded,
        vec![tern_aws::fanout::checkpoint_sk(&t)],
        "only the fan-out record under the event id"
    );
    let history = ledger.history(&t, &id).await.unwrap();
    assert_eq!(
        history.iter().filter(|r| r.outcome == "delivered").count(),
        ENDPOINTS
    );

    // `tern audit`'s code accounts for every pair.
    let outbox = tern_aws::DynamoOutboxReader::new(local.dynamodb(), &local.resources.outbox_table);
    let endpoints = local.endpoint_table();
    let health = tern_aws::DynamoHealthStore::new(local.dynamodb(), &local.resources.health_table);
    let dlq = tern_aws::SqsQueue::new(local.sqs(), &local.resources.dlq_url);
    let parked = tern_aws::SqsQueue::new(local.sqs(), &local.resources.relay_failure_queue_url);
    let delivery = tern_aws::SqsQueue::new(local.sqs(), &local.resources.delivery_queue_url);
    let env = local.env.clone();
    let lookup = move |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let rules = tern_ops::audit::rules_from_env(
        &tern_handlers::config::Env(&lookup),
        Duration::from_secs(60),
    )
    .unwrap();
    let mut request = tern_ops::audit::AuditRequest::new(
        since,
        chrono::Utc::now() + chrono::Duration::minutes(1),
    );
    request.tenant = Some(t.clone());
    request.concurrency = 4;
    let report = tern_ops::audit::audit(
        tern_ops::audit::AuditStores {
            outbox: &outbox,
            ledger: ledger.as_ref(),
            endpoints: &endpoints,
            health: Some(&health),
            dlq: &dlq,
            relay_failures: &parked,
            delivery_queue: Some(&delivery),
        },
        &request,
        &rules,
    )
    .await
    .unwrap();
    assert_eq!(report.totals.delivered, ENDPOINTS, "{report:#?}");
    assert_eq!(report.totals.unaccounted, 0, "{report:#?}");
}

/// A version 1 message (written before the upgrade) of a pair whose first attempt fails:
/// its claim, the retry the sender queues, that retry's claim and the delivered marker
/// all stay in the unsharded layout (the event id's partition), the retry message stays
/// version 1, and nothing of the pair appears under the sharded keys. The readers find
/// its attempts with the tenant's other pairs (a version 2 message of another endpoint of
/// the same event, sharded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pair_that_began_unsharded_finishes_unsharded_and_readers_see_both_layouts() {
    let receiver = Receiver::start().await.expect("receiver");
    receiver.set(
        "/old",
        Behavior::Script(vec![Reply::status(503), Reply::status(200)]),
    );
    let local = deployment_without_pollers("ledger-old-layout", options()).await;
    let tenant = "tnt_upgrade";
    let old_ep = add_endpoint(&local, tenant, &receiver.url("/old"), &["*"], None).await;
    let new_ep = add_endpoint(&local, tenant, &receiver.url("/new"), &["*"], None).await;
    let event: tern_core::Event = serde_json::from_value(serde_json::json!({
        "id": tern_core::EventId::generate().as_str(), "type": "order.paid",
        "tenant_id": tenant, "created_at": chrono::Utc::now(), "payload": {"n": 1},
    }))
    .unwrap();
    let old =
        DeliveryMessage::first(event.clone(), old_ep.id.clone()).in_layout(LedgerLayout::Unsharded);
    // The body as a version 1 build wrote it: no field this build added.
    let old_body = old.to_body();
    assert!(old_body.contains(r#""version":1"#), "{old_body}");
    let new = DeliveryMessage::first(event.clone(), new_ep.id.clone());
    assert_eq!(new.version, tern_core::message::MESSAGE_VERSION);

    let send = async |body: String| {
        let (response, results) =
            tern_handlers::sender::handle(&local.sender, sqs_event(&[body]), &metrics()).await;
        assert!(response.batch_item_failures.is_empty(), "{results:?}");
        results[0].1.clone()
    };
    let first = send(old_body).await;
    assert!(
        matches!(first, Ok(MessageOutcome::Retrying { .. })),
        "{first:?}"
    );
    assert_eq!(
        send(new.to_body()).await,
        Ok(MessageOutcome::Delivered { attempt: 1 })
    );
    // The retry the sender queued is version 1 still.
    let mut retry = None;
    assert!(
        eventually(Duration::from_secs(30), async || {
            retry = peek_queue(&local, &local.resources.delivery_queue_url)
                .await
                .into_iter()
                .next();
            retry.is_some()
        })
        .await,
        "the retry is queued"
    );
    let retry = retry.unwrap();
    let parsed = DeliveryMessage::parse(&retry).unwrap();
    assert_eq!((parsed.attempt, parsed.version), (2, 1), "{retry}");
    assert_eq!(parsed.ledger_layout(), LedgerLayout::Unsharded);
    assert_eq!(
        send(retry).await,
        Ok(MessageOutcome::Delivered { attempt: 2 })
    );
    assert_eq!(receiver.requests("/old").len(), 2);

    // Where the items are: the old pair's under the event id, claim and marker on one
    // item; the new pair's under the tenant's sharded partition.
    let all = partitions(&local).await;
    let bare = all.get(event.id.as_str()).cloned().unwrap_or_default();
    let old_state = format!("state#{}", old_ep.id);
    assert!(bare.contains(&old_state), "{bare:?}");
    assert!(
        !bare.contains(&format!("state#{}", new_ep.id)),
        "the new pair is not unsharded: {bare:?}"
    );
    let sharded: Vec<(&String, &Vec<String>)> = all
        .iter()
        .filter(|(pk, _)| pk.starts_with(&format!("ev#{tenant}#{}#", event.id)))
        .collect();
    assert_eq!(sharded.len(), 1, "{sharded:?}");
    assert_eq!(sharded[0].0, &format!("ev#{tenant}#{}#00", event.id));
    assert!(
        sharded[0]
            .1
            .iter()
            .all(|sk| !sk.contains(old_ep.id.as_str())),
        "nothing of the old pair is sharded: {sharded:?}"
    );
    let item = local
        .dynamodb()
        .get_item()
        .table_name(&local.resources.attempts_table)
        .key("event_id", AttributeValue::S(event.id.to_string()))
        .key("sk", AttributeValue::S(old_state))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .expect("the old pair's state item");
    assert!(
        item.contains_key("delivered_at"),
        "delivered on the claim's item"
    );
    assert_eq!(
        item.get("claim_key")
            .and_then(|v| v.as_n().ok())
            .map(String::as_str),
        Some("2"),
        "its last claim (attempt 2) on the same item"
    );

    // The readers see both layouts.
    let t = &event.tenant_id;
    let ledger = local.sender.ledger.clone();
    let history = ledger.history(t, &event.id).await.unwrap();
    let of = |ep: &tern_core::EndpointId| {
        history
            .iter()
            .filter(|r| &r.endpoint_id == ep)
            .map(|r| (r.attempt, r.outcome.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        of(&old_ep.id),
        [(1, "retry".into()), (2, "delivered".into())]
    );
    assert_eq!(of(&new_ep.id), [(1, "delivered".into())]);
    let states = ledger.pair_states(t, &event.id).await.unwrap();
    let layouts: Vec<(String, LedgerLayout, Option<DeliveryState>)> = states
        .iter()
        .map(|s| (s.endpoint_id.to_string(), s.ledger, s.state))
        .collect();
    assert_eq!(layouts.len(), 2, "{layouts:?}");
    for (ep, layout) in [
        (&old_ep, LedgerLayout::Unsharded),
        (&new_ep, LedgerLayout::Sharded { shards: 1 }),
    ] {
        let one = ledger.pair_state(t, &event.id, &ep.id).await.unwrap();
        assert_eq!(
            one.map(|s| (s.ledger, s.state)),
            Some((layout, Some(DeliveryState::Delivered)))
        );
    }

    // A manual resend of the old pair is written in its layout: its claim meets the
    // pair's (version 1), and is sent once.
    let resend = tern_ops::resend::resend_event(
        &tern_ops::resend::ResendDeps {
            endpoints: local.sender.endpoints.as_ref(),
            events: &tern_aws::DynamoEventStore::new(
                local.dynamodb(),
                &local.resources.outbox_table,
                7,
            ),
            ledger: ledger.as_ref(),
            delivery_queue: local.sender.delivery_queue.as_ref(),
        },
        &old_ep,
        event.clone(),
    )
    .await
    .unwrap();
    assert_eq!(resend.replay_count, 1);
    let queued = peek_queue(&local, &local.resources.delivery_queue_url).await;
    let resent = queued
        .iter()
        .filter_map(|b| DeliveryMessage::parse(b).ok())
        .find(|m| m.resend)
        .expect("the resend is queued");
    assert_eq!(resent.ledger_layout(), LedgerLayout::Unsharded);
}

/// The dead-letter record checks each entry against its pair's state item where its
/// layout keeps it: a dead letter of a version 1 pair and one of a pair of a spread event
/// (64 partitions) both leave the list once their pair is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_of_either_layout_leave_the_record_when_their_pair_is_delivered() {
    let local = deployment_without_pollers("ledger-dead-letters", options()).await;
    let ledger = local.sender.ledger.clone();
    let tenant = TenantId::new("tnt_dl").unwrap();
    let event: tern_core::Event = serde_json::from_value(serde_json::json!({
        "id": tern_core::EventId::generate().as_str(), "type": "order.paid",
        "tenant_id": tenant.as_str(), "created_at": chrono::Utc::now(), "payload": {},
    }))
    .unwrap();
    let wide = LedgerLayout::Sharded {
        shards: PAIR_SHARDS,
    };
    let mut messages = Vec::new();
    for (ep, layout) in [("ep_old", LedgerLayout::Unsharded), ("ep_wide", wide)] {
        let m = DeliveryMessage::first(event.clone(), tern_core::EndpointId::new(ep).unwrap())
            .in_layout(layout);
        let lease = chrono::Utc::now() + chrono::Duration::minutes(5);
        assert_eq!(
            ledger.claim(&m, lease).await.unwrap(),
            tern_core::ports::Claim::Granted
        );
        ledger
            .finish(&m, DeliveryState::DeadLettered)
            .await
            .unwrap();
        let dead = m.dead_lettered(tern_core::DeadLetter {
            reason: tern_core::DeadLetterReason::Exhausted,
            last_status: Some(500),
            last_error: None,
            attempts: 1,
            at: chrono::Utc::now(),
        });
        ledger.record_dead_letter(&dead).await.unwrap();
        messages.push(m);
    }
    let query = tern_core::dead_letters::DeadLetterQuery {
        tenant: tenant.clone(),
        endpoint: None,
        max: 100,
    };
    let listed = |r: &tern_core::dead_letters::DeadLetterRead| {
        r.entries
            .iter()
            .map(|e| (e.endpoint_id.to_string(), e.ledger))
            .collect::<Vec<_>>()
    };
    let read = ledger.dead_letters(&query).await.unwrap();
    assert_eq!(
        listed(&read),
        [
            ("ep_old".to_owned(), LedgerLayout::Unsharded),
            ("ep_wide".to_owned(), wide)
        ]
    );
    // Each pair delivered by a replay of its budget (same layout): gone from the list.
    for m in &messages {
        let replayed = m.replayed();
        let lease = chrono::Utc::now() + chrono::Duration::minutes(5);
        assert_eq!(
            ledger.claim(&replayed, lease).await.unwrap(),
            tern_core::ports::Claim::Granted
        );
        ledger
            .finish(&replayed, DeliveryState::Delivered)
            .await
            .unwrap();
    }
    let read = ledger.dead_letters(&query).await.unwrap();
    assert!(read.entries.is_empty(), "{:?}", listed(&read));
    assert_eq!(read.read, 2, "both entries were read, then dropped");
}
