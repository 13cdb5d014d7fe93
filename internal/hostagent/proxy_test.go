package hostagent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pandastack/pandastack/internal/errdefs"
)

// guestAt is a running sandbox sb_x whose ports are at addr.
type guestAt string

func (g guestAt) Reach(_ context.Context, id string) (string, func(), error) {
	if id != "sb_x" {
		return "", nil, errdefs.NotFoundf("sandbox %s not found", id)
	}
	return string(g), func() {}, nil
}

// The agent's port proxy passes the application's path through as sent and never redirects to
// its own route (no VM: the sandbox's "guest address" is a loopback server that echoes the
// request line).
func TestProxyRawPath(t *testing.T) {
	guest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.RequestURI)
	}))
	defer guest.Close()
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(guest.URL, "http://"))
	a := &Agent{cfg: Config{Token: "tok"}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), reach: guestAt(host)}
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()

	// The proxy is still behind the agent token.
	if res, err := http.Get(srv.URL + "/v1/sandboxes/sb_x/ports/" + port + "/"); err != nil || res.StatusCode != 401 {
		t.Fatalf("proxy without the agent token: %v %v", res, err)
	}
	for _, p := range []string{"//etc", "/a/../b", "/./x", "/x%2Fy", "/a/..%2F..%2Fb", "/..", "/", "//", "/a//b/./"} {
		c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /v1/sandboxes/sb_x/ports/%s%s?q=1 HTTP/1.1\r\nHost: app\r\n%s: tok\r\nConnection: close\r\n\r\n",
			port, p, "X-Pandastack-Agent-Token")
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		b, _ := io.ReadAll(res.Body)
		c.Close()
		if res.StatusCode != 200 || string(b) != p+"?q=1" {
			t.Errorf("GET %s: %d Location %q, the guest got %q; want 200 and the path as sent", p, res.StatusCode, res.Header.Get("Location"), b)
		}
	}
}
