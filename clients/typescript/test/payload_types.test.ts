// Issue 28: the publish payload was typed `Record<string, never>` (the schema declared an
// object without `additionalProperties`), so any real payload failed `tsc --strict`, which
// `npm test` runs over this file first. The payload is any JSON object now, reading and
// writing.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { components } from "../src/generated/api.js";

type NewEvent = components["schemas"]["NewEvent"];
type Event = components["schemas"]["Event"];

test("a publish body takes any JSON object as its payload", () => {
  const body: NewEvent = {
    type: "order.paid",
    payload: { order_id: "o_1", amount: 4200, lines: [{ sku: "a", qty: 2 }], paid: true, note: null },
  };
  assert.equal(
    JSON.stringify(body.payload),
    '{"order_id":"o_1","amount":4200,"lines":[{"sku":"a","qty":2}],"paid":true,"note":null}',
  );
});

test("an event read back exposes its payload's fields", () => {
  const read: Pick<Event, "payload"> = { payload: { order_id: "o_1", amount: 4200 } };
  assert.equal(read.payload?.["amount"], 4200);
});
