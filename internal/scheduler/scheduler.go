// Package scheduler owns the control plane's view of its hosts: registration and heartbeats
// (pushed by `pandastack agent --server`, or polled from agents the server was given with
// --agent), capacity accounting, placement of new sandboxes, marking silent hosts down (their
// sandboxes become `lost`) and reconciling a host's sandboxes when it comes back. It also holds
// the agent side of registration (Registrar).
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/periodic"
	"github.com/pandastack/pandastack/internal/sandboxstate"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// DefaultHeartbeatTimeout is how long a host may stay silent before it is marked down.
const DefaultHeartbeatTimeout = 15 * time.Second

// DefaultTemplateMemMiB is assumed for a template whose size no host has reported.
const DefaultTemplateMemMiB = 256

// ErrUnknownHost answers a heartbeat from a host that never registered (it should register).
var ErrUnknownHost = errors.New("unknown host: register first")

// Config configures a Scheduler.
type Config struct {
	Store  *store.Store
	Logger *slog.Logger
	// HeartbeatTimeout: a host silent for longer is marked down (default 15 s).
	HeartbeatTimeout time.Duration
	// PollInterval: how often static agents (AddStaticAgent) are polled (default timeout/3).
	PollInterval time.Duration
	// ReconcileInterval: how often every up host's sandbox list is compared with the store
	// (default 1 min), which also retries kills that did not reach a host.
	ReconcileInterval time.Duration
	// HostCacheTTL: placement reads the host list from the store at most this often; what this
	// replica learns itself (registrations, heartbeats, hosts it marks down) updates the list at
	// once, what other replicas write is seen within the TTL. 0 reads the store on every placement.
	HostCacheTTL time.Duration
	Now          func() time.Time
}

// DefaultHostCacheTTL is the host list's staleness the server runs with.
const DefaultHostCacheTTL = time.Second

// placeSample is how many candidates a placement ranks when more fit: a random sample (the
// preferred ones first), so its cost does not grow with the fleet and concurrent creates do not
// all pick the one best host.
const placeSample = 8

// Registration is what an agent reports about itself (the body of the internal
// /internal/v1/hosts/register and /heartbeat calls).
type Registration struct {
	HostID      string                 `json:"host_id"`
	URL         string                 `json:"url"`
	Token       string                 `json:"token"`
	Accel       string                 `json:"accel"`
	MemMiBTotal int64                  `json:"mem_mib_total"`
	MemMiBFree  int64                  `json:"mem_mib_free"`
	SlotsTotal  int64                  `json:"slots_total"`
	SlotsUsed   int64                  `json:"slots_used"`
	Templates   []agentclient.Template `json:"templates"`
	HostLimits
	// ProcessExits are the background processes that ended on the host since the last report
	// (GET /v1/process-exits on the agent): recorded, once each, for "process.exited" events.
	ProcessExits []hostapi.ProcessExit `json:"process_exits,omitempty"`
}

// HostLimits is a host's resource policy as it reports it (zero: none reported).
type HostLimits struct {
	MaxVCPUs          int64 `json:"max_vcpus,omitempty"`
	MaxMemoryMiB      int64 `json:"max_memory_mib,omitempty"`
	MemMiBCommitted   int64 `json:"mem_mib_committed,omitempty"`
	MemMiBCommitLimit int64 `json:"mem_mib_commit_limit,omitempty"`
}

// checkSize refuses a VM larger than the host's limits (errdefs.Invalid: asking less is the only
// fix; a host reporting none takes anything).
func (l HostLimits) checkSize(what string, vcpus, memMiB int64) error {
	if l.MaxVCPUs > 0 && vcpus > l.MaxVCPUs {
		return errdefs.Invalidf("%s: %d vCPUs is more than the host's limit of %d (max_vcpus)", what, vcpus, l.MaxVCPUs)
	}
	if l.MaxMemoryMiB > 0 && memMiB > l.MaxMemoryMiB {
		return errdefs.Invalidf("%s: %d MiB of memory is more than the host's limit of %d MiB per VM (max_memory_mib)", what, memMiB, l.MaxMemoryMiB)
	}
	return nil
}

// RegistrationFromInfo builds a registration from an agent's /v1/info.
func RegistrationFromInfo(info agentclient.Info, url, token string) Registration {
	return Registration{HostID: info.HostID, URL: url, Token: token, Accel: info.Accel,
		MemMiBTotal: info.MemMiBTotal, MemMiBFree: info.MemMiBFree, SlotsTotal: info.SlotsTotal,
		SlotsUsed: info.SlotsUsed, Templates: info.Templates, HostLimits: HostLimits{MaxVCPUs: info.MaxVCPUs,
			MaxMemoryMiB: info.MaxMemoryMiB, MemMiBCommitted: info.MemMiBCommitted, MemMiBCommitLimit: info.MemMiBCommitLimit}}
}

