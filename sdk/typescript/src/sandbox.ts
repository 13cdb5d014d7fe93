import { APIConnectionError, ConfigurationError, Conflict, NotFound, PandaStackError, errorFromPayload } from "./errors.js";
import type { Transport } from "./http.js";
import { OutputGatherer } from "./output.js";
import { Processes } from "./processes.js";
import { openTerminal, type Terminal, type TerminalOptions } from "./terminal.js";
import { WatchHandle, packDir, unpackDir } from "./filetree.js";
import { type CodeContext, type CodeLanguage, Execution, type RunCodeOptions, codeBody, streamCode } from "./code.js";

// ---------------------------------------------------------------------------------------------
// Wire shapes (snake_case, as the API sends them)

/** A sandbox as the API returns it. */
export interface SandboxData {
  id: string;
  template?: string;
  state?: string;
  created_at?: string;
  expires_at?: string;
  metadata?: Record<string, string>;
  host?: string;
  ip?: string;
  error?: string;
  fork_of?: string;
  snapshot_id?: string;
  public_ports?: boolean;
  traffic_token?: string;
  [key: string]: unknown;
}

/** A running sandbox's resource use (`sandbox.metrics()`). */
export interface SandboxMetrics {
  at: string;
  vcpus: number;
  /** Busy share of the guest's CPUs together, 0-100. */
  cpu_used_pct: number;
  mem_total_bytes: number;
  mem_used_bytes: number;
  mem_cache_bytes: number;
  disk_total_bytes: number;
  disk_used_bytes: number;
  /** CPU time the VMM used on its host since it started. */
  host_cpu_seconds: number;
  host_mem_bytes: number;
}

interface FileData {
  name?: string;
  path?: string;
  type?: string;
  size?: number;
  mode?: string;
  mtime?: string;
  target?: string;
}

// ---------------------------------------------------------------------------------------------
// Public types

export type SandboxState = "running" | "hibernated" | "killed" | "error" | "lost" | (string & {});

/** A command: a shell command line, or an argv array (no shell). */
export type Command = string | readonly string[];

export interface ExecOptions {
  /** Kill the command after this many seconds (server default 60); the result says `timedOut`. */
  timeoutSeconds?: number;
  /** Extra environment variables. */
  env?: Record<string, string>;
  /** Working directory. */
  cwd?: string;
  /** Guest user to run as (default `user`). */
  user?: string;
  /** Text (or bytes, as UTF-8) fed to the command's standard input. */
  stdin?: string | Uint8Array;
  /** Called with each chunk of standard output as it is produced (switches to streaming). */
  onStdout?: (data: string) => void;
  /** Called with each chunk of standard error as it is produced (switches to streaming). */
  onStderr?: (data: string) => void;
  /** Abort waiting (the command itself runs on until it ends or times out). */
  signal?: AbortSignal;
}

export type ExecStreamOptions = Omit<ExecOptions, "onStdout" | "onStderr">;

/** One event of a streamed command. */
export type ExecEvent =
  | { type: "stdout"; data: string }
  | { type: "stderr"; data: string }
  | { type: "exit"; exitCode: number; timedOut: boolean; durationMs?: number };

/** What a finished command produced. A non-zero exit is not an exception: check `exitCode`. */
export class ExecResult {
  constructor(
    readonly stdout: string,
    readonly stderr: string,
    readonly exitCode: number,
    readonly timedOut: boolean = false,
    readonly durationMs?: number,
    readonly stdoutTruncated: boolean = false,
    readonly stderrTruncated: boolean = false,
  ) {}

  /** exitCode 0 and not timed out. */
  get ok(): boolean {
    return this.exitCode === 0 && !this.timedOut;
  }
}

/** A file's metadata. */
export interface FileInfo {
  name: string;
  path: string;
  type: "file" | "dir" | "symlink" | "other" | (string & {});
  size: number;
  /** permission bits in octal, e.g. "0644" */
  mode: string;
  mtime: Date | null;
  /** symlink target */
  target?: string;
}

/** A saved machine (memory + disk); create sandboxes from it with `snapshotId`. */
export interface Snapshot {
  id: string;
  sandboxId?: string;
  template?: string;
  createdAt: Date | null;
  sizeBytes?: number;
  /** In the blob store too: a sandbox made from it can start on any host. */
  published: boolean;
  raw: Record<string, unknown>;
}

/**
 * A template: a catalog one (`owner` "catalog") or one your team built (`owner` "team", private
 * to the team). `available`: a host that is up can run it; `baked`: one has it ready to restore.
 */
export interface Template {
  name: string;
  owner?: "catalog" | "team" | string;
  description?: string;
  vcpus?: number;
  memoryMib?: number;
  diskMib?: number;
  sizeBytes?: number;
  bakeMs?: number;
  aliases: string[];
  metadata: Record<string, string>;
  baked?: boolean;
  available?: boolean;
  raw: Record<string, unknown>;
}

/** A template spec (docs/templates.md), as an object; files take `content`, not `src`. */
export type TemplateSpec = Record<string, unknown> & { name: string; from: string };

export interface BuildTemplateOptions {
  /** Called with each line of the build log as it comes. */
  onProgress?: (line: string) => void;
  /** Stops waiting (and, as the connection closes, cancels the build). */
  signal?: AbortSignal;
}

