// Package blobtest is the conformance suite every blob.Store driver passes, and the test
// harness that runs a real S3 server (versitygw) for the S3 driver.
package blobtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/errdefs"
)

// Run checks the invariants of blob.Store (see the blob package comment) on a fresh, empty store.
func Run(t *testing.T, s blob.Store) {
	ctx := context.Background()
	put := func(t *testing.T, key string, data []byte) {
		t.Helper()
		if err := s.Put(ctx, key, bytes.NewReader(data)); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
	}
	// read(t)(s.Get(…)) is the object's bytes, failing t on an error.
	read := func(t *testing.T) func(io.ReadCloser, error) []byte {
		return func(rc io.ReadCloser, err error) []byte {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			b, err := io.ReadAll(rc)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	wantNotFound := func(t *testing.T, what string, err error) {
		t.Helper()
		if !errdefs.Is(err, errdefs.NotFound) || !strings.Contains(err.Error(), "missing/key") {
			t.Fatalf("%s of a missing key: got %v, want a not-found error naming the key", what, err)
		}
	}

	t.Run("PutGetStat", func(t *testing.T) {
		data := bytes.Repeat([]byte("pandastack"), 100_000) // 1 MB: more than one read
		put(t, "a/b/object", data)
		if got := read(t)(s.Get(ctx, "a/b/object")); !bytes.Equal(got, data) {
			t.Fatalf("get returned %d bytes, want the %d put", len(got), len(data))
		}
		in, err := s.Stat(ctx, "a/b/object")
		if err != nil || in.Size != int64(len(data)) || in.Key != "a/b/object" || in.Modified.IsZero() {
			t.Fatalf("stat = %+v, %v", in, err)
		}
		put(t, "a/b/object", []byte("replaced"))
		if got := read(t)(s.Get(ctx, "a/b/object")); string(got) != "replaced" {
			t.Fatalf("after a second put, get = %q", got)
		}
		put(t, "empty", nil)
		if in, err := s.Stat(ctx, "empty"); err != nil || in.Size != 0 {
			t.Fatalf("empty object: %+v, %v", in, err)
		}
		// A reader positioned at its end is read from its start.
		r := bytes.NewReader([]byte("rewound"))
		r.Seek(0, io.SeekEnd)
		if err := s.Put(ctx, "rewound", r); err != nil {
			t.Fatal(err)
		}
		if got := read(t)(s.Get(ctx, "rewound")); string(got) != "rewound" {
			t.Fatalf("put of a read reader stored %q", got)
		}
	})

	t.Run("Ranges", func(t *testing.T) {
		put(t, "ranged", []byte("0123456789"))
		for _, c := range []struct {
			off, n int64
			want   string
		}{{0, 4, "0123"}, {3, 3, "345"}, {8, 10, "89"}, {10, 5, ""}, {4, 0, ""}} {
			if got := read(t)(s.GetRange(ctx, "ranged", c.off, c.n)); string(got) != c.want {
				t.Errorf("range %d+%d = %q, want %q", c.off, c.n, got, c.want)
			}
		}
		if _, err := s.GetRange(ctx, "ranged", -1, 2); !errdefs.Is(err, errdefs.Invalid) {
			t.Errorf("negative offset: %v, want invalid", err)
		}
	})

	t.Run("Missing", func(t *testing.T) {
		_, err := s.Get(ctx, "missing/key")
		wantNotFound(t, "get", err)
		_, err = s.GetRange(ctx, "missing/key", 0, 10)
		wantNotFound(t, "get-range", err)
		_, err = s.Stat(ctx, "missing/key")
		wantNotFound(t, "stat", err)
		if err := s.Delete(ctx, "missing/key"); err != nil {
			t.Fatalf("delete of a missing key: %v", err)
		}
	})

	t.Run("ListAndDelete", func(t *testing.T) {
		for _, k := range []string{"l/c", "l/a/1", "l/b", "l/a/2", "lx"} {
			put(t, k, []byte(k))
		}
		list := func(prefix string) []string {
			var keys []string
			if err := s.List(ctx, prefix, func(in blob.Info) error {
				if in.Size != int64(len(in.Key)) {
					t.Errorf("list: %s has size %d, want %d", in.Key, in.Size, len(in.Key))
				}
				keys = append(keys, in.Key)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			return keys
		}
		if got := fmt.Sprint(list("l/")); got != "[l/a/1 l/a/2 l/b l/c]" {
			t.Fatalf("list l/ = %s", got)
		}
		if got := fmt.Sprint(list("l/a")); got != "[l/a/1 l/a/2]" {
			t.Fatalf("list l/a = %s", got)
		}
		if got := fmt.Sprint(list("nothing/")); got != "[]" {
			t.Fatalf("list of an empty prefix = %s", got)
		}
		stop := errors.New("stop")
		n := 0
		if err := s.List(ctx, "l/", func(blob.Info) error { n++; return stop }); err != stop || n != 1 {
			t.Fatalf("an error from fn must stop the walk and come back: %v after %d", err, n)
		}
		if err := s.Delete(ctx, "l/a/1"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Stat(ctx, "l/a/1"); !errdefs.Is(err, errdefs.NotFound) {
			t.Fatalf("stat after delete: %v", err)
		}
		if got := fmt.Sprint(list("l/")); got != "[l/a/2 l/b l/c]" {
			t.Fatalf("list after delete = %s", got)
		}
	})

	t.Run("BadKeys", func(t *testing.T) {
		for _, k := range []string{"", "/abs", "a//b", "a/../b", "./a", "a/", "sp ace", "back\\slash", "ctl\x01", strings.Repeat("k", blob.MaxKeyLen+1)} {
			if err := s.Put(ctx, k, bytes.NewReader(nil)); !errdefs.Is(err, errdefs.Invalid) {
				t.Errorf("put %q: %v, want invalid", k, err)
			}
			if _, err := s.Get(ctx, k); !errdefs.Is(err, errdefs.Invalid) {
				t.Errorf("get %q: %v, want invalid", k, err)
			}
		}
	})

	t.Run("ConcurrentPutsAreWhole", func(t *testing.T) {
		// Readers racing writers of the same key see one whole version, never a mix or a part.
		a, b := bytes.Repeat([]byte{'a'}, 1<<20), bytes.Repeat([]byte{'b'}, 1<<20)
		put(t, "race", a)
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Add(2)
			go func() {
				defer wg.Done()
				data := a
				if i%2 == 1 {
					data = b
				}
				if err := s.Put(ctx, "race", bytes.NewReader(data)); err != nil {
					t.Error(err)
				}
			}()
			go func() {
				defer wg.Done()
				rc, err := s.Get(ctx, "race")
				if err != nil {
					t.Error(err)
					return
				}
				defer rc.Close()
				got, err := io.ReadAll(rc)
				if err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(got, a) && !bytes.Equal(got, b) {
					t.Errorf("read a %d-byte mix while puts raced", len(got))
				}
			}()
		}
		wg.Wait()
	})
}
