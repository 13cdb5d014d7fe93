import { APIConnectionError, ConfigurationError, PandaStackError, Timeout, errorFromPayload } from "./errors.js";
import { VERSION } from "./version.js";

/** The subset of a fetch Response the SDK uses. */
export interface FetchResponse {
  readonly status: number;
  readonly ok: boolean;
  readonly headers: { get(name: string): string | null };
  readonly body: unknown;
  text(): Promise<string>;
  arrayBuffer(): Promise<ArrayBuffer>;
}

/** A fetch implementation (the global `fetch` of Node 18+ by default). */
export type FetchLike = (url: string, init: Record<string, unknown>) => Promise<FetchResponse>;

export type Query = Record<string, string | number | boolean | undefined | null>;

export interface RequestOptions {
  query?: Query;
  json?: unknown;
  body?: unknown;
  headers?: Record<string, string>;
  /** safe to send again (GET, DELETE, PUT of a buffer, ...) */
  idempotent?: boolean;
  /** milliseconds; null for none; undefined for the client's default */
  timeoutMs?: number | null;
  signal?: AbortSignal;
}

interface ByteReader {
  read(): Promise<{ done: boolean; value?: Uint8Array }>;
  cancel(reason?: unknown): Promise<void>;
}

const RETRY_STATUSES = new Set([429, 503]);

const ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789";

/** An X-Request-Id for one call (the server keeps it, so client-side failures match its log). */
export function newRequestId(): string {
  let id = "req_";
  for (let i = 0; i < 20; i++) id += ID_ALPHABET[Math.floor(Math.random() * ID_ALPHABET.length)];
  return id;
}

export function encodeQuery(q?: Query): string {
  if (!q) return "";
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) {
    if (v === undefined || v === null) continue;
    p.append(k, String(v));
  }
  const s = p.toString();
  return s ? `?${s}` : "";
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export function backoffMs(attempt: number, retryAfter: string | null): number {
  if (retryAfter) {
    const s = Number(retryAfter);
    if (Number.isFinite(s)) return Math.min(Math.max(s, 0), 30) * 1000;
  }
  const base = Math.min(250 * 2 ** (attempt - 1), 8000);
  return base / 2 + (Math.random() * base) / 2;
}

/** A timeout and an optional caller signal folded into one signal. */
class Deadline {
  readonly controller = new AbortController();
  private timer?: ReturnType<typeof setTimeout>;
  timedOut = false;
  private readonly onAbort?: () => void;

  constructor(
    timeoutMs: number | null,
    private readonly outer?: AbortSignal,
  ) {
    if (timeoutMs !== null && timeoutMs > 0) {
      this.timer = setTimeout(() => {
        this.timedOut = true;
        this.controller.abort();
      }, timeoutMs);
      // Don't keep the process alive just for this timer.
      (this.timer as { unref?: () => void }).unref?.();
    }
    if (outer) {
      if (outer.aborted) this.controller.abort(outer.reason);
      else {
        this.onAbort = () => this.controller.abort(outer.reason);
        outer.addEventListener("abort", this.onAbort, { once: true });
      }
    }
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** Restart the timer (streams: the limit is on silence, not on the whole answer). */
  touch(timeoutMs: number | null): void {
    if (this.timer === undefined || timeoutMs === null) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timedOut = true;
      this.controller.abort();
    }, timeoutMs);
    (this.timer as { unref?: () => void }).unref?.();
  }

  done(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    if (this.outer && this.onAbort) this.outer.removeEventListener("abort", this.onAbort);
  }
}

function describe(e: unknown): string {
  const err = e as { message?: string; cause?: { code?: string; message?: string } };
  const cause = err?.cause;
  if (cause && (cause.code || cause.message)) return [cause.code, cause.message].filter(Boolean).join(" ");
  return err?.message ?? String(e);
}

export class Transport {
  readonly baseUrl: string;
  readonly timeoutMs: number | null;
  readonly maxRetries: number;
  readonly #token: string;
  private readonly fetchImpl: FetchLike;
  private readonly userAgent: string;

  constructor(opts: { baseUrl: string; token: string; timeoutMs: number | null; maxRetries: number; fetch?: FetchLike }) {
    let u: URL;
    try {
      u = new URL(opts.baseUrl);
    } catch {
      throw new ConfigurationError(`base URL ${JSON.stringify(opts.baseUrl)} is not a URL (set PANDASTACK_BASE_URL or pass baseUrl)`);
    }
    if (u.protocol !== "http:" && u.protocol !== "https:") {
      throw new ConfigurationError(`base URL ${JSON.stringify(opts.baseUrl)} must be http:// or https://`);
    }
    this.baseUrl = opts.baseUrl.replace(/\/+$/, "");
    this.#token = opts.token;
    this.timeoutMs = opts.timeoutMs;
    this.maxRetries = opts.maxRetries;
    const f = opts.fetch ?? (globalThis as { fetch?: FetchLike }).fetch;
    if (!f) throw new ConfigurationError("no fetch available: use Node 18+ or pass the fetch option");
    this.fetchImpl = f;
    this.userAgent = `pandastack-typescript/${VERSION}`;
  }

