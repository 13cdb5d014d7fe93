package timing

import (
	"context"
	"strings"
	"testing"
)

func TestTraceAndSteps(t *testing.T) {
	ctx, tr := Ensure(context.Background())
	if again, tr2 := Ensure(ctx); tr2 != tr || From(again) != tr {
		t.Fatal("Ensure started a second trace on a ctx that has one")
	}
	Mark(ctx, "a")
	Mark(ctx, "b")
	Mark(ctx, "a") // adds to a
	Mark(context.Background(), "ignored")
	var nilTrace *Trace
	nilTrace.Mark("ignored") // no panic
	steps := tr.Steps()
	if len(steps) != 2 || steps[0].Name != "a" || steps[1].Name != "b" {
		t.Fatalf("steps %+v, want a then b", steps)
	}
	var sum int64
	for _, s := range steps {
		if s.D < 0 {
			t.Fatalf("negative step %+v", s)
		}
		sum += int64(s.D)
	}
	if sum != int64(tr.Total()) {
		t.Fatalf("steps add up to %d, total %d", sum, tr.Total())
	}

	hs := NewSteps("x_seconds", "help text")
	hs.Observe("create", tr)
	hs.Observe("create", tr)
	var b strings.Builder
	hs.Write(&b)
	out := b.String()
	for _, want := range []string{
		"# TYPE x_seconds histogram\n",
		`x_seconds_count{op="create",step="a"} 2` + "\n",
		`x_seconds_count{op="create",step="total"} 2` + "\n",
		`x_seconds_bucket{op="create",step="b",le="+Inf"} 2` + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

func TestHistogramBuckets(t *testing.T) {
	h := NewHistogram([]float64{0.1, 1})
	for _, s := range []float64{0.05, 0.1, 0.5, 2} {
		h.Observe(s)
	}
	var b strings.Builder
	h.Write(&b, "y", "")
	want := "y_bucket{le=\"0.1\"} 2\ny_bucket{le=\"1\"} 3\ny_bucket{le=\"+Inf\"} 4\ny_sum 2.65\ny_count 4\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}
