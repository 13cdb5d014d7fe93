// Webhooks against a real PandaStack (docs/events.md): a receiver on loopback (`pandastack up`
// allows loopback destinations) gets the team's events, signed with the secret create showed.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { InvalidRequest, NotFound, verifyWebhook } from "@pandastack/sdk";
import { LONG, liveSuite } from "./helpers.mjs";

describe("webhooks", () => {
  let client, t;
  liveSuite((live) => ({ client, t } = live));

  it("events reach a loopback receiver, signed; deliveries are listed", LONG, async () => {
    const got = [];
    const srv = createServer((req, res) => {
      const chunks = [];
      req.on("data", (c) => chunks.push(c));
      req.on("end", () => {
        got.push({ headers: req.headers, body: Buffer.concat(chunks) });
        res.writeHead(204).end();
      });
    });
    await new Promise((r) => srv.listen(0, "127.0.0.1", r));
    try {
      const url = `http://127.0.0.1:${srv.address().port}/hook`;
      const hook = await client.webhooks.create({ url, events: ["sandbox.created", "sandbox.killed"] });
      assert.match(hook.secret, /^whsec_/);
      assert.equal((await client.webhooks.get(hook.id)).secret, undefined);
      await assert.rejects(client.webhooks.create({ url: "ftp://example.com/x", events: ["*"] }), InvalidRequest);
      await assert.rejects(client.webhooks.create({ url, events: ["sandbox.exploded"] }), InvalidRequest);

      const sb = await t.create({ metadata: { suite: "ts-webhooks" } });
      await sb.kill();
      const seen = {};
      for (let i = 0; i < 600 && Object.keys(seen).length < 2; i++) {
        for (const r of got) {
          const ev = await verifyWebhook(hook.secret, r.headers["pandastack-signature"], r.body);
          if (ev.sandbox?.id === sb.id) seen[ev.type] = r.headers["pandastack-delivery"];
        }
        await new Promise((r) => setTimeout(r, 200));
      }
      assert.deepEqual(Object.keys(seen).sort(), ["sandbox.created", "sandbox.killed"]);
      await assert.rejects(verifyWebhook("whsec_wrong", got[0].headers["pandastack-signature"], got[0].body), /does not match/);

      const delivered = (await client.webhooks.deliveries(hook.id)).filter((d) => d.state === "succeeded").map((d) => d.id);
      for (const id of Object.values(seen)) assert.ok(delivered.includes(id), `${id} in ${delivered}`);
      await client.webhooks.delete(hook.id);
      await assert.rejects(client.webhooks.get(hook.id), NotFound);
    } finally {
      srv.close();
    }
  });
});
