package lazy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pandastack/pandastack/internal/artifact"
	"github.com/pandastack/pandastack/internal/blob"
)

// A served mount must outlive the process that asked for it: a VMM maps the memory file, and a
// host agent that restarts (or is killed) leaves its VMs running. So each mount is served by a
// process of its own, detached in its own session, which lives until the mount is unmounted
// (Unmount, by the agent's GC of the snapshot) and meanwhile prefetches every chunk into the
// cache, so a mount whose VMs run long ends up served from local files.
//
// The server is this very binary re-executed with argv[0] "pandastack-lazy" (as internal/jail
// does): the package's init serves and exits before any other code runs, in the agent, the bench
// and test binaries alike.

const argv0 = "pandastack-lazy"

// ProcessSpec says what one server process serves.
type ProcessSpec struct {
	Mount    string            `json:"mount"`     // an empty directory
	CacheDir string            `json:"cache_dir"` // the host's chunk cache (shared by every mount)
	Store    string            `json:"store"`     // blob store URL (credentials: the environment)
	Manifest artifact.Manifest `json:"manifest"`  // the files served (a subset of an artifact)
	// IndexDirs are artifact directories of this host (with their manifest.json) whose chunks are
	// cloned into the cache instead of fetched.
	IndexDirs []string `json:"index_dirs,omitempty"`
	Log       string   `json:"log"` // the server's log file
}

func init() {
	if filepath.Base(os.Args[0]) != argv0 {
		return
	}
	if err := serveProcess(); err != nil {
		fmt.Fprintln(os.Stderr, "pandastack-lazy:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serveProcess is the server process: spec on stdin, "ready" on stdout once mounted, then serve
// and prefetch until unmounted.
func serveProcess() error {
	var spec ProcessSpec
	if err := json.NewDecoder(os.Stdin).Decode(&spec); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("mount", spec.Mount)
	ctx := context.Background()
	store, err := blob.Open(ctx, spec.Store)
	if err != nil {
		return err
	}
	cache, err := NewCache(spec.CacheDir, store)
	if err != nil {
		return err
	}
	cache.Local = artifact.NewLocal()
	for _, d := range spec.IndexDirs {
		cache.Local.AddDir(d)
	}
	m, err := Serve(spec.Mount, spec.Manifest, cache, func(msg string, kv ...any) { log.Warn(msg, kv...) })
	if err != nil {
		return err
	}
	fmt.Println("ready")
	os.Stdout.Close()
	trace, err := LoadTrace(ctx, store, spec.Manifest)
	if err != nil {
		log.Warn("no prefetch order", "err", err)
	}
	if trace == nil {
		go func() {
			t, err := RecordTrace(ctx, store, m, spec.Manifest, traceSettle, traceMax)
			log.Info("recorded the first restore's reads", "chunks", len(t), "err", err)
		}()
	}
	go func() {
		start := time.Now()
		err := Prefetch(ctx, cache, spec.Manifest, PrefetchOrder(spec.Manifest, trace), 4)
		log.Info("prefetched", "ms", time.Since(start).Milliseconds(), "traced", len(trace), "fetched", cache.Fetched.Load(), "placed", cache.Placed.Load(), "err", err)
	}()
	m.server.Wait()
	log.Info("unmounted")
	return nil
}

// Start serves spec's files at spec.Mount from a process of its own and returns its pid once
// they are mounted (or the server said why not).
func Start(spec ProcessSpec) (int, error) {
	if err := os.MkdirAll(spec.Mount, 0o755); err != nil {
		return 0, err
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return 0, err
	}
	logf, err := os.OpenFile(spec.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{argv0}
	cmd.Stdin = bytes.NewReader(raw)
	cmd.Stderr = logf
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	go cmd.Wait() // reaped while this process lives; init adopts it afterwards
	ready := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- strings.TrimSpace(line) == "ready"
	}()
	select {
	case ok := <-ready:
		if ok {
			return cmd.Process.Pid, nil
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
	}
	msg, _ := os.ReadFile(spec.Log)
	return 0, fmt.Errorf("lazy server for %s did not start: %s", spec.Mount, lastLine(msg))
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// Unmount ends the serving of dir (its server process exits). Nothing may map a served file any
// more (see the package caveat). A directory that is not a mount is left alone.
func Unmount(dir string) error {
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	return nil
}
