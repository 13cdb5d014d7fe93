// fork, snapshot, hibernate and wake against a real PandaStack. These assert real behaviour: a
// server that does not support a call yet answers 501 not_implemented and these tests FAIL.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { NotFound, Sandbox } from "@pandastack/sdk";
import { LONG, liveSuite } from "./helpers.mjs";

// A process whose state lives only in guest memory: it survives fork/hibernate only if memory does.
const START_DAEMON =
  "nohup setsid sh -c 'echo $$ > /tmp/daemon.pid; exec sleep 100000' >/dev/null 2>&1 & sleep 0.3; cat /tmp/daemon.pid";
const alive = async (sb, pid) => (await sb.exec(`kill -0 ${pid} && echo alive || echo gone`)).stdout.trim() === "alive";

describe("lifecycle", () => {
  let client, t;
  liveSuite((live) => ({ client, t } = live));

  it("fork() makes one copy-on-write child", LONG, async () => {
    const sb = await t.create({ metadata: { suite: "ts-fork" } });
    await sb.filesystem.write("/tmp/state.txt", "parent state");
    const pid = (await sb.exec(START_DAEMON)).stdout.trim();
    assert.match(pid, /^\d+$/);

    const child = await sb.fork();
    t.track(child);
    assert.ok(child instanceof Sandbox);
    assert.notEqual(child.id, sb.id);
    assert.equal(child.state, "running");
    assert.equal(child.template, sb.template);
    assert.equal(child.forkOf, sb.id);
    assert.deepEqual(child.metadata, sb.metadata);
    assert.equal(await child.filesystem.read("/tmp/state.txt"), "parent state");
    assert.ok(await alive(child, pid), "the parent's running process is not in the fork");

    await child.filesystem.write("/tmp/state.txt", "child state");
    assert.equal(await sb.filesystem.read("/tmp/state.txt"), "parent state");
    assert.equal(await child.filesystem.read("/tmp/state.txt"), "child state");
  });

  it("fork({ count: 2 }) makes two", LONG, async () => {
    const sb = await t.create({ metadata: { suite: "ts-fork" } });
    await sb.filesystem.write("/tmp/n.txt", "0");
    const children = await sb.fork({ count: 2 });
    t.track(children);
    assert.ok(Array.isArray(children));
    assert.equal(children.length, 2);
    assert.equal(new Set([sb.id, ...children.map((c) => c.id)]).size, 3);
    for (const [i, c] of children.entries()) {
      assert.equal(await c.filesystem.read("/tmp/n.txt"), "0");
      await c.filesystem.write("/tmp/n.txt", String(i + 1));
    }
    assert.deepEqual(await Promise.all(children.map((c) => c.filesystem.read("/tmp/n.txt"))), ["1", "2"]);
    assert.equal(await sb.filesystem.read("/tmp/n.txt"), "0");
  });

  it("snapshot() and create({ snapshotId })", LONG, async () => {
    const sb = await t.create({ metadata: { suite: "ts-snap" } });
    await sb.filesystem.write("/tmp/snap.txt", "saved");
    const pid = (await sb.exec(START_DAEMON)).stdout.trim();
    const snap = await sb.snapshot();
    assert.ok(snap.id, JSON.stringify(snap.raw));
    assert.equal(snap.sandboxId, sb.id);
    assert.equal(snap.template, sb.template);
    assert.ok(snap.createdAt instanceof Date);
    assert.equal((await client.snapshots.get(snap.id)).id, snap.id);
    assert.deepEqual((await client.snapshots.list({ sandboxId: sb.id })).map((x) => x.id), [snap.id]);
    assert.equal((await sb.exec("echo still-here")).stdout, "still-here\n");
    await sb.filesystem.write("/tmp/snap.txt", "changed after the snapshot");

    const restored = await client.sandboxes.create({ snapshotId: snap.id, ttlSeconds: 600 });
    t.track(restored);
    assert.equal(restored.state, "running");
    assert.equal(restored.snapshotId, snap.id);
    assert.equal(await restored.filesystem.read("/tmp/snap.txt"), "saved");
    assert.ok(await alive(restored, pid));

    await client.snapshots.delete(snap.id);
    await assert.rejects(client.snapshots.get(snap.id), NotFound);
    assert.equal((await restored.exec("echo ok")).stdout, "ok\n");
  });

  it("hibernate(), wake() and auto-wake", LONG, async () => {
    const tag = randomUUID();
    const sb = await t.create({ metadata: { suite: "ts-hibernate", tag } });
    await sb.filesystem.write("/tmp/h.txt", "kept");
    const pid = (await sb.exec(START_DAEMON)).stdout.trim();

    assert.equal(await sb.hibernate(), sb);
    assert.equal(sb.state, "hibernated");
    assert.equal((await client.sandboxes.get(sb.id)).state, "hibernated");
    // A hibernated sandbox has no figures, and asking does not wake it.
    await assert.rejects(sb.metrics(), (e) => e.status === 409);
    assert.equal((await client.sandboxes.get(sb.id)).state, "hibernated");
    assert.deepEqual((await client.sandboxes.list({ metadata: { tag }, state: "hibernated" })).map((s) => s.id), [sb.id]);

    await sb.wake();
    assert.equal(sb.state, "running");
    const m = await sb.metrics();
    assert.ok(m.mem_total_bytes > 0 && m.mem_used_bytes > 0 && m.mem_used_bytes < m.mem_total_bytes, JSON.stringify(m));
    assert.ok(m.disk_used_bytes > 0 && m.cpu_used_pct >= 0 && m.cpu_used_pct <= 100 && m.vcpus >= 1, JSON.stringify(m));
    assert.equal(await sb.filesystem.read("/tmp/h.txt"), "kept");
    assert.ok(await alive(sb, pid));

    await sb.hibernate();
    assert.equal((await sb.exec("cat /tmp/h.txt")).stdout, "kept");
    assert.equal((await sb.refresh()).state, "running");
    assert.ok(await alive(sb, pid));
  });
});
