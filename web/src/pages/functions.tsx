import { useRef, useState } from "preact/hooks";
import { call, del, get, post, q, type Fn, type FnRun, type FnVersion, type Schedule, type ScheduleRun } from "../api";
import { ActionButton, DeleteButton, ErrorBox, Facts, Field, Form, Link, PageHead, State, Table, Time, fmtBytes, navigate, useLoad, useLive } from "../ui";

export function Functions() {
  const list = useLive<{ functions: Fn[] }>("/v1/functions", ["/v1/functions"]);
  const [name, setName] = useState("");
  const [runtime, setRuntime] = useState("python3");
  const [handler, setHandler] = useState("main.handler");
  const bundle = useRef<HTMLInputElement>(null);
  return (
    <>
      <PageHead title="Functions" />
      <Form label="Deploy a function" submit="Deploy" class="inline" onSubmit={async () => {
          const f = bundle.current?.files?.[0];
          if (!f) throw new Error("choose the code bundle (.zip or .tar.gz) first");
          const fd = new FormData();
          fd.append("spec", JSON.stringify({ name, runtime, handler }));
          fd.append("bundle", f, f.name);
          const fn = await call<Fn>("POST", "/v1/functions", { raw: fd });
          navigate("/functions/" + fn.id);
        }}
      >
        <Field label="Name">
          <input value={name} onInput={(e) => setName(e.currentTarget.value)} required />
        </Field>
        <Field label="Runtime">
          <select value={runtime} onChange={(e) => setRuntime(e.currentTarget.value)}>
            <option value="python3">python3</option>
            <option value="node">node</option>
          </select>
        </Field>
        <Field label="Handler">
          <input value={handler} onInput={(e) => setHandler(e.currentTarget.value)} class="mono" required />
        </Field>
        <Field label="Bundle">
          <input type="file" ref={bundle} accept=".zip,.tar.gz,.tgz" />
        </Field>
      </Form>
      <ErrorBox error={list.error} />
      <Table label="Functions" rows={list.data?.functions} loading={list.loading} rowKey={(f) => f.id} empty="No functions."
        cols={[
          { label: "Name", cell: (f) => <Link href={"/functions/" + f.id}>{f.name}</Link> },
          { label: "Version", cell: (f) => f.version },
          { label: "State", cell: (f) => <State state={f.state} /> },
          { label: "Runtime", cell: (f) => f.runtime + " " + f.handler, class: "mono" },
          { label: "HTTP trigger", cell: (f) => f.url ?? "—", class: "mono" },
          { label: "Updated", cell: (f) => <Time at={f.updated_at} /> },
        ]}
      />
    </>
  );
}

function RunView({ run }: { run: FnRun }) {
  return (
    <section class="run" aria-label={"Run " + run.id}>
      <p>
        Run <span class="mono">{run.id}</span>: <State state={run.status} /> in {run.duration_ms} ms (version {run.version}, {run.attempts} attempt
        {run.attempts === 1 ? "" : "s"})
      </p>
      {run.result !== undefined && (
        <>
          <h3>Result</h3>
          <pre class="log" data-run-result>
            {JSON.stringify(run.result, null, 2)}
          </pre>
        </>
      )}
      {run.error && (
        <>
          <h3>Error</h3>
          <pre class="log error-log">{run.error.type + ": " + run.error.message + (run.error.traceback ? "\n" + run.error.traceback : "")}</pre>
        </>
      )}
      <h3>Logs</h3>
      <pre class="log">{run.logs || "(no logs)"}</pre>
    </section>
  );
}

