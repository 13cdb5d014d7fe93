package api

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

func (e *env) usage(key string) v1.Usage {
	e.t.Helper()
	var u v1.Usage
	if err := json.Unmarshal(e.mustStatus(e.do("GET", "/v1/usage", key, nil), 200).body, &u); err != nil {
		e.t.Fatal(err)
	}
	return u
}

func limitOf(it v1.UsageItem) int64 {
	if it.Limit == nil {
		return 0
	}
	return *it.Limit
}

// TestQuotas: the server's default limits hold for every team, an admin key overrides them per
// team, a create or fork over a limit is 429 quota_exceeded naming it and the use, and
// GET /v1/usage shows use against limits.
func TestQuotas(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Quota = Quota{Sandboxes: 3, VCPUs: 100} })
	u := e.usage(e.admin)
	if u.Sandboxes.Used != 0 || limitOf(u.Sandboxes) != 3 || limitOf(u.VCPUs) != 100 || u.MemoryMiB.Limit != nil {
		t.Fatalf("fresh usage: %+v", u)
	}
	a := e.create(e.admin, map[string]any{"template": "base"})
	e.create(e.admin, map[string]any{"template": "base"})
	u = e.usage(e.admin)
	if u.Sandboxes.Used != 2 || u.VCPUs.Used < 2 || u.MemoryMiB.Used < 2*256 {
		t.Fatalf("usage after two creates: %+v", u)
	}
	// A fork of two would make four.
	r := e.do("POST", "/v1/sandboxes/"+a.ID+"/fork", e.admin, map[string]int{"count": 2})
	e.wantErr(r, 429, "quota_exceeded", "sandboxes limit 3, in use 2")
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+a.ID+"/fork", e.admin, nil), 201)
	r = e.do("POST", "/v1/sandboxes", e.admin, map[string]any{"template": "base"})
	e.wantErr(r, 429, "quota_exceeded", "sandboxes limit 3, in use 3")
	// Killing one frees room.
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+a.ID, e.admin, nil), 204)
	e.create(e.admin, map[string]any{"template": "base"})

	// Another team has its own count under the same default; an admin raises its limit.
	tm := e.mustStatus(e.do("POST", "/v1/teams", e.admin, map[string]string{"name": "beta"}), 201).json(t)
	beta, teamID := tm["key"].(map[string]any)["key"].(string), tm["team"].(map[string]any)["id"].(string)
	if u := e.usage(beta); u.Sandboxes.Used != 0 || u.TeamID != teamID {
		t.Fatalf("beta usage: %+v", u)
	}
	e.mustStatus(e.do("PUT", "/v1/teams/"+teamID+"/quota", beta, map[string]any{"sandboxes": 100}), 403)
	e.mustStatus(e.do("PUT", "/v1/teams/"+teamID+"/quota", e.admin, map[string]any{"sandboxes": -1}), 400)
	e.mustStatus(e.do("PUT", "/v1/teams/team_nope/quota", e.admin, map[string]any{}), 404)
	var set v1.Usage
	json.Unmarshal(e.mustStatus(e.do("PUT", "/v1/teams/"+teamID+"/quota", e.admin,
		map[string]any{"sandboxes": 1, "vcpus": 0, "memory_mib": 1 << 20}), 200).body, &set)
	if limitOf(set.Sandboxes) != 1 || set.VCPUs.Limit != nil || limitOf(set.MemoryMiB) != 1<<20 {
		t.Fatalf("set quota: %+v", set)
	}
	e.create(beta, map[string]any{"template": "base"})
	if r := e.do("POST", "/v1/sandboxes", beta, map[string]any{"template": "base"}); r.status != 429 ||
		!strings.Contains(r.errMessage(), "sandboxes limit 1, in use 1") {
		t.Fatalf("beta over its own quota: %d %s", r.status, r.body)
	}
	// Memory: a team whose limit is below one sandbox's size can make none.
	g, _, gamma, err := auth.CreateTeam(context.Background(), e.st, "gamma")
	if err != nil {
		t.Fatal(err)
	}
	gid := g.ID
	e.mustStatus(e.do("PUT", "/v1/teams/"+gid+"/quota", e.admin, map[string]any{"memory_mib": 1}), 200)
	if r := e.do("POST", "/v1/sandboxes", gamma, map[string]any{"template": "base"}); r.status != 429 ||
		!strings.Contains(r.errMessage(), "memory_mib limit 1, in use 0") {
		t.Fatalf("gamma over memory: %d %s", r.status, r.body)
	}

	// Volumes: count and size.
	e.mustStatus(e.do("PUT", "/v1/teams/"+gid+"/quota", e.admin, map[string]any{"volumes": 2, "volume_mib": 300}), 200)
	vol := e.mustStatus(e.do("POST", "/v1/volumes", gamma, map[string]any{"size_mib": 100}), 201).json(t)
	if r := e.do("POST", "/v1/volumes", gamma, map[string]any{"size_mib": 250}); r.status != 429 ||
		!strings.Contains(r.errMessage(), "volume_mib limit 300, in use 100, this call needs 250 more") {
		t.Fatalf("volume over size quota: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/volumes/"+vol["id"].(string)+"/resize", gamma, map[string]any{"size_mib": 400}); r.status != 429 ||
		!strings.Contains(r.errMessage(), "volume_mib limit 300, in use 100, this call needs 300 more") {
		t.Fatalf("resize over size quota: %d %s", r.status, r.body)
	}
	e.mustStatus(e.do("POST", "/v1/volumes", gamma, map[string]any{"size_mib": 100}), 201)
	if r := e.do("POST", "/v1/volumes", gamma, map[string]any{"size_mib": 10}); r.status != 429 ||
		!strings.Contains(r.errMessage(), "volumes limit 2, in use 2") {
		t.Fatalf("volume over count quota: %d %s", r.status, r.body)
	}
	if u := e.usage(gamma); u.Volumes.Used != 2 || u.VolumeMiB.Used != 200 || limitOf(u.VolumeMiB) != 300 {
		t.Fatalf("gamma usage: %+v", u)
	}
}

