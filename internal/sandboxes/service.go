// Package sandboxes is the control plane's sandbox service: the one place that turns "a sandbox
// (or a fork, or a volume) for this team" into a host chosen, its capacity reserved, the host
// agent called and the result recorded, or everything undone. The HTTP API (internal/api) decodes
// and validates requests, calls the service and encodes what it returns; products built on
// sandboxes (databases, apps, functions) call the service the same way. It knows nothing of HTTP.
package sandboxes

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/defaults"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/sandboxstate"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
	"golang.org/x/sync/singleflight"
)

// Scheduler is what the service needs from internal/scheduler: candidate hosts, reservations
// while a host works, and a client for a host.
type Scheduler interface {
	TemplateMemMiB(ctx context.Context, template string) int64
	TemplateVolumes(template string) []hostapi.SnapshotVolume
	Place(ctx context.Context, template string) ([]store.Host, error)
	PlaceOn(ctx context.Context, hostID string, n int, memMiB int64) (store.Host, error)
	PlaceVolume(ctx context.Context) ([]store.Host, error)
	Reserve(hostID string, memMiB int64) (done func(placed bool), err error)
	Freeing(hostID, sandboxID string, memMiB int64) (done func(stopped bool))
	Client(h store.Host) *agentclient.Client
	// Host is a host's record as placement sees it (at most a second stale): calls to a host
	// read it there rather than the store once each.
	Host(ctx context.Context, id string) (store.Host, error)
	// UnrecordedGrace and UnrecordedFor say what reconcile does with a sandbox a host runs
	// that no record names: killed once this process's reconcile has seen it so for the grace.
	UnrecordedGrace() time.Duration
	UnrecordedFor(hostID, sandboxID string) (time.Duration, bool)
}

// Config configures a Service.
type Config struct {
	Store     *store.Store
	Scheduler Scheduler
	Logger    *slog.Logger
	Now       func() time.Time
	// DefaultTTL is a new sandbox's lifetime when it asks none; MaxTTL caps every lifetime
	// (it may have been lowered since a sandbox's ttl policy was recorded).
	DefaultTTL, MaxTTL time.Duration
	// EgressOpen are the operator's open private ranges, passed to the host with every create.
	EgressOpen []netip.Prefix
	// GuestCA is PEM of the operator's extra CA certificates every new sandbox trusts
	// (guestca.go); empty: none.
	GuestCA []byte
	// Blob is the blob store the hosts publish to (nil: none): a published snapshot's record is
	// read there when its host is down (SnapshotVolumes).
	Blob blob.Store
}

// Service places, starts, forks and records sandboxes. Create with New.
type Service struct {
	store      *store.Store
	sched      Scheduler
	log        *slog.Logger
	now        func() time.Time
	defaultTTL time.Duration
	maxTTL     time.Duration
	egressOpen []string
	guestCA    []byte
	blob       blob.Store
	caMu       sync.Mutex
	caSeen     map[string]bundleSeen // installGuestCA's, by host and source
	moves      singleflight.Group    // moveHibernated, by sandbox id
}

// New builds a service from cfg; cfg's TTLs must already be set (the API applies its defaults).
func New(cfg Config) *Service {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	defaults.Clock(&cfg.Now)
	open := []string{}
	for _, p := range cfg.EgressOpen {
		open = append(open, p.String())
	}
	return &Service{store: cfg.Store, sched: cfg.Scheduler, log: cfg.Logger, now: cfg.Now,
		defaultTTL: cfg.DefaultTTL, maxTTL: cfg.MaxTTL, egressOpen: open, guestCA: cfg.GuestCA, blob: cfg.Blob, caSeen: map[string]bundleSeen{}}
}

// EgressOpen is the operator's open private ranges, as the hosts are given them.
func (s *Service) EgressOpen() []string { return slices.Clone(s.egressOpen) }

// ownedBy is err of loading a record (what, id) that owner has, as the caller's team sees it: a
// missing record, or another team's, is NotFound alike.
func ownedBy(err error, teamID, owner, what, id string) error {
	if errors.Is(err, store.ErrNotFound) || err == nil && owner != teamID {
		return errdefs.NotFoundf("%s %s not found", what, Truncate(id))
	}
	return err
}

