// An older stock `e2b` (2.45.0): POST /sandboxes and /connect on the v1 paths, the client-side
// key format check (^e2b_[0-9a-f]+$), pause with a body.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, CommandExitError } from 'e2b-2.45'
import { runId } from './guard.mjs'

test('e2b 2.45: create, run, files, pause + connect, kill', async () => {
  const sbx = await Sandbox.create('base', { metadata: { suite: 'older', run: runId } })
  try {
    assert.equal((await sbx.commands.run('echo hi')).stdout, 'hi\n')
    await assert.rejects(sbx.commands.run('exit 2'), CommandExitError)
    await sbx.files.write('/tmp/a', 'x')
    assert.equal(await sbx.files.read('/tmp/a'), 'x')
    assert.equal(await sbx.pause(), true)
    const back = await Sandbox.connect(sbx.sandboxId)
    assert.equal(await back.files.read('/tmp/a'), 'x')
  } finally {
    assert.equal(await sbx.kill(), true)
  }
})
