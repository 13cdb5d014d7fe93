package bake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/host/layout"
	"github.com/pandastack/pandastack/internal/host/volume"
	"github.com/pandastack/pandastack/internal/image"
	"github.com/pandastack/pandastack/internal/runtime"
	"github.com/pandastack/pandastack/internal/template"
)

// A template build has three stages: the image builder makes the Debian tree and fetches npm
// packages on the host (trusted packages, nothing of theirs runs here); a build microVM boots that
// image with no network and runs everything user-supplied — files, npm install scripts, build
// steps — and its disk becomes the template's rootfs; the bake boots that rootfs, starts the
// template's service, waits for its ready check and snapshots.

// buildVMMemMiB: npm and compilers want more than a small template's RAM; the build VM's size
// is not the template's (the bake VM's is).
const buildVMMemMiB = 2048

// buildStepTimeout bounds one build step.
const buildStepTimeout = 30 * time.Minute

// maxStepLogBytes caps the build log one step may write (the rest is counted, not streamed).
const maxStepLogBytes = 1 << 20

func buildFailed(format string, args ...any) *errdefs.Error {
	return errdefs.New(errdefs.Failed, format, args...)
}

// runBuildVM runs the recipe's files, npm scripts and steps in a build microVM on a copy of img's
// rootfs, and returns the images with that disk as the rootfs. Cached by content.
func (ts *Templates) runBuildVM(ctx context.Context, r template.Recipe, img image.Images, say func(string, ...any)) (image.Images, error) {
	key := layout.ShortHash("build-v1", img.Hash, r.BuildHash())
	dir := filepath.Join(ts.cfg.Images.CacheDir, image.BuiltPrefix+key)
	out := img
	out.Rootfs, out.Hash = filepath.Join(dir, "rootfs.ext4"), key
	// A new guest agent makes a new key for the same recipe on the same tree: the same lineage.
	out.Lineage = layout.ShortHash("built-lineage", img.Lineage, r.BuildHash())
	if _, err := os.Stat(out.Rootfs); err == nil {
		image.MarkUsed(dir, out.Lineage)
		return out, nil
	}
	// Other processes share the cache (a second agent, parallel test packages): one builds a
	// key while the others wait for its result, so none removes a directory another is using.
	unlock, err := image.LockEntry(ctx, dir)
	if err != nil {
		return out, err
	}
	defer unlock()
	if _, err := os.Stat(out.Rootfs); err == nil {
		image.MarkUsed(dir, out.Lineage)
		return out, nil // built by another process while we waited
	}
	tmp := dir + ".building"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return out, err
	}
	defer os.RemoveAll(tmp)
	disk := filepath.Join(tmp, "rootfs.ext4")
	if err := cloneOrCopy(img.Rootfs, disk); err != nil {
		return out, err
	}
	mem := min(buildVMMemMiB, ts.cfg.MaxMemoryMiB)
	release, err := ts.vms.Reserve("the build VM of template "+r.Name, mem)
	if err != nil {
		return out, err
	}
	defer release()
	if err := ts.vms.RelieveForCreate(ctx, "template "+r.Name); err != nil {
		return out, err
	}
	say("build VM: booting (%d MiB RAM, no network)", mem)
	runDir := ts.cfg.Layout.RunDir("build-" + key)
	defer os.RemoveAll(runDir)
	spec := runtime.Spec{VCPUs: 1, MemoryMiB: mem, Kernel: img.Kernel, Initrd: img.Initrd, Disk: disk}
	if r.Volume != nil {
		// The template's data volume, made empty here and mounted before the steps: what they
		// write there is the volume image the bake starts from (builtVolume).
		vol := builtVolume(disk)
		if err := volume.MakeFS(ctx, vol, int64(r.Volume.SizeMiB)); err != nil {
			return out, fmt.Errorf("build VM: data volume: %w", err)
		}
		spec.Drives = []runtime.Drive{{Serial: volume.Serial(0), File: vol}}
	}
	vm, err := ts.cfg.Runtime.Boot(ctx, runDir, spec, filepath.Join(tmp, "ram"))
	if err != nil {
		return out, err
	}
	defer ts.cfg.Runtime.Kill(vm)
	client, err := connect(ctx, vm.AgentSocket, 120*time.Second)
	if err != nil {
		return out, fmt.Errorf("build VM: guest agent did not come up: %v (console: %s)", err, consoleTail(runDir))
	}
	defer client.Close()
	// Under load the first call after a cold boot has lost its session (see retryLost): a no-op
	// takes that, not a build step — steps are not safe to run twice.
	if err := retryLost(ctx, say, "the first call", func() error {
		_, err := client.Exec(ctx, guest.ExecRequest{Cmd: "true", User: "root", Timeout: time.Minute}, nil, io.Discard, io.Discard)
		return err
	}); err != nil {
		return out, fmt.Errorf("build VM: %w", err)
	}
	if err := mountDataVolume(ctx, client, r, builtVolume(disk)); err != nil {
		return out, fmt.Errorf("build VM: %w", err)
	}
	if err := ts.buildInGuest(ctx, client, r, say); err != nil {
		return out, err
	}
	if err := client.Sync(ctx); err != nil {
		return out, fmt.Errorf("build VM: sync: %w", err)
	}
	ts.cfg.Runtime.Kill(vm)
	os.Remove(filepath.Join(tmp, "ram"))
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return out, err
	}
	image.Supersede(ts.cfg.Images.CacheDir, image.BuiltPrefix, dir, out.Lineage, say)
	return out, nil
}

