package hostagent

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pandastack/pandastack/internal/faultpoint"
	"github.com/pandastack/pandastack/internal/host/sandbox"
	"github.com/pandastack/pandastack/internal/host/snapshot"

	"github.com/pandastack/pandastack/internal/cgroup"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// The doctor finds what a crash (of this agent, of a VMM, of a half-done operation) can leave on
// the host that no sandbox owns — a VMM process, a directory, a network namespace or link, a
// cgroup, a half-written snapshot or pull — and, asked to repair, removes it. What a sandbox owns
// is what this agent's sandbox list says now; anything younger than staleAfter is left alone (an
// operation in flight makes its files before its record). The agent's start reclaims most of
// this as well; the doctor finds it while the agent runs.

// staleAfter is how old an unowned directory must be before the doctor calls it a leftover.
const staleAfter = 10 * time.Minute

// doctorFix removes one finding's resource.
type doctorFix func() error

// Doctor reports this host's leftovers; with repair it removes each and says which it did.
func (a *Agent) Doctor(repair bool) hostapi.DoctorReport {
	return a.doctor(repair, faultpoint.DoctorMinAge(staleAfter), false)
}

// reclaim repairs, as the agent starts, what an earlier agent left: nothing is in flight yet,
// so leftovers of any age are taken, and a bake's VMM and directories too.
func (a *Agent) reclaim() {
	if rep := a.doctor(true, 0, true); len(rep.Findings) > 0 {
		a.log.Info("reclaimed what an earlier agent left", "findings", len(rep.Findings))
	}
}

// doctor finds the leftovers older than minAge (bakes' too when atStart) and repairs them when
// asked, VMMs first: their cgroups are empty once they are gone, and taken in the same pass.
func (a *Agent) doctor(repair bool, minAge time.Duration, atStart bool) hostapi.DoctorReport {
	owned := map[string]int{} // sandbox id → its VMM's pid (0: not running)
	for _, sb := range a.sandboxes.List() {
		owned[sb.ID] = sb.PID
	}
	out := hostapi.DoctorReport{Findings: []hostapi.DoctorFinding{}}
	pass := func(scan func(add addFinding)) {
		scan(func(kind, resource, detail string, fix doctorFix) {
			f := hostapi.DoctorFinding{Kind: kind, Resource: resource, Detail: detail}
			if repair {
				if err := fix(); err != nil {
					f.Error = err.Error()
				} else {
					f.Repaired = true
				}
				a.log.Warn("doctor", "kind", f.Kind, "resource", f.Resource, "repaired", f.Repaired, "err", f.Error)
			}
			out.Findings = append(out.Findings, f)
		})
	}
	var killed []int
	pass(func(add addFinding) {
		a.doctorVMMs(owned, atStart, func(kind, resource, detail string, fix doctorFix) {
			if pid, err := strconv.Atoi(strings.TrimPrefix(resource, "pid ")); err == nil {
				killed = append(killed, pid)
			}
			add(kind, resource, detail, fix)
		})
	})
	if repair {
		waitGone(killed, 10*time.Second)
	}
	pass(func(add addFinding) {
		a.doctorDirs(owned, minAge, atStart, add)
		if !atStart { // the network's start has reclaimed its own leftovers, while it filled its ready slots
			a.doctorNetwork(add)
		}
		a.doctorCgroups(owned, atStart, add)
	})
	return out
}

