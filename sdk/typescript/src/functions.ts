// Functions and cron schedules (`client.functions`, `client.schedules`): docs/functions.md.
import type { ClientContext } from "./sandbox.js";

const seg = (s: string): string => encodeURIComponent(s);

/** A function at its latest version. */
export interface FunctionInfo {
  id: string;
  name: string;
  version: number;
  state: string;
  runtime: "python3" | "node";
  handler: string;
  url?: string;
  created_at: string;
  updated_at: string;
}

/** What a deploy takes besides the bundle. */
export interface FunctionSpec {
  name: string;
  runtime?: "python3" | "node";
  handler?: string;
  env?: Record<string, string>;
  /** In the handler's environment; stored sealed, never answered. */
  secrets?: Record<string, string>;
  timeoutSeconds?: number;
  memoryMib?: number;
  maxConcurrency?: number;
  retries?: number;
}

/** One immutable deploy. */
export interface FunctionVersion {
  function_id: string;
  version: number;
  state: string;
  runtime: string;
  handler: string;
  env: Record<string, string>;
  secret_names: string[];
  timeout_seconds: number;
  memory_mib: number;
  max_concurrency: number;
  retries: number;
  bundle_bytes: number;
  bundle_sha256: string;
  snapshot_id?: string;
  created_at: string;
}

/** One invocation and its outcome. */
export interface FunctionRun {
  id: string;
  function_id: string;
  version: number;
  trigger: "sync" | "async" | "schedule" | "http";
  status: "queued" | "running" | "succeeded" | "failed" | "timed_out";
  attempts: number;
  result?: unknown;
  logs: string;
  error?: { type: string; message: string; traceback?: string };
  duration_ms: number;
  created_at: string;
  finished_at?: string;
}

/** A cron schedule. */
export interface Schedule {
  id: string;
  name: string;
  cron: string;
  timezone: string;
  function_id?: string;
  template?: string;
  cmd?: string;
  payload: unknown;
  overlap: "skip" | "queue" | "allow";
  missed: "skip" | "run_once";
  enabled: boolean;
  timeout_seconds: number;
  next_run_at?: string;
  created_at: string;
}

/** One run of a schedule. */
export interface ScheduleRun {
  id: string;
  schedule_id: string;
  trigger: "cron" | "manual";
  scheduled_for: string;
  status: "queued" | "running" | "succeeded" | "failed" | "timed_out" | "skipped";
  started_at?: string;
  finished_at?: string;
  sandbox_id?: string;
  function_run_id?: string;
  exit_code?: number;
  output?: string;
  error?: string;
}

/** What a schedule create takes: a function (`functionId`, `payload`) or a command (`template`, `cmd`). */
export interface CreateScheduleParams {
  cron: string;
  timezone?: string;
  name?: string;
  functionId?: string;
  payload?: unknown;
  template?: string;
  cmd?: string;
  overlap?: "skip" | "queue" | "allow";
  missed?: "skip" | "run_once";
  enabled?: boolean;
  timeoutSeconds?: number;
}

function multipart(spec: Record<string, unknown>, bundle: Uint8Array): { body: Uint8Array; contentType: string } {
  const boundary = "pandastack-" + Math.random().toString(36).slice(2) + Date.now().toString(36);
  const enc = new TextEncoder();
  const head = enc.encode(
    `--${boundary}\r\nContent-Disposition: form-data; name="spec"\r\nContent-Type: application/json\r\n\r\n` +
      JSON.stringify(spec) +
      `\r\n--${boundary}\r\nContent-Disposition: form-data; name="bundle"; filename="bundle"\r\nContent-Type: application/octet-stream\r\n\r\n`,
  );
  const tail = enc.encode(`\r\n--${boundary}--\r\n`);
  const body = new Uint8Array(head.length + bundle.length + tail.length);
  body.set(head, 0);
  body.set(bundle, head.length);
  body.set(tail, head.length + bundle.length);
  return { body, contentType: `multipart/form-data; boundary=${boundary}` };
}

/** `client.functions`: deploy code bundles and invoke them, each invocation in a fresh microVM. */
export class Functions {
  constructor(private readonly client: ClientContext) {}

