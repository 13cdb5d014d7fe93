// Package faults is the fault-injection suite (its tests only): it runs the real server and host
// agent binaries as child processes, SIGKILLs one of them at a named point in the middle of an
// operation (internal/faultpoint), restarts it and checks that the system converges — no sandbox
// stuck in a transitional state, no leaked VMM, network namespace, loop device, cgroup or file,
// no record pointing at nothing, nothing acknowledged lost — with the doctor reporting nothing
// once it has repaired what the fault left. docs/operations.md "What each fault costs" lists
// what each case leaves.
package faults
