package blob_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/blob/blobtest"
	"github.com/pandastack/pandastack/internal/errdefs"
)

func TestFileStore(t *testing.T) {
	s, err := blob.Open(context.Background(), "file://"+t.TempDir()+"/blobs")
	if err != nil {
		t.Fatal(err)
	}
	blobtest.Run(t, s)
}

func TestS3Store(t *testing.T) {
	srv := blobtest.StartS3(t)
	srv.Env(t)
	// The bucket does not exist yet: opening creates it.
	s, err := blob.Open(context.Background(), srv.URL("pandastack-test", "some/prefix"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(s.String(), srv.Secret) || strings.Contains(s.String(), srv.Access) {
		t.Fatalf("the store's name %q shows a credential", s)
	}
	blobtest.Run(t, s)
	// A second store on the same bucket with another prefix sees none of the first's objects.
	other, err := blob.Open(context.Background(), srv.URL("pandastack-test", "other"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	other.List(context.Background(), "", func(blob.Info) error { n++; return nil })
	if n != 0 {
		t.Fatalf("a store under another prefix lists %d objects of the first", n)
	}
}

func TestS3StoreBadConfig(t *testing.T) {
	srv := blobtest.StartS3(t)
	ctx := context.Background()
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	if _, err := blob.Open(ctx, srv.URL("b", "")); err == nil || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") {
		t.Fatalf("no credentials: %v", err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", srv.Access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
	_, err := blob.Open(ctx, srv.URL("b", ""))
	if err == nil || strings.Contains(err.Error(), "wrong-secret") {
		t.Fatalf("wrong secret: %v (want an error that does not show the secret)", err)
	}
	t.Logf("wrong secret: %v", err)
	srv.Env(t)
	// Nothing listens on port 1 of loopback: a clear error, promptly, never a hang.
	start := time.Now()
	_, err = blob.Open(ctx, "s3://b/p?endpoint=http://127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("unreachable endpoint: %v", err)
	}
	t.Logf("unreachable endpoint: %v (after %v)", err, time.Since(start).Round(time.Millisecond))
	for _, u := range []string{"s3:///prefix", "s3://b/p?endpoint=ftp://x", "s3://b/p?colour=blue", "s3://key:secret@b/p", "gs://b", "file://host/dir", "file://relative", "nothing"} {
		_, err := blob.Open(ctx, u)
		if !errdefs.Is(err, errdefs.Invalid) || strings.Contains(err.Error(), "secret@") {
			t.Errorf("Open(%q) = %v, want an invalid error without the credential", u, err)
		}
	}
}
