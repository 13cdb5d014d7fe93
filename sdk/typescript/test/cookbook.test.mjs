// Runs every example of cookbook/ against the live server (each ends with "ok" and exit 0). The
// examples import @pandastack/sdk from cookbook/node_modules, a link to this package that
// sdk/test.sh makes (npm install in cookbook/).
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { LONG, serverEnv } from "./helpers.mjs";

const dir = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "cookbook");
const examples = readdirSync(dir).filter((f) => f.endsWith(".mjs")).sort();

describe("cookbook", { concurrency: true }, () => {
  it("has the examples", () => {
    assert.deepEqual(examples, ["dev-server-preview.mjs", "fork-and-compare.mjs", "long-job-reconnect.mjs", "webhook-receiver.mjs"]);
  });
  for (const file of examples) {
    it(file, LONG, async () => {
      const { baseUrl, apiKey } = serverEnv();
      const { code, stdout, stderr } = await new Promise((resolve) => {
        execFile(process.execPath, [file], { cwd: dir, env: { ...process.env, PANDASTACK_BASE_URL: baseUrl, PANDASTACK_API_KEY: apiKey }, timeout: 280_000 },
          (err, stdout, stderr) => resolve({ code: err ? err.code ?? 1 : 0, stdout, stderr }));
      });
      assert.equal(code, 0, `${file} failed:\n${stdout}\n${stderr}`);
      assert.match(stdout, /\nok\n$/, stdout);
    });
  }
});
