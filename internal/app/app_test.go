package app

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/sandboxes"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A control plane on a fresh SQLite file makes the first key once, answers /healthz with its
// version (and the E2B facade on its own listener, over HTTP/1.1 and h2c), stops serving when its
// context ends and closes its store on Close.
func TestControlPlaneServesAndStops(t *testing.T) {
	db := filepath.Join(t.TempDir(), "state.db")
	cfg := ControlPlaneConfig{DatabaseURL: db, Version: "v-test", Logger: quiet(), E2BAddr: "127.0.0.1:0"}
	cp, key, err := StartControlPlane(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if key == "" {
		t.Fatal("an empty store made no first key")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- cp.Serve(ctx, ln) }()

	resp, err := http.Get(BaseURL(ln.Addr().String()) + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		OK      bool   `json:"ok"`
		Version string `json:"version"`
		Store   string `json:"store"`
	}
	err = json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if err != nil || !h.OK || h.Version != "v-test" || h.Store != "sqlite" {
		t.Fatalf("healthz: %+v, %v", h, err)
	}
	h2c := &http.Transport{Protocols: new(http.Protocols)}
	h2c.Protocols.SetUnencryptedHTTP2(true)
	for i, c := range []*http.Client{http.DefaultClient, {Transport: h2c}} {
		resp, err := c.Get(cp.E2BURL + "/v2/sandboxes")
		if err != nil {
			t.Fatal(err)
		}
		if resp.ProtoMajor != i+1 {
			t.Fatalf("client %d spoke %s", i, resp.Proto)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), `"code":401`) {
			t.Fatalf("the E2B API without a key (%s): %d %s", resp.Proto, resp.StatusCode, b)
		}
	}

	cancel()
	if err := <-served; err != nil {
		t.Fatalf("Serve after its context ended: %v", err)
	}
	cp.Close()
	if err := cp.Store.Ping(context.Background()); err == nil {
		t.Error("the store still answers after Close")
	}

	// A restart finds the key made before and makes none.
	cp, key, err = StartControlPlane(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cp.Close()
	if key != "" {
		t.Errorf("a restart made another first key")
	}
}

func TestControlPlaneBadAgent(t *testing.T) {
	_, _, err := StartControlPlane(context.Background(), ControlPlaneConfig{DatabaseURL: filepath.Join(t.TempDir(), "s.db"),
		Agents: []string{"10.0.0.5:7070"}, Logger: quiet()})
	if err == nil || !strings.Contains(err.Error(), "expected URL=TOKEN") {
		t.Fatalf("an agent without a token: %v", err)
	}
}

// A start of `up` that fails part-way gives back what it took: the API port is free again.
func TestStartUpFailureFreesPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = StartUp(context.Background(), UpConfig{DataDir: t.TempDir(), Addr: addr,
		Network: NetworkConfig{On: true, CIDR: "bad"}, ControlPlane: ControlPlaneConfig{Logger: quiet()}})
	if err == nil || !strings.Contains(err.Error(), "--network-cidr") {
		t.Fatalf("up with a bad --network-cidr: %v", err)
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the API port stayed taken after a failed start: %v", err)
	}
	ln.Close()
}

func TestNetworkConfigPool(t *testing.T) {
	if c, err := (NetworkConfig{}).Pool("/d"); c != nil || err != nil {
		t.Errorf("networking off: %v, %v", c, err)
	}
	c, err := NetworkConfig{On: true, CIDR: "10.200.0.0/16"}.Pool("/d")
	if err != nil {
		t.Fatal(err)
	}
	// --network-ready 0 means none kept ready, not the pool's default; the prefix is the data dir's.
	if c.Ready != -1 || !strings.HasPrefix(c.Prefix, "ps") || len(c.Prefix) != 6 {
		t.Errorf("pool config %+v", c)
	}
	if _, err := (NetworkConfig{On: true, CIDR: "10.200.0.0/16", DNS: "x"}).Pool("/d"); err == nil || !strings.Contains(err.Error(), "--dns") {
		t.Errorf("bad --dns: %v", err)
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:7070": true, "localhost:1": true, "[::1]:1": true,
		"0.0.0.0:7070": false, ":7070": false, "10.0.0.5:7070": false, "bad": false} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v", addr, got)
		}
	}
}

// An operator's key (PANDASTACK_API_KEY) that a store with keys does not know is said loudly at
// start, with the command that makes one; a key it knows is not.
func TestUnknownPresetKeyIsSaid(t *testing.T) {
	db := filepath.Join(t.TempDir(), "state.db")
	start := func(preset string) (*ControlPlane, string) {
		t.Helper()
		var log strings.Builder
		cp, _, err := StartControlPlane(context.Background(), ControlPlaneConfig{DatabaseURL: db, PresetKey: preset,
			Logger: slog.New(slog.NewTextHandler(&log, nil))})
		if err != nil {
			t.Fatal(err)
		}
		cp.Close()
		return cp, log.String()
	}
	first, other := "pds_"+strings.Repeat("a", 32), "pds_"+strings.Repeat("b", 32)
	if cp, log := start(first); !cp.PresetKeyOK || strings.Contains(log, "NOT A KEY") {
		t.Fatalf("first start with a preset key: ok=%v\n%s", cp.PresetKeyOK, log)
	}
	if cp, log := start(first); !cp.PresetKeyOK || strings.Contains(log, "NOT A KEY") {
		t.Fatalf("restart with the same key: ok=%v\n%s", cp.PresetKeyOK, log)
	}
	cp, log := start(other)
	if cp.PresetKeyOK || !strings.Contains(log, "level=WARN") || !strings.Contains(log, "PANDASTACK_API_KEY IS NOT A KEY OF THIS STORE") ||
		!strings.Contains(log, "pandastack keys create --admin --database-url "+db) || strings.Contains(log, other) {
		t.Fatalf("restart with another key: ok=%v\n%s", cp.PresetKeyOK, log)
	}
}

// TestReadGuestCAs: PEM certificates are bundled; a file without one, or with a key, or over the
// limit, is refused.
func TestReadGuestCAs(t *testing.T) {
	dir := t.TempDir()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), IsCA: true, BasicConstraintsValid: true, NotAfter: time.Now().Add(time.Hour)}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	good := filepath.Join(dir, "ca.pem")
	os.WriteFile(good, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	kb, _ := x509.MarshalECPrivateKey(key)
	withKey := filepath.Join(dir, "key.pem")
	os.WriteFile(withKey, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o644)
	empty := filepath.Join(dir, "empty.pem")
	os.WriteFile(empty, []byte("nothing here\n"), 0o644)
	b, err := readGuestCAs([]string{good, good})
	if err != nil || bytes.Count(b, []byte("BEGIN CERTIFICATE")) != 2 {
		t.Fatalf("bundle: %v\n%s", err, b)
	}
	huge := filepath.Join(dir, "huge.pem")
	os.WriteFile(huge, bytes.Repeat(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), sandboxes.MaxGuestCA/len(der)), 0o644)
	for _, f := range []string{withKey, empty, huge, filepath.Join(dir, "missing.pem")} {
		if _, err := readGuestCAs([]string{f}); err == nil {
			t.Fatalf("%s was accepted", f)
		}
	}
}
