/**
 * The resource-style facade over the generated client: one method per operation of
 * shared/tern-api/openapi.json, `tern.endpoints.create(tenantId, { url })`. Every method
 * takes the tenant id first, then the path ids, then the body or the query (the types of
 * src/generated/api.ts); it resolves to the answer's data and rejects with `TernApiError`
 * on an error answer. It only maps arguments onto `raw`, the openapi-fetch client, which
 * stays available for anything the facade does not cover (headers, the raw `Response`).
 */
import { createTernClient, unwrap, type TernClient, type TernClientOptions } from "./client.js";
import type { components, operations } from "./generated/api.js";
import { currentTraceContext } from "./trace.js";

type Schemas = components["schemas"];
type QueryOf<Op extends keyof operations> = NonNullable<operations[Op]["parameters"]["query"]>;

/** `listEndpoints`' query: `state`, `limit`, `cursor`. */
export type ListEndpointsQuery = QueryOf<"listEndpoints">;
/** `listEndpointAttempts`' query: `since`, `until` (RFC 3339), `outcome`, `limit`, `cursor`. */
export type ListEndpointAttemptsQuery = QueryOf<"listEndpointAttempts">;
/** `listDeadLetters`' query: `max`. */
export type ListDeadLettersQuery = QueryOf<"listDeadLetters">;

/**
 * Options of every method that POSTs. `idempotencyKey` (a UUID made once per logical request
 * and kept for its retries) is sent as the `Idempotency-Key` header: for 24 hours a retry with
 * the same key and the same arguments gets the first answer again and does nothing twice; the
 * key with other arguments throws `TernApiError` 422 `idempotency-key-reused`, and one sent
 * while the first still runs 409 `idempotency-key-in-use` (retry it). docs/api.md "Idempotency".
 */
export interface PostOptions {
  idempotencyKey?: string;
}

/** The endpoints of a tenant: `tern.endpoints`. */
export interface TernEndpoints {
  /** `listEndpoints`: a page of endpoints in id order; pass `next_cursor` as `cursor` for the next. */
  list(tenantId: string, query?: ListEndpointsQuery): Promise<Schemas["EndpointList"]>;
  /**
   * `createEndpoint`: the endpoint and its signing secret, shown this once. With
   * `options.idempotencyKey` (a UUID kept for the retries of this one create) a retry
   * answers the first create's endpoint and secret instead of making a second; the key
   * with another body throws `TernApiError` 422 `idempotency-key-reused`. Every method that
   * POSTs takes the same `options` ({@link PostOptions}).
   */
  create(tenantId: string, body: Schemas["NewEndpoint"], options?: PostOptions): Promise<Schemas["EndpointCreated"]>;
  /** `getEndpoint`. */
  get(tenantId: string, endpointId: string): Promise<Schemas["Endpoint"]>;
  /**
   * `updateEndpoint`: only the fields present change; `null` returns a setting to its default.
   * Secrets may be left out to keep the stored ones: a secret header entry without `value`,
   * an `auth` of the same type without its password, token or client secret.
   */
  update(tenantId: string, endpointId: string, body: Schemas["EndpointPatch"]): Promise<Schemas["Endpoint"]>;
  /** `deleteEndpoint` (204: resolves to `undefined`). */
  delete(tenantId: string, endpointId: string): Promise<void>;
  /** `enableEndpoint`: its health is reset (circuit closed). */
  enable(tenantId: string, endpointId: string, options?: PostOptions): Promise<Schemas["Endpoint"]>;
  /** `disableEndpoint`, with an optional `reason` (default body `{}`). */
  disable(
    tenantId: string,
    endpointId: string,
    body?: Schemas["DisableRequest"],
    options?: PostOptions,
  ): Promise<Schemas["Endpoint"]>;
  /** `rotateEndpointSecret`: the new secret, shown this once (default body `{}`: 24 h overlap). */
  rotateSecret(
    tenantId: string,
    endpointId: string,
    body?: Schemas["RotateSecretRequest"],
    options?: PostOptions,
  ): Promise<Schemas["RotatedSecret"]>;
  /**
   * `rotateEndpointSigningKey`: a new Ed25519 key signs `v1a` at once, the old one keeps
   * signing for the overlap (default body `{}`: 24 h); resolves to the new `public_key`
   * (`whpk_...`, no secret: give it to the receiver) and the endpoint.
   */
  rotateSigningKey(
    tenantId: string,
    endpointId: string,
    body?: Schemas["RotateSigningKeyRequest"],
    options?: PostOptions,
  ): Promise<Schemas["RotatedSigningKey"]>;
  /** `sendTestEvent`: a `tern.test` event sent now, and what the receiver did with it. */
  test(tenantId: string, endpointId: string, options?: PostOptions): Promise<Schemas["TestSend"]>;
  /** `getEndpointHealth`. */
  health(tenantId: string, endpointId: string): Promise<Schemas["EndpointHealth"]>;
  /** `listEndpointAttempts`: the endpoint's delivery log, newest first. */
  attempts(
    tenantId: string,
    endpointId: string,
    query?: ListEndpointAttemptsQuery,
  ): Promise<Schemas["EndpointAttemptList"]>;
  /** `recoverEndpoint`: everything that failed in `since`..`until` is sent again. */
  recover(
    tenantId: string,
    endpointId: string,
    body: Schemas["RecoverRequest"],
    options?: PostOptions,
  ): Promise<Schemas["RecoverReport"]>;
}

