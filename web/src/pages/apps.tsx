// Apps (/v1/apps, docs/apps.md): list and create, deploy a source archive, deployments with their
// state, live build logs and runtime logs (follow=1 text streams), rollback, env and secrets
// (secret values are write-only: the API answers only their names, and so does this page).
import { useEffect, useRef, useState } from "preact/hooks";
import { call, onEvent, post, q, textStream, type App, type AppBuild, type Deployment, type GitHubHook } from "../api";
import { ActionButton, Copy, DeleteButton, ErrorBox, Facts, Field, Form, Link, PageHead, State, Table, Time, message, navigate, useLive } from "../ui";

const base = (id: string) => "/v1/apps/" + q(id);

/** useDeployments calls reload on every deployment event (of appId, or any app's): a build
 * that ends, fails or is switched to is no call, so no "change" event says so. */
function useDeployments(appId: string | null, reload: () => void): void {
  useEffect(() => onEvent((ev) => ev.deployment && (appId === null || ev.deployment.app_id === appId) && reload()), [appId, reload]);
}

type Pair = { k: string; v: string };

/** Vars: a key/value list editor; secret values are password inputs and start empty. */
function Vars(props: { label: string; pairs: Pair[]; set: (p: Pair[]) => void; secret?: boolean }) {
  const { pairs, set } = props;
  const edit = (i: number, p: Partial<Pair>) => set(pairs.map((x, j) => (j === i ? { ...x, ...p } : x)));
  return (
    <fieldset class="vars">
      <legend>{props.label}</legend>
      {pairs.map((p, i) => (
        <div class="var-row">
          <Field label={`${props.label} name ${i + 1}`}>
            <input class="mono" value={p.k} onInput={(e) => edit(i, { k: e.currentTarget.value })} />
          </Field>
          <Field label={`${props.label} value ${i + 1}`}>
            {props.secret ? (
              <input class="mono" type="password" autocomplete="off" value={p.v} onInput={(e) => edit(i, { v: e.currentTarget.value })} />
            ) : (
              <input class="mono" value={p.v} onInput={(e) => edit(i, { v: e.currentTarget.value })} />
            )}
          </Field>
          <button type="button" class="small" aria-label={`Remove ${props.label.toLowerCase()} ${i + 1}`} onClick={() => set(pairs.filter((_, j) => j !== i))}>
            Remove
          </button>
        </div>
      ))}
      <button type="button" class="small" onClick={() => set([...pairs, { k: "", v: "" }])}>
        Add {props.secret ? "secret" : "variable"}
      </button>
    </fieldset>
  );
}

const toMap = (pairs: Pair[]) => Object.fromEntries(pairs.filter((p) => p.k.trim()).map((p) => [p.k.trim(), p.v]));

export function Apps() {
  const list = useLive<{ apps: App[] }>("/v1/apps", ["/v1/apps"]);
  useDeployments(null, list.reload);
  const [name, setName] = useState("");
  const [branch, setBranch] = useState("main");
  const [env, setEnv] = useState<Pair[]>([]);
  const [secrets, setSecrets] = useState<Pair[]>([]);
  return (
    <>
      <PageHead title="Apps" />
      <Form label="Create an app" submit="Create app" onSubmit={async () => {
          const a = await post<App>("/v1/apps", { name, branch, env: toMap(env), secrets: toMap(secrets) });
          navigate("/apps/" + a.id);
        }}>
        <div class="form inline plain">
          <Field label="Name" hint="the host name: <name>.apps.<domain>">
            <input value={name} onInput={(e) => setName(e.currentTarget.value)} required />
          </Field>
          <Field label="Branch">
            <input value={branch} onInput={(e) => setBranch(e.currentTarget.value)} />
          </Field>
        </div>
        <Vars label="Environment" pairs={env} set={setEnv} />
        <Vars label="Secret" pairs={secrets} set={setSecrets} secret />
      </Form>
      <ErrorBox error={list.error} />
      <Table label="Apps" rows={list.data?.apps} loading={list.loading} rowKey={(a) => a.id} empty="No apps."
        cols={[
          { label: "Name", cell: (a) => <Link href={"/apps/" + a.id}>{a.name}</Link> },
          { label: "URL", cell: (a) => (a.url ? <a href={a.url}>{a.url}</a> : "—"), class: "mono" },
          { label: "Branch", cell: (a) => a.branch },
          { label: "Live deployment", cell: (a) => a.live_deployment_id ?? "—", class: "mono" },
          { label: "Created", cell: (a) => <Time at={a.created_at} /> },
        ]}
      />
    </>
  );
}

