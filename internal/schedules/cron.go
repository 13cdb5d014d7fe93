package schedules

import (
	"fmt"
	"strings"
	"time"

	"github.com/adhocore/gronx"
)

// Cron is a parsed schedule expression in a time zone: 5 fields (minute hour day-of-month month
// day-of-week) or one of the macros, matched against local wall-clock time by gronx.
//
// Local wall-clock semantics across DST: every local time the expression names fires once. On
// a fall-back day the repeated hour's times fire at their first occurrence only; on a
// spring-forward day the times that do not exist are missed instants (the schedule's `missed`
// policy: skip, or run once at the first instant after the gap).
type Cron struct {
	expr string
	loc  *time.Location
}

// macros are the accepted @-forms (gronx knows more, e.g. seconds; this API takes minutes only).
var macros = map[string]string{
	"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
	"@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}

var fieldNames = []string{"minute", "hour", "day of month", "month", "day of week"}

// ParseCron checks expr and tz and returns the schedule, or an error that says what is wrong
// (for a 400).
func ParseCron(expr, tz string) (Cron, error) {
	expr = strings.TrimSpace(expr)
	if expr == "" {
		return Cron{}, fmt.Errorf("cron is required: 5 fields (minute hour day-of-month month day-of-week) or a macro such as @hourly")
	}
	if len(expr) > 200 {
		return Cron{}, fmt.Errorf("cron is longer than 200 characters")
	}
	norm := expr
	if strings.HasPrefix(expr, "@") {
		m, ok := macros[strings.ToLower(expr)]
		if !ok {
			return Cron{}, fmt.Errorf("cron macro %q is not known: use @yearly, @monthly, @weekly, @daily or @hourly", expr)
		}
		norm = m
	}
	fields := strings.Fields(norm)
	if len(fields) != 5 {
		return Cron{}, fmt.Errorf("cron %q has %d fields, want 5 (minute hour day-of-month month day-of-week)", expr, len(fields))
	}
	norm = strings.Join(fields, " ")
	if !gronx.IsValid(norm) {
		segs, _ := gronx.Segments(norm) // 6: seconds prepended
		for i, f := range fields {
			c := &gronx.SegmentChecker{}
			c.SetRef(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			if _, err := c.CheckDue(segs[i+1], i+1); err != nil {
				return Cron{}, fmt.Errorf("cron %q: the %s field %q is not valid: %v", expr, fieldNames[i], f, err)
			}
		}
		return Cron{}, fmt.Errorf("cron %q is not a valid expression", expr)
	}
	if tz == "" {
		tz = "UTC"
	}
	if len(tz) > 64 || strings.ContainsAny(tz, "\x00\\") || strings.Contains(tz, "..") || strings.HasPrefix(tz, "/") {
		return Cron{}, fmt.Errorf("timezone %q is not an IANA time zone name (e.g. Europe/Berlin)", truncate(tz))
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return Cron{}, fmt.Errorf("timezone %q is not known: give an IANA time zone name such as Europe/Berlin or UTC", truncate(tz))
	}
	return Cron{expr: norm, loc: loc}, nil
}

// wall is t's local wall-clock time in c's zone, as a UTC time with the same fields (seconds
// dropped).
func (c Cron) wall(t time.Time) time.Time {
	l := t.In(c.loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), 0, 0, time.UTC)
}

// matches says whether the expression names the wall-clock minute w.
func (c Cron) matches(w time.Time) bool {
	due, err := gronx.New().IsDue(c.expr, w)
	return err == nil && due
}

// firstOccurrence says whether instant t is the first instant whose local time is wall(t) (on a
// fall-back day the repeated hour's second pass is not).
func (c Cron) firstOccurrence(t time.Time) bool {
	first, ok := c.resolve(c.wall(t))
	return ok && first.Equal(t.Truncate(time.Minute))
}

// gapHit says whether a local time that does not exist (skipped by a spring-forward just before
// minute instant t) is one the expression names.
func (c Cron) gapHit(t time.Time) bool {
	prev, cur := c.wall(t.Add(-time.Minute)), c.wall(t)
	for w := prev.Add(time.Minute); w.Before(cur); w = w.Add(time.Minute) {
		if c.matches(w) {
			return true
		}
	}
	return false
}

// instant is one minute the engine looked at: due (the expression names its local time, first
// occurrence) or a DST-missed one (a named local time skipped just before it).
type instant struct {
	at     time.Time
	due    bool
	dstGap bool
}

// maxLookback bounds how far back one pass looks (a server down for longer loses older instants).
const maxLookback = 31 * 24 * time.Hour

// Instants returns the minutes in (from, to] that fire or were skipped by DST, in order.
func (c Cron) instants(from, to time.Time) []instant {
	if to.Sub(from) > maxLookback {
		from = to.Add(-maxLookback)
	}
	var out []instant
	t := from.Truncate(time.Minute).Add(time.Minute)
	for ; !t.After(to); t = t.Add(time.Minute) {
		in := instant{at: t, due: c.matches(c.wall(t)) && c.firstOccurrence(t), dstGap: c.gapHit(t)}
		if in.due || in.dstGap {
			out = append(out, in)
		}
	}
	return out
}

// Next returns the first instant after t at which the schedule fires (zero if none is found
// within a few years), for display.
func (c Cron) Next(t time.Time) time.Time {
	w := c.wall(t)
	for i := 0; i < 1000; i++ {
		next, err := gronx.NextTickAfter(c.expr, w, false)
		if err != nil {
			return time.Time{}
		}
		w = next
		if at, ok := c.resolve(w); ok && at.After(t) {
			return at
		}
	}
	return time.Time{}
}

// resolve is the first instant whose local time is the wall-clock time w; ok is false when w
// does not exist (a spring-forward gap).
func (c Cron) resolve(w time.Time) (time.Time, bool) {
	var best time.Time
	for _, d := range []time.Duration{-14 * time.Hour, -2 * time.Hour, 0, 2 * time.Hour, 14 * time.Hour} {
		_, off := w.Add(d).In(c.loc).Zone()
		cand := w.Add(-time.Duration(off) * time.Second)
		if c.wall(cand).Equal(w) && (best.IsZero() || cand.Before(best)) {
			best = cand
		}
	}
	return best, !best.IsZero()
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
