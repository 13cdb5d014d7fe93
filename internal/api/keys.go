package api

import (
	"errors"
	"net/http"
	"regexp"
	"time"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

const maxKeyNameLen = 128

func (s *Server) createKey(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	req, ok := decoded[v1.CreateKeyRequest](s, w, r, true)
	if !ok {
		return
	}
	if len(req.Name) > maxKeyNameLen || hasControl(req.Name) {
		s.writeError(w, r, invalid("name must be at most %d printable bytes", maxKeyNameLen))
		return
	}
	scopes, admin, err := auth.ParseScopes(req.Scopes)
	if err != nil {
		s.writeError(w, r, invalid("scopes: %s", err))
		return
	}
	var expires time.Time
	if req.ExpiresAt != "" {
		if expires, err = time.Parse(time.RFC3339Nano, req.ExpiresAt); err != nil || !expires.After(s.now()) {
			s.writeError(w, r, invalid("expires_at must be an RFC 3339 time in the future, e.g. 2030-01-02T15:04:05Z"))
			return
		}
	}
	admin = admin || req.Admin
	// Any key may mint ordinary keys for its own team; only an admin may mint admin keys.
	if admin && !id.Admin {
		s.writeError(w, r, errdefs.New(errdefs.Forbidden, "only an admin key can create admin keys"))
		return
	}
	issue := auth.Issue
	if req.E2B {
		if admin {
			s.writeError(w, r, invalid("an E2B key cannot be an admin key: it works only on the E2B-compatible API"))
			return
		}
		issue = auth.IssueE2B
	}
	k, secret, err := issue(r.Context(), s.store, store.APIKey{TeamID: id.TeamID, Name: req.Name, Admin: admin,
		Scopes: scopes, ExpiresAt: expires})
	s.reply(w, r, http.StatusCreated, keyView(k, secret), err)
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	keys, err := s.store.ListKeys(r.Context(), id.TeamID)
	s.reply(w, r, http.StatusOK, v1.Keys{Keys: list(keys, func(k store.APIKey) v1.Key { return keyView(k, "") })}, err)
}

func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	k, err := owned(r, "key", s.store.GetKey)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if k.Admin && !id.Admin {
		s.writeError(w, r, errdefs.New(errdefs.Forbidden, "only an admin key can revoke an admin key"))
		return
	}
	s.reply(w, r, http.StatusNoContent, nil, s.store.RevokeKey(r.Context(), id.TeamID, k.ID))
}

var teamNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

func (s *Server) createTeam(w http.ResponseWriter, r *http.Request) {
	var req v1.CreateTeamRequest
	if !s.adminBody(w, r, "create teams", &req, false) {
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
	s.reply(w, r, http.StatusCreated, v1.NewTeam{Key: keyView(k, secret), Team: v1.Team{ID: t.ID, Name: t.Name, CreatedAt: v1.Timestamp(t.CreatedAt)}}, err)
}

// scoped refuses a call its key's scopes do not cover (403 naming the missing scope).
func (s *Server) scoped(rt route, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := auth.FromContext(r.Context())
		if err := auth.Allow(id.Scopes, rt.method, rt.path); err != nil {
			s.writeError(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// adminBody refuses (403) a caller that is not an admin key, saying it cannot do what, then
// decodes the JSON body into v; it reports whether the handler may go on.
func (s *Server) adminBody(w http.ResponseWriter, r *http.Request, what string, v any, allowEmpty bool) bool {
	err := error(nil)
	if id, _ := auth.FromContext(r.Context()); !id.Admin {
		err = errdefs.New(errdefs.Forbidden, "only an admin key can %s", what)
	} else if v != nil {
		err = decodeJSON(w, r, v, allowEmpty)
	}
	if err != nil {
		s.writeError(w, r, err)
	}
	return err == nil
}