// builtVolume is where a build keeps the template's data volume: beside its rootfs.
func builtVolume(rootfs string) string { return filepath.Join(filepath.Dir(rootfs), "volume.ext4") }

// mountDataVolume mounts the recipe's data volume (if it has one; file is its image, attached in
// slot 0) in a freshly booted guest.
func mountDataVolume(ctx context.Context, c *guest.Client, r template.Recipe, file string) error {
	if r.Volume == nil {
		return nil
	}
	st, err := os.Stat(file)
	if err != nil {
		return err
	}
	if err := c.Mount(ctx, volume.Serial(0), r.Volume.MountPath, st.Size(), false, false); err != nil {
		return fmt.Errorf("data volume: mount at %s: %w", r.Volume.MountPath, err)
	}
	return nil
}

// buildInGuest writes the files, runs the npm packages' install scripts and the build steps.
func (ts *Templates) buildInGuest(ctx context.Context, c *guest.Client, r template.Recipe, say func(string, ...any)) error {
	run := func(what, cmd string) error {
		lw := &logLines{say: func(line string) { say("%s: %s", what, line) }}
		res, err := c.Exec(ctx, guest.ExecRequest{Cmd: cmd, Env: r.Env, User: "root", Timeout: buildStepTimeout}, nil, lw, lw)
		lw.flush()
		switch {
		case err != nil:
			return buildFailed("%s: %v", what, err)
		case res.TimedOut:
			return buildFailed("%s timed out after %s", what, buildStepTimeout)
		case res.ExitCode != 0:
			return buildFailed("%s failed with exit code %d%s", what, res.ExitCode, lw.tailNote())
		}
		return nil
	}
	if len(r.Npm) > 0 {
		// Inherited packages count: the rootfs is assembled afresh from every layer's packages,
		// so a template that names none still reruns its parents' (base's bun) scripts.
		say("build VM: running the install scripts of the npm packages %s (this template's and its parents')", strings.Join(r.Npm, ", "))
		if err := run("npm rebuild", "npm rebuild --global --prefix /usr/local --foreground-scripts --no-audit --no-fund --offline"); err != nil {
			return err
		}
	}
	for _, layer := range r.Layers {
		for i, f := range layer.Files {
			data, err := f.Data()
			if err != nil {
				return buildFailed("template %s: files[%d]: %v", layer.Template, i, err)
			}
			if _, err := c.WriteFile(ctx, f.Path, "root", os.FileMode(f.FileMode()), bytes.NewReader(data)); err != nil {
				return buildFailed("template %s: writing %s: %v", layer.Template, f.Path, err)
			}
			if f.User == "user" {
				if err := run("chown "+f.Path, "chown "+image.GuestUser+": '"+strings.ReplaceAll(f.Path, "'", `'\''`)+"'"); err != nil {
					return err
				}
			}
			say("file %s (%d bytes)", f.Path, len(data))
		}
		for i, step := range layer.Steps {
			what := fmt.Sprintf("template %s step %d/%d", layer.Template, i+1, len(layer.Steps))
			say("%s: %s", what, firstLine(step))
			if err := run(what, step); err != nil {
				return err
			}
		}
	}
	return nil
}

