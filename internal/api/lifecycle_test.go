package api

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Fork, snapshots, hibernate and wake through the public API, against the fakeagent test double
// (its sandboxes' "memory" is a counter the toy command `inc` bumps; forks, snapshots and
// hibernation carry it like the real agent carries guest memory).

func (e *env) inc(key, id string) string {
	e.t.Helper()
	r := e.mustStatus(e.do("POST", "/v1/sandboxes/"+id+"/exec", key, map[string]any{"cmd": "inc"}), 200).json(e.t)
	return strings.TrimSpace(r["stdout"].(string))
}

func (e *env) forkOf(key, id string, body any) []SandboxView {
	e.t.Helper()
	r := e.mustStatus(e.do("POST", "/v1/sandboxes/"+id+"/fork", key, body), 201)
	return decodeAs[struct{ Sandboxes []SandboxView }](e.t, r).Sandboxes
}

func (e *env) get(key, id string) SandboxView {
	e.t.Helper()
	var v SandboxView
	if err := json.Unmarshal(e.mustStatus(e.do("GET", "/v1/sandboxes/"+id, key, nil), 200).body, &v); err != nil {
		e.t.Fatal(err)
	}
	return v
}

func (e *env) record(id string) store.Sandbox {
	e.t.Helper()
	sb, err := e.st.GetSandbox(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return sb
}

func lifetime(t *testing.T, v SandboxView) time.Duration {
	t.Helper()
	c, err1 := time.Parse(time.RFC3339, v.CreatedAt)
	x, err2 := time.Parse(time.RFC3339, v.ExpiresAt)
	if err1 != nil || err2 != nil {
		t.Fatalf("timestamps of %+v", v)
	}
	return x.Sub(c)
}

func TestFork(t *testing.T) {
	e := newEnv(t)
	k := e.admin
	parent := e.create(k, map[string]any{"template": "base", "ttl_seconds": 900, "metadata": map[string]string{"task": "warm"},
		"env": map[string]string{"GREETING": "hello"}})
	for i := 0; i < 3; i++ {
		e.inc(k, parent.ID)
	}
	e.mustStatus(e.do("PUT", "/v1/sandboxes/"+parent.ID+"/files?path=/data/before.txt", k, "before the fork"), 200)
	e.clock.Add(10 * time.Second)

	kids := e.forkOf(k, parent.ID, map[string]int{"count": 3})
	if len(kids) != 3 {
		t.Fatalf("children %+v", kids)
	}
	seen := map[string]bool{}
	for i, c := range kids {
		if seen[c.ID] || c.ID == parent.ID || c.State != "running" || c.Host != parent.Host || c.Template != "base" ||
			c.ForkOf != parent.ID || !reflect.DeepEqual(c.Metadata, parent.Metadata) {
			t.Fatalf("child %d: %+v", i, c)
		}
		seen[c.ID] = true
		// A fresh TTL from the parent's policy (its ttl_seconds), counted from the fork.
		if d := lifetime(t, c); d != 900*time.Second {
			t.Fatalf("child ttl %v", d)
		}
		if c.CreatedAt == parent.CreatedAt {
			t.Fatalf("child created_at is the parent's")
		}
		// Each child continues from the parent's memory, then goes its own way.
		for j := 0; j <= i; j++ {
			if got, want := e.inc(k, c.ID), fmt.Sprint(4+j); got != want {
				t.Fatalf("child %d inc %d: %s, want %s", i, j, got, want)
			}
		}
		if b := e.mustStatus(e.do("GET", "/v1/sandboxes/"+c.ID+"/files?path=/data/before.txt", k, nil), 200).body; string(b) != "before the fork" {
			t.Fatalf("child %d file %q", i, b)
		}
		ex := e.mustStatus(e.do("POST", "/v1/sandboxes/"+c.ID+"/exec", k, map[string]any{"cmd": "env GREETING"}), 200).json(t)
		if ex["stdout"] != "hello\n" {
			t.Fatalf("child env %v", ex)
		}
		if got := e.get(k, c.ID); got.ForkOf != parent.ID || got.State != "running" {
			t.Fatalf("get child %+v", got)
		}
	}
	if got := e.inc(k, parent.ID); got != "4" {
		t.Fatalf("parent after fork: %s", got)
	}
	// Children are the parent's team's, found by its metadata.
	var l struct{ Sandboxes []SandboxView }
	json.Unmarshal(e.mustStatus(e.do("GET", "/v1/sandboxes?metadata.task=warm", k, nil), 200).body, &l)
	if len(l.Sandboxes) != 4 {
		t.Fatalf("list by metadata: %d", len(l.Sandboxes))
	}

	// No body means one child; a parent with the default TTL gives its children the default.
	plain := e.create(k, map[string]any{"template": "base"})
	one := e.forkOf(k, plain.ID, nil)
	if len(one) != 1 || lifetime(t, one[0]) != DefaultTTL {
		t.Fatalf("fork without a body: %+v", one)
	}
	// A TTL refresh changes the policy the next children get.
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+plain.ID+"/ttl", k, map[string]int{"ttl_seconds": 1200}), 200)
	if again := e.forkOf(k, plain.ID, `{}`); lifetime(t, again[0]) != 1200*time.Second {
		t.Fatalf("fork after a ttl refresh: %v", lifetime(t, again[0]))
	}

	// Bad input: 400 naming the limit; nothing is made, here or on the host.
	beforeRows, beforeHost := e.sandboxCount(), len(e.agent.All())
	for _, body := range []any{`{"count": 0}`, `{"count": 17}`, `{"count": -1}`, `{"count": "3"}`, `{"count": 1.5}`, `{"cnt": 2}`, `[1]`} {
		r := e.do("POST", "/v1/sandboxes/"+parent.ID+"/fork", k, body)
		if r.status != 400 || r.errCode() != "invalid_request" {
			t.Errorf("fork %v: %d %s", body, r.status, r.body)
		}
		if s, _ := body.(string); strings.Contains(s, `"count": 0`) || strings.Contains(s, "17") {
			if !strings.Contains(r.errMessage(), "between 1 and 16") {
				t.Errorf("fork %v: message does not name the maximum: %s", body, r.body)
			}
		}
	}
	// A killed parent: 409. A lost one: 409.
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+plain.ID, k, nil), 204)
	r := e.mustStatus(e.do("POST", "/v1/sandboxes/"+plain.ID+"/fork", k, `{"count": 2}`), 409)
	if r.errCode() != "conflict" || !strings.Contains(r.errMessage(), "killed") {
		t.Fatalf("fork of killed: %s", r.body)
	}
	if n := e.sandboxCount(); n != beforeRows {
		t.Fatalf("bad forks recorded sandboxes: %d -> %d", beforeRows, n)
	}
	if n := len(e.agent.All()); n != beforeHost-1 { // the kill
		t.Fatalf("bad forks made sandboxes on the host: %d -> %d", beforeHost, n)
	}

	// Children must fit on the parent's host.
	e.agent.SetSlots(int64(len(e.agent.All()) + 2))
	if err := e.sched.PollStatic(context.Background()); err != nil {
		t.Fatal(err)
	}
	r = e.do("POST", "/v1/sandboxes/"+parent.ID+"/fork", k, `{"count": 3}`)
	e.wantErr(r, 503, "capacity", "")
	if got := e.forkOf(k, parent.ID, `{"count": 2}`); len(got) != 2 {
		t.Fatalf("fork that fits: %+v", got)
	}
}

