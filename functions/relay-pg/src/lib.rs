//! The PostgreSQL relay: the `tern_outbox` table (`tern_outbox::postgres`) -> the delivery
//! queue.
//!
//! One batch ([`relay_batch`]) is one transaction:
//!
//! 1. **Claim**: `SELECT ... WHERE published_at IS NULL AND parked_reason IS NULL ORDER BY
//!    seq LIMIT n FOR UPDATE SKIP LOCKED`. Rows another relay holds are skipped, so two
//!    relays never publish the same row at once, and neither waits for the other.
//! 2. **Read** each row into an event with the stream relay's validation
//!    (`OutboxRecord::into_event`). A row that cannot be read is **parked**: its
//!    `parked_reason` is set, it is never claimed again and never blocks the rows after it.
//! 3. **Fan out** with the stream relay's code (`tern_handlers::relay::relay_events_before`):
//!    the same delivery messages, the same fan-out checkpoints, the same bounded memory.
//! 4. **Mark** `published_at = now()` on the rows whose every message SQS accepted (or,
//!    refused as a sender fault, parked in the relay-failure queue), then commit.
//!
//! A relay that dies between the send and the commit leaves its rows unpublished (the
//! transaction never commits; PostgreSQL releases the locks when the session ends, at the
//! latest after [`IDLE_IN_TRANSACTION_TIMEOUT`]); the next claim publishes them again and
//! the sender's claim in the attempt ledger stops a second POST of each (event, endpoint).
//!
//! [`PgRelay::run_until`] polls for the rest of an invocation and deletes published rows
//! older than the retention. Every database call has a deadline ([`DB_CALL_TIMEOUT`], and
//! the invocation's).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tern_core::Event;
use tern_core::outbox::{KEY_SEPARATOR, OUTBOX_RECORD_KIND, OUTBOX_SCHEMA_VERSION, OutboxRecord};
use tern_handlers::config::PgRelayConfig;
use tern_handlers::metrics::Metrics;
use tern_handlers::relay::{RecordOutcome, RelayDeps, SEND_RESERVE, relay_events_before};
use tokio::time::Instant;
use tokio_postgres::{Client, Row};

pub mod tls;
pub use tls::{RustlsConnect, TlsSetupError};

/// Longest any one database call may take: 5 s (also the session's `statement_timeout`,
/// so PostgreSQL cancels a statement the relay stopped waiting for). A claim or a mark
/// on the partial index takes milliseconds; 5 s is a database in trouble.
pub const DB_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Time kept after a batch's fan-out for marking its rows and committing: 3 s (two
/// statements and a commit, each well under a second on a healthy database).
pub const MARK_RESERVE: Duration = Duration::from_secs(3);

/// Longest one batch sends for: 20 s. Its claimed rows stay locked (and the transaction
/// open) while it sends, so a batch is kept well inside [`IDLE_IN_TRANSACTION_TIMEOUT`];
/// a fan-out larger than that resumes from its checkpoint in the next batch.
pub const BATCH_SEND_BUDGET: Duration = Duration::from_secs(20);

/// The session's `idle_in_transaction_session_timeout`: 60 s. A relay frozen or killed
/// while it holds a claim (its transaction idle while it sends) loses its session after
/// this, and its rows are claimed by the next relay.
pub const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

/// Rows one retention `DELETE` removes at most: 1,000, so a long backlog of published rows
/// is deleted in short statements (each well inside [`DB_CALL_TIMEOUT`]).
pub const RETENTION_DELETE_ROWS: i64 = 1000;

/// The claim. `FOR UPDATE SKIP LOCKED`: rows another relay's open claim holds are skipped.
const CLAIM: &str = "SELECT seq, tenant_id, event_id, event_type, created_at, payload, \
     traceparent, tracestate FROM tern_outbox \
     WHERE published_at IS NULL AND parked_reason IS NULL \
     ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED";

const MARK: &str = "UPDATE tern_outbox SET published_at = now() WHERE seq = ANY($1)";

const PARK: &str = "UPDATE tern_outbox AS t SET parked_reason = p.reason, parked_at = now() \
     FROM unnest($1::bigint[], $2::text[]) AS p(seq, reason) WHERE t.seq = p.seq";