// Scheduler is safe for concurrent use.
type Scheduler struct {
	cfg     Config
	started time.Time

	mu      sync.Mutex
	pending map[string]reservation // placed since the host's last report
	clients map[string]*agentclient.Client
	static  []*staticAgent
	tmplMem map[string]int            // template -> memory_mib, from reports
	tmplCPU map[string]int            // template -> vcpus, from reports
	limits  map[string]HostLimits     // host -> its last reported policy
	seen    map[string]bool           // hosts this process has heard from
	catalog map[string]store.Template // last catalog entry written per template
	due     map[string]bool           // hosts to reconcile soon (first heartbeat since start)
	dueSig  chan struct{}             // something was added to due

	reconciler *store.Lock // held by the one replica that runs ReconcileAll

	hostsMu  sync.Mutex   // guards the host list cache; held while it is refreshed (one read at a time)
	hostList []store.Host // the store's hosts as last read (and patched since); never mutated in place
	hostAt   time.Time    // when hostList was read (wall clock)
}

type reservation struct {
	slots int64
	mem   int64
}

type staticAgent struct {
	url, token string
	hostID     string
	failing    bool
	exits      int64 // the agent's process-exits cursor
}

// New returns a scheduler; call Run to start its loops.
func New(cfg Config) *Scheduler {
	if cfg.HeartbeatTimeout <= 0 {
		cfg.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = cfg.HeartbeatTimeout / 3
	}
	if cfg.ReconcileInterval <= 0 {
		cfg.ReconcileInterval = time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Scheduler{cfg: cfg, started: cfg.Now(), pending: map[string]reservation{},
		clients: map[string]*agentclient.Client{}, tmplMem: map[string]int{}, tmplCPU: map[string]int{}, limits: map[string]HostLimits{}, seen: map[string]bool{}, catalog: map[string]store.Template{},
		due: map[string]bool{}, dueSig: make(chan struct{}, 1), reconciler: cfg.Store.NewLock("reconciler")}
}

// HeartbeatTimeout is the configured timeout.
func (s *Scheduler) HeartbeatTimeout() time.Duration { return s.cfg.HeartbeatTimeout }

// Register records a host's report (first registration or any later one) and refreshes the
// template catalog from it. A host coming back from `down`, or heard from for the first time since
// this process started (both sides may have restarted), is reconciled before Register returns.
func (s *Scheduler) Register(ctx context.Context, reg Registration) error {
	return s.register(ctx, reg, false)
}

// register is Register; with later, a host heard from for the first time since this process
// started is queued for Run's reconcile loop instead (a new replica hears every host's heartbeat
// within one interval: reconciling them all inside those requests would stall them).
func (s *Scheduler) register(ctx context.Context, reg Registration, later bool) error {
	if reg.HostID == "" || reg.URL == "" {
		return fmt.Errorf("registration needs host_id and url")
	}
	h := hostOf(reg)
	// The catalog first: a host is seen up only once its templates can be asked for.
	if err := s.noteCatalog(ctx, reg); err != nil {
		return err
	}
	prev, err := s.cfg.Store.UpsertHost(ctx, h)
	if err != nil {
		return err
	}
	if err := s.recordExits(ctx, reg); err != nil {
		return err
	}
	firstSight := s.noteReport(h, reg)
	switch {
	case prev == "":
		s.cfg.Logger.Info("host registered", "host", h.ID, "url", h.URL, "slots", h.SlotsTotal, "mem_mib_free", h.MemMiBFree, "templates", h.Templates)
	case prev != store.HostDown && firstSight && later:
		s.reconcileSoon(h.ID)
	case prev == store.HostDown || firstSight:
		if prev == store.HostDown {
			s.cfg.Logger.Info("host is back up", "host", h.ID)
		}
		// Synchronous: a reconcile is one list call and a few updates, and callers (a heartbeat,
		// a poll) can afford it; nothing outlives the request.
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := s.Reconcile(rctx, h.ID); err != nil {
			s.cfg.Logger.Warn("reconcile failed", "host", h.ID, "err", err)
		}
	}
	return nil
}

// hostOf is the host a registration describes.
func hostOf(reg Registration) store.Host {
	h := store.Host{ID: reg.HostID, URL: reg.URL, Token: reg.Token, Accel: reg.Accel,
		MemMiBTotal: reg.MemMiBTotal, MemMiBFree: reg.MemMiBFree, SlotsTotal: reg.SlotsTotal, SlotsUsed: reg.SlotsUsed}
	for _, t := range reg.Templates {
		h.Templates = append(h.Templates, t.Name)
		if t.Baked {
			h.Baked = append(h.Baked, t.Name)
		}
	}
	return h
}

// noteCatalog writes the catalog entries of a report that changed since this process last
// wrote them (heartbeats repeat the same list).
func (s *Scheduler) noteCatalog(ctx context.Context, reg Registration) error {
	for _, t := range reg.Templates {
		if t.Built {
			continue // a team's template: private, recorded in team_templates by the build call
		}
		ct := store.Template{Name: t.Name, Description: t.Description, VCPUs: t.VCPUs, MemoryMiB: t.MemoryMiB,
			DiskMiB: t.DiskMiB, Aliases: t.Aliases, Metadata: t.Metadata, SizeBytes: t.SizeBytes, BakeMS: t.BakeMS}
		s.mu.Lock()
		same := reflect.DeepEqual(s.catalog[t.Name], ct)
		s.mu.Unlock()
		if same {
			continue
		}
		if err := s.cfg.Store.UpsertTemplate(ctx, ct); err != nil {
			return err
		}
		s.mu.Lock()
		s.catalog[t.Name] = ct
		s.mu.Unlock()
	}
	return nil
}

// noteReport takes in a report the store has recorded: the host's reservations end (the report
// counts what was placed before it), its limits and template sizes, the host list cache. It
// reports whether this process had not heard from the host before.
func (s *Scheduler) noteReport(h store.Host, reg Registration) (firstSight bool) {
	s.mu.Lock()
	delete(s.pending, h.ID)
	s.limits[h.ID] = reg.HostLimits
	for _, t := range reg.Templates {
		if t.MemoryMiB > 0 {
			s.tmplMem[t.Name] = t.MemoryMiB
		}
		if t.VCPUs > 0 {
			s.tmplCPU[t.Name] = t.VCPUs
		}
	}
	firstSight = !s.seen[h.ID]
	s.seen[h.ID] = true
	s.mu.Unlock()
	h.State, h.LastHeartbeat = store.HostUp, s.cfg.Now()
	s.noteHosts(h)
	return firstSight
}

// Heartbeat is Register for a host that is already known; an unknown one gets ErrUnknownHost.
// A host this process has heard from and the store has up costs one statement. The first
// heartbeat of a host since this process started does not wait for its reconcile: Run's
// reconcile loop does it soon after.
func (s *Scheduler) Heartbeat(ctx context.Context, reg Registration) error {
	s.mu.Lock()
	seen := s.seen[reg.HostID]
	s.mu.Unlock()
	if seen && reg.URL != "" {
		if err := s.noteCatalog(ctx, reg); err != nil {
			return err
		}
		h := hostOf(reg)
		ok, err := s.cfg.Store.RefreshUpHost(ctx, h)
		if err != nil {
			return err
		}
		if ok {
			s.noteReport(h, reg)
			return s.recordExits(ctx, reg)
		}
	}
	if _, err := s.cfg.Store.GetHost(ctx, reg.HostID); errors.Is(err, store.ErrNotFound) {
		return ErrUnknownHost
	} else if err != nil {
		return err
	}
	return s.register(ctx, reg, true)
}

// reconcileSoon queues hostID for Run's reconcile loop.
func (s *Scheduler) reconcileSoon(hostID string) {
	s.mu.Lock()
	s.due[hostID] = true
	s.mu.Unlock()
	select {
	case s.dueSig <- struct{}{}:
	default:
	}
}

// reconcileDue reconciles the queued hosts one after another (a list call each: spread out, not
// all at once) until none is left or ctx ends.
func (s *Scheduler) reconcileDue(ctx context.Context) {
	for ctx.Err() == nil {
		s.mu.Lock()
		id := ""
		for h := range s.due {
			id = h
			break
		}
		delete(s.due, id)
		s.mu.Unlock()
		if id == "" {
			return
		}
		s.reconcileLogged(ctx, id)
	}
}

// reconcileLogged reconciles one host within 30 s, logging a failure.
func (s *Scheduler) reconcileLogged(ctx context.Context, hostID string) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.Reconcile(rctx, hostID); err != nil && ctx.Err() == nil {
		s.cfg.Logger.Warn("reconcile failed", "host", hostID, "err", err)
	}
}

