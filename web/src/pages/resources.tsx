import { useEffect, useState } from "preact/hooks";
import { call, get, onEvent, post, q, stream, type BuildEvent, type Host, type Key, type Sandbox, type Snapshot, type Template, type Usage, type UsageItem, type Volume } from "../api";
import { ActionButton, DeleteButton, Copy, ErrorBox, Field, Form, Link, PageHead, State, Table, Time, fmtBytes, navigate, useLoad, useLive } from "../ui";

// -- overview ------------------------------------------------------------------------------------

interface Histogram {
  buckets: [number, number][]; // upper bound (s), cumulative count
  count: number;
  sum: number;
}

/** parseMetrics reads the create-latency histogram and the gauges the overview draws. */
function parseMetrics(text: string): { create: Histogram; gauges: Record<string, number> } {
  const create: Histogram = { buckets: [], count: 0, sum: 0 };
  const gauges: Record<string, number> = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-z_]+)(\{[^}]*\})? ([0-9.e+-]+|\+Inf|NaN)$/.exec(line);
    if (!m) continue;
    const [, name, labels = "", v] = m;
    const val = Number(v);
    if (name === "pandastack_sandbox_create_seconds_bucket") {
      const le = /le="([^"]+)"/.exec(labels)?.[1];
      if (le && le !== "+Inf") create.buckets.push([Number(le), val]);
    } else if (name === "pandastack_sandbox_create_seconds_count") create.count = val;
    else if (name === "pandastack_sandbox_create_seconds_sum") create.sum = val;
    else gauges[name + labels] = val;
  }
  return { create, gauges };
}

/** Bars: a small SVG bar chart (no chart library: the bundle stays small). */
function Bars({ label, data, unit }: { label: string; data: [string, number][]; unit: string }) {
  const max = Math.max(1, ...data.map((d) => d[1]));
  const w = 28;
  return (
    <figure class="chart">
      <svg role="img" aria-label={label + ": " + data.map(([k, v]) => k + " " + v + unit).join(", ")} viewBox={`0 0 ${data.length * w} 110`} preserveAspectRatio="none">
        {data.map(([, v], i) => {
          const h = (v / max) * 90;
          return <rect x={i * w + 3} y={95 - h} width={w - 6} height={Math.max(h, 0.5)} rx="2" />;
        })}
      </svg>
      <figcaption>
        {label}
        <span class="axis">
          {data.length > 0 && data[0]![0]} … {data.length > 0 && data[data.length - 1]![0]}
        </span>
      </figcaption>
    </figure>
  );
}

function Meter({ label, item, unit }: { label: string; item: UsageItem; unit?: string }) {
  const pct = item.limit ? Math.min(100, (item.used / item.limit) * 100) : 0;
  return (
    <div class="meter">
      <span>
        {label}: {item.used}
        {unit}
        {item.limit !== null ? ` of ${item.limit}${unit ?? ""}` : " (no limit)"}
      </span>
      {item.limit !== null && <progress max={100} value={pct} aria-label={label} />}
    </div>
  );
}

