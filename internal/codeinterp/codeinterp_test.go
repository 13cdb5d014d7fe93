package codeinterp

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/errdefs"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// fakeExec answers every exec with the relay's stdout cut into the given chunks, then exit.
type fakeExec struct {
	chunks []string
	stderr string
	exit   int
	err    error // the host's answer instead of a stream
	got    agentclient.ExecRequest
}

func (f *fakeExec) ExecStream(_ context.Context, _ string, req agentclient.ExecRequest) (io.ReadCloser, error) {
	f.got = req
	if f.err != nil {
		return nil, f.err
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	for _, c := range f.chunks {
		enc.Encode(map[string]string{"stdout": c})
	}
	if f.stderr != "" {
		enc.Encode(map[string]string{"stderr": f.stderr})
	}
	enc.Encode(map[string]int{"exit_code": f.exit})
	return io.NopCloser(strings.NewReader(b.String())), nil
}

func TestRunReassemblesLines(t *testing.T) {
	// Lines split across exec chunks anywhere, two lines in one chunk.
	f := &fakeExec{chunks: []string{`{"stdout":"a\n"}` + "\n" + `{"res`, `ult":{"text":"2","is_main_result":true}}`, "\n", `{"end":{"execution_count":3,"duration_ms":5}}` + "\n"}}
	req := v1.CodeRequest{Code: "print('a'); 1+1"}
	if err := CheckRun(&req); err != nil {
		t.Fatal(err)
	}
	x, err := Collect(context.Background(), f, "sb_1", req)
	if err != nil {
		t.Fatal(err)
	}
	if len(x.Logs.Stdout) != 1 || x.Logs.Stdout[0] != "a\n" || len(x.Results) != 1 || x.Results[0].Text != "2" || *x.ExecutionCount != 3 {
		t.Fatalf("%+v", x)
	}
	var sent map[string]any
	if err := json.Unmarshal([]byte(*f.got.Stdin), &sent); err != nil || sent["op"] != "run" || sent["timeout"] != float64(DefaultTimeoutSeconds) ||
		len(f.got.Argv) != 1 || f.got.Argv[0] != Relay || *f.got.TimeoutSeconds != DefaultTimeoutSeconds+relaySlack {
		t.Fatalf("request: %+v %s %v", f.got, *f.got.Stdin, err)
	}
}

func TestRelayFailures(t *testing.T) {
	for _, c := range []struct {
		name string
		f    *fakeExec
		kind errdefs.Kind
		says string
	}{
		{"no relay", &fakeExec{err: errdefs.NotFoundf(`executable "pandastack-code" not found in PATH`)}, errdefs.Conflict, "no code interpreter"},
		{"no sandbox", &fakeExec{err: errdefs.NotFoundf("no sandbox sb_1")}, errdefs.NotFound, "no sandbox"},
		{"server down", &fakeExec{stderr: "connection refused", exit: 3}, errdefs.Unavailable, "connection refused"},
		{"no end", &fakeExec{chunks: []string{`{"stdout":"a"}` + "\n"}}, errdefs.Unavailable, "without an end"},
		{"unknown context", &fakeExec{chunks: []string{`{"fail":{"kind":"not_found","message":"no code context x"}}` + "\n"}}, errdefs.NotFound, "no code context"},
		{"run in an unknown context", &fakeExec{chunks: []string{`{"fail":{"kind":"not_found","message":"no code context y"}}` + "\n"}}, errdefs.NotFound, "no code context"},
	} {
		var err error
		if c.name == "unknown context" { // a control request
			err = Interrupt(context.Background(), c.f, "sb_1", "x")
		} else {
			req := v1.CodeRequest{Code: "1"}
			CheckRun(&req)
			_, err = Collect(context.Background(), c.f, "sb_1", req)
		}
		if errdefs.KindOf(err) != c.kind || err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v (kind %v), want kind %v saying %q", c.name, err, errdefs.KindOf(err), c.kind, c.says)
		}
	}
}
