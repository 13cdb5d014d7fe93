package app

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient/agenttest"
	"github.com/pandastack/pandastack/internal/blob/blobtest"
	"github.com/pandastack/pandastack/internal/scheduler"
)

// --blob-store: a store that cannot be opened stops the start with a clear error; an S3 store is
// opened at start (its bucket made), and a host that registers is told its URL — never the
// credentials.
func TestControlPlaneBlobStore(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "state.db")
	for _, bad := range []string{"ftp://x", "s3://b/p?endpoint=http://127.0.0.1:1"} {
		t.Setenv("AWS_ACCESS_KEY_ID", "id")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
		_, _, err := StartControlPlane(ctx, ControlPlaneConfig{DatabaseURL: db, Logger: quiet(), BlobStore: bad})
		if err == nil || !strings.HasPrefix(err.Error(), "--blob-store: ") {
			t.Fatalf("start with --blob-store %s: %v", bad, err)
		}
	}

	srv := blobtest.StartS3(t)
	srv.Env(t)
	cp, _, err := StartControlPlane(ctx, ControlPlaneConfig{DatabaseURL: db, Logger: quiet(),
		BlobStore: srv.URL("artifacts", "cluster-1"), ClusterToken: "cluster-secret"})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	if cp.Blob == nil {
		t.Fatal("no blob store opened")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go cp.Serve(sctx, ln)

	agent := agenttest.New("host-b", "agent-token", "base")
	defer agent.Close()
	told := make(chan scheduler.Registered, 1)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go scheduler.RunRegistrar(rctx, scheduler.RegistrarConfig{ServerURL: BaseURL(ln.Addr().String()), ClusterToken: "cluster-secret",
		AgentURL: agent.URL(), AgentToken: "agent-token", Interval: 50 * time.Millisecond, Logger: quiet(),
		OnRegistered: func(r scheduler.Registered) {
			select {
			case told <- r:
			default:
			}
		}})
	select {
	case r := <-told:
		if r.HostID != "host-b" || !strings.HasPrefix(r.BlobStore, "s3://artifacts/cluster-1?endpoint=") ||
			strings.Contains(r.BlobStore, srv.Secret) || strings.Contains(r.BlobStore, srv.Access) {
			t.Fatalf("registration answer %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the registrar was never told the blob store")
	}
}
