// Every call of the sandbox surface against a real PandaStack.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { createHash, randomUUID } from "node:crypto";
import { Conflict, ExecResult, NotFound, PandaStack, Sandbox } from "@pandastack/sdk";
import { LONG, TEMPLATE, liveSuite } from "./helpers.mjs";

const tag = () => randomUUID().replace(/-/g, "");

describe("client and sandboxes", () => {
  let client, t;
  liveSuite((live) => ({ client, t } = live));

  it("client.sandbox is client.sandboxes", () => {
    assert.equal(client.sandbox, client.sandboxes);
    assert.ok(client instanceof PandaStack);
  });

  it("templates list and get", async () => {
    const names = (await client.templates.list()).map((x) => x.name);
    assert.ok(names.includes(TEMPLATE), names.join(","));
    const tpl = await client.templates.get(TEMPLATE);
    assert.equal(tpl.name, TEMPLATE);
    assert.ok(tpl.memoryMib >= 128);
  });

  it("create, get, list, kill", LONG, async () => {
    const id = tag();
    const sb = await t.create({ ttlSeconds: 300, metadata: { suite: "ts", tag: id }, env: { GREETING: "hi there" } });
    assert.ok(sb instanceof Sandbox);
    assert.match(sb.id, /^sb_/);
    assert.equal(sb.template, TEMPLATE);
    assert.equal(sb.state, "running");
    assert.deepEqual(sb.metadata, { suite: "ts", tag: id });
    assert.ok(sb.createdAt instanceof Date && sb.expiresAt instanceof Date);
    assert.ok(Math.abs((sb.expiresAt - sb.createdAt) / 1000 - 300) < 2);
    assert.equal((await sb.exec("echo $GREETING")).stdout, "hi there\n");

    const got = await client.sandboxes.get(sb.id);
    assert.equal(got.id, sb.id);
    assert.equal(got.metadata.tag, id);
    assert.deepEqual((await client.sandboxes.list({ metadata: { tag: id } })).map((s) => s.id), [sb.id]);
    assert.deepEqual(await client.sandboxes.list({ metadata: { tag: `none-${id}` } }), []);
    assert.ok((await client.sandboxes.list({ state: "running" })).some((s) => s.id === sb.id));

    await sb.kill();
    assert.equal(sb.state, "killed");
    await sb.kill(); // idempotent
    assert.equal((await client.sandboxes.get(sb.id)).state, "killed");
    assert.deepEqual(await client.sandboxes.list({ metadata: { tag: id } }), []);
    assert.deepEqual((await client.sandboxes.list({ metadata: { tag: id }, state: "all" })).map((s) => s.state), ["killed"]);
    assert.deepEqual((await client.sandboxes.list({ metadata: { tag: id }, state: ["killed"] })).map((s) => s.id), [sb.id]);
    await assert.rejects(sb.exec("true"), Conflict);
  });

  it("list pages through next_cursor", LONG, async () => {
    const id = tag();
    const made = [];
    for (let i = 0; i < 3; i++) made.push(await t.create({ metadata: { tag: id } }));
    const got = [];
    for await (const sb of client.sandboxes.iter({ metadata: { tag: id }, pageSize: 1 })) got.push(sb.id);
    assert.deepEqual(got, made.map((s) => s.id).reverse());
    assert.equal((await client.sandboxes.list({ metadata: { tag: id }, limit: 2 })).length, 2);
  });

  it("setTtl and refresh", LONG, async () => {
    const sb = await t.create({ ttlSeconds: 60 });
    const beforeTtl = sb.expiresAt;
    assert.equal(await sb.setTtl(3600), sb);
    assert.ok(sb.expiresAt > beforeTtl);
    assert.ok(Math.abs((sb.expiresAt - Date.now()) / 1000 - 3600) < 30);
    await sb.refresh();
    assert.ok(Math.abs((sb.expiresAt - Date.now()) / 1000 - 3600) < 30);
  });

  it("an expired sandbox is killed", LONG, async () => {
    const sb = await t.create({ ttlSeconds: 2 });
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline && (await sb.refresh()).state !== "killed") await new Promise((r) => setTimeout(r, 500));
    assert.equal(sb.state, "killed");
  });

  it("sandboxes.with kills afterwards", LONG, async () => {
    let id;
    const out = await client.sandboxes.with({ template: TEMPLATE, ttlSeconds: 120 }, async (sb) => {
      id = sb.id;
      return (await sb.exec("echo inside")).stdout;
    });
    assert.equal(out, "inside\n");
    assert.equal((await client.sandboxes.get(id)).state, "killed");
  });
});

