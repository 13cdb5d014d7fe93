// Webhooks (`client.webhooks`) and verifying their deliveries (`verifyWebhook`): docs/events.md.
import type { ClientContext } from "./sandbox.js";

const seg = (s: string): string => encodeURIComponent(s);

/** Event types a webhook may ask for; "*" is all. */
export type WebhookEventType =
  | "sandbox.created" | "sandbox.woken" | "sandbox.hibernated" | "sandbox.killed" | "sandbox.ttl_expired"
  | "sandbox.lost" | "sandbox.error" | "template.built" | "process.exited" | "database.backed_up" | "database.suspended" | "database.restarted"
  | "deployment.created" | "deployment.building" | "deployment.deploying" | "deployment.live"
  | "deployment.failed" | "deployment.superseded" | "change" | "*";

/** A webhook; `secret` (whsec_…) is in create's answer only. */
export interface Webhook {
  id: string;
  url: string;
  events: string[];
  created_at: string;
  secret?: string;
}

/** One event sent (or to send) to a webhook. */
export interface WebhookDelivery {
  id: string;
  webhook_id: string;
  event: string;
  state: "pending" | "succeeded" | "failed";
  attempts: number;
  status_code?: number;
  error?: string;
  next_attempt_at?: string;
  created_at: string;
  updated_at: string;
}

/** The JSON body a webhook receives. */
export interface WebhookEvent {
  type: string;
  at: string;
  webhook_id: string;
  sandbox?: Record<string, unknown>;
  template?: Record<string, unknown>;
  change?: { method: string; route: string; resource_id: string; status: number };
  /** The process that ended (type `process.exited`). */
  process?: ProcessExit;
  /** The app deployment (types `deployment.*`), as `apps.deployment()` returns it. */
  deployment?: Record<string, unknown>;
  /** The database backed up, suspended or restarted (types `database.backed_up`, `database.suspended`, `database.restarted`). */
  database?: DatabaseEvent;
}

/** A database event: the backup taken and what took it (`database.backed_up`), how long it had no client (`database.suspended`), or why its VM ended (`database.restarted`: `trigger` is `vm_failed` or `vm_killed`). */
export interface DatabaseEvent {
  id: string;
  name: string;
  backup_id?: string;
  trigger?: "creation" | "schedule" | "request";
  idle_seconds?: number;
}

/** A background process that ended (`process.exited`): `exit_code` is 128 + the signal's number when a signal ended it. */
export interface ProcessExit {
  sandbox_id: string;
  pid: number;
  tag?: string;
  exit_code: number;
  signal?: string;
  started_at: string;
  exited_at: string;
}

export class Webhooks {
  constructor(private readonly client: ClientContext) {}

  /** Create a webhook; keep the answer's `secret`: it is shown this once. */
  async create(p: { url: string; events: WebhookEventType[] }): Promise<Webhook> {
    return this.client.http.json<Webhook>("POST", "/v1/webhooks", { json: { url: p.url, events: p.events } });
  }

  async list(): Promise<Webhook[]> {
    return this.client.http.list<Webhook>("/v1/webhooks", "webhooks");
  }

  async get(id: string): Promise<Webhook> {
    return this.client.http.json<Webhook>("GET", `/v1/webhooks/${seg(id)}`, { idempotent: true });
  }

  async delete(id: string): Promise<void> {
    await this.client.http.json("DELETE", `/v1/webhooks/${seg(id)}`, { idempotent: true });
  }

  /** The webhook's deliveries, newest first. */
  async deliveries(id: string, opts: { limit?: number } = {}): Promise<WebhookDelivery[]> {
    return this.client.http.list<WebhookDelivery>(`/v1/webhooks/${seg(id)}/deliveries`, "deliveries", { limit: opts.limit });
  }
}

const hex = (b: ArrayBuffer): string => [...new Uint8Array(b)].map((x) => x.toString(16).padStart(2, "0")).join("");

/** The Web Crypto subset verifyWebhook uses (globalThis.crypto: Node 19+, browsers, Deno, Bun). */
interface HmacSubtle {
  importKey(format: "raw", key: Uint8Array, alg: { name: "HMAC"; hash: "SHA-256" }, extractable: false, usages: ["sign"]): Promise<unknown>;
  sign(alg: "HMAC", key: unknown, data: Uint8Array): Promise<ArrayBuffer>;
}

function subtle(): HmacSubtle {
  const s = (globalThis as { crypto?: { subtle?: HmacSubtle } }).crypto?.subtle;
  if (!s) throw new Error("verifyWebhook needs Web Crypto (globalThis.crypto.subtle): Node 19 or newer, or a browser");
  return s;
}

/**
 * Verify a delivery: `signature` is its PandaStack-Signature header, `body` the raw body as
 * received. Resolves to the parsed event; throws if the signature does not match `secret` or is
 * older (or newer) than `toleranceSeconds` (default 300).
 */
export async function verifyWebhook(
  secret: string,
  signature: string | null | undefined,
  body: string | Uint8Array,
  options: { toleranceSeconds?: number; now?: Date } = {},
): Promise<WebhookEvent> {
  const parts = Object.fromEntries((signature ?? "").split(",").map((p) => p.trim().split("=", 2) as [string, string]));
  const t = Number(parts.t);
  if (!Number.isInteger(t) || !parts.v1) throw new Error("malformed PandaStack-Signature header");
  const now = (options.now ?? new Date()).getTime() / 1000;
  if (Math.abs(now - t) > (options.toleranceSeconds ?? 300)) throw new Error("PandaStack-Signature is too old (or from the future)");
  const bytes = typeof body === "string" ? new TextEncoder().encode(body) : body;
  const s = subtle();
  const key = await s.importKey("raw", new TextEncoder().encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const msg = new Uint8Array([...new TextEncoder().encode(`${t}.`), ...bytes]);
  const want = hex(await s.sign("HMAC", key, msg));
  let diff = want.length ^ parts.v1.length;
  for (let i = 0; i < Math.min(want.length, parts.v1.length); i++) diff |= want.charCodeAt(i) ^ parts.v1.charCodeAt(i);
  if (diff !== 0) throw new Error("PandaStack-Signature does not match");
  return JSON.parse(new TextDecoder().decode(bytes)) as WebhookEvent;
}
