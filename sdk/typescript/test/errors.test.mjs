// Error mapping against the real server, and retries against a scripted local server.
import { afterEach, beforeEach, describe, it } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { createServer as createNetServer } from "node:net";
import {
  APIConnectionError,
  Capacity,
  ConfigurationError,
  Conflict,
  InternalError,
  InvalidRequest,
  NotFound,
  NotImplemented,
  PandaStack,
  PandaStackError,
  RateLimited,
  Sandbox,
  Unauthorized,
  errorFromPayload,
  Forbidden,
  PayloadTooLarge,
  Timeout,
  NoSpace,
} from "@pandastack/sdk";
import { ERROR_CASES, TEMPLATE, liveSuite, serverEnv } from "./helpers.mjs";

async function rawApi(method, path, body) {
  const { baseUrl, apiKey } = serverEnv();
  const r = await fetch(baseUrl + path, {
    method,
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: r.status, body: await r.json() };
}

describe("errors from the real server", () => {
  let client, t;
  liveSuite((live) => ({ client, t } = live));

  it("a bad key is Unauthorized", async () => {
    const { baseUrl } = serverEnv();
    for (const [key, words] of [["pds_bad", /malformed/], [`pds_${"A".repeat(32)}`, /no such key/], ["nope", /malformed/]]) {
      const c = new PandaStack({ apiKey: key, baseUrl });
      const e = await c.sandboxes.list().catch((x) => x);
      assert.ok(e instanceof Unauthorized, String(e));
      assert.ok(e instanceof PandaStackError && e instanceof Error);
      assert.deepEqual([e.status, e.code, e.name], [401, "unauthorized", "Unauthorized"]);
      assert.match(e.message, words);
      assert.ok(e.requestId);
      await assert.rejects(c.sandboxes.create({ template: TEMPLATE }), Unauthorized);
    }
  });

  it("a missing sandbox is NotFound", async () => {
    const e = await client.sandboxes.get("sb_doesnotexist0000").catch((x) => x);
    assert.ok(e instanceof NotFound, String(e));
    assert.deepEqual([e.status, e.code, e.message], [404, "not_found", "sandbox sb_doesnotexist0000 not found"]);
    assert.ok(e.requestId && String(e).includes(e.requestId));
  });

  it("calls on a missing sandbox are NotFound", async () => {
    const ghost = new Sandbox(client, { id: "sb_doesnotexist0001" });
    await assert.rejects(ghost.exec("true"), NotFound);
    await assert.rejects(ghost.filesystem.read("/etc/hostname"), NotFound);
    await assert.rejects(ghost.setTtl(60), NotFound);
    await assert.rejects(ghost.filesystem.exists("/tmp"), NotFound);
    await assert.rejects(async () => {
      for await (const _ of ghost.execStream("true")) {
        // nothing arrives
      }
    }, NotFound);
  });

  it("a bad ttl carries the API's message", async () => {
    const raw = await rawApi("POST", "/v1/sandboxes", { template: TEMPLATE, ttl_seconds: 0 });
    assert.equal(raw.status, 400);
    const e = await client.sandboxes.create({ template: TEMPLATE, ttlSeconds: 0 }).catch((x) => x);
    assert.ok(e instanceof InvalidRequest, String(e));
    assert.deepEqual([e.status, e.code], [400, "invalid_request"]);
    assert.equal(e.message, raw.body.error.message);
    assert.match(e.message, /ttl_seconds/);
    const e2 = await client.sandboxes.create({ template: TEMPLATE, ttlSeconds: 1e9 }).catch((x) => x);
    assert.match(e2.message, /ttl_seconds must be between 1 and/);
    const sb = await t.create({ ttlSeconds: 60 });
    await assert.rejects(sb.setTtl(-5), (x) => x instanceof InvalidRequest && /ttl_seconds/.test(x.message));
  });

  it("egress never opens the blocked ranges", async () => {
    const info = await client.info();
    assert.ok(info.egress.blocked.some((r) => r.range === "169.254.0.0/16"), JSON.stringify(info));
    assert.ok(info.egress.private.some((r) => r.range === "10.0.0.0/8"));
    for (const allow of ["169.254.169.254", "::ffff:127.0.0.1", "10.0.0.0/8", "localhost"]) {
      await assert.rejects(
        client.sandboxes.create({ template: TEMPLATE, egress: { internet: false, allow: [allow] } }),
        (e) => e instanceof InvalidRequest && /egress\.allow/.test(e.message),
      );
    }
  });

  it("other invalid requests", async () => {
    await assert.rejects(client.sandboxes.create({ template: "no-such-template-xyz" }), (e) => e instanceof InvalidRequest && e.message.includes("no-such-template-xyz"));
    await assert.rejects(client.sandboxes.create({ template: TEMPLATE, env: { "1BAD": "x" } }), InvalidRequest);
    const sb = await t.create();
    await assert.rejects(sb.exec("true", { timeoutSeconds: -1 }), InvalidRequest);
    await assert.rejects(sb.filesystem.list("/", { depth: 99 }), InvalidRequest);
  });

  it("exec on a killed sandbox is Conflict", async () => {
    const sb = await t.create();
    await sb.kill();
    const e = await sb.exec("true").catch((x) => x);
    assert.ok(e instanceof Conflict, String(e));
    assert.equal(e.status, 409);
    assert.match(e.message, /killed/);
  });

  it("template specs and catalog deletes are refused before anything starts", async () => {
    const e = await client.templates.build({ name: "x" }).catch((x) => x);
    assert.ok(e instanceof InvalidRequest, String(e));
    assert.deepEqual([e.status, e.code], [400, "invalid_request"]);
    assert.match(e.message, /from/);
    const d = await client.templates.delete(TEMPLATE).catch((x) => x);
    assert.ok(d instanceof Conflict, String(d));
    assert.match(d.message, /catalog/);
  });
});

describe("client configuration", () => {
  it("reads the environment; arguments win", () => {
    let c = new PandaStack({ env: { PANDASTACK_API_KEY: "pds_a", PANDASTACK_TOKEN: "pds_t" } });
    assert.equal(c.baseUrl, "https://api.pandastack.ai");
    c = new PandaStack({ env: { PANDASTACK_TOKEN: "pds_t", PANDASTACK_BASE_URL: "http://h:1/" } });
    assert.equal(c.baseUrl, "http://h:1");
    c = new PandaStack({ apiKey: "pds_arg", baseUrl: "http://x:2", env: { PANDASTACK_BASE_URL: "http://h:1" } });
    assert.equal(c.baseUrl, "http://x:2");
    // the seed's form: apiKey undefined falls back to the environment
    c = new PandaStack({ apiKey: undefined, env: { PANDASTACK_API_KEY: "pds_e" } });
    assert.equal(c.baseUrl, "https://api.pandastack.ai");
  });

  it("no key is a ConfigurationError", () => {
    assert.throws(() => new PandaStack({ env: {} }), (e) => e instanceof ConfigurationError && /PANDASTACK_API_KEY/.test(e.message));
  });

  it("a bad base URL is a ConfigurationError", () => {
    assert.throws(() => new PandaStack({ apiKey: "pds_x", baseUrl: "ftp://nowhere" }), ConfigurationError);
    assert.throws(() => new PandaStack({ apiKey: "pds_x", baseUrl: "not a url" }), ConfigurationError);
  });

  it("connection refused is APIConnectionError", async () => {
    const port = await new Promise((resolve) => {
      const s = createNetServer().listen(0, "127.0.0.1", () => {
        const p = s.address().port;
        s.close(() => resolve(p));
      });
    });
    const c = new PandaStack({ apiKey: "pds_x", baseUrl: `http://127.0.0.1:${port}`, maxRetries: 1 });
    const e = await c.sandboxes.list().catch((x) => x);
    assert.ok(e instanceof APIConnectionError, String(e));
    assert.equal(e.status, undefined);
    assert.match(e.requestId, /^req_[a-z0-9]{20}$/); // the id it sent
  });
});

// --- a scripted server -------------------------------------------------------------------------

const SB = {
  id: "sb_fake",
  template: "base",
  state: "running",
  created_at: "2026-01-01T00:00:00.000Z",
  expires_at: "2026-01-01T00:05:00.000Z",
  metadata: {},
  host: "h",
};
const BUSY = { error: { code: "capacity", message: "no host has room" } };
const SLOW = { error: { code: "rate_limited", message: "slow down" } };

const answer = (status, body, headers = {}) => (req, res, n) => {
  const data = body === undefined ? "" : JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(data), "x-request-id": `req_fake${n}`, ...headers });
  res.end(data);
};
const hangUp = (req, res) => req.socket.destroy();

