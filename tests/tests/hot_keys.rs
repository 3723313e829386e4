//! The keys one endpoint writes at the rate of its traffic are spread (issue 29, "no hot
//! key"), and their readers read every shard exactly, on moto: the endpoint log (pages
//! across its 4 partitions and the one written before the spread: no line lost, none
//! repeated), the waiting list (an endpoint's entries over 8 index partitions, and the
//! entries written before) and the health records (one partition key per endpoint; a
//! tenant's listing through its index finds every one).

use std::collections::{BTreeSet, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use tern_core::delivery_log::{EndpointLogEntry, EndpointLogQuery, LogPosition, OutcomeFilter};
use tern_core::ports::AttemptRecord;
use tern_core::waiting::{WaitingList, WaitingScope};
use tern_core::{DeliveryMessage, EndpointId, EventId, TenantId};
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

/// A deterministic stream of numbers (a linear congruential generator).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

fn record(endpoint: &EndpointId, n: usize, at: DateTime<Utc>, failed: bool) -> AttemptRecord {
    AttemptRecord {
        event_id: EventId::new(format!("evt_log_{n:04}")).unwrap(),
        endpoint_id: endpoint.clone(),
        replay_count: 0,
        attempt: 1,
        takeover: 0,
        started_at: at,
        latency_ms: 9,
        status: Some(if failed { 503 } else { 200 }),
        error_class: None,
        error: None,
        location: None,
        response_excerpt: None,
        excerpt_truncated: false,
        outcome: if failed { "retry" } else { "delivered" }.into(),
        next_wait_seconds: None,
    }
}

/// Every item key (`event_id`) the attempts table holds, with its item count.
async fn partition_counts(local: &LocalTern) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    let mut start = None;
    loop {
        let page = local
            .dynamodb()
            .scan()
            .table_name(&local.resources.attempts_table)
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap();
        for item in page.items() {
            if let Some(AttributeValue::S(pk)) = item.get("event_id") {
                *out.entry(pk.clone()).or_default() += 1;
            }
        }
        start = page.last_evaluated_key.filter(|k| !k.is_empty());
        if start.is_none() {
            return out;
        }
    }
}

/// All pages of `query`, following the cursors; the entries in the order read.
async fn every_page(local: &LocalTern, query: EndpointLogQuery) -> (Vec<EndpointLogEntry>, usize) {
    let mut out = Vec::new();
    let mut before: Option<LogPosition> = None;
    let mut pages = 0;
    loop {
        pages += 1;
        assert!(pages <= 1_000, "the pages never end");
        let page = local
            .sender
            .ledger
            .endpoint_log(&EndpointLogQuery {
                before: before.clone(),
                ..query.clone()
            })
            .await
            .unwrap();
        out.extend(page.entries);
        match page.next {
            Some(next) => before = Some(next),
            None => return (out, pages),
        }
    }
}

