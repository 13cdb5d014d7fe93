package client

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDownloadDirConfined: what a sandbox sends is not trusted — an entry with "..", or one
// written through a symlink the archive made, never lands outside the local directory.
func TestDownloadDirConfined(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	os.Mkdir(outside, 0o755)
	for _, tc := range []struct {
		what string
		hdrs []*tar.Header
	}{
		{"dot-dot", []*tar.Header{{Name: "../outside/x", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}}},
		{"absolute", []*tar.Header{{Name: outside + "/x", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}}},
		{"through a symlink", []*tar.Header{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outside},
			{Name: "l/x", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}}},
	} {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		tw := tar.NewWriter(zw)
		for _, h := range tc.hdrs {
			tw.WriteHeader(h)
			if h.Typeflag == tar.TypeReg {
				tw.Write([]byte("x"))
			}
		}
		tw.Close()
		zw.Close()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(b.Bytes()) }))
		c := New(srv.URL, "key")
		_, err := c.DownloadDir(t.Context(), "sb_x", "/d", filepath.Join(base, "local-"+strings.ReplaceAll(tc.what, " ", "-")))
		srv.Close()
		if err == nil {
			t.Errorf("%s: no error", tc.what)
		}
		if entries, _ := os.ReadDir(outside); len(entries) != 0 {
			t.Fatalf("%s: wrote outside: %v", tc.what, entries)
		}
	}
}
