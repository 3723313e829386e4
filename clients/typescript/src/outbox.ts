/**
 * The transactional outbox item builder: turns an event into the `Put` to add to your
 * own DynamoDB `TransactWriteItems`, so the event exists exactly when your business
 * change does. It writes the item of clients/outbox/outbox-item.v2.schema.json exactly
 * as the Rust writer (`tern-outbox`) does: the vectors in clients/outbox/vectors are
 * reproduced byte for byte (test/vectors.test.ts).
 */
import { randomBytes } from "node:crypto";
import { currentTraceContext, traceparentProblem, tracestateProblem } from "./trace.js";

/** Default payload limit, bytes: 262,144 (256 KiB, the classic SQS message size). */
export const DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024;
/** Default time an item stays in the outbox table before DynamoDB's TTL removes it: 7 days. */
export const DEFAULT_TTL_DAYS = 7;
/** Longest TTL, days (10 years); shorter than 1 day is raised to 1 (the stream keeps records 24 h). */
export const MAX_TTL_DAYS = 3650;
/** Longest event id, tenant id and event type, bytes (tern_core::ids::MAX_ID_LEN). */
export const MAX_ID_LEN = 128;
/**
 * The schema version this builder writes (outbox-item.v2.schema.json): items keyed by
 * tenant and event id, so event ids are per tenant.
 */
export const OUTBOX_SCHEMA_VERSION = 2;
/** The condition on every outbox Put: an event id is never reused within its tenant. */
export const CONDITION_EXPRESSION = "attribute_not_exists(event_id)";

/**
 * The outbox table's key of a tenant's event (schema version 2): `<tenantId>#<id>`. The
 * same id in two tenants is two items, two events.
 */
export function outboxKey(tenantId: string, id: string): string {
  return `${tenantId}#${id}`;
}

/** Why an event cannot be written: the same codes in the Rust, TypeScript and Python builders. */
export type OutboxErrorCode =
  | "bad_event_id"
  | "bad_tenant_id"
  | "bad_event_type"
  | "bad_created_at"
  | "payload_not_json"
  | "payload_not_object"
  | "payload_too_large"
  | "payload_padded"
  | "payload_unsendable_character"
  | "bad_traceparent"
  | "bad_tracestate";

/** An event the builder refuses; `code` is stable, `message` says what to do. */
export class OutboxError extends Error {
  constructor(
    readonly code: OutboxErrorCode,
    message: string,
  ) {
    super(message);
    this.name = "OutboxError";
  }
}

/** A DynamoDB attribute as the SDK takes it (a String or a Number, as text). */
export type OutboxAttribute = { S: string } | { N: string };

/** The outbox Put, assignable to `@aws-sdk/client-dynamodb`'s `Put`. */
export interface OutboxPut {
  TableName: string;
  Item: Record<string, OutboxAttribute>;
  ConditionExpression: string;
}

/** One `TransactWriteItems` entry, assignable to the SDK's `TransactWriteItem`. */
export interface OutboxTransactItem {
  Put: OutboxPut;
}

/** What to publish. */
export interface NewOutboxEvent {
  /** Event type, 1-128 characters of `A-Za-z0-9._:-`. */
  type: string;
  /** The tenant (your customer) whose endpoints receive it, 1-128 of `A-Za-z0-9_-`. */
  tenantId: string;
  /**
   * The payload's exact JSON text (a JSON object), delivered byte for byte. Text, not an
   * object: `JSON.stringify` your object yourself if you like, but numbers beyond a
   * double's precision survive only as text.
   */
  payload: string;
  /** Your event id (1-128 of `A-Za-z0-9_-`), e.g. from the business key. Default: `evt_` + a UUIDv7 in hex. */
  id?: string;
  /** Creation time (years 0001-9999). Default: now. Kept to the millisecond. */
  createdAt?: Date;
  /**
   * The W3C traceparent of the span that writes the event (version 00, lowercase hex):
   * Tern's spans of the event join its trace. Default: the active OpenTelemetry span's,
   * when `@opentelemetry/api` is installed and a span is active; `null`: none.
   */
  traceparent?: string | null;
  /** The W3C tracestate that goes with `traceparent` (at most 512 characters, 32 members). */
  tracestate?: string;
}