/** The events of a tenant: `tern.events`. */
export interface TernEvents {
  /**
   * `publishEvent`: `{ type, payload, id?, traceparent?, tracestate? }`, `payload` a plain object
   * (sent as JSON). Without `traceparent`, the active OpenTelemetry span's context is sent when
   * `@opentelemetry/api` is installed, so Tern's spans of the event join the caller's trace.
   * Idempotent on `id`: a repeat resolves to the original with `created: false`.
   */
  publish(tenantId: string, body: Schemas["NewEvent"], options?: PostOptions): Promise<Schemas["PublishedEvent"]>;
  /**
   * `publishEventBatch`: 1-100 events in one request (each as `publish` takes one; the body at
   * most 2,621,440 bytes), each published on its own. Resolves to one result per event, in
   * order: `status` 202 (published), 200 (published before with that id) or its problem's
   * (400, 409, 413; 503: send it again); `failed` counts the events not published. Each
   * result names the event's `id`, made for it when none was given: send a failed event again
   * with it. With `options.idempotencyKey` a retried call answers the first call's results.
   */
  publishBatch(
    tenantId: string,
    events: Schemas["NewEvent"][],
    options?: PostOptions,
  ): Promise<Schemas["PublishedEventBatch"]>;
  /** `getEvent`: the event and where each of its deliveries stands. */
  get(tenantId: string, eventId: string): Promise<Schemas["Event"]>;
  /** `listEventAttempts`: every try of the event, oldest first, and its dead-lettered budgets. */
  attempts(tenantId: string, eventId: string): Promise<Schemas["EventAttempts"]>;
  /** `resendEvent`: the event goes to the endpoint again. */
  resend(tenantId: string, eventId: string, endpointId: string, options?: PostOptions): Promise<Schemas["Resend"]>;
}

/** The dead letters of a tenant: `tern.deadLetters`. */
export interface TernDeadLetters {
  /** `listDeadLetters`: grouped by endpoint and reason, largest group first. */
  list(tenantId: string, query?: ListDeadLettersQuery): Promise<Schemas["DeadLetterGroups"]>;
  /** `replayDeadLetters`: every set filter must match (default body `{}`: all of them). */
  replay(tenantId: string, body?: Schemas["ReplayRequest"], options?: PostOptions): Promise<Schemas["ReplayReport"]>;
}

