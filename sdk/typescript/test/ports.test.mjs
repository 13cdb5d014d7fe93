// Private ports against a real PandaStack: the port proxy asks for the sandbox's traffic token.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { LONG, liveSuite, serverEnv } from "./helpers.mjs";

/** GET / on port 8000 of the sandbox through the server's port proxy (proxy domain localhost). */
function proxyGet(id, headers = {}) {
  const u = new URL(serverEnv().baseUrl);
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: u.hostname, port: u.port, path: "/", headers: { Host: `8000-${id}.localhost`, ...headers } },
      (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode));
      },
    );
    req.on("error", reject);
    req.end();
  });
}

describe("private ports", () => {
  let t;
  liveSuite((live) => ({ t } = live));

  it("a private sandbox's port proxy asks for its traffic token", LONG, async () => {
    const sb = await t.create({ publicPorts: false });
    assert.equal(sb.publicPorts, false);
    const token = sb.trafficToken;
    assert.match(token, /^pdt_[0-9A-Za-z]{32}$/);
    await sb.refresh(); // a GET does not carry the token; the object keeps it
    assert.equal(sb.trafficToken, token);

    await sb.exec("nohup setsid python3 -m http.server 8000 --directory /tmp >/dev/null 2>&1 &");
    assert.equal(await proxyGet(sb.id), 401);
    assert.equal(await proxyGet(sb.id, { "X-PandaStack-Traffic-Token": "pdt_wrong" }), 401);
    let status = 0;
    for (const end = Date.now() + 60_000; Date.now() < end; await new Promise((r) => setTimeout(r, 500))) {
      status = await proxyGet(sb.id, { "X-PandaStack-Traffic-Token": token });
      if (status === 200) break; // the guest's server may still be starting
    }
    assert.equal(status, 200);

    const child = await sb.fork();
    t.track(child);
    assert.equal(child.publicPorts, false);
    assert.equal(child.trafficToken, token);
  });

  it("ports are public by default", LONG, async () => {
    const sb = await t.create();
    assert.equal(sb.publicPorts, true);
    assert.equal(sb.trafficToken, undefined);
  });
});
