// Compiled with `tsc --noEmit -p test/tsconfig.json` (test/types.test.mjs): the public types
// accept the documented calls and give the documented result types.
import {
  PandaStack,
  Sandbox,
  NotFound,
  BuildFailed,
  type ExecEvent,
  type ExecResult,
  type FileInfo,
  type Snapshot,
  type Template,
} from "@pandastack/sdk";

async function main(): Promise<void> {
  const client = new PandaStack({ apiKey: process.env.PANDASTACK_API_KEY, baseUrl: "http://127.0.0.1:8080" });
  const sb: Sandbox = await client.sandboxes.create({ template: "base", ttlSeconds: 600, metadata: { a: "b" } });
  const r: ExecResult = await sb.exec("echo hi", { timeoutSeconds: 30, env: { A: "1" }, cwd: "/tmp", user: "root", stdin: "x" });
  const code: number = r.exitCode;
  const out: string = r.stdout;
  for await (const ev of sb.execStream(["ls", "-l"])) {
    const e: ExecEvent = ev;
    if (e.type === "exit") {
      const c: number = e.exitCode;
      void c;
    } else {
      const d: string = e.data;
      void d;
    }
  }
  const text: string = await sb.filesystem.read("/tmp/x");
  const bytes: Uint8Array = await sb.filesystem.readBytes("/tmp/x");
  const info: FileInfo = await sb.filesystem.write("/tmp/x", new Uint8Array([1]), { mode: 0o644 });
  const entries: FileInfo[] = await sb.filesystem.list("/", { depth: 2 });
  await sb.filesystem.mkdir("/tmp/d");
  await sb.filesystem.move("/tmp/x", "/tmp/y");
  await sb.filesystem.remove("/tmp/d", { recursive: true });
  const one: Sandbox = await sb.fork();
  const one2: Sandbox = await sb.fork({ count: 1 });
  const many: Sandbox[] = await sb.fork({ count: 3 });
  const many2: Sandbox[] = await sb.fork(4);
  const n: number = Number("2");
  const either: Sandbox | Sandbox[] = await sb.fork({ count: n });
  const snap: Snapshot = await sb.snapshot();
  await client.sandboxes.create({ snapshotId: snap.id });
  await sb.hibernate();
  await sb.wake();
  await sb.setTtl(60);
  await sb.kill();
  const got: Sandbox = await client.sandbox.get(sb.id);
  const listed: Sandbox[] = await client.sandboxes.list({ metadata: { a: "b" }, state: ["running", "hibernated"] });
  try {
    await client.sandboxes.get("sb_x");
  } catch (e) {
    if (e instanceof NotFound) {
      const s: number | undefined = e.status;
      const id: string | undefined = e.requestId;
      void s, id;
    }
  }
  const built: Template = await client.templates.build({ name: "web", from: "base", steps: ["echo hi"] }, {
    onProgress: (line: string) => console.log(line),
  });
  await client.templates.build("name: web\nfrom: base\n");
  const tpls: Template[] = await client.templates.list();
  const owner: string | undefined = (await client.templates.get("web")).owner;
  await client.templates.delete("web");
  try {
    await client.templates.build({ name: "x", from: "base" });
  } catch (e) {
    if (e instanceof BuildFailed) void e.message;
  }
  void code, out, text, bytes, info, entries, one, one2, many, many2, either, got, listed, built, tpls, owner;
}

void main;