const DELETE_PUBLISHED: &str = "DELETE FROM tern_outbox WHERE seq IN (SELECT seq FROM tern_outbox \
     WHERE published_at < now() - make_interval(secs => $1) ORDER BY published_at LIMIT $2)";

const OLDEST_UNPUBLISHED: &str = "SELECT EXTRACT(EPOCH FROM now() - inserted_at)::float8 \
     FROM tern_outbox WHERE published_at IS NULL AND parked_reason IS NULL ORDER BY seq LIMIT 1";

/// Why a batch or a database call failed. Every one leaves the claimed rows unpublished:
/// they are claimed again.
#[derive(Debug, thiserror::Error)]
pub enum PgRelayError {
    /// PostgreSQL refused or lost a call.
    #[error("database call failed ({what}): {source}")]
    Database {
        /// The call (`claim`, `mark`, `commit`...).
        what: &'static str,
        /// The driver's error.
        source: tokio_postgres::Error,
    },
    /// A call did not answer within [`DB_CALL_TIMEOUT`] or before the deadline.
    #[error("database call did not answer in time ({what})")]
    Timeout {
        /// The call.
        what: &'static str,
    },
}

/// What one batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchSummary {
    /// Rows claimed.
    pub claimed: usize,
    /// Rows marked published (every delivery message accepted by SQS or parked).
    pub published: usize,
    /// Rows parked as unreadable (`parked_reason` set).
    pub parked: usize,
    /// Delivery messages SQS accepted for the published rows.
    pub deliveries: usize,
    /// Why the fan-out stopped before every claimed row was published (they are claimed
    /// again by the next batch), if it did.
    pub unfinished: Option<String>,
}

/// `work` within [`DB_CALL_TIMEOUT`] and before `deadline`.
async fn db<T>(
    deadline: Instant,
    what: &'static str,
    work: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, PgRelayError> {
    let by = deadline.min(Instant::now() + DB_CALL_TIMEOUT);
    match tokio::time::timeout_at(by, work).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(PgRelayError::Database { what, source }),
        Err(_) => Err(PgRelayError::Timeout { what }),
    }
}

/// Connects to the database (`url`: a libpq connection string or URL) and sets the
/// session's timeouts ([`DB_CALL_TIMEOUT`], [`IDLE_IN_TRANSACTION_TIMEOUT`]). The
/// connection's I/O runs on a spawned task until the client is dropped.
///
/// TLS as [`tls`] says: the server's certificate verified against `tls`'s roots, and
/// required when the URL says `sslmode=require`.
///
/// # Errors
/// [`PgRelayError`] when the database does not answer within [`DB_CALL_TIMEOUT`], its
/// certificate does not verify, or it refuses the session.
pub async fn connect(
    url: &str,
    tls: &RustlsConnect,
    deadline: Instant,
) -> Result<Client, PgRelayError> {
    let (client, connection) = db(
        deadline,
        "connect",
        tokio_postgres::connect(url, tls.clone()),
    )
    .await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::warn!(%error, "outbox database connection closed");
        }
    });
    let session = format!(
        "SET application_name = 'tern-relay-pg'; SET statement_timeout = {}; \
         SET idle_in_transaction_session_timeout = {}",
        DB_CALL_TIMEOUT.as_millis(),
        IDLE_IN_TRANSACTION_TIMEOUT.as_millis()
    );
    db(deadline, "session settings", client.batch_execute(&session)).await?;
    Ok(client)
}

