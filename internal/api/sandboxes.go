package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/network"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/sandboxstate"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/template"
	"github.com/pandastack/pandastack/internal/termtext"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

type createRequest struct {
	Template   string            `json:"template"`
	TTLSeconds *int64            `json:"ttl_seconds"`
	Metadata   map[string]string `json:"metadata"`
	Env        map[string]string `json:"env"`
	Egress     json.RawMessage   `json:"egress"`
	SnapshotID *string           `json:"snapshot_id"`
	Volumes    *[]VolumeSpec     `json:"volumes"`
	// PublicPorts nil: the server's default (Config.PrivatePorts).
	PublicPorts *bool `json:"public_ports"`
	// Host pins the sandbox to one host (admin keys only).
	Host *string `json:"host"`

	egress  *network.Egress          // Egress, validated
	volumes []store.VolumeAttachment // Volumes, validated (SandboxID not yet set)
	// What the host knows Template by (a team template's agent name, a catalog alias's canonical
	// name), and for a team template the host that has it.
	agentTemplate string
	templateHost  string
}

func present(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

var envKeyPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (s *Server) validateTTL(v int64) error {
	max := int64(s.cfg.MaxTTL / time.Second)
	if v <= 0 || v > max {
		return invalid("ttl_seconds must be between 1 and %d, got %d", max, v)
	}
	return nil
}

func validateMetadata(md map[string]string) error {
	if len(md) > MaxMetadataKeys {
		return invalid("metadata has %d keys; at most %d are allowed", len(md), MaxMetadataKeys)
	}
	for k, v := range md {
		switch {
		case k == "":
			return invalid("metadata keys must not be empty")
		case len(k) > MaxMetadataKeyLen:
			return invalid("metadata key %q is %d bytes; at most %d are allowed", truncate(k), len(k), MaxMetadataKeyLen)
		case len(v) > MaxMetadataValueLen:
			return invalid("metadata value of %q is %d bytes; at most %d are allowed", k, len(v), MaxMetadataValueLen)
		case !utf8.ValidString(k) || hasControl(k):
			return invalid("metadata key %q must be valid UTF-8 without control characters", truncate(k))
		case !utf8.ValidString(v) || hasControl(v):
			return invalid("metadata value of %q must be valid UTF-8 without control characters (no NUL, escape sequences, newlines or bidi overrides)", truncate(k))
		}
	}
	return nil
}

func validateEnv(field string, env map[string]string) error {
	if len(env) > MaxEnvKeys {
		return invalid("%s has %d variables; at most %d are allowed", field, len(env), MaxEnvKeys)
	}
	for k, v := range env {
		switch {
		case len(k) > MaxEnvKeyLen:
			return invalid("%s name %q is %d bytes; at most %d are allowed", field, truncate(k), len(k), MaxEnvKeyLen)
		case !envKeyPattern.MatchString(k):
			return invalid("%s name %q is not a valid variable name (letters, digits, _; not starting with a digit)", field, truncate(k))
		case len(v) > MaxEnvValueLen:
			return invalid("%s value of %s is %d bytes; at most %d are allowed", field, k, len(v), MaxEnvValueLen)
		case strings.IndexByte(v, 0) >= 0:
			return invalid("%s value of %s contains a NUL byte", field, k)
		}
	}
	return nil
}

// hasControl reports characters that must not reach an operator's terminal raw: control
// characters (C0, DEL, C1), bidi overrides, line and paragraph separators.
func hasControl(s string) bool {
	return strings.IndexFunc(s, termtext.Unsafe) >= 0
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	id, _ := auth.FromContext(r.Context())
	var req createRequest
	var snap *store.Snapshot
	err := decodeJSON(w, r, &req, false)
	if err == nil {
		snap, err = s.validateCreate(r.Context(), id.TeamID, &req)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// A snapshot's volume copies, or the template's data volume: the sandbox gets its own copies.
	var copies []sandboxes.VolumeCopy
	if snap != nil {
		copies, err = s.svc.SnapshotVolumes(r.Context(), *snap)
	} else {
		copies = s.svc.TemplateVolumes(req.agentTemplate, req.Template)
	}
	release := func() {}
	if err == nil {
		release, err = s.holdSandboxesAnd(r.Context(), id.TeamID, req.Template, 1, volumeCopiesNeed(copies, 1))
	}
	if err != nil {
		s.createFailed(w, r, err)
		return
	}
	defer release() // after the sandbox is recorded (or the create failed)
	ttl := int64(0)
	if req.TTLSeconds != nil {
		ttl = *req.TTLSeconds
	}
	token, tokenHash, err := s.trafficToken(req.PublicPorts)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	sb, err := s.svc.Create(r.Context(), id.TeamID, sandboxes.CreateParams{Template: req.Template, AgentTemplate: req.agentTemplate,
		TemplateHost: req.templateHost, Snapshot: snap, Volumes: req.volumes, Env: req.Env, Egress: req.egress,
		Metadata: req.Metadata, TTLSeconds: ttl, TrafficTokenHash: tokenHash, Host: deref(req.Host)})
	if err != nil {
		s.createFailed(w, r, err)
		return
	}
	s.metrics.created(time.Since(start))
	v := viewOf(sb)
	v.TrafficToken = token // shown once: the store keeps only its hash
	writeJSON(w, http.StatusCreated, v)
}

// createFailed answers a failed create and counts it under its error code.
func (s *Server) createFailed(w http.ResponseWriter, r *http.Request, err error) {
	code := "internal"
	if e, ok := toAPIError(err); ok {
		code = e.code
	}
	s.metrics.createFailed(code)
	s.writeError(w, r, err)
}

// validateCreate checks a create and, when it names snapshot_id, returns the caller's snapshot
// (another team's, a deleted or a missing one is 404) with req.Template set to its template.
func (s *Server) validateCreate(ctx context.Context, teamID string, req *createRequest) (*store.Snapshot, error) {
	if err := pinnable(ctx, req.Host); err != nil {
		return nil, err
	}
	if req.Volumes != nil {
		vols, err := validateVolumeSpecs(*req.Volumes)
		if err != nil {
			return nil, err
		}
		req.volumes = vols
	}
	if present(req.Egress) {
		dec := json.NewDecoder(bytes.NewReader(req.Egress))
		dec.DisallowUnknownFields()
		var eg network.Egress
		if err := dec.Decode(&eg); err != nil {
			return nil, invalid("egress must be {internet?: bool, allow?: [cidr], deny?: [cidr]}: %v", err)
		}
		if _, err := eg.Policy(network.Guard{Open: s.cfg.EgressOpen}); err != nil {
			return nil, invalid("%v", err)
		}
		req.egress = &eg
	}
	if req.Template == "" && req.SnapshotID == nil {
		return nil, invalid("template is required (see GET /v1/templates), or snapshot_id to start from a snapshot")
	}
	if req.TTLSeconds != nil {
		if err := s.validateTTL(*req.TTLSeconds); err != nil {
			return nil, err
		}
	}
	if err := validateMetadata(req.Metadata); err != nil {
		return nil, err
	}
	if err := validateEnv("env", req.Env); err != nil {
		return nil, err
	}
	if req.SnapshotID != nil {
		id := *req.SnapshotID
		if id == "" {
			return nil, invalid("snapshot_id must not be empty (see GET /v1/snapshots)")
		}
		snap, err := s.store.GetTeamSnapshot(ctx, teamID, id)
		if errors.Is(err, store.ErrNotFound) {
			return nil, notFound("snapshot %s not found", truncate(id))
		}
		if err != nil {
			return nil, err
		}
		if req.Template != "" && req.Template != snap.Template && template.Canonical(req.Template) != snap.Template {
			return nil, invalid("snapshot %s is of template %q, not %q (leave template out to use the snapshot's)", snap.ID, snap.Template, truncate(req.Template))
		}
		req.Template, req.agentTemplate = snap.Template, snap.Template
		if tt, err := s.store.GetTeamTemplate(ctx, teamID, snap.Template); err == nil {
			req.agentTemplate = tt.AgentName // for its memory size: the snapshot itself has the rest
		}
		return &snap, nil
	}
	tt, ct, err := s.tmpl.Find(ctx, teamID, req.Template)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, invalid("unknown template %q (see GET /v1/templates)", truncate(req.Template))
	case err != nil:
		return nil, err
	case tt != nil:
		req.agentTemplate, req.templateHost = tt.AgentName, tt.HostID
	default:
		req.Template, req.agentTemplate = ct.Name, ct.Name
	}
	return nil, nil
}

// sandbox loads the caller's sandbox; another team's is "not found", exactly like a missing one.
func (s *Server) sandbox(r *http.Request) (store.Sandbox, error) {
	return owned(r, "sandbox", s.store.GetTeamSandbox)
}

// owned loads the caller's object (what) named by the path's {id} with get(ctx, team, id);
// another team's is "not found", exactly like a missing one.
func owned[T any](r *http.Request, what string, get func(context.Context, string, string) (T, error)) (T, error) {
	id, _ := auth.FromContext(r.Context())
	key := r.PathValue("id")
	v, err := get(r.Context(), id.TeamID, key)
	if errors.Is(err, store.ErrNotFound) {
		var zero T
		return zero, notFound("%s %s not found", what, truncate(key))
	}
	return v, err
}

// getSandbox answers the record, first brought up to date from the sandbox's host.
func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	sb, err := s.sandbox(r)
	if err == nil {
		sb = s.svc.Current(r.Context(), sb)
	}
	s.reply(w, r, http.StatusOK, viewOf(sb), err)
}

