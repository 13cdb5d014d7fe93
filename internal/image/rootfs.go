package image

import (
	"bufio"
	"context"
	"fmt"
	"golang.org/x/sys/unix"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// GuestUser is the unprivileged account commands run as by default (uid/gid 1000, home /home/user).
const GuestUser = "user"

// rootfs returns an ext4 image for spec with the guest agent and the kernel's modules inside.
// Two cache levels: the debootstrap tree (slow: ~80 s, changes rarely) and the packed image
// (a few seconds, changes with every guest agent build).
func (b *Builder) rootfs(ctx context.Context, spec RootfsSpec) (path, lineage string, err error) {
	if b.GuestAgent == "" {
		return "", "", fmt.Errorf("no guest agent binary given")
	}
	if spec.DiskMiB <= 0 {
		spec.DiskMiB = DefaultDiskMiB
	}
	tree, treeKey, err := b.debootstrap(ctx, spec)
	if err != nil {
		return "", "", err
	}
	agentHash, err := HashFile(b.GuestAgent)
	if err != nil {
		return "", "", fmt.Errorf("guest agent: %w", err)
	}
	kern, err := b.kernel(ctx)
	if err != nil {
		return "", "", err
	}
	npmTree, npmKey, err := b.npmTree(ctx, spec.Npm)
	if err != nil {
		return "", "", err
	}
	key := hashStrings("rootfs-v3", treeKey, npmKey, agentHash, kern.version, strconv.Itoa(spec.DiskMiB))
	dir, err := b.cached(filepath.Join(b.CacheDir, "rootfs-"+key), func(tmp string) error {
		b.logf("packing %s rootfs into a %d MiB ext4 image", spec.Suite, spec.DiskMiB)
		stage := filepath.Join(tmp, "stage")
		// Hard-link copy: cheap, and the cached tree is never written through it (we only add files).
		if err := run(ctx, "", "cp", "-al", tree, stage); err != nil {
			return err
		}
		if npmTree != "" {
			if err := run(ctx, "", "cp", "-a", npmTree+"/.", filepath.Join(stage, "usr", "local")+"/"); err != nil {
				return err
			}
		}
		if err := copyFile(b.GuestAgent, filepath.Join(stage, "usr", "local", "bin", "pandastack-guest"), 0o755); err != nil {
			return err
		}
		// /work: the conventional place for a sandbox's project files, the user's to write.
		work := filepath.Join(stage, "work")
		if err := os.Mkdir(work, 0o755); err != nil && !os.IsExist(err) {
			return err
		}
		if err := os.Chown(work, 1000, 1000); err != nil {
			return err
		}
		modDst := filepath.Join(stage, "lib", "modules")
		if err := os.MkdirAll(modDst, 0o755); err != nil {
			return err
		}
		if err := run(ctx, "", "cp", "-a", kern.modules, modDst+"/"); err != nil {
			return err
		}
		img := filepath.Join(tmp, "rootfs.ext4")
		if err := run(ctx, "", "truncate", "-s", strconv.Itoa(spec.DiskMiB)+"M", img); err != nil {
			return err
		}
		// mkfs.ext4 -d fills the filesystem from a directory: no mount, no loop device needed.
		if err := run(ctx, "", "mkfs.ext4", "-q", "-F", "-L", "root", "-E", "root_owner=0:0", "-d", stage, img); err != nil {
			if strings.Contains(err.Error(), "Could not allocate") || strings.Contains(err.Error(), "No space") {
				return fmt.Errorf("disk_mib %d is too small for this image's %s of files: raise disk_mib", spec.DiskMiB, duSize(stage))
			}
			return err
		}
		return os.RemoveAll(stage)
	})
	if err != nil {
		return "", "", err
	}
	lineage = hashStrings("rootfs-lineage", treeKey, npmKey, strconv.Itoa(spec.DiskMiB))
	Supersede(b.CacheDir, RootfsPrefix, dir, lineage, b.logf)
	return filepath.Join(dir, "rootfs.ext4"), lineage, nil
}

// corePackages go into every tree by debootstrap: what the guest agent itself relies on (user
// switching, process lists, volumes' filesystems, network config) and TLS roots for apt.
var corePackages = []string{"ca-certificates", "passwd", "procps", "iproute2", "e2fsprogs"}

// debootstrap builds (or finds) the Debian tree for spec, in two cached layers: a core tree per
// suite (debootstrap, the guest user made) and, on a copy of it, the spec's packages installed by
// apt-get in a chroot. debootstrap alone resolves dependencies too simply for large sets (npm's
// hundreds of node-* packages defeat it); apt does it properly.
func (b *Builder) debootstrap(ctx context.Context, spec RootfsSpec) (string, string, error) {
	core, coreKey, err := b.coreTree(ctx, spec.Suite)
	if err != nil {
		return "", "", err
	}
	pkgs := spec.Packages
	if len(spec.Npm) > 0 {
		pkgs = append(append([]string(nil), pkgs...), "nodejs", "npm") // the build VM runs npm rebuild
	}
	pkgs = uniqueSorted(pkgs)
	if len(pkgs) == 0 {
		return core, coreKey, nil
	}
	key := hashStrings("apt-v1", coreKey, strings.Join(pkgs, ","))
	dir, err := b.cached(filepath.Join(b.CacheDir, "tree-"+key), func(tmp string) error {
		root := filepath.Join(tmp, "root")
		if err := run(ctx, "", "cp", "-a", "--reflink=auto", core, root); err != nil {
			return err
		}
		return b.aptInstall(ctx, root, spec.Suite, pkgs)
	})
	if err != nil {
		return "", "", err
	}
	return filepath.Join(dir, "root"), key, nil
}

// coreTree is debootstrap's minimal tree for suite with the guest user made.
func (b *Builder) coreTree(ctx context.Context, suite string) (string, string, error) {
	key := hashStrings("debootstrap-v2", suite, strings.Join(corePackages, ","))
	dir, err := b.cached(filepath.Join(b.CacheDir, "debootstrap-"+key), func(tmp string) error {
		root := filepath.Join(tmp, "root")
		mirror := b.Mirror
		if mirror == "" {
			mirror = hostDebianMirror()
		}
		args := []string{"--variant=minbase", "--include=" + strings.Join(corePackages, ","), suite, root}
		if mirror != "" {
			args = append(args, mirror)
		}
		b.logf("debootstrap %s (first build only, about a minute)", suite)
		if err := b.runLogged(ctx, isStageLine, "debootstrap", nil, args...); err != nil {
			return err
		}
		return customizeTree(ctx, root)
	})
	if err != nil {
		return "", "", err
	}
	return filepath.Join(dir, "root"), key, nil
}

// aptInstall installs Debian packages into root with the tree's own apt, in a chroot on the host:
// only Debian's signed packages and their maintainer scripts run there (user build steps run in a
// build VM). Services are kept from starting (policy-rc.d) and downloads are shared across trees.
func (b *Builder) aptInstall(ctx context.Context, root, suite string, pkgs []string) error {
	archives := filepath.Join(b.CacheDir, "apt-archives", suite)
	if err := os.MkdirAll(filepath.Join(archives, "partial"), 0o755); err != nil {
		return err
	}
	policy := filepath.Join(root, "usr/sbin/policy-rc.d")
	if err := os.WriteFile(policy, []byte("#!/bin/sh\nexit 101\n"), 0o755); err != nil {
		return err
	}
	defer os.Remove(policy)
	// apt needs the host's resolver while it downloads; the guest's own comes back afterwards.
	resolv := filepath.Join(root, "etc/resolv.conf")
	guestResolv, _ := os.ReadFile(resolv)
	if host, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		os.WriteFile(resolv, host, 0o644)
	}
	defer os.WriteFile(resolv, guestResolv, 0o644)
	for _, m := range []struct {
		src, dst, fstype string
		flags            uintptr
	}{
		{"proc", "proc", "proc", 0},
		{archives, "var/cache/apt/archives", "", unix.MS_BIND},
	} {
		dst := filepath.Join(root, m.dst)
		if err := unix.Mount(m.src, dst, m.fstype, m.flags, ""); err != nil {
			return fmt.Errorf("mount %s in the build tree: %w", m.dst, err)
		}
		defer unix.Unmount(dst, unix.MNT_DETACH)
	}
	env := []string{"DEBIAN_FRONTEND=noninteractive", "LC_ALL=C.UTF-8", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	b.logf("apt-get install %s", strings.Join(pkgs, " "))
	if err := b.runLogged(ctx, isAptProgress, "chroot", env, root, "apt-get", "update", "-q"); err != nil {
		return err
	}
	// Dpkg::Use-Pty=0: the chroot has no /dev/pts, and apt would complain it cannot log.
	args := append([]string{root, "apt-get", "install", "-y", "-q", "--no-install-recommends", "-o", "Dpkg::Use-Pty=0"}, pkgs...)
	if err := b.runLogged(ctx, isAptProgress, "chroot", env, args...); err != nil {
		return aptError(err)
	}
	run(ctx, "", "chroot", root, "apt-get", "clean")
	lists, _ := filepath.Glob(filepath.Join(root, "var/lib/apt/lists/*_*"))
	for _, l := range lists {
		os.Remove(l)
	}
	return nil
}

// aptError says plainly which packages apt could not find.
func aptError(err error) error {
	var missing []string
	for _, line := range strings.Split(err.Error(), "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "E: Unable to locate package "); ok {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("unknown Debian package(s): %s (search with apt-cache search, or packages.debian.org)", strings.Join(missing, ", "))
	}
	return err
}

// isAptProgress keeps apt's per-package "Setting up" lines and its errors, not its download chatter.
func isAptProgress(line string) bool {
	return strings.HasPrefix(line, "Setting up ") || strings.HasPrefix(line, "E: ") || strings.HasPrefix(line, "W: ")
}

// customizeTree makes the guest user and trims what a sandbox never needs. It runs the tree's own
// tools in a chroot on the host: only Debian's packages are in the tree at this point.
func customizeTree(ctx context.Context, root string) error {
	if err := run(ctx, "", "chroot", root, "useradd", "-m", "-u", "1000", "-U", "-s", "/bin/bash", GuestUser); err != nil {
		return err
	}
	files := map[string]string{
		"etc/hostname": "sandbox\n",
		"etc/hosts":    "127.0.0.1 localhost\n127.0.1.1 sandbox\n::1 localhost ip6-localhost ip6-loopback\n",
		// Debian's minbase has no resolver config; the network issue's DNS points here.
		"etc/resolv.conf": "nameserver 10.0.2.1\n",
	}
	for name, content := range files {
		p := filepath.Join(root, name)
		os.Remove(p)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	for _, d := range []string{"usr/local/bin", "newroot"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	debs, _ := filepath.Glob(filepath.Join(root, "var/cache/apt/archives/*.deb"))
	for _, d := range debs {
		os.Remove(d)
	}
	return nil
}

// runLogged runs a long command and forwards its progress lines.
func (b *Builder) runLogged(ctx context.Context, keep func(string) bool, name string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	if env != nil {
		cmd.Env = env
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pw.Close()
		pr.Close()
		return fmt.Errorf("%s: %w", name, err)
	}
	pw.Close()
	var tail []string
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		line := sc.Text()
		tail = append(tail, line)
		if len(tail) > 20 {
			tail = tail[1:]
		}
		if !keep(line) {
			continue // hundreds of per-package lines; the stage lines are enough progress
		}
		b.logf("%s: %s", name, line)
	}
	pr.Close()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("%s failed: %v\n%s", name, err, strings.Join(tail, "\n"))
	}
	return nil
}

// hostDebianMirror returns the Debian archive URI this host's apt uses, so debootstrap reaches the
// same mirror (or "" to let debootstrap pick its default).
func hostDebianMirror() string {
	var uris []string
	if data, err := os.ReadFile("/etc/apt/sources.list"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) >= 3 && f[0] == "deb" {
				i := 1
				for i < len(f) && strings.HasPrefix(f[i], "[") { // skip [options]
					for i < len(f) && !strings.HasSuffix(f[i], "]") {
						i++
					}
					i++
				}
				if i < len(f) {
					uris = append(uris, f[i])
				}
			}
		}
	}
	deb822, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	for _, p := range deb822 {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "URIs:"); ok {
				uris = append(uris, strings.Fields(rest)...)
			}
		}
	}
	for _, u := range uris {
		u = strings.TrimSuffix(u, "/")
		if strings.HasSuffix(u, "/debian") {
			return u
		}
	}
	return ""
}

