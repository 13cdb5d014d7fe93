package webhooks

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/pandastack/pandastack/internal/store"
)

// TestDialChecksTheAddress: the policy holds at dial time on the address dialled (a name that
// resolved to a public address at creation and to loopback later is refused then), and
// redirects are not followed.
func TestDialChecksTheAddress(t *testing.T) {
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	d := store.Delivery{ID: "whd_x", EventType: "change", Payload: `{}`}
	strict := New(Config{})
	if _, err := strict.send(context.Background(), store.Webhook{ID: "wh_x", URL: srv.URL}, d, "s"); err == nil || !strings.Contains(err.Error(), "loopback") || hits != 0 {
		t.Fatalf("server policy sent to loopback: %v (hits %d)", err, hits)
	}
	loose := New(Config{Policy: Policy{AllowLoopback: true}})
	if code, err := loose.send(context.Background(), store.Webhook{ID: "wh_x", URL: srv.URL}, d, "s"); err != nil || code != 200 {
		t.Fatalf("up policy: %d %v", code, err)
	}
	if code, err := loose.send(context.Background(), store.Webhook{ID: "wh_x", URL: srv.URL + "/redirect"}, d, "s"); err == nil || code != http.StatusFound || hits != 2 {
		t.Fatalf("redirect: %d %v (hits %d)", code, err, hits)
	}
	allowed := New(Config{Policy: Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
	if _, err := allowed.send(context.Background(), store.Webhook{ID: "wh_x", URL: srv.URL}, d, "s"); err != nil {
		t.Fatalf("an allowed range: %v", err)
	}
}

func TestBackoff(t *testing.T) {
	for n, want := range map[int]string{1: "5s", 2: "10s", 3: "20s", 12: "1h0m0s"} {
		if got := Backoff(DefaultRetryBase, n).String(); got != want {
			t.Errorf("attempt %d: %s, want %s", n, got, want)
		}
	}
}
