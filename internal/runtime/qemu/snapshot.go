package qemu

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/runtime"
	"github.com/pandastack/pandastack/internal/storage"
	"github.com/pandastack/pandastack/internal/timing"
	"golang.org/x/sys/unix"
)

// Snapshot saves a running clone that was restored from base into out, as a diff: a clone restored
// MAP_PRIVATE differs from its base RAM file only in the pages it wrote, which are the anonymous
// pages of that mapping. So out.RAMFile = reflink(base RAM) + those pages, and the cost follows
// what the guest wrote, not its RAM size. Steps, with the guest paused only in between:
//
//  1. QMP stop;
//  2. reflink the base RAM file, copy the anonymous page runs from the paused process into it;
//  3. QMP xen-save-devices-state (device state only, ~10 kB);
//  4. whilePaused (the caller reflinks the disk, consistent with memory);
//  5. QMP cont, unless keepPaused;
//  6. splice a restorable stream: base stream up to its first device section, the new device
//     sections, the base stream's vmdescription trailer. Loading the bare device state through
//     -incoming would leave the firmware page (ACPI RSDP) zero: the base stream carries it.
//
// Traps (measured): x-ignore-shared does not skip a share=off block, so a plain migration would
// stream all RAM; xen-load-devices-state crashes QEMU 7.2, so children load through -incoming.
//
// opts.Full takes the fallback path instead: the whole guest RAM streamed into the state file
// (out.RAMFile is then an empty sparse file of the right size for the restore to map). It is
// also taken when the diff is impossible (the VM does not map base.RAMFile, or base.RAMFile is
// served lazily over FUSE, which cannot be reflinked).
func (d *Driver) Snapshot(ctx context.Context, vm *runtime.VM, base, out runtime.Snapshot, opts runtime.SnapshotOptions) (runtime.SnapshotStats, error) {
	if !opts.Full {
		if _, err := fileMappings(vm.Pid, base.RAMFile); err != nil || servedByFUSE(base.RAMFile) {
			opts.Full = true
		}
	}
	if opts.Full {
		return d.snapshotFull(ctx, vm, out, opts)
	}
	keepPaused, whilePaused := opts.KeepPaused, opts.WhilePaused
	var st runtime.SnapshotStats
	q, err := dialQMP(ctx, filepath.Join(vm.RunDir, "qmp.sock"), func() bool { return d.Alive(vm) })
	if err != nil {
		return st, err
	}
	defer q.close()
	t0 := time.Now()
	if err := q.run(ctx, "stop", nil, nil); err != nil {
		return st, err
	}
	timing.Mark(ctx, runtime.StepSaveStop)
	paused := true
	resume := func() {
		if paused && !keepPaused {
			q.run(context.Background(), "cont", nil, nil)
			paused = false
		}
	}
	defer resume()
	cleanup := func() { os.Remove(out.RAMFile); os.Remove(out.StateFile) }

	var read []storage.Run
	st.DirtyBytes, read, st.Written, err = diffRAM(vm.Pid, base.RAMFile, out.RAMFile)
	if err != nil {
		cleanup()
		return st, fmt.Errorf("memory diff: %w", err)
	}
	timing.Mark(ctx, runtime.StepSaveMemory)
	// In the VMM's run dir: the only place a jailed VMM can write. Named to the VMM relative to
	// its working directory, which is the run dir (its inode): a prepared VMM's run dir was
	// renamed to its sandbox's after it started, and a jailed VMM still sees it at the old path.
	dev := filepath.Join(vm.RunDir, "devstate")
	defer os.Remove(dev)
	if err := q.run(ctx, "xen-save-devices-state", map[string]any{"filename": filepath.Base(dev), "live": false}, nil); err != nil {
		cleanup()
		return st, err
	}
	timing.Mark(ctx, runtime.StepSaveDevices)
	if whilePaused != nil {
		if err := whilePaused(); err != nil {
			cleanup()
			return st, err
		}
	}
	resume()
	st.Pause = time.Since(t0)
	timing.Mark(ctx, runtime.StepSavePaused)
	if err := spliceStream(base.StateFile, dev, out.StateFile, !opts.NoSync); err != nil {
		cleanup()
		return st, err
	}
	timing.Mark(ctx, runtime.StepSaveStream)
	if !d.coldSnapshots {
		st.Read = read
	}
	return st, nil
}

