package hostagent

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/host/sandbox"
	"github.com/pandastack/pandastack/internal/network"
	"github.com/pandastack/pandastack/internal/network/nettest"
	"github.com/pandastack/pandastack/internal/testenv"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// newNetHarness is a harness (tuned by tune, if set) whose sandboxes have NICs in network slots
// of a fresh prefix, with an outside namespace to reach (nettest.Outside); no slot may be left
// at the end.
func newNetHarness(t *testing.T, tune func(*Config)) (*harness, *nettest.Outside) {
	testenv.NeedVMs(t)
	nettest.NeedRoot(t)
	prefix := nettest.NewPrefix()
	out := nettest.NewOutside(t, prefix)
	cidr := nettest.FreeCIDR(t, 22)
	t.Cleanup(func() { expectNoSlotsLeft(t, prefix) }) // runs after the harness's clean-up
	h := newHarness(t, func(c *Config) {
		c.Network = &network.Config{CIDR: cidr, Prefix: prefix, Ready: 2, DNS: out.Addr}
		if tune != nil {
			tune(c)
		}
	})
	return h, out
}

// TestNetworking runs real microVMs with NICs in network slots. Its "internet" is a namespace the
// test made (nettest.Outside); nothing leaves the host.
func TestNetworking(t *testing.T) {
	h, out := newNetHarness(t, nil)

	create := func(egress map[string]any) hostapi.Sandbox {
		t.Helper()
		body := map[string]any{"template": "base"}
		if egress != nil {
			body["egress"] = egress
		}
		var sb hostapi.Sandbox
		if code := h.call("POST", "/v1/sandboxes", body, &sb); code != 201 {
			t.Fatalf("create with egress %v: status %d", egress, code)
		}
		return sb
	}
	// fetch runs curl in the guest; ok is whether it got an answer.
	fetch := func(id, addr string) (string, bool) {
		t.Helper()
		r := h.exec(id, map[string]any{"cmd": "curl -sS --connect-timeout 3 -m 5 http://" + addr + "/"})
		return r.Stdout, r.ExitCode == 0
	}
	mustReach := func(id, addr, want string) {
		t.Helper()
		if got, ok := fetch(id, addr); !ok || !strings.HasPrefix(got, want) {
			t.Errorf("%s -> %s: got %q (ok %v), want %q", id, addr, got, ok, want)
		}
	}
	mustNotReach := func(id, addr string) {
		t.Helper()
		if got, ok := fetch(id, addr); ok {
			t.Errorf("%s -> %s: reached it (%q), want it blocked", id, addr, got)
		}
	}
	outAddr := out.Addr.String() + ":8080"
	otherAddr := out.Other.String() + ":8080"

	open := create(nil) // default egress: internet on
	closed := create(map[string]any{"internet": false, "allow": []string{out.Other.String() + "/32"}})
	denied := create(map[string]any{"deny": []string{out.Addr.String()}})

	// Egress policy.
	mustReach(open.ID, outAddr, "outside ")
	mustReach(open.ID, otherAddr, "outside ")
	mustNotReach(closed.ID, outAddr)
	mustReach(closed.ID, otherAddr, "outside ")
	mustNotReach(denied.ID, outAddr)
	mustReach(denied.ID, otherAddr, "outside ")

	// Isolation: no sandbox reaches another, nor the host's own addresses (a host service
	// listening on every interface stands in for the host agent).
	h.exec(closed.ID, map[string]any{"cmd": "cd /tmp && echo served-by-closed > index.html && (nohup python3 -m http.server 8000 >/dev/null 2>&1 &); sleep 1"})
	hostLn, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostLn.Close()
	go http.Serve(hostLn, nettest.WhoHandler("host"))
	hostPort := hostLn.Addr().(*net.TCPAddr).Port
	slotOf := func(id string) *network.Slot {
		_, slot, _ := h.agent.sandboxes.Running(id)
		return slot
	}
	mustNotReach(open.ID, slotOf(closed.ID).SandboxAddr.String()+":8000")
	mustNotReach(open.ID, fmt.Sprintf("%s:%d", slotOf(open.ID).HostAddr, hostPort))
	mustNotReach(open.ID, fmt.Sprintf("%s:%d", out.HostAddr, hostPort))
	mustNotReach(open.ID, fmt.Sprintf("10.0.2.1:%d", hostPort))

	// Exposed ports through the agent's proxy (the control plane's proxy forwards here).
	var page []byte
	if code := h.call("GET", "/v1/sandboxes/"+closed.ID+"/ports/8000/index.html", nil, &page); code != 200 || string(page) != "served-by-closed\n" {
		t.Fatalf("proxy GET: status %d %q", code, page)
	}
	var e apiErr
	if code := h.call("GET", "/v1/sandboxes/"+closed.ID+"/ports/8001/", nil, &e); code != 502 || !strings.Contains(e.Error.Message, "nothing listens on port 8001") {
		t.Errorf("proxy to a closed port: %d %+v", code, e)
	}
	if code := h.call("GET", "/v1/sandboxes/"+closed.ID+"/ports/70000/", nil, &e); code != 400 {
		t.Errorf("proxy to port 70000: %d %+v", code, e)
	}
	script, err := os.ReadFile("testdata/ws_echo.py")
	if err != nil {
		t.Fatal(err)
	}
	if code := h.call("PUT", "/v1/sandboxes/"+open.ID+"/files?path=/tmp/ws_echo.py", script, nil); code != 200 && code != 204 {
		t.Fatalf("upload ws server: %d", code)
	}
	h.exec(open.ID, map[string]any{"cmd": "(nohup python3 /tmp/ws_echo.py >/tmp/ws.log 2>&1 &); for i in $(seq 50); do ss -ltn | grep -q :9000 && break; sleep 0.1; done"})
	for _, msg := range []string{"hello over a websocket", strings.Repeat("x", 300)} {
		if got := wsEcho(t, h.srv.URL, "/v1/sandboxes/"+open.ID+"/ports/9000/ws", msg); got != msg {
			t.Errorf("websocket echo: got %q, want %q", got, msg)
		}
	}

	// A hibernated sandbox is woken by a proxied request, its server still there, its network
	// policy still applied.
	var info hostapi.Sandbox
	if code := h.call("POST", "/v1/sandboxes/"+closed.ID+"/hibernate", nil, &info); code != 200 || info.State != sandbox.StateHibernated {
		t.Fatalf("hibernate: %d %+v", code, info)
	}
	if code := h.call("GET", "/v1/sandboxes/"+closed.ID+"/ports/8000/index.html", nil, &page); code != 200 || string(page) != "served-by-closed\n" {
		t.Fatalf("proxy GET after hibernate: status %d %q", code, page)
	}
	mustNotReach(closed.ID, outAddr)
	mustReach(closed.ID, otherAddr, "outside ")

	// Bad egress input.
	for _, bad := range []any{
		map[string]any{"allow": []string{"not-a-cidr"}},
		map[string]any{"deny": []string{"2001:db8::/32"}},
		map[string]any{"internet": "yes"},
		map[string]any{"internet": true, "bogus": 1},
		// The host's own slot range (the agent knows it; it need not be a private range) and
		// the fixed blocked ranges.
		map[string]any{"allow": []string{h.agent.net.CIDR().String()}},
		map[string]any{"allow": []string{slotOf(open.ID).HostAddr.String()}},
		map[string]any{"allow": []string{"169.254.169.254"}},
		map[string]any{"allow": []string{"::ffff:127.0.0.1"}},
	} {
		var e apiErr
		if code := h.call("POST", "/v1/sandboxes", map[string]any{"template": "base", "egress": bad}, &e); code != 400 || e.Error.Message == "" {
			t.Errorf("egress %v: status %d %+v, want 400", bad, code, e)
		}
	}

	// The control plane's operator ranges cannot overlap a blocked range either.
	if code := h.call("POST", "/v1/sandboxes", map[string]any{"template": "base", "egress_open": []string{"169.254.0.0/16"}}, &e); code != 400 {
		t.Errorf("egress_open over link-local: status %d %+v, want 400", code, e)
	}

	// Kill frees the slots; the harness's clean-up and expectNoSlotsLeft check nothing stays.
	for _, id := range []string{open.ID, closed.ID, denied.ID} {
		if code := h.call("DELETE", "/v1/sandboxes/"+id, nil, nil); code != 204 && code != 200 {
			t.Errorf("kill %s: %d", id, code)
		}
	}
}