// isStageLine keeps debootstrap's stage lines ("Retrieving Release", "Installing core
// packages", ...) and drops the per-package ones.
func isStageLine(line string) bool {
	if !strings.HasPrefix(line, "I: ") {
		return true
	}
	for _, p := range []string{"I: Retrieving ", "I: Validating ", "I: Extracting ", "I: Unpacking ", "I: Configuring "} {
		if strings.HasPrefix(line, p) && !strings.HasSuffix(line, "packages...") && !strings.Contains(line, "Release") {
			return false
		}
	}
	return true
}

// npmTree fetches npm packages into a /usr/local-shaped tree (lib/node_modules, bin), with
// install scripts off: only files are written on the host. Cached by the package list.
func (b *Builder) npmTree(ctx context.Context, pkgs []string) (string, string, error) {
	if len(pkgs) == 0 {
		return "", "", nil
	}
	pkgs = uniqueSorted(pkgs)
	key := hashStrings("npm-v1", strings.Join(pkgs, ","))
	dir, err := b.cached(filepath.Join(b.CacheDir, "npm-"+key), func(tmp string) error {
		b.logf("npm: fetching %s (install scripts run later, in the build VM)", strings.Join(pkgs, " "))
		args := append([]string{"install", "--global", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error",
			"--prefix", filepath.Join(tmp, "prefix")}, pkgs...)
		cmd := exec.CommandContext(ctx, "npm", args...)
		cmd.Env = append(os.Environ(), "npm_config_cache="+filepath.Join(b.CacheDir, "npm-cache"), "npm_config_update_notifier=false")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("npm install %s failed: %v\n%s", strings.Join(pkgs, " "), err, tailLines(string(out), 20))
		}
		return nil
	})
	if err != nil {
		return "", "", err
	}
	return filepath.Join(dir, "prefix"), key, nil
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// duSize is a directory's size for an error message ("1.2G").
func duSize(dir string) string {
	out, err := exec.Command("du", "-sh", dir).Output()
	if err != nil {
		return "?"
	}
	return strings.Fields(string(out))[0]
}
