// Package apps is git-deployed apps on the sandbox substrate (docs/apps.md). A deploy builds the
// source in a build sandbox of the base template (install and build commands from
// internal/apps/detect's plan, logs streamed live with secrets redacted), starts the app on $PORT,
// waits for its HTTP health check and snapshots it: that snapshot is the release. Every instance
// is a restore of a release; a deploy restores the new release, checks its health, switches the
// app's route atomically, drains the old instance (bounded) and kills it. A failed build or
// health check leaves the live deployment serving. Rollback re-points the route at an earlier
// release without a rebuild. It calls the sandbox service (internal/sandboxes), never the HTTP
// handlers; hosts never learn what an app is.
package apps

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/apps/detect"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/background"
	"github.com/pandastack/pandastack/internal/bundle"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/sealed"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// BaseTemplate is the template apps build and run on by default.
const BaseTemplate = "base"

// Deployment states.
const (
	Queued     = "queued"
	Building   = "building"
	Deploying  = "deploying"
	Live       = "live"
	Failed     = "failed"
	Superseded = "superseded"
)

// Limits and defaults of an app's settings.
const (
	DefaultBranch        = "main"
	DefaultHealthTimeout = 60
	MaxHealthTimeout     = 600
	DefaultDrainTimeout  = 30
	MaxDrainTimeout      = 300
	// BuildTimeout bounds one build's install and build commands.
	BuildTimeout = 30 * time.Minute
	// MaxLogBytes bounds the build logs a deployment keeps (the tail).
	MaxLogBytes = 1 << 20
	// MaxInstances bounds min_instances: how many instances of a release serve an app.
	MaxInstances = 10
	// InstanceTTL is how long an instance lives without a renewal; the service renews it.
	InstanceTTL = 86400
)

// Where things are in an app's VM.
const (
	appDir = "/home/user/app"
	srcTar = "/home/user/src.tar"
)

// Config configures a Service.
type Config struct {
	sandboxes.ProductDeps
	// BaseTemplate is the template apps build and run on (default "base").
	BaseTemplate string
	// SecretsKey seals secrets at rest (internal/sealed); empty: unsealed.
	SecretsKey []byte
	// ProxyDomain, when set, serves each app at <name>.apps.<domain>.
	ProxyDomain string
	// GitDir, when set, holds the apps' git remotes (bare repositories); empty: no git push.
	GitDir string
}

// Service manages apps and their deployments. Create with New; Close waits for its builds.
type Service struct {
	cfg Config
	log *slog.Logger

	// route orders the router's reads of an app's route (read lock, and the in-flight count taken
	// under it) against switches (write lock): once a switch returns, no request can start on the
	// old instance, so draining it is waiting for its count to reach zero.
	route sync.RWMutex

	mu       sync.Mutex
	inflight map[string]int       // requests in flight per instance sandbox
	lastSeen map[string]time.Time // last request per instance sandbox (scale to zero)
	logs     map[string]*logBuf   // build logs of deployments building on this replica
	deploys  map[string]*sync.Mutex
	sets     map[string]*instanceSet // a live deployment's instances, by deployment (router cache)

	bg *background.Group // builds, deploys, drains
	// started is when this service started (the store's clock): deployments it takes have leases
	// past started+LeaseTime, those of a server before it (over the same SQLite) end before.
	started time.Time
}

// New builds a service.
func New(cfg Config) *Service {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.BaseTemplate = cmp.Or(cfg.BaseTemplate, BaseTemplate)
	bg := background.New()
	return &Service{cfg: cfg, log: cfg.Logger, inflight: map[string]int{}, lastSeen: map[string]time.Time{},
		logs: map[string]*logBuf{}, deploys: map[string]*sync.Mutex{}, sets: map[string]*instanceSet{}, bg: bg, started: cfg.Store.Clock(bg.Ctx())}
}

// Close cancels builds in flight and waits for them.
func (s *Service) Close() { s.bg.Close() }

// Wait waits for the builds and deploys in flight (tests).
func (s *Service) Wait() { s.bg.Wait() }

