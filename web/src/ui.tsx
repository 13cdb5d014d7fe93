// Shared pieces: routing, loading, actions with their errors, tables, small formatters.
import type { ComponentChildren } from "preact";
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { ApiError, del, get, onEvent } from "./api";

// -- routing (the History API; the server answers index.html for every console path) ---------

const routeListeners = new Set<() => void>();
window.addEventListener("popstate", () => routeListeners.forEach((fn) => fn()));

export function navigate(to: string): void {
  if (to === location.pathname + location.search) return;
  history.pushState(null, "", to);
  routeListeners.forEach((fn) => fn());
  window.scrollTo(0, 0);
}

export function usePath(): string {
  const [path, setPath] = useState(location.pathname);
  useEffect(() => {
    const fn = () => setPath(location.pathname);
    routeListeners.add(fn);
    return () => void routeListeners.delete(fn);
  }, []);
  return path;
}

export function Link(props: { href: string; children: ComponentChildren; class?: string; "aria-current"?: "page" | undefined }) {
  const onClick = (e: MouseEvent) => {
    if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    navigate(props.href);
  };
  return (
    <a href={props.href} onClick={onClick} class={props.class} aria-current={props["aria-current"]}>
      {props.children}
    </a>
  );
}

// -- loading and acting ------------------------------------------------------------------------

export function message(e: unknown): string {
  if (e instanceof ApiError) return e.message;
  if (e instanceof Error) return e.message;
  return String(e);
}

export interface Loaded<T> {
  data: T | undefined;
  error: string;
  loading: boolean;
  reload: () => void;
  set: (fn: (old: T | undefined) => T | undefined) => void;
}

/** useLoad runs load now, whenever deps change and on reload(); stale answers are dropped. */
export function useLoad<T>(load: (signal: AbortSignal) => Promise<T>, deps: unknown[]): Loaded<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState("");
  const [loading, setLoading] = useState(true);
  const [n, setN] = useState(0);
  useEffect(() => {
    const ac = new AbortController();
    setLoading(true);
    load(ac.signal).then(
      (v) => {
        if (ac.signal.aborted) return;
        setData(v);
        setError("");
        setLoading(false);
      },
      (e) => {
        if (ac.signal.aborted) return;
        setError(message(e));
        setLoading(false);
      },
    );
    return () => ac.abort();
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [...deps, n]);
  const reload = useCallback(() => setN((x) => x + 1), []);
  return { data, error, loading, reload, set: setData };
}

/** useChanges calls reload whenever a change event names a route under one of prefixes (any of
 * the team's keys made, changed or deleted something this page lists). */
export function useChanges(prefixes: string[], reload: () => void): void {
  useEffect(
    () =>
      onEvent((ev) => {
        const route = ev.type === "change" ? ev.change?.route : undefined;
        if (route && prefixes.some((p) => route === p || route.startsWith(p + "/"))) reload();
      }),
    [prefixes.join(" "), reload],
  );
}

/** useLive loads GET path (again when path changes), and again whenever a change event names a
 * route under one of routes. */
export function useLive<T>(path: string, routes: string[]): Loaded<T> {
  const loaded = useLoad((s) => get<T>(path, s), [path]);
  useChanges(routes, loaded.reload);
  return loaded;
}

/** useAction wraps user actions: busy while one runs, its error kept to show. */
export function useAction(): { run: (fn: () => Promise<unknown>) => Promise<boolean>; busy: boolean; error: string; clear: () => void } {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");
  const mounted = useRef(true);
  useEffect(() => () => void (mounted.current = false), []);
  const run = useCallback(async (fn: () => Promise<unknown>) => {
    setBusy(true);
    setError("");
    try {
      await fn();
      return true;
    } catch (e) {
      if (mounted.current) setError(message(e));
      return false;
    } finally {
      if (mounted.current) setBusy(false);
    }
  }, []);
  return { run, busy, error, clear: () => setError("") };
}

// -- components ----------------------------------------------------------------------------------

export function ErrorBox({ error }: { error: string }) {
  if (!error) return null;
  return (
    <p class="error" role="alert">
      {error}
    </p>
  );
}

export function Busy({ on, label = "working…" }: { on: boolean; label?: string }) {
  if (!on) return null;
  return (
    <span class="busy" role="status" aria-live="polite">
      <span class="spinner" aria-hidden="true" /> {label}
    </span>
  );
}

export function PageHead({ title, children }: { title: string; children?: ComponentChildren }) {
  useEffect(() => {
    document.title = title + " · PandaStack";
  }, [title]);
  return (
    <header class="page-head">
      <h1>{title}</h1>
      <div class="actions">{children}</div>
    </header>
  );
}

export interface Col<T> {
  label: string;
  cell: (row: T) => ComponentChildren;
  class?: string;
}

