// The stock npm `@e2b/code-interpreter` SDK (2.8.0) against PandaStack's E2B facade: its default
// template (code-interpreter-v1) maps to PandaStack's code-interpreter and its kernels.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'
import { runId } from './guard.mjs'

test('runCode: values, output, a DataFrame, a plot, an exception, contexts', async () => {
  const sbx = await Sandbox.create({ metadata: { suite: 'code', run: runId } })
  try {
    const one = await sbx.runCode('1+1')
    assert.equal(one.text, '2')
    assert.equal(one.error, undefined)

    const out = []
    const printed = await sbx.runCode('x = 41\nprint("hello")\nx + 1', { onStdout: (m) => out.push(m.line) })
    assert.deepEqual(printed.logs.stdout, ['hello\n'])
    assert.deepEqual(out, ['hello\n'])
    assert.equal(printed.text, '42')

    const df = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2]})')
    assert.match(df.results[0].html ?? '', /<table/)

    const plot = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()')
    const png = plot.results.find((r) => r.png)
    assert.ok(png, JSON.stringify(plot.results.map((r) => Object.keys(r))))
    assert.deepEqual([...Buffer.from(png.png, 'base64').subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])

    // envs for one execution only.
    assert.equal((await sbx.runCode('import os\nos.environ["ONLY_NOW"]', { envs: { ONLY_NOW: 'yes' } })).text, "'yes'")
    assert.equal((await sbx.runCode('import os\nos.environ.get("ONLY_NOW", "gone")')).text, "'gone'")

    const err = await sbx.runCode('1/0')
    assert.equal(err.error?.name, 'ZeroDivisionError')
    assert.equal(err.error?.value, 'division by zero')
    assert.match(err.error?.traceback ?? '', /ZeroDivisionError/)

    // A language the kernels do not run: the execution's error says so (contexts: a 400).
    const r = await sbx.runCode('x <- 1', { language: 'r' })
    assert.equal(r.error?.name, 'UnsupportedLanguageError')
    assert.match(r.error?.value ?? '', /language "r" is not supported/)
    await assert.rejects(sbx.createCodeContext({ language: 'r' }), /400/)
    assert.equal((await sbx.runCode('3*3', { language: 'python' })).text, '9')

    // contexts: their own variables.
    const ctx = await sbx.createCodeContext({ cwd: '/tmp' })
    await sbx.runCode('y = "in ctx"', { context: ctx })
    assert.equal((await sbx.runCode('y', { context: ctx })).text, "'in ctx'")
    assert.equal((await sbx.runCode('import os; os.getcwd()', { context: ctx })).text, "'/tmp'")
    assert.equal((await sbx.runCode('"y" in globals()')).text, 'False')
    assert.ok((await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
    // A restart is a new kernel under the same id: variables and module state are gone, the
    // cwd stays.
    await sbx.runCode('import json\njson.marked = True', { context: ctx })
    await sbx.restartCodeContext(ctx)
    assert.equal((await sbx.runCode('y', { context: ctx })).error?.name, 'NameError')
    assert.equal((await sbx.runCode('import json, os\n(hasattr(json, "marked"), os.getcwd())', { context: ctx })).text, "(False, '/tmp')")
    assert.ok((await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
    await sbx.removeCodeContext(ctx)
  } finally {
    await sbx.kill()
  }
})
