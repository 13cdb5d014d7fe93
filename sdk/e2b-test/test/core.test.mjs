// The stock npm `e2b` SDK (2.51.0) against PandaStack's E2B facade: the core calls and bad input.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, CommandExitError, SandboxNotFoundError, AuthenticationError, SandboxError } from 'e2b'
import { raw, apiKey, otherKey, runId } from './guard.mjs'

test('create, commands, files, list, kill and bad input', async () => {
  const sbx = await Sandbox.create({ metadata: { suite: 'core', run: runId }, envs: { FROM_CREATE: 'yes' } })
  try {
    assert.match(sbx.sandboxId, /^[a-z0-9]+$/)

    // commands.run: output, onStdout, the create's envs, a non-zero exit.
    const chunks = []
    const r = await sbx.commands.run('for i in 1 2 3; do echo line$i; done; echo oops >&2; echo $FROM_CREATE', { onStdout: (d) => chunks.push(d) })
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'line1\nline2\nline3\nyes\n')
    assert.equal(r.stderr, 'oops\n')
    assert.equal(chunks.join(''), r.stdout)
    await assert.rejects(sbx.commands.run('echo bad; exit 3'), (e) => e instanceof CommandExitError && e.exitCode === 3 && e.stdout === 'bad\n')
    assert.equal((await sbx.commands.run('pwd; whoami')).stdout, '/home/user\nuser\n')

    // background → list → connect → kill; stdin.
    const bg = await sbx.commands.run('sleep 600', { background: true })
    assert.ok((await sbx.commands.list()).some((p) => p.pid === bg.pid))
    const again = await sbx.commands.connect(bg.pid)
    assert.equal(again.pid, bg.pid)
    assert.equal(await sbx.commands.kill(bg.pid), true)
    assert.ok(!(await sbx.commands.list()).some((p) => p.pid === bg.pid))
    assert.equal(await sbx.commands.kill(999999), false)
    const cat = await sbx.commands.run('cat', { background: true, stdin: true })
    await sbx.commands.sendStdin(cat.pid, 'typed\n')
    await sbx.commands.closeStdin(cat.pid)
    assert.equal((await cat.wait()).stdout, 'typed\n')

    // files
    const info = await sbx.files.write('/home/user/notes/a.txt', 'hello')
    assert.equal(info.path, '/home/user/notes/a.txt')
    assert.equal(await sbx.files.read('/home/user/notes/a.txt'), 'hello')
    assert.equal(await sbx.files.read('notes/a.txt'), 'hello') // relative to the user's home
    const bytes = Uint8Array.from({ length: 256 }, (_, i) => i)
    await sbx.files.write('/tmp/bin', bytes.buffer)
    assert.deepEqual(await sbx.files.read('/tmp/bin', { format: 'bytes' }), bytes)
    assert.deepEqual((await sbx.files.list('/home/user/notes')).map((e) => e.name), ['a.txt'])
    assert.equal(await sbx.files.exists('/home/user/notes/a.txt'), true)
    assert.equal(await sbx.files.exists('/home/user/nope'), false)
    assert.equal(await sbx.files.makeDir('/home/user/d'), true)
    assert.equal(await sbx.files.makeDir('/home/user/d'), false)
    const moved = await sbx.files.rename('/home/user/notes/a.txt', '/home/user/d/b.txt')
    assert.equal(moved.path, '/home/user/d/b.txt')
    const st = await sbx.files.getInfo('/home/user/d/b.txt')
    assert.equal(st.type, 'file')
    assert.equal(st.size, 5)
    await sbx.files.remove('/home/user/d')
    // As another account: files and commands.
    await sbx.files.write('/root/secret', 'r00t', { user: 'root' })
    assert.equal(await sbx.files.read('/root/secret', { user: 'root' }), 'r00t')
    await assert.rejects(sbx.files.read('/root/secret'), /permission denied/)
    assert.equal((await sbx.commands.run('cat /root/secret; whoami', { user: 'root' })).stdout, 'r00troot\n')
    assert.equal(await sbx.files.exists('/home/user/d/b.txt'), false)

    // Sandbox.list with a metadata filter; getInfo.
    const page = await Sandbox.list({ query: { metadata: { suite: 'core', run: runId } } }).nextItems()
    assert.deepEqual(page.map((s) => s.sandboxId), [sbx.sandboxId])
    const got = await sbx.getInfo()
    assert.equal(got.sandboxId, sbx.sandboxId)
    assert.equal(got.state, 'running')
    assert.equal(got.metadata.suite, 'core')
    // getMetrics: the figures of now, as the guest and its host measure them.
    const metrics = await sbx.getMetrics()
    assert.equal(metrics.length, 1, JSON.stringify(metrics))
    const [m] = metrics
    assert.ok(m.cpuCount >= 1 && m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100, JSON.stringify(m))
    assert.ok(m.memUsed > 0 && m.memUsed < m.memTotal && m.memTotal <= got.memoryMB * 1024 * 1024, JSON.stringify(m))
    assert.ok(m.diskUsed > 0 && m.diskUsed < m.diskTotal && m.memCache >= 0, JSON.stringify(m))
    assert.ok(Math.abs(m.timestamp.getTime() - Date.now()) < 60000, String(m.timestamp))
    console.log('getMetrics:', JSON.stringify(m))
    // updateNetwork has nothing to map onto (egress is set at create): a clear error.
    await assert.rejects(sbx.updateNetwork({ allowOut: ['1.1.1.1'] }), /network is not supported/)

    // Bad input: an unknown template; a wrong key; another team's key sees no such sandbox (404 in E2B's body).
    await assert.rejects(Sandbox.create('no-such-template'), (e) => e instanceof SandboxError && e.statusCode === 400 && /unknown template/.test(e.message))
    await assert.rejects(Sandbox.connect(sbx.sandboxId, { apiKey: 'e2b_' + '0'.repeat(40) }), AuthenticationError)
    await assert.rejects(Sandbox.connect(sbx.sandboxId, { apiKey: otherKey }), SandboxNotFoundError)
    assert.deepEqual(await raw('/sandboxes/' + sbx.sandboxId, { headers: { 'X-API-KEY': otherKey } }),
      { status: 404, body: { code: 404, message: `sandbox ${sbx.sandboxId} not found` } })
    assert.equal(await Sandbox.kill(sbx.sandboxId, { apiKey: otherKey }), false)
    // envd without the sandbox's access token, or with a wrong one: 401.
    const envd = (token, path, init = {}) => raw(path, { ...init, headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983', ...(token ? { 'X-Access-Token': token } : {}), ...init.headers } })
    assert.equal((await envd(undefined, '/files?path=/etc/hostname')).status, 401)
    assert.equal((await envd('wrong', '/files?path=/etc/hostname')).status, 401)
    // A malformed Connect envelope and an oversize frame: clear errors, and the sandbox still answers.
    const start = (body) => envd(sbx.envdAccessToken, '/process.Process/Start',
      { method: 'POST', body, headers: { 'Content-Type': 'application/connect+json', 'Connect-Protocol-Version': '1' } })
    const bad = await start('garbage')
    assert.ok(bad.status < 500 && JSON.stringify(bad.body).includes('error'), JSON.stringify(bad))
    const huge = new Uint8Array([0, 0x40, 0, 0, 0, 0x7b, 0x7d])
    assert.match(JSON.stringify((await start(huge)).body), /resource_exhausted|unauthenticated/)
    assert.equal((await sbx.commands.run('echo still')).stdout, 'still\n')

    // Any other port goes through PandaStack's port proxy (E2b-Sandbox-Port).
    await sbx.commands.run('mkdir -p /tmp/www && echo served > /tmp/www/index.html && cd /tmp/www && exec python3 -m http.server 8000', { background: true, timeoutMs: 0 })
    let served
    for (let i = 0; i < 100; i++) {
      served = await raw('/index.html', { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8000' } })
      if (served.status !== 502) break // 502 until the server listens
      await new Promise((r) => setTimeout(r, 200))
    }
    assert.deepEqual(served, { status: 200, body: 'served\n' })
  } finally {
    assert.equal(await sbx.kill(), true)
  }
  assert.equal(await Sandbox.kill(sbx.sandboxId), false)
  await assert.rejects(Sandbox.connect(sbx.sandboxId), SandboxNotFoundError)
})
