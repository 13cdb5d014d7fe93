// Package codeinterp runs code in a sandbox's warm kernels (the code-interpreter template's code
// server, see docs/code-interpreter.md). One request is one TCP connection to the server's port
// (Port) in the guest through the host agent's port path (the raw tunnel functions and apps use
// too): the request line goes in, the server's NDJSON answer comes out. Where the port path
// cannot reach it (a sandbox without network, a server of an older bake listening on guest
// loopback only), the request goes through the guest agent's exec of the relay command instead:
// its request line on stdin, the answer on stdout. Neither agent knows about kernels. A sandbox
// whose template has no code server gets a clear error, not a hang.
package codeinterp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/errdefs"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Relay is the command in the guest that carries one request to the code server.
const Relay = "pandastack-code"

// Port is the code server's TCP port in the guest. The public port proxy refuses it: the code
// server is reached only through the API (and the E2B facade's code port), never by host name.
const Port = 49999

// Limits on requests and answers.
const (
	MaxCodeBytes          = 1 << 20
	DefaultTimeoutSeconds = 300
	MaxTimeoutSeconds     = 86400
	// maxLineBytes bounds one answer line (a result's base64 chart): a misbehaving guest cannot
	// make the control plane buffer more.
	maxLineBytes = 32 << 20
	// relaySlack is how much longer the relay's exec may run than the execution's own timeout
	// (the server interrupts the code at the timeout and then answers).
	relaySlack = 60
)

// Languages are the languages a context can run ("js" is a name of "javascript").
var Languages = []string{"python", "javascript"}

var contextIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Execer runs a streamed exec in a sandbox (an *agentclient.Client).
type Execer interface {
	ExecStream(ctx context.Context, id string, req agentclient.ExecRequest) (io.ReadCloser, error)
}

// Dialer opens a TCP connection to a port in a sandbox through its host agent (an
// *agentclient.Client is one). An Execer that is also a Dialer is reached directly on Port.
type Dialer interface {
	DialPort(ctx context.Context, id string, port int) (net.Conn, error)
}

// CheckRun validates a run request and fills its defaults.
func CheckRun(req *v1.CodeRequest) error {
	lang, err := Language(req.Language)
	if err != nil {
		return err
	}
	if strings.TrimSpace(req.Code) == "" {
		return errdefs.Invalidf("code is required: the code to run")
	}
	if len(req.Code) > MaxCodeBytes {
		return errdefs.New(errdefs.TooLarge, "code is %d bytes; the limit is %d (put data in a file and read it from the code)", len(req.Code), MaxCodeBytes)
	}
	if req.ContextID != "" && !contextIDRE.MatchString(req.ContextID) {
		return errdefs.Invalidf("context_id %q is not a context id (from POST /v1/sandboxes/{id}/code/contexts)", req.ContextID)
	}
	if req.TimeoutSeconds != nil && (*req.TimeoutSeconds <= 0 || *req.TimeoutSeconds > MaxTimeoutSeconds) {
		return errdefs.Invalidf("timeout_seconds must be greater than 0 and at most %d", MaxTimeoutSeconds)
	}
	if req.TimeoutSeconds == nil {
		t := float64(DefaultTimeoutSeconds)
		req.TimeoutSeconds = &t
	}
	req.Language = lang
	return nil
}

// CheckContext validates a context request.
func CheckContext(req *v1.CreateCodeContextRequest) error {
	lang, err := Language(req.Language)
	if err != nil {
		return err
	}
	if req.Cwd != "" && (!strings.HasPrefix(req.Cwd, "/") || len(req.Cwd) > 4096 || strings.ContainsRune(req.Cwd, 0)) {
		return errdefs.Invalidf("cwd must be an absolute path in the sandbox")
	}
	req.Language = lang
	return nil
}

// CheckContextID validates a context id from a path or body ("" is the default context).
func CheckContextID(id string) error {
	if id != "" && !contextIDRE.MatchString(id) {
		return errdefs.Invalidf("%q is not a code context id", id)
	}
	return nil
}

// Language is the language l names ("" is python, "js" javascript), or a 400.
func Language(l string) (string, error) {
	switch strings.ToLower(l) {
	case "", "python":
		return "python", nil
	case "javascript", "js":
		return "javascript", nil
	}
	return "", errdefs.Invalidf("language %q is not supported: code contexts run %s", l, strings.Join(Languages, ", "))
}