// Client returns the (cached) agent client of a host.
func (s *Scheduler) Client(h store.Host) *agentclient.Client {
	key := h.URL + "\x00" + h.Token
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[key]
	if !ok {
		c = agentclient.New(h.URL, h.Token)
		s.clients[key] = c
	}
	return c
}

// TemplateMemMiB is the guest memory a template needs, as reported by hosts.
func (s *Scheduler) TemplateMemMiB(ctx context.Context, template string) int64 {
	m := s.templateSize(ctx, template, s.tmplMem, func(t store.Template) int { return t.MemoryMiB })
	if m <= 0 {
		m = DefaultTemplateMemMiB
	}
	return int64(m)
}

// Place returns the hosts that can take a sandbox of template, best first: hosts that have it
// baked, then by most free memory, then fewest sandboxes. None fitting is an errdefs.Capacity.
func (s *Scheduler) Place(ctx context.Context, template string) ([]store.Host, error) {
	hosts, err := s.hosts(ctx)
	if err != nil {
		return nil, err
	}
	need := s.TemplateMemMiB(ctx, template)
	vcpus := s.templateVCPUs(ctx, template)
	var cands []hostRank
	up, knows, tooBig := 0, 0, 0
	var sizeErr error
	heard := s.heardSince()
	s.mu.Lock()
	for _, h := range hosts {
		if h.State != store.HostUp || h.Draining || h.LastHeartbeat.Before(heard) {
			continue
		}
		up++
		if !contains(h.Templates, template) {
			continue
		}
		knows++
		if err := s.limits[h.ID].checkSize("template "+template, vcpus, need); err != nil {
			tooBig, sizeErr = tooBig+1, err
			continue
		}
		p := s.pending[h.ID]
		if h.SlotsTotal > 0 && h.SlotsTotal-h.SlotsUsed-p.slots <= 0 {
			continue
		}
		free, known := s.roomLocked(h, p)
		if known && free < need {
			continue
		}
		cands = append(cands, hostRank{h, contains(h.Baked, template), free, h.SlotsUsed + p.slots})
	}
	s.mu.Unlock()
	if len(cands) == 0 {
		switch {
		case knows > 0 && tooBig == knows:
			return nil, sizeErr
		case up == 0:
			return nil, errdefs.Capacityf("no host is up to run sandboxes")
		case knows == 0:
			return nil, errdefs.Capacityf("no host that is up can run template %q", template)
		default:
			return nil, errdefs.Capacityf("no host has room for a %q sandbox (%d MiB): all are full", template, need)
		}
	}
	cands, sampled := sample(cands)
	return rankHosts(cands, need, !sampled), nil
}

