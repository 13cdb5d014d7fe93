package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIDirCopy: upload-dir then download-dir brings a tree back (over the fake agent, which
// keeps directories and files).
func TestCLIDirCopy(t *testing.T) {
	url, key := startServer(t)
	t.Setenv("PANDASTACK_BASE_URL", url)
	t.Setenv("PANDASTACK_API_KEY", key)
	id := strings.TrimSpace(mustRun(t, "", "sandbox", "create", "--template", "base", "-q"))
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "sub", "deeper"), 0o755)
	os.WriteFile(filepath.Join(src, "a.txt"), []byte("alpha"), 0o644)
	os.WriteFile(filepath.Join(src, "sub", "deeper", "b.txt"), []byte("beta"), 0o644)
	if out := mustRun(t, "", "sandbox", "files", "upload-dir", id, src, "/tmp/tree"); !strings.Contains(out, "unpacked 4 entries (9 bytes)") {
		t.Fatalf("upload-dir: %q", out)
	}
	dst := filepath.Join(t.TempDir(), "new")
	if out := mustRun(t, "", "sandbox", "files", "download-dir", id, "/tmp/tree", dst); !strings.Contains(out, "copied 4 entries") {
		t.Fatalf("download-dir: %q", out)
	}
	for name, want := range map[string]string{"a.txt": "alpha", "sub/deeper/b.txt": "beta"} {
		if b, err := os.ReadFile(filepath.Join(dst, name)); err != nil || string(b) != want {
			t.Errorf("%s: %q %v", name, b, err)
		}
	}
	if _, _, err := run(t, "", "sandbox", "files", "upload-dir", id, filepath.Join(src, "a.txt"), "/tmp/x"); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("upload-dir of a file: %v", err)
	}
}
