package apps

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/apps/detect"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/bundle"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/periodic"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/sealed"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Source says where a deploy's code came from.
type Source struct {
	Kind   string // "upload" or "git"
	Commit string
	Branch string
	// Clean skips the build cache: the build starts from a new base sandbox and runs the install
	// even when the previous release's dependencies would do.
	Clean bool
}

// Deploy starts a deploy of the team's app from a source archive (.tar.gz or .zip): the plan is
// detected (with the app's overrides) and the deployment recorded queued, then built, released
// and switched to in the background (src.Branch other than the app's: its preview). A source that is not an archive, too large, or whose plan
// has no start command is refused (errdefs.Invalid / TooLarge naming the problem) and nothing
// is recorded.
func (s *Service) Deploy(ctx context.Context, teamID, id string, archive []byte, src Source) (store.Deployment, error) {
	a, err := s.Get(ctx, teamID, id)
	if err != nil {
		return store.Deployment{}, err
	}
	if src.Branch != "" && (!branchPattern.MatchString(src.Branch) || strings.Contains(src.Branch, "..")) {
		return store.Deployment{}, errdefs.Invalidf("branch must be a git branch name")
	}
	files, err := bundle.Read(archive)
	if err != nil {
		return store.Deployment{}, err
	}
	plan := detectPlan(files, Build(a))
	if plan.Problem != "" {
		return store.Deployment{}, errdefs.Invalidf("%s", plan.Problem)
	}
	tarball, err := bundle.Tar(files, nil)
	if err != nil {
		return store.Deployment{}, err
	}
	pj, _ := json.Marshal(plan)
	if src.Kind == "" {
		src.Kind = "upload"
	}
	d, err := s.cfg.Store.CreateDeployment(ctx, store.Deployment{ID: auth.NewID("dep_"), AppID: a.ID, TeamID: teamID, State: Queued,
		Source: src.Kind, Commit: src.Commit, Branch: src.Branch, Plan: string(pj), LeaseUntil: s.cfg.Store.Clock(ctx).Add(LeaseTime)})
	if err != nil {
		return d, err
	}
	lb := newLogBuf()
	s.mu.Lock()
	s.logs[d.ID] = lb
	s.mu.Unlock()
	key := detect.DepsKey(tree(files), plan.Install, a.Env)
	s.bg.Go(func() {
		s.run(a, d, plan, tarball, key, src.Clean, lb)
	})
	return d, nil
}

func detectPlan(files []bundle.File, b v1.AppBuild) v1.AppPlan {
	return detect.Detect(tree(files), b)
}

// run builds, releases and switches to deployment d, one deploy of an app at a time.
func (s *Service) run(a store.App, d store.Deployment, plan v1.AppPlan, tarball []byte, depsKey string, clean bool, lb *logBuf) {
	ctx := s.bg.Ctx()
	stop := make(chan struct{}) // the lease is held while it waits for the app's lock too
	defer close(stop)
	go s.renew(d.ID, stop)
	lock := s.appLock(a.ID)
	lock.Lock()
	defer lock.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.logs, d.ID)
		s.mu.Unlock()
	}()
	if cur, err := s.cfg.Store.GetDeployment(ctx, d.AppID, d.ID); err != nil || cur.State != Queued {
		lb.close() // another replica recorded it failed while it waited (this one looked gone)
		return
	}
	secrets, err := sealed.Open(s.cfg.SecretsKey, a.Secrets)
	if err != nil {
		s.log.Error("apps: unsealing secrets failed", "app", a.ID, "err", err)
		s.fail(d, lb, errors.New("the app's secrets cannot be read on this server"))
		return
	}
	lb.redact(secrets)
	start := time.Now()
	d.State = Building
	s.save(d, lb, false)
	snap, pid, err := s.build(ctx, a, d, plan, tarball, depsKey, clean, secrets, lb)
	d.BuildMS = time.Since(start).Milliseconds()
	if err != nil {
		s.fail(d, lb, err)
		return
	}
	d.SnapshotID, d.Pid, d.State = snap.ID, int64(pid), Deploying
	s.save(d, lb, false)
	if err := s.release(ctx, a, &d, lb); err != nil {
		s.fail(d, lb, err)
		return
	}
}

// save records d with the logs so far.
func (s *Service) save(d store.Deployment, lb *logBuf, final bool) store.Deployment {
	d.Logs = lb.String()
	out, err := s.cfg.Store.UpdateDeployment(context.WithoutCancel(s.bg.Ctx()), d, final)
	if err != nil {
		s.log.Warn("apps: could not record a deployment", "deployment", d.ID, "err", err)
	}
	return out
}