// hosts is the store's host list, read at most every HostCacheTTL (see Config). The slice is
// shared: callers must not change it.
func (s *Scheduler) hosts(ctx context.Context) ([]store.Host, error) {
	if s.cfg.HostCacheTTL <= 0 {
		return s.cfg.Store.ListHosts(ctx)
	}
	s.hostsMu.Lock()
	defer s.hostsMu.Unlock()
	if s.hostList != nil && time.Since(s.hostAt) < s.cfg.HostCacheTTL {
		return s.hostList, nil
	}
	list, err := s.cfg.Store.ListHosts(ctx)
	if err != nil {
		return nil, err
	}
	s.hostList, s.hostAt = list, time.Now()
	return list, nil
}

// noteHosts puts what this process just wrote of hosts into the cached list (a copy: readers
// may hold the old one).
func (s *Scheduler) noteHosts(hs ...store.Host) {
	s.hostsMu.Lock()
	defer s.hostsMu.Unlock()
	if s.hostList == nil {
		return
	}
	list := slices.Clone(s.hostList)
	for _, h := range hs {
		i := slices.IndexFunc(list, func(c store.Host) bool { return c.ID == h.ID })
		switch {
		case i < 0:
			list = append(list, h)
		default:
			h.RegisteredAt = list[i].RegisteredAt
			list[i] = h
		}
	}
	s.hostList = list
}

// sample keeps at most placeSample candidates, at random, the preferred ones (template baked)
// before the others; sampled reports whether it dropped any (the rest are then in random order).
func sample(cands []hostRank) (out []hostRank, sampled bool) {
	if len(cands) <= placeSample {
		return cands, false
	}
	var first, rest []hostRank
	for _, c := range cands {
		if c.first {
			first = append(first, c)
		} else {
			rest = append(rest, c)
		}
	}
	pick := func(from []hostRank, n int) []hostRank {
		rand.Shuffle(len(from), func(i, j int) { from[i], from[j] = from[j], from[i] })
		return from[:min(n, len(from))]
	}
	out = pick(first, placeSample)
	return append(out, pick(rest, placeSample-len(out))...), true
}

// heardSince is how recent a host's last heartbeat must be for placement to pick it: within two
// heartbeat intervals (a third of the timeout each). A silent host is not picked even before it
// is marked down (it would look emptiest and rank first). During the first timeout after this
// process starts every heartbeat may look old, so any up host is picked.
func (s *Scheduler) heardSince() time.Time {
	now := s.cfg.Now()
	if now.Sub(s.started) < s.cfg.HeartbeatTimeout {
		return time.Time{}
	}
	return now.Add(-2 * s.cfg.HeartbeatTimeout / 3)
}