export function FunctionDetail({ id }: { id: string }) {
  const fn = useLoad((s) => get<Fn>("/v1/functions/" + q(id), s), [id]);
  const versions = useLoad((s) => get<{ versions: FnVersion[] }>("/v1/functions/" + q(id) + "/versions", s), [id]);
  const runs = useLive<{ runs: FnRun[] }>("/v1/functions/" + q(id) + "/runs", ["/v1/functions/{id}/invoke"]);
  const [payload, setPayload] = useState('{"name": "console"}');
  const [run, setRun] = useState<FnRun | null>(null);
  const [err, setErr] = useState("");
  const f = fn.data;
  return (
    <>
      <PageHead title={"Function " + (f?.name ?? id)}>
        <ActionButton
          danger
          confirm="Delete this function, its versions and its runs?"
          onError={setErr}
          onClick={async () => {
            await del("/v1/functions/" + q(id));
            navigate("/functions");
          }}
        >
          Delete
        </ActionButton>
      </PageHead>
      <ErrorBox error={fn.error || err} />
      {f && (
        <Facts
          items={[
            ["State", <State state={f.state} />],
            ["Version", f.version],
            ["Runtime", <span class="mono">{f.runtime} {f.handler}</span>],
            f.url && ["HTTP trigger", <span class="mono">{f.url}</span>],
          ]}
        />
      )}
      <h2>Invoke</h2>
      <Form label="Invoke the function" submit="Invoke" onSubmit={async () => {
          let body: unknown;
          try {
            body = payload.trim() ? JSON.parse(payload) : undefined;
          } catch (e) {
            throw new Error("the payload is not JSON: " + (e as Error).message);
          }
          setRun(null);
          setRun(await post<FnRun>("/v1/functions/" + q(id) + "/invoke", body === undefined ? {} : { payload: body }));
          runs.reload();
        }}
      >
        <Field label="Payload (JSON)">
          <textarea rows={5} class="mono" value={payload} onInput={(e) => setPayload(e.currentTarget.value)} spellcheck={false} />
        </Field>
      </Form>
      {run && <RunView run={run} />}
      <h2>Runs</h2>
      <ErrorBox error={runs.error} />
      <Table label="Runs" rows={runs.data?.runs} loading={runs.loading} rowKey={(r) => r.id} empty="No runs yet."
        cols={[
          { label: "Run", cell: (r) => <button type="button" class="linkish mono" onClick={() => setRun(r)}>{r.id}</button> },
          { label: "Status", cell: (r) => <State state={r.status} /> },
          { label: "Trigger", cell: (r) => r.trigger },
          { label: "Version", cell: (r) => r.version },
          { label: "Duration", cell: (r) => r.duration_ms + " ms" },
          { label: "Started", cell: (r) => <Time at={r.created_at} /> },
        ]}
      />
      <h2>Versions</h2>
      <Table label="Versions" rows={versions.data?.versions} loading={versions.loading} rowKey={(v) => String(v.version)} empty="No versions."
        cols={[
          { label: "Version", cell: (v) => v.version },
          { label: "State", cell: (v) => <State state={v.state} /> },
          { label: "Handler", cell: (v) => v.runtime + " " + v.handler, class: "mono" },
          { label: "Bundle", cell: (v) => fmtBytes(v.bundle_bytes) },
          { label: "Secrets", cell: (v) => (v.secret_names.length ? v.secret_names.join(", ") : "—") },
          { label: "Created", cell: (v) => <Time at={v.created_at} /> },
        ]}
      />
    </>
  );
}

/** inZone shows a time in the schedule's own zone (its cron is read there). */
function inZone(at: string | undefined, zone: string): string {
  if (!at) return "—";
  try {
    return new Date(at).toLocaleString(undefined, { timeZone: zone, timeZoneName: "short" });
  } catch {
    return at;
  }
}

function ScheduleRuns({ id }: { id: string }) {
  const runs = useLoad((s) => get<{ runs: ScheduleRun[] }>("/v1/schedules/" + q(id) + "/runs", s), [id]);
  return (
    <Table label={"Runs of " + id} rows={runs.data?.runs} loading={runs.loading} rowKey={(r) => r.id} empty="No runs yet."
      cols={[
        { label: "For", cell: (r) => <Time at={r.scheduled_for} /> },
        { label: "Trigger", cell: (r) => r.trigger },
        { label: "Status", cell: (r) => <State state={r.status} /> },
        { label: "Exit", cell: (r) => r.exit_code ?? "—" },
        { label: "Output", cell: (r) => <pre class="log small">{(r.error ?? "") + (r.output ?? "")}</pre> },
      ]}
    />
  );
}