// waitGone waits (at most limit) until the processes pids have ended.
func waitGone(pids []int, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for _, pid := range pids {
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

type addFinding func(kind, resource, detail string, fix doctorFix)

// preparedPrefix names a prepared VMM's directories and cgroup (sandbox.PreparedPrefix).
const preparedPrefix = sandbox.PreparedPrefix

// VMMsIn lists the QEMU processes working in a directory of runs (an agent's run directories:
// sandboxes' and bakes'), by pid, each with the name of its directory.
func VMMsIn(runs string) map[int]string {
	out := map[int]string{}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil || !bytes.Contains(bytes.SplitN(cmd, []byte{0}, 2)[0], []byte("qemu-system")) {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", p.Name(), "cwd"))
		if err != nil {
			continue
		}
		if cwd = strings.TrimSuffix(cwd, " (deleted)"); filepath.Dir(cwd) == runs {
			out[pid] = filepath.Base(cwd)
		}
	}
	return out
}

// doctorVMMs: QEMU processes working in one of this agent's sandbox run directories whose sandbox
// is gone or runs another VMM; atStart, a bake's VMM as well (no bake is in flight then).
func (a *Agent) doctorVMMs(owned map[string]int, atStart bool, add addFinding) {
	sandboxVMM := map[int]bool{}
	for _, pid := range owned {
		sandboxVMM[pid] = pid != 0
	}
	for pid, id := range VMMsIn(filepath.Dir(a.runDir("sb_x"))) {
		if atStart && strings.HasPrefix(id, "bake-") {
			add("orphan_vmm", "pid "+strconv.Itoa(pid), "the VMM of a bake its agent did not finish ("+id+")", func() error {
				return syscall.Kill(pid, syscall.SIGKILL)
			})
		}
		// A jailed VMM a create took from the prepared ones still works in its prep- directory
		// (as its jail sees it): a sandbox's VMM by its pid.
		if atStart && strings.HasPrefix(id, preparedPrefix) && !sandboxVMM[pid] {
			add("orphan_vmm", "pid "+strconv.Itoa(pid), "a VMM its agent prepared for a create that never came ("+id+")", func() error {
				return syscall.Kill(pid, syscall.SIGKILL)
			})
		}
		if !strings.HasPrefix(id, "sb_") {
			continue
		}
		if vmm, ok := owned[id]; ok && (vmm == pid || vmm == 0) {
			continue // its own VMM, or one being started (a create or wake in flight)
		}
		add("orphan_vmm", "pid "+strconv.Itoa(pid), fmt.Sprintf("a VMM for sandbox %s, which this host does not run", id), func() error {
			return syscall.Kill(pid, syscall.SIGKILL)
		})
	}
}

// doctorDirs: sandbox and run directories of no sandbox, and half-made snapshots and pulls;
// atStart, half-made bakes as well.
func (a *Agent) doctorDirs(owned map[string]int, minAge time.Duration, atStart bool, add addFinding) {
	old := func(path string) bool {
		fi, err := os.Stat(path)
		return err == nil && time.Since(fi.ModTime()) >= minAge
	}
	remove := func(path string) doctorFix { return func() error { return os.RemoveAll(path) } }
	for _, dir := range []string{a.sandboxesDir(), filepath.Dir(a.runDir("sb_x"))} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			if _, ok := owned[e.Name()]; ok || !strings.HasPrefix(e.Name(), "sb_") || !old(p) {
				continue
			}
			add("orphan_dir", p, "the directory of a sandbox this host does not have", remove(p))
		}
	}
	ents, _ := os.ReadDir(a.snapshotsDir())
	for _, e := range ents {
		p := filepath.Join(a.snapshotsDir(), e.Name())
		if (strings.HasSuffix(e.Name(), ".tmp") || strings.HasSuffix(e.Name(), ".pulling")) && old(p) {
			add("stale_tmp", p, "a snapshot that was never finished (its save or pull stopped midway)", remove(p))
		}
	}
	// A lazy mount nothing names: its pull stopped after the server started (FreeMount also
	// takes a directory that is no mount any more).
	served := a.snapshots.LazyMounts()
	maps.Copy(served, a.sandboxes.LazyMounts())
	mounts, _ := filepath.Glob(filepath.Join(a.layout.DataDir, "lazy", "*"))
	for _, p := range mounts {
		if !served[p] && old(p) {
			add("orphan_lazy_mount", p, "memory served lazily for a snapshot or sandbox this host does not have", func() error { return snapshot.FreeMount(p) })
		}
	}
	if !atStart {
		return
	}
	bakes, _ := filepath.Glob(filepath.Join(a.templatesDir(), "*.baking"))
	runs, _ := filepath.Glob(a.runDir("bake-*"))
	for _, p := range append(bakes, runs...) {
		add("stale_tmp", p, "a bake that was never finished", remove(p))
	}
	// No VMM is prepared yet at start: those directories are an earlier agent's (a create that
	// took one renamed them).
	files, _ := filepath.Glob(filepath.Join(a.sandboxesDir(), preparedPrefix+"*"))
	runs, _ = filepath.Glob(a.runDir(preparedPrefix + "*"))
	for _, p := range append(files, runs...) {
		add("stale_tmp", p, "the files of a VMM prepared for a create or fork that never came", remove(p))
	}
	// A fork's snapshot directory is made with its prepared VMM, before its record (BeginInPlace).
	for _, e := range ents {
		p := filepath.Join(a.snapshotsDir(), e.Name())
		if _, err := os.Stat(filepath.Join(p, "snapshot.json")); e.IsDir() && strings.HasPrefix(e.Name(), "snap_") && errors.Is(err, fs.ErrNotExist) {
			add("stale_tmp", p, "the snapshot directory of a fork that never came (its VMM was prepared)", remove(p))
		}
	}
}

// doctorNetwork: namespaces and host links of this agent's prefix that no slot holds.
func (a *Agent) doctorNetwork(add addFinding) {
	if a.net == nil {
		return
	}
	names, err := a.net.Orphans()
	if err != nil {
		a.log.Warn("doctor: listing network leftovers", "err", err)
		return
	}
	for _, n := range names {
		add("orphan_netns", n, "a network namespace or link of this agent that no sandbox slot holds", func() error { return a.net.RemoveOrphan(n) })
	}
}

// doctorCgroups: VMM cgroups of sandboxes this host does not have, with no process left in them;
// atStart, those of prepared VMMs too (a create that took one keeps its cgroup, not empty).
func (a *Agent) doctorCgroups(owned map[string]int, atStart bool, add addFinding) {
	if a.cg == nil {
		return
	}
	for _, parent := range a.cg.Dirs() {
		ents, _ := os.ReadDir(parent)
		for _, e := range ents {
			_, ok := owned[e.Name()]
			ours := strings.HasPrefix(e.Name(), "sb_") || atStart && strings.HasPrefix(e.Name(), preparedPrefix)
			if !e.IsDir() || !ours || ok {
				continue
			}
			dir := filepath.Join(parent, e.Name())
			if procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err != nil || len(bytes.TrimSpace(procs)) > 0 {
				continue // a process is still inside: the orphan VMM finding covers it
			}
			add("orphan_cgroup", dir, "the cgroup of a VMM that is gone", func() error { return cgroup.Remove([]string{dir}) })
		}
	}
}
