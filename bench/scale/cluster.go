package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pandastack/pandastack/internal/app"
	"github.com/pandastack/pandastack/internal/store/pgtest"
)

// database is the bench's PostgreSQL: pgtest's throwaway server, one database, and a connection
// the bench reads the state of record through (counts, the final audit).
type database struct {
	pg  *pgtest.Server
	url string
	db  *sql.DB
}

func startDatabase(ctx context.Context) (*database, error) {
	pg, err := pgtest.Start()
	if err != nil {
		return nil, err
	}
	url, err := pg.NewDatabase(ctx, "scale")
	if err != nil {
		pg.Stop()
		return nil, err
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		pg.Stop()
		return nil, err
	}
	db.SetMaxOpenConns(2)
	return &database{pg: pg, url: url, db: db}, nil
}

func (d *database) stop() { d.db.Close(); d.pg.Stop() }

// postmaster is the pid of the PostgreSQL server (its data dir's postmaster.pid, first line).
func (d *database) postmaster() int {
	data, _ := os.ReadFile(filepath.Join(d.pg.Dir, "data", "postmaster.pid"))
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(data), "\n", 2)[0]))
	return pid
}

// cpuMs is PostgreSQL's CPU: the postmaster and all its backends.
func (d *database) cpuMs() float64 { return treeCPUMs(d.postmaster()) }

// xacts is how many transactions the bench database has committed or rolled back: with
// autocommit, one per statement outside an explicit transaction.
func (d *database) xacts(ctx context.Context) float64 {
	var n float64
	d.db.QueryRowContext(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	return n
}

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

// startServer runs a control plane over the bench database with agent registration on.
func (r *run) startServer(ctx context.Context, name string) (*server, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	s := &server{name: name, url: "http://" + addr, done: make(chan struct{})}
	if r.cfg.InProcess {
		cctx, cancel := context.WithCancel(ctx)
		cp, _, err := app.StartControlPlane(cctx, app.ControlPlaneConfig{DatabaseURL: r.db.url, ClusterToken: r.clusterToken,
			HeartbeatTimeout: r.cfg.HeartbeatTimeout, PresetKey: r.apiKey, ProxyDomain: "localhost", Version: "bench",
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			cancel()
			return nil, err
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			cancel()
			cp.Close()
			return nil, err
		}
		go func() { cp.Serve(cctx, ln); cp.Close(); close(s.done) }()
		s.stop = func() { cancel(); <-s.done }
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

// balancer is the load balancer in front of the servers, as a client-side transport: each
// request goes to the next live server in turn; a server that refuses the connection (killed)
// is skipped. The load and the fleet's registrars both use it, as they would use an operator's
// load balancer.
type balancer struct {
	mu      sync.Mutex
	servers []*server
	next    int
	base    http.RoundTripper
}

// lbURL is the base URL clients of the balancer use; its host is replaced per request.
const lbURL = "http://control-plane"

func newBalancer() *balancer {
	return &balancer{base: &http.Transport{MaxIdleConnsPerHost: 4096, IdleConnTimeout: time.Minute,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}}
}

func (b *balancer) set(servers ...*server) {
	b.mu.Lock()
	b.servers = servers
	b.mu.Unlock()
}

func (b *balancer) pick() *server {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.servers) == 0 {
		return nil
	}
	b.next++
	return b.servers[b.next%len(b.servers)]
}

func (b *balancer) RoundTrip(req *http.Request) (*http.Response, error) {
	for try := 0; ; try++ {
		s := b.pick()
		if s == nil {
			return nil, errors.New("balancer: no server")
		}
		r := req.Clone(req.Context())
		r.URL.Scheme, r.URL.Host, r.Host = "http", strings.TrimPrefix(s.url, "http://"), ""
		if req.GetBody != nil {
			r.Body, _ = req.GetBody()
		}
		resp, err := b.base.RoundTrip(r)
		// A refused connection sent nothing: another server may take it.
		if err != nil && errors.Is(err, syscall.ECONNREFUSED) && try < 2 {
			continue
		}
		return resp, err
	}
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
