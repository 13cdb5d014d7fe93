package dbrouter

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pandastack/pandastack/internal/errdefs"
)

// startRouter serves a router whose databases are all missing (Dial answers NotFound) and
// returns its port and CA file.
func startRouter(t *testing.T) (int, string, *[]string) {
	t.Helper()
	cfg, ca, err := LoadOrCreateTLS(t.TempDir(), "db.localhost")
	if err != nil {
		t.Fatal(err)
	}
	var dialed []string
	r := New(Config{TLS: cfg, Domain: "db.localhost", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Dial: func(ctx context.Context, id string, pooler bool) (net.Conn, error) {
			if pooler {
				id += " (pooler)"
			}
			dialed = append(dialed, id)
			return nil, errdefs.NotFoundf("database %s not found", id)
		}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go r.Serve(ln)
	return ln.Addr().(*net.TCPAddr).Port, ca, &dialed
}

func connectErr(t *testing.T, conninfo string) *pgconn.PgError {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg, err := pgconn.ParseConfig(conninfo)
	if err != nil {
		t.Fatal(err)
	}
	cfg.LookupFunc = func(context.Context, string) ([]string, error) { return []string{"127.0.0.1"}, nil }
	c, err := pgconn.ConnectConfig(ctx, cfg)
	if err == nil {
		c.Close(ctx)
		t.Fatalf("%s: connected", conninfo)
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		t.Fatalf("%s: not a PostgreSQL error (a hang or a dropped connection?): %v", conninfo, err)
	}
	return pe
}

// TestRefusals: every way a connection cannot reach a database ends in an ErrorResponse, over
// whatever the connection spoke (plaintext, TLS after SSLRequest, direct TLS), never a hang.
func TestRefusals(t *testing.T) {
	port, ca, dialed := startRouter(t)
	base := "port=" + strconv.Itoa(port) + " user=u dbname=d password=p "
	for _, c := range []struct {
		conninfo, code, words string
	}{
		{base + "host=db_abc.db.localhost sslmode=disable", "28000", "only TLS"},
		{base + "host=db_abc.db.localhost sslmode=require", "08004", "database db_abc does not exist"},
		{base + "host=db_abc.db.localhost sslmode=verify-full sslrootcert=" + ca, "08004", "does not exist"},
		{base + "host=db_abc.db.localhost sslmode=verify-full sslnegotiation=direct sslrootcert=" + ca, "08004", "does not exist"},
		{base + "host=other.localhost sslmode=require", "08004", "not a database host name"},
		{base + "host=Bad_Id.db.localhost sslmode=require", "08004", "not a database id"},
		{base + "host=127.0.0.1 sslmode=require", "08004", "no TLS server name"},
		{base + "host=127.0.0.1 sslmode=require options=endpoint=db_viaoption", "08004", "db_viaoption does not exist"},
		{base + "host=db_abc-pooler.db.localhost sslmode=require", "08004", "database db_abc does not exist"},
	} {
		pe := connectErr(t, c.conninfo)
		if pe.Code != c.code || !strings.Contains(pe.Message, c.words) {
			t.Errorf("%s: %s %q, want %s %q", c.conninfo, pe.Code, pe.Message, c.code, c.words)
		}
	}
	if want := []string{"db_abc", "db_abc", "db_abc", "db_viaoption", "db_abc (pooler)"}; strings.Join(*dialed, ",") != strings.Join(want, ",") {
		t.Errorf("dialed %v, want %v", *dialed, want)
	}
}

// TestCertificate: the local CA signs a certificate for *.db.<domain>; a second load reuses
// both, another domain gets a new certificate from the same CA.
func TestCertificate(t *testing.T) {
	dir := t.TempDir()
	cfg, ca, err := LoadOrCreateTLS(dir, "db.example.test")
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(ca)
	leaf := cfg.Certificates[0]
	cfg2, _, err := LoadOrCreateTLS(dir, "db.example.test")
	if err != nil || string(cfg2.Certificates[0].Certificate[0]) != string(leaf.Certificate[0]) {
		t.Fatalf("reload made a new certificate: %v", err)
	}
	cfg3, _, err := LoadOrCreateTLS(dir, "db.other.test")
	if err != nil || string(cfg3.Certificates[0].Certificate[0]) == string(leaf.Certificate[0]) {
		t.Fatalf("another domain kept the certificate: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, CAFile)); string(b) != string(caPEM) {
		t.Fatal("the CA changed")
	}
	if st, _ := os.Stat(filepath.Join(dir, keyFile)); st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v", st.Mode())
	}
}