describe("exec", () => {
  let client, sb;
  liveSuite((live) => ({ client, sb } = live), { metadata: { suite: "ts-exec" } });

  it("runs python in the guest", async () => {
    const r = await sb.exec("python -c 'print(2 ** 10)'", { timeoutSeconds: 30 });
    assert.ok(r instanceof ExecResult);
    assert.deepEqual([r.stdout, r.stderr, r.exitCode, r.timedOut, r.ok], ["1024\n", "", 0, false, true]);
    assert.equal(typeof r.durationMs, "number");
  });

  it("exit code and stderr", async () => {
    const r = await sb.exec("echo out; echo err >&2; exit 7");
    assert.deepEqual([r.stdout, r.stderr, r.exitCode, r.ok], ["out\n", "err\n", 7, false]);
  });

  it("argv", async () => {
    assert.equal((await sb.exec(["printf", "%s|", "a b", "$HOME", "c"])).stdout, "a b|$HOME|c|");
  });

  it("env, cwd, user, stdin", async () => {
    const r = await sb.exec("cat; echo; echo $FOO; pwd; whoami", {
      env: { FOO: "bar baz" },
      cwd: "/tmp",
      user: "root",
      stdin: "from stdin",
    });
    assert.equal(r.stdout, "from stdin\nbar baz\n/tmp\nroot\n");
    assert.equal((await sb.exec("whoami")).stdout, "user\n");
    assert.equal((await sb.exec("wc -c", { stdin: new TextEncoder().encode("12345") })).stdout.trim(), "5");
  });

  it("timeoutSeconds", async () => {
    const r = await sb.exec("echo started; sleep 30", { timeoutSeconds: 1 });
    assert.equal(r.timedOut, true);
    assert.notEqual(r.exitCode, 0);
    assert.equal(r.stdout, "started\n");
  });

  it("onStdout/onStderr callbacks", async () => {
    const got = [];
    const r = await sb.exec("echo one; echo two >&2; echo three", {
      onStdout: (s) => got.push(["out", s]),
      onStderr: (s) => got.push(["err", s]),
    });
    assert.equal(r.exitCode, 0);
    assert.equal(got.filter(([k]) => k === "out").map(([, s]) => s).join(""), "one\nthree\n");
    assert.equal(got.filter(([k]) => k === "err").map(([, s]) => s).join(""), "two\n");
    assert.deepEqual([r.stdout, r.stderr], ["one\nthree\n", "two\n"]);
  });

  it("execStream events", async () => {
    const events = [];
    const stream = sb.execStream("echo a; echo b >&2; exit 3");
    for await (const ev of stream) events.push(ev);
    assert.deepEqual(events.at(-1).type, "exit");
    assert.equal(events.at(-1).exitCode, 3);
    assert.equal(stream.exitCode, 3);
    assert.equal(events.filter((e) => e.type === "stdout").map((e) => e.data).join(""), "a\n");
    assert.equal(events.filter((e) => e.type === "stderr").map((e) => e.data).join(""), "b\n");
  });

  it("execStream delivers the first line before the command ends", LONG, async () => {
    // Causal check: the command only finishes after the client reacted to its first line. A
    // client that buffered the answer would never see "first" and the command would time out.
    const marker = `/tmp/stream-marker-${tag()}`;
    const stream = sb.execStream(`echo first; while [ ! -e ${marker} ]; do sleep 0.1; done; echo second`, { timeoutSeconds: 60 });
    const seen = [];
    for await (const ev of stream) {
      seen.push(ev.type === "exit" ? ["exit", ev.exitCode] : [ev.type, ev.data.trim()]);
      if (ev.type === "stdout" && ev.data.trim() === "first") await sb.filesystem.write(marker, "go");
    }
    assert.deepEqual(seen, [["stdout", "first"], ["stdout", "second"], ["exit", 0]]);
    assert.equal(stream.timedOut, false);
  });

  it("execStream: first arrives well before second", LONG, async () => {
    const t0 = Date.now();
    const arrivals = [];
    for await (const ev of sb.execStream("echo first; sleep 3; echo second")) {
      arrivals.push([ev.type, ev.type === "exit" ? "" : ev.data.trim(), Date.now() - t0]);
    }
    assert.deepEqual(arrivals.map(([k, d]) => [k, d]), [["stdout", "first"], ["stdout", "second"], ["exit", ""]]);
    assert.ok(arrivals[1][2] - arrivals[0][2] > 1500, JSON.stringify(arrivals));
  });

  it("onStdout sees the first line before the command ends", LONG, async () => {
    const marker = `/tmp/cb-marker-${tag()}`;
    const writes = [];
    const r = await sb.exec(`echo first; while [ ! -e ${marker} ]; do sleep 0.1; done; echo second`, {
      timeoutSeconds: 60,
      onStdout: (s) => {
        if (s.trim() === "first") writes.push(sb.filesystem.write(marker, "go"));
      },
    });
    await Promise.all(writes);
    assert.deepEqual([r.stdout, r.exitCode, r.timedOut], ["first\nsecond\n", 0, false]);
  });

  it("ExecStream.wait", async () => {
    assert.equal(await sb.execStream("echo x; exit 4").wait(), 4);
  });

  it("breaking out of a stream early", async () => {
    const stream = sb.execStream("for i in 1 2 3 4 5; do echo $i; sleep 0.2; done");
    for await (const ev of stream) {
      assert.deepEqual(ev, { type: "stdout", data: "1\n" });
      break;
    }
    assert.equal(stream.exitCode, undefined);
    assert.equal((await sb.exec("echo still fine")).stdout, "still fine\n");
  });

  it("concurrent execs", async () => {
    const outs = await Promise.all([0, 1, 2, 3].map((i) => sb.exec(`echo ${i}`)));
    assert.deepEqual(outs.map((r) => r.stdout), ["0\n", "1\n", "2\n", "3\n"]);
  });
});

