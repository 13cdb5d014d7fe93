package api

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/pandastack/pandastack/internal/templates"
)

// buildEvent is one line of a build stream.
type buildEvent struct {
	Progress *string       `json:"progress"`
	Template *TemplateView `json:"template"`
	Error    *struct{ Code, Message string }
}

// build posts a spec and returns the stream's events (or fails on a non-200 answer).
func (e *env) build(key string, spec any) []buildEvent {
	e.t.Helper()
	r := e.mustStatus(e.do("POST", "/v1/templates", key, spec), 200)
	if ct := r.header.Get("Content-Type"); ct != "application/x-ndjson" {
		e.t.Fatalf("content type %q", ct)
	}
	var out []buildEvent
	for _, line := range strings.Split(strings.TrimSpace(string(r.body)), "\n") {
		var ev buildEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			e.t.Fatalf("bad line %q: %v", line, err)
		}
		out = append(out, ev)
	}
	return out
}

// newTeam makes another team and returns its key.
func (e *env) newTeam(name string) string {
	e.t.Helper()
	m := e.mustStatus(e.do("POST", "/v1/teams", e.admin, map[string]string{"name": name}), 201).json(e.t)
	return m["key"].(map[string]any)["key"].(string)
}

func (e *env) templates(key string) map[string]TemplateView {
	e.t.Helper()
	var list struct{ Templates []TemplateView }
	json.Unmarshal(e.mustStatus(e.do("GET", "/v1/templates", key, nil), 200).body, &list)
	out := map[string]TemplateView{}
	for _, t := range list.Templates {
		out[t.Name] = t
	}
	return out
}

func TestTemplateBuild(t *testing.T) {
	e := newEnv(t)
	k := e.admin
	evs := e.build(k, map[string]any{"name": "web", "from": "base", "description": "a web server",
		"steps": []string{"echo one", "echo two"}, "memory_mib": 1024, "metadata": map[string]string{"v": "1"}})
	last := evs[len(evs)-1]
	if last.Template == nil || len(evs) < 3 {
		t.Fatalf("events %+v", evs)
	}
	var progress []string
	for _, ev := range evs[:len(evs)-1] {
		if ev.Progress == nil {
			t.Fatalf("not a progress event: %+v", ev)
		}
		progress = append(progress, *ev.Progress)
	}
	if !strings.Contains(strings.Join(progress, "\n"), "step 2/2: echo two") {
		t.Fatalf("progress %q", progress)
	}
	v := *last.Template
	if v.Name != "web" || v.Owner != OwnerTeam || v.MemoryMiB != 1024 || v.Description != "a web server" || !v.Baked ||
		!v.Available || v.SizeBytes == 0 || v.BakeMS == 0 || v.Metadata["v"] != "1" {
		t.Fatalf("built %+v", v)
	}

	tl := e.templates(k)
	if got := tl["web"]; got.Owner != OwnerTeam || !got.Available || !got.Baked {
		t.Fatalf("listed %+v", got)
	}
	if got := tl["base"]; got.Owner != OwnerCatalog || !got.Available {
		t.Fatalf("catalog entry %+v", got)
	}
	if got := e.mustStatus(e.do("GET", "/v1/templates/web", k, nil), 200).json(t); got["owner"] != "team" {
		t.Fatalf("get %v", got)
	}
	// The host got it under a name of its own, with from as it knows it.
	var agentName string
	hosts, _ := e.st.ListHosts(context.Background())
	for _, n := range hosts[0].Templates {
		if strings.HasPrefix(n, "web-") {
			agentName = n
		}
	}
	if len(agentName) != len("web-")+8 {
		t.Fatalf("host templates %v", hosts[0].Templates)
	}
	spec, ok := e.agent.BuiltSpec(agentName)
	if !ok || spec.Name != agentName || spec.From != "base" {
		t.Fatalf("agent spec %+v %v", spec, ok)
	}
	// Only the team's record, not the catalog, knows it.
	if _, err := e.st.GetTemplate(context.Background(), agentName); err == nil {
		t.Fatal("a team template joined the catalog")
	}

	// A sandbox of it reaches its host under the host's name and is recorded under the team's.
	sb := e.create(k, map[string]any{"template": "web"})
	if sb.Template != "web" || e.agent.SandboxTemplate(sb.ID) != agentName {
		t.Fatalf("sandbox %+v on the agent as %q", sb, e.agent.SandboxTemplate(sb.ID))
	}

	// A build from a team template goes to its host with from rewritten.
	evs = e.build(k, "name: api\nfrom: web\nsteps:\n  - echo three\n")
	if evs[len(evs)-1].Template == nil {
		t.Fatalf("yaml build %+v", evs)
	}
	if spec, ok := e.agent.BuiltSpec(strings.Replace(agentName, "web-", "api-", 1)); !ok || spec.From != agentName {
		t.Fatalf("child spec %+v %v", spec, ok)
	}
	// A rebuild replaces the record.
	last = e.build(k, map[string]any{"name": "web", "from": "base", "memory_mib": 2048})[0]
	if v := e.templates(k)["web"]; v.MemoryMiB != 2048 {
		t.Fatalf("rebuilt %+v", v)
	}
}

