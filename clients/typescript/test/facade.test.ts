// The facade (src/facade.ts) against a real HTTP server on 127.0.0.1: every method once,
// checking the request the server received (method, path with the ids percent-encoded,
// query, body, a SigV4 signature) and the data it resolves to; then a problem answer,
// which every method turns into a TernApiError. The canned answers are valid under the
// OpenAPI document's schemas (ajv), and the document is walked so that an operation with
// no facade method, or a facade method on the wrong route, fails here.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Ajv2020 } from "ajv/dist/2020.js";
import { Sha256 } from "@aws-crypto/sha256-js";
import { HttpRequest } from "@smithy/protocol-http";
import { SignatureV4 } from "@smithy/signature-v4";
import { createTern, TernApiError, type components, type Tern } from "../src/index.js";

type Schemas = components["schemas"];

interface Operation {
  operationId: string;
  method: string;
  template: string;
  /** The lowest 2xx status of the document and its JSON schema (none for a 204). */
  status: number;
  schema?: string;
}

interface DocOperation {
  operationId?: string;
  responses: Record<string, { content?: Record<string, { schema?: { $ref?: string } }> }>;
}
const doc = JSON.parse(
  readFileSync(join(dirname(fileURLToPath(import.meta.url)), "../../../shared/tern-api/openapi.json"), "utf8"),
) as { paths: Record<string, Record<string, DocOperation>>; components: { schemas: Record<string, unknown> } };
const METHODS = ["get", "put", "post", "patch", "delete", "head", "options", "trace"];
const operations = new Map<string, Operation>();
for (const [template, item] of Object.entries(doc.paths)) {
  for (const [method, op] of Object.entries(item)) {
    if (!METHODS.includes(method) || op.operationId === undefined) continue;
    const status = Math.min(...Object.keys(op.responses).map(Number).filter((s) => s >= 200 && s < 300));
    const ref = op.responses[String(status)]?.content?.["application/json"]?.schema?.$ref;
    operations.set(op.operationId, {
      operationId: op.operationId,
      method: method.toUpperCase(),
      template,
      status,
      schema: ref?.replace("#/components/schemas/", ""),
    });
  }
}

const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
ajv.addSchema({ $id: "urn:tern:openapi", components: doc.components });
function assertValid(schema: string, value: unknown): void {
  const validate = ajv.getSchema(`urn:tern:openapi#/components/schemas/${schema}`);
  assert.ok(validate, `schema ${schema}`);
  assert.ok(validate(value), `${schema}: ${JSON.stringify(validate.errors)}`);
}

