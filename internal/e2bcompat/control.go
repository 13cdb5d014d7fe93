package e2bcompat

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/network"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/store"
)

// E2B's control API (docs/e2b.md has the call-by-call table), over the sandbox service.

// DefaultTimeoutSeconds is a sandbox's lifetime when the create names none (E2B's default).
const DefaultTimeoutSeconds = 300

// templateAliases map E2B's template names to PandaStack's catalog.
var templateAliases = map[string]string{
	"code-interpreter-v1": "code-interpreter",
	"code-interpreter":    "code-interpreter",
	"base":                "base",
}

// sandboxJSON is E2B's Sandbox (create, connect, resume, fork).
type sandboxJSON struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	ClientID           string  `json:"clientID"`
	Alias              string  `json:"alias,omitempty"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// detailJSON is E2B's SandboxDetail and ListedSandbox.
type detailJSON struct {
	TemplateID      string            `json:"templateID"`
	Alias           string            `json:"alias,omitempty"`
	SandboxID       string            `json:"sandboxID"`
	ClientID        string            `json:"clientID"`
	StartedAt       string            `json:"startedAt"`
	EndAt           string            `json:"endAt"`
	CPUCount        int64             `json:"cpuCount"`
	MemoryMB        int64             `json:"memoryMB"`
	DiskSizeMB      int64             `json:"diskSizeMB"`
	State           string            `json:"state"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	Domain          *string           `json:"domain"`
	Metadata        map[string]string `json:"metadata"`
	VolumeMounts    []any             `json:"volumeMounts"`
	Lifecycle       *lifecycleJSON    `json:"lifecycle,omitempty"`
}

// lifecycleJSON is what a sandbox's timeout does: kill or pause.
type lifecycleJSON struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

// controlRoutes is the control API's mux: every route needs an E2B key in X-API-KEY.
func (s *Server) controlRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	h := func(route string, fn func(http.ResponseWriter, *http.Request, auth.Identity)) {
		method, pattern, _ := strings.Cut(route, " ")
		isCreate := method == "POST" && (pattern == "/sandboxes" || pattern == "/v2/sandboxes" ||
			strings.HasSuffix(pattern, "/fork") || strings.HasSuffix(pattern, "/snapshots"))
		mux.Handle(route, s.authed(method, pattern, isCreate, fn))
	}
	h("POST /sandboxes", s.create)
	h("POST /v2/sandboxes", s.create)
	h("GET /sandboxes", s.listOld)
	h("GET /v2/sandboxes", s.listV2)
	h("GET /sandboxes/{id}", s.detail)
	h("DELETE /sandboxes/{id}", s.kill)
	h("POST /sandboxes/{id}/timeout", s.setTimeout)
	h("POST /sandboxes/{id}/refreshes", s.setTimeout)
	h("POST /sandboxes/{id}/pause", s.pause)
	h("POST /sandboxes/{id}/resume", s.resume)
	h("POST /sandboxes/{id}/connect", s.connect)
	h("POST /v2/sandboxes/{id}/connect", s.connect)
	h("POST /sandboxes/{id}/fork", s.fork)
	h("POST /sandboxes/{id}/snapshots", s.snapshot)
	h("GET /snapshots", s.listSnapshots)
	h("GET /sandboxes/{id}/metrics", s.metrics)
	h("PUT /sandboxes/{id}/network", s.updateNetwork)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		for _, p := range []string{"/templates", "/v2/templates", "/v3/templates", "/volumes", "/volumecontent", "/secrets", "/teams", "/access-tokens", "/api-keys", "/nodes"} {
			if r.URL.Path == p || strings.HasPrefix(r.URL.Path, p+"/") {
				writeError(w, errdefs.New(errdefs.NotImplemented, "%s %s is not supported by PandaStack's E2B-compatible API (templates, volumes and secrets: use PandaStack's own API, docs/e2b.md)", r.Method, truncate(r.URL.Path)))
				return
			}
		}
		if strings.HasPrefix(r.URL.Path, "/sandboxes/") {
			writeError(w, errdefs.New(errdefs.NotImplemented, "%s %s is not supported by PandaStack's E2B-compatible API (docs/e2b.md)", r.Method, truncate(r.URL.Path)))
			return
		}
		writeError(w, errdefs.NotFoundf("no route %s %s", r.Method, truncate(r.URL.Path)))
	})
	return mux
}

