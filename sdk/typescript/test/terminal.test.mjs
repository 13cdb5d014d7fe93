// The interactive terminal (sandbox.terminal(), a WebSocket through `ws`) against a real
// PandaStack (docs/processes.md, "Interactive terminal").
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { APIConnectionError, InvalidRequest, NotFound, Sandbox } from "@pandastack/sdk";
import { LONG, liveSuite, serverEnv } from "./helpers.mjs";

const text = (chunks) => Buffer.concat(chunks.map((c) => Buffer.from(c))).toString("utf8");

async function readUntil(t, needle) {
  const got = [];
  while (!text(got).includes(needle)) {
    const c = await t.read();
    if (c === null) throw new Error(`the terminal ended before ${needle}; it printed ${JSON.stringify(text(got))}`);
    got.push(c);
  }
  return text(got);
}

describe("terminal", () => {
  let sb;
  liveSuite((live) => ({ sb } = live), { metadata: { suite: "ts-terminal" } });

  it("a shell: size, TERM, resize, exit code", LONG, async () => {
    const t = await sb.terminal({ cols: 100, rows: 30 });
    t.write("stty size; echo term=$TERM\n");
    const first = await readUntil(t, "term=xterm");
    assert.match(first, /30 100/);
    assert.match(first, /term=xterm-256color/);
    t.resize(120, 40);
    t.write("stty size; exit 7\n");
    const rest = [];
    for await (const c of t) rest.push(c);
    assert.equal(await t.wait(), 7);
    assert.match(text(rest), /40 120/);
    assert.equal(t.closed, true);
    assert.throws(() => t.write("x"), APIConnectionError);
  });

  it("a command with onData", LONG, async () => {
    const seen = [];
    const t = await sb.terminal({ cmd: "echo hi-from-pty; tty", onData: (b) => seen.push(b) });
    assert.equal(await t.wait(), 0);
    assert.match(text(seen), /hi-from-pty/);
    assert.match(text(seen), /\/dev\/pts\//);
    assert.equal(t.signal, null);
  });

  it("close hangs up", LONG, async () => {
    const t = await sb.terminal({ cmd: "sleep 600" });
    await t.close();
    assert.equal(t.closed, true);
    await assert.rejects(t.wait(), APIConnectionError); // no exit was told
  });

  it("bad input is a typed error", LONG, async () => {
    await assert.rejects(sb.terminal({ cols: 5000, rows: 10 }), InvalidRequest);
    await assert.rejects(sb.terminal({ cols: 80 }), InvalidRequest);
    const t = await sb.terminal({ cmd: "true" });
    assert.throws(() => t.resize(0, 10), InvalidRequest);
    await t.wait();
    const { apiKey, baseUrl } = serverEnv();
    const ghost = await Sandbox.connect(sb.id, { apiKey, baseUrl });
    ghost.id = "sb_nosuchsandbox";
    await assert.rejects(ghost.terminal(), NotFound);
  });
});
