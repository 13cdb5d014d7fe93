package codeinterp

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/testenv"
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

// fakeAgent is a host agent with a port path: DialPort reaches a real TCP server on loopback
// (the code server's stand-in) unless dialErr says the agent refused; exec is fakeExec.
type fakeAgent struct {
	fakeExec
	addr    string
	dialErr error
	port    int
}

func (f *fakeAgent) DialPort(ctx context.Context, _ string, port int) (net.Conn, error) {
	f.port = port
	if f.dialErr != nil {
		return nil, f.dialErr
	}
	return (&net.Dialer{}).DialContext(ctx, "tcp", f.addr)
}

// codeServer answers each connection's request line with answer(request).
func codeServer(t *testing.T, answer func(req map[string]any) string) string {
	l := testenv.Serve(t, "tcp", "127.0.0.1:0", func(c net.Conn) {
		var req map[string]any
		line, _ := bufio.NewReader(c).ReadBytes('\n')
		json.Unmarshal(line, &req)
		io.WriteString(c, answer(req))
	})
	return l.Addr().String()
}

func TestDirectPort(t *testing.T) {
	addr := codeServer(t, func(req map[string]any) string {
		if req["op"] == "list" {
			return `{"contexts":[{"id":"default","language":"python","cwd":"/home/user"}]}` + "\n"
		}
		return `{"stdout":"hi\n"}` + "\n" + `{"result":{"text":"` + req["code"].(string) + `","is_main_result":true}}` + "\n" + `{"end":{"execution_count":1,"duration_ms":2}}` + "\n"
	})
	f := &fakeAgent{addr: addr}
	req := v1.CodeRequest{Code: "40+2"}
	CheckRun(&req)
	x, err := Collect(context.Background(), f, "sb_1", req)
	if err != nil || f.port != Port || f.got.Argv != nil || len(x.Results) != 1 || x.Results[0].Text != "40+2" || x.Logs.Stdout[0] != "hi\n" {
		t.Fatalf("direct run: %+v %v (port %d, exec %+v)", x, err, f.port, f.got)
	}
	list, err := ListContexts(context.Background(), f, "sb_1")
	if err != nil || len(list) != 1 || list[0].ID != "default" || f.got.Argv != nil {
		t.Fatalf("direct list: %+v %v", list, err)
	}
}

func TestDirectPortFallsBack(t *testing.T) {
	end := `{"end":{"execution_count":1,"duration_ms":2}}` + "\n"
	// The agent answers that nothing listens on the guest's address: the relay is tried.
	f := &fakeAgent{fakeExec: fakeExec{chunks: []string{end}}, dialErr: &agentclient.Error{Status: 502, Message: "nothing listens on port 49999"}}
	req := v1.CodeRequest{Code: "1"}
	CheckRun(&req)
	if _, err := Collect(context.Background(), f, "sb_1", req); err != nil || len(f.got.Argv) != 1 || f.got.Argv[0] != Relay {
		t.Fatalf("fallback: %v %+v", err, f.got)
	}
	// Without a relay either, the sandbox has no code interpreter.
	f = &fakeAgent{fakeExec: fakeExec{err: errdefs.NotFoundf(`executable "pandastack-code" not found in PATH`)}, dialErr: &agentclient.Error{Status: 502, Message: "nothing listens"}}
	if _, err := Collect(context.Background(), f, "sb_1", req); errdefs.KindOf(err) != errdefs.Conflict {
		t.Fatalf("no interpreter: %v", err)
	}
	// An unreachable host is the answer: no exec.
	f = &fakeAgent{fakeExec: fakeExec{chunks: []string{end}}, dialErr: &agentclient.Unreachable{Err: io.ErrUnexpectedEOF}}
	if _, err := Collect(context.Background(), f, "sb_1", req); err == nil || f.got.Argv != nil {
		t.Fatalf("unreachable: %v %+v", err, f.got)
	}
	// A server that closes without an end event is an error, as through the relay.
	f = &fakeAgent{addr: codeServer(t, func(map[string]any) string { return `{"stdout":"a"}` + "\n" })}
	if _, err := Collect(context.Background(), f, "sb_1", req); errdefs.KindOf(err) != errdefs.Unavailable || !strings.Contains(err.Error(), "without an end") {
		t.Fatalf("no end: %v", err)
	}
}

func TestLanguages(t *testing.T) {
	for in, want := range map[string]string{"": "python", "python": "python", "js": "javascript", "JavaScript": "javascript"} {
		req := v1.CodeRequest{Code: "1", Language: in}
		cc := v1.CreateCodeContextRequest{Language: in}
		if err := CheckRun(&req); err != nil || req.Language != want {
			t.Errorf("run %q: %q %v", in, req.Language, err)
		}
		if err := CheckContext(&cc); err != nil || cc.Language != want {
			t.Errorf("context %q: %q %v", in, cc.Language, err)
		}
	}
	req := v1.CodeRequest{Code: "1", Language: "ruby"}
	if err := CheckRun(&req); errdefs.KindOf(err) != errdefs.Invalid || !strings.Contains(err.Error(), "python, javascript") {
		t.Errorf("ruby: %v", err)
	}
	// The language goes to the server, which picks its default context with it.
	f := &fakeExec{chunks: []string{`{"end":{"execution_count":1,"duration_ms":2}}` + "\n"}}
	req = v1.CodeRequest{Code: "1", Language: "js"}
	CheckRun(&req)
	var sent map[string]any
	if _, err := Collect(context.Background(), f, "sb_1", req); err != nil || json.Unmarshal([]byte(*f.got.Stdin), &sent) != nil || sent["language"] != "javascript" {
		t.Fatalf("sent %v: %v", sent, err)
	}
}