export interface CreateSandboxParams {
  /** Template name (e.g. "base"); optional when `snapshotId` is given. */
  template?: string;
  /** Lifetime in seconds (server default 300). */
  ttlSeconds?: number;
  /** String labels you can list by. */
  metadata?: Record<string, string>;
  /** Environment variables every command in the sandbox sees. */
  env?: Record<string, string>;
  /** Restore this snapshot instead of a fresh template. */
  snapshotId?: string;
  egress?: unknown;
  /** Volumes to mount (at most 4); the sandbox runs on their host. */
  volumes?: VolumeMount[];
  /**
   * `false`: the port proxy asks for the sandbox's `trafficToken`. Default: the server's setting
   * (public unless it runs with `--private-ports`).
   */
  publicPorts?: boolean;
  /** Admin keys: the one host to run on. */
  host?: string;
  signal?: AbortSignal;
}

/** One volume of a create: mounted at `mountPath`, read-only or not (default read-write). */
export interface VolumeMount {
  volumeId: string;
  mountPath: string;
  readOnly?: boolean;
}

/** A sandbox that has a volume mounted. */
export interface VolumeAttachment {
  sandboxId: string;
  mountPath: string;
  readOnly: boolean;
}

/** A durable volume: a persistent disk, kept on one host, that outlives sandboxes. */
export interface Volume {
  id: string;
  name: string;
  sizeMib: number;
  hostId?: string;
  createdAt: Date | null;
  attachments: VolumeAttachment[];
  raw: Record<string, unknown>;
}

export function volumeOf(d: Record<string, unknown> | undefined): Volume {
  const x = d ?? {};
  const atts = Array.isArray(x.attachments) ? (x.attachments as Record<string, unknown>[]) : [];
  return {
    id: String(x.id ?? ""),
    name: String(x.name ?? ""),
    sizeMib: Number(x.size_mib ?? 0),
    hostId: x.host_id as string | undefined,
    createdAt: parseTime(x.created_at),
    attachments: atts.map((a) => ({
      sandboxId: String(a.sandbox_id ?? ""),
      mountPath: String(a.mount_path ?? ""),
      readOnly: Boolean(a.read_only),
    })),
    raw: { ...x },
  };
}

function volumeEntry(v: VolumeMount): Record<string, unknown> {
  if (v === null || typeof v !== "object") throw new TypeError("each volumes entry is {volumeId, mountPath, readOnly?}");
  const extra = Object.keys(v).filter((k) => !["volumeId", "mountPath", "readOnly"].includes(k));
  if (extra.length) throw new TypeError(`unknown volumes entry keys: ${extra.join(", ")} (use volumeId, mountPath, readOnly)`);
  const out: Record<string, unknown> = { volume_id: v.volumeId, mount_path: v.mountPath };
  if (v.readOnly !== undefined) out.read_only = v.readOnly;
  return out;
}

export interface ListSandboxesParams {
  /** Keep sandboxes whose labels include all these pairs. */
  metadata?: Record<string, string>;
  /** One state, several, or "all" (by default killed sandboxes are left out). */
  state?: SandboxState | readonly SandboxState[] | "all";
  /** Return at most this many (all pages are read otherwise). */
  limit?: number;
  /** Page size of each request (1-1000, default 100). */
  pageSize?: number;
}

export interface FileOptions {
  /** Guest user the call acts as (server default `user`). */
  user?: string;
  signal?: AbortSignal;
}

/** What `fork()` resolves to: one sandbox for count 1, an array otherwise. */
export type ForkResult<N extends number> = number extends N ? Sandbox | Sandbox[] : N extends 1 ? Sandbox : Sandbox[];

/**
 * Makes a client from options for `Sandbox.connect`: client.ts registers `PandaStack` here when it
 * loads (the package entry loads it), so this module needs no import of it.
 * @internal
 */
let clientFactory: ((options: Record<string, unknown>) => ClientContext) | undefined;

/** @internal */
export function registerClientFactory(f: (options: Record<string, unknown>) => ClientContext): void {
  clientFactory = f;
}

/** Things a Sandbox needs from its client. */
export interface ClientContext {
  readonly http: Transport;
  readonly createTimeoutMs: number | null;
}

// ---------------------------------------------------------------------------------------------

const DEFAULT_EXEC_TIMEOUT_S = 60;
const EXEC_GRACE_S = 60;

const seg = (s: string): string => encodeURIComponent(s);

/** The port proxy's domain of each client's server ("" for none), asked once. */
const proxyDomains = new WeakMap<Transport, string>();

export function parseTime(v: unknown): Date | null {
  if (typeof v !== "string" || !v) return null;
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? null : d;
}

function fileInfo(d: FileData | undefined): FileInfo {
  const x = d ?? {};
  const info: FileInfo = {
    name: x.name ?? "",
    path: x.path ?? "",
    type: x.type ?? "",
    size: Number(x.size ?? 0),
    mode: x.mode ?? "",
    mtime: parseTime(x.mtime),
  };
  if (x.target !== undefined) info.target = x.target;
  return info;
}

export function snapshotOf(d: Record<string, unknown> | undefined): Snapshot {
  const x = d ?? {};
  return {
    id: String(x.id ?? ""),
    sandboxId: x.sandbox_id as string | undefined,
    template: x.template as string | undefined,
    createdAt: parseTime(x.created_at),
    sizeBytes: x.size_bytes as number | undefined,
    published: x.published === true,
    raw: { ...x },
  };
}

function execBody(cmd: Command, o: ExecStreamOptions): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  if (typeof cmd === "string") body.cmd = cmd;
  else if (Array.isArray(cmd) && cmd.length > 0 && cmd.every((a) => typeof a === "string")) body.argv = [...cmd];
  else throw new TypeError("cmd must be a string (a shell command line) or a non-empty array of strings (argv)");
  if (o.timeoutSeconds !== undefined) body.timeout_seconds = o.timeoutSeconds;
  if (o.env && Object.keys(o.env).length) body.env = o.env;
  if (o.cwd !== undefined) body.cwd = o.cwd;
  if (o.user !== undefined) body.user = o.user;
  if (o.stdin !== undefined) body.stdin = typeof o.stdin === "string" ? o.stdin : new TextDecoder().decode(o.stdin);
  return body;
}

