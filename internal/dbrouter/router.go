// Package dbrouter is the server's PostgreSQL listener (docs/databases.md): it terminates TLS
// (the SSLRequest path, and PostgreSQL 17's direct TLS with ALPN "postgresql"), reads which
// database a connection is for from the TLS server name (<id>.db.<domain>) or, for clients
// without SNI, from the startup option endpoint=<id>, and then passes bytes between the client
// and postgres in that database's VM: postgres authenticates (SCRAM), not the router. Plaintext
// startups, unknown and malformed names are answered with a PostgreSQL ErrorResponse, never a
// hang. Cancel requests (which arrive on a new connection) reach the database whose backend
// handed out the key, through whichever replica they arrive at (Config.Cancels). Message framing is jackc/pgx's pgproto3.
package dbrouter

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/splice"
)

// Limits of a connection's start.
const (
	// StartupTimeout bounds TLS and the startup packet; the database's own authentication (and a
	// wake) have their own bound, DialTimeout.
	StartupTimeout = 30 * time.Second
	DialTimeout    = 2 * time.Minute
	maxStartupLen  = 10000
)

// Startup request codes (PostgreSQL's protocol).
const (
	sslRequestCode    = 80877103
	gssEncRequestCode = 80877104
	cancelRequestCode = 80877102
)

// ALPN is the protocol name PostgreSQL 17's direct TLS negotiates.
const ALPN = "postgresql"

// Config configures a Router.
type Config struct {
	// TLS is the server's certificate for *.<Domain>; NextProtos is set to ALPN here.
	TLS *tls.Config
	// Domain is the suffix of database host names, e.g. "db.localhost".
	Domain string
	// Dial connects to postgres of database id (the first label of its host name, or the
	// endpoint option), or to its pooler (the label <id>-pooler); an errdefs.NotFound error means
	// no such database.
	Dial   func(ctx context.Context, id string, pooler bool) (net.Conn, error)
	Logger *slog.Logger
	// Active, when set, is told when a database's client connections start and end (scale to zero).
	Active func(id string, delta int)
	// Cancels, when set, shares cancel keys with the other replicas: a client's cancel request
	// arrives on a new connection, which the balancer may hand to another replica.
	Cancels SharedCancels
}

// SharedCancels keeps the cancel keys every replica's connections were handed, by a hash of the
// key (never the key itself: with it anyone can cancel a query).
type SharedCancels interface {
	PutCancelKey(ctx context.Context, hash, id string, pooler bool) error
	CancelTargets(ctx context.Context, hash string) ([]CancelTarget, error)
	DeleteCancelKey(ctx context.Context, hash, id string, pooler bool) error
}

// CancelTarget is where a shared cancel key leads: database ID's postgres, or its pooler.
type CancelTarget struct {
	ID     string
	Pooler bool
}

// sharedTimeout bounds a call to Cancels.
const sharedTimeout = 5 * time.Second

// Router serves PostgreSQL connections. Create with New.
type Router struct {
	cfg Config
	tls *tls.Config

	mu      sync.Mutex
	cancels map[cancelKey]target // backend key → where it came from
}

// target is what a connection reaches: a database's postgres, or its pooler.
type target struct {
	id     string
	pooler bool
}

type cancelKey struct {
	pid    uint32
	secret string
}

// New builds a router.
func New(cfg Config) *Router {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	t := cfg.TLS.Clone()
	t.NextProtos = []string{ALPN}
	t.MinVersion = tls.VersionTLS12
	return &Router{cfg: cfg, tls: t, cancels: map[cancelKey]target{}}
}

// Serve accepts connections on ln until it is closed.
func (r *Router) Serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		go r.serve(c)
	}
}

// clientError is a startup failure answered with an ErrorResponse.
type clientError struct {
	code, msg, hint string
}

func (e *clientError) Error() string { return e.msg }

func refuse(code, hint, format string, args ...any) error {
	return &clientError{code: code, msg: fmt.Sprintf(format, args...), hint: hint}
}

