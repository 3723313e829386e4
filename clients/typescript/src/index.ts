/** @tern/client: the Tern API (typed, SigV4-signed) and the transactional outbox builder. */
export * from "./client.js";
export * from "./facade.js";
export * from "./outbox.js";
export * from "./outbox_postgres.js";
export * from "./trace.js";
export { canonicalJson } from "./canonical.js";
export type { components, operations, paths } from "./generated/api.js";