// authed authenticates the E2B key, checks its scopes as /v1 would for a sandbox call, and
// serves fn through the rate limit and the audit log.
func (s *Server) authed(method, pattern string, isCreate bool, fn func(http.ResponseWriter, *http.Request, auth.Identity)) http.Handler {
	guarded := s.b.Guard(method, pattern, isCreate, s.fail, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := auth.FromContext(r.Context())
		fn(w, r, id)
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := s.b.Auth.AuthenticateE2B(r.Context(), r.Header.Get(headerAPIKey))
		if err == nil {
			err = auth.Allow(id.Scopes, r.Method, "/v1/sandboxes")
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		guarded.ServeHTTP(w, r.WithContext(auth.WithIdentity(r.Context(), id)))
	})
}

// owned loads the caller's sandbox named by the path; another team's, a malformed id or a
// killed sandbox is 404 alike.
func (s *Server) owned(r *http.Request, id auth.Identity) (store.Sandbox, error) {
	e2bID := r.PathValue("id")
	sbID, ok := FromE2B(e2bID)
	var sb store.Sandbox
	err := store.ErrNotFound
	if ok {
		sb, err = s.b.Store.GetTeamSandbox(r.Context(), id.TeamID, sbID)
	}
	if errors.Is(err, store.ErrNotFound) || err == nil && sb.State == store.StateKilled {
		return sb, errdefs.NotFoundf("sandbox %s not found", truncate(e2bID))
	}
	return sb, err
}