// startService starts the template's start command in the bake VM and waits for its ready check.
func startService(ctx context.Context, c *guest.Client, r template.Recipe, say func(string, ...any)) error {
	env := map[string]string{"PANDASTACK_START": r.Start}
	for k, v := range r.Env {
		env[k] = v
	}
	say("starting: %s", firstLine(r.Start))
	// setsid + redirects: the service outlives this exec and holds none of its pipes.
	var sink bytes.Buffer
	startReq := guest.ExecRequest{Cmd: `setsid sh -c "$PANDASTACK_START" >>/var/log/pandastack-start.log 2>&1 </dev/null &`,
		Env: env, User: "root", Timeout: time.Minute}
	var res guest.ExecResult
	// A start that did run before a lost session leaves its service up; a second one finds its
	// port taken and the ready check still passes.
	err := retryLost(ctx, say, "the start", func() (err error) {
		sink.Reset()
		res, err = c.Exec(ctx, startReq, nil, &sink, &sink)
		return err
	})
	if err != nil || res.ExitCode != 0 {
		return buildFailed("start command could not be run: %v %s", err, sink.String())
	}
	if r.Ready == "" {
		return nil
	}
	deadline := time.Now().Add(r.ReadyTimeout)
	start := time.Now()
	var last string
	for {
		var out bytes.Buffer
		res, err := c.Exec(ctx, guest.ExecRequest{Cmd: r.Ready, Env: r.Env, User: "root", Timeout: 10 * time.Second}, nil, &out, &out)
		if err == nil && res.ExitCode == 0 && !res.TimedOut {
			say("ready check passed after %d ms", time.Since(start).Milliseconds())
			return nil
		}
		switch {
		case errors.Is(err, guest.ErrConnectionLost) && ctx.Err() == nil:
			last = err.Error() // the client re-dials on the next check
		case err != nil:
			return fmt.Errorf("ready check: %w", err)
		default:
			last = fmt.Sprintf("exit %d: %s", res.ExitCode, strings.TrimSpace(tail(out.String(), 400)))
		}
		if time.Now().After(deadline) {
			var log bytes.Buffer
			c.Exec(ctx, guest.ExecRequest{Cmd: "tail -c 1500 /var/log/pandastack-start.log", User: "root", Timeout: 10 * time.Second}, nil, &log, &log)
			return buildFailed("ready check %q did not pass within %s (last: %s); start command's log:\n%s",
				firstLine(r.Ready), r.ReadyTimeout, last, log.String())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// logLines turns a command's output into log lines, and keeps the last few for the error.
type logLines struct {
	say     func(string)
	buf     []byte
	written int
	last    []string
}

func (l *logLines) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			if len(l.buf) > 4096 { // a line without end: emit what we have
				i = len(l.buf)
			} else {
				return len(p), nil
			}
		}
		l.line(string(bytes.TrimRight(l.buf[:i], "\r")))
		if i < len(l.buf) {
			i++
		}
		l.buf = l.buf[i:]
	}
}

func (l *logLines) line(s string) {
	l.last = append(l.last, s)
	if len(l.last) > 15 {
		l.last = l.last[1:]
	}
	l.written += len(s) + 1
	switch {
	case l.written <= maxStepLogBytes:
		l.say(s)
	case l.written-len(s)-1 <= maxStepLogBytes:
		l.say("(more output not shown; the last lines come with the result)")
	}
}

func (l *logLines) flush() {
	if len(l.buf) > 0 {
		l.line(string(l.buf))
		l.buf = nil
	}
}

