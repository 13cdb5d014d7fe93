package api

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/pandastack/pandastack/internal/testenv"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// tarBytes is a tar of files (name → content; a name ending in / is a directory).
func tarBytes(t *testing.T, files ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for i := 0; i+1 < len(files); i += 2 {
		h := &tar.Header{Name: files[i], Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(files[i+1]))}
		if strings.HasSuffix(files[i], "/") {
			h.Typeflag, h.Mode, h.Size = tar.TypeDir, 0o755, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(files[i+1]))
	}
	tw.Close()
	return b.Bytes()
}

// TestFileTreeEdge: watch and archive routes over the fake agent — a watch sees a write made
// through the API, archives go both ways (tar and tar.gz), and bad input is a clear 4xx.
func TestFileTreeEdge(t *testing.T) {
	e := newEnv(t)
	a := e.admin
	sb := e.create(a, map[string]any{"template": "base"})
	base := "/v1/sandboxes/" + sb.ID + "/files"

	// Watch: ready first, then the write.
	req, _ := http.NewRequest("GET", e.hs.URL+base+"/watch?path=/tmp&recursive=1", nil)
	req.Header.Set("Authorization", "Bearer "+a)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("watch: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	lines := bufio.NewScanner(res.Body)
	next := func() v1.WatchEvent {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("watch stream ended: %v", lines.Err())
		}
		var ev v1.WatchEvent
		if err := json.Unmarshal(lines.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		return ev
	}
	if ev := next(); ev.Type != "ready" || ev.Path != "/tmp" {
		t.Fatalf("first line %+v", ev)
	}
	e.mustStatus(e.do("PUT", base+"?path=/tmp/d/x.txt", a, "hi"), 200)
	for _, want := range []string{"/tmp/d", "/tmp/d/x.txt"} {
		if ev := next(); ev.Type != "create" || ev.Path != want {
			t.Fatalf("event %+v, want create %s", ev, want)
		}
	}

	// Archives.
	got := e.mustStatus(e.do("PUT", base+"/archive?path=/tmp/up", a, tarBytes(t, "dir/", "", "dir/f.txt", "hello", "top", "x")), 200).json(t)
	if got["entries"] != float64(3) || got["bytes"] != float64(6) {
		t.Fatalf("put archive: %v", got)
	}
	if b := e.mustStatus(e.do("GET", base+"?path=/tmp/up/dir/f.txt", a, nil), 200).body; string(b) != "hello" {
		t.Fatalf("unpacked file: %q", b)
	}
	r := e.mustStatus(e.do("GET", base+"/archive?path=/tmp/up&format=tar.gz", a, nil), 200)
	if ct := r.header.Get("Content-Type"); ct != "application/gzip" {
		t.Fatalf("tar.gz content type %q", ct)
	}
	if names := testenv.TarEntries(t, bytes.NewReader(r.body)); strings.Join(names, " ") != "dir/ dir/f.txt top" || r.body[0] != 0x1f {
		t.Fatalf("downloaded entries %v (gzipped: %v)", names, r.body[0] == 0x1f)
	}
	if ct := e.mustStatus(e.do("GET", base+"/archive?path=/tmp/up", a, nil), 200).header.Get("Content-Type"); ct != "application/x-tar" {
		t.Fatalf("tar content type %q", ct)
	}

	tm := e.mustStatus(e.do("POST", "/v1/teams", a, map[string]string{"name": "beta"}), 201).json(t)
	b := tm["key"].(map[string]any)["key"].(string)
	reader := e.mustStatus(e.do("POST", "/v1/keys", a, map[string]any{"name": "reader", "scopes": []string{"read"}}), 201).json(t)["key"].(string)
	e.wantRefusals([]refusal{
		{"GET", base + "/watch", a, nil, 400, "path"},
		{"GET", base + "/watch?path=/tmp&recursive=maybe", a, nil, 400, "recursive"},
		{"GET", base + "/watch?path=/tmp&depth=2", a, nil, 400, "depth"},
		{"GET", base + "/watch?path=/tmp/d/x.txt", a, nil, 400, "not a directory"},
		{"GET", base + "/watch?path=/nope", a, nil, 404, "/nope"},
		{"GET", base + "/archive?path=/tmp&format=zip", a, nil, 400, "format"},
		{"GET", base + "/archive?path=relative", a, nil, 400, "absolute"},
		{"GET", base + "/archive", a, nil, 400, "path"},
		{"PUT", base + "/archive?path=/tmp/up", a, tarBytes(t, "../escape", "x"), 400, ".."},
		{"PUT", base + "/archive?path=/tmp/up", a, tarBytes(t, "/etc/evil", "x"), 400, "absolute"},
		{"PUT", base + "/archive?path=/tmp/up", a, "this is no tar, nor gzip, just text", 400, "tar"},
		{"PUT", base + "/archive?path=/tmp/up&mode=0644", a, tarBytes(t, "a", "x"), 400, "mode"},
		{"GET", base + "/watch?path=/tmp", b, nil, 404, sb.ID},
		{"GET", base + "/archive?path=/tmp", b, nil, 404, sb.ID},
		{"PUT", base + "/archive?path=/tmp", b, tarBytes(t, "a", "x"), 404, sb.ID},
		{"PUT", base + "/archive?path=/tmp", reader, tarBytes(t, "a", "x"), 403, "sandboxes"},
	})
	e.mustStatus(e.do("GET", base+"/archive?path=/tmp/up", reader, nil), 200)
}

// TestArchiveUploadLimit: an archive over the upload limit is refused, sized or chunked.
func TestArchiveUploadLimit(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxUploadBytes = 4096 })
	sb := e.create(e.admin, map[string]any{"template": "base"})
	p := "/v1/sandboxes/" + sb.ID + "/files/archive?path=/tmp/big"
	big := tarBytes(t, "f", strings.Repeat("a", 8192))
	for _, body := range []any{big, io.MultiReader(bytes.NewReader(big[:100]), bytes.NewReader(big[100:]))} {
		e.wantErr(e.do("PUT", p, e.admin, body), 413, "payload_too_large", "")
	}
	e.mustStatus(e.do("PUT", p, e.admin, tarBytes(t, "f", "small")), 200)
}