/** The customer portal: `tern.portal`. */
export interface TernPortal {
  /** `createPortalSession`: a single-use link (default body `{}`: every endpoint, one hour). */
  createSession(
    tenantId: string,
    body?: Schemas["PortalSessionRequest"],
    options?: PostOptions,
  ): Promise<Schemas["PortalSession"]>;
}

/** The Tern API by resource, every request SigV4-signed; `raw` is the openapi-fetch client. */
export interface Tern {
  /** `listEndpoints` ... `recoverEndpoint`. */
  endpoints: TernEndpoints;
  /** `publishEvent`, `publishEventBatch`, `getEvent`, `listEventAttempts`, `resendEvent`. */
  events: TernEvents;
  /** `listDeadLetters`, `replayDeadLetters`. */
  deadLetters: TernDeadLetters;
  /** `createPortalSession`. */
  portal: TernPortal;
  /** The generated client the facade calls: `raw.GET("/v1/tenants/{tenant_id}/...", ...)`. */
  raw: TernClient;
}

/**
 * A path id, checked: an empty id, `.` or `..` would change the path the request goes to
 * (URLs drop dot segments), so it throws a `TypeError` before anything is sent.
 */
function id(name: string, value: string): string {
  if (value === "" || value === "." || value === "..") {
    throw new TypeError(`${name} must be an id, not ${JSON.stringify(value)}`);
  }
  return value;
}

/** The `Idempotency-Key` header of `options`, as openapi-fetch takes header parameters. */
function key(options: PostOptions | undefined): { header?: { "Idempotency-Key": string } } {
  return options?.idempotencyKey === undefined ? {} : { header: { "Idempotency-Key": options.idempotencyKey } };
}

/**
 * The facade over a Tern API client: `createTern({ baseUrl, region })`, signed with the
 * AWS SDK's default credential chain, or with `credentials` when given.
 */
