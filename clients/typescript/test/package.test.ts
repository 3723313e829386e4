// The package as users install it (issue 28): `npm pack` builds the tarball a user gets,
// a fresh project gets it unpacked into its node_modules as `npm install` would, beside
// the package's runtime dependencies alone (those package-lock.json does not mark dev,
// linked from this checkout's node_modules: no download), then a program imports
// everything from `@tern/client`, type-checked under `--strict` as a user's TypeScript
// would be, and runs. Nothing here reads this checkout's `src/` or `dist/`: a file left out
// of `files`, a missing build, a dependency declared as dev only or a type that only
// resolves here fails it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const PKG = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const TSC = path.join(PKG, "node_modules", "typescript", "bin", "tsc");

const CONSUMER = `
import {
  createTern,
  createTernClient,
  OutboxWriter,
  TernApiError,
  generateEventId,
  outboxKey,
  canonicalJson,
  OUTBOX_SCHEMA_VERSION,
  type Tern,
  type components,
} from "@tern/client";

type Endpoint = components["schemas"]["Endpoint"];
const tern: Tern = createTern({
  baseUrl: "http://127.0.0.1:9",
  region: "us-east-1",
  credentials: { accessKeyId: "AKID", secretAccessKey: "secret" },
});
const raw = createTernClient({
  baseUrl: "http://127.0.0.1:9",
  region: "us-east-1",
  credentials: { accessKeyId: "AKID", secretAccessKey: "secret" },
});
// No credentials: the AWS SDK's default chain, here the environment's keys (its providers
// load lazily, so a request is signed to prove they resolve from the install).
let signedBy = "";
const chained = createTern({
  baseUrl: "http://127.0.0.1:9",
  region: "us-east-1",
  fetch: async (request) => {
    signedBy = (request as Request).headers.get("authorization") ?? "";
    return new Response(null, { status: 404 });
  },
});
const refused = await chained.endpoints.get("tnt_a", "ep_1").catch((e: unknown) => e);
const writer = new OutboxWriter("outbox");
const item = writer.prepare({ type: "order.paid", tenantId: "tnt_a", payload: JSON.stringify({ order: 42 }) });
const id: string = generateEventId();
const shown: Endpoint | undefined = undefined;
console.log(JSON.stringify({
  facade: Object.keys(tern).sort(),
  raw: typeof raw.GET,
  item: item.id.length > 0,
  key: outboxKey("tnt_a", "evt_1"),
  canonical: canonicalJson({ b: 1, a: [2] }),
  version: OUTBOX_SCHEMA_VERSION,
  error: typeof TernApiError,
  id: id.startsWith("evt_"),
  shown: shown === undefined,
  chain: signedBy.split("Credential=")[1]?.split("/")[0],
  refused: refused instanceof TernApiError ? refused.status : String(refused),
}));
`;

test("the packed tarball installs into a fresh project and imports and type-checks from it alone", { timeout: 300_000 }, () => {
  const tmp = mkdtempSync(path.join(tmpdir(), "tern-client-pack-"));
  try {
    execFileSync("npm", ["pack", "--silent", "--pack-destination", tmp], { cwd: PKG, stdio: ["ignore", "pipe", "inherit"] });
    const tarballs = readdirSync(tmp).filter((f) => f.endsWith(".tgz"));
    assert.equal(tarballs.length, 1, String(tarballs));
    const app = path.join(tmp, "app");
    const modules = path.join(app, "node_modules");
    const installed = path.join(modules, "@tern", "client");
    mkdirSync(installed, { recursive: true });
    writeFileSync(
      path.join(app, "package.json"),
      JSON.stringify({ name: "app", private: true, type: "module", dependencies: { "@tern/client": `file:../${tarballs[0]}` } }),
    );
    execFileSync("tar", ["-xzf", path.join(tmp, tarballs[0]), "-C", installed, "--strip-components=1"]);
    // The runtime dependencies, as npm would place them: every top-level package the
    // lockfile does not mark dev (nested ones travel inside their parent's directory).
    const lock = JSON.parse(readFileSync(path.join(PKG, "package-lock.json"), "utf8"));
    let linked = 0;
    for (const [key, entry] of Object.entries(lock.packages as Record<string, { dev?: boolean }>)) {
      const name = key.startsWith("node_modules/") ? key.slice("node_modules/".length) : "";
      if (name === "" || name.includes("/node_modules/") || entry.dev) continue;
      const to = path.join(modules, name);
      mkdirSync(path.dirname(to), { recursive: true });
      symlinkSync(path.join(PKG, "node_modules", name), to, "dir");
      linked += 1;
    }
    assert.ok(linked >= 4, `${linked} runtime packages`);
    writeFileSync(path.join(app, "main.ts"), CONSUMER);
    writeFileSync(
      path.join(app, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: { strict: true, module: "nodenext", moduleResolution: "nodenext", target: "es2022", outDir: "out", skipLibCheck: false, types: [] },
        files: ["main.ts"],
      }),
    );
    execFileSync(process.execPath, [TSC, "-p", "tsconfig.json"], { cwd: app, stdio: ["ignore", "inherit", "inherit"] });
    const out = execFileSync(process.execPath, [path.join("out", "main.js")], {
      cwd: app,
      encoding: "utf8",
      env: {
        PATH: process.env.PATH,
        AWS_ACCESS_KEY_ID: "AKIDPACKAGETEST",
        AWS_SECRET_ACCESS_KEY: "secret",
        AWS_CONFIG_FILE: "/dev/null",
        AWS_SHARED_CREDENTIALS_FILE: "/dev/null",
      },
    });
    const seen = JSON.parse(out);
    assert.deepEqual(seen.facade, ["deadLetters", "endpoints", "events", "portal", "raw"]);
    assert.equal(seen.raw, "function");
    assert.equal(seen.item, true);
    assert.equal(seen.key, "tnt_a#evt_1");
    assert.equal(seen.canonical, '{"a":[2],"b":1}');
    assert.equal(seen.version, 2);
    assert.equal(seen.error, "function");
    assert.equal(seen.id, true);
    assert.equal(seen.chain, "AKIDPACKAGETEST");
    assert.equal(seen.refused, 404);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
