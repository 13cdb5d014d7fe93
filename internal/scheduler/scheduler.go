// Package scheduler owns the control plane's view of its hosts: registration and heartbeats
// (pushed by `pandastack agent --server`, or polled from agents the server was given with
// --agent), capacity accounting, placement of new sandboxes, marking silent hosts down (their
// sandboxes become `lost`) and reconciling a host's sandboxes when it comes back. It also holds
// the agent side of registration (Registrar).
package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/defaults"
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
	// HeartbeatBatch: a heartbeat that reports nothing new waits this long for others to share
	// one liveness write (default DefaultHeartbeatBatch).
	HeartbeatBatch time.Duration
	// ClaimTTL: a reservation whose caller never says how its placement ended (it failed, or
	// its process died) ends after this (default DefaultClaimTTL).
	ClaimTTL time.Duration
	// UnrecordedGrace: how long reconcile must have seen a sandbox on a host without any record
	// before it kills it as an orphan (default DefaultUnrecordedGrace; see orphans.go for why it
	// must exceed the longest create).
	UnrecordedGrace time.Duration
	Now             func() time.Time
}

// DefaultClaimTTL is how long a reservation lasts at most: longer than any create (a restore, or
// a cold boot under load), short enough that a failed caller's slot comes back soon.
const DefaultClaimTTL = 5 * time.Minute

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
	// ReadMsAgo is how long before sending it the agent read this report (0: not said). It tells
	// which placements the report counts (settleLocked).
	ReadMsAgo int64 `json:"read_ms_ago,omitempty"`
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

	mu         sync.Mutex
	pending    map[string]reservation // being placed, or placed and not yet counted by a report (Reserve)
	placed     map[string][]placedRes // of those, the placed ones (and sandboxes stopped: Freeing)
	lastReport map[string]time.Time   // host -> when its last report was read at the latest
	clients    map[string]*agentclient.Client
	static     []*staticAgent
	tmplMem    map[string]int                      // template -> memory_mib, from reports
	tmplVols   map[string][]hostapi.SnapshotVolume // template -> its data volume, from reports
	tmplCPU    map[string]int                      // template -> vcpus, from reports
	limits     map[string]HostLimits               // host -> its last reported policy
	seen       map[string]bool                     // hosts this process has heard from
	heard      map[string]time.Time                // host -> when this process last had a report of it in hand (arrived, or a poll answered)
	written    map[string]string                   // host -> fingerprint of the report this process last wrote (store.ReportHash)
	catalog    map[string]store.Template           // last catalog entry written per template
	due        map[string]bool                     // hosts to reconcile soon (first heartbeat since start)
	dueSig     chan struct{}                       // something was added to due

	reconciler *store.Lock // held by the one replica that runs ReconcileAll
	downCheck  *store.Lock // held by the one replica that runs CheckHosts

	hc      hostCache                     // what placement reads (lock order: hc.mu before mu)
	beats   beats                         // liveness-only heartbeats being batched
	orphans orphans                       // sandboxes reconcile found on hosts without a record
	answers groupWrite[store.ClaimAnswer] // placements' answers to their claims, being written
	credits groupWrite[store.SlotCredit]  // stopped sandboxes' slots, being written (PostgreSQL)

	// Reservations refused (Refusals): by this replica's count of the host's room, by the store's.
	refusedHere, refusedStore atomic.Int64
}

// reservation is what a host's last report does not count yet of this replica's doing: slots and
// memory of sandboxes being placed or placed (mem less the memory of those stopped), and how many
// sandboxes were stopped (freed).
type reservation struct {
	slots int64
	mem   int64
	freed int64
}

// used is how many slots of h are taken: its last report's, plus the placements since, less the
// sandboxes stopped since — each this replica's or, when more, every replica's as the store's
// claims said when the host list was read (h.SlotsClaimed, h.SlotsFreed; the store's counts
// include this replica's once written, so the larger of the two is never more than there were).
// Other replicas' placements and stops since that read are not seen: a reservation's claim in
// the store (Reserve) is what holds.
func (p reservation) used(h *store.Host) int64 {
	return h.SlotsUsed + max(p.slots, h.SlotsClaimed) - max(p.freed, h.SlotsFreed)
}