/// About 360 attempt lines in 120 batches (1 to 5 lines each, starts up to 2 s apart within a
/// batch, batches overlapping in time, several in one millisecond), plus 30 lines in items
/// written before the log was spread (under the unspread key): every page size reads
/// each line once, newest first, with and without an outcome filter; the items sit on
/// all 4 shards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_log_pages_over_its_shards_with_no_line_lost_or_repeated() {
    let local = deployment_without_pollers("log-shards", options()).await;
    let endpoint = EndpointId::generate();
    let base: DateTime<Utc> = "2026-12-01T10:00:00Z".parse().unwrap();
    let mut rng = Lcg(29);
    let mut written: Vec<EndpointLogEntry> = Vec::new();
    let mut n = 0;
    for _ in 0..120 {
        // Batches land in a 2-minute window, several sharing a millisecond.
        let start = base
            + chrono::Duration::milliseconds(
                i64::try_from(rng.below(120) * 1000 + rng.below(3)).unwrap(),
            );
        let lines = 1 + rng.below(5) as usize;
        let batch: Vec<AttemptRecord> = (0..lines)
            .map(|_| {
                n += 1;
                let at =
                    start + chrono::Duration::milliseconds(i64::try_from(rng.below(2000)).unwrap());
                record(&endpoint, n, at, rng.below(4) == 0)
            })
            .collect();
        written.extend(batch.iter().map(EndpointLogEntry::of));
        local
            .sender
            .ledger
            .append_endpoint_log(&batch)
            .await
            .unwrap();
    }
    // Items an older build wrote, under `log#<endpoint>`.
    for item in 0..6 {
        let lines: Vec<EndpointLogEntry> = (0..5)
            .map(|_| {
                n += 1;
                let at = base
                    + chrono::Duration::milliseconds(
                        item * 20_000 + i64::try_from(rng.below(1000)).unwrap(),
                    );
                EndpointLogEntry::of(&record(&endpoint, n, at, rng.below(3) == 0))
            })
            .collect();
        let latest = lines
            .iter()
            .map(|e| e.started_at.timestamp_millis())
            .max()
            .unwrap();
        local
            .dynamodb()
            .put_item()
            .table_name(&local.resources.attempts_table)
            .item("event_id", AttributeValue::S(format!("log#{endpoint}")))
            .item("sk", AttributeValue::S(format!("{latest:013}#old{item}")))
            .item(
                "entries",
                AttributeValue::S(
                    lines
                        .iter()
                        .map(EndpointLogEntry::to_line)
                        .collect::<Vec<_>>()
                        .join("\n"),
                ),
            )
            .send()
            .await
            .unwrap();
        written.extend(lines);
    }
    let counts = partition_counts(&local).await;
    let shards: Vec<usize> = (0..tern_core::spread::LOG_SHARDS)
        .map(|s| {
            counts
                .get(&format!("log#{endpoint}#{s}"))
                .copied()
                .unwrap_or(0)
        })
        .collect();
    eprintln!("log items per shard: {shards:?} (and 6 unspread)");
    assert!(
        shards.iter().all(|c| *c >= 20),
        "every shard takes its share: {shards:?}"
    );

    let key = |e: &EndpointLogEntry| e.position();
    for (limit, outcome) in [
        (2, None),
        (7, None),
        (100, None),
        (13, Some(OutcomeFilter::Failed)),
        (100, Some(OutcomeFilter::Delivered)),
    ] {
        let (read, pages) = every_page(
            &local,
            EndpointLogQuery {
                endpoint_id: endpoint.clone(),
                since: None,
                until: None,
                outcome,
                limit,
                before: None,
            },
        )
        .await;
        let want: BTreeSet<LogPosition> = written
            .iter()
            .filter(|e| outcome.is_none_or(|o| o.matches(&e.outcome)))
            .map(key)
            .collect();
        let got: Vec<LogPosition> = read.iter().map(key).collect();
        let distinct: BTreeSet<LogPosition> = got.iter().cloned().collect();
        assert_eq!(
            distinct.len(),
            got.len(),
            "limit {limit}: a line repeated across pages"
        );
        assert_eq!(
            distinct, want,
            "limit {limit} {outcome:?}: lines lost or foreign"
        );
        assert!(
            got.windows(2).all(|w| w[0] > w[1]),
            "limit {limit}: not newest first"
        );
        eprintln!(
            "limit {limit} {outcome:?}: {} lines in {pages} pages",
            got.len()
        );
    }
    // A time window reads only its lines, exactly.
    let (since, until) = (
        base + chrono::Duration::seconds(30),
        base + chrono::Duration::seconds(60),
    );
    let (read, _) = every_page(
        &local,
        EndpointLogQuery {
            endpoint_id: endpoint.clone(),
            since: Some(since),
            until: Some(until),
            outcome: None,
            limit: 9,
            before: None,
        },
    )
    .await;
    let want: BTreeSet<LogPosition> = written
        .iter()
        .filter(|e| e.started_at >= since && e.started_at < until)
        .map(key)
        .collect();
    assert_eq!(read.iter().map(key).collect::<BTreeSet<_>>(), want);
    assert_eq!(read.len(), want.len());
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

