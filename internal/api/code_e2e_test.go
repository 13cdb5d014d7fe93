package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"image/png"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/client"
	"github.com/pandastack/pandastack/internal/testenv"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// TestE2ECodeInterpreter bakes the code-interpreter template once (its kernels start and import
// the data stack before the snapshot) and drives its /code endpoints through the public API on
// real microVMs. The subtests run in parallel, each on its own sandbox of the one bake. The
// sandboxes have their network (as on a real host), so calls take the direct port path.
func TestE2ECodeInterpreter(t *testing.T) {
	testenv.NeedVMs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	t.Cleanup(cancel)
	host, cp := startNetworkedCP(t, Config{})
	c := cp.client(cp.admin)
	start := time.Now()
	host.bake(ctx, "code-interpreter")
	t.Logf("code-interpreter baked in %s", time.Since(start).Round(time.Second))

	create := func(t *testing.T) string {
		t.Helper()
		sb, err := c.CreateSandbox(ctx, client.CreateRequest{Template: "code-interpreter", TTLSeconds: 3600})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		t.Cleanup(func() { c.KillSandbox(context.Background(), sb.ID) })
		return sb.ID
	}
	run := func(t *testing.T, id, ctxID, code string) v1.CodeExecution {
		t.Helper()
		x, err := c.RunCode(ctx, id, v1.CodeRequest{Code: code, ContextID: ctxID})
		if err != nil {
			t.Fatalf("run %q: %v", code, err)
		}
		return x
	}
	text := func(t *testing.T, id, ctxID, code string) string {
		t.Helper()
		x := run(t, id, ctxID, code)
		if x.Error != nil {
			t.Fatalf("run %q: %s: %s\n%s", code, x.Error.Name, x.Error.Value, x.Error.Traceback)
		}
		for _, r := range x.Results {
			if r.IsMainResult {
				return r.Text
			}
		}
		return ""
	}

	t.Run("rich results and state", func(t *testing.T) {
		t.Parallel()
		id := create(t)
		// The first call after a create: the data stack is already imported in the kernel.
		t0 := time.Now()
		x := run(t, id, "", "import pandas as pd\ndf = pd.DataFrame({'a': range(10)})\ndf.describe()")
		t.Logf("first run_code (pandas describe) after create: %s", time.Since(t0).Round(time.Millisecond))
		if len(x.Results) != 1 || !x.Results[0].IsMainResult || !strings.Contains(x.Results[0].HTML, "<table") ||
			!strings.Contains(x.Results[0].Text, "mean") || x.ExecutionCount == nil || *x.ExecutionCount != 1 {
			t.Fatalf("describe: %+v", x)
		}
		// The warm-ups before the snapshot left no trace (Out holds this call's result only).
		if got := text(t, id, "", "sorted(Out), hasattr(__import__('sys'), 'last_value')"); got != "([1], False)" {
			t.Fatalf("the warm-ups' trace: %q", got)
		}
		if got := text(t, id, "", "import sys\nall(m in sys.modules for m in ('sklearn', 'matplotlib.pyplot'))"); got != "True" {
			t.Fatalf("the data stack is not imported in the snapshot's kernel: %q", got)
		}
		if got := text(t, id, "", "int(df.a.sum())"); got != "45" {
			t.Fatalf("state between calls: %q", got)
		}
		// A matplotlib chart comes back as a PNG display result.
		x = run(t, id, "", "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('chart')\nplt.show()")
		var pngs int
		for _, r := range x.Results {
			if r.PNG == "" {
				continue
			}
			pngs++
			b, err := base64.StdEncoding.DecodeString(r.PNG)
			if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
				t.Fatalf("not a PNG: %v %.16q", err, b)
			}
			cfg, err := png.DecodeConfig(bytes.NewReader(b))
			if err != nil || cfg.Width < 100 || cfg.Height < 100 {
				t.Fatalf("PNG %dx%d: %v", cfg.Width, cfg.Height, err)
			}
		}
		if pngs != 1 {
			t.Fatalf("chart: %d PNG results: %+v", pngs, x)
		}
		// An exception: name, value, traceback; the context lives on.
		x = run(t, id, "", "print('before')\n1 / 0")
		if x.Error == nil || x.Error.Name != "ZeroDivisionError" || !strings.Contains(x.Error.Value, "division") ||
			!strings.Contains(x.Error.Traceback, "1 / 0") || strings.Contains(x.Error.Traceback, "\x1b[") || strings.Join(x.Logs.Stdout, "") != "before\n" {
			t.Fatalf("exception: %+v", x)
		}
		if got := text(t, id, "", "int(df.a.max())"); got != "9" {
			t.Fatalf("after the exception: %q", got)
		}
		// 100 MB of stdout comes back cut with a marker; the kernel survives it.
		x = run(t, id, "", "for i in range(100):\n    print('x' * (1 << 20))")
		out := strings.Join(x.Logs.Stdout, "")
		if len(out) > 2<<20 || !strings.Contains(out, "[output truncated") || x.Error != nil {
			t.Fatalf("100 MB of stdout: %d bytes returned, error %+v, tail %q", len(out), x.Error, out[max(0, len(out)-100):])
		}
		if got := text(t, id, "", "len(df)"); got != "10" {
			t.Fatalf("after the big output: %q", got)
		}
		// Streamed: events as they come, end last.
		var kinds []string
		_, err := c.RunCodeStream(ctx, id, v1.CodeRequest{Code: "print('s'); 6 * 7"}, func(ev v1.CodeEvent) {
			switch {
			case ev.Stdout != nil:
				kinds = append(kinds, "stdout")
			case ev.Result != nil:
				kinds = append(kinds, "result:"+ev.Result.Text)
			case ev.End != nil:
				kinds = append(kinds, "end")
			}
		})
		if err != nil || strings.Join(kinds, ",") != "stdout,result:42,end" {
			t.Fatalf("stream: %v %v", kinds, err)
		}
	})

	t.Run("contexts and interrupt", func(t *testing.T) {
		t.Parallel()
		id := create(t)
		text(t, id, "", "secret = 'default'")
		cc, err := c.CreateCodeContext(ctx, id, v1.CreateCodeContextRequest{Cwd: "/tmp"})
		if err != nil || cc.ID == "" || cc.Cwd != "/tmp" {
			t.Fatalf("create context: %+v %v", cc, err)
		}
		// Its own variables, its cwd, and the data stack already imported (forked warm).
		if got := text(t, id, cc.ID, "import os, sys\n'secret' in globals(), os.getcwd(), all(m in sys.modules for m in ('pandas', 'sklearn', 'matplotlib.pyplot'))"); got != "(False, '/tmp', True)" {
			t.Fatalf("new context sees: %q", got)
		}
		text(t, id, cc.ID, "secret = 'other'")
		if got := text(t, id, "", "secret"); got != "'default'" {
			t.Fatalf("default context after the other set its own: %q", got)
		}
		if l, err := c.ListCodeContexts(ctx, id); err != nil || len(l) != 3 { // default, default-javascript, cc
			t.Fatalf("list: %+v %v", l, err)
		}
		if _, err := c.RunCode(ctx, id, v1.CodeRequest{Code: "1", ContextID: "nosuch"}); apiCode(err) != "404 not_found" {
			t.Fatalf("unknown context: %v", err)
		}
		// Interrupt an infinite loop from another call; the context keeps its state.
		interrupted := func() (v1.CodeExecution, error) {
			var x v1.CodeExecution
			var runErr error
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				x, runErr = c.RunCodeStream(ctx, id, v1.CodeRequest{Code: "import time\nprint('looping', flush=True)\nwhile True:\n    time.sleep(0.05)", ContextID: cc.ID},
					func(ev v1.CodeEvent) {
						if ev.Stdout != nil {
							if err := c.InterruptCode(ctx, id, cc.ID); err != nil {
								t.Errorf("interrupt: %v", err)
							}
						}
					})
			}()
			wg.Wait()
			return x, runErr
		}
		x, runErr := interrupted()
		if runErr == nil && x.Error != nil && x.Error.Name != "KeyboardInterrupt" {
			// Seen once in a loaded CI run (the loop stopped, under another error name, not
			// reproduced since): keep what it was, and the second interrupt must be a clean one.
			t.Logf("interrupted loop ended with %+v (%+v); again", x.Error, x)
			x, runErr = interrupted()
		}
		if runErr != nil || x.Error == nil || x.Error.Name != "KeyboardInterrupt" {
			t.Fatalf("interrupted loop: %+v error %+v %v", x, x.Error, runErr)
		}
		if got := text(t, id, cc.ID, "secret"); got != "'other'" {
			t.Fatalf("after the interrupt: %q", got)
		}
		if err := c.DeleteCodeContext(ctx, id, cc.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := c.RunCode(ctx, id, v1.CodeRequest{Code: "1", ContextID: cc.ID}); apiCode(err) != "404 not_found" {
			t.Fatalf("deleted context: %v", err)
		}
		// A kernel that dies is replaced: the call says so, the context goes on (empty).
		if x := run(t, id, "", "import os\nos._exit(3)"); x.Error == nil || x.Error.Name != "KernelDied" {
			t.Fatalf("os._exit: %+v", x)
		}
		if got := text(t, id, "", "'secret' in globals(), 6 * 7"); got != "(False, 42)" {
			t.Fatalf("after the kernel died: %q", got)
		}
	})

	t.Run("javascript and the direct port", func(t *testing.T) {
		t.Parallel()
		id := create(t)
		// Without the relay in the guest the calls still work: they reach the server's port
		// through the host agent, not an exec.
		if r, err := c.Exec(ctx, id, client.ExecRequest{Cmd: "rm /usr/local/bin/pandastack-code", User: "root"}); err != nil || r.ExitCode != 0 {
			t.Fatalf("rm the relay: %+v %v", r, err)
		}
		js := func(ctxID, code string) v1.CodeExecution {
			t.Helper()
			x, err := c.RunCode(ctx, id, v1.CodeRequest{Code: code, Language: "js", ContextID: ctxID})
			if err != nil {
				t.Fatalf("run %q: %v", code, err)
			}
			return x
		}
		// State between calls, console.log as stdout, the last expression as the text result.
		x := js("", "const xs = [1, 2, 3];\nlet total = xs.reduce((a, b) => a + b, 0);\nconsole.log('sum', total);\ntotal * 2")
		if x.Error != nil || strings.Join(x.Logs.Stdout, "") != "sum 6\n" || len(x.Results) != 1 || x.Results[0].Text != "12" || !x.Results[0].IsMainResult {
			t.Fatalf("js: %+v", x)
		}
		if x = js("", "total += 1; ({total, xs})"); x.Error != nil || len(x.Results) != 1 || x.Results[0].JSON != `{"total":7,"xs":[1,2,3]}` {
			t.Fatalf("js state: %+v", x)
		}
		// Rich results: display()'s SVG in order, then records as json and an HTML table.
		x = js("", "display.svg('<svg/>'); [{a: 1}, {a: '<b>'}]")
		if x.Error != nil || len(x.Results) != 2 || x.Results[0].SVG != "<svg/>" || x.Results[0].IsMainResult ||
			x.Results[1].JSON != `[{"a":1},{"a":"<b>"}]` || !strings.Contains(x.Results[1].HTML, "<td>&lt;b&gt;</td>") || !x.Results[1].IsMainResult {
			t.Fatalf("js rich results: %+v", x)
		}
		if x = js("", "await new Promise((r) => setTimeout(() => r(total + 35), 10))"); x.Error != nil || len(x.Results) != 1 || x.Results[0].Text != "42" {
			t.Fatalf("js await: %+v", x)
		}
		// An error: name, value, traceback; the context lives on.
		x = js("", "function f() { throw new RangeError('too far') }\nf()")
		if x.Error == nil || x.Error.Name != "RangeError" || x.Error.Value != "too far" || !strings.Contains(x.Error.Traceback, "at f (") {
			t.Fatalf("js error: %+v", x)
		}
		// The Python context is another one (and runs Python).
		if got := text(t, id, "", "'total' in globals(), 6 * 7"); got != "(False, 42)" {
			t.Fatalf("python next to js: %q", got)
		}
		// A new JavaScript context has its own variables; the list says its language.
		cc, err := c.CreateCodeContext(ctx, id, v1.CreateCodeContextRequest{Language: "javascript", Cwd: "/tmp"})
		if err != nil || cc.Language != "javascript" {
			t.Fatalf("create js context: %+v %v", cc, err)
		}
		if x = js(cc.ID, "[typeof total, process.cwd()]"); x.Error != nil || len(x.Results) != 1 || x.Results[0].JSON != `["undefined","/tmp"]` {
			t.Fatalf("new js context: %+v", x)
		}
		// A timeout stops a busy loop; the context keeps its state.
		one := 1.0
		x, err = c.RunCode(ctx, id, v1.CodeRequest{Code: "for (;;) {}", Language: "javascript", TimeoutSeconds: &one})
		if err != nil || x.Error == nil || x.Error.Name != "TimeoutError" {
			t.Fatalf("js timeout: %+v %v", x, err)
		}
		if x = js("", "total"); len(x.Results) != 1 || x.Results[0].Text != "7" {
			t.Fatalf("after the timeout: %+v", x)
		}
		l, err := c.ListCodeContexts(ctx, id)
		langs := map[string]string{}
		for _, cc := range l {
			langs[cc.ID] = cc.Language
		}
		if err != nil || langs["default"] != "python" || langs["default-javascript"] != "javascript" || langs[cc.ID] != "javascript" {
			t.Fatalf("contexts: %+v %v", l, err)
		}
	})

	t.Run("fork diverges", func(t *testing.T) {
		t.Parallel()
		id := create(t)
		text(t, id, "", "import numpy as np\nstate = [1]")
		kids, err := c.Fork(ctx, id, 2)
		if err != nil || len(kids) != 2 {
			t.Fatalf("fork: %v", err)
		}
		for i, k := range kids {
			t.Cleanup(func() { c.KillSandbox(context.Background(), k.ID) })
			text(t, k.ID, "", "state.append("+strconv.Itoa(i+2)+")")
		}
		for i, k := range kids {
			if got, want := text(t, k.ID, "", "state"), "[1, "+strconv.Itoa(i+2)+"]"; got != want {
				t.Fatalf("child %d: %q, want %q", i, got, want)
			}
		}
		if got := text(t, id, "", "state"); got != "[1]" {
			t.Fatalf("parent: %q", got)
		}
	})

	t.Run("hibernate and wake", func(t *testing.T) {
		t.Parallel()
		id := create(t)
		text(t, id, "", "kept = {'n': 41}")
		if _, err := c.Hibernate(ctx, id); err != nil {
			t.Fatal(err)
		}
		// The run wakes the sandbox.
		if got := text(t, id, "", "kept['n'] + 1"); got != "42" {
			t.Fatalf("after wake: %q", got)
		}
	})
}