// URL is the app's address, or "" without a proxy domain.
func (s *Service) URL(a store.App) string { return s.hostURL(a.Name) }

// hostURL is the address of host name label under the apps' zone, http://<label>.apps.<domain>,
// or "" without a proxy domain.
func (s *Service) hostURL(label string) string {
	if s.cfg.ProxyDomain == "" {
		return ""
	}
	return "http://" + label + ".apps." + s.cfg.ProxyDomain
}

var (
	namePattern   = regexp.MustCompile(`^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$`)
	branchPattern = regexp.MustCompile(`^[A-Za-z0-9._/-]{1,100}$`)
)

// Build is the app's build overrides.
func Build(a store.App) v1.AppBuild {
	var b v1.AppBuild
	if a.Build != "" {
		json.Unmarshal([]byte(a.Build), &b)
	}
	return b
}

func validBuild(b v1.AppBuild) error {
	switch {
	case b.Framework != "" && !slices.Contains(detect.Frameworks, b.Framework):
		return errdefs.Invalidf("build.framework must be one of %s", strings.Join(detect.Frameworks, ", "))
	case b.Port < 0 || b.Port > 65535:
		return errdefs.Invalidf("build.port must be 1-65535")
	}
	for what, c := range map[string]string{"install": b.Install, "build": b.Build, "start": b.Start} {
		if len(c) > 4096 || strings.ContainsRune(c, 0) {
			return errdefs.Invalidf("build.%s is at most 4096 bytes, without NUL", what)
		}
	}
	return nil
}

// apply validates sp and writes its fields into a (a create fills the defaults first).
func (s *Service) apply(ctx context.Context, a *store.App, sp v1.AppSpec) error {
	if sp.Branch != "" {
		if !branchPattern.MatchString(sp.Branch) || strings.Contains(sp.Branch, "..") {
			return errdefs.Invalidf("branch must be a git branch name")
		}
		a.Branch = sp.Branch
	}
	env, secrets, err := s.vars(*a, sp)
	if err != nil {
		return err
	}
	if err := sealed.CheckVars(env, secrets, "PORT"); err != nil {
		return err
	}
	if env != nil {
		a.Env = env
	}
	if secrets != nil {
		stored, err := sealed.Seal(s.cfg.SecretsKey, secrets)
		if err != nil {
			return err
		}
		a.Secrets, a.SecretNames = stored, slices.Sorted(maps.Keys(secrets))
	}
	for k := range a.Env {
		if slices.Contains(a.SecretNames, k) {
			return errdefs.Invalidf("%s is both in env and in secrets", k)
		}
	}
	if sp.Build != nil {
		if err := validBuild(*sp.Build); err != nil {
			return err
		}
		b, _ := json.Marshal(sp.Build)
		a.Build = string(b)
	}
	ints := []struct {
		name     string
		v        int64
		dst      *int64
		min, max int64
	}{
		{"health_timeout_seconds", sp.HealthTimeoutSeconds, &a.HealthTimeoutSeconds, 1, MaxHealthTimeout},
		{"drain_timeout_seconds", sp.DrainTimeoutSeconds, &a.DrainTimeoutSeconds, 1, MaxDrainTimeout},
		{"vcpus", sp.VCPUs, &a.VCPUs, 1, 64},
	}
	if sp.SuspendAfterSeconds != nil {
		ints = append(ints, struct {
			name     string
			v        int64
			dst      *int64
			min, max int64
		}{"suspend_after_seconds", *sp.SuspendAfterSeconds, &a.SuspendAfterSeconds, 0, 86400})
	}
	if sp.MinInstances != nil {
		if *sp.MinInstances < 0 || *sp.MinInstances > MaxInstances {
			return errdefs.Invalidf("min_instances must be 0-%d (0: one instance that scales to zero; n: n instances kept running, requests balanced across them)", MaxInstances)
		}
		a.MinInstances = *sp.MinInstances
	}
	for _, f := range ints {
		if f.v == 0 && f.name != "suspend_after_seconds" {
			continue
		}
		if f.v < f.min || f.v > f.max {
			return errdefs.Invalidf("%s must be %d-%d", f.name, f.min, f.max)
		}
		*f.dst = f.v
	}
	if sp.MemoryMiB != 0 {
		base, err := s.cfg.Templates.Catalog(ctx, s.cfg.BaseTemplate)
		if err != nil {
			return errdefs.Capacityf("the apps' base template %q is not available on any host yet", s.cfg.BaseTemplate)
		}
		if sp.MemoryMiB < 0 || sp.MemoryMiB > int64(base.MemoryMiB) {
			return errdefs.Invalidf("memory_mib must be at most %d, the base template's memory (it is fixed when the template is baked)", base.MemoryMiB)
		}
		a.MemoryMiB = sp.MemoryMiB
	}
	return nil
}