/// 130 endpoints of one tenant and 3 of another, their health records written the ways the
/// sender writes them (a batch's counts; a rate-limit slot write alone; a pause alone):
/// each record has a partition key of its own, and the tenant's listing (`tern endpoints
/// health --tenant`, the API, the portal: the tenant index, then the records by key in
/// two `BatchGetItem` calls) finds exactly the tenant's 130; the full listing all 133.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_health_listing_finds_every_endpoint_and_no_two_share_a_key() {
    use tern_core::health::{HealthChange, HealthDelta, HealthSignal, HealthStore};
    let local = deployment_without_pollers("health-keys", options()).await;
    let store = tern_aws::DynamoHealthStore::new(local.dynamodb(), &local.resources.health_table);
    let (a, b) = (
        TenantId::new("tnt_many").unwrap(),
        TenantId::new("tnt_few").unwrap(),
    );
    let mut mine = std::collections::BTreeSet::new();
    let now = Utc::now();
    for i in 0..133usize {
        let (tenant, endpoint) = if i < 130 {
            (&a, EndpointId::new(format!("ep_{i:03}")).unwrap())
        } else {
            (&b, EndpointId::new(format!("ep_{i:03}")).unwrap())
        };
        match i % 3 {
            0 => {
                let mut delta = HealthDelta::new(now);
                delta.add(HealthSignal::Success { at: now });
                store
                    .record(tenant, &endpoint, &delta, 600, None)
                    .await
                    .unwrap();
            }
            1 => {
                let slots = tern_core::rate_limit::request(
                    None,
                    1,
                    tern_core::rate_limit::RateLimit::new(5).unwrap(),
                    now,
                )
                .unwrap();
                store
                    .reserve_slots(tenant, &endpoint, &slots)
                    .await
                    .unwrap();
            }
            _ => {
                let pause = HealthChange::Pause {
                    until: now + chrono::Duration::seconds(30),
                    pauses: 1,
                };
                assert!(store.apply(tenant, &endpoint, &pause, now).await.unwrap());
            }
        }
        if i < 130 {
            mine.insert(endpoint.to_string());
        }
    }
    let keys = partition_counts_of(
        &local,
        &local.resources.health_table,
        tern_aws::health::HEALTH_KEY,
    )
    .await;
    assert_eq!(keys.len(), 133, "one partition key per endpoint");
    assert!(keys.values().all(|n| *n == 1));
    let listed = store.list(Some(&a)).await.unwrap();
    let names: std::collections::BTreeSet<String> =
        listed.iter().map(|h| h.endpoint_id.to_string()).collect();
    assert_eq!(names, mine, "the tenant's endpoints, every one");
    assert!(listed.iter().all(|h| h.tenant_id == a));
    assert_eq!(store.list(Some(&b)).await.unwrap().len(), 3);
    assert_eq!(store.list(None).await.unwrap().len(), 133);
    // A record read by key is whole.
    let one = store
        .get(&a, &EndpointId::new("ep_002").unwrap())
        .await
        .unwrap()
        .expect("a paused endpoint's record");
    assert!(one.paused_until.is_some());
}

/// Item counts per partition key attribute `key` of `table`.
async fn partition_counts_of(local: &LocalTern, table: &str, key: &str) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    let mut start = None;
    loop {
        let page = local
            .dynamodb()
            .scan()
            .table_name(table)
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap();
        for item in page.items() {
            if let Some(AttributeValue::S(pk)) = item.get(key) {
                *out.entry(pk.clone()).or_default() += 1;
            }
        }
        start = page.last_evaluated_key.filter(|k| !k.is_empty());
        if start.is_none() {
            return out;
        }
    }
}
