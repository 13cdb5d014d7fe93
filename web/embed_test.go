package web

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
)

func get(t *testing.T, h http.Handler, path string, hdr ...string) *http.Response {
	t.Helper()
	r := httptest.NewRequest("GET", path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

func body(t *testing.T, res *http.Response) string {
	t.Helper()
	var rd io.Reader = res.Body
	if res.Header.Get("Content-Encoding") == "gzip" {
		z, err := gzip.NewReader(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		rd = z
	}
	b, err := io.ReadAll(rd)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestHandler: files, the index.html fallback for the app's routes, gzipped assets, and the
// security headers on every answer; the placeholder when the console is not built.
func TestHandler(t *testing.T) {
	js := strings.Repeat("console.log('panda');\n", 200)
	h := handler(fstest.MapFS{
		"index.html":       {Data: []byte(`<!doctype html><script type="module" src="/assets/app.js"></script>`)},
		"assets/app.js":    {Data: []byte(js)},
		"assets/style.css": {Data: []byte("body{}")},
	})
	for _, c := range []struct{ path, want, ctype, cache string }{
		{"/", "assets/app.js", "text/html", "no-cache"},
		{"/sandboxes/sb_x/terminal", "assets/app.js", "text/html", "no-cache"},
		{"/favicon.ico", "assets/app.js", "text/html", "no-cache"},
		{"/assets/app.js", js, "text/javascript", "immutable"},
		{"/assets/style.css", "body{}", "text/css", "immutable"},
	} {
		for _, enc := range []string{"", "gzip, br"} {
			res := get(t, h, c.path, "Accept-Encoding", enc)
			b := body(t, res)
			hd := res.Header
			if res.StatusCode != 200 || !strings.Contains(b, c.want) || !strings.HasPrefix(hd.Get("Content-Type"), c.ctype) ||
				!strings.Contains(hd.Get("Cache-Control"), c.cache) || hd.Get("Content-Security-Policy") != CSP ||
				hd.Get("X-Content-Type-Options") != "nosniff" || hd.Get("X-Frame-Options") != "DENY" {
				t.Fatalf("GET %s (%q): %d %v %.80q", c.path, enc, res.StatusCode, hd, b)
			}
			if gz := hd.Get("Content-Encoding") == "gzip"; gz != (enc != "" && strings.HasPrefix(c.path, "/assets/")) {
				t.Fatalf("GET %s (%q): Content-Encoding %q", c.path, enc, hd.Get("Content-Encoding"))
			}
		}
	}
	if !strings.Contains(CSP, "script-src 'self';") || !strings.Contains(CSP, "frame-ancestors 'none'") || strings.Contains(CSP, "unsafe-eval") {
		t.Fatalf("CSP %q", CSP)
	}

	res := get(t, handler(nil), "/anything")
	if b := body(t, res); res.StatusCode != 200 || !strings.Contains(b, "console not built") || res.Header.Get("Content-Security-Policy") != CSP {
		t.Fatalf("placeholder: %d %q", res.StatusCode, b)
	}
}
