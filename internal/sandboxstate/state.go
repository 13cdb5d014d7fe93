// Package sandboxstate is the one definition of a sandbox's states and the moves between them,
// shared by the control plane (store, scheduler, api, the sandbox service) and the host agent.
//
// Invariants: killed is final — nothing moves a sandbox out of it; a sandbox is creating only on
// its host, until its VM answers (the control plane records it once it runs); lost is the
// control plane's word for a sandbox whose host stopped answering, and is left when the host
// reports it again.
package sandboxstate

// State is a sandbox's state, spelled as the APIs spell it.
type State string

const (
	// Creating: the host is restoring its VM (host agent only).
	Creating State = "creating"
	// Running: its VM runs.
	Running State = "running"
	// Hibernated: its memory is on disk, its VM stopped; the next call wakes it.
	Hibernated State = "hibernated"
	// Error: its VM ended on its own (panic, VMM killed); the reason says why. It still holds
	// its host's files until killed.
	Error State = "error"
	// Lost: its host stopped heartbeating (control plane only).
	Lost State = "lost"
	// Killed: gone, kept as history (control plane only).
	Killed State = "killed"
)

// All lists every state.
var All = []State{Creating, Running, Hibernated, Error, Lost, Killed}

// moves are the allowed transitions (a state may always stay what it is).
var moves = map[State][]State{
	Creating:   {Running, Error, Killed},
	Running:    {Hibernated, Error, Lost, Killed},
	Hibernated: {Running, Error, Lost, Killed},
	// The host's report wins: a sandbox in error or lost may be running or hibernated there.
	Error: {Running, Hibernated, Lost, Killed},
	Lost:  {Running, Hibernated, Error, Killed},
	// Killed: none.
}

// Valid reports whether s is a state.
func Valid(s string) bool {
	_, ok := moves[State(s)]
	return ok || State(s) == Killed
}

// CanMove reports whether a sandbox in state from may move to state to.
func CanMove(from, to State) bool {
	if from == to {
		return Valid(string(from))
	}
	for _, t := range moves[from] {
		if t == to {
			return true
		}
	}
	return false
}

// Reachable reports whether calls reach a sandbox in s: its VM runs, or it is hibernated and its
// host wakes it for the call.
func (s State) Reachable() bool { return s == Running || s == Hibernated }

// Final reports whether nothing can move a sandbox out of s.
func (s State) Final() bool { return s == Killed }
