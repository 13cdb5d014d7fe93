// Bench: the stock E2B SDK through PandaStack's E2B facade against PandaStack's own TypeScript SDK,
// same server, same run, interleaved. Prints medians and p99 of Sandbox.create() and of create +
// a command, and the facade's ratio to the native path (goal: <= 1.10).
//
//   SDK_TEST_ONLY=e2b runs the tests; this is run by hand against a running `up --e2b-addr`:
//   cd sdk/typescript && npm ci && npm run build && cd ../e2b-test && npm ci
//   E2B_API_URL=… E2B_SANDBOX_URL=… E2B_API_KEY=… PANDASTACK_BASE_URL=… PANDASTACK_API_KEY=… node bench.mjs [rounds]
import { Sandbox } from 'e2b'
import { PandaStack } from '../typescript/dist/esm/index.js'

const rounds = Number(process.argv[2] || 10)
const native = new PandaStack()
const time = async (fn) => { const t = performance.now(); await fn(); return performance.now() - t }
const cases = {
  'e2b create': async () => { let s; const ms = await time(async () => { s = await Sandbox.create() }); await s.kill(); return ms },
  'native create': async () => { let s; const ms = await time(async () => { s = await native.sandboxes.create({ template: 'base' }) }); await s.kill(); return ms },
  'e2b create+run': async () => { let s; const ms = await time(async () => { s = await Sandbox.create(); await s.commands.run('true') }); await s.kill(); return ms },
  // commands.run(cmd) runs `/bin/bash -l -c cmd` (a login shell: its profile scripts cost most of
  // the run under TCG), so the native baseline runs the same command line.
  'native create+exec': async () => { let s; const ms = await time(async () => { s = await native.sandboxes.create({ template: 'base' }); await s.exec('/bin/bash -l -c true') }); await s.kill(); return ms },
}
// A warm-up of each, then the rounds interleaved so drift hits both alike.
for (const fn of Object.values(cases)) await fn()
const got = Object.fromEntries(Object.keys(cases).map((k) => [k, []]))
for (let i = 0; i < rounds; i++) for (const [k, fn] of Object.entries(cases)) got[k].push(await fn())
const q = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.ceil(p * s.length) - 1)] }
for (const [k, xs] of Object.entries(got)) console.log(`${k.padEnd(20)} p50 ${q(xs, 0.5).toFixed(0).padStart(6)} ms   p99 ${q(xs, 0.99).toFixed(0).padStart(6)} ms`)
console.log(`ratio create      (e2b / native, p50): ${(q(got['e2b create'], 0.5) / q(got['native create'], 0.5)).toFixed(2)}`)
console.log(`ratio create+run  (e2b / native, p50): ${(q(got['e2b create+run'], 0.5) / q(got['native create+exec'], 0.5)).toFixed(2)}`)
