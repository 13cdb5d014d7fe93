package layout

import (
	"strings"
	"testing"
)

// A VMM's socket path must fit a unix socket's 108 bytes: a long data dir falls back to /run.
func TestRunDirFitsASocketPath(t *testing.T) {
	short := Layout{DataDir: "/var/lib/pandastack"}.RunDir("sb_x")
	if short != "/var/lib/pandastack/run/sb_x" {
		t.Errorf("short data dir: %s", short)
	}
	long := Layout{DataDir: "/" + strings.Repeat("d", 90)}.RunDir("sb_" + strings.Repeat("x", 20))
	if !strings.HasPrefix(long, "/run/pandastack/") || len(long)+len("/agent.sock") >= 108 {
		t.Errorf("long data dir: %s", long)
	}
}
