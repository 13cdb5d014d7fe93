package main

import (
	"context"
	"io"
	"testing"
	"time"
)

// TestSmoke runs the bench at a toy size (5 hosts, 200 live, one in-process server, PostgreSQL
// from pgtest) and checks its books, not its timings: every acknowledged create is in the store
// and nothing else is, hosts and records agree, and with room to spare no host is over-committed.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and a fleet")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Hosts: 5, Live: 200, Slots: 100, Clients: 8, Rate: 20, Phase: 3 * time.Second,
		CreateDelay: 20 * time.Millisecond, Heartbeat: time.Second, Phases: []string{"idle", "fill", "churn"},
		InProcess: true, Out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	a, f := rep.Audit, rep.Figures
	t.Logf("audit %+v", a)
	if f["scale_fill_creates"] < 200 || f["scale_churn_creates"] == 0 {
		t.Errorf("fill acknowledged %v creates (want 200), churn %v", f["scale_fill_creates"], f["scale_churn_creates"])
	}
	if a.Acked == 0 || a.Lost != 0 || a.RecordsTotal != a.Acked {
		t.Errorf("%d creates acknowledged, %d of them lost, %d records: want every acknowledged create recorded and nothing else", a.Acked, a.Lost, a.RecordsTotal)
	}
	if a.Stuck != 0 || a.NotOnHost != 0 || a.NotRecorded != 0 {
		t.Errorf("store and hosts disagree: %d stuck, %d recorded live but not on a host, %d on a host but not recorded live", a.Stuck, a.NotOnHost, a.NotRecorded)
	}
	if a.OverCommits != 0 || a.DupKills != 0 {
		t.Errorf("%d over-commits, %d duplicate kills with one server and room to spare", a.OverCommits, a.DupKills)
	}
	for _, k := range []string{"scale_fill_server_cpu_ms_per_create", "scale_idle_server_rss_mib", "scale_churn_create_p99_ms"} {
		if f[k] <= 0 {
			t.Errorf("%s = %v, want > 0", k, f[k])
		}
	}
}
