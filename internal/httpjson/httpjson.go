// Package httpjson is the request plumbing shared by PandaStack's two Go clients:
// internal/client (the public /v1 API) and internal/agentclient (a host agent's API). Both speak
// bearer-authenticated JSON with an error envelope and NDJSON streams; they differ only in how an
// error answer and an unreachable server become errors, which each passes in.
package httpjson

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
)

// MaxErrorBody bounds how much of a non-2xx answer is read to build the error.
const MaxErrorBody = 64 << 10

// Endpoint is one server as a client sees it.
type Endpoint struct {
	BaseURL string
	Token   string // sent as a bearer token when not empty
	HTTP    *http.Client
	// Fail turns a non-2xx answer (its body's first MaxErrorBody bytes) into the client's error.
	Fail func(resp *http.Response, body []byte) error
	// Unreachable wraps a transport failure; a failure caused by ctx ending returns ctx.Err() instead.
	Unreachable func(err error) error
}

// Do sends a request and returns a 2xx response with its body open (the caller closes it).
// size < 0 means unknown (chunked). hdr may be nil.
func (e Endpoint) Do(ctx context.Context, method, path string, query url.Values, body io.Reader, size int64, hdr http.Header) (*http.Response, error) {
	u := e.BaseURL + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if body != nil && size >= 0 {
		req.ContentLength = size
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	if e.Token != "" {
		req.Header.Set("Authorization", "Bearer "+e.Token)
	}
	resp, err := e.HTTP.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, e.Unreachable(err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, MaxErrorBody))
	return nil, e.Fail(resp, b)
}

// Call sends in as JSON (nil: no body) and decodes a JSON answer into out (nil: discarded).
// decodeErr, if not nil, wraps a failure to decode the answer.
func (e Endpoint) Call(ctx context.Context, method, path string, query url.Values, in, out any, decodeErr func(error) error) error {
	body, size, hdr, err := JSON(in)
	if err != nil {
		return err
	}
	resp, err := e.Do(ctx, method, path, query, body, size, hdr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		if decodeErr != nil {
			return decodeErr(err)
		}
		return err
	}
	return nil
}

// JSON is in as a request body with its size and Content-Type; a nil in is no body.
func JSON(in any) (io.Reader, int64, http.Header, error) {
	if in == nil {
		return nil, -1, nil, nil
	}
	b, err := json.Marshal(in)
	if err != nil {
		return nil, 0, nil, err
	}
	return bytes.NewReader(b), int64(len(b)), http.Header{"Content-Type": {"application/json"}}, nil
}

// Lines reads an NDJSON body line by line (blank lines skipped, lines up to maxLine bytes) into
// each until each says it is done. ended reports whether that happened; false with a nil error
// means the stream ended first. A failure to read the body comes back as *ReadError; each's own
// errors come back as they are.
func Lines(r io.Reader, maxLine int, each func(line []byte) (done bool, err error)) (ended bool, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		if done, err := each(sc.Bytes()); done || err != nil {
			return done, err
		}
	}
	if err := sc.Err(); err != nil {
		return false, &ReadError{err}
	}
	return false, nil
}

// ReadError is a stream that broke while it was read (the connection, or a line over the limit).
type ReadError struct{ Err error }

func (e *ReadError) Error() string { return e.Err.Error() }
func (e *ReadError) Unwrap() error { return e.Err }

// Upload sends body as application/octet-stream (size < 0: chunked) and decodes the JSON answer
// into out; an empty answer leaves out as it is.
func (e Endpoint) Upload(ctx context.Context, method, path string, query url.Values, body io.Reader, size int64, out any) error {
	resp, err := e.Do(ctx, method, path, query, body, size, http.Header{"Content-Type": {"application/octet-stream"}})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}
