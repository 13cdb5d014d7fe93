package hostagent

import (
	"bytes"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

func (a *Agent) handleExec(w http.ResponseWriter, r *http.Request) {
	var req hostapi.ExecRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	if strings.Contains(r.Header.Get("Accept"), "application/x-ndjson") {
		a.streamExec(w, r, id, req)
		return
	}
	stdout := &cappedBuffer{max: a.cfg.ExecOutputLimit}
	stderr := &cappedBuffer{max: a.cfg.ExecOutputLimit}
	res, err := a.sandboxes.Exec(r.Context(), id, req, stdout, stderr)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, hostapi.ExecResult{
		Stdout: stdout.String(), Stderr: stderr.String(), ExitCode: res.ExitCode, TimedOut: res.TimedOut,
		DurationMS: res.DurationMs, Signal: res.Signal, StdoutTruncated: stdout.truncated, StderrTruncated: stderr.truncated,
	})
}

// streamExec answers with NDJSON lines as output is produced. Errors after the first byte can no
// longer change the status code, so they travel as an {"error": ...} line.
func (a *Agent) streamExec(w http.ResponseWriter, r *http.Request, id string, req hostapi.ExecRequest) {
	if err := a.sandboxes.WithGuest(r.Context(), id, func(*guest.Client) error { return nil }); err != nil {
		writeError(w, err)
		return
	}
	nd := newNDJSON(w)
	stdout := &utf8Lines{nd: nd, chunk: func(s string) hostapi.ExecChunk { return hostapi.ExecChunk{Stdout: s} }}
	stderr := &utf8Lines{nd: nd, chunk: func(s string) hostapi.ExecChunk { return hostapi.ExecChunk{Stderr: s} }}
	res, err := a.sandboxes.Exec(r.Context(), id, req, stdout, stderr)
	stdout.flush()
	stderr.flush()
	if err != nil {
		nd.send(errorBody(err))
		return
	}
	nd.send(hostapi.ExecEnd{ExitCode: res.ExitCode, TimedOut: res.TimedOut, DurationMS: res.DurationMs, Signal: res.Signal})
}

// utf8Lines turns an output stream into NDJSON events, holding back an incomplete UTF-8 sequence
// at a chunk's end so a character split across reads is not mangled.
type utf8Lines struct {
	nd    *ndjson
	chunk func(string) hostapi.ExecChunk // the line for some output
	hold  []byte
}

func (u *utf8Lines) Write(p []byte) (int, error) {
	buf := append(u.hold, p...)
	cut := len(buf)
	for i := 1; i <= 3 && i <= len(buf); i++ { // find a trailing partial rune
		if utf8.RuneStart(buf[len(buf)-i]) {
			if !utf8.FullRune(buf[len(buf)-i:]) {
				cut = len(buf) - i
			}
			break
		}
	}
	if cut > 0 {
		u.nd.send(u.chunk(string(buf[:cut])))
	}
	u.hold = append([]byte(nil), buf[cut:]...)
	return len(p), nil
}

func (u *utf8Lines) flush() {
	if len(u.hold) > 0 {
		u.nd.send(u.chunk(string(u.hold)))
		u.hold = nil
	}
}

// cappedBuffer keeps the first max bytes and notes that more were dropped, so a command printing
// without end cannot exhaust the agent's memory and the caller is told the output is cut.
type cappedBuffer struct {
	bytes.Buffer
	max       int64
	truncated bool
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	room := c.max - int64(c.Len())
	if int64(len(p)) > room {
		c.truncated = true
		if room > 0 {
			c.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return c.Buffer.Write(p)
}