func TestFailedForkLeavesNoChildren(t *testing.T) {
	e := newEnv(t)
	k := e.admin
	parent := e.create(k, map[string]any{"template": "base"})
	e.inc(k, parent.ID)
	rows := e.sandboxCount()

	// The host fails the fork (it makes all children or none).
	e.agent.FailForks(&agentclient.Error{Status: 500, Code: "internal", Message: "restore exploded"})
	r := e.do("POST", "/v1/sandboxes/"+parent.ID+"/fork", k, `{"count": 3}`)
	e.wantErr(r, 500, "internal", "restore exploded")
	e.agent.FailForks(&agentclient.Error{Status: 503, Code: "capacity", Message: "no room for the children"})
	e.wantErr(e.do("POST", "/v1/sandboxes/"+parent.ID+"/fork", k, `{"count": 3}`), 503, "capacity", "")
	e.agent.FailForks(nil)

	// The host makes the children but recording them fails (here: one child's id is taken in the
	// store by a killed sandbox the host has forgotten): every child is killed, none is recorded.
	gone := e.create(k, map[string]any{"template": "base"})
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+gone.ID, k, nil), 204)
	rows++
	e.agent.ForkIDs("sb_freshchild", gone.ID)
	r = e.do("POST", "/v1/sandboxes/"+parent.ID+"/fork", k, `{"count": 2}`)
	e.wantErr(r, 500, "internal", "request id")
	if _, err := e.st.GetSandbox(context.Background(), "sb_freshchild"); err != store.ErrNotFound {
		t.Fatalf("half-made child recorded: %v", err)
	}
	if n := e.sandboxCount(); n != rows {
		t.Fatalf("rows %d, want %d", n, rows)
	}
	if all := e.agent.All(); !reflect.DeepEqual(all, []string{parent.ID}) {
		t.Fatalf("host keeps %v, want only the parent", all)
	}
	// The parent is unharmed.
	if got := e.inc(k, parent.ID); got != "2" {
		t.Fatalf("parent after failed forks: %s", got)
	}
	if got := e.get(k, parent.ID); got.State != "running" {
		t.Fatalf("parent %+v", got)
	}
}

