// src/generated/api.ts is committed; it must be what openapi-typescript makes of the
// committed shared/tern-api/openapi.json today. After a spec change: `make clients`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const pkg = join(here, "..");

test("src/generated/api.ts matches shared/tern-api/openapi.json (else run `make clients`)", () => {
  const dir = mkdtempSync(join(tmpdir(), "tern-ts-gen-"));
  try {
    const out = join(dir, "api.ts");
    execFileSync(
      join(pkg, "node_modules/.bin/openapi-typescript"),
      [join(pkg, "../../shared/tern-api/openapi.json"), "-o", out],
      { stdio: "pipe" },
    );
    const fresh = readFileSync(out, "utf8");
    const committed = readFileSync(join(pkg, "src/generated/api.ts"), "utf8");
    assert.ok(fresh.length > 1000, "openapi-typescript wrote a document");
    assert.equal(committed, fresh, "src/generated/api.ts is stale: run `make clients` and commit the result");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
