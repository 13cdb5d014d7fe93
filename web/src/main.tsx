import type { FunctionComponent } from "preact";
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { ApiError, call, getKey, onSignOut, setKey, signOut } from "./api";
import { FunctionDetail, Functions, Schedules } from "./pages/functions";
import { Hosts, Keys, Overview, Snapshots, Templates, Volumes } from "./pages/resources";
import { SandboxDetail, SandboxList } from "./pages/sandboxes";
import "./style.css";
import { ErrorBox, Field, Link, message, usePath } from "./ui";

/** A section is one entry of the navigation and the pages under its path. */
interface Section {
  path: string;
  label: string;
  admin?: boolean;
  page: FunctionComponent<{ rest: string[] }>;
}

/** lazy: a section whose pages are a chunk of their own, fetched on its first visit (the first
 * load stays small). */
function lazy(load: () => Promise<FunctionComponent<{ rest: string[] }>>): FunctionComponent<{ rest: string[] }> {
  let loaded: FunctionComponent<{ rest: string[] }> | null = null;
  return function Lazy({ rest }) {
    const [page, setPage] = useState(() => loaded);
    const [err, setErr] = useState("");
    useEffect(() => {
      if (!page)
        load().then(
          (p) => setPage(() => (loaded = p)),
          (e) => setErr("the page did not load: " + message(e)),
        );
    }, []);
    const Page = page;
    return Page ? <Page rest={rest} /> : <ErrorBox error={err} />;
  };
}

const sections: Section[] = [
  { path: "/", label: "Overview", page: () => <Overview /> },
  { path: "/sandboxes", label: "Sandboxes", page: ({ rest }) => (rest[0] ? <SandboxDetail id={rest[0]} tab={rest[1]} /> : <SandboxList />) },
  { path: "/templates", label: "Templates", page: () => <Templates /> },
  { path: "/volumes", label: "Volumes", page: () => <Volumes /> },
  { path: "/snapshots", label: "Snapshots", page: () => <Snapshots /> },
  { path: "/databases", label: "Databases", page: lazy(async () => (await import("./pages/databases")).DatabasesSection) },
  { path: "/apps", label: "Apps", page: lazy(async () => (await import("./pages/apps")).AppsSection) },
  { path: "/functions", label: "Functions", page: ({ rest }) => (rest[0] ? <FunctionDetail id={rest[0]} /> : <Functions />) },
  { path: "/schedules", label: "Schedules", page: () => <Schedules /> },
  { path: "/keys", label: "API keys", page: () => <Keys /> },
  { path: "/hosts", label: "Hosts", admin: true, page: () => <Hosts /> },
];

function route(path: string): { section: Section | undefined; rest: string[] } {
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const section = sections.find((s) => (parts.length === 0 ? s.path === "/" : s.path === "/" + parts[0]));
  return { section, rest: parts.slice(1) };
}

function SignIn({ why, onIn }: { why: string; onIn: (admin: boolean) => void }) {
  const [key, setValue] = useState("");
  const [err, setErr] = useState("");
  const [busy, setBusy] = useState(false);
  return (
    <main class="signin">
      <h1>PandaStack console</h1>
      {why && (
        <p class="notice" role="status">
          Signed out: {why}
        </p>
      )}
      <form
        aria-label="Sign in"
        onSubmit={async (e) => {
          e.preventDefault();
          setBusy(true);
          setErr("");
          try {
            const k = key.trim();
            // A key that may not read the info is still a key (a sandboxes-only one): 403 is fine.
            await call("GET", "/v1/info", { key: k }).catch((e) => {
              if (!(e instanceof ApiError && e.status === 403)) throw e;
            });
            setKey(k);
            onIn(await isAdmin());
          } catch (e) {
            setErr(message(e));
          } finally {
            setBusy(false);
          }
        }}
      >
        <Field label="API key" hint="Kept in this tab's session storage only; sent only in the Authorization header.">
          <input type="password" autocomplete="off" value={key} onInput={(e) => setValue(e.currentTarget.value)} placeholder="pds_…" required autofocus />
        </Field>
        <button type="submit" disabled={busy}>
          Sign in
        </button>
        {err && (
          <p class="error" role="alert">
            {err}
          </p>
        )}
      </form>
    </main>
  );
}

async function isAdmin(): Promise<boolean> {
  try {
    await call("GET", "/v1/hosts");
    return true;
  } catch {
    return false;
  }
}

function App() {
  const [signedIn, setSignedIn] = useState(getKey() !== null);
  const [admin, setAdmin] = useState(false);
  const [why, setWhy] = useState("");
  const [menu, setMenu] = useState(false);
  const path = usePath();
  useEffect(
    () =>
      onSignOut((w) => {
        setSignedIn(false);
        setWhy(w);
      }),
    [],
  );
  useEffect(() => {
    if (signedIn) void isAdmin().then(setAdmin);
  }, [signedIn]);
  useEffect(() => setMenu(false), [path]);
  if (!signedIn)
    return (
      <SignIn
        why={why}
        onIn={(a) => {
          setAdmin(a);
          setWhy("");
          setSignedIn(true);
        }}
      />
    );
  const { section, rest } = route(path);
  const Page = section && (!section.admin || admin) ? section.page : null;
  return (
    <div class="shell">
      <a href="#main" class="skip">
        Skip to content
      </a>
      <header class="top">
        <button type="button" class="menu-btn" aria-expanded={menu} aria-controls="nav" onClick={() => setMenu(!menu)}>
          Menu
        </button>
        <Link href="/" class="brand">
          PandaStack
        </Link>
        <button type="button" class="signout" onClick={() => signOut()}>
          Sign out
        </button>
      </header>
      <nav id="nav" class={"side" + (menu ? " open" : "")} aria-label="Console">
        <ul>
          {sections
            .filter((s) => !s.admin || admin)
            .map((s) => (
              <li>
                <Link href={s.path} aria-current={section === s ? "page" : undefined}>
                  {s.label}
                </Link>
              </li>
            ))}
        </ul>
      </nav>
      <main id="main" tabIndex={-1}>
        {Page ? (
          <Page rest={rest} />
        ) : (
          <p>
            No page here. <Link href="/">Overview</Link>
          </p>
        )}
      </main>
    </div>
  );
}

render(<App />, document.getElementById("app")!);
