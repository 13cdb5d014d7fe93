package blobtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// S3Server is a real S3 server for tests: versitygw serving a temporary directory on loopback.
type S3Server struct {
	Endpoint string // http://127.0.0.1:PORT
	Access   string
	Secret   string

	dir, addr string
	stop      func()
}

// StartS3 runs versitygw (bin/versitygw from `make setup`, or PANDASTACK_VERSITYGW) until t ends.
// Where it is not installed the test is skipped, except under `make test`
// (PANDASTACK_VM_TESTS=1), where a missing server is a failure: it must not pass by not running.
func StartS3(t *testing.T) *S3Server {
	t.Helper()
	if FindVersitygw() == "" {
		msg := "versitygw not found: run `make setup` (installs bin/versitygw) or set PANDASTACK_VERSITYGW"
		if os.Getenv("PANDASTACK_VM_TESTS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	s, _, err := RunS3(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// RunS3 starts versitygw on a free loopback port serving dir; stop ends it.
func RunS3(dir string) (s *S3Server, stop func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	s = &S3Server{Endpoint: "http://" + addr, Access: "vgw-test-access", Secret: "pandastack-test-secret", dir: dir, addr: addr}
	if err := s.Start(); err != nil {
		return nil, nil, err
	}
	return s, s.Stop, nil
}

// Stop ends the server (an S3 endpoint gone: connections are refused); Start brings it back at
// the same address with the same data.
func (s *S3Server) Stop() {
	if s.stop != nil {
		s.stop()
		s.stop = nil
	}
}

// Start runs the server (again) at its address.
func (s *S3Server) Start() error {
	bin := FindVersitygw()
	if bin == "" {
		return fmt.Errorf("versitygw not found: run `make setup` (installs bin/versitygw) or set PANDASTACK_VERSITYGW")
	}
	cmd := exec.Command(bin, "--access", s.Access, "--secret", s.Secret, "--port", s.addr, "--quiet", "posix", s.dir)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() { cmd.Process.Kill(); <-exited }
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err == nil {
			c.Close()
			s.stop = stop
			return nil
		}
		select {
		case werr := <-exited:
			return fmt.Errorf("versitygw exited before listening (%v); its output is above", werr)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return fmt.Errorf("versitygw did not listen on %s: %v", s.addr, err)
		}
	}
}

// URL is a blob store URL for bucket/prefix on this server.
func (s *S3Server) URL(bucket, prefix string) string {
	return fmt.Sprintf("s3://%s/%s?endpoint=%s", bucket, prefix, s.Endpoint)
}

// Env sets the credentials in the environment for the rest of t.
func (s *S3Server) Env(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", s.Access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s.Secret)
}

// FindVersitygw is the versitygw binary to run, or "".
func FindVersitygw() string {
	if p := os.Getenv("PANDASTACK_VERSITYGW"); p != "" {
		return p
	}
	dir, err := os.Getwd()
	for err == nil {
		if _, serr := os.Stat(filepath.Join(dir, "go.mod")); serr == nil {
			p := filepath.Join(dir, "bin", "versitygw")
			if _, serr := os.Stat(p); serr == nil {
				return p
			}
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p
	}
	return ""
}