export function Overview() {
  const sbs = useLoad((s) => get<{ sandboxes: Sandbox[] }>("/v1/sandboxes?limit=1000&state=running,hibernated,error,lost", s), []);
  const usage = useLoad((s) => get<Usage>("/v1/usage", s), []);
  const metrics = useLoad(async (s) => parseMetrics(await (await fetch("/metrics", { signal: s, credentials: "omit" })).text()), []);
  const counts = useLoad(
    async (s) => {
      const [t, v, sn, f] = await Promise.allSettled([
        get<{ templates: Template[] }>("/v1/templates", s),
        get<{ volumes: Volume[] }>("/v1/volumes", s),
        get<{ snapshots: Snapshot[] }>("/v1/snapshots?limit=1000", s),
        get<{ functions: unknown[] }>("/v1/functions", s),
      ]);
      const n = <T,>(r: PromiseSettledResult<T>, f: (v: T) => number) => (r.status === "fulfilled" ? f(r.value) : undefined);
      return { templates: n(t, (x) => x.templates.length), volumes: n(v, (x) => x.volumes.length), snapshots: n(sn, (x) => x.snapshots.length), functions: n(f, (x) => x.functions.length) };
    },
    [],
  );
  const [recent, setRecent] = useState<{ at: string; sb: Sandbox }[]>([]);
  useEffect(
    () =>
      onEvent((ev) => {
        if (ev.type !== "sandbox" || !ev.sandbox) return;
        const sb = ev.sandbox;
        setRecent((old) => [{ at: ev.at, sb }, ...old].slice(0, 20));
        sbs.set((old) => {
          if (!old) return old;
          const rest = old.sandboxes.filter((x) => x.id !== sb.id);
          return { ...old, sandboxes: sb.state === "killed" ? rest : [sb, ...rest] };
        });
      }),
    [],
  );
  const by = (st: string) => sbs.data?.sandboxes.filter((s) => s.state === st).length ?? "…";
  const m = metrics.data;
  let prev = 0;
  const hist: [string, number][] = (m?.create.buckets ?? []).map(([le, c]) => {
    const n = c - prev;
    prev = c;
    return ["≤" + le + "s", n];
  });
  const c = counts.data;
  return (
    <>
      <PageHead title="Overview" />
      <ErrorBox error={sbs.error || usage.error} />
      <div class="cards">
        <Link href="/sandboxes" class="card">
          <strong>{by("running")}</strong> running
        </Link>
        <Link href="/sandboxes" class="card">
          <strong>{by("hibernated")}</strong> hibernated
        </Link>
        <Link href="/sandboxes" class="card">
          <strong>{sbs.data ? Number(by("error")) + Number(by("lost")) : "…"}</strong> error or lost
        </Link>
        <Link href="/templates" class="card">
          <strong>{c?.templates ?? "…"}</strong> templates
        </Link>
        <Link href="/volumes" class="card">
          <strong>{c?.volumes ?? "…"}</strong> volumes
        </Link>
        <Link href="/snapshots" class="card">
          <strong>{c?.snapshots ?? "…"}</strong> snapshots
        </Link>
        <Link href="/functions" class="card">
          <strong>{c?.functions ?? "…"}</strong> functions
        </Link>
      </div>
      <div class="grid2">
        <section aria-label="Create latency">
          <h2>Create latency</h2>
          {m && m.create.count > 0 ? (
            <>
              <Bars label="Sandbox creates by time to answer (this server)" data={hist} unit="" />
              <p class="muted">
                {m.create.count} create{m.create.count === 1 ? "" : "s"}, mean {((m.create.sum / m.create.count) * 1000).toFixed(0)} ms
              </p>
            </>
          ) : (
            <p class="muted">No sandbox created since the server started.</p>
          )}
        </section>
        <section aria-label="Resource use">
          <h2>Team use</h2>
          {usage.data && (
            <>
              <Meter label="Sandboxes" item={usage.data.sandboxes} />
              <Meter label="vCPUs" item={usage.data.vcpus} />
              <Meter label="Memory" item={usage.data.memory_mib} unit=" MiB" />
              <Meter label="Volumes" item={usage.data.volumes} />
              <Meter label="Volume space" item={usage.data.volume_mib} unit=" MiB" />
            </>
          )}
        </section>
      </div>
      <section aria-label="Recent events">
        <h2>Recent events</h2>
        {recent.length === 0 ? (
          <p class="muted">Waiting for changes (live from /v1/events).</p>
        ) : (
          <ol class="events">
            {recent.map((r) => (
              <li>
                <Time at={r.at} />: <Link href={"/sandboxes/" + r.sb.id}>{r.sb.id}</Link> <State state={r.sb.state} />
              </li>
            ))}
          </ol>
        )}
      </section>
    </>
  );
}

// -- templates -----------------------------------------------------------------------------------

const SPEC_EXAMPLE = `name: my-tools
from: base
apt: [jq]
steps:
  - echo built > /etc/my-tools
`;

export function Templates() {
  const list = useLive<{ templates: Template[] }>("/v1/templates", ["/v1/templates"]);
  const [spec, setSpec] = useState(SPEC_EXAMPLE);
  const [log, setLog] = useState<string[]>([]);
  const [err, setErr] = useState("");
  return (
    <>
      <PageHead title="Templates" />
      <ErrorBox error={list.error || err} />
      <Table label="Templates" rows={list.data?.templates} loading={list.loading} rowKey={(t) => t.owner + "/" + t.name} empty="No templates."
        cols={[
          { label: "Name", cell: (t) => t.name, class: "mono" },
          { label: "Owner", cell: (t) => t.owner },
          { label: "Size", cell: (t) => `${t.vcpus} vCPU, ${t.memory_mib} MiB, ${t.disk_mib} MiB disk` },
          { label: "Baked", cell: (t) => (t.baked ? "yes" : t.available ? "on first use" : "no host has it") },
          { label: "Description", cell: (t) => t.description ?? "" },
          {
            label: "Actions",
            cell: (t) =>
              t.owner !== "catalog" && (
                <DeleteButton path={"/v1/templates/" + q(t.name)} confirm={"Delete template " + t.name + "?"} onDone={list.reload} onError={setErr} />
              ),
          },
        ]}
      />
      <h2>Build a template</h2>
      <Form label="Build a template" submit="Build" onSubmit={async () => {
          setLog([]);
          let failure = "";
          await stream("POST", "/v1/templates", { raw: spec, contentType: "application/yaml" }, (v) => {
            const ev = v as BuildEvent;
            if (ev.progress !== undefined) setLog((l) => [...l, ev.progress!]);
            if (ev.template) setLog((l) => [...l, "built " + ev.template!.name]);
            if (ev.error) failure = ev.error.message;
          });
          list.reload();
          if (failure) throw new Error(failure);
        }}
      >
        <Field label="Spec (YAML, docs/templates.md)">
          <textarea rows={8} class="mono" value={spec} onInput={(e) => setSpec(e.currentTarget.value)} spellcheck={false} />
        </Field>
      </Form>
      {log.length > 0 && (
        <pre class="log" aria-label="Build log" aria-live="polite">
          {log.join("\n")}
        </pre>
      )}
    </>
  );
}