  private headers(extra?: Record<string, string>): Record<string, string> {
    return {
      "x-request-id": newRequestId(),
      authorization: `Bearer ${this.#token}`,
      "user-agent": this.userAgent,
      accept: "application/json",
      ...(extra ?? {}),
    };
  }

  /**
   * @internal Where a WebSocket to `path` goes (ws:// or wss://) and the headers it opens with
   * (the key, the user agent, a request id): the terminal's.
   */
  socketTarget(path: string, query?: Query): { url: string; headers: Record<string, string> } {
    const url = (this.baseUrl + path + encodeQuery(query)).replace(/^http/, "ws");
    const headers = this.headers();
    delete headers.accept;
    return { url, headers };
  }

  /** @internal The typed error of a refused WebSocket upgrade (its status, headers and body). */
  upgradeError(status: number, headers: { get(name: string): string | null }, text: string, sentRequestId?: string): Promise<never> {
    return this.fail({ status, ok: false, headers, body: null, text: async () => text } as unknown as FetchResponse, sentRequestId);
  }

  private async fail(resp: FetchResponse, sentRequestId?: string): Promise<never> {
    let text = "";
    try {
      text = await resp.text();
    } catch {
      // a body that cannot be read still has a status
    }
    let payload: unknown = undefined;
    let fallbackMessage: string | undefined;
    try {
      payload = text ? JSON.parse(text) : undefined;
    } catch {
      payload = text.slice(0, 500);
    }
    if (!payload || typeof payload !== "object") {
      const t = typeof payload === "string" ? payload.trim() : "";
      fallbackMessage = `HTTP ${resp.status} from the API${t ? `: ${t}` : ""}`;
    }
    const ra = resp.headers.get("retry-after");
    const retryAfter = ra !== null && Number.isFinite(Number(ra)) ? Number(ra) : undefined;
    throw errorFromPayload(resp.status, payload, resp.headers.get("x-request-id") ?? sentRequestId, {
      retryAfter,
      fallbackMessage,
    });
  }

  /**
   * Send a request and return the 2xx response with its body unread; throw the typed error
   * otherwise. Idempotent calls are retried on 429/503 and on broken connections.
   */
  async request(method: string, path: string, opts: RequestOptions = {}): Promise<FetchResponse> {
    const url = this.baseUrl + path + encodeQuery(opts.query);
    const headers = this.headers(opts.headers);
    let body: unknown = opts.body;
    if (opts.json !== undefined) {
      body = JSON.stringify(opts.json);
      headers["content-type"] = "application/json";
    } else if (body !== undefined) {
      headers["content-type"] ??= "application/octet-stream";
    }
    const timeoutMs = opts.timeoutMs === undefined ? this.timeoutMs : opts.timeoutMs;
    for (let attempt = 0; ; attempt++) {
      const deadline = new Deadline(timeoutMs, opts.signal);
      let resp: FetchResponse;
      try {
        const init: Record<string, unknown> = { method, headers, body, signal: deadline.signal };
        if (body && typeof (body as { getReader?: unknown }).getReader === "function") init.duplex = "half";
        resp = await this.fetchImpl(url, init);
      } catch (e) {
        deadline.done();
        if (deadline.timedOut) {
          throw new Timeout(`no answer from ${this.baseUrl} within ${timeoutMs} ms (${method} ${path})`, {
            code: "client_timeout",
            requestId: headers["x-request-id"],
            cause: e,
          });
        }
        if (opts.signal?.aborted) throw e;
        if (opts.idempotent && attempt < this.maxRetries) {
          await sleep(backoffMs(attempt + 1, null));
          continue;
        }
        throw new APIConnectionError(`cannot reach the PandaStack API at ${this.baseUrl}: ${describe(e)}`, {
          requestId: headers["x-request-id"],
          cause: e,
        });
      }
      if (resp.ok) {
        // The caller reads the body; keep the deadline running for it, then release.
        return withDeadline(resp, deadline, timeoutMs);
      }
      if (opts.idempotent && RETRY_STATUSES.has(resp.status) && attempt < this.maxRetries) {
        await resp.text().catch(() => "");
        deadline.done();
        await sleep(backoffMs(attempt + 1, resp.headers.get("retry-after")));
        continue;
      }
      try {
        return await this.fail(resp, headers["x-request-id"]);
      } finally {
        deadline.done();
      }
    }
  }

