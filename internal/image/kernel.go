package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// kernelMeta is Debian's cloud kernel, unpacked.
type kernelMeta struct {
	version string // uname -r of the guest, e.g. 6.1.0-56-cloud-amd64
	vmlinuz string
	modules string // lib/modules/<version>
}

// kernelMetaPackage is Debian's metapackage for the cloud flavour: the smallest stock kernel with
// virtio as modules, which boots under QEMU's microvm machine.
const kernelMetaPackage = "linux-image-cloud-amd64"

// kernel fetches Debian's cloud kernel with apt (no root filesystem install: the .deb is unpacked
// into the cache) and returns where vmlinuz and its modules are.
func (b *Builder) kernel(ctx context.Context) (kernelMeta, error) {
	pkg, err := b.resolveKernelPackage(ctx)
	if err != nil {
		// Offline or apt lists missing: fall back to a kernel cached earlier.
		if m, ok := b.anyCachedKernel(); ok {
			b.logf("apt could not resolve %s (%v); using cached %s", kernelMetaPackage, err, m.version)
			return m, nil
		}
		return kernelMeta{}, err
	}
	version := strings.TrimPrefix(pkg, "linux-image-")
	dir, err := b.cached(filepath.Join(b.CacheDir, "kernel-"+version), func(tmp string) error {
		b.logf("fetching guest kernel %s with apt", pkg)
		if err := run(ctx, tmp, "apt-get", "download", "-q", pkg); err != nil {
			return err
		}
		debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
		if len(debs) != 1 {
			return fmt.Errorf("apt-get download %s left %d .deb files", pkg, len(debs))
		}
		if err := run(ctx, tmp, "dpkg-deb", "-x", debs[0], filepath.Join(tmp, "x")); err != nil {
			return err
		}
		return os.Remove(debs[0])
	})
	if err != nil {
		return kernelMeta{}, err
	}
	return kernelAt(dir, version)
}

func kernelAt(dir, version string) (kernelMeta, error) {
	m := kernelMeta{
		version: version,
		vmlinuz: filepath.Join(dir, "x", "boot", "vmlinuz-"+version),
		modules: filepath.Join(dir, "x", "lib", "modules", version),
	}
	if _, err := os.Stat(m.vmlinuz); err != nil {
		return kernelMeta{}, fmt.Errorf("kernel cache %s is incomplete: %w", dir, err)
	}
	return m, nil
}

func (b *Builder) anyCachedKernel() (kernelMeta, bool) {
	dirs, _ := filepath.Glob(filepath.Join(b.CacheDir, "kernel-*", ".done"))
	for i := len(dirs) - 1; i >= 0; i-- {
		dir := filepath.Dir(dirs[i])
		if m, err := kernelAt(dir, strings.TrimPrefix(filepath.Base(dir), "kernel-")); err == nil {
			return m, true
		}
	}
	return kernelMeta{}, false
}

// resolveKernelPackage maps the metapackage to the versioned image package it depends on. The
// answer is kept in the cache beside the state of apt's lists it came from: where apt's own
// package cache file is disabled (Debian's container images), every apt-cache call rebuilds it
// (~2.5 s of a core here), and every agent start asks.
func (b *Builder) resolveKernelPackage(ctx context.Context) (string, error) {
	memo := filepath.Join(b.CacheDir, "kernel-package")
	sig := aptListsSignature()
	if sig != "" {
		if data, err := os.ReadFile(memo); err == nil {
			if s, pkg, ok := strings.Cut(strings.TrimSpace(string(data)), "\n"); ok && s == sig && pkg != "" {
				return pkg, nil
			}
		}
	}
	out, err := output(ctx, "apt-cache", "depends", kernelMetaPackage)
	if err != nil {
		return "", fmt.Errorf("%w (run `apt-get update`; `make setup` does)", err)
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "Depends:" && strings.HasPrefix(f[1], "linux-image-") {
			if sig != "" && os.MkdirAll(b.CacheDir, 0o755) == nil {
				// Whole or absent: other processes read it without a lock.
				tmp := fmt.Sprintf("%s.%d", memo, os.Getpid())
				if os.WriteFile(tmp, []byte(sig+"\n"+f[1]+"\n"), 0o644) == nil {
					os.Rename(tmp, memo)
				}
			}
			return f[1], nil
		}
	}
	return "", fmt.Errorf("apt knows no %s (run `apt-get update`; `make setup` does)", kernelMetaPackage)
}

// aptListsDir is where apt keeps the package lists apt-cache reads (`apt-get update` replaces them).
const aptListsDir = "/var/lib/apt/lists"

// aptListsSignature names the state of apt's lists (each file's name, size and mtime); "" if they
// cannot be read.
func aptListsSignature() string {
	entries, err := os.ReadDir(aptListsDir)
	if err != nil {
		return ""
	}
	h := sha256.New()
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		fmt.Fprintf(h, "%s %d %d\n", e.Name(), info.Size(), info.ModTime().UnixNano())
	}
	return hex.EncodeToString(h.Sum(nil))
}
