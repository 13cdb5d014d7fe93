package sandbox

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/runtime"
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

// TestReportsDoNotWaitForGuestConnect: while a call connects to a slow guest agent (up to 15 s
// on a loaded host), the host's report (Committed, List: its heartbeat's figures) does not wait
// for it.
func TestReportsDoNotWaitForGuestConnect(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c // and never answers the handshake
		}
	}()
	sb := &sandbox{rec: record{ID: "sb_1", State: StateRunning, MemoryMiB: 128, VM: runtime.VM{AgentSocket: sock}}}
	m := &Manager{sandboxes: map[string]*sandbox{"sb_1": sb}}
	ctx, cancel := context.WithCancel(context.Background())
	called := make(chan error, 1)
	go func() {
		_, err := sb.guest(ctx)
		called <- err
	}()
	conn := <-accepted // the call is connecting: it waits for the guest's READY
	defer conn.Close()
	if !sb.mu.TryLock() {
		t.Fatal("the sandbox's fields are locked while its guest agent is connected to")
	}
	sb.mu.Unlock()
	if got := m.Committed(); got != 128 {
		t.Fatalf("committed %d MiB; want 128", got)
	}
	if l := m.List(); len(l) != 1 || l[0].State != StateRunning {
		t.Fatalf("list %+v", l)
	}
	cancel()
	if err := <-called; err == nil {
		t.Fatal("a connect to a guest that never answered succeeded")
	}
	// A sandbox being killed (its client taken, its VMM going) is not connected to at all.
	sb.mu.Lock()
	sb.killed = true
	sb.mu.Unlock()
	if _, err := sb.guest(context.Background()); !errdefs.Is(err, errdefs.Conflict) {
		t.Fatalf("a call to a sandbox being killed: %v; want a conflict", err)
	}
}
