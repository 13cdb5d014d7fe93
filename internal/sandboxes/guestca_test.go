package sandboxes

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/store"
)

// TestWithCABlock: the system bundle keeps its own certificates and gets one marked block of the
// operator's, at its end; the same set again changes nothing; another set replaces the block
// wherever it was; a block cut short (no end marker) goes.
func TestWithCABlock(t *testing.T) {
	one, two := "CA ONE\n", "CA TWO\nCA THREE"
	block := func(pem string) string { return string(caBlock([]byte(pem))) }
	for _, c := range []struct {
		name, bundle, pem, want string
		changed                 bool
	}{
		{"empty", "", one, block(one), true},
		{"system bundle", "SYS 1\nSYS 2\n", one, "SYS 1\nSYS 2\n" + block(one), true},
		{"no final newline", "SYS 1", one, "SYS 1\n" + block(one), true},
		{"same set", "SYS 1\n" + block(one), one, "SYS 1\n" + block(one), false},
		{"same set, blank line after", "SYS 1\n" + block(one) + "\n", one, "SYS 1\n" + block(one) + "\n", false},
		{"another set", "SYS 1\n" + block(one), two, "SYS 1\n" + block(two), true},
		{"block not last", "SYS 1\n" + block(one) + "USER CA\n", one, "SYS 1\nUSER CA\n" + block(one), true},
		{"cut block", "SYS 1\n" + guestCABegin + "CA ON", one, "SYS 1\n" + block(one), true},
		{"marker text inside a line", "SYS 1 " + guestCABegin, one, "SYS 1 " + guestCABegin + block(one), true},
	} {
		got, changed := withCABlock([]byte(c.bundle), []byte(c.pem))
		if string(got) != c.want || changed != c.changed {
			t.Errorf("%s: got %q (changed %v), want %q (%v)", c.name, got, changed, c.want, c.changed)
		}
	}
	if block(two) != guestCABegin+"CA TWO\nCA THREE\n"+guestCAEnd {
		t.Errorf("block: %q", block(two))
	}
}

// TestGuestCAInstalled: over the fake host (files and exec of its own), a create from a template
// gets the certificates (file and bundle block, written as root) and the variables, under the
// create's own env; a service without them changes nothing.
func TestGuestCAInstalled(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pem := "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	printenv := func(sb store.Sandbox, name string) string {
		t.Helper()
		c, _ := e.svc.Target(ctx, sb)
		r, err := c.Exec(ctx, sb.ID, agentclient.ExecRequest{Cmd: "printenv " + name})
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(r.Stdout)
	}

	plain, err := e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base"})
	if err != nil {
		t.Fatal(err)
	}
	if got := readAsRoot(t, e, plain, GuestCAFile); !strings.Contains(got, "not_found") || printenv(plain, "NODE_EXTRA_CA_CERTS") != "" {
		t.Fatalf("without extra CAs: file %q", got)
	}

	e.svc.guestCA = []byte(pem)
	sb, err := e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base", Env: map[string]string{"PIP_CERT": "/mine.pem"}})
	if err != nil {
		t.Fatal(err)
	}
	if readAsRoot(t, e, sb, GuestCAFile) != pem || readAsRoot(t, e, sb, GuestCABundle) != string(caBlock([]byte(pem))) {
		t.Fatalf("installed: file %q, bundle %q", readAsRoot(t, e, sb, GuestCAFile), readAsRoot(t, e, sb, GuestCABundle))
	}
	for name, want := range map[string]string{"NODE_EXTRA_CA_CERTS": GuestCAFile, "REQUESTS_CA_BUNDLE": GuestCABundle,
		"SSL_CERT_FILE": GuestCABundle, "PIP_CERT": "/mine.pem"} {
		if got := printenv(sb, name); got != want {
			t.Errorf("%s=%q, want %q", name, got, want)
		}
	}
}

// TestGuestCARestores: restores of one snapshot whose system bundle lacks the block get it (the
// first reads the bundle, later ones use what it found: the same result), and restores of a
// snapshot that has it keep it as it was.
func TestGuestCARestores(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pem := "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	src, err := e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base"})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := e.svc.Target(ctx, src)
	if _, err := c.FilesAs("root").Write(ctx, src.ID, GuestCABundle, strings.NewReader("SYSTEM CA\n"), 10); err != nil {
		t.Fatal(err)
	}
	snap, err := e.svc.Snapshot(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	e.svc.guestCA = []byte(pem)
	restore := func(snap store.Snapshot) store.Sandbox {
		t.Helper()
		sb, err := e.svc.Create(ctx, e.team, CreateParams{Template: snap.Template, AgentTemplate: snap.Template, Snapshot: &snap})
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	want := "SYSTEM CA\n" + string(caBlock([]byte(pem)))
	first := restore(snap)
	for i, sb := range []store.Sandbox{first, restore(snap), restore(snap)} {
		if got := readAsRoot(t, e, sb, GuestCABundle); got != want || readAsRoot(t, e, sb, GuestCAFile) != pem {
			t.Fatalf("restore %d: bundle %q, file %q", i, got, readAsRoot(t, e, sb, GuestCAFile))
		}
	}
	with, err := e.svc.Snapshot(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if got := readAsRoot(t, e, restore(with), GuestCABundle); got != want {
			t.Fatalf("restore %d of a snapshot with the block: %q", i, got)
		}
	}
}

// readAsRoot is a file of sb's guest as root reads it ("error: …" if it cannot be read).
func readAsRoot(t *testing.T, e *env, sb store.Sandbox, path string) string {
	t.Helper()
	ctx := context.Background()
	c, err := e.svc.Target(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.FilesAs("root").Read(ctx, sb.ID, path)
	if err != nil {
		return "error: " + err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
