package testenv

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Body is a test request's body: nil is none, a string or []byte is sent as it is, an io.Reader
// is streamed, anything else is sent as JSON.
func Body(t testing.TB, body any) io.Reader {
	t.Helper()
	switch b := body.(type) {
	case nil:
		return nil
	case string:
		return strings.NewReader(b)
	case []byte:
		return bytes.NewReader(b)
	case io.Reader:
		return b
	}
	j, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(j)
}

// Send sends req with http.DefaultClient and reads the answer's whole body (closed again); a
// request that fails or a body cut short fails the test.
func Send(t testing.TB, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, b
}

// NDJSON reads an NDJSON answer to its end, handing each event to each; a line that is not a
// JSON object fails the test. Lines may be up to 8 MiB.
func NDJSON(t testing.TB, r io.Reader, each func(ev map[string]any)) {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	for sc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("bad NDJSON line %q: %v", sc.Text(), err)
		}
		each(ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading NDJSON: %v", err)
	}
}