func TestTemplateBuildStreams(t *testing.T) {
	e := newEnv(t)
	release := e.agent.HoldBuilds()
	defer release()
	req, _ := http.NewRequest("POST", e.hs.URL+"/v1/templates", strings.NewReader(`{"name": "slow", "from": "debian:trixie"}`))
	req.Header.Set("Authorization", "Bearer "+e.admin)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	// The first line arrives while the host is still building.
	if !sc.Scan() || !strings.Contains(sc.Text(), `"progress"`) {
		t.Fatalf("first line %q %v", sc.Text(), sc.Err())
	}
	if _, err := e.st.GetTeamTemplate(context.Background(), "", "slow"); err == nil {
		t.Fatal("recorded before the build finished")
	}
	release()
	var lastLine string
	for sc.Scan() {
		lastLine = sc.Text()
	}
	if !strings.Contains(lastLine, `"template"`) {
		t.Fatalf("last line %q", lastLine)
	}
}

func TestTemplateBuildFailures(t *testing.T) {
	e := newEnv(t)
	k := e.admin
	// A failing step: progress, then the error; nothing is recorded.
	evs := e.build(k, map[string]any{"name": "broken", "from": "base", "steps": []string{"true", "exit 3"}})
	last := evs[len(evs)-1]
	if last.Error == nil || last.Error.Code != "build_failed" || !strings.Contains(last.Error.Message, "step 2") || evs[0].Progress == nil {
		t.Fatalf("events %+v", evs)
	}
	e.mustStatus(e.do("GET", "/v1/templates/broken", k, nil), 404)
	if _, ok := e.templates(k)["broken"]; ok {
		t.Fatal("a failed build is listed")
	}
	e.wantErr(e.do("POST", "/v1/sandboxes", k, map[string]any{"template": "broken"}), 400, "invalid_request", "unknown template")

	for name, c := range map[string]struct {
		body   string
		status int
		code   string
		msg    string
	}{
		"empty":          {``, 400, "invalid_request", "empty"},
		"not a spec":     {`[1, 2]`, 400, "invalid_request", "spec"},
		"unknown field":  {`{"name": "x", "from": "base", "stpes": []}`, 400, "invalid_request", "stpes"},
		"bad name":       {`{"name": "Bad_Name", "from": "base"}`, 400, "invalid_request", "lowercase"},
		"no from":        {`{"name": "x"}`, 400, "invalid_request", "from"},
		"long name":      {`{"name": "` + strings.Repeat("a", 51) + `", "from": "base"}`, 400, "invalid_request", "at most 50"},
		"unknown from":   {`{"name": "x", "from": "nope"}`, 400, "invalid_request", "no such template"},
		"aliases":        {`{"name": "x", "from": "base", "aliases": ["y"]}`, 400, "invalid_request", "catalog templates only"},
		"src":            {`{"name": "x", "from": "base", "files": [{"path": "/a", "src": "a.txt"}]}`, 400, "invalid_request", "src"},
		"catalog name":   {`{"name": "base", "from": "debian:trixie"}`, 409, "conflict", "catalog"},
		"catalog alias":  {`{"name": "postgres-16", "from": "debian:trixie"}`, 409, "conflict", "catalog"},
		"configured tpl": {`{"name": "code-interpreter", "from": "base"}`, 409, "conflict", "catalog"},
		"metadata ESC":   {`{"name": "x", "from": "base", "metadata": {"k": "\u001b[31m"}}`, 400, "invalid_request", "without control characters"},
		"metadata bidi":  {`{"name": "x", "from": "base", "metadata": {"k": "\u202e"}}`, 400, "invalid_request", "without control characters"},
	} {
		t.Run(name, func(t *testing.T) {
			e.wantErr(e.do("POST", "/v1/templates", k, c.body), c.status, c.code, c.msg)
		})
	}
	e.wantErr(e.do("POST", "/v1/templates", k, strings.Repeat(" ", 17<<20)), 413, "payload_too_large", "limit")
	e.wantErr(e.do("POST", "/v1/templates", "", `{"name": "x", "from": "base"}`), 401, "unauthorized", "")
	if n := len(e.templates(k)); n != 2 {
		t.Fatalf("%d templates after failures", n)
	}
}

