package mcptools

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pandastack/pandastack/internal/client"
)

// RemoteHeader carries the address of an /mcp request's client to the /v1 calls its tools make
// (the audit log's source). The server sets it on every /mcp request, replacing any a client sent.
const RemoteHeader = "Pandastack-Mcp-Remote"

// MaxRequestBytes bounds one /mcp request's body (a write_file of MaxWriteBytes, JSON-escaped).
const MaxRequestBytes = 3*MaxWriteBytes + 64<<10

// Handler is /mcp, streamable HTTP: stateless (no session kept between requests, so any server of
// a fleet answers any request), each tool call acting with its own request's bearer key through
// api, the server's /v1 handler, called in-process. The caller authenticates /mcp itself before.
func Handler(version string, api http.Handler) http.Handler {
	srv := NewServer(version, func(_ context.Context, req *mcp.CallToolRequest) (*client.Client, error) {
		var h http.Header
		if req.Extra != nil {
			h = req.Extra.Header
		}
		key, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
		if !ok || key == "" {
			return nil, fmt.Errorf("no API key on this request: send Authorization: Bearer <key>")
		}
		return &client.Client{BaseURL: "http://mcp.invalid", APIKey: key,
			HTTP: &http.Client{Transport: InProcess{Handler: api, RemoteAddr: h.Get(RemoteHeader)}}}, nil
	})
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Stateless: true,
		// Every request carries the key (a DNS-rebound page has none), and a server behind a
		// loopback reverse proxy sees other Host names.
		DisableLocalhostProtection: true,
		MaxRequestBodyBytes:        MaxRequestBytes,
	})
}

// InProcess is an http.RoundTripper that serves each request with Handler in this process,
// streaming the answer's body through a pipe (a reader that stops reading ends the handler's
// writes; cancelling the request's context ends the handler's context).
type InProcess struct {
	Handler    http.Handler
	RemoteAddr string
}

func (t InProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.RemoteAddr = t.RemoteAddr
	r.RequestURI = req.URL.RequestURI()
	if r.Body == nil {
		r.Body = http.NoBody
	}
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, body: pw, ready: make(chan struct{})}
	go func() {
		defer func() {
			if p := recover(); p != nil {
				w.WriteHeader(http.StatusInternalServerError)
				pw.CloseWithError(fmt.Errorf("handler panicked: %v", p))
				return
			}
			w.WriteHeader(http.StatusOK) // nothing written: an empty 200
			pw.Close()
		}()
		t.Handler.ServeHTTP(w, r)
	}()
	select {
	case <-w.ready:
	case <-req.Context().Done():
		pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
	return &http.Response{Status: fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)), StatusCode: w.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: w.sent, Body: pr, ContentLength: -1, Request: req}, nil
}

// pipeWriter is the handler's side of InProcess: headers once, then the body into the pipe.
type pipeWriter struct {
	header, sent http.Header
	body         *io.PipeWriter
	once         sync.Once
	status       int
	ready        chan struct{}
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(code int) {
	w.once.Do(func() {
		w.status, w.sent = code, w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}

// Flush: writes reach the reader as they are made.
func (w *pipeWriter) Flush() {}
