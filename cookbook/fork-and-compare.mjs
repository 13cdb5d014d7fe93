// Parallel fork-and-compare: prepare a sandbox once, fork it, try a different approach in each
// copy at the same time, and compare the results. Each fork starts from the parent's files and
// memory at the instant of the fork.
import { PandaStack } from "@pandastack/sdk";

const client = new PandaStack();
const parent = await client.sandboxes.create({ template: process.env.PANDASTACK_TEST_TEMPLATE || "base", ttlSeconds: 300 });
const made = [parent];
try {
  // The shared setup every attempt needs (here: a data file).
  await parent.exec("mkdir -p /work && seq 1 20000 > /work/numbers.txt");

  const approaches = {
    awk: "awk '{ s += $1 } END { print s }' /work/numbers.txt",
    shell: "s=0; while read n; do s=$((s + n)); done < /work/numbers.txt; echo $s",
    python: "python3 -c \"print(sum(int(l) for l in open('/work/numbers.txt')))\"",
  };
  const children = await parent.fork(Object.keys(approaches).length);
  made.push(...children);
  const results = await Promise.all(
    Object.entries(approaches).map(async ([name, cmd], i) => {
      const started = Date.now();
      const r = await children[i].exec(cmd);
      return { name, sandbox: children[i].id, answer: r.stdout.trim(), exitCode: r.exitCode, ms: Date.now() - started };
    }),
  );
  for (const r of results) console.log(`${r.name.padEnd(7)} ${r.sandbox}  answer ${r.answer}  exit ${r.exitCode}  ${r.ms} ms`);
  const answers = new Set(results.map((r) => r.answer));
  if (answers.size !== 1 || !answers.has("200010000") || results.some((r) => r.exitCode !== 0)) throw new Error("the approaches disagree");
  console.log("ok");
} finally {
  await Promise.all(made.map((sb) => sb.kill().catch(() => {})));
}
