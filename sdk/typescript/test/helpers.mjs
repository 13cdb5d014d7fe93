// Shared helpers of the TypeScript SDK tests. They run against a real PandaStack named by
// PANDASTACK_BASE_URL and PANDASTACK_API_KEY (sdk/test.sh starts one and sets both).
import { PandaStack, PandaStackError } from "@pandastack/sdk";

export const TEMPLATE = process.env.PANDASTACK_TEST_TEMPLATE || "base";

export function serverEnv() {
  const baseUrl = process.env.PANDASTACK_BASE_URL;
  const apiKey = process.env.PANDASTACK_API_KEY;
  if (!baseUrl || !apiKey) {
    throw new Error("set PANDASTACK_BASE_URL and PANDASTACK_API_KEY to a running PandaStack (sdk/test.sh does)");
  }
  return { baseUrl, apiKey };
}

export function liveClient() {
  const { baseUrl, apiKey } = serverEnv();
  return new PandaStack({ apiKey, baseUrl });
}

/** Sandboxes made through tracker.create() (or track()ed) are killed by tracker.cleanup(). */
export function tracker(client) {
  const made = [];
  return {
    async create(params = {}) {
      const sb = await client.sandboxes.create({ template: TEMPLATE, ttlSeconds: 600, ...params });
      made.push(sb);
      return sb;
    },
    track(...sbs) {
      made.push(...sbs.flat());
    },
    async cleanup() {
      await Promise.all(made.splice(0).map((sb) => sb.kill().catch((e) => {
        if (!(e instanceof PandaStackError)) throw e;
      })));
    },
  };
}

export const LONG = { timeout: 300_000 };