// Run executes req (checked by CheckRun) in sandbox id and hands each event to emit as it
// comes; the last is End. An exception in the code is an Error event, not an error.
func Run(ctx context.Context, c Execer, id string, req v1.CodeRequest, emit func(v1.CodeEvent) error) error {
	// Without a context the language picks its default one; a context runs its own language.
	in := map[string]any{"op": "run", "context": req.ContextID, "language": req.Language, "code": req.Code, "timeout": *req.TimeoutSeconds}
	ended := false
	err := call(ctx, c, id, in, *req.TimeoutSeconds+relaySlack, func(line []byte) error {
		var ev struct {
			v1.CodeEvent
			Fail *serverFail `json:"fail"`
		}
		if err := json.Unmarshal(line, &ev); err != nil {
			return errdefs.New(errdefs.Unavailable, "the code server sent a bad line: %v", err)
		}
		if ev.Fail != nil {
			return ev.Fail.err()
		}
		ended = ended || ev.End != nil
		return emit(ev.CodeEvent)
	})
	if err == nil && !ended {
		err = errdefs.New(errdefs.Unavailable, "the code server ended the execution without an end event (did it crash? see /var/log/pandastack-start.log)")
	}
	return err
}

// Collect runs req and gathers the buffered answer.
func Collect(ctx context.Context, c Execer, id string, req v1.CodeRequest) (v1.CodeExecution, error) {
	x := v1.NewCodeExecution()
	err := Run(ctx, c, id, req, func(ev v1.CodeEvent) error {
		x.Add(ev)
		return nil
	})
	return x, err
}

// CreateContext starts a new context (a fresh kernel with its own variables).
func CreateContext(ctx context.Context, c Execer, id string, req v1.CreateCodeContextRequest) (v1.CodeContext, error) {
	var out struct{ Context v1.CodeContext }
	// The kernel forks from the guest's zygote (already warm): seconds, but allow for a loaded host.
	err := control(ctx, c, id, map[string]any{"op": "create", "cwd": req.Cwd, "language": req.Language}, 300, &out)
	return out.Context, err
}

// ListContexts lists the sandbox's contexts.
func ListContexts(ctx context.Context, c Execer, id string) ([]v1.CodeContext, error) {
	var out struct{ Contexts []v1.CodeContext }
	err := control(ctx, c, id, map[string]any{"op": "list"}, 60, &out)
	if out.Contexts == nil {
		out.Contexts = []v1.CodeContext{}
	}
	return out.Contexts, err
}

// DeleteContext stops a context's kernel.
func DeleteContext(ctx context.Context, c Execer, id, contextID string) error {
	return control(ctx, c, id, map[string]any{"op": "delete", "context": contextID}, 60, nil)
}

// Interrupt interrupts the context's running execution (KeyboardInterrupt in Python).
func Interrupt(ctx context.Context, c Execer, id, contextID string) error {
	return control(ctx, c, id, map[string]any{"op": "interrupt", "context": contextID}, 60, nil)
}

// Ping asks the code server for an answer without touching a kernel: the transport's round trip.
func Ping(ctx context.Context, c Execer, id string) error {
	return control(ctx, c, id, map[string]any{"op": "ping"}, 60, nil)
}

// control sends a one-answer request and decodes its answer into out.
func control(ctx context.Context, c Execer, id string, in map[string]any, timeout float64, out any) error {
	got := false
	err := call(ctx, c, id, in, timeout, func(line []byte) error {
		got = true
		var f struct {
			Fail *serverFail `json:"fail"`
		}
		if err := json.Unmarshal(line, &f); err != nil {
			return errdefs.New(errdefs.Unavailable, "the code server sent a bad line: %v", err)
		}
		if f.Fail != nil {
			return f.Fail.err()
		}
		if out == nil {
			return nil
		}
		return json.Unmarshal(line, out)
	})
	if err == nil && !got {
		err = errdefs.New(errdefs.Unavailable, "the code server did not answer")
	}
	return err
}

func errNoInterpreter() error {
	return errdefs.WithCode(errdefs.Conflict, "no_code_interpreter",
		"this sandbox has no code interpreter (its template lacks %s): create the sandbox from the code-interpreter template, or a template based on it", Relay)
}

// serverFail is the code server's answer to a request it refuses.
type serverFail struct{ Kind, Message string }

func (f *serverFail) err() error {
	switch f.Kind {
	case "not_found":
		return errdefs.NotFoundf("%s", f.Message)
	case "invalid":
		return errdefs.Invalidf("%s", f.Message)
	}
	return errdefs.New(errdefs.Unavailable, "code server: %s", f.Message)
}

