// The stock npm `e2b` SDK against PandaStack's E2B facade: pause (hibernate) and connect (wake)
// with a file and a process intact, timeouts, fork and snapshots.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { runId } from './guard.mjs'

test('pause + connect, setTimeout, fork, snapshot then create from it', async () => {
  const sbx = await Sandbox.create({ metadata: { suite: 'lifecycle', run: runId } })
  const made = [sbx.sandboxId]
  try {
    await sbx.files.write('/home/user/state.txt', 'kept')
    const bg = await sbx.commands.run('sleep 900', { background: true })

    assert.equal(await sbx.pause(), true)
    assert.equal((await sbx.getInfo()).state, 'paused')
    assert.equal(await Sandbox.pause(sbx.sandboxId), false) // already paused: the SDK's 409
    const back = await Sandbox.connect(sbx.sandboxId)
    assert.equal((await back.getInfo()).state, 'running')
    assert.equal(await back.files.read('/home/user/state.txt'), 'kept')
    assert.ok((await back.commands.list()).some((p) => p.pid === bg.pid), 'the background process survived the pause')

    await back.setTimeout(120_000)
    const end = new Date((await back.getInfo()).endAt).getTime()
    assert.ok(end > Date.now() + 60_000 && end <= Date.now() + 125_000, `endAt ${new Date(end).toISOString()}`)

    // fork: the child has the parent's file.
    const children = await back.fork({ count: 1 })
    assert.equal(children.length, 1)
    made.push(children[0].sandboxId)
    assert.equal(await children[0].files.read('/home/user/state.txt'), 'kept')

    // snapshot, then a sandbox from it (the snapshot id is a templateID).
    const snap = await back.createSnapshot()
    assert.ok(snap.snapshotId)
    const listed = await Sandbox.listSnapshots({ sandboxId: back.sandboxId }).nextItems()
    assert.ok(listed.some((s) => s.snapshotId === snap.snapshotId))
    const fromSnap = await Sandbox.create(snap.snapshotId)
    made.push(fromSnap.sandboxId)
    assert.equal(await fromSnap.files.read('/home/user/state.txt'), 'kept')
  } finally {
    for (const id of made) await Sandbox.kill(id)
  }
})