// -- volumes ---------------------------------------------------------------------------------------

export function Volumes() {
  const list = useLive<{ volumes: Volume[] }>("/v1/volumes", ["/v1/volumes"]);
  const [name, setName] = useState("");
  const [size, setSize] = useState("1024");
  const [err, setErr] = useState("");
  return (
    <>
      <PageHead title="Volumes" />
      <Form label="Create a volume" submit="Create volume" class="inline" onSubmit={async () => {
          await post("/v1/volumes", { name: name || undefined, size_mib: Number(size) });
          setName("");
          list.reload();
        }}
      >
        <Field label="Name">
          <input value={name} onInput={(e) => setName(e.currentTarget.value)} />
        </Field>
        <Field label="Size (MiB)">
          <input type="number" min="1" value={size} onInput={(e) => setSize(e.currentTarget.value)} />
        </Field>
      </Form>
      <ErrorBox error={list.error || err} />
      <Table label="Volumes" rows={list.data?.volumes} loading={list.loading} rowKey={(v) => v.id} empty="No volumes."
        cols={[
          { label: "ID", cell: (v) => v.id, class: "mono" },
          { label: "Name", cell: (v) => v.name },
          { label: "Size", cell: (v) => v.size_mib + " MiB" },
          { label: "Host", cell: (v) => v.host_id, class: "mono" },
          {
            label: "Attached to",
            cell: (v) =>
              v.attachments.length === 0
                ? "—"
                : v.attachments.map((a) => (
                    <div>
                      <Link href={"/sandboxes/" + a.sandbox_id}>{a.sandbox_id}</Link> at {a.mount_path}
                      {a.read_only ? " (read-only)" : ""}
                    </div>
                  )),
          },
          { label: "Created", cell: (v) => <Time at={v.created_at} /> },
          {
            label: "Actions",
            cell: (v) => (
              <div class="btn-row">
                <ActionButton
                  class="small"
                  onError={setErr}
                  onClick={async () => {
                    const n = window.prompt("New size in MiB (volumes only grow)", String(v.size_mib * 2));
                    if (!n) return;
                    await post("/v1/volumes/" + q(v.id) + "/resize", { size_mib: Number(n) });
                    list.reload();
                  }}
                >
                  Resize
                </ActionButton>
                <DeleteButton path={"/v1/volumes/" + q(v.id)} confirm={"Delete volume " + (v.name || v.id) + " and its data?"} onDone={list.reload} onError={setErr} />
              </div>
            ),
          },
        ]}
      />
    </>
  );
}

// -- snapshots -----------------------------------------------------------------------------------

export function Snapshots() {
  const list = useLive<{ snapshots: Snapshot[] }>("/v1/snapshots?limit=1000", ["/v1/snapshots", "/v1/sandboxes/{id}/snapshots"]);
  const [err, setErr] = useState("");
  const made = new URLSearchParams(location.search).get("made");
  return (
    <>
      <PageHead title="Snapshots" />
      {made && (
        <p class="notice" role="status">
          Snapshot {made} made.
        </p>
      )}
      <ErrorBox error={list.error || err} />
      <Table label="Snapshots" rows={list.data?.snapshots} loading={list.loading} rowKey={(s) => s.id} empty="No snapshots."
        cols={[
          { label: "ID", cell: (s) => s.id, class: "mono" },
          { label: "Of sandbox", cell: (s) => <Link href={"/sandboxes/" + s.sandbox_id}>{s.sandbox_id}</Link> },
          { label: "Template", cell: (s) => s.template },
          { label: "Size", cell: (s) => fmtBytes(s.size_bytes) },
          { label: "Created", cell: (s) => <Time at={s.created_at} /> },
          {
            label: "Actions",
            cell: (s) => (
              <div class="btn-row">
                <ActionButton
                  class="small"
                  onError={setErr}
                  onClick={async () => {
                    const sb = await call<Sandbox>("POST", "/v1/sandboxes", { body: { snapshot_id: s.id } });
                    navigate("/sandboxes/" + sb.id);
                  }}
                >
                  Restore
                </ActionButton>
                <DeleteButton path={"/v1/snapshots/" + q(s.id)} confirm={"Delete snapshot " + s.id + "?"} onDone={list.reload} onError={setErr} />
              </div>
            ),
          },
        ]}
      />
    </>
  );
}