type staticAgent struct {
	url, token string
	hostID     string    // as it last answered
	asked      time.Time // when the poll in flight asked it (zero: none)
	failing    bool
	exits      int64 // the agent's process-exits cursor
}

// New returns a scheduler; call Run to start its loops.
func New(cfg Config) *Scheduler {
	defaults.Positive(&cfg.HeartbeatTimeout, DefaultHeartbeatTimeout)
	defaults.Positive(&cfg.PollInterval, cfg.HeartbeatTimeout/3)
	defaults.Positive(&cfg.ReconcileInterval, time.Minute)
	defaults.Positive(&cfg.HeartbeatBatch, DefaultHeartbeatBatch)
	defaults.Positive(&cfg.ClaimTTL, DefaultClaimTTL)
	defaults.Positive(&cfg.UnrecordedGrace, DefaultUnrecordedGrace)
	defaults.Clock(&cfg.Now)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	s := &Scheduler{cfg: cfg, started: cfg.Now(), pending: map[string]reservation{}, placed: map[string][]placedRes{}, lastReport: map[string]time.Time{},
		clients: map[string]*agentclient.Client{}, tmplMem: map[string]int{}, tmplVols: map[string][]hostapi.SnapshotVolume{}, tmplCPU: map[string]int{}, limits: map[string]HostLimits{}, seen: map[string]bool{}, heard: map[string]time.Time{}, written: map[string]string{}, catalog: map[string]store.Template{},
		due: map[string]bool{}, dueSig: make(chan struct{}, 1), reconciler: cfg.Store.NewLock("reconciler"), downCheck: cfg.Store.NewLock("down-check"), beats: beats{max: maxBeatBatch},
		orphans: orphans{seen: map[string]map[string]time.Time{}}}
	s.answers.write, s.credits.write = s.writeAnswers, s.writeCredits
	return s
}

// HeartbeatTimeout is the configured timeout.
func (s *Scheduler) HeartbeatTimeout() time.Duration { return s.cfg.HeartbeatTimeout }

// Register records a host's report (first registration or any later one) and refreshes the
// template catalog from it. A host coming back from `down`, or heard from for the first time since
// this process started (both sides may have restarted), is reconciled before Register returns.
func (s *Scheduler) Register(ctx context.Context, reg Registration) error {
	return s.register(ctx, reg, false, s.pushedRead(reg))
}

