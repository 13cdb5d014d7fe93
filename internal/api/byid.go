package api

import (
	"context"
	"net/http"

	"github.com/pandastack/pandastack/internal/auth"
)

// The handlers of a team's resource named by the path's {id} whose whole work is one service
// call (get, trigger, stats, delete, the ?limit= pages of runs and deliveries): the route table
// builds them from the call and the view of its answer.

// byID answers call(team, {id}) through view, with status.
func byID[R, V any](s *Server, status int, call func(ctx context.Context, teamID, id string) (R, error), view func(R) V) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, _ := auth.FromContext(r.Context())
		rec, err := call(r.Context(), id.TeamID, r.PathValue("id"))
		s.reply(w, r, status, view(rec), err)
	}
}

// deleteByID answers 204 once call(team, {id}) has deleted it.
func deleteByID(s *Server, call func(ctx context.Context, teamID, id string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, _ := auth.FromContext(r.Context())
		s.reply(w, r, http.StatusNoContent, nil, call(r.Context(), id.TeamID, r.PathValue("id")))
	}
}

// pageByID answers the newest ?limit= records of {id} (see limitParam), through page.
func pageByID[R, V any](s *Server, call func(ctx context.Context, teamID, id string, limit int) ([]R, error), page func([]R) V) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, _ := auth.FromContext(r.Context())
		limit, err := limitParam(r)
		var recs []R
		if err == nil {
			recs, err = call(r.Context(), id.TeamID, r.PathValue("id"), limit)
		}
		s.reply(w, r, http.StatusOK, page(recs), err)
	}
}

// asIs is the view of an answer that is already its wire form.
func asIs[T any](v T) T { return v }
