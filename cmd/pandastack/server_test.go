package main

import (
	"io"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/pandastack/pandastack/internal/app"
)

// TestKilledRetentionFlag: server and up take --killed-retention (default 7 days) in the CLI's
// time syntax, and refuse what is not a time.
func TestKilledRetentionFlag(t *testing.T) {
	parse := func(args ...string) (app.ControlPlaneConfig, error) {
		var o app.ControlPlaneConfig
		f := pflag.NewFlagSet("server", pflag.ContinueOnError)
		f.SetOutput(io.Discard)
		registerControlPlaneFlags(f, &o)
		return o, f.Parse(args)
	}
	if o, err := parse(); err != nil || o.KilledRetention != 7*24*time.Hour {
		t.Fatalf("default: %v %v", o.KilledRetention, err)
	}
	for arg, want := range map[string]time.Duration{"48h": 48 * time.Hour, "3600": time.Hour} {
		if o, err := parse("--killed-retention", arg); err != nil || o.KilledRetention != want {
			t.Errorf("--killed-retention %s: %v %v, want %v", arg, o.KilledRetention, err, want)
		}
	}
	if _, err := parse("--killed-retention", "a week"); err == nil {
		t.Error("--killed-retention 'a week' was taken")
	}
}