// vars is a's env and secrets as sp changes them (nil: unchanged): Env and Secrets replace,
// SetEnv and SetSecrets add or change, Unset removes names (each one set before).
func (s *Service) vars(a store.App, sp v1.AppSpec) (env, secrets map[string]string, err error) {
	env, secrets = sp.Env, sp.Secrets
	if len(sp.SetEnv) > 0 || len(sp.Unset) > 0 {
		env = maps.Clone(cmpOr(env, a.Env))
		if env == nil {
			env = map[string]string{}
		}
		maps.Copy(env, sp.SetEnv)
	}
	if len(sp.SetSecrets) > 0 || slices.ContainsFunc(sp.Unset, func(k string) bool { return slices.Contains(a.SecretNames, k) }) {
		if secrets == nil {
			if secrets, err = sealed.Open(s.cfg.SecretsKey, a.Secrets); err != nil {
				return nil, nil, errdefs.Conflictf("the app's secrets cannot be read on this server: set them all again with secrets")
			}
		} else {
			secrets = maps.Clone(secrets)
		}
		maps.Copy(secrets, sp.SetSecrets)
	}
	if len(sp.Unset) > 100 {
		return nil, nil, errdefs.Invalidf("unset names at most 100 variables")
	}
	for _, k := range sp.Unset {
		_, inEnv := env[k]
		_, inSecrets := secrets[k]
		_, set := sp.SetEnv[k]
		_, setSecret := sp.SetSecrets[k]
		switch {
		case set || setSecret:
			return nil, nil, errdefs.Invalidf("%s is both set and unset", bundle.Trunc(k))
		case !inEnv && !inSecrets:
			return nil, nil, errdefs.Invalidf("%s is neither in the app's env nor in its secrets", bundle.Trunc(k))
		}
		delete(env, k)
		delete(secrets, k)
	}
	return env, secrets, nil
}

func cmpOr(m, or map[string]string) map[string]string {
	if m != nil {
		return m
	}
	return or
}

// Create records a new app of the team (no deployment yet).
func (s *Service) Create(ctx context.Context, teamID string, sp v1.AppSpec) (store.App, error) {
	if !namePattern.MatchString(sp.Name) || strings.Contains(sp.Name, "--") {
		return store.App{}, errdefs.Invalidf("name must be 1-40 of a-z, 0-9 and - (not --), starting with a letter and not ending with - (it is the app's host name)")
	}
	a := store.App{ID: auth.NewID("app_"), TeamID: teamID, Name: sp.Name, Branch: DefaultBranch, Env: map[string]string{},
		SecretNames: []string{}, Build: "{}", VCPUs: 1, HealthTimeoutSeconds: DefaultHealthTimeout,
		DrainTimeoutSeconds: DefaultDrainTimeout}
	if err := s.apply(ctx, &a, sp); err != nil {
		return store.App{}, err
	}
	out, err := s.cfg.Store.CreateApp(ctx, a)
	if errors.Is(err, store.ErrConflict) {
		return out, errdefs.Conflictf("the app name %s is taken (names are host names, unique on this server)", sp.Name)
	}
	return out, err
}

// Update changes the team's app's settings; they apply from its next deploy.
func (s *Service) Update(ctx context.Context, teamID, id string, sp v1.AppSpec) (store.App, error) {
	a, err := s.Get(ctx, teamID, id)
	if err != nil {
		return a, err
	}
	if sp.Name != "" && sp.Name != a.Name {
		return a, errdefs.Invalidf("an app's name cannot change (it is its host name): create another app")
	}
	if err := s.apply(ctx, &a, sp); err != nil {
		return a, err
	}
	return s.cfg.Store.UpdateApp(ctx, a)
}

