package hostagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/runtime"
	"github.com/pandastack/pandastack/internal/storage"
)

// Sandbox states as this host sees them.
const (
	StateRunning = "running"
	StateError   = "error"
)

// record is what the agent persists per sandbox (sandbox.json), enough to re-adopt its VMM.
type record struct {
	ID          string            `json:"id"`
	Template    string            `json:"template"`
	TemplateDir string            `json:"template_dir"`
	State       string            `json:"state"`
	Error       string            `json:"error,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
	VCPUs       int               `json:"vcpus"`
	MemoryMiB   int               `json:"memory_mib"`
	ReadyMs     int64             `json:"ready_ms"`
	Env         map[string]string `json:"env,omitempty"`
	VM          runtime.VM        `json:"vm"`
}

// SandboxInfo is the API view of a sandbox.
type SandboxInfo struct {
	ID        string    `json:"id"`
	Template  string    `json:"template"`
	State     string    `json:"state"`
	Error     string    `json:"error,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	Pid       int       `json:"pid"`
	VCPUs     int       `json:"vcpus"`
	MemoryMiB int       `json:"memory_mib"`
	ReadyMs   int64     `json:"ready_ms"`
}

type sandbox struct {
	mu     sync.Mutex
	rec    record
	client *guest.Client
	killed bool
	dir    string
}

func (sb *sandbox) info() SandboxInfo {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	r := sb.rec
	return SandboxInfo{ID: r.ID, Template: r.Template, State: r.State, Error: r.Error, CreatedAt: r.CreatedAt,
		Pid: r.VM.Pid, VCPUs: r.VCPUs, MemoryMiB: r.MemoryMiB, ReadyMs: r.ReadyMs}
}

func (sb *sandbox) persist() error {
	return writeJSONFile(filepath.Join(sb.dir, "sandbox.json"), sb.rec)
}

func (sb *sandbox) closeGuest() {
	sb.mu.Lock()
	c := sb.client
	sb.client = nil
	sb.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// CreateRequest is the body of POST /v1/sandboxes.
type CreateRequest struct {
	ID       string            `json:"id,omitempty"`
	Template string            `json:"template"`
	Env      map[string]string `json:"env,omitempty"`
}

// Create restores a new sandbox from the template's snapshot (baking the template first if this
// host has not). It returns once the sandbox's guest agent answers.
func (a *Agent) Create(ctx context.Context, req CreateRequest) (SandboxInfo, error) {
	if req.Template == "" {
		return SandboxInfo{}, invalid("template is required")
	}
	if req.ID == "" {
		req.ID = newID()
	} else if !idRE.MatchString(req.ID) {
		return SandboxInfo{}, invalid("sandbox id %q: use sb_ followed by 1-60 lowercase letters or digits", req.ID)
	}
	tmpl, err := a.EnsureTemplate(ctx, req.Template, nil)
	if err != nil {
		return SandboxInfo{}, err
	}
	start := time.Now()
	sb := &sandbox{dir: filepath.Join(a.sandboxesDir(), req.ID), rec: record{
		ID: req.ID, Template: req.Template, TemplateDir: tmpl.Dir, State: "creating",
		CreatedAt: start.UTC(), VCPUs: tmpl.VCPUs, MemoryMiB: tmpl.MemoryMiB, Env: req.Env,
	}}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return SandboxInfo{}, errorf(http.StatusServiceUnavailable, "capacity", "host agent is shutting down")
	}
	if _, dup := a.sandboxes[req.ID]; dup {
		a.mu.Unlock()
		return SandboxInfo{}, conflict("sandbox %s already exists", req.ID)
	}
	a.sandboxes[req.ID] = sb
	a.mu.Unlock()

	runDir := a.runDir(req.ID)
	fail := func(err error) (SandboxInfo, error) {
		a.mu.Lock()
		delete(a.sandboxes, req.ID)
		a.mu.Unlock()
		os.RemoveAll(sb.dir)
		os.RemoveAll(runDir)
		return SandboxInfo{}, err
	}
	if err := os.MkdirAll(sb.dir, 0o700); err != nil {
		return fail(err)
	}
	disk := filepath.Join(sb.dir, "disk.img")
	if err := storage.Clone(filepath.Join(tmpl.Dir, "disk.img"), disk); err != nil {
		return fail(err)
	}
	vm, err := a.rt.Restore(ctx, runDir, tmpl.spec(disk), tmpl.snapshot())
	if err != nil {
		return fail(fmt.Errorf("restore %s: %w", req.Template, err))
	}
	client, err := guestConnect(ctx, vm.AgentSocket, 30*time.Second)
	if err != nil {
		a.rt.Kill(vm)
		return fail(fmt.Errorf("sandbox %s: guest agent did not answer after restore: %w", req.ID, err))
	}
	sb.mu.Lock()
	sb.client = client
	sb.rec.VM = *vm
	sb.rec.State = StateRunning
	sb.rec.ReadyMs = time.Since(start).Milliseconds()
	err = sb.persist()
	sb.mu.Unlock()
	if err != nil {
		client.Close()
		a.rt.Kill(vm)
		return fail(err)
	}
	a.watch(sb, vm)
	return sb.info(), nil
}