describe("filesystem", () => {
  let client, sb;
  liveSuite((live) => ({ client, sb } = live), { metadata: { suite: "ts-files" } });
  const dir = () => `/tmp/ts-${tag().slice(0, 8)}`;

  it("write and read text and bytes", async () => {
    const d = dir();
    const fs = sb.filesystem;
    const info = await fs.write(`${d}/a/b/hello.txt`, "héllo wörld\n");
    assert.deepEqual([info.type, info.size, info.name], ["file", Buffer.byteLength("héllo wörld\n"), "hello.txt"]);
    assert.equal(await fs.read(`${d}/a/b/hello.txt`), "héllo wörld\n");
    const blob = new Uint8Array(256 * 64).map((_, i) => i % 256);
    await fs.write(`${d}/blob.bin`, blob);
    assert.deepEqual(await fs.readBytes(`${d}/blob.bin`), blob);
    assert.equal((await sb.exec(`sha256sum ${d}/blob.bin`)).stdout.split(" ")[0], createHash("sha256").update(blob).digest("hex"));
    await fs.write(`${d}/ab.bin`, blob.buffer);
    assert.equal((await fs.stat(`${d}/ab.bin`)).size, blob.length);
    await fs.write(`${d}/blob2.bin`, new Blob(["from a blob"]));
    assert.equal(await fs.read(`${d}/blob2.bin`), "from a blob");
    const stream = new ReadableStream({
      start(c) {
        for (let i = 0; i < 10; i++) c.enqueue(new Uint8Array(10_000).fill(120));
        c.close();
      },
    });
    await fs.write(`${d}/stream.bin`, stream);
    assert.equal((await fs.stat(`${d}/stream.bin`)).size, 100_000);
    await sb.exec(`echo from-exec > ${d}/e.txt`);
    assert.equal(await sb.files.read(`${d}/e.txt`), "from-exec\n");
  });

  it("mode", async () => {
    const d = dir();
    assert.equal((await sb.filesystem.write(`${d}/run.sh`, "#!/bin/sh\necho ran\n", { mode: 0o755 })).mode, "0755");
    assert.equal((await sb.exec(`${d}/run.sh`)).stdout, "ran\n");
  });

  it("list, stat, mkdir, move, remove, exists", async () => {
    const d = dir();
    const fs = sb.filesystem;
    await fs.mkdir(`${d}/x/y`);
    await fs.mkdir(`${d}/x/y`);
    assert.equal((await fs.stat(`${d}/x/y`)).type, "dir");
    await fs.write(`${d}/x/f.txt`, "1");
    assert.deepEqual((await fs.list(`${d}/x`)).map((e) => e.name).sort(), ["f.txt", "y"]);
    assert.deepEqual((await fs.list(d, { depth: 3 })).map((e) => e.path).sort(), [`${d}/x`, `${d}/x/f.txt`, `${d}/x/y`]);
    const st = await fs.stat(`${d}/x/f.txt`);
    assert.deepEqual([st.path, st.type, st.size], [`${d}/x/f.txt`, "file", 1]);
    assert.ok(st.mtime instanceof Date);
    await fs.move(`${d}/x/f.txt`, `${d}/x/y/g.txt`);
    assert.equal(await fs.exists(`${d}/x/f.txt`), false);
    assert.equal(await fs.read(`${d}/x/y/g.txt`), "1");
    await assert.rejects(fs.remove(`${d}/x`), Conflict);
    await fs.remove(`${d}/x/y/g.txt`);
    assert.equal(await fs.exists(`${d}/x/y/g.txt`), false);
    await fs.write(`${d}/x/y/h.txt`, "2");
    await fs.remove(d, { recursive: true });
    assert.equal(await fs.exists(d), false);
  });

  it("missing file is NotFound", async () => {
    const err = await sb.filesystem.read(`${dir()}/nope.txt`).catch((e) => e);
    assert.ok(err instanceof NotFound, String(err));
    assert.equal(err.status, 404);
    assert.match(err.message, /no such file/);
  });
});
