package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/client"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// TestDatabaseSurvivesKills: rows a database acknowledged (the broker answered the INSERT) are
// there after its host agent is SIGKILLed and started again (the new agent adopts the running
// VM), and after the server is SIGKILLed and started again.
func TestDatabaseSurvivesKills(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	baked := c.mustCreate(ctx, client.CreateRequest{Template: "postgres-17"}) // bakes the template
	// That sandbox got a copy of the template's 3 GiB data volume, its own (the template's volume
	// is ephemeral): the kill deletes it, and the host's 6 GiB pool has room again for one such
	// copy besides the template: the database's. The team never had a volume.
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
}
