// Package web is the web console: the single-page app of web/src (strict TypeScript, Preact),
// built by `make build` (npm ci, vite build) into web/dist/console and embedded into the binary
// here. Handler serves it with a strict Content-Security-Policy; before a build (a clean clone's
// `go build`/`go test`), it serves a page saying how to build it.
package web

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
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

// Handler serves the console: its files, index.html for any other path (the app routes in the
// browser). Hashed assets are cached for a year, everything else revalidated.
func Handler() http.Handler {
	root, _ := fs.Sub(dist, "dist/console")
	built := Built()
	files := http.FileServerFS(root)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		if !built {
			h.Set("Content-Type", "text/html; charset=utf-8")
			h.Set("Cache-Control", "no-cache")
			w.WriteHeader(http.StatusOK)
			w.Write([]byte(placeholder))
			return
		}
		p := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
		if st, err := fs.Stat(root, p); p != "" && err == nil && !st.IsDir() && p != "index.html" {
			if strings.HasPrefix(p, "assets/") {
				h.Set("Cache-Control", "public, max-age=31536000, immutable")
			} else {
				h.Set("Cache-Control", "no-cache")
			}
			files.ServeHTTP(w, r)
			return
		}
		h.Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, root, "index.html")
	})
}
