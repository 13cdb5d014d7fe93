package auth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/testenv"
)

func newStore(t *testing.T) *store.Store { return testenv.SQLiteStore(t) }

func TestKeyFormat(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 50; i++ {
		k, err := NewKey()
		if err != nil {
			t.Fatal(err)
		}
		if err := Validate(k); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if seen[k] {
			t.Fatal("duplicate key")
		}
		seen[k] = true
	}
	good, _ := NewKey()
	for _, bad := range []string{"", "pds_", "pds_short", "xyz_" + good[4:], good + "A", good[:len(good)-1] + "-",
		"PDS_" + good[4:], good[:10] + " " + good[11:], good[:10] + "é" + good[12:]} {
		err := Validate(bad)
		var ae *Error
		if !errors.As(err, &ae) || !strings.Contains(ae.Message, "malformed") {
			t.Fatalf("%q: %v", bad, err)
		}
	}
	other := good[:len(good)-1] + "x"
	if other == good { // the last character was already x (1 run in 62)
		other = good[:len(good)-1] + "y"
	}
	if Hash(good) == Hash(other) || len(Hash(good)) != 64 {
		t.Fatal("hash")
	}
	if DisplayPrefix(good) != good[:12] {
		t.Fatal("display prefix")
	}
}

func TestAuthenticate(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a := &Authenticator{Store: st}
	secret, created, err := Bootstrap(ctx, st, "")
	if err != nil || !created {
		t.Fatalf("bootstrap: %v %v", created, err)
	}
	id, err := a.Authenticate(ctx, secret)
	if err != nil || !id.Admin || id.TeamID == "" {
		t.Fatalf("admin key: %+v %v", id, err)
	}
	// A store with keys is never bootstrapped again.
	if s2, created, err := Bootstrap(ctx, st, ""); created || s2 != "" || err != nil {
		t.Fatalf("second bootstrap: %q %v %v", s2, created, err)
	}

	team, k, teamSecret, err := CreateTeam(ctx, st, "beta")
	if err != nil {
		t.Fatal(err)
	}
	id2, err := a.Authenticate(ctx, teamSecret)
	if err != nil || id2.Admin || id2.TeamID != team.ID || id2.KeyID != k.ID {
		t.Fatalf("team key: %+v %v", id2, err)
	}
	// Same display prefix, different secret: unknown.
	forged := teamSecret[:DisplayLen] + strings.Repeat("Z", SecretLen-8)
	if _, err := a.Authenticate(ctx, forged); err == nil || !strings.Contains(err.Error(), "invalid") {
		t.Fatalf("forged key: %v", err)
	}
	if err := st.RevokeKey(ctx, team.ID, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx, teamSecret); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("revoked key: %v", err)
	}
	if _, err := a.Authenticate(ctx, ""); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing key: %v", err)
	}
}

func TestBootstrapPreset(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	if _, _, err := Bootstrap(ctx, st, "not-a-key"); err == nil {
		t.Fatal("malformed preset accepted")
	}
	preset, _ := NewKey()
	got, created, err := Bootstrap(ctx, st, preset)
	if err != nil || !created || got != preset {
		t.Fatalf("%q %v %v", got, created, err)
	}
	id, err := (&Authenticator{Store: st}).Authenticate(ctx, preset)
	if err != nil || !id.Admin {
		t.Fatalf("%+v %v", id, err)
	}
	if tm, err := st.GetTeamByName(ctx, DefaultTeam); err != nil || tm.ID != id.TeamID {
		t.Fatalf("default team %+v %v", tm, err)
	}
}

func TestMiddleware(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	secret, _, err := Bootstrap(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	a := &Authenticator{Store: st}
	h := a.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := FromContext(r.Context())
		if !ok || id.TeamID == "" {
			t.Error("no identity in context")
		}
		w.WriteHeader(204)
	}), func(w http.ResponseWriter, r *http.Request, err error) {
		var ae *Error
		if errors.As(err, &ae) {
			http.Error(w, ae.Message, 401)
			return
		}
		http.Error(w, "internal", 500)
	})
	for hdr, want := range map[string]int{
		"Bearer " + secret:     204,
		"bearer " + secret:     204,
		"":                     401,
		"Bearer":               401,
		"Bearer ":              401,
		"Basic abc":            401,
		"Bearer pds_malformed": 401,
	} {
		r := httptest.NewRequest("GET", "/v1/x", nil)
		if hdr != "" {
			r.Header.Set("Authorization", hdr)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("%q: %d %s, want %d", hdr, w.Code, w.Body, want)
		}
	}
}
