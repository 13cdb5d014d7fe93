package snapshot

import (
	"context"
	"os"
	"path"
	"path/filepath"

	"github.com/pandastack/pandastack/internal/artifact"
	"github.com/pandastack/pandastack/internal/artifact/lazy"
	"github.com/pandastack/pandastack/internal/blob"
)

// Lazy makes a host restore a snapshot it pulls before the snapshot's memory is here: the pull
// takes the small files and the disk (mostly clones of this host's template) whole, and links
// "ram" into a FUSE mount served by a process of its own (internal/artifact/lazy) that reads
// chunks from a host-wide cache — cloned from this host's files where it has them, fetched from
// the store otherwise — and prefetches the rest. The server outlives the agent (the VMs mapping
// the file keep running across an agent restart) and ends when GC frees the snapshot.
//
// A snapshot or fork of a sandbox restored this way cannot reflink its memory base (FUSE): it
// takes the full path (the whole RAM streamed into the device state).
type Lazy struct {
	StoreURL string // the blob store, for the server processes (credentials: the environment)
	CacheDir string // the host's chunk cache, on the disk pool (so chunks clone from its files)
	MountDir string // one mount per lazily pulled snapshot, named by its id
	LogDir   string // one log per server
	// IndexDirs lists this host's artifact directories, whose chunks a server clones.
	IndexDirs func() []string
}

// Pull pulls m into tmp with its memory files (every file named "ram") served lazily, and returns
// the mount they are served at. local is this host's chunk index, for the files pulled whole.
func (l *Lazy) Pull(ctx context.Context, local *artifact.Local, bs blob.Store, m artifact.Manifest, tmp string) (string, artifact.Stats, error) {
	eager, mem := m, m
	eager.Files, mem.Files = nil, nil
	for _, f := range m.Files {
		if path.Base(f.Path) == "ram" {
			mem.Files = append(mem.Files, f)
		} else {
			eager.Files = append(eager.Files, f)
		}
	}
	st, err := local.PullManifest(ctx, bs, eager, tmp)
	if err != nil || len(mem.Files) == 0 {
		return "", st, err
	}
	mount := filepath.Join(l.MountDir, m.Name)
	lazy.Unmount(mount) // a server left by a pull that failed later
	// Root only: a served memory image is readable by every user who can reach it (the VMMs'
	// jails bind it in as root, so nobody else needs to).
	for _, d := range []string{l.CacheDir, l.LogDir, l.MountDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", st, err
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return "", st, err
		}
	}
	var index []string
	if l.IndexDirs != nil {
		index = l.IndexDirs()
	}
	if _, err := lazy.Start(lazy.ProcessSpec{Mount: mount, CacheDir: l.CacheDir, Store: l.StoreURL, Manifest: mem,
		IndexDirs: index, Log: filepath.Join(l.LogDir, m.Name+".log")}); err != nil {
		os.Remove(mount)
		return "", st, err
	}
	for _, f := range mem.Files {
		link := filepath.Join(tmp, filepath.FromSlash(f.Path))
		err := os.MkdirAll(filepath.Dir(link), 0o700)
		if err == nil {
			err = os.Symlink(filepath.Join(mount, filepath.FromSlash(f.Path)), link)
		}
		if err != nil {
			FreeMount(mount)
			return "", st, err
		}
	}
	return mount, st, nil
}

// FreeMount ends the serving of mount (a Lazy.Pull's) and removes it; nothing may map its files
// any more.
func FreeMount(mount string) error {
	if err := lazy.Unmount(mount); err != nil {
		return err
	}
	os.Remove(mount)
	return nil
}

// Idle: nothing is served lazily on this host (no mount is left), so its chunk cache may go.
func (l *Lazy) Idle() bool {
	entries, err := os.ReadDir(l.MountDir)
	return err == nil && len(entries) == 0 || os.IsNotExist(err)
}
