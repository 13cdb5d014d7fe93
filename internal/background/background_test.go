package background

import "testing"

func TestCloseCancelsAndWaits(t *testing.T) {
	g := New()
	done := false
	g.Go(func() {
		<-g.Ctx().Done()
		done = true
	})
	g.Close()
	if !done {
		t.Fatal("Close returned before the work it cancelled ended")
	}
	if g.Ctx().Err() == nil {
		t.Fatal("the context is live after Close")
	}
}

func TestWaitDoesNotCancel(t *testing.T) {
	g := New()
	ran := false
	g.Go(func() { ran = true })
	g.Wait()
	if !ran {
		t.Fatal("Wait returned before the work ended")
	}
	if g.Ctx().Err() != nil {
		t.Fatal("Wait cancelled the context")
	}
}