/**
 * The events of a running command as they happen: iterate it with `for await`. After the
 * `exit` event, `exitCode`, `timedOut` and `durationMs` are set. Breaking out of the loop stops
 * reading (the command keeps running until it ends or hits its timeout).
 */
export class ExecStream implements AsyncIterable<ExecEvent> {
  exitCode?: number;
  timedOut = false;
  durationMs?: number;
  requestId?: string;
  private started = false;

  constructor(
    private readonly http: Transport,
    private readonly path: string,
    private readonly body: Record<string, unknown>,
    private readonly timeoutMs: number | null,
    private readonly signal?: AbortSignal,
  ) {}

  async *[Symbol.asyncIterator](): AsyncGenerator<ExecEvent, void, undefined> {
    if (this.started) throw new PandaStackError("an ExecStream can be iterated once", { code: "stream_consumed" });
    this.started = true;
    let finished = false;
    const lines = this.http.lines("POST", this.path, {
      json: this.body,
      timeoutMs: this.timeoutMs,
      signal: this.signal,
      onRequestId: (id) => {
        this.requestId = id;
      },
    });
    for await (const obj of lines) {
      if ("error" in obj) throw errorFromPayload(undefined, obj, this.requestId);
      if ("stdout" in obj) yield { type: "stdout", data: String(obj.stdout ?? "") };
      else if ("stderr" in obj) yield { type: "stderr", data: String(obj.stderr ?? "") };
      else if ("exit_code" in obj) {
        this.exitCode = obj.exit_code === null || obj.exit_code === undefined ? -1 : Number(obj.exit_code);
        this.timedOut = Boolean(obj.timed_out);
        this.durationMs = obj.duration_ms as number | undefined;
        finished = true;
        yield { type: "exit", exitCode: this.exitCode, timedOut: this.timedOut, durationMs: this.durationMs };
      }
    }
    if (!finished) {
      throw new APIConnectionError("the exec stream ended before the command's exit status arrived", {
        requestId: this.requestId,
      });
    }
  }

  /** Read to the end, discarding output; resolve to the exit code. */
  async wait(): Promise<number> {
    for await (const _ of this) {
      // drain
    }
    return this.exitCode ?? -1;
  }
}

/** Files inside one sandbox. Paths are absolute guest paths. */
export class Filesystem {
  constructor(private readonly sandbox: Sandbox) {}

  private get http(): Transport {
    return this.sandbox.client.http;
  }

  private path(sub = ""): string {
    return `/v1/sandboxes/${seg(this.sandbox.id)}/files${sub}`;
  }

  /** The file's content as bytes. */
  async readBytes(path: string, options: FileOptions = {}): Promise<Uint8Array> {
    const resp = await this.http.request("GET", this.path(), {
      query: { path, user: options.user },
      idempotent: true,
      headers: { accept: "application/octet-stream" },
      signal: options.signal,
    });
    return new Uint8Array(await resp.arrayBuffer());
  }

  /** The file's content decoded as UTF-8 text. */
  async read(path: string, options: FileOptions = {}): Promise<string> {
    return new TextDecoder().decode(await this.readBytes(path, options));
  }

  /**
   * Create or replace a file (missing parent directories are made). `data` is text (UTF-8),
   * bytes, an ArrayBuffer, a Blob, or a ReadableStream of bytes (streamed, not retried).
   * `mode` sets permission bits (`0o755` or `"0755"`). Resolves to the new file's info.
   */
  async write(
    path: string,
    data: string | Uint8Array | ArrayBuffer | Blob | ReadableStream<Uint8Array>,
    options: FileOptions & { mode?: number | string } = {},
  ): Promise<FileInfo> {
    let body: unknown = data;
    let idempotent = true;
    if (typeof data === "string") body = new TextEncoder().encode(data);
    else if (data instanceof ArrayBuffer) body = new Uint8Array(data);
    else if (data && typeof (data as ReadableStream).getReader === "function") idempotent = false;
    else if (!(data instanceof Uint8Array) && !(typeof Blob !== "undefined" && data instanceof Blob)) {
      throw new TypeError("data must be a string, Uint8Array, ArrayBuffer, Blob or ReadableStream");
    }
    const mode =
      options.mode === undefined ? undefined : typeof options.mode === "number" ? options.mode.toString(8).padStart(4, "0") : options.mode;
    const d = await this.http.json<FileData>("PUT", this.path(), {
      query: { path, mode, user: options.user },
      body,
      idempotent,
      signal: options.signal,
    });
    return fileInfo(d ?? { path, type: "file" });
  }

  /** Entries under a directory; `depth` (1-10, default 1) descends into subdirectories. */
  async list(path = "/", options: FileOptions & { depth?: number } = {}): Promise<FileInfo[]> {
    const d = await this.http.json<{ entries?: FileData[] }>("GET", this.path("/list"), {
      query: { path, depth: options.depth, user: options.user },
      idempotent: true,
      signal: options.signal,
    });
    return (d?.entries ?? []).map(fileInfo);
  }

  /** Metadata of one path (throws NotFound if it does not exist). */
  async stat(path: string, options: FileOptions = {}): Promise<FileInfo> {
    return fileInfo(
      await this.http.json<FileData>("GET", this.path("/stat"), {
        query: { path, user: options.user },
        idempotent: true,
        signal: options.signal,
      }),
    );
  }

