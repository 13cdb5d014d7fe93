// Git-deployed apps (`client.apps`): docs/apps.md.
import type { ClientContext } from "./sandbox.js";

const seg = (s: string): string => encodeURIComponent(s);

/** Overrides of the detected plan (unset fields are detected). */
export interface AppBuild {
  framework?: "next" | "vite" | "cra" | "node" | "static" | "python";
  install?: string;
  build?: string;
  start?: string;
  port?: number;
}

/** What a deploy runs: detected from the source, the app's overrides applied. */
export interface AppPlan {
  framework: string;
  package_manager?: "npm" | "pnpm" | "yarn" | "bun";
  install: string;
  build: string;
  start: string;
  port: number;
  found: string[];
  /** Why the source cannot deploy as it is, and what to set. */
  problem?: string;
}

/** What create and update take (update: any field but the name). */
export interface AppSpec {
  name?: string;
  branch?: string;
  env?: Record<string, string>;
  /** In the build's and the app's environment; stored sealed, redacted from logs, never answered. */
  secrets?: Record<string, string>;
  /** Update: variables added or changed, the others kept. */
  setEnv?: Record<string, string>;
  /** Update: secrets added or changed, the others kept. */
  setSecrets?: Record<string, string>;
  /** Update: names removed from env or secrets (each must be set). */
  unset?: string[];
  build?: AppBuild;
  vcpus?: number;
  memoryMib?: number;
  suspendAfterSeconds?: number;
  minInstances?: number;
  healthTimeoutSeconds?: number;
  drainTimeoutSeconds?: number;
}

/** An app. */
export interface App {
  id: string;
  name: string;
  branch: string;
  url?: string;
  git_url?: string;
  github_repo?: string;
  live_deployment_id?: string;
  env: Record<string, string>;
  secret_names: string[];
  build: AppBuild;
  vcpus: number;
  memory_mib: number;
  suspend_after_seconds: number;
  min_instances: number;
  health_timeout_seconds: number;
  drain_timeout_seconds: number;
  created_at: string;
  updated_at: string;
}

/** The webhook to add to a GitHub repository. */
export interface GitHubHook {
  app_id: string;
  repo: string;
  branch: string;
  webhook_url: string;
  /** Shown once; connecting again makes a new one. */
  secret: string;
  /** A token was given: pushes are cloned with it. */
  private?: boolean;
}

/** One deploy of an app. */
export interface Deployment {
  id: string;
  app_id: string;
  state: "queued" | "building" | "deploying" | "live" | "failed" | "superseded";
  source: "upload" | "git";
  commit?: string;
  branch?: string;
  plan: AppPlan;
  error?: string;
  url?: string;
  snapshot_id?: string;
  sandbox_id?: string;
  build_ms?: number;
  created_at: string;
  finished_at?: string;
}

/** A branch preview of an app, served at `url` by its deployment. */
export interface AppPreview {
  slug: string;
  branch: string;
  deployment_id: string;
  url?: string;
}

function wireSpec(s: AppSpec): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const fields: [string, unknown][] = [
    ["name", s.name], ["branch", s.branch], ["env", s.env], ["secrets", s.secrets], ["set_env", s.setEnv],
    ["set_secrets", s.setSecrets], ["unset", s.unset], ["build", s.build], ["vcpus", s.vcpus],
    ["memory_mib", s.memoryMib], ["suspend_after_seconds", s.suspendAfterSeconds], ["min_instances", s.minInstances],
    ["health_timeout_seconds", s.healthTimeoutSeconds], ["drain_timeout_seconds", s.drainTimeoutSeconds],
  ];
  for (const [k, v] of fields) if (v !== undefined) out[k] = v;
  return out;
}

/** `client.apps`: apps built in microVMs, released as snapshots of the started app, switched blue-green. */
export class Apps {
  constructor(private readonly client: ClientContext) {}

  async create(spec: AppSpec & { name: string }): Promise<App> {
    return this.client.http.json<App>("POST", "/v1/apps", { json: wireSpec(spec) });
  }

  async list(): Promise<App[]> {
    return this.client.http.list<App>("/v1/apps", "apps");
  }