func TestSnapshots(t *testing.T) {
	e := newEnv(t)
	k := e.admin
	sb := e.create(k, map[string]any{"template": "base"})
	e.inc(k, sb.ID)
	e.inc(k, sb.ID)
	e.mustStatus(e.do("PUT", "/v1/sandboxes/"+sb.ID+"/files?path=/data/state.txt", k, "saved"), 200)

	r := e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", k, nil), 201)
	var raw map[string]any
	json.Unmarshal(r.body, &raw)
	keys := make([]string, 0, len(raw))
	for key := range raw {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	if !reflect.DeepEqual(keys, []string{"created_at", "id", "published", "sandbox_id", "size_bytes", "template"}) {
		t.Fatalf("snapshot object %s", r.body)
	}
	var snap SnapshotView
	json.Unmarshal(r.body, &snap)
	if !strings.HasPrefix(snap.ID, "snap_") || snap.SandboxID != sb.ID || snap.Template != "base" || snap.SizeBytes <= 0 ||
		!strings.HasSuffix(snap.CreatedAt, "Z") {
		t.Fatalf("snapshot %+v", snap)
	}
	if got := e.inc(k, sb.ID); got != "3" {
		t.Fatalf("sandbox after its snapshot: %s", got)
	}
	var got SnapshotView
	json.Unmarshal(e.mustStatus(e.do("GET", "/v1/snapshots/"+snap.ID, k, nil), 200).body, &got)
	if got != snap {
		t.Fatalf("get %+v, want %+v", got, snap)
	}

	// The snapshot outlives its sandbox and seeds new ones, on the host that keeps it, even when
	// another host is emptier.
	b := e.newHost("host-b", "base", "code-interpreter")
	e.join(b)
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+sb.ID, k, nil), 204)
	seeded := e.create(k, map[string]any{"snapshot_id": snap.ID, "ttl_seconds": 120, "metadata": map[string]string{"from": "snap"}})
	if seeded.Host != "host-a" || seeded.Template != "base" || seeded.SnapshotID != snap.ID || seeded.Metadata["from"] != "snap" ||
		lifetime(t, seeded) != 120*time.Second {
		t.Fatalf("created from snapshot: %+v", seeded)
	}
	if got := e.inc(k, seeded.ID); got != "3" {
		t.Fatalf("from snapshot: counter %s, want 3", got)
	}
	if body := e.mustStatus(e.do("GET", "/v1/sandboxes/"+seeded.ID+"/files?path=/data/state.txt", k, nil), 200).body; string(body) != "saved" {
		t.Fatalf("from snapshot: file %q", body)
	}
	// template may be given if it is the snapshot's.
	e.create(k, map[string]any{"snapshot_id": snap.ID, "template": "base"})
	r = e.mustStatus(e.do("POST", "/v1/sandboxes", k, map[string]any{"snapshot_id": snap.ID, "template": "code-interpreter"}), 400)
	if !strings.Contains(r.errMessage(), "is of template") {
		t.Fatalf("template mismatch: %s", r.body)
	}
	// The snapshot's host full, or down: 503, nothing made elsewhere.
	e.agent.SetSlots(int64(len(e.agent.All())))
	e.sched.PollStatic(context.Background())
	r = e.mustStatus(e.do("POST", "/v1/sandboxes", k, map[string]any{"snapshot_id": snap.ID}), 503)
	if r.errCode() != "capacity" || !strings.Contains(r.errMessage(), "host-a") {
		t.Fatalf("snapshot host full: %s", r.body)
	}
	e.agent.SetSlots(8)
	e.sched.PollStatic(context.Background())
	if creates, _ := b.Counts(); creates != 0 {
		t.Fatalf("a create from a snapshot went to another host: %d", creates)
	}

	// Snapshot of a killed sandbox: 409; bad bodies: 400.
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", k, nil), 409)
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+seeded.ID+"/snapshots", k, `{"name": "x"}`), 400)

	// List: newest first, paged, filterable by sandbox.
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+seeded.ID+"/snapshots", k, `{}`), 201)
	e.clock.Add(time.Second)
	third := e.mustStatus(e.do("POST", "/v1/sandboxes/"+seeded.ID+"/snapshots", k, nil), 201).json(t)["id"].(string)
	list := func(q string) ([]string, *string) {
		t.Helper()
		return e.listIDs(k, "/v1/snapshots"+q, "snapshots")
	}
	if ids, next := list(""); len(ids) != 3 || ids[0] != third || next != nil {
		t.Fatalf("list %v %v", ids, next)
	}
	if ids, _ := list("?sandbox_id=" + seeded.ID); len(ids) != 2 {
		t.Fatalf("list by sandbox %v", ids)
	}
	p1, next := list("?limit=2")
	if len(p1) != 2 || next == nil {
		t.Fatalf("page 1 %v %v", p1, next)
	}
	if p2, end := list("?limit=2&cursor=" + *next); len(p2) != 1 || end != nil || p2[0] == p1[0] || p2[0] == p1[1] {
		t.Fatalf("page 2 %v %v", p2, end)
	}
	for _, q := range []string{"?limit=0", "?cursor=%21", "?colour=red"} {
		if r := e.do("GET", "/v1/snapshots"+q, k, nil); r.status != 400 {
			t.Errorf("list %s: %d %s", q, r.status, r.body)
		}
	}

	// Delete: 204, then gone (404, not listed, not usable), idempotent; the host drops it; a
	// sandbox made from it keeps working.
	e.mustStatus(e.do("DELETE", "/v1/snapshots/"+snap.ID, k, nil), 204)
	e.mustStatus(e.do("DELETE", "/v1/snapshots/"+snap.ID, k, nil), 204)
	e.mustStatus(e.do("GET", "/v1/snapshots/"+snap.ID, k, nil), 404)
	r = e.mustStatus(e.do("POST", "/v1/sandboxes", k, map[string]any{"snapshot_id": snap.ID}), 404)
	if r.errMessage() != "snapshot "+snap.ID+" not found" {
		t.Fatalf("create from deleted: %s", r.body)
	}
	if ids, _ := list(""); len(ids) != 2 {
		t.Fatalf("deleted snapshot listed: %v", ids)
	}
	for _, id := range e.agent.Snapshots() {
		if id == snap.ID {
			t.Fatal("the host still keeps the deleted snapshot")
		}
	}
	if got := e.inc(k, seeded.ID); got != "4" {
		t.Fatalf("sandbox from a deleted snapshot: %s", got)
	}
	e.mustStatus(e.do("DELETE", "/v1/snapshots/snap_nope", k, nil), 404)
	if !strings.Contains(e.metricsText(), "pandastack_snapshots 2") {
		t.Fatal("snapshot gauge")
	}
}

