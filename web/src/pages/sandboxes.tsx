import { useEffect, useMemo, useState } from "preact/hooks";
import { call, del, get, onEvent, post, q, type Page, type Sandbox, type SandboxEvent, type Snapshot, type Template } from "../api";
import { ActionButton, ErrorBox, Facts, Field, Form, Link, PageHead, State, Table, Time, navigate, useLoad } from "../ui";
import { Files, Processes, SandboxEvents, Terminal } from "./sandbox-tabs";

const LIVE = "running,hibernated,error,lost";
const FILTERS: [string, string][] = [
  [LIVE, "live"],
  ["running", "running"],
  ["hibernated", "hibernated"],
  ["error,lost", "error or lost"],
  ["killed", "killed"],
  ["all", "all"],
];

/** sandboxActions are the lifecycle buttons of a sandbox in state st. */
export function SandboxActions({ sb, onError, onChange, compact }: { sb: Sandbox; onError: (m: string) => void; onChange?: (s: Sandbox) => void; compact?: boolean }) {
  const base = "/v1/sandboxes/" + q(sb.id);
  const live = sb.state === "running" || sb.state === "hibernated";
  return (
    <div class="btn-row">
      {sb.state === "running" && (
        <ActionButton onError={onError} label={"Hibernate " + sb.id} onClick={async () => onChange?.(await post<Sandbox>(base + "/hibernate"))}>
          Hibernate
        </ActionButton>
      )}
      {sb.state === "hibernated" && (
        <ActionButton onError={onError} label={"Wake " + sb.id} onClick={async () => onChange?.(await post<Sandbox>(base + "/wake"))}>
          Wake
        </ActionButton>
      )}
      {!compact && sb.state === "running" && (
        <ActionButton
          onError={onError}
          onClick={async () => {
            const r = await post<{ sandboxes: Sandbox[] }>(base + "/fork", { count: 1 });
            const child = r.sandboxes[0];
            if (child) navigate("/sandboxes/" + child.id);
          }}
        >
          Fork
        </ActionButton>
      )}
      {!compact && live && (
        <ActionButton
          onError={onError}
          onClick={async () => {
            const s = await post<Snapshot>(base + "/snapshots");
            onError("");
            navigate("/snapshots?made=" + q(s.id));
          }}
        >
          Snapshot
        </ActionButton>
      )}
      {sb.state !== "killed" && (
        <ActionButton danger label={"Kill " + sb.id} confirm={"Kill " + sb.id + "? Its memory and disk are gone for good."} onError={onError} onClick={async () => {
          await del(base);
          onChange?.({ ...sb, state: "killed" });
        }}>
          Kill
        </ActionButton>
      )}
    </div>
  );
}

export function CreateSandbox({ onCreated }: { onCreated: (s: Sandbox) => void }) {
  const templates = useLoad((s) => get<{ templates: Template[] }>("/v1/templates", s), []);
  const [template, setTemplate] = useState("base");
  const [ttl, setTtl] = useState("600");
  const [meta, setMeta] = useState("");
  return (
    <Form label="Create a sandbox" submit="Create sandbox" class="inline" onSubmit={async () => {
        const metadata: Record<string, string> = {};
        for (const pair of meta.split(",").map((s) => s.trim()).filter(Boolean)) {
          const [k, ...v] = pair.split("=");
          metadata[k!.trim()] = v.join("=").trim();
        }
        const sb = await call<Sandbox>("POST", "/v1/sandboxes", { body: { template, ttl_seconds: Number(ttl) || undefined, metadata } });
        onCreated(sb);
      }}
    >
      <Field label="Template">
        <select value={template} onChange={(e) => setTemplate(e.currentTarget.value)}>
          {(templates.data?.templates ?? [{ name: "base", available: true } as Template])
            .filter((t) => t.available)
            .map((t) => (
              <option value={t.name}>{t.name}</option>
            ))}
        </select>
      </Field>
      <Field label="TTL (seconds)">
        <input type="number" min="1" value={ttl} onInput={(e) => setTtl(e.currentTarget.value)} />
      </Field>
      <Field label="Metadata" hint="key=value, comma separated">
        <input value={meta} onInput={(e) => setMeta(e.currentTarget.value)} placeholder="owner=me" />
      </Field>
    </Form>
  );
}

function matches(states: string, st: string): boolean {
  return states === "all" || states.split(",").includes(st);
}