/** LogView follows a text log (follow=1) while shown; the stream ends with the page or the button. */
function LogView({ path, label }: { path: string; label: string }) {
  const [text, setText] = useState("");
  const [err, setErr] = useState("");
  const [live, setLive] = useState(true);
  const pre = useRef<HTMLPreElement>(null);
  useEffect(() => {
    if (!live) return;
    const ac = new AbortController();
    setText("");
    setErr("");
    textStream(path + "?follow=1", ac.signal, (s) => setText((t) => (t + s).slice(-200_000))).then(
      () => !ac.signal.aborted && setLive(false),
      (e) => {
        if (ac.signal.aborted) return;
        setErr(message(e));
        setLive(false);
      },
    );
    return () => ac.abort();
  }, [path, live]);
  useEffect(() => {
    if (pre.current) pre.current.scrollTop = pre.current.scrollHeight;
  }, [text]);
  return (
    <section aria-label={label}>
      <div class="btn-row">
        <h3>{label}</h3>
        <span class="muted">{live ? "following…" : "stopped"}</span>
        <button type="button" class="small" onClick={() => setLive(!live)}>
          {live ? "Stop following" : "Follow again"}
        </button>
      </div>
      <ErrorBox error={err} />
      <pre class="log" ref={pre} tabIndex={0} data-log={label}>
        {text || "(no output yet)"}
      </pre>
    </section>
  );
}

export function AppDetail({ id }: { id: string }) {
  const app = useLive<App>(base(id), ["/v1/apps"]);
  const deps = useLive<{ deployments: Deployment[] }>(base(id) + "/deployments", ["/v1/apps/{id}/deployments", "/v1/apps/{id}/rollback"]);
  // Builds run in the background: their progress comes as deployment events.
  const a0 = app.data?.id ?? null;
  useDeployments(a0, deps.reload);
  useDeployments(a0, app.reload);
  const [shown, setShown] = useState<string | null>(null);
  const [err, setErr] = useState("");
  const file = useRef<HTMLInputElement>(null);
  const a = app.data;
  return (
    <>
      <PageHead title={"App " + (a?.name ?? id)}>
        <DeleteButton path={base(id)} confirm="Delete this app, its deployments and its route?" onError={setErr} onDone={() => navigate("/apps")} />
      </PageHead>
      <ErrorBox error={app.error || err} />
      {a && (
        <Facts
          items={[
            a.url && ["URL", <a href={a.url} class="mono">{a.url}</a>],
            ["Branch", a.branch],
            ["Live deployment", <span class="mono" data-live={a.live_deployment_id ?? ""}>{a.live_deployment_id ?? "none yet"}</span>],
            a.github_repo && ["GitHub", a.github_repo],
            ["Size", `${a.vcpus} vCPU · ` + (a.memory_mib ? a.memory_mib + " MiB" : "the template's memory")],
            ["Suspends after", a.suspend_after_seconds ? a.suspend_after_seconds + " s idle" : "never"],
            ["Created", <Time at={a.created_at} />],
          ]}
        />
      )}
      <h2>Deploy</h2>
      <Form label="Deploy a source archive" submit="Deploy" class="inline" onSubmit={async () => {
          const f = file.current?.files?.[0];
          if (!f) throw new Error("choose the source (.tar.gz or .zip) first");
          const zip = f.name.endsWith(".zip");
          const d = await call<Deployment>("POST", base(id) + "/deployments", { raw: f, contentType: zip ? "application/zip" : "application/gzip" });
          setShown(d.id);
          deps.reload();
        }}>
        <Field label="Source archive" hint="the app's directory as .tar.gz or .zip (at most 32 MiB)">
          <input type="file" ref={file} accept=".tar.gz,.tgz,.zip" />
        </Field>
      </Form>
      <h2>Deployments</h2>
      <ErrorBox error={deps.error} />
      <Table label="Deployments" rows={deps.data?.deployments} loading={deps.loading} rowKey={(d) => d.id} empty="No deployments yet."
        cols={[
          { label: "Deployment", cell: (d) => d.id, class: "mono" },
          { label: "State", cell: (d) => <State state={d.state} /> },
          { label: "Source", cell: (d) => d.source + (d.commit ? " " + d.commit.slice(0, 12) : "") + (d.branch ? " (" + d.branch + ")" : "") },
          { label: "Plan", cell: (d) => d.plan.framework + ": " + d.plan.start, class: "mono" },
          { label: "Build", cell: (d) => (d.build_ms !== undefined ? (d.build_ms / 1000).toFixed(1) + " s" : "—") },
          { label: "Created", cell: (d) => <Time at={d.created_at} /> },
          {
            label: "",
            cell: (d) => (
              <div class="btn-row">
                <button type="button" class="small" aria-pressed={shown === d.id} onClick={() => setShown(shown === d.id ? null : d.id)}>
                  Build logs
                </button>
                {d.id !== a?.live_deployment_id && d.snapshot_id && (
                  <ActionButton class="small" label={"Roll back to " + d.id} confirm="Serve this deployment's release again?" onError={setErr}
                    onClick={async () => {
                      await post(base(id) + "/rollback", { deployment_id: d.id });
                      deps.reload();
                      app.reload();
                    }}>
                    Roll back
                  </ActionButton>
                )}
              </div>
            ),
          },
        ]}
      />
      {deps.data?.deployments.find((d) => d.id === shown)?.error && <p class="error">{deps.data.deployments.find((d) => d.id === shown)?.error}</p>}
      {shown && <LogView key={shown} path={base(id) + "/deployments/" + q(shown) + "/logs"} label={"Build log " + shown} />}
      {a?.live_deployment_id && <LogView key={"rt" + a.live_deployment_id} path={base(id) + "/logs"} label="Runtime log" />}
      {a && <Settings app={a} onSaved={app.reload} />}
      {a && <BuildSettings app={a} onSaved={app.reload} />}
      {a && <GitHub app={a} onSaved={app.reload} />}
    </>
  );
}

