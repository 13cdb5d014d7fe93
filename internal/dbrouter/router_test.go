package dbrouter

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/testenv"
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

// sharedKeys is SharedCancels in memory (the server keeps them in its store: TestCancelKeys).
type sharedKeys struct {
	mu   sync.Mutex
	keys map[string][]CancelTarget
}

func (s *sharedKeys) PutCancelKey(_ context.Context, hash, id string, pooler bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[hash] = append(s.keys[hash], CancelTarget{ID: id, Pooler: pooler})
	return nil
}

func (s *sharedKeys) CancelTargets(_ context.Context, hash string) ([]CancelTarget, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.keys[hash]), nil
}

func (s *sharedKeys) DeleteCancelKey(_ context.Context, hash, id string, pooler bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[hash] = slices.DeleteFunc(s.keys[hash], func(t CancelTarget) bool { return t == CancelTarget{ID: id, Pooler: pooler} })
	if len(s.keys[hash]) == 0 {
		delete(s.keys, hash)
	}
	return nil
}

func (s *sharedKeys) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

// fakePostgres answers a startup with AuthenticationOk, its backend key and ReadyForQuery, and
// reports the cancel requests it gets.
func fakePostgres(t *testing.T, pid, secret uint32) (string, chan *pgproto3.CancelRequest) {
	t.Helper()
	cancels := make(chan *pgproto3.CancelRequest, 4)
	ln := testenv.Serve(t, "tcp", "127.0.0.1:0", func(c net.Conn) {
		msg, _, err := readStartup(c)
		if err != nil {
			return
		}
		if cr, ok := msg.(*pgproto3.CancelRequest); ok {
			cancels <- cr
			return
		}
		var out []byte
		out, _ = (&pgproto3.AuthenticationOk{}).Encode(out)
		out, _ = (&pgproto3.BackendKeyData{ProcessID: pid, SecretKey: binary.BigEndian.AppendUint32(nil, secret)}).Encode(out)
		out, _ = (&pgproto3.ReadyForQuery{TxStatus: 'I'}).Encode(out)
		c.Write(out)
		io.Copy(io.Discard, c)
	})
	return ln.Addr().String(), cancels
}

// TestCancelThroughAnotherReplica: a connection made through one replica's router is cancelled
// by a cancel request that reaches another replica (they share keys through Config.Cancels), and
// the key is forgotten everywhere when the connection ends.
func TestCancelThroughAnotherReplica(t *testing.T) {
	pgAddr, cancels := fakePostgres(t, 4242, 0xfeedbeef)
	shared := &sharedKeys{keys: map[string][]CancelTarget{}}
	tlsCfg, ca, err := LoadOrCreateTLS(t.TempDir(), "db.localhost")
	if err != nil {
		t.Fatal(err)
	}
	var dialedMu sync.Mutex
	var dialed []string
	replica := func() int {
		r := New(Config{TLS: tlsCfg, Domain: "db.localhost", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Cancels: shared,
			Dial: func(ctx context.Context, id string, pooler bool) (net.Conn, error) {
				dialedMu.Lock()
				dialed = append(dialed, id)
				dialedMu.Unlock()
				return net.Dial("tcp", pgAddr)
			}})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go r.Serve(ln)
		return ln.Addr().(*net.TCPAddr).Port
	}
	a, b := replica(), replica()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg, err := pgconn.ParseConfig("host=db_one.db.localhost user=u dbname=d sslmode=verify-full sslrootcert=" + ca + " port=" + strconv.Itoa(a))
	if err != nil {
		t.Fatal(err)
	}
	cfg.LookupFunc = func(context.Context, string) ([]string, error) { return []string{"127.0.0.1"}, nil }
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for shared.len() == 0 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond) // shared in the background
	}
	// The client's cancel, sent to replica B (plaintext, as libpq sends cancels).
	send := func(pid, secret uint32) {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(b))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		req, _ := (&pgproto3.CancelRequest{ProcessID: pid, SecretKey: binary.BigEndian.AppendUint32(nil, secret)}).Encode(nil)
		c.Write(req)
		io.Copy(io.Discard, c) // B closes the connection when done
	}
	send(conn.PID(), 0xfeedbeef)
	select {
	case got := <-cancels:
		if got.ProcessID != 4242 || binary.BigEndian.Uint32(got.SecretKey) != 0xfeedbeef {
			t.Errorf("postgres got the cancel %+v", got)
		}
	case <-ctx.Done():
		t.Fatal("the cancel sent through replica B never reached the database")
	}
	send(4242, 1) // a wrong secret reaches nothing
	select {
	case got := <-cancels:
		t.Errorf("a cancel with a wrong secret reached postgres: %+v", got)
	case <-time.After(200 * time.Millisecond):
	}
	conn.Close(ctx)
	for shared.len() != 0 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if shared.len() != 0 {
		t.Errorf("the ended connection's key is still shared")
	}
	dialedMu.Lock()
	defer dialedMu.Unlock()
	if strings.Join(dialed, ",") != "db_one,db_one" {
		t.Errorf("dialed %v, want db_one for the connection and for the cancel", dialed)
	}
}
