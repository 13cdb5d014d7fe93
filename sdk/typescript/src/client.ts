import { ConfigurationError } from "./errors.js";
import { Transport, type FetchLike } from "./http.js";
import { Sandboxes, Snapshots, Templates, Volumes, registerClientFactory, type ClientContext, type SandboxData } from "./sandbox.js";
import { Databases } from "./databases.js";
import { Apps, type Deployment } from "./apps.js";
import { Functions, Schedules } from "./functions.js";
import { Webhooks, type DatabaseEvent, type ProcessExit } from "./webhooks.js";

/** Where the hosted API lives; a self-hosted `pandastack up` prints its own base URL. */
export const DEFAULT_BASE_URL = "https://api.pandastack.ai";

export interface PandaStackOptions {
  /** API key (`pds_…`). Default: `PANDASTACK_API_KEY`, else `PANDASTACK_TOKEN`. */
  apiKey?: string;
  /** Alias of `apiKey`. */
  token?: string;
  /** Default: `PANDASTACK_BASE_URL`, else https://api.pandastack.ai. */
  baseUrl?: string;
  /** Wait this long for an ordinary answer (ms; default 60 000; null for no limit). */
  timeoutMs?: number | null;
  /** Wait this long for create/fork/snapshot/hibernate/wake (ms; default 900 000: a first create bakes). */
  createTimeoutMs?: number | null;
  /** Retries of idempotent calls on 429/503 and broken connections (default 3). */
  maxRetries?: number;
  /** A fetch implementation (default: the global fetch of Node 18+). */
  fetch?: FetchLike;
  /** Where to read PANDASTACK_* variables (default: process.env). */
  env?: Record<string, string | undefined>;
}

function processEnv(): Record<string, string | undefined> {
  const p = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return p?.env ?? {};
}

/**
 * A client of the PandaStack API.
 *
 * ```ts
 * const client = new PandaStack();   // PANDASTACK_API_KEY, PANDASTACK_BASE_URL
 * const sb = await client.sandboxes.create({ template: "base", ttlSeconds: 600 });
 * ```
 */
export class PandaStack {
  readonly baseUrl: string;
  readonly sandboxes: Sandboxes;
  /** The same object as `sandboxes`. */
  readonly sandbox: Sandboxes;
  readonly snapshots: Snapshots;
  readonly volumes: Volumes;
  readonly templates: Templates;
  readonly functions: Functions;
  readonly databases: Databases;
  readonly schedules: Schedules;
  readonly apps: Apps;
  /** Signed HTTP deliveries of the team's events (docs/events.md). */
  readonly webhooks: Webhooks;
  /** @internal */
  declare readonly http: Transport;
  /** @internal */
  declare readonly createTimeoutMs: number | null;

  constructor(options: PandaStackOptions = {}) {
    const env = options.env ?? processEnv();
    const key = options.apiKey || options.token || env.PANDASTACK_API_KEY || env.PANDASTACK_TOKEN;
    if (!key) {
      throw new ConfigurationError("no API key: pass new PandaStack({ apiKey }) or set PANDASTACK_API_KEY (pds_…)");
    }
    this.baseUrl = (options.baseUrl || env.PANDASTACK_BASE_URL || DEFAULT_BASE_URL).replace(/\/+$/, "");
    const http = new Transport({
      baseUrl: this.baseUrl,
      token: key.trim(),
      timeoutMs: options.timeoutMs === undefined ? 60_000 : options.timeoutMs,
      maxRetries: options.maxRetries ?? 3,
      fetch: options.fetch,
    });
    Object.defineProperty(this, "http", { value: http, enumerable: false });
    Object.defineProperty(this, "createTimeoutMs", {
      value: options.createTimeoutMs === undefined ? 900_000 : options.createTimeoutMs,
      enumerable: false,
    });
    const ctx: ClientContext = this;
    this.sandboxes = new Sandboxes(ctx);
    this.sandbox = this.sandboxes;
    this.snapshots = new Snapshots(ctx);
    this.templates = new Templates(ctx);
    this.volumes = new Volumes(ctx);
    this.functions = new Functions(ctx);
    this.databases = new Databases(ctx);
    this.schedules = new Schedules(ctx);
    this.apps = new Apps(ctx);
    this.webhooks = new Webhooks(ctx);
  }