// fail records d failed with err (its logs end with it); the live deployment keeps serving.
func (s *Service) fail(d store.Deployment, lb *logBuf, err error) {
	if s.bg.Ctx().Err() != nil {
		err = errors.New(ErrServerStopped)
	}
	lb.Printf("\n==> deploy failed: %v\n", err)
	d.State, d.Error = Failed, lb.scrub(err.Error())
	if d.SnapshotID != "" {
		s.dropSnapshot(s.bg.Ctx(), d.TeamID, d.SnapshotID)
		d.SnapshotID = ""
	}
	s.save(d, lb, true)
	lb.close()
	s.log.Info("app deployment failed", "app", d.AppID, "deployment", d.ID, "err", err)
}

// Where the key of the dependencies installed in a VM (detect.DepsKey) is kept. (The operator's
// extra CA certificates are every sandbox's: internal/sandboxes installs them.)
const (
	stateDir    = "/home/user/.pandastack"
	depsKeyFile = stateDir + "/deps-key"
	// buildStateFile holds the count of builds in a row made on a previous release (0: on base)
	// and the key of the secrets the build had (secretsKey).
	buildStateFile = stateDir + "/build-state"
)

// MaxWarmBuilds is how many builds in a row start from the previous release; the next starts
// from a fresh base sandbox (a newly baked base, nothing left over from older builds).
const MaxWarmBuilds = 10

// runEnv is the environment of the app's build and process.
func (s *Service) runEnv(a store.App, secrets map[string]string, port int) map[string]string {
	env := map[string]string{}
	maps.Copy(env, a.Env)
	maps.Copy(env, secrets)
	env["PORT"] = strconv.Itoa(port)
	env["HOME"] = "/home/user"
	return env
}

// build makes the release of d: a build sandbox (buildSandbox) with the source unpacked, the
// install and build commands run (their output streamed into lb), the start command started and
// healthy on $PORT, snapshotted. The build sandbox is killed either way. The install is skipped
// when the build sandbox comes from the previous release and its dependencies' key (depsKey,
// detect.DepsKey) is the one that release was installed with: its node_modules and .venv are
// moved into the new source instead. A clean build always starts from base.
func (s *Service) build(ctx context.Context, a store.App, d store.Deployment, plan v1.AppPlan, tarball []byte, depsKey string,
	clean bool, secrets map[string]string, lb *logBuf) (store.Snapshot, int, error) {
	key := secretsKey(secrets)
	sb, c, gen, err := s.buildSandbox(ctx, a, d, clean, key, lb)
	if err != nil {
		return store.Snapshot{}, 0, err
	}
	defer s.stopInstance(sb.ID, "app build finished", 0)
	if _, err := c.WriteFile(ctx, sb.ID, srcTar, bytes.NewReader(tarball), int64(len(tarball))); err != nil {
		return store.Snapshot{}, 0, fmt.Errorf("writing the source into the build sandbox: %w", err)
	}
	env := s.runEnv(a, secrets, plan.Port)
	// The previous release's app directory (a build from it) goes, but for its dependencies.
	script := fmt.Sprintf(`set -e
mkdir -p %[3]s
rm -rf %[3]s/prev-app
if [ -d %[1]s ]; then mv %[1]s %[3]s/prev-app; fi
mkdir -p %[1]s
tar -xf %[2]s -C %[1]s
rm %[2]s
cd %[1]s
for dep in node_modules .venv; do
  if [ -e %[3]s/prev-app/$dep ] && [ ! -e $dep ]; then mv %[3]s/prev-app/$dep $dep; fi
done
rm -rf %[3]s/prev-app
echo %[4]d %[6]s > %[5]s
`, appDir, srcTar, stateDir, gen, buildStateFile, key)
	if plan.Install != "" {
		script += fmt.Sprintf(`if [ "$(cat %[1]s 2>/dev/null)" = %[2]s ]; then
  echo '==> install: skipped, the dependencies of the previous release are reused (their inputs are unchanged)'
else
  rm -f %[1]s
  echo %[3]s
  %[4]s
fi
echo %[2]s > %[1]s
`, depsKeyFile, depsKey, shellQuote("==> install: "+plan.Install), plan.Install)
	}
	if plan.Build != "" {
		script += fmt.Sprintf("echo %s\n%s\n", shellQuote("==> build: "+plan.Build), plan.Build)
	}
	t := time.Now()
	if err := s.stream(ctx, c, sb.ID, script, env, lb); err != nil {
		return store.Snapshot{}, 0, err
	}
	lb.Printf("==> built in %.1f s\n", time.Since(t).Seconds())
	lb.Printf("==> start: %s (port %d)\n", plan.Start, plan.Port)
	pid, err := c.StartProcess(ctx, sb.ID, agentclient.StartProcessRequest{Cmd: plan.Start, Env: env, Cwd: appDir})
	if err != nil {
		return store.Snapshot{}, 0, fmt.Errorf("starting the app: %w", err)
	}
	t = time.Now()
	if err := s.healthy(ctx, c, sb.ID, pid, plan.Port, time.Duration(a.HealthTimeoutSeconds)*time.Second, lb); err != nil {
		return store.Snapshot{}, 0, err
	}
	lb.Printf("==> healthy after %.1f s; snapshotting the release\n", time.Since(t).Seconds())
	t = time.Now()
	snap, err := s.cfg.Sandboxes.Snapshot(ctx, sb)
	if err != nil {
		return store.Snapshot{}, 0, err
	}
	lb.Printf("==> release %s saved in %.1f s\n", snap.ID, time.Since(t).Seconds())
	return snap, pid, nil
}

