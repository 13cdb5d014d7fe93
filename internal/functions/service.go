// Package functions is serverless functions on the sandbox substrate: a deploy bakes each
// immutable version into a warm snapshot (a sandbox of the base template with the bundle
// unpacked and a small runner that has imported the handler and waits on a port), and every
// invocation creates a fresh sandbox from that snapshot, hands the event to the already-running
// runner through the host agent's port path, collects the result and kills the sandbox. No
// invocation boots a VM or imports the handler. It calls the sandbox service
// (internal/sandboxes), never the HTTP handlers; hosts never learn what a function is.
package functions

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/background"
	"github.com/pandastack/pandastack/internal/bundle"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/sealed"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

//go:embed runner/runner.py
var runnerPy []byte

//go:embed runner/runner.mjs
var runnerMJS []byte

// BaseTemplate is the template functions run on by default: Debian trixie with Python 3.13 and
// Node.js 20.
const BaseTemplate = "base"

// Where things are in a function's VM, and the runner's port.
const (
	RunnerPort = 7411
	fnDir      = "/home/user/fn"
	codeDir    = fnDir + "/code"
)

// Limits and defaults of a function's spec.
const (
	DefaultTimeoutSeconds = 30
	MaxTimeoutSeconds     = 900
	DefaultConcurrency    = 10
	MaxConcurrency        = 100
	MaxRetries            = 10
	MaxEnv                = sealed.MaxVars
	MaxEnvValue           = sealed.MaxVarValue
	// ImportTimeout bounds a deploy's wait for the runner to import the handler.
	ImportTimeout = 3 * time.Minute
	// warmups is how many no-op requests warm the runner before its snapshot.
	warmups = 16
	// MaxResultBytes bounds a runner's answer.
	MaxResultBytes = 8 << 20
	// MaxBundleBytes bounds a deploy's archive.
	MaxBundleBytes = bundle.MaxBytes
)

// Config configures a Service.
type Config struct {
	sandboxes.ProductDeps
	// BaseTemplate is the template functions run on (default "base": Debian trixie with
	// Python 3.13 and Node.js 20).
	BaseTemplate string
	// SecretsKey (32 bytes) seals secrets at rest with AES-256-GCM; empty: they are stored
	// unsealed (still never answered or logged).
	SecretsKey []byte
	// ProxyDomain, when set, gives each function the HTTP trigger <id>.fn.<domain>.
	ProxyDomain string
	// LeaseTime is how long a run stays this replica's without a renewal (0: LeaseTime; tests
	// shorten it).
	LeaseTime time.Duration
	// Transport is how invocations reach the runner in their sandbox: TransportPort (the
	// default) or TransportRelay.
	Transport string
}

// Service deploys and invokes functions. Create with New; Close waits for its background work.
type Service struct {
	cfg Config
	log *slog.Logger

	rebakeMu sync.Mutex // one re-bake of a lost warm snapshot at a time

	bg *background.Group // async runs and kills
}

// New builds a service.
func New(cfg Config) *Service {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.BaseTemplate = cmp.Or(cfg.BaseTemplate, BaseTemplate)
	return &Service{cfg: cfg, log: cfg.Logger, bg: background.New()}
}

// Close stops retries of async runs and waits for the background work.
func (s *Service) Close() { s.bg.Close() }

// Wait waits for the background work (async runs, kills) in flight (tests).
func (s *Service) Wait() { s.bg.Wait() }

// URL is the function's HTTP trigger, or "" without a proxy domain: <id>.fn.<domain> (names are
// per team; ids are unique and unguessable).
func (s *Service) URL(fn store.Function) string {
	if s.cfg.ProxyDomain == "" {
		return ""
	}
	return "http://" + fn.ID + ".fn." + s.cfg.ProxyDomain
}

