// The official MCP TypeScript SDK (@modelcontextprotocol/sdk) against PandaStack's MCP server
// (docs/mcp.md), over both transports: /mcp on the server (streamable HTTP, the API key as bearer)
// and `pandastack mcp` (stdio, the key from the environment). sdk/test.sh starts the server and
// sets PANDASTACK_BASE_URL, PANDASTACK_API_KEY and PANDASTACK_BIN.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const BASE = process.env.PANDASTACK_BASE_URL;
const KEY = process.env.PANDASTACK_API_KEY;
const BIN = process.env.PANDASTACK_BIN || "pandastack";
const TEMPLATE = process.env.PANDASTACK_TEST_TEMPLATE || "base";
if (!BASE || !KEY) throw new Error("set PANDASTACK_BASE_URL and PANDASTACK_API_KEY (sdk/test.sh does)");
const LONG = { timeout: 600_000 };
// A first create on a fresh server restores its template (minutes under TCG): past the SDK's
// default 60 s request timeout.
const CALL = { timeout: 300_000 };

const TOOLS = ["create_sandbox", "exec", "fork_sandbox", "hibernate_sandbox", "kill_sandbox", "list_files",
  "process_output", "process_start", "read_file", "snapshot_sandbox", "write_file"];

function httpTransport(key) {
  return new StreamableHTTPClientTransport(new URL(BASE + "/mcp"), {
    requestInit: key === undefined ? {} : { headers: { Authorization: `Bearer ${key}` } },
  });
}

function stdioTransport() {
  return new StdioClientTransport({
    command: BIN, args: ["mcp"], stderr: "inherit",
    env: { PATH: process.env.PATH, PANDASTACK_BASE_URL: BASE, PANDASTACK_API_KEY: KEY },
  });
}

async function connect(transport) {
  const c = new Client({ name: "pandastack-mcp-test", version: "1.0.0" });
  await c.connect(transport);
  return c;
}

/** call calls a tool and returns its structured answer; a failed call throws its text. */
async function call(c, name, args) {
  const r = await c.callTool({ name, arguments: args }, undefined, CALL);
  if (r.isError) throw new Error(`${name}: ${r.content.map((x) => x.text).join("")}`);
  assert.ok(r.structuredContent, `${name} has structured content`);
  return r.structuredContent;
}

/** toolError calls a tool that must fail and returns its message. */
async function toolError(c, name, args) {
  const r = await c.callTool({ name, arguments: args }, undefined, CALL);
  assert.equal(r.isError, true, `${name} ${JSON.stringify(args)} should fail: ${JSON.stringify(r)}`);
  return r.content.map((x) => x.text).join("");
}

const made = [];
after(async () => {
  // Whatever a failed test left: kill through the API.
  await Promise.all(made.map((id) => fetch(`${BASE}/v1/sandboxes/${id}`, { method: "DELETE", headers: { Authorization: `Bearer ${KEY}` } }).catch(() => {})));
});

