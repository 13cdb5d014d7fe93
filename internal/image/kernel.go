package image

import (
	"context"
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
	pkg, err := resolveKernelPackage(ctx)
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

// resolveKernelPackage maps the metapackage to the versioned image package it depends on.
func resolveKernelPackage(ctx context.Context) (string, error) {
	out, err := output(ctx, "apt-cache", "depends", kernelMetaPackage)
	if err != nil {
		return "", fmt.Errorf("%w (run `apt-get update`; `make setup` does)", err)
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "Depends:" && strings.HasPrefix(f[1], "linux-image-") {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("apt knows no %s (run `apt-get update`; `make setup` does)", kernelMetaPackage)
}