/// Reads one claimed row into an event, with the stream relay's validation (ids, event
/// type, payload: a JSON object within `max_payload_bytes`, sendable). A `traceparent`
/// W3C Trace Context refuses is dropped with a warning, as the stream relay does.
///
/// # Errors
/// The reason the row cannot be relayed, stored as its `parked_reason`.
pub fn read_row(row: &Row, max_payload_bytes: usize) -> Result<Event, String> {
    let text = |column: &str| -> Result<String, String> {
        row.try_get::<_, String>(column)
            .map_err(|e| format!("{column} cannot be read: {e}"))
    };
    let optional = |column: &str| -> Result<Option<String>, String> {
        row.try_get::<_, Option<String>>(column)
            .map_err(|e| format!("{column} cannot be read: {e}"))
    };
    let tenant_id = text("tenant_id")?;
    let event_id = text("event_id")?;
    let created_at: DateTime<Utc> = row
        .try_get("created_at")
        .map_err(|e| format!("created_at cannot be read (infinity?): {e}"))?;
    let record = OutboxRecord {
        event_id: format!("{tenant_id}{KEY_SEPARATOR}{event_id}"),
        tern_record: OUTBOX_RECORD_KIND.to_owned(),
        schema_version: OUTBOX_SCHEMA_VERSION,
        event_type: text("event_type")?,
        tenant_id,
        created_at: created_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        payload: text("payload")?,
        // Retention is the relay's (published_at), not a TTL attribute.
        expires_at: 0,
        traceparent: optional("traceparent")?,
        tracestate: optional("tracestate")?,
    };
    if let Err(error) = record.trace_context() {
        // A trace is worth less than a delivery: the event goes on without it.
        tracing::warn!(
            event = %event_id, %error,
            "outbox row's trace context ignored: it is not W3C Trace Context"
        );
    }
    record
        .into_event(max_payload_bytes)
        .map_err(|e| e.to_string())
}

/// Claims up to `batch_rows` unpublished rows, fans them out, marks and parks them, and
/// commits; all before `deadline` (the fan-out stops [`MARK_RESERVE`] before it, and sends
/// for at most [`BATCH_SEND_BUDGET`]).
///
/// # Errors
/// [`PgRelayError`] for a database call that failed or timed out: nothing of the batch is
/// marked (its rows are claimed again; messages already sent are stopped by the sender's
/// claim). Drop the client after an error: its session may be in any state.
pub async fn relay_batch(
    client: &mut Client,
    deps: &RelayDeps,
    batch_rows: u32,
    deadline: Instant,
    metrics: &Metrics,
) -> Result<BatchSummary, PgRelayError> {
    let tx = db(deadline, "begin", client.transaction()).await?;
    let rows = db(
        deadline,
        "claim",
        tx.query(CLAIM, &[&i64::from(batch_rows)]),
    )
    .await?;
    let mut summary = BatchSummary {
        claimed: rows.len(),
        ..BatchSummary::default()
    };
    if rows.is_empty() {
        db(deadline, "commit", tx.commit()).await?;
        return Ok(summary);
    }
    let mut events = Vec::with_capacity(rows.len());
    let mut event_seqs = Vec::with_capacity(rows.len());
    let mut parked_seqs = Vec::new();
    let mut parked_reasons = Vec::new();
    for row in &rows {
        let seq: i64 = row
            .try_get("seq")
            .map_err(|source| PgRelayError::Database {
                what: "claim",
                source,
            })?;
        match read_row(row, deps.max_payload_bytes) {
            Ok(event) => {
                let names = row_names(seq, event.tenant_id.as_str(), event.id.as_str());
                events.push((names, Box::new(event)));
                event_seqs.push(seq);
            }
            Err(reason) => {
                // The reason names the rule broken, never the payload, so it is safe to log.
                tracing::error!(seq, %reason, "unreadable outbox row parked (parked_reason set)");
                parked_seqs.push(seq);
                parked_reasons.push(reason);
            }
        }
    }
    // The payloads now live in `events` only: the rows' copies go.
    drop(rows);
    let send_by = deadline
        .checked_sub(MARK_RESERVE)
        .unwrap_or(deadline)
        .min(Instant::now() + BATCH_SEND_BUDGET + SEND_RESERVE);
    let (outcomes, unfinished) = relay_events_before(deps, events, Some(send_by), metrics).await;
    let published: Vec<i64> = event_seqs[..outcomes.len()].to_vec();
    summary.deliveries = outcomes
        .iter()
        .map(|o| match o {
            RecordOutcome::Relayed { deliveries, .. } => *deliveries,
            _ => 0,
        })
        .sum();
    if let Some((i, error)) = unfinished {
        tracing::warn!(
            seq = ?event_seqs.get(i), %error,
            left = event_seqs.len() - i,
            "fan-out stopped: the rest of the batch stays unpublished and is claimed again"
        );
        summary.unfinished = Some(error);
    }
    if !published.is_empty() {
        db(deadline, "mark", tx.execute(MARK, &[&published])).await?;
    }
    if !parked_seqs.is_empty() {
        db(
            deadline,
            "park",
            tx.execute(PARK, &[&parked_seqs, &parked_reasons]),
        )
        .await?;
    }
    db(deadline, "commit", tx.commit()).await?;
    summary.published = published.len();
    summary.parked = parked_seqs.len();
    metrics.update(|c| c.relay_parked += parked_seqs.len() as u64);
    Ok(summary)
}