export function createTern(options: TernClientOptions): Tern {
  const raw = createTernClient(options);
  const tenant = (tenantId: string) => ({ tenant_id: id("tenantId", tenantId) });
  const endpoint = (tenantId: string, endpointId: string) => ({
    ...tenant(tenantId),
    endpoint_id: id("endpointId", endpointId),
  });
  const event = (tenantId: string, eventId: string) => ({ ...tenant(tenantId), event_id: id("eventId", eventId) });

  const endpoints: TernEndpoints = {
    list: async (tenantId, query) =>
      unwrap(await raw.GET("/v1/tenants/{tenant_id}/endpoints", { params: { path: tenant(tenantId), query } })),
    create: async (tenantId, body, options) =>
      unwrap(
        await raw.POST("/v1/tenants/{tenant_id}/endpoints", {
          params: { path: tenant(tenantId), ...key(options) },
          body,
        }),
      ),
    get: async (tenantId, endpointId) =>
      unwrap(
        await raw.GET("/v1/tenants/{tenant_id}/endpoints/{endpoint_id}", {
          params: { path: endpoint(tenantId, endpointId) },
        }),
      ),
    update: async (tenantId, endpointId, body) =>
      unwrap(
        await raw.PATCH("/v1/tenants/{tenant_id}/endpoints/{endpoint_id}", {
          params: { path: endpoint(tenantId, endpointId) },
          body,
        }),
      ),
    delete: async (tenantId, endpointId) => {
      unwrap(
        await raw.DELETE("/v1/tenants/{tenant_id}/endpoints/{endpoint_id}", {
          params: { path: endpoint(tenantId, endpointId) },
        }),
      );
    },
    enable: async (tenantId, endpointId, options) =>
      unwrap(
        await raw.POST("/v1/tenants/{tenant_id}/endpoints/{endpoint_id}/enable", {
          params: { path: endpoint(tenantId, endpointId), ...key(options) },
        }),
      ),
    disable: async (tenantId, endpointId, body = {}, options) =>
      unwrap(
        await raw.POST("/v1/tenants/{tenant_id}/endpoints/{endpoint_id}/disable", {
          params: { path: endpoint(tenantId, endpointId), ...key(options) },
          body,
        }),
      ),
    rotateSecret: async (tenantId, endpointId, body = {}, options) =>
      unwrap(
        await raw.POST("/v1/tenants/{tenant_id}/endpoints/{endpoint_id}/rotate-secret", {
          params: { path: endpoint(tenantId, endpointId), ...key(options) },
          body,
        }),
      ),
    rotateSigningKey: async (tenantId, endpointId, body = {}, options) =>
      unwrap(
        await raw.POST("/v1/tenants/{tenant_id}/endpoints/{endpoint_id}/rotate-signing-key", {
          params: { path: endpoint(tenantId, endpointId), ...key(options) },
          body,
        }),
      ),
    test: async (tenantId, endpointId, options) =>
      unwrap(
        await raw.POST("/v1/tenants/{tenant_id}/endpoints/{endpoint_id}/test", {
          params: { path: endpoint(tenantId, endpointId), ...key(options) },
        }),
      ),
    health: async (tenantId, endpointId) =>
      unwrap(
        await raw.GET("/v1/tenants/{tenant_id}/endpoints/{endpoint_id}/health", {
          params: { path: endpoint(tenantId, endpointId) },
        }),
      ),
    attempts: async (tenantId, endpointId, query) =>
      unwrap(
        await raw.GET("/v1/tenants/{tenant_id}/endpoints/{endpoint_id}/attempts", {
          params: { path: endpoint(tenantId, endpointId), query },
        }),
      ),
    recover: async (tenantId, endpointId, body, options) =>
      unwrap(
        await raw.POST("/v1/tenants/{tenant_id}/endpoints/{endpoint_id}/recover", {
          params: { path: endpoint(tenantId, endpointId), ...key(options) },
          body,
        }),
      ),
  };

  const events: TernEvents = {
    publish: async (tenantId, body, options) =>
      unwrap(
        await raw.POST("/v1/tenants/{tenant_id}/events", {
          params: { path: tenant(tenantId), ...key(options) },
          body: body.traceparent === undefined ? { ...body, ...currentTraceContext() } : body,
        }),
      ),
    publishBatch: async (tenantId, events, options) =>
      unwrap(
        await raw.POST("/v1/tenants/{tenant_id}/event-batches", {
          params: { path: tenant(tenantId), ...key(options) },
          body: { events },
        }),
      ),
    get: async (tenantId, eventId) =>
      unwrap(
        await raw.GET("/v1/tenants/{tenant_id}/events/{event_id}", { params: { path: event(tenantId, eventId) } }),
      ),
    attempts: async (tenantId, eventId) =>
      unwrap(
        await raw.GET("/v1/tenants/{tenant_id}/events/{event_id}/attempts", {
          params: { path: event(tenantId, eventId) },
        }),
      ),
    resend: async (tenantId, eventId, endpointId, options) =>
      unwrap(
        await raw.POST("/v1/tenants/{tenant_id}/events/{event_id}/endpoints/{endpoint_id}/resend", {
          params: { path: { ...event(tenantId, eventId), endpoint_id: id("endpointId", endpointId) }, ...key(options) },
        }),
      ),
  };

  const deadLetters: TernDeadLetters = {
    list: async (tenantId, query) =>
      unwrap(await raw.GET("/v1/tenants/{tenant_id}/dead-letters", { params: { path: tenant(tenantId), query } })),
    replay: async (tenantId, body = {}, options) =>
      unwrap(
        await raw.POST("/v1/tenants/{tenant_id}/dead-letters/replay", {
          params: { path: tenant(tenantId), ...key(options) },
          body,
        }),
      ),
  };

  const portal: TernPortal = {
    createSession: async (tenantId, body = {}, options) =>
      unwrap(
        await raw.POST("/v1/tenants/{tenant_id}/portal-sessions", {
          params: { path: tenant(tenantId), ...key(options) },
          body,
        }),
      ),
  };

  return { endpoints, events, deadLetters, portal, raw };
}
