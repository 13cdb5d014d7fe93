import { useEffect, useRef, useState } from "preact/hooks";
import { bytes, call, del, get, post, q, stream, type AuditEntry, type Process, type Sandbox, type SandboxEvent, type Stat } from "../api";
import { ActionButton, DeleteButton, ErrorBox, Field, Form, State, Table, Time, fmtBytes, fmtTime, message, useLoad } from "../ui";

interface XTermModule {
  XTerm: typeof import("@xterm/xterm").Terminal;
  FitAddon: typeof import("@xterm/addon-fit").FitAddon;
}

async function loadXterm(): Promise<XTermModule> {
  const [x, f] = await Promise.all([import("@xterm/xterm"), import("@xterm/addon-fit"), import("@xterm/xterm/css/xterm.css")]);
  return { XTerm: x.Terminal, FitAddon: f.FitAddon };
}

/** Terminal: a live shell over the PTY WebSocket. Browsers cannot put the key on a WebSocket,
 * so the console first trades it (in the Authorization header) for a single-use ticket. */
export function Terminal({ sb }: { sb: Sandbox }) {
  const box = useRef<HTMLDivElement>(null);
  const [status, setStatus] = useState("connecting…");
  const [err, setErr] = useState("");
  const [gen, setGen] = useState(0);
  const canRun = sb.state === "running" || sb.state === "hibernated";
  useEffect(() => {
    if (!canRun || !box.current) return;
    let cleanup: (() => void) | undefined;
    let gone = false;
    // xterm.js is most of the bundle: loaded with the first terminal, not with the console.
    loadXterm().then(
      ({ XTerm, FitAddon }) => {
        if (gone || !box.current) return;
        cleanup = open(XTerm, FitAddon, box.current);
      },
      (e) => setErr("the terminal did not load: " + String(e)),
    );
    return () => {
      gone = true;
      cleanup?.();
    };
  }, [sb.id, canRun, gen]);

  function open(XTerm: XTermModule["XTerm"], FitAddon: XTermModule["FitAddon"], el: HTMLDivElement): () => void {
    const term = new XTerm({ cursorBlink: true, fontSize: 13, convertEol: false, scrollback: 5000, theme: { background: "#0f1419" } });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(el);
    fit.fit();
    let ws: WebSocket | null = null;
    let closed = false;
    const enc = new TextEncoder();
    setStatus("connecting…");
    setErr("");
    (async () => {
      try {
        const t = await post<{ ticket: string }>("/v1/sandboxes/" + q(sb.id) + "/pty/ticket");
        if (closed) return;
        const proto = location.protocol === "https:" ? "wss:" : "ws:";
        ws = new WebSocket(`${proto}//${location.host}/v1/sandboxes/${q(sb.id)}/pty?ticket=${q(t.ticket)}&cols=${term.cols}&rows=${term.rows}`);
        ws.binaryType = "arraybuffer";
        ws.onopen = () => {
          setStatus("connected");
          term.focus();
        };
        ws.onmessage = (m) => {
          if (typeof m.data === "string") {
            const msg = JSON.parse(m.data) as { type: string; exit_code?: number; signal?: string; error?: { message: string } };
            if (msg.type === "exit") setStatus("exited (" + (msg.signal ?? "status " + msg.exit_code) + ")");
            if (msg.type === "error") setErr(msg.error?.message ?? "terminal error");
          } else {
            term.write(new Uint8Array(m.data as ArrayBuffer));
          }
        };
        ws.onclose = () => setStatus((s) => (s.startsWith("exited") ? s : "disconnected"));
        ws.onerror = () => setErr("the terminal connection failed");
      } catch (e) {
        setErr(e instanceof Error ? e.message : String(e));
        setStatus("not connected");
      }
    })();
    const data = term.onData((d) => ws?.readyState === WebSocket.OPEN && ws.send(enc.encode(d)));
    const resize = term.onResize(({ cols, rows }) => ws?.readyState === WebSocket.OPEN && ws.send(JSON.stringify({ type: "resize", cols, rows })));
    const ro = new ResizeObserver(() => fit.fit());
    ro.observe(el);
    return () => {
      closed = true;
      ro.disconnect();
      data.dispose();
      resize.dispose();
      ws?.close();
      term.dispose();
    };
  }
  if (!canRun) return <p class="muted">The sandbox is {sb.state}: no terminal.</p>;
  return (
    <div class="terminal">
      <div class="terminal-bar">
        <span role="status" aria-live="polite" data-terminal-status={status}>
          Terminal: {status}
        </span>
        <button type="button" class="small" onClick={() => setGen((g) => g + 1)}>
          Reconnect
        </button>
      </div>
      <ErrorBox error={err} />
      <div ref={box} class="xterm-box" aria-label="Terminal" />
    </div>
  );
}