  /**
   * What the deployment enforces for every team (`GET /v1/info`): the destinations no egress
   * policy opens, and the private ranges the operator opened.
   */
  async info(): Promise<DeploymentInfo> {
    return this.http.json<DeploymentInfo>("GET", "/v1/info", { idempotent: true });
  }

  /** The team's use against its quotas (`GET /v1/usage`); `limit` null means no limit. */
  async usage(): Promise<Usage> {
    return this.http.json<Usage>("GET", "/v1/usage", { idempotent: true });
  }

  /**
   * One page of the team's audit log, newest first (`GET /v1/audit`, admin keys): every mutating
   * call with its key, route, resource, status, request id and source. Pass `nextCursor` back as
   * `cursor` for the next page.
   */
  async audit(opts: { since?: string | Date; resource?: string; limit?: number; cursor?: string } = {}): Promise<AuditPage> {
    const since = opts.since instanceof Date ? opts.since.toISOString() : opts.since;
    const page = await this.http.json<{ entries: AuditEntry[]; next_cursor: string | null }>("GET", "/v1/audit", {
      idempotent: true,
      query: { since, resource: opts.resource, limit: opts.limit, cursor: opts.cursor },
    });
    return { entries: page.entries ?? [], nextCursor: page.next_cursor ?? null };
  }

  /**
   * Follow the team's changes (`GET /v1/events`): `ready`, then a `sandbox` event whenever one is
   * created or changes state, host or error, a `deployment` event whenever an app deployment is
   * made or changes state (built, failed, switched to, superseded), a `change` event for every call that changed one of
   * the team's resources, and `ping` after 15 s of silence. Ends when the
   * key is revoked; stop early with `signal` (or by leaving the `for await`).
   */
  async *events(opts: { signal?: AbortSignal; timeoutMs?: number | null } = {}): AsyncGenerator<SandboxEvent, void, undefined> {
    for await (const line of this.http.lines("GET", "/v1/events", { timeoutMs: opts.timeoutMs ?? 60_000, signal: opts.signal })) {
      yield line as unknown as SandboxEvent;
    }
  }
}

/** One line of `GET /v1/events`. */
export interface SandboxEvent {
  type: "ready" | "sandbox" | "deployment" | "change" | "process.exited" | "database.backed_up" | "database.suspended" | "database.restarted" | "ping";
  at: string;
  /** The sandbox as it now is (type `sandbox`). */
  sandbox?: SandboxData;
  /** The app deployment as it now is (type `deployment`). */
  deployment?: Deployment;
  /** A call of one of the team's keys that changed a resource (type `change`; not who made it). */
  change?: { method: string; route: string; resource_id: string; status: number };
  /** A background process that ended (type `process.exited`). */
  process?: ProcessExit;
  /** A database backed up, suspended when idle, or restarted in a new VM after its VM died (types `database.backed_up`, `database.suspended`, `database.restarted`). */
  database?: DatabaseEvent;
}

/** One quota: what is used and the limit (null: none). */
export interface UsageItem {
  used: number;
  limit: number | null;
}

/** `GET /v1/usage`. */
export interface Usage {
  team_id: string;
  sandboxes: UsageItem;
  vcpus: UsageItem;
  memory_mib: UsageItem;
  volumes: UsageItem;
  volume_mib: UsageItem;
  databases: UsageItem;
  apps: UsageItem;
  functions: UsageItem;
  snapshot_mib: UsageItem;
}

/** One audited call (`GET /v1/audit`). */
export interface AuditEntry {
  id: string;
  key_id: string;
  method: string;
  route: string;
  resource_id: string;
  status: number;
  request_id: string;
  source: string;
  created_at: string;
}

/** A page of the audit log. */
export interface AuditPage {
  entries: AuditEntry[];
  nextCursor: string | null;
}

/** One address range and why it is special. */
export interface InfoRange {
  range: string;
  why: string;
}

/** `GET /v1/info`. */
export interface DeploymentInfo {
  version: string;
  egress: { blocked: InfoRange[]; private: InfoRange[]; open: string[]; also_blocked: string[] };
  /** Sandbox ports are served at `<port>-<id>.<proxy_domain>` (absent: no port proxy). */
  proxy_domain?: string;
}

registerClientFactory((options) => new PandaStack(options as PandaStackOptions));
