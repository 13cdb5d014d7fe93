// Offline unit tests: the SDK driven through its injected `fetch` (new PandaStack({ fetch })),
// with answers scripted in memory. No server, no socket: they run before or without
// sdk/test.sh's server. They check the client's side of the wire (the requests it builds, the
// answers it decodes, the errors it maps, the retries it makes); the live tests check the server.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import * as sdk from "@pandastack/sdk";
import { ERROR_CASES } from "./helpers.mjs";
import {
  APIConnectionError,
  BuildFailed,
  Capacity,
  ConfigurationError,
  Conflict,
  Forbidden,
  InternalError,
  InvalidRequest,
  NoSpace,
  NotFound,
  NotImplemented,
  PandaStack,
  PandaStackError,
  PayloadTooLarge,
  RateLimited,
  Sandbox,
  Timeout,
  Unauthorized,
  VERSION,
} from "@pandastack/sdk";

const here = dirname(fileURLToPath(import.meta.url));
const pkgDir = join(here, "..");
const pkg = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8"));
const require = createRequire(import.meta.url);

const SB = {
  id: "sb_one",
  template: "base",
  state: "running",
  created_at: "2026-01-01T00:00:00.123456789Z",
  expires_at: "2026-01-01T00:10:00Z",
  metadata: { task: "t" },
  host: "h1",
  ip: "10.0.0.2",
};

// -- scripted answers -----------------------------------------------------------------------------

function ok(body, status = 200, headers = {}) {
  const payload = body === undefined || body === null ? null : typeof body === "string" || body instanceof Uint8Array ? body : JSON.stringify(body);
  return new Response(payload, { status, headers });
}
const err = (status, code, message, headers = {}) => ok({ error: { code, message } }, status, headers);
const ndjson = (objs, headers = {}) =>
  ok(objs.map((o) => JSON.stringify(o) + "\n").join(""), 200, { "content-type": "application/x-ndjson", ...headers });
/** What undici throws for a refused or reset connection. */
const netError = (code) => Object.assign(new TypeError("fetch failed"), { cause: { code, message: `connect ${code}` } });

/**
 * A fetch that answers with the given steps in order and records every call. A step is a
 * Response, an Error to throw (a broken connection), or a function (url, init) => Response.
 */
function script(...steps) {
  const calls = [];
  const fetch = async (url, init) => {
    const body = init.body;
    const call = { url, init, method: init.method, headers: init.headers, body };
    call.json = () => JSON.parse(typeof body === "string" ? body : new TextDecoder().decode(body));
    call.path = () => {
      const u = new URL(url);
      return u.pathname + u.search;
    };
    call.query = () => Object.fromEntries(new URL(url).searchParams);
    calls.push(call);
    if (!steps.length) throw new Error(`unexpected request ${init.method} ${url}`);
    let step = steps.shift();
    if (step instanceof Error) throw step;
    if (typeof step === "function") step = await step(url, init);
    return step;
  };
  fetch.calls = calls;
  fetch.push = (...more) => steps.push(...more);
  return fetch;
}

function client(fetch, options = {}) {
  return new PandaStack({ apiKey: "pds_offline", baseUrl: "http://pandastack.invalid:8080", fetch, env: {}, ...options });
}

// -- create / get / list --------------------------------------------------------------------------

describe("offline: create, get, list", () => {
  it("create sends the documented request and decodes the sandbox", async () => {
    const f = script(ok(SB, 201, { "x-request-id": "req_srv" }));
    const sb = await client(f).sandboxes.create({
      template: "base",
      ttlSeconds: 600,
      metadata: { task: "t" },
      env: { A: "1" },
      volumes: [{ volumeId: "vol_1", mountPath: "/data" }],
    });
    const c = f.calls[0];
    assert.equal(c.method, "POST");
    assert.equal(c.url, "http://pandastack.invalid:8080/v1/sandboxes");
    assert.deepEqual(c.json(), {
      template: "base",
      ttl_seconds: 600,
      metadata: { task: "t" },
      env: { A: "1" },
      volumes: [{ volume_id: "vol_1", mount_path: "/data" }],
    });
    assert.equal(c.headers.authorization, "Bearer pds_offline");
    assert.equal(c.headers["content-type"], "application/json");
    assert.equal(c.headers["user-agent"], `pandastack-typescript/${pkg.version}`);
    assert.match(c.headers["x-request-id"], /^req_[a-z0-9]{20}$/);
    assert.ok(c.init.signal instanceof AbortSignal);
    assert.ok(sb instanceof Sandbox);
    assert.deepEqual([sb.id, sb.template, sb.state, sb.host, sb.ip, sb.metadata], ["sb_one", "base", "running", "h1", "10.0.0.2", { task: "t" }]);
    assert.equal(sb.createdAt.toISOString(), "2026-01-01T00:00:00.123Z");
    assert.deepEqual(sb.raw, SB);
    assert.deepEqual(JSON.parse(JSON.stringify(sb)), SB);
  });

  it("refuses bad input before sending anything", async () => {
    const f = script();
    const c = client(f);
    await assert.rejects(c.sandboxes.create({}), TypeError);
    await assert.rejects(c.sandboxes.create({ template: "base", volumes: [{ volumeId: "v", path: "/d" }] }), TypeError);
    await assert.rejects(c.sandboxes.get(""), TypeError);
    await assert.rejects(c.templates.get(""), TypeError);
    assert.equal(f.calls.length, 0);
  });

  it("get quotes the id; list follows cursors and stops at the limit", async () => {
    const f = script(
      ok(SB),
      ok({ sandboxes: [SB], next_cursor: "c2" }),
      ok({ sandboxes: [{ ...SB, id: "sb_two" }], next_cursor: null }),
      ok({ sandboxes: [SB, SB], next_cursor: "more" }),
    );
    const c = client(f);
    await c.sandboxes.get("sb/../x");
    assert.equal(f.calls[0].path(), "/v1/sandboxes/sb%2F..%2Fx");
    const got = await c.sandboxes.list({ metadata: { k: "v w" }, state: ["running", "hibernated"] });
    assert.deepEqual(got.map((s) => s.id), ["sb_one", "sb_two"]);
    assert.equal(f.calls[1].path(), "/v1/sandboxes?state=running%2Chibernated&metadata.k=v+w&limit=100");
    assert.equal(f.calls[2].query().cursor, "c2");
    assert.equal((await c.sandboxes.list({ limit: 2 })).length, 2);
    assert.equal(f.calls.length, 4);
    assert.equal(f.calls[3].query().limit, "2");
  });

  it("metrics reads the sandbox's figures", async () => {
    const m = { at: "2026-01-01T00:00:00Z", vcpus: 1, cpu_used_pct: 12.5, mem_total_bytes: 4, mem_used_bytes: 2, mem_cache_bytes: 1,
      disk_total_bytes: 8, disk_used_bytes: 3, host_cpu_seconds: 0.5, host_mem_bytes: 5 };
    const f = script(ok(SB), ok(m));
    const sb = await client(f).sandboxes.get("sb_one");
    assert.deepEqual(await sb.metrics(), m);
    assert.equal(f.calls[1].path(), "/v1/sandboxes/sb_one/metrics");
    assert.equal(f.calls[1].method, "GET");
  });

  it("env, base URL with a path prefix, and the with() helper", async () => {
    const f = script(ok(SB, 201), ok({ stdout: "x", stderr: "", exit_code: 0 }), ok(null, 204));
    const c = new PandaStack({ fetch: f, env: { PANDASTACK_TOKEN: " pds_env ", PANDASTACK_BASE_URL: "https://example.invalid/api/" } });
    assert.equal(c.baseUrl, "https://example.invalid/api");
    assert.equal(c.sandbox, c.sandboxes);
    const out = await c.sandboxes.with({ template: "base" }, async (sb) => (await sb.exec("x")).stdout);
    assert.equal(out, "x");
    assert.deepEqual(f.calls.map((x) => [x.method, x.url]), [
      ["POST", "https://example.invalid/api/v1/sandboxes"],
      ["POST", "https://example.invalid/api/v1/sandboxes/sb_one/exec"],
      ["DELETE", "https://example.invalid/api/v1/sandboxes/sb_one"],
    ]);
    assert.equal(f.calls[0].headers.authorization, "Bearer pds_env");
    assert.throws(() => new PandaStack({ env: {}, fetch: f }), ConfigurationError);
    assert.throws(() => new PandaStack({ apiKey: "pds_x", baseUrl: "ftp://x", fetch: f, env: {} }), ConfigurationError);
  });
});