// buildSandbox is the sandbox d builds in and its generation (builds in a row on a previous
// release, this one included): a restore of the release serving d's route (its preview's, else
// the app's) with its app stopped, so that its installed dependencies can be reused; without one,
// when it cannot be used, when the app's secrets changed since it was built (secretsKey), after
// MaxWarmBuilds of them or for a clean build, a new sandbox of the base template (0).
func (s *Service) buildSandbox(ctx context.Context, a store.App, d store.Deployment, clean bool, secretsKey string, lb *logBuf) (store.Sandbox, *agentclient.Client, int, error) {
	recorded, agentName, host, err := s.cfg.Templates.Resolve(ctx, a.TeamID, s.cfg.BaseTemplate)
	if err != nil {
		return store.Sandbox{}, nil, 0, err
	}
	md := map[string]string{"pandastack.app": a.Name, "pandastack.app_role": "build", "pandastack.deployment": d.ID}
	ttl := int64(BuildTimeout/time.Second) + 600
	if clean {
		lb.Printf("==> clean build: the build cache is not used\n")
	} else if prev, snap, ok := s.previousRelease(ctx, a, d, recorded, agentName); ok {
		t := time.Now()
		sb, err := s.cfg.Sandboxes.Create(ctx, a.TeamID, sandboxes.CreateParams{Template: snap.Template, AgentTemplate: snap.Template,
			Snapshot: &snap, Metadata: md, TTLSeconds: ttl})
		gen, key := 0, ""
		if err == nil {
			var c *agentclient.Client
			if c, err = s.cfg.Sandboxes.Target(ctx, sb); err == nil {
				_, err = c.KillProcess(ctx, sb.ID, int(prev.Pid)) // its tree, waited for: the port is free
			}
			if err == nil {
				gen, key = readBuildState(ctx, c, sb.ID)
				gen++
			}
			if err == nil && key == secretsKey && gen <= MaxWarmBuilds {
				lb.Printf("==> build sandbox from the release of %s (%.1f s; its dependencies are reused when unchanged)\n", prev.ID, time.Since(t).Seconds())
				return sb, c, gen, nil
			}
			s.stopInstance(sb.ID, "app build cache unusable", 0)
		}
		switch {
		case err != nil:
			lb.Printf("==> the release of %s cannot be built on (%v); a new build sandbox\n", prev.ID, err)
		case key != secretsKey:
			// Its memory, freed pages included, may hold the old values: none is carried over.
			lb.Printf("==> the app's secrets changed since the release of %s: a new build sandbox\n", prev.ID)
		default:
			lb.Printf("==> %d builds in a row on previous releases: this one starts afresh\n", MaxWarmBuilds)
		}
	}
	lb.Printf("==> build sandbox from %s\n", s.cfg.BaseTemplate)
	sb, err := s.cfg.Sandboxes.Create(ctx, a.TeamID, sandboxes.CreateParams{Template: recorded, AgentTemplate: agentName, TemplateHost: host,
		Metadata: md, TTLSeconds: ttl})
	if err != nil {
		return store.Sandbox{}, nil, 0, err
	}
	c, err := s.cfg.Sandboxes.Target(ctx, sb)
	if err != nil {
		s.stopInstance(sb.ID, "app build failed", 0)
		return store.Sandbox{}, nil, 0, err
	}
	return sb, c, 0, nil
}

// readBuildState is the generation a release was built in and the key of its secrets
// (buildStateFile; 0 and "" when unreadable).
func readBuildState(ctx context.Context, c *agentclient.Client, sbID string) (int, string) {
	res, err := c.ReadFile(ctx, sbID, buildStateFile)
	if err != nil {
		return 0, ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 256))
	gen, key, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	n, _ := strconv.Atoi(gen)
	return n, key
}

