package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The soak (suite soak, not in the default suites): -soak-clients clients each create a sandbox
// through the public API, run a command in it and kill it, over and over for -soak-duration.
// Every -soak-interval it prints each step's p50/p99 in that interval and the errors (a quota's
// refusal counted apart); at the end the memory (RSS) of the server and the agent against what
// it was at the start.
var (
	soakClients  = flag.Int("soak-clients", 4, "suite soak: concurrent clients")
	soakDuration = flag.Duration("soak-duration", 2*time.Minute, "suite soak: how long the clients run")
	soakInterval = flag.Duration("soak-interval", 30*time.Second, "suite soak: the reporting interval")
)

// soakSteps are a cycle's steps, in order.
var soakSteps = []string{"create", "exec", "kill"}

// soakWindow is one interval's figures.
type soakWindow struct {
	mu      sync.Mutex
	lat     map[string][]float64
	cycles  int
	errors  int // not quota refusals
	quota   int
	lastErr string
}

func (w *soakWindow) add(step string, d float64) {
	w.mu.Lock()
	w.lat[step] = append(w.lat[step], d)
	w.mu.Unlock()
}

func (w *soakWindow) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if strings.Contains(err.Error(), "quota_exceeded") {
		w.quota++
		return
	}
	w.errors++
	w.lastErr = err.Error()
}

func soakSuite(ctx context.Context, res map[string]float64, guestAgent, imageCache string) error {
	cl, err := startCluster(guestAgent, imageCache, "10.211.0.0/20")
	if err != nil {
		return err
	}
	defer cl.stop()
	api := cl.public
	rss := func(pid int) float64 {
		data, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				kib, _ := strconv.ParseFloat(f[1], 64)
				return kib / 1024
			}
		}
		return 0
	}
	// One cycle first, so that the start's memory is a warm process's, not a cold one's.
	win := &soakWindow{lat: map[string][]float64{}}
	soakCycle(api, win)
	if win.errors > 0 {
		return fmt.Errorf("the first cycle failed: %s", win.lastErr)
	}
	serverStart, agentStart := rss(cl.serverPID), rss(cl.agentPID)
	fmt.Printf("\nsoak: %d clients for %s; RSS at the start: server %.1f MiB, agent %.1f MiB\n", *soakClients, *soakDuration, serverStart, agentStart)
	all := &soakWindow{lat: map[string][]float64{}}
	var mu sync.Mutex
	win = &soakWindow{lat: map[string][]float64{}}
	current := func() *soakWindow { mu.Lock(); defer mu.Unlock(); return win }
	end := time.Now().Add(*soakDuration)
	var wg sync.WaitGroup
	for range *soakClients {
		wg.Go(func() {
			for time.Now().Before(end) && ctx.Err() == nil {
				soakCycle(api, current())
			}
		})
	}
	start := time.Now()
	report := func(w *soakWindow, from time.Duration) {
		line := fmt.Sprintf("soak %5.0fs-%5.0fs: %4d cycles", from.Seconds(), time.Since(start).Seconds(), w.cycles)
		for _, step := range soakSteps {
			line += fmt.Sprintf(", %s p50 %6.1f p99 %6.1f ms", step, pct(w.lat[step], 50), pct(w.lat[step], 99))
		}
		line += fmt.Sprintf(", errors %d (quota %d)", w.errors, w.quota)
		if w.lastErr != "" {
			line += ": " + w.lastErr
		}
		fmt.Println(line)
		for _, step := range soakSteps {
			all.lat[step] = append(all.lat[step], w.lat[step]...)
		}
		all.cycles, all.errors, all.quota = all.cycles+w.cycles, all.errors+w.errors, all.quota+w.quota
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(*soakInterval)
	defer tick.Stop()
	from := time.Duration(0)
	for finished := false; !finished; {
		select {
		case <-tick.C:
		case <-done:
			finished = true
		}
		mu.Lock()
		w := win
		win = &soakWindow{lat: map[string][]float64{}}
		mu.Unlock()
		w.mu.Lock() // a cycle still adding to it finishes first
		if w.cycles+w.errors+w.quota > 0 {
			report(w, from)
		}
		w.mu.Unlock()
		from = time.Since(start)
	}
	serverEnd, agentEnd := rss(cl.serverPID), rss(cl.agentPID)
	fmt.Printf("soak: %d cycles, %d errors (quota %d); RSS server %.1f → %.1f MiB, agent %.1f → %.1f MiB\n",
		all.cycles, all.errors, all.quota, serverStart, serverEnd, agentStart, agentEnd)
	for _, step := range soakSteps {
		res["soak_"+step+"_p50_ms"], res["soak_"+step+"_p99_ms"] = pct(all.lat[step], 50), pct(all.lat[step], 99)
	}
	res["soak_cycles_per_s"] = float64(all.cycles) / time.Since(start).Seconds()
	res["soak_errors"], res["soak_quota_refusals"] = float64(all.errors), float64(all.quota)
	res["soak_server_rss_start_mib"], res["soak_server_rss_end_mib"] = serverStart, serverEnd
	res["soak_agent_rss_start_mib"], res["soak_agent_rss_end_mib"] = agentStart, agentEnd
	res["soak_server_rss_end_over_start"], res["soak_agent_rss_end_over_start"] = serverEnd/serverStart, agentEnd/agentStart
	return nil
}

// soakCycle creates a sandbox, runs a command in it and kills it, recording each step's latency
// (a failed step ends the cycle, recorded as an error).
func soakCycle(api *apiClient, w *soakWindow) {
	var sb struct{ ID string }
	steps := []func() error{
		func() error {
			body, err := api.do("POST", "/v1/sandboxes", map[string]any{"template": "base", "ttl_seconds": 600}, 201)
			if err == nil {
				err = json.Unmarshal(body, &sb)
			}
			return err
		},
		func() error {
			body, err := api.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": "echo soak"}, 200)
			if err == nil && !strings.Contains(string(body), "soak") {
				err = fmt.Errorf("exec answered %s", body)
			}
			return err
		},
		func() error {
			_, err := api.do("DELETE", "/v1/sandboxes/"+sb.ID, nil, 204)
			return err
		},
	}
	for i, step := range steps {
		t := time.Now()
		if err := step(); err != nil {
			w.fail(fmt.Errorf("%s: %w", soakSteps[i], err))
			if i == 1 {
				api.do("DELETE", "/v1/sandboxes/"+sb.ID, nil, 204)
			}
			return
		}
		w.add(soakSteps[i], ms(time.Since(t)))
	}
	w.mu.Lock()
	w.cycles++
	w.mu.Unlock()
}
