// Background processes against a real PandaStack (docs/processes.md).
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { InvalidRequest, NotFound, PayloadTooLarge, Sandbox } from "@pandastack/sdk";
import { LONG, liveSuite, serverEnv } from "./helpers.mjs";

describe("background processes", () => {
  let sb;
  liveSuite((live) => ({ sb } = live), { metadata: { suite: "ts-processes" } });

  it("start, read from an offset after a reader left, exit code listed", LONG, async () => {
    const h = await sb.processes.start("for i in 1 2 3 4; do echo line $i; sleep 0.1; done; exit 5");
    let first = "";
    for await (const ev of h.output({ follow: true })) {
      if (ev.type === "stdout") {
        first += ev.data;
        break; // the reader leaves
      }
    }
    const r = await sb.processes.connect(h.pid, { offset: h.offset }).wait();
    assert.equal(first + r.stdout, "line 1\nline 2\nline 3\nline 4\n");
    assert.equal(r.exitCode, 5);
    const listed = (await sb.processes.list()).filter((p) => p.pid === h.pid);
    assert.deepEqual(listed.map((p) => [p.state, p.exitCode]), [["exited", 5]]);
  });

  it("stdin round trip and kill", LONG, async () => {
    const h = await sb.processes.start(["cat"], { stdin: true });
    await h.sendStdin("hello\n", { eof: true });
    const seen = [];
    const r = await h.wait({ onStdout: (d) => seen.push(d) });
    assert.deepEqual([r.exitCode, r.stdout, seen.join("")], [0, "hello\n", "hello\n"]);
    const loop = await sb.processes.start("sleep 600 & wait");
    const p = await sb.processes.kill(loop.pid);
    assert.deepEqual([p.state, p.signal], ["exited", "SIGKILL"]);
  });

  it("bad input is a typed error", LONG, async () => {
    const h = await sb.processes.start("sleep 600");
    try {
      await assert.rejects(h.signal("SEGV"), InvalidRequest);
      await assert.rejects(sb.processes.signal(1, "TERM"), NotFound);
      await assert.rejects(h.sendStdin("x".repeat((1 << 20) + 1)), PayloadTooLarge);
    } finally {
      await h.kill();
    }
  });

  it("Sandbox.connect", LONG, async () => {
    const { baseUrl, apiKey } = serverEnv();
    const again = await Sandbox.connect(sb.id, { apiKey, baseUrl });
    assert.deepEqual([again.id, again.state], [sb.id, "running"]);
  });
});
