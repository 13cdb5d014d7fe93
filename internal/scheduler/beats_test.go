package scheduler

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/testenv"

	_ "github.com/jackc/pgx/v5/stdlib"
)

// TestHeartbeatsShareOneWrite: on two replicas over one PostgreSQL, the heartbeats of hosts that
// report nothing new are written together (one transaction: the rows' xmin), and still bring
// back a host another replica marked down and write a report another replica overwrote.
func TestHeartbeatsShareOneWrite(t *testing.T) {
	ctx := context.Background()
	u := testenv.PostgresDatabase(t, "beats")
	var replicas []*Scheduler
	var db *store.Store
	for range 2 {
		st, err := store.OpenPostgres(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		db = st
		s := New(Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), HeartbeatBatch: time.Hour})
		replicas = append(replicas, s)
	}
	a, b := replicas[0], replicas[1]
	const n = 40
	a.beats.max = n // the batch is written when full: no window to wait for
	regs := make([]Registration, n)
	for i := range regs {
		regs[i] = reg(string(rune('A'+i/26))+string(rune('a'+i%26)), 4096, 1, tmpl("base", true))
		if err := a.Register(ctx, regs[i]); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	// transactions is how many transactions wrote the hosts' rows as they are now (their xmins).
	transactions := func() (n int) {
		if err := raw.QueryRowContext(ctx, `SELECT COUNT(DISTINCT xmin::text) FROM hosts`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	beatAll := func(s *Scheduler) {
		var wg sync.WaitGroup
		for _, r := range regs {
			wg.Go(func() {
				if err := s.Heartbeat(ctx, r); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	beatAll(a)
	if x := transactions(); x != 1 {
		t.Fatalf("%d heartbeats that changed nothing were written by %d transactions, want 1", n, x)
	}
	before, err := db.GetHost(ctx, regs[0].HostID)
	if err != nil {
		t.Fatal(err)
	}

	// Another replica marks host 0 down and writes another report of host 1: the next batch
	// leaves both to a whole write (host 0 up again, host 1 as it reports now).
	if err := db.MarkHostDown(ctx, regs[0].HostID, "test"); err != nil {
		t.Fatal(err)
	}
	other := regs[1]
	other.SlotsUsed = 3
	if err := b.Heartbeat(ctx, other); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // the clock moves on: the heartbeats below are later
	beatAll(a)
	for i, r := range regs {
		h, err := db.GetHost(ctx, r.HostID)
		if err != nil {
			t.Fatal(err)
		}
		if h.State != store.HostUp || h.SlotsUsed != 1 || !h.LastHeartbeat.After(before.LastHeartbeat) {
			t.Fatalf("host %d after the second round: %s, %d slots used, heard %v (before %v)", i, h.State, h.SlotsUsed, h.LastHeartbeat, before.LastHeartbeat)
		}
	}
	if x := transactions(); x != 3 {
		t.Fatalf("second round: %d transactions, want 3 (the batch, host 0's registration, host 1's report)", x)
	}
}
