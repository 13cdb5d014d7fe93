// A webhook receiver: an HTTP endpoint that verifies PandaStack-Signature and acts on sandbox
// events. Here it listens on loopback (`pandastack up` lets webhooks reach loopback; a server
// deployment sends only to public addresses unless its operator allows more).
import { createServer } from "node:http";
import { PandaStack, verifyWebhook } from "@pandastack/sdk";

const client = new PandaStack();
const events = [];
let secret = "";
let closing = false; // once set, deliveries (other sandboxes' events in flight) are not printed
const receiver = createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", async () => {
    try {
      const ev = await verifyWebhook(secret, req.headers["pandastack-signature"], Buffer.concat(chunks));
      events.push(ev);
      if (!closing) console.log(`${req.headers["pandastack-delivery"]}  ${ev.type}  ${ev.sandbox?.id}`);
      res.writeHead(204).end(); // 2xx: delivered; anything else is retried with backoff
    } catch (e) {
      res.writeHead(400).end(String(e)); // not from PandaStack (or too old)
    }
  });
});
await new Promise((r) => receiver.listen(0, "127.0.0.1", r));
const hook = await client.webhooks.create({
  url: `http://127.0.0.1:${receiver.address().port}/pandastack`,
  events: ["sandbox.created", "sandbox.hibernated", "sandbox.killed", "sandbox.ttl_expired"],
});
secret = hook.secret; // shown once: keep it in your receiver's configuration
let ok = false;
try {
  const sb = await client.sandboxes.create({ template: process.env.PANDASTACK_TEST_TEMPLATE || "base", ttlSeconds: 300 });
  await sb.kill();
  for (let i = 0; i < 300; i++) {
    const mine = events.filter((e) => e.sandbox?.id === sb.id).map((e) => e.type);
    if (mine.includes("sandbox.created") && mine.includes("sandbox.killed")) {
      ok = true;
      break;
    }
    if (i === 299) throw new Error(`events so far: ${JSON.stringify(events.map((e) => e.type))}`);
    await new Promise((r) => setTimeout(r, 200));
  }
} finally {
  closing = true;
  await client.webhooks.delete(hook.id);
  receiver.close();
}
if (ok) console.log("ok");
