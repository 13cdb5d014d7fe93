// Console bench: the bundle's gzipped size, and first load to interactive in headless chromium
// against a local server (bin/pandastack server over a throwaway SQLite file, no hosts: the
// load does not need any). Prints medians and p99 of each, and their ratio to a baseline from the
// same run: loading a tiny page of the same server (/healthz).
//
//   make build && node web/bench/bench.mjs [-runs 20] [-out results.json]
// Environment: CHROMIUM (default /usr/bin/chromium), PANDASTACK_BIN (default ../bin/pandastack).
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";
import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const opt = (name, def) => {
  const i = args.indexOf("-" + name);
  return i >= 0 ? args[i + 1] : def;
};
const RUNS = Number(opt("runs", "20"));
const OUT = opt("out", "");

// -- bundle size ---------------------------------------------------------------------------------

const assets = join(here, "..", "dist", "console", "assets");
const indexHtml = readFileSync(join(here, "..", "dist", "console", "index.html"), "utf8");
const size = { js: 0, jsGz: 0, css: 0, cssGz: 0, firstJs: 0, firstJsGz: 0 };
for (const f of readdirSync(assets)) {
  const b = readFileSync(join(assets, f));
  const gz = gzipSync(b, { level: 9 }).length;
  if (f.endsWith(".js")) (size.js += b.length), (size.jsGz += gz);
  if (f.endsWith(".js") && indexHtml.includes("/assets/" + f)) (size.firstJs += b.length), (size.firstJsGz += gz);
  if (f.endsWith(".css")) (size.css += b.length), (size.cssGz += gz);
}
const kb = (n) => (n / 1024).toFixed(1) + " KiB";
console.log(`bundle: JS ${kb(size.js)} (${kb(size.jsGz)} gzipped; goal ≤ 400 KiB), of which the first load ${kb(size.firstJs)} (${kb(size.firstJsGz)} gzipped; the terminal's xterm.js loads with the first terminal); CSS ${kb(size.css)} (${kb(size.cssGz)} gzipped)`);

// -- a local server ----------------------------------------------------------------------------------

const port = await new Promise((res) => {
  const s = createServer().listen(0, "127.0.0.1", () => {
    const p = s.address().port;
    s.close(() => res(p));
  });
});
const data = mkdtempSync(join(tmpdir(), "console-bench-"));
const key = "pds_" + Array.from({ length: 32 }, () => "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[Math.floor(Math.random() * 62)]).join("");
const bin = process.env.PANDASTACK_BIN || join(here, "..", "..", "bin", "pandastack");
const server = spawn(bin, ["server", "--database-url", join(data, "state.db"), "--addr", "127.0.0.1:" + port, "--log-level", "error"], {
  env: { ...process.env, PANDASTACK_API_KEY: key },
  stdio: ["ignore", "ignore", "inherit"],
});
const base = "http://127.0.0.1:" + port;
for (let i = 0; ; i++) {
  try {
    if ((await fetch(base + "/healthz")).ok) break;
  } catch {
    /* not yet */
  }
  if (i > 200) throw new Error("the server did not start");
  await new Promise((r) => setTimeout(r, 50));
}

// -- loads -------------------------------------------------------------------------------------------

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: ["--no-sandbox"] });
const stats = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const at = (p) => s[Math.min(s.length - 1, Math.ceil(p * s.length) - 1)];
  return { median: at(0.5), p99: at(0.99), runs: s.length };
};

async function timed(fn) {
  const ctx = await browser.newContext(); // a cold cache every run
  const page = await ctx.newPage();
  const t0 = performance.now();
  await fn(page, ctx);
  const ms = performance.now() - t0;
  await ctx.close();
  return ms;
}

const results = { baseline: [], signin: [], overview: [] };
for (let i = 0; i < RUNS; i++) {
  // Baseline: a tiny answer of the same server, the browser's own overhead.
  results.baseline.push(await timed((p) => p.goto(base + "/healthz", { waitUntil: "load" })));
  // First load to interactive: the sign-in form, ready for typing.
  results.signin.push(
    await timed(async (p) => {
      await p.goto(base + "/");
      await p.getByLabel("API key").waitFor();
      await p.getByLabel("API key").focus();
    }),
  );
  // Signed in already (the key in this tab's session): the overview with its data.
  results.overview.push(
    await timed(async (p, ctx) => {
      await ctx.addInitScript((k) => sessionStorage.setItem("pandastack.key", k), key);
      await p.goto(base + "/");
      await p.getByRole("heading", { name: "Overview" }).waitFor();
      await p.locator(".meter").first().waitFor();
    }),
  );
}
await browser.close();
server.kill("SIGTERM");
rmSync(data, { recursive: true, force: true });

const b = stats(results.baseline), s = stats(results.signin), o = stats(results.overview);
const line = (name, x) => `${name}: median ${x.median.toFixed(0)} ms, p99 ${x.p99.toFixed(0)} ms (${(x.median / b.median).toFixed(1)}x the baseline)`;
console.log(`baseline (GET /healthz in a fresh context): median ${b.median.toFixed(0)} ms, p99 ${b.p99.toFixed(0)} ms, ${RUNS} runs`);
console.log(line("first load to the sign-in form", s));
console.log(line("first load to the overview with data (signed in)", o));
if (OUT) {
  writeFileSync(OUT, JSON.stringify({ console: { bundle_bytes: size, baseline_ms: b, signin_ms: s, overview_ms: o } }, null, 2) + "\n");
}