  /** Whether the path exists. */
  async exists(path: string, options: FileOptions = {}): Promise<boolean> {
    try {
      await this.stat(path, options);
      return true;
    } catch (e) {
      // A missing *sandbox* is an error, not a missing file.
      if (e instanceof NotFound && !(e.message.includes("sandbox") && e.message.includes(this.sandbox.id))) return false;
      throw e;
    }
  }

  /** Make a directory and any missing parents (no error if it exists). */
  async mkdir(path: string, options: FileOptions = {}): Promise<void> {
    await this.http.json("POST", this.path("/mkdir"), {
      json: options.user === undefined ? { path } : { path, user: options.user },
      idempotent: true,
      signal: options.signal,
    });
  }

  /** Delete a file or an empty directory; `recursive: true` deletes a directory tree. */
  async remove(path: string, options: FileOptions & { recursive?: boolean } = {}): Promise<void> {
    await this.http.json("DELETE", this.path(), {
      query: { path, recursive: options.recursive ? "true" : undefined, user: options.user },
      idempotent: true,
      signal: options.signal,
    });
  }

  /** Rename or move a path. */
  async move(from: string, to: string, options: FileOptions = {}): Promise<void> {
    const body: Record<string, string> = { from, to };
    if (options.user !== undefined) body.user = options.user;
    await this.http.json("POST", this.path("/move"), { json: body, signal: options.signal });
  }

  /**
   * Watch a directory (inotify in the guest; `recursive` follows the directories below, new ones
   * too). Resolves once the watch is in place; iterate the handle with `for await` for
   * {@link FileEvent}s and `close()` it when done. `timeoutMs` bounds the silence between events
   * (default: none). A write through `files.write` lands as a `rename` from a hidden temp file.
   */
  async watch(path: string, options: FileOptions & { recursive?: boolean; timeoutMs?: number | null } = {}): Promise<WatchHandle> {
    const abort = new AbortController();
    options.signal?.addEventListener("abort", () => abort.abort(), { once: true });
    let rid: string | undefined;
    const lines = this.http.lines("GET", this.path("/watch"), {
      query: { path, recursive: options.recursive ? "1" : undefined, user: options.user },
      timeoutMs: options.timeoutMs ?? null,
      signal: abort.signal,
      onRequestId: (id) => (rid = id),
    });
    return WatchHandle.open(lines, abort, () => rid);
  }

  /** Directory `remote` as the bytes of a tar.gz (`gzip: false`: a tar). */
  async downloadArchive(remote: string, options: FileOptions & { gzip?: boolean } = {}): Promise<Uint8Array> {
    const resp = await this.http.request("GET", this.path("/archive"), {
      query: { path: remote, format: options.gzip === false ? "tar" : "tar.gz", user: options.user },
      idempotent: true,
      timeoutMs: null,
      headers: { accept: "*/*" },
      signal: options.signal,
    });
    return new Uint8Array(await resp.arrayBuffer());
  }

  /** Unpack a tar or tar.gz into directory `remote` (made if missing). */
  async uploadArchive(remote: string, data: Uint8Array, options: FileOptions = {}): Promise<{ entries: number; bytes: number }> {
    const d = await this.http.json<{ entries?: number; bytes?: number }>("PUT", this.path("/archive"), {
      query: { path: remote, user: options.user },
      body: data,
      idempotent: true,
      timeoutMs: null,
      signal: options.signal,
    });
    return { entries: Number(d?.entries ?? 0), bytes: Number(d?.bytes ?? 0) };
  }

  /** Copy local directory `local` into `remote` in the sandbox as a tar.gz (Node only). */
  async uploadDir(local: string, remote: string, options: FileOptions = {}): Promise<{ entries: number; bytes: number }> {
    return this.uploadArchive(remote, await packDir(local), options);
  }

  /**
   * Copy directory `remote` of the sandbox into local directory `local` (made if missing; Node
   * only). Nothing lands outside `local`: names with `..` and paths through symlinks that lead
   * out of it are refused. Resolves to the entries copied.
   */
  async downloadDir(remote: string, local: string, options: FileOptions = {}): Promise<number> {
    return unpackDir(await this.downloadArchive(remote, options), local);
  }
}

/**
 * A microVM sandbox. Its fields reflect the last answer about it; `refresh()` reloads them.
 */
export class Sandbox {
  id!: string;
  template?: string;
  state?: SandboxState;
  createdAt!: Date | null;
  expiresAt!: Date | null;
  metadata!: Record<string, string>;
  host?: string;
  ip?: string;
  error?: string;
  /** For a fork's child: the sandbox it was forked from. */
  forkOf?: string;
  /** For a sandbox created from a snapshot: that snapshot's id. */
  snapshotId?: string;
  /** False when its port proxy asks for `trafficToken`. */
  publicPorts!: boolean;
  /**
   * The token its private ports ask for (send it as the `X-PandaStack-Traffic-Token` header). Only
   * the create answer carries it, so it is kept across refreshes; a fork's children get their
   * parent's.
   */
  trafficToken?: string;
  /** The last answer, as sent. */
  raw!: SandboxData;
  readonly filesystem: Filesystem;
  /** Background processes: start, list, connect, kill, sendStdin, signal. */
  readonly processes: Processes;

  /** @internal the client this sandbox belongs to (not enumerable) */
  declare readonly client: ClientContext;

  constructor(client: ClientContext, data: SandboxData) {
    Object.defineProperty(this, "client", { value: client, enumerable: false });
    this.filesystem = new Filesystem(this);
    this.processes = new Processes(this);
    this.update(data);
  }

