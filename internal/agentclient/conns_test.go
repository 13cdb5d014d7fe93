package agentclient

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestFleetKeepsItsConnections: calling each host of a fleet larger than the old idle cap (256)
// twice dials each host once; the second round reuses every connection.
func TestFleetKeepsItsConnections(t *testing.T) {
	const hosts = 400
	var dials atomic.Int64
	clients := make([]*Client, hosts)
	for i := range clients {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"host_id":"h"}`))
		}))
		srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				dials.Add(1)
			}
		}
		srv.Start()
		t.Cleanup(srv.Close)
		clients[i] = New(srv.URL, "token")
	}
	for round := 0; round < 2; round++ {
		for _, c := range clients {
			if _, err := c.Info(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := dials.Load(); n != hosts {
		t.Fatalf("%d connections dialed for two rounds of calls to %d hosts (want one per host)", n, hosts)
	}
}
