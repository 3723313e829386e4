// The outbox test vectors (clients/outbox/vectors): this builder reproduces every one byte
// for byte, as the Rust writer (shared/tern-outbox/tests/vectors.rs) and the Python builder
// do, and every item it builds is valid under outbox-item.v2.schema.json (ajv, draft 2020-12).
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Ajv2020 } from "ajv/dist/2020.js";
import { canonicalJson, OutboxError, OutboxWriter } from "../src/index.js";

const outbox = join(dirname(fileURLToPath(import.meta.url)), "../../outbox");
const schema = JSON.parse(readFileSync(join(outbox, "outbox-item.v2.schema.json"), "utf8"));
const ajv = new Ajv2020({ strict: true, allErrors: true });
const validateItem = ajv.compile(schema);
const validatePut = ajv.getSchema("urn:tern:outbox-item:v2#/$defs/transactWriteItem");

interface Vector {
  description: string;
  input: {
    table: string;
    event_id: string;
    event_type: string;
    tenant_id: string;
    created_at_unix_ms: number;
    payload: string | { prefix: string; unit: string; count: number; suffix: string };
    ttl_days?: number;
    max_payload_bytes?: number;
    traceparent?: string;
    tracestate?: string;
  };
  expected: {
    error?: string;
    canonical_sha256?: string;
    canonical_length?: number;
    transact_write_item?: unknown;
  };
}

const files = readdirSync(join(outbox, "vectors"))
  .filter((f) => f.endsWith(".json"))
  .sort();

function payloadOf(input: Vector["input"]): string {
  const p = input.payload;
  return typeof p === "string" ? p : p.prefix + p.unit.repeat(p.count) + p.suffix;
}

test("the vectors are there", () => {
  assert.ok(files.length >= 30, `found ${files.length}`);
  assert.ok(validatePut, "the schema defines $defs/transactWriteItem");
});

for (const file of files) {
  const vector: Vector = JSON.parse(readFileSync(join(outbox, "vectors", file), "utf8"));
  test(`vector ${file}: ${vector.description}`, () => {
    const input = vector.input;
    const writer = new OutboxWriter(input.table, {
      ttlDays: input.ttl_days,
      maxPayloadBytes: input.max_payload_bytes,
    });
    const build = () =>
      writer.prepare({
        id: input.event_id,
        type: input.event_type,
        tenantId: input.tenant_id,
        createdAt: new Date(input.created_at_unix_ms),
        payload: payloadOf(input),
        traceparent: input.traceparent,
        tracestate: input.tracestate,
      });
    if (vector.expected.error !== undefined) {
      assert.throws(build, (e: unknown) => e instanceof OutboxError && e.code === vector.expected.error);
      return;
    }
    const prepared = build();
    const bytes = Buffer.from(canonicalJson(prepared.transactItem), "utf8");
    assert.equal(bytes.length, vector.expected.canonical_length);
    assert.equal(createHash("sha256").update(bytes).digest("hex"), vector.expected.canonical_sha256);
    if (vector.expected.transact_write_item !== undefined) {
      assert.equal(bytes.toString("utf8"), canonicalJson(vector.expected.transact_write_item));
      assert.deepEqual(prepared.transactItem, vector.expected.transact_write_item);
    }
    assert.ok(validateItem(prepared.put.Item), JSON.stringify(validateItem.errors));
    assert.ok(validatePut!(prepared.transactItem), JSON.stringify(validatePut!.errors));
  });
}

test("the schema refuses items no builder writes", () => {
  const good = new OutboxWriter("t").prepare({ type: "a.b", tenantId: "tnt_a", payload: "{}" }).put.Item;
  assert.ok(validateItem(good));
  const broken = [
    { ...good, schema_version: { N: "1" } },
    { ...good, schema_version: { N: "3" } },
    { ...good, event_id: { S: "evt.1" } },
    // Version 2 keys name the tenant: a bare id is a version 1 key.
    { ...good, event_id: { S: "evt_1" } },
    { ...good, event_id: { S: "tnt_a#evt_1#x" } },
    { ...good, payload: { S: "[1]" } },
    { ...good, expires_at: { S: "1" } },
    { ...good, created_at: { S: "2026-12-01T14:35:00Z" } },
    { ...good, extra: { S: "x" } },
  ];
  for (const item of broken) assert.equal(validateItem(item), false, JSON.stringify(item).slice(0, 200));
});

test("a new event gets a time-ordered evt_ id and now as its time", () => {
  const writer = new OutboxWriter("t");
  const before = Date.now();
  const a = writer.prepare({ type: "a.b", tenantId: "tnt_a", payload: "{}" });
  const b = writer.prepare({ type: "a.b", tenantId: "tnt_a", payload: "{}" });
  assert.match(a.id, /^evt_[0-9a-f]{12}7[0-9a-f]{3}[89ab][0-9a-f]{15}$/);
  assert.notEqual(a.id, b.id);
  assert.ok(a.createdAt.getTime() >= before && a.createdAt.getTime() <= Date.now());
  assert.equal(parseInt(a.id.slice(4, 16), 16), a.createdAt.getTime());
});

test("what the vectors cannot hold: a lone surrogate in the text, a non-integer option", () => {
  const writer = new OutboxWriter("t");
  assert.throws(
    // The TypeScript escape makes the lone surrogate itself (not JSON's six-character escape).
    () => writer.prepare({ type: "a.b", tenantId: "tnt_a", payload: '{"a":"\ud800"}' }),
    (e: unknown) => e instanceof OutboxError && e.code === "payload_not_json",
  );
  assert.throws(() => new OutboxWriter("t", { ttlDays: Number.NaN }), RangeError);
  assert.throws(() => new OutboxWriter("t", { ttlDays: 1.5 }), RangeError);
  assert.throws(() => new OutboxWriter("t", { maxPayloadBytes: -1 }), RangeError);
  assert.throws(
    () => writer.prepare({ type: "a.b", tenantId: "tnt_a", payload: "{}", createdAt: new Date(Number.NaN) }),
    (e: unknown) => e instanceof OutboxError && e.code === "bad_created_at",
  );
});