// roomLocked is the guest memory a host can still take (s.mu held): what its commit limit leaves,
// for a host that reports one, else its free memory; less what is being placed there. known is
// false for a host that says nothing of its memory (it is then not checked).
func (s *Scheduler) roomLocked(h store.Host, p reservation) (room int64, known bool) {
	if l := s.limits[h.ID]; l.MemMiBCommitLimit > 0 {
		return l.MemMiBCommitLimit - l.MemMiBCommitted - p.mem, true
	}
	return h.MemMiBFree - p.mem, h.MemMiBTotal > 0
}

// templateVCPUs is the vCPUs a template has, as reported by hosts (0: unknown).
func (s *Scheduler) templateVCPUs(ctx context.Context, template string) int64 {
	return int64(s.templateSize(ctx, template, s.tmplCPU, func(t store.Template) int { return t.VCPUs }))
}

// templateSize is one size of a template: as hosts reported it (reported, guarded by s.mu), else
// as the store records it (0: unknown).
func (s *Scheduler) templateSize(ctx context.Context, template string, reported map[string]int, stored func(store.Template) int) int {
	s.mu.Lock()
	n := reported[template]
	s.mu.Unlock()
	if n == 0 {
		if t, err := s.cfg.Store.GetTemplate(ctx, template); err == nil {
			n = stored(t)
		}
	}
	return n
}

// CheckSize refuses (errdefs.Invalid) a VM of vcpus and memMiB (0: not given) that is larger than
// hostID allows.
func (s *Scheduler) CheckSize(hostID, what string, vcpus, memMiB int64) error {
	s.mu.Lock()
	l := s.limits[hostID]
	s.mu.Unlock()
	return l.checkSize(what, vcpus, memMiB)
}

// hostRank is a candidate host and what ranks it.
type hostRank struct {
	h     store.Host
	first bool  // preferred: has the template baked, or a free slot
	free  int64 // MiB of memory free, less what is being placed there
	used  int64 // sandboxes, counting those being placed
}

// rankHosts orders candidates best first: preferred ones, then more free memory, then fewer
// sandboxes, then (byID) by id, else as they came. Free memory within tie MiB (one sandbox's size)
// is a tie: hosts sharing a machine report the same memory, give or take noise, and the emptier
// host then wins, which spreads load.
func rankHosts(cands []hostRank, tie int64, byID bool) []store.Host {
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].first != cands[j].first {
			return cands[i].first
		}
		if d := cands[i].free - cands[j].free; d >= tie || -d >= tie {
			return d > 0
		}
		if cands[i].used != cands[j].used {
			return cands[i].used < cands[j].used
		}
		return byID && cands[i].h.ID < cands[j].h.ID
	})
	out := make([]store.Host, len(cands))
	for i, c := range cands {
		out[i] = c.h
	}
	return out
}

// PlaceVolume returns the hosts that can keep a new volume, best first: every host that is up,
// those with a free slot first (a volume is used by sandboxes placed on its host), then by most
// free memory, then fewest sandboxes. No host up is an errdefs.Capacity.
func (s *Scheduler) PlaceVolume(ctx context.Context) ([]store.Host, error) {
	hosts, err := s.hosts(ctx)
	if err != nil {
		return nil, err
	}
	var cands []hostRank
	heard := s.heardSince()
	s.mu.Lock()
	for _, h := range hosts {
		if h.State != store.HostUp || h.Draining || h.LastHeartbeat.Before(heard) {
			continue
		}
		p := s.pending[h.ID]
		free, _ := s.roomLocked(h, p)
		cands = append(cands, hostRank{h, h.SlotsTotal == 0 || h.SlotsTotal-h.SlotsUsed-p.slots > 0, free, h.SlotsUsed + p.slots})
	}
	s.mu.Unlock()
	if len(cands) == 0 {
		return nil, errdefs.Capacityf("no host is up to keep volumes")
	}
	return rankHosts(cands, DefaultTemplateMemMiB, true), nil
}

// Reserve counts a sandbox being placed on a host until the host's next report; the returned
// func undoes it (call it when the create failed).
func (s *Scheduler) Reserve(hostID string, memMiB int64) (release func()) {
	s.mu.Lock()
	r := s.pending[hostID]
	r.slots++
	r.mem += memMiB
	s.pending[hostID] = r
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if r, ok := s.pending[hostID]; ok {
				r.slots--
				r.mem -= memMiB
				if r.slots <= 0 {
					delete(s.pending, hostID)
				} else {
					s.pending[hostID] = r
				}
			}
		})
	}
}

