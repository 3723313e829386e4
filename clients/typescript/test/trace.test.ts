// The W3C trace context an outbox item carries (docs/tracing.md): the builder takes the
// active OpenTelemetry span's when none is given (@opentelemetry/api is an optional peer
// dependency), checks one that is given with the same rules as the Rust writer, and writes
// none when told so.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  context,
  ROOT_CONTEXT,
  trace,
  type Context,
  type ContextManager,
} from "@opentelemetry/api";
import {
  createTern,
  currentTraceContext,
  OutboxError,
  OutboxWriter,
} from "../src/index.js";

const TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
const SPAN_ID = "00f067aa0ba902b7";
const TRACEPARENT = `00-${TRACE_ID}-${SPAN_ID}-01`;

/** The smallest context manager: synchronous `with` on a stack (what an SDK registers). */
class StackContextManager implements ContextManager {
  private stack: Context[] = [];
  active(): Context {
    return this.stack[this.stack.length - 1] ?? ROOT_CONTEXT;
  }
  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(
    ctx: Context,
    fn: F,
    thisArg?: ThisParameterType<F>,
    ...args: A
  ): ReturnType<F> {
    this.stack.push(ctx);
    try {
      return fn.call(thisArg, ...args);
    } finally {
      this.stack.pop();
    }
  }
  bind<T>(_ctx: Context, target: T): T {
    return target;
  }
  enable(): this {
    return this;
  }
  disable(): this {
    this.stack = [];
    return this;
  }
}
context.setGlobalContextManager(new StackContextManager());

const prepare = (
  extra: { traceparent?: string | null; tracestate?: string } = {},
) =>
  new OutboxWriter("tern-outbox").prepare({
    type: "order.paid",
    tenantId: "tnt_acme",
    payload: '{"a":1}',
    ...extra,
  });

test("the active span is the default parent", () => {
  const span = trace.wrapSpanContext({
    traceId: TRACE_ID,
    spanId: SPAN_ID,
    traceFlags: 1,
  });
  const active = trace.setSpan(context.active(), span);
  const event = context.with(active, () => prepare());
  assert.equal(event.traceparent, TRACEPARENT);
  assert.deepEqual(event.put.Item.traceparent, { S: TRACEPARENT });
  assert.equal(event.put.Item.tracestate, undefined);
  assert.deepEqual(
    context.with(active, () => currentTraceContext()),
    { traceparent: TRACEPARENT },
  );
  const untraced = context.with(active, () => prepare({ traceparent: null }));
  assert.equal(untraced.put.Item.traceparent, undefined);
});

test("without an active span there is none", () => {
  assert.equal(currentTraceContext(), undefined);
  assert.equal(prepare().put.Item.traceparent, undefined);
});

for (const [traceparent, tracestate, code] of [
  ["01" + TRACEPARENT.slice(2), undefined, "bad_traceparent"],
  [TRACEPARENT.toUpperCase(), undefined, "bad_traceparent"],
  [`00-${"0".repeat(32)}-${SPAN_ID}-01`, undefined, "bad_traceparent"],
  [TRACEPARENT, "Rojo=1", "bad_tracestate"],
] as const) {
  test(`refused: ${traceparent} ${tracestate ?? ""}`, () => {
    assert.throws(
      () => prepare({ traceparent, tracestate }),
      (e: unknown) => e instanceof OutboxError && e.code === code,
    );
  });
}

test("publish sends the active span's context in the body, unless one is given", async () => {
  const bodies: unknown[] = [];
  const fetch = async (
    input: RequestInfo | URL,
    init?: RequestInit,
  ): Promise<Response> => {
    const request = new Request(input, init);
    bodies.push(JSON.parse(await request.text()));
    const answer = {
      id: "evt_1",
      type: "order.paid",
      tenant_id: "tnt_acme",
      created_at: "2026-12-01T09:00:00Z",
      created: true,
    };
    return new Response(JSON.stringify(answer), {
      status: 202,
      headers: { "content-type": "application/json" },
    });
  };
  const tern = createTern({
    baseUrl: "http://127.0.0.1:9/",
    region: "us-east-1",
    credentials: { accessKeyId: "AKIDTRACETEST", secretAccessKey: "secret" },
    fetch,
  });
  const span = trace.wrapSpanContext({
    traceId: TRACE_ID,
    spanId: SPAN_ID,
    traceFlags: 1,
  });
  const active = trace.setSpan(context.active(), span);
  await context.with(active, () =>
    tern.events.publish("tnt_acme", { type: "order.paid", payload: {} }),
  );
  const given = `00-${"1".repeat(32)}-${"2".repeat(16)}-00`;
  await context.with(active, () =>
    tern.events.publish("tnt_acme", {
      type: "order.paid",
      payload: {},
      traceparent: given,
    }),
  );
  await tern.events.publish("tnt_acme", { type: "order.paid", payload: {} });
  assert.deepEqual(bodies, [
    { type: "order.paid", payload: {}, traceparent: TRACEPARENT },
    { type: "order.paid", payload: {}, traceparent: given },
    { type: "order.paid", payload: {} },
  ]);
});
