// Directory watch, archives and port URLs against a real PandaStack (docs/files.md).
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { InvalidRequest, packTar } from "@pandastack/sdk";
import { LONG, liveSuite } from "./helpers.mjs";

describe("directory watch and archives", () => {
  let sb;
  liveSuite((live) => ({ sb } = live), { metadata: { suite: "ts-filetree" } });

  it("a watch sees a command's write and rename", LONG, async () => {
    await sb.exec("mkdir -p /home/user/tw");
    const w = await sb.files.watch("/home/user/tw", { recursive: true, timeoutMs: 120_000 });
    await sb.exec("echo hi > /home/user/tw/a && mv /home/user/tw/a /home/user/tw/b");
    const seen = [];
    for await (const ev of w) {
      seen.push([ev.type, ev.path, ev.from ?? null]);
      if (ev.type === "rename") break;
    }
    assert.ok(seen.some((e) => e[0] === "create" && e[1] === "/home/user/tw/a"), JSON.stringify(seen));
    assert.deepEqual(seen.at(-1), ["rename", "/home/user/tw/b", "/home/user/tw/a"]);
    await assert.rejects(sb.files.watch("/home/user/tw/b"), InvalidRequest);
  });

  it("uploadDir then downloadDir bring a tree with a symlink back", LONG, async () => {
    const src = mkdtempSync(join(tmpdir(), "ps-live-up-"));
    const dst = mkdtempSync(join(tmpdir(), "ps-live-down-"));
    try {
      mkdirSync(join(src, "sub"));
      writeFileSync(join(src, "sub", "f.txt"), "hello");
      symlinkSync("sub/f.txt", join(src, "link"));
      assert.deepEqual(await sb.files.uploadDir(src, "/home/user/ttree"), { entries: 3, bytes: 5 });
      assert.equal((await sb.exec("readlink /home/user/ttree/link; cat /home/user/ttree/link")).stdout, "sub/f.txt\nhello");
      assert.equal(await sb.files.downloadDir("/home/user/ttree", join(dst, "copy")), 3);
      assert.equal(readlinkSync(join(dst, "copy", "link")), "sub/f.txt");
      assert.equal(readFileSync(join(dst, "copy", "sub", "f.txt"), "utf8"), "hello");
    } finally {
      rmSync(src, { recursive: true, force: true });
      rmSync(dst, { recursive: true, force: true });
    }
  });

  it("an archive entry with .. is refused; getUrl points at the port proxy", LONG, async () => {
    const evil = packTar([{ name: "../escape", type: "file", mode: 0o644, data: new TextEncoder().encode("x") }]);
    await assert.rejects(sb.files.uploadArchive("/home/user/tevil", evil), InvalidRequest);
    const url = await sb.getUrl(8000);
    assert.ok(url.startsWith(`http://8000-${sb.id}.localhost:`), url);
  });
});
