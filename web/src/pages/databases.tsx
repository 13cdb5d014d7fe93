// Databases (/v1/databases, docs/databases.md): list and create, a database's connection strings
// with copy buttons (the password shown once: a create's or a rotation's answer, kept only in this
// page's memory), the SQL editor over the query broker, backups and restore, branches.
import { useEffect, useRef, useState } from "preact/hooks";
import { ApiError, get, onEvent, post, q, text, type Database, type DatabaseBackup, type DatabaseStats, type QueryResult } from "../api";
import { ActionButton, DeleteButton, Copy, ErrorBox, Facts, Field, Form, Link, PageHead, State, Table, Time, fmtBytes, navigate, useAction, useLoad, Busy, useLive } from "../ui";

const base = (id: string) => "/v1/databases/" + q(id);

/** A password answered once (create, rotate), handed from the list page to the detail page. */
let shownOnce: Database | null = null;

export function Databases() {
  const list = useLive<{ databases: Database[] }>("/v1/databases", ["/v1/databases"]);
  const [name, setName] = useState("");
  const [version, setVersion] = useState("17");
  const [suspend, setSuspend] = useState("300");
  return (
    <>
      <PageHead title="Databases" />
      <Form label="Create a database" submit="Create database" class="inline" onSubmit={async () => {
          const db = await post<Database>("/v1/databases", { name, version, suspend_after_seconds: Number(suspend) });
          shownOnce = db;
          navigate("/databases/" + db.id);
        }}
      >
        <Field label="Name" hint="1-50 of a-z 0-9 _ -, starting with a letter">
          <input value={name} onInput={(e) => setName(e.currentTarget.value)} required />
        </Field>
        <Field label="Version">
          <select value={version} onChange={(e) => setVersion(e.currentTarget.value)}>
            <option value="17">PostgreSQL 17</option>
          </select>
        </Field>
        <Field label="Suspend after (seconds)" hint="0: never">
          <input type="number" min={0} max={604800} value={suspend} onInput={(e) => setSuspend(e.currentTarget.value)} />
        </Field>
      </Form>
      <ErrorBox error={list.error} />
      <DatabaseTable label="Databases" rows={list.data?.databases} loading={list.loading} empty="No databases." />
    </>
  );
}

function DatabaseTable(props: { label: string; rows: Database[] | undefined; loading?: boolean; empty: string }) {
  return (
    <Table label={props.label} rows={props.rows} loading={props.loading} rowKey={(d) => d.id} empty={props.empty}
      cols={[
        { label: "Name", cell: (d) => <Link href={"/databases/" + d.id}>{d.name}</Link> },
        { label: "State", cell: (d) => <State state={d.state} /> },
        { label: "Version", cell: (d) => d.version },
        { label: "Size", cell: (d) => `${d.vcpus} vCPU · ${d.memory_mib} MiB · ${d.storage_gib} GiB` },
        { label: "Branch of", cell: (d) => (d.parent_id ? <Link href={"/databases/" + d.parent_id}>{d.parent_id}</Link> : "—"), class: "mono" },
        { label: "Created", cell: (d) => <Time at={d.created_at} /> },
      ]}
    />
  );
}

/** Conn: one connection string with its copy button. */
function Conn({ label, value }: { label: string; value: string | undefined }) {
  if (!value) return null;
  return (
    <div class="conn">
      <span class="field-label">{label}</span>
      <code class="secret" data-conn={label}>
        {value}
      </code>
      <Copy text={value} label={"Copy " + label} />
    </div>
  );
}