func TestTemplateTeams(t *testing.T) {
	e := newEnv(t)
	a, b := e.admin, e.newTeam("beta")
	e.build(a, map[string]any{"name": "web", "from": "base"})
	// Another team's template does not exist for b.
	e.wantErr(e.do("GET", "/v1/templates/web", b, nil), 404, "not_found", "web")
	e.wantErr(e.do("DELETE", "/v1/templates/web", b, nil), 404, "not_found", "web")
	e.wantErr(e.do("POST", "/v1/sandboxes", b, map[string]any{"template": "web"}), 400, "invalid_request", "unknown template")
	e.wantErr(e.do("POST", "/v1/templates", b, `{"name": "child", "from": "web"}`), 400, "invalid_request", "no such template")
	if _, ok := e.templates(b)["web"]; ok {
		t.Fatal("b lists a's template")
	}
	// b may use the same name: another template on the host.
	if evs := e.build(b, map[string]any{"name": "web", "from": "base", "memory_mib": 768}); evs[len(evs)-1].Template == nil {
		t.Fatalf("b's build %+v", evs)
	}
	sa, sb := e.create(a, map[string]any{"template": "web"}), e.create(b, map[string]any{"template": "web"})
	if ta, tb := e.agent.SandboxTemplate(sa.ID), e.agent.SandboxTemplate(sb.ID); ta == tb || !strings.HasPrefix(ta, "web-") || !strings.HasPrefix(tb, "web-") {
		t.Fatalf("agent names %q %q", ta, tb)
	}
	if e.templates(a)["web"].MemoryMiB == 768 || e.templates(b)["web"].MemoryMiB != 768 {
		t.Fatal("teams see each other's template")
	}
}

func TestTemplateDelete(t *testing.T) {
	e := newEnv(t)
	k := e.admin
	e.build(k, map[string]any{"name": "web", "from": "base"})
	e.wantErr(e.do("DELETE", "/v1/templates/base", k, nil), 409, "conflict", "catalog template")
	e.wantErr(e.do("DELETE", "/v1/templates/postgres-16", k, nil), 409, "conflict", "catalog template")
	e.wantErr(e.do("DELETE", "/v1/templates/nope", k, nil), 404, "not_found", "nope")

	sb := e.create(k, map[string]any{"template": "web"})
	e.wantErr(e.do("DELETE", "/v1/templates/web", k, nil), 409, "conflict", "sandbox "+sb.ID)
	snap := e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", k, nil), 201).json(t)
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+sb.ID, k, nil), 204)
	e.wantErr(e.do("DELETE", "/v1/templates/web", k, nil), 409, "conflict", "snapshot "+snap["id"].(string))
	e.mustStatus(e.do("DELETE", "/v1/snapshots/"+snap["id"].(string), k, nil), 204)

	// A template others start from stays until they go.
	e.build(k, map[string]any{"name": "api", "from": "web"})
	e.wantErr(e.do("DELETE", "/v1/templates/web", k, nil), 409, "conflict", "api")
	e.mustStatus(e.do("DELETE", "/v1/templates/api", k, nil), 204)
	e.mustStatus(e.do("DELETE", "/v1/templates/web", k, nil), 204)
	e.mustStatus(e.do("GET", "/v1/templates/web", k, nil), 404)
	for _, n := range e.agentTemplates() {
		if strings.HasPrefix(n, "web-") || strings.HasPrefix(n, "api-") {
			t.Fatalf("the host kept %s", n)
		}
	}
	e.wantErr(e.do("DELETE", "/v1/templates/web", k, nil), 404, "not_found", "web")
}

