// Shared by the E2B compatibility tests: the environment sdk/test.sh sets, and a guard that fails
// the run if the SDK sends anything anywhere but loopback (undici and node:http both publish
// their requests on diagnostics channels).
import diagnostics from 'node:diagnostics_channel'
import assert from 'node:assert/strict'

export const apiURL = process.env.E2B_API_URL
export const apiKey = process.env.E2B_API_KEY
export const otherKey = process.env.E2B_OTHER_API_KEY // an E2B key of another team
export const runId = process.env.E2B_TEST_RUN || String(process.pid)

assert.ok(apiURL && apiKey && otherKey, 'run through sdk/test.sh (SDK_TEST_ONLY=e2b): E2B_API_URL, E2B_API_KEY and E2B_OTHER_API_KEY are needed')
assert.equal(process.env.E2B_SANDBOX_URL, apiURL)

const offLoopback = []
const loopback = (host) => /^(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?$/.test(host)
diagnostics.subscribe('undici:request:create', ({ request }) => {
  const host = new URL(request.origin).host
  if (!loopback(host)) offLoopback.push(request.origin)
})
diagnostics.subscribe('http.client.request.start', ({ request }) => {
  const host = request.getHeader('host') || request.host
  if (!loopback(String(host))) offLoopback.push(String(host))
})
process.on('exit', () => {
  if (offLoopback.length) {
    console.error('the SDK sent requests off loopback:', offLoopback)
    process.exitCode = 1
  }
})

// raw is a plain fetch to the facade (for the bad-input checks the SDK never makes).
export async function raw(path, init = {}) {
  const res = await fetch(apiURL + path, init)
  const text = await res.text()
  let body
  try { body = JSON.parse(text) } catch { body = text }
  return { status: res.status, body }
}