// Truncate shortens user-supplied text quoted in a message.
func Truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// clock is the service's clock, in UTC.
func (s *Service) clock() time.Time { return s.now().UTC() }

// TTL returns the lifetime of a new sandbox: ttlSeconds when > 0, else the default (never above
// the maximum).
func (s *Service) TTL(ttlSeconds int64) time.Duration {
	if ttlSeconds <= 0 {
		return s.defaultTTL
	}
	return min(time.Duration(ttlSeconds)*time.Second, s.maxTTL)
}

// maxHostTries is how many hosts one create (or volume) tries before giving up.
const maxHostTries = 3

// retryable says whether another host may succeed where one failed: it did not answer, or
// refused with one of codes (e.g. capacity).
func retryable(err error, codes ...string) bool {
	var ue *agentclient.Unreachable
	if errors.As(err, &ue) {
		return true
	}
	if errdefs.Is(err, errdefs.Capacity) && slices.Contains(codes, "capacity") { // Reserve: taken meanwhile
		return true
	}
	var ae *agentclient.Error
	if errors.As(err, &ae) {
		for _, c := range codes {
			if ae.Code == c {
				return true
			}
		}
	}
	return false
}

// tryHosts calls try on the hosts in order (at most maxHostTries of them) until one succeeds,
// moving on only when the failure is retryable with codes. It returns the last error; when the
// last host tried did not answer that is an errdefs.Capacity (the hosts' fault, not ours: retry
// later), as a refusal for want of room is.
func (s *Service) tryHosts(what string, hosts []store.Host, codes []string, try func(store.Host) error) error {
	var lastErr error
	tried := 0
	for i, h := range hosts {
		if i == maxHostTries {
			break
		}
		tried++
		err := try(h)
		if err == nil {
			return nil
		}
		lastErr = err
		if !retryable(err, codes...) {
			return err
		}
		s.log.Warn("host could not take "+what+", trying the next", "host", h.ID, "err", err)
	}
	var ue *agentclient.Unreachable
	if errors.As(lastErr, &ue) {
		return errdefs.Capacityf("no host could take %s now (%d tried: full or not answering): retry later", what, tried)
	}
	return lastErr
}

// Usable says why calls cannot reach a sandbox (errdefs.Conflict), or nil when it is running or
// hibernated (its host wakes a hibernated sandbox for any call).
func Usable(sb store.Sandbox) error {
	st := sandboxstate.State(sb.State)
	if st.Reachable() {
		return nil
	}
	switch st {
	case sandboxstate.Killed:
		if sb.Error != "" {
			return errdefs.Conflictf("sandbox %s was killed (%s)", sb.ID, sb.Error)
		}
		return errdefs.Conflictf("sandbox %s was killed", sb.ID)
	case sandboxstate.Lost:
		return errdefs.Conflictf("sandbox %s is lost: %s", sb.ID, sb.Error)
	case sandboxstate.Error:
		return errdefs.Conflictf("sandbox %s failed: %s", sb.ID, sb.Error)
	}
	return errdefs.Conflictf("sandbox %s is %s", sb.ID, sb.State)
}

// Client returns a client for the host of a sandbox, which must be known and up (else
// errdefs.Conflict) — unless the sandbox is hibernated with a published image: then another host
// adopts and wakes it (move.go), and that host's client is returned.
func (s *Service) Client(ctx context.Context, sb store.Sandbox) (*agentclient.Client, error) {
	h, err := s.store.GetHost(ctx, sb.HostID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errdefs.Conflictf("sandbox %s has no known host", sb.ID)
	}
	if err != nil {
		return nil, err
	}
	if sb.State == store.StateHibernated && sb.HibernatedImage != "" && (h.State != store.HostUp || h.Draining) {
		return s.moveHibernated(ctx, sb, h.ID)
	}
	if h.State != store.HostUp {
		return nil, errdefs.Conflictf("sandbox %s is unreachable: its host %s is down", sb.ID, h.ID)
	}
	return s.sched.Client(h), nil
}
