package blobtest

import (
	"context"
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
}

// StartS3 runs versitygw (bin/versitygw from `make setup`, or PANDASTACK_VERSITYGW) until t ends.
// Where it is not installed the test is skipped, except under `make test`
// (PANDASTACK_VM_TESTS=1), where a missing server is a failure: it must not pass by not running.
func StartS3(t *testing.T) *S3Server {
	t.Helper()
	bin := findVersitygw()
	if bin == "" {
		msg := "versitygw not found: run `make setup` (installs bin/versitygw) or set PANDASTACK_VERSITYGW"
		if os.Getenv("PANDASTACK_VM_TESTS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := &S3Server{Endpoint: "http://" + addr, Access: "vgw-test-access", Secret: "pandastack-test-secret"}
	dir := t.TempDir()
	cmd := exec.Command(bin, "--access", s.Access, "--secret", s.Secret, "--port", addr, "--quiet", "posix", dir)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("versitygw did not listen on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
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

func findVersitygw() string {
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
