package api

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/webhooks"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// The events stream reads the store (not this process's memory), so it sees changes made by any
// server of the fleet, by the reaper and by hosts going down alike.
const (
	// eventPoll is how often a stream looks for changes; eventLookback how far before its last
	// look (clock skew between servers, rows written in the same microsecond).
	eventPoll     = 500 * time.Millisecond
	eventLookback = 2 * time.Second
	// eventPing is the longest a stream stays silent; eventKeyCheck how often it checks that its
	// key is still valid (a revoked key's stream ends).
	eventPing     = 15 * time.Second
	eventKeyCheck = 5 * time.Second
	eventBatch    = 1000
	// MaxEventStreams bounds the streams one key holds open at once (each polls the store).
	MaxEventStreams = 16
)

// seenState is what a stream last sent of a sandbox or a deployment (and when it changed).
type seenState struct {
	sig    string
	killed bool
	at     time.Time
}

// events is GET /v1/events: the team's sandbox and deployment changes and changing calls as
// NDJSON lines (v1.Event), until the client goes away or its key is revoked.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	if err := onlyParams(r.URL.Query()); err != nil {
		s.writeError(w, r, err)
		return
	}
	ctx := r.Context()
	id, _ := auth.FromContext(ctx)
	if !s.streams.Acquire(id.KeyID, MaxEventStreams) {
		s.writeError(w, r, errdefs.New(errdefs.Exhausted, "this key has %d event streams open already (the most it may): close one", MaxEventStreams))
		return
	}
	defer s.streams.Release(id.KeyID)
	seen := map[string]seenState{}
	changes := map[string]time.Time{} // audit entries sent, by id
	deps := map[string]seenState{}    // deployments sent, by id
	appsSeen := map[string]store.App{}
	since := s.now()
	depSince := since
	// The audit log's own cursor; calls from just before the stream began are reported too.
	started := since.Add(-eventLookback)
	auditSince := since
	var feeds [len(webhooks.Feeds)]recorded // the once-recorded events (process exits, database events)
	for i := range feeds {
		feeds[i] = recorded{since: since, sent: map[string]time.Time{}}
	}
	out := &ndjson{w: w}
	out.send(v1.Event{Type: "ready", At: v1.Timestamp(since)})
	failed := func(what string, err error) bool { // a failed read is logged; the next poll tries again
		if err != nil && ctx.Err() == nil {
			s.log.Warn("events: reading "+what, "err", err)
		}
		return err != nil
	}
	poll := time.NewTicker(eventPoll)
	defer poll.Stop()
	lastSent, lastKeyCheck := time.Now(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
		}
		if time.Since(lastKeyCheck) >= eventKeyCheck {
			lastKeyCheck = time.Now()
			if !s.keyStillValid(ctx, id) {
				return
			}
		}
		sbs, err := s.store.SandboxesChangedSince(ctx, id.TeamID, since.Add(-eventLookback), eventBatch)
		if failed("changes", err) {
			continue
		}
		for _, sb := range sbs {
			advance(&since, sb.UpdatedAt)
			sig := sb.State + "\x00" + sb.HostID + "\x00" + sb.Error
			if seen[sb.ID].sig == sig {
				continue
			}
			seen[sb.ID] = seenState{sig: sig, killed: sb.State == store.StateKilled, at: sb.UpdatedAt}
			v := viewOf(sb)
			out.send(v1.Event{Type: "sandbox", At: v1.Timestamp(sb.UpdatedAt), Sandbox: &v})
			lastSent = time.Now()
		}
		// Deployments change in the background (built, failed, switched to, superseded): no call
		// says so, the deployment's own record does.
		if sent, err := s.deploymentEvents(ctx, out, id.TeamID, &depSince, deps, appsSeen); !failed("deployments", err) && sent {
			lastSent = time.Now()
		}
		entries, _, err := s.store.ListAudit(ctx, store.AuditFilter{TeamID: id.TeamID, Since: auditSince.Add(-eventLookback), Limit: eventBatch})
		if failed("the audit log", err) {
			continue
		}
		for i := len(entries) - 1; i >= 0; i-- { // oldest first
			a := entries[i]
			advance(&auditSince, a.CreatedAt)
			if _, sent := changes[a.ID]; sent || a.Status < 200 || a.Status > 299 || !a.CreatedAt.After(started) {
				continue
			}
			changes[a.ID] = a.CreatedAt
			c := changeOf(a)
			out.send(v1.Event{Type: "change", At: v1.Timestamp(a.CreatedAt), Change: &c})
			lastSent = time.Now()
		}
		for i, f := range webhooks.Feeds {
			evs, err := f.Read(ctx, s.store, id.TeamID, feeds[i].since.Add(-eventLookback), eventBatch)
			if failed(f.Name, err) {
				continue
			}
			for _, e := range evs {
				ev := v1.Event{Type: e.Event.Type, At: e.Event.At, Process: e.Event.Process, Database: e.Event.Database}
				if feeds[i].send(out, started, e.Key, e.At, ev) {
					lastSent = time.Now()
				}
			}
			feeds[i].forget()
		}
		for aid, at := range changes {
			if at.Before(auditSince.Add(-2 * eventLookback)) {
				delete(changes, aid)
			}
		}
		// Killed sandboxes never change again: forget them once out of the lookback window; and
		// deployments once their change is (a later change has a later time and is sent).
		for sid, st := range seen {
			if st.killed && st.at.Before(since.Add(-2*eventLookback)) {
				delete(seen, sid)
			}
		}
		for did, st := range deps {
			if st.at.Before(depSince.Add(-2 * eventLookback)) {
				delete(deps, did)
			}
		}
		if time.Since(lastSent) >= eventPing {
			out.send(v1.Event{Type: "ping", At: v1.Timestamp(s.now())})
			lastSent = time.Now()
		}
	}
}

