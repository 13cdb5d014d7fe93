package hostagent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/network"
)

// openNetwork starts the slot pool. Namespaces of sandboxes recorded as running are kept for
// adoption; every other leftover of an earlier agent is reclaimed.
func (a *Agent) openNetwork(cfg network.Config) error {
	keep := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(a.sandboxesDir(), "*", "sandbox.json"))
	for _, f := range files {
		var rec record
		if readJSONFile(f, &rec) == nil && rec.State == StateRunning && rec.Netns != "" {
			keep[rec.Netns] = true
		}
	}
	cfg.Keep = func(ns string) bool { return keep[ns] }
	if cfg.Logger == nil {
		cfg.Logger = a.log
	}
	p, err := network.Open(cfg)
	if err != nil {
		return err
	}
	a.net = p
	return nil
}

// egressPolicy checks a team's egress policy against this host (its slot range) and the
// operator's open ranges, and returns the slot policy. stored: a policy accepted earlier, being
// applied again (see network.Guard).
func (a *Agent) egressPolicy(eg *network.Egress, open []string, stored bool) (network.Policy, error) {
	opened, err := network.ParseOpen(open)
	if err != nil {
		return network.Policy{}, &network.EgressError{Msg: err.Error()}
	}
	g := network.Guard{Open: opened, Stored: stored}
	if a.net != nil {
		g.SlotCIDR = a.net.CIDR()
	}
	return eg.Policy(g)
}

// attachNetwork gives a VM about to start from rec its network slot and tap, when its snapshot
// has a NIC. The caller closes the tap once the VMM has started, and releases the slot if the
// start fails.
func (a *Agent) attachNetwork(ctx context.Context, rec *record) (*network.Slot, *os.File, error) {
	if !rec.NIC {
		return nil, nil, nil
	}
	if a.net == nil {
		return nil, nil, fmt.Errorf("sandbox %s was made with a network device, but networking is off on this host", rec.ID)
	}
	pol, err := a.egressPolicy(rec.Egress, rec.EgressOpen, true)
	if err != nil {
		return nil, nil, err
	}
	slot, err := a.net.Acquire(ctx, pol)
	if err != nil {
		return nil, nil, fmt.Errorf("network slot: %w", err)
	}
	tap, err := slot.OpenTap()
	if err != nil {
		slot.Release()
		return nil, nil, err
	}
	return slot, tap, nil
}

// releaseNetwork gives a sandbox's slot back once its VMM is gone.
func (a *Agent) releaseNetwork(sb *sandbox) {
	sb.mu.Lock()
	slot := sb.slot
	sb.slot = nil
	sb.rec.Netns, sb.rec.GuestAddr = "", ""
	sb.mu.Unlock()
	if slot != nil {
		if err := slot.Release(); err != nil {
			a.log.Warn("network slot release", "sandbox", sb.rec.ID, "err", err)
		}
	}
}

// adoptNetwork takes back the slot of a sandbox whose VMM outlived an earlier agent process.
func (a *Agent) adoptNetwork(sb *sandbox) {
	if sb.rec.Netns == "" || a.net == nil {
		return
	}
	pol, err := a.egressPolicy(sb.rec.Egress, sb.rec.EgressOpen, true)
	if err == nil {
		sb.slot, err = a.net.Adopt(sb.rec.Netns, pol)
	}
	if err != nil {
		a.log.Warn("could not re-adopt a sandbox's network", "sandbox", sb.rec.ID, "netns", sb.rec.Netns, "err", err)
	}
}

// maxPort: ports 1-65535 are proxied; the guest decides what listens.
const maxPort = 65535

// handleProxy forwards /v1/sandboxes/{id}/ports/{port}/... to that TCP port in the sandbox
// (HTTP and WebSocket, streamed both ways), waking a hibernated sandbox first. rest is the
// escaped path for the application, passed on unchanged.
func (a *Agent) handleProxy(w http.ResponseWriter, r *http.Request, id, portStr, rest string) {
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > maxPort {
		writeError(w, errdefs.Invalidf("port must be 1-%d", maxPort))
		return
	}
	sb, err := a.awake(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	sb.mu.Lock()
	addr, state := sb.rec.GuestAddr, sb.rec.State
	sb.mu.Unlock()
	if state != StateRunning {
		writeError(w, errdefs.Conflictf("sandbox %s is %s", id, state))
		return
	}
	if addr == "" {
		writeError(w, errdefs.Conflictf("sandbox %s has no network", id))
		return
	}
	done := a.inUse(id)
	defer done()
	target := &url.URL{Scheme: "http", Host: addr + ":" + strconv.Itoa(port)}
	restPath, err := url.PathUnescape(rest)
	if err != nil {
		writeError(w, errdefs.Invalidf("bad path: %v", err))
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = target.Scheme, target.Host
			pr.Out.URL.Path, pr.Out.URL.RawPath = restPath, rest
			pr.Out.Host = pr.In.Host // the app sees the public host name
			if a.cfg.Token != "" && pr.Out.Header.Get("Authorization") == "Bearer "+a.cfg.Token {
				pr.Out.Header.Del("Authorization") // never hand the agent's token to the guest
			}
			pr.SetXForwarded()
		},
		Transport:     proxyTransport,
		FlushInterval: -1, // stream: server-sent events and chunked output pass at once
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			msg := err.Error()
			if strings.Contains(msg, "connection refused") {
				msg = fmt.Sprintf("nothing listens on port %d in sandbox %s", port, id)
			}
			writeError(w, errdefs.New(errdefs.Unavailable, "%s", msg))
		},
	}
	rp.ServeHTTP(w, r)
}

// proxyTransport connects to sandbox ports: a dead port fails fast, idle connections are reused.
var proxyTransport = &http.Transport{
	DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
	MaxIdleConnsPerHost: 16,
	IdleConnTimeout:     60 * time.Second,
}
