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

// TestCreateRefusedPastSlots: hibernated sandboxes hold a slot but no memory; a create past the
// host's slots is refused (`capacity`) even though the commit limit has room, as it is past the
// commit limit.
func TestCreateRefusedPastSlots(t *testing.T) {
	m := &Manager{cfg: Config{Limits: Limits{HostMemoryMiB: 256, MemoryOvercommit: 1}}, sandboxes: map[string]*sandbox{}}
	if m.SlotsTotal() != 2 {
		t.Fatalf("%d slots, want 2 (256 MiB over 128)", m.SlotsTotal())
	}
	for _, id := range []string{"sb_1", "sb_2"} {
		if err := m.admitSandboxLocked(id, 128); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		m.sandboxes[id] = &sandbox{rec: record{ID: id, State: StateHibernated, MemoryMiB: 128}}
	}
	err := m.admitSandboxLocked("sb_3", 128)
	if !errdefs.Is(err, errdefs.Capacity) {
		t.Fatalf("a create past the slots: %v, want a capacity error", err)
	}
	delete(m.sandboxes, "sb_1")
	if err := m.admitSandboxLocked("sb_3", 128); err != nil {
		t.Fatalf("with a slot free: %v", err)
	}
}