// -- code interpreter -----------------------------------------------------------------------------

describe("offline: code interpreter", () => {
  const sandbox = (f) => new Sandbox(client(f), SB);
  const PNG = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 1, 2]);

  it("runCode buffered: results decoded (png bytes, json value), error and logs", async () => {
    const png = Buffer.from(PNG).toString("base64");
    const f = script(ok({ results: [{ text: "2", is_main_result: true }, { png, json: "[1,2]" }], logs: { stdout: ["hi\n"], stderr: [] },
      error: { name: "ValueError", value: "v", traceback: "tb" }, execution_count: 3, duration_ms: 9 }));
    const x = await sandbox(f).runCode("1+1", { context: { id: "c1", language: "python", cwd: "/" }, timeout: 30 });
    assert.equal(f.calls[0].path(), "/v1/sandboxes/sb_one/code");
    assert.deepEqual(f.calls[0].json(), { code: "1+1", context_id: "c1", timeout_seconds: 30 });
    assert.deepEqual([x.text, [...x.results[1].png], x.results[1].json, x.logs.stdout, x.error.name, x.executionCount],
      ["2", [...PNG], [1, 2], ["hi\n"], "ValueError", 3]);
  });

  it("runCode with callbacks streams; a stream_error rejects", async () => {
    const f = script(ndjson([{ stdout: "a" }, { result: { html: "<table/>", is_main_result: true } }, { end: { execution_count: 1, duration_ms: 2 } }]),
      ndjson([{ stdout: "a" }, { stream_error: { code: "upstream_unreachable", message: "gone" } }]));
    const got = [];
    const x = await sandbox(f).runCode("df", { onStdout: (s) => got.push(s), onResult: (r) => got.push(r.html) });
    assert.deepEqual([got, x.executionCount, f.calls[0].headers.accept], [["a", "<table/>"], 1, "application/x-ndjson"]);
    await assert.rejects(sandbox(f).runCode("x", { onStdout: () => {} }), PandaStackError);
  });

  it("javascript: runCode and createCodeContext send the language", async () => {
    const f = script(ok({ results: [{ text: "[ 2, 4 ]", json: "[2,4]", is_main_result: true }], logs: { stdout: [], stderr: [] }, execution_count: 1, duration_ms: 1 }),
      ok({ id: "c2", language: "javascript", cwd: "/home/user" }, 201));
    const x = await sandbox(f).runCode("[1, 2].map((v) => v * 2)", { language: "js" });
    assert.deepEqual([f.calls[0].json(), x.text, x.results[0].json], [{ code: "[1, 2].map((v) => v * 2)", language: "js" }, "[ 2, 4 ]", [2, 4]]);
    const c = await sandbox(f).createCodeContext({ language: "javascript" });
    assert.deepEqual([c.language, f.calls[1].json()], ["javascript", { language: "javascript" }]);
  });

  it("javascript rich results: display()'s svg and png, a records table with its json", async () => {
    const png = Buffer.from(PNG).toString("base64");
    const f = script(ndjson([{ result: { svg: "<svg/>", is_main_result: false } }, { result: { png, is_main_result: false } },
      { result: { text: "[ { a: 1 } ]", html: '<table border="1" class="dataframe"></table>', json: '[{"a":1}]', is_main_result: true } },
      { end: { execution_count: 2, duration_ms: 3 } }]));
    const got = [];
    const x = await sandbox(f).runCode("display.svg(s); display.png(buf); [{a: 1}]", { language: "javascript", onResult: (r) => got.push(r) });
    assert.equal(f.calls[0].json().language, "javascript");
    assert.deepEqual(x.results.map((r) => r.formats()), [["svg"], ["png"], ["text", "html", "json"]]);
    assert.deepEqual([x.results[0].svg, [...x.results[1].png], x.results[2].json, x.text, got.length], ["<svg/>", [...PNG], [{ a: 1 }], "[ { a: 1 } ]", 3]);
  });

  it("contexts and interrupt", async () => {
    const f = script(ok({ id: "c1", language: "python", cwd: "/tmp" }, 201), ok(null, 204));
    const c = await sandbox(f).createCodeContext({ cwd: "/tmp" });
    assert.deepEqual([c.id, f.calls[0].json()], ["c1", { language: "python", cwd: "/tmp" }]);
    await sandbox(f).interruptCode(c);
    assert.deepEqual([f.calls[1].path(), f.calls[1].json()], ["/v1/sandboxes/sb_one/code/interrupt", { context_id: "c1" }]);
  });
});

// -- exec -----------------------------------------------------------------------------------------

describe("offline: exec", () => {
  const sandbox = (f, options) => new Sandbox(client(f, options), SB);

  it("exec waits for the result", async () => {
    const f = script(ok({ stdout: "1024\n", stderr: "", exit_code: 0, duration_ms: 12 }));
    const r = await sandbox(f).exec("python -c 'print(2 ** 10)'", { timeoutSeconds: 30 });
    assert.deepEqual([r.stdout, r.exitCode, r.ok, r.timedOut, r.durationMs], ["1024\n", 0, true, false, 12]);
    assert.equal(f.calls[0].path(), "/v1/sandboxes/sb_one/exec");
    assert.deepEqual(f.calls[0].json(), { cmd: "python -c 'print(2 ** 10)'", timeout_seconds: 30 });
  });

  it("argv and options; a failed command is a result, not an error", async () => {
    const f = script(ok({ stdout: "", stderr: "boom", exit_code: 3, timed_out: true, stdout_truncated: true }));
    const r = await sandbox(f).exec(["ls", "-l"], { env: { A: "b" }, cwd: "/tmp", user: "root", stdin: new TextEncoder().encode("in") });
    assert.deepEqual(f.calls[0].json(), { argv: ["ls", "-l"], env: { A: "b" }, cwd: "/tmp", user: "root", stdin: "in" });
    assert.deepEqual([r.exitCode, r.timedOut, r.ok, r.stderr, r.stdoutTruncated], [3, true, false, "boom", true]);
    for (const bad of [[], [1], 42]) await assert.rejects(sandbox(f).exec(bad), TypeError);
    assert.equal(f.calls.length, 1);
  });

  it("callbacks stream the output (NDJSON) and the result still holds all of it", async () => {
    const f = script(ndjson([{ stdout: "a" }, { stderr: "e" }, { stdout: "b" }, { exit_code: 0, duration_ms: 5 }]));
    const out = [];
    const errs = [];
    const r = await sandbox(f).exec("x", { onStdout: (d) => out.push(d), onStderr: (d) => errs.push(d) });
    assert.deepEqual([out, errs], [["a", "b"], ["e"]]);
    assert.deepEqual([r.stdout, r.stderr, r.exitCode, r.durationMs], ["ab", "e", 0, 5]);
    assert.equal(f.calls[0].headers.accept, "application/x-ndjson");
  });

  it("execStream yields events, then the exit status; iterating twice is refused", async () => {
    const f = script(ndjson([{ stdout: "hi\n" }, { exit_code: 7, timed_out: false, duration_ms: 3 }], { "x-request-id": "req_stream" }));
    const st = sandbox(f).execStream("echo hi; exit 7");
    const evs = [];
    for await (const ev of st) evs.push(ev);
    assert.deepEqual(evs, [{ type: "stdout", data: "hi\n" }, { type: "exit", exitCode: 7, timedOut: false, durationMs: 3 }]);
    assert.deepEqual([st.exitCode, st.requestId], [7, "req_stream"]);
    await assert.rejects(st.wait(), (e) => e instanceof PandaStackError && e.code === "stream_consumed");
  });

  it("an error line inside the stream is the typed error", async () => {
    const f = script(ndjson([{ stdout: "partial" }, { error: { code: "internal", message: "it broke" } }], { "x-request-id": "req_s" }));
    const got = [];
    await assert.rejects(
      (async () => {
        for await (const ev of sandbox(f).execStream("x")) got.push(ev.data);
      })(),
      (e) => e instanceof InternalError && e.message === "it broke" && e.requestId === "req_s" && e.status === 500,
    );
    assert.deepEqual(got, ["partial"]);
  });

  it("a stream cut short, a malformed line, a refusal before the stream", async () => {
    const f = script(
      ndjson([{ stdout: "partial" }]),
      ok('{"stdout": "x"}\nnot json\n'),
      err(409, "conflict", "sandbox sb_one is killed", { "x-request-id": "req_c" }),
    );
    await assert.rejects(sandbox(f).exec("x", { onStdout: () => {} }), APIConnectionError);
    await assert.rejects(sandbox(f).execStream("x").wait(), (e) => e instanceof PandaStackError && e.code === "bad_stream");
    await assert.rejects(sandbox(f).execStream("x").wait(), (e) => e instanceof Conflict && e.status === 409 && e.requestId === "req_c");
  });
});