  /**
   * The sandbox `id`, woken if hibernated, through a new client made with `options` (apiKey,
   * baseUrl…; the environment otherwise). Same as `new PandaStack(options).sandboxes.connect(id)`.
   */
  static async connect(id: string, options: Record<string, unknown> = {}): Promise<Sandbox> {
    if (!clientFactory) throw new TypeError("import the package (its client module) first");
    return new Sandboxes(clientFactory(options)).connect(id);
  }

  /** Alias of `filesystem`. */
  get files(): Filesystem {
    return this.filesystem;
  }

  /**
   * The URL where `port` of this sandbox is served through the server's port proxy
   * (`<scheme>://<port>-<id>.<proxy domain>[:<API port>]`, from `GET /v1/info`'s `proxy_domain`,
   * asked once per client). A private sandbox's URL carries its traffic token as a query
   * parameter (the proxy turns it into a cookie). Throws ConfigurationError when the server runs
   * no port proxy.
   */
  async getUrl(port: number): Promise<string> {
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new RangeError(`port must be a TCP port (1-65535), not ${port}`);
    const http = this.client.http;
    let domain = proxyDomains.get(http);
    if (domain === undefined) {
      const info = await http.json<{ proxy_domain?: string }>("GET", "/v1/info", { idempotent: true });
      domain = String(info?.proxy_domain ?? "");
      proxyDomains.set(http, domain);
    }
    if (!domain) throw new ConfigurationError("this PandaStack server runs no port proxy (GET /v1/info has no proxy_domain)");
    const u = new URL(http.baseUrl);
    let url = `${u.protocol}//${port}-${this.id}.${domain}${u.port ? ":" + u.port : ""}`;
    if (!this.publicPorts && this.trafficToken) url += `/?pandastack_traffic_token=${encodeURIComponent(this.trafficToken)}`;
    return url;
  }

  private update(d: SandboxData): void {
    this.raw = { ...d };
    this.id = d.id;
    this.template = d.template;
    this.state = d.state;
    this.createdAt = parseTime(d.created_at);
    this.expiresAt = parseTime(d.expires_at);
    this.metadata = { ...(d.metadata ?? {}) };
    this.host = d.host;
    this.ip = d.ip;
    this.error = d.error;
    this.forkOf = d.fork_of;
    this.snapshotId = d.snapshot_id;
    this.publicPorts = d.public_ports !== false;
    this.trafficToken = d.traffic_token || this.trafficToken;
  }

  private async updateFrom(d: unknown): Promise<void> {
    if (d && typeof d === "object" && (d as SandboxData).id === this.id) this.update(d as SandboxData);
    else await this.refresh();
  }

  private path(sub = ""): string {
    return `/v1/sandboxes/${seg(this.id)}${sub}`;
  }

  /**
   * Opens an interactive terminal (GET …/pty, a WebSocket through the `ws` package): the user's
   * login shell, or the shell command line `cmd`, on a pseudo-terminal of `cols`×`rows` (default
   * 80×24). Wakes a hibernated sandbox.
   *
   *     const t = await sb.terminal({ cols: 120, rows: 40, onData: (b) => process.stdout.write(b) });
   *     t.write("echo hi; exit 3\n");
   *     await t.wait(); // 3
   */
  terminal(opts: TerminalOptions = {}): Promise<Terminal> {
    return openTerminal(this.client.http, this.path(), opts);
  }

  private execTimeoutMs(timeoutSeconds?: number): number | null {
    const base = this.client.http.timeoutMs;
    if (base === null) return null;
    return Math.max(base, ((timeoutSeconds ?? DEFAULT_EXEC_TIMEOUT_S) + EXEC_GRACE_S) * 1000);
  }

  /** Reload the fields from the API. */
  /**
   * The sandbox's resource use now (`GET /v1/sandboxes/{id}/metrics`): the guest's CPU share,
   * memory and root disk, and its VMM's CPU time and memory on the host. A hibernated sandbox has
   * none (a `ConflictError`); the call does not wake it.
   */
  async metrics(): Promise<SandboxMetrics> {
    return this.client.http.json<SandboxMetrics>("GET", this.path() + "/metrics", { idempotent: true });
  }

  async refresh(): Promise<this> {
    this.update(await this.client.http.json<SandboxData>("GET", this.path(), { idempotent: true }));
    return this;
  }

  /**
   * Run a command and wait for it. With `onStdout`/`onStderr` the output streams to the
   * callbacks as it is produced; the result holds all of it either way.
   */
  async exec(cmd: Command, options: ExecOptions = {}): Promise<ExecResult> {
    const body = execBody(cmd, options);
    if (!options.onStdout && !options.onStderr) {
      const d = await this.client.http.json<Record<string, unknown>>("POST", this.path("/exec"), {
        json: body,
        timeoutMs: this.execTimeoutMs(options.timeoutSeconds),
        signal: options.signal,
      });
      return new ExecResult(
        String(d?.stdout ?? ""),
        String(d?.stderr ?? ""),
        d?.exit_code === null || d?.exit_code === undefined ? -1 : Number(d.exit_code),
        Boolean(d?.timed_out),
        d?.duration_ms as number | undefined,
        Boolean(d?.stdout_truncated),
        Boolean(d?.stderr_truncated),
      );
    }
    const got = new OutputGatherer(options.onStdout, options.onStderr);
    const stream = new ExecStream(this.client.http, this.path("/exec"), body, this.execTimeoutMs(options.timeoutSeconds), options.signal);
    for await (const ev of stream) got.add(ev);
    return new ExecResult(got.stdout, got.stderr, stream.exitCode ?? -1, stream.timedOut, stream.durationMs);
  }