func (e *env) agentTemplates() []string {
	e.t.Helper()
	if err := e.sched.PollStatic(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	h, err := e.st.GetHost(context.Background(), "host-a")
	if err != nil {
		e.t.Fatal(err)
	}
	return h.Templates
}

func TestTemplateAliases(t *testing.T) {
	e := newEnv(t)
	pg := e.newHost("host-pg", "postgres-17")
	e.join(pg)
	k := e.admin
	v := e.templates(k)["postgres-17"]
	if v.Owner != OwnerCatalog || len(v.Aliases) == 0 || v.Metadata == nil || v.Description == "" {
		t.Fatalf("catalog entry %+v", v)
	}
	got := e.mustStatus(e.do("GET", "/v1/templates/postgres-16", k, nil), 200).json(t)
	if got["name"] != "postgres-17" {
		t.Fatalf("alias get %v", got)
	}
	sb := e.create(k, map[string]any{"template": "postgres-16"})
	if sb.Template != "postgres-17" || sb.Host != "host-pg" || pg.SandboxTemplate(sb.ID) != "postgres-17" {
		t.Fatalf("alias create %+v", sb)
	}
	// A build from an alias starts from the canonical template, on a host that has it.
	evs := e.build(k, map[string]any{"name": "mydb", "from": "postgres-16", "steps": []string{"echo schema"}})
	if evs[len(evs)-1].Template == nil {
		t.Fatalf("build %+v", evs)
	}
	if spec, ok := pg.BuiltSpec(templates.AgentName(e.record(sb.ID).TeamID, "mydb")); !ok || spec.From != "postgres-17" {
		t.Fatal("the build did not reach the postgres host from postgres-17")
	}
	// Its host down: sandboxes of it cannot start elsewhere.
	pg.Close()
	if err := e.st.MarkHostDown(context.Background(), "host-pg", "test"); err != nil {
		t.Fatal(err)
	}
	e.wantErr(e.do("POST", "/v1/sandboxes", k, map[string]any{"template": "mydb"}), 503, "capacity", "host-pg")
}

// A catalog template shows the size and bake time its host reported (`template list` prints them).
func TestCatalogTemplateSizeAndBake(t *testing.T) {
	e := newEnv(t)
	reg := `{"host_id": "host-z", "url": "http://127.0.0.1:9", "token": "t", "slots_total": 4, "templates": [
		{"name": "sized", "vcpus": 1, "memory_mib": 256, "disk_mib": 2048, "baked": true, "bake_ms": 4321, "size_bytes": 123456}]}`
	e.mustStatus(e.do("POST", scheduler.RegisterPath, clusterToken, reg), 200)
	got := e.mustStatus(e.do("GET", "/v1/templates/sized", e.admin, nil), 200).json(t)
	if got["size_bytes"] != float64(123456) || got["bake_ms"] != float64(4321) || got["owner"] != "catalog" {
		t.Fatalf("catalog template: %v", got)
	}
	// A later report without them (an agent that restarted, say) keeps the known figures.
	e.mustStatus(e.do("POST", scheduler.HeartbeatPath, clusterToken, strings.Replace(reg, `"bake_ms": 4321, "size_bytes": 123456`, `"baked": false`, 1)), 200)
	if got := e.mustStatus(e.do("GET", "/v1/templates/sized", e.admin, nil), 200).json(t); got["size_bytes"] != float64(123456) {
		t.Fatalf("after a report without sizes: %v", got)
	}
}