// sandboxMetrics answers a running sandbox's resource figures (a hibernated one: 409).
func (s *Server) sandboxMetrics(w http.ResponseWriter, r *http.Request) {
	sb, err := s.sandbox(r)
	var m v1.SandboxMetrics
	if err == nil {
		m, err = s.svc.Metrics(r.Context(), sb)
	}
	s.reply(w, r, http.StatusOK, m, err)
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	f := store.SandboxFilter{TeamID: id.TeamID, Limit: DefaultListLimit, Metadata: map[string]string{}, Unowned: true}
	// Without a state filter, killed sandboxes are left out: they pile up and are rarely wanted.
	f.States = notKilled
	err := pageParams(r, &f.Limit, &f.Cursor, func(key, v string, vals []string) error {
		switch k, isMD := strings.CutPrefix(key, "metadata."); {
		case key == "state":
			states, err := parseStates(vals)
			f.States = states
			return err
		case isMD && k == "":
			return invalid("metadata filter needs a key: metadata.KEY=VALUE")
		case isMD:
			f.Metadata[k] = v
			return nil
		}
		return invalid("unknown query parameter %q (use state, limit, cursor or metadata.KEY)", truncate(key))
	})
	page, next, err := fetchPage(r.Context(), err, f, s.store.ListSandboxes)
	s.reply(w, r, http.StatusOK, v1.SandboxPage{NextCursor: cursor(next), Sandboxes: list(page, viewOf)}, err)
}

