package errdefs

import (
	"fmt"
	"net/http"
	"testing"
)

func TestKindsRoundTripOverHTTP(t *testing.T) {
	for k := range kinds { // every kind, including ones added later
		if k.Status() == 0 || k.Code() == "" {
			t.Fatalf("kind %d has no HTTP mapping", k)
		}
		e := New(k, "m")
		back := FromHTTP(k.Status(), e.WireCode(), "m")
		if back.Kind != k {
			t.Errorf("kind %d (%s) came back as %d", k, k.Code(), back.Kind)
		}
	}
	// A specific code keeps its status's kind and its own code.
	e := FromHTTP(http.StatusConflict, "vmm_mismatch", "x")
	if e.Kind != Conflict || e.WireCode() != "vmm_mismatch" {
		t.Fatalf("got %+v", e)
	}
	if FromHTTP(http.StatusTeapot, "odd", "x").Kind != Internal {
		t.Fatal("an unknown status must be internal")
	}
}

func TestKindOfWrapped(t *testing.T) {
	err := fmt.Errorf("creating: %w", NotFoundf("template %q", "x"))
	if !Is(err, NotFound) || Is(err, Conflict) || KindOf(fmt.Errorf("plain")) != Internal {
		t.Fatalf("KindOf(%v) = %d", err, KindOf(err))
	}
}
