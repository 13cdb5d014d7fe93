package defaults

import (
	"testing"
	"time"
)

func TestPositive(t *testing.T) {
	for _, c := range []struct{ in, want time.Duration }{{0, time.Minute}, {-time.Second, time.Minute}, {time.Second, time.Second}} {
		v := c.in
		Positive(&v, time.Minute)
		if v != c.want {
			t.Errorf("Positive(%v, 1m) = %v, want %v", c.in, v, c.want)
		}
	}
	n := 3
	Positive(&n, 10)
	if n != 3 {
		t.Errorf("Positive(3, 10) = %d, want 3", n)
	}
}

func TestClock(t *testing.T) {
	var now func() time.Time
	Clock(&now)
	if now == nil || time.Since(now()) < 0 {
		t.Fatal("Clock left a nil clock unset")
	}
	fixed := time.Unix(1, 0)
	now = func() time.Time { return fixed }
	Clock(&now)
	if !now().Equal(fixed) {
		t.Fatal("Clock replaced a set clock")
	}
}