/// Deletes rows published more than `retention` ago, [`RETENTION_DELETE_ROWS`] per
/// statement, until none is left or `deadline` comes. Returns how many were deleted.
///
/// # Errors
/// [`PgRelayError`] for a statement that failed or timed out.
pub async fn delete_published(
    client: &Client,
    retention: Duration,
    deadline: Instant,
) -> Result<u64, PgRelayError> {
    let seconds = retention.as_secs_f64();
    let mut deleted = 0;
    while Instant::now() < deadline {
        let n = db(
            deadline,
            "retention delete",
            client.execute(DELETE_PUBLISHED, &[&seconds, &RETENTION_DELETE_ROWS]),
        )
        .await?;
        deleted += n;
        if n < RETENTION_DELETE_ROWS as u64 {
            break;
        }
    }
    Ok(deleted)
}

/// The age of the oldest unpublished, unparked row, in seconds (the relay's lag), or
/// `None` when there is none.
///
/// # Errors
/// [`PgRelayError`] for a query that failed or timed out.
pub async fn lag_seconds(client: &Client, deadline: Instant) -> Result<Option<f64>, PgRelayError> {
    let row = db(deadline, "lag", client.query_opt(OLDEST_UNPUBLISHED, &[])).await?;
    row.map(|r| r.try_get::<_, f64>(0))
        .transpose()
        .map_err(|source| PgRelayError::Database {
            what: "lag",
            source,
        })
}

/// What one [`PgRelay::run_until`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunSummary {
    /// Batches that claimed at least one row.
    pub batches: usize,
    /// Rows marked published.
    pub published: usize,
    /// Rows parked as unreadable.
    pub parked: usize,
    /// Published rows deleted by the retention.
    pub deleted: u64,
    /// Database errors (each followed by a new connection at the next poll).
    pub errors: usize,
    /// The lag when the run ended, in seconds ([`lag_seconds`]), if it could be read.
    pub lag_seconds: Option<f64>,
}

/// The relay of one process: its dependencies, its settings, and one database connection
/// kept across invocations (opened again after an error).
pub struct PgRelay {
    deps: Arc<RelayDeps>,
    database_url: String,
    tls: RustlsConnect,
    batch_rows: u32,
    poll: Duration,
    retention: Duration,
    client: tokio::sync::Mutex<Option<Client>>,
}

impl PgRelay {
    /// A relay with `config`'s database and polling, fanning out through `deps`.
    ///
    /// # Errors
    /// [`TlsSetupError`] when `config.database_ca_file` cannot be read or holds no
    /// certificate.
    pub fn new(deps: Arc<RelayDeps>, config: &PgRelayConfig) -> Result<Self, TlsSetupError> {
        Ok(Self {
            deps,
            tls: RustlsConnect::new(config.database_ca_file.as_deref())?,
            database_url: config.database_url.clone(),
            batch_rows: config.batch_rows,
            poll: Duration::from_millis(config.poll_ms),
            retention: Duration::from_secs(config.retention_hours * 3600),
            client: tokio::sync::Mutex::new(None),
        })
    }

