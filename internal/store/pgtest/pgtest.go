// Package pgtest starts a throwaway PostgreSQL server for tests, from Debian's packages
// (/usr/lib/postgresql/<version>/bin; `make setup` installs them). The server lives in a temp dir,
// listens on a unix socket there and on a free loopback port, and is removed by Stop. Tests that
// need PostgreSQL must fail, not skip, when it cannot start: a silent skip would hide a backend.
package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
)

// Server is a running throwaway PostgreSQL.
type Server struct {
	Dir  string // temp dir: data/, the socket, postgres.log
	Port int
	cmd  *exec.Cmd
	done chan error
	// admin is a connection to the "postgres" database used to create per-test databases.
	admin *sql.DB
}

// MissingHint is the sentence every failure to find PostgreSQL ends with.
const MissingHint = "PostgreSQL server binaries are needed for the store's PostgreSQL tests: `make setup` installs them (Debian package postgresql)"

// BinDir returns the newest /usr/lib/postgresql/*/bin that holds initdb and postgres.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	type cand struct {
		dir string
		ver float64
	}
	var cs []cand
	for _, d := range dirs {
		if !executable(filepath.Join(d, "initdb")) || !executable(filepath.Join(d, "postgres")) {
			continue
		}
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(d)), 64)
		cs = append(cs, cand{d, v})
	}
	if len(cs) == 0 {
		return "", fmt.Errorf("no /usr/lib/postgresql/*/bin/{initdb,postgres} found. %s", MissingHint)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].ver > cs[j].ver })
	return cs[0].dir, nil
}

func executable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// Start initialises and starts a server. PostgreSQL refuses to run as root, so as root the server
// runs as the `postgres` user (created by Debian's package) or, failing that, `nobody`.
func Start() (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pandastack-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir}
	ok := false
	defer func() {
		if !ok {
			s.Stop()
		}
	}()
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		return nil, err
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			u, err = user.Lookup("nobody")
		}
		if err != nil {
			return nil, fmt.Errorf("running as root and neither user postgres nor nobody exists: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		// The server user must reach its data dir and write the socket into dir.
		if err := os.Chmod(dir, 0o755); err != nil {
			return nil, err
		}
		for _, p := range []string{dir, data} {
			if err := os.Chown(p, uid, gid); err != nil {
				return nil, err
			}
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s.Port = port
	logf, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-k", dir, "-h", "127.0.0.1", "-p", strconv.Itoa(port),
		"-F", "-c", "max_connections=200", "-c", "shared_buffers=16MB", "-c", "full_page_writes=off",
		"-c", "synchronous_commit=off")
	s.cmd.Dir = dir
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	// Pdeathsig: a test binary killed mid-run must not leave a postgres behind.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGTERM}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	s.done = make(chan error, 1)
	go func() { s.done <- s.cmd.Wait() }()

	s.admin, err = sql.Open("pgx", s.URL("postgres"))
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = s.admin.PingContext(ctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case werr := <-s.done:
			s.done <- werr
			return nil, fmt.Errorf("postgres exited while starting (%v); log:\n%s", werr, s.log())
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("postgres did not accept connections within 60s: %v; log:\n%s", err, s.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	ok = true
	return s, nil
}

func (s *Server) log() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "postgres.log"))
	return string(b)
}

// URL returns a connection URL for database db over the server's unix socket.
func (s *Server) URL(db string) string {
	q := url.Values{}
	q.Set("host", s.Dir)
	q.Set("port", strconv.Itoa(s.Port))
	q.Set("sslmode", "disable")
	return "postgres://postgres@/" + db + "?" + q.Encode()
}

// NewDatabase creates an empty database and returns its URL.
func (s *Server) NewDatabase(ctx context.Context, name string) (string, error) {
	if strings.ContainsFunc(name, func(r rune) bool { return !(r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') }) {
		return "", errors.New("pgtest: database names are [a-z0-9_]")
	}
	if _, err := s.admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	return s.URL(name), nil
}

// Stop shuts the server down (fast shutdown, then kill) and removes its directory.
func (s *Server) Stop() {
	if s.admin != nil {
		s.admin.Close()
	}
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.done:
		case <-time.After(15 * time.Second):
			s.cmd.Process.Kill()
			<-s.done
		}
	}
	if s.Dir != "" {
		os.RemoveAll(s.Dir)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