func (l *logLines) tailNote() string {
	if len(l.last) == 0 {
		return ""
	}
	return "; its last output:\n" + strings.Join(l.last, "\n")
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// specsDir holds the specs of templates built through the API, so they survive a restart.
func (ts *Templates) specsDir() string { return filepath.Join(ts.cfg.Layout.Templates(), "specs") }

func (ts *Templates) loadBuiltSpecs() {
	files, _ := filepath.Glob(filepath.Join(ts.specsDir(), "*.json"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var s template.Spec
		if json.Unmarshal(data, &s) == nil && s.Validate() == nil {
			ts.built[s.Name] = s
		}
	}
}

// CheckBuild refuses a spec before any work: invalid, a catalog or configured name, a from
// that does not resolve.
func (ts *Templates) CheckBuild(spec template.Spec) error {
	if err := spec.Validate(); err != nil {
		return errdefs.Invalidf("%v", err)
	}
	if _, ok := template.CatalogSpec(spec.Name); ok {
		return errdefs.Conflictf("template %s is a catalog template: pick another name", spec.Name)
	}
	if _, ok := ts.cfg.Templates[spec.Name]; ok {
		return errdefs.Conflictf("template %s is defined by this agent's configuration", spec.Name)
	}
	r, err := template.Resolve(spec, ts.Spec)
	if err != nil {
		return errdefs.Invalidf("%v", err)
	}
	return ts.vms.CheckSize("template "+spec.Name, r.VCPUs, r.MemoryMiB)
}

// Build builds and bakes spec (a template built through the API) and registers it; a
// build that fails leaves nothing registered. Building a name again replaces its spec.
func (ts *Templates) Build(ctx context.Context, spec template.Spec, progress func(string)) (*Template, error) {
	if err := ts.CheckBuild(spec); err != nil {
		return nil, err
	}
	ts.buildMu.Lock()
	defer ts.buildMu.Unlock()
	ts.mu.Lock()
	prev, had := ts.built[spec.Name]
	ts.built[spec.Name] = spec
	prevState := ts.states[spec.Name]
	delete(ts.states, spec.Name) // a new spec is a new bake
	ts.mu.Unlock()
	restore := func() {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		if had {
			ts.built[spec.Name] = prev
			ts.states[spec.Name] = prevState
		} else {
			delete(ts.built, spec.Name)
			delete(ts.states, spec.Name)
		}
	}
	info, err := ts.Ensure(ctx, spec.Name, progress)
	if err != nil {
		restore()
		return nil, err
	}
	if err := os.MkdirAll(ts.specsDir(), 0o755); err == nil {
		err = layout.WriteJSON(filepath.Join(ts.specsDir(), spec.Name+".json"), spec)
	}
	if err != nil {
		restore()
		return nil, err
	}
	out := *info
	out.Built = true
	return &out, nil
}

// Delete forgets a template built through the API and removes its bakes. Refused while a
// sandbox or a snapshot on this host uses it.
func (ts *Templates) Delete(name string) error {
	ts.mu.Lock()
	_, ok := ts.built[name]
	ts.mu.Unlock()
	users := ts.vms.UsersOf(name)
	if !ok {
		if _, cat := ts.Spec(name); cat {
			return errdefs.Conflictf("template %s is not one built through the API: catalog and configured templates cannot be deleted", name)
		}
		return errdefs.NotFoundf("template %s not found", name)
	}
	if users > 0 {
		return errdefs.Conflictf("template %s is used by %d sandbox(es) on this host: kill them first", name, users)
	}
	if n := ts.cfg.Snapshots.CountOf(name); n > 0 {
		return errdefs.Conflictf("template %s is used by %d snapshot(s) on this host: delete them first", name, n)
	}
	ts.mu.Lock()
	delete(ts.built, name)
	delete(ts.states, name)
	ts.mu.Unlock()
	ts.vms.DropPrepared(name) // it maps the bake's RAM file
	os.Remove(filepath.Join(ts.specsDir(), name+".json"))
	dirs, _ := filepath.Glob(filepath.Join(ts.cfg.Layout.Templates(), name+"-*"))
	for _, d := range dirs {
		if info, err := loadTemplate(d); err == nil && info.Name == name {
			os.RemoveAll(d)
		}
	}
	return nil
}

var _ io.Writer = (*logLines)(nil)