// watch marks the sandbox `error` with the reason when its VMM ends without being killed.
func (a *Agent) watch(sb *sandbox, vm *runtime.VM) {
	exited := a.rt.Watch(vm)
	go func() {
		ex := <-exited
		sb.mu.Lock()
		if sb.killed {
			sb.mu.Unlock()
			return
		}
		sb.rec.State = StateError
		sb.rec.Error = ex.Reason
		sb.persist()
		c := sb.client
		sb.client = nil
		sb.mu.Unlock()
		if c != nil {
			c.Close()
		}
		a.log.Warn("sandbox VMM ended", "sandbox", sb.rec.ID, "reason", ex.Reason)
	}()
}

// adopt loads the sandboxes an earlier agent process left: live VMMs are taken over, dead ones are
// reported `error` with what their logs say.
func (a *Agent) adopt() {
	files, _ := filepath.Glob(filepath.Join(a.sandboxesDir(), "*", "sandbox.json"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		sb := &sandbox{dir: filepath.Dir(f)}
		if err := json.Unmarshal(data, &sb.rec); err != nil || sb.rec.ID == "" {
			a.log.Warn("skipping unreadable sandbox record", "file", f, "err", err)
			continue
		}
		a.sandboxes[sb.rec.ID] = sb
		if sb.rec.State != StateRunning {
			continue
		}
		vm := sb.rec.VM
		if a.rt.Alive(&vm) {
			a.log.Info("re-adopted running sandbox", "sandbox", sb.rec.ID, "pid", vm.Pid)
		}
		// For a VMM that died while no agent watched, this reports at once.
		a.watch(sb, &vm)
	}
}

func (a *Agent) get(id string) (*sandbox, error) {
	a.mu.Lock()
	sb := a.sandboxes[id]
	a.mu.Unlock()
	if sb == nil {
		return nil, notFound("sandbox %s not found", id)
	}
	return sb, nil
}

// Get returns one sandbox.
func (a *Agent) Get(id string) (SandboxInfo, error) {
	sb, err := a.get(id)
	if err != nil {
		return SandboxInfo{}, err
	}
	return sb.info(), nil
}

// List returns every sandbox on this host, oldest first.
func (a *Agent) List() []SandboxInfo {
	a.mu.Lock()
	out := make([]SandboxInfo, 0, len(a.sandboxes))
	for _, sb := range a.sandboxes {
		out = append(out, sb.info())
	}
	a.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// Kill ends the sandbox's VMM and frees its disk clone. Killing an unknown sandbox is not an error.
func (a *Agent) Kill(id string) error {
	a.mu.Lock()
	sb := a.sandboxes[id]
	a.mu.Unlock()
	if sb == nil {
		return nil
	}
	sb.mu.Lock()
	if sb.rec.State == "creating" {
		sb.mu.Unlock()
		return conflict("sandbox %s is still being created", id)
	}
	sb.killed = true
	vm := sb.rec.VM
	c := sb.client
	sb.client = nil
	sb.mu.Unlock()
	if c != nil {
		c.Close()
	}
	if err := a.rt.Kill(&vm); err != nil {
		return err
	}
	os.RemoveAll(vm.RunDir)
	if err := os.RemoveAll(sb.dir); err != nil {
		return err
	}
	a.mu.Lock()
	delete(a.sandboxes, id)
	a.mu.Unlock()
	return nil
}

// guest returns a live guest agent client for a running sandbox, reconnecting when needed (after an
// agent restart the first call connects).
func (a *Agent) guest(ctx context.Context, id string) (*guest.Client, *sandbox, error) {
	sb, err := a.get(id)
	if err != nil {
		return nil, nil, err
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.rec.State != StateRunning {
		if sb.rec.State == StateError {
			return nil, nil, conflict("sandbox %s is in state error: %s", id, sb.rec.Error)
		}
		return nil, nil, conflict("sandbox %s is %s", id, sb.rec.State)
	}
	if sb.client == nil {
		c, err := guestConnect(ctx, sb.rec.VM.AgentSocket, 15*time.Second)
		if err != nil {
			return nil, nil, fmt.Errorf("sandbox %s: guest agent unreachable: %w", id, err)
		}
		sb.client = c
	}
	return sb.client, sb, nil
}

// callErr explains a failed guest call: a VMM that died meanwhile is a conflict with its reason.
func (a *Agent) callErr(sb *sandbox, err error) error {
	var ge *guest.Error
	if errors.As(err, &ge) || sb == nil {
		return err
	}
	vm := sb.rec.VM
	if !a.rt.Alive(&vm) {
		time.Sleep(50 * time.Millisecond) // let the watcher record the reason
		sb.mu.Lock()
		reason := sb.rec.Error
		sb.mu.Unlock()
		if reason == "" {
			reason = "VMM exited"
		}
		return conflict("sandbox %s stopped: %s", sb.rec.ID, reason)
	}
	return err
}

// ExecRequest is the body of an exec call.
type ExecRequest struct {
	Cmd            string            `json:"cmd,omitempty"`
	Argv           []string          `json:"argv,omitempty"`
	TimeoutSeconds *float64          `json:"timeout_seconds,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Cwd            string            `json:"cwd,omitempty"`
	User           string            `json:"user,omitempty"`
	Stdin          *string           `json:"stdin,omitempty"`
}

// Exec limits.
const (
	DefaultExecTimeout = 60 * time.Second
	MaxExecTimeout     = 24 * time.Hour
)

func (r *ExecRequest) validate() error {
	switch {
	case r.Cmd == "" && len(r.Argv) == 0:
		return invalid("exec needs cmd (a shell string) or argv")
	case r.Cmd != "" && len(r.Argv) > 0:
		return invalid("exec takes cmd or argv, not both")
	case r.TimeoutSeconds != nil && (*r.TimeoutSeconds <= 0 || *r.TimeoutSeconds > MaxExecTimeout.Seconds()):
		return invalid("timeout_seconds must be > 0 and <= %d", int(MaxExecTimeout.Seconds()))
	case len(r.Env) > 256:
		return invalid("env has more than 256 entries")
	}
	for k := range r.Env {
		if k == "" || len(k) > 256 || containsAny(k, "=\x00") {
			return invalid("env name %q is not valid", k)
		}
	}
	return nil
}

func containsAny(s, chars string) bool {
	for _, c := range chars {
		for _, d := range s {
			if c == d {
				return true
			}
		}
	}
	return false
}

// Exec runs a command in the sandbox, streaming its output to stdout and stderr.
func (a *Agent) Exec(ctx context.Context, id string, req ExecRequest, stdout, stderr io.Writer) (guest.ExecResult, error) {
	if err := req.validate(); err != nil {
		return guest.ExecResult{}, err
	}
	c, sb, err := a.guest(ctx, id)
	if err != nil {
		return guest.ExecResult{}, err
	}
	env := map[string]string{}
	for k, v := range sb.rec.Env {
		env[k] = v
	}
	for k, v := range req.Env {
		env[k] = v
	}
	timeout := DefaultExecTimeout
	if req.TimeoutSeconds != nil {
		timeout = time.Duration(*req.TimeoutSeconds * float64(time.Second))
	}
	var stdin io.Reader
	if req.Stdin != nil {
		stdin = strings.NewReader(*req.Stdin)
	}
	res, err := c.Exec(ctx, guest.ExecRequest{Cmd: req.Cmd, Argv: req.Argv, Env: env, Cwd: req.Cwd, User: req.User, Timeout: timeout},
		stdin, stdout, stderr)
	if err != nil {
		return res, a.callErr(sb, err)
	}
	return res, nil
}

// allocated is the space a file takes on disk (its blocks), not its apparent size.
func allocated(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}