function join(dir: string, name: string): string {
  return (dir.endsWith("/") ? dir : dir + "/") + name;
}

export function Files({ sb }: { sb: Sandbox }) {
  const [dir, setDir] = useState("/home/user");
  const [input, setInput] = useState(dir);
  const [err, setErr] = useState("");
  const base = "/v1/sandboxes/" + q(sb.id) + "/files";
  const list = useLoad((s) => get<{ entries: Stat[] }>(base + "/list?path=" + q(dir), s), [sb.id, dir]);
  const fileRef = useRef<HTMLInputElement>(null);
  const up = dir.replace(/\/[^/]+\/?$/, "") || "/";
  const download = async (p: string, name: string) => {
    const blob = await bytes(base + "?path=" + q(p));
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = name;
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 10000);
  };
  return (
    <div>
      <form
        class="inline"
        aria-label="Go to a directory"
        onSubmit={(e) => {
          e.preventDefault();
          setDir(input.trim() || "/");
        }}
      >
        <Field label="Directory">
          <input value={input} onInput={(e) => setInput(e.currentTarget.value)} class="mono" />
        </Field>
        <button type="submit">Open</button>
        <button
          type="button"
          onClick={() => {
            setDir(up);
            setInput(up);
          }}
        >
          Up
        </button>
      </form>
      <Form label="Upload a file" submit="Upload" class="inline" onSubmit={async () => {
          const f = fileRef.current?.files?.[0];
          if (!f) throw new Error("choose a file first");
          await call<Stat>("PUT", base + "?path=" + q(join(dir, f.name)), { raw: f });
          if (fileRef.current) fileRef.current.value = "";
          list.reload();
        }}
      >
        <Field label="File">
          <input type="file" ref={fileRef} />
        </Field>
      </Form>
      <ErrorBox error={list.error || err} />
      <Table label={"Files in " + dir} rows={list.data?.entries} loading={list.loading} rowKey={(e) => e.path} empty="Empty directory."
        cols={[
          {
            label: "Name",
            class: "mono",
            cell: (e) =>
              e.type === "dir" ? (
                <button
                  type="button"
                  class="linkish"
                  onClick={() => {
                    setDir(e.path);
                    setInput(e.path);
                  }}
                >
                  {e.name}/
                </button>
              ) : (
                e.name
              ),
          },
          { label: "Size", cell: (e) => (e.type === "dir" ? "—" : fmtBytes(e.size)) },
          { label: "Mode", cell: (e) => e.mode, class: "mono" },
          { label: "Modified", cell: (e) => fmtTime(e.mtime) },
          {
            label: "Actions",
            cell: (e) => (
              <div class="btn-row">
                {e.type === "file" && (
                  <ActionButton class="small" label={"Download " + e.name} onError={setErr} onClick={() => download(e.path, e.name)}>
                    Download
                  </ActionButton>
                )}
                <DeleteButton path={base + "?path=" + q(e.path) + (e.type === "dir" ? "&recursive=true" : "")} confirm={"Delete " + e.path + "?"} onDone={list.reload} onError={setErr} label={"Delete " + e.name} />
              </div>
            ),
          },
        ]}
      />
    </div>
  );
}

