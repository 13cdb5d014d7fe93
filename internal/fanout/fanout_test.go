package fanout_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/pandastack/pandastack/internal/fanout"
)

// TestEach: results in call order; every error joined; the other calls' results kept on an error.
func TestEach(t *testing.T) {
	got, err := fanout.Each(5, func(i int) (int, error) { return i * i, nil })
	if err != nil || !slices.Equal(got, []int{0, 1, 4, 9, 16}) {
		t.Fatalf("got %v, %v", got, err)
	}

	bad2, bad4 := errors.New("two"), errors.New("four")
	strs, err := fanout.Each(5, func(i int) (string, error) {
		switch i {
		case 2:
			return "", bad2
		case 4:
			return "", bad4
		}
		return fmt.Sprint("ok", i), nil
	})
	if !errors.Is(err, bad2) || !errors.Is(err, bad4) {
		t.Fatalf("err %v: want both calls' errors", err)
	}
	if !slices.Equal(strs, []string{"ok0", "ok1", "", "ok3", ""}) {
		t.Fatalf("got %q", strs)
	}

	if got, err := fanout.Each(0, func(int) (int, error) { panic("called") }); err != nil || len(got) != 0 {
		t.Fatalf("n=0: %v, %v", got, err)
	}
}