// create is POST /sandboxes and POST /v2/sandboxes.
func (s *Server) create(w http.ResponseWriter, r *http.Request, id auth.Identity) {
	var req struct {
		TemplateID          string            `json:"templateID"`
		Timeout             *int64            `json:"timeout"`
		Metadata            map[string]string `json:"metadata"`
		EnvVars             map[string]string `json:"envVars"`
		AllowInternetAccess *bool             `json:"allow_internet_access"`
		VolumeMounts        []any             `json:"volumeMounts"`
		AutoPause           bool              `json:"autoPause"`
	}
	err := decode(w, r, &req)
	if err == nil && len(req.VolumeMounts) > 0 {
		err = errdefs.New(errdefs.NotImplemented, "volumeMounts are not supported by the E2B-compatible API: use PandaStack's volumes (docs/volumes.md)")
	}
	if err == nil {
		err = s.b.CheckMetadata(req.Metadata)
	}
	if err == nil {
		err = s.b.CheckEnv("envVars", req.EnvVars)
	}
	timeout := int64(DefaultTimeoutSeconds)
	if err == nil && req.Timeout != nil {
		timeout, err = s.timeout(*req.Timeout)
	}
	var p sandboxes.CreateParams
	if err == nil {
		p, err = s.resolveTemplate(r.Context(), id.TeamID, req.TemplateID)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	p.Env, p.Metadata, p.TTLSeconds = req.EnvVars, req.Metadata, timeout
	if req.AllowInternetAccess != nil && !*req.AllowInternetAccess {
		p.Egress = &network.Egress{Internet: req.AllowInternetAccess}
	}
	release, err := s.b.HoldQuota(r.Context(), id.TeamID, p.AgentTemplate, 1)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sb, err := s.b.Sandboxes.Create(r.Context(), id.TeamID, p)
	release()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out, err := s.sandboxView(r.Context(), sb, alias(req.TemplateID))
	if err == nil && req.AutoPause {
		err = s.b.Store.SetPauseOnTimeout(r.Context(), sb.ID, true)
	}
	s.reply(w, r, http.StatusCreated, out, err)
}

// alias is the templateID a create names, "base" when it names none.
func alias(t string) string {
	if t == "" {
		return "base"
	}
	return t
}

// resolveTemplate turns a templateID into what a create starts from: a catalog template (E2B's
// names aliased), a team template, or one of the team's snapshots (a snapshotID is a templateID).
func (s *Server) resolveTemplate(ctx context.Context, teamID, t string) (sandboxes.CreateParams, error) {
	t = alias(t)
	if strings.HasPrefix(t, "snap_") {
		snap, err := s.b.Store.GetTeamSnapshot(ctx, teamID, t)
		if err == nil {
			p := sandboxes.CreateParams{Template: snap.Template, AgentTemplate: snap.Template, Snapshot: &snap}
			if tt, err := s.b.Store.GetTeamTemplate(ctx, teamID, snap.Template); err == nil {
				p.AgentTemplate = tt.AgentName
			}
			return p, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return sandboxes.CreateParams{}, err
		}
	}
	name := t
	if a, ok := templateAliases[t]; ok {
		name = a
	}
	tt, ct, err := s.b.Templates.Find(ctx, teamID, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return sandboxes.CreateParams{}, errdefs.Invalidf("unknown template %q: use a PandaStack template (pandastack template list), base, code-interpreter-v1 or a snapshotID", truncate(t))
	case err != nil:
		return sandboxes.CreateParams{}, err
	case tt != nil:
		return sandboxes.CreateParams{Template: name, AgentTemplate: tt.AgentName, TemplateHost: tt.HostID}, nil
	}
	return sandboxes.CreateParams{Template: ct.Name, AgentTemplate: ct.Name}, nil
}

// timeout checks a timeout in seconds (1 to the server's maximum lifetime).
func (s *Server) timeout(v int64) (int64, error) {
	max := int64(s.b.MaxTTL / time.Second)
	if v <= 0 || v > max {
		return 0, errdefs.Invalidf("timeout must be between 1 and %d seconds, got %d", max, v)
	}
	return v, nil
}

// newAccessToken is a fresh envd access token.
func newAccessToken() string {
	t, err := auth.RandomString(40, "0123456789abcdefghijklmnopqrstuvwxyz")
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return t
}

// sandboxView is E2B's Sandbox of sb, with its envd access token (made on first use).
func (s *Server) sandboxView(ctx context.Context, sb store.Sandbox, templateID string) (sandboxJSON, error) {
	tok, err := s.b.Store.E2BAccessToken(ctx, sb.TeamID, sb.ID, newAccessToken())
	if templateID == "" {
		templateID = sb.Template
	}
	return sandboxJSON{TemplateID: templateID, SandboxID: ToE2B(sb.ID), ClientID: clientID, Alias: sb.Template,
		EnvdVersion: EnvdVersion, EnvdAccessToken: tok}, err
}

// reply answers v with status, or err.
func (s *Server) reply(w http.ResponseWriter, r *http.Request, status int, v any, err error) {
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if status == http.StatusNoContent {
		w.WriteHeader(status)
		return
	}
	writeJSON(w, status, v)
}

// e2bState is E2B's state of a sandbox: running or paused (hibernated).
func e2bState(st string) string {
	if st == store.StateHibernated {
		return "paused"
	}
	return "running"
}

// details turns records into E2B's SandboxDetail, sizing each template once.
func (s *Server) details(ctx context.Context, teamID string, sbs []store.Sandbox) ([]detailJSON, error) {
	type size struct{ cpu, mem int64 }
	sizes := map[string]size{}
	out := make([]detailJSON, 0, len(sbs))
	for _, sb := range sbs {
		sz, ok := sizes[sb.Template]
		if !ok {
			cpu, mem, err := s.b.TemplateSize(ctx, teamID, sb.Template)
			if err != nil {
				return nil, err
			}
			sz = size{cpu, mem}
			sizes[sb.Template] = sz
		}
		md := sb.Metadata
		if md == nil {
			md = map[string]string{}
		}
		out = append(out, detailJSON{TemplateID: sb.Template, Alias: sb.Template, SandboxID: ToE2B(sb.ID), ClientID: clientID,
			StartedAt: sb.CreatedAt.UTC().Format(time.RFC3339Nano), EndAt: sb.ExpiresAt.UTC().Format(time.RFC3339Nano),
			CPUCount: sz.cpu, MemoryMB: sz.mem, State: e2bState(sb.State), EnvdVersion: EnvdVersion, Metadata: md,
			VolumeMounts: []any{}})
	}
	return out, nil
}

func (s *Server) detail(w http.ResponseWriter, r *http.Request, id auth.Identity) {
	sb, err := s.owned(r, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sb = s.b.Sandboxes.Current(r.Context(), sb)
	ds, err := s.details(r.Context(), id.TeamID, []store.Sandbox{sb})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d := ds[0]
	d.EnvdAccessToken, err = s.b.Store.E2BAccessToken(r.Context(), sb.TeamID, sb.ID, newAccessToken())
	d.Lifecycle = &lifecycleJSON{OnTimeout: "kill"}
	if pause, perr := s.b.Store.PausesOnTimeout(r.Context(), sb.ID); perr != nil {
		err = perr
	} else if pause {
		d.Lifecycle.OnTimeout = "pause"
	}
	s.reply(w, r, http.StatusOK, d, err)
}

// maxListLimit bounds one page of a list.
const maxListLimit = 1000

// list answers a page of the team's running and paused sandboxes, filtered by E2B's query:
// metadata (URL-encoded k=v&…), state (running, paused), limit, nextToken.
func (s *Server) list(w http.ResponseWriter, r *http.Request, id auth.Identity, paged bool) {
	q := r.URL.Query()
	f := store.SandboxFilter{TeamID: id.TeamID, Limit: maxListLimit, Metadata: map[string]string{}, Unowned: true,
		States: []string{store.StateRunning, store.StateHibernated}}
	var err error
	if md := q.Get("metadata"); md != "" {
		var vals url.Values
		if vals, err = url.ParseQuery(md); err != nil {
			err = errdefs.Invalidf("metadata must be URL-encoded key=value pairs joined by &")
		}
		for k := range vals {
			f.Metadata[k] = vals.Get(k)
		}
	}
	if st := q["state"]; err == nil && len(st) > 0 {
		f.States = nil
		for _, v := range strings.Split(strings.Join(st, ","), ",") {
			switch strings.TrimSpace(v) {
			case "running":
				f.States = append(f.States, store.StateRunning)
			case "paused":
				f.States = append(f.States, store.StateHibernated)
			default:
				err = errdefs.Invalidf("state %q is not running or paused", truncate(v))
			}
		}
	}
	if l := q.Get("limit"); err == nil && l != "" {
		if f.Limit, err = strconv.Atoi(l); err != nil || f.Limit < 1 || f.Limit > maxListLimit {
			err = errdefs.Invalidf("limit must be an integer from 1 to %d", maxListLimit)
		}
	}
	f.Cursor = q.Get("nextToken")
	var page []store.Sandbox
	var next string
	if err == nil {
		page, next, err = s.b.Store.ListSandboxes(r.Context(), f)
	}
	var out []detailJSON
	if err == nil {
		out, err = s.details(r.Context(), id.TeamID, page)
	}
	if err == nil && paged && next != "" {
		w.Header().Set(headerNextToken, next)
	}
	s.reply(w, r, http.StatusOK, out, err)
}

func (s *Server) listV2(w http.ResponseWriter, r *http.Request, id auth.Identity) {
	s.list(w, r, id, true)
}
func (s *Server) listOld(w http.ResponseWriter, r *http.Request, id auth.Identity) {
	s.list(w, r, id, false)
}

func (s *Server) kill(w http.ResponseWriter, r *http.Request, id auth.Identity) {
	sb, err := s.owned(r, id)
	if err == nil {
		err = s.b.Sandboxes.Kill(r.Context(), sb, "")
	}
	s.reply(w, r, http.StatusNoContent, nil, err)
}

// setTimeout is POST …/timeout {timeout} and the older …/refreshes {duration}: the sandbox now
// ends that many seconds from now.
func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request, id auth.Identity) {
	var req struct {
		Timeout  *int64 `json:"timeout"`
		Duration *int64 `json:"duration"`
	}
	err := decode(w, r, &req)
	if req.Timeout == nil {
		req.Timeout = req.Duration
	}
	if err == nil && req.Timeout == nil {
		err = errdefs.Invalidf("timeout (seconds) is required")
	}
	var secs int64
	if err == nil {
		secs, err = s.timeout(*req.Timeout)
	}
	var sb store.Sandbox
	if err == nil {
		sb, err = s.owned(r, id)
	}
	if err == nil {
		_, err = s.b.Sandboxes.SetTTL(r.Context(), sb, secs)
	}
	s.reply(w, r, http.StatusNoContent, nil, err)
}

// pause is hibernate: 409 when the sandbox is paused already.
func (s *Server) pause(w http.ResponseWriter, r *http.Request, id auth.Identity) {
	var req struct{}
	err := decode(w, r, &req)
	var sb store.Sandbox
	if err == nil {
		sb, err = s.owned(r, id)
	}
	if err == nil {
		sb = s.b.Sandboxes.Current(r.Context(), sb)
		if sb.State == store.StateHibernated {
			err = errdefs.Conflictf("sandbox %s is already paused", ToE2B(sb.ID))
		}
	}
	if err == nil {
		_, err = s.b.Sandboxes.Hibernate(r.Context(), sb)
	}
	s.reply(w, r, http.StatusNoContent, nil, err)
}

// wakeFor wakes a paused sandbox (woken true) and gives it timeout seconds from now when set and
// longer than what it has left (E2B's connect never shortens a running sandbox's life).
func (s *Server) wakeFor(w http.ResponseWriter, r *http.Request, id auth.Identity, mustBePaused bool) (sb store.Sandbox, woken bool, err error) {
	var req struct {
		Timeout *int64 `json:"timeout"`
	}
	if err = decode(w, r, &req); err != nil {
		return
	}
	var secs int64
	if req.Timeout != nil {
		if secs, err = s.timeout(*req.Timeout); err != nil {
			return
		}
	}
	if sb, err = s.owned(r, id); err != nil {
		return
	}
	sb = s.b.Sandboxes.Current(r.Context(), sb)
	if sb.State == store.StateHibernated {
		if sb, err = s.b.Sandboxes.Wake(r.Context(), sb); err != nil {
			return
		}
		woken = true
	} else if mustBePaused {
		return sb, false, errdefs.Conflictf("sandbox %s is already running", ToE2B(sb.ID))
	}
	if secs > 0 && time.Now().Add(time.Duration(secs)*time.Second).After(sb.ExpiresAt) {
		sb, err = s.b.Sandboxes.SetTTL(r.Context(), sb, secs)
	}
	return sb, woken, err
}

// connect is POST …/connect on both paths: 200 when it was running, 201 when it was woken.
func (s *Server) connect(w http.ResponseWriter, r *http.Request, id auth.Identity) {
	sb, woken, err := s.wakeFor(w, r, id, false)
	var out sandboxJSON
	if err == nil {
		out, err = s.sandboxView(r.Context(), sb, "")
	}
	status := http.StatusOK
	if woken {
		status = http.StatusCreated
	}
	s.reply(w, r, status, out, err)
}

// resume is the older POST …/resume: 201, or 409 when the sandbox is running.
func (s *Server) resume(w http.ResponseWriter, r *http.Request, id auth.Identity) {
	sb, _, err := s.wakeFor(w, r, id, true)
	var out sandboxJSON
	if err == nil {
		out, err = s.sandboxView(r.Context(), sb, "")
	}
	s.reply(w, r, http.StatusCreated, out, err)
}

// forkItem is one child of a fork's answer.
type forkItem struct {
	Sandbox *sandboxJSON `json:"sandbox,omitempty"`
	Error   *errorBody   `json:"error,omitempty"`
}

func (s *Server) fork(w http.ResponseWriter, r *http.Request, id auth.Identity) {
	var req struct {
		Count   *int   `json:"count"`
		Timeout *int64 `json:"timeout"`
	}
	err := decode(w, r, &req)
	count := 1
	if req.Count != nil {
		count = *req.Count
	}
	if err == nil && (count < 1 || count > agentclient.MaxForkCount) {
		err = errdefs.Invalidf("count must be between 1 and %d, got %d", agentclient.MaxForkCount, count)
	}
	var secs int64
	if err == nil && req.Timeout != nil {
		secs, err = s.timeout(*req.Timeout)
	}
	var sb store.Sandbox
	if err == nil {
		sb, err = s.owned(r, id)
	}
	release := func() {}
	if err == nil {
		release, err = s.b.HoldQuota(r.Context(), id.TeamID, sb.Template, int64(count))
	}
	var children []store.Sandbox
	if err == nil {
		children, err = s.b.Sandboxes.Fork(r.Context(), sb, count)
	}
	release()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]forkItem, 0, len(children))
	for _, c := range children {
		if secs > 0 {
			if c2, err := s.b.Sandboxes.SetTTL(r.Context(), c, secs); err == nil {
				c = c2
			}
		}
		v, err := s.sandboxView(r.Context(), c, "")
		if err != nil {
			status, msg := answerOf(err)
			out = append(out, forkItem{Error: &errorBody{Code: status, Message: msg}})
			continue
		}
		out = append(out, forkItem{Sandbox: &v})
	}
	writeJSON(w, http.StatusCreated, out)
}