/** A validated event and its outbox item. */
export interface PreparedEvent {
  id: string;
  type: string;
  tenantId: string;
  createdAt: Date;
  payload: string;
  /** The trace context the item carries, if any. */
  traceparent?: string;
  tracestate?: string;
  /** The conditional Put of the item. */
  put: OutboxPut;
  /** The Put wrapped for `TransactWriteItems`. */
  transactItem: OutboxTransactItem;
}

const ID_RE = /^[A-Za-z0-9_-]+$/;
const TYPE_RE = /^[A-Za-z0-9._:-]+$/;
// Bytes that count as padding around a payload: Rust's u8::is_ascii_whitespace.
const PADDING = new Set([" ", "\t", "\n", "\r", "\f"]);

function checkId(value: string, kind: "event id" | "tenant id"): void {
  const code = kind === "event id" ? "bad_event_id" : "bad_tenant_id";
  if (value.length === 0) throw new OutboxError(code, `${kind} is empty`);
  const bytes = Buffer.byteLength(value, "utf8");
  if (bytes > MAX_ID_LEN) {
    throw new OutboxError(code, `${kind} is ${bytes} bytes long; the limit is ${MAX_ID_LEN}`);
  }
  if (!ID_RE.test(value)) {
    throw new OutboxError(code, `${kind} may only hold ASCII letters, digits, '_' and '-'`);
  }
}

/** A new event id: `evt_` and a UUIDv7 (RFC 9562 §5.7: 48-bit Unix ms, then random) in hex. */
export function generateEventId(now: number = Date.now()): string {
  const b = randomBytes(16);
  let ms = BigInt(now);
  for (let i = 5; i >= 0; i--) {
    b[i] = Number(ms & 0xffn);
    ms >>= 8n;
  }
  b[6] = (b[6] & 0x0f) | 0x70;
  b[8] = (b[8] & 0x3f) | 0x80;
  return `evt_${b.toString("hex")}`;
}

