// Package web is the web console: the single-page app of web/src (strict TypeScript, Preact),
// built by `make build` (npm ci, vite build) into web/dist/console and embedded into the binary
// here. Handler serves it with a strict Content-Security-Policy; before a build (a clean clone's
// `go build`/`go test`), it serves a page saying how to build it.
package web

import (
	"bytes"
	"compress/gzip"
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"
)

//go:embed all:dist
var dist embed.FS

// CSP is the console's Content-Security-Policy: scripts only from the binary (no inline
// scripts, no eval), calls only to this origin, never framed. Inline styles are allowed: the
// terminal (xterm.js) sets its theme through a <style> element.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// placeholder is served when the console was not built into this binary.
const placeholder = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>PandaStack</title></head>
<body><h1>PandaStack</h1><p>console not built — run <code>make build</code> (it runs npm ci and the
web build, then embeds web/dist/console into the binary). The API is at <code>/v1</code>.</p></body></html>
`

// Built reports whether the console is embedded (web/dist/console/index.html was there at build time).
func Built() bool {
	_, err := fs.Stat(dist, "dist/console/index.html")
	return err == nil
}

// Handler serves the embedded console (or, not built, the placeholder page).
func Handler() http.Handler {
	root, _ := fs.Sub(dist, "dist/console")
	if !Built() {
		root = nil
	}
	return handler(root)
}

// handler serves root's files, index.html for any other path (the app routes in the browser);
// nil root: the placeholder. Hashed assets (assets/) are cached for a year and sent gzipped to
// clients that take it (compressed once, on first use); everything else is revalidated.
func handler(root fs.FS) http.Handler {
	var gz sync.Map // asset path → []byte
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		if root == nil {
			h.Set("Content-Type", "text/html; charset=utf-8")
			w.Write([]byte(placeholder))
			return
		}
		p := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
		st, err := fs.Stat(root, p)
		if p == "" || p == "index.html" || err != nil || st.IsDir() {
			http.ServeFileFS(w, r, root, "index.html")
			return
		}
		if !strings.HasPrefix(p, "assets/") {
			http.ServeFileFS(w, r, root, p)
			return
		}
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
		h.Add("Vary", "Accept-Encoding")
		b, err := fs.ReadFile(root, p)
		if err != nil {
			http.Error(w, "unreadable asset", http.StatusInternalServerError)
			return
		}
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			z, ok := gz.Load(p)
			if !ok {
				var buf bytes.Buffer
				zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
				zw.Write(b)
				zw.Close()
				z, _ = gz.LoadOrStore(p, buf.Bytes())
			}
			// The type is the file's, not the compressed bytes' (ServeContent would sniff them).
			if ct := mimeOf(p); ct != "" {
				h.Set("Content-Type", ct)
			}
			h.Set("Content-Encoding", "gzip")
			b = z.([]byte)
		}
		http.ServeContent(w, r, p, time.Time{}, bytes.NewReader(b))
	})
}

func mimeOf(p string) string {
	switch path.Ext(p) {
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	}
	return ""
}