// snapshotFull stops the VM and migrates all of its RAM and device state into out.StateFile.
// Restoring such a stream loads every page into the clone's private memory: slower, and nothing
// is shared between children, but it needs nothing from the VM's base.
func (d *Driver) snapshotFull(ctx context.Context, vm *runtime.VM, out runtime.Snapshot, opts runtime.SnapshotOptions) (runtime.SnapshotStats, error) {
	var st runtime.SnapshotStats
	st.Full = true
	q, err := dialQMP(ctx, filepath.Join(vm.RunDir, "qmp.sock"), func() bool { return d.Alive(vm) })
	if err != nil {
		return st, err
	}
	defer q.close()
	var size struct {
		Base int64 `json:"base-memory"`
	}
	if err := q.run(ctx, "query-memory-size-summary", nil, &size); err != nil {
		return st, err
	}
	t0 := time.Now()
	if err := q.run(ctx, "stop", nil, nil); err != nil {
		return st, err
	}
	resume := func() {
		if !opts.KeepPaused {
			q.run(context.Background(), "cont", nil, nil)
		}
	}
	cleanup := func() { os.Remove(out.RAMFile); os.Remove(out.StateFile) }
	fail := func(err error) (runtime.SnapshotStats, error) {
		cleanup()
		resume()
		return st, err
	}
	// The default migration bandwidth (128 MiB/s in QEMU 7.2) would throttle a local save.
	if err := q.run(ctx, "migrate-set-parameters", map[string]any{"max-bandwidth": int64(64) << 30}, nil); err != nil {
		return fail(err)
	}
	// x-ignore-shared stays on: it does not skip a private (share=off) RAM block, so all RAM is
	// streamed anyway, and the stream then matches what every restore expects.
	if err := q.ignoreShared(ctx); err != nil {
		return fail(err)
	}
	if err := migrateToFile(ctx, q, out.StateFile); err != nil {
		return fail(err)
	}
	f, err := os.Create(out.RAMFile)
	if err == nil {
		err = f.Truncate(size.Base)
		f.Close()
	}
	if err != nil {
		return fail(err)
	}
	if opts.WhilePaused != nil {
		if err := opts.WhilePaused(); err != nil {
			return fail(err)
		}
	}
	resume()
	st.Pause = time.Since(t0)
	if fi, err := os.Stat(out.StateFile); err == nil {
		st.DirtyBytes = fi.Size()
	}
	return st, nil
}