func TestSnapshotDeleteReachesADownHostLater(t *testing.T) {
	e := newEnv(t)
	sb := e.create(e.admin, map[string]any{"template": "base"})
	snap := e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", e.admin, nil), 201).json(t)["id"].(string)
	if err := e.st.MarkHostDown(context.Background(), "host-a", "test"); err != nil {
		t.Fatal(err)
	}
	e.mustStatus(e.do("DELETE", "/v1/snapshots/"+snap, e.admin, nil), 204)
	if got := e.agent.Snapshots(); len(got) != 1 {
		t.Fatalf("host was reached while down: %v", got)
	}
	// The host comes back: its reconcile deletes what was deleted meanwhile.
	if err := e.sched.PollStatic(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := e.agent.Snapshots(); len(got) != 0 {
		t.Fatalf("host still keeps %v", got)
	}
}

func TestLifecycleTeamIsolation(t *testing.T) {
	e := newEnv(t)
	a := e.admin
	b := e.mustStatus(e.do("POST", "/v1/teams", a, map[string]string{"name": "beta"}), 201).json(t)["key"].(map[string]any)["key"].(string)
	sbA := e.create(a, map[string]any{"template": "base"})
	snapA := e.mustStatus(e.do("POST", "/v1/sandboxes/"+sbA.ID+"/snapshots", a, nil), 201).json(t)["id"].(string)
	rows, onHost := e.sandboxCount(), len(e.agent.All())

	same := func(what string, theirs, absent resp, theirID, absentID string) {
		t.Helper()
		if theirs.status != 404 || absent.status != 404 || theirs.errCode() != absent.errCode() ||
			strings.ReplaceAll(theirs.errMessage(), theirID, "ID") != strings.ReplaceAll(absent.errMessage(), absentID, "ID") {
			t.Errorf("%s: another team's answered %d %s; a missing one %d %s", what, theirs.status, theirs.body, absent.status, absent.body)
		}
	}
	missingSnap := "snap_doesnotexist0000"
	same("get snapshot", e.do("GET", "/v1/snapshots/"+snapA, b, nil), e.do("GET", "/v1/snapshots/"+missingSnap, b, nil), snapA, missingSnap)
	same("delete snapshot", e.do("DELETE", "/v1/snapshots/"+snapA, b, nil), e.do("DELETE", "/v1/snapshots/"+missingSnap, b, nil), snapA, missingSnap)
	same("create from snapshot", e.do("POST", "/v1/sandboxes", b, map[string]any{"snapshot_id": snapA}),
		e.do("POST", "/v1/sandboxes", b, map[string]any{"snapshot_id": missingSnap}), snapA, missingSnap)
	missing := "sb_doesnotexist0000000"
	for _, sub := range []string{"/fork", "/snapshots", "/hibernate", "/wake"} {
		same(sub, e.do("POST", "/v1/sandboxes/"+sbA.ID+sub, b, `{}`), e.do("POST", "/v1/sandboxes/"+missing+sub, b, `{}`), sbA.ID, missing)
	}
	var l struct{ Snapshots []SnapshotView }
	json.Unmarshal(e.mustStatus(e.do("GET", "/v1/snapshots", b, nil), 200).body, &l)
	if len(l.Snapshots) != 0 {
		t.Fatalf("team B lists team A's snapshots: %v", l.Snapshots)
	}
	if e.sandboxCount() != rows || len(e.agent.All()) != onHost || e.agent.State(sbA.ID) != "running" {
		t.Fatal("team B's calls changed team A's things")
	}
	e.mustStatus(e.do("GET", "/v1/snapshots/"+snapA, a, nil), 200)
}

func TestHibernateAndWake(t *testing.T) {
	e := newEnv(t)
	k := e.admin
	sb := e.create(k, map[string]any{"template": "base", "metadata": map[string]string{"m": "1"}})
	e.inc(k, sb.ID)

	v := e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/hibernate", k, nil), 200).json(t)
	if v["state"] != "hibernated" || v["id"] != sb.ID || e.agent.State(sb.ID) != "hibernated" {
		t.Fatalf("hibernate: %v (host: %s)", v, e.agent.State(sb.ID))
	}
	if got := e.get(k, sb.ID); got.State != "hibernated" || got.ExpiresAt != sb.ExpiresAt {
		t.Fatalf("get hibernated: %+v", got)
	}
	var l struct{ Sandboxes []SandboxView }
	json.Unmarshal(e.mustStatus(e.do("GET", "/v1/sandboxes?state=hibernated", k, nil), 200).body, &l)
	if len(l.Sandboxes) != 1 || l.Sandboxes[0].ID != sb.ID {
		t.Fatalf("list hibernated: %+v", l.Sandboxes)
	}
	// Hibernating again is fine.
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/hibernate", k, `{}`), 200)

	// Any call wakes it, memory intact; the record follows.
	if got := e.inc(k, sb.ID); got != "2" {
		t.Fatalf("exec on hibernated: %s", got)
	}
	if rec := e.record(sb.ID); rec.State != store.StateRunning {
		t.Fatalf("after exec: %s", rec.State)
	}
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/hibernate", k, nil), 200)
	e.mustStatus(e.do("GET", "/v1/sandboxes/"+sb.ID+"/files/list?path=/", k, nil), 200)
	if rec := e.record(sb.ID); rec.State != store.StateRunning || e.agent.State(sb.ID) != "running" {
		t.Fatalf("after a files call: %s / %s", rec.State, e.agent.State(sb.ID))
	}
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/hibernate", k, nil), 200)
	w := e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/wake", k, nil), 200).json(t)
	if w["state"] != "running" || e.record(sb.ID).State != store.StateRunning {
		t.Fatalf("wake: %v", w)
	}
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/wake", k, nil), 200) // waking a running one is fine
	if got := e.inc(k, sb.ID); got != "3" {
		t.Fatalf("after wake: %s", got)
	}

	// Fork and snapshot of a hibernated sandbox wake it too.
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/hibernate", k, nil), 200)
	kids := e.forkOf(k, sb.ID, `{"count": 1}`)
	if e.record(sb.ID).State != store.StateRunning || e.inc(k, kids[0].ID) != "4" {
		t.Fatalf("fork of hibernated: parent %s", e.record(sb.ID).State)
	}
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/hibernate", k, nil), 200)
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", k, nil), 201)
	if e.record(sb.ID).State != store.StateRunning {
		t.Fatal("snapshot of hibernated: not recorded running")
	}

	// TTL keeps counting while hibernated: it can be refreshed, and the reaper kills it (the
	// host frees its files).
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/hibernate", k, nil), 200)
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/ttl", k, `{"ttl_seconds": 30}`), 200)
	e.clock.Add(31 * time.Second)
	if n, err := e.srv.ReapOnce(context.Background()); err != nil || n < 1 {
		t.Fatalf("reap: %d %v", n, err)
	}
	if got := e.get(k, sb.ID); got.State != "killed" || e.agent.State(sb.ID) != "" {
		t.Fatalf("hibernated sandbox past its ttl: %+v (host: %q)", got, e.agent.State(sb.ID))
	}
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/hibernate", k, nil), 409)
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/wake", k, nil), 409)

	// Kill of a hibernated sandbox.
	other := e.create(k, map[string]any{"template": "base"})
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+other.ID+"/hibernate", k, nil), 200)
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+other.ID, k, nil), 204)
	if e.agent.State(other.ID) != "" || e.get(k, other.ID).State != "killed" {
		t.Fatal("kill of a hibernated sandbox")
	}
}

