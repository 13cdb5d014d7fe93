// Apps (/v1/apps, docs/apps.md): list and create, deploy a source archive, deployments with their
// state, live build logs and runtime logs (follow=1 text streams), rollback, env and secrets
// (secret values are write-only: the API answers only their names, and so does this page).
import { useEffect, useRef, useState } from "preact/hooks";
import { call, get, post, q, textStream, type App, type Deployment } from "../api";
import { ActionButton, DeleteButton, ErrorBox, Facts, Field, Form, Link, PageHead, State, Table, Time, message, navigate, useChanges, useLoad } from "../ui";

const base = (id: string) => "/v1/apps/" + q(id);
const busyStates = ["queued", "building", "deploying"];

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
  const list = useLoad((s) => get<{ apps: App[] }>("/v1/apps", s), []);
  useChanges(["/v1/apps"], list.reload);
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
  const app = useLoad((s) => get<App>(base(id), s), [id]);
  const deps = useLoad((s) => get<{ deployments: Deployment[] }>(base(id) + "/deployments", s), [id]);
  useChanges(["/v1/apps"], app.reload);
  useChanges(["/v1/apps/{id}/deployments", "/v1/apps/{id}/rollback"], deps.reload);
  // Builds run in the background (no change event when they end): poll while one is under way.
  const building = deps.data?.deployments.some((d) => busyStates.includes(d.state)) ?? false;
  useEffect(() => {
    if (!building) return;
    const t = setInterval(() => {
      deps.reload();
      app.reload();
    }, 2000);
    return () => clearInterval(t);
  }, [building]);
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
            ["Live deployment", a.live_deployment_id ?? "none yet"],
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
      {saved && (
        <p role="status" class="muted">
          {saved}
        </p>
      )}
    </section>
  );
}

/** The section's pages (main.tsx loads this chunk on the first visit). */
export function AppsSection({ rest }: { rest: string[] }) {
  return rest[0] ? <AppDetail id={rest[0]} /> : <Apps />;
}
