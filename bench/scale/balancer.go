package main

import (
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"
)

// balancer is the load balancer in front of the servers, as a client-side transport: each
// request goes to the next live server in turn; a server that refuses the connection (killed)
// is skipped. The load and the fleet's registrars both use it, as they would use an operator's
// load balancer.
type balancer struct {
	mu      sync.Mutex
	servers []*server
	next    int
	base    http.RoundTripper
}

// lbURL is the base URL clients of the balancer use; its host is replaced per request.
const lbURL = "http://control-plane"

func newBalancer() *balancer {
	return &balancer{base: &http.Transport{MaxIdleConnsPerHost: 4096, IdleConnTimeout: time.Minute,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}}
}

func (b *balancer) set(servers ...*server) {
	b.mu.Lock()
	b.servers = servers
	b.mu.Unlock()
}

func (b *balancer) pick() *server {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.servers) == 0 {
		return nil
	}
	b.next++
	return b.servers[b.next%len(b.servers)]
}

func (b *balancer) RoundTrip(req *http.Request) (*http.Response, error) {
	for try := 0; ; try++ {
		s := b.pick()
		if s == nil {
			return nil, errors.New("balancer: no server")
		}
		r := req.Clone(req.Context())
		r.URL.Scheme, r.URL.Host, r.Host = "http", strings.TrimPrefix(s.url, "http://"), ""
		if req.GetBody != nil {
			r.Body, _ = req.GetBody()
		}
		resp, err := b.base.RoundTrip(r)
		// A refused connection sent nothing: another server may take it.
		if err != nil && errors.Is(err, syscall.ECONNREFUSED) && try < 2 {
			continue
		}
		return resp, err
	}
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
