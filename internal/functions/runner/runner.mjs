// PandaStack function runner (node). Started once per version at deploy, before the warm
// snapshot: it imports the handler, then waits for invocations on RUNNER_PORT. Every invocation
// runs in a VM restored from that snapshot, so the import is never paid again.
// argv: handler ("module.function"). The bundle is the working directory.
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import util from 'node:util';
import { pathToFileURL } from 'node:url';

const PORT = Number(process.env.PANDASTACK_RUNNER_PORT || 7411);
const MAX_LOGS = 64 << 10;
const HANDLER = process.argv[2];
const STATS = { imports: 0, imported_at: 0, pid: process.pid, invocations: 0 };
let importError = null;
let fn = null;

const errorOf = (e) => ({
  type: (e && e.name) || 'Error',
  message: String(e && e.message !== undefined ? e.message : e),
  traceback: (e && e.stack) || '',
});

try {
  const dot = HANDLER.lastIndexOf('.');
  const modName = HANDLER.slice(0, dot), fnName = HANDLER.slice(dot + 1);
  const file = ['.mjs', '.js', '.cjs'].map((x) => path.resolve(modName + x)).find((f) => fs.existsSync(f));
  if (!file) throw new Error(`no ${modName}.mjs, .js or .cjs in the bundle`);
  const mod = await import(pathToFileURL(file).href);
  STATS.imports++;
  fn = mod[fnName] ?? (mod.default && mod.default[fnName]);
  if (typeof fn !== 'function') throw new TypeError(`${modName} exports no function ${fnName}`);
} catch (e) {
  importError = errorOf(e);
}
STATS.imported_at = Date.now() / 1000;

let logs = '';
for (const level of ['log', 'info', 'warn', 'error', 'debug']) {
  console[level] = (...args) => { logs += util.format(...args) + '\n'; };
}

const answer = (res, obj) => {
  const body = JSON.stringify(obj);
  res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
};

http.createServer((req, res) => {
  if (req.method === 'GET') return answer(res, { ready: importError === null, error: importError, runner: STATS });
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', async () => {
    const body = JSON.parse(Buffer.concat(chunks).toString() || '{}');
    // /warmup (at deploy, before the snapshot): the whole path but a no-op for the handler, so
    // that the snapshot holds a runner whose code is already warm.
    const target = req.url === '/warmup' ? async () => null : fn;
    if (target === fn) STATS.invocations++;
    Object.assign(process.env, body.secrets || {});
    const c = body.context || {};
    const deadline = Date.now() + (c.timeout_seconds || 0) * 1000;
    const context = { ...c, remainingTimeMs: () => Math.max(0, deadline - Date.now()) };
    logs = '';
    const out = { result: null, error: null };
    const start = performance.now();
    try {
      const r = await target(body.payload ?? null, context);
      out.result = r === undefined ? null : JSON.parse(JSON.stringify(r));
    } catch (e) {
      out.error = errorOf(e);
    }
    out.duration_ms = Math.round(performance.now() - start);
    out.logs = logs.length > MAX_LOGS ? logs.slice(-MAX_LOGS) : logs;
    out.runner = STATS;
    answer(res, out);
  });
}).listen(PORT, '0.0.0.0');
