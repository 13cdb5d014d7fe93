// The stock npm `e2b` SDK against PandaStack's E2B facade: a sandbox created with
// lifecycle.onTimeout 'pause' is paused, not killed, at its timeout, and connect resumes it.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { runId } from './guard.mjs'

test('onTimeout pause: paused at the timeout, resumed by connect', async () => {
  const sbx = await Sandbox.create({ lifecycle: { onTimeout: 'pause' }, metadata: { suite: 'autopause', run: runId } })
  try {
    assert.equal((await sbx.getInfo()).lifecycle?.onTimeout, 'pause')
    await sbx.files.write('/home/user/kept.txt', 'across the pause')
    await sbx.setTimeout(2000)
    let state
    for (let i = 0; i < 300 && (state = (await sbx.getInfo()).state) !== 'paused'; i++) await new Promise((r) => setTimeout(r, 200))
    assert.equal(state, 'paused')
    const back = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 300_000 })
    assert.equal((await back.getInfo()).state, 'running')
    assert.equal(await back.files.read('/home/user/kept.txt'), 'across the pause')
  } finally {
    await Sandbox.kill(sbx.sandboxId)
  }
})