// waitMigration polls an outgoing migration until it ends.
func waitMigration(ctx context.Context, q *qmp) error {
	for {
		var st struct {
			Status    string `json:"status"`
			ErrorDesc string `json:"error-desc"`
		}
		if err := q.run(ctx, "query-migrate", nil, &st); err != nil {
			return err
		}
		switch st.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("migration %s: %s", st.Status, st.ErrorDesc)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// Pause stops a VM's vCPUs.
func (d *Driver) Pause(ctx context.Context, vm *runtime.VM) error { return d.qmpCmd(ctx, vm, "stop") }

// Resume restarts a paused VM's vCPUs.
func (d *Driver) Resume(ctx context.Context, vm *runtime.VM) error { return d.qmpCmd(ctx, vm, "cont") }

func (d *Driver) qmpCmd(ctx context.Context, vm *runtime.VM, cmd string) error {
	q, err := dialQMP(ctx, filepath.Join(vm.RunDir, "qmp.sock"), func() bool { return d.Alive(vm) })
	if err != nil {
		return err
	}
	defer q.close()
	return q.run(ctx, cmd, nil, nil)
}

const pageSize = 4096

// pagemap bits (Documentation/admin-guide/mm/pagemap.rst).
const (
	pmPresent = 1 << 63
	pmSwapped = 1 << 62
	pmFile    = 1 << 61
)

// mapping is one VMA of a file in a process.
type mapping struct{ start, end, fileOff uint64 }

// fileMappings lists the VMAs of path in pid's address space.
// servedByFUSE says path lives on a FUSE filesystem (a lazily served memory image).
func servedByFUSE(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.FUSE_SUPER_MAGIC
}

func fileMappings(pid int, path string) ([]mapping, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mapping
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || strings.Join(fields[5:], " ") != real {
			continue
		}
		a, b, _ := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(a, 16, 64)
		end, err2 := strconv.ParseUint(b, 16, 64)
		off, err3 := strconv.ParseUint(fields[2], 16, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("bad maps line %q", sc.Text())
		}
		out = append(out, mapping{start, end, off})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("pid %d does not map %s", pid, real)
	}
	return out, sc.Err()
}

// diffRAM writes newRAM = reflink(baseRAM) + every page of pid's private mapping of baseRAM that
// the guest wrote (anonymous: present without the file bit, or swapped). It returns the bytes of
// those pages (dirty) and the runs of the base's pages the guest has read (present with the file
// bit: in baseRAM's page cache), for SnapshotStats.Read.
func diffRAM(pid int, baseRAM, newRAM string) (dirty int64, read, written []storage.Run, err error) {
	maps, err := fileMappings(pid, baseRAM)
	if err != nil {
		return 0, nil, nil, err
	}
	// Into: newRAM may exist already, empty, mapped by a VMM prepared for a fork's child.
	if err := storage.CloneInto(baseRAM, newRAM); err != nil {
		return 0, nil, nil, err
	}
	out, err := os.OpenFile(newRAM, os.O_WRONLY, 0)
	if err != nil {
		return 0, nil, nil, err
	}
	defer out.Close()
	pm, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", pid))
	if err != nil {
		return 0, nil, nil, err
	}
	defer pm.Close()
	buf := make([]byte, 1<<20)
	entries := make([]byte, 8*4096)
	for _, m := range maps {
		npages := (m.end - m.start) / pageSize
		var anon fileRun // the current run of written pages, in pages relative to m.start
		flush := func() error {
			if anon.len == 0 {
				return nil
			}
			off := int64(m.fileOff + anon.off*pageSize)
			n, err := copyRun(pid, out, m.start+anon.off*pageSize, off, anon.len*pageSize, buf)
			dirty += n
			written = append(written, storage.Run{Off: off, Len: int64(anon.len * pageSize)})
			anon.len = 0
			return err
		}
		for i := uint64(0); i < npages; i += uint64(len(entries) / 8) {
			n := min(npages-i, uint64(len(entries)/8))
			if _, err := pm.ReadAt(entries[:n*8], int64((m.start/pageSize+i)*8)); err != nil {
				return dirty, nil, nil, fmt.Errorf("pagemap: %w", err)
			}
			for j := uint64(0); j < n; j++ {
				e := binary.LittleEndian.Uint64(entries[j*8:])
				page := i + j
				if e&pmPresent != 0 && e&pmFile != 0 {
					off := int64(m.fileOff + page*pageSize)
					if k := len(read) - 1; k >= 0 && read[k].Off+read[k].Len == off {
						read[k].Len += pageSize
					} else {
						read = append(read, storage.Run{Off: off, Len: pageSize})
					}
				}
				if (e&pmPresent != 0 && e&pmFile == 0) || e&pmSwapped != 0 {
					if anon.len > 0 && anon.off+anon.len == page {
						anon.len++
						continue
					}
					if err := flush(); err != nil {
						return dirty, nil, nil, err
					}
					anon = fileRun{page, 1}
				}
			}
		}
		if err := flush(); err != nil {
			return dirty, nil, nil, err
		}
	}
	return dirty, read, written, nil
}

// fileRun is a run of pages: offset and length, in pages.
type fileRun struct{ off, len uint64 }

// copyRun copies length bytes at addr in pid's memory to out at off, through buf.
func copyRun(pid int, out *os.File, addr uint64, off int64, length uint64, buf []byte) (int64, error) {
	var done int64
	for length > 0 {
		n := min(length, uint64(len(buf)))
		local := []unix.Iovec{{Base: &buf[0], Len: n}}
		remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: int(n)}}
		got, err := unix.ProcessVMReadv(pid, local, remote, 0)
		if err != nil {
			return done, fmt.Errorf("process_vm_readv: %w", err)
		}
		if got <= 0 {
			return done, errors.New("process_vm_readv read nothing")
		}
		if _, err := out.WriteAt(buf[:got], off); err != nil {
			return done, err
		}
		done += int64(got)
		addr += uint64(got)
		off += int64(got)
		length -= uint64(got)
	}
	return done, nil
}

