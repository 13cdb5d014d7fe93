package faults

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/client"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// TestDatabaseSurvivesKills: rows a database acknowledged (the broker answered the INSERT) are
// there after its host agent is SIGKILLed and started again (the new agent adopts the running
// VM), after the server is SIGKILLed and started again, and after its VM dies — its QEMU
// SIGKILLed, or its sandbox killed — while the host lives: the database gets a new VM on its own
// volume (internal/database, heal.go).
func TestDatabaseSurvivesKills(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	baked := c.mustCreate(ctx, client.CreateRequest{Template: "postgres-17"}) // bakes the template
	// That sandbox got a copy of the template's 3 GiB data volume, its own (the template's volume
	// is ephemeral): the kill deletes it. The team never had a volume. (The host's 10 GiB pool
	// holds the template's, the database's and the copy a new VM of the database gets below.)
	if err := c.c.KillSandbox(ctx, baked); err != nil {
		t.Fatal(err)
	}
	vols, err := c.c.ListVolumes(ctx)
	if err != nil || len(vols) != 0 {
		t.Fatalf("the team's volumes after a postgres-17 sandbox: %+v %v", vols, err)
	}
	d, err := c.c.CreateDatabase(ctx, v1.DatabaseSpec{Name: "kept"})
	if err != nil {
		t.Fatalf("create database: %v", err)
	}
	count := func() (string, error) {
		r, err := c.c.QueryDatabase(ctx, d.ID, "select count(*) from t")
		if err != nil {
			return "", err
		}
		if len(r.Rows) != 1 {
			return "", fmt.Errorf("rows %v", r.Rows)
		}
		return fmt.Sprint(r.Rows[0]), nil
	}
	if _, err := c.c.QueryDatabase(ctx, d.ID, "create table t (id int primary key)"); err != nil {
		t.Fatal(err)
	}
	for i, which := range []string{"agent", "server"} {
		if _, err := c.c.QueryDatabase(ctx, d.ID, fmt.Sprintf("insert into t values (%d)", i+1)); err != nil {
			t.Fatalf("insert before the %s's kill: %v", which, err)
		}
		c.proc(which).kill()
		if which == "server" {
			c.startServer()
		} else {
			c.startAgent()
		}
		want := fmt.Sprint([]any{fmt.Sprint(i + 1)})
		c.eventually("the committed rows after a SIGKILL of the "+which, 5*time.Minute, func() error {
			got, err := count()
			if err == nil && got != want {
				return fmt.Errorf("count %s, want %s", got, want)
			}
			return err
		})
	}

	// Its VM dies (QEMU killed, the host lives), then its next VM is killed through the sandbox
	// API: each time the database gets a new VM on its own volume, with every committed row.
	vmOf := func() client.Sandbox {
		t.Helper()
		list, _, err := c.c.ListSandboxes(ctx, client.ListOptions{Metadata: map[string]string{"pandastack.database": d.ID}})
		if err != nil || len(list) != 1 {
			t.Fatalf("the database's running VM: %+v %v", list, err)
		}
		return list[0]
	}
	for i, how := range []string{"its QEMU killed", "its sandbox killed"} {
		dead := vmOf()
		if _, err := c.c.QueryDatabase(ctx, d.ID, fmt.Sprintf("insert into t values (%d)", 10+i)); err != nil {
			t.Fatalf("insert before %s: %v", how, err)
		}
		if i == 0 {
			killed := false
			for name, pid := range c.vmms() {
				if strings.Contains(name, dead.ID) {
					killed = syscall.Kill(pid, syscall.SIGKILL) == nil
				}
			}
			if !killed {
				t.Fatalf("no VMM of %s among %v", dead.ID, c.vmms())
			}
		} else if err := c.c.KillSandbox(ctx, dead.ID); err != nil {
			t.Fatal(err)
		}
		want, died := fmt.Sprint([]any{fmt.Sprint(3 + i)}), time.Now()
		c.eventually("the committed rows after "+how, 5*time.Minute, func() error {
			got, err := count()
			if err == nil && got != want {
				return fmt.Errorf("count %s, want %s", got, want)
			}
			return err
		})
		t.Logf("%s: the rows answered again after %.1f s", how, time.Since(died).Seconds())
		if now := vmOf(); now.ID == dead.ID {
			t.Fatalf("the database is still on VM %s after %s", dead.ID, how)
		}
	}
	vols, err = c.c.ListVolumes(ctx)
	if err != nil || len(vols) != 0 {
		t.Fatalf("the team's volumes after the database's new VMs: %+v %v", vols, err)
	}
	if err := c.c.DeleteDatabase(ctx, d.ID); err != nil {
		t.Fatal(err)
	}
}
