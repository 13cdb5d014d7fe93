package schedules

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/store"
)

// Limits of a schedule.
const (
	MaxPayloadBytes       = 256 << 10
	MaxCmdBytes           = 64 << 10
	MaxNameLen            = 64
	DefaultTimeoutSeconds = 3600
	MaxTimeoutSeconds     = 86400
)

// Spec is a schedule as a team asks for it (the API decodes it; Create validates it).
type Spec struct {
	Name           string
	Cron           string
	Timezone       string
	FunctionID     string
	Template       string
	Cmd            string
	Payload        json.RawMessage
	Overlap        string
	Missed         string
	Enabled        *bool
	TimeoutSeconds int64
}

// FunctionChecker says whether a team has a function (nil error), for schedule creates.
type FunctionChecker interface {
	CheckFunction(ctx context.Context, teamID, functionID string) error
}

// Functions sets what checks a function target at create and runs it at fire time.
func (e *Engine) SetFunctions(f interface {
	FunctionInvoker
	FunctionChecker
}) {
	e.cfg.Functions = f
	e.check = f
}

// Create validates spec and records the schedule (enabled unless Enabled is false). Bad input is
// errdefs.Invalid naming the problem; a payload over MaxPayloadBytes is errdefs.TooLarge.
func (e *Engine) Create(ctx context.Context, teamID string, sp Spec) (store.Schedule, error) {
	if _, err := ParseCron(sp.Cron, sp.Timezone); err != nil {
		return store.Schedule{}, errdefs.Invalidf("%v", err)
	}
	if sp.Timezone == "" {
		sp.Timezone = "UTC"
	}
	if len(sp.Name) > MaxNameLen || strings.ContainsFunc(sp.Name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return store.Schedule{}, errdefs.Invalidf("name must be at most %d bytes without control characters", MaxNameLen)
	}
	var err error
	if sp.Overlap, err = oneOf("overlap", sp.Overlap, "skip", "queue", "allow"); err != nil {
		return store.Schedule{}, err
	}
	if sp.Missed, err = oneOf("missed", sp.Missed, "skip", "run_once"); err != nil {
		return store.Schedule{}, err
	}
	if len(sp.Payload) > MaxPayloadBytes {
		return store.Schedule{}, errdefs.New(errdefs.TooLarge, "payload is %d bytes; the limit is %d", len(sp.Payload), MaxPayloadBytes)
	}
	payload := "null"
	if len(sp.Payload) > 0 {
		if !json.Valid(sp.Payload) {
			return store.Schedule{}, errdefs.Invalidf("payload must be JSON")
		}
		payload = string(sp.Payload)
	}
	switch {
	case sp.TimeoutSeconds == 0:
		sp.TimeoutSeconds = DefaultTimeoutSeconds
	case sp.TimeoutSeconds < 0 || sp.TimeoutSeconds > MaxTimeoutSeconds:
		return store.Schedule{}, errdefs.Invalidf("timeout_seconds must be 1-%d", MaxTimeoutSeconds)
	}
	switch {
	case sp.FunctionID != "" && (sp.Template != "" || sp.Cmd != ""):
		return store.Schedule{}, errdefs.Invalidf("give function_id, or template and cmd, not both")
	case sp.FunctionID != "":
		if e.check == nil {
			return store.Schedule{}, errdefs.Invalidf("functions are not available on this server")
		}
		if err := e.check.CheckFunction(ctx, teamID, sp.FunctionID); err != nil {
			return store.Schedule{}, err
		}
	case sp.Template == "" || sp.Cmd == "":
		return store.Schedule{}, errdefs.Invalidf("a schedule runs a function (function_id) or a command in a fresh sandbox (template and cmd)")
	case len(sp.Cmd) > MaxCmdBytes:
		return store.Schedule{}, errdefs.Invalidf("cmd is longer than %d bytes", MaxCmdBytes)
	default:
		if _, _, _, err := e.cfg.Templates.Resolve(ctx, teamID, sp.Template); err != nil {
			return store.Schedule{}, err
		}
	}
	enabled := sp.Enabled == nil || *sp.Enabled
	return e.cfg.Store.CreateSchedule(ctx, store.Schedule{ID: auth.NewID("sch_"), TeamID: teamID, Name: sp.Name,
		Cron: strings.TrimSpace(sp.Cron), Timezone: sp.Timezone, FunctionID: sp.FunctionID, Template: sp.Template, Cmd: sp.Cmd,
		Payload: payload, Overlap: sp.Overlap, Missed: sp.Missed, Enabled: enabled, TimeoutSeconds: sp.TimeoutSeconds,
		CreatedAt: e.now(), CheckedUntil: e.now()})
}