// Answers as the API gives them, one per success schema.
const T0 = "2026-12-01T09:00:00Z";
const PUBLIC_KEY = "whpk_MLJvOi3VgJcUO1WJtUxD1hQcGqgLDTvnxOmnbP3gGZk=";
const endpoint: Schemas["Endpoint"] = {
  id: "ep_1",
  tenant_id: "tnt_acme",
  url: "https://hooks.example/tern",
  event_types: ["order.paid"],
  enabled: true,
  payload_format: "raw",
  send_traceparent: false,
  secrets: [{ fingerprint: "sha256:5f2c0a1b2c3d", state: "current", created_at: T0 }],
  signatures: "both",
  signing_keys: [{ public_key: PUBLIC_KEY, state: "current", created_at: T0, expires_at: null }],
  headers: [
    { name: "x-tenant", value: "acme", secret: false },
    { name: "x-api-key", value: null, secret: true },
  ],
  auth: { type: "bearer", secret: "token" },
  created_at: T0,
};
const replayReport: Schemas["ReplayReport"] = {
  dry_run: false,
  examined: 2,
  matched: 1,
  replayed: 1,
  already_replayed: 0,
  delivery_ids: ["evt_1.ep_1"],
  stopped: "queue_empty",
};
const resend: Schemas["Resend"] = {
  event_id: "evt_1",
  endpoint_id: "ep_1",
  replay_count: 1,
  previous_state: "dead_lettered",
};
const fixtures: { [K in keyof Schemas]?: Schemas[K] } = {
  Endpoint: endpoint,
  EndpointCreated: { endpoint, secret: "whsec_c2VjcmV0" },
  EndpointList: { items: [endpoint], next_cursor: null },
  RotatedSecret: { endpoint, secret: "whsec_bmV3" },
  RotatedSigningKey: { endpoint, public_key: PUBLIC_KEY },
  TestSend: {
    event_id: "evt_test",
    event_type: "tern.test",
    delivered: true,
    status: 204,
    latency_ms: 12,
    excerpt_truncated: false,
  },
  EndpointHealth: {
    endpoint_id: "ep_1",
    state: "healthy",
    attempts_window: 3,
    attempts_24h: 10,
    window_seconds: 3600,
    consecutive_failures: 0,
    success_rate_window: 1,
    last_failure: { at: T0, status: 503, response_excerpt: "busy" },
    waiting: 2,
    waiting_complete: true,
    report_pending: false,
    pace: { per_second: 5, changed_at: T0, slow_start: false },
  },
  EndpointAttemptList: {
    items: [
      {
        event_id: "evt_1",
        endpoint_id: "ep_1",
        replay_count: 0,
        attempt: 1,
        takeover: 0,
        started_at: T0,
        latency_ms: 8,
        outcome: "delivered",
        status: 200,
      },
    ],
    next_cursor: "c_2",
  },
  RecoverReport: {
    endpoint_id: "ep_1",
    since: T0,
    until: "2026-12-01T11:00:00Z",
    enabled: true,
    dead_letters: replayReport,
    waiting: { attempts_examined: 1, still_waiting: 1, resent: [resend], not_resendable: [], complete: true },
  },
  PublishedEvent: { id: "evt_1", type: "order.paid", tenant_id: "tnt_acme", created_at: T0, created: true },
  PublishedEventBatch: {
    results: [
      { id: "evt_1", status: 202, event: { id: "evt_1", type: "order.paid", tenant_id: "tnt_acme", created_at: T0, created: true } },
      {
        id: "evt_2",
        status: 409,
        problem: {
          type: "urn:tern:problem:event-id-conflict",
          title: "Event id already used",
          status: 409,
          detail: "event id evt_2 is already used by a different event",
          field: "events[1].id",
        },
      },
    ],
    created: 1,
    existing: 0,
    failed: 1,
  },
  Event: {
    id: "evt_1",
    tenant_id: "tnt_acme",
    type: "order.paid",
    created_at: T0,
    payload: { order_id: "o_1", amount: 4200 },
    deliveries: [{ endpoint_id: "ep_1", state: "delivered", attempt: 1, replay_count: 0, delivered_at: T0 }],
  },
  EventAttempts: {
    event_id: "evt_1",
    attempts: [
      {
        endpoint_id: "ep_1",
        replay_count: 0,
        attempt: 1,
        takeover: 0,
        started_at: T0,
        latency_ms: 8,
        outcome: "delivered",
        status: 200,
        excerpt_truncated: false,
      },
    ],
    dead_letters: [],
  },
  Resend: resend,
  DeadLetterGroups: {
    read: 1,
    matched: 1,
    truncated: false,
    groups: [
      {
        endpoint_id: "ep_1",
        reason: "exhausted",
        count: 1,
        sample: { reason: "exhausted", event_id: "evt_1", payload_sample: "{}", payload_truncated: false },
      },
    ],
  },
  ReplayReport: replayReport,
  PortalSession: { url: "https://portal.example/portal/start?token=t", session_id: "ps_1", expires_at: T0 },
};