export function Schedules() {
  const list = useLive<{ schedules: Schedule[] }>("/v1/schedules", ["/v1/schedules"]);
  const fns = useLoad((s) => get<{ functions: Fn[] }>("/v1/functions", s), []);
  const [name, setName] = useState("");
  const [cron, setCron] = useState("*/5 * * * *");
  const [zone, setZone] = useState(Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC");
  const [target, setTarget] = useState("cmd");
  const [cmd, setCmd] = useState("date");
  const [open, setOpen] = useState<string | null>(null);
  const [err, setErr] = useState("");
  const act = (s: Schedule, what: string) => async () => {
    await post("/v1/schedules/" + q(s.id) + "/" + what);
    list.reload();
  };
  return (
    <>
      <PageHead title="Schedules" />
      <Form label="Create a schedule" submit="Create schedule" class="inline" onSubmit={async () => {
          const body: Record<string, unknown> = { name, cron, timezone: zone };
          if (target === "cmd") Object.assign(body, { template: "base", cmd });
          else body.function_id = target;
          await post("/v1/schedules", body);
          list.reload();
        }}
      >
        <Field label="Name">
          <input value={name} onInput={(e) => setName(e.currentTarget.value)} />
        </Field>
        <Field label="Cron">
          <input value={cron} onInput={(e) => setCron(e.currentTarget.value)} class="mono" required />
        </Field>
        <Field label="Time zone">
          <input value={zone} onInput={(e) => setZone(e.currentTarget.value)} />
        </Field>
        <Field label="Runs">
          <select value={target} onChange={(e) => setTarget(e.currentTarget.value)}>
            <option value="cmd">a command in a base sandbox</option>
            {fns.data?.functions.map((f) => (
              <option value={f.id}>function {f.name}</option>
            ))}
          </select>
        </Field>
        {target === "cmd" && (
          <Field label="Command">
            <input value={cmd} onInput={(e) => setCmd(e.currentTarget.value)} class="mono" />
          </Field>
        )}
      </Form>
      <ErrorBox error={list.error || err} />
      <Table label="Schedules" rows={list.data?.schedules} loading={list.loading} rowKey={(s) => s.id} empty="No schedules."
        cols={[
          { label: "Name", cell: (s) => s.name || s.id },
          { label: "Cron", cell: (s) => s.cron + " (" + s.timezone + ")", class: "mono" },
          { label: "Runs", cell: (s) => (s.function_id ? <Link href={"/functions/" + s.function_id}>function</Link> : <span class="mono">{s.cmd}</span>) },
          { label: "State", cell: (s) => <State state={s.enabled ? "active" : "paused"} /> },
          { label: "Next run", cell: (s) => (s.enabled ? inZone(s.next_run_at, s.timezone) : "—") },
          {
            label: "Actions",
            cell: (s) => (
              <div class="btn-row">
                {s.enabled ? (
                  <ActionButton class="small" onError={setErr} onClick={act(s, "pause")}>
                    Pause
                  </ActionButton>
                ) : (
                  <ActionButton class="small" onError={setErr} onClick={act(s, "resume")}>
                    Resume
                  </ActionButton>
                )}
                <ActionButton class="small" onError={setErr} onClick={act(s, "trigger")}>
                  Run now
                </ActionButton>
                <button type="button" class="small" aria-expanded={open === s.id} onClick={() => setOpen(open === s.id ? null : s.id)}>
                  Runs
                </button>
                <DeleteButton path={"/v1/schedules/" + q(s.id)} confirm={"Delete schedule " + (s.name || s.id) + "?"} onDone={list.reload} onError={setErr} />
              </div>
            ),
          },
        ]}
      />
      {open && (
        <section aria-label="Schedule runs">
          <h2>Runs of {open}</h2>
          <ScheduleRuns id={open} />
        </section>
      )}
    </>
  );
}
