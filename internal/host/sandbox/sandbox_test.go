package sandbox

import (
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

func TestLimitsWithDefaults(t *testing.T) {
	l := Limits{HostMemoryMiB: 8192}.WithDefaults()
	if l.MaxMemoryMiB != 4096 || l.MemoryOvercommit != DefaultMemoryOvercommit || l.MemoryWatermarkMiB != 512 ||
		l.PressureInterval != time.Second || l.MaxVCPUs < 1 {
		t.Fatalf("defaults: %+v", l)
	}
	set := Limits{MaxVCPUs: 2, MaxMemoryMiB: 1024, HostMemoryMiB: 4096, MemoryOvercommit: 1.5, MemoryWatermarkMiB: -1, PressureInterval: time.Minute}
	if got := set.WithDefaults(); got != set {
		t.Fatalf("what the operator set changed: %+v", got)
	}
}

func TestValidateExec(t *testing.T) {
	zero, day := 0.0, 25*3600.0
	for _, r := range []hostapi.ExecRequest{
		{},
		{Cmd: "true", Argv: []string{"true"}},
		{Cmd: "true", TimeoutSeconds: &zero},
		{Cmd: "true", TimeoutSeconds: &day},
		{Cmd: "true", Env: map[string]string{"A=B": "x"}},
	} {
		if err := validateExec(&r); !errdefs.Is(err, errdefs.Invalid) {
			t.Errorf("%+v: %v", r, err)
		}
	}
	if err := validateExec(&hostapi.ExecRequest{Argv: []string{"ls"}, Env: map[string]string{"A": "b"}}); err != nil {
		t.Errorf("a sound request: %v", err)
	}
}