/** Settings: env (values shown) and secrets (names only; new values replace the whole set). */
function Settings({ app, onSaved }: { app: App; onSaved: () => void }) {
  const [env, setEnv] = useState<Pair[]>(() => Object.entries(app.env ?? {}).map(([k, v]) => ({ k, v })));
  const [secrets, setSecrets] = useState<Pair[]>([]);
  const [saved, setSaved] = useState("");
  return (
    <section aria-label="Environment and secrets">
      <h2>Environment and secrets</h2>
      <p class="muted">Changes apply from the next deploy.</p>
      <Form label="Environment" submit="Save environment" onSubmit={async () => {
          await call("PATCH", base(app.id), { body: { env: toMap(env) } });
          setSaved("environment saved");
          onSaved();
        }}>
        <Vars label="Environment" pairs={env} set={setEnv} />
      </Form>
      <p>
        Secrets:{" "}
        {app.secret_names.length ? (
          app.secret_names.map((n) => (
            <span class="secret-name mono" data-secret-name={n}>
              {n}=••••••{" "}
            </span>
          ))
        ) : (
          <span class="muted">none</span>
        )}
      </p>
      <Form label="Replace secrets" submit="Replace secrets" onSubmit={async () => {
          await call("PATCH", base(app.id), { body: { secrets: toMap(secrets) } });
          setSecrets([]);
          setSaved("secrets replaced");
          onSaved();
        }}>
        <p class="hint">Values are never shown back: enter every secret the app should have (this replaces the set).</p>
        <Vars label="Secret" pairs={secrets} set={setSecrets} secret />
      </Form>
      <Saved text={saved} />
    </section>
  );
}

/** Saved: what the last save did (a status line), or nothing. */
const Saved = ({ text }: { text: string }) =>
  text ? (
    <p role="status" class="muted">
      {text}
    </p>
  ) : null;

const frameworks = ["next", "vite", "cra", "node", "static", "python"] as const;

/** num is a number input's value as an integer (empty: 0). */
const num = (v: string) => (v.trim() === "" ? 0 : Math.trunc(Number(v)));

