// End to end against `tern local` (run by tests/tests/clients.rs, also by hand: see
// clients/README.md). What a Node backend does with Tern:
//  1. runs its own webhook receiver on 127.0.0.1 (a stand-in for its customer's);
//  2. creates an endpoint for it through the Tern API (SigV4-signed), keeping the secret;
//  3. writes an order row (its own table) and the event in ONE TransactWriteItems;
//  4. sees the event delivered, verified by the independent `standardwebhooks` library;
//  5. reads the delivery back through the API (event, attempts, the endpoint's log), sends
//     a test event, sets receiver settings (a secret header, a bearer token, Ed25519 `v1a`
//     signatures; clients/README.md) and sees a test send carry them, and publishes an
//     event through the API (idempotent on its id);
//  6. checks an error answer (problem+json naming the field), tenant isolation (another
//     tenant's endpoint id is a 404) and atomicity (a failed transaction publishes nothing).
// Every call goes through the facade (`createTern`); `tern.raw` only to read a header.
// Prints one JSON line with what it saw; exits 1 with the reason on any failure.
import { createPublicKey, randomUUID, verify as verifySignature } from "node:crypto";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import {
  CreateTableCommand,
  DynamoDBClient,
  GetItemCommand,
  TransactWriteItemsCommand,
  TransactionCanceledException,
  waitUntilTableExists,
} from "@aws-sdk/client-dynamodb";
import { Webhook } from "standardwebhooks";
import { createTern, OutboxWriter, TernApiError } from "../src/index.js";

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

