package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/client"
	"github.com/pandastack/pandastack/internal/hostagent"
	"github.com/pandastack/pandastack/internal/network"
	"github.com/pandastack/pandastack/internal/network/nettest"
	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/pandastack/pandastack/internal/testenv"
)

// TestE2EEgressContainment: a team's egress allow list never opens what must stay shut — the
// host's addresses, another team's sandbox on the same host, the slot range, loopback,
// link-local/metadata, multicast, broadcast, private ranges — in any notation; only the
// operator (--egress-open) opens a private range, and GET /v1/info says so.
func TestE2EEgressContainment(t *testing.T) {
	testenv.NeedVMs(t)
	nettest.NeedRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	prefix := nettest.NewPrefix()
	out := nettest.NewOutside(t, prefix)
	opened, shut := out.AddPrivate(t), out.AddPrivate(t) // a private service the operator opens, one it does not
	slots := nettest.FreeCIDR(t, 22)
	host := startVMHostWith(t, func(c *hostagent.Config) {
		c.Network = &network.Config{CIDR: slots, Prefix: prefix, Ready: 2, DNS: out.Addr}
	})
	openRange := netip.PrefixFrom(opened, 24).Masked()
	cp := startCP(t, filepath.Join(t.TempDir(), "state.db"), scheduler.Config{},
		Config{EgressOpen: []netip.Prefix{openRange}}, host)
	a := cp.client(cp.admin)
	_, kb, err := a.CreateTeam(ctx, "egress-beta")
	if err != nil {
		t.Fatal(err)
	}
	b := cp.client(kb.Key)

	// The deployment's rules, as any team sees them.
	var info InfoView
	if err := getJSON(ctx, b, "/v1/info", &info); err != nil {
		t.Fatal(err)
	}
	if len(info.Egress.Open) != 1 || info.Egress.Open[0] != openRange.String() || len(info.Egress.Blocked) == 0 || len(info.Egress.Private) == 0 {
		t.Errorf("GET /v1/info egress: %+v", info.Egress)
	}

	// Team A's sandbox serves on port 8000; a host service listens on A's host end.
	sa, err := a.CreateSandbox(ctx, client.CreateRequest{Template: "base", TTLSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Exec(ctx, sa.ID, client.ExecRequest{Cmd: "cd /tmp && echo team-a-secret > index.html && (nohup python3 -m http.server 8000 >/dev/null 2>&1 &); sleep 1"}); err != nil {
		t.Fatal(err)
	}
	aAddr := guestAddrOf(t, host, sa.ID)
	aHostEnd := aAddr.Prev()
	hostLn, err := net.Listen("tcp4", aHostEnd.String()+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostLn.Close()
	go http.Serve(hostLn, nettest.WhoHandler("host"))
	hostPort := hostLn.Addr().(*net.TCPAddr).Port

	// Every notation that names a blocked destination is refused, with the range named.
	internetOff := false
	for _, allow := range []string{
		slots.String(), aAddr.String(), aHostEnd.String() + "/32", "10.0.0.0/8", "192.168.0.1", "172.16.0.0/12", "100.64.0.0/10",
		shut.String(), "169.254.169.254", "169.254.0.0/16", "::ffff:169.254.169.254", "::ffff:a9fe:a9fe", "127.0.0.1",
		"::ffff:127.0.0.1", "0.0.0.0/32", "224.0.0.251", "239.255.255.250/32", "255.255.255.255", "::1", "::/0", "fe80::1",
		"fd00::/8", "localhost", "metadata.google.internal", "2130706433", "0x7f000001", "127.1",
	} {
		_, err := b.CreateSandbox(ctx, client.CreateRequest{Template: "base", TTLSeconds: 60,
			Egress: &network.Egress{Internet: &internetOff, Allow: []string{allow}}})
		if apiCode(err) != "400 invalid_request" {
			t.Errorf("allow %q: %v, want 400 invalid_request", allow, err)
		}
	}

	// Supersets are taken but open only what is not blocked: team B allows everything.
	sb, err := b.CreateSandbox(ctx, client.CreateRequest{Template: "base", TTLSeconds: 600,
		Egress: &network.Egress{Internet: &internetOff, Allow: []string{"0.0.0.0/0", "::ffff:0.0.0.0/96"}}})
	if err != nil {
		t.Fatal(err)
	}
	fetch := func(addr string) (string, bool) {
		t.Helper()
		r, err := b.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "curl -sS --connect-timeout 3 -m 5 http://" + addr + "/", TimeoutSeconds: client.Seconds(30)})
		if err != nil {
			t.Fatalf("exec: %v", err)
		}
		return r.Stdout, r.ExitCode == 0
	}
	if got, ok := fetch(out.Addr.String() + ":8080"); !ok || !strings.HasPrefix(got, "outside") {
		t.Errorf("team B -> outside: %q %v, want reached", got, ok)
	}
	if got, ok := fetch(opened.String() + ":8080"); !ok || !strings.HasPrefix(got, "outside") {
		t.Errorf("team B -> operator-opened private range: %q %v, want reached", got, ok)
	}
	for what, addr := range map[string]string{
		"team A's sandbox":       aAddr.String() + ":8000",
		"team A's host end":      fmt.Sprintf("%s:%d", aHostEnd, hostPort),
		"a host address":         fmt.Sprintf("%s:%d", out.HostAddr, hostPort),
		"its own gateway":        fmt.Sprintf("10.0.2.1:%d", hostPort),
		"an unopened private IP": shut.String() + ":8080",
	} {
		if got, ok := fetch(addr); ok {
			t.Errorf("team B -> %s (%s): reached (%q), want blocked", what, addr, got)
		}
	}
}

// guestAddrOf is where the host reaches sandbox id's guest ports (its slot's .2), from the
// agent's record.
func guestAddrOf(t *testing.T, h *vmHost, id string) netip.Addr {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(h.dir, "*", "sandboxes", id, "sandbox.json"))
	more, _ := filepath.Glob(filepath.Join(h.dir, "sandboxes", id, "sandbox.json"))
	for _, f := range append(files, more...) {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var rec struct {
			GuestAddr string `json:"guest_addr"`
		}
		if json.Unmarshal(data, &rec) == nil {
			if a, err := netip.ParseAddr(rec.GuestAddr); err == nil {
				return a
			}
		}
	}
	t.Fatalf("no guest address recorded for %s under %s", id, h.dir)
	return netip.Addr{}
}

// getJSON decodes a GET answer into the API's own view type (so the test checks the server's
// shape, not the client's copy of it).
func getJSON(ctx context.Context, c *client.Client, path string, out any) error {
	resp, err := c.Do(ctx, "GET", path, nil, nil, -1, "", "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: status %d", path, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