// PlaceOn checks that hostID, where a sandbox must go (a fork's children live with their
// parent; a sandbox made from a snapshot lives where the snapshot is), is up and has room for n
// more sandboxes of memMiB each (0: count slots only), counting sandboxes placed since its last
// report. Not fitting is an errdefs.Capacity.
func (s *Scheduler) PlaceOn(ctx context.Context, hostID string, n int, memMiB int64) (store.Host, error) {
	h, err := s.cfg.Store.GetHost(ctx, hostID)
	if errors.Is(err, store.ErrNotFound) {
		return store.Host{}, errdefs.Capacityf("host %s is not known", hostID)
	}
	if err != nil {
		return store.Host{}, err
	}
	if h.State != store.HostUp {
		return store.Host{}, errdefs.Capacityf("host %s is down", hostID)
	}
	if h.Draining {
		return store.Host{}, errdefs.Capacityf("host %s is draining: nothing new is placed there", hostID)
	}
	s.mu.Lock()
	p := s.pending[h.ID]
	free, known := s.roomLocked(h, p)
	s.mu.Unlock()
	if free := h.SlotsTotal - h.SlotsUsed - p.slots; h.SlotsTotal > 0 && free < int64(n) {
		return store.Host{}, errdefs.Capacityf("host %s has room for %d more sandboxes, not %d", hostID, max(free, 0), n)
	}
	if memMiB > 0 && known && free < int64(n)*memMiB {
		return store.Host{}, errdefs.Capacityf("host %s does not have %d MiB of guest memory left to commit", hostID, int64(n)*memMiB)
	}
	return h, nil
}

// CheckHosts marks hosts that missed their heartbeats down (their sandboxes become lost). Right
// after this process starts every heartbeat may look old (we were not running to receive them),
// so nothing is marked during the first timeout.
func (s *Scheduler) CheckHosts(ctx context.Context) error {
	now := s.cfg.Now()
	if now.Sub(s.started) < s.cfg.HeartbeatTimeout {
		return nil
	}
	marked, err := s.cfg.Store.MarkStaleHostsDown(ctx, now.Add(-s.cfg.HeartbeatTimeout))
	s.noteHosts(marked...)
	for _, h := range marked {
		s.cfg.Logger.Warn("host missed its heartbeats: marked down, its sandboxes are lost", "host", h.ID,
			"last_heartbeat", h.LastHeartbeat, "timeout", s.cfg.HeartbeatTimeout)
	}
	return err
}

// Reconcile compares a host's own sandbox list with the store and makes the store follow the
// host: a lost sandbox the host still has is running (or hibernated) again; a running sandbox the
// host hibernated by itself (--idle-hibernate) is hibernated, and one it woke is running; one the
// host reports in state error takes that state and reason; one the store thinks is live but the
// host no longer has is lost; a sandbox the store says is killed but still on the host is killed
// there. Snapshots recorded deleted that the host still keeps are deleted there too.
func (s *Scheduler) Reconcile(ctx context.Context, hostID string) error {
	h, err := s.cfg.Store.GetHost(ctx, hostID)
	if err != nil {
		return err
	}
	listedAt := s.cfg.Now()
	list, err := s.Client(h).ListSandboxes(ctx)
	if err != nil {
		return err
	}
	onHost := map[string]agentclient.Sandbox{}
	for _, sb := range list {
		onHost[sb.ID] = sb
	}
	mine, err := s.cfg.Store.HostSandboxes(ctx, hostID, store.StateRunning, store.StateHibernated, store.StateLost)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, sb := range mine {
		known[sb.ID] = true
		a, present := onHost[sb.ID]
		// A record written after the list was taken (a create, a wake, a hibernate through the
		// API) is newer than what the list says: leave it to the next reconcile.
		if !sb.UpdatedAt.Before(listedAt) {
			continue
		}
		// The host's report wins (sandboxstate allows every such move from running, hibernated or lost).
		switch to := sandboxstate.State(a.State); {
		case present && to.Reachable():
			if sb.State != string(to) {
				if _, err := s.cfg.Store.SetSandboxState(ctx, sb.ID, string(to), "", sb.State); err != nil {
					return err
				}
				if sb.State == store.StateLost {
					s.cfg.Logger.Info("lost sandbox found on its host again", "sandbox", sb.ID, "host", hostID, "state", to)
				} else {
					s.cfg.Logger.Debug("sandbox state taken from its host", "sandbox", sb.ID, "host", hostID, "from", sb.State, "to", to)
				}
			}
			// Hibernated by the host itself (idle) and published: it now outlives that host. (After
			// the state: only a hibernated record keeps an image.)
			if to == sandboxstate.Hibernated && a.Hibernated != sb.HibernatedImage {
				if _, err := s.cfg.Store.SetHibernatedImage(ctx, sb.ID, a.Hibernated); err != nil {
					return err
				}
			}
		case present && to == sandboxstate.Error:
			reason := a.Error
			if reason == "" {
				reason = "the host reports an error"
			}
			if _, err := s.cfg.Store.SetSandboxState(ctx, sb.ID, store.StateError, reason, sb.State); err != nil {
				return err
			}
			s.cfg.Logger.Warn("sandbox failed on its host", "sandbox", sb.ID, "host", hostID, "reason", reason)
		case !present && sb.State != store.StateLost:
			if _, err := s.cfg.Store.SetSandboxState(ctx, sb.ID, store.StateLost, "host "+hostID+" no longer has this sandbox", sb.State); err != nil {
				return err
			}
			s.cfg.Logger.Warn("sandbox missing on its host: marked lost", "sandbox", sb.ID, "host", hostID)
		}
	}
	for id := range onHost {
		if known[id] {
			continue
		}
		sb, err := s.cfg.Store.GetSandbox(ctx, id)
		// Unknown ids may be creates or forks still in flight: leave them. One recorded on another
		// host is a copy left behind: a hibernated sandbox woken elsewhere while this host was
		// down, or a create that timed out here and was made on the next host.
		if err != nil || sb.State != store.StateKilled && sb.HostID == hostID {
			continue
		}
		if err := s.Client(h).KillSandbox(ctx, id); err != nil {
			s.cfg.Logger.Warn("killing a sandbox that outlived its kill failed", "sandbox", id, "host", hostID, "err", err)
		}
	}
	s.reconcileSnapshots(ctx, h)
	s.reconcileVolumes(ctx, h)
	return nil
}

