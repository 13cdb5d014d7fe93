package templates

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// nodeRunner is code-interpreter's JavaScript context (node-runner.js) run on this host's Node.js,
// reached as pandastack-code-server reaches it: a socket on fd $PANDASTACK_CODE_FD.
type nodeRunner struct {
	conn *os.File
	r    *bufio.Reader
}

func startNodeRunner(t *testing.T) *nodeRunner {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no Node.js on this host")
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	script := wd + "/code-interpreter/node-runner.js"
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "runner"), os.NewFile(uintptr(fds[1]), "runner-child")
	cmd := exec.Command(node, "--no-warnings", script)
	cmd.Dir, cmd.ExtraFiles = t.TempDir(), []*os.File{theirs}
	cmd.Env = append(os.Environ(), "PANDASTACK_CODE_FD=3")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	t.Cleanup(func() { ours.Close(); cmd.Process.Kill(); cmd.Wait() })
	n := &nodeRunner{conn: ours, r: bufio.NewReader(ours)}
	if ev := n.next(t); ev["ready"] != true {
		t.Fatalf("first line %v, want ready", ev)
	}
	return n
}

func (n *nodeRunner) next(t *testing.T) map[string]any {
	t.Helper()
	line, err := n.r.ReadBytes('\n')
	if err != nil {
		t.Fatalf("runner's answer: %v", err)
	}
	var ev map[string]any
	if err := json.Unmarshal(line, &ev); err != nil {
		t.Fatalf("line %q: %v", line, err)
	}
	return ev
}

// run executes code and returns its events before end, each as "kind" or "result" with its
// representations' names (main results marked), plus the results themselves.
func (n *nodeRunner) run(t *testing.T, code string) (kinds []string, results []map[string]any, stderr string) {
	t.Helper()
	req, _ := json.Marshal(map[string]any{"code": code, "timeout": 30})
	if _, err := n.conn.Write(append(req, '\n')); err != nil {
		t.Fatal(err)
	}
	for {
		ev := n.next(t)
		switch {
		case ev["end"] != nil:
			return kinds, results, stderr
		case ev["result"] != nil:
			r := ev["result"].(map[string]any)
			var names []string
			for _, k := range []string{"text", "html", "markdown", "svg", "png", "jpeg", "latex", "json"} {
				if _, ok := r[k]; ok {
					names = append(names, k)
				}
			}
			kind := "result(" + strings.Join(names, ",") + ")"
			if r["is_main_result"] == true {
				kind = "main" + kind
			}
			kinds, results = append(kinds, kind), append(results, r)
		case ev["error"] != nil:
			kinds = append(kinds, "error "+ev["error"].(map[string]any)["value"].(string))
		case ev["stderr"] != nil:
			kinds, stderr = append(kinds, "stderr"), stderr+ev["stderr"].(string)
		default:
			for k := range ev {
				kinds = append(kinds, k)
			}
		}
	}
}

// A tiny PNG's signature and start (the runner looks at the signature only).
var pngBytes = append([]byte("\x89PNG\r\n\x1a\n"), []byte("\x00\x00\x00\rIHDR")...)