  /**
   * Run a command and get its output as it happens:
   * `for await (const ev of sb.execStream("make test")) { ... }`.
   */
  execStream(cmd: Command, options: ExecStreamOptions = {}): ExecStream {
    return new ExecStream(this.client.http, this.path("/exec"), execBody(cmd, options), this.execTimeoutMs(options.timeoutSeconds), options.signal);
  }

  /**
   * Run Python in the sandbox's warm kernel (templates with a code interpreter, such as
   * code-interpreter), or JavaScript with `language: "js"`. Variables live on between calls in a
   * context. An exception in the code is
   * `execution.error`, not a rejection. With callbacks, output and results arrive as they happen.
   */
  async runCode(code: string, options: RunCodeOptions = {}): Promise<Execution> {
    const body = codeBody(code, options);
    const timeoutMs = this.execTimeoutMs(options.timeout ?? 300);
    if (!options.onStdout && !options.onStderr && !options.onResult && !options.onError) {
      const d = await this.client.http.json<Record<string, unknown>>("POST", this.path("/code"), { json: body, timeoutMs, signal: options.signal });
      return Execution.fromAPI(d ?? {});
    }
    return streamCode(this.client.http, this.path("/code"), body, timeoutMs, options);
  }

  /** Start a code context: a kernel with its own variables (warm: the data stack is imported). */
  async createCodeContext(options: { cwd?: string; language?: CodeLanguage; signal?: AbortSignal } = {}): Promise<CodeContext> {
    const body: Record<string, unknown> = { language: options.language ?? "python" };
    if (options.cwd !== undefined) body.cwd = options.cwd;
    return this.client.http.json<CodeContext>("POST", this.path("/code/contexts"), { json: body, timeoutMs: this.execTimeoutMs(900), signal: options.signal });
  }

  /** The sandbox's code contexts. */
  async listCodeContexts(): Promise<CodeContext[]> {
    const d = await this.client.http.json<{ contexts?: CodeContext[] }>("GET", this.path("/code/contexts"), { idempotent: true });
    return d?.contexts ?? [];
  }

  /** Stop a code context's kernel. */
  async deleteCodeContext(context: string | CodeContext): Promise<void> {
    const id = typeof context === "string" ? context : context.id;
    await this.client.http.json("DELETE", this.path(`/code/contexts/${seg(id)}`), {});
  }

  /** Interrupt the running execution of a context (KeyboardInterrupt in Python). */
  async interruptCode(context?: string | CodeContext): Promise<void> {
    const body: Record<string, unknown> = {};
    if (context !== undefined) body.context_id = typeof context === "string" ? context : context.id;
    await this.client.http.json("POST", this.path("/code/interrupt"), { json: body });
  }

  /**
   * Clone this running sandbox, memory and disk, copy-on-write. `fork()` resolves to the new
   * Sandbox; `fork({ count: n })` (or `fork(n)`) with n > 1 to an array of n (all or none).
   * `host` (admin keys) runs the children on that host; another than this sandbox's needs a blob
   * store the hosts share.
   */
  fork(): Promise<Sandbox>;
  fork(options: { host: string }): Promise<Sandbox>;
  fork<N extends number>(options: N | { count: N; host?: string }): Promise<ForkResult<N>>;
  async fork(options?: number | { count?: number; host?: string }): Promise<Sandbox | Sandbox[]> {
    const count = typeof options === "number" ? options : options?.count ?? 1;
    const host = typeof options === "number" ? undefined : options?.host;
    if (!Number.isInteger(count) || count < 1) throw new RangeError("count must be a positive integer");
    const body: Record<string, unknown> = count === 1 ? {} : { count };
    if (host !== undefined) body.host = host;
    const resp = await this.client.http.request("POST", this.path("/fork"), {
      json: body,
      timeoutMs: this.client.createTimeoutMs,
    });
    const d = JSON.parse((await resp.text()) || "{}") as { sandboxes?: SandboxData[] };
    const children = (d.sandboxes ?? []).map((s) => new Sandbox(this.client, s));
    for (const child of children) if (!child.publicPorts) child.trafficToken = this.trafficToken;
    if (count === 1) {
      if (!children[0]) {
        throw new PandaStackError("fork answered without a sandbox", {
          code: "bad_response",
          status: resp.status,
          requestId: resp.headers.get("x-request-id") ?? undefined,
        });
      }
      return children[0];
    }
    return children;
  }

  /** Save memory and disk; the sandbox keeps running. */
  async snapshot(): Promise<Snapshot> {
    return snapshotOf(
      await this.client.http.json<Record<string, unknown>>("POST", this.path("/snapshots"), {
        json: {},
        timeoutMs: this.client.createTimeoutMs,
      }),
    );
  }

  /** Save the sandbox to disk and stop its VM; any later call resumes it. */
  async hibernate(): Promise<this> {
    return this.move("/hibernate");
  }

  /** Resume a hibernated sandbox (a no-op on a running one). */
  async wake(): Promise<this> {
    return this.move("/wake");
  }

  /** POST a state change that is safe to repeat (hibernate, wake); take the state answered. */
  private async move(sub: string): Promise<this> {
    await this.updateFrom(
      await this.client.http.json("POST", this.path(sub), {
        json: {},
        idempotent: true,
        timeoutMs: this.client.createTimeoutMs,
      }),
    );
    return this;
  }

  /** Make the sandbox expire `seconds` from now. */
  async setTtl(seconds: number): Promise<this> {
    await this.updateFrom(
      await this.client.http.json("POST", this.path("/ttl"), { json: { ttl_seconds: seconds }, idempotent: true }),
    );
    return this;
  }

