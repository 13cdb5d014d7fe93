// The stock npm `e2b` SDK against PandaStack's E2B facade: watchDir, 50 MiB files both ways, a
// command's timeout, a pty and reconnecting to it, process tags, and a sandbox's own timeout ending it.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { Sandbox, FilesystemEventType, TimeoutError } from 'e2b'
import { runId } from './guard.mjs'

test('watchDir, 50 MiB upload and download, command timeout, pty, sandbox expiry', async () => {
  const sbx = await Sandbox.create({ metadata: { suite: 'extra', run: runId } })
  try {
    // watchDir: a file written after the watch started is seen.
    await sbx.files.makeDir('/home/user/watched')
    const events = []
    let seen
    const created = new Promise((resolve) => { seen = resolve })
    const handle = await sbx.files.watchDir('/home/user/watched', (ev) => {
      events.push(ev)
      if (ev.type === FilesystemEventType.CREATE && ev.name === 'new.txt') seen()
    })
    await sbx.files.write('/home/user/watched/new.txt', 'x')
    await created
    await handle.stop()

    // 50 MiB up and down, byte for byte.
    const big = new Uint8Array(50 << 20)
    for (let i = 0; i < big.length; i += 4096) big[i] = (i / 4096) & 0xff
    await sbx.files.write('/tmp/big.bin', big.buffer)
    assert.equal((await sbx.commands.run('stat -c %s /tmp/big.bin')).stdout.trim(), String(big.length))
    const back = await sbx.files.read('/tmp/big.bin', { format: 'bytes' })
    assert.equal(createHash('sha256').update(back).digest('hex'), createHash('sha256').update(big).digest('hex'))

    // A command past its timeoutMs is killed (envd's semantics) and the SDK throws TimeoutError.
    await assert.rejects(sbx.commands.run('sleep 600', { timeoutMs: 3000 }), TimeoutError)
    for (let i = 0; i < 50 && (await sbx.commands.list()).some((p) => p.cmd === '/bin/bash' && p.args.includes('sleep 600')); i++) {
      await new Promise((r) => setTimeout(r, 200))
    }
    assert.ok(!(await sbx.commands.list()).some((p) => p.args.includes('sleep 600')), 'the timed-out command still runs')

    // A pty: resize, input, its output, its exit.
    const shown = []
    const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => shown.push(Buffer.from(d).toString()) })
    assert.ok((await sbx.commands.list()).some((p) => p.pid === term.pid))
    await sbx.pty.resize(term.pid, { cols: 100, rows: 30 })
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size; echo "pt$((6*7))"; exit 0\n'))
    assert.equal((await term.wait()).exitCode, 0)
    assert.match(shown.join(''), /30 100/)
    assert.match(shown.join(''), /pt42/)
    const hung = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} })
    assert.equal(await sbx.pty.kill(hung.pid), true)
    await assert.rejects(hung.wait(), (e) => e.exitCode === -1)
    assert.ok(!(await sbx.commands.list()).some((p) => p.pid === hung.pid))

    // pty.connect: a terminal outlives the stream that created it; a new follower sees its
    // output from then on, and its end.
    const lone = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} })
    await lone.disconnect()
    const followed = []
    const rejoined = await sbx.pty.connect(lone.pid, { onData: (d) => followed.push(Buffer.from(d).toString()) })
    await sbx.pty.sendInput(lone.pid, new TextEncoder().encode('echo "re$((6*7))"; exit 0\n'))
    assert.equal((await rejoined.wait()).exitCode, 0)
    assert.match(followed.join(''), /re42/)
    assert.ok(!(await sbx.commands.list()).some((p) => p.pid === lone.pid))

    // Process tags: the SDK's own Process client sends them (commands.run has no option for
    // them); commands.list shows them, and a tag selects the process.
    const tagged = sbx.commands.rpc.start({ process: { cmd: '/bin/bash', args: ['-c', 'sleep 600'], envs: {} }, tag: 'napper', stdin: false })
    const it = tagged[Symbol.asyncIterator]()
    const started = (await it.next()).value.event?.event // StartResponse.event: a ProcessEvent
    assert.equal(started?.case, 'start')
    const listed = (await sbx.commands.list()).find((p) => p.tag === 'napper')
    assert.equal(listed?.pid, started.value.pid)
    await sbx.commands.rpc.sendSignal({ process: { selector: { case: 'tag', value: 'napper' } }, signal: 9 })
    for await (const _ of { [Symbol.asyncIterator]: () => it }) { /* to its end */ }
    assert.ok(!(await sbx.commands.list()).some((p) => p.tag === 'napper'))
    await assert.rejects(sbx.commands.rpc.sendSignal({ process: { selector: { case: 'tag', value: 'napper' } }, signal: 9 }), /not found/)

    // The sandbox's own timeout ends it.
    await sbx.setTimeout(2000)
    for (let i = 0; i < 300 && (await sbx.isRunning()); i++) await new Promise((r) => setTimeout(r, 200))
    assert.equal(await sbx.isRunning(), false)
  } finally {
    await Sandbox.kill(sbx.sandboxId)
  }
})
