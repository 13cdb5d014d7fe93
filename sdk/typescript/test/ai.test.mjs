// @pandastack/sdk/ai (tools for the Vercel AI SDK) against a real PandaStack: the AI SDK's own
// generateText loop drives the tools, the model being the AI SDK's test model (ai/test) scripted to
// call them (no network model).
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { generateText, stepCountIs } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { sandboxTools } from "@pandastack/sdk/ai";
import { LONG, liveSuite } from "./helpers.mjs";

const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };

/** The results of the tools called in the last step, by tool name, from the model's prompt. */
function lastResults(prompt) {
  const out = {};
  const last = [...prompt].reverse().find((m) => m.role === "tool");
  for (const part of last?.content ?? []) {
    if (part.type === "tool-result") out[part.toolName] = part.output;
  }
  return out;
}

/**
 * A scripted model: each step's tool calls come from script(step, results of the last step);
 * null ends with a text answer.
 */
function scriptedModel(script) {
  let step = 0, n = 0;
  return new MockLanguageModelV4({
    doGenerate: async ({ prompt }) => {
      // From the fourth step on the script polls a process: a pause between polls, so that the
      // step limit is not used up before the process ends on a fast machine.
      if (step >= 3) await new Promise((r) => setTimeout(r, 100));
      const calls = script(step++, lastResults(prompt));
      if (!calls) return { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
      return {
        content: calls.map(([toolName, input]) => ({ type: "tool-call", toolCallId: `call-${n++}`, toolName, input: JSON.stringify(input) })),
        finishReason: { unified: "tool-calls", raw: undefined }, usage, warnings: [],
      };
    },
  });
}

describe("AI SDK tools (@pandastack/sdk/ai)", () => {
  let sb;
  liveSuite((live) => ({ sb } = live), { metadata: { suite: "ts-ai" } });

  it("the AI SDK's loop runs exec, files and processes in the sandbox", LONG, async () => {
    let pid, outSoFar = "", offset = 0, polls = 0;
    const model = scriptedModel((step, res) => {
      switch (step) {
        case 0:
          return [["writeFile", { path: "/tmp/ai/greeting.txt", content: "hello from the model\n" }]];
        case 1:
          return [["exec", { cmd: "tr a-z A-Z < greeting.txt; echo oops >&2; exit 3", cwd: "/tmp/ai" }], ["listFiles", { path: "/tmp/ai" }], ["readFile", { path: "/tmp/ai/greeting.txt" }]];
        case 2:
          return [["startProcess", { cmd: "for i in 1 2 3; do echo tick $i; sleep 0.2; done; exit 4" }]];
        default: {
          if (res.startProcess) pid = res.startProcess.value.pid;
          const o = res.processOutput?.value;
          if (o) {
            outSoFar += o.stdout;
            offset = o.next;
            if (!o.running) return null;
          }
          polls++;
          return [["processOutput", { pid, offset }]];
        }
      }
    });
    const result = await generateText({ model, tools: sandboxTools(sb), stopWhen: stepCountIs(200), prompt: "use the sandbox" });
    assert.equal(result.text, "done");

    const results = Object.fromEntries(result.steps.flatMap((s) => s.toolResults).map((r) => [r.toolName, r.output]));
    assert.deepEqual(results.writeFile, { path: "/tmp/ai/greeting.txt", size: 21 });
    assert.deepEqual(results.exec, { exitCode: 3, stdout: "HELLO FROM THE MODEL\n", stderr: "oops\n", timedOut: false, truncated: false });
    assert.deepEqual(results.listFiles.entries.map((e) => [e.name, e.type, e.size]), [["greeting.txt", "file", 21]]);
    assert.deepEqual(results.readFile, { content: "hello from the model\n", truncated: false });
    assert.ok(pid > 0);
    assert.equal(outSoFar, "tick 1\ntick 2\ntick 3\n");
    assert.equal(results.processOutput.exitCode, 4);
    assert.ok(polls >= 1);
    // Every tool's input reached the model as a JSON schema object.
    const tools = model.doGenerateCalls[0].tools.map((t) => t.name).sort();
    assert.deepEqual(tools, ["exec", "listFiles", "processOutput", "readFile", "startProcess", "writeFile"]);
  });

  it("an API error is the tool's error, shown to the model", LONG, async () => {
    const model = scriptedModel((step) => (step === 0 ? [["readFile", { path: "/tmp/ai-missing/none" }]] : null));
    const result = await generateText({ model, tools: sandboxTools(sb), stopWhen: stepCountIs(3), prompt: "read" });
    const errs = result.steps.flatMap((s) => s.content).filter((c) => c.type === "tool-error");
    assert.equal(errs.length, 1);
    assert.match(String(errs[0].error), /not.found|No such|does not exist/i);
  });
});