// secretsKey identifies a set of secrets (names and values): a build is made on a previous
// release only when its key is the same, so that no earlier value lingers in a release's memory
// (freed pages are not cleared) after a secret was changed or removed.
func secretsKey(secrets map[string]string) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(secrets)) {
		fmt.Fprintf(h, "%s\x00%s\x00", k, secrets[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// previousRelease is the deployment serving d's route (its preview's, else the app's) and its
// release snapshot, when it has one of the base template and its app's pid.
func (s *Service) previousRelease(ctx context.Context, a store.App, d store.Deployment, templates ...string) (store.Deployment, store.Snapshot, bool) {
	cur, err := s.cfg.Store.GetTeamApp(ctx, a.TeamID, a.ID)
	if err != nil {
		return store.Deployment{}, store.Snapshot{}, false
	}
	id := cur.LiveDeploymentID
	if slug := PreviewSlug(cur, d.Branch); slug != "" {
		if p, err := s.cfg.Store.GetPreview(ctx, a.ID, slug); err == nil && p != "" {
			id = p
		}
	}
	if id == "" {
		return store.Deployment{}, store.Snapshot{}, false
	}
	prev, err := s.cfg.Store.GetDeployment(ctx, a.ID, id)
	if err != nil || prev.SnapshotID == "" || prev.Pid <= 0 {
		return prev, store.Snapshot{}, false
	}
	snap, err := s.cfg.Store.GetSnapshot(ctx, prev.SnapshotID)
	if err != nil || snap.Deleted || !slices.Contains(templates, snap.Template) {
		return prev, snap, false
	}
	return prev, snap, true
}

// stream runs script in the sandbox, its output (stdout and stderr) appended to lb as it comes.
func (s *Service) stream(ctx context.Context, c *agentclient.Client, sbID, script string, env map[string]string, lb *logBuf) error {
	secs := BuildTimeout.Seconds()
	body, err := c.ExecStream(ctx, sbID, agentclient.ExecRequest{Cmd: script, Env: env, Cwd: "/home/user", TimeoutSeconds: &secs})
	if err != nil {
		return err
	}
	defer body.Close()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var ev v1.ExecEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue
		}
		switch {
		case ev.Stdout != nil:
			lb.Write([]byte(*ev.Stdout))
		case ev.Stderr != nil:
			lb.Write([]byte(*ev.Stderr))
		case ev.Error != nil:
			return fmt.Errorf("the build could not run: %s", ev.Error.Message)
		case ev.TimedOut:
			return fmt.Errorf("the build ran past %s", BuildTimeout)
		case ev.ExitCode != nil:
			if *ev.ExitCode != 0 {
				return fmt.Errorf("the build failed (exit %d)", *ev.ExitCode)
			}
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("the build's output ended without an exit code")
}

// healthy waits until the app answers an HTTP GET / on port with a status below 500, within
// timeout; the app's process exiting first fails at once (its output goes to lb).
func (s *Service) healthy(ctx context.Context, c *agentclient.Client, sbID string, pid, port int, timeout time.Duration, lb *logBuf) error {
	deadline := time.Now().Add(timeout)
	path := fmt.Sprintf("/v1/sandboxes/%s/ports/%d/", sbID, port)
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := c.Raw(cctx, "GET", path, nil, nil, -1, nil)
		if err == nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
		}
		cancel()
		var ae *agentclient.Error
		switch {
		case err == nil && resp.StatusCode < 500:
			return nil
		case err == nil:
			err = fmt.Errorf("GET / answered %d", resp.StatusCode)
		case errors.As(err, &ae) && ae.Status < 500:
			return nil // the agent relays an app's 4xx as an error
		}
		if pid > 0 {
			if exited, out := s.exited(ctx, c, sbID, pid); exited {
				lb.WriteString(out)
				return fmt.Errorf("the app exited before it answered on port %d", port)
			}
		}
		if time.Now().After(deadline) {
			if _, out := s.exited(ctx, c, sbID, pid); out != "" {
				lb.WriteString(out)
			}
			return fmt.Errorf("health check: the app did not answer GET / on port %d with a status below 500 within %s (%v)", port, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// exited says whether process pid has exited, and its output so far.
func (s *Service) exited(ctx context.Context, c *agentclient.Client, sbID string, pid int) (bool, string) {
	ps, err := c.ListProcesses(ctx, sbID)
	if err != nil {
		return false, ""
	}
	for _, p := range ps {
		if p.Pid == pid {
			if p.State == "running" {
				return false, ""
			}
			var out strings.Builder
			body, err := c.ProcessOutput(ctx, sbID, pid, 0, false)
			if err == nil {
				copyOutput(&out, body, nil)
				body.Close()
			}
			return true, out.String()
		}
	}
	return false, ""
}

// copyOutput writes the text of a process's NDJSON output events to w (each event flushed).
func copyOutput(w io.Writer, body io.Reader, flush func()) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var ev v1.ProcessEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		for _, t := range []*string{ev.Stdout, ev.Stderr} {
			if t != nil {
				if _, err := io.WriteString(w, *t); err != nil {
					return err
				}
			}
		}
		if flush != nil {
			flush()
		}
	}
	return sc.Err()
}

// release makes d's release serve app a: an instance restored from it and healthy, the route
// switched to it, the old instance drained and stopped. On an error the old one keeps serving.
func (s *Service) release(ctx context.Context, a store.App, d *store.Deployment, lb *logBuf) error {
	n := InstanceCount(a)
	lb.Printf("==> restoring %d instance(s) of the release\n", n)
	t := time.Now()
	sbs, err := s.restoreInstances(ctx, a, *d, n, lb)
	if err != nil {
		return err
	}
	sb := sbs[0]
	ids := make([]string, n)
	for i, sb := range sbs {
		ids[i] = sb.ID
	}
	stopNew := func(reason string) {
		for _, id := range ids {
			s.stopInstance(id, reason, 0)
		}
	}
	if cur, err := s.cfg.Store.GetDeployment(ctx, a.ID, d.ID); err == nil && cur.SandboxID != "" {
		// A rollback: the instance of the deployment's own URL gives way to the live one.
		s.stopInstance(cur.SandboxID, "app deployment live again", time.Duration(a.DrainTimeoutSeconds)*time.Second)
	}
	d.SandboxID = sb.ID
	lb.Printf("==> instance(s) %s healthy in %.1f s; switching\n", strings.Join(ids, ", "), time.Since(t).Seconds())
	*d = s.save(*d, lb, false)
	cur, err := s.cfg.Store.GetTeamApp(ctx, a.TeamID, a.ID)
	if err != nil {
		stopNew("app deleted")
		return err
	}
	slug := PreviewSlug(cur, d.Branch)
	curID := cur.LiveDeploymentID
	if slug != "" {
		if curID, err = s.cfg.Store.GetPreview(ctx, a.ID, slug); err != nil {
			stopNew("app switch failed")
			return err
		}
	}
	old := store.Deployment{}
	if curID != "" {
		old, _ = s.cfg.Store.GetDeployment(ctx, a.ID, curID)
	}
	s.setInstances(d.ID, ids) // before the switch: the router's first request finds them all
	s.route.Lock()
	ok, err := s.cfg.Store.SetLiveDeployment(ctx, a.ID, curID, d.ID)
	if slug != "" {
		ok, err = s.cfg.Store.SetPreview(ctx, a.ID, slug, curID, d.ID)
	}
	s.route.Unlock()
	if err == nil && !ok {
		err = errdefs.Conflictf("the app's route changed meanwhile")
	}
	if err != nil {
		stopNew("app switch failed")
		d.SandboxID = ""
		return err
	}
	d.State = Live
	lb.Printf("==> live at %s\n", s.routeURL(a, slug))
	*d = s.save(*d, lb, true)
	lb.close()
	s.log.Info("app deployment live", "app", a.ID, "deployment", d.ID, "instances", ids)
	if old.ID != "" && old.SandboxID != "" {
		s.stopInstances(ctx, old, "app deployment superseded", time.Duration(a.DrainTimeoutSeconds)*time.Second)
		if full, err := s.cfg.Store.GetDeployment(ctx, a.ID, old.ID); err == nil {
			full.SandboxID, full.State = "", Superseded
			s.cfg.Store.UpdateDeployment(context.WithoutCancel(ctx), full, false)
		}
	}
	return nil
}

// restore makes an instance of d's release (role: instance, or url for its own URL's) and waits
// for its health check; an unhealthy one is stopped.
func (s *Service) restore(ctx context.Context, a store.App, d store.Deployment, role string, lb *logBuf) (store.Sandbox, error) {
	snap, err := s.cfg.Store.GetSnapshot(ctx, d.SnapshotID)
	if err != nil || snap.Deleted {
		return store.Sandbox{}, errdefs.Conflictf("the release snapshot of deployment %s is gone", d.ID)
	}
	sb, err := s.cfg.Sandboxes.Create(ctx, a.TeamID, sandboxes.CreateParams{Template: snap.Template, AgentTemplate: snap.Template,
		Snapshot: &snap, Metadata: map[string]string{"pandastack.app": a.Name, "pandastack.app_role": role, "pandastack.deployment": d.ID},
		TTLSeconds: InstanceTTL})
	if err != nil {
		return sb, err
	}
	c, err := s.cfg.Sandboxes.Target(ctx, sb)
	if err == nil {
		err = s.healthy(ctx, c, sb.ID, 0, PlanOf(d).Port, time.Duration(a.HealthTimeoutSeconds)*time.Second, lb)
	}
	if err != nil {
		s.stopInstance(sb.ID, "app instance unhealthy", 0)
		return store.Sandbox{}, err
	}
	return sb, nil
}

// Rollback points the team's app's route at an earlier deployment's release: a new instance of
// it, healthy, then the switch and the drain of the current one. No rebuild.
func (s *Service) Rollback(ctx context.Context, teamID, id, depID string) (store.App, store.Deployment, error) {
	a, d, err := s.Deployment(ctx, teamID, id, depID)
	if err != nil {
		return a, d, err
	}
	if d.SnapshotID == "" || d.State != Superseded && d.State != Live {
		return a, d, errdefs.Invalidf("deployment %s has no release to roll back to (it is %s)", d.ID, d.State)
	}
	lock := s.appLock(a.ID)
	lock.Lock()
	defer lock.Unlock()
	if d.State == Live {
		return a, d, nil // it serves already
	}
	lb := newLogBuf()
	lb.WriteString(d.Logs)
	lb.Printf("\n==> rollback to this release\n")
	err = s.release(context.WithoutCancel(ctx), a, &d, lb)
	return a, d, err
}

// stopInstance kills sandbox id after its in-flight requests finished (at most drain), in the
// background.
func (s *Service) stopInstance(id, reason string, drain time.Duration) {
	if id == "" {
		return
	}
	s.bg.Go(func() {
		deadline := time.Now().Add(drain)
		for time.Now().Before(deadline) {
			s.mu.Lock()
			n := s.inflight[id]
			s.mu.Unlock()
			if n == 0 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		ctx := context.Background()
		sb, err := s.cfg.Store.GetSandbox(ctx, id)
		if err == nil {
			err = s.cfg.Sandboxes.Kill(ctx, sb, reason)
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			s.log.Warn("apps: could not kill a sandbox", "sandbox", id, "err", err)
		}
		s.mu.Lock()
		delete(s.lastSeen, id)
		s.mu.Unlock()
	})
}

// PreviewSlug is the preview a deployment of branch serves ("" for the app itself): the branch
// lowercased, runs of other characters than a-z and 0-9 made one -, at most 20 long.
func PreviewSlug(a store.App, branch string) string {
	if branch == "" || branch == a.Branch {
		return ""
	}
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(branch) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	out := strings.Trim(b.String(), "-")
	if len(out) > 20 {
		out = strings.Trim(out[:20], "-")
	}
	if out == "" {
		out = "branch"
	}
	return out
}

// routeURL is the address of app a's route slug (its preview, or "" for the app).
func (s *Service) routeURL(a store.App, slug string) string {
	if slug == "" {
		return s.URL(a)
	}
	return s.hostURL(a.Name + "--" + slug)
}

// DeploymentURL is a deployment's own address, http://<app>--<id without dep_>.apps.<domain>,
// while it has a release: live, or superseded (its release restored on the first request,
// scaled to zero); "" for another or without a proxy domain.
func (s *Service) DeploymentURL(a store.App, d store.Deployment) string {
	if d.SnapshotID == "" || d.State != Live && d.State != Superseded {
		return ""
	}
	return s.hostURL(a.Name + "--" + strings.TrimPrefix(d.ID, "dep_"))
}

// URLIdle is how long a superseded release's own URL instance runs without a request before it
// hibernates (the app's suspend_after_seconds when shorter).
const URLIdle = 5 * time.Minute

// Target is where a request for name (an app, or <app>--<preview slug>) goes now: its live
// instance and port. done must be
// called when the request has finished (the instance is not stopped before, up to its drain).
func (s *Service) Target(ctx context.Context, name string) (sb store.Sandbox, port int, done func(), err error) {
	appName, label, _ := strings.Cut(name, "--")
	if label != "" {
		// <app>--<deployment id without dep_>: that deployment's own URL.
		a, err := s.cfg.Store.GetAppByName(ctx, appName)
		if err == nil {
			if d, err := s.cfg.Store.GetDeployment(ctx, a.ID, "dep_"+label); err == nil {
				return s.deploymentTarget(ctx, a, d)
			}
		}
	}
	return s.routeTarget(ctx, appName, label)
}

// routeTarget is the live instance of app appName's route slug (its preview, "" for the app).
func (s *Service) routeTarget(ctx context.Context, appName, slug string) (sb store.Sandbox, port int, done func(), err error) {
	s.route.RLock()
	defer s.route.RUnlock()
	name := appName
	if slug != "" {
		name += "--" + slug
	}
	a, err := s.cfg.Store.GetAppByName(ctx, appName)
	if errors.Is(err, store.ErrNotFound) {
		return sb, 0, nil, errdefs.NotFoundf("there is no app %s", bundle.Trunc(appName))
	}
	if err != nil {
		return sb, 0, nil, err
	}
	live := a.LiveDeploymentID
	if slug != "" {
		if live, err = s.cfg.Store.GetPreview(ctx, a.ID, slug); err != nil {
			return sb, 0, nil, err
		}
	}
	if live == "" {
		return sb, 0, nil, errdefs.NotFoundf("%s has no live deployment yet", name)
	}
	d, err := s.cfg.Store.GetDeployment(ctx, a.ID, live)
	if err != nil {
		return sb, 0, nil, err
	}
	if sb, err = s.pick(ctx, a, d); err != nil {
		return sb, 0, nil, err
	}
	sb, port, done = s.serve(sb, d)
	return sb, port, done, nil
}

// serve counts a request in flight on instance sb of deployment d (under the route's read lock
// for a route's instance); done ends it.
func (s *Service) serve(sb store.Sandbox, d store.Deployment) (store.Sandbox, int, func()) {
	s.mu.Lock()
	s.inflight[sb.ID]++
	s.lastSeen[sb.ID] = time.Now()
	s.mu.Unlock()
	return sb, PlanOf(d).Port, func() {
		s.mu.Lock()
		if s.inflight[sb.ID]--; s.inflight[sb.ID] <= 0 {
			delete(s.inflight, sb.ID)
		}
		s.lastSeen[sb.ID] = time.Now()
		s.mu.Unlock()
	}
}

// deploymentTarget is where a request to deployment d's own URL goes: the live instance while
// it is live; for a superseded one, the instance of its own URL, restored from its release on
// the first request (and after it was stopped), health-checked, then recorded.
func (s *Service) deploymentTarget(ctx context.Context, a store.App, d store.Deployment) (store.Sandbox, int, func(), error) {
	if d.State == Live {
		s.route.RLock()
		defer s.route.RUnlock()
		if d, err := s.cfg.Store.GetDeployment(ctx, a.ID, d.ID); err == nil && d.State == Live {
			if sb, err := s.pick(ctx, a, d); err == nil {
				sb, port, done := s.serve(sb, d)
				return sb, port, done, nil
			}
		}
		return store.Sandbox{}, 0, nil, errdefs.New(errdefs.Unavailable, "deployment %s has no running instance; try again", d.ID)
	}
	if d.State != Superseded || d.SnapshotID == "" {
		return store.Sandbox{}, 0, nil, errdefs.NotFoundf("deployment %s of %s has no release (it is %s)", d.ID, a.Name, d.State)
	}
	lock := s.appLock("url:" + d.ID) // one restore per deployment at a time
	lock.Lock()
	defer lock.Unlock()
	d, err := s.cfg.Store.GetDeployment(ctx, a.ID, d.ID)
	if err != nil {
		return store.Sandbox{}, 0, nil, err
	}
	if d.State != Superseded {
		return store.Sandbox{}, 0, nil, errdefs.New(errdefs.Unavailable, "deployment %s is %s now; try again", d.ID, d.State)
	}
	if d.SandboxID != "" {
		if sb, err := s.cfg.Store.GetSandbox(ctx, d.SandboxID); err == nil && sandboxes.Usable(sb) == nil {
			sb, port, done := s.serve(sb, d)
			return sb, port, done, nil
		}
	}
	sb, err := s.restore(ctx, a, d, "url", newLogBuf())
	if err != nil {
		return store.Sandbox{}, 0, nil, errdefs.New(errdefs.Unavailable, "restoring deployment %s failed: %v", d.ID, err)
	}
	if ok, err := s.cfg.Store.SetDeploymentInstance(context.WithoutCancel(ctx), d.ID, d.SandboxID, sb.ID); !ok || err != nil {
		s.stopInstance(sb.ID, "app deployment changed meanwhile", 0)
		return store.Sandbox{}, 0, nil, errdefs.New(errdefs.Unavailable, "deployment %s changed meanwhile; try again", d.ID)
	}
	s.log.Info("app deployment restored for its own URL", "app", a.ID, "deployment", d.ID, "instance", sb.ID)
	d.SandboxID = sb.ID
	sb, port, done := s.serve(sb, d)
	return sb, port, done, nil
}

// BuildLogs writes a deployment's build logs to w: all of them, or with follow those so far and
// then what comes until the deployment ends (or ctx does), flushing after each piece.
func (s *Service) BuildLogs(ctx context.Context, teamID, id, depID string, follow bool, w io.Writer, flush func()) error {
	_, d, err := s.Deployment(ctx, teamID, id, depID)
	if err != nil {
		return err
	}
	s.mu.Lock()
	lb := s.logs[d.ID]
	s.mu.Unlock()
	if lb == nil {
		if d, err = s.cfg.Store.GetDeployment(ctx, d.AppID, d.ID); err != nil {
			return err
		}
		_, err := io.WriteString(w, d.Logs)
		return err
	}
	return lb.follow(ctx, w, follow, flush)
}

// Maintain renews live instances' TTLs, replaces those of an app with min_instances > 1 that
// are gone (replenish), and hibernates those idle past their app's suspend_after_seconds unless
// its min_instances keeps them running (a request to a hibernated one wakes it: its host does). It goes through
// every instance and returns what failed.
func (s *Service) Maintain(ctx context.Context) error {
	deps, err := s.cfg.Store.ListInstanceDeployments(ctx)
	if err != nil {
		return err
	}
	var errs []error
	listed := map[string]bool{}
	for _, d := range deps {
		listed[d.ID] = true
		a, err := s.cfg.Store.GetTeamApp(ctx, d.TeamID, d.AppID)
		if err != nil {
			continue
		}
		idle := time.Duration(a.SuspendAfterSeconds) * time.Second
		ids := []string{d.SandboxID}
		if d.State == Superseded {
			idle = min(idle, URLIdle) // an old release's own URL: always scaled to zero
			if idle == 0 {
				idle = URLIdle
			}
		} else {
			s.replenish(ctx, a, d)
			ids = s.instances(ctx, d, false).ids
			if a.SuspendAfterSeconds == 0 || a.MinInstances > 0 {
				idle = 0 // no scale to zero
			}
		}
		for _, id := range ids {
			if err := s.maintain(ctx, id, idle); err != nil {
				errs = append(errs, err)
			}
		}
	}
	s.mu.Lock()
	for id, set := range s.sets {
		if !listed[id] && time.Since(set.at) > time.Minute {
			delete(s.sets, id) // no longer serving (another replica switched away from it)
		}
	}
	s.mu.Unlock()
	return errors.Join(errs...)
}

// maintain renews instance id's TTL and hibernates it when it had no request for idle (0: never).
func (s *Service) maintain(ctx context.Context, id string, idle time.Duration) error {
	sb, err := s.cfg.Store.GetSandbox(ctx, id)
	if err != nil || sandboxes.Usable(sb) != nil {
		return nil
	}
	if time.Until(sb.ExpiresAt) < InstanceTTL*time.Second/2 {
		if _, err := s.cfg.Sandboxes.SetTTL(ctx, sb, InstanceTTL); err != nil {
			return fmt.Errorf("renewing the ttl of %s: %w", sb.ID, err)
		}
	}
	if idle == 0 {
		return nil
	}
	if sb = s.cfg.Sandboxes.Current(ctx, sb); sb.State != store.StateRunning {
		return nil
	}
	s.mu.Lock()
	last, seen := s.lastSeen[sb.ID]
	busy := s.inflight[sb.ID] > 0
	if !seen {
		s.lastSeen[sb.ID], last = time.Now(), time.Now()
	}
	s.mu.Unlock()
	if !busy && time.Since(last) > idle {
		if _, err := s.cfg.Sandboxes.Hibernate(ctx, sb); err != nil {
			return fmt.Errorf("hibernating the idle instance %s: %w", sb.ID, err)
		}
	}
	return nil
}

// Run records failed the deployments a stopped server left unfinished (Recover), then calls
// Maintain (and Recover) every interval until ctx ends.
func (s *Service) Run(ctx context.Context, interval time.Duration) {
	if err := s.Recover(ctx, true); err != nil && ctx.Err() == nil {
		s.log.Warn("apps: recovering unfinished deployments failed", "err", err)
	}
	periodic.Every(ctx, interval, func() {
		if err := errors.Join(s.Recover(ctx, false), s.Maintain(ctx)); err != nil && ctx.Err() == nil {
			s.log.Warn("apps: maintenance failed", "err", err)
		}
	})
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Preview is a branch preview of an app and the deployment serving it.
type Preview struct {
	Slug       string
	Deployment store.Deployment
	URL        string
}

// Previews returns the team's app's previews, by slug.
func (s *Service) Previews(ctx context.Context, teamID, id string) ([]Preview, error) {
	a, err := s.Get(ctx, teamID, id)
	if err != nil {
		return nil, err
	}
	ps, err := s.cfg.Store.ListPreviews(ctx, a.ID)
	if err != nil {
		return nil, err
	}
	out := make([]Preview, 0, len(ps))
	for _, p := range ps {
		d, err := s.cfg.Store.GetDeployment(ctx, a.ID, p.DeploymentID)
		if err != nil {
			return nil, err
		}
		out = append(out, Preview{Slug: p.Slug, Deployment: d, URL: s.routeURL(a, p.Slug)})
	}
	return out, nil
}

// DeletePreview removes the team's app's preview of branch (or slug): its route goes, its
// instance is drained and killed, its deployment is superseded (its release stays: a rollback
// to it serves the preview again). The app's own branch is not a preview (errdefs.Invalid).
func (s *Service) DeletePreview(ctx context.Context, teamID, id, branch string) error {
	a, err := s.Get(ctx, teamID, id)
	if err != nil {
		return err
	}
	slug := PreviewSlug(a, branch)
	if slug == "" {
		return errdefs.Invalidf("%s is the app's branch, not a preview (delete the app instead)", bundle.Trunc(branch))
	}
	depID, err := s.cfg.Store.GetPreview(ctx, a.ID, slug)
	if err != nil {
		return err
	}
	if depID == "" {
		return errdefs.NotFoundf("app %s has no preview %s", a.Name, slug)
	}
	d, err := s.cfg.Store.GetDeployment(ctx, a.ID, depID)
	if err != nil {
		return err
	}
	s.route.Lock()
	ok, err := s.cfg.Store.DeletePreview(ctx, a.ID, slug, depID)
	s.route.Unlock()
	if err == nil && !ok {
		err = errdefs.Conflictf("the preview's route changed meanwhile; try again")
	}
	if err != nil {
		return err
	}
	s.stopInstances(ctx, d, "app preview deleted", time.Duration(a.DrainTimeoutSeconds)*time.Second)
	return nil
}