async function eventually<T>(what: string, seconds: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${seconds} s waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The `TernApiError` a call rejects with; throws if it resolves or fails otherwise. */
async function apiError(what: string, call: Promise<unknown>): Promise<TernApiError> {
  try {
    await call;
  } catch (e) {
    if (e instanceof TernApiError) return e;
    throw e;
  }
  throw new Error(`${what} succeeded`);
}

interface Received {
  path: string;
  headers: Record<string, string>;
  body: string;
}

async function main(): Promise<void> {
  const tenant = env("TERN_E2E_TENANT");
  const otherTenant = env("TERN_E2E_OTHER_TENANT");
  const credentials = { accessKeyId: env("AWS_ACCESS_KEY_ID"), secretAccessKey: env("AWS_SECRET_ACCESS_KEY") };
  const region = env("AWS_REGION");

  // 1. The receiver.
  const received: Received[] = [];
  const server = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.headers)) if (typeof v === "string") headers[k] = v;
      received.push({ path: req.url ?? "", headers, body: Buffer.concat(chunks).toString("utf8") });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;

  try {
    // 2. The endpoint, through the API.
    const tern = createTern({ baseUrl: env("TERN_API_URL"), region, credentials });
    const created = await tern.endpoints.create(tenant, {
      url: `http://127.0.0.1:${port}/hooks/ts`,
      event_types: ["order.paid"],
      description: "node e2e",
    });
    const endpointId = created.endpoint.id;
    const webhook = new Webhook(created.secret);

    // 3. The order row and the event in one transaction.
    const dynamodb = new DynamoDBClient({ region, endpoint: env("AWS_ENDPOINT_URL"), credentials });
    const orders = env("TERN_E2E_ORDERS_TABLE");
    await dynamodb.send(
      new CreateTableCommand({
        TableName: orders,
        AttributeDefinitions: [{ AttributeName: "order_id", AttributeType: "S" }],
        KeySchema: [{ AttributeName: "order_id", KeyType: "HASH" }],
        BillingMode: "PAY_PER_REQUEST",
      }),
    );
    await waitUntilTableExists({ client: dynamodb, maxWaitTime: 30 }, { TableName: orders });
    const writer = new OutboxWriter(env("TERN_OUTBOX_TABLE"));
    const orderId = `o_ts_${Date.now()}`;
    // Text, not an object: the bytes the receiver gets, including a number no double holds.
    const payload = `{"order_id":"${orderId}","amount_cents":4200,"ledger_ref":12345678901234567890123,"note":"Zoë ✓"}`;
    const event = writer.prepare({ type: "order.paid", tenantId: tenant, payload });
    const orderPut = {
      Put: {
        TableName: orders,
        Item: { order_id: { S: orderId }, status: { S: "paid" }, event_id: { S: event.id } },
        ConditionExpression: "attribute_not_exists(order_id)",
      },
    };
    await dynamodb.send(new TransactWriteItemsCommand({ TransactItems: [orderPut, event.transactItem] }));

    // 4. Delivered and verified by an independent library.
    const hit = await eventually("the webhook", 30, async () =>
      received.find((r) => r.headers["webhook-id"] === event.id),
    );
    webhook.verify(hit.body, hit.headers); // throws WebhookVerificationError on a bad signature
    if (hit.body !== payload) throw new Error(`body differs from the payload: ${hit.body}`);
    let forged = false;
    try {
      webhook.verify(hit.body.replace("4200", "4201"), hit.headers);
    } catch {
      forged = true;
    }
    if (!forged) throw new Error("the verifier accepted a changed body");

    // 5. The delivery, read back through the API.
    const delivered = await eventually("the delivery state", 30, async () => {
      const got = await tern.events.get(tenant, event.id);
      const mine = got.deliveries.find((d) => d.endpoint_id === endpointId);
      return mine?.state === "delivered" ? got : undefined;
    });
    if (delivered.type !== "order.paid") throw new Error(`event type ${delivered.type}`);
    const attempts = await eventually("the attempt", 30, async () => {
      const got = await tern.events.attempts(tenant, event.id);
      return got.attempts.some((a) => a.endpoint_id === endpointId && a.outcome === "delivered") ? got : undefined;
    });

    // The endpoint's delivery log over a time range, filtered by outcome: the query
    // (with the ':' of a timestamp) is signed too.
    const since = new Date(Date.now() - 10 * 60 * 1000).toISOString();
    const log = await eventually("the endpoint's delivery log", 30, async () => {
      const page = await tern.endpoints.attempts(tenant, endpointId, { since, outcome: "delivered", limit: 10 });
      return page.items.some((a) => a.event_id === event.id) ? page : undefined;
    });

    // The endpoint as the API shows it, in its tenant's list.
    const shown = await tern.endpoints.get(tenant, endpointId);
    if (shown.url !== `http://127.0.0.1:${port}/hooks/ts` || !shown.enabled) {
      throw new Error(`the endpoint reads back as ${JSON.stringify(shown)}`);
    }
    const listed = await tern.endpoints.list(tenant, { state: "enabled" });
    if (!listed.items.some((e) => e.id === endpointId)) throw new Error("the endpoint is not listed");
    // A test send: signed like any delivery, answered now. Under an idempotency key, its
    // retry (as after a timeout) answers the first result again and POSTs nothing more.
    const testKey = randomUUID();
    const testSend = await tern.endpoints.test(tenant, endpointId, { idempotencyKey: testKey });
    if (!testSend.delivered) throw new Error(`the test send was not delivered: ${JSON.stringify(testSend)}`);
    const testHit = await eventually("the test event", 30, async () =>
      received.find((r) => r.headers["webhook-id"] === testSend.event_id),
    );
    webhook.verify(testHit.body, testHit.headers);
    const posts = received.length;
    const retried = await tern.endpoints.test(tenant, endpointId, { idempotencyKey: testKey });
    if (JSON.stringify(retried) !== JSON.stringify(testSend) || received.length !== posts) {
      throw new Error(`the retried test send ran again: ${JSON.stringify(retried)}, ${received.length - posts} POSTs`);
    }

    // 5b. Receiver settings (clients/README.md): a secret header and a bearer token, then a
    // PATCH that keeps the header's secret without sending it again; a test send carries
    // both, and its `v1a` signature verifies (Node's own Ed25519) with the public key the
    // key rotation answered. The secret is never in an answer.
    const apiKey = `key-ts-${Date.now()}`;
    const withAuth = await tern.endpoints.update(tenant, endpointId, {
      headers: [{ name: "X-Api-Key", value: apiKey, secret: true }],
      auth: { type: "bearer", token: "tok-ts-e2e" },
      signatures: "both",
    });
    if (withAuth.headers[0]?.value !== null || withAuth.auth.type !== "bearer" || JSON.stringify(withAuth).includes(apiKey)) {
      throw new Error(`the settings read back as ${JSON.stringify(withAuth)}`);
    }
    await tern.endpoints.update(tenant, endpointId, {
      headers: [{ name: "X-Api-Key", secret: true }, { name: "X-Region", value: "eu" }],
    });
    const { public_key: publicKey } = await tern.endpoints.rotateSigningKey(tenant, endpointId, { overlap_hours: 0 });
    const reachSend = await tern.endpoints.test(tenant, endpointId);
    const reachHit = await eventually("the test event with the settings", 30, async () =>
      received.find((r) => r.headers["webhook-id"] === reachSend.event_id),
    );
    const h = reachHit.headers;
    if (h["x-api-key"] !== apiKey || h["x-region"] !== "eu" || h["authorization"] !== "Bearer tok-ts-e2e") {
      throw new Error(`the test send carried ${JSON.stringify(h)}`);
    }
    webhook.verify(reachHit.body, h);
    const ed25519 = createPublicKey({
      key: { kty: "OKP", crv: "Ed25519", x: Buffer.from(publicKey.slice("whpk_".length), "base64").toString("base64url") },
      format: "jwk",
    });
    const signed = Buffer.from(`${h["webhook-id"]}.${h["webhook-timestamp"]}.${reachHit.body}`);
    const v1a = (h["webhook-signature"] ?? "")
      .split(" ")
      .filter((e) => e.startsWith("v1a,"))
      .some((e) => verifySignature(null, signed, ed25519, Buffer.from(e.slice(4), "base64")));
    if (!v1a) throw new Error(`no v1a signature verifies with ${publicKey}: ${h["webhook-signature"]}`);
    // Back to the defaults for the rest.
    await tern.endpoints.update(tenant, endpointId, { headers: null, auth: null, signatures: null });

    // Publish through the API, the payload a plain object: delivered as the JSON text sent,
    // and a repeat of the same id is the original (created: false).
    const apiPayload = { order_id: orderId, source: "api", amount_cents: 4200, note: "Zoë ✓" };
    const apiEventId = `evt_ts_api_${Date.now()}`;
    const published = await tern.events.publish(tenant, { type: "order.paid", payload: apiPayload, id: apiEventId });
    const repeated = await tern.events.publish(tenant, { type: "order.paid", payload: apiPayload, id: apiEventId });
    if (published.id !== apiEventId || !published.created || repeated.created || repeated.id !== apiEventId) {
      throw new Error(`publish ${JSON.stringify(published)}, then ${JSON.stringify(repeated)}`);
    }
    const apiHit = await eventually("the published event", 30, async () =>
      received.find((r) => r.headers["webhook-id"] === apiEventId),
    );
    webhook.verify(apiHit.body, apiHit.headers);
    if (apiHit.body !== JSON.stringify(apiPayload)) throw new Error(`published body differs: ${apiHit.body}`);

    // A batch in one request, with a key: that event again (200, nothing written) and a new
    // one without an id (202, an id made for it), which is delivered under that id.
    const batchPayload = { order_id: orderId, source: "batch" };
    const batch = await tern.events.publishBatch(
      tenant,
      [
        { type: "order.paid", payload: apiPayload, id: apiEventId },
        { type: "order.paid", payload: batchPayload },
      ],
      { idempotencyKey: `batch-${apiEventId}` },
    );
    const [repeatInBatch, made] = batch.results;
    if (batch.failed !== 0 || repeatInBatch?.status !== 200 || made?.status !== 202 || !made.id?.startsWith("evt_")) {
      throw new Error(`publishBatch ${JSON.stringify(batch)}`);
    }
    const batchHit = await eventually("the batch's new event", 30, async () =>
      received.find((r) => r.headers["webhook-id"] === made.id),
    );
    webhook.verify(batchHit.body, batchHit.headers);
    if (batchHit.body !== JSON.stringify(batchPayload)) throw new Error(`batch body differs: ${batchHit.body}`);

    // 6a. An error answer: RFC 9457 problem naming the field, as a TernApiError; its
    // content type through the raw client.
    const bad = await apiError("an endpoint with a bad url", tern.endpoints.create(tenant, { url: "not a url" }));
    if (bad.status !== 400 || bad.problem.field !== "url" || bad.problem.type !== "urn:tern:problem:validation") {
      throw new Error(`expected a 400 problem naming url, got ${bad.status} ${JSON.stringify(bad.problem)}`);
    }
    const rawBad = await tern.raw.POST("/v1/tenants/{tenant_id}/endpoints", {
      params: { path: { tenant_id: tenant } },
      body: { url: "not a url" },
    });
    const contentType = rawBad.response.headers.get("content-type") ?? "";
    if (rawBad.response.status !== 400 || !contentType.startsWith("application/problem+json") || rawBad.error?.field !== "url") {
      throw new Error(`expected a 400 problem naming url, got ${rawBad.response.status} ${contentType} ${JSON.stringify(rawBad.error)}`);
    }
    // 6b. Another tenant's view of this endpoint: 404, never 403.
    const foreign = await apiError("another tenant's read", tern.endpoints.get(otherTenant, endpointId));
    if (foreign.status !== 404) throw new Error(`another tenant got ${foreign.status}`);
    // 6c. Atomicity: the same order again fails its condition, so its event never exists.
    const again = writer.prepare({ type: "order.paid", tenantId: tenant, payload: `{"order_id":"${orderId}"}` });
    let canceled = false;
    try {
      await dynamodb.send(new TransactWriteItemsCommand({ TransactItems: [orderPut, again.transactItem] }));
    } catch (e) {
      canceled = e instanceof TransactionCanceledException;
    }
    if (!canceled) throw new Error("a duplicate order was written");
    const ghost = await apiError("the canceled event's read", tern.events.get(tenant, again.id));
    if (ghost.status !== 404) throw new Error(`the canceled event exists: ${ghost.status}`);
    const row = await dynamodb.send(new GetItemCommand({ TableName: orders, Key: { order_id: { S: orderId } } }));
    if (row.Item?.event_id?.S !== event.id) throw new Error("the order row is not the first transaction's");

    console.log(
      JSON.stringify({
        client: "typescript",
        endpoint_id: endpointId,
        event_id: event.id,
        order_id: orderId,
        orders_table: orders,
        verified: "standardwebhooks",
        attempts: attempts.attempts.length,
        endpoint_log: log.items.length,
        api_event_id: apiEventId,
        test_send_status: testSend.status,
        receiver_settings: "carried",
        v1a_public_key: publicKey,
        problem_field: bad.problem.field,
        other_tenant_status: foreign.status,
        canceled_event_status: ghost.status,
      }),
    );
  } finally {
    server.close();
  }
}

main().catch((e: unknown) => {
  console.error(`e2e failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
  process.exit(1);
});
