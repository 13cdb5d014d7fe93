// The CommonJS build loads through require() and has the same surface as the ES module build.
const { test } = require("node:test");
const assert = require("node:assert/strict");

test("require('@pandastack/sdk') works", async () => {
  const sdk = require("@pandastack/sdk");
  for (const name of ["PandaStack", "Sandbox", "ExecResult", "ExecStream", "Filesystem", "NotFound", "Unauthorized", "NotImplemented"]) {
    assert.equal(typeof sdk[name], "function", name);
  }
  assert.match(require.resolve("@pandastack/sdk"), /dist[\\/]cjs[\\/]index\.js$/);
  const esm = await import("@pandastack/sdk");
  assert.deepEqual(Object.keys(esm).filter((k) => k !== "default").sort(), Object.keys(sdk).sort());
  const c = new sdk.PandaStack({ apiKey: "pds_x", baseUrl: "http://127.0.0.1:9" });
  assert.equal(c.sandbox, c.sandboxes);
});