/** BuildSettings: the detected plan's overrides (empty: detected) and the app's sizes and timeouts. */
function BuildSettings({ app, onSaved }: { app: App; onSaved: () => void }) {
  const [b, setB] = useState<Record<"framework" | "install" | "build" | "start" | "port", string>>({
    framework: app.build.framework ?? "",
    install: app.build.install ?? "",
    build: app.build.build ?? "",
    start: app.build.start ?? "",
    port: app.build.port ? String(app.build.port) : "",
  });
  const [n, setN] = useState<Record<string, string>>({
    vcpus: String(app.vcpus),
    memory_mib: app.memory_mib ? String(app.memory_mib) : "",
    suspend_after_seconds: String(app.suspend_after_seconds),
    min_instances: String(app.min_instances),
    health_timeout_seconds: String(app.health_timeout_seconds),
    drain_timeout_seconds: String(app.drain_timeout_seconds),
  });
  const [saved, setSaved] = useState("");
  const cmd = (k: "install" | "build" | "start", label: string, hint: string) => (
    <Field label={label} hint={hint}>
      <input class="mono" value={b[k]} maxLength={4096} placeholder="detected" onInput={(e) => setB({ ...b, [k]: e.currentTarget.value })} />
    </Field>
  );
  const int = (k: string, label: string, hint: string, min: number, max: number) => (
    <Field label={label} hint={hint}>
      <input type="number" min={min} max={max} value={n[k]} onInput={(e) => setN({ ...n, [k]: e.currentTarget.value })} />
    </Field>
  );
  return (
    <section aria-label="Build and size">
      <h2>Build and size</h2>
      <p class="muted">Empty fields are detected from the source (the deployments' Plan column shows what ran). Changes apply from the next deploy.</p>
      <Form label="Build settings" submit="Save build settings" onSubmit={async () => {
          const build: AppBuild = { install: b.install, build: b.build, start: b.start, port: num(b.port) };
          if (b.framework) build.framework = b.framework as AppBuild["framework"];
          const body: Record<string, unknown> = { build };
          // Only what changed: memory is checked against the base template (which must be baked).
          for (const [k, v] of Object.entries(n)) if (v.trim() !== "" && num(v) !== app[k as keyof App]) body[k] = num(v);
          await call("PATCH", base(app.id), { body });
          setSaved("build settings saved");
          onSaved();
        }}>
        <div class="form inline plain">
          <Field label="Framework">
            <select value={b.framework} onChange={(e) => setB({ ...b, framework: e.currentTarget.value })}>
              <option value="">detected</option>
              {frameworks.map((f) => (
                <option value={f}>{f}</option>
              ))}
            </select>
          </Field>
          {cmd("install", "Install command", "true: skip (node_modules uploaded)")}
          {cmd("build", "Build command", "")}
          {cmd("start", "Start command", "must listen on $PORT")}
          <Field label="Port" hint="PORT (default 8080)">
            <input type="number" min={1} max={65535} value={b.port} placeholder="8080" onInput={(e) => setB({ ...b, port: e.currentTarget.value })} />
          </Field>
        </div>
        <div class="form inline plain">
          {int("vcpus", "vCPUs", "1-64", 1, 64)}
          {int("memory_mib", "Memory (MiB)", "empty: the base template's", 1, 1 << 20)}
          {int("suspend_after_seconds", "Suspend after (seconds)", "idle; 0: never", 0, 86400)}
          <Field label="Minimum instances" hint="1 keeps it running">
            <select value={n.min_instances} onChange={(e) => setN({ ...n, min_instances: e.currentTarget.value })}>
              <option value="0">0 (scale to zero)</option>
              <option value="1">1</option>
            </select>
          </Field>
          {int("health_timeout_seconds", "Health timeout (seconds)", "1-600", 1, 600)}
          {int("drain_timeout_seconds", "Drain timeout (seconds)", "1-300", 1, 300)}
        </div>
      </Form>
      <Saved text={saved} />
    </section>
  );
}

/** GitHub: connect the app to a repository; the webhook's secret is shown once. */
function GitHub({ app, onSaved }: { app: App; onSaved: () => void }) {
  const [repo, setRepo] = useState(app.github_repo ?? "");
  const [branch, setBranch] = useState(app.branch);
  const [hook, setHook] = useState<GitHubHook | null>(null);
  return (
    <section aria-label="GitHub">
      <h2>GitHub push to deploy</h2>
      <p class="muted">
        {app.github_repo ? (
          <>
            Connected to <span class="mono">{app.github_repo}</span>. Connecting again makes a new secret (the old one stops working).
          </>
        ) : (
          "Not connected. Public repositories only: a push is cloned from GitHub and deployed."
        )}
      </p>
      <Form label="Connect a GitHub repository" submit={app.github_repo ? "Connect again" : "Connect"} class="inline" onSubmit={async () => {
          setHook(await post<GitHubHook>(base(app.id) + "/github", { repo, branch }));
          onSaved();
        }}>
        <Field label="Repository" hint="owner/name">
          <input class="mono" value={repo} onInput={(e) => setRepo(e.currentTarget.value)} required />
        </Field>
        <Field label="GitHub branch">
          <input value={branch} onInput={(e) => setBranch(e.currentTarget.value)} />
        </Field>
      </Form>
      {hook && (
        <div class="notice" role="status" data-github-hook>
          <p>
            <strong>Add this webhook to {hook.repo}</strong> (Settings → Webhooks: content type application/json, push events). The secret is shown once.
          </p>
          <div class="conn">
            <span class="field-label">Payload URL</span>
            <code data-conn="Webhook URL">{hook.webhook_url}</code>
            <Copy text={hook.webhook_url} label="Copy webhook URL" />
          </div>
          <div class="conn">
            <span class="field-label">Secret</span>
            <code class="secret" data-conn="Webhook secret">
              {hook.secret}
            </code>
            <Copy text={hook.secret} label="Copy webhook secret" />
          </div>
        </div>
      )}
    </section>
  );
}

/** The section's pages (main.tsx loads this chunk on the first visit). */
export function AppsSection({ rest }: { rest: string[] }) {
  return rest[0] ? <AppDetail id={rest[0]} /> : <Apps />;
}
