// Functions and schedules against a real PandaStack (docs/functions.md).
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { InvalidRequest, NotFound } from "@pandastack/sdk";
import { LONG, liveSuite } from "./helpers.mjs";

// zip builds a .zip of one stored file (no compression needed for a test bundle).
function zip(name, text) {
  const data = Buffer.from(text);
  const nameBuf = Buffer.from(name);
  const crc = crc32(data);
  const local = Buffer.alloc(30);
  local.writeUInt32LE(0x04034b50, 0); local.writeUInt16LE(20, 4); local.writeUInt32LE(crc, 14);
  local.writeUInt32LE(data.length, 18); local.writeUInt32LE(data.length, 22); local.writeUInt16LE(nameBuf.length, 26);
  const central = Buffer.alloc(46);
  central.writeUInt32LE(0x02014b50, 0); central.writeUInt16LE(20, 4); central.writeUInt16LE(20, 6); central.writeUInt32LE(crc, 16);
  central.writeUInt32LE(data.length, 20); central.writeUInt32LE(data.length, 24); central.writeUInt16LE(nameBuf.length, 28);
  const end = Buffer.alloc(22);
  const cdOffset = local.length + nameBuf.length + data.length;
  end.writeUInt32LE(0x06054b50, 0); end.writeUInt16LE(1, 8); end.writeUInt16LE(1, 10);
  end.writeUInt32LE(central.length + nameBuf.length, 12); end.writeUInt32LE(cdOffset, 16);
  return new Uint8Array(Buffer.concat([local, nameBuf, data, central, nameBuf, end]));
}

function crc32(buf) {
  let c = ~0;
  for (const b of buf) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = (c >>> 1) ^ (0xedb88320 & -(c & 1));
  }
  return ~c >>> 0;
}

const INDEX = `export async function handler(event, context) {
  console.log("sum of", event.a, event.b);
  if (event.fail) throw new RangeError("too big");
  return { sum: event.a + event.b, name: context.function_name };
}
`;

describe("functions", () => {
  let client;
  const made = [];
  liveSuite((live) => ({ client } = live));
  after(async () => {
    for (const id of made) await client.functions.delete(id).catch(() => {});
  });

  it("deploy, invoke, errors, a schedule", LONG, async () => {
    const name = `ts-${randomUUID().slice(0, 8)}`;
    const fn = await client.functions.deploy({ name, runtime: "node", handler: "index.handler" }, zip("index.js", INDEX));
    made.push(fn.id);
    assert.deepEqual([fn.name, fn.version, fn.state], [name, 1, "ready"]);
    const run = await client.functions.invoke(fn.id, { a: 2, b: 3 });
    assert.deepEqual([run.status, run.result, run.logs], ["succeeded", { sum: 5, name }, "sum of 2 3\n"]);
    const bad = await client.functions.invoke(fn.id, { fail: true });
    assert.deepEqual([bad.status, bad.error?.type, bad.error?.message], ["failed", "RangeError", "too big"]);
    await assert.rejects(client.functions.deploy({ name, runtime: "node", handler: "index.handler" }, zip("main.js", "")),
      (e) => e instanceof InvalidRequest && /index\.mjs or index\.js/.test(e.message));
    const sc = await client.schedules.create({ cron: "@weekly", functionId: fn.id, payload: { a: 1, b: 1 } });
    assert.equal((await client.schedules.trigger(sc.id)).trigger, "manual");
    await client.schedules.delete(sc.id);
    await assert.rejects(client.schedules.get(sc.id), NotFound);
  });
});
