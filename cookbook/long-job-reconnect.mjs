// A long job with reconnect: start it in the background, watch its output, drop the connection
// (as a crashed or restarted client would), then reconnect from the last offset and wait for the
// end: nothing is lost or repeated, and the job never noticed.
import { PandaStack } from "@pandastack/sdk";

const client = new PandaStack();
const sb = await client.sandboxes.create({ template: process.env.PANDASTACK_TEST_TEMPLATE || "base", ttlSeconds: 300 });
try {
  const job = await sb.processes.start("for i in $(seq 1 10); do echo step $i; sleep 0.3; done; echo finished");
  let seen = "";
  const drop = new AbortController();
  try {
    for await (const ev of job.output({ follow: true, signal: drop.signal })) {
      if (ev.type === "stdout") seen += ev.data;
      if (seen.includes("step 3")) drop.abort(); // the client goes away mid-job
    }
  } catch (e) {
    if (!drop.signal.aborted) throw e;
  }
  console.log(`dropped after ${seen.trim().split("\n").length} lines, at offset ${job.offset}`);

  // Later, maybe from another process: only the pid and the offset are needed.
  const again = sb.processes.connect(job.pid, { offset: job.offset });
  const rest = await again.wait();
  const all = seen + rest.stdout;
  const want = Array.from({ length: 10 }, (_, i) => `step ${i + 1}\n`).join("") + "finished\n";
  if (all !== want || rest.exitCode !== 0) throw new Error(`output after reconnect: ${JSON.stringify(all)}`);
  console.log(`reconnected and read the rest: ${rest.stdout.trim().split("\n").length} more lines, exit ${rest.exitCode}`);
  console.log("ok");
} finally {
  await sb.kill();
}
