#!/usr/bin/node
// pandastack-code-node: one JavaScript context of pandastack-code-server (server.py). The server
// starts one per context and hands it a socket as fd $PANDASTACK_CODE_FD; each request line
// {"code","timeout"} is answered with the same event lines as a Python kernel's: {"stdout"},
// {"stderr"}, {"result": {"text", "html"?, "markdown"?, "svg"?, "png"?, "jpeg"?, "latex"?, "json"?,
// "is_main_result"}} (images base64, json a JSON text), {"error": {name, value, traceback}} and
// {"end": {execution_count, duration_ms}} last.
//
// Rich results, as a Python kernel's: the last expression's value (is_main_result) and what the
// code passes to display() carry every representation the value has — its text (util.inspect);
// json for plain objects and arrays; an HTML table (and json) for an array of records (plain
// objects); png or jpeg for a Buffer or Uint8Array holding such an image; and what the value's
// own _repr_html_(), _repr_markdown_(), _repr_svg_(), _repr_png_(), _repr_jpeg_(), _repr_latex_()
// and _repr_json_() return (IPython's names). display.html(s), .markdown(s), .svg(s), .png(data),
// .jpeg(data) (a Buffer, Uint8Array or base64 text) and .json(v) send one representation.
//
// State: the code runs as scripts in this process's global scope (vm.runInThisContext), so
// top-level declarations (var, let, const, function, class) stay for the next call, as in a
// REPL. The completion value of the code (its last expression) is the result; a promise is
// awaited first. Code with a top-level await runs as an async function instead: its
// declarations stay local to it (assign to globalThis to keep a value). Output: console.* and
// process.stdout/stderr.write, cut at $PANDASTACK_CODE_OUTPUT_LIMIT bytes per execution.
// Timeout and interrupt (SIGINT) stop synchronous code (vm's timeout and breakOnSigint) and
// abandon an awaited promise.
'use strict';
const net = require('node:net');
const vm = require('node:vm');
const util = require('node:util');
const path = require('node:path');
const { createRequire } = require('node:module');

const LIMIT = Number(process.env.PANDASTACK_CODE_OUTPUT_LIMIT || 1 << 20);
const MARKER = `\n[output truncated: more than ${LIMIT} bytes]\n`;
const sock = new net.Socket({ fd: Number(process.env.PANDASTACK_CODE_FD), readable: true, writable: true });
const send = (ev) => sock.write(JSON.stringify(ev) + '\n');

// The code's view: require resolves from the context's directory (and the global modules).
globalThis.require = createRequire(path.join(process.cwd(), '[pandastack-code]'));
globalThis.module = { exports: {} };
globalThis.__dirname = process.cwd();
globalThis.__filename = path.join(process.cwd(), '[pandastack-code]');

// Output of the running execution becomes its events; output between executions (a timer's) goes
// to the server's log.
let running = false;
let sent = 0;
for (const name of ['stdout', 'stderr']) {
  const stream = process[name];
  const original = stream.write.bind(stream);
  stream.write = (chunk, encoding, cb) => {
    if (typeof encoding === 'function') [cb, encoding] = [encoding, undefined];
    if (!running) return original(chunk, encoding, cb);
    let text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString();
    if (sent < LIMIT) {
      if (sent + text.length > LIMIT) text = text.slice(0, LIMIT - sent) + MARKER;
      send({ [name]: text });
    }
    sent += text.length;
    if (cb) process.nextTick(cb);
    return true;
  };
}

class Interrupted extends Error {}
let interrupt = null; // rejects the awaited promise of the running execution
process.on('SIGINT', () => interrupt && interrupt(new Interrupted('interrupted')));