// -- files ----------------------------------------------------------------------------------------

describe("offline: files", () => {
  const fs = (f) => new Sandbox(client(f), SB).filesystem;

  it("write and read", async () => {
    const info = { name: "n.txt", path: "/tmp/n.txt", type: "file", size: 5, mode: "0755", mtime: "2026-01-01T00:00:00Z" };
    const f = script(ok(info, 201), ok("hello"), ok(new Uint8Array([0, 255])));
    const got = await fs(f).write("/tmp/n.txt", "hello", { mode: 0o755, user: "root" });
    assert.deepEqual([got.path, got.size, got.mode, got.mtime.toISOString()], ["/tmp/n.txt", 5, "0755", "2026-01-01T00:00:00.000Z"]);
    const c = f.calls[0];
    assert.equal(c.method, "PUT");
    assert.deepEqual(c.query(), { path: "/tmp/n.txt", mode: "0755", user: "root" });
    assert.equal(new TextDecoder().decode(c.body), "hello");
    assert.equal(c.headers["content-type"], "application/octet-stream");
    assert.equal(await fs(f).read("/tmp/n.txt"), "hello");
    assert.equal(f.calls[1].headers.accept, "application/octet-stream");
    assert.equal(f.calls[1].path(), "/v1/sandboxes/sb_one/files?path=%2Ftmp%2Fn.txt");
    assert.deepEqual([...(await fs(f).readBytes("/b"))], [0, 255]);
  });

  it("a stream body is not retried, bytes are", async () => {
    const f = script(netError("ECONNRESET"));
    const stream = new ReadableStream({ start: (c) => (c.enqueue(new Uint8Array([1])), c.close()) });
    await assert.rejects(fs(f).write("/f", stream), APIConnectionError);
    assert.equal(f.calls.length, 1);
    assert.equal(f.calls[0].init.duplex, "half");
    f.push(netError("ECONNRESET"), ok({ path: "/f", type: "file" }));
    await fs(f).write("/f", new Uint8Array([1, 2]));
    assert.equal(f.calls.length, 3);
    await assert.rejects(fs(f).write("/f", 42), TypeError);
  });

  it("list, stat, mkdir, remove, move", async () => {
    const f = script(
      ok({ entries: [{ name: "a", path: "/d/a", type: "dir" }] }),
      ok({ name: "a", path: "/d/a", type: "dir", size: 0 }),
      ok(null, 204),
      ok(null, 204),
      ok(null, 204),
    );
    const files = fs(f);
    assert.deepEqual((await files.list("/d", { depth: 2 })).map((e) => [e.path, e.type]), [["/d/a", "dir"]]);
    assert.equal(f.calls[0].path(), "/v1/sandboxes/sb_one/files/list?path=%2Fd&depth=2");
    assert.equal((await files.stat("/d/a")).type, "dir");
    await files.mkdir("/d/b", { user: "root" });
    assert.deepEqual([f.calls[2].path(), f.calls[2].json()], ["/v1/sandboxes/sb_one/files/mkdir", { path: "/d/b", user: "root" }]);
    await files.remove("/d", { recursive: true });
    assert.deepEqual([f.calls[3].method, f.calls[3].query()], ["DELETE", { path: "/d", recursive: "true" }]);
    await files.move("/d/a", "/d/c");
    assert.deepEqual(f.calls[4].json(), { from: "/d/a", to: "/d/c" });
  });

  it("exists: a missing file is false, a missing sandbox an error", async () => {
    const f = script(ok({ path: "/x", type: "file" }), err(404, "not_found", "no such file /y"), err(404, "not_found", "sandbox sb_one not found"));
    const files = fs(f);
    assert.equal(await files.exists("/x"), true);
    assert.equal(await files.exists("/y"), false);
    await assert.rejects(files.exists("/z"), NotFound);
  });
});

// -- errors and retries ---------------------------------------------------------------------------

describe("offline: errors", () => {
  const CASES = ERROR_CASES;

  it("every status maps to its class, with the API's message and the answer's request id", async () => {
    const c = client(script(...CASES.map(([s, code]) => err(s, code, `said ${code}`, { "x-request-id": `req_${s}` }))), { maxRetries: 0 });
    for (const [status, code, cls] of CASES) {
      const e = await c.sandboxes.get("sb_one").catch((x) => x);
      assert.equal(e.constructor, cls, code);
      assert.ok(e instanceof PandaStackError && e instanceof Error);
      assert.deepEqual([e.status, e.code, e.message, e.requestId, e.name], [status, code, `said ${code}`, `req_${status}`, cls.name]);
    }
  });

  it("a body that is not JSON, an unknown code, Retry-After", async () => {
    const f = script(
      ok("<html>bad gateway</html>", 502, { "content-type": "text/html" }),
      err(418, "teapot", "short and stout"),
      err(429, "rate_limited", "slow down", { "retry-after": "7" }),
    );
    const c = client(f, { maxRetries: 0 });
    const e = await c.sandboxes.get("sb_one").catch((x) => x);
    assert.ok(e instanceof InternalError);
    assert.equal(e.status, 502);
    assert.match(e.message, /bad gateway/);
    assert.equal(e.requestId, f.calls[0].headers["x-request-id"]); // the id it sent
    const e2 = await c.sandboxes.create({ template: "base" }).catch((x) => x);
    assert.ok(e2 instanceof InvalidRequest);
    assert.deepEqual([e2.code, e2.status], ["teapot", 418]);
    const e3 = await c.sandboxes.list().catch((x) => x);
    assert.ok(e3 instanceof RateLimited);
    assert.equal(e3.retryAfter, 7);
  });

  it("no answer in time is a client Timeout, not retried", async () => {
    // Like a real fetch waiting on its socket: pending (and keeping the process alive, as the
    // SDK's own timer does not) until the signal aborts it.
    const hang = (url, init) =>
      new Promise((_, reject) => {
        const socket = setInterval(() => {}, 1000);
        init.signal.addEventListener("abort", () => {
          clearInterval(socket);
          reject(new DOMException("aborted", "AbortError"));
        });
      });
    const f = script(hang);
    const e = await client(f, { timeoutMs: 20 }).sandboxes.get("sb_one").catch((x) => x);
    assert.ok(e instanceof Timeout, String(e));
    assert.deepEqual([e.code, e.status], ["client_timeout", undefined]);
    assert.equal(f.calls.length, 1);
  });

  it("a caller's abort signal is passed through, not retried", async () => {
    const ac = new AbortController();
    const f = script((url, init) => {
      ac.abort(new Error("caller gave up"));
      assert.equal(init.signal.aborted, true);
      throw init.signal.reason;
    });
    await assert.rejects(new Sandbox(client(f), SB).exec("x", { signal: ac.signal }), /caller gave up/);
    assert.equal(f.calls.length, 1);
  });

  it("unreachable: APIConnectionError after the retries of an idempotent call", async () => {
    const f = script(...Array(4).fill(netError("ECONNREFUSED")));
    const e = await client(f, { maxRetries: 1 }).sandboxes.list().catch((x) => x);
    assert.ok(e instanceof APIConnectionError, String(e));
    assert.equal(e.status, undefined);
    assert.match(e.message, /pandastack\.invalid.*ECONNREFUSED/);
    assert.equal(f.calls.length, 2);
  });
});