// call sends in to the code server, directly on Port when c can dial it and through the relay
// otherwise, and hands each answer line to line.
func call(ctx context.Context, c Execer, id string, in map[string]any, timeout float64, line func([]byte) error) error {
	reqLine, err := json.Marshal(in)
	if err != nil {
		return err
	}
	if d, ok := c.(Dialer); ok {
		conn, err := d.DialPort(ctx, id, Port)
		if err == nil {
			return callConn(ctx, conn, reqLine, timeout, line)
		}
		// The agent answered but cannot reach the port (nothing listens on the guest's address,
		// no network): the relay may still reach the server on guest loopback, or say clearly
		// that there is none. Anything else (the host is down, the caller left) is the answer.
		var ae *agentclient.Error
		if !errors.As(err, &ae) || ae.Status == 0 || ctx.Err() != nil {
			return err
		}
	}
	return callExec(ctx, c, id, reqLine, timeout, line)
}

// callConn sends the request line on conn (a tunnel to the server's port) and hands each answer
// line to line until the server closes.
func callConn(ctx context.Context, conn net.Conn, reqLine []byte, timeout float64, line func([]byte) error) error {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Duration(timeout * float64(time.Second))))
	stop := context.AfterFunc(ctx, func() { conn.Close() }) // the caller left: the server interrupts the code
	defer stop()
	if _, err := conn.Write(append(reqLine, '\n')); err != nil {
		return connErr(ctx, err, timeout)
	}
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 64<<10), maxLineBytes)
	for sc.Scan() {
		if err := line(sc.Bytes()); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return errdefs.New(errdefs.Unavailable, "the code server sent a line longer than %d bytes", maxLineBytes)
		}
		return connErr(ctx, err, timeout)
	}
	return nil
}

func connErr(ctx context.Context, err error, timeout float64) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return errdefs.New(errdefs.Unavailable, "the code server did not answer within %g s", timeout)
	}
	return errdefs.New(errdefs.Unavailable, "the connection to the code server broke: %v", err)
}

// callExec runs the relay with reqLine as its request and hands each answer line to line.
func callExec(ctx context.Context, c Execer, id string, reqLine []byte, timeout float64, line func([]byte) error) error {
	stdin := string(reqLine) + "\n"
	// argv, not a shell: one process start less (tens of ms under TCG). A guest without the relay
	// answers 404 naming the executable.
	body, err := c.ExecStream(ctx, id, agentclient.ExecRequest{Argv: []string{Relay}, Stdin: &stdin, TimeoutSeconds: &timeout})
	var ae *agentclient.Error
	if (errdefs.Is(err, errdefs.NotFound) || errors.As(err, &ae) && ae.Kind() == errdefs.NotFound) &&
		strings.Contains(err.Error(), `executable "`+Relay+`"`) {
		return errNoInterpreter()
	}
	if err != nil {
		return err
	}
	defer body.Close()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 4*maxLineBytes/3+1024) // exec lines carry output as JSON strings
	var pending []byte
	var stderr strings.Builder
	exit := -1
	for sc.Scan() {
		var ev v1.ExecEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return errdefs.New(errdefs.Unavailable, "the host sent a bad exec line: %v", err)
		}
		switch {
		case ev.Error != nil:
			return errdefs.FromHTTP(0, ev.Error.Code, ev.Error.Message)
		case ev.Stderr != nil:
			if stderr.Len() < 4096 {
				stderr.WriteString(*ev.Stderr)
			}
		case ev.Stdout != nil:
			pending = append(pending, *ev.Stdout...)
			for {
				i := bytes.IndexByte(pending, '\n')
				if i < 0 {
					break
				}
				if err := line(pending[:i]); err != nil {
					return err
				}
				pending = pending[i+1:]
			}
			if len(pending) > maxLineBytes {
				return errdefs.New(errdefs.Unavailable, "the code server sent a line longer than %d bytes", maxLineBytes)
			}
		case ev.ExitCode != nil:
			exit = *ev.ExitCode
			if ev.TimedOut {
				return errdefs.New(errdefs.Unavailable, "the code server did not answer within %g s", timeout)
			}
		}
	}
	if err := sc.Err(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errdefs.New(errdefs.Unavailable, "the exec stream broke: %v", err)
	}
	switch exit {
	case 0:
		return nil
	case 126, 127:
		return errNoInterpreter()
	case -1:
		return errdefs.New(errdefs.Unavailable, "the exec of the code relay ended without an exit status")
	}
	return errdefs.New(errdefs.Unavailable, "the code server in this sandbox is not answering (relay exit %d: %s)", exit, strings.TrimSpace(stderr.String()))
}