for (const [name, transport] of [["streamable HTTP (/mcp)", () => httpTransport(KEY)], ["stdio (pandastack mcp)", stdioTransport]]) {
  describe(`MCP over ${name}`, () => {
    it("lists the tools; create, exec, files, background process, kill", LONG, async () => {
      const c = await connect(transport());
      try {
        const { tools } = await c.listTools();
        assert.deepEqual(tools.map((t) => t.name).sort(), TOOLS);
        for (const t of tools) assert.equal(t.inputSchema.type, "object", t.name);

        const sb = await call(c, "create_sandbox", { template: TEMPLATE, ttl_seconds: 600, metadata: { suite: "mcp" } });
        made.push(sb.id);
        assert.match(sb.id, /^sb_/);
        assert.equal(sb.state, "running");

        const ex = await call(c, "exec", { sandbox_id: sb.id, cmd: "echo hello from $WHO; exit 3", env: { WHO: "mcp" } });
        assert.deepEqual([ex.stdout, ex.exit_code], ["hello from mcp\n", 3]);

        await call(c, "write_file", { sandbox_id: sb.id, path: "/tmp/mcp/notes.txt", content: "héllo\nworld\n" });
        const rd = await call(c, "read_file", { sandbox_id: sb.id, path: "/tmp/mcp/notes.txt" });
        assert.deepEqual([rd.content, rd.size], ["héllo\nworld\n", 13]);
        const ls = await call(c, "list_files", { sandbox_id: sb.id, path: "/tmp/mcp" });
        assert.deepEqual(ls.entries.map((e) => [e.name, e.type]), [["notes.txt", "file"]]);

        const { pid } = await call(c, "process_start", { sandbox_id: sb.id, cmd: "for i in 1 2 3; do echo line $i; sleep 0.2; done; echo done >&2; exit 7" });
        assert.ok(pid > 0);
        // Read from offsets until the exit: each read starts where the last one ended.
        let out = "", err = "", next = 0, end;
        for (;;) {
          end = await call(c, "process_output", { sandbox_id: sb.id, pid, offset: next });
          out += end.stdout;
          err += end.stderr;
          assert.ok(end.next >= next);
          next = end.next;
          if (!end.running) break;
          await new Promise((r) => setTimeout(r, 200));
        }
        assert.deepEqual([out, err, end.exit_code], ["line 1\nline 2\nline 3\n", "done\n", 7]);

        // Bad input is the tool's error, not a protocol failure.
        assert.match(await toolError(c, "read_file", { sandbox_id: sb.id, path: "/tmp/mcp/missing" }), /not_found|404/);
        assert.match(await toolError(c, "exec", { sandbox_id: "sb_doesnotexist0000000", cmd: "true" }), /404/);
        await toolError(c, "exec", { sandbox_id: sb.id }); // no cmd: the schema refuses it

        assert.deepEqual(await call(c, "kill_sandbox", { sandbox_id: sb.id }), { killed: sb.id });
        assert.match(await toolError(c, "exec", { sandbox_id: sb.id, cmd: "true" }), /409|killed/);
      } finally {
        await c.close();
      }
    });
  });
}

describe("MCP over streamable HTTP: fork, snapshot, hibernate; auth", () => {
  it("fork, snapshot and hibernate a sandbox", LONG, async () => {
    const c = await connect(httpTransport(KEY));
    try {
      const sb = await call(c, "create_sandbox", { template: TEMPLATE, ttl_seconds: 600 });
      made.push(sb.id);
      await call(c, "exec", { sandbox_id: sb.id, cmd: "echo parent > /tmp/who" });
      const { sandboxes } = await call(c, "fork_sandbox", { sandbox_id: sb.id, count: 1 });
      assert.equal(sandboxes.length, 1);
      const child = sandboxes[0].id;
      made.push(child);
      await call(c, "exec", { sandbox_id: child, cmd: "echo child > /tmp/who" });
      const who = async (id) => (await call(c, "read_file", { sandbox_id: id, path: "/tmp/who" })).content;
      assert.deepEqual([await who(sb.id), await who(child)], ["parent\n", "child\n"]);

      const snap = await call(c, "snapshot_sandbox", { sandbox_id: child });
      assert.match(snap.id, /^snap_/);
      assert.equal(snap.sandbox_id, child);

      const h = await call(c, "hibernate_sandbox", { sandbox_id: sb.id });
      assert.equal(h.state, "hibernated");
      // Any call wakes it, its files kept.
      assert.equal(await who(sb.id), "parent\n");
      for (const id of [child, sb.id]) await call(c, "kill_sandbox", { sandbox_id: id });
      await fetch(`${BASE}/v1/snapshots/${snap.id}`, { method: "DELETE", headers: { Authorization: `Bearer ${KEY}` } });
    } finally {
      await c.close();
    }
  });

  it("no key or a wrong key cannot connect", LONG, async () => {
    for (const key of [undefined, "pds_notarealkeynotarealkeynotareal"]) {
      await assert.rejects(connect(httpTransport(key)), (e) => /401|nauthorized/.test(String(e)), `key ${key}`);
    }
  });
});