// pageParams reads a paged list's query: limit and cursor into *limit and *cursor, every other
// parameter (its last value, and all its values) through other. It stops at the first error.
func pageParams(r *http.Request, limit *int, cursor *string, other func(key, v string, vals []string) error) error {
	for key, vals := range r.URL.Query() {
		v := vals[len(vals)-1]
		var err error
		switch key {
		case "limit":
			n, aerr := strconv.Atoi(v)
			if aerr != nil || n < 1 || n > MaxListLimit {
				return invalid("limit must be an integer between 1 and %d", MaxListLimit)
			}
			*limit = n
		case "cursor":
			*cursor = v
		default:
			err = other(key, v, vals)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// fetchPage runs a list query unless reading its parameters failed (err).
func fetchPage[F, R any](ctx context.Context, err error, f F, fetch func(context.Context, F) ([]R, string, error)) ([]R, string, error) {
	if err != nil {
		return nil, "", err
	}
	return fetch(ctx, f)
}

// parseStates reads state=a,b (repeatable); "all" means every state.
func parseStates(vals []string) ([]string, error) {
	var out []string
	for _, v := range vals {
		for _, st := range strings.Split(v, ",") {
			st = strings.TrimSpace(st)
			if st == "all" {
				return nil, nil
			}
			if !store.ValidState(st) {
				return nil, invalid("state %q is not one of %s or all", truncate(st), strings.Join(store.States, ", "))
			}
			out = append(out, st)
		}
	}
	return out, nil
}

func (s *Server) killSandbox(w http.ResponseWriter, r *http.Request) {
	sb, err := s.sandbox(r)
	if err == nil {
		err = s.svc.Kill(r.Context(), sb, "")
	}
	if err == nil && !sandboxstate.State(sb.State).Final() {
		s.metrics.killed()
	}
	s.reply(w, r, http.StatusNoContent, nil, err)
}

func (s *Server) setTTL(w http.ResponseWriter, r *http.Request) {
	var req struct {
		TTLSeconds *int64 `json:"ttl_seconds"`
	}
	err := decodeJSON(w, r, &req, false)
	if err == nil && req.TTLSeconds == nil {
		err = invalid("ttl_seconds is required")
	}
	if err == nil {
		err = s.validateTTL(*req.TTLSeconds)
	}
	var sb store.Sandbox
	if err == nil {
		sb, err = s.sandbox(r)
	}
	if err == nil {
		sb, err = s.svc.SetTTL(r.Context(), sb, *req.TTLSeconds)
	}
	s.reply(w, r, http.StatusOK, viewOf(sb), err)
}

// notKilled are the states of a sandbox that has not ended (its host may still have it).
var notKilled = []string{store.StateRunning, store.StateHibernated, store.StateError, store.StateLost}

// KillAll kills every sandbox of every team that is not killed yet (`pandastack down
// --kill-sandboxes`): its VM ends on its host, which frees its memory and disk, and its record
// says killed, with reason. It returns how many it killed.
func (s *Server) KillAll(ctx context.Context, reason string) (int, error) {
	var all []store.Sandbox
	f := store.SandboxFilter{States: notKilled, Limit: MaxListLimit}
	for {
		page, next, err := s.store.ListSandboxes(ctx, f)
		if err != nil {
			return 0, err
		}
		all = append(all, page...)
		if next == "" {
			break
		}
		f.Cursor = next
	}
	for i, sb := range all {
		if err := s.svc.Kill(ctx, sb, reason); err != nil {
			return i, err
		}
	}
	return len(all), nil
}

// usable and truncate are the service's, under the names the handlers use.
var usable, truncate = sandboxes.Usable, sandboxes.Truncate