  /** Deploy `bundle` (bytes of a .zip or .tar.gz) as the next version of `spec.name`; resolves once its warm snapshot is baked. */
  async deploy(spec: FunctionSpec, bundle: Uint8Array): Promise<FunctionInfo> {
    const wire: Record<string, unknown> = { name: spec.name, runtime: spec.runtime ?? "python3", handler: spec.handler ?? "main.handler" };
    if (spec.env) wire.env = spec.env;
    if (spec.secrets) wire.secrets = spec.secrets;
    if (spec.timeoutSeconds !== undefined) wire.timeout_seconds = spec.timeoutSeconds;
    if (spec.memoryMib !== undefined) wire.memory_mib = spec.memoryMib;
    if (spec.maxConcurrency !== undefined) wire.max_concurrency = spec.maxConcurrency;
    if (spec.retries !== undefined) wire.retries = spec.retries;
    const { body, contentType } = multipart(wire, bundle);
    return this.client.http.json<FunctionInfo>("POST", "/v1/functions", {
      body,
      headers: { "content-type": contentType },
      timeoutMs: this.client.createTimeoutMs,
    });
  }

  async list(): Promise<FunctionInfo[]> {
    return this.client.http.list<FunctionInfo>("/v1/functions", "functions");
  }

  async get(id: string): Promise<FunctionInfo> {
    return this.client.http.json<FunctionInfo>("GET", `/v1/functions/${seg(id)}`, { idempotent: true });
  }

  async versions(id: string): Promise<FunctionVersion[]> {
    return this.client.http.list<FunctionVersion>(`/v1/functions/${seg(id)}/versions`, "versions");
  }

  async delete(id: string): Promise<void> {
    await this.client.http.json("DELETE", `/v1/functions/${seg(id)}`, { idempotent: true });
  }

  /** Invoke with `payload` (any JSON value): the finished run, or with `async` the queued run at once. */
  async invoke(id: string, payload?: unknown, opts: { async?: boolean; signal?: AbortSignal } = {}): Promise<FunctionRun> {
    return this.client.http.json<FunctionRun>("POST", `/v1/functions/${seg(id)}/invoke`, {
      json: { payload: payload ?? null },
      query: opts.async ? { async: "1" } : undefined,
      timeoutMs: opts.async ? undefined : null,
      signal: opts.signal,
    });
  }

  async runs(id: string, opts: { limit?: number } = {}): Promise<FunctionRun[]> {
    return this.client.http.list<FunctionRun>(`/v1/functions/${seg(id)}/runs`, "runs", { limit: opts.limit });
  }

  async run(id: string, runId: string): Promise<FunctionRun> {
    return this.client.http.json<FunctionRun>("GET", `/v1/functions/${seg(id)}/runs/${seg(runId)}`, { idempotent: true });
  }
}

/** `client.schedules`: cron schedules of a function or of a command in a fresh sandbox. */
export class Schedules {
  constructor(private readonly client: ClientContext) {}

  async create(p: CreateScheduleParams): Promise<Schedule> {
    const body: Record<string, unknown> = { cron: p.cron };
    const fields: [string, unknown][] = [
      ["timezone", p.timezone], ["name", p.name], ["function_id", p.functionId], ["payload", p.payload], ["template", p.template],
      ["cmd", p.cmd], ["overlap", p.overlap], ["missed", p.missed], ["enabled", p.enabled], ["timeout_seconds", p.timeoutSeconds],
    ];
    for (const [k, v] of fields) if (v !== undefined) body[k] = v;
    return this.client.http.json<Schedule>("POST", "/v1/schedules", { json: body });
  }

  async list(): Promise<Schedule[]> {
    return this.client.http.list<Schedule>("/v1/schedules", "schedules");
  }

  async get(id: string): Promise<Schedule> {
    return this.client.http.json<Schedule>("GET", `/v1/schedules/${seg(id)}`, { idempotent: true });
  }

  async delete(id: string): Promise<void> {
    await this.client.http.json("DELETE", `/v1/schedules/${seg(id)}`, { idempotent: true });
  }

  async pause(id: string): Promise<Schedule> {
    return this.client.http.json<Schedule>("POST", `/v1/schedules/${seg(id)}/pause`, { idempotent: true });
  }

  /** Resume a paused schedule (instants while it was paused are not run). */
  async resume(id: string): Promise<Schedule> {
    return this.client.http.json<Schedule>("POST", `/v1/schedules/${seg(id)}/resume`, { idempotent: true });
  }

  /** Run the schedule now; resolves to the run. */
  async trigger(id: string): Promise<ScheduleRun> {
    return this.client.http.json<ScheduleRun>("POST", `/v1/schedules/${seg(id)}/trigger`);
  }

  async runs(id: string, opts: { limit?: number } = {}): Promise<ScheduleRun[]> {
    return this.client.http.list<ScheduleRun>(`/v1/schedules/${seg(id)}/runs`, "runs", { limit: opts.limit });
  }
}
