package api

import (
	"errors"
	"net/http"
	"regexp"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/store"
)

// KeyView is a key as listed: never the secret, only its display prefix.
type KeyView struct {
	ID        string  `json:"id"`
	Name      string  `json:"name"`
	Prefix    string  `json:"prefix"`
	Admin     bool    `json:"admin"`
	TeamID    string  `json:"team_id"`
	CreatedAt string  `json:"created_at"`
	RevokedAt *string `json:"revoked_at"`
	// Key is the secret, present only in the answer that created it.
	Key string `json:"key,omitempty"`
}

func keyView(k store.APIKey, secret string) KeyView {
	v := KeyView{ID: k.ID, Name: k.Name, Prefix: k.Prefix + "…", Admin: k.Admin, TeamID: k.TeamID,
		CreatedAt: Timestamp(k.CreatedAt), Key: secret}
	if k.Revoked() {
		t := Timestamp(k.RevokedAt)
		v.RevokedAt = &t
	}
	return v
}

// TeamView is the public team object.
type TeamView struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	CreatedAt string `json:"created_at"`
}

const maxKeyNameLen = 128

func (s *Server) createKey(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	var req struct {
		Name  string `json:"name"`
		Admin bool   `json:"admin"`
	}
	if err := decodeJSON(w, r, &req, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	if len(req.Name) > maxKeyNameLen || hasControl(req.Name) {
		s.writeError(w, r, invalid("name must be at most %d printable bytes", maxKeyNameLen))
		return
	}
	// Any key may mint ordinary keys for its own team; only an admin may mint admin keys.
	if req.Admin && !id.Admin {
		s.writeError(w, r, errdefs.New(errdefs.Forbidden, "only an admin key can create admin keys"))
		return
	}
	k, secret, err := auth.IssueKey(r.Context(), s.store, id.TeamID, req.Name, req.Admin)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, keyView(k, secret))
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	keys, err := s.store.ListKeys(r.Context(), id.TeamID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]KeyView, 0, len(keys))
	for _, k := range keys {
		out = append(out, keyView(k, ""))
	}
	writeJSON(w, http.StatusOK, map[string]any{"keys": out})
}

func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	keyID := r.PathValue("id")
	k, err := s.store.GetKey(r.Context(), id.TeamID, keyID)
	if errors.Is(err, store.ErrNotFound) {
		s.writeError(w, r, notFound("key %s not found", truncate(keyID)))
		return
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if k.Admin && !id.Admin {
		s.writeError(w, r, errdefs.New(errdefs.Forbidden, "only an admin key can revoke an admin key"))
		return
	}
	if err := s.store.RevokeKey(r.Context(), id.TeamID, keyID); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

var teamNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

func (s *Server) createTeam(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	if !id.Admin {
		s.writeError(w, r, errdefs.New(errdefs.Forbidden, "only an admin key can create teams"))
		return
	}
	var req struct {
		Name string `json:"name"`
	}
	if err := decodeJSON(w, r, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	if !teamNamePattern.MatchString(req.Name) {
		s.writeError(w, r, invalid("name must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"))
		return
	}
	t, k, secret, err := auth.CreateTeam(r.Context(), s.store, req.Name)
	if errors.Is(err, store.ErrConflict) {
		s.writeError(w, r, conflict("a team named %q already exists", req.Name))
		return
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{
		"team": TeamView{ID: t.ID, Name: t.Name, CreatedAt: Timestamp(t.CreatedAt)},
		"key":  keyView(k, secret),
	})
}