export function SandboxList() {
  const [states, setStates] = useState(LIVE);
  const [text, setText] = useState("");
  const [err, setErr] = useState("");
  const list = useLoad((s) => get<Page & { sandboxes: Sandbox[] }>("/v1/sandboxes?limit=1000&state=" + q(states === "all" ? "running,hibernated,killed,error,lost" : states), s), [states]);
  // Live: every change of the team's sandboxes lands here from GET /v1/events.
  useEffect(
    () =>
      onEvent((ev: SandboxEvent) => {
        const sb = ev.sandbox;
        if (ev.type !== "sandbox" || !sb) return;
        list.set((old) => {
          if (!old) return old;
          const rest = old.sandboxes.filter((x) => x.id !== sb.id);
          const keep = matches(states, sb.state);
          const had = rest.length !== old.sandboxes.length;
          if (!keep) return { ...old, sandboxes: rest };
          if (had) return { ...old, sandboxes: old.sandboxes.map((x) => (x.id === sb.id ? sb : x)) };
          return { ...old, sandboxes: [sb, ...rest] };
        });
      }),
    [states],
  );
  const rows = useMemo(() => {
    const t = text.trim().toLowerCase();
    const all = list.data?.sandboxes;
    if (!t || !all) return all;
    return all.filter((s) => [s.id, s.template, s.host, s.state, ...Object.entries(s.metadata).map(([k, v]) => k + "=" + v)].some((x) => x.toLowerCase().includes(t)));
  }, [list.data, text]);
  const upsert = (sb: Sandbox) =>
    list.set((old) => (old ? { ...old, sandboxes: matches(states, sb.state) ? [sb, ...old.sandboxes.filter((x) => x.id !== sb.id)] : old.sandboxes.filter((x) => x.id !== sb.id) } : old));
  return (
    <>
      <PageHead title="Sandboxes" />
      <CreateSandbox
        onCreated={(sb) => {
          upsert(sb);
          navigate("/sandboxes/" + sb.id);
        }}
      />
      <div class="filters" role="search">
        <Field label="State">
          <select value={states} onChange={(e) => setStates(e.currentTarget.value)}>
            {FILTERS.map(([v, l]) => (
              <option value={v}>{l}</option>
            ))}
          </select>
        </Field>
        <Field label="Filter">
          <input type="search" value={text} onInput={(e) => setText(e.currentTarget.value)} placeholder="id, template, host, key=value" />
        </Field>
      </div>
      <ErrorBox error={list.error || err} />
      <Table label="Sandboxes" rows={rows} loading={list.loading} rowKey={(s) => s.id} empty="No sandboxes here."
        cols={[
          { label: "ID", cell: (s) => <Link href={"/sandboxes/" + s.id}>{s.id}</Link>, class: "mono" },
          { label: "Template", cell: (s) => s.template },
          { label: "State", cell: (s) => <State state={s.state} /> },
          { label: "Host", cell: (s) => s.host, class: "mono" },
          { label: "Created", cell: (s) => <Time at={s.created_at} /> },
          { label: "Expires", cell: (s) => (s.state === "killed" ? "—" : <Time at={s.expires_at} />) },
          { label: "Actions", cell: (s) => <SandboxActions sb={s} compact onError={setErr} onChange={upsert} /> },
        ]}
      />
    </>
  );
}

const TABS = ["terminal", "files", "processes", "events"] as const;
type Tab = (typeof TABS)[number];

export function SandboxDetail({ id, tab }: { id: string; tab: string | undefined }) {
  const sb = useLoad((s) => get<Sandbox>("/v1/sandboxes/" + q(id), s), [id]);
  const [err, setErr] = useState("");
  const [events, setEvents] = useState<SandboxEvent[]>([]);
  useEffect(() => {
    setEvents([]);
    return onEvent((ev) => {
      if (ev.type !== "sandbox" || ev.sandbox?.id !== id) return;
      const s = ev.sandbox;
      sb.set(() => s);
      setEvents((old) => [ev, ...old].slice(0, 200));
    });
  }, [id]);
  const active: Tab = (TABS as readonly string[]).includes(tab ?? "") ? (tab as Tab) : "terminal";
  const s = sb.data;
  return (
    <>
      <PageHead title={"Sandbox " + id}>{s && <SandboxActions sb={s} onError={setErr} onChange={(n) => sb.set(() => n)} />}</PageHead>
      <ErrorBox error={sb.error || err} />
      {s && (
        <Facts
          items={[
            ["State", <><State state={s.state} />{s.error && <span class="muted"> {s.error}</span>}</>],
            ["Template", s.template],
            ["Host", <span class="mono">{s.host}</span>],
            ["Created", <Time at={s.created_at} />],
            ["Expires", s.state === "killed" ? "—" : <Time at={s.expires_at} />],
            s.fork_of && ["Fork of", <Link href={"/sandboxes/" + s.fork_of}>{s.fork_of}</Link>],
            s.snapshot_id && ["From snapshot", <span class="mono">{s.snapshot_id}</span>],
            Object.keys(s.metadata).length > 0 && ["Metadata", <span class="mono">{Object.entries(s.metadata).map(([k, v]) => k + "=" + v).join(", ")}</span>],
          ]}
        />
      )}
      <nav class="tabs" aria-label="Sandbox views">
        {TABS.map((t) => (
          <Link href={"/sandboxes/" + id + "/" + t} aria-current={t === active ? "page" : undefined} class="tab">
            {t[0]!.toUpperCase() + t.slice(1)}
          </Link>
        ))}
      </nav>
      <section class="tab-body" aria-label={active}>
        {s && active === "terminal" && <Terminal sb={s} />}
        {s && active === "files" && <Files sb={s} />}
        {s && active === "processes" && <Processes sb={s} />}
        {active === "events" && <SandboxEvents id={id} live={events} />}
      </section>
    </>
  );
}