    /// Polls the outbox until `deadline`: a full batch is followed by the next at once, an
    /// empty or partial one by the poll interval. No batch starts later than
    /// [`SEND_RESERVE`] + [`MARK_RESERVE`] + 1 s before `deadline` (it could send nothing).
    /// Deletes published rows past the retention once per run. Errors are logged and
    /// counted; the connection is opened again at the next poll.
    pub async fn run_until(&self, deadline: Instant, metrics: &Metrics) -> RunSummary {
        let last_start = deadline
            .checked_sub(SEND_RESERVE + MARK_RESERVE + Duration::from_secs(1))
            .unwrap_or(deadline);
        let mut summary = RunSummary::default();
        let mut guard = self.client.lock().await;
        let mut retention_done = false;
        while Instant::now() < last_start {
            let client = match guard.as_mut().filter(|c| !c.is_closed()) {
                Some(c) => c,
                None => match connect(&self.database_url, &self.tls, deadline).await {
                    Ok(c) => guard.insert(c),
                    Err(error) => {
                        tracing::error!(%error, "cannot connect to the outbox database");
                        summary.errors += 1;
                        *guard = None;
                        sleep_until(Instant::now() + self.poll, last_start).await;
                        continue;
                    }
                },
            };
            if !retention_done {
                retention_done = true;
                match delete_published(client, self.retention, last_start).await {
                    Ok(n) => summary.deleted += n,
                    Err(error) => {
                        tracing::warn!(%error, "published rows not deleted: the next run tries again");
                    }
                }
            }
            match relay_batch(client, &self.deps, self.batch_rows, deadline, metrics).await {
                Ok(batch) => {
                    if batch.claimed > 0 {
                        summary.batches += 1;
                        summary.published += batch.published;
                        summary.parked += batch.parked;
                        tracing::info!(
                            claimed = batch.claimed,
                            published = batch.published,
                            parked = batch.parked,
                            deliveries = batch.deliveries,
                            "outbox batch relayed"
                        );
                    }
                    let full = batch.claimed >= self.batch_rows as usize;
                    if !full || batch.unfinished.is_some() {
                        sleep_until(Instant::now() + self.poll, last_start).await;
                    }
                }
                Err(error) => {
                    tracing::error!(%error, "outbox batch failed: its rows stay unpublished and are claimed again");
                    summary.errors += 1;
                    *guard = None;
                    sleep_until(Instant::now() + self.poll, last_start).await;
                }
            }
        }
        if let Some(client) = guard.as_ref() {
            match lag_seconds(client, deadline).await {
                Ok(lag) => {
                    summary.lag_seconds = lag;
                    // Emitted only when read: the lag alarm takes a missing value for a
                    // relay that does not run (its errors have their own alarm).
                    metrics.update(|c| c.outbox_lag_seconds = Some(lag_gauge_seconds(lag)));
                }
                Err(error) => tracing::warn!(%error, "relay lag not read"),
            }
        }
        metrics.update(|c| c.outbox_relay_errors += summary.errors as u64);
        tracing::info!(
            batches = summary.batches,
            published = summary.published,
            parked = summary.parked,
            deleted = summary.deleted,
            errors = summary.errors,
            lag_seconds = summary.lag_seconds,
            "outbox relay run ended"
        );
        summary
    }
}

/// The `OutboxLag` gauge for a lag read as `lag` seconds (`None`: no unpublished row): whole
/// seconds rounded up, so a row waiting 0.2 s counts 1, and 0 only for an empty outbox.
pub fn lag_gauge_seconds(lag: Option<f64>) -> u64 {
    // A clock step back on the database can make an age negative: count it as 0.
    lag.map_or(0, |s| s.max(0.0).ceil() as u64)
}

async fn sleep_until(at: Instant, limit: Instant) {
    tokio::time::sleep_until(at.min(limit)).await;
}

/// The JSON that names a row in log lines and in a refused message's failure-queue body.
pub fn row_names(seq: i64, tenant_id: &str, event_id: &str) -> Value {
    json!({"outbox": "postgres", "seq": seq, "tenant_id": tenant_id, "event_id": event_id})
}

#[cfg(test)]
mod tests {
    use super::lag_gauge_seconds;

    #[test]
    fn lag_gauge_rounds_up_and_reads_none_as_empty() {
        assert_eq!(lag_gauge_seconds(None), 0);
        assert_eq!(lag_gauge_seconds(Some(0.2)), 1);
        assert_eq!(lag_gauge_seconds(Some(300.0)), 300);
        assert_eq!(lag_gauge_seconds(Some(-1.5)), 0);
    }
}