// deploymentEvents sends a "deployment" event for each of the team's deployments changed since
// *since (less the lookback) and not sent in that state yet, and moves *since on. apps caches the
// apps named (a deployment's URL is its app's).
func (s *Server) deploymentEvents(ctx context.Context, out *ndjson, teamID string, since *time.Time, sent map[string]seenState, apps map[string]store.App) (bool, error) {
	ds, err := s.store.DeploymentsChangedSince(ctx, teamID, since.Add(-eventLookback), eventBatch)
	if err != nil {
		return false, err
	}
	sentOne := false
	for _, d := range ds {
		advance(since, d.UpdatedAt)
		sig := d.State + "\x00" + d.Error + "\x00" + d.SnapshotID
		if sent[d.ID].sig == sig {
			continue
		}
		a, ok := apps[d.AppID]
		if !ok {
			if a, err = s.store.GetApp(ctx, d.AppID); err != nil {
				continue // deleted meanwhile
			}
			apps[d.AppID] = a
		}
		sent[d.ID] = seenState{sig: sig, at: d.UpdatedAt}
		v := s.deploymentView(a, d)
		out.send(v1.Event{Type: "deployment", At: v1.Timestamp(d.UpdatedAt), Deployment: &v})
		sentOne = true
	}
	return sentOne, nil
}

// recorded is a stream's feed of events the store records once each (process exits, database
// events): how far it was read, and what was sent by key (within the lookback window).
type recorded struct {
	since time.Time
	sent  map[string]time.Time
}

// send sends ev (recorded at at, named key) unless it was sent already or recorded before the
// stream started, and moves the cursor on; it reports whether it sent.
func (r *recorded) send(out *ndjson, started time.Time, key string, at time.Time, ev v1.Event) bool {
	advance(&r.since, at)
	if _, sent := r.sent[key]; sent || !at.After(started) {
		return false
	}
	r.sent[key] = at
	out.send(ev)
	return true
}

// forget drops the keys of events out of the lookback window (a later event has a later time).
func (r *recorded) forget() {
	for key, at := range r.sent {
		if at.Before(r.since.Add(-2 * eventLookback)) {
			delete(r.sent, key)
		}
	}
}