func oneOf(field, v string, allowed ...string) (string, error) {
	if v == "" {
		return allowed[0], nil
	}
	for _, a := range allowed {
		if v == a {
			return v, nil
		}
	}
	return "", errdefs.Invalidf("%s must be one of %s (default %s)", field, strings.Join(allowed, ", "), allowed[0])
}

// Get returns the team's schedule; another team's is errdefs.NotFound like a missing one.
func (e *Engine) Get(ctx context.Context, teamID, id string) (store.Schedule, error) {
	sc, err := e.cfg.Store.GetTeamSchedule(ctx, teamID, id)
	if errors.Is(err, store.ErrNotFound) {
		return sc, errdefs.NotFoundf("schedule %s not found", truncate(id))
	}
	return sc, err
}

// List returns the team's schedules, newest first.
func (e *Engine) List(ctx context.Context, teamID string) ([]store.Schedule, error) {
	return e.cfg.Store.ListTeamSchedules(ctx, teamID)
}

// Delete deletes the team's schedule and its runs (runs in flight finish).
func (e *Engine) Delete(ctx context.Context, teamID, id string) error {
	err := e.cfg.Store.DeleteSchedule(ctx, teamID, id)
	if errors.Is(err, store.ErrNotFound) {
		return errdefs.NotFoundf("schedule %s not found", truncate(id))
	}
	return err
}

// SetEnabled pauses (false) or resumes (true) the team's schedule. A resumed schedule fires from
// now on: instants while it was paused are not run.
func (e *Engine) SetEnabled(ctx context.Context, teamID, id string, enabled bool) (store.Schedule, error) {
	if _, err := e.Get(ctx, teamID, id); err != nil {
		return store.Schedule{}, err
	}
	return e.cfg.Store.SetScheduleEnabled(ctx, teamID, id, enabled, e.now())
}

// Trigger runs the team's schedule now (a manual run, outside its cron instants; the overlap
// policy applies) and returns the run as recorded.
func (e *Engine) Trigger(ctx context.Context, teamID, id string) (store.ScheduleRun, error) {
	sc, err := e.Get(ctx, teamID, id)
	if err != nil {
		return store.ScheduleRun{}, err
	}
	at := e.now()
	for range 5 { // two triggers in one microsecond: the later takes the next one
		run, err := e.claim(ctx, sc, "manual", at)
		if err != nil || run.ID != "" {
			return run, err
		}
		at = at.Add(time.Microsecond)
	}
	return store.ScheduleRun{}, errdefs.Conflictf("schedule %s is being triggered too often at once: retry", sc.ID)
}

// Runs returns the team's schedule's runs, newest first (at most limit).
func (e *Engine) Runs(ctx context.Context, teamID, id string, limit int) ([]store.ScheduleRun, error) {
	if _, err := e.Get(ctx, teamID, id); err != nil {
		return nil, err
	}
	return e.cfg.Store.ListScheduleRuns(ctx, id, limit)
}

// NextRun is when sc fires next after now (zero when paused or never).
func (e *Engine) NextRun(sc store.Schedule) time.Time {
	if !sc.Enabled {
		return time.Time{}
	}
	c, err := ParseCron(sc.Cron, sc.Timezone)
	if err != nil {
		return time.Time{}
	}
	now := time.Now() // for display: no database round trip per schedule shown
	if e.cfg.Now != nil {
		now = e.cfg.Now()
	}
	return c.Next(now)
}
