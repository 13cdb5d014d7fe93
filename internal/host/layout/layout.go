// Package layout is where a host agent keeps its files and how it writes its records, shared by
// the host packages (sandbox, bake, volume, snapshot) so none of them guesses another's paths.
//
// Under the disk pool: sandboxes/<id>/ (sandbox.json, disk.img, memory snapshots),
// templates/<name>-<key>/ (template.json and the baked files; templates/specs/ for built specs),
// snapshots/<id>/ (snapshot.json, disk.img, ram, state), volumes/<id>.ext4 and <id>.json.
// Under the data dir: run/<id>/ (a VMM's sockets and logs).
package layout

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Layout is one agent's directories (absolute paths).
type Layout struct {
	DataDir string // the agent's data dir
	Pool    string // the disk pool's dir (the data dir itself when it can reflink)
}

func (l Layout) Sandboxes() string { return filepath.Join(l.Pool, "sandboxes") }
func (l Layout) Templates() string { return filepath.Join(l.Pool, "templates") }
func (l Layout) Snapshots() string { return filepath.Join(l.Pool, "snapshots") }
func (l Layout) Volumes() string   { return filepath.Join(l.Pool, "volumes") }

// RunDir is where a VMM's sockets go. Unix socket paths are limited to 108 bytes, so a long data
// dir falls back to a short directory under /run.
func (l Layout) RunDir(id string) string {
	d := filepath.Join(l.DataDir, "run", id)
	if len(d)+len("/agent.sock") < 100 {
		return d
	}
	return filepath.Join("/run/pandastack", ShortHash(l.DataDir), id)
}

// ShortHash is 12 hex digits naming parts (cache keys, run dirs, the host id).
func ShortHash(parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(h[:])[:12]
}

// NewID is prefix followed by 20 random lowercase letters and digits (sb_, snap_ …).
func NewID(prefix string) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 20)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return prefix + string(b)
}

// WriteJSON writes a record atomically (a reader sees the old file or the new one, whole).
func WriteJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadJSON reads a record.
func ReadJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// Allocated is the space a file takes on disk (its blocks), not its apparent size.
func Allocated(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

// DirSize is the disk space the files under dir really take (RAM files and disks are sparse).
func DirSize(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += Allocated(fi)
		}
		return nil
	})
	return n
}