// advance moves a cursor on to t if t is later.
func advance(cur *time.Time, t time.Time) {
	if t.After(*cur) {
		*cur = t
	}
}

// keyStillValid reports whether the key behind id is neither revoked nor expired (nor gone).
func (s *Server) keyStillValid(ctx context.Context, id auth.Identity) bool {
	k, err := s.store.GetKey(ctx, id.TeamID, id.KeyID)
	return err == nil && !k.Revoked() && !k.Expired(s.cfg.Now())
}

// TerminalTicketTTL is how long a terminal ticket may wait for its WebSocket.
const TerminalTicketTTL = 30 * time.Second

// maxTerminalTickets bounds the unused tickets held at once.
const maxTerminalTickets = 10000

// terminalTickets holds the unused terminal tickets of this server, by their hash. A ticket is
// used on the server that issued it (a fleet behind a load balancer needs sticky sessions for it).
type terminalTickets struct {
	mu sync.Mutex
	m  map[[32]byte]terminalTicket
}

type terminalTicket struct {
	id      auth.Identity
	sandbox string
	expires time.Time
}

func (t *terminalTickets) issue(id auth.Identity, sandbox string, now time.Time) (string, time.Time, error) {
	tok, err := auth.NewSecret("pdt_")
	if err != nil {
		return "", time.Time{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[[32]byte]terminalTicket{}
	}
	for h, e := range t.m {
		if now.After(e.expires) {
			delete(t.m, h)
		}
	}
	if len(t.m) >= maxTerminalTickets {
		return "", time.Time{}, errdefs.New(errdefs.Exhausted, "too many unused terminal tickets: use or let expire the ones issued")
	}
	exp := now.Add(TerminalTicketTTL)
	t.m[sha256.Sum256([]byte(tok))] = terminalTicket{id: id, sandbox: sandbox, expires: exp}
	return tok, exp, nil
}

// take uses up a ticket for sandbox: the identity it was issued to, or an Unauthorized error.
func (t *terminalTickets) take(tok, sandbox string, now time.Time) (auth.Identity, error) {
	h := sha256.Sum256([]byte(tok))
	t.mu.Lock()
	e, ok := t.m[h]
	delete(t.m, h)
	t.mu.Unlock()
	if !ok || now.After(e.expires) || e.sandbox != sandbox {
		return auth.Identity{}, errdefs.New(errdefs.Unauthorized, "unknown, used or expired terminal ticket: ask POST /v1/sandboxes/%s/pty/ticket for a new one", url.PathEscape(sandbox))
	}
	return e.id, nil
}

// terminalTicket is POST /v1/sandboxes/{id}/pty/ticket.
func (s *Server) terminalTicket(w http.ResponseWriter, r *http.Request) {
	sb, err := s.sandbox(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	id, _ := auth.FromContext(r.Context())
	tok, exp, err := s.tickets.issue(id, sb.ID, s.now())
	s.reply(w, r, http.StatusCreated, v1.TerminalTicket{Ticket: tok, ExpiresAt: v1.Timestamp(exp)}, err)
}

// ticketed lets a terminal WebSocket authenticate with a ticket (?ticket=) instead of a key:
// a request with an Authorization header, or without a ticket, goes through withKey; one with a
// ticket straight to inner, as the identity the ticket was issued to (its key checked again).
func (s *Server) ticketed(withKey, inner http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := r.URL.Query().Get("ticket")
		if tok == "" || r.Header.Get("Authorization") != "" {
			withKey.ServeHTTP(w, r)
			return
		}
		id, err := s.tickets.take(tok, r.PathValue("id"), s.now())
		if err == nil && !s.keyStillValid(r.Context(), id) {
			err = errdefs.New(errdefs.Unauthorized, "the key this terminal ticket was issued to is revoked or expired")
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		inner.ServeHTTP(w, r.WithContext(auth.WithIdentity(r.Context(), id)))
	})
}
