// The PostgreSQL outbox writer from TypeScript (pg), run by tests/tests/outbox_postgres.rs
// against a real server: every valid vector of clients/outbox/vectors in its own
// transaction, an order row and its event rolled back, then committed, and a duplicate
// id refused. Prints one JSON line: how many vectors, the committed event's id and payload.
//
//   node --import tsx examples/outbox_postgres.ts <database url> <vectors dir> <tenant>
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";
import {
  DuplicateEventError,
  insertOutboxRow,
  OutboxWriter,
  POSTGRES_OUTBOX_TABLE,
} from "../src/index.js";

const [url, vectors, tenant] = process.argv.slice(2);
if (!url || !vectors || !tenant)
  throw new Error(
    "usage: outbox_postgres.ts <database url> <vectors dir> <tenant>",
  );
const client = new pg.Client({ connectionString: url });
await client.connect();

async function inTransaction(work: () => Promise<void>): Promise<void> {
  await client.query("BEGIN");
  try {
    await work();
    await client.query("COMMIT");
  } catch (e) {
    await client.query("ROLLBACK");
    throw e;
  }
}

let valid = 0;
for (const name of readdirSync(vectors)
  .filter((n) => n.endsWith(".json"))
  .sort()) {
  const v = JSON.parse(readFileSync(join(vectors, name), "utf8"));
  if (v.expected.error !== undefined) continue;
  const input = v.input;
  const p = input.payload;
  const payload =
    typeof p === "string" ? p : p.prefix + p.unit.repeat(p.count) + p.suffix;
  const writer = new OutboxWriter(
    POSTGRES_OUTBOX_TABLE,
    input.max_payload_bytes === undefined
      ? {}
      : { maxPayloadBytes: input.max_payload_bytes },
  );
  const event = writer.prepare({
    id: input.event_id,
    type: input.event_type,
    tenantId: input.tenant_id,
    payload,
    createdAt: new Date(input.created_at_unix_ms),
    traceparent: input.traceparent ?? null,
    tracestate: input.tracestate,
  });
  await inTransaction(() =>
    insertOutboxRow(client, event).then(() => undefined),
  );
  valid += 1;
}

const writer = new OutboxWriter(POSTGRES_OUTBOX_TABLE);
const payload = '{"b":1,"a":2,"n":1e2,"s":"caf\\u00e9 \u00e9"}';
const order = (id: string) =>
  client.query("INSERT INTO orders (id, status) VALUES ($1, 'paid')", [id]);
await inTransaction(async () => {
  await order(`${tenant}_rolled_back`);
  await insertOutboxRow(
    client,
    writer.prepare({
      type: "order.paid",
      tenantId: tenant,
      payload,
      traceparent: null,
    }),
  );
  throw new Error("rolled back");
}).catch((e: Error) => {
  if (e.message !== "rolled back") throw e;
});
const event = writer.prepare({
  type: "order.paid",
  tenantId: tenant,
  payload,
  traceparent: null,
});
await inTransaction(async () => {
  await order(`${tenant}_committed`);
  await insertOutboxRow(client, event);
});
const duplicate = writer.prepare({
  id: event.id,
  type: "order.paid",
  tenantId: tenant,
  payload: "{}",
  traceparent: null,
});
const refused = await inTransaction(() =>
  insertOutboxRow(client, duplicate).then(() => undefined),
).then(
  () => undefined,
  (e: unknown) => e,
);
if (
  !(refused instanceof DuplicateEventError) ||
  refused.tenantId !== tenant ||
  refused.eventId !== event.id
) {
  throw new Error(
    `a duplicate id was not refused as DuplicateEventError: ${String(refused)}`,
  );
}
await client.end();
console.log(
  JSON.stringify({ valid, events: [{ event_id: event.id, payload }] }),
);