// snapshotJSON is E2B's SnapshotInfo: the id is usable as a templateID.
type snapshotJSON struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func (s *Server) snapshot(w http.ResponseWriter, r *http.Request, id auth.Identity) {
	var req struct {
		Name string `json:"name"`
	}
	err := decode(w, r, &req)
	var sb store.Sandbox
	if err == nil {
		sb, err = s.owned(r, id)
	}
	var sn store.Snapshot
	if err == nil {
		sn, err = s.b.Sandboxes.Snapshot(r.Context(), sb)
	}
	s.reply(w, r, http.StatusCreated, snapshotJSON{SnapshotID: sn.ID, Names: []string{}}, err)
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request, id auth.Identity) {
	q := r.URL.Query()
	f := store.SnapshotFilter{TeamID: id.TeamID, Limit: maxListLimit, Cursor: q.Get("nextToken"), Unowned: true}
	var err error
	if v := q.Get("sandboxID"); v != "" {
		sbID, ok := FromE2B(v)
		if !ok {
			sbID = v
		}
		f.SandboxID = sbID
	}
	if l := q.Get("limit"); l != "" {
		if f.Limit, err = strconv.Atoi(l); err != nil || f.Limit < 1 || f.Limit > maxListLimit {
			err = errdefs.Invalidf("limit must be an integer from 1 to %d", maxListLimit)
		}
	}
	var page []store.Snapshot
	var next string
	if err == nil {
		page, next, err = s.b.Store.ListSnapshots(r.Context(), f)
	}
	out := make([]snapshotJSON, 0, len(page))
	for _, sn := range page {
		out = append(out, snapshotJSON{SnapshotID: sn.ID, Names: []string{}})
	}
	if err == nil && next != "" {
		w.Header().Set(headerNextToken, next)
	}
	s.reply(w, r, http.StatusOK, out, err)
}