// SQLSTATEs of the router's own refusals.
const (
	codeRejected   = "08004" // sqlserver_rejected_establishment_of_sqlconnection
	codeProtocol   = "08P01" // protocol_violation
	codeAuthSpec   = "28000" // invalid_authorization_specification
	codeCannotConn = "08006" // connection_failure
)

// plaintextHint says how to connect.
const plaintextHint = "Connect with TLS: sslmode=require (or verify-full with the CA the server printed), and the database's host name <id>.db.<domain> as host (SNI); without SNI add options=endpoint%3D<id>."

func (r *Router) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(StartupTimeout))
	err := r.handle(c)
	var ce *clientError
	if errors.As(err, &ce) {
		writeError(c, ce)
		return
	}
	if err != nil && !errors.Is(err, io.EOF) {
		r.cfg.Logger.Debug("dbrouter: connection ended", "remote", c.RemoteAddr().String(), "err", err)
	}
}

// writeError sends an ErrorResponse (FATAL) to w.
func writeError(w io.Writer, e *clientError) {
	b, _ := (&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: e.code, Message: e.msg, Hint: e.hint}).Encode(nil)
	w.Write(b)
}

// handle reads the start of a connection and passes it on.
func (r *Router) handle(raw net.Conn) error {
	br := bufio.NewReaderSize(raw, 512)
	first, err := br.Peek(1)
	if err != nil {
		return err
	}
	var conn net.Conn = &splice.BufferedConn{Conn: raw, R: br}
	if first[0] == 0x16 { // a TLS ClientHello: direct TLS (sslnegotiation=direct)
		tc := tls.Server(conn, r.tls)
		if err := tc.Handshake(); err != nil {
			return err
		}
		if tc.ConnectionState().NegotiatedProtocol != ALPN {
			return refuse(codeProtocol, "", "direct TLS needs ALPN %q", ALPN)
		}
		return r.afterTLS(tc)
	}
	for {
		msg, _, err := readStartup(conn)
		if err != nil {
			return err
		}
		switch m := msg.(type) {
		case *pgproto3.SSLRequest:
			if _, err := conn.Write([]byte{'S'}); err != nil {
				return err
			}
			tc := tls.Server(conn, r.tls)
			if err := tc.Handshake(); err != nil {
				return err
			}
			return r.afterTLS(tc)
		case *pgproto3.GSSEncRequest:
			if _, err := conn.Write([]byte{'N'}); err != nil {
				return err
			}
		case *pgproto3.CancelRequest:
			return r.cancel(m) // carries only the key: allowed in plaintext, as libpq sends it
		case *pgproto3.StartupMessage:
			return refuse(codeAuthSpec, plaintextHint, "this server accepts only TLS connections to databases")
		}
	}
}

// afterTLS serves a connection after its TLS handshake; refusals go over TLS.
func (r *Router) afterTLS(tc *tls.Conn) error {
	err := r.joinTLS(tc)
	var ce *clientError
	if errors.As(err, &ce) {
		writeError(tc, ce)
		return nil
	}
	return err
}

