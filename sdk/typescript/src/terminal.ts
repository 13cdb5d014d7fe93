// The interactive terminal of a sandbox (docs/processes.md, "Interactive terminal"):
// `sandbox.terminal()` opens GET /v1/sandboxes/{id}/pty, a WebSocket: binary messages are the
// terminal's bytes both ways, text messages JSON (resize from us; the exit, or an error, from the
// server). Node 20 has no WebSocket of its own: the `ws` package (a dependency) speaks it, with
// the API key in the Authorization header; it answers the server's pings itself.
import { APIConnectionError, ConfigurationError, InvalidRequest, errorFromPayload, type PandaStackError } from "./errors.js";
import type { Query, Transport } from "./http.js";

export interface TerminalOptions {
  /** A shell command line to run (default: the user's login shell). */
  cmd?: string;
  user?: string;
  cwd?: string;
  /** The terminal's size (1–1000 each; default 80×24): give both or neither. */
  cols?: number;
  rows?: number;
  /** Each chunk the terminal prints goes here (instead of `read()`), from the moment it opens. */
  onData?: (data: Uint8Array) => void;
  /** Bounds the opening only (default 60 s). */
  timeoutMs?: number;
}

/** The subset of a `ws` WebSocket the terminal uses. */
interface WsSocket {
  on(event: "open", fn: () => void): void;
  on(event: "message", fn: (data: Uint8Array | Uint8Array[] | ArrayBuffer, isBinary: boolean) => void): void;
  on(event: "close", fn: (code: number, reason: Uint8Array) => void): void;
  on(event: "error", fn: (err: Error) => void): void;
  on(event: "unexpected-response", fn: (req: { destroy(): void; socket?: { destroy(): void } | null }, res: WsResponse) => void): void;
  send(data: string | Uint8Array, cb?: (err?: Error) => void): void;
  close(code?: number, reason?: string): void;
  terminate(): void;
  readonly readyState: number;
}

interface WsResponse {
  statusCode?: number;
  socket?: { destroy(): void } | null;
  headers: Record<string, string | string[] | undefined>;
  on(event: "data", fn: (chunk: Uint8Array) => void): void;
  on(event: "end" | "error", fn: () => void): void;
}

type WsConstructor = new (url: string, opts: Record<string, unknown>) => WsSocket;

const OPEN = 1;

async function loadWs(): Promise<WsConstructor> {
  const name = "ws"; // not a literal: bundlers for browsers leave it alone
  let mod: { WebSocket?: WsConstructor; default?: WsConstructor };
  try {
    mod = (await import(name)) as typeof mod;
  } catch (e) {
    throw new ConfigurationError("the terminal needs the `ws` package (a dependency of @pandastack/sdk): npm install ws", { cause: e });
  }
  const ctor = mod.WebSocket ?? mod.default;
  if (typeof ctor !== "function") throw new ConfigurationError("the `ws` package did not load as expected");
  return ctor;
}

/**
 * An open terminal: a program on a pseudo-terminal in the sandbox. `write` types into it, `read()`
 * (or `for await`, or `onData`) gets what it prints, `resize` changes its size, `wait()` resolves
 * with the program's exit code, `close()` hangs it up (the program gets SIGHUP).
 */
export class Terminal implements AsyncIterable<Uint8Array> {
  /** The program's exit code (128 + the signal's number when a signal ended it), once it exited. */
  exitCode: number | null = null;
  /** The signal that ended it (e.g. "SIGKILL"), if one did. */
  signal: string | null = null;
  #ws: WsSocket;
  #chunks: Uint8Array[] = [];
  #waiting: ((chunk: Uint8Array | null) => void)[] = [];
  #listeners = new Set<(data: Uint8Array) => void>();
  #ended = false;
  #error: PandaStackError | null = null;
  #done: Promise<void>;

