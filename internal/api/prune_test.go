package api

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/store"
)

// TestPruneKilledAnswers404: once its record is pruned, a killed sandbox answers GET 404
// not_found, as an unknown id does, and leaves the killed list; a live sandbox is untouched.
func TestPruneKilledAnswers404(t *testing.T) {
	e := newEnv(t)
	k := e.admin
	live := e.create(k, map[string]any{"template": "base"})
	dead := e.create(k, map[string]any{"template": "base"})
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+dead.ID, k, nil), 204)
	before := e.record(live.ID)

	// Within the retention the killed record stays.
	if n, err := e.srv.PruneKilled(context.Background()); n != 0 || err != nil {
		t.Fatalf("pruned %d (%v) within the retention", n, err)
	}
	if got := e.get(k, dead.ID); got.State != store.StateKilled {
		t.Fatalf("killed sandbox within the retention: %+v", got)
	}

	e.clock.Add(DefaultKilledRetention + time.Hour)
	if n, err := e.srv.PruneKilled(context.Background()); n != 1 || err != nil {
		t.Fatalf("pruned %d (%v), want 1", n, err)
	}
	e.wantErr(e.do("GET", "/v1/sandboxes/"+dead.ID, k, nil), 404, "not_found", "sandbox "+dead.ID+" not found")
	e.wantErr(e.do("GET", "/v1/sandboxes/sb_neverwas", k, nil), 404, "not_found", "sandbox sb_neverwas not found")
	e.wantErr(e.do("DELETE", "/v1/sandboxes/"+dead.ID, k, nil), 404, "not_found", "sandbox "+dead.ID+" not found")
	if _, err := e.st.GetSandbox(context.Background(), dead.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("pruned record: %v", err)
	}
	r := e.mustStatus(e.do("GET", "/v1/sandboxes?state=killed", k, nil), 200)
	if page := decodeAs[struct{ Sandboxes []SandboxView }](t, r); len(page.Sandboxes) != 0 {
		t.Fatalf("killed list after the prune: %+v", page.Sandboxes)
	}

	if got := e.get(k, live.ID); got.State != store.StateRunning {
		t.Fatalf("live sandbox after the prune: %+v", got)
	}
	if after := e.record(live.ID); after.State != before.State || !after.UpdatedAt.Equal(before.UpdatedAt) || !after.ExpiresAt.Equal(before.ExpiresAt) {
		t.Fatalf("live record changed: %+v, was %+v", after, before)
	}
}

// TestPruneKilledOneReplica: of two servers on one PostgreSQL only the one holding the prune lock
// prunes; the lock is let go after each pass, so the other prunes next.
func TestPruneKilledOneReplica(t *testing.T) {
	ctx := context.Background()
	f := newReapFleet(t, postgresStore(t), 2, nil)
	f.expired(3)
	f.reap(0, 3)
	later := func() time.Time { return time.Now().Add(DefaultKilledRetention + time.Hour) }
	for _, r := range f.replicas {
		r.cfg.Now = later
	}
	killed := func() int64 {
		t.Helper()
		n, err := f.st.CountSandboxesByState(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n[store.StateKilled]
	}

	if mine, err := f.replicas[0].pruneLock.Hold(ctx); !mine || err != nil { // as in a pass of replica 0
		t.Fatalf("replica 0 could not take the prune lock: %v %v", mine, err)
	}
	if n, err := f.replicas[1].PruneKilled(ctx); n != 0 || err != nil {
		t.Fatalf("replica 1 pruned %d (%v) while replica 0 held the lock", n, err)
	}
	if got := killed(); got != 3 {
		t.Fatalf("%d killed rows, want 3", got)
	}
	f.replicas[0].pruneLock.Release()
	if n, err := f.replicas[1].PruneKilled(ctx); n != 3 || err != nil {
		t.Fatalf("replica 1 pruned %d (%v), want 3", n, err)
	}
	if n, err := f.replicas[0].PruneKilled(ctx); n != 0 || err != nil { // the lock is free again: nothing is left
		t.Fatalf("replica 0 pruned %d (%v) after replica 1", n, err)
	}
	if got := killed(); got != 0 {
		t.Fatalf("%d killed rows left", got)
	}
}