// expectNoSlotsLeft waits for the released slots' background clean-up, then checks that no
// namespace or link of the pool is left (the test's own outside world aside).
func expectNoSlotsLeft(t *testing.T, prefix string) {
	var left []string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		left = nil
		for _, l := range strings.Split(nettest.Output("ip", "-o", "netns", "list"), "\n") {
			if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") && f[0] != prefix+"-outside-0" {
				left = append(left, "netns "+f[0])
			}
		}
		for _, l := range strings.Split(nettest.Output("ip", "-o", "link", "show"), "\n") {
			if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], prefix+"-h") {
				left = append(left, "link "+f[1])
			}
		}
		if len(left) == 0 {
			return
		}
	}
	t.Errorf("network slots left behind: %v", left)
}

// wsEcho opens a WebSocket at base+path (through the agent's proxy), sends msg as one masked text
// frame and returns the text frame that comes back.
func wsEcho(t *testing.T, base, path, msg string) string {
	t.Helper()
	u, _ := url.Parse(base)
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer test-token\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", path, u.Host)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("websocket handshake: %v", err)
	}
	// The accept value for the RFC 6455 sample key.
	if resp.StatusCode != 101 || resp.Header.Get("Sec-WebSocket-Accept") != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("websocket handshake: %s %v %s", resp.Status, resp.Header, body)
	}
	var mask [4]byte
	rand.Read(mask[:])
	frame := []byte{0x81}
	if len(msg) < 126 {
		frame = append(frame, 0x80|byte(len(msg)))
	} else {
		frame = append(frame, 0x80|126, byte(len(msg)>>8), byte(len(msg)))
	}
	frame = append(frame, mask[:]...)
	for i := range len(msg) {
		frame = append(frame, msg[i]^mask[i%4])
	}
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		t.Fatalf("websocket read: %v", err)
	}
	n := int(hdr[1] & 127)
	if n == 126 {
		var ext [2]byte
		io.ReadFull(br, ext[:])
		n = int(binary.BigEndian.Uint16(ext[:]))
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(br, data); err != nil {
		t.Fatalf("websocket read: %v", err)
	}
	return string(data)
}