func TestHostHibernatesByItself(t *testing.T) {
	e := newEnv(t)
	k := e.admin
	sb := e.create(k, map[string]any{"template": "base"})
	e.inc(k, sb.ID)

	// The host hibernates an idle sandbox (--idle-hibernate): GET asks the host and says so.
	e.agent.Hibernate(sb.ID)
	if got := e.get(k, sb.ID); got.State != "hibernated" {
		t.Fatalf("get after idle hibernation: %+v", got)
	}
	if e.record(sb.ID).State != store.StateHibernated {
		t.Fatal("GET did not record what the host said")
	}
	// The next call wakes it; the record follows.
	if got := e.inc(k, sb.ID); got != "2" {
		t.Fatalf("exec wakes: %s", got)
	}
	if e.record(sb.ID).State != store.StateRunning {
		t.Fatal("not recorded running after the call that woke it")
	}

	// The reconcile (every minute, and when a host comes back) copies states for lists.
	e.agent.Hibernate(sb.ID)
	if err := e.sched.Reconcile(context.Background(), "host-a"); err != nil {
		t.Fatal(err)
	}
	var l struct{ Sandboxes []SandboxView }
	json.Unmarshal(e.mustStatus(e.do("GET", "/v1/sandboxes?state=hibernated", k, nil), 200).body, &l)
	if len(l.Sandboxes) != 1 {
		t.Fatalf("list after reconcile: %+v", l.Sandboxes)
	}
	// A hibernated sandbox whose host goes down is lost; the host back with it: hibernated again.
	if err := e.st.MarkHostDown(context.Background(), "host-a", "test"); err != nil {
		t.Fatal(err)
	}
	if e.get(k, sb.ID).State != "lost" {
		t.Fatal("not lost with its host down")
	}
	if err := e.sched.PollStatic(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := e.get(k, sb.ID); got.State != "hibernated" {
		t.Fatalf("host back: %+v", got)
	}
	// Woken on the host without the control plane seeing it: the reconcile takes that too.
	if _, err := agentclient.New(e.agent.URL(), agentToken).Wake(context.Background(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if e.record(sb.ID).State != store.StateHibernated {
		t.Fatal("test set-up: the record moved by itself")
	}
	if err := e.sched.Reconcile(context.Background(), "host-a"); err != nil {
		t.Fatal(err)
	}
	if e.record(sb.ID).State != store.StateRunning {
		t.Fatal("reconcile did not take the woken state")
	}

	// A wake that fails (its memory files are gone): the call is a 409 with the reason, and the
	// sandbox is in state error with it.
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/hibernate", k, nil), 200)
	e.agent.BreakWake(sb.ID)
	r := e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", k, `{"cmd": "inc"}`), 409)
	if !strings.Contains(r.errMessage(), "could not be woken") {
		t.Fatalf("exec on a sandbox that cannot wake: %s", r.body)
	}
	got := e.get(k, sb.ID)
	if got.State != "error" || !strings.Contains(got.Error, "snapshot files missing") {
		t.Fatalf("after a failed wake: %+v", got)
	}
	r = e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/wake", k, nil), 409)
	if !strings.Contains(r.errMessage(), "failed") {
		t.Fatalf("wake of an errored sandbox: %s", r.body)
	}

	// Also through the wake call itself, and seen by the reconcile when nobody asks.
	other := e.create(k, map[string]any{"template": "base"})
	e.agent.Hibernate(other.ID)
	e.agent.BreakWake(other.ID)
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+other.ID+"/wake", k, nil), 409)
	if rec := e.record(other.ID); rec.State != store.StateError || !strings.Contains(rec.Error, "missing") {
		t.Fatalf("after a failed wake call: %+v", rec)
	}
	third := e.create(k, map[string]any{"template": "base"})
	e.agent.Hibernate(third.ID)
	e.agent.BreakWake(third.ID)
	agentclient.New(e.agent.URL(), agentToken).Wake(context.Background(), third.ID)
	if err := e.sched.Reconcile(context.Background(), "host-a"); err != nil {
		t.Fatal(err)
	}
	if rec := e.record(third.ID); rec.State != store.StateError {
		t.Fatalf("reconcile of an errored sandbox: %+v", rec)
	}
}

// KillAll (`pandastack down --kill-sandboxes`) ends every team's sandboxes, hibernated and lost
// ones included, on the host and in the store; killed ones stay as they were.
func TestKillAll(t *testing.T) {
	e := newEnv(t)
	tm := e.mustStatus(e.do("POST", "/v1/teams", e.admin, map[string]string{"name": "beta"}), 201).json(t)
	other := tm["key"].(map[string]any)["key"].(string)
	a, b, c := e.create(e.admin, map[string]any{"template": "base"}), e.create(other, map[string]any{"template": "base"}),
		e.create(e.admin, map[string]any{"template": "base"})
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+b.ID+"/hibernate", other, nil), 200)
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+c.ID, e.admin, nil), 204)
	n, err := e.srv.KillAll(context.Background(), "pandastack down --kill-sandboxes")
	if err != nil || n != 2 {
		t.Fatalf("KillAll = %d, %v; want 2 (a and b)", n, err)
	}
	if left := e.agent.All(); len(left) != 0 {
		t.Errorf("the host still has %v", left)
	}
	for _, id := range []string{a.ID, b.ID} {
		sb, err := e.st.GetSandbox(context.Background(), id)
		if err != nil || sb.State != "killed" || sb.Error != "pandastack down --kill-sandboxes" {
			t.Errorf("%s after KillAll: %s %q %v", id, sb.State, sb.Error, err)
		}
	}
}