  /** Stop the sandbox and free its resources. Idempotent. */
  async kill(): Promise<void> {
    await this.client.http.json("DELETE", this.path(), { idempotent: true });
    this.state = "killed";
  }

  toJSON(): SandboxData {
    return this.raw;
  }
}

/** `client.sandboxes` (also `client.sandbox`). */
export class Sandboxes {
  constructor(private readonly client: ClientContext) {}

  /** Start a sandbox from a template (or a snapshot). The first create of a template bakes it. */
  async create(params: CreateSandboxParams): Promise<Sandbox> {
    if (!params || (params.template === undefined && params.snapshotId === undefined)) {
      throw new TypeError("create() needs { template } (or { snapshotId })");
    }
    const body: Record<string, unknown> = {};
    if (params.template !== undefined) body.template = params.template;
    if (params.ttlSeconds !== undefined) body.ttl_seconds = params.ttlSeconds;
    if (params.metadata !== undefined) body.metadata = params.metadata;
    if (params.env !== undefined) body.env = params.env;
    if (params.snapshotId !== undefined) body.snapshot_id = params.snapshotId;
    if (params.egress !== undefined) body.egress = params.egress;
    if (params.volumes !== undefined) body.volumes = params.volumes.map(volumeEntry);
    if (params.publicPorts !== undefined) body.public_ports = params.publicPorts;
    if (params.host !== undefined) body.host = params.host;
    const d = await this.client.http.json<SandboxData>("POST", "/v1/sandboxes", {
      json: body,
      timeoutMs: this.client.createTimeoutMs,
      signal: params.signal,
    });
    return new Sandbox(this.client, d);
  }

  /** Create a sandbox, pass it to `fn`, and kill it afterwards whatever happens. */
  async with<T>(params: CreateSandboxParams, fn: (sandbox: Sandbox) => Promise<T> | T): Promise<T> {
    const sb = await this.create(params);
    try {
      return await fn(sb);
    } finally {
      await sb.kill().catch(() => undefined);
    }
  }

  /**
   * A sandbox made earlier (by this program or another), ready for calls: a hibernated one is
   * woken. NotFound for an unknown id, Conflict for one that was killed.
   */
  async connect(id: string): Promise<Sandbox> {
    const sb = await this.get(id);
    if (sb.state === "hibernated") await sb.wake();
    else if (sb.state !== "running") throw new Conflict(`sandbox ${sb.id} is ${sb.state}`, { code: "conflict" });
    return sb;
  }

  /** The sandbox with this id (killed ones stay readable with state "killed"). */
  async get(id: string): Promise<Sandbox> {
    if (!id) throw new TypeError("id is required");
    return new Sandbox(this.client, await this.client.http.json<SandboxData>("GET", `/v1/sandboxes/${seg(id)}`, { idempotent: true }));
  }

  /** Like `list`, fetching pages lazily. */
  async *iter(params: ListSandboxesParams = {}): AsyncGenerator<Sandbox, void, undefined> {
    const base: Record<string, string> = {};
    if (params.state !== undefined) base.state = typeof params.state === "string" ? params.state : params.state.join(",");
    for (const [k, v] of Object.entries(params.metadata ?? {})) base[`metadata.${k}`] = v;
    const pageSize = Math.min(Math.max(params.pageSize ?? 100, 1), 1000);
    let n = 0;
    let cursor: string | null | undefined;
    for (;;) {
      const size = params.limit === undefined ? pageSize : Math.max(1, Math.min(pageSize, params.limit - n));
      const query: Record<string, string | number> = { ...base, limit: size };
      if (cursor) query.cursor = cursor;
      const d = await this.client.http.json<{ sandboxes?: SandboxData[]; next_cursor?: string | null }>("GET", "/v1/sandboxes", {
        query,
        idempotent: true,
      });
      for (const s of d?.sandboxes ?? []) {
        if (params.limit !== undefined && n >= params.limit) return;
        n++;
        yield new Sandbox(this.client, s);
      }
      cursor = d?.next_cursor;
      if (!cursor || (params.limit !== undefined && n >= params.limit)) return;
    }
  }

  /** Your team's sandboxes, newest first. */
  async list(params: ListSandboxesParams = {}): Promise<Sandbox[]> {
    const out: Sandbox[] = [];
    for await (const sb of this.iter(params)) out.push(sb);
    return out;
  }
}

/** `client.snapshots`. */
export class Snapshots {
  constructor(private readonly client: ClientContext) {}

  /** Like `list`, fetching pages lazily. */
  async *iter(params: { sandboxId?: string; limit?: number; pageSize?: number } = {}): AsyncGenerator<Snapshot, void, undefined> {
    const pageSize = Math.min(Math.max(params.pageSize ?? 100, 1), 1000);
    let n = 0;
    let cursor: string | null | undefined;
    for (;;) {
      const size = params.limit === undefined ? pageSize : Math.max(1, Math.min(pageSize, params.limit - n));
      const d = await this.client.http.json<{ snapshots?: Record<string, unknown>[]; next_cursor?: string | null }>("GET", "/v1/snapshots", {
        query: { sandbox_id: params.sandboxId, limit: size, cursor },
        idempotent: true,
      });
      for (const sn of d?.snapshots ?? []) {
        if (params.limit !== undefined && n >= params.limit) return;
        n++;
        yield snapshotOf(sn);
      }
      cursor = d?.next_cursor;
      if (!cursor || (params.limit !== undefined && n >= params.limit)) return;
    }
  }

