package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// server is one control plane: a `pandastack server` process, or in-process (Config.InProcess).
type server struct {
	name string
	url  string
	cmd  *exec.Cmd // a process
	done chan struct{}
	stop func() // in-process
}

// pid is the server's process (the bench's own when in-process: its CPU then includes the fleet
// and the load).
func (s *server) pid() int {
	if s.cmd != nil {
		return s.cmd.Process.Pid
	}
	return os.Getpid()
}

// kill ends the server at once: SIGKILL for a process, so nothing is drained or flushed.
func (s *server) kill() {
	if s.cmd != nil {
		s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.done
		return
	}
	s.stop()
}

// refusals is the server's pandastack_placement_refusals_total by cause, from its /metrics (none
// when it does not answer, or a build without the metric).
func (s *server) refusals(ctx context.Context) map[string]float64 {
	out := map[string]float64{}
	req, _ := http.NewRequestWithContext(ctx, "GET", s.url+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	const prefix = `pandastack_placement_refusals_total{by="`
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), prefix)
		by, n, ok2 := strings.Cut(line, `"} `)
		if v, err := strconv.ParseFloat(n, 64); ok && ok2 && err == nil {
			out[by] = v
		}
	}
	return out
}

// startServer runs a control plane over the bench database with agent registration on.
func (r *run) startServer(ctx context.Context, name string) (*server, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	s := &server{name: name, url: "http://" + addr, done: make(chan struct{})}
	if r.cfg.InProcess {
		if err := r.startInProcess(ctx, s, addr); err != nil {
			return nil, err
		}
	} else {
		s.cmd = exec.Command(r.bin, "server", "--addr", addr, "--database-url", r.db.url, "--cluster-token", r.clusterToken,
			"--heartbeat-timeout", r.cfg.HeartbeatTimeout.String(), "--log-level", "warn")
		s.cmd.Env = append(os.Environ(), "PANDASTACK_API_KEY="+r.apiKey)
		logf, err := os.Create(filepath.Join(r.logs, name+".log"))
		if err != nil {
			return nil, err
		}
		defer logf.Close()
		s.cmd.Stdout, s.cmd.Stderr = logf, logf
		s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := s.cmd.Start(); err != nil {
			return nil, err
		}
		go func() { s.cmd.Wait(); close(s.done) }()
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(s.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s, nil
			}
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("server %s exited while starting (log: %s)", name, filepath.Join(r.logs, name+".log"))
		default:
		}
		if time.Now().After(deadline) {
			s.kill()
			return nil, fmt.Errorf("server %s not healthy within 60s", name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// buildBinary builds cmd/pandastack into dir, so the bench measures the tree it runs from.
func buildBinary(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "pandastack")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/pandastack/pandastack/cmd/pandastack")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/pandastack: %w\n%s", err, out)
	}
	return bin, nil
}