// -- keys ----------------------------------------------------------------------------------------------

export function Keys() {
  const list = useLive<{ keys: Key[] }>("/v1/keys", ["/v1/keys"]);
  const [name, setName] = useState("");
  const [scope, setScope] = useState("all");
  const [made, setMade] = useState<Key | null>(null);
  const [err, setErr] = useState("");
  return (
    <>
      <PageHead title="API keys" />
      <Form label="Create a key" submit="Create key" class="inline" onSubmit={async () => {
          setMade(await post<Key>("/v1/keys", { name, scopes: [scope] }));
          setName("");
          list.reload();
        }}
      >
        <Field label="Name">
          <input value={name} onInput={(e) => setName(e.currentTarget.value)} required />
        </Field>
        <Field label="Scope">
          <select value={scope} onChange={(e) => setScope(e.currentTarget.value)}>
            <option value="all">all (this team's resources)</option>
            <option value="read">read</option>
            <option value="sandboxes">sandboxes</option>
            <option value="admin">admin</option>
          </select>
        </Field>
      </Form>
      {made?.key && (
        <div class="notice" role="status">
          <p>
            Key <strong>{made.name}</strong> made. It is shown once, now: keep it.
          </p>
          <code class="secret" data-new-key>
            {made.key}
          </code>{" "}
          <Copy text={made.key} />{" "}
          <button type="button" class="small" onClick={() => setMade(null)}>
            Done
          </button>
        </div>
      )}
      <ErrorBox error={list.error || err} />
      <Table label="API keys" rows={list.data?.keys} loading={list.loading} rowKey={(k) => k.id} empty="No keys."
        cols={[
          { label: "Name", cell: (k) => k.name },
          { label: "Prefix", cell: (k) => k.prefix + "…", class: "mono" },
          { label: "Scopes", cell: (k) => (k.admin ? "admin" : k.scopes.join(", ")) },
          { label: "Created", cell: (k) => <Time at={k.created_at} /> },
          { label: "Expires", cell: (k) => (k.expires_at ? <Time at={k.expires_at} /> : "never") },
          { label: "State", cell: (k) => <State state={k.revoked_at ? "revoked" : "active"} /> },
          {
            label: "Actions",
            cell: (k) =>
              !k.revoked_at && (
                <DeleteButton path={"/v1/keys/" + q(k.id)} confirm={"Revoke key " + k.name + " (" + k.prefix + "…)? Calls with it fail from now on."} onDone={list.reload} onError={setErr} label={"Revoke " + k.name} text="Revoke" />
              ),
          },
        ]}
      />
    </>
  );
}

function Used({ used, total, unit }: { used: number; total: number; unit: string }) {
  const label = `${used}${unit} of ${total}${unit}`;
  return (
    <div class="meter">
      <span>{label}</span>
      <progress max={total || 1} value={used} aria-label={label} />
    </div>
  );
}

// -- hosts (admin) -------------------------------------------------------------------------------

export function Hosts() {
  const list = useLoad((s) => get<{ hosts: Host[] }>("/v1/hosts", s), []);
  return (
    <>
      <PageHead title="Hosts">
        <button type="button" onClick={list.reload}>
          Refresh
        </button>
      </PageHead>
      <ErrorBox error={list.error} />
      <Table label="Hosts" rows={list.data?.hosts} loading={list.loading} rowKey={(h) => h.id} empty="No hosts registered."
        cols={[
          { label: "ID", cell: (h) => h.id, class: "mono" },
          { label: "State", cell: (h) => <State state={h.state} /> },
          { label: "Accel", cell: (h) => h.accel },
          { label: "Sandboxes", cell: (h) => h.sandboxes },
          { label: "Slots used", cell: (h) => <Used used={h.slots_total - h.free_slots} total={h.slots_total} unit="" /> },
          { label: "Memory used", cell: (h) => <Used used={h.mem_mib_total - h.mem_mib_free} total={h.mem_mib_total} unit=" MiB" /> },
          { label: "Baked", cell: (h) => h.baked.join(", ") },
          { label: "Heartbeat", cell: (h) => <Time at={h.last_heartbeat} /> },
        ]}
      />
    </>
  );
}
