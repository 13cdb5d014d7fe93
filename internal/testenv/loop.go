package testenv

import "sync"

// Loop calls fn over and over in n goroutines (clients looping requests across a switch) until
// the returned stop is called; stop waits for them.
func Loop(n int, fn func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
					fn()
				}
			}
		}()
	}
	return func() {
		close(done)
		wg.Wait()
	}
}
