import type { Deployment } from "./wire";

// The console's only way to the API: every call carries the key in the Authorization header (never
// in a URL), errors surface as the API's own message, and a 401 from any call signs out.

const KEY = "pandastack.key";

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    /** The error's other fields (a refused SQL statement's sqlstate, detail, hint, position). */
    readonly extra: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

type Listener = (why: string) => void;
const signOutListeners = new Set<Listener>();

export function getKey(): string | null {
  return sessionStorage.getItem(KEY);
}

export function setKey(key: string): void {
  sessionStorage.setItem(KEY, key);
}

export function onSignOut(fn: Listener): () => void {
  signOutListeners.add(fn);
  return () => signOutListeners.delete(fn);
}

export function signOut(why = ""): void {
  sessionStorage.removeItem(KEY);
  stopEvents();
  signOutListeners.forEach((fn) => fn(why));
}

export interface CallOptions {
  body?: unknown;
  raw?: BodyInit; // sent as is (file uploads, YAML)
  contentType?: string;
  accept?: string;
  signal?: AbortSignal;
  key?: string; // sign-in checks a key before keeping it
}

async function send(method: string, path: string, o: CallOptions = {}): Promise<Response> {
  const key = o.key ?? getKey();
  const headers: Record<string, string> = {};
  if (key) headers["Authorization"] = "Bearer " + key;
  let body: BodyInit | undefined;
  if (o.raw !== undefined) {
    body = o.raw;
    // FormData sets its own multipart boundary.
    if (!(o.raw instanceof FormData)) headers["Content-Type"] = o.contentType ?? "application/octet-stream";
  } else if (o.body !== undefined) {
    body = JSON.stringify(o.body);
    headers["Content-Type"] = "application/json";
  }
  if (o.accept) headers["Accept"] = o.accept;
  let res: Response;
  try {
    res = await fetch(path, { method, headers, body, signal: o.signal, credentials: "omit", cache: "no-store" });
  } catch (e) {
    if (e instanceof DOMException && e.name === "AbortError") throw e;
    throw new ApiError(0, "unreachable", "the server did not answer (" + String(e) + ")");
  }
  if (!res.ok) {
    let code = "http_" + res.status;
    let message = res.statusText || "HTTP " + res.status;
    let extra: Record<string, unknown> = {};
    try {
      const j = (await res.json()) as { error?: { code?: string; message?: string } & Record<string, unknown> };
      if (j.error?.message) message = j.error.message;
      if (j.error?.code) code = j.error.code;
      if (j.error) extra = j.error;
    } catch {
      /* not JSON: keep the status text */
    }
    const err = new ApiError(res.status, code, message, extra);
    if (res.status === 401 && o.key === undefined) signOut(message);
    throw err;
  }
  return res;
}

/** call sends a request and decodes its JSON answer (undefined for 204). */
export async function call<T>(method: string, path: string, o: CallOptions = {}): Promise<T> {
  const res = await send(method, path, o);
  if (res.status === 204) return undefined as T;
  const text = await res.text();
  return (text ? JSON.parse(text) : undefined) as T;
}

export const get = <T>(path: string, signal?: AbortSignal) => call<T>("GET", path, { signal });
export const post = <T>(path: string, body?: unknown) => call<T>("POST", path, { body });
export const del = (path: string) => call<void>("DELETE", path);

/** bytes fetches a body as a Blob (file downloads). */
export async function bytes(path: string): Promise<Blob> {
  return (await send("GET", path)).blob();
}

/** readText hands each piece of an answer's body to onText as it arrives. */
async function readText(res: Response, onText: (s: string) => void): Promise<void> {
  if (!res.body) return;
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    onText(value);
  }
}

/** text GETs a text/plain answer whole (a database's log). */
export async function text(path: string, signal?: AbortSignal): Promise<string> {
  return (await send("GET", path, { signal, accept: "text/plain" })).text();
}

/** textStream GETs a text/plain answer (a log with follow=1) and hands each piece to onText. */
export async function textStream(path: string, signal: AbortSignal, onText: (s: string) => void): Promise<void> {
  await readText(await send("GET", path, { signal, accept: "text/plain" }), onText);
}

/** stream sends a request and hands each NDJSON line of the answer to onLine. */
export async function stream(method: string, path: string, o: CallOptions, onLine: (v: unknown) => void): Promise<void> {
  const res = await send(method, path, { ...o, accept: "application/x-ndjson" });
  let buf = "";
  await readText(res, (value) => {
    buf += value;
    let i: number;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i).trim();
      buf = buf.slice(i + 1);
      if (line) onLine(JSON.parse(line));
    }
  });
  if (buf.trim()) onLine(JSON.parse(buf));
}

export const q = (v: string) => encodeURIComponent(v);

// -- the events stream (GET /v1/events) -----------------------------------------------------