  /** JSON body of a 2xx answer (undefined for an empty body). */
  async json<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    const resp = await this.request(method, path, opts);
    const text = await resp.text();
    if (!text) return undefined as T;
    try {
      return JSON.parse(text) as T;
    } catch (e) {
      throw new PandaStackError(`the API answered ${method} ${path} with something that is not JSON`, {
        code: "bad_response",
        status: resp.status,
        requestId: resp.headers.get("x-request-id") ?? undefined,
        cause: e,
      });
    }
  }

  /** The array under `key` in the JSON answer of a GET (retried: a read is idempotent); [] when absent. */
  async list<T>(path: string, key: string, query?: Query): Promise<T[]> {
    return (await this.json<Record<string, T[] | undefined> | undefined>("GET", path, { idempotent: true, query }))?.[key] ?? [];
  }

  /**
   * Send a request whose answer is NDJSON; yield each decoded line as it arrives. Never retried
   * (streamed calls are not idempotent). `timeoutMs` bounds the silence between two lines.
   */
  async *lines(
    method: string,
    path: string,
    opts: {
      json?: unknown;
      /** A body sent as it is (with `contentType`) instead of `json`. */
      body?: string;
      contentType?: string;
      query?: Query;
      timeoutMs: number | null;
      signal?: AbortSignal;
      onRequestId?: (id: string | undefined) => void;
    },
  ): AsyncGenerator<Record<string, unknown>, void, undefined> {
    const url = this.baseUrl + path + encodeQuery(opts.query);
    const get = method === "GET"; // a GET sends no body
    const headers = this.headers(get ? { accept: "application/x-ndjson" } : { accept: "application/x-ndjson", "content-type": opts.contentType ?? "application/json" });
    const body = get ? undefined : opts.body ?? JSON.stringify(opts.json);
    const deadline = new Deadline(opts.timeoutMs, opts.signal);
    let resp: FetchResponse;
    try {
      resp = await this.fetchImpl(url, { method, headers, body, signal: deadline.signal });
    } catch (e) {
      deadline.done();
      if (deadline.timedOut) {
        throw new Timeout(`no answer from ${this.baseUrl} within ${opts.timeoutMs} ms (${method} ${path})`, {
          code: "client_timeout",
          requestId: headers["x-request-id"],
          cause: e,
        });
      }
      if (opts.signal?.aborted) throw e;
      throw new APIConnectionError(`cannot reach the PandaStack API at ${this.baseUrl}: ${describe(e)}`, {
        requestId: headers["x-request-id"],
        cause: e,
      });
    }
    const requestId = resp.headers.get("x-request-id") ?? headers["x-request-id"];
    opts.onRequestId?.(requestId);
    if (!resp.ok) {
      try {
        await this.fail(resp, headers["x-request-id"]);
      } finally {
        deadline.done();
      }
    }
    const stream = resp.body as { getReader?: () => ByteReader } | null;
    if (!stream || typeof stream.getReader !== "function") {
      deadline.done();
      throw new PandaStackError("the stream has no body", { code: "bad_response", requestId });
    }
    const reader = stream.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    try {
      for (;;) {
        let chunk: { done: boolean; value?: Uint8Array };
        try {
          chunk = await reader.read();
        } catch (e) {
          if (deadline.timedOut) {
            throw new Timeout(`the stream from ${this.baseUrl} was silent for ${opts.timeoutMs} ms`, {
              code: "client_timeout",
              requestId,
              cause: e,
            });
          }
          if (opts.signal?.aborted) throw e;
          throw new APIConnectionError(`the stream from ${this.baseUrl} broke: ${describe(e)}`, { requestId, cause: e });
        }
        if (chunk.done || !chunk.value) break;
        deadline.touch(opts.timeoutMs);
        buf += decoder.decode(chunk.value, { stream: true });
        let nl: number;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, nl).trim();
          buf = buf.slice(nl + 1);
          if (line) yield parseLine(line, requestId);
        }
      }
      buf += decoder.decode();
      if (buf.trim()) yield parseLine(buf.trim(), requestId);
    } finally {
      deadline.done();
      // Stop reading (and let the connection go) if the consumer left early.
      reader.cancel().catch(() => undefined);
    }
  }
}

function parseLine(line: string, requestId?: string): Record<string, unknown> {
  try {
    const v = JSON.parse(line);
    if (v && typeof v === "object") return v as Record<string, unknown>;
  } catch {
    // fall through
  }
  throw new PandaStackError(`malformed line in the stream: ${line.slice(0, 200)}`, { code: "bad_stream", requestId });
}

/** Wrap a response so reading its body is still bounded by the deadline, released once read. */
function withDeadline(resp: FetchResponse, deadline: Deadline, timeoutMs: number | null): FetchResponse {
  const guard = async <T>(read: () => Promise<T>): Promise<T> => {
    try {
      return await read();
    } catch (e) {
      if (deadline.timedOut) {
        throw new Timeout(`the answer did not finish within ${timeoutMs} ms`, { code: "client_timeout", cause: e });
      }
      throw new APIConnectionError(`reading the answer failed: ${describe(e)}`, { cause: e });
    } finally {
      deadline.done();
    }
  };
  return {
    status: resp.status,
    ok: resp.ok,
    headers: resp.headers,
    body: resp.body,
    text: () => guard(() => resp.text()),
    arrayBuffer: () => guard(() => resp.arrayBuffer()),
  };
}