// joinTLS reads the startup packet over TLS, finds the database and joins the client to it.
func (r *Router) joinTLS(tc *tls.Conn) error {
	msg, _, err := readStartup(tc)
	if err != nil {
		return err
	}
	var sm *pgproto3.StartupMessage
	switch m := msg.(type) {
	case *pgproto3.CancelRequest:
		return r.cancel(m)
	case *pgproto3.StartupMessage:
		sm = m
	default:
		return refuse(codeProtocol, "", "unexpected %T after TLS", msg)
	}
	tg, err := r.target(tc.ConnectionState().ServerName, sm)
	if err != nil {
		return err
	}
	id := tg.id
	if r.cfg.Active != nil { // from before the dial: a wake is no idleness
		r.cfg.Active(id, 1)
		defer r.cfg.Active(id, -1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), DialTimeout)
	defer cancel()
	up, err := r.cfg.Dial(ctx, id, tg.pooler)
	if errdefs.Is(err, errdefs.NotFound) {
		return refuse(codeRejected, "Check the database's id (pandastack db list): it is the first label of the host name.", "database %s does not exist", id)
	}
	if err != nil {
		r.cfg.Logger.Warn("dbrouter: cannot reach a database", "database", id, "err", err)
		return refuse(codeCannotConn, "", "database %s cannot be reached now; try again", id)
	}
	defer up.Close()
	b, err := sm.Encode(nil)
	if err != nil {
		return refuse(codeProtocol, "", "bad startup message: %v", err)
	}
	if _, err := up.Write(b); err != nil {
		return err
	}
	tc.SetDeadline(time.Time{})
	// The client's bytes pass on from now (authentication); the database's are read message by
	// message until it is ready for queries, to learn its cancel key, then pass on too.
	toUp := make(chan struct{})
	go func() {
		io.Copy(up, tc)
		closeWrite(up)
		close(toUp)
	}()
	keys, err := r.scanStartup(up, tc, tg)
	defer r.forget(keys)
	if err != nil {
		return err // the deferred closes end the other direction
	}
	io.Copy(tc, up)
	closeWrite(tc)
	<-toUp
	return nil
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

// target is the database a connection names: the first label of its SNI (<id>.<domain>, or
// <id>-pooler.<domain> for its pooler), else the endpoint=<id>[-pooler] startup option (removed
// from options before postgres sees them).
func (r *Router) target(sni string, sm *pgproto3.StartupMessage) (target, error) {
	id := ""
	if opts, ok := sm.Parameters["options"]; ok {
		var kept []string
		for _, f := range strings.Fields(opts) {
			if v, ok := strings.CutPrefix(f, "endpoint="); ok {
				id = v
				continue
			}
			kept = append(kept, f)
		}
		if len(kept) == 0 {
			delete(sm.Parameters, "options")
		} else {
			sm.Parameters["options"] = strings.Join(kept, " ")
		}
	}
	sni = strings.ToLower(strings.TrimSuffix(sni, "."))
	if label, ok := strings.CutSuffix(sni, "."+r.cfg.Domain); ok && id == "" {
		id = label
	}
	id, pooler := strings.CutSuffix(id, "-pooler")
	switch {
	case id == "" && sni == "":
		return target{}, refuse(codeRejected, plaintextHint, "no database named: the client sent no TLS server name (SNI) and no endpoint option")
	case id == "":
		return target{}, refuse(codeRejected, plaintextHint, "%q is not a database host name (<id>.%s)", trunc(sni), r.cfg.Domain)
	case !idPattern.MatchString(id):
		return target{}, refuse(codeRejected, plaintextHint, "%q is not a database id", trunc(id))
	}
	return target{id: id, pooler: pooler}, nil
}

var idPattern = regexp.MustCompile(`^db_[a-z0-9]{1,60}$`)

// scanStartup copies the database's messages to the client until ReadyForQuery, noting its
// cancel keys (which it returns); an ErrorResponse (e.g. a wrong password) ends the connection.
func (r *Router) scanStartup(up, client net.Conn, tg target) ([]cancelKey, error) {
	var keys []cancelKey
	hdr := make([]byte, 5)
	for {
		if _, err := io.ReadFull(up, hdr); err != nil {
			return keys, err
		}
		n := int(binary.BigEndian.Uint32(hdr[1:]))
		if n < 4 || n > 1<<20 {
			return keys, fmt.Errorf("database sent a message of %d bytes during startup", n)
		}
		msg := make([]byte, 5+n-4)
		copy(msg, hdr)
		if _, err := io.ReadFull(up, msg[5:]); err != nil {
			return keys, err
		}
		if hdr[0] == 'K' {
			var kd pgproto3.BackendKeyData
			if kd.Decode(msg[5:]) == nil {
				k := cancelKey{pid: kd.ProcessID, secret: string(kd.SecretKey)}
				r.mu.Lock()
				r.cancels[k] = tg
				r.mu.Unlock()
				keys = append(keys, k)
				r.shared(func(ctx context.Context, c SharedCancels) error {
					return c.PutCancelKey(ctx, k.hash(), tg.id, tg.pooler)
				})
			}
		}
		if _, err := client.Write(msg); err != nil {
			return keys, err
		}
		switch hdr[0] {
		case 'Z': // ReadyForQuery: the start is over
			return keys, nil
		case 'E': // the database refused the start; it closes the connection
			return keys, io.EOF
		}
	}
}

func (r *Router) forget(keys []cancelKey) {
	r.mu.Lock()
	tgs := make([]target, len(keys))
	for i, k := range keys {
		tgs[i] = r.cancels[k]
		delete(r.cancels, k)
	}
	r.mu.Unlock()
	for i, k := range keys {
		r.shared(func(ctx context.Context, c SharedCancels) error {
			return c.DeleteCancelKey(ctx, k.hash(), tgs[i].id, tgs[i].pooler)
		})
	}
}

// hash names a key in SharedCancels.
func (k cancelKey) hash() string {
	b := binary.BigEndian.AppendUint32(nil, k.pid)
	sum := sha256.Sum256(append(b, k.secret...))
	return hex.EncodeToString(sum[:])
}

// shared runs call on the shared cancel keys, if any, in the background: a connection never waits
// for it (a cancel through another replica in the first moments of a connection may miss).
func (r *Router) shared(call func(context.Context, SharedCancels) error) {
	if r.cfg.Cancels == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), sharedTimeout)
		defer cancel()
		if err := call(ctx, r.cfg.Cancels); err != nil {
			r.cfg.Logger.Warn("dbrouter: sharing a cancel key with the other replicas failed", "err", err)
		}
	}()
}

