package api

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/schedules"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Cron schedules (docs/functions.md): thin handlers over internal/schedules.

func (s *Server) scheduleView(sc store.Schedule) v1.Schedule {
	return v1.Schedule{ID: sc.ID, Name: sc.Name, Cron: sc.Cron, Timezone: sc.Timezone, FunctionID: sc.FunctionID,
		Template: sc.Template, Cmd: sc.Cmd, Payload: json.RawMessage(sc.Payload), Overlap: sc.Overlap, Missed: sc.Missed,
		Enabled: sc.Enabled, TimeoutSeconds: sc.TimeoutSeconds, NextRunAt: v1.Timestamp(s.schedules.NextRun(sc)),
		CreatedAt: v1.Timestamp(sc.CreatedAt)}
}

func scheduleRunView(r store.ScheduleRun) v1.ScheduleRun {
	out := v1.ScheduleRun{ID: r.ID, ScheduleID: r.ScheduleID, Trigger: r.Trigger, ScheduledFor: v1.Timestamp(r.ScheduledFor),
		Status: r.Status, StartedAt: v1.Timestamp(r.StartedAt), FinishedAt: v1.Timestamp(r.FinishedAt), SandboxID: r.SandboxID,
		FunctionRunID: r.FunctionRunID, Output: r.Output, Error: r.Error}
	if r.ExitCode >= 0 {
		code := r.ExitCode
		out.ExitCode = &code
	}
	return out
}

func (s *Server) createSchedule(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	req, ok := decoded[v1.CreateScheduleRequest](s, w, r, false)
	if !ok {
		return
	}
	sc, err := s.schedules.Create(r.Context(), id.TeamID, schedules.Spec{Name: req.Name, Cron: req.Cron, Timezone: req.Timezone,
		FunctionID: req.FunctionID, Template: req.Template, Cmd: req.Cmd, Payload: req.Payload, Overlap: req.Overlap,
		Missed: req.Missed, Enabled: req.Enabled, TimeoutSeconds: req.TimeoutSeconds})
	s.reply(w, r, http.StatusCreated, s.scheduleView(sc), err)
}

func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	list, err := s.schedules.List(r.Context(), id.TeamID)
	s.reply(w, r, http.StatusOK, v1.Schedules{Schedules: viewsOf(list, s.scheduleView)}, err)
}

func (s *Server) pauseSchedule(w http.ResponseWriter, r *http.Request)  { s.enableSchedule(w, r, false) }
func (s *Server) resumeSchedule(w http.ResponseWriter, r *http.Request) { s.enableSchedule(w, r, true) }

func (s *Server) enableSchedule(w http.ResponseWriter, r *http.Request, enabled bool) {
	id, _ := auth.FromContext(r.Context())
	sc, err := s.schedules.SetEnabled(r.Context(), id.TeamID, r.PathValue("id"), enabled)
	s.reply(w, r, http.StatusOK, s.scheduleView(sc), err)
}

// RunSchedules ticks the cron engine every interval (0: schedules.DefaultInterval) until ctx
// ends, then waits for the runs it started. Every replica runs it: an instant fires once.
func (s *Server) RunSchedules(ctx context.Context, interval time.Duration) {
	s.schedules.Run(ctx, interval)
}

// Schedules is the server's cron engine (tests tick it on their clock).
func (s *Server) Schedules() *schedules.Engine { return s.schedules }