// traceback is e's stack without this runner's frames (from vm's call of the code on).
function traceback(e) {
  const lines = String(e.stack || '').split('\n');
  const i = lines.findIndex((l) => /\(node:vm:|at Script\.runInThisContext|at execute \(/.test(l));
  return (i < 0 ? lines : lines.slice(0, i)).join('\n');
}

function errorEvent(e, name) {
  if (e instanceof Error || util.types.isNativeError(e)) {
    return { error: { name: name || e.name || 'Error', value: e.message ?? String(e), traceback: traceback(e) } };
  }
  return { error: { name: name || 'Error', value: util.inspect(e), traceback: '' } };
}

// -- rich results ---------------------------------------------------------------------------------

// Bytes one representation of a result may have (encoded); a larger one is dropped with a note on
// stderr. Derived ones (json, the HTML table) are kept to LIMIT and silently left out above it.
const RESULT_LIMIT = 16 << 20;
// Rows of an array of records shown in its HTML table.
const TABLE_ROWS = 1000;
const OWN = [['_repr_html_', 'html'], ['_repr_markdown_', 'markdown'], ['_repr_svg_', 'svg'], ['_repr_latex_', 'latex'],
  ['_repr_png_', 'png'], ['_repr_jpeg_', 'jpeg'], ['_repr_json_', 'json']];

const isPlain = (v) => v !== null && typeof v === 'object' && (Array.isArray(v) || [Object.prototype, null].includes(Object.getPrototypeOf(v)));
const isRecords = (v) => Array.isArray(v) && v.length > 0 && v.every((r) => isPlain(r) && !Array.isArray(r));
const bytesOf = (v) => (v instanceof Uint8Array ? Buffer.from(v.buffer, v.byteOffset, v.byteLength) : null);

function jsonOf(v) {
  try {
    return JSON.stringify(v);
  } catch {
    return undefined;
  }
}

// imageKind is "png" or "jpeg" when bytes b start with that format's signature.
function imageKind(b) {
  if (b.length >= 8 && b.readUInt32BE(0) === 0x89504e47 && b.readUInt32BE(4) === 0x0d0a1a0a) return 'png';
  if (b.length >= 3 && b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff) return 'jpeg';
  return null;
}

// encode is representation kind of data as the wire carries it: images base64, json a JSON text.
function encode(kind, data) {
  if (kind === 'json') return jsonOf(data);
  if (kind !== 'png' && kind !== 'jpeg') return String(data);
  const b = bytesOf(data);
  if (b) return b.toString('base64');
  if (typeof data === 'string') return data.replace(/\s+/g, '');
  throw new TypeError(`${kind} wants a Buffer, a Uint8Array or base64 text, not ${util.inspect(data)}`);
}

const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
const cell = (v) => (v === undefined ? '' : typeof v === 'string' ? v : isPlain(v) ? (jsonOf(v) ?? util.inspect(v)) : util.inspect(v));

// table is an array of records as HTML, in the shape of a pandas DataFrame's (index column, one
// column per key of the shown records).
function table(rows) {
  const shown = rows.slice(0, TABLE_ROWS);
  const cols = [...new Set(shown.flatMap((r) => Object.keys(r)))];
  const head = `<tr><th></th>${cols.map((c) => `<th>${esc(c)}</th>`).join('')}</tr>`;
  const body = shown.map((r, i) => `<tr><th>${i}</th>${cols.map((c) => `<td>${esc(cell(r[c]))}</td>`).join('')}</tr>`).join('\n');
  const more = rows.length > shown.length ? `\n<p>${rows.length} rows, the first ${shown.length} shown</p>` : '';
  return `<table border="1" class="dataframe">\n<thead>${head}</thead>\n<tbody>\n${body}\n</tbody>\n</table>${more}`;
}

// representations of value v: its own (_repr_*_ methods), else what its kind gives; and its text.
function representations(v) {
  const r = {};
  const own = v !== null && (typeof v === 'object' || typeof v === 'function') ? OWN.filter(([m]) => typeof v[m] === 'function') : [];
  for (const [method, kind] of own) {
    try {
      const data = v[method]();
      if (data !== undefined && data !== null) r[kind] = encode(kind, data);
    } catch (e) {
      process.stderr.write(`${method}() failed: ${e && e.message}\n`);
    }
  }
  const b = bytesOf(v);
  const image = b && imageKind(b);
  if (image) r[image] = b.toString('base64');
  if (own.length === 0 && isPlain(v)) {
    const json = jsonOf(v);
    if (json !== undefined && json.length <= LIMIT) r.json = json;
    const html = isRecords(v) ? table(v) : '';
    if (html && html.length <= LIMIT) r.html = html;
  }
  r.text = typeof v === 'string' ? v : util.inspect(v, { depth: 4, colors: false });
  return r;
}

// resultEvent is a result of rich representations r (its text first when it has one).
function resultEvent(r, main) {
  const out = {};
  for (const [kind, data] of Object.entries(r)) {
    if (data === undefined) continue;
    if (data.length > RESULT_LIMIT) {
      process.stderr.write(`display: the ${kind} representation (${data.length} bytes) is over the ${RESULT_LIMIT}-byte limit; left out\n`);
      continue;
    }
    out[kind] = data;
  }
  out.is_main_result = main;
  return { result: out };
}

// display sends each value as a result of the running execution; output of a timer that fires
// after its execution ended goes to the server's log.
function show(r) {
  if (!running) return console.error('display() outside an execution:', util.inspect(r, { depth: 1 }));
  const ev = resultEvent(r, false);
  if (Object.keys(ev.result).length > 1) send(ev);
}
function display(...values) {
  for (const v of values) show(representations(v));
}
for (const kind of ['html', 'markdown', 'svg', 'png', 'jpeg', 'latex', 'json']) {
  display[kind] = (data) => show({ [kind]: encode(kind, data) });
}
globalThis.display = display;

// Dynamic import() in the code loads as the main script's would (where this Node has the option).
const scriptOptions = { filename: '<code>', importModuleDynamically: vm.constants?.USE_MAIN_CONTEXT_DEFAULT_LOADER };

// compile makes a script of code; one with a top-level await becomes an async function: one
// that is a single expression returns its value, other code runs as the function's body.
function compile(code) {
  try {
    return new vm.Script(code, scriptOptions);
  } catch (e) {
    if (!(e instanceof SyntaxError) || !/\bawait\b/.test(code)) throw e;
    try {
      return new vm.Script(`(async () => { return (\n${code.replace(/;\s*$/, '')}\n) })()`, { ...scriptOptions, lineOffset: -1 });
    } catch {
      return new vm.Script(`(async () => {\n${code}\n})()`, { ...scriptOptions, lineOffset: -1 });
    }
  }
}

let count = 0;

async function execute(code, timeoutMs, silent) {
  const t0 = Date.now();
  running = true;
  sent = 0;
  if (!silent) count++;
  try {
    let v = compile(code).runInThisContext({ timeout: timeoutMs, breakOnSigint: true, displayErrors: false });
    if (v && typeof v.then === 'function') {
      let timer;
      v = await Promise.race([
        v,
        new Promise((_, reject) => {
          interrupt = reject;
          timer = setTimeout(() => reject(Object.assign(new Interrupted(), { timeout: true })), Math.max(timeoutMs - (Date.now() - t0), 1));
        }),
      ]).finally(() => {
        clearTimeout(timer);
        interrupt = null;
      });
    }
    if (v !== undefined) send(resultEvent(representations(v), true));
  } catch (e) {
    if (e && (e.timeout || e.code === 'ERR_SCRIPT_EXECUTION_TIMEOUT')) {
      send({ error: { name: 'TimeoutError', value: `execution exceeded ${timeoutMs / 1000} s and was interrupted`, traceback: '' } });
    } else if (e instanceof Interrupted || (e && e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED')) {
      send({ error: { name: 'Interrupted', value: 'the execution was interrupted', traceback: '' } });
    } else {
      send(errorEvent(e));
    }
  } finally {
    running = false;
  }
  send({ end: { execution_count: count, duration_ms: Date.now() - t0 } });
}

// A rejection nobody awaited, or an exception thrown in a timer, must not end the context.
process.on('unhandledRejection', (e) => console.error('unhandled rejection:', e));
process.on('uncaughtException', (e) => console.error('uncaught exception:', e));

let buf = '';
let queue = Promise.resolve();
sock.setEncoding('utf8');
sock.on('data', (d) => {
  buf += d;
  for (let i; (i = buf.indexOf('\n')) >= 0; ) {
    const line = buf.slice(0, i);
    buf = buf.slice(i + 1);
    const req = JSON.parse(line);
    queue = queue.then(() => execute(String(req.code ?? ''), Math.round(Number(req.timeout || 300) * 1000), !!req.silent));
  }
});
sock.on('end', () => process.exit(0));
send({ ready: true });