  /** @internal use `sandbox.terminal()` */
  constructor(ws: WsSocket, onData?: (data: Uint8Array) => void) {
    this.#ws = ws;
    if (onData) this.#listeners.add(onData);
    ws.on("message", (data, isBinary) => {
      const bytes = toBytes(data);
      if (isBinary) return this.#deliver(bytes);
      try {
        const msg = JSON.parse(new TextDecoder().decode(bytes)) as { type?: string; exit_code?: number; signal?: string; error?: unknown };
        if (msg.type === "exit") {
          this.exitCode = typeof msg.exit_code === "number" ? msg.exit_code : null;
          this.signal = msg.signal || null;
        } else if (msg.type === "error") {
          this.#error = errorFromPayload(undefined, { error: msg.error ?? {} }, undefined);
        }
      } catch {
        // not JSON: not a message of this protocol; ignored
      }
    });
    this.#done = new Promise((resolve) => {
      ws.on("close", () => {
        this.#ended = true;
        for (const w of this.#waiting.splice(0)) w(null);
        resolve();
      });
    });
    ws.on("error", () => {
      // the close event follows and ends the terminal
    });
  }

  #deliver(bytes: Uint8Array): void {
    if (this.#listeners.size > 0) {
      for (const fn of this.#listeners) fn(bytes);
      return;
    }
    const w = this.#waiting.shift();
    if (w) w(bytes);
    else this.#chunks.push(bytes);
  }

  /** Calls `fn` with each chunk the terminal prints from now on (not given to `read()` then); returns the unsubscribe. */
  onData(fn: (data: Uint8Array) => void): () => void {
    this.#listeners.add(fn);
    for (const c of this.#chunks.splice(0)) fn(c);
    return () => this.#listeners.delete(fn);
  }

  /** Types `data` (bytes, or a string sent as UTF-8) into the terminal: "\x03" is Ctrl-C. */
  write(data: string | Uint8Array): void {
    this.#send(typeof data === "string" ? new TextEncoder().encode(data) : data);
  }

  /** Changes the terminal's size (1–1000 each); the program gets SIGWINCH. */
  resize(cols: number, rows: number): void {
    checkSize(cols, rows);
    this.#send(JSON.stringify({ type: "resize", cols, rows }));
  }

  #send(data: string | Uint8Array): void {
    if (this.#ended || this.#ws.readyState !== OPEN) {
      throw new APIConnectionError(`the terminal is closed${this.exitCode !== null ? ` (the program exited ${this.exitCode})` : ""}`);
    }
    this.#ws.send(data);
  }

  /** The next bytes the terminal printed, or null once it ended (the program exited or it was closed). */
  read(): Promise<Uint8Array | null> {
    const c = this.#chunks.shift();
    if (c) return Promise.resolve(c);
    if (this.#ended) return Promise.resolve(null);
    return new Promise((resolve) => this.#waiting.push(resolve));
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Uint8Array> {
    for (;;) {
      const c = await this.read();
      if (c === null) return;
      yield c;
    }
  }

  /**
   * Resolves with the program's exit code once it exited (output not read stays readable);
   * rejects with the server's error if the terminal failed, or an APIConnectionError if the
   * connection ended without an exit.
   */
  async wait(): Promise<number> {
    await this.#done;
    if (this.#error) throw this.#error;
    if (this.exitCode === null) throw new APIConnectionError("the terminal's connection ended before its program exited");
    return this.exitCode;
  }

  /** True once the connection ended. */
  get closed(): boolean {
    return this.#ended;
  }

  /** Hangs up: the program gets SIGHUP (SIGKILL 2 s later). Resolves when the connection ended. */
  async close(): Promise<void> {
    if (!this.#ended) {
      this.#ws.close(1000);
      const guard = setTimeout(() => this.#ws.terminate(), 5000); // a server that never answers the close
      await this.#done;
      clearTimeout(guard);
    }
  }
}

function checkSize(cols: number, rows: number): void {
  const ok = (n: number) => Number.isInteger(n) && n >= 1 && n <= 1000;
  if (!ok(cols) || !ok(rows)) throw new InvalidRequest(`cols and rows must be whole numbers from 1 to 1000, not ${cols}x${rows}`, { code: "invalid_request" });
}

function toBytes(data: Uint8Array | Uint8Array[] | ArrayBuffer): Uint8Array {
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (Array.isArray(data)) {
    const out = new Uint8Array(data.reduce((n, c) => n + c.length, 0));
    let at = 0;
    for (const c of data) {
      out.set(c, at);
      at += c.length;
    }
    return out;
  }
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/** @internal Opens the terminal of the sandbox at `path` (its /v1/sandboxes/{id}). */
export async function openTerminal(http: Transport, path: string, opts: TerminalOptions = {}): Promise<Terminal> {
  const q: Query = { cmd: opts.cmd, user: opts.user, cwd: opts.cwd };
  if (opts.cols !== undefined || opts.rows !== undefined) {
    if (opts.cols === undefined || opts.rows === undefined) throw new InvalidRequest("give both cols and rows, or neither (80x24)", { code: "invalid_request" });
    q.cols = opts.cols;
    q.rows = opts.rows;
  }
  const WS = await loadWs();
  const { url, headers } = http.socketTarget(path + "/pty", q);
  const ws = new WS(url, { headers, handshakeTimeout: opts.timeoutMs ?? 60_000, maxPayload: 1 << 20, perMessageDeflate: false, followRedirects: false });
  const term = new Terminal(ws, opts.onData); // listening before the first message can arrive
  await new Promise<void>((resolve, reject) => {
    ws.on("open", resolve);
    ws.on("unexpected-response", (req, res) => {
      const conn = req.socket ?? res.socket; // held now: the response's end detaches it
      const parts: Uint8Array[] = [];
      let size = 0;
      res.on("data", (c) => {
        if (size < 64 << 10) parts.push(c);
        size += c.length;
      });
      const fail = () => {
        // The server may keep the connection open after its answer (Go's does): let it go, or
        // it keeps Node running.
        req.destroy();
        conn?.destroy();
        const text = new TextDecoder().decode(toBytes(parts));
        const get = (name: string) => {
          const v = res.headers[name.toLowerCase()];
          return Array.isArray(v) ? v[0] ?? null : v ?? null;
        };
        http.upgradeError(res.statusCode ?? 0, { get }, text, headers["x-request-id"]).catch(reject);
      };
      res.on("end", fail);
      res.on("error", fail);
    });
    ws.on("error", (e) => reject(new APIConnectionError(`cannot open the terminal at ${http.baseUrl}: ${e.message}`, { requestId: headers["x-request-id"], cause: e })));
    ws.on("close", () => reject(new APIConnectionError(`the terminal at ${http.baseUrl} closed while opening`, { requestId: headers["x-request-id"] })));
  });
  return term;
}
