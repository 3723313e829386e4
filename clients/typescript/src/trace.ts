/**
 * W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` and
 * `tracestate` an event carries, so that Tern's spans of it (the relay's fan-out, every
 * attempt, the dead letter, a replay) join the trace of the code that wrote it. The same
 * rules as tern_core::trace_context (Rust) and tern_client.trace_context (Python).
 *
 * `currentTraceContext()` reads the caller's active OpenTelemetry span when
 * `@opentelemetry/api` is installed (an optional peer dependency: without it, or without
 * an active span, there is no context and the event starts a trace of its own).
 */
import { createRequire } from "node:module";

/** A trace context as its two header values. */
export interface TraceContext {
  traceparent: string;
  tracestate?: string;
}

/** Length of a version 00 traceparent: 55 characters (W3C Trace Context §3.2.2). */
export const TRACEPARENT_LENGTH = 55;
/** Longest tracestate: 512 characters (W3C Trace Context §3.3.1.1). */
export const MAX_TRACESTATE_LENGTH = 512;
/** Most tracestate members: 32 (W3C Trace Context §3.3.1.1). */
export const MAX_TRACESTATE_MEMBERS = 32;

const TRACEPARENT_RE = /^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$/;
const KEY_RE =
  /^(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})$/;
const VALUE_RE =
  /^[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]$/;

/** Why a traceparent is refused, or `undefined` when it is valid. */
export function traceparentProblem(value: string): string | undefined {
  if (value.length !== TRACEPARENT_LENGTH) {
    return `traceparent must be ${TRACEPARENT_LENGTH} bytes (00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>), found ${Buffer.byteLength(value, "utf8")}`;
  }
  const m = TRACEPARENT_RE.exec(value);
  if (!m) {
    return /^[0-9a-f]{2}-/.test(value) && !value.startsWith("00-")
      ? `traceparent version ${JSON.stringify(value.slice(0, 2))} is not supported (only 00, W3C Trace Context §3.2.2.1)`
      : "traceparent must be 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags> in lowercase hex";
  }
  if (/^0+$/.test(m[1]))
    return "traceparent trace id is all zeros, which W3C Trace Context forbids";
  if (/^0+$/.test(m[2]))
    return "traceparent parent id is all zeros, which W3C Trace Context forbids";
  return undefined;
}

/** Why a tracestate is refused, or `undefined` when it is valid. */
export function tracestateProblem(value: string): string | undefined {
  if (value.length > MAX_TRACESTATE_LENGTH) {
    return `tracestate is ${value.length} characters; the limit is ${MAX_TRACESTATE_LENGTH} (W3C Trace Context §3.3.1.1)`;
  }
  let members = 0;
  const parts = value.split(",");
  for (let i = 0; i < parts.length; i++) {
    const member = parts[i].replace(/^[ \t]+|[ \t]+$/g, "");
    if (member === "") continue;
    members++;
    const eq = member.indexOf("=");
    if (
      eq < 0 ||
      !KEY_RE.test(member.slice(0, eq)) ||
      !VALUE_RE.test(member.slice(eq + 1))
    ) {
      return `tracestate member ${i + 1} is not key=value (key: lowercase letters, digits, _-*/ and one optional @; value: printable ASCII without , or =)`;
    }
  }
  if (members > MAX_TRACESTATE_MEMBERS) {
    return `tracestate has ${members} members; the limit is ${MAX_TRACESTATE_MEMBERS} (W3C Trace Context §3.3.1.1)`;
  }
  return undefined;
}

interface OtelApi {
  trace: { getActiveSpan(): { spanContext(): OtelSpanContext } | undefined };
}
interface OtelSpanContext {
  traceId: string;
  spanId: string;
  traceFlags: number;
  traceState?: { serialize(): string };
}

let otel: OtelApi | null | undefined;

/** `@opentelemetry/api` when installed, loaded once; `null` when it is not. */
function openTelemetry(): OtelApi | null {
  if (otel === undefined) {
    try {
      otel = createRequire(import.meta.url)("@opentelemetry/api") as OtelApi;
    } catch {
      otel = null;
    }
  }
  return otel;
}

/**
 * The trace context of the caller's active OpenTelemetry span: `undefined` when
 * `@opentelemetry/api` is not installed, no span is active, or its context is invalid.
 */
export function currentTraceContext(): TraceContext | undefined {
  const span = openTelemetry()?.trace.getActiveSpan();
  if (!span) return undefined;
  const c = span.spanContext();
  const traceparent = `00-${c.traceId}-${c.spanId}-${(c.traceFlags & 0xff).toString(16).padStart(2, "0")}`;
  if (traceparentProblem(traceparent) !== undefined) return undefined;
  const state = c.traceState?.serialize();
  return state && tracestateProblem(state) === undefined
    ? { traceparent, tracestate: state }
    : { traceparent };
}
