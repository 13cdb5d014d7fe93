// PandaStack function runner (node). Started once per version at deploy, before the warm
// snapshot: it imports the handler, then waits for invocations on RUNNER_PORT. Every invocation
// runs in a VM restored from that snapshot, so the import is never paid again.
// argv: handler ("module.function"). The bundle is the working directory.
import net from 'node:net';
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
  // the user's frames only: not the runner's, not node's own
  traceback: ((e && e.stack) || '').split('\n').filter((l) => !l.includes(import.meta.url) && !l.includes('(node:')).join('\n'),
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

const invoke = async (url, body) => {
  // /warmup (at deploy, before the snapshot): the whole path but a no-op for the handler, so
  // that the snapshot holds a runner whose code is already warm.
  const target = url === '/warmup' ? async () => null : fn;
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
  return out;
};

// The HTTP side is a minimal HTTP/1.1 server on a plain socket, one request per connection: its
// only client is the host agent's port proxy. Every invocation runs in a freshly restored VM whose
// emulator has translated none of the guest's code yet, so the less code a request walks through
// (node:http's parser and streams), the faster it is.
const HEAD_END = Buffer.from('\r\n\r\n');

// request returns {method, url, body} once buf holds a whole request, else null.
const request = (buf) => {
  const end = buf.indexOf(HEAD_END);
  if (end < 0) return null;
  const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
  const [method, target] = lines[0].split(' ');
  let length = 0, chunked = false;
  for (const line of lines.slice(1)) {
    const i = line.indexOf(':');
    const name = line.slice(0, i).trim().toLowerCase(), value = line.slice(i + 1).trim();
    if (name === 'content-length') length = Number(value);
    else if (name === 'transfer-encoding' && value.toLowerCase().includes('chunked')) chunked = true;
  }
  let rest = buf.subarray(end + 4);
  if (chunked) {
    const parts = [];
    for (;;) {
      const eol = rest.indexOf('\r\n');
      if (eol < 0) return null;
      const n = parseInt(rest.subarray(0, eol).toString('latin1').split(';')[0], 16);
      if (n === 0) break;
      if (rest.length < eol + 2 + n + 2) return null;
      parts.push(rest.subarray(eol + 2, eol + 2 + n));
      rest = rest.subarray(eol + 2 + n + 2);
    }
    return { method, url: target.split('?')[0], body: Buffer.concat(parts) };
  }
  if (rest.length < length) return null;
  return { method, url: target.split('?')[0], body: rest.subarray(0, length) };
};

net.createServer((sock) => {
  let buf = Buffer.alloc(0), done = false;
  sock.setTimeout(60000, () => sock.destroy());
  sock.on('error', () => {});
  sock.on('data', async (chunk) => {
    if (done) return;
    buf = Buffer.concat([buf, chunk]);
    const req = request(buf);
    if (!req) return;
    done = true;
    const out = req.method === 'GET'
      ? { ready: importError === null, error: importError, runner: STATS }
      : await invoke(req.url, JSON.parse(req.body.toString() || '{}'));
    const data = Buffer.from(JSON.stringify(out));
    sock.end(Buffer.concat([Buffer.from('HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ' +
      data.length + '\r\n\r\n'), data]));
  });
}).listen(PORT, '0.0.0.0');
