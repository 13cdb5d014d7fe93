#!/usr/bin/node
// pandastack-code-node: one JavaScript context of pandastack-code-server (server.py). The server
// starts one per context and hands it a socket as fd $PANDASTACK_CODE_FD; each request line
// {"code","timeout"} is answered with the same event lines as a Python kernel's: {"stdout"},
// {"stderr"}, {"result": {"text", "json"?, "is_main_result"}}, {"error": {name, value, traceback}}
// and {"end": {execution_count, duration_ms}} last.
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

function resultEvent(v) {
  const r = { text: typeof v === 'string' ? v : util.inspect(v, { depth: 4, colors: false }), is_main_result: true };
  if (v !== null && typeof v === 'object' && (Array.isArray(v) || Object.getPrototypeOf(v) === Object.prototype)) {
    try {
      const j = JSON.stringify(v);
      if (j !== undefined && j.length <= LIMIT) r.json = j;
    } catch {}
  }
  return { result: r };
}

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
    if (v !== undefined) send(resultEvent(v));
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