// TestQuotaRace: creates racing for a team's last slots cannot all pass the check; each slot goes
// to one of them (the check and the hold happen under the team's lock), and the holds are gone
// once the creates are recorded.
func TestQuotaRace(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Quota = Quota{Sandboxes: 3} })
	e.agent.SetCreateDelay(200 * time.Millisecond) // every create is in flight at once
	const n = 8
	count := race(n, func(int) int {
		return e.do("POST", "/v1/sandboxes", e.admin, map[string]any{"template": "base"}).status
	})
	if count[201] != 3 || count[429] != n-3 {
		t.Fatalf("%d racing creates under a limit of 3: %v, want 3 created and %d refused", n, count, n-3)
	}
	u := e.usage(e.admin)
	if u.Sandboxes.Used != 3 {
		t.Fatalf("use after the race: %+v", u.Sandboxes)
	}
	if h, err := e.st.HeldQuota(context.Background(), u.TeamID); err != nil || h != (store.QuotaAmount{}) {
		t.Fatalf("holds left after the creates: %+v %v", h, err)
	}
}

// TestServiceQuotas: databases, apps, functions and snapshot sizes have limits too; a create
// over one is 429 quota_exceeded naming it and the use, before any work starts, and
// GET /v1/usage counts them.
func TestServiceQuotas(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Quota = Quota{Databases: 1, Apps: 1, Functions: 1, SnapshotMiB: 256} })
	ctx := context.Background()
	team := e.usage(e.admin).TeamID
	refused := func(what string, r resp, want string) {
		t.Helper()
		if r.status != 429 || r.errCode() != "quota_exceeded" || !strings.Contains(r.errMessage(), want) {
			t.Fatalf("%s over quota: %d %s, want 429 naming %q", what, r.status, r.body, want)
		}
	}

	e.mustStatus(e.do("POST", "/v1/apps", e.admin, map[string]any{"name": "one"}), 201)
	refused("app", e.do("POST", "/v1/apps", e.admin, map[string]any{"name": "two"}), "apps limit 1, in use 1")

	// A database and a function recorded as a create would record them (their bakes need VMs).
	if _, err := e.st.CreateDatabase(ctx, store.Database{ID: "db_1", TeamID: team, Name: "one", Version: "17", SandboxID: "sb_x", State: "running"}); err != nil {
		t.Fatal(err)
	}
	refused("database", e.do("POST", "/v1/databases", e.admin, map[string]any{"name": "two"}), "databases limit 1, in use 1")
	if _, _, err := e.st.AddFunctionVersion(ctx, "fn_1", "one", store.FunctionVersion{TeamID: team, Runtime: "python3", Handler: "main.handler"}); err != nil {
		t.Fatal(err)
	}
	body, ct := deployBody(t, map[string]any{"name": "two", "runtime": "python3", "handler": "main.handler"},
		zipBundle(t, map[string]string{"main.py": "def handler(e, c):\n    return e\n"}))
	refused("function", e.do("POST", "/v1/functions", e.admin, body, "Content-Type", ct), "functions limit 1, in use 1")

	// A snapshot holds its sandbox's memory size until taken; the fake agent's take 4 KiB (1 MiB
	// counted), so a second no longer fits beside the first.
	sb := e.create(e.admin, map[string]any{"template": "base"})
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", e.admin, nil), 201)
	refused("snapshot", e.do("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", e.admin, nil), "snapshot_mib limit 256, in use 1, this call needs 256 more")

	u := e.usage(e.admin)
	if u.Apps.Used != 1 || u.Databases.Used != 1 || u.Functions.Used != 1 || u.SnapshotMiB.Used != 1 || limitOf(u.SnapshotMiB) != 256 || limitOf(u.Apps) != 1 {
		t.Fatalf("usage: %+v", u)
	}
	// An override lifts one limit and keeps the others' defaults.
	var set v1.Usage
	json.Unmarshal(e.mustStatus(e.do("PUT", "/v1/teams/"+team+"/quota", e.admin, map[string]any{"apps": 0, "snapshot_mib": 1000}), 200).body, &set)
	if set.Apps.Limit != nil || limitOf(set.SnapshotMiB) != 1000 || limitOf(set.Databases) != 1 {
		t.Fatalf("set quota: %+v", set)
	}
	e.mustStatus(e.do("POST", "/v1/apps", e.admin, map[string]any{"name": "two"}), 201)
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", e.admin, nil), 201)
	if h, err := e.st.HeldQuota(ctx, team); err != nil || h != (store.QuotaAmount{}) {
		t.Fatalf("holds left: %+v %v", h, err)
	}
}

// TestServiceQuotaRace: app creates racing for a team's last slots go through the same holds as
// sandboxes: exactly the limit's count is made.
func TestServiceQuotaRace(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Quota = Quota{Apps: 3} })
	const n = 8
	count := race(n, func(i int) int {
		return e.do("POST", "/v1/apps", e.admin, map[string]any{"name": "race" + strconv.Itoa(i)}).status
	})
	if count[201] != 3 || count[429] != n-3 {
		t.Fatalf("%d racing app creates under a limit of 3: %v", n, count)
	}
	if u := e.usage(e.admin); u.Apps.Used != 3 {
		t.Fatalf("apps in use after the race: %+v", u.Apps)
	}
}

// race runs call n times at once and counts the statuses they answered.
func race(n int, call func(i int) int) map[int]int {
	codes := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { codes <- call(i) })
	}
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	return count
}
