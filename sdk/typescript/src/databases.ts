// Managed PostgreSQL databases (`client.databases`): docs/databases.md.
import type { ClientContext } from "./sandbox.js";

const seg = (s: string): string => encodeURIComponent(s);

/** How to reach a database. `uri` carries the password only in a create's answer. */
export interface DatabaseConnection {
  uri: string;
  pooler_uri?: string;
  /** Neon's /sql endpoint (the connection string is the credential). */
  http_url?: string;
  host: string;
  port: number;
  user: string;
  database: string;
}

/** A managed PostgreSQL database. */
export interface Database {
  id: string;
  name: string;
  state: string;
  version: string;
  vcpus: number;
  memory_mib: number;
  storage_gib: number;
  extensions: string[];
  suspend_after_seconds: number;
  sandbox_id: string;
  parent_id?: string;
  connection: DatabaseConnection;
  /** The owner's password: only in the create's answer (shown once). */
  password?: string;
  note?: string;
  created_at: string;
}

/** What a create takes. */
export interface CreateDatabaseParams {
  name: string;
  /** "17" (default); "16" is taken as an alias of 17. */
  version?: string;
  extensions?: string[];
  vcpus?: number;
  memoryMib?: number;
  storageGib?: number;
  suspendAfterSeconds?: number;
}

/** A statement's result: rows as arrays of PostgreSQL text values (null for NULL). */
/** A backup: a snapshot of the database's VM. */
export interface DatabaseBackup {
  id: string;
  database_id: string;
  size_bytes: number;
  created_at: string;
  /** In the blob store too: the backup outlives its host. */
  published: boolean;
}

export interface QueryResult {
  fields: { name: string; dataTypeID: number }[];
  rows: (string | null)[][];
  command: string;
  rowCount: number;
}

/** `client.databases`: managed PostgreSQL, each database its own microVM. */
export class Databases {
  constructor(private readonly client: ClientContext) {}

  /** Create a database; the answer's `password` (and `connection.uri`) is shown once. */
  async create(p: CreateDatabaseParams): Promise<Database> {
    const body: Record<string, unknown> = { name: p.name };
    const fields: [string, unknown][] = [
      ["version", p.version], ["extensions", p.extensions], ["vcpus", p.vcpus], ["memory_mib", p.memoryMib],
      ["storage_gib", p.storageGib], ["suspend_after_seconds", p.suspendAfterSeconds],
    ];
    for (const [k, v] of fields) if (v !== undefined) body[k] = v;
    return this.client.http.json<Database>("POST", "/v1/databases", { json: body, timeoutMs: this.client.createTimeoutMs });
  }

  async list(): Promise<Database[]> {
    return this.client.http.list<Database>("/v1/databases", "databases");
  }

  async get(id: string): Promise<Database> {
    return this.client.http.json<Database>("GET", `/v1/databases/${seg(id)}`, { idempotent: true });
  }

  /** Delete the database and its data. */
  async delete(id: string): Promise<void> {
    await this.client.http.json("DELETE", `/v1/databases/${seg(id)}`, { idempotent: true });
  }

  /** A new database that is a copy-on-write fork of this one now (same owner and password). */
  async branch(id: string, name: string): Promise<Database> {
    return this.client.http.json<Database>("POST", `/v1/databases/${seg(id)}/branches`, { json: { name }, timeoutMs: this.client.createTimeoutMs });
  }

  /** Give the owner a new password; the answer's `password` is shown once. */
  async rotatePassword(id: string): Promise<Database> {
    return this.client.http.json<Database>("POST", `/v1/databases/${seg(id)}/password`);
  }

  /** Size, sessions, transactions and uptime. */
  async stats(id: string): Promise<{ size_bytes: number; connections: number; transactions_committed: number; transactions_rolled_back: number; uptime_seconds: number }> {
    return this.client.http.json("GET", `/v1/databases/${seg(id)}/stats`, { idempotent: true });
  }

  /** The end of the database's postgres log (default 64 KiB). */
  async logs(id: string, opts: { bytes?: number } = {}): Promise<string> {
    const resp = await this.client.http.request("GET", `/v1/databases/${seg(id)}/logs`, { idempotent: true, query: { bytes: opts.bytes } });
    return resp.text();
  }

  /** Back the database up now (a snapshot of its VM; `published`: in the blob store, it outlives its host). */
  async backup(id: string): Promise<DatabaseBackup> {
    return this.client.http.json("POST", `/v1/databases/${seg(id)}/backups`, { timeoutMs: this.client.createTimeoutMs });
  }

  async backups(id: string): Promise<DatabaseBackup[]> {
    return this.client.http.list<DatabaseBackup>(`/v1/databases/${seg(id)}/backups`, "backups");
  }

  /** A NEW database: recovered to the instant `toTime` (WAL archive, with a blob store), or from backup `backupId`, else from the newest backup. */
  async restore(id: string, p: { name: string; toTime?: string; backupId?: string }): Promise<Database> {
    const body: Record<string, unknown> = { name: p.name };
    if (p.toTime !== undefined) body.to_time = p.toTime;
    if (p.backupId !== undefined) body.backup_id = p.backupId;
    return this.client.http.json<Database>("POST", `/v1/databases/${seg(id)}/restore`, { json: body, timeoutMs: this.client.createTimeoutMs });
  }

  /** Run one statement as the owner; `params` fill $1, $2, …. */
  async query(id: string, query: string, params?: unknown[]): Promise<QueryResult> {
    const body: Record<string, unknown> = { query };
    if (params !== undefined) body.params = params;
    return this.client.http.json<QueryResult>("POST", `/v1/databases/${seg(id)}/query`, { json: body });
  }
}
