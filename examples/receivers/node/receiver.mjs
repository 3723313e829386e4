#!/usr/bin/env node
// A Tern webhook receiver in Node, using the Standard Webhooks library.
//
//   npm ci                                   # standardwebhooks 1.1.1, from package-lock.json
//   TERN_WEBHOOK_SECRET=whsec_... [TERN_PAYLOAD_FORMAT=raw|standard_webhooks] node receiver.mjs [PORT]
//
// PORT defaults to $PORT, else 8000; the address to $HOST, else 127.0.0.1.
// TERN_PAYLOAD_FORMAT is the endpoint's payload format in Tern (default raw).
//
// For every POST it:
//   1. reads the RAW body bytes (never JSON.stringify(JSON.parse(body)): key order, spacing
//      and number spelling change the bytes and so the signature; do not put a JSON body
//      parser such as express.json() in front of this route);
//   2. verifies webhook-id / webhook-timestamp / webhook-signature with the secret
//      (HMAC-SHA256, constant-time, 5 minute tolerance both ways, any v1 entry may match,
//      so it keeps working while Tern signs with two secrets during a rotation);
//      a bad signature, a stale or future timestamp, or missing headers -> 400;
//   3. learns the event type: from the signed body's "type" for the standard_webhooks
//      format (and the event data from its "data"), from the webhook-event-type header for
//      raw payloads (that header is not signed; see shared/tern-receiver/README.md); a body
//      that is not a standard_webhooks envelope when one is expected -> 400;
//   4. deduplicates on webhook-id, which is the same on every retry and replay of an event:
//      a duplicate -> 200 without processing it again;
//   5. answers 200 at once and processes the event afterwards, so Tern's request never
//      waits for your business logic.

import http from "node:http";
import { Webhook } from "standardwebhooks";

const MAX_BODY_BYTES = 1024 * 1024;
const PAYLOAD_FORMATS = ["raw", "standard_webhooks"];

const secret = process.env.TERN_WEBHOOK_SECRET;
if (!secret) {
  console.error("set TERN_WEBHOOK_SECRET to the endpoint's whsec_... secret");
  process.exit(2);
}
const port = Number(process.argv[2] ?? process.env.PORT ?? 8000);
const host = process.env.HOST ?? "127.0.0.1";
const webhook = new Webhook(secret);
const payloadFormat = process.env.TERN_PAYLOAD_FORMAT ?? "raw";
if (!PAYLOAD_FORMATS.includes(payloadFormat)) {
  console.error(`TERN_PAYLOAD_FORMAT must be one of ${PAYLOAD_FORMATS.join(", ")}`);
  process.exit(2);
}

// Event ids already accepted. In-memory, so it is lost on restart and grows without bound:
// in production use a durable store with a TTL instead (e.g. a database table with a unique
// key on the id, Redis SET NX with an expiry, DynamoDB with a conditional put and TTL), and
// keep ids for longer than Tern's retry window plus the time within which you might replay.
const seenIds = new Set();

// Your business logic. Runs after the 200 has been sent. `data` is the application's
// payload, parsed.
async function processEvent(eventId, eventType, data) {
  console.log(`processing ${eventId} type=${eventType}`);
}

// The event type and the application's payload, or null if the body is not what the
// configured format promises. `body` is the verified raw body.
function eventTypeAndData(body, headers) {
  let parsed;
  try {
    parsed = JSON.parse(body.toString("utf8"));
  } catch {
    return null;
  }
  if (payloadFormat === "standard_webhooks") {
    // Signed: the type comes from the body, never from the (unsigned) header.
    const isEnvelope =
      parsed !== null && typeof parsed === "object" && typeof parsed.type === "string" && "data" in parsed;
    return isEnvelope ? { eventType: parsed.type, data: parsed.data } : null;
  }
  // Raw payload: the type is in the webhook-event-type header, which is not signed.
  return { eventType: headers["webhook-event-type"], data: parsed };
}

function reply(res, status, payload) {
  const data = JSON.stringify(payload);
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(data),
  });
  res.end(data);
}

const server = http.createServer((req, res) => {
  if (req.method !== "POST") {
    return reply(res, 405, { error: "POST only" });
  }
  const chunks = [];
  let size = 0;
  let tooLarge = false;
  req.on("data", (chunk) => {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) {
      tooLarge = true;
    } else if (!tooLarge) {
      chunks.push(chunk);
    }
  });
  req.on("end", () => {
    if (tooLarge) {
      return reply(res, 413, { error: "body too large" });
    }
    const body = Buffer.concat(chunks); // the raw bytes, exactly as Tern signed them
    // node:http lowercases header names; the library lowercases them too.
    try {
      webhook.verify(body, req.headers, { jsonParse: false });
    } catch (err) {
      // WebhookVerificationError, and also TypeError/Error for malformed headers.
      console.error(`rejected: ${err?.name}: ${err?.message}`);
      return reply(res, 400, { error: "invalid signature" });
    }
    const event = eventTypeAndData(body, req.headers);
    if (event === null) {
      // Signed by Tern but not the shape configured here: answer 400, so Tern retries and
      // then dead-letters it (replayable once the two settings agree).
      console.error(`rejected: not a ${payloadFormat} body`);
      return reply(res, 400, { error: `expected a ${payloadFormat} body` });
    }
    const eventId = req.headers["webhook-id"];
    if (seenIds.has(eventId)) {
      return reply(res, 200, { status: "duplicate", id: eventId });
    }
    seenIds.add(eventId); // check-and-set in one turn of the event loop: no race
    reply(res, 200, { status: "accepted", id: eventId });
    setImmediate(() => {
      processEvent(eventId, event.eventType, event.data).catch((err) => {
        // Log and alert in real code; the event was acknowledged, so Tern will not retry it.
        console.error(`failed ${eventId}: ${err}`);
      });
    });
  });
  req.on("error", () => reply(res, 400, { error: "bad request" }));
});

server.listen(port, host, () => {
  console.log(`listening on http://${host}:${port}/`);
});
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
