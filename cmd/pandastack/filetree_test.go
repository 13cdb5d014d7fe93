package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/client"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// TestCLIDirCopy: upload-dir then download-dir brings a tree back (over the fake agent, which
// keeps directories and files).
func TestCLIDirCopy(t *testing.T) {
	useServer(t)
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

// TestWatchClient: the Go client follows GET …/files/watch (what `sandbox watch` prints): a file
// written after the ready line arrives as an event; a cancelled context ends it cleanly.
func TestWatchClient(t *testing.T) {
	url, key := startServer(t)
	c := client.New(url, key)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{Template: "base"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	err = c.WatchFiles(ctx, sb.ID, "/tmp", true, func(ev v1.WatchEvent) (bool, error) {
		got = append(got, ev.Type+" "+ev.Path)
		if ev.Type == "ready" {
			_, err := c.WriteFile(ctx, sb.ID, "/tmp/w.txt", strings.NewReader("x"), 1)
			return err != nil, err
		}
		return ev.Path == "/tmp/w.txt", nil
	})
	if err != nil || strings.Join(got, ",") != "ready /tmp,create /tmp/w.txt" {
		t.Fatalf("watch: %v, %v", got, err)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if err := c.WatchFiles(cctx, sb.ID, "/tmp", false, func(v1.WatchEvent) (bool, error) { return false, nil }); err != nil {
		t.Fatalf("a cancelled watch: %v", err)
	}
}