// TestSandboxMetrics: a running sandbox's figures come from its host; a hibernated one has none
// (409) and stays hibernated; another team's sandbox is not found.
func TestSandboxMetrics(t *testing.T) {
	e := newEnv(t)
	k := e.admin
	sb := e.create(k, map[string]any{"template": "base"})
	var m v1.SandboxMetrics
	if err := json.Unmarshal(e.mustStatus(e.do("GET", "/v1/sandboxes/"+sb.ID+"/metrics", k, nil), 200).body, &m); err != nil {
		t.Fatal(err)
	}
	if m.At == "" || m.VCPUs < 1 || m.MemTotalBytes <= 0 || m.MemUsedBytes <= 0 || m.DiskTotalBytes <= 0 || m.DiskUsedBytes <= 0 {
		t.Fatalf("metrics: %+v", m)
	}
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/hibernate", k, nil), 200)
	e.mustStatus(e.do("GET", "/v1/sandboxes/"+sb.ID+"/metrics", k, nil), 409)
	if e.record(sb.ID).State != store.StateHibernated || e.agent.State(sb.ID) != "hibernated" {
		t.Fatalf("metrics woke the sandbox: %s / %s", e.record(sb.ID).State, e.agent.State(sb.ID))
	}
	e.mustStatus(e.do("GET", "/v1/sandboxes/"+sb.ID+"/metrics", e.newTeam("beta"), nil), 404)
	e.mustStatus(e.do("GET", "/v1/sandboxes/sb_nosuch/metrics", k, nil), 404)
}
