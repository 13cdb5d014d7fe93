// Durable volumes against a real PandaStack (docs/volumes.md): what one sandbox writes under the
// mount path, a later sandbox reads back. One read-write holder at a time, or any number of
// read-only ones.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { Conflict, InvalidRequest, NotFound, PandaStackError } from "@pandastack/sdk";
import { LONG, liveSuite } from "./helpers.mjs";

describe("volumes", () => {
  let client, t;
  const made = [];
  liveSuite((live) => ({ client, t } = live));
  // (after the suite's sandboxes are killed: those hooks run in the order they were registered)
  after(async () => {
    for (const id of made) await client.volumes.delete(id).catch(() => {});
  });
  const makeVolume = async (params) => {
    const v = await client.volumes.create(params);
    made.push(v.id);
    return v;
  };

  it("create, list, get, resize, delete, with the API's validation", LONG, async () => {
    const name = `ts-${randomUUID().slice(0, 8)}`;
    const v = await makeVolume({ sizeMib: 32, name });
    assert.match(v.id, /^vol_/);
    assert.deepEqual([v.name, v.sizeMib, v.attachments], [name, 32, []]);
    assert.ok(v.hostId);
    assert.ok(v.createdAt instanceof Date);
    assert.ok((await client.volumes.list()).some((x) => x.id === v.id));
    assert.equal((await client.volumes.get(v.id)).name, name);
    assert.equal((await client.volumes.resize(v.id, 48)).sizeMib, 48);
    await assert.rejects(client.volumes.resize(v.id, 16), InvalidRequest); // only grow
    await assert.rejects(client.volumes.create({ sizeMib: 0 }), InvalidRequest);
    await assert.rejects(t.create({ volumes: [{ volumeId: v.id, mountPath: "/etc" }] }), (e) => e instanceof InvalidRequest && /system directory/.test(e.message));
    await assert.rejects(client.volumes.get("vol_doesnotexist"), NotFound);
    await assert.rejects(t.create({ volumes: [{ volumeId: v.id, path: "/data" }] }), TypeError);
    await client.volumes.delete(v.id);
    await assert.rejects(client.volumes.get(v.id), NotFound);
  });

  it("data outlives the sandbox; attach rules hold", LONG, async () => {
    const v = await makeVolume({ sizeMib: 64 });
    const writer = await t.create({ volumes: [{ volumeId: v.id, mountPath: "/data", readOnly: false }] });
    assert.equal(writer.host, v.hostId);
    await writer.filesystem.write("/data/hello.txt", "hello from a volume\n");
    assert.deepEqual((await client.volumes.get(v.id)).attachments, [{ sandboxId: writer.id, mountPath: "/data", readOnly: false }]);

    // While attached read-write: no delete, no resize, no second attach.
    await assert.rejects(client.volumes.delete(v.id), (e) => e instanceof Conflict && e.message.includes(writer.id));
    await assert.rejects(client.volumes.resize(v.id, 128), Conflict);
    await assert.rejects(t.create({ volumes: [{ volumeId: v.id, mountPath: "/data", readOnly: true }] }), Conflict);

    // A snapshot copies the volume with memory and disk; a fork's child gets a copy of its own
    // (docs/volumes.md): it reads what the parent wrote, and its writes stay its own.
    await client.snapshots.delete((await writer.snapshot()).id);
    const child = await writer.fork();
    try {
      assert.equal(await child.filesystem.read("/data/hello.txt"), "hello from a volume\n");
      await child.filesystem.write("/data/hello.txt", "the child's\n");
      assert.equal(await writer.filesystem.read("/data/hello.txt"), "hello from a volume\n");
      const copy = (await client.volumes.list()).filter((c) => c.attachments.length === 1 && c.attachments[0].sandboxId === child.id);
      assert.equal(copy.length, 1, "the child's copy of the volume is the team's volume");
      await child.kill();
      await client.volumes.delete(copy[0].id);
    } finally {
      await child.kill().catch(() => {});
    }

    await writer.kill();
    assert.deepEqual((await client.volumes.get(v.id)).attachments, []);

    const reader = await t.create({ volumes: [{ volumeId: v.id, mountPath: "/data", readOnly: true }] });
    assert.equal(await reader.filesystem.read("/data/hello.txt"), "hello from a volume\n");
    await assert.rejects(reader.filesystem.write("/data/other.txt", "read-only"), PandaStackError);
    await assert.rejects(reader.snapshot(), Conflict); // its guest sees a throw-away overlay: no copy
    const second = await t.create({ volumes: [{ volumeId: v.id, mountPath: "/mnt/ref", readOnly: true }] });
    assert.equal(await second.filesystem.read("/mnt/ref/hello.txt"), "hello from a volume\n");
    await assert.rejects(t.create({ volumes: [{ volumeId: v.id, mountPath: "/data" }] }), Conflict);
    await assert.rejects(client.volumes.delete(v.id), Conflict);
    await reader.kill();
    await second.kill();
    await client.volumes.delete(v.id);
  });
});