var (
	namePattern    = regexp.MustCompile(`^[a-z][a-z0-9-]{0,49}$`)
	handlerPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_/-]*(\.[A-Za-z0-9_][A-Za-z0-9_/-]*)*\.[A-Za-z_$][A-Za-z0-9_$]{0,63}$`)
)

// validate checks a spec and fills its defaults.
func (s *Service) validate(ctx context.Context, sp *v1.FunctionSpec) error {
	switch {
	case !namePattern.MatchString(sp.Name):
		return errdefs.Invalidf("name must be 1-50 of a-z, 0-9 and -, starting with a letter (it is part of the function's host name)")
	case sp.Runtime != "python3" && sp.Runtime != "node":
		return errdefs.Invalidf("runtime must be python3 or node")
	case !handlerPattern.MatchString(sp.Handler) || strings.Contains(sp.Handler, ".."):
		return errdefs.Invalidf("handler must be module.function, e.g. main.handler (main.py) or index.handler (index.mjs)")
	case sp.Runtime == "python3" && strings.ContainsAny(sp.Handler, "/-"):
		return errdefs.Invalidf("a python3 handler is a dotted module path and a function name, e.g. pkg.mod.handler")
	}
	if err := sealed.CheckVars(sp.Env, sp.Secrets); err != nil {
		return err
	}
	switch {
	case sp.TimeoutSeconds == 0:
		sp.TimeoutSeconds = DefaultTimeoutSeconds
	case sp.TimeoutSeconds < 1 || sp.TimeoutSeconds > MaxTimeoutSeconds:
		return errdefs.Invalidf("timeout_seconds must be 1-%d", MaxTimeoutSeconds)
	}
	switch {
	case sp.MaxConcurrency == 0:
		sp.MaxConcurrency = DefaultConcurrency
	case sp.MaxConcurrency < 1 || sp.MaxConcurrency > MaxConcurrency:
		return errdefs.Invalidf("max_concurrency must be 1-%d", MaxConcurrency)
	}
	if sp.Retries < 0 || sp.Retries > MaxRetries {
		return errdefs.Invalidf("retries must be 0-%d", MaxRetries)
	}
	base, err := s.cfg.Templates.Catalog(ctx, s.cfg.BaseTemplate)
	if err != nil {
		return errdefs.Capacityf("the functions' base template %q is not available on any host yet", s.cfg.BaseTemplate)
	}
	switch {
	case sp.MemoryMiB == 0:
		sp.MemoryMiB = int64(base.MemoryMiB)
	case sp.MemoryMiB < 0 || sp.MemoryMiB > int64(base.MemoryMiB):
		return errdefs.Invalidf("memory_mib must be at most %d, the base template's memory (it is fixed when the template is baked)", base.MemoryMiB)
	}
	return nil
}

// Deploy validates spec and bundle, bakes the version's warm snapshot and records the version
// (a new function, or the next version of the team's function of that name). Nothing is
// recorded when any step fails: bad input is errdefs.Invalid (or TooLarge) naming the problem,
// a handler that fails to import is errdefs.Invalid with its traceback.
func (s *Service) Deploy(ctx context.Context, teamID string, sp v1.FunctionSpec, bundleBytes []byte) (store.Function, store.FunctionVersion, error) {
	if err := s.validate(ctx, &sp); err != nil {
		return store.Function{}, store.FunctionVersion{}, err
	}
	files, err := bundle.Read(bundleBytes)
	if err != nil {
		return store.Function{}, store.FunctionVersion{}, err
	}
	if err := checkHandler(files, sp.Runtime, sp.Handler); err != nil {
		return store.Function{}, store.FunctionVersion{}, err
	}
	extra := map[string]string{}
	if sp.Runtime == "node" && !bundle.Has(files, "package.json") {
		extra["package.json"] = `{"type": "module"}` + "\n" // plain .js files are ES modules
	}
	tarball, err := bundle.Tar(files, extra)
	if err != nil {
		return store.Function{}, store.FunctionVersion{}, err
	}
	sealed, err := s.seal(sp.Secrets)
	if err != nil {
		return store.Function{}, store.FunctionVersion{}, err
	}
	sum := sha256.Sum256(bundleBytes)
	v := store.FunctionVersion{TeamID: teamID, Runtime: sp.Runtime, Handler: sp.Handler, Env: sp.Env,
		SecretNames: slices.Sorted(maps.Keys(sp.Secrets)), Secrets: sealed, TimeoutSeconds: sp.TimeoutSeconds,
		MemoryMiB: sp.MemoryMiB, MaxConcurrency: sp.MaxConcurrency, Retries: sp.Retries,
		Bundle: base64.StdEncoding.EncodeToString(tarball), BundleBytes: int64(len(bundleBytes)), BundleSHA256: hex.EncodeToString(sum[:]),
		State: "ready"}
	if v.Env == nil {
		v.Env = map[string]string{}
	}
	snapID, err := s.bake(ctx, teamID, sp.Name, v, tarball)
	if err != nil {
		return store.Function{}, store.FunctionVersion{}, err
	}
	v.SnapshotID = snapID
	fn, v, err := s.cfg.Store.AddFunctionVersion(ctx, auth.NewID("fn_"), sp.Name, v)
	if err != nil {
		s.dropSnapshot(ctx, teamID, snapID)
		if errors.Is(err, store.ErrConflict) {
			return store.Function{}, store.FunctionVersion{}, errdefs.Conflictf("another deploy of %s took the version number first: deploy again", sp.Name)
		}
		return store.Function{}, store.FunctionVersion{}, err
	}
	s.log.Info("function deployed", "function", fn.ID, "name", fn.Name, "version", v.Version, "snapshot", snapID)
	return fn, v, nil
}

func (s *Service) dropSnapshot(ctx context.Context, teamID, id string) {
	if err := s.cfg.Sandboxes.DeleteSnapshot(context.WithoutCancel(ctx), teamID, id); err != nil {
		s.log.Warn("functions: could not delete a snapshot", "snapshot", id, "err", err)
	}
}

// bake makes the version's warm snapshot: a sandbox of the base template with the bundle
// unpacked and the runner started and the handler imported, snapshotted, then killed.
func (s *Service) bake(ctx context.Context, teamID, name string, v store.FunctionVersion, tarball []byte) (string, error) {
	ctx = context.WithoutCancel(ctx) // what a host made is recorded or undone
	recorded, agentName, host, err := s.cfg.Templates.Resolve(ctx, teamID, s.cfg.BaseTemplate)
	if err != nil {
		return "", err
	}
	sb, err := s.cfg.Sandboxes.Create(ctx, teamID, sandboxes.CreateParams{Template: recorded, AgentTemplate: agentName, TemplateHost: host,
		Metadata: map[string]string{"pandastack.function": name, "pandastack.function_role": "bake"}, TTLSeconds: 1800, Owner: store.OwnerFunction})
	if err != nil {
		return "", err
	}
	defer s.kill(sb, "function bake finished")
	c, err := s.cfg.Sandboxes.Target(ctx, sb)
	if err != nil {
		return "", err
	}
	runner, runnerFile, interp := runnerPy, "runner.py", "python3 -u"
	if v.Runtime == "node" {
		runner, runnerFile, interp = runnerMJS, "runner.mjs", "node"
	}
	for _, f := range []struct {
		path string
		data []byte
	}{{fnDir + "/bundle.tar", tarball}, {fnDir + "/" + runnerFile, runner}} {
		if _, err := c.WriteFile(ctx, sb.ID, f.path, bytes.NewReader(f.data), int64(len(f.data))); err != nil {
			return "", fmt.Errorf("functions: writing %s into the bake sandbox: %w", f.path, err)
		}
	}
	env := map[string]string{}
	maps.Copy(env, v.Env)
	env["PANDASTACK_RUNNER_PORT"] = fmt.Sprint(RunnerPort)
	env["PANDASTACK_FUNCTION_NAME"] = name
	cmd := fmt.Sprintf("mkdir -p %[1]s && tar -xf %[2]s/bundle.tar -C %[1]s && rm %[2]s/bundle.tar && cd %[1]s && "+
		"(setsid nohup %[3]s %[2]s/%[4]s '%[5]s' > %[2]s/runner.log 2>&1 < /dev/null &)", codeDir, fnDir, interp, runnerFile, v.Handler)
	secs := 120.0
	res, err := c.Exec(ctx, sb.ID, agentclient.ExecRequest{Cmd: cmd, Env: env, TimeoutSeconds: &secs})
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return "", errdefs.Invalidf("unpacking the bundle failed (exit %d): %s", res.ExitCode, trunc(res.Stderr+res.Stdout))
	}
	if err := s.waitReady(ctx, c, sb.ID); err != nil {
		return "", err
	}
	// Warm the runner's own request path (not the handler) so the snapshot holds it warm.
	warm, _ := json.Marshal(map[string]any{"payload": map[string]any{"warm": true}, "secrets": map[string]string{},
		"context": map[string]any{"function_name": name, "timeout_seconds": 1}})
	for range warmups {
		var out invocation
		if err := s.runnerCall(ctx, c, sb.ID, "POST", "/warmup", warm, &out); err != nil {
			return "", fmt.Errorf("functions: warming the runner: %w", err)
		}
	}
	sn, err := s.cfg.Sandboxes.Snapshot(ctx, sb)
	if err != nil {
		return "", err
	}
	return sn.ID, nil
}

// runnerState is what the runner answers on GET /.
type runnerState struct {
	Ready  bool              `json:"ready"`
	Error  *v1.FunctionError `json:"error"`
	Runner json.RawMessage   `json:"runner"`
}

// waitReady waits for the runner to answer (it has imported the handler, or failed to).
func (s *Service) waitReady(ctx context.Context, c *agentclient.Client, sbID string) error {
	deadline := time.Now().Add(ImportTimeout)
	for {
		var st runnerState
		err := s.runnerCall(ctx, c, sbID, "GET", "/ready", nil, &st)
		if err == nil {
			if !st.Ready && st.Error != nil {
				return errdefs.Invalidf("the handler could not be imported: %s: %s\n%s", st.Error.Type, st.Error.Message, st.Error.Traceback)
			}
			return nil
		}
		if time.Now().After(deadline) {
			secs := 10.0
			diag := ""
			if res, xerr := c.Exec(ctx, sbID, agentclient.ExecRequest{Cmd: "tail -c 4000 " + fnDir + "/runner.log; ps -eo pid,args | grep -v ' \\[' | tail -n 20",
				TimeoutSeconds: &secs}); xerr == nil {
				diag = res.Stdout + res.Stderr
			}
			return errdefs.Invalidf("the function's runner did not answer within %s (%v): %s", ImportTimeout, err, diag)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Transports of the calls to a function's runner in its sandbox.
const (
	// TransportPort (the default): through the host agent's port path to the guest's address
	// (its network device and TCP stack).
	TransportPort = "port"
	// TransportRelay: through the host agent and the sandbox's guest agent to the runner's port
	// on the guest's loopback (hostapi.RelayPath), over the agent channel every sandbox already
	// has, skipping the guest's network device. Measured slower than the port path under TCG (the
	// guest agent's code and a loopback TCP connection with both ends in the guest cost more than
	// the network path they replace: docs/functions.md), so only on request; a host or guest
	// agent without it is called over TransportPort instead.
	TransportRelay = "relay"
	// TransportHeader on a sync invoke picks the transport of that invocation (diagnostics and
	// the bench's same-run comparison); without it the server's configured one.
	TransportHeader = "X-Pandastack-Function-Transport"
)

type transportKey struct{}

// WithTransport has the invocations under ctx call their runner over transport (TransportRelay
// or TransportPort; anything else is refused).
func WithTransport(ctx context.Context, transport string) (context.Context, error) {
	switch transport {
	case "":
		return ctx, nil
	case TransportRelay, TransportPort:
		return context.WithValue(ctx, transportKey{}, transport), nil
	}
	return ctx, errdefs.Invalidf("%s must be %s or %s", TransportHeader, TransportRelay, TransportPort)
}

// transport is the transport of the runner calls under ctx: WithTransport's, else the configured one.
func (s *Service) transport(ctx context.Context) string {
	if t, _ := ctx.Value(transportKey{}).(string); t != "" {
		return t
	}
	if s.cfg.Transport != "" {
		return s.cfg.Transport
	}
	return TransportPort
}

// runnerCall sends one request to the runner in sandbox sbID and decodes its JSON answer into
// out: through the host's port path, or through the guest agent when asked (TransportRelay) and
// the agents have the relay.
func (s *Service) runnerCall(ctx context.Context, c *agentclient.Client, sbID, method, path string, body []byte, out any) error {
	transport := s.transport(ctx)
	var (
		resp *http.Response
		err  error
	)
	if transport == TransportRelay {
		resp, err = s.relayCall(ctx, c, sbID, method, path, body)
	}
	if resp == nil && err == nil {
		var rd io.Reader
		hdr := http.Header{}
		if body != nil {
			rd = bytes.NewReader(body)
			hdr.Set("Content-Type", "application/json")
		}
		resp, err = c.Raw(ctx, method, fmt.Sprintf("/v1/sandboxes/%s/ports/%d%s", sbID, RunnerPort, path), nil, rd, int64(len(body)), hdr)
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxResultBytes+1))
	if err != nil {
		return err
	}
	if len(b) > MaxResultBytes {
		return errdefs.New(errdefs.TooLarge, "the function's answer is larger than %d bytes", MaxResultBytes)
	}
	return json.Unmarshal(b, out)
}

// relayCall sends the request over a connection to the runner's port through the guest agent
// (agentclient.RelayPort). No answer and no error: the relay could not be opened (an agent
// without it, or the runner not listening yet), so nothing reached the runner and the caller may
// send the request another way.
func (s *Service) relayCall(ctx context.Context, c *agentclient.Client, sbID, method, path string, body []byte) (*http.Response, error) {
	unopened := make(chan error, 1)
	tr := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		conn, err := c.RelayPort(ctx, sbID, RunnerPort)
		if err != nil {
			unopened <- err
		}
		return conn, err
	}}
	req, err := http.NewRequestWithContext(ctx, method, "http://runner"+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := tr.RoundTrip(req)
	if err != nil && ctx.Err() == nil {
		select {
		case derr := <-unopened:
			s.log.Debug("functions: no relay to the runner; over the port path", "sandbox", sbID, "err", derr)
			return nil, nil
		default:
		}
	}
	return resp, err
}

// kill kills a function's sandbox in the background (the caller has its answer).
func (s *Service) kill(sb store.Sandbox, reason string) {
	s.bg.Go(func() {
		if err := s.cfg.Sandboxes.Kill(context.Background(), sb, reason); err != nil {
			s.log.Warn("functions: could not kill a sandbox", "sandbox", sb.ID, "err", err)
		}
	})
}

// Get returns the team's function and its latest version; another team's is NotFound.
func (s *Service) Get(ctx context.Context, teamID, id string) (store.Function, store.FunctionVersion, error) {
	fn, err := s.cfg.Store.GetTeamFunction(ctx, teamID, id)
	if errors.Is(err, store.ErrNotFound) {
		return fn, store.FunctionVersion{}, errdefs.NotFoundf("function %s not found", trunc(id))
	}
	if err != nil {
		return fn, store.FunctionVersion{}, err
	}
	v, err := s.cfg.Store.GetFunctionVersion(ctx, fn.ID, fn.Version)
	return fn, v, err
}

// CheckFunction says whether the team has the function (for schedules).
func (s *Service) CheckFunction(ctx context.Context, teamID, id string) error {
	_, _, err := s.Get(ctx, teamID, id)
	return err
}

// List returns the team's functions, newest first.
func (s *Service) List(ctx context.Context, teamID string) ([]store.Function, error) {
	return s.cfg.Store.ListTeamFunctions(ctx, teamID)
}

// Versions returns the team's function's versions, newest first.
func (s *Service) Versions(ctx context.Context, teamID, id string) ([]store.FunctionVersion, error) {
	fn, _, err := s.Get(ctx, teamID, id)
	if err != nil {
		return nil, err
	}
	return s.cfg.Store.ListFunctionVersions(ctx, fn.ID)
}

// Delete deletes the team's function, its versions' snapshots and its runs.
func (s *Service) Delete(ctx context.Context, teamID, id string) error {
	vs, err := s.Versions(ctx, teamID, id)
	if err != nil {
		return err
	}
	if err := s.cfg.Store.DeleteFunction(ctx, teamID, id); err != nil {
		return err
	}
	for _, v := range vs {
		if v.SnapshotID != "" {
			s.dropSnapshot(ctx, teamID, v.SnapshotID)
		}
	}
	return nil
}

// Runs returns the team's function's runs, newest first.
func (s *Service) Runs(ctx context.Context, teamID, id string, limit int) ([]store.FunctionRun, error) {
	fn, _, err := s.Get(ctx, teamID, id)
	if err != nil {
		return nil, err
	}
	return s.cfg.Store.ListFunctionRuns(ctx, fn.ID, limit)
}

// Run returns one run of the team's function.
func (s *Service) Run(ctx context.Context, teamID, id, runID string) (store.FunctionRun, error) {
	fn, _, err := s.Get(ctx, teamID, id)
	if err != nil {
		return store.FunctionRun{}, err
	}
	r, err := s.cfg.Store.GetFunctionRun(ctx, fn.ID, runID)
	if errors.Is(err, store.ErrNotFound) {
		return r, errdefs.NotFoundf("run %s not found", trunc(runID))
	}
	return r, err
}
