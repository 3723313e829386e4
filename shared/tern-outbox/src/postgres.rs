//! The outbox on PostgreSQL (feature `postgres`): the event's row inserted in your own
//! transaction, beside your business change, so both commit or neither does.
//!
//! ```no_run
//! # async fn demo(mut db: tokio_postgres::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let writer = tern_outbox::OutboxWriter::new(tern_outbox::postgres::TABLE);
//! let tx = db.transaction().await?;
//! tx.execute("UPDATE orders SET status = 'paid' WHERE id = $1", &[&"o_1"]).await?;
//! let event = writer.prepare("order.paid", "tnt_acme", r#"{"order_id":"o_1","amount":4200}"#)?;
//! event.insert(&tx).await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```
//!
//! The event is validated exactly as for DynamoDB ([`crate::OutboxWriter::prepare`], the
//! same test vectors): only the storage differs. The table is created by
//! [`MIGRATIONS`] (`migrations/postgres/*.sql`, plain SQL for PostgreSQL 13 or newer);
//! the PostgreSQL relay (`functions/relay-pg`) publishes its rows.

use chrono::DateTime;
use tokio_postgres::GenericClient;
use tokio_postgres::error::SqlState;

use crate::{OutboxWriteError, PreparedEvent};

/// The outbox table's name, as the migrations create it (in the schema first on the
/// connection's `search_path`, `public` by default). Fixed, so no statement is ever built
/// from a configurable name.
pub const TABLE: &str = "tern_outbox";

/// One migration of the outbox table: apply them in order, each once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// Its version, the number its file name starts with.
    pub version: u32,
    /// Its file name under `shared/tern-outbox/migrations/postgres/`.
    pub name: &'static str,
    /// Its SQL (several statements; `batch_execute` runs it). Idempotent: `IF NOT EXISTS`.
    pub sql: &'static str,
}

/// Every migration of the outbox table, oldest first. Your migration tool can apply the
/// files themselves; the tests, `tern local` and [`migrate`] apply these.
pub const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "0001_outbox.sql",
    sql: include_str!("../migrations/postgres/0001_outbox.sql"),
}];

/// The insert of one event's row. The column list is the migration's.
const INSERT: &str = "INSERT INTO tern_outbox \
     (tenant_id, event_id, event_type, created_at, payload, traceparent, tracestate) \
     VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING seq";

/// Why an event's row could not be inserted.
#[derive(Debug, thiserror::Error)]
pub enum PgWriteError {
    /// The event's tenant already has an event with this id (the table's
    /// `UNIQUE (tenant_id, event_id)`): the transaction is aborted, as a DynamoDB
    /// transaction is cancelled by the outbox item's condition. Another tenant's event
    /// with the same id is another event.
    #[error("tenant {tenant} already has an event with id {event_id}")]
    Duplicate {
        /// The tenant id.
        tenant: String,
        /// The event id.
        event_id: String,
    },
    /// The insert failed (connection, permission, a missing table: run [`MIGRATIONS`]).
    #[error("outbox insert failed: {0}")]
    Database(#[from] tokio_postgres::Error),
    /// The event cannot be written (not expected for a prepared event).
    #[error(transparent)]
    Event(#[from] OutboxWriteError),
}

impl PreparedEvent {
    /// Inserts the event's row through `client`: your open transaction
    /// (`tokio_postgres::Transaction`), so the row commits with your business change. A
    /// plain `Client` works too, but then the row is committed on its own (the dual write
    /// the outbox exists to avoid). Returns the row's `seq`, the relay's order.
    ///
    /// The payload goes in as `text`, byte for byte; `created_at` to the millisecond, as
    /// in the DynamoDB item.
    ///
    /// # Errors
    /// [`PgWriteError::Duplicate`] when the tenant already has this event id (your
    /// transaction is then aborted: roll it back), [`PgWriteError::Database`] otherwise.
    pub async fn insert<C: GenericClient + Sync>(&self, client: &C) -> Result<i64, PgWriteError> {
        let record = &self.record;
        // The record's millisecond RFC 3339 text, so the row holds what the DynamoDB
        // item holds (the event's own time may have finer digits).
        let created_at = DateTime::parse_from_rfc3339(&record.created_at)
            .map_err(|e| OutboxWriteError::Encode(e.to_string()))?
            .to_utc();
        let row = client
            .query_one(
                INSERT,
                &[
                    &record.tenant_id,
                    &self.event.id.as_str(),
                    &record.event_type,
                    &created_at,
                    &record.payload,
                    &record.traceparent,
                    &record.tracestate,
                ],
            )
            .await
            .map_err(|e| {
                if e.code() == Some(&SqlState::UNIQUE_VIOLATION) {
                    PgWriteError::Duplicate {
                        tenant: record.tenant_id.clone(),
                        event_id: self.event.id.to_string(),
                    }
                } else {
                    PgWriteError::Database(e)
                }
            })?;
        Ok(row.get(0))
    }
}

/// Applies every migration in [`MIGRATIONS`] through `client` (each is idempotent). For
/// tests, local mode and quick starts; in production, apply the SQL files with your own
/// migration tool.
///
/// # Errors
/// The first statement PostgreSQL refuses.
pub async fn migrate<C: GenericClient + Sync>(client: &C) -> Result<(), tokio_postgres::Error> {
    for migration in MIGRATIONS {
        client.batch_execute(migration.sql).await?;
    }
    Ok(())
}
