// Type-checks test/types-check.ts and the seed snippet against the built .d.ts files.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");

test("the public types accept the documented calls and the seed snippet", { timeout: 120_000 }, async () => {
  const r = await new Promise((resolve) =>
    execFile(process.execPath, [tsc, "-p", join(here, "tsconfig.json")], (error, stdout, stderr) =>
      resolve({ code: error ? error.code ?? 1 : 0, out: stdout + stderr }),
    ),
  );
  assert.equal(r.code, 0, r.out);
});