// metricJSON is E2B's SandboxMetric (bytes; cpuUsedPct 0-100).
type metricJSON struct {
	Timestamp     string  `json:"timestamp"`
	TimestampUnix int64   `json:"timestampUnix"`
	CPUCount      int     `json:"cpuCount"`
	CPUUsedPct    float64 `json:"cpuUsedPct"`
	MemUsed       int64   `json:"memUsed"`
	MemTotal      int64   `json:"memTotal"`
	MemCache      int64   `json:"memCache"`
	DiskUsed      int64   `json:"diskUsed"`
	DiskTotal     int64   `json:"diskTotal"`
}

// metrics answers E2B's SandboxMetric list: PandaStack keeps no series, so the list holds the
// figures of now (GET /v1/sandboxes/{id}/metrics) when now lies in [start, end] and the sandbox
// runs; a paused sandbox has none (an empty list, and it stays paused).
func (s *Server) metrics(w http.ResponseWriter, r *http.Request, id auth.Identity) {
	sb, err := s.owned(r, id)
	var start, end int64
	for _, p := range []struct {
		name string
		to   *int64
	}{{"start", &start}, {"end", &end}} {
		if v := r.URL.Query().Get(p.name); v != "" && err == nil {
			if *p.to, err = strconv.ParseInt(v, 10, 64); err != nil || *p.to < 0 {
				err = errdefs.Invalidf("%s must be a time in unix seconds", p.name)
			}
		}
	}
	out := []metricJSON{}
	now := time.Now().Unix()
	if err == nil && sb.State == store.StateRunning && (start == 0 || start <= now) && (end == 0 || end >= now-1) {
		var m agentclient.SandboxMetrics
		if m, err = s.b.Sandboxes.Metrics(r.Context(), sb); err == nil {
			at, _ := time.Parse(time.RFC3339Nano, m.At)
			out = append(out, metricJSON{Timestamp: at.UTC().Format(time.RFC3339), TimestampUnix: at.Unix(),
				CPUCount: m.VCPUs, CPUUsedPct: m.CPUUsedPct, MemUsed: m.MemUsedBytes, MemTotal: m.MemTotalBytes,
				MemCache: m.MemCacheBytes, DiskUsed: m.DiskUsedBytes, DiskTotal: m.DiskTotalBytes})
		} else if status, _ := answerOf(err); status == http.StatusConflict {
			err = nil // paused or stopped meanwhile: no figures
		}
	}
	s.reply(w, r, http.StatusOK, out, err)
}

// updateNetwork (sbx.updateNetwork) would change a running sandbox's egress rules: PandaStack
// sets them at create only, so a sandbox of the caller's answers a 501 that says so.
func (s *Server) updateNetwork(w http.ResponseWriter, r *http.Request, id auth.Identity) {
	_, err := s.owned(r, id)
	if err == nil {
		err = errdefs.New(errdefs.NotImplemented, "changing a running sandbox's network is not supported: PandaStack sets egress at create (allowInternetAccess; egress rules through its own API, docs/networking.md)")
	}
	s.fail(w, r, err)
}
