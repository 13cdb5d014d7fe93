package api

import (
	"encoding/base64"
	"encoding/json"

	"io"
	"net/http"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/pandastack/pandastack/internal/functions"
	"github.com/pandastack/pandastack/internal/store"
)

// A function's HTTP trigger: a request to <function id>.fn.<ProxyDomain> is the event of one
// invocation ({method, path, query, headers, body, is_base64}), and the handler's
// {status, headers, body} is the answer. Like a sandbox port's host name, the id (unguessable)
// is the capability: the request carries no API key (its Authorization belongs to the function).

var fnHostLabel = regexp.MustCompile(`^fn_[a-z0-9]{1,60}$`)

// functionHost reads "<function id>.fn.<domain>[:port]" from a Host header.
func (s *Server) functionHost(host string) (string, bool) {
	return s.serviceHost(host, "fn", fnHostLabel)
}

// serviceHost reads "<label>.<kind>.<ProxyDomain>[:port]" from a Host header, label matching
// pattern (a function's id, an app's name).
func (s *Server) serviceHost(host, kind string, pattern *regexp.Regexp) (string, bool) {
	d := s.cfg.ProxyDomain
	if d == "" {
		return "", false
	}
	if h, _, found := strings.Cut(host, ":"); found {
		host = h
	}
	label, ok := strings.CutSuffix(strings.ToLower(strings.TrimSuffix(host, ".")), "."+kind+"."+d)
	if !ok || !pattern.MatchString(label) {
		return "", false
	}
	return label, true
}

// httpEvent is what a handler receives from its HTTP trigger.
type httpEvent struct {
	Method   string            `json:"method"`
	Path     string            `json:"path"`
	Query    string            `json:"query"`
	Headers  map[string]string `json:"headers"`
	Body     string            `json:"body"`
	IsBase64 bool              `json:"is_base64"`
}

// httpAnswer is what a handler may return to shape the response; any other result is answered
// 200 as JSON.
type httpAnswer struct {
	Status  *int              `json:"status"`
	Headers map[string]string `json:"headers"`
	Body    json.RawMessage   `json:"body"`
}

func (s *Server) httpTrigger(w http.ResponseWriter, r *http.Request, id string) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
	if err != nil {
		s.writeError(w, r, jsonError(err))
		return
	}
	ev := httpEvent{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Headers: map[string]string{}, Body: string(body)}
	if !utf8.Valid(body) {
		ev.Body, ev.IsBase64 = base64.StdEncoding.EncodeToString(body), true
	}
	for k, vs := range r.Header {
		ev.Headers[strings.ToLower(k)] = strings.Join(vs, ", ")
	}
	payload, _ := json.Marshal(ev)
	run, err := s.functions.InvokeHTTP(r.Context(), id, payload)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	switch run.Status {
	case functions.RunSucceeded:
		writeHTTPResult(w, run)
	case functions.RunTimedOut:
		writeJSON(w, http.StatusGatewayTimeout, functionRunView(run))
	default:
		writeJSON(w, http.StatusBadGateway, functionRunView(run))
	}
}

// writeHTTPResult answers a handler's {status, headers, body} (a string body as it is, any other
// JSON as JSON), or any other result as 200 JSON.
func writeHTTPResult(w http.ResponseWriter, run store.FunctionRun) {
	var a httpAnswer
	if err := json.Unmarshal([]byte(run.Result), &a); err != nil || a.Status == nil || *a.Status < 100 || *a.Status > 599 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.Write([]byte(run.Result))
		return
	}
	for k, v := range a.Headers {
		w.Header().Set(k, v)
	}
	var text string
	out := []byte(a.Body)
	if err := json.Unmarshal(a.Body, &text); err == nil {
		out = []byte(text)
	} else if len(a.Body) > 0 && w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(*a.Status)
	w.Write(out)
}
