// The seeds' TypeScript snippet, copied unchanged into test/fixtures/, run as a script with only
// the environment set (see test/fixtures/README.md).
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { liveClient, serverEnv } from "./helpers.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const seedsDir = process.env.PANDASTACK_SEEDS_DIR || "/work/shared/seeds";

const SEEDS = {
  // meta: the snippet's own metadata, to find (and kill) what it made without touching the
  // sandboxes of test files running at the same time
  "seed_002_vercel.mjs": { seed: "002_1960fdc8054057ce.txt", meta: { task: "data-analysis" }, want: ["1024", "hello from inside the VM"] },
};

function run(args, env) {
  return new Promise((resolve) => {
    // cwd: the package, so `import "@pandastack/sdk"` resolves to it (self-reference) for -e too
    execFile(process.execPath, args, { env, timeout: 900_000, cwd: join(here, "..") }, (error, stdout, stderr) =>
      resolve({ code: error ? (error.code ?? 1) : 0, stdout, stderr }),
    );
  });
}

// The snippet with only what depends on the server's catalog swapped ("code-interpreter" ->
// "base"). When the verbatim test fails and this passes, the SDK is fine and the server lacks the
// template the seed assumes.
function variantArgs(file) {
  const code = readFileSync(file, "utf8").replaceAll('"code-interpreter"', '"base"').replaceAll('"/work/', '"/tmp/work/');
  return ["--input-type=module", "-e", code];
}

describe("seed snippets", () => {
  for (const [name, { seed, meta, want }] of Object.entries(SEEDS)) for (const variant of [false, true]) {
    const title = variant ? `${name} with template "base" (variant)` : `${name} (seeds/${seed}) runs unchanged`;
    it(title, { timeout: 900_000 }, async () => {
      const { baseUrl, apiKey } = serverEnv();
      const client = liveClient();
      const running = async () => new Set((await client.sandboxes.list({ metadata: meta, state: ["running", "hibernated"] })).map((s) => s.id));
      const before = await running();
      let r;
      try {
        const file = join(here, "fixtures", name);
        r = await run(variant ? variantArgs(file) : [file], {
          PATH: process.env.PATH,
          PANDASTACK_API_KEY: apiKey,
          PANDASTACK_BASE_URL: baseUrl,
        });
      } finally {
        // The snippet leaves its sandbox (and fork) running: kill what it made.
        for (const id of await running()) {
          if (!before.has(id)) await (await client.sandboxes.get(id)).kill().catch(() => undefined);
        }
      }
      assert.equal(r.code, 0, `${name} failed (exit ${r.code}):\n--- stdout\n${r.stdout}--- stderr\n${r.stderr}`);
      const lines = r.stdout.split("\n").map((l) => l.trim()).filter(Boolean);
      assert.deepEqual(lines, want);
    });
  }

  it("fixtures are verbatim passages of their seeds", (t) => {
    if (!existsSync(seedsDir)) return t.skip(`seeds directory ${seedsDir} not present (set PANDASTACK_SEEDS_DIR)`);
    for (const [name, { seed }] of Object.entries(SEEDS)) {
      const snippet = readFileSync(join(here, "fixtures", name), "utf8");
      const text = readFileSync(join(seedsDir, seed), "utf8");
      assert.ok(text.includes(snippet), `${name} is not a verbatim passage of ${seed}`);
    }
  });
});
