// Package fanout runs n calls side by side and waits for them all: the children of a fork onto
// another host, an app's instances restored at once. Each spelled its results, its errors and a
// WaitGroup.
package fanout

import (
	"errors"
	"sync"
)

// Each calls f(0) … f(n-1) at once and returns their results in that order with their errors
// joined (nil when every call succeeded). The results come back on an error too, so that a caller
// can undo the calls that did succeed.
func Each[T any](n int, f func(i int) (T, error)) ([]T, error) {
	out := make([]T, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { out[i], errs[i] = f(i) })
	}
	wg.Wait()
	return out, errors.Join(errs...)
}
