package sandboxes

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGuestCAScript runs the guest's install script with a POSIX shell on this machine, its
// paths in a temporary directory: the system bundle keeps its certificates and gains one marked
// block; the same set again changes nothing; another set replaces the block; a missing bundle
// is created.
func TestGuestCAScript(t *testing.T) {
	dir := t.TempDir()
	file, bundle := filepath.Join(dir, "local/extra.crt"), filepath.Join(dir, "certs/bundle.crt")
	os.MkdirAll(filepath.Dir(bundle), 0o755)
	os.WriteFile(bundle, []byte("SYSTEM CA 1\nSYSTEM CA 2\n"), 0o644)
	run := func(pem string) {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", guestCAScript(file, bundle))
		cmd.Stdin = strings.NewReader(pem)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("script: %v\n%s", err, out)
		}
	}
	read := func(p string) string { b, _ := os.ReadFile(p); return string(b) }
	block := func(pem string) string { return guestCABegin + "\n" + pem + guestCAEnd + "\n" }

	run("CA ONE\n")
	if got := read(bundle); got != "SYSTEM CA 1\nSYSTEM CA 2\n"+block("CA ONE\n") || read(file) != "CA ONE\n" {
		t.Fatalf("first install: bundle %q, file %q", got, read(file))
	}
	fi, _ := os.Stat(bundle)
	run("CA ONE\n") // a restore of a snapshot made with the same set: nothing is written
	if fi2, _ := os.Stat(bundle); !fi2.ModTime().Equal(fi.ModTime()) || read(bundle) != "SYSTEM CA 1\nSYSTEM CA 2\n"+block("CA ONE\n") {
		t.Fatalf("same set again: %q", read(bundle))
	}
	run("CA TWO\nCA THREE\n")
	if got := read(bundle); got != "SYSTEM CA 1\nSYSTEM CA 2\n"+block("CA TWO\nCA THREE\n") {
		t.Fatalf("another set: %q", got)
	}
	os.Remove(bundle)
	run("CA ONE\n")
	if got := read(bundle); got != block("CA ONE\n") {
		t.Fatalf("no bundle before: %q", got)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o644 {
		t.Fatalf("file mode %v", fi.Mode())
	}
}

// TestGuestCAInstallFails: when the certificates cannot be installed in a new sandbox from a
// template (the fake agent runs no shell), the create fails saying so, the VM is killed and
// nothing is recorded — no sandbox that silently lacks the operator's CA.
func TestGuestCAInstallFails(t *testing.T) {
	e := newEnv(t)
	e.svc.guestCA = []byte("-----BEGIN CERTIFICATE-----\n")
	_, err := e.svc.Create(context.Background(), e.team, CreateParams{Template: "base", AgentTemplate: "base"})
	if err == nil || !strings.Contains(err.Error(), "installing the extra CA certificates") {
		t.Fatalf("create: %v", err)
	}
	if creates, kills := e.a.Counts(); creates != 1 || kills != 1 || len(e.a.Running()) != 0 || e.count() != 0 {
		t.Fatalf("creates %d, kills %d, running %v, recorded %d", creates, kills, e.a.Running(), e.count())
	}
}