// spliceStream writes a restorable migration stream: the base stream up to its first device
// section, the device sections of dev (after its 8-byte header), and the base's vmdescription
// trailer. Section ids and order match because both come from the same QEMU and device set.
func spliceStream(baseState, dev, out string, durable bool) error {
	b, err := os.ReadFile(baseState)
	if err != nil {
		return err
	}
	d, err := os.ReadFile(dev)
	if err != nil {
		return err
	}
	if len(d) < 22 || string(d[:4]) != "QEVM" {
		return errors.New("device state is not a QEMU migration stream")
	}
	// First section header: u8 type, be32 section id, u8 idstr length, idstr, be32 instance, be32 version.
	hdr := d[8 : 22+int(d[13])]
	off := bytes.Index(b, hdr)
	if off < 0 || bytes.Index(b[off+1:], hdr) >= 0 {
		return errors.New("device-section boundary not found exactly once in the base stream (QEMU or device set changed?)")
	}
	var trailer []byte
	// vmdescription: 0x06, be32 length, JSON — the very end of the stream.
	for k := bytes.LastIndex(b, []byte{0x06, 0x00}); k > 0; k = bytes.LastIndex(b[:k], []byte{0x06, 0x00}) {
		if k+5 < len(b) {
			ln := int(binary.BigEndian.Uint32(b[k+1 : k+5]))
			if k+5+ln == len(b) && b[k+5] == '{' {
				trailer = b[k:]
				break
			}
		}
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	for _, part := range [][]byte{b[:off], d[8:], trailer} {
		if _, err := f.Write(part); err != nil {
			f.Close()
			return err
		}
	}
	if durable {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// RefreshDrive tells the guest the drive's current size: block_resize to the size the file
// already has changes no byte, but makes QEMU raise virtio-blk's config-change interrupt.
func (d *Driver) RefreshDrive(ctx context.Context, vm *runtime.VM, serial string) error {
	q, err := dialQMP(ctx, filepath.Join(vm.RunDir, "qmp.sock"), func() bool { return d.Alive(vm) })
	if err != nil {
		return err
	}
	defer q.close()
	var blocks []struct {
		Device   string `json:"device"`
		Inserted struct {
			Image struct {
				VirtualSize int64 `json:"virtual-size"`
			} `json:"image"`
		} `json:"inserted"`
	}
	if err := q.run(ctx, "query-block", nil, &blocks); err != nil {
		return err
	}
	for _, b := range blocks {
		if b.Device == serial {
			return q.run(ctx, "block_resize", map[string]any{"device": serial, "size": b.Inserted.Image.VirtualSize}, nil)
		}
	}
	return fmt.Errorf("qemu: no drive %q", serial)
}