// TestNodeRunnerRichResults: JavaScript contexts give the kinds of results a Python kernel gives —
// json for objects, an HTML table for records, images, SVG, HTML and markdown from display() or a
// value's own _repr_*_ methods — in the order the code makes them.
func TestNodeRunnerRichResults(t *testing.T) {
	n := startNodeRunner(t)
	png := "Buffer.from('" + base64.StdEncoding.EncodeToString(pngBytes) + "', 'base64')"
	for _, c := range []struct {
		name, code string
		kinds      []string
		check      func(t *testing.T, results []map[string]any, stderr string)
	}{
		{"object as json", "({a: 1, b: [2, 'x']})", []string{"mainresult(text,json)"}, func(t *testing.T, r []map[string]any, _ string) {
			if r[0]["json"] != `{"a":1,"b":[2,"x"]}` || !strings.Contains(r[0]["text"].(string), "a: 1") {
				t.Errorf("result %v", r[0])
			}
		}},
		{"number is text only", "1 + 1", []string{"mainresult(text)"}, nil},
		{"records as a table", "[{name: 'a', n: 1}, {name: '<b>', n: 2, extra: {k: true}}]", []string{"mainresult(text,html,json)"},
			func(t *testing.T, r []map[string]any, _ string) {
				html := r[0]["html"].(string)
				for _, want := range []string{`<table border="1" class="dataframe">`, "<th>name</th><th>n</th><th>extra</th>", "<td>&lt;b&gt;</td>",
					"<th>1</th>", `<td>{&quot;k&quot;:true}</td>`} {
					if !strings.Contains(html, want) {
						t.Errorf("html lacks %q:\n%s", want, html)
					}
				}
			}},
		{"a long record array is cut in its table, not its json", "Array.from({length: 2000}, (_, i) => ({i}))", []string{"mainresult(text,html,json)"},
			func(t *testing.T, r []map[string]any, _ string) {
				if html := r[0]["html"].(string); strings.Count(html, "<tr>") != 1001 || !strings.Contains(html, "2000 rows, the first 1000 shown") {
					t.Errorf("table of %d rows: %.200s…", strings.Count(html, "<tr>")-1, html)
				}
			}},
		{"display helpers in order with output", "console.log('a'); display.html('<b>hi</b>'); display.svg('<svg/>'); display.png(" + png +
			"); display.markdown('# t'); display.json({x: [1]}); console.log('b'); 2",
			[]string{"stdout", "result(html)", "result(svg)", "result(png)", "result(markdown)", "result(json)", "stdout", "mainresult(text)"},
			func(t *testing.T, r []map[string]any, _ string) {
				if r[2]["png"] != base64.StdEncoding.EncodeToString(pngBytes) {
					t.Errorf("png %q", r[2]["png"])
				}
				if r[0]["html"] != "<b>hi</b>" || r[1]["svg"] != "<svg/>" || r[3]["markdown"] != "# t" || r[4]["json"] != `{"x":[1]}` {
					t.Errorf("results %v", r)
				}
			}},
		{"display of values, no main result", "display({k: 'v'}, [{a: 1}]); undefined", []string{"result(text,json)", "result(text,html,json)"}, nil},
		{"a png buffer", png, []string{"mainresult(text,png)"}, nil},
		{"a value's own representations", "class Chart { _repr_svg_() { return '<svg id=c/>' } _repr_html_() { return '<p>c</p>' } }; new Chart()",
			[]string{"mainresult(text,html,svg)"}, func(t *testing.T, r []map[string]any, _ string) {
				if r[0]["svg"] != "<svg id=c/>" || r[0]["html"] != "<p>c</p>" || r[0]["text"] != "Chart {}" {
					t.Errorf("result %v", r[0])
				}
			}},
		{"a failing _repr_ method leaves the rest", "({_repr_html_() { throw new Error('boom') }})", []string{"stderr", "mainresult(text)"},
			func(t *testing.T, _ []map[string]any, stderr string) {
				if !strings.Contains(stderr, "_repr_html_() failed: boom") {
					t.Errorf("stderr %q", stderr)
				}
			}},
		{"an oversized representation is left out", "display.svg('x'.repeat(17 << 20)); display.html('<i>small</i>')", []string{"stderr", "result(html)"},
			func(t *testing.T, _ []map[string]any, stderr string) {
				if !strings.Contains(stderr, "the svg representation (17825792 bytes) is over the 16777216-byte limit") {
					t.Errorf("stderr %q", stderr)
				}
			}},
		{"a wrong image is the code's error", "display.png(42)", []string{"error png wants a Buffer, a Uint8Array or base64 text, not 42"}, nil},
		{"display persists as a global", "typeof display", []string{"mainresult(text)"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			kinds, results, stderr := n.run(t, c.code)
			if strings.Join(kinds, " ") != strings.Join(c.kinds, " ") {
				t.Fatalf("events %q, want %q (results %v)", kinds, c.kinds, results)
			}
			if c.check != nil {
				c.check(t, results, stderr)
			}
		})
	}
}
