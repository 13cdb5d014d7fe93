// Code interpreter: results of `Sandbox.runCode` (sandboxes of the code-interpreter template).
import { APIConnectionError, errorFromPayload } from "./errors.js";
import type { Transport } from "./http.js";

/** The wire shape of one rich result. */
export interface ResultData {
  text?: string;
  html?: string;
  markdown?: string;
  png?: string;
  jpeg?: string;
  svg?: string;
  json?: string;
  latex?: string;
  javascript?: string;
  is_main_result?: boolean;
}

function decodeBase64(s: string): Uint8Array {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/**
 * One rich result: the value of the code's last expression (`isMainResult`) or something it
 * displayed, such as a matplotlib chart. `png`/`jpeg` are the image's bytes, `json` the decoded
 * value.
 */
export class Result {
  readonly text?: string;
  readonly html?: string;
  readonly markdown?: string;
  readonly svg?: string;
  readonly latex?: string;
  readonly javascript?: string;
  readonly png?: Uint8Array;
  readonly jpeg?: Uint8Array;
  readonly json?: unknown;
  readonly isMainResult: boolean;
  readonly raw: ResultData;

  constructor(d: ResultData) {
    this.raw = { ...d };
    this.text = d.text;
    this.html = d.html;
    this.markdown = d.markdown;
    this.svg = d.svg;
    this.latex = d.latex;
    this.javascript = d.javascript;
    this.png = d.png ? decodeBase64(d.png) : undefined;
    this.jpeg = d.jpeg ? decodeBase64(d.jpeg) : undefined;
    this.json = d.json ? JSON.parse(d.json) : undefined;
    this.isMainResult = Boolean(d.is_main_result);
  }

  /** The formats this result has (`["text", "html"]` for a DataFrame). */
  formats(): string[] {
    return (["text", "html", "markdown", "png", "jpeg", "svg", "json", "latex", "javascript"] as const).filter((k) => Boolean(this.raw[k]));
  }
}

/** An exception the code raised; the context lives on. */
export interface ExecutionError {
  name: string;
  value: string;
  traceback: string;
}

/** What the code printed, in the chunks it was printed in. */
export interface Logs {
  stdout: string[];
  stderr: string[];
}

/** A finished `runCode`. */
export class Execution {
  results: Result[] = [];
  logs: Logs = { stdout: [], stderr: [] };
  error?: ExecutionError;
  executionCount?: number | null;
  durationMs?: number;

  /** The main result's text (the value of the last expression), if any. */
  get text(): string | undefined {
    return this.results.find((r) => r.isMainResult)?.text;
  }

  static fromAPI(d: Record<string, unknown>): Execution {
    const x = new Execution();
    x.results = ((d.results as ResultData[] | undefined) ?? []).map((r) => new Result(r));
    const logs = (d.logs ?? {}) as Partial<Logs>;
    x.logs = { stdout: [...(logs.stdout ?? [])], stderr: [...(logs.stderr ?? [])] };
    x.error = (d.error as ExecutionError | undefined) ?? undefined;
    x.executionCount = d.execution_count as number | null | undefined;
    x.durationMs = d.duration_ms as number | undefined;
    return x;
  }
}

/** A code context's language: Python (the default; a Jupyter kernel) or JavaScript ("js": Node.js). */
export type CodeLanguage = "python" | "javascript" | "js";

/** A kernel with its own variables in a sandbox (`Sandbox.createCodeContext`). */
export interface CodeContext {
  id: string;
  language: string;
  cwd: string;
}

export interface RunCodeOptions {
  /** A context from `createCodeContext` (or its id); the language's default context if left out. */
  context?: string | CodeContext;
  /** The language of the default context to run in (python unless said); a context runs its own. */
  language?: CodeLanguage;
  onStdout?: (data: string) => void;
  onStderr?: (data: string) => void;
  onResult?: (result: Result) => void;
  onError?: (error: ExecutionError) => void;
  /** Seconds until the code is interrupted (default 300). */
  timeout?: number;
  signal?: AbortSignal;
}

/** @internal the request body of a runCode */
export function codeBody(code: string, o: RunCodeOptions): Record<string, unknown> {
  const body: Record<string, unknown> = { code };
  if (o.context !== undefined) body.context_id = typeof o.context === "string" ? o.context : o.context.id;
  if (o.language !== undefined) body.language = o.language;
  if (o.timeout !== undefined) body.timeout_seconds = o.timeout;
  return body;
}

/** @internal reads a streamed execution, calling the options' callbacks as events arrive */
export async function streamCode(http: Transport, path: string, body: Record<string, unknown>, timeoutMs: number | null, o: RunCodeOptions): Promise<Execution> {
  const x = new Execution();
  let requestId: string | undefined;
  let ended = false;
  for await (const obj of http.lines("POST", path, { json: body, timeoutMs, signal: o.signal, onRequestId: (id) => (requestId = id) })) {
    if ("stream_error" in obj) throw errorFromPayload(undefined, { error: obj.stream_error }, requestId);
    if ("stdout" in obj) {
      x.logs.stdout.push(String(obj.stdout));
      o.onStdout?.(String(obj.stdout));
    } else if ("stderr" in obj) {
      x.logs.stderr.push(String(obj.stderr));
      o.onStderr?.(String(obj.stderr));
    } else if ("result" in obj) {
      const r = new Result(obj.result as ResultData);
      x.results.push(r);
      o.onResult?.(r);
    } else if ("error" in obj) {
      x.error = obj.error as ExecutionError;
      o.onError?.(x.error);
    } else if ("end" in obj) {
      const e = obj.end as { execution_count?: number | null; duration_ms?: number };
      x.executionCount = e.execution_count;
      x.durationMs = e.duration_ms;
      ended = true;
      break;
    }
  }
  if (!ended) throw new APIConnectionError("the code stream ended before the execution did", { requestId });
  return x;
}
