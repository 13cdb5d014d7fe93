package testenv

import (
	"net"
	"testing"
)

// Serve listens on network and address and runs handle on every connection, each in its own
// goroutine, closing the connection when handle returns. The listener closes when the test
// ends.
func Serve(t testing.TB, network, address string, handle func(c net.Conn)) net.Listener {
	t.Helper()
	l, err := net.Listen(network, address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return l
}
