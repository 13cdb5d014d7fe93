// Package webhooks sends a team's events (docs/events.md) to its HTTP endpoints: webhooks are
// made with a URL (checked against the operator's destination Policy) and event types, get a
// signing secret shown once and stored sealed (internal/sealed), and receive each event as a
// signed POST (HMAC-SHA256 over timestamp and body, a delivery id) from the server itself, never
// from a sandbox's network. Events come from the store (sandbox state changes, the audit log's
// changing calls), so every replica sees the same ones; a delivery is recorded once per
// (webhook, event) and sent by the replica that claims it, retried with backoff, and kept for
// GET /v1/webhooks/{id}/deliveries.
package webhooks

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/defaults"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/sandboxstate"
	"github.com/pandastack/pandastack/internal/sealed"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Event types a webhook may ask for ("*": all).
const (
	SandboxCreated    = "sandbox.created"
	SandboxWoken      = "sandbox.woken"
	SandboxHibernated = "sandbox.hibernated"
	SandboxKilled     = "sandbox.killed"
	SandboxExpired    = "sandbox.ttl_expired"
	SandboxLost       = "sandbox.lost"
	SandboxError      = "sandbox.error"
	TemplateBuilt     = "template.built"
	ProcessExited     = "process.exited"
	// An app deployment's events: one per state it reaches (queued is "created").
	DeploymentCreated    = "deployment.created"
	DeploymentBuilding   = "deployment.building"
	DeploymentDeploying  = "deployment.deploying"
	DeploymentLive       = "deployment.live"
	DeploymentFailed     = "deployment.failed"
	DeploymentSuperseded = "deployment.superseded"
	DatabaseBackedUp     = "database.backed_up"
	DatabaseSuspended    = "database.suspended"
	DatabaseRestarted    = "database.restarted"
	Change               = "change"
	All                  = "*"
)

// EventTypes lists the event types, All last.
var EventTypes = []string{SandboxCreated, SandboxWoken, SandboxHibernated, SandboxKilled, SandboxExpired, SandboxLost, SandboxError, TemplateBuilt, ProcessExited,
	DeploymentCreated, DeploymentBuilding, DeploymentDeploying, DeploymentLive, DeploymentFailed, DeploymentSuperseded, DatabaseBackedUp, DatabaseSuspended, DatabaseRestarted, Change, All}

// deploymentEvent is the event type of a deployment in state (queued, building, deploying, live,
// failed, superseded: internal/apps's states), "" for a state it does not know.
func deploymentEvent(state string) string {
	if state == "queued" {
		return DeploymentCreated
	}
	if t := "deployment." + state; slices.Contains(EventTypes, t) {
		return t
	}
	return ""
}

// Headers of a delivery.
const (
	HeaderSignature = "PandaStack-Signature" // t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">
	HeaderDelivery  = "PandaStack-Delivery"  // the delivery's id (the same on every retry)
	HeaderEvent     = "PandaStack-Event"     // the event's type
	HeaderWebhook   = "PandaStack-Webhook"   // the webhook's id
)

// Defaults of Config.
const (
	DefaultPoll        = 500 * time.Millisecond
	DefaultRetryBase   = 5 * time.Second
	DefaultMaxAttempts = 8
	DefaultRetention   = 7 * 24 * time.Hour
	attemptTimeout     = 10 * time.Second
	lease              = time.Minute
	lookback           = 2 * time.Second
	batch              = 1000
	maxConcurrent      = 8
)

// Config configures a Service.
type Config struct {
	Store      *store.Store
	SecretsKey []byte
	Policy     Policy
	// View is a sandbox as the API shows it (a sandbox event's body); TemplateView a team
	// template (a template.built event's body).
	View         func(store.Sandbox) v1.Sandbox
	TemplateView func(store.TeamTemplate) v1.Template
	// DeploymentView is an app deployment as the API shows it (a deployment event's body); an
	// error (its app deleted meanwhile) drops the event.
	DeploymentView func(context.Context, store.Deployment) (v1.Deployment, error)
	Logger         *slog.Logger
	Now            func() time.Time
	// Poll is how often the store is read for events and due deliveries; RetryBase the first
	// retry's delay (doubling each time, at most an hour); MaxAttempts the attempts before a
	// delivery fails; Retention how long finished deliveries are kept.
	Poll        time.Duration
	RetryBase   time.Duration
	MaxAttempts int
	Retention   time.Duration
}