// cancel forwards a cancel request to the database whose backend handed out its key — known here,
// or shared by another replica; an unknown key is dropped silently, as postgres does.
func (r *Router) cancel(m *pgproto3.CancelRequest) error {
	k := cancelKey{pid: m.ProcessID, secret: string(m.SecretKey)}
	r.mu.Lock()
	tg, ok := r.cancels[k]
	r.mu.Unlock()
	if ok {
		return r.forwardCancel(m, tg)
	}
	if r.cfg.Cancels == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), sharedTimeout)
	tgs, err := r.cfg.Cancels.CancelTargets(ctx, k.hash())
	cancel()
	if err != nil {
		return err
	}
	// Keys are random per backend: several targets only by chance, and postgres ignores a
	// cancel whose key is not its backend's.
	for _, t := range tgs {
		if err := r.forwardCancel(m, target{id: t.ID, pooler: t.Pooler}); err != nil {
			return err
		}
	}
	return nil
}

// forwardCancel sends m to tg's postgres (or pooler) on a connection of its own.
func (r *Router) forwardCancel(m *pgproto3.CancelRequest, tg target) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	up, err := r.cfg.Dial(ctx, tg.id, tg.pooler)
	if err != nil {
		return err
	}
	defer up.Close()
	b, err := m.Encode(nil)
	if err != nil {
		return err
	}
	if _, err := up.Write(b); err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(up, 1)) // postgres closes the connection when done
	return nil
}

// readStartup reads one startup packet (length-prefixed, no type byte) without reading past it.
func readStartup(r io.Reader) (pgproto3.FrontendMessage, []byte, error) {
	var lb [4]byte
	if _, err := io.ReadFull(r, lb[:]); err != nil {
		return nil, nil, err
	}
	n := int(binary.BigEndian.Uint32(lb[:]))
	if n < 8 || n > maxStartupLen {
		return nil, nil, refuse(codeProtocol, plaintextHint, "invalid startup packet length %d", n)
	}
	body := make([]byte, n-4)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, nil, err
	}
	var msg interface {
		pgproto3.FrontendMessage
		Decode([]byte) error
	}
	switch binary.BigEndian.Uint32(body) {
	case sslRequestCode:
		msg = &pgproto3.SSLRequest{}
	case gssEncRequestCode:
		msg = &pgproto3.GSSEncRequest{}
	case cancelRequestCode:
		msg = &pgproto3.CancelRequest{}
	default:
		msg = &pgproto3.StartupMessage{}
	}
	if err := msg.Decode(body); err != nil {
		return nil, nil, refuse(codeProtocol, plaintextHint, "invalid startup packet: %v", err)
	}
	return msg, body, nil
}

func trunc(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
