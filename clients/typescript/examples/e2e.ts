// End to end against `tern local` (run by tests/tests/clients.rs, also by hand: see
// clients/README.md). What a Node backend does with Tern:
//  1. runs its own webhook receiver on 127.0.0.1 (a stand-in for its customer's);
//  2. creates an endpoint for it through the Tern API (SigV4-signed), keeping the secret;
//  3. writes an order row (its own table) and the event in ONE TransactWriteItems;
//  4. sees the event delivered, verified by the independent `standardwebhooks` library;
//  5. reads the delivery back through the API (event, attempts);
//  6. checks an error answer (problem+json naming the field), tenant isolation (another
//     tenant's endpoint id is a 404) and atomicity (a failed transaction publishes nothing).
// Prints one JSON line with what it saw; exits 1 with the reason on any failure.
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
import { createTernClient, OutboxWriter, unwrap } from "../src/index.js";

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
    const tern = createTernClient({ baseUrl: env("TERN_API_URL"), region, credentials });
    const created = unwrap(
      await tern.POST("/v1/tenants/{tenant_id}/endpoints", {
        params: { path: { tenant_id: tenant } },
        body: { url: `http://127.0.0.1:${port}/hooks/ts`, event_types: ["order.paid"], description: "node e2e" },
      }),
    );
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
      const got = unwrap(
        await tern.GET("/v1/tenants/{tenant_id}/events/{event_id}", {
          params: { path: { tenant_id: tenant, event_id: event.id } },
        }),
      );
      const mine = got.deliveries.find((d) => d.endpoint_id === endpointId);
      return mine?.state === "delivered" ? got : undefined;
    });
    if (delivered.type !== "order.paid") throw new Error(`event type ${delivered.type}`);
    const attempts = await eventually("the attempt", 30, async () => {
      const got = unwrap(
        await tern.GET("/v1/tenants/{tenant_id}/events/{event_id}/attempts", {
          params: { path: { tenant_id: tenant, event_id: event.id } },
        }),
      );
      return got.attempts.some((a) => a.endpoint_id === endpointId && a.outcome === "delivered") ? got : undefined;
    });

    // The endpoint's delivery log over a time range, filtered by outcome: the query
    // (with the ':' of a timestamp) is signed too.
    const since = new Date(Date.now() - 10 * 60 * 1000).toISOString();
    const log = await eventually("the endpoint's delivery log", 30, async () => {
      const page = unwrap(
        await tern.GET("/v1/tenants/{tenant_id}/endpoints/{endpoint_id}/attempts", {
          params: {
            path: { tenant_id: tenant, endpoint_id: endpointId },
            query: { since, outcome: "delivered", limit: 10 },
          },
        }),
      );
      return page.items.some((a) => a.event_id === event.id) ? page : undefined;
    });

    // 6a. An error answer: RFC 9457 problem naming the field.
    const bad = await tern.POST("/v1/tenants/{tenant_id}/endpoints", {
      params: { path: { tenant_id: tenant } },
      body: { url: "not a url" },
    });
    const contentType = bad.response.headers.get("content-type") ?? "";
    if (bad.response.status !== 400 || !contentType.startsWith("application/problem+json") || bad.error?.field !== "url") {
      throw new Error(`expected a 400 problem naming url, got ${bad.response.status} ${contentType} ${JSON.stringify(bad.error)}`);
    }
    // 6b. Another tenant's view of this endpoint: 404, never 403.
    const foreign = await tern.GET("/v1/tenants/{tenant_id}/endpoints/{endpoint_id}", {
      params: { path: { tenant_id: otherTenant, endpoint_id: endpointId } },
    });
    if (foreign.response.status !== 404) throw new Error(`another tenant got ${foreign.response.status}`);
    // 6c. Atomicity: the same order again fails its condition, so its event never exists.
    const again = writer.prepare({ type: "order.paid", tenantId: tenant, payload: `{"order_id":"${orderId}"}` });
    let canceled = false;
    try {
      await dynamodb.send(new TransactWriteItemsCommand({ TransactItems: [orderPut, again.transactItem] }));
    } catch (e) {
      canceled = e instanceof TransactionCanceledException;
    }
    if (!canceled) throw new Error("a duplicate order was written");
    const ghost = await tern.GET("/v1/tenants/{tenant_id}/events/{event_id}", {
      params: { path: { tenant_id: tenant, event_id: again.id } },
    });
    if (ghost.response.status !== 404) throw new Error(`the canceled event exists: ${ghost.response.status}`);
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
        problem_field: bad.error?.field,
        other_tenant_status: foreign.response.status,
        canceled_event_status: ghost.response.status,
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