export interface SandboxEvent {
  type: "ready" | "sandbox" | "deployment" | "change" | "process.exited" | "database.backed_up" | "database.suspended" | "database.restarted" | "ping";
  at: string;
  sandbox?: Sandbox;
  /** A database backed up (by a call, its creation or the daily schedule) or suspended when idle: no call says so. */
  database?: { id: string; name: string; backup_id?: string; trigger?: string; idle_seconds?: number };
  /** An app deployment as it now is: made, built, failed, switched to, superseded. */
  deployment?: Deployment;
  /** A call of one of the team's keys that changed a resource (the audit log's view). */
  change?: { method: string; route: string; resource_id: string; status: number };
}

type EventListener = (ev: SandboxEvent) => void;
const eventListeners = new Set<EventListener>();
let eventsAbort: AbortController | null = null;
export let eventsConnected = false;

/** onEvent subscribes to the team's sandbox changes; the stream runs while anyone listens. */
export function onEvent(fn: EventListener): () => void {
  eventListeners.add(fn);
  if (!eventsAbort) startEvents();
  return () => {
    eventListeners.delete(fn);
  };
}

function startEvents(): void {
  const ac = new AbortController();
  eventsAbort = ac;
  const loop = async () => {
    while (!ac.signal.aborted && getKey()) {
      try {
        await stream("GET", "/v1/events", { signal: ac.signal }, (v) => {
          const ev = v as SandboxEvent;
          eventsConnected = true;
          eventListeners.forEach((fn) => fn(ev));
        });
      } catch (e) {
        if (e instanceof ApiError && e.status === 401) return; // signed out already
      }
      eventsConnected = false;
      if (!ac.signal.aborted) await new Promise((r) => setTimeout(r, 1000));
    }
  };
  void loop();
}

function stopEvents(): void {
  eventsAbort?.abort();
  eventsAbort = null;
  eventsConnected = false;
}

// -- wire types (internal/wire/v1; docs/api.md) ----------------------------------------------

export type { App, AppBuild, AppPlan, AuditEntry, Database, DatabaseConnection, Deployment, Fn, FnRun, FnVersion, GitHubHook, Schedule, ScheduleRun, Usage, UsageItem } from "./wire";

/** GET /v1/databases/{id}/stats (read from postgres). */
export interface DatabaseStats {
  size_bytes: number;
  connections: number;
  transactions_committed: number;
  transactions_rolled_back: number;
  uptime_seconds: number;
}
export interface DatabaseBackup {
  id: string;
  database_id: string;
  size_bytes: number;
  created_at: string;
}
/** A statement's result (POST /v1/databases/{id}/query): rows as arrays, or objects by column. */
export interface QueryResult {
  fields: { name: string; dataTypeID: number }[];
  rows: ((string | null)[] | Record<string, string | null>)[];
  command: string;
  rowCount: number;
  rowAsArray: boolean;
}

export interface Page {
  next_cursor: string | null;
}
export interface Sandbox {
  id: string;
  template: string;
  state: string;
  created_at: string;
  expires_at: string;
  metadata: Record<string, string>;
  host: string;
  error?: string;
  fork_of?: string;
  snapshot_id?: string;
  public_ports: boolean;
}
export interface Stat {
  name: string;
  path: string;
  type: string;
  size: number;
  mode: string;
  mtime: string;
  target?: string;
}
export interface Process {
  pid: number;
  cmd?: string;
  argv?: string[];
  cwd: string;
  user: string;
  state: string;
  exit_code?: number;
  signal?: string;
  started_at: string;
  exited_at?: string;
}
export interface Snapshot {
  id: string;
  sandbox_id: string;
  template: string;
  created_at: string;
  size_bytes: number;
}
export interface Template {
  name: string;
  owner: string;
  description?: string;
  vcpus: number;
  memory_mib: number;
  disk_mib: number;
  size_bytes?: number;
  bake_ms?: number;
  aliases: string[];
  available: boolean;
  baked: boolean;
  updated_at?: string;
}
export interface BuildEvent {
  progress?: string;
  template?: Template;
  error?: { code: string; message: string };
}
export interface Volume {
  id: string;
  name: string;
  size_mib: number;
  host_id: string;
  created_at: string;
  attachments: { sandbox_id: string; mount_path: string; read_only: boolean }[];
}
export interface Key {
  id: string;
  name: string;
  prefix: string;
  admin: boolean;
  team_id: string;
  created_at: string;
  revoked_at: string | null;
  key?: string;
  scopes: string[];
  expires_at: string | null;
}
export interface Host {
  id: string;
  url: string;
  state: string;
  accel: string;
  sandboxes: number;
  free_slots: number;
  slots_total: number;
  mem_mib_total: number;
  mem_mib_free: number;
  templates: string[];
  baked: string[];
  last_heartbeat: string;
}
