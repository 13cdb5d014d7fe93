// Shared helpers of the TypeScript SDK tests. They run against a real PandaStack named by
// PANDASTACK_BASE_URL and PANDASTACK_API_KEY (sdk/test.sh starts one and sets both).
import { after, before } from "node:test";
import * as sdk from "@pandastack/sdk";
import { PandaStack, PandaStackError } from "@pandastack/sdk";

export const TEMPLATE = process.env.PANDASTACK_TEST_TEMPLATE || "base";

/** Every API error [status, code] and the SDK class it becomes. */
export const ERROR_CASES = [
  [400, "invalid_request", sdk.InvalidRequest],
  [401, "unauthorized", sdk.Unauthorized],
  [403, "forbidden", sdk.Forbidden],
  [404, "not_found", sdk.NotFound],
  [409, "conflict", sdk.Conflict],
  [413, "payload_too_large", sdk.PayloadTooLarge],
  [429, "rate_limited", sdk.RateLimited],
  [500, "internal", sdk.InternalError],
  [501, "not_implemented", sdk.NotImplemented],
  [503, "capacity", sdk.Capacity],
  [504, "timeout", sdk.Timeout],
  [507, "no_space", sdk.NoSpace],
];

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

/**
 * Registers the hooks of a suite against the live server. Before its first test, bind gets the
 * suite's handles: `client`, `t` (a tracker: its sandboxes are killed after the suite) and, when
 * sandbox params are given, `sb`, one sandbox made for the whole suite (ttl 900 s).
 */
export function liveSuite(bind, sandbox) {
  let t;
  before(async () => {
    const client = liveClient();
    t = tracker(client);
    const sb = sandbox ? await t.create({ ttlSeconds: 900, ...sandbox }) : undefined;
    bind({ client, t, sb });
  });
  after(() => t.cleanup());
}

export const LONG = { timeout: 300_000 };