// Get returns the team's app by id or name; another team's is NotFound.
func (s *Service) Get(ctx context.Context, teamID, id string) (store.App, error) {
	a, err := s.cfg.Store.GetTeamApp(ctx, teamID, id)
	if errors.Is(err, store.ErrNotFound) {
		return a, errdefs.NotFoundf("app %s not found", bundle.Trunc(id))
	}
	return a, err
}

// List returns the team's apps, newest first.
func (s *Service) List(ctx context.Context, teamID string) ([]store.App, error) {
	return s.cfg.Store.ListTeamApps(ctx, teamID)
}

// Delete deletes the team's app: its route, its instances, its releases and its deployments.
func (s *Service) Delete(ctx context.Context, teamID, id string) error {
	a, err := s.Get(ctx, teamID, id)
	if err != nil {
		return err
	}
	// Not behind the app's deploy lock: a build in flight finds the app gone at its switch and
	// undoes itself.
	deps, err := s.cfg.Store.ListDeployments(ctx, a.ID, 1000)
	if err != nil {
		return err
	}
	s.route.Lock()
	err = s.cfg.Store.DeleteApp(ctx, teamID, a.ID)
	s.route.Unlock()
	if err != nil {
		return err
	}
	for _, d := range deps {
		s.stopInstances(ctx, d, "app deleted", 0)
		if d.SnapshotID != "" {
			s.dropSnapshot(ctx, teamID, d.SnapshotID)
		}
	}
	return nil
}

// Deployments returns the team's app's deployments, newest first.
func (s *Service) Deployments(ctx context.Context, teamID, id string, limit int) (store.App, []store.Deployment, error) {
	a, err := s.Get(ctx, teamID, id)
	if err != nil {
		return a, nil, err
	}
	ds, err := s.cfg.Store.ListDeployments(ctx, a.ID, limit)
	return a, ds, err
}

// Deployment returns one deployment of the team's app.
func (s *Service) Deployment(ctx context.Context, teamID, id, depID string) (store.App, store.Deployment, error) {
	a, err := s.Get(ctx, teamID, id)
	if err != nil {
		return a, store.Deployment{}, err
	}
	d, err := s.cfg.Store.GetDeployment(ctx, a.ID, depID)
	if errors.Is(err, store.ErrNotFound) {
		return a, d, errdefs.NotFoundf("deployment %s not found", bundle.Trunc(depID))
	}
	return a, d, err
}

// Plan is the plan of a source archive (.tar.gz or .zip) with the app's overrides (nil app: none).
func (s *Service) Plan(archive []byte, b v1.AppBuild) (v1.AppPlan, error) {
	if err := validBuild(b); err != nil {
		return v1.AppPlan{}, err
	}
	files, err := bundle.Read(archive)
	if err != nil {
		return v1.AppPlan{}, err
	}
	return detect.Detect(tree(files), b), nil
}

// tree is the regular files of a bundle by path.
func tree(files []bundle.File) detect.Files {
	out := detect.Files{}
	for _, f := range files {
		if !f.Dir {
			out[f.Name] = f.Data
		}
	}
	return out
}

// PlanOf reads a deployment's plan.
func PlanOf(d store.Deployment) v1.AppPlan {
	var p v1.AppPlan
	json.Unmarshal([]byte(d.Plan), &p)
	if p.Found == nil {
		p.Found = []string{}
	}
	return p
}

func (s *Service) appLock(appID string) *sync.Mutex {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.deploys[appID]
	if !ok {
		m = &sync.Mutex{}
		s.deploys[appID] = m
	}
	return m
}

func (s *Service) dropSnapshot(ctx context.Context, teamID, id string) {
	if err := s.cfg.Sandboxes.DeleteSnapshot(context.WithoutCancel(ctx), teamID, id); err != nil {
		s.log.Warn("apps: could not delete a snapshot", "snapshot", id, "err", err)
	}
}