// Service is the webhooks of every team.
type Service struct {
	cfg    Config
	st     *store.Store
	http   *http.Client
	log    *slog.Logger
	mu     sync.Mutex
	states map[string]seen // the last state seen of each sandbox, by id
}

type seen struct {
	state string
	at    time.Time
}

// New returns a service.
func New(cfg Config) *Service {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	defaults.Clock(&cfg.Now)
	defaults.Positive(&cfg.Poll, DefaultPoll)
	defaults.Positive(&cfg.RetryBase, DefaultRetryBase)
	defaults.Positive(&cfg.MaxAttempts, DefaultMaxAttempts)
	defaults.Positive(&cfg.Retention, DefaultRetention)
	tr := &http.Transport{Proxy: nil, DialContext: cfg.Policy.dialer().DialContext, ForceAttemptHTTP2: true,
		TLSHandshakeTimeout: attemptTimeout, MaxIdleConnsPerHost: 2, IdleConnTimeout: 30 * time.Second}
	return &Service{cfg: cfg, st: cfg.Store, log: cfg.Logger, states: map[string]seen{},
		http: &http.Client{Transport: tr, Timeout: attemptTimeout,
			// Redirects are not followed: a receiver answers 2xx itself.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (s *Service) now() time.Time { return s.cfg.Now().UTC() }

// Create makes a webhook of teamID; the answer carries its secret (shown this once).
func (s *Service) Create(ctx context.Context, teamID string, req v1.CreateWebhookRequest) (v1.Webhook, error) {
	if _, err := s.cfg.Policy.CheckURL(ctx, req.URL); err != nil {
		return v1.Webhook{}, err
	}
	events, err := checkEvents(req.Events)
	if err != nil {
		return v1.Webhook{}, err
	}
	if n, err := s.st.CountWebhooks(ctx, teamID); err != nil {
		return v1.Webhook{}, err
	} else if n >= MaxPerTeam {
		return v1.Webhook{}, errdefs.New(errdefs.Exhausted, "this team has %d webhooks (the most it may): delete one first", n)
	}
	secret, err := auth.NewSecret("whsec_")
	if err != nil {
		return v1.Webhook{}, err
	}
	sealedSecret, err := sealed.SealBytes(s.cfg.SecretsKey, []byte(secret))
	if err != nil {
		return v1.Webhook{}, err
	}
	w := store.Webhook{ID: auth.NewID("wh_"), TeamID: teamID, URL: req.URL, Events: events, SealedSecret: sealedSecret, CreatedAt: s.now()}
	if err := s.st.CreateWebhook(ctx, w); err != nil {
		return v1.Webhook{}, err
	}
	v := view(w)
	v.Secret = secret
	return v, nil
}

func checkEvents(in []string) ([]string, error) {
	if len(in) == 0 {
		return nil, errdefs.Invalidf("events is empty: name event types (%s) or \"*\" for all", strings.Join(EventTypes[:len(EventTypes)-1], ", "))
	}
	if len(in) > MaxEvents {
		return nil, errdefs.Invalidf("events has %d entries: at most %d", len(in), MaxEvents)
	}
	var out []string
	for _, e := range in {
		if !slices.Contains(EventTypes, e) {
			return nil, errdefs.Invalidf("unknown event type %q: use %s", e, strings.Join(EventTypes, ", "))
		}
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return out, nil
}

func view(w store.Webhook) v1.Webhook {
	return v1.Webhook{ID: w.ID, URL: w.URL, Events: w.Events, CreatedAt: v1.Timestamp(w.CreatedAt)}
}

// List returns teamID's webhooks, oldest first.
func (s *Service) List(ctx context.Context, teamID string) ([]v1.Webhook, error) {
	ws, err := s.st.ListWebhooks(ctx, teamID)
	out := make([]v1.Webhook, 0, len(ws))
	for _, w := range ws {
		out = append(out, view(w))
	}
	return out, err
}

// Get returns a webhook of teamID.
func (s *Service) Get(ctx context.Context, teamID, id string) (v1.Webhook, error) {
	w, err := s.st.GetWebhook(ctx, teamID, id)
	if errors.Is(err, store.ErrNotFound) {
		return v1.Webhook{}, errdefs.NotFoundf("no webhook %s", id)
	}
	return view(w), err
}

// Delete deletes a webhook of teamID and its deliveries.
func (s *Service) Delete(ctx context.Context, teamID, id string) error {
	err := s.st.DeleteWebhook(ctx, teamID, id)
	if errors.Is(err, store.ErrNotFound) {
		return errdefs.NotFoundf("no webhook %s", id)
	}
	return err
}

// Deliveries returns a webhook's deliveries, newest first, at most limit.
func (s *Service) Deliveries(ctx context.Context, teamID, id string, limit int) ([]v1.WebhookDelivery, error) {
	if _, err := s.Get(ctx, teamID, id); err != nil {
		return nil, err
	}
	ds, err := s.st.ListDeliveries(ctx, teamID, id, limit)
	out := make([]v1.WebhookDelivery, 0, len(ds))
	for _, d := range ds {
		v := v1.WebhookDelivery{ID: d.ID, WebhookID: d.WebhookID, Event: d.EventType, State: d.State, Attempts: d.Attempts,
			StatusCode: d.StatusCode, Error: d.Error, CreatedAt: v1.Timestamp(d.CreatedAt), UpdatedAt: v1.Timestamp(d.UpdatedAt)}
		if d.State == store.DeliveryPending {
			v.NextAttemptAt = v1.Timestamp(d.NextAt)
		}
		out = append(out, v)
	}
	return out, err
}

// Run records and sends deliveries until ctx ends.
func (s *Service) Run(ctx context.Context) {
	started := s.now()
	cursors := map[string]cursor{}
	t := time.NewTicker(s.cfg.Poll)
	defer t.Stop()
	lastPrune := time.Time{}
	for {
		if err := s.produce(ctx, started, cursors); err != nil && ctx.Err() == nil {
			s.log.Warn("webhooks: reading events", "err", err)
		}
		s.deliver(ctx)
		if time.Since(lastPrune) > time.Hour {
			lastPrune = time.Now()
			for what, prune := range map[string]func(context.Context, time.Time) (int64, error){
				"deliveries": s.st.PruneDeliveries, "process exits": s.st.PruneProcessExits, "database events": s.st.PruneDatabaseEvents} {
				if _, err := prune(ctx, s.now().Add(-s.cfg.Retention)); err != nil && ctx.Err() == nil {
					s.log.Warn("webhooks: pruning "+what, "err", err)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// cursor is how far a team's sandbox changes, templates and audit log were read.
type cursor struct {
	sandboxes, templates, audit, deployments time.Time
	feeds                                    [len(Feeds)]time.Time // Feeds', in order
}

// produce records a delivery for every new event of a team with webhooks, for each webhook that
// asks for its type and existed before it.
func (s *Service) produce(ctx context.Context, started time.Time, cursors map[string]cursor) error {
	hooks, err := s.st.ListWebhooks(ctx, "")
	if err != nil {
		return err
	}
	byTeam := map[string][]store.Webhook{}
	for _, w := range hooks {
		byTeam[w.TeamID] = append(byTeam[w.TeamID], w)
	}
	for team, ws := range byTeam {
		c, ok := cursors[team]
		if !ok {
			c = cursor{sandboxes: started, templates: started, audit: started, deployments: started}
			for i := range c.feeds {
				c.feeds[i] = started
			}
		}
		sbs, err := s.st.SandboxesChangedSince(ctx, team, c.sandboxes.Add(-lookback), batch)
		if err != nil {
			return err
		}
		for _, sb := range sbs {
			if sb.UpdatedAt.After(c.sandboxes) {
				c.sandboxes = sb.UpdatedAt
			}
			v := s.cfg.View(sb)
			for _, typ := range s.sandboxEvents(sb, started) {
				// A sandbox is created once; its other events are state changes, one per row.
				key, at := "sb:"+sb.ID+":created", sb.CreatedAt
				if typ != SandboxCreated {
					key, at = fmt.Sprintf("sb:%s:%s:%d", sb.ID, sb.State, sb.UpdatedAt.UnixMicro()), sb.UpdatedAt
				}
				s.enqueue(ctx, ws, key, v1.WebhookEvent{Type: typ, At: v1.Timestamp(at), Sandbox: &v}, at)
			}
		}
		// A team template's row is written when a build of it succeeds.
		tpls, err := s.st.ListTeamTemplates(ctx, team)
		if err != nil {
			return err
		}
		for _, t := range tpls {
			if t.UpdatedAt.Before(c.templates.Add(-lookback)) || t.UpdatedAt.Before(started.Add(-lookback)) {
				continue
			}
			if t.UpdatedAt.After(c.templates) {
				c.templates = t.UpdatedAt
			}
			var v v1.Template
			if s.cfg.TemplateView != nil {
				v = s.cfg.TemplateView(t)
			}
			key := fmt.Sprintf("tpl:%s:%d", t.Name, t.UpdatedAt.UnixMicro())
			s.enqueue(ctx, ws, key, v1.WebhookEvent{Type: TemplateBuilt, At: v1.Timestamp(t.UpdatedAt), Template: &v}, t.UpdatedAt)
		}
		if err := s.deploymentEvents(ctx, ws, team, started, &c.deployments); err != nil {
			return err
		}
		for i, f := range Feeds {
			evs, err := f.Read(ctx, s.st, team, c.feeds[i].Add(-lookback), batch)
			if err != nil {
				return err
			}
			for _, e := range evs {
				c.feeds[i] = later(c.feeds[i], e.At)
				s.enqueue(ctx, ws, e.Key, e.Event, e.At)
			}
		}
		entries, _, err := s.st.ListAudit(ctx, store.AuditFilter{TeamID: team, Since: c.audit.Add(-lookback), Limit: batch})
		if err != nil {
			return err
		}
		for i := len(entries) - 1; i >= 0; i-- { // oldest first
			a := entries[i]
			if a.CreatedAt.After(c.audit) {
				c.audit = a.CreatedAt
			}
			if a.Status < 200 || a.Status > 299 || a.CreatedAt.Before(started.Add(-lookback)) {
				continue
			}
			ch := v1.Change{Method: a.Method, Route: a.Route, ResourceID: a.ResourceID, Status: a.Status}
			s.enqueue(ctx, ws, "change:"+a.ID, v1.WebhookEvent{Type: Change, At: v1.Timestamp(a.CreatedAt), Change: &ch}, a.CreatedAt)
		}
		cursors[team] = c
	}
	s.forgetOld()
	return nil
}

// deploymentEvents records the deliveries of the team's deployments changed since *since (less
// the lookback), one per state a deployment reached (a deployment's row holds its latest state
// only: one that passed through a state between two reads is reported in the state it is in), and
// moves *since on.
func (s *Service) deploymentEvents(ctx context.Context, ws []store.Webhook, team string, started time.Time, since *time.Time) error {
	if s.cfg.DeploymentView == nil {
		return nil
	}
	ds, err := s.st.DeploymentsChangedSince(ctx, team, since.Add(-lookback), batch)
	if err != nil {
		return err
	}
	for _, d := range ds {
		*since = later(*since, d.UpdatedAt)
		typ := deploymentEvent(d.State)
		if typ == "" || d.UpdatedAt.Before(started.Add(-lookback)) {
			continue
		}
		v, err := s.cfg.DeploymentView(ctx, d)
		if err != nil {
			continue
		}
		// The key is the deployment and its state: a state is delivered once per webhook.
		s.enqueue(ctx, ws, "dep:"+d.ID+":"+d.State, v1.WebhookEvent{Type: typ, At: v1.Timestamp(d.UpdatedAt), Deployment: &v}, d.UpdatedAt)
	}
	return nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// ProcessExitView is an exit as events show it.
func ProcessExitView(e store.ProcessExit) v1.ProcessExit {
	return v1.ProcessExit{SandboxID: e.SandboxID, Pid: e.Pid, Tag: e.Tag, ExitCode: e.ExitCode, Signal: e.Signal,
		StartedAt: v1.Timestamp(e.StartedAt), ExitedAt: v1.Timestamp(e.ExitedAt)}
}

// Recorded is an event the store records once (a process exit, a database event): its key (a
// delivery is recorded once per webhook and key), when it was recorded (the feed's cursor) and
// the event.
type Recorded struct {
	Key   string
	At    time.Time
	Event v1.WebhookEvent
}

// Feed is a kind of once-recorded event: Read lists a team's recorded after since, oldest first.
type Feed struct {
	Name string
	Read func(ctx context.Context, st *store.Store, teamID string, since time.Time, limit int) ([]Recorded, error)
}

// Feeds are the once-recorded events, for webhooks and the events stream alike.
var Feeds = [2]Feed{
	{"process exits", func(ctx context.Context, st *store.Store, teamID string, since time.Time, limit int) ([]Recorded, error) {
		exits, err := st.ProcessExitsSince(ctx, teamID, since, limit)
		out := make([]Recorded, len(exits))
		for i, e := range exits {
			v := ProcessExitView(e)
			out[i] = Recorded{ProcessExitKey(e), e.RecordedAt, v1.WebhookEvent{Type: ProcessExited, At: v.ExitedAt, Process: &v}}
		}
		return out, err
	}},
	{"database events", func(ctx context.Context, st *store.Store, teamID string, since time.Time, limit int) ([]Recorded, error) {
		dbes, err := st.DatabaseEventsSince(ctx, teamID, since, limit)
		out := make([]Recorded, len(dbes))
		for i, e := range dbes {
			v := DatabaseEventView(e)
			out[i] = Recorded{"dbe:" + e.ID, e.At, v1.WebhookEvent{Type: e.Type, At: v1.Timestamp(e.At), Database: &v}}
		}
		return out, err
	}},
}

// DatabaseEventView is a database event as events show it.
func DatabaseEventView(e store.DatabaseEvent) v1.DatabaseEvent {
	return v1.DatabaseEvent{ID: e.DatabaseID, Name: e.Name, BackupID: e.BackupID, Trigger: e.Trigger, IdleSeconds: e.IdleSeconds}
}

// ProcessExitKey names an exit (a process ends once).
func ProcessExitKey(e store.ProcessExit) string {
	return fmt.Sprintf("pe:%s:%d:%d", e.SandboxID, e.Pid, e.StartedAt.UnixMicro())
}

// sandboxEvents are the event types of a sandbox's changed row, from the state this replica saw
// before: none when its state did not change; on first sight of a sandbox made since this
// replica started, "sandbox.created" first (a sandbox killed before any look is still reported
// created, then killed).
func (s *Service) sandboxEvents(sb store.Sandbox, started time.Time) []string {
	s.mu.Lock()
	prev, known := s.states[sb.ID]
	s.states[sb.ID] = seen{sb.State, sb.UpdatedAt}
	s.mu.Unlock()
	if known && prev.state == sb.State {
		return nil
	}
	var out []string
	if (!known || prev.state == string(sandboxstate.Creating)) && !sb.CreatedAt.Before(started.Add(-lookback)) && sb.State != string(sandboxstate.Creating) {
		out = append(out, SandboxCreated)
	}
	switch sb.State {
	case store.StateRunning:
		if prev.state == store.StateHibernated {
			out = append(out, SandboxWoken)
		}
	case store.StateHibernated:
		out = append(out, SandboxHibernated)
	case store.StateKilled:
		if !sb.ExpiresAt.After(sb.UpdatedAt) {
			out = append(out, SandboxExpired)
		} else {
			out = append(out, SandboxKilled)
		}
	case store.StateLost:
		out = append(out, SandboxLost)
	case store.StateError:
		out = append(out, SandboxError)
	}
	return out
}

// forgetOld drops killed sandboxes' states once out of the lookback window.
func (s *Service) forgetOld() {
	s.mu.Lock()
	defer s.mu.Unlock()
	cut := s.now().Add(-4 * lookback)
	for id, st := range s.states {
		if st.state == store.StateKilled && st.at.Before(cut) {
			delete(s.states, id)
		}
	}
}

func (s *Service) enqueue(ctx context.Context, ws []store.Webhook, key string, ev v1.WebhookEvent, at time.Time) {
	for _, w := range ws {
		if !at.After(w.CreatedAt) || !slices.Contains(w.Events, ev.Type) && !slices.Contains(w.Events, All) {
			continue
		}
		ev.WebhookID = w.ID
		body, _ := json.Marshal(ev)
		now := s.now()
		d := store.Delivery{ID: auth.NewID("whd_"), WebhookID: w.ID, TeamID: w.TeamID, EventKey: key, EventType: ev.Type,
			Payload: string(body), State: store.DeliveryPending, NextAt: now, CreatedAt: now, UpdatedAt: now}
		if _, err := s.st.EnqueueDelivery(ctx, d); err != nil && ctx.Err() == nil {
			s.log.Warn("webhooks: recording a delivery", "webhook", w.ID, "err", err)
		}
	}
}

// deliver sends the due deliveries this replica claims, a few at once.
func (s *Service) deliver(ctx context.Context) {
	now := s.now()
	ds, err := s.st.ClaimDeliveries(ctx, now, now.Add(lease), 64)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("webhooks: claiming deliveries", "err", err)
		}
		return
	}
	sem := make(chan struct{}, maxConcurrent)
	var wg sync.WaitGroup
	for _, d := range ds {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			s.attempt(ctx, d)
		}()
	}
	wg.Wait()
}

// attempt sends d once and records the outcome: succeeded, a retry after a backoff, or failed.
func (s *Service) attempt(ctx context.Context, d store.Delivery) {
	w, err := s.st.GetWebhook(ctx, d.TeamID, d.WebhookID)
	if err != nil {
		return // deleted meanwhile (its deliveries with it), or the store is down: the lease lapses
	}
	secret, err := sealed.OpenBytes(s.cfg.SecretsKey, w.SealedSecret)
	code := 0
	if err == nil {
		code, err = s.send(ctx, w, d, string(secret))
	}
	d.Attempts++
	d.StatusCode, d.Error, d.UpdatedAt = code, "", s.now()
	switch {
	case err == nil:
		d.State = store.DeliverySucceeded
	default:
		d.Error = err.Error()
		if d.Attempts >= s.cfg.MaxAttempts {
			d.State = store.DeliveryFailed
		} else {
			d.NextAt = d.UpdatedAt.Add(Backoff(s.cfg.RetryBase, d.Attempts))
		}
	}
	if err := s.st.FinishAttempt(context.WithoutCancel(ctx), d); err != nil {
		s.log.Warn("webhooks: recording an attempt", "delivery", d.ID, "err", err)
	}
}

// Backoff is the delay before the retry after attempt n (1-based): base doubled n-1 times, at
// most an hour.
func Backoff(base time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < time.Hour; i++ {
		d *= 2
	}
	return min(d, time.Hour)
}

// send POSTs d's payload to w, signed; a non-2xx answer is an error.
func (s *Service) send(ctx context.Context, w store.Webhook, d store.Delivery, secret string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, strings.NewReader(d.Payload))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "PandaStack-Webhooks/1")
	req.Header.Set(HeaderDelivery, d.ID)
	req.Header.Set(HeaderEvent, d.EventType)
	req.Header.Set(HeaderWebhook, w.ID)
	req.Header.Set(HeaderSignature, Sign(secret, s.now(), []byte(d.Payload)))
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("the receiver answered HTTP %d", resp.StatusCode)
	}
	return resp.StatusCode, nil
}

// Sign is the signature header's value for body sent at t: "t=<unix>,v1=<hex HMAC-SHA256 with
// secret of "<unix>.<body>">".
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + mac(secret, ts, body)
}

func mac(secret, ts string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// Verify checks a signature header against body and secret, refusing one older (or newer) than
// tolerance at now: what a receiver does (docs/events.md).
func Verify(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return errors.New("malformed signature header")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("signature timestamp is %s away from now", d.Round(time.Second))
	}
	if !hmac.Equal([]byte(sig), []byte(mac(secret, ts, body))) {
		return errors.New("signature does not match")
	}
	return nil
}
