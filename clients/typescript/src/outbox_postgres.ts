/**
 * The outbox on PostgreSQL: the event's row inserted in your own transaction, beside your
 * business change, so both commit or neither does (docs/outbox.md, "PostgreSQL outbox").
 * The event is the one `OutboxWriter.prepare` validates, as for DynamoDB (the same limits,
 * codes and vectors); only the storage differs. The table is created by
 * shared/tern-outbox/migrations/postgres/*.sql; the PostgreSQL relay publishes its rows.
 *
 * ```ts
 * const writer = new OutboxWriter(POSTGRES_OUTBOX_TABLE);
 * await client.query("BEGIN");
 * await client.query("UPDATE orders SET status = 'paid' WHERE id = $1", ["o_1"]);
 * const event = writer.prepare({ type: "order.paid", tenantId: "tnt_acme", payload: '{"order_id":"o_1"}' });
 * await insertOutboxRow(client, event);
 * await client.query("COMMIT");
 * ```
 *
 * This package does not depend on `pg`: `insertOutboxRow` takes anything with pg's
 * `query(text, values)` (a `Client`, or a `PoolClient` you hold for the transaction).
 */
import type { PreparedEvent } from "./outbox.js";

/** The outbox table's name, as the migrations create it (fixed: no statement is built from a configurable name). */
export const POSTGRES_OUTBOX_TABLE = "tern_outbox";

/** The insert of one event's row; the column list is the migration's. */
export const POSTGRES_OUTBOX_INSERT =
  "INSERT INTO tern_outbox (tenant_id, event_id, event_type, created_at, payload, traceparent, tracestate) " +
  "VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING seq";

/** PostgreSQL's SQLSTATE for a unique violation (Appendix A, class 23). */
const UNIQUE_VIOLATION = "23505";

/** What `insertOutboxRow` needs of a client: pg's `Client` and `PoolClient` have it. */
export interface PgQueryable {
  query(text: string, values: unknown[]): Promise<{ rows: unknown[] }>;
}

/**
 * The event's tenant already has an event with this id (the table's
 * `UNIQUE (tenant_id, event_id)`): your transaction is aborted (roll it back), as a
 * DynamoDB transaction is cancelled by the outbox item's condition. Another tenant's
 * event with the same id is another event.
 */
export class DuplicateEventError extends Error {
  constructor(
    readonly tenantId: string,
    readonly eventId: string,
    options?: { cause?: unknown },
  ) {
    super(
      `tenant ${tenantId} already has an event with id ${eventId}`,
      options,
    );
    this.name = "DuplicateEventError";
  }
}

/**
 * Inserts `event`'s row through `client`, inside the transaction you began on it, and
 * returns its `seq` (the relay's order; a `bigint` column, so text, as pg returns it).
 * The payload goes in as `text`, byte for byte; `createdAt` to the millisecond.
 * @throws DuplicateEventError when the tenant already has this event id
 */
export async function insertOutboxRow(
  client: PgQueryable,
  event: PreparedEvent,
): Promise<string> {
  const values = [
    event.tenantId,
    event.id,
    event.type,
    event.createdAt,
    event.payload,
    event.traceparent ?? null,
    event.tracestate ?? null,
  ];
  let result: { rows: unknown[] };
  try {
    result = await client.query(POSTGRES_OUTBOX_INSERT, values);
  } catch (e) {
    if ((e as { code?: unknown } | null)?.code === UNIQUE_VIOLATION) {
      throw new DuplicateEventError(event.tenantId, event.id, { cause: e });
    }
    throw e;
  }
  const row = result.rows[0] as { seq?: unknown } | undefined;
  return String(row?.seq);
}
