// Package nsrun runs code inside a network namespace. It is its own package so that the network
// package and its test scaffolding (nettest) share it without importing each other.
package nsrun

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// In runs fn on an OS thread that has joined the namespace ns. The thread returns to the
// original namespace afterwards; if it cannot, it is discarded instead of being reused.
// Goroutines started by fn do not inherit the namespace.
func In(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			// Leave the thread locked: the runtime ends it when this goroutine returns.
			errc <- errors.Join(ferr, fmt.Errorf("restore netns: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