export function DatabaseDetail({ id }: { id: string }) {
  const db = useLoad((s) => get<Database>(base(id), s), [id]);
  const all = useLive<{ databases: Database[] }>("/v1/databases", ["/v1/databases"]);
  // Suspended when idle, or backed up on schedule: no call of ours says so, its event does.
  useEffect(() => onEvent((ev) => ev.database?.id === id && db.reload()), [id]);
  const [once, setOnce] = useState<Database | null>(() => {
    const d = shownOnce?.id === id ? shownOnce : null;
    shownOnce = null;
    return d;
  });
  const [err, setErr] = useState("");
  const [branch, setBranch] = useState("");
  const d = db.data;
  return (
    <>
      <PageHead title={"Database " + (d?.name ?? id)}>
        <ActionButton confirm="Give the owner a new password? The old one stops working." onError={setErr}
          onClick={async () => setOnce(await post<Database>(base(id) + "/password"))}>
          Rotate password
        </ActionButton>
        <DeleteButton path={base(id)} confirm="Delete this database and its data?" onError={setErr} onDone={() => navigate("/databases")} />
      </PageHead>
      <ErrorBox error={db.error || err} />
      {once?.password && (
        <div class="notice" role="status">
          <p>
            <strong>The owner's password, shown once</strong> — store it now; the console does not keep it.
          </p>
          <Conn label="Password" value={once.password} />
          <Conn label="Connection string with password" value={once.connection.uri} />
          {once.note && <p class="muted">{once.note}</p>}
        </div>
      )}
      {d && (
        <>
          <Facts
            items={[
              ["State", <State state={d.state} />],
              ["Version", "PostgreSQL " + d.version],
              ["Size", `${d.vcpus} vCPU · ${d.memory_mib} MiB memory · ${d.storage_gib} GiB storage`],
              ["Extensions", d.extensions.length ? d.extensions.join(", ") : "—"],
              ["Suspends after", d.suspend_after_seconds ? d.suspend_after_seconds + " s idle" : "never"],
              d.parent_id && ["Branch of", <Link href={"/databases/" + d.parent_id}>{d.parent_id}</Link>],
              ["Sandbox", <Link href={"/sandboxes/" + d.sandbox_id}>{d.sandbox_id}</Link>],
              ["Created", <Time at={d.created_at} />],
            ]}
          />
          <h2>Connect</h2>
          <section class="conns" aria-label="Connection strings">
            <Conn label="Connection string" value={d.connection.uri} />
            <Conn label="Pooler" value={d.connection.pooler_uri} />
            <Conn label="HTTP (/sql)" value={d.connection.http_url} />
            <Conn label="Host" value={d.connection.host + ":" + d.connection.port} />
            <Conn label="User" value={d.connection.user} />
            <Conn label="Database" value={d.connection.database} />
          </section>
        </>
      )}
      {d && <Health id={id} state={d.state} />}
      <SqlEditor id={id} />
      <Backups id={id} />
      <h2>Branches</h2>
      <Form label="Branch the database" submit="Create branch" class="inline" onSubmit={async () => {
          const b = await post<Database>(base(id) + "/branches", { name: branch });
          navigate("/databases/" + b.id);
        }}>
        <Field label="Branch name" hint="a copy-on-write fork now; same owner and password">
          <input value={branch} onInput={(e) => setBranch(e.currentTarget.value)} required />
        </Field>
      </Form>
      <DatabaseTable label="Branches" rows={all.data?.databases.filter((x) => x.parent_id === id)} loading={all.loading} empty="No branches or restores of this database." />
    </>
  );
}

const dur = (s: number) => (s < 120 ? s + " s" : s < 7200 ? Math.round(s / 60) + " min" : s < 172800 ? (s / 3600).toFixed(1) + " h" : (s / 86400).toFixed(1) + " d");

/** Health: the database's figures (/stats) and the end of its postgres log (/logs). Both are read
 * from postgres and wake a suspended database, so they load by themselves only while it is ready. */
function Health({ id, state }: { id: string; state: string }) {
  const [asked, setAsked] = useState(0);
  const on = state === "ready" || asked > 0;
  const stats = useLoad((s) => (on ? get<DatabaseStats>(base(id) + "/stats", s) : Promise.resolve(undefined)), [id, on, asked]);
  const log = useLoad((s) => (on ? text(base(id) + "/logs?bytes=65536", s) : Promise.resolve(undefined)), [id, on, asked]);
  const st = stats.data;
  // The log's end is what matters: show it scrolled to the bottom.
  const pre = useRef<HTMLPreElement>(null);
  useEffect(() => {
    if (pre.current) pre.current.scrollTop = pre.current.scrollHeight;
  }, [log.data]);
  return (
    <section aria-label="Stats and logs">
      <div class="btn-row">
        <h2>Stats and logs</h2>
        <button type="button" class="small" onClick={() => setAsked(asked + 1)}>
          {on ? "Refresh" : "Read (wakes the database)"}
        </button>
        {on && (stats.loading || log.loading) && <span class="muted">loading…</span>}
      </div>
      {!on && <p class="muted">The database is {state}: reading its figures or its log wakes it.</p>}
      <ErrorBox error={stats.error || log.error} />
      {st && (
        <dl class="facts" data-stats>
          <dt>Size</dt>
          <dd data-stat="size">{fmtBytes(st.size_bytes)}</dd>
          <dt>Sessions</dt>
          <dd data-stat="connections">{st.connections}</dd>
          <dt>Transactions</dt>
          <dd data-stat="transactions">
            {st.transactions_committed} committed · {st.transactions_rolled_back} rolled back
          </dd>
          <dt>Up for</dt>
          <dd data-stat="uptime">{dur(st.uptime_seconds)}</dd>
        </dl>
      )}
      {log.data !== undefined && (
        <>
          <h3>Postgres log (the last 64 KiB)</h3>
          <pre class="log" ref={pre} tabIndex={0} data-log="Postgres log">
            {log.data || "(empty)"}
          </pre>
        </>
      )}
    </section>
  );
}