function checkPayload(text: string, limit: number): void {
  if (!text.isWellFormed()) {
    throw new OutboxError("payload_not_json", "payload holds a lone UTF-16 surrogate: it has no UTF-8 form");
  }
  const size = Buffer.byteLength(text, "utf8");
  if (size > limit) {
    throw new OutboxError(
      "payload_too_large",
      `payload is ${size} bytes; the limit is ${limit} bytes. Send a reference instead: put the full ` +
        `data where the receiver can fetch it (for example an S3 object behind a presigned URL) and ` +
        `publish a small payload such as {"id":"...","url":"https://..."}`,
    );
  }
  if (PADDING.has(text.charAt(0)) || PADDING.has(text.charAt(text.length - 1))) {
    throw new OutboxError(
      "payload_padded",
      "payload must start with '{' and end with '}' with no surrounding whitespace, so its bytes survive every hop unchanged",
    );
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (e) {
    throw new OutboxError("payload_not_json", `payload is not valid JSON: ${(e as Error).message}`);
  }
  const bad = /[\uFFFE\uFFFF]/.exec(text);
  if (bad) {
    const cp = bad[0].charCodeAt(0).toString(16).toUpperCase();
    throw new OutboxError(
      "payload_unsendable_character",
      `payload holds the raw character U+${cp}, which SQS cannot carry; write it as the JSON escape \\u${cp} instead`,
    );
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
    const found = parsed === null ? "null" : Array.isArray(parsed) ? "array" : typeof parsed;
    throw new OutboxError("payload_not_object", `payload must be a JSON object, found ${found}`);
  }
}

/** Builds outbox items for one outbox table. */
export class OutboxWriter {
  readonly maxPayloadBytes: number;
  readonly ttlDays: number;

  /**
   * @param table the outbox table (TERN_OUTBOX_TABLE; the stacks' OutboxTableName output)
   * @param options.maxPayloadBytes payload limit, bytes; must match the relay's
   *   TERN_MAX_PAYLOAD_BYTES (default 262,144)
   * @param options.ttlDays days an item is kept, clamped to 1..=3650 (default 7)
   * @throws RangeError when either option is not a whole number
   */
  constructor(
    readonly table: string,
    options: { maxPayloadBytes?: number; ttlDays?: number } = {},
  ) {
    this.maxPayloadBytes = options.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
    if (!Number.isSafeInteger(this.maxPayloadBytes) || this.maxPayloadBytes < 0) {
      throw new RangeError(`maxPayloadBytes must be a whole number of bytes, got ${options.maxPayloadBytes}`);
    }
    const days = options.ttlDays ?? DEFAULT_TTL_DAYS;
    if (!Number.isSafeInteger(days)) {
      throw new RangeError(`ttlDays must be a whole number of days, got ${options.ttlDays}`);
    }
    this.ttlDays = Math.min(Math.max(days, 1), MAX_TTL_DAYS);
  }

  /**
   * Validates an event and builds its conditional Put.
   * @throws OutboxError with a stable `code` (checked in this order: id, type, tenant,
   *   time, then the payload's size, padding, JSON, characters, object).
   */
  prepare(event: NewOutboxEvent): PreparedEvent {
    const createdAt = event.createdAt ?? new Date();
    if (event.id !== undefined) checkId(event.id, "event id");
    if (
      event.type.length === 0 ||
      event.type.length > MAX_ID_LEN ||
      !TYPE_RE.test(event.type)
    ) {
      throw new OutboxError(
        "bad_event_type",
        `event type ${JSON.stringify(event.type)} is invalid: 1-128 characters of ASCII letters, digits, '.', '_', ':' or '-'`,
      );
    }
    checkId(event.tenantId, "tenant id");
    const ms = createdAt.getTime();
    const year = createdAt.getUTCFullYear();
    if (Number.isNaN(ms) || year < 1 || year > 9999) {
      throw new OutboxError("bad_created_at", `created_at is outside the years 0001-9999 that RFC 3339 can write`);
    }
    const id = event.id ?? generateEventId(ms);
    checkPayload(event.payload, this.maxPayloadBytes);
    const trace =
      event.traceparent === null
        ? undefined
        : event.traceparent !== undefined
          ? { traceparent: event.traceparent, tracestate: event.tracestate }
          : currentTraceContext();
    if (trace !== undefined) {
      const parentProblem = traceparentProblem(trace.traceparent);
      if (parentProblem !== undefined) throw new OutboxError("bad_traceparent", parentProblem);
      const stateProblem = trace.tracestate === undefined ? undefined : tracestateProblem(trace.tracestate);
      if (stateProblem !== undefined) throw new OutboxError("bad_tracestate", stateProblem);
    }
    const tracestate = trace?.tracestate?.trim() ? trace.tracestate : undefined;
    // Rust: (created_at + ttl).timestamp(), whole seconds rounded down.
    const expiresAt = Math.floor(ms / 1000) + this.ttlDays * 86_400;
    const put: OutboxPut = {
      TableName: this.table,
      Item: {
        event_id: { S: outboxKey(event.tenantId, id) },
        tern_record: { S: "outbox_event" },
        schema_version: { N: String(OUTBOX_SCHEMA_VERSION) },
        event_type: { S: event.type },
        tenant_id: { S: event.tenantId },
        created_at: { S: createdAt.toISOString() },
        payload: { S: event.payload },
        expires_at: { N: String(expiresAt) },
        ...(trace !== undefined ? { traceparent: { S: trace.traceparent } } : {}),
        ...(trace !== undefined && tracestate !== undefined ? { tracestate: { S: tracestate } } : {}),
      },
      ConditionExpression: CONDITION_EXPRESSION,
    };
    return {
      id,
      type: event.type,
      tenantId: event.tenantId,
      createdAt,
      payload: event.payload,
      ...(trace !== undefined ? { traceparent: trace.traceparent } : {}),
      ...(tracestate !== undefined ? { tracestate } : {}),
      put,
      transactItem: { Put: put },
    };
  }
}