export function Table<T>(props: { label: string; cols: Col<T>[]; rows: T[] | undefined; rowKey: (r: T) => string; empty: string; loading?: boolean }) {
  const { rows } = props;
  return (
    <div class="table-wrap">
      <table aria-label={props.label}>
        <thead>
          <tr>
            {props.cols.map((c) => (
              <th scope="col">{c.label}</th>
            ))}
          </tr>
        </thead>
        <tbody>
          {rows?.map((r) => (
            <tr key={props.rowKey(r)} data-key={props.rowKey(r)}>
              {props.cols.map((c) => (
                <td class={c.class} data-label={c.label}>
                  {c.cell(r)}
                </td>
              ))}
            </tr>
          ))}
          {rows && rows.length === 0 && (
            <tr>
              <td colSpan={props.cols.length} class="empty">
                {props.empty}
              </td>
            </tr>
          )}
          {!rows && props.loading && (
            <tr>
              <td colSpan={props.cols.length} class="empty">
                loading…
              </td>
            </tr>
          )}
        </tbody>
      </table>
    </div>
  );
}

export function State({ state }: { state: string }) {
  return <span class={"state state-" + state}>{state}</span>;
}

export function Copy({ text, label = "Copy" }: { text: string; label?: string }) {
  const [done, setDone] = useState(false);
  return (
    <button
      type="button"
      class="small"
      onClick={() => {
        void navigator.clipboard?.writeText(text).then(() => {
          setDone(true);
          setTimeout(() => setDone(false), 1500);
        });
      }}
    >
      {done ? "Copied" : label}
    </button>
  );
}

export function Field(props: { label: string; children: ComponentChildren; hint?: string }) {
  // The hint stays outside the <label>: the control's accessible name is the label alone.
  return (
    <div class="field-box">
      <label class="field">
        <span class="field-label">{props.label}</span>
        {props.children}
      </label>
      {props.hint && <span class="hint">{props.hint}</span>}
    </div>
  );
}

/** Form: a labelled form whose submit runs an action; its error shows under it. */
export function Form(props: { label: string; onSubmit: () => Promise<unknown>; submit: string; children: ComponentChildren; class?: string }) {
  const a = useAction();
  const onSubmit = (e: Event) => {
    e.preventDefault();
    void a.run(props.onSubmit);
  };
  return (
    <form aria-label={props.label} onSubmit={onSubmit} class={"form " + (props.class ?? "")}>
      {props.children}
      <div class="form-actions">
        <button type="submit" disabled={a.busy}>
          {props.submit}
        </button>
        <Busy on={a.busy} />
      </div>
      <ErrorBox error={a.error} />
    </form>
  );
}

/** ActionButton runs fn on click, disabled while it runs; errors go to onError. */
export function ActionButton(props: { onClick: () => Promise<unknown>; children: ComponentChildren; danger?: boolean; confirm?: string; class?: string; onError?: (m: string) => void; label?: string }) {
  const [busy, setBusy] = useState(false);
  return (
    <button
      type="button"
      aria-label={props.label}
      class={(props.danger ? "danger " : "") + (props.class ?? "")}
      disabled={busy}
      aria-busy={busy}
      onClick={async () => {
        if (props.confirm && !window.confirm(props.confirm)) return;
        setBusy(true);
        try {
          await props.onClick();
          props.onError?.("");
        } catch (e) {
          props.onError?.(message(e));
        } finally {
          setBusy(false);
        }
      }}
    >
      {props.children}
      {busy && <span class="spinner" aria-hidden="true" />}
    </button>
  );
}

// -- formatting ------------------------------------------------------------------------------------

export function fmtTime(s: string | null | undefined): string {
  if (!s) return "—";
  const d = new Date(s);
  return isNaN(d.getTime()) ? s : d.toLocaleString();
}

export function ago(s: string | null | undefined): string {
  if (!s) return "—";
  const secs = (Date.now() - new Date(s).getTime()) / 1000;
  const abs = Math.abs(secs);
  const unit = abs < 60 ? [abs, "s"] : abs < 3600 ? [abs / 60, "min"] : abs < 86400 ? [abs / 3600, "h"] : [abs / 86400, "d"];
  const n = Math.round(unit[0] as number) + " " + unit[1];
  return secs >= 0 ? n + " ago" : "in " + n;
}

export function fmtBytes(n: number | undefined): string {
  if (n === undefined) return "—";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < u.length - 1) {
    v /= 1024;
    i++;
  }
  return (i === 0 ? v : v.toFixed(1)) + " " + u[i];
}

export function Time({ at }: { at: string | null | undefined }) {
  return <time dateTime={at ?? undefined} title={fmtTime(at)}>{ago(at)}</time>;
}

/** DeleteButton DELETEs path once confirmed, then calls onDone (a list's reload). */
export function DeleteButton(props: { path: string; confirm: string; onDone: () => void; onError: (m: string) => void; label?: string; text?: string }) {
  return (
    <ActionButton
      class="small"
      danger
      label={props.label}
      confirm={props.confirm}
      onError={props.onError}
      onClick={async () => {
        await del(props.path);
        props.onDone();
      }}
    >
      {props.text ?? "Delete"}
    </ActionButton>
  );
}

/** Facts: a definition list of [label, value] rows; falsy rows are left out. */
export function Facts({ items }: { items: (readonly [string, ComponentChildren] | false | "" | undefined | null)[] }) {
  return (
    <dl class="facts">
      {items.map(
        (it) =>
          it && (
            <>
              <dt>{it[0]}</dt>
              <dd>{it[1]}</dd>
            </>
          ),
      )}
    </dl>
  );
}
