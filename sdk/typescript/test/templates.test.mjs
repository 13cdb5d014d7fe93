// client.templates against a tiny local stand-in for the API (no server, no VMs): what the SDK
// sends and how it reads the build stream. The server side is tested in internal/api.
import { after, before, beforeEach, describe, it } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { BuildFailed, Conflict, NotFound, PandaStack } from "@pandastack/sdk";

const WEB = { name: "web", owner: "team", vcpus: 1, memory_mib: 512, disk_mib: 2048, size_bytes: 1024, bake_ms: 1200,
  aliases: [], metadata: { v: "1" }, available: true, baked: true };
const PG = { name: "postgres-17", owner: "catalog", vcpus: 2, memory_mib: 1024, disk_mib: 4096,
  aliases: ["postgres", "postgres-16"], metadata: { version: "17" }, available: true, baked: false };

describe("templates (offline)", () => {
  let server;
  let client;
  const seen = [];
  before(async () => {
    server = createServer((req, res) => {
      let body = "";
      req.on("data", (c) => (body += c));
      req.on("end", () => {
        seen.push({ method: req.method, url: req.url, type: req.headers["content-type"], body });
        const json = (status, v) => {
          res.writeHead(status, { "content-type": "application/json" });
          res.end(v === undefined ? "" : JSON.stringify(v));
        };
        const ndjson = (evs) => {
          res.writeHead(200, { "content-type": "application/x-ndjson" });
          for (const ev of evs) res.write(JSON.stringify(ev) + "\n");
          res.end();
        };
        if (req.method === "GET" && req.url === "/v1/templates") return json(200, { templates: [PG, WEB] });
        if (req.method === "GET" && req.url === "/v1/templates/postgres-16") return json(200, PG);
        if (req.method === "GET") return json(404, { error: { code: "not_found", message: "template not found" } });
        if (req.method === "DELETE" && req.url === "/v1/templates/web") return json(204);
        if (req.method === "DELETE") return json(409, { error: { code: "conflict", message: "template base is a catalog template" } });
        if (body.includes("catalog-name")) return json(409, { error: { code: "conflict", message: "taken by the catalog" } });
        if (body.includes("exit 1")) {
          return ndjson([{ progress: "step 1/1: exit 1" }, { error: { code: "build_failed", message: "step 1 failed (exit 1)" } }]);
        }
        ndjson([{ progress: "building web" }, { progress: "step 1/1: echo hi" }, { template: WEB }]);
      });
    });
    await new Promise((r) => server.listen(0, "127.0.0.1", r));
    client = new PandaStack({ apiKey: "pds_test", baseUrl: `http://127.0.0.1:${server.address().port}` });
  });
  after(() => server.close());
  beforeEach(() => seen.splice(0));

  it("lists and gets, aliases included", async () => {
    const ts = await client.templates.list();
    assert.deepEqual(ts.map((t) => [t.name, t.owner]), [["postgres-17", "catalog"], ["web", "team"]]);
    assert.deepEqual(ts[0].aliases, ["postgres", "postgres-16"]);
    assert.deepEqual([ts[1].metadata, ts[1].sizeBytes, ts[1].bakeMs], [{ v: "1" }, 1024, 1200]);
    assert.equal((await client.templates.get("postgres-16")).name, "postgres-17");
    await assert.rejects(client.templates.get("nope"), NotFound);
  });

  it("builds from an object, relaying progress", async () => {
    const lines = [];
    const t = await client.templates.build({ name: "web", from: "base", steps: ["echo hi"] }, { onProgress: (l) => lines.push(l) });
    assert.deepEqual([t.name, t.owner, t.baked], ["web", "team", true]);
    assert.deepEqual(lines, ["building web", "step 1/1: echo hi"]);
    const req = seen.at(-1);
    assert.deepEqual([req.method, req.url, req.type], ["POST", "/v1/templates", "application/json"]);
    assert.deepEqual(JSON.parse(req.body).steps, ["echo hi"]);
  });

  it("builds from YAML", async () => {
    assert.equal((await client.templates.build("name: web\nfrom: base\n")).name, "web");
    assert.deepEqual([seen.at(-1).type, seen.at(-1).body], ["application/yaml", "name: web\nfrom: base\n"]);
  });

  it("a failed build is BuildFailed; a refused spec is its error", async () => {
    const lines = [];
    const e = await client.templates.build({ name: "x", from: "base", steps: ["exit 1"] }, { onProgress: (l) => lines.push(l) }).catch((x) => x);
    assert.ok(e instanceof BuildFailed, String(e));
    assert.equal(e.code, "build_failed");
    assert.match(e.message, /step 1 failed/);
    assert.deepEqual(lines, ["step 1/1: exit 1"]);
    await assert.rejects(client.templates.build({ name: "catalog-name", from: "base" }), Conflict);
    await assert.rejects(client.templates.build(42), TypeError);
  });

  it("deletes", async () => {
    await client.templates.delete("web");
    assert.deepEqual([seen.at(-1).method, seen.at(-1).url], ["DELETE", "/v1/templates/web"]);
    await assert.rejects(client.templates.delete("base"), Conflict);
  });
});