  /** Your team's snapshots, newest first; `sandboxId` keeps those of one sandbox. */
  async list(params: { sandboxId?: string; limit?: number } = {}): Promise<Snapshot[]> {
    const out: Snapshot[] = [];
    for await (const sn of this.iter(params)) out.push(sn);
    return out;
  }

  async get(id: string): Promise<Snapshot> {
    return snapshotOf(await this.client.http.json<Record<string, unknown>>("GET", `/v1/snapshots/${seg(id)}`, { idempotent: true }));
  }

  async delete(id: string): Promise<void> {
    await this.client.http.json("DELETE", `/v1/snapshots/${seg(id)}`, { idempotent: true });
  }
}

/** `client.volumes`: durable volumes, persistent disks that outlive sandboxes. */
export class Volumes {
  constructor(private readonly client: ClientContext) {}

  /** Make a volume of `sizeMib` MiB (1 to 1048576) on a host the server picks. */
  async create(params: { sizeMib: number; name?: string; signal?: AbortSignal }): Promise<Volume> {
    const body: Record<string, unknown> = { size_mib: params.sizeMib };
    if (params.name !== undefined) body.name = params.name;
    return volumeOf(
      await this.client.http.json<Record<string, unknown>>("POST", "/v1/volumes", {
        json: body,
        timeoutMs: this.client.createTimeoutMs,
        signal: params.signal,
      }),
    );
  }

  /** Your team's volumes, newest first. */
  async list(): Promise<Volume[]> {
    const d = await this.client.http.json<{ volumes?: Record<string, unknown>[] }>("GET", "/v1/volumes", { idempotent: true });
    return (d?.volumes ?? []).map(volumeOf);
  }

  async get(id: string): Promise<Volume> {
    return volumeOf(await this.client.http.json<Record<string, unknown>>("GET", `/v1/volumes/${seg(id)}`, { idempotent: true }));
  }

  /** Grow a volume; refused (Conflict) while a sandbox has it mounted. */
  async resize(id: string, sizeMib: number): Promise<Volume> {
    return volumeOf(
      await this.client.http.json<Record<string, unknown>>("POST", `/v1/volumes/${seg(id)}/resize`, {
        json: { size_mib: sizeMib },
        timeoutMs: this.client.createTimeoutMs,
      }),
    );
  }

  /** Delete a volume and its data; refused (Conflict) while a sandbox has it mounted. */
  async delete(id: string): Promise<void> {
    await this.client.http.json("DELETE", `/v1/volumes/${seg(id)}`, { idempotent: true });
  }
}

/** `client.templates`: the catalog. */
export class Templates {
  constructor(private readonly client: ClientContext) {}

  private static of(t: Record<string, unknown>): Template {
    return {
      name: String(t.name ?? ""),
      owner: t.owner as string | undefined,
      description: (t.description as string | undefined) ?? "",
      vcpus: t.vcpus as number | undefined,
      memoryMib: t.memory_mib as number | undefined,
      diskMib: t.disk_mib as number | undefined,
      sizeBytes: t.size_bytes as number | undefined,
      bakeMs: t.bake_ms as number | undefined,
      aliases: Array.isArray(t.aliases) ? t.aliases.filter((a): a is string => typeof a === "string") : [],
      metadata: t.metadata && typeof t.metadata === "object" ? { ...(t.metadata as Record<string, string>) } : {},
      baked: t.baked as boolean | undefined,
      available: t.available as boolean | undefined,
      raw: { ...t },
    };
  }

  /** The catalog's templates and your team's. */
  async list(): Promise<Template[]> {
    const d = await this.client.http.json<{ templates?: Record<string, unknown>[] }>("GET", "/v1/templates", { idempotent: true });
    return (d?.templates ?? []).map(Templates.of);
  }

  /** Your team's template by that name, else the catalog's (aliases resolve). */
  async get(name: string): Promise<Template> {
    if (!name) throw new TypeError("name is required");
    return Templates.of(await this.client.http.json<Record<string, unknown>>("GET", `/v1/templates/${seg(name)}`, { idempotent: true }));
  }

  /**
   * Build a template for your team from `spec` (an object, or a YAML/JSON string) and resolve
   * with it once it is ready. Rejects with `BuildFailed` when the build fails, `InvalidRequest`
   * or `Conflict` when the spec is refused before it starts. Building a name again rebuilds it.
   */
  async build(spec: TemplateSpec | string, options: BuildTemplateOptions = {}): Promise<Template> {
    if (typeof spec !== "string" && (spec === null || typeof spec !== "object")) {
      throw new TypeError("spec is an object or a YAML/JSON string");
    }
    let requestId: string | undefined;
    const lines = this.client.http.lines("POST", "/v1/templates", {
      ...(typeof spec === "string" ? { body: spec, contentType: "application/yaml" } : { json: spec }),
      timeoutMs: this.client.createTimeoutMs,
      signal: options.signal,
      onRequestId: (id) => {
        requestId = id;
      },
    });
    for await (const obj of lines) {
      if ("error" in obj) throw errorFromPayload(undefined, obj, requestId);
      if (obj.template && typeof obj.template === "object") return Templates.of(obj.template as Record<string, unknown>);
      if (typeof obj.progress === "string") options.onProgress?.(obj.progress);
    }
    throw new APIConnectionError("the build stream ended before its result arrived", { requestId });
  }

  /** Delete one of your team's templates; `Conflict` while sandboxes or snapshots use it. */
  async delete(name: string): Promise<void> {
    if (!name) throw new TypeError("name is required");
    await this.client.http.json("DELETE", `/v1/templates/${seg(name)}`, { idempotent: true });
  }
}