function SqlEditor({ id }: { id: string }) {
  const [sql, setSql] = useState("select 1");
  const [res, setRes] = useState<QueryResult | null>(null);
  const [refused, setRefused] = useState<ApiError | null>(null);
  const a = useAction();
  const runIt = () =>
    a.run(async () => {
      setRes(null);
      setRefused(null);
      try {
        setRes(await post<QueryResult>(base(id) + "/query", { query: sql }));
      } catch (e) {
        if (e instanceof ApiError && e.status === 400 && e.extra.sqlstate) setRefused(e);
        else throw e;
      }
    });
  return (
    <section aria-label="SQL editor">
      <h2>SQL</h2>
      <form class="form" aria-label="Run SQL" onSubmit={(e) => {
          e.preventDefault();
          void runIt();
        }}>
        <Field label="SQL statement" hint="One statement, run as the owner; Ctrl+Enter runs it.">
          <textarea rows={5} class="mono" value={sql} spellcheck={false} onInput={(e) => setSql(e.currentTarget.value)}
            onKeyDown={(e) => {
              if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
                e.preventDefault();
                void runIt();
              }
            }} />
        </Field>
        <div class="form-actions">
          <button type="submit" disabled={a.busy}>
            Run
          </button>
          <Busy on={a.busy} label="running…" />
        </div>
        <ErrorBox error={a.error} />
      </form>
      {refused && (
        <div class="error" role="alert" data-sql-error>
          <strong>{refused.message}</strong> <span class="mono">SQLSTATE {String(refused.extra.sqlstate)}</span>
          {typeof refused.extra.detail === "string" && <div>Detail: {refused.extra.detail}</div>}
          {typeof refused.extra.hint === "string" && <div>Hint: {refused.extra.hint}</div>}
          {typeof refused.extra.position === "number" && <div>At character {refused.extra.position}</div>}
        </div>
      )}
      {res && <Result res={res} />}
    </section>
  );
}

function Result({ res }: { res: QueryResult }) {
  const names = res.fields.map((f) => f.name);
  const cells = (r: QueryResult["rows"][number]) => (Array.isArray(r) ? r : names.map((n) => r[n] ?? null));
  return (
    <>
      <p role="status" data-sql-status>
        {res.command} {res.rowCount} {res.rowCount === 1 ? "row" : "rows"}
      </p>
      {names.length > 0 && (
        <div class="table-wrap">
          <table aria-label="Query result">
            <thead>
              <tr>
                {names.map((n) => (
                  <th scope="col">{n}</th>
                ))}
              </tr>
            </thead>
            <tbody>
              {res.rows.map((r) => (
                <tr>
                  {cells(r).map((v, i) => (
                    <td data-label={names[i]} class={v === null ? "mono muted" : "mono"}>
                      {v === null ? "NULL" : v}
                    </td>
                  ))}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}

function Backups({ id }: { id: string }) {
  const list = useLive<{ backups: DatabaseBackup[] }>(base(id) + "/backups", ["/v1/databases/{id}/backups"]);
  useEffect(() => onEvent((ev) => ev.type === "database.backed_up" && ev.database?.id === id && list.reload()), [id]);
  const [err, setErr] = useState("");
  const [name, setName] = useState("");
  const [toTime, setToTime] = useState("");
  const restore = async (body: Record<string, string>) => {
    const d = await post<Database>(base(id) + "/restore", { name, ...body });
    navigate("/databases/" + d.id);
  };
  return (
    <section aria-label="Backups">
      <h2>Backups</h2>
      <div class="btn-row">
        <ActionButton onError={setErr} onClick={async () => {
            await post(base(id) + "/backups");
            list.reload();
          }}>
          Back up now
        </ActionButton>
      </div>
      <ErrorBox error={list.error || err} />
      <Form label="Restore into a new database" submit="Restore to time" class="inline" onSubmit={() => restore(toTime ? { to_time: new Date(toTime).toISOString() } : {})}>
        <Field label="New database name" hint="a restore makes a NEW database; this one is not touched">
          <input value={name} onInput={(e) => setName(e.currentTarget.value)} required />
        </Field>
        <Field label="Restore to time" hint="the newest backup at or before it (empty: now)">
          <input type="datetime-local" value={toTime} onInput={(e) => setToTime(e.currentTarget.value)} />
        </Field>
      </Form>
      <Table label="Backups" rows={list.data?.backups} loading={list.loading} rowKey={(b) => b.id} empty="No backups yet."
        cols={[
          { label: "Backup", cell: (b) => b.id, class: "mono" },
          { label: "Size", cell: (b) => fmtBytes(b.size_bytes) },
          { label: "Taken", cell: (b) => <Time at={b.created_at} /> },
          {
            label: "",
            cell: (b) => (
              <ActionButton class="small" label={"Restore backup " + b.id} onError={setErr}
                onClick={async () => {
                  if (!name) throw new Error("name the new database first (New database name)");
                  await restore({ backup_id: b.id });
                }}>
                Restore
              </ActionButton>
            ),
          },
        ]}
      />
    </section>
  );
}

/** The section's pages (main.tsx loads this chunk on the first visit). */
export function DatabasesSection({ rest }: { rest: string[] }) {
  return rest[0] ? <DatabaseDetail id={rest[0]} /> : <Databases />;
}
