/**
 * The Tern API client: `openapi-fetch` over the types generated from
 * shared/tern-api/openapi.json (src/generated/api.ts), every request signed with AWS
 * Signature Version 4 for service `execute-api` (API Gateway's IAM authorization in AWS;
 * `tern local` checks the same signatures against the credentials in .tern/local.env).
 */
import createClient, { type Client, type Middleware } from "openapi-fetch";
import { Sha256 } from "@aws-crypto/sha256-js";
import { fromNodeProviderChain } from "@aws-sdk/credential-providers";
import { HttpRequest } from "@smithy/protocol-http";
import { SignatureV4 } from "@smithy/signature-v4";
import type { components, paths } from "./generated/api.js";

/** AWS credentials: an access key pair, with a session token for temporary ones. */
export interface AwsCredentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
}

/** Where the API is and how to sign for it. */
export interface TernClientOptions {
  /** The API's base URL: the stacks' ApiUrl output, or TERN_API_URL from .tern/local.env. */
  baseUrl: string;
  /** AWS region of the API (us-east-1 in local mode). */
  region: string;
  /**
   * Credentials, or a provider of them. Default: the AWS SDK's default chain for Node
   * (`fromNodeProviderChain()` of @aws-sdk/credential-providers): AWS_ACCESS_KEY_ID and
   * AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) from the environment first, then SSO,
   * the shared config and credentials files, web identity, and the ECS or EC2 role; it
   * keeps what it found and fetches again before temporary credentials expire.
   */
  credentials?: AwsCredentials | (() => Promise<AwsCredentials>);
  /** A fetch to use instead of the global one. */
  fetch?: typeof globalThis.fetch;
}

/** A typed Tern API client (openapi-fetch): `client.POST("/v1/tenants/{tenant_id}/events", ...)`. */
export type TernClient = Client<paths>;

/** An RFC 9457 problem document, as every error answer carries it. */
export type Problem = components["schemas"]["Problem"];

/** SigV4 signing as openapi-fetch middleware: signs method, path, query, headers and body. */
export function sigv4Middleware(options: Pick<TernClientOptions, "region" | "credentials">): Middleware {
  const signer = new SignatureV4({
    service: "execute-api",
    region: options.region,
    credentials: options.credentials ?? fromNodeProviderChain(),
    sha256: Sha256,
  });
  return {
    async onRequest({ request }) {
      const url = new URL(request.url);
      const body = request.body === null ? undefined : await request.clone().text();
      const headers: Record<string, string> = { host: url.host };
      request.headers.forEach((value, name) => {
        headers[name] = value;
      });
      const query: Record<string, string | string[]> = {};
      url.searchParams.forEach((value, name) => {
        const seen = query[name];
        query[name] = seen === undefined ? value : ([] as string[]).concat(seen, value);
      });
      const signed = await signer.sign(
        new HttpRequest({
          method: request.method,
          protocol: url.protocol,
          hostname: url.hostname,
          port: url.port === "" ? undefined : Number(url.port),
          path: url.pathname,
          query,
          headers,
          body,
        }),
      );
      // fetch sets Host itself, to the same url.host that was signed.
      const out = new Headers();
      for (const [name, value] of Object.entries(signed.headers)) {
        if (name.toLowerCase() !== "host") out.set(name, value);
      }
      return new Request(request.url, { method: request.method, headers: out, body });
    },
  };
}

/** A Tern API client whose every request is signed. */
export function createTernClient(options: TernClientOptions): TernClient {
  const client = createClient<paths>({
    baseUrl: options.baseUrl.replace(/\/+$/, ""),
    fetch: options.fetch,
  });
  client.use(sigv4Middleware(options));
  return client;
}

/** An error answer of the API, with its problem document. */
export class TernApiError extends Error {
  constructor(
    readonly status: number,
    readonly problem: Problem,
  ) {
    super(`${status} ${problem.title}: ${problem.detail}${problem.field ? ` (field ${problem.field})` : ""}`);
    this.name = "TernApiError";
  }
}

/** Most characters of a non-problem error body kept as the problem's `detail`. */
export const MAX_DETAIL_CHARS = 1000;

/**
 * An error answer's body as a problem: a problem document as it came; anything else (API
 * Gateway's own `{"message": "Forbidden"}` for a bad signature, a proxy's HTML 502, no
 * body) as the problem RFC 9457 §4.2.1 means by a missing type: `about:blank`, the
 * status's text as title, the body's `message` (or its first characters) as detail.
 */
export function asProblem(error: unknown, response: Response): Problem {
  const doc = error as Record<string, unknown> | undefined;
  if (
    doc !== null &&
    typeof doc === "object" &&
    typeof doc.type === "string" &&
    typeof doc.title === "string" &&
    typeof doc.status === "number" &&
    typeof doc.detail === "string"
  ) {
    return doc as unknown as Problem;
  }
  const title = response.statusText || `HTTP ${response.status}`;
  const text =
    doc !== null && typeof doc === "object" && typeof doc.message === "string"
      ? doc.message
      : typeof error === "string"
        ? error.trim()
        : "";
  return { type: "about:blank", title, status: response.status, detail: text.slice(0, MAX_DETAIL_CHARS) || title };
}

/**
 * The data of an openapi-fetch result, or a `TernApiError` for an error answer:
 * `const created = unwrap(await client.POST(...))`.
 */
export function unwrap<T>(result: { data?: T; error?: unknown; response: Response }): T {
  if (result.error !== undefined || !result.response.ok) {
    throw new TernApiError(result.response.status, asProblem(result.error, result.response));
  }
  // A 204 (delete) has no data.
  return result.data as T;
}
