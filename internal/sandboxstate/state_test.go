package sandboxstate

import "testing"

func TestMoves(t *testing.T) {
	for _, s := range All {
		if !Valid(string(s)) || !CanMove(s, s) {
			t.Errorf("%s: not valid or cannot stay", s)
		}
		if s != Killed && !CanMove(s, Killed) {
			t.Errorf("%s cannot be killed", s)
		}
		if s != Killed && CanMove(Killed, s) {
			t.Errorf("killed moves to %s", s)
		}
	}
	if !Killed.Final() || Running.Final() {
		t.Error("Final")
	}
	for _, c := range []struct {
		from, to State
		ok       bool
	}{
		{Running, Hibernated, true}, {Hibernated, Running, true}, {Lost, Running, true},
		{Running, Creating, false}, {Hibernated, Creating, false}, {Creating, Hibernated, false},
	} {
		if CanMove(c.from, c.to) != c.ok {
			t.Errorf("CanMove(%s, %s) = %v", c.from, c.to, !c.ok)
		}
	}
	if Valid("paused") || Valid("") {
		t.Error("unknown state valid")
	}
}