  /** An app by id or name. */
  async get(app: string): Promise<App> {
    return this.client.http.json<App>("GET", `/v1/apps/${seg(app)}`, { idempotent: true });
  }

  /** Change settings; they apply from the next deploy. */
  async update(app: string, spec: AppSpec): Promise<App> {
    return this.client.http.json<App>("PATCH", `/v1/apps/${seg(app)}`, { json: wireSpec(spec) });
  }

  async delete(app: string): Promise<void> {
    await this.client.http.json("DELETE", `/v1/apps/${seg(app)}`, { idempotent: true });
  }

  /**
   * Deploy a source archive (bytes of a .tar.gz or .zip; `pandastack app deploy` packs a directory); resolves to the
   * queued deployment. A `branch` other than the app's deploys its preview (`<app>--<branch>.apps.<domain>`); `clean`
   * skips the build cache (a new build sandbox, the install run).
   */
  async deploy(app: string, archive: Uint8Array, opts: { branch?: string; clean?: boolean } = {}): Promise<Deployment> {
    return this.client.http.json<Deployment>("POST", `/v1/apps/${seg(app)}/deployments`, {
      body: archive,
      headers: { "content-type": "application/gzip" },
      query: { branch: opts.branch, clean: opts.clean ? "true" : undefined },
    });
  }

  /**
   * Connect the app to GitHub repository `repo` ("owner/name"): the webhook URL and secret (shown once) to add there.
   * `token` reads a private repository (sealed on the server, never answered).
   */
  async connectGitHub(app: string, repo: string, opts: { branch?: string; token?: string } = {}): Promise<GitHubHook> {
    const body: Record<string, string> = { repo };
    if (opts.branch) body.branch = opts.branch;
    if (opts.token) body.token = opts.token;
    return this.client.http.json<GitHubHook>("POST", `/v1/apps/${seg(app)}/github`, { json: body });
  }

  async deployments(app: string, opts: { limit?: number } = {}): Promise<Deployment[]> {
    return this.client.http.list<Deployment>(`/v1/apps/${seg(app)}/deployments`, "deployments", { limit: opts.limit });
  }

  async deployment(app: string, id: string): Promise<Deployment> {
    return this.client.http.json<Deployment>("GET", `/v1/apps/${seg(app)}/deployments/${seg(id)}`, { idempotent: true });
  }

  /** Poll a deployment until it is live or failed (rejects after `timeoutMs`, default 15 min). */
  async wait(app: string, id: string, opts: { timeoutMs?: number; intervalMs?: number } = {}): Promise<Deployment> {
    const deadline = Date.now() + (opts.timeoutMs ?? 900_000);
    for (;;) {
      const d = await this.deployment(app, id);
      if (d.state === "live" || d.state === "failed") return d;
      if (Date.now() > deadline) throw new Error(`deployment ${id} is still ${d.state}`);
      await new Promise((r) => setTimeout(r, opts.intervalMs ?? 500));
    }
  }

  /** A deployment's build logs so far (secrets redacted). */
  async buildLogs(app: string, id: string): Promise<string> {
    return (await this.client.http.request("GET", `/v1/apps/${seg(app)}/deployments/${seg(id)}/logs`, { idempotent: true })).text();
  }

  /** The live instances' output so far, each line prefixed `[sb_…] ` (secrets redacted). */
  async logs(app: string): Promise<string> {
    return (await this.client.http.request("GET", `/v1/apps/${seg(app)}/logs`, { idempotent: true })).text();
  }

  /** The app's branch previews. */
  async previews(app: string): Promise<AppPreview[]> {
    return this.client.http.list<AppPreview>(`/v1/apps/${seg(app)}/previews`, "previews");
  }

  /** Delete a branch's preview (by branch or slug): its route and instance go; its release stays for a rollback. */
  async deletePreview(app: string, branch: string): Promise<void> {
    await this.client.http.json("DELETE", `/v1/apps/${seg(app)}/previews/${seg(branch)}`, { idempotent: true });
  }

  /** Serve an earlier deployment's release again (no rebuild). */
  async rollback(app: string, deploymentId: string): Promise<Deployment> {
    return this.client.http.json<Deployment>("POST", `/v1/apps/${seg(app)}/rollback`, { json: { deployment_id: deploymentId } });
  }
}