describe("retries and wire shapes (scripted server)", () => {
  let srv;
  let script;
  let seen;
  let client;
  beforeEach(async () => {
    script = [];
    seen = [];
    srv = createServer((req, res) => {
      let body = "";
      req.on("data", (c) => (body += c));
      req.on("end", () => {
        seen.push([req.method, req.url, body, req.headers["x-request-id"]]);
        const step = script.shift() ?? answer(500, { error: { code: "internal", message: "x" } });
        step(req, res, seen.length);
      });
    });
    await new Promise((r) => srv.listen(0, "127.0.0.1", r));
    client = new PandaStack({ apiKey: "pds_x", baseUrl: `http://127.0.0.1:${srv.address().port}`, maxRetries: 3, timeoutMs: 10_000 });
  });
  afterEach(async () => {
    srv.closeAllConnections?.();
    await new Promise((r) => srv.close(r));
  });

  it("idempotent GET retries 503 and 429", async () => {
    script = [answer(503, BUSY), answer(429, SLOW, { "retry-after": "0" }), answer(200, SB)];
    assert.equal((await client.sandboxes.get("sb_fake")).id, "sb_fake");
    assert.equal(seen.length, 3);
  });

  it("gives up after maxRetries", async () => {
    script = [answer(503, BUSY), answer(503, BUSY), answer(503, BUSY), answer(503, BUSY)];
    const e = await client.sandboxes.get("sb_fake").catch((x) => x);
    assert.ok(e instanceof Capacity, String(e));
    assert.equal(seen.length, 4);
    assert.deepEqual([e.requestId, e.message], ["req_fake4", "no host has room"]);
  });

  it("RateLimited carries retryAfter", async () => {
    const c = new PandaStack({ apiKey: "pds_x", baseUrl: client.baseUrl, maxRetries: 0 });
    script = [answer(429, SLOW, { "retry-after": "7" })];
    const e = await c.sandboxes.get("sb_fake").catch((x) => x);
    assert.ok(e instanceof RateLimited);
    assert.equal(e.retryAfter, 7);
  });

  it("create and exec are not retried", async () => {
    script = [answer(503, BUSY), answer(201, SB)];
    await assert.rejects(client.sandboxes.create({ template: "base" }), Capacity);
    assert.equal(seen.length, 1);
    script = [hangUp, answer(200, { stdout: "", stderr: "", exit_code: 0 })];
    await assert.rejects(new Sandbox(client, SB).exec("true"), APIConnectionError);
    assert.equal(seen.length, 2);
  });

  it("a reset connection is retried for idempotent calls", async () => {
    script = [hangUp, hangUp, answer(200, SB)];
    assert.equal((await client.sandboxes.get("sb_fake")).id, "sb_fake");
    assert.equal(seen.length, 3);
    script = [hangUp, answer(204)];
    await new Sandbox(client, SB).kill();
    assert.equal(seen.length, 5);
  });

  it("a non-JSON error body", async () => {
    script = [(req, res) => {
      res.writeHead(502, { "content-type": "text/html" });
      res.end("<html>bad gateway</html>");
    }];
    const e = await client.sandboxes.get("sb_fake").catch((x) => x);
    assert.ok(e instanceof InternalError, String(e));
    assert.equal(e.status, 502);
    assert.match(e.message, /bad gateway/);
    // no X-Request-Id in that answer: the error names the one the client sent
    assert.match(seen[0][3], /^req_[a-z0-9]{20}$/);
    assert.equal(e.requestId, seen[0][3]);
  });

  it("an error line inside a stream", async () => {
    script = [(req, res) => {
      res.writeHead(200, { "content-type": "application/x-ndjson", "x-request-id": "req_stream" });
      res.end('{"stdout":"partial\\n"}\n{"error":{"code":"internal","message":"the stream broke"}}\n');
    }];
    const got = [];
    const e = await (async () => {
      for await (const ev of new Sandbox(client, SB).execStream("true")) got.push(ev.data);
    })().catch((x) => x);
    assert.deepEqual(got, ["partial\n"]);
    assert.ok(e instanceof InternalError, String(e));
    assert.deepEqual([e.message, e.requestId], ["the stream broke", "req_stream"]);
  });

  it("a stream cut short", async () => {
    script = [(req, res) => {
      res.writeHead(200, { "content-type": "application/x-ndjson" });
      res.end('{"stdout":"partial\\n"}\n');
    }];
    await assert.rejects(new Sandbox(client, SB).exec("true", { onStdout: () => {} }), APIConnectionError);
  });

  it("a silent server hits the client timeout", async () => {
    const c = new PandaStack({ apiKey: "pds_x", baseUrl: client.baseUrl, timeoutMs: 300, maxRetries: 0 });
    script = [() => {}]; // never answers
    const e = await c.sandboxes.get("sb_fake").catch((x) => x);
    assert.ok(e instanceof Timeout, String(e));
    assert.equal(e.code, "client_timeout");
  });

  it("request shapes", async () => {
    script = [
      answer(201, SB),
      answer(200, { sandboxes: [SB], next_cursor: "c2" }),
      answer(200, { sandboxes: [SB], next_cursor: null }),
      answer(200, { stdout: "x", stderr: "", exit_code: 0 }),
    ];
    await client.sandboxes.create({ template: "base", ttlSeconds: 5, metadata: { a: "b" }, env: { K: "v" } });
    assert.deepEqual(JSON.parse(seen[0][2]), { template: "base", ttl_seconds: 5, metadata: { a: "b" }, env: { K: "v" } });
    const got = await client.sandboxes.list({ metadata: { k: "v w" }, state: ["running", "hibernated"] });
    assert.equal(got.length, 2);
    assert.equal(seen[1][1], "/v1/sandboxes?state=running%2Chibernated&metadata.k=v+w&limit=100");
    assert.equal(seen[2][1], "/v1/sandboxes?state=running%2Chibernated&metadata.k=v+w&limit=100&cursor=c2");
    await new Sandbox(client, SB).exec(["ls", "-l"], { timeoutSeconds: 5, cwd: "/tmp", user: "root", stdin: "in", env: { A: "1" } });
    assert.deepEqual(JSON.parse(seen[3][2]), { argv: ["ls", "-l"], timeout_seconds: 5, cwd: "/tmp", user: "root", stdin: "in", env: { A: "1" } });
  });

  it("base URL with a path prefix", async () => {
    const c = new PandaStack({ apiKey: "pds_x", baseUrl: `${client.baseUrl}/api/` });
    script = [answer(200, SB)];
    await c.sandboxes.get("sb_fake");
    assert.equal(seen[0][1], "/api/v1/sandboxes/sb_fake");
  });
});

describe("error classes", () => {
  it("map by code and status", () => {
    const cases = ERROR_CASES;
    for (const [status, code, cls] of cases) {
      const e = errorFromPayload(status, { error: { code, message: "m" } }, "req_1");
      assert.equal(e.constructor, cls);
      assert.deepEqual([e.status, e.code, e.message, e.requestId, e.name], [status, code, "m", "req_1", cls.name]);
    }
    assert.equal(errorFromPayload(418, { error: { code: "teapot", message: "m" } }).constructor, InvalidRequest);
    const e = errorFromPayload(undefined, { error: { code: "not_found", message: "m" } });
    assert.deepEqual([e.constructor, e.status], [NotFound, 404]);
  });
});