interface Answer {
  status: number;
  contentType?: string;
  body?: unknown;
}
interface Received {
  method: string;
  url: string;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

let server: Server;
let baseUrl: string;
let next: Answer = { status: 500 };
const received: Received[] = [];

before(async () => {
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      received.push({
        method: req.method ?? "",
        url: req.url ?? "",
        headers: req.headers,
        body: Buffer.concat(chunks).toString("utf8"),
      });
      const headers: Record<string, string> = {};
      if (next.contentType !== undefined) headers["content-type"] = next.contentType;
      const raw = next.body instanceof Buffer ? next.body : next.body === undefined ? undefined : JSON.stringify(next.body);
      res.writeHead(next.status, headers).end(raw);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  // A base path and a trailing slash, as an ApiUrl output has them.
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/prod/`;
});
after(() => {
  server.close();
});

function tern(): Tern {
  return createTern({
    baseUrl,
    region: "us-east-1",
    credentials: { accessKeyId: "AKIDFACADETEST", secretAccessKey: "secret" },
  });
}

// Ids that need percent-encoding, and what they become in the path.
const TENANT = "tnt a/1";
const TENANT_PATH = "tnt%20a%2F1";
const ENDPOINT = "ep?#2";
const ENDPOINT_PATH = "ep%3F%232";
const EVENT = "evt é+3";
const EVENT_PATH = "evt%20%C3%A9%2B3";

interface Case {
  /** The facade method, `group.name`. */
  facade: string;
  operationId: string;
  call: (t: Tern) => Promise<unknown>;
  /** The path after /prod, ids encoded. */
  path: string;
  query?: Record<string, string>;
  /** The JSON body sent; none when absent. */
  body?: unknown;
  /** For a POST: the same call with `{ idempotencyKey: key }` (every POST method takes it). */
  keyed?: (t: Tern, key: string) => Promise<unknown>;
}

const since = "2026-12-01T09:00:00+01:00";
const payload: Record<string, unknown> = { order_id: "o_1", amount: 4200, lines: [{ sku: "a" }], note: null };
const cases: Case[] = [
  {
    facade: "endpoints.list",
    operationId: "listEndpoints",
    call: (t) => t.endpoints.list(TENANT, { state: "enabled", limit: 10, cursor: "c/1" }),
    path: `/v1/tenants/${TENANT_PATH}/endpoints`,
    query: { state: "enabled", limit: "10", cursor: "c/1" },
  },
  {
    facade: "endpoints.create",
    operationId: "createEndpoint",
    call: (t) =>
      t.endpoints.create(TENANT, {
        url: "https://hooks.example/tern",
        event_types: ["order.paid"],
        description: null,
        payload_format: "standard_webhooks",
        max_per_second: 10,
        headers: [{ name: "X-Api-Key", value: "k-1", secret: true }],
        auth: { type: "bearer", token: "t-1" },
        signatures: "both",
      }),
    path: `/v1/tenants/${TENANT_PATH}/endpoints`,
    body: {
      url: "https://hooks.example/tern",
      event_types: ["order.paid"],
      description: null,
      payload_format: "standard_webhooks",
      max_per_second: 10,
      headers: [{ name: "X-Api-Key", value: "k-1", secret: true }],
      auth: { type: "bearer", token: "t-1" },
      signatures: "both",
    },
    keyed: (t, k) => t.endpoints.create(TENANT, { url: "https://hooks.example/tern" }, { idempotencyKey: k }),
  },
  {
    facade: "endpoints.get",
    operationId: "getEndpoint",
    call: (t) => t.endpoints.get(TENANT, ENDPOINT),
    path: `/v1/tenants/${TENANT_PATH}/endpoints/${ENDPOINT_PATH}`,
  },
  {
    facade: "endpoints.update",
    operationId: "updateEndpoint",
    call: (t) =>
      t.endpoints.update(TENANT, ENDPOINT, {
        url: "https://hooks.example/v2",
        max_per_second: null,
        // The secret header and the client secret kept: left out.
        headers: [{ name: "x-api-key", secret: true }],
        auth: { type: "oauth2_client_credentials", token_url: "https://auth.example/token", client_id: "tern" },
      }),
    path: `/v1/tenants/${TENANT_PATH}/endpoints/${ENDPOINT_PATH}`,
    body: {
      url: "https://hooks.example/v2",
      max_per_second: null,
      headers: [{ name: "x-api-key", secret: true }],
      auth: { type: "oauth2_client_credentials", token_url: "https://auth.example/token", client_id: "tern" },
    },
  },
  {
    facade: "endpoints.delete",
    operationId: "deleteEndpoint",
    call: (t) => t.endpoints.delete(TENANT, ENDPOINT),
    path: `/v1/tenants/${TENANT_PATH}/endpoints/${ENDPOINT_PATH}`,
  },
  {
    facade: "endpoints.enable",
    operationId: "enableEndpoint",
    call: (t) => t.endpoints.enable(TENANT, ENDPOINT),
    path: `/v1/tenants/${TENANT_PATH}/endpoints/${ENDPOINT_PATH}/enable`,
    keyed: (t, k) => t.endpoints.enable(TENANT, ENDPOINT, { idempotencyKey: k }),
  },
  {
    facade: "endpoints.disable",
    operationId: "disableEndpoint",
    call: (t) => t.endpoints.disable(TENANT, ENDPOINT, { reason: "customer asked" }),
    path: `/v1/tenants/${TENANT_PATH}/endpoints/${ENDPOINT_PATH}/disable`,
    body: { reason: "customer asked" },
    keyed: (t, k) => t.endpoints.disable(TENANT, ENDPOINT, { reason: "customer asked" }, { idempotencyKey: k }),
  },
  {
    facade: "endpoints.rotateSecret",
    operationId: "rotateEndpointSecret",
    call: (t) => t.endpoints.rotateSecret(TENANT, ENDPOINT, { overlap_hours: 2 }),
    path: `/v1/tenants/${TENANT_PATH}/endpoints/${ENDPOINT_PATH}/rotate-secret`,
    body: { overlap_hours: 2 },
    keyed: (t, k) => t.endpoints.rotateSecret(TENANT, ENDPOINT, { overlap_hours: 2 }, { idempotencyKey: k }),
  },
  {
    facade: "endpoints.rotateSigningKey",
    operationId: "rotateEndpointSigningKey",
    call: (t) => t.endpoints.rotateSigningKey(TENANT, ENDPOINT, { overlap_hours: 2 }),
    path: `/v1/tenants/${TENANT_PATH}/endpoints/${ENDPOINT_PATH}/rotate-signing-key`,
    body: { overlap_hours: 2 },
    keyed: (t, k) => t.endpoints.rotateSigningKey(TENANT, ENDPOINT, { overlap_hours: 2 }, { idempotencyKey: k }),
  },
  {
    facade: "endpoints.test",
    operationId: "sendTestEvent",
    call: (t) => t.endpoints.test(TENANT, ENDPOINT),
    path: `/v1/tenants/${TENANT_PATH}/endpoints/${ENDPOINT_PATH}/test`,
    keyed: (t, k) => t.endpoints.test(TENANT, ENDPOINT, { idempotencyKey: k }),
  },
  {
    facade: "endpoints.health",
    operationId: "getEndpointHealth",
    call: (t) => t.endpoints.health(TENANT, ENDPOINT),
    path: `/v1/tenants/${TENANT_PATH}/endpoints/${ENDPOINT_PATH}/health`,
  },
  {
    facade: "endpoints.attempts",
    operationId: "listEndpointAttempts",
    call: (t) =>
      t.endpoints.attempts(TENANT, ENDPOINT, {
        since,
        until: "2026-12-01T11:00:00Z",
        outcome: "failed",
        limit: 5,
        cursor: "c_1",
      }),
    path: `/v1/tenants/${TENANT_PATH}/endpoints/${ENDPOINT_PATH}/attempts`,
    query: { since, until: "2026-12-01T11:00:00Z", outcome: "failed", limit: "5", cursor: "c_1" },
  },
  {
    facade: "endpoints.recover",
    operationId: "recoverEndpoint",
    call: (t) => t.endpoints.recover(TENANT, ENDPOINT, { since: T0, enable: true }),
    path: `/v1/tenants/${TENANT_PATH}/endpoints/${ENDPOINT_PATH}/recover`,
    body: { since: T0, enable: true },
    keyed: (t, k) => t.endpoints.recover(TENANT, ENDPOINT, { since: T0, enable: true }, { idempotencyKey: k }),
  },
  {
    facade: "events.publish",
    operationId: "publishEvent",
    call: (t) => t.events.publish(TENANT, { type: "order.paid", payload, id: "evt_o_1_paid" }),
    path: `/v1/tenants/${TENANT_PATH}/events`,
    body: { type: "order.paid", payload, id: "evt_o_1_paid" },
    keyed: (t, k) => t.events.publish(TENANT, { type: "order.paid", payload }, { idempotencyKey: k }),
  },
  {
    facade: "events.publishBatch",
    operationId: "publishEventBatch",
    call: (t) =>
      t.events.publishBatch(TENANT, [
        { type: "order.paid", payload, id: "evt_o_1_paid" },
        { type: "order.shipped", payload: { order_id: "o_1" } },
      ]),
    path: `/v1/tenants/${TENANT_PATH}/event-batches`,
    body: {
      events: [
        { type: "order.paid", payload, id: "evt_o_1_paid" },
        { type: "order.shipped", payload: { order_id: "o_1" } },
      ],
    },
    keyed: (t, k) => t.events.publishBatch(TENANT, [{ type: "order.paid", payload }], { idempotencyKey: k }),
  },
  {
    facade: "events.get",
    operationId: "getEvent",
    call: (t) => t.events.get(TENANT, EVENT),
    path: `/v1/tenants/${TENANT_PATH}/events/${EVENT_PATH}`,
  },
  {
    facade: "events.attempts",
    operationId: "listEventAttempts",
    call: (t) => t.events.attempts(TENANT, EVENT),
    path: `/v1/tenants/${TENANT_PATH}/events/${EVENT_PATH}/attempts`,
  },
  {
    facade: "events.resend",
    operationId: "resendEvent",
    call: (t) => t.events.resend(TENANT, EVENT, ENDPOINT),
    path: `/v1/tenants/${TENANT_PATH}/events/${EVENT_PATH}/endpoints/${ENDPOINT_PATH}/resend`,
    keyed: (t, k) => t.events.resend(TENANT, EVENT, ENDPOINT, { idempotencyKey: k }),
  },
  {
    facade: "deadLetters.list",
    operationId: "listDeadLetters",
    call: (t) => t.deadLetters.list(TENANT, { max: 50 }),
    path: `/v1/tenants/${TENANT_PATH}/dead-letters`,
    query: { max: "50" },
  },
  {
    facade: "deadLetters.replay",
    operationId: "replayDeadLetters",
    call: (t) => t.deadLetters.replay(TENANT, { endpoint_id: "ep_1", reason: "exhausted", dry_run: true }),
    path: `/v1/tenants/${TENANT_PATH}/dead-letters/replay`,
    body: { endpoint_id: "ep_1", reason: "exhausted", dry_run: true },
    keyed: (t, k) => t.deadLetters.replay(TENANT, { dry_run: true }, { idempotencyKey: k }),
  },
  {
    facade: "portal.createSession",
    operationId: "createPortalSession",
    call: (t) => t.portal.createSession(TENANT, { endpoint_ids: ["ep_1"], read_only: true, expires_in_seconds: 600 }),
    path: `/v1/tenants/${TENANT_PATH}/portal-sessions`,
    body: { endpoint_ids: ["ep_1"], read_only: true, expires_in_seconds: 600 },
    keyed: (t, k) => t.portal.createSession(TENANT, { read_only: true }, { idempotencyKey: k }),
  },
];

const AUTHORIZATION =
  /^AWS4-HMAC-SHA256 Credential=AKIDFACADETEST\/\d{8}\/us-east-1\/execute-api\/aws4_request, SignedHeaders=[^,]*\bhost\b/;

/** The last request the server received, and that it was the only one since `before`. */
function only(before: number): Received {
  assert.equal(received.length, before + 1, "one request per call");
  return received[received.length - 1]!;
}

test("every operation of the OpenAPI document has a facade method, and every method one operation", () => {
  const covered = cases.map((c) => c.operationId).sort();
  const documented = [...operations.keys()].sort();
  assert.deepEqual(covered, documented, "operations without a facade method (or gone from the document)");
  const t = tern() as unknown as Record<string, Record<string, unknown> | unknown>;
  const methods: string[] = [];
  for (const [group, value] of Object.entries(t)) {
    if (group === "raw") continue;
    for (const [name, fn] of Object.entries(value as Record<string, unknown>)) {
      assert.equal(typeof fn, "function", `${group}.${name}`);
      methods.push(`${group}.${name}`);
    }
  }
  assert.deepEqual(methods.sort(), cases.map((c) => c.facade).sort(), "facade methods without a test case");
});

for (const c of cases) {
  test(`${c.facade} sends ${c.operationId} and resolves to its data`, async () => {
    const op = operations.get(c.operationId);
    assert.ok(op, `${c.operationId} is in the document`);
    const canned = op.schema === undefined ? undefined : fixtures[op.schema as keyof Schemas];
    if (op.schema !== undefined) {
      assert.ok(canned !== undefined, `a fixture for ${op.schema}`);
      assertValid(op.schema, canned);
    }
    next = { status: op.status, contentType: canned === undefined ? undefined : "application/json", body: canned };
    const count = received.length;

    const data = await c.call(tern());

    const got = only(count);
    assert.deepEqual(data, canned);
    assert.equal(got.method, op.method);
    const url = new URL(got.url, "http://x");
    assert.equal(url.pathname, `/prod${c.path}`);
    // The document's route with these ids in it: the facade calls the operation it claims.
    const fromDoc = op.template
      .replace("{tenant_id}", TENANT_PATH)
      .replace("{endpoint_id}", ENDPOINT_PATH)
      .replace("{event_id}", EVENT_PATH);
    assert.equal(c.path, fromDoc);
    assert.deepEqual(Object.fromEntries(url.searchParams), c.query ?? {});
    if (c.body === undefined) {
      assert.equal(got.body, "");
      assert.equal(got.headers["content-type"], undefined);
    } else {
      assert.deepEqual(JSON.parse(got.body), c.body);
      assert.equal(got.headers["content-type"], "application/json");
    }
    const authorization = String(got.headers["authorization"]);
    assert.match(authorization, AUTHORIZATION);
    assert.match(String(got.headers["x-amz-date"]), /^\d{8}T\d{6}Z$/);
  });
}

test("a problem answer rejects every method with TernApiError (status, problem)", async () => {
  const problem: Schemas["Problem"] = {
    type: "urn:tern:problem:not-found",
    title: "Not found",
    status: 404,
    detail: "no such endpoint",
    field: null,
  };
  assertValid("Problem", problem);
  next = { status: 404, contentType: "application/problem+json", body: problem };
  for (const c of cases) {
    await assert.rejects(c.call(tern()), (e: unknown) => {
      assert.ok(e instanceof TernApiError, `${c.facade}: ${String(e)}`);
      assert.equal(e.status, 404);
      assert.equal(e.problem.type, "urn:tern:problem:not-found");
      assert.equal(e.problem.detail, "no such endpoint");
      return true;
    });
  }
});

test("the optional bodies default to {}", async () => {
  const t = tern();
  const calls: [string, () => Promise<unknown>, string][] = [
    ["disable", () => t.endpoints.disable(TENANT, ENDPOINT), "Endpoint"],
    ["rotateSecret", () => t.endpoints.rotateSecret(TENANT, ENDPOINT), "RotatedSecret"],
    ["rotateSigningKey", () => t.endpoints.rotateSigningKey(TENANT, ENDPOINT), "RotatedSigningKey"],
    ["replay", () => t.deadLetters.replay(TENANT), "ReplayReport"],
    ["createSession", () => t.portal.createSession(TENANT), "PortalSession"],
  ];
  for (const [name, call, schema] of calls) {
    next = { status: 200, contentType: "application/json", body: fixtures[schema as keyof Schemas] };
    const count = received.length;
    await call();
    const got = only(count);
    assert.equal(got.body, "{}", name);
    assert.equal(got.headers["content-type"], "application/json", name);
  }
});

test("an id that would change the path is refused before anything is sent", async () => {
  const t = tern();
  const count = received.length;
  for (const bad of ["", ".", ".."]) {
    await assert.rejects(t.endpoints.get(TENANT, bad), TypeError);
    await assert.rejects(t.endpoints.list(bad), TypeError);
    await assert.rejects(t.events.resend(TENANT, EVENT, bad), TypeError);
  }
  assert.equal(received.length, count);
});

test("every POST method sends an idempotency key as the Idempotency-Key header, signed, and none without", async () => {
  const posts = cases.filter((c) => operations.get(c.operationId)?.method === "POST");
  assert.ok(posts.length >= 10, "the POST operations of the document");
  for (const c of posts) {
    assert.ok(c.keyed, `${c.facade} takes { idempotencyKey }`);
    const op = operations.get(c.operationId)!;
    const canned = op.schema === undefined ? undefined : fixtures[op.schema as keyof Schemas];
    next = { status: op.status, contentType: "application/json", body: canned };
    const count = received.length;
    const key = `3f2b8c1e-${c.operationId}`;
    assert.deepEqual(await c.keyed(tern(), key), canned, c.facade);
    const got = only(count);
    assert.equal(new URL(got.url, "http://x").pathname, `/prod${c.path}`, c.facade);
    assert.equal(got.headers["idempotency-key"], key, c.facade);
    assert.match(String(got.headers["authorization"]), /SignedHeaders=[^,]*\bidempotency-key\b/, c.facade);
    await c.call(tern());
    assert.equal(only(count + 1).headers["idempotency-key"], undefined, `${c.facade} without a key`);
  }
});

test("an error answer that is no problem document still throws TernApiError with a problem", async () => {
  const cases: [typeof next, number, string][] = [
    // API Gateway's own answer to a bad signature, a proxy's HTML page, no body.
    [{ status: 403, contentType: "application/json", body: { message: "Forbidden" } }, 403, "Forbidden"],
    [{ status: 502, contentType: "text/html", body: Buffer.from("<html>Bad Gateway</html>") }, 502, "<html>Bad Gateway</html>"],
    [{ status: 404, contentType: undefined, body: undefined }, 404, "Not Found"],
  ];
  for (const [answer, status, detail] of cases) {
    next = answer;
    await assert.rejects(tern().endpoints.get(TENANT, ENDPOINT), (e: unknown) => {
      assert.ok(e instanceof TernApiError);
      assert.equal(e.status, status);
      assert.equal(e.problem.type, "about:blank");
      assert.equal(e.problem.detail, detail);
      return true;
    });
  }
});

test("raw is the signed openapi-fetch client", async () => {
  next = { status: 200, contentType: "application/json", body: fixtures.Endpoint };
  const count = received.length;
  const { data, response } = await tern().raw.GET("/v1/tenants/{tenant_id}/endpoints/{endpoint_id}", {
    params: { path: { tenant_id: TENANT, endpoint_id: ENDPOINT } },
  });
  assert.equal(response.status, 200);
  assert.deepEqual(data, fixtures.Endpoint);
  assert.match(String(only(count).headers["authorization"]), /^AWS4-HMAC-SHA256 /);
});

/**
 * Whether `got` carries a valid SigV4 signature made with `secret`: the request is signed
 * again from what arrived (its signed headers, path, query, body, its x-amz-date) and the
 * signatures compared.
 */
async function signedWith(got: Received, secret: string): Promise<boolean> {
  const authorization = String(got.headers["authorization"]);
  const keyId = /Credential=([^/]+)\//.exec(authorization)?.[1] ?? "";
  const names = (/SignedHeaders=([^,]+)/.exec(authorization)?.[1] ?? "").split(";");
  const headers: Record<string, string> = {};
  for (const name of names) headers[name] = String(got.headers[name]);
  const url = new URL(got.url, `http://${headers.host}`);
  const date = String(got.headers["x-amz-date"]).replace(/^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/, "$1-$2-$3T$4:$5:$6Z");
  const signer = new SignatureV4({
    service: "execute-api",
    region: "us-east-1",
    credentials: { accessKeyId: keyId, secretAccessKey: secret },
    sha256: Sha256,
  });
  const again = await signer.sign(
    new HttpRequest({
      method: got.method,
      protocol: "http:",
      hostname: url.hostname,
      port: Number(url.port),
      path: url.pathname,
      query: Object.fromEntries(url.searchParams),
      headers,
      body: got.body === "" ? undefined : got.body,
    }),
    { signingDate: new Date(date) },
  );
  return again.headers["authorization"] === authorization;
}

test("without credentials, createTern signs with the AWS SDK's default chain: the environment's keys", async () => {
  const saved = { ...process.env };
  try {
    // The chain reads the environment first; no shared files, so nothing else can answer.
    process.env.AWS_CONFIG_FILE = "/dev/null";
    process.env.AWS_SHARED_CREDENTIALS_FILE = "/dev/null";
    delete process.env.AWS_SESSION_TOKEN;
    delete process.env.AWS_PROFILE;
    process.env.AWS_ACCESS_KEY_ID = "AKIDFROMENVIRONMENT";
    process.env.AWS_SECRET_ACCESS_KEY = "secret-of-the-environment";
    next = { status: 200, contentType: "application/json", body: fixtures.Endpoint };
    let count = received.length;
    await createTern({ baseUrl, region: "us-east-1" }).endpoints.get(TENANT, ENDPOINT);
    const got = only(count);
    assert.match(String(got.headers["authorization"]), /Credential=AKIDFROMENVIRONMENT\/\d{8}\/us-east-1\/execute-api\/aws4_request/);
    assert.equal(await signedWith(got, "secret-of-the-environment"), true);
    assert.equal(await signedWith(got, "another-secret"), false);
    // Credentials given win over the environment.
    count = received.length;
    await tern().endpoints.get(TENANT, ENDPOINT);
    const given = only(count);
    assert.match(String(given.headers["authorization"]), /Credential=AKIDFACADETEST\//);
    assert.equal(await signedWith(given, "secret"), true);
  } finally {
    process.env = saved;
  }
});
