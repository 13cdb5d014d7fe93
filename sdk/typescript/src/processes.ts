import { APIConnectionError, NotFound, Timeout, errorFromPayload } from "./errors.js";
import type { Transport } from "./http.js";
import { OutputGatherer } from "./output.js";

// Background processes of a sandbox (docs/processes.md): `sandbox.processes`.

/** A background process as the API lists it. */
export interface Process {
  pid: number;
  /** The label given at start. */
  tag?: string;
  cmd?: string;
  argv?: string[];
  cwd?: string;
  user?: string;
  /** "running" or "exited" */
  state: string;
  /** Once exited (128 + the signal's number when a signal killed it). */
  exitCode?: number;
  /** The signal that killed it, e.g. "SIGTERM". */
  signal?: string;
  startedAt: Date | null;
  exitedAt: Date | null;
  /** Its stdin pipe is open (started with `stdin: true`, not closed yet). */
  stdin: boolean;
  /** It runs on a terminal of its own (started with `pty`). */
  pty: boolean;
  /** The oldest output offset still kept (the last 1 MiB is). */
  outputStart: number;
  /** The offset the next output byte gets. */
  outputEnd: number;
  raw: Record<string, unknown>;
}

/**
 * One event of a process's output: a chunk of stdout or stderr at byte `offset`, then `exit`
 * (the process ended) or, when not following, `running` (all kept output was read). `next` is
 * where a later read resumes.
 */
export type ProcessEvent =
  | { type: "stdout" | "stderr"; data: string; offset: number; next: number }
  | { type: "exit"; exitCode: number; signal?: string; next: number }
  | { type: "running"; next: number };

export interface StartProcessOptions {
  env?: Record<string, string>;
  cwd?: string;
  /** Guest user to run as (default `user`). */
  user?: string;
  /** Keep a pipe to its stdin open for `sendStdin` (else it reads /dev/null). */
  stdin?: boolean;
  /** A label listed with the process (printable, at most 256 bytes). */
  tag?: string;
  /** Run it on a terminal of its own (`sendStdin` types into it; its output is the terminal's;
   * `resize` resizes it). Sizes 1–1000; 0 or absent: 80×24. */
  pty?: { cols?: number; rows?: number };
}

export interface WaitOptions {
  onStdout?: (data: string) => void;
  onStderr?: (data: string) => void;
  signal?: AbortSignal;
}

/** How a process ended, and the output `wait` read. */
export interface ProcessResult {
  pid: number;
  exitCode: number;
  signal?: string;
  stdout: string;
  stderr: string;
}

/** What processes need of their sandbox. */
interface SandboxRef {
  readonly id: string;
  readonly client: { readonly http: Transport };
}

/** How many times `wait` reconnects a dropped stream in a row. */
const RECONNECTS = 5;

const time = (v: unknown): Date | null => (typeof v === "string" && v ? new Date(v) : null);

function toProcess(x: Record<string, unknown>): Process {
  return {
    pid: Number(x.pid),
    tag: x.tag as string | undefined,
    cmd: x.cmd as string | undefined,
    argv: x.argv as string[] | undefined,
    cwd: x.cwd as string | undefined,
    user: x.user as string | undefined,
    state: String(x.state ?? ""),
    exitCode: x.exit_code as number | undefined,
    signal: x.signal as string | undefined,
    startedAt: time(x.started_at),
    exitedAt: time(x.exited_at),
    stdin: Boolean(x.stdin),
    pty: Boolean(x.pty),
    outputStart: Number(x.output_start ?? 0),
    outputEnd: Number(x.output_end ?? 0),
    raw: { ...x },
  };
}

/**
 * One background process: read its output from any offset, write its stdin, signal or kill it.
 * Dropping a handle never touches the process. `offset` is where the next read starts.
 */
export class ProcessHandle {
  constructor(
    private readonly sandbox: SandboxRef,
    readonly pid: number,
    public offset = 0,
  ) {}

  private get http(): Transport {
    return this.sandbox.client.http;
  }

  private path(sub = ""): string {
    return `/v1/sandboxes/${encodeURIComponent(this.sandbox.id)}/processes/${this.pid}${sub}`;
  }

  /** The output from `offset` (default: where this handle stopped), as events. */
  async *output(options: { offset?: number; follow?: boolean; signal?: AbortSignal } = {}): AsyncGenerator<ProcessEvent, void, undefined> {
    let requestId: string | undefined;
    const lines = this.http.lines("GET", this.path("/output"), {
      query: { offset: options.offset ?? this.offset, follow: options.follow ? 1 : undefined },
      timeoutMs: null,
      signal: options.signal,
      onRequestId: (id) => {
        requestId = id;
      },
    });
    for await (const obj of lines) {
      if ("error" in obj) throw errorFromPayload(undefined, obj, requestId);
      const next = Number(obj.next);
      this.offset = next;
      if ("stdout" in obj || "stderr" in obj) {
        const type = "stdout" in obj ? "stdout" : "stderr";
        yield { type, data: String(obj[type] ?? ""), offset: Number(obj.offset), next };
      } else if (obj.running) {
        yield { type: "running", next };
        return;
      } else {
        yield { type: "exit", exitCode: obj.exit_code === undefined ? -1 : Number(obj.exit_code), signal: obj.signal as string | undefined, next };
        return;
      }
    }
    throw new APIConnectionError("the output stream ended before the process's end line", { requestId });
  }

