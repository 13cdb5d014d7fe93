package image

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

//go:embed init.sh
var initScript []byte

// virtioModules are the modules the initramfs loads, in load order.
var virtioModules = map[string]string{
	"virtio_ring":    "drivers/virtio/virtio_ring.ko",
	"virtio":         "drivers/virtio/virtio.ko",
	"virtio_mmio":    "drivers/virtio/virtio_mmio.ko",
	"failover":       "net/core/failover.ko",
	"net_failover":   "drivers/net/net_failover.ko",
	"virtio_net":     "drivers/net/virtio_net.ko",
	"virtio_blk":     "drivers/block/virtio_blk.ko",
	"virtio_console": "drivers/char/virtio_console.ko",
}

// busyboxPath is Debian's busybox-static (the initramfs has no libc).
const busyboxPath = "/bin/busybox"

func (b *Builder) initramfs(ctx context.Context, k kernelMeta) (string, error) {
	bbHash, err := HashFile(busyboxPath)
	if err != nil {
		return "", fmt.Errorf("busybox-static is needed (`make setup` installs it): %w", err)
	}
	key := hashStrings("initramfs-v1", k.version, bbHash, string(initScript))
	dir, err := b.cached(filepath.Join(b.CacheDir, "initramfs-"+key), func(tmp string) error {
		b.logf("building initramfs for %s", k.version)
		root := filepath.Join(tmp, "root")
		for _, d := range []string{"bin", "dev", "proc", "sys", "tmp", "newroot", "lib/modules"} {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				return err
			}
		}
		if err := copyFile(busyboxPath, filepath.Join(root, "bin", "busybox"), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(root, "init"), initScript, 0o755); err != nil {
			return err
		}
		for name, rel := range virtioModules {
			if err := copyFile(filepath.Join(k.modules, "kernel", rel), filepath.Join(root, "lib", "modules", name+".ko"), 0o644); err != nil {
				return err
			}
		}
		// newc cpio, uncompressed: the kernel unpacks it fastest and the file is small (~2 MB).
		cmd := exec.CommandContext(ctx, "sh", "-c", "find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 > ../initramfs.cpio")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("cpio: %v: %s", err, out)
		}
		return os.RemoveAll(root)
	})
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "initramfs.cpio"), nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, mode)
}
