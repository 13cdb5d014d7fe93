// Package image builds the guest images every template boots from: Debian's cloud kernel, a small
// initramfs that loads the virtio modules and switches to the rootfs, and Debian rootfs images
// packed into ext4. Every artifact is cached under the builder's cache dir by a hash of its
// inputs, so a second build with the same inputs returns at once.
package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Builder makes and caches guest images. Progress lines go to Log (may be nil).
type Builder struct {
	CacheDir string
	// GuestAgent is the path of the static pandastack-guest binary to put into rootfs images.
	GuestAgent string
	// Mirror is the Debian mirror for debootstrap; empty means the one apt on this host uses.
	Mirror string
	Log    func(format string, args ...any)

	mu       sync.Mutex // one build at a time: builds share the cache and are CPU/disk heavy
	progress func(string)
}

// Images is one bootable set: what a template is made from.
type Images struct {
	Kernel        string // vmlinuz path
	KernelVersion string // e.g. 6.1.0-56-cloud-amd64
	Initrd        string // uncompressed newc cpio
	Rootfs        string // raw ext4 image
	// Hash identifies the set; a template baked from another set is another template.
	Hash string
	// Lineage names what the rootfs is built for without the guest agent and kernel that change
	// under it (prune.go): a newer set of the same lineage supersedes this one.
	Lineage string
}

// RootfsSpec describes a Debian rootfs.
type RootfsSpec struct {
	Suite    string   // e.g. trixie
	Packages []string // passed to debootstrap --include
	// Npm packages are fetched on the host with their install scripts off (nothing of theirs
	// runs here) into /usr/local; the build VM runs their scripts (npm rebuild -g).
	Npm     []string
	DiskMiB int // size of the ext4 image (sparse)
}

// DefaultDiskMiB sizes an image whose spec gives no size.
const DefaultDiskMiB = 2048

// DefaultCacheDir is where built images are kept when PANDASTACK_IMAGE_CACHE does not say: one
// cache for `up`, `image build`, the tests and the benchmarks, so an image is built once per
// machine whichever of them runs first.
const DefaultCacheDir = "/var/tmp/pandastack-images"

// CacheDir is $PANDASTACK_IMAGE_CACHE, else DefaultCacheDir.
func CacheDir() string {
	if d := os.Getenv("PANDASTACK_IMAGE_CACHE"); d != "" {
		return d
	}
	return DefaultCacheDir
}

// logf reports a build step: to the caller's progress callback when Build got one (the caller
// logs it as it likes), else to Log.
func (b *Builder) logf(format string, args ...any) {
	if b.progress != nil {
		b.progress(fmt.Sprintf(format, args...))
	} else if b.Log != nil {
		b.Log(format, args...)
	}
}

// Build returns the kernel, initramfs and rootfs for spec, building what the cache lacks.
// progress (may be nil) receives the build's progress lines instead of Log.
func (b *Builder) Build(ctx context.Context, spec RootfsSpec, progress func(string)) (Images, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.progress = progress
	defer func() { b.progress = nil }()
	if err := os.MkdirAll(b.CacheDir, 0o755); err != nil {
		return Images{}, err
	}
	// Other processes (a second agent, parallel test packages) may share the cache: one builder
	// at a time across processes too.
	lock, err := os.OpenFile(filepath.Join(b.CacheDir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return Images{}, err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
		// Said, not silent: a first build takes minutes (a KVM probe at start waits for it too).
		b.logf("waiting for another process building into the image cache %s", b.CacheDir)
		err = unix.Flock(int(lock.Fd()), unix.LOCK_EX)
		if err != nil {
			return Images{}, err
		}
	} else if err != nil {
		return Images{}, err
	}
	kern, err := b.kernel(ctx)
	if err != nil {
		return Images{}, fmt.Errorf("guest kernel: %w", err)
	}
	initrd, err := b.initramfs(ctx, kern)
	if err != nil {
		return Images{}, fmt.Errorf("initramfs: %w", err)
	}
	rootfs, lineage, err := b.rootfs(ctx, spec)
	if err != nil {
		return Images{}, fmt.Errorf("rootfs: %w", err)
	}
	img := Images{Kernel: kern.vmlinuz, KernelVersion: kern.version, Initrd: initrd, Rootfs: rootfs, Lineage: lineage}
	img.Hash = hashStrings(kern.version, filepath.Base(filepath.Dir(initrd)), filepath.Base(filepath.Dir(rootfs)))
	return img, nil
}

// cached returns dir if it is a finished cache entry, else builds it: fill gets a temp dir that is
// renamed to dir only on success, so an interrupted build never looks finished.
func (b *Builder) cached(dir string, fill func(tmp string) error) (string, error) {
	if _, err := os.Stat(filepath.Join(dir, ".done")); err == nil {
		return dir, nil
	}
	tmp := dir + ".tmp"
	removeTree(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	if err := fill(tmp); err != nil {
		removeTree(tmp)
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, ".done"), nil, 0o644); err != nil {
		return "", err
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return dir, nil
}

func hashStrings(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		io.WriteString(h, p)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// HashFile is a short (16 hex) sha256 of the file at path: enough to tell builds apart.
func HashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// run runs a command, returning its combined output in the error when it fails.
func run(ctx context.Context, dir string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		tail := strings.TrimSpace(string(out))
		if len(tail) > 2000 {
			tail = "…" + tail[len(tail)-2000:]
		}
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, tail)
	}
	return nil
}

func output(ctx context.Context, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, name, args...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return "", fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return string(out), nil
}

func uniqueSorted(s []string) []string {
	c := append([]string(nil), s...)
	sort.Strings(c)
	out := c[:0]
	for i, x := range c {
		if i == 0 || x != c[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// LockEntry takes a lock on one cache entry (dir) shared by every process using the cache, for
// work that fills the entry outside Build (a template's build VM). It waits until the lock is
// free or ctx ends; the caller checks again, holding it, whether another process filled the entry
// meanwhile.
func LockEntry(ctx context.Context, dir string) (unlock func(), err error) {
	f, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
