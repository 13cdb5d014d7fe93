package guest

import (
	"context"
	"net"
	"time"
)

// SetReplyTimeoutForTest shortens ReplyTimeout until the test ends.
func SetReplyTimeoutForTest(t interface{ Cleanup(func()) }, d time.Duration) {
	old := ReplyTimeout
	ReplyTimeout = d
	t.Cleanup(func() { ReplyTimeout = old })
}

// CloseConnForTest closes the client's current socket under it.
func CloseConnForTest(c *Client) {
	c.mu.Lock()
	conn := c.conn
	c.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
}

// OpenRawStreamForTest opens a bare yamux stream on the client's session.
func OpenRawStreamForTest(ctx context.Context, c *Client) (net.Conn, error) {
	s, err := c.session(ctx)
	if err != nil {
		return nil, err
	}
	return s.OpenStream()
}
