package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/client"
	"github.com/pandastack/pandastack/internal/network/nettest"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/testenv"
)

// TestE2EGuestCA: the operator's --guest-ca-file reaches every sandbox, not only app builds. A
// TLS server in the test's own outside namespace has a certificate from a CA the test made;
// curl, Python and Node.js in a sandbox of the server with the flag trust it — and so do its
// fork and a restore of its snapshot — while a sandbox created without the flag (a sandbox
// service over the same store and host, GuestCA unset) refuses it.
func TestE2EGuestCA(t *testing.T) {
	testenv.NeedVMs(t)
	nettest.NeedRoot(t)
	t.Parallel()
	ctx := context.Background()
	caPEM, issue := testCAIssuing(t)
	_, cp, out := startNetworkedCPOut(t, Config{GuestCA: caPEM})
	cert := issue(net.IP(out.Addr.AsSlice()))
	var ln net.Listener
	if err := nettest.RunIn(out.Handle, func() (err error) { ln, err = net.Listen("tcp4", "0.0.0.0:8443"); return }); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "trusted registry")
	})}
	go srv.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}}))
	t.Cleanup(func() { srv.Close() })
	url := fmt.Sprintf("https://%s:8443/", out.Addr)

	c := cp.client(cp.admin)
	with, err := c.CreateSandbox(ctx, client.CreateRequest{Template: "base", TTLSeconds: 900}) // the host bakes base first
	if err != nil {
		t.Fatal(err)
	}
	rec, err := cp.st.GetSandbox(ctx, with.ID)
	if err != nil {
		t.Fatal(err)
	}
	plain := sandboxes.New(sandboxes.Config{Store: cp.st, Scheduler: cp.sched, Logger: quietLogger(), DefaultTTL: time.Minute, MaxTTL: time.Hour})
	// What the install costs (logged, not asserted): creates with and without it, in turns, then
	// the calls it makes (a read of the bundle, a write of it) on a fresh sandbox without it.
	var without store.Sandbox
	var withMS, withoutMS []int64
	var plainIDs []string
	for range 3 {
		start := time.Now()
		if without, err = plain.Create(ctx, rec.TeamID, sandboxes.CreateParams{Template: "base", AgentTemplate: "base", TTLSeconds: 900}); err != nil {
			t.Fatal(err)
		}
		withoutMS, plainIDs = append(withoutMS, time.Since(start).Milliseconds()), append(plainIDs, without.ID)
		start = time.Now()
		again, err := c.CreateSandbox(ctx, client.CreateRequest{Template: "base", TTLSeconds: 60})
		if err != nil {
			t.Fatal(err)
		}
		withMS = append(withMS, time.Since(start).Milliseconds())
		c.KillSandbox(ctx, again.ID)
	}
	start := time.Now()
	body, size, err := c.ReadFile(ctx, without.ID, sandboxes.GuestCABundle)
	if err != nil {
		t.Fatal(err)
	}
	bundle, _ := io.ReadAll(body)
	body.Close()
	readMS := time.Since(start).Milliseconds()
	start = time.Now()
	if _, err := c.WriteFile(ctx, without.ID, "/tmp/bundle-copy", bytes.NewReader(bundle), size); err != nil {
		t.Fatal(err)
	}
	t.Logf("create from base (baked), ms, in turns: with the CA installed %v, without %v; on a fresh sandbox a read of the %d-byte bundle %d ms, a write of it %d ms (load-dependent)",
		withMS, withoutMS, size, readMS, time.Since(start).Milliseconds())

	checks := map[string]string{
		"curl":   "curl -sS --max-time 60 " + url,
		"python": fmt.Sprintf(`python3 -c 'import urllib.request; print(urllib.request.urlopen("%s", timeout=60).read().decode())'`, url),
		"node": fmt.Sprintf(`node -e 'require("https").get("%s", r => r.on("data", d => process.stdout.write(d))).on("error", e => { console.error(e.code); process.exit(1) })'`,
			url),
		"env": `echo "$NODE_EXTRA_CA_CERTS $REQUESTS_CA_BUNDLE"`,
	}
	run := func(id, tool string) (string, bool) {
		t.Helper()
		r, err := c.Exec(ctx, id, client.ExecRequest{Cmd: checks[tool], TimeoutSeconds: client.Seconds(120)})
		if err != nil {
			t.Fatalf("%s in %s: %v", tool, id, err)
		}
		return r.Stdout + r.Stderr, r.ExitCode == 0
	}
	trusts := func(what, id string) {
		t.Helper()
		for _, tool := range []string{"curl", "python", "node"} {
			if got, ok := run(id, tool); !ok || !strings.Contains(got, "trusted registry") {
				t.Errorf("%s: %s does not trust the operator's CA: %q", what, tool, got)
			}
		}
		if got, _ := run(id, "env"); strings.TrimSpace(got) != sandboxes.GuestCAFile+" "+sandboxes.GuestCABundle {
			t.Errorf("%s: env %q", what, got)
		}
	}
	trusts("a sandbox of the server with --guest-ca-file", with.ID)
	for _, tool := range []string{"curl", "python", "node"} {
		if got, ok := run(without.ID, tool); ok || strings.Contains(got, "trusted registry") {
			t.Errorf("without the flag, %s trusted the test's CA: %q", tool, got)
		}
	}

	// A fork has its parent's disk and env; a restore of a snapshot reinstalls nothing new (the
	// certificates are there) and still trusts.
	kids, err := c.Fork(ctx, with.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	trusts("a fork", kids[0].ID)
	snap, err := c.CreateSnapshot(ctx, with.ID)
	if err != nil {
		t.Fatal(err)
	}
	restored, err := c.CreateSandbox(ctx, client.CreateRequest{SnapshotID: snap.ID, TTLSeconds: 900})
	if err != nil {
		t.Fatal(err)
	}
	trusts("a restore of its snapshot", restored.ID)
	if r, err := c.Exec(ctx, restored.ID, client.ExecRequest{Cmd: "grep -c 'pandastack extra CA certificates: begin' " + sandboxes.GuestCABundle}); err != nil ||
		strings.TrimSpace(r.Stdout) != "1" {
		t.Errorf("the bundle's CA block after a restore: %q %v", r.Stdout, err)
	}
	for _, id := range append(plainIDs, with.ID, kids[0].ID, restored.ID) {
		c.KillSandbox(ctx, id)
	}
}