// register is Register; with later, a host heard from for the first time since this process
// started is queued for Run's reconcile loop instead (a new replica hears every host's heartbeat
// within one interval: reconciling them all inside those requests would stall them). The agent read
// its report within read: it counts the sandboxes placed or stopped before (settleLocked).
func (s *Scheduler) register(ctx context.Context, reg Registration, later bool, read readWindow) error {
	if reg.HostID == "" || reg.URL == "" {
		return fmt.Errorf("registration needs host_id and url")
	}
	s.noteHeard(reg.HostID, read.by)
	h := hostOf(reg)
	h.ReadAt = read.after
	// The catalog first: a host is seen up only once its templates can be asked for.
	if err := s.noteCatalog(ctx, reg); err != nil {
		return err
	}
	h.HeardAt = s.cfg.Now() // after it arrived: credits of stops asked for before end
	prev, err := s.cfg.Store.UpsertHost(ctx, h)
	if err != nil {
		return err
	}
	if err := s.recordExits(ctx, reg); err != nil {
		return err
	}
	firstSight := s.noteReport(h, reg, read)
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

// noteReport takes in a report the store has recorded: the host's reservations whose sandboxes
// it counts end (settleLocked), its limits and template sizes, the host list cache. It
// reports whether this process had not heard from the host before.
func (s *Scheduler) noteReport(h store.Host, reg Registration, read readWindow) (firstSight bool) {
	hash := store.ReportHash(h)
	h.State, h.LastHeartbeat = store.HostUp, s.cfg.Now()
	// The report replaces the host's entry and ends the reservations it counts at once: a
	// placement sees both or neither (never the old entry without the reservations).
	s.hc.mu.Lock()
	defer s.hc.mu.Unlock()
	s.noteHostsLocked(h)
	s.mu.Lock()
	s.settleLocked(h.ID, read)
	s.limits[h.ID] = reg.HostLimits
	for _, t := range reg.Templates {
		if t.MemoryMiB > 0 {
			s.tmplMem[t.Name] = t.MemoryMiB
		}
		if t.VCPUs > 0 {
			s.tmplCPU[t.Name] = t.VCPUs
		}
		if len(t.Volumes) > 0 {
			s.tmplVols[t.Name] = t.Volumes
		} else {
			delete(s.tmplVols, t.Name)
		}
	}
	firstSight = !s.seen[h.ID]
	s.seen[h.ID] = true
	s.written[h.ID] = hash
	s.mu.Unlock()
	return firstSight
}

// Heartbeat is Register for a host that is already known; an unknown one gets ErrUnknownHost.
// A host this process has heard from and the store has up costs one statement; one that reports
// what this process last wrote for it shares a statement with the other such heartbeats of a
// HeartbeatBatch window (only its liveness is written). The first heartbeat of a host since this
// process started does not wait for its reconcile: Run's reconcile loop does it soon after.
func (s *Scheduler) Heartbeat(ctx context.Context, reg Registration) error {
	arrived, read := s.cfg.Now(), s.pushedRead(reg) // on arrival: the writes below may wait for the store
	s.noteHeard(reg.HostID, arrived)
	s.mu.Lock()
	seen, written := s.seen[reg.HostID], s.written[reg.HostID]
	s.mu.Unlock()
	if seen && reg.URL != "" {
		if err := s.noteCatalog(ctx, reg); err != nil {
			return err
		}
		h := hostOf(reg)
		h.ReadAt = read.after
		if written == store.ReportHash(h) {
			ok, err := s.touch(ctx, h.ID, written, arrived, read)
			if err != nil {
				return err
			}
			if ok {
				s.noteReport(h, reg, read)
				return s.recordExits(ctx, reg)
			}
		}
		h.HeardAt = s.cfg.Now()
		ok, err := s.cfg.Store.RefreshUpHost(ctx, h)
		if err != nil {
			return err
		}
		if ok {
			s.noteReport(h, reg, read)
			return s.recordExits(ctx, reg)
		}
	}
	if _, err := s.cfg.Store.GetHost(ctx, reg.HostID); errors.Is(err, store.ErrNotFound) {
		return ErrUnknownHost
	} else if err != nil {
		return err
	}
	return s.register(ctx, reg, true, read)
}

// noteHeard records that this process has a report of host id in hand, received at.
func (s *Scheduler) noteHeard(id string, at time.Time) {
	s.mu.Lock()
	if at.After(s.heard[id]) {
		s.heard[id] = at
	}
	s.mu.Unlock()
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

// TemplateVolumes is the data volume template is baked with (none or one), as the hosts report
// it: every sandbox of the template gets a copy of it.
func (s *Scheduler) TemplateVolumes(template string) []hostapi.SnapshotVolume {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tmplVols[template]
}

// Place returns the hosts that can take a sandbox of template, best first: hosts that have it
// baked, then by most free memory, then fewest sandboxes. When more than placeSample hosts fit it
// ranks a random sample of them (the baked ones first), found by probing the template's hosts at
// random: its cost does not grow with the fleet. None fitting is an errdefs.Capacity.
func (s *Scheduler) Place(ctx context.Context, template string) ([]store.Host, error) {
	if err := s.refreshHosts(ctx); err != nil {
		return nil, err
	}
	need := s.TemplateMemMiB(ctx, template)
	vcpus := s.templateVCPUs(ctx, template)
	heard := s.heardSince()
	c := &s.hc
	c.mu.RLock()
	s.mu.Lock()
	fit := func(h *store.Host) (hostRank, bool) {
		if !placeable(h, heard) || s.limits[h.ID].checkSize("", vcpus, need) != nil {
			return hostRank{}, false
		}
		p := s.pending[h.ID]
		if h.SlotsTotal > 0 && h.SlotsTotal-p.used(h) <= 0 {
			return hostRank{}, false
		}
		free, known := s.roomLocked(*h, p)
		if known && free < need {
			return hostRank{}, false
		}
		return hostRank{*h, slices.Contains(h.Baked, template), free, p.used(h)}, true
	}
	var cands []hostRank
	sampled := false
	if th := c.byTmpl[template]; th != nil {
		cands, sampled = c.pick(th.baked, placeSample, fit)
		rest, more := c.pick(th.plain, placeSample-len(cands), fit)
		cands, sampled = append(cands, rest...), sampled || more
	}
	var err error
	if len(cands) == 0 {
		err = s.noRoomLocked(template, vcpus, need, heard)
	}
	s.mu.Unlock()
	c.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	if sampled { // ties in random order, so concurrent creates do not all pick the same host
		rand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	}
	return rankHosts(cands, need, !sampled), nil
}

// placeable says whether placement may pick h at all: up, not draining, heard from since heard.
func placeable(h *store.Host, heard time.Time) bool {
	return h.State == store.HostUp && !h.Draining && !h.LastHeartbeat.Before(heard)
}

// noRoomLocked says why no host can take a sandbox of template (s.hc.mu and s.mu held): a
// template larger than every host that has it allows (errdefs.Invalid), else an
// errdefs.Capacity. It reads every host: only a placement that failed calls it.
func (s *Scheduler) noRoomLocked(template string, vcpus, need int64, heard time.Time) error {
	up, knows, tooBig := 0, 0, 0
	var sizeErr error
	for _, h := range s.hc.hosts {
		if !placeable(h, heard) {
			continue
		}
		up++
		if !slices.Contains(h.Templates, template) {
			continue
		}
		knows++
		if err := s.limits[h.ID].checkSize("template "+template, vcpus, need); err != nil {
			tooBig, sizeErr = tooBig+1, err
		}
	}
	switch {
	case knows > 0 && tooBig == knows:
		return sizeErr
	case up == 0:
		return errdefs.Capacityf("no host is up to run sandboxes")
	case knows == 0:
		return errdefs.Capacityf("no host that is up can run template %q", template)
	default:
		return errdefs.Capacityf("no host has room for a %q sandbox (%d MiB): all are full", template, need)
	}
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
	if err := s.refreshHosts(ctx); err != nil {
		return nil, err
	}
	var cands []hostRank
	heard := s.heardSince()
	s.hc.mu.RLock()
	s.mu.Lock()
	for _, h := range s.hc.hosts {
		if !placeable(h, heard) {
			continue
		}
		p := s.pending[h.ID]
		free, _ := s.roomLocked(*h, p)
		cands = append(cands, hostRank{*h, h.SlotsTotal == 0 || h.SlotsTotal-p.used(h) > 0, free, p.used(h)})
	}
	s.mu.Unlock()
	s.hc.mu.RUnlock()
	if len(cands) == 0 {
		return nil, errdefs.Capacityf("no host is up to keep volumes")
	}
	return rankHosts(cands, DefaultTemplateMemMiB, true), nil
}

// reportSettle is how long after a placement ended a host's report that does not say when it was
// read (ReadMsAgo) is taken to count it: a report received sooner may have been read before the
// sandbox was there (an agent reads its state, then sends it).
const reportSettle = time.Second

// reportTransit bounds how long a report that says when it was read took to arrive (loopback or a
// data-centre network, and the server's queue).
const reportTransit = 500 * time.Millisecond

// Reserve counts a sandbox being placed on a host (slots and memMiB) from now until the host
// counts it itself. It checks the room again under the lock that counts it, so concurrent
// placements cannot both take a host's last slot: no room left (by the host's last report less
// the reservations) is an errdefs.Capacity, and nothing is reserved. The slot is also claimed in
// the store (Store.ClaimSlot), where every replica's placements count: a host whose last slot
// another replica took is an errdefs.Capacity too. Call done when the host answered: done(false)
// when nothing was placed (the reservation ends at once), done(true) when the sandbox is there
// (it ends with the first report read after that). Reports read before do not end it: they do
// not count the sandbox. A reservation whose done is never called (its caller failed) ends after
// ClaimTTL. done(true) does not wait for the store: its claim's answer is written in a batch
// (answers.go).
func (s *Scheduler) Reserve(hostID string, memMiB int64) (done func(placed bool), err error) {
	s.hc.mu.RLock()
	s.mu.Lock()
	i, checked := s.hc.pos[hostID] // checked here: the host is in this replica's list
	if checked {
		h, p := s.hc.hosts[i], s.pending[hostID]
		if h.SlotsTotal > 0 && h.SlotsTotal-p.used(h) <= 0 {
			err = errdefs.Capacityf("host %s has no free slot left (taken by other placements meanwhile)", hostID)
		} else if free, known := s.roomLocked(*h, p); known && memMiB > 0 && free < memMiB {
			err = errdefs.Capacityf("host %s does not have %d MiB of guest memory left (taken by other placements meanwhile)", hostID, memMiB)
		}
	}
	if err == nil {
		s.addPendingLocked(hostID, reservation{slots: 1, mem: memMiB})
	}
	s.mu.Unlock()
	s.hc.mu.RUnlock()
	if err != nil {
		s.refusedHere.Add(1)
		return nil, err
	}
	unreserve := func() {
		s.mu.Lock()
		s.addPendingLocked(hostID, reservation{slots: -1, mem: -memMiB})
		s.mu.Unlock()
	}
	claim, err := s.claimSlot(hostID, checked)
	if err != nil {
		unreserve()
		return nil, err
	}
	var once sync.Once
	var expiryMu sync.Mutex // the timer may fire before AfterFunc has returned it
	var expiry *time.Timer
	done = func(placed bool) {
		once.Do(func() {
			expiryMu.Lock()
			if expiry != nil {
				expiry.Stop()
			}
			expiryMu.Unlock()
			if claim != "" {
				s.answerClaim(store.ClaimAnswer{ID: claim, Placed: placed, At: s.cfg.Now()})
			}
			if !placed {
				unreserve()
				return
			}
			s.mu.Lock()
			s.placed[hostID] = append(s.placed[hostID], placedRes{at: s.cfg.Now(), slots: 1, mem: memMiB})
			s.mu.Unlock()
		})
	}
	expiryMu.Lock()
	expiry = time.AfterFunc(s.cfg.ClaimTTL, func() {
		s.cfg.Logger.Warn("a placement was never answered: its reservation expired", "host", hostID, "ttl", s.cfg.ClaimTTL)
		done(false)
	})
	expiryMu.Unlock()
	return done, nil
}

// Refusals counts the reservations this process refused since it started (Reserve: the host
// chosen was full meanwhile), by who counted the host full: "replica" (this process's view: the
// host's last report and this process's placements and kills since) and "store" (the slot claims
// of every replica: ClaimSlot, PostgreSQL only). For /metrics.
func (s *Scheduler) Refusals() map[string]int64 {
	return map[string]int64{"replica": s.refusedHere.Load(), "store": s.refusedStore.Load()}
}

// claimSlot claims a slot of host hostID in the store for a reservation, returning the claim's
// id; errdefs.Capacity when another replica's placements took the host's last slot. On SQLite
// (one replica by design, like store.Lock) this replica's reservations are all there is: when
// they were checked (checked: the host is in its list) there is no claim ("", no statement).
func (s *Scheduler) claimSlot(hostID string, checked bool) (string, error) {
	if checked && s.cfg.Store.Dialect() == store.SQLite {
		return "", nil
	}
	claim := fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64())
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	now := s.cfg.Now()
	ok, err := s.cfg.Store.ClaimSlot(ctx, claim, hostID, now, now.Add(s.cfg.ClaimTTL))
	if err != nil {
		return "", fmt.Errorf("claim a slot of host %s: %w", hostID, err)
	}
	if !ok {
		s.refusedStore.Add(1)
		return "", errdefs.Capacityf("host %s has no free slot left (taken by placements of another server meanwhile)", hostID)
	}
	return claim, nil
}

// claimTimeout bounds the store calls of a reservation.
const claimTimeout = 10 * time.Second

// Freeing is called before a host is asked to stop sandbox sandboxID of memMiB; call the returned
// func with whether it did. A stop counts as a slot and memMiB back at once, until a report that
// may have been read after it was asked for (the host's last report still counts the sandbox).
// On PostgreSQL the slot is also credited in the store (Store.CreditSlots, written in the
// background, credits stopped meanwhile sharing a statement), where every replica's claims and host
// lists count it (the memory only here).
func (s *Scheduler) Freeing(hostID, sandboxID string, memMiB int64) (done func(stopped bool)) {
	asked := s.cfg.Now()
	return func(stopped bool) {
		if !stopped {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.lastReport[hostID].Before(asked) {
			return // a report that arrived meanwhile may count it already
		}
		s.addPendingLocked(hostID, reservation{mem: -memMiB, freed: 1})
		s.placed[hostID] = append(s.placed[hostID], placedRes{at: asked, slots: -1, mem: -memMiB})
		if s.cfg.Store.Dialect() != store.SQLite { // one replica: its memory is all there is
			s.credits.add(store.SlotCredit{SandboxID: sandboxID, HostID: hostID, At: asked, Expires: asked.Add(s.cfg.ClaimTTL)})
		}
	}
}

// placedRes is a sandbox placed on its host (slots 1) or stopped there (slots -1, mem negative)
// that no report has counted yet.
type placedRes struct {
	at    time.Time // placed: when the host answered; stopped: when it was asked to
	slots int64
	mem   int64
}

// addPendingLocked adds d to a host's reservations (s.mu held); any of its figures may be
// negative.
func (s *Scheduler) addPendingLocked(hostID string, d reservation) {
	r := s.pending[hostID]
	r.slots += d.slots
	r.mem += d.mem
	r.freed += d.freed
	if r == (reservation{}) {
		delete(s.pending, hostID)
		return
	}
	s.pending[hostID] = r
}

// readWindow is when an agent read a report: after after, by by at the latest.
type readWindow struct{ after, by time.Time }

// pushedRead is when the agent read reg (a registration or heartbeat arriving now): what it
// says (ReadMsAgo) and reportTransit before, else reportSettle before; by now at the latest.
func (s *Scheduler) pushedRead(reg Registration) readWindow {
	now := s.cfg.Now()
	if reg.ReadMsAgo > 0 {
		return readWindow{after: now.Add(-time.Duration(reg.ReadMsAgo)*time.Millisecond - reportTransit), by: now}
	}
	return readWindow{after: now.Add(-reportSettle), by: now}
}

// settleLocked ends the reservations of hostID that a report read within read counts (s.mu
// held), erring on the side of room taken: a placed sandbox's when the report was surely read
// after the host answered; a stopped one's credit when the report may have been read after the
// kill was asked for.
func (s *Scheduler) settleLocked(hostID string, read readWindow) {
	if read.by.After(s.lastReport[hostID]) {
		s.lastReport[hostID] = read.by
	}
	rs := s.placed[hostID]
	keep := rs[:0]
	for _, r := range rs {
		cutoff := read.after
		if r.slots < 0 {
			cutoff = read.by
		}
		if r.at.After(cutoff) {
			keep = append(keep, r)
			continue
		}
		if r.slots < 0 {
			s.addPendingLocked(hostID, reservation{mem: -r.mem, freed: -1})
		} else {
			s.addPendingLocked(hostID, reservation{slots: -r.slots, mem: -r.mem})
		}
	}
	if len(keep) == 0 {
		delete(s.placed, hostID)
		return
	}
	s.placed[hostID] = keep
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
	if free := h.SlotsTotal - p.used(&h); h.SlotsTotal > 0 && free < int64(n) {
		return store.Host{}, errdefs.Capacityf("host %s has room for %d more sandboxes, not %d", hostID, max(free, 0), n)
	}
	if memMiB > 0 && known && free < int64(n)*memMiB {
		return store.Host{}, errdefs.Capacityf("host %s does not have %d MiB of guest memory left to commit", hostID, int64(n)*memMiB)
	}
	return h, nil
}

// CheckHosts marks hosts that missed their heartbeats down (their sandboxes become lost). Right
// after this process starts every heartbeat may look old (we were not running to receive them),
// so nothing is marked during the first timeout. A host this process heard from within the
// timeout is not marked, whatever its row says: its report's write may still wait for the store
// (a busy writer, a slow fsync on a loaded machine) or have failed; it did report. Nor is a
// static agent this process is asking now (a poll in flight) that answered within two timeouts:
// a loaded host (or server) may take longer than a poll's timeout to answer one poll, and one
// late answer would otherwise be enough to mark it down; one that stays silent is marked at
// most a timeout later than without a poll in flight. Of the replicas sharing a database only the
// one holding the down-check lock checks (another takes over when its session ends): every
// replica's check read the same stale rows and raced to mark them.
func (s *Scheduler) CheckHosts(ctx context.Context) error {
	now := s.cfg.Now()
	if now.Sub(s.started) < s.cfg.HeartbeatTimeout {
		return nil
	}
	if mine, err := s.downCheck.Hold(ctx); err != nil || !mine {
		return err
	}
	staleBefore := now.Add(-s.cfg.HeartbeatTimeout)
	var spare []string
	s.mu.Lock()
	for id, at := range s.heard {
		if at.After(staleBefore) {
			spare = append(spare, id)
		}
	}
	for _, a := range s.static {
		if !a.asked.IsZero() && a.hostID != "" && s.heard[a.hostID].After(staleBefore.Add(-s.cfg.HeartbeatTimeout)) {
			spare = append(spare, a.hostID)
		}
	}
	s.mu.Unlock()
	marked, err := s.cfg.Store.MarkStaleHostsDown(ctx, staleBefore, spare...)
	s.noteHosts(marked...)
	if err := s.cfg.Store.DropEndedClaims(ctx, now); err != nil {
		s.cfg.Logger.Warn("could not delete ended slot claims", "err", err)
	}
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
// there; one no record names is killed once reconcile has seen it so for UnrecordedGrace
// (orphans.go). Snapshots recorded deleted that the host still keeps are deleted there too.
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
	answeredAt := s.cfg.Now() // every sandbox in the list was on the host by now
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
	unrecorded := map[string]time.Time{}
	for id := range onHost {
		if known[id] {
			continue
		}
		sb, err := s.cfg.Store.GetSandbox(ctx, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			// No record: a create or fork in flight, or an orphan its server left (killOrphan).
			if first, keep := s.killOrphan(ctx, h, onHost[id], answeredAt); keep {
				unrecorded[id] = first
			}
		case err != nil:
			if first, ok := s.orphans.since(hostID, id); ok {
				unrecorded[id] = first // the store could not say: nothing is killed on doubt
			}
		case sb.State != store.StateKilled && sb.HostID == hostID:
		default:
			// Recorded killed, or on another host: a copy left behind (a hibernated sandbox woken
			// elsewhere while this host was down, or a create that timed out here and was made on
			// the next host).
			if err := s.Client(h).KillSandbox(ctx, id); err != nil {
				s.cfg.Logger.Warn("killing a sandbox that outlived its kill failed", "sandbox", id, "host", hostID, "err", err)
			}
		}
	}
	s.orphans.set(hostID, unrecorded)
	s.reconcileSnapshots(ctx, h)
	s.reconcileVolumes(ctx, h)
	return nil
}

// reconcileVolumes deletes on the host the volumes the store says are deleted (a delete made
// while the host was down) or on another host (taken there by a hibernated sandbox that was woken
// there while this host was down or draining; the host refuses while its stale copy of the
// sandbox, which this reconcile kills, still holds them).
func (s *Scheduler) reconcileVolumes(ctx context.Context, h store.Host) {
	c := s.Client(h)
	s.reconcileDeleted(ctx, h, "volume", func() ([]string, error) {
		vols, err := c.ListVolumes(ctx)
		return idsOf(vols, func(v agentclient.Volume) string { return v.ID }), err
	}, func(ctx context.Context, ids []string) (map[string]bool, error) {
		return s.cfg.Store.VolumesGoneFrom(ctx, h.ID, ids)
	}, func(id string) error { return c.DeleteVolume(ctx, id) })
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
	asked := s.cfg.Now() // the answer counts every sandbox placed or stopped before this
	s.mu.Lock()
	a.asked = asked
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		a.asked = time.Time{}
		s.mu.Unlock()
	}()
	c := agentclient.New(a.url, a.token)
	info, err := c.Info(pctx)
	if err != nil {
		return err
	}
	if info.HostID == "" {
		return fmt.Errorf("agent at %s reported no host_id", a.url)
	}
	s.mu.Lock()
	a.hostID = info.HostID
	s.mu.Unlock()
	reg := RegistrationFromInfo(info, a.url, a.token)
	read := readWindow{after: asked, by: s.cfg.Now()}
	s.mu.Lock()
	cursor := a.exits
	s.mu.Unlock()
	next := AddProcessExits(pctx, c, &reg, cursor)
	if err := s.register(ctx, reg, false, read); err != nil {
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
	defer s.downCheck.Release()
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