describe("offline: retries", () => {
  it("idempotent calls retry 503 and 429 (honouring Retry-After) with one request id", async () => {
    const f = script(err(503, "capacity", "busy", { "retry-after": "0" }), err(429, "rate_limited", "slow", { "retry-after": "0" }), ok(SB));
    assert.equal((await client(f).sandboxes.get("sb_one")).id, "sb_one");
    assert.equal(f.calls.length, 3);
    assert.equal(new Set(f.calls.map((c) => c.headers["x-request-id"])).size, 1);
  });

  it("gives up after maxRetries with the last answer's error", async () => {
    const f = script(...[1, 2, 3, 4].map((i) => err(503, "capacity", "no host has room", { "retry-after": "0", "x-request-id": `req_${i}` })));
    const e = await client(f).snapshots.get("snap_1").catch((x) => x);
    assert.ok(e instanceof Capacity);
    assert.deepEqual([f.calls.length, e.requestId, e.message], [4, "req_4", "no host has room"]);
  });

  it("backs off without Retry-After too", async () => {
    const f = script(err(503, "capacity", "busy"), ok(SB));
    assert.equal((await client(f).sandboxes.get("sb_one")).id, "sb_one");
    assert.equal(f.calls.length, 2);
  });

  it("broken connections are retried only for idempotent calls", async () => {
    const f = script(netError("ECONNRESET"), netError("EPIPE"), ok(SB));
    const c = client(f);
    await c.sandboxes.get("sb_one");
    assert.equal(f.calls.length, 3);
    f.push(netError("ECONNRESET"), ok(null, 204));
    await new Sandbox(c, SB).kill(); // DELETE is idempotent
    assert.equal(f.calls.length, 5);
    f.push(netError("ECONNRESET"));
    await assert.rejects(new Sandbox(c, SB).exec("true"), APIConnectionError); // exec may have run
    f.push(err(503, "capacity", "busy", { "retry-after": "0" }));
    await assert.rejects(c.sandboxes.create({ template: "base" }), Capacity);
    assert.equal(f.calls.length, 7);
  });

  it("maxRetries 0 sends once", async () => {
    const f = script(err(503, "capacity", "busy"));
    await assert.rejects(client(f, { maxRetries: 0 }).sandboxes.list(), Capacity);
    assert.equal(f.calls.length, 1);
  });
});

// -- lifecycle, snapshots, volumes, templates -----------------------------------------------------

describe("offline: lifecycle, snapshots, volumes, templates", () => {
  it("fork one, fork many, a fork answer without a sandbox", async () => {
    const kids = [0, 1, 2].map((i) => ({ ...SB, id: `sb_k${i}`, fork_of: "sb_one" }));
    const f = script(ok({ sandboxes: kids.slice(0, 1) }, 201), ok({ sandboxes: kids }, 201), ok({ sandboxes: [] }, 201));
    const sb = new Sandbox(client(f), SB);
    const one = await sb.fork();
    assert.deepEqual([one.id, one.forkOf], ["sb_k0", "sb_one"]);
    assert.deepEqual([f.calls[0].path(), f.calls[0].json()], ["/v1/sandboxes/sb_one/fork", {}]);
    assert.deepEqual((await sb.fork({ count: 3 })).map((s) => s.id), ["sb_k0", "sb_k1", "sb_k2"]);
    assert.deepEqual(f.calls[1].json(), { count: 3 });
    await assert.rejects(sb.fork(), (e) => e instanceof PandaStackError && e.code === "bad_response");
    for (const bad of [0, -1, 1.5]) await assert.rejects(sb.fork(bad), RangeError);
    assert.equal(f.calls.length, 3);
  });

  it("snapshot, hibernate, wake, setTtl, kill", async () => {
    const f = script(
      ok({ id: "snap_1", sandbox_id: "sb_one", template: "base", size_bytes: 10 }, 201),
      ok({ ...SB, state: "hibernated" }),
      ok({ ...SB, state: "running" }),
      ok({ ...SB, expires_at: "2026-01-02T00:00:00Z" }),
      ok({ ok: true }),
      ok({ ...SB, state: "hibernated" }),
      ok(null, 204),
    );
    const sb = new Sandbox(client(f), SB);
    const sn = await sb.snapshot();
    assert.deepEqual([sn.id, sn.sandboxId, sn.sizeBytes], ["snap_1", "sb_one", 10]);
    assert.equal((await sb.hibernate()).state, "hibernated");
    assert.equal((await sb.wake()).state, "running");
    assert.equal((await sb.setTtl(86400)).expiresAt.toISOString(), "2026-01-02T00:00:00.000Z");
    assert.deepEqual(f.calls[3].json(), { ttl_seconds: 86400 });
    assert.equal((await sb.hibernate()).state, "hibernated"); // an answer without the sandbox: re-read it
    assert.deepEqual([f.calls[4].method, f.calls[5].method], ["POST", "GET"]);
    await sb.kill();
    assert.deepEqual([sb.state, f.calls[6].method, f.calls[6].path()], ["killed", "DELETE", "/v1/sandboxes/sb_one"]);
  });

  it("snapshots and volumes collections", async () => {
    const vol = { id: "vol_1", name: "data", size_mib: 64, host_id: "h1", attachments: [{ sandbox_id: "sb_one", mount_path: "/data", read_only: true }] };
    const f = script(
      ok({ snapshots: [{ id: "snap_1" }], next_cursor: null }),
      ok({ id: "snap_1" }),
      ok(null, 204),
      ok(vol, 201),
      ok({ volumes: [vol] }),
      ok(vol),
      ok({ ...vol, size_mib: 128 }),
      ok(null, 204),
    );
    const c = client(f);
    assert.deepEqual((await c.snapshots.list({ sandboxId: "sb_one" })).map((s) => s.id), ["snap_1"]);
    assert.deepEqual(f.calls[0].query(), { sandbox_id: "sb_one", limit: "100" });
    assert.equal((await c.snapshots.get("snap_1")).id, "snap_1");
    await c.snapshots.delete("snap_1");
    assert.deepEqual([f.calls[2].method, f.calls[2].path()], ["DELETE", "/v1/snapshots/snap_1"]);
    const v = await c.volumes.create({ sizeMib: 64, name: "data" });
    assert.deepEqual(f.calls[3].json(), { size_mib: 64, name: "data" });
    assert.deepEqual(v.attachments, [{ sandboxId: "sb_one", mountPath: "/data", readOnly: true }]);
    assert.deepEqual((await c.volumes.list()).map((x) => x.id), ["vol_1"]);
    assert.equal((await c.volumes.get("vol_1")).name, "data");
    assert.equal((await c.volumes.resize("vol_1", 128)).sizeMib, 128);
    assert.deepEqual([f.calls[6].path(), f.calls[6].json()], ["/v1/volumes/vol_1/resize", { size_mib: 128 }]);
    await c.volumes.delete("vol_1");
    assert.deepEqual([f.calls[7].method, f.calls[7].path()], ["DELETE", "/v1/volumes/vol_1"]);
  });

  it("templates: list, get, build (progress, result, failure), delete", async () => {
    const tpl = { name: "mine", owner: "team", vcpus: 2, aliases: ["m"], baked: true };
    const f = script(
      ok({ templates: [tpl] }),
      ok(tpl),
      ndjson([{ progress: "step 1" }, { progress: "step 2" }, { template: tpl }]),
      ndjson([{ progress: "step 1" }, { error: { code: "build_failed", message: "step 2 failed" } }]),
      ok(null, 204),
    );
    const c = client(f);
    assert.deepEqual((await c.templates.list()).map((t) => t.name), ["mine"]);
    assert.deepEqual((await c.templates.get("mine")).aliases, ["m"]);
    const progress = [];
    const built = await c.templates.build({ name: "mine", from: "base" }, { onProgress: (l) => progress.push(l) });
    assert.deepEqual([built.name, progress], ["mine", ["step 1", "step 2"]]);
    assert.deepEqual(f.calls[2].json(), { name: "mine", from: "base" });
    const e = await c.templates.build("name: mine\nfrom: base\n").catch((x) => x);
    assert.ok(e instanceof BuildFailed);
    assert.deepEqual([e.message, e.status], ["step 2 failed", undefined]);
    assert.deepEqual([f.calls[3].headers["content-type"], f.calls[3].body], ["application/yaml", "name: mine\nfrom: base\n"]);
    await c.templates.delete("mine");
    assert.deepEqual([f.calls[4].method, f.calls[4].path()], ["DELETE", "/v1/templates/mine"]);
  });
});

