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
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// The files endpoints: the guest's files, relayed to the sandbox's host agent.

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
	s.svc.Touched(r.Context(), sb, c, err)
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

// relayQuery is a files call whose query (path, user and the extra parameters) goes to the host as
// it came, once check (if any) accepts it.
func (s *Server) relayQuery(w http.ResponseWriter, r *http.Request, method, sub string, check func(url.Values) error, extra ...string) {
	q, err := fileQuery(r, extra...)
	if err == nil && check != nil {
		err = check(q)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.passJSON(w, r, method, sub, q, nil) // a file's body streams through relay's io.Copy
}

// relayBody is a files call with a JSON body, which goes to the host re-encoded once check
// accepts it.
func relayBody[T any](s *Server, w http.ResponseWriter, r *http.Request, sub string, check func(T) error) {
	var req T
	err := decodeJSON(w, r, &req, false)
	if err == nil {
		err = check(req)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	b, _ := json.Marshal(req)
	s.passJSON(w, r, "POST", sub, nil, b)
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request) {
	s.relayQuery(w, r, "GET", "", nil)
}

func (s *Server) statFile(w http.ResponseWriter, r *http.Request) {
	s.relayQuery(w, r, "GET", "/stat", nil)
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) {
	s.relayQuery(w, r, "GET", "/list", func(q url.Values) error {
		if d := q.Get("depth"); d != "" {
			if n, err := strconv.Atoi(d); err != nil || n < 1 || n > 10 {
				return invalid("depth must be an integer from 1 to 10")
			}
		}
		return nil
	}, "depth")
}

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request) {
	s.relayQuery(w, r, "DELETE", "", func(q url.Values) error {
		if v := q.Get("recursive"); v != "" && v != "true" && v != "false" {
			return invalid("recursive must be true or false")
		}
		return nil
	}, "recursive")
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request) {
	relayBody(s, w, r, "/mkdir", func(req v1.PathRequest) error {
		if req.Path == "" {
			return invalid("path is required")
		}
		return nil
	})
}

func (s *Server) move(w http.ResponseWriter, r *http.Request) {
	relayBody(s, w, r, "/move", func(req v1.MoveRequest) error {
		if req.From == "" || req.To == "" {
			return invalid("from and to are required")
		}
		return nil
	})
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
	if err == nil {
		if m := q.Get("mode"); m != "" {
			if v, perr := strconv.ParseUint(m, 8, 32); perr != nil || v > 0o7777 {
				err = invalid("mode %q: give octal permission bits such as 0644", truncate(m))
			}
		}
	}
	s.upload(w, r, "", "file", q, err)
}

// putArchive is PUT …/files/archive: a tar or tar.gz unpacked into a directory by the guest
// agent (docs/files.md), within the same size limit as a file upload.
func (s *Server) putArchive(w http.ResponseWriter, r *http.Request) {
	q, err := fileQuery(r)
	s.upload(w, r, "/archive", "archive", q, err)
}

// upload streams the request body to the host's files route sub (a file or an archive), cut at
// the upload limit; err is the caller's verdict on the query.
func (s *Server) upload(w http.ResponseWriter, r *http.Request, sub, what string, q url.Values, err error) {
	tooLarge := errdefs.New(errdefs.TooLarge, "%s is larger than the %d-byte upload limit", what, s.cfg.MaxUploadBytes)
	if err == nil && r.ContentLength > s.cfg.MaxUploadBytes {
		err = tooLarge
	}
	sb, c, ok := s.targetOK(w, r, err)
	if !ok {
		return
	}
	body := &limitedBody{r: r.Body, left: s.cfg.MaxUploadBytes}
	hdr := http.Header{}
	hdr.Set("Content-Type", "application/octet-stream")
	// The body streams to the host as it arrives; nothing is held in memory or on disk here.
	resp, err := c.Raw(r.Context(), "PUT", "/v1/sandboxes/"+url.PathEscape(sb.ID)+"/files"+sub, q, body, r.ContentLength, hdr)
	s.svc.Touched(r.Context(), sb, c, err)
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

// watchFiles is GET …/files/watch: the host's NDJSON stream of a directory's changes, relayed
// line by line.
func (s *Server) watchFiles(w http.ResponseWriter, r *http.Request) {
	q, err := fileQuery(r, "recursive")
	if err == nil {
		_, err = boolQuery(q, "recursive")
	}
	s.hostStream(w, r, "/watch", q, err, func(sb store.Sandbox, body io.ReadCloser) {
		s.relayNDJSON(w, r, sb.ID, "watch", body)
	})
}

// getArchive is GET …/files/archive: a directory as a tar or tar.gz stream. A stream the host
// breaks off breaks the client's too (never a clean end of a cut archive).
func (s *Server) getArchive(w http.ResponseWriter, r *http.Request) {
	q, err := fileQuery(r, "format")
	if f := q.Get("format"); err == nil && f != "" && f != "tar" && f != "tar.gz" {
		err = invalid("format must be tar or tar.gz")
	}
	s.hostStream(w, r, "/archive", q, err, func(_ store.Sandbox, body io.ReadCloser) {
		defer body.Close()
		w.Header().Set("Content-Type", "application/x-tar")
		if q.Get("format") == "tar.gz" {
			w.Header().Set("Content-Type", "application/gzip")
		}
		w.WriteHeader(http.StatusOK)
		if _, err := io.Copy(w, body); err != nil && r.Context().Err() == nil {
			panic(http.ErrAbortHandler)
		}
	})
}

// hostStream opens a streaming GET of the host's files route sub and hands its body to relay.
func (s *Server) hostStream(w http.ResponseWriter, r *http.Request, sub string, q url.Values, err error, relay func(store.Sandbox, io.ReadCloser)) {
	sb, c, ok := s.targetOK(w, r, err)
	if !ok {
		return
	}
	resp, err := c.Raw(r.Context(), "GET", "/v1/sandboxes/"+url.PathEscape(sb.ID)+"/files"+sub, q, nil, -1, nil)
	s.svc.Touched(r.Context(), sb, c, err)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	relay(sb, resp.Body)
}

// boolQuery is the query flag name: false when not given, an error unless it is 1, 0, true or
// false.
func boolQuery(q url.Values, name string) (bool, error) {
	if v := q.Get(name); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, invalid("%s must be 1, 0, true or false", name)
		}
		return b, nil
	}
	return false, nil
}

// targetOK is the request's sandbox and its host's client once err (the caller's verdict on the
// input) is nil; otherwise, or when the sandbox is not the caller's, it answers the error and
// returns false.
func (s *Server) targetOK(w http.ResponseWriter, r *http.Request, err error) (store.Sandbox, *agentclient.Client, bool) {
	var sb store.Sandbox
	var c *agentclient.Client
	if err == nil {
		sb, c, err = s.target(r)
	}
	if err != nil {
		s.writeError(w, r, err)
		return sb, nil, false
	}
	return sb, c, true
}
