// Tools for the Vercel AI SDK (`ai` on npm) over one sandbox: `@pandastack/sdk/ai` (ES modules,
// like `ai` itself). docs/sdk-typescript.md#ai-sdk-tools.
//
//   import { generateText, stepCountIs } from "ai";
//   import { PandaStack } from "@pandastack/sdk";
//   import { sandboxTools } from "@pandastack/sdk/ai";
//   const sb = await new PandaStack().sandboxes.create({ template: "base" });
//   const { text } = await generateText({ model, tools: sandboxTools(sb), stopWhen: stepCountIs(8), prompt });
import { jsonSchema, tool, type Tool } from "ai";
import type { Sandbox } from "./sandbox.js";

/** Limits of what a tool hands the model (the rest is cut, with `truncated` set). */
export interface SandboxToolsOptions {
  /** The most characters of a file, or of a command's or process's output, returned (default 64 KiB). */
  maxOutputChars?: number;
  /** An exec's timeout in seconds when the model gives none (default: the server's, 60). */
  execTimeoutSeconds?: number;
}

type Schema = Parameters<typeof jsonSchema>[0];

const str = (description: string) => ({ type: "string", description }) as const;
const obj = (properties: Record<string, unknown>, required: string[]): Schema =>
  ({ type: "object", properties, required, additionalProperties: false }) as Schema;
const env = { type: "object", additionalProperties: { type: "string" }, description: "extra environment variables" };

function cut(s: string, max: number): { text: string; truncated: boolean } {
  return s.length > max ? { text: s.slice(0, max), truncated: true } : { text: s, truncated: false };
}

/**
 * The sandbox's tools for the AI SDK: `exec`, `readFile`, `writeFile`, `listFiles`,
 * `startProcess` and `processOutput`. Each runs against `sandbox` when the model calls it and
 * answers JSON; an API error is thrown (the AI SDK reports it to the model as a tool error).
 */
export function sandboxTools(sandbox: Sandbox, options: SandboxToolsOptions = {}): Record<string, Tool> {
  const max = options.maxOutputChars ?? 64 * 1024;
  return {
    exec: tool({
      description: "Run a shell command in the sandbox (a Linux microVM) and wait for it: stdout, stderr, exit code.",
      inputSchema: jsonSchema<{ cmd: string; cwd?: string; env?: Record<string, string>; timeoutSeconds?: number }>(
        obj({ cmd: str("a shell command line (/bin/sh -c)"), cwd: str("working directory"), env, timeoutSeconds: { type: "number", description: "kill it after this many seconds" } }, ["cmd"]),
      ),
      execute: async ({ cmd, cwd, env, timeoutSeconds }, { abortSignal }) => {
        const r = await sandbox.exec(cmd, { cwd, env, timeoutSeconds: timeoutSeconds ?? options.execTimeoutSeconds, signal: abortSignal });
        const out = cut(r.stdout, max), err = cut(r.stderr, max);
        return { exitCode: r.exitCode, stdout: out.text, stderr: err.text, timedOut: r.timedOut, truncated: out.truncated || err.truncated };
      },
    }),
    readFile: tool({
      description: "Read a text file of the sandbox.",
      inputSchema: jsonSchema<{ path: string }>(obj({ path: str("absolute path") }, ["path"])),
      execute: async ({ path }, { abortSignal }) => {
        const c = cut(await sandbox.files.read(path, { signal: abortSignal }), max);
        return { content: c.text, truncated: c.truncated };
      },
    }),
    writeFile: tool({
      description: "Write a text file in the sandbox (parents are made), replacing it.",
      inputSchema: jsonSchema<{ path: string; content: string }>(obj({ path: str("absolute path"), content: str("the file's text") }, ["path", "content"])),
      execute: async ({ path, content }, { abortSignal }) => {
        const info = await sandbox.files.write(path, content, { signal: abortSignal });
        return { path: info.path, size: info.size };
      },
    }),
    listFiles: tool({
      description: "List a directory of the sandbox.",
      inputSchema: jsonSchema<{ path: string }>(obj({ path: str("absolute directory path") }, ["path"])),
      execute: async ({ path }, { abortSignal }) => {
        const entries = await sandbox.files.list(path, { signal: abortSignal });
        return { entries: entries.map((e) => ({ name: e.name, path: e.path, type: e.type, size: e.size })) };
      },
    }),
    startProcess: tool({
      description: "Start a command in the background (a dev server, a long job) and return its pid at once; read its output with processOutput.",
      inputSchema: jsonSchema<{ cmd: string; cwd?: string; env?: Record<string, string> }>(obj({ cmd: str("a shell command line"), cwd: str("working directory"), env }, ["cmd"])),
      execute: async ({ cmd, cwd, env }) => {
        const h = await sandbox.processes.start(cmd, { cwd, env });
        return { pid: h.pid };
      },
    }),
    processOutput: tool({
      description: "Read a background process's output from an offset without waiting; says whether it still runs and its exit code once it exited. Pass the previous answer's next as offset to read only newer output.",
      inputSchema: jsonSchema<{ pid: number; offset?: number }>(obj({ pid: { type: "integer", description: "the pid startProcess returned" }, offset: { type: "integer", description: "where to read from (default 0)" } }, ["pid"])),
      execute: async ({ pid, offset }, { abortSignal }) => {
        const h = sandbox.processes.connect(pid, { offset: offset ?? 0 });
        let stdout = "", stderr = "", running = false, exitCode: number | undefined;
        for await (const ev of h.output({ signal: abortSignal })) {
          if (ev.type === "stdout") stdout += ev.data;
          else if (ev.type === "stderr") stderr += ev.data;
          else if (ev.type === "running") running = true;
          else if (ev.type === "exit") exitCode = ev.exitCode;
        }
        const out = cut(stdout, max), err = cut(stderr, max);
        return { stdout: out.text, stderr: err.text, next: h.offset, running, exitCode, truncated: out.truncated || err.truncated };
      },
    }),
  };
}