// reconcileVolumes deletes on the host the volumes the store says are deleted (a delete made
// while the host was down).
func (s *Scheduler) reconcileVolumes(ctx context.Context, h store.Host) {
	c := s.Client(h)
	s.reconcileDeleted(ctx, h, "volume", func() ([]string, error) {
		vols, err := c.ListVolumes(ctx)
		return idsOf(vols, func(v agentclient.Volume) string { return v.ID }), err
	}, s.cfg.Store.DeletedVolumes, func(id string) error { return c.DeleteVolume(ctx, id) })
}

// reconcileSnapshots deletes on the host the snapshots the store says are deleted (a delete that
// did not reach the host when it was asked for).
func (s *Scheduler) reconcileSnapshots(ctx context.Context, h store.Host) {
	c := s.Client(h)
	s.reconcileDeleted(ctx, h, "snapshot", func() ([]string, error) {
		snaps, err := c.ListSnapshots(ctx)
		return idsOf(snaps, func(sn agentclient.Snapshot) string { return sn.ID }), err
	}, s.cfg.Store.DeletedSnapshots, func(id string) error { return c.DeleteSnapshot(ctx, id) })
}

// idsOf is the ids of xs.
func idsOf[T any](xs []T, id func(T) string) []string {
	ids := make([]string, len(xs))
	for i, x := range xs {
		ids[i] = id(x)
	}
	return ids
}

// reconcileDeleted deletes what a host still holds of the objects (of one kind) the store has
// recorded deleted. Best effort: an agent without that API or a failed call is only logged.
func (s *Scheduler) reconcileDeleted(ctx context.Context, h store.Host, kind string, list func() ([]string, error),
	deleted func(context.Context, []string) (map[string]bool, error), del func(id string) error) {
	ids, err := list()
	if err != nil || len(ids) == 0 {
		return
	}
	gone, err := deleted(ctx, ids)
	if err != nil {
		s.cfg.Logger.Warn("reconcile: cannot read deleted "+kind+"s", "host", h.ID, "err", err)
		return
	}
	for id := range gone {
		if err := del(id); err != nil {
			var ae *agentclient.Error
			if !errors.As(err, &ae) || ae.Status != 404 {
				s.cfg.Logger.Warn("deleting a "+kind+" that outlived its delete failed", kind, id, "host", h.ID, "err", err)
			}
			continue
		}
		s.cfg.Logger.Info("deleted a "+kind+" its host still kept", kind, id, "host", h.ID)
	}
}

// AddStaticAgent adds an agent the server polls itself (server --agent URL=TOKEN, or `up`).
func (s *Scheduler) AddStaticAgent(url, token string) {
	s.mu.Lock()
	s.static = append(s.static, &staticAgent{url: url, token: token})
	s.mu.Unlock()
}