export function Processes({ sb }: { sb: Sandbox }) {
  const base = "/v1/sandboxes/" + q(sb.id) + "/processes";
  const procs = useLoad((s) => get<{ processes: Process[] }>(base, s), [sb.id]);
  const [cmd, setCmd] = useState("");
  const [output, setOutput] = useState<{ pid: number; text: string } | null>(null);
  const [err, setErr] = useState("");
  // The shown process's output, followed until it exits (or another is shown, or the page ends).
  const following = useRef<AbortController | null>(null);
  useEffect(() => () => following.current?.abort(), []);
  const show = async (pid: number) => {
    following.current?.abort();
    const ac = new AbortController();
    following.current = ac;
    let text = "";
    setOutput({ pid, text });
    await stream("GET", base + "/" + pid + "/output?follow=1", { signal: ac.signal }, (v) => {
      const ev = v as { stdout?: string; stderr?: string; exit_code?: number; signal?: string };
      text = (text + (ev.stdout ?? "") + (ev.stderr ?? "")).slice(-200_000);
      if (ev.exit_code !== undefined || ev.signal) text += `\n[exited: ${ev.signal ?? ev.exit_code}]`;
      if (!ac.signal.aborted) setOutput({ pid, text });
    }).catch((e) => {
      if (!ac.signal.aborted) throw e;
    });
    if (!ac.signal.aborted) procs.reload();
  };
  return (
    <div>
      <Form label="Start a background process" submit="Start" class="inline" onSubmit={async () => {
          await post(base, { cmd });
          setCmd("");
          procs.reload();
        }}
      >
        <Field label="Command">
          <input value={cmd} onInput={(e) => setCmd(e.currentTarget.value)} class="mono" placeholder="python3 -m http.server 8000" required />
        </Field>
      </Form>
      <div class="btn-row">
        <button type="button" onClick={procs.reload}>
          Refresh
        </button>
      </div>
      <ErrorBox error={procs.error || err} />
      <Table label="Processes" rows={procs.data?.processes} loading={procs.loading} rowKey={(p) => String(p.pid)} empty="No background processes."
        cols={[
          { label: "PID", cell: (p) => p.pid, class: "mono" },
          { label: "Command", cell: (p) => p.cmd ?? p.argv?.join(" "), class: "mono" },
          { label: "State", cell: (p) => <State state={p.state} /> },
          { label: "Exit", cell: (p) => p.signal ?? p.exit_code ?? "—" },
          { label: "Started", cell: (p) => <Time at={p.started_at} /> },
          {
            label: "Actions",
            cell: (p) => (
              <div class="btn-row">
                <button type="button" class="small" aria-pressed={output?.pid === p.pid} onClick={() => void show(p.pid).then(() => setErr(""), (e) => setErr(message(e)))}>
                  Output
                </button>
                {p.state === "running" && (
                  <ActionButton
                    class="small"
                    danger
                    onError={setErr}
                    onClick={async () => {
                      await del(base + "/" + p.pid);
                      procs.reload();
                    }}
                  >
                    Kill
                  </ActionButton>
                )}
              </div>
            ),
          },
        ]}
      />
      {output && (
        <section aria-label={"Output of " + output.pid}>
          <h2>Output of {output.pid}</h2>
          <pre class="log">{output.text || "(no output)"}</pre>
        </section>
      )}
    </div>
  );
}

export function SandboxEvents({ id, live }: { id: string; live: SandboxEvent[] }) {
  // The audit log (admin keys) says who did what to it; the live events what its state did.
  const audit = useLoad((s) => get<{ entries: AuditEntry[] }>("/v1/audit?limit=100&resource=" + q(id), s), [id]);
  return (
    <div>
      <h2>Live</h2>
      {live.length === 0 ? (
        <p class="muted">No state change since this page opened.</p>
      ) : (
        <ol class="events" aria-label="Live state changes">
          {live.map((e) => (
            <li>
              {fmtTime(e.at)}: <State state={e.sandbox!.state} /> on {e.sandbox!.host}
            </li>
          ))}
        </ol>
      )}
      <h2>Audit log</h2>
      {audit.error ? (
        <p class="muted">{audit.error}</p>
      ) : (
        <Table label="Audit log" rows={audit.data?.entries} loading={audit.loading} rowKey={(e) => e.id} empty="Nothing recorded."
          cols={[
            { label: "When", cell: (e) => fmtTime(e.created_at) },
            { label: "Call", cell: (e) => e.method + " " + e.route, class: "mono" },
            { label: "Status", cell: (e) => e.status },
            { label: "Key", cell: (e) => e.key_id, class: "mono" },
          ]}
        />
      )}
    </div>
  );
}
