package inflight

import "testing"

func TestCounter(t *testing.T) {
	var c Counter
	if !c.Acquire("a", 2) || !c.Acquire("a", 2) || c.Acquire("a", 2) {
		t.Fatal("a limit of 2 let a third in, or not two")
	}
	if !c.Acquire("b", 1) {
		t.Fatal("keys share their count")
	}
	c.Release("a")
	if !c.Acquire("a", 2) {
		t.Fatal("a released place was not given back")
	}
	c.Release("a")
	c.Release("a")
	c.Release("b")
	if len(c.n) != 0 {
		t.Fatalf("released keys kept: %v", c.n)
	}
}
