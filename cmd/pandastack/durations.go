package main

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"time"

	"github.com/spf13/pflag"
)

// Every time the CLI takes (a flag or an argument) is written the same way: plain seconds (400,
// 2.5) or a Go duration (400s, 5m, 1h30m).

// durationSyntax is what time.ParseDuration reads; a string of that shape it refuses is out of
// range, not malformed.
var durationSyntax = regexp.MustCompile(`^[-+]?([0-9]*(\.[0-9]*)?(ns|us|µs|μs|ms|s|m|h))+$`)

// parseDuration reads seconds or a duration.
func parseDuration(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil || errorIsRange(err) {
		if err != nil || math.IsNaN(f) || math.Abs(f) >= float64(math.MaxInt64)/float64(time.Second) {
			return 0, fmt.Errorf("%q is out of range", s)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		if durationSyntax.MatchString(s) {
			return 0, fmt.Errorf("%q is out of range", s)
		}
		return 0, fmt.Errorf("%q is not a time: give seconds (400) or a duration (400s, 5m, 1h30m)", s)
	}
	return d, nil
}

func errorIsRange(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// wholeSeconds is d in seconds, refused when it is not a whole number of them (ttl_seconds is
// an integer).
func wholeSeconds(what string, d time.Duration) (int64, error) {
	if d%time.Second != 0 {
		return 0, fmt.Errorf("%s must be a whole number of seconds, got %s", what, d)
	}
	return int64(d / time.Second), nil
}

// durationValue is a pflag.Value of parseDuration's syntax.
type durationValue time.Duration

func (d *durationValue) Set(s string) error {
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

func (d *durationValue) String() string {
	if *d == 0 {
		return "0" // pflag shows no "(default …)" for a zero
	}
	return time.Duration(*d).String()
}

func (d *durationValue) Type() string { return "duration" }

// durationVar is pflag's DurationVar that also takes plain seconds.
func durationVar(f *pflag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	f.Var((*durationValue)(p), name, usage)
}
