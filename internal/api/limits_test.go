package api

import (
	"context"
	"testing"
)

// Templates and sandboxes larger than the hosts allow are refused up front with a 400 naming the
// limit: no build starts, no create reaches a host (a 64 GiB / 16 vCPU bake used to start on any
// host).
func TestSizeLimitsUpFront(t *testing.T) {
	e := newEnv(t)
	k := e.admin
	e.agent.SetMaxVCPUs(2)
	if err := e.sched.PollStatic(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Plain 400 answers, not a build stream (which starts with 200).
	e.wantErr(e.do("POST", "/v1/templates", k, map[string]any{"name": "huge", "from": "base", "memory_mib": 65536, "vcpus": 2}),
		400, "invalid_request", "max_memory_mib")
	e.wantErr(e.do("POST", "/v1/templates", k, map[string]any{"name": "wide", "from": "base", "vcpus": 16}),
		400, "invalid_request", "max_vcpus")
	// A host whose limits fall below a template's size (here 400 MiB: at most 200 MiB per VM, the
	// template has 256) does not get its sandboxes: 400, not a placement.
	e.agent.SetMemory(400)
	if err := e.sched.PollStatic(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := len(e.agent.All())
	e.wantErr(e.do("POST", "/v1/sandboxes", k, map[string]any{"template": "base"}), 400, "invalid_request", "max_memory_mib")
	if len(e.agent.All()) != before {
		t.Fatal("a sandbox was made")
	}
}

// Placement counts committed guest memory (what the host admits: its overcommit ratio × its
// memory), not memory free at the moment: a host with 8 GiB free but its commit limit reached
// takes no more sandboxes.
func TestPlacementOnCommittedMemory(t *testing.T) {
	e := newEnv(t)
	k := e.admin
	e.agent.SetMemory(512) // commit limit 1024 MiB: four 256 MiB sandboxes
	e.agent.SetSlots(100)
	if err := e.sched.PollStatic(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		e.create(k, map[string]any{"template": "base"})
	}
	if err := e.sched.PollStatic(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.wantErr(e.do("POST", "/v1/sandboxes", k, map[string]any{"template": "base"}), 503, "capacity", "")
}