// TestNetworkChurn creates and kills 200 networked sandboxes (a few at a time) and checks that no
// namespace, veth, tap or nftables table of the pool is left once the agent is closed.
func TestNetworkChurn(t *testing.T) {
	testenv.NeedVMs(t)
	nettest.NeedRoot(t)
	prefix := nettest.NewPrefix()
	cidr := nettest.FreeCIDR(t, 22)
	t.Cleanup(func() {
		expectNoSlotsLeft(t, prefix)
		if tables := nettest.Output("nft", "list", "tables"); strings.Contains(tables, prefix) {
			t.Errorf("nftables tables left: %s", tables)
		}
	})
	h := newHarness(t, func(c *Config) {
		c.Network = &network.Config{CIDR: cidr, Prefix: prefix, Ready: 4, DNS: netip.MustParseAddr("198.18.255.53")}
	})
	const total, parallel = 200, 4
	errs := make(chan error, total)
	sem := make(chan struct{}, parallel)
	for range total {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			info, err := h.agent.Create(context.Background(), hostapi.CreateRequest{Template: "base"})
			if err != nil {
				errs <- err
				return
			}
			errs <- h.agent.Kill(info.ID)
		}()
	}
	for range parallel {
		sem <- struct{}{}
	}
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			if failed++; failed <= 3 {
				t.Errorf("create/kill: %v", err)
			}
		}
	}
	if n := len(h.agent.List()); n != 0 {
		t.Errorf("%d sandboxes left", n)
	}
	st := h.agent.net.Stats()
	if st.InUse != 0 {
		t.Errorf("slots still in use after every kill: %+v", st)
	}
	t.Logf("200 networked sandboxes made and killed; pool now %+v", st)
}
