#!/usr/bin/env node
// pandastack-worker: runs one task with the Claude Agent SDK inside a claude-agent sandbox.
//   echo '{"prompt": "list the files in /work", "cwd": "/work"}' | pandastack-worker
//   pandastack-worker --check    # loads the SDK and prints its version
// Messages from the SDK are printed as JSON lines on stdout; errors go to stderr with exit
// code 2 (bad task or no API key) or 3 (the SDK failed).
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

const fail = (code, msg) => {
  process.stderr.write(`pandastack-worker: ${msg}\n`);
  process.exit(code);
};

const globalModules = createRequire('/usr/local/lib/node_modules/');
let sdk, version;
try {
  const entry = globalModules.resolve('@anthropic-ai/claude-agent-sdk');
  version = JSON.parse(readFileSync(join(dirname(entry), 'package.json'), 'utf8')).version;
  sdk = await import(entry);
} catch (e) {
  fail(3, `cannot load @anthropic-ai/claude-agent-sdk: ${e.message}`);
}

if (process.argv.includes('--check') || process.argv.includes('--version')) {
  console.log(JSON.stringify({ sdk: '@anthropic-ai/claude-agent-sdk', version, query: typeof sdk.query }));
  process.exit(0);
}

let input = '';
for await (const chunk of process.stdin) {
  input += chunk;
  if (input.length > 1 << 20) fail(2, 'task is larger than 1 MiB');
}
let task;
try {
  task = JSON.parse(input);
} catch (e) {
  fail(2, `task must be JSON like {"prompt": "..."}: ${e.message}`);
}
if (typeof task?.prompt !== 'string' || task.prompt.trim() === '') fail(2, 'task needs a non-empty "prompt" string');
if (!process.env.ANTHROPIC_API_KEY && !process.env.CLAUDE_CODE_OAUTH_TOKEN) {
  fail(2, 'ANTHROPIC_API_KEY is not set: pass it in the exec env or the sandbox env');
}
try {
  const options = { cwd: typeof task.cwd === 'string' ? task.cwd : process.cwd() };
  if (typeof task.max_turns === 'number') options.maxTurns = task.max_turns;
  for await (const message of sdk.query({ prompt: task.prompt, options })) {
    process.stdout.write(JSON.stringify(message) + '\n');
  }
} catch (e) {
  fail(3, `task failed: ${e.message}`);
}
