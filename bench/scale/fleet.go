package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient/agenttest"
	"github.com/pandastack/pandastack/internal/scheduler"
)

// fleet is N fake host agents (agenttest: held to the real agent by the contract suite), each
// registering and heartbeating through the balancer as `pandastack agent --server` does.
type fleet struct {
	hosts []*host

	mu       sync.Mutex
	killedAt map[string]time.Time // sandbox → when its host was told to kill it
	dupKills int                  // kills of a sandbox the host no longer had
}

type host struct {
	agent *agenttest.Agent
	stop  context.CancelFunc // its registrar
	down  bool
}

// template is the one template every host has (1 vCPU, 256 MiB in the fake).
const template = "base"

// startFleet starts the agents and their registrars. Each registrar starts at a random point of
// the first interval, so heartbeats are spread like those of hosts started at different times.
func startFleet(ctx context.Context, cfg Config, clusterToken string, lb http.RoundTripper) *fleet {
	f := &fleet{killedAt: map[string]time.Time{}}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	client := &http.Client{Transport: lb, Timeout: 10 * time.Second}
	for i := range cfg.Hosts {
		a := agenttest.New(fmt.Sprintf("host-%04d", i), fmt.Sprintf("agent-token-%d", i), template)
		a.SetSlots(int64(cfg.Slots))
		// The fake commits 256 MiB per running sandbox against twice its memory: slots, not
		// memory, bind.
		a.SetMemory(int64(cfg.Slots)*128 + 1024)
		a.SetCreateDelay(cfg.CreateDelay)
		a.OnKill(f.killed)
		hctx, cancel := context.WithCancel(ctx)
		f.hosts = append(f.hosts, &host{agent: a, stop: cancel})
		go func() {
			select {
			case <-hctx.Done():
				return
			case <-time.After(rand.N(cfg.Heartbeat)):
			}
			scheduler.RunRegistrar(hctx, scheduler.RegistrarConfig{ServerURL: lbURL, ClusterToken: clusterToken,
				AgentURL: a.URL(), AgentToken: a.Token, Interval: cfg.Heartbeat, Logger: quiet, HTTP: client})
		}()
	}
	return f
}

func (f *fleet) killed(id string, had bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !had {
		f.dupKills++
		return
	}
	f.killedAt[id] = time.Now()
}

// takeKills returns the kills seen since the last call.
func (f *fleet) takeKills() (map[string]time.Time, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := f.killedAt
	f.killedAt = map[string]time.Time{}
	return k, f.dupKills
}

// overCommits is how many creates the hosts refused for want of a slot: each is a host given
// more than its slots (the real agent would have admitted it).
func (f *fleet) overCommits() int {
	n := 0
	for _, h := range f.hosts {
		n += h.agent.Refused()
	}
	return n
}

// killHosts takes n live hosts away at once, as if their machines died: their agents stop
// answering and stop heartbeating.
func (f *fleet) killHosts(n int) []string {
	var ids []string
	for _, h := range f.hosts {
		if len(ids) == n {
			break
		}
		if !h.down {
			h.down = true
			h.stop()
			h.agent.Close()
			ids = append(ids, h.agent.HostID)
		}
	}
	return ids
}

// onHosts is, per host that is up, the sandboxes it has.
func (f *fleet) onHosts() map[string]string {
	m := map[string]string{}
	for _, h := range f.hosts {
		if h.down {
			continue
		}
		for _, id := range h.agent.All() {
			m[id] = h.agent.HostID
		}
	}
	return m
}

func (f *fleet) stop() {
	for _, h := range f.hosts {
		h.stop()
		if !h.down {
			h.agent.Close()
		}
	}
}