// PollStatic asks every static agent for its info and registers it; it returns the first error
// (a down agent is also simply left to miss its heartbeats).
func (s *Scheduler) PollStatic(ctx context.Context) error {
	s.mu.Lock()
	agents := append([]*staticAgent(nil), s.static...)
	s.mu.Unlock()
	var first error
	for _, a := range agents {
		err := s.pollOne(ctx, a)
		s.mu.Lock()
		wasFailing := a.failing
		a.failing = err != nil
		s.mu.Unlock()
		if err != nil && !wasFailing {
			s.cfg.Logger.Warn("host agent not answering", "url", a.url, "err", err)
		} else if err == nil && wasFailing {
			s.cfg.Logger.Info("host agent answering again", "url", a.url)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (s *Scheduler) pollOne(ctx context.Context, a *staticAgent) error {
	pctx, cancel := context.WithTimeout(ctx, s.cfg.PollInterval+5*time.Second)
	defer cancel()
	c := agentclient.New(a.url, a.token)
	info, err := c.Info(pctx)
	if err != nil {
		return err
	}
	if info.HostID == "" {
		return fmt.Errorf("agent at %s reported no host_id", a.url)
	}
	reg := RegistrationFromInfo(info, a.url, a.token)
	s.mu.Lock()
	cursor := a.exits
	s.mu.Unlock()
	next := AddProcessExits(pctx, c, &reg, cursor)
	if err := s.Register(ctx, reg); err != nil {
		return err
	}
	s.mu.Lock()
	a.exits = next
	s.mu.Unlock()
	return nil
}

// AddProcessExits puts into reg the exits the agent logged after cursor and returns the cursor
// to ask from once reg is recorded (cursor itself when the agent did not answer: an agent older
// than the call, or a failure, is asked again next time).
func AddProcessExits(ctx context.Context, c *agentclient.Client, reg *Registration, cursor int64) int64 {
	page, err := c.ProcessExits(ctx, cursor)
	if err != nil {
		return cursor
	}
	reg.ProcessExits = page.Exits
	return page.Next
}

// recordExits records the process exits a host reported.
func (s *Scheduler) recordExits(ctx context.Context, reg Registration) error {
	if len(reg.ProcessExits) == 0 {
		return nil
	}
	exits := make([]store.ProcessExit, 0, len(reg.ProcessExits))
	for _, e := range reg.ProcessExits {
		started, err1 := time.Parse(time.RFC3339Nano, e.StartedAt)
		exited, err2 := time.Parse(time.RFC3339Nano, e.ExitedAt)
		if err1 != nil || err2 != nil || e.Pid <= 0 || e.SandboxID == "" {
			continue // not an exit this server can name: dropped
		}
		exits = append(exits, store.ProcessExit{SandboxID: e.SandboxID, Pid: e.Pid, Tag: e.Tag, ExitCode: e.ExitCode, Signal: e.Signal,
			StartedAt: started, ExitedAt: exited})
	}
	_, err := s.cfg.Store.RecordProcessExits(ctx, reg.HostID, exits)
	return err
}

// ReconcileAll reconciles every host that is up, on the one replica holding the reconciler lock
// (the others do nothing: every host is listed once per interval, not once per replica).
func (s *Scheduler) ReconcileAll(ctx context.Context) {
	if mine, err := s.reconciler.Hold(ctx); err != nil || !mine {
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("reconcile: cannot take the reconciler lock", "err", err)
		}
		return
	}
	hosts, err := s.cfg.Store.ListHosts(ctx)
	if err != nil {
		s.cfg.Logger.Warn("reconcile: cannot list hosts", "err", err)
		return
	}
	for _, h := range hosts {
		if h.State == store.HostUp && ctx.Err() == nil {
			s.reconcileLogged(ctx, h.ID)
		}
	}
}

// Run polls static agents, checks heartbeats and reconciles hosts until ctx ends. Each runs in a
// loop of its own: a slow reconcile of every host (one list call each) must not hold up marking
// silent hosts down.
func (s *Scheduler) Run(ctx context.Context) {
	defer s.reconciler.Release()
	var wg sync.WaitGroup
	defer wg.Wait()
	loop := func(every time.Duration, fn func()) {
		wg.Go(func() { periodic.Every(ctx, every, fn) })
	}
	loop(max(s.cfg.HeartbeatTimeout/5, 100*time.Millisecond), func() {
		if err := s.CheckHosts(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Error("heartbeat check failed", "err", err)
		}
	})
	loop(s.cfg.PollInterval, func() { s.PollStatic(ctx) })
	loop(s.cfg.ReconcileInterval, func() { s.ReconcileAll(ctx) })
	for ctx.Err() == nil { // hosts queued by their first heartbeat
		select {
		case <-ctx.Done():
		case <-s.dueSig:
			s.reconcileDue(ctx)
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
