package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/store"
)

// MaxExecTimeoutSeconds bounds timeout_seconds of one exec (the host agent's own limit).
const MaxExecTimeoutSeconds = 86400

type execRequest struct {
	Cmd            string            `json:"cmd"`
	Argv           []string          `json:"argv"`
	TimeoutSeconds *float64          `json:"timeout_seconds"`
	Env            map[string]string `json:"env"`
	Cwd            string            `json:"cwd"`
	User           string            `json:"user"`
	Stdin          *string           `json:"stdin"`
}

// target loads the caller's sandbox, if calls can reach it (running, or hibernated: its host wakes
// it), and a client for its host.
func (s *Server) target(r *http.Request) (store.Sandbox, *agentclient.Client, error) {
	sb, err := s.sandbox(r)
	if err != nil {
		return sb, nil, err
	}
	if err := usable(sb); err != nil {
		return sb, nil, err
	}
	h, err := s.store.GetHost(r.Context(), sb.HostID)
	if errors.Is(err, store.ErrNotFound) {
		return sb, nil, conflict("sandbox %s has no known host", sb.ID)
	}
	if err != nil {
		return sb, nil, err
	}
	if h.State != store.HostUp {
		return sb, nil, conflict("sandbox %s is unreachable: its host %s is down", sb.ID, h.ID)
	}
	return sb, s.sched.Client(h), nil
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	var req execRequest
	if err := decodeJSON(w, r, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	switch {
	case req.Cmd == "" && len(req.Argv) == 0:
		s.writeError(w, r, invalid("give cmd (a shell command line) or argv (a program and its arguments)"))
		return
	case req.Cmd != "" && len(req.Argv) > 0:
		s.writeError(w, r, invalid("give cmd or argv, not both"))
		return
	case len(req.Argv) > 0 && req.Argv[0] == "":
		s.writeError(w, r, invalid("argv[0] must name a program"))
		return
	case req.TimeoutSeconds != nil && (*req.TimeoutSeconds <= 0 || *req.TimeoutSeconds > MaxExecTimeoutSeconds):
		s.writeError(w, r, invalid("timeout_seconds must be greater than 0 and at most %d", MaxExecTimeoutSeconds))
		return
	}
	if err := validateEnv("env", req.Env); err != nil {
		s.writeError(w, r, err)
		return
	}
	sb, c, err := s.target(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	areq := agentclient.ExecRequest{Cmd: req.Cmd, Argv: req.Argv, TimeoutSeconds: req.TimeoutSeconds, Env: req.Env,
		Cwd: req.Cwd, User: req.User, Stdin: req.Stdin}
	if !strings.Contains(r.Header.Get("Accept"), "application/x-ndjson") {
		res, err := c.Exec(r.Context(), sb.ID, areq)
		s.touched(r.Context(), sb, c, err)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
		return
	}
	body, err := c.ExecStream(r.Context(), sb.ID, areq)
	s.touched(r.Context(), sb, c, err) // the host answers the stream's headers once it is awake
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer body.Close()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no") // tell fronting proxies not to buffer the stream
	w.WriteHeader(http.StatusOK)
	if err := copyFlushing(w, body); err != nil && r.Context().Err() == nil {
		// Headers are gone; the stream's last line is the only place left for an error.
		line, _ := json.Marshal(map[string]any{"error": map[string]string{"code": "internal",
			"message": "the stream from the sandbox's host broke (request id " + w.Header().Get("X-Request-Id") + ")"}})
		w.Write(append(line, '\n'))
		s.log.Warn("exec stream broke", "sandbox", sb.ID, "err", err)
	}
}

// copyFlushing copies src to w, flushing after every read so each NDJSON line reaches the client
// as soon as the host sends it.
func copyFlushing(w http.ResponseWriter, src io.Reader) error {
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return nil // the client left; nothing more to do
			}
			rc.Flush()
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// fileQuery copies the files query parameters the agent understands, rejecting others.
func fileQuery(r *http.Request, allowed ...string) (url.Values, error) {
	q := url.Values{}
	allowed = append(allowed, "path", "user")
	for k, vs := range r.URL.Query() {
		ok := false
		for _, a := range allowed {
			ok = ok || a == k
		}
		if !ok {
			return nil, invalid("unknown query parameter %q (allowed: %s)", truncate(k), strings.Join(allowed, ", "))
		}
		q[k] = vs
	}
	if q.Get("path") == "" {
		return nil, invalid("path is required (?path=/absolute/path)")
	}
	return q, nil
}

// passJSON forwards a small files call and relays the agent's answer (JSON or 204).
func (s *Server) passJSON(w http.ResponseWriter, r *http.Request, method, sub string, q url.Values, body []byte) {
	sb, c, err := s.target(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var rd io.Reader
	hdr := http.Header{}
	if body != nil {
		rd = bytes.NewReader(body)
		hdr.Set("Content-Type", "application/json")
	}
	resp, err := c.Raw(r.Context(), method, "/v1/sandboxes/"+url.PathEscape(sb.ID)+"/files"+sub, q, rd, int64(len(body)), hdr)
	s.touched(r.Context(), sb, c, err)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer resp.Body.Close()
	relay(w, resp)
}

// relay copies an agent's 2xx answer (status, content headers, body) to the client.
func relay(w http.ResponseWriter, resp *http.Response) {
	for _, h := range []string{"Content-Type", "Content-Length", "Last-Modified"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	if resp.StatusCode != http.StatusNoContent {
		io.Copy(w, resp.Body)
	}
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request) {
	q, err := fileQuery(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.passJSON(w, r, "GET", "", q, nil) // the body streams through relay's io.Copy
}

func (s *Server) statFile(w http.ResponseWriter, r *http.Request) {
	q, err := fileQuery(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.passJSON(w, r, "GET", "/stat", q, nil)
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) {
	q, err := fileQuery(r, "depth")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if d := q.Get("depth"); d != "" {
		if n, err := strconv.Atoi(d); err != nil || n < 1 || n > 10 {
			s.writeError(w, r, invalid("depth must be an integer from 1 to 10"))
			return
		}
	}
	s.passJSON(w, r, "GET", "/list", q, nil)
}

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request) {
	q, err := fileQuery(r, "recursive")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if v := q.Get("recursive"); v != "" && v != "true" && v != "false" {
		s.writeError(w, r, invalid("recursive must be true or false"))
		return
	}
	s.passJSON(w, r, "DELETE", "", q, nil)
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Path string `json:"path"`
		User string `json:"user,omitempty"`
	}
	if err := decodeJSON(w, r, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Path == "" {
		s.writeError(w, r, invalid("path is required"))
		return
	}
	b, _ := json.Marshal(req)
	s.passJSON(w, r, "POST", "/mkdir", nil, b)
}

func (s *Server) move(w http.ResponseWriter, r *http.Request) {
	var req struct {
		From string `json:"from"`
		To   string `json:"to"`
		User string `json:"user,omitempty"`
	}
	if err := decodeJSON(w, r, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.From == "" || req.To == "" {
		s.writeError(w, r, invalid("from and to are required"))
		return
	}
	b, _ := json.Marshal(req)
	s.passJSON(w, r, "POST", "/move", nil, b)
}

// limitedBody is the upload stream: it stops at max and remembers that it did, so a too-large
// chunked upload is answered 413 whatever error the host reports for the cut stream.
type limitedBody struct {
	r        io.Reader
	left     int64
	exceeded bool
}

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// Probe one byte: exactly max bytes is fine, more is not.
		var one [1]byte
		n, err := l.r.Read(one[:])
		if n > 0 {
			l.exceeded = true
			return 0, errors.New("upload exceeds the size limit")
		}
		return 0, err
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request) {
	q, err := fileQuery(r, "mode")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if m := q.Get("mode"); m != "" {
		if v, err := strconv.ParseUint(m, 8, 32); err != nil || v > 0o7777 {
			s.writeError(w, r, invalid("mode %q: give octal permission bits such as 0644", truncate(m)))
			return
		}
	}
	tooLarge := errorf(http.StatusRequestEntityTooLarge, "payload_too_large", "file is larger than the %d-byte upload limit", s.cfg.MaxUploadBytes)
	if r.ContentLength > s.cfg.MaxUploadBytes {
		s.writeError(w, r, tooLarge)
		return
	}
	sb, c, err := s.target(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	body := &limitedBody{r: r.Body, left: s.cfg.MaxUploadBytes}
	hdr := http.Header{}
	hdr.Set("Content-Type", "application/octet-stream")
	// The body streams to the host as it arrives; nothing is held in memory or on disk here.
	resp, err := c.Raw(r.Context(), "PUT", "/v1/sandboxes/"+url.PathEscape(sb.ID)+"/files", q, body, r.ContentLength, hdr)
	s.touched(r.Context(), sb, c, err)
	if body.exceeded {
		if resp != nil {
			resp.Body.Close()
		}
		s.writeError(w, r, tooLarge)
		return
	}
	if err != nil {
		if r.Context().Err() != nil || errors.Is(err, context.Canceled) {
			return // the client went away mid-upload
		}
		s.writeError(w, r, err)
		return
	}
	defer resp.Body.Close()
	relay(w, resp)
}