// -- the version ----------------------------------------------------------------------------------

function run(args, options) {
  return new Promise((resolve) =>
    execFile(process.execPath, args, { timeout: 300_000, ...options }, (error, stdout, stderr) =>
      resolve({ code: error ? (error.code ?? 1) : 0, stdout, stderr }),
    ),
  );
}

describe("offline: one version source", () => {
  it("the built SDK (ESM and CommonJS) reports package.json's version", () => {
    assert.equal(VERSION, pkg.version);
    assert.equal(require("@pandastack/sdk").VERSION, pkg.version);
    assert.equal(require("@pandastack/sdk/package.json").version, pkg.version);
  });

  it("src/version.ts is generated by the build, not kept in git", () => {
    const src = readFileSync(join(pkgDir, "src", "version.ts"), "utf8");
    assert.match(src, /^\/\/ Generated by scripts\/build\.mjs from package\.json/);
    assert.ok(src.includes(`export const VERSION = ${JSON.stringify(pkg.version)};`));
    const ignored = readFileSync(join(pkgDir, ".gitignore"), "utf8").split("\n").map((l) => l.trim());
    assert.ok(ignored.includes("src/version.ts"), "src/version.ts must be ignored by git");
  });

  it("the build follows a changed package.json version", { timeout: 300_000 }, async () => {
    const tmp = mkdtempSync(join(tmpdir(), "pandastack-ts-version-"));
    try {
      for (const name of ["scripts", "src", "tsconfig.json", "tsconfig.ai.json", "tsconfig.cjs.json"]) cpSync(join(pkgDir, name), join(tmp, name), { recursive: true });
      writeFileSync(join(tmp, "package.json"), JSON.stringify({ ...pkg, version: "9.8.7" }, null, 2));
      symlinkSync(join(pkgDir, "node_modules"), join(tmp, "node_modules"), "dir");
      const r = await run([join(tmp, "scripts", "build.mjs")], { cwd: tmp });
      assert.equal(r.code, 0, r.stdout + r.stderr);
      const esm = await import(pathToFileURL(join(tmp, "dist", "esm", "version.js")).href);
      assert.equal(esm.VERSION, "9.8.7");
      assert.equal(createRequire(join(tmp, "x.js"))("./dist/cjs/version.js").VERSION, "9.8.7");
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });
});

// -- the seed snippet, offline ---------------------------------------------------------------------

/** A small in-memory API, enough for the seed snippet: sandboxes, `python -c 'print(EXPR)'`, files, forks. */
function fakeApi(key) {
  const sandboxes = new Map();
  const files = new Map();
  const calls = [];
  const make = (template, extra = {}, from = new Map()) => {
    const id = `sb_${String(sandboxes.size + 1).padStart(4, "0")}`;
    sandboxes.set(id, { ...SB, id, template, ...extra });
    files.set(id, new Map(from));
    return sandboxes.get(id);
  };
  const fetch = async (url, init) => {
    calls.push([init.method, url]);
    if (init.headers.authorization !== `Bearer ${key}`) return err(401, "unauthorized", "no such key");
    const u = new URL(url);
    const parts = u.pathname.split("/").filter(Boolean);
    const text = typeof init.body === "string" ? init.body : init.body ? new TextDecoder().decode(init.body) : "";
    if (parts[0] !== "v1" || parts[1] !== "sandboxes") return err(404, "not_found", `no route ${u.pathname}`);
    if (parts.length === 2 && init.method === "POST") {
      const b = JSON.parse(text);
      return ok(make(b.template, { metadata: b.metadata ?? {} }), 201);
    }
    const id = decodeURIComponent(parts[2]);
    if (!sandboxes.has(id)) return err(404, "not_found", `sandbox ${id} not found`);
    const sub = parts.slice(3).join("/");
    const path = u.searchParams.get("path");
    if (sub === "exec") {
      const m = /^python -c 'print\(([0-9+*/() -]+)\)'$/.exec(JSON.parse(text).cmd);
      if (!m) return ok({ stdout: "", stderr: "unsupported", exit_code: 127 });
      return ok({ stdout: `${Function(`return (${m[1]})`)()}\n`, stderr: "", exit_code: 0 });
    }
    if (sub === "files" && init.method === "PUT") {
      files.get(id).set(path, text);
      return ok({ path, type: "file", size: text.length }, 201);
    }
    if (sub === "files" && init.method === "GET") {
      return files.get(id).has(path) ? ok(files.get(id).get(path)) : err(404, "not_found", `no such file ${path}`);
    }
    if (sub === "fork") return ok({ sandboxes: [make(sandboxes.get(id).template, { fork_of: id }, files.get(id))] }, 201);
    return err(404, "not_found", `no route ${u.pathname}`);
  };
  return { fetch, calls, sandboxes };
}

describe("offline: the seed snippet", () => {
  it("seed_002_vercel.mjs runs unchanged against an in-memory API", async () => {
    const api = fakeApi("pds_seed");
    const saved = { fetch: globalThis.fetch, log: console.log, key: process.env.PANDASTACK_API_KEY, url: process.env.PANDASTACK_BASE_URL };
    const printed = [];
    // The snippet builds its client with the default fetch and logs its results: both are swapped
    // for the length of the import (it runs at import time, top-level await).
    globalThis.fetch = api.fetch;
    console.log = (...a) => printed.push(a.join(" "));
    process.env.PANDASTACK_API_KEY = "pds_seed";
    process.env.PANDASTACK_BASE_URL = "http://seed.invalid";
    try {
      await import(pathToFileURL(join(here, "fixtures", "seed_002_vercel.mjs")).href + "?offline");
    } finally {
      globalThis.fetch = saved.fetch;
      console.log = saved.log;
      for (const [k, v] of [["PANDASTACK_API_KEY", saved.key], ["PANDASTACK_BASE_URL", saved.url]]) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
    assert.deepEqual(printed.map((l) => l.trim()), ["1024", "hello from inside the VM"]);
    assert.equal(api.calls.length, 5);
    assert.ok(api.calls.every(([, url]) => url.startsWith("http://seed.invalid/v1/")));
    assert.ok([...api.sandboxes.values()].some((s) => s.fork_of), "the snippet forks");
  });
});

// -- background processes -------------------------------------------------------------------------

describe("offline: background processes", () => {
  const proc = { pid: 42, cmd: "sleep 9", cwd: "/home/user", user: "user", state: "exited", exit_code: 137, signal: "SIGKILL", started_at: "2026-01-01T00:00:00Z", stdin: false, output_start: 0, output_end: 3 };

  it("start, list, stdin, signal, kill send the documented requests", async () => {
    const f = script(ok({ pid: 42 }, 201), ok({ processes: [{ ...proc, state: "running", exit_code: undefined }] }), ok(null, 204), ok(null, 204), ok(proc));
    const sb = new Sandbox(client(f), SB);
    const h = await sb.processes.start(["python3", "-u", "srv.py"], { env: { A: "1" }, cwd: "/srv", stdin: true });
    assert.equal(h.pid, 42);
    assert.deepEqual([f.calls[0].method, f.calls[0].path(), f.calls[0].json()], ["POST", "/v1/sandboxes/sb_one/processes", { argv: ["python3", "-u", "srv.py"], env: { A: "1" }, cwd: "/srv", stdin: true }]);
    const ps = await sb.processes.list();
    assert.deepEqual([ps[0].pid, ps[0].state, ps[0].outputEnd], [42, "running", 3]);
    await h.sendStdin("hi\n", { eof: true });
    assert.deepEqual([f.calls[2].path(), f.calls[2].json()], ["/v1/sandboxes/sb_one/processes/42/stdin", { data: "hi\n", eof: true }]);
    await sb.processes.signal(42, "TERM");
    assert.deepEqual([f.calls[3].path(), f.calls[3].json()], ["/v1/sandboxes/sb_one/processes/42/signal", { signal: "TERM" }]);
    const p = await sb.processes.kill(42);
    assert.deepEqual([f.calls[4].method, f.calls[4].path(), p.state, p.exitCode, p.signal], ["DELETE", "/v1/sandboxes/sb_one/processes/42", "exited", 137, "SIGKILL"]);
  });

  it("a pty process: start with a size, resize, listed as one", async () => {
    const f = script(ok({ pid: 7 }, 201), ok(null, 204), ok({ processes: [{ pid: 7, state: "running", pty: true, stdin: true }] }));
    const sb = new Sandbox(client(f), SB);
    const h = await sb.processes.start("bash", { pty: { cols: 120, rows: 40 } });
    assert.deepEqual(f.calls[0].json(), { cmd: "bash", pty: { cols: 120, rows: 40 } });
    await h.resize(100, 30);
    assert.deepEqual([f.calls[1].path(), f.calls[1].json()], ["/v1/sandboxes/sb_one/processes/7/resize", { cols: 100, rows: 30 }]);
    assert.equal((await sb.processes.list())[0].pty, true);
  });

  it("output is a GET from an offset; the handle's offset follows it", async () => {
    const f = script(ndjson([{ offset: 5, next: 8, stdout: "ab\n" }, { offset: 8, next: 10, stderr: "e\n" }, { next: 10, running: true }]));
    const h = new Sandbox(client(f), SB).processes.connect(42, { offset: 5 });
    const evs = [];
    for await (const ev of h.output()) evs.push(ev);
    assert.deepEqual([f.calls[0].method, f.calls[0].path(), f.calls[0].body], ["GET", "/v1/sandboxes/sb_one/processes/42/output?offset=5", undefined]);
    assert.deepEqual(evs.map((e) => [e.type, e.data, e.offset]), [["stdout", "ab\n", 5], ["stderr", "e\n", 8], ["running", undefined, undefined]]);
    assert.equal(h.offset, 10);
  });

  it("wait resumes a dropped stream from its offset", async () => {
    const f = script(ndjson([{ offset: 0, next: 2, stdout: "1\n" }]), ndjson([{ offset: 2, next: 4, stdout: "2\n" }, { next: 4, exit_code: 3 }]));
    const seen = [];
    const r = await new Sandbox(client(f), SB).processes.connect(7).wait({ onStdout: (d) => seen.push(d) });
    assert.deepEqual([r.exitCode, r.stdout, seen], [3, "1\n2\n", ["1\n", "2\n"]]);
    assert.deepEqual(f.calls.map((c) => c.query()), [{ offset: "0", follow: "1" }, { offset: "2", follow: "1" }]);
  });

  it("sandboxes.connect wakes a hibernated sandbox and refuses a killed one", async () => {
    const f = script(ok({ ...SB, state: "hibernated" }), ok(SB), ok({ ...SB, state: "killed" }));
    const sb = await client(f).sandboxes.connect("sb_one");
    assert.equal(sb.state, "running");
    assert.deepEqual(f.calls.map((c) => [c.method, c.path()]), [["GET", "/v1/sandboxes/sb_one"], ["POST", "/v1/sandboxes/sb_one/wake"]]);
    await assert.rejects(client(f).sandboxes.connect("sb_one"), Conflict);
  });

  it("Sandbox.connect makes its own client", async () => {
    const f = script(ok(SB));
    const sb = await Sandbox.connect("sb_one", { apiKey: "pds_offline", baseUrl: "http://pandastack.invalid:8080", fetch: f, env: {} });
    assert.equal(sb.id, "sb_one");
  });
});

// -- the package surface --------------------------------------------------------------------------

describe("offline: usage and audit", () => {
  it("usage reads GET /v1/usage; audit pages GET /v1/audit with its filters", async () => {
    const usage = { team_id: "team_a", sandboxes: { used: 2, limit: 3 }, vcpus: { used: 2, limit: null }, memory_mib: { used: 1024, limit: null } };
    const entry = { id: "aud_1", key_id: "key_a", method: "DELETE", route: "/v1/sandboxes/{id}", resource_id: "sb_one", status: 204, request_id: "req_1", source: "127.0.0.1", created_at: "2026-01-01T00:00:00Z" };
    const f = script(ok(usage), ok({ entries: [entry], next_cursor: "c2" }), ok({ entries: [], next_cursor: null }));
    const c = client(f);
    const u = await c.usage();
    assert.deepEqual([u.sandboxes.used, u.sandboxes.limit, u.vcpus.limit, f.calls[0].path()], [2, 3, null, "/v1/usage"]);
    const p = await c.audit({ since: new Date("2026-01-01T00:00:00Z"), resource: "sb_one", limit: 10 });
    assert.deepEqual([p.entries[0].route, p.nextCursor], ["/v1/sandboxes/{id}", "c2"]);
    assert.deepEqual(f.calls[1].query(), { since: "2026-01-01T00:00:00.000Z", resource: "sb_one", limit: "10" });
    const p2 = await c.audit({ cursor: "c2" });
    assert.deepEqual([p2.entries, p2.nextCursor, f.calls[2].path()], [[], null, "/v1/audit?cursor=c2"]);
  });
});

describe("offline: events", () => {
  it("events follows GET /v1/events line by line", async () => {
    const sb = { id: "sb_one", state: "hibernated", host: "h1" };
    const f = script(ndjson([{ type: "ready", at: "t0" }, { type: "sandbox", at: "t1", sandbox: sb }, { type: "ping", at: "t2" }]));
    const got = [];
    for await (const ev of client(f).events()) got.push(ev);
    assert.deepEqual([got.map((e) => e.type), got[1].sandbox.state, f.calls[0].path(), f.calls[0].headers.accept],
      [["ready", "sandbox", "ping"], "hibernated", "/v1/events", "application/x-ndjson"]);
  });
});

describe("offline: directory watch, archives, port URLs", () => {
  const sandbox = (f, over = {}) => new Sandbox(client(f), { ...SB, ...over });

  it("watch waits for ready, then yields events; an error line throws", async () => {
    const f = script(ndjson([{ type: "ready", path: "/w" }, { type: "create", path: "/w/a" }, { type: "rename", path: "/w/b", from: "/w/a", dir: true },
      { type: "error", error: { code: "internal", message: "the watch broke" } }]));
    const w = await sandbox(f).files.watch("/w", { recursive: true });
    assert.equal(w.path, "/w");
    assert.equal(f.calls[0].path(), "/v1/sandboxes/sb_one/files/watch?path=%2Fw&recursive=1");
    const got = [];
    await assert.rejects(async () => {
      for await (const ev of w) got.push([ev.type, ev.path, ev.from ?? null, ev.dir]);
    }, (e) => e instanceof InternalError && e.message.includes("the watch broke"));
    assert.deepEqual(got, [["create", "/w/a", null, false], ["rename", "/w/b", "/w/a", true]]);
    const g = script(err(400, "invalid_request", "/w/f is not a directory"));
    await assert.rejects(sandbox(g).files.watch("/w/f"), InvalidRequest);
  });

  it("uploadDir sends a tar.gz of the tree; downloadDir unpacks one and stays inside", async () => {
    const { gunzipSync, gzipSync } = await import("node:zlib");
    const { mkdirSync, readlinkSync, readdirSync } = await import("node:fs");
    const src = mkdtempSync(join(tmpdir(), "ps-up-"));
    mkdirSync(join(src, "sub"));
    writeFileSync(join(src, "sub", "f.txt"), "hi");
    symlinkSync("sub/f.txt", join(src, "link"));
    let names;
    const f = script((url, init) => {
      names = [...sdk.unpackTar(new Uint8Array(gunzipSync(init.body)))].map((e) => [e.name, e.type, e.linkname ?? ""]);
      return ok({ entries: 3, bytes: 2 });
    });
    assert.deepEqual(await sandbox(f).files.uploadDir(src, "/dst"), { entries: 3, bytes: 2 });
    assert.equal(f.calls[0].path(), "/v1/sandboxes/sb_one/files/archive?path=%2Fdst");
    assert.deepEqual(names, [["link", "symlink", "sub/f.txt"], ["sub", "dir", ""], ["sub/f.txt", "file", ""]]);

    const dst = mkdtempSync(join(tmpdir(), "ps-down-"));
    const enc = (s) => new TextEncoder().encode(s);
    const tgz = (...entries) => new Uint8Array(gzipSync(sdk.packTar(entries)));
    const long = "d/" + "x".repeat(150) + ".txt"; // a PAX name
    const g = script(ok(tgz({ name: "d", type: "dir", mode: 0o755 }, { name: long, type: "file", mode: 0o644, data: enc("hello") },
      { name: "l", type: "symlink", mode: 0o777, linkname: long }, { name: "out", type: "symlink", mode: 0o777, linkname: "/etc/hostname" })));
    assert.equal(await sandbox(g).files.downloadDir("/src", join(dst, "copy")), 4);
    assert.deepEqual(g.calls[0].query(), { path: "/src", format: "tar.gz" });
    assert.equal(readFileSync(join(dst, "copy", "l"), "utf8"), "hello");
    assert.equal(readlinkSync(join(dst, "copy", "out")), "/etc/hostname");
    const outside = join(dst, "outside");
    mkdirSync(outside);
    for (const evil of [[{ name: "../outside/x", type: "file", mode: 0o644, data: enc("bad") }],
      [{ name: "/tmp/x-abs", type: "file", mode: 0o644, data: enc("bad") }],
      [{ name: "l2", type: "symlink", mode: 0o777, linkname: outside }, { name: "l2/x", type: "file", mode: 0o644, data: enc("bad") }]]) {
      const h = script(ok(tgz(...evil)));
      await assert.rejects(sandbox(h).files.downloadDir("/src", join(dst, "evil")), PandaStackError);
      assert.deepEqual(readdirSync(outside), []);
    }
    rmSync(src, { recursive: true, force: true });
    rmSync(dst, { recursive: true, force: true });
  });

  it("getUrl builds the port proxy URL from /v1/info, once per client", async () => {
    const f = script(ok({ version: "v", egress: {}, proxy_domain: "sbx.example" }));
    const c = client(f);
    const sb = new Sandbox(c, SB);
    assert.equal(await sb.getUrl(8000), "http://8000-sb_one.sbx.example:8080");
    assert.equal(await new Sandbox(c, { ...SB, public_ports: false, traffic_token: "pdt_a/b" }).getUrl(80),
      "http://80-sb_one.sbx.example:8080/?pandastack_traffic_token=pdt_a%2Fb");
    assert.equal(f.calls.length, 1);
    await assert.rejects(sb.getUrl(0), RangeError);
    const none = new Sandbox(new PandaStack({ apiKey: "k", baseUrl: "https://api.example", fetch: script(ok({ version: "v" })), env: {} }), SB);
    await assert.rejects(none.getUrl(80), ConfigurationError);
  });
});

describe("offline: surface", () => {
  it("exports what the README lists", () => {
    for (const name of ["PandaStack", "Sandbox", "Sandboxes", "Filesystem", "ExecStream", "ExecResult", "Snapshots", "Templates", "Volumes", "Processes", "ProcessHandle", "NotImplemented", "errorFromPayload", "VERSION", "DEFAULT_BASE_URL"]) {
      assert.ok(name in sdk, name);
    }
  });
});

// -- functions and schedules ------------------------------------------------------------------------

describe("offline: functions and schedules", () => {
  it("deploy sends the spec and the bundle as multipart", async () => {
    const f = script(ok({ id: "fn_1", name: "hello", version: 1, state: "ready" }, 201));
    const fn = await client(f).functions.deploy({ name: "hello", runtime: "node", handler: "index.handler", timeoutSeconds: 5 }, new Uint8Array([80, 75, 3, 4]));
    assert.equal(fn.id, "fn_1");
    const call = f.calls[0];
    assert.equal(call.path(), "/v1/functions");
    const ctype = call.headers["content-type"];
    assert.match(ctype, /^multipart\/form-data; boundary=/);
    const text = new TextDecoder().decode(call.body);
    assert.ok(text.includes('{"name":"hello","runtime":"node","handler":"index.handler","timeout_seconds":5}'), text);
    assert.ok(text.includes('name="bundle"; filename="bundle"\r\nContent-Type: application/octet-stream\r\n\r\nPK\u0003\u0004\r\n'), text);
  });

  it("invoke, async invoke, runs and schedules use the documented routes", async () => {
    const run = { id: "run_1", status: "succeeded", result: { x: 1 }, logs: "", duration_ms: 1 };
    const f = script(ok(run), ok({ ...run, status: "queued" }, 202), ok({ runs: [run] }), ok({ id: "sch_1" }, 201), ok({ id: "srun_1" }, 202), ok(null, 204));
    const c = client(f);
    assert.deepEqual((await c.functions.invoke("fn_1", { a: 1 })).result, { x: 1 });
    assert.deepEqual(f.calls[0].json(), { payload: { a: 1 } });
    assert.equal((await c.functions.invoke("fn_1", 2, { async: true })).status, "queued");
    assert.equal(f.calls[1].path(), "/v1/functions/fn_1/invoke?async=1");
    assert.equal((await c.functions.runs("fn_1", { limit: 3 })).length, 1);
    assert.equal(f.calls[2].path(), "/v1/functions/fn_1/runs?limit=3");
    await c.schedules.create({ cron: "@hourly", timezone: "Europe/Berlin", functionId: "fn_1", payload: { k: 1 }, missed: "run_once" });
    assert.deepEqual(f.calls[3].json(), { cron: "@hourly", timezone: "Europe/Berlin", function_id: "fn_1", payload: { k: 1 }, missed: "run_once" });
    await c.schedules.trigger("sch_1");
    await c.schedules.delete("sch_1");
    assert.deepEqual(f.calls.slice(4).map((x) => x.method + " " + x.path()), ["POST /v1/schedules/sch_1/trigger", "DELETE /v1/schedules/sch_1"]);
  });
});

// -- databases --------------------------------------------------------------------------------------

describe("offline: databases", () => {
  it("create, list, get, query and delete use the documented routes", async () => {
    const db = { id: "db_1", name: "shop", state: "ready", password: "pw", connection: { uri: "postgres://shop_owner:pw@db_1.db.localhost:5432/shop?sslmode=require" } };
    const res = { fields: [{ name: "n", dataTypeID: 23 }], rows: [["42"]], command: "SELECT", rowCount: 1 };
    const f = script(ok(db, 201), ok({ databases: [db] }), ok(db), ok(res), ok(null, 204), ok(db, 201), ok(db));
    const c = client(f);
    assert.equal((await c.databases.create({ name: "shop", version: "16", extensions: ["vector"] })).password, "pw");
    assert.deepEqual(f.calls[0].json(), { name: "shop", version: "16", extensions: ["vector"] });
    assert.equal((await c.databases.list()).length, 1);
    await c.databases.get("db_1");
    assert.deepEqual((await c.databases.query("db_1", "select $1::int + 1 as n", [41])).rows, [["42"]]);
    assert.deepEqual(f.calls[3].json(), { query: "select $1::int + 1 as n", params: [41] });
    await c.databases.delete("db_1");
    assert.deepEqual(f.calls.map((x) => x.method + " " + x.path()),
      ["POST /v1/databases", "GET /v1/databases", "GET /v1/databases/db_1", "POST /v1/databases/db_1/query", "DELETE /v1/databases/db_1"]);
    await c.databases.branch("db_1", "dev");
    assert.deepEqual([f.calls[5].path(), f.calls[5].json()], ["/v1/databases/db_1/branches", { name: "dev" }]);
    await c.databases.rotatePassword("db_1");
    assert.equal(f.calls[6].path(), "/v1/databases/db_1/password");
  });
});

// -- apps -------------------------------------------------------------------------------------------

describe("offline: apps", () => {
  it("create, deploy, wait, logs and rollback use the documented routes", async () => {
    const dep = { id: "dep_1", state: "queued", plan: { framework: "node" } };
    const f = script(ok({ id: "app_1", name: "web" }, 201), ok(dep, 202), ok({ ...dep, state: "live" }), ok({ ...dep, state: "live" }), ok(null, 204),
      ok(dep, 202), ok({ secret: "whsec_x" }));
    const c = client(f);
    await c.apps.create({ name: "web", secrets: { T: "x" }, build: { port: 3000 }, suspendAfterSeconds: 60 });
    assert.deepEqual(f.calls[0].json(), { name: "web", secrets: { T: "x" }, build: { port: 3000 }, suspend_after_seconds: 60 });
    assert.equal((await c.apps.deploy("web", new Uint8Array([31, 139]))).id, "dep_1");
    assert.equal(f.calls[1].path(), "/v1/apps/web/deployments");
    assert.equal(f.calls[1].headers["content-type"], "application/gzip");
    assert.equal((await c.apps.wait("web", "dep_1", { intervalMs: 0 })).state, "live");
    await c.apps.rollback("web", "dep_0");
    assert.deepEqual(f.calls[3].json(), { deployment_id: "dep_0" });
    await c.apps.delete("web");
    await c.apps.deploy("web", new Uint8Array([31, 139]), { branch: "feature/x", clean: true });
    assert.equal((await c.apps.connectGitHub("web", "acme/web", { token: "ghp_x" })).secret, "whsec_x");
    assert.deepEqual(f.calls[6].json(), { repo: "acme/web", token: "ghp_x" });
    assert.deepEqual(f.calls.map((x) => x.method + " " + x.path()), ["POST /v1/apps", "POST /v1/apps/web/deployments",
      "GET /v1/apps/web/deployments/dep_1", "POST /v1/apps/web/rollback", "DELETE /v1/apps/web",
      "POST /v1/apps/web/deployments?branch=feature%2Fx&clean=true", "POST /v1/apps/web/github"]);
  });

  it("set/unset variables and previews use PATCH and the previews routes", async () => {
    const prev = { slug: "feature-x", branch: "feature/x", deployment_id: "dep_2" };
    const f = script(ok({ id: "app_1", name: "web" }), ok({ previews: [prev] }), ok(null, 204));
    const c = client(f);
    await c.apps.update("web", { setEnv: { A: "1" }, setSecrets: { K: "v" }, unset: ["B"] });
    assert.deepEqual(f.calls[0].json(), { set_env: { A: "1" }, set_secrets: { K: "v" }, unset: ["B"] });
    assert.deepEqual(await c.apps.previews("web"), [prev]);
    await c.apps.deletePreview("web", "feature/x");
    assert.deepEqual(f.calls.map((x) => x.method + " " + x.path()), ["PATCH /v1/apps/web", "GET /v1/apps/web/previews",
      "DELETE /v1/apps/web/previews/feature%2Fx"]);
  });
});

describe("terminal WebSocket (a loopback ws server)", () => {
  // The terminal's client side against a `ws` server on loopback: the upgrade carries the key and
  // the query; binary both ways; resize as JSON; the exit message; a refused upgrade is the API's
  // typed error.
  async function serve(onConnection, verifyClient) {
    const { WebSocketServer } = await import("ws");
    const wss = new WebSocketServer({ host: "127.0.0.1", port: 0, verifyClient });
    await new Promise((r) => wss.on("listening", r));
    const seen = [];
    wss.on("connection", (ws, req) => {
      seen.push(req);
      onConnection(ws);
    });
    const c = new PandaStack({ apiKey: "pds_ws", baseUrl: `http://127.0.0.1:${wss.address().port}`, env: {} });
    const sb = new sdk.Sandbox(c, { id: "sb_1", state: "running" });
    return { wss, seen, sb, c };
  }

  it("types, resizes, reads and learns the exit", async () => {
    const got = [];
    const { wss, seen, sb } = await serve((ws) => {
      ws.send(Buffer.from("hello"), { binary: true });
      ws.on("message", (data, isBinary) => {
        got.push([isBinary, data.toString()]);
        if (got.length === 2) {
          ws.send(JSON.stringify({ type: "exit", exit_code: 130, signal: "SIGINT" }));
          ws.close(1000);
        }
      });
    });
    try {
      const t = await sb.terminal({ cmd: "bash", cols: 100, rows: 30 });
      assert.equal(Buffer.from(await t.read()).toString(), "hello");
      t.write("ls\n");
      t.resize(100, 30);
      assert.equal(await t.wait(), 130);
      assert.deepEqual([t.signal, await t.read()], ["SIGINT", null]);
      assert.deepEqual(got, [[true, "ls\n"], [false, '{"type":"resize","cols":100,"rows":30}']]);
      assert.equal(seen[0].url, "/v1/sandboxes/sb_1/pty?cmd=bash&cols=100&rows=30");
      assert.equal(seen[0].headers.authorization, "Bearer pds_ws");
    } finally {
      wss.close();
    }
  });

  it("a refused upgrade is the typed error, and its connection is let go", async () => {
    // A server that answers the upgrade with an error and keeps the connection open (as Go's
    // does): the client must close it, or it keeps Node running.
    const { createServer } = await import("node:http");
    const srv = createServer();
    let closed;
    const gone = new Promise((r) => (closed = r));
    srv.on("upgrade", (_req, socket) => {
      const body = '{"error":{"code":"forbidden","message":"this key lacks the sandboxes scope"}}';
      socket.write(`HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
      socket.on("end", closed); // the client let go (the server side stays half open)
    });
    await new Promise((r) => srv.listen(0, "127.0.0.1", r));
    const c = new PandaStack({ apiKey: "pds_ws", baseUrl: `http://127.0.0.1:${srv.address().port}`, env: {} });
    const sb = new sdk.Sandbox(c, { id: "sb_1", state: "running" });
    try {
      await assert.rejects(sb.terminal(), (e) => e instanceof Forbidden && /sandboxes scope/.test(e.message));
      await gone;
    } finally {
      srv.close();
    }
  });
});
