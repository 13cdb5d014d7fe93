// Package splice joins two connections: bytes each side sends go to the other until both
// directions end. Used by the host agent's TCP tunnel to sandbox ports and by the control
// plane's proxies of such tunnels.
package splice

import (
	"bufio"
	"io"
	"net"
)

// Join copies a's bytes (read from ra, which may hold bytes already buffered off a, or nil for
// a itself) to b and b's to a. When one direction ends it half-closes the other side's write (or
// closes it when it cannot half-close) and waits for the second direction.
func Join(a net.Conn, ra io.Reader, b net.Conn) {
	if ra == nil {
		ra = a
	}
	done := make(chan struct{}, 2)
	cp := func(dst net.Conn, src io.Reader) {
		io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			dst.Close()
		}
		done <- struct{}{}
	}
	go cp(b, ra)
	go cp(a, b)
	<-done
	<-done
}

// BufferedConn is a connection whose first bytes may already sit in R's buffer (a peek, or an
// HTTP response read off it): reads come from R, everything else from Conn.
type BufferedConn struct {
	net.Conn
	R *bufio.Reader
}

func (b *BufferedConn) Read(p []byte) (int, error) { return b.R.Read(p) }

// CloseWrite half-closes the connection when it can (TCP), else closes it.
func (b *BufferedConn) CloseWrite() error {
	if cw, ok := b.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return b.Conn.Close()
}