  /**
   * Follow the output until the process exits; callbacks get each chunk as it comes. A dropped
   * stream is resumed where it stopped: nothing is lost or repeated.
   */
  async wait(options: WaitOptions = {}): Promise<ProcessResult> {
    const got = new OutputGatherer(options.onStdout, options.onStderr);
    for (let failures = 0; ; ) {
      try {
        for await (const ev of this.output({ follow: true, signal: options.signal })) {
          failures = 0;
          got.add(ev);
          if (ev.type === "exit") {
            return { pid: this.pid, exitCode: ev.exitCode, signal: ev.signal, stdout: got.stdout, stderr: got.stderr };
          }
        }
      } catch (e) {
        if (!(e instanceof APIConnectionError || e instanceof Timeout) || options.signal?.aborted || ++failures > RECONNECTS) throw e;
        await new Promise((r) => setTimeout(r, 500 * failures));
      }
    }
  }

  /** Write to its stdin (at most 1 MiB a call); `eof` closes it afterwards. */
  async sendStdin(data: string | Uint8Array, options: { eof?: boolean } = {}): Promise<void> {
    const text = typeof data === "string" ? data : new TextDecoder().decode(data);
    await this.http.request("POST", this.path("/stdin"), { json: options.eof ? { data: text, eof: true } : { data: text } });
  }

  /** Set the terminal size of a process started with `pty` (its programs get SIGWINCH). */
  async resize(cols: number, rows: number): Promise<void> {
    await this.http.request("POST", this.path("/resize"), { json: { cols, rows } });
  }

  /** Send a signal to its group: TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP or CONT. */
  async signal(signal: string): Promise<void> {
    await this.http.request("POST", this.path("/signal"), { json: { signal } });
  }

  /** Kill it and its whole tree; resolves to the process after (normally exited). */
  async kill(): Promise<Process> {
    return toProcess(await this.http.json<Record<string, unknown>>("DELETE", this.path(), { idempotent: true }));
  }

  /** The process as the sandbox lists it now. */
  async info(): Promise<Process> {
    const p = (await new Processes(this.sandbox).list()).find((x) => x.pid === this.pid);
    if (!p) throw new NotFound(`process ${this.pid} is not listed in sandbox ${this.sandbox.id}`, { code: "not_found" });
    return p;
  }
}

/** `sandbox.processes`: start background processes and come back to them. */
export class Processes {
  constructor(private readonly sandbox: SandboxRef) {}

  private path(): string {
    return `/v1/sandboxes/${encodeURIComponent(this.sandbox.id)}/processes`;
  }

  /** Start `cmd` (a shell command line, or an argv array) in the background; resolves at once. */
  async start(cmd: string | readonly string[], options: StartProcessOptions = {}): Promise<ProcessHandle> {
    const body: Record<string, unknown> = {};
    if (typeof cmd === "string") body.cmd = cmd;
    else if (Array.isArray(cmd) && cmd.length > 0 && cmd.every((a) => typeof a === "string")) body.argv = [...cmd];
    else throw new TypeError("cmd must be a string (a shell command line) or a non-empty array of strings (argv)");
    if (options.env && Object.keys(options.env).length) body.env = options.env;
    if (options.cwd !== undefined) body.cwd = options.cwd;
    if (options.user !== undefined) body.user = options.user;
    if (options.stdin) body.stdin = true;
    if (options.tag !== undefined) body.tag = options.tag;
    if (options.pty) body.pty = { cols: options.pty.cols ?? 0, rows: options.pty.rows ?? 0 };
    const d = await this.sandbox.client.http.json<{ pid: number }>("POST", this.path(), { json: body });
    return new ProcessHandle(this.sandbox, Number(d.pid));
  }

  /** The running processes and the last ones that exited (with exit codes). */
  async list(): Promise<Process[]> {
    const d = await this.sandbox.client.http.json<{ processes?: Record<string, unknown>[] }>("GET", this.path(), { idempotent: true });
    return (d.processes ?? []).map(toProcess);
  }

  /** A handle on a process started earlier, reading from `offset` (0: the oldest kept). */
  connect(pid: number, options: { offset?: number } = {}): ProcessHandle {
    return new ProcessHandle(this.sandbox, pid, options.offset ?? 0);
  }

  /** Kill a process and its whole tree. */
  kill(pid: number): Promise<Process> {
    return new ProcessHandle(this.sandbox, pid).kill();
  }

  /** Write to a process's stdin. */
  sendStdin(pid: number, data: string | Uint8Array, options: { eof?: boolean } = {}): Promise<void> {
    return new ProcessHandle(this.sandbox, pid).sendStdin(data, options);
  }

  /** Send a signal to a process's group. */
  signal(pid: number, signal: string): Promise<void> {
    return new ProcessHandle(this.sandbox, pid).signal(signal);
  }
}
