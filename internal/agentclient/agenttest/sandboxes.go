package agenttest

import (
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/template"
)

// The sandbox, snapshot and file endpoints. Every call runs with a.mu held (Agent.serve).

func (a *Agent) create(r *http.Request) (any, *agentclient.Error) {
	var req agentclient.CreateRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if a.createErr != nil {
		return nil, a.createErr
	}
	if req.ID != "" && !sandboxIDRE.MatchString(req.ID) {
		return nil, invalid("sandbox id %q: use sb_ followed by 1-60 lowercase letters or digits", req.ID)
	}
	if req.Hibernated != "" {
		return a.adopt(req)
	}
	switch {
	case req.ForkOf != "" && req.SnapshotID == "":
		return nil, invalid("fork_of needs snapshot_id: the snapshot of the parent the child starts from")
	case req.ForkOf != "" && (len(req.Env) > 0 || req.Egress != nil || len(req.Volumes) > 0):
		return nil, invalid("a fork child (fork_of) takes its parent's env and egress, and has no volumes")
	}
	tpl, g, err := a.source(&req)
	if err != nil {
		return nil, err
	}
	mounts, err := a.checkMounts(req.Volumes)
	if err != nil {
		return nil, err
	}
	var copies []agentclient.SnapshotVolume
	if req.SnapshotID != "" {
		if copies = a.snapshots[req.SnapshotID].Volumes; len(copies) > 0 && len(mounts) > 0 {
			return nil, conflict("snapshot %s restores with copies of its %d volumes in their slots; no other volumes can be attached to a sandbox made from it", req.SnapshotID, len(copies))
		}
	} else if copies = tpl.Volumes; len(copies) > 0 && len(mounts) > 0 {
		// Attached volumes go in the slots after the data volume's copy, mounted beside it.
		for i, m := range mounts {
			if slices.ContainsFunc(copies, func(c agentclient.SnapshotVolume) bool {
				return within(m.MountPath, c.MountPath) || within(c.MountPath, m.MountPath)
			}) {
				return nil, invalid("volumes[%d].mount_path %q overlaps where template %s mounts its data volume", i, m.MountPath, tpl.Name)
			}
		}
		if len(copies)+len(mounts) > agentclient.MaxVolumesPerSandbox {
			return nil, invalid("at most %d volumes per sandbox, got %d besides template %s's data volume", agentclient.MaxVolumesPerSandbox-len(copies), len(mounts), tpl.Name)
		}
	}
	if req.ID == "" {
		req.ID = a.newID("sb_fake")
	}
	if _, dup := a.sandboxes[req.ID]; dup {
		return nil, conflict("sandbox %s already exists", req.ID)
	}
	if err := a.checkAttach(mounts); err != nil {
		return nil, err
	}
	if int64(len(a.sandboxes)) >= a.slotsTotal {
		a.refused++
		return nil, apiErr(503, "capacity", "no free slot")
	}
	attached := mounts
	if len(copies) > 0 { // already mounted in the snapshot's (template's) guest: new volumes from its files
		made, err := a.volumesFrom(copies, g, 1)
		if err != nil {
			return nil, err
		}
		mounts = append(made, attached...)
	}
	sb := a.newSandbox(req.ID, tpl, g)
	sb.SnapshotID, sb.env, sb.mounts, sb.Volumes = req.SnapshotID, req.Env, mounts, mounts
	if req.ForkOf != "" { // a fork child made on another host: the snapshot's env, as a fork's
		sb.SnapshotID, sb.ForkOf, sb.env = "", req.ForkOf, a.snapshots[req.SnapshotID].Env
	}
	a.mount(sb, attached)
	a.sandboxes[sb.ID] = sb
	a.creates++
	return created{sb.Sandbox}, nil
}

// source is what a create starts from: a template's fresh guest, or a snapshot's guest (whose
// sandbox's env is not carried: the create's is the only one, as on the real agent).
func (a *Agent) source(req *agentclient.CreateRequest) (agentclient.Template, guest, *agentclient.Error) {
	switch {
	case req.SnapshotID != "":
		sn, ok := a.snapshots[req.SnapshotID]
		if !ok && a.blob != nil { // pulled from the blob store, as the real agent does
			var pulled snapshot
			if pulled, ok = a.blob.snaps.get(req.SnapshotID); ok {
				sn = &pulled
				a.snapshots[sn.ID] = sn
			}
		}
		if !ok || sn.deleted {
			return agentclient.Template{}, guest{}, notFound("snapshot %s not found", req.SnapshotID)
		}
		if req.Template != "" && req.Template != sn.Template {
			return agentclient.Template{}, guest{}, invalid("snapshot %s is of template %s, not %s", sn.ID, sn.Template, req.Template)
		}
		return agentclient.Template{Name: sn.Template, VCPUs: sn.VCPUs, MemoryMiB: sn.MemoryMiB}, sn.guest.clone(), nil
	case req.Template != "":
		name := template.Canonical(req.Template) // like the real agent, it takes aliases
		if !a.knows(name) {
			return agentclient.Template{}, guest{}, notFound("template %s not found", name)
		}
		return a.template(name), guest{fs: newFS()}, nil
	}
	return agentclient.Template{}, guest{}, invalid("template (or snapshot_id) is required")
}

// sandbox returns the sandbox named in the path, in any state.
func (a *Agent) sandbox(r *http.Request) (*sandbox, *agentclient.Error) {
	sb, ok := a.sandboxes[r.PathValue("id")]
	if !ok {
		return nil, notFound("sandbox %s not found", r.PathValue("id"))
	}
	return sb, nil
}

// awake returns the sandbox, waking it first when it is hibernated (every exec, files, fork and
// snapshot call does, as on the real agent). A wake that fails leaves it in state error.
func (a *Agent) awake(r *http.Request) (*sandbox, *agentclient.Error) {
	sb, err := a.sandbox(r)
	if err != nil || sb.State != agentclient.StateHibernated {
		return sb, err
	}
	if sb.noWake {
		sb.noWake = false
		sb.State, sb.Error = agentclient.StateError, "wake failed: sandbox "+sb.ID+": snapshot files missing"
		return nil, conflict("sandbox %s could not be woken: snapshot files missing", sb.ID)
	}
	a.seq++
	sb.State, sb.PID, sb.Hibernated = agentclient.StateRunning, 1000+a.seq, ""
	return sb, nil
}

// adopt takes over a sandbox hibernated on another host from its publication, and wakes it.
func (a *Agent) adopt(req agentclient.CreateRequest) (any, *agentclient.Error) {
	switch {
	case req.Template != "" || req.SnapshotID != "" || req.ForkOf != "" || len(req.Env) > 0 || req.Egress != nil || len(req.Volumes) > 0:
		return nil, invalid("hibernated adopts a sandbox as it was: nothing but id may be given with it")
	case a.blob == nil:
		return nil, conflict("this host has no blob store to adopt sandbox %s from", req.ID)
	case !strings.HasPrefix(req.Hibernated, req.ID+"-"):
		return nil, invalid("hibernated %q does not name a publication of sandbox %q", req.Hibernated, req.ID)
	}
	if _, dup := a.sandboxes[req.ID]; dup {
		return nil, conflict("sandbox %s already exists on this host", req.ID)
	}
	adopted, ok := a.blob.hibernated.get(req.Hibernated)
	sb := &adopted
	if !ok {
		return nil, notFound("artifact hibernated/%s is not in the blob store", req.Hibernated)
	}
	// Its volumes, made here from the copies it carried, under the ids it mounts them by.
	for _, c := range sb.carried {
		if _, dup := a.volumes[c.VolumeID]; dup {
			return nil, conflict("volume %s already exists on this host", c.VolumeID)
		}
	}
	for _, c := range sb.carried {
		a.volumes[c.VolumeID] = &volume{Volume: agentclient.Volume{ID: c.VolumeID, SizeMiB: c.SizeMiB, CreatedAt: time.Now().UTC()},
			files: filesUnder(sb.fs, c.MountPath)}
	}
	a.seq++
	sb.State, sb.PID, sb.Hibernated, sb.order, sb.carried = agentclient.StateRunning, 1000+a.seq, "", a.seq, nil
	a.sandboxes[sb.ID] = sb
	a.creates++
	return created{sb.Sandbox}, nil
}

// live is awake for calls that need a running guest.
func (a *Agent) live(r *http.Request) (*sandbox, *agentclient.Error) {
	sb, err := a.awake(r)
	switch {
	case err != nil:
		return nil, err
	case sb.State == agentclient.StateError:
		return nil, conflict("sandbox %s is in state error: %s", sb.ID, sb.Error)
	case sb.State != agentclient.StateRunning:
		return nil, conflict("sandbox %s is %s", sb.ID, sb.State)
	}
	return sb, nil
}

// listSandboxes lists every sandbox, oldest first.
func (a *Agent) listSandboxes(*http.Request) (any, *agentclient.Error) {
	all := slices.Collect(maps.Values(a.sandboxes))
	slices.SortFunc(all, func(x, y *sandbox) int { return x.order - y.order })
	out := []agentclient.Sandbox{}
	for _, sb := range all {
		out = append(out, sb.Sandbox)
	}
	return map[string]any{"sandboxes": out}, nil
}

func (a *Agent) getSandbox(r *http.Request) (any, *agentclient.Error) { return view(a.sandbox(r)) }

// view is a sandbox's API view, or the error.
func view(sb *sandbox, err *agentclient.Error) (any, *agentclient.Error) {
	if err != nil {
		return nil, err
	}
	return sb.Sandbox, nil
}

// kill removes the sandbox and its files, hibernated or not; an unknown one is not an error.
func (a *Agent) kill(r *http.Request) (any, *agentclient.Error) {
	sb, ok := a.sandboxes[r.PathValue("id")]
	if a.onKill != nil {
		a.onKill(r.PathValue("id"), ok)
	}
	if ok {
		a.flushVolumes(sb)
		delete(a.sandboxes, sb.ID)
		a.kills++
	}
	return nil, nil
}

func (a *Agent) hibernate(r *http.Request) (any, *agentclient.Error) {
	sb, err := a.sandbox(r)
	switch {
	case err != nil:
		return nil, err
	case sb.State == agentclient.StateRunning:
		sb.State, sb.PID = agentclient.StateHibernated, 0
		if a.blob != nil && copyable(sb) == nil { // published with copies of its volumes, as the real agent does with a store
			a.seq++
			sb.Hibernated = sb.ID + "-" + strconv.Itoa(a.seq)
			pub := *sb
			pub.carried = a.snapshotVolumes(sb)
			a.blob.hibernated.put(sb.Hibernated, pub)
		}
	case sb.State != agentclient.StateHibernated:
		return nil, conflict("sandbox %s is %s", sb.ID, sb.State)
	}
	return sb.Sandbox, nil
}

func (a *Agent) wake(r *http.Request) (any, *agentclient.Error) { return view(a.awake(r)) }

// copyable refuses a snapshot or fork of a sandbox with a read-only volume, as the real agent
// does (its guest reads it through an overlay the host cannot copy).
func copyable(sb *sandbox) *agentclient.Error {
	for _, m := range sb.mounts {
		if m.ReadOnly {
			return conflict("sandbox %s has volume %s attached read-only at %s: snapshots and forks of it are refused", sb.ID, m.VolumeID, m.MountPath)
		}
	}
	return nil
}

func (a *Agent) snapshot(r *http.Request) (any, *agentclient.Error) {
	sb, err := a.live(r)
	if err == nil {
		err = copyable(sb)
	}
	if err != nil {
		return nil, err
	}
	sn := &snapshot{Snapshot: agentclient.Snapshot{ID: a.newID("snap_fake"), SandboxID: sb.ID, Template: sb.Template,
		CreatedAt: time.Now().UTC(), VCPUs: sb.VCPUs, MemoryMiB: sb.MemoryMiB, SizeBytes: 4096, Env: sb.env,
		Volumes: a.snapshotVolumes(sb)}, guest: sb.guest.clone()}
	for _, n := range sn.fs {
		sn.SizeBytes += int64(len(n.data))
	}
	if a.blob != nil { // published with its volume copies, as the real agent does when it has a blob store
		sn.Published = true
		a.blob.snaps.put(sn.ID, *sn)
	}
	a.snapshots[sn.ID] = sn
	return created{sn.Snapshot}, nil
}

func (a *Agent) listSnapshots(*http.Request) (any, *agentclient.Error) {
	out := []agentclient.Snapshot{}
	for _, sn := range a.snapshots {
		if !sn.deleted {
			out = append(out, sn.Snapshot)
		}
	}
	slices.SortFunc(out, func(x, y agentclient.Snapshot) int { return x.CreatedAt.Compare(y.CreatedAt) })
	return map[string]any{"snapshots": out}, nil
}

func (a *Agent) liveSnapshot(r *http.Request) (*snapshot, *agentclient.Error) {
	sn, ok := a.snapshots[r.PathValue("id")]
	if !ok || sn.deleted {
		return nil, notFound("snapshot %s not found", r.PathValue("id"))
	}
	return sn, nil
}

func (a *Agent) getSnapshot(r *http.Request) (any, *agentclient.Error) {
	sn, err := a.liveSnapshot(r)
	if err != nil {
		return nil, err
	}
	return sn.Snapshot, nil
}

// deleteSnapshot hides it; sandboxes made from it keep working (they hold their own copy here).
func (a *Agent) deleteSnapshot(r *http.Request) (any, *agentclient.Error) {
	sn, err := a.liveSnapshot(r)
	if err == nil {
		sn.deleted = true
	}
	return nil, err
}

// fork makes count children of the parent's guest, all or none.
func (a *Agent) fork(r *http.Request) (any, *agentclient.Error) {
	var req struct {
		Count *int `json:"count"`
	}
	if r.ContentLength != 0 {
		if err := decode(r, &req); err != nil {
			return nil, err
		}
	}
	count := 1
	if req.Count != nil {
		count = *req.Count
	}
	if count < 1 || count > agentclient.MaxForkCount {
		return nil, invalid("count must be 1-%d", agentclient.MaxForkCount)
	}
	parent, err := a.live(r)
	switch {
	case err != nil:
	case copyable(parent) != nil:
		err = copyable(parent)
	case a.forkErr != nil:
		err = a.forkErr
	case int64(len(a.sandboxes)+count) > a.slotsTotal:
		err = apiErr(503, "capacity", "no room for the children")
	}
	if err != nil {
		return nil, err
	}
	ids := make([]string, count)
	for i := range ids {
		if len(a.forkIDs) > 0 {
			ids[i], a.forkIDs = a.forkIDs[0], a.forkIDs[1:]
		} else {
			ids[i] = a.newID("sb_fake")
		}
		if _, dup := a.sandboxes[ids[i]]; dup {
			return nil, conflict("fork of %s failed, no child kept: sandbox %s exists", parent.ID, ids[i])
		}
	}
	copies := a.snapshotVolumes(parent)
	mounts, err := a.volumesFrom(copies, parent.guest, count)
	if err != nil {
		return nil, err
	}
	children := make([]agentclient.Sandbox, count)
	for i, id := range ids {
		c := a.newSandbox(id, agentclient.Template{Name: parent.Template, VCPUs: parent.VCPUs, MemoryMiB: parent.MemoryMiB}, parent.guest.clone())
		c.ForkOf, c.env = parent.ID, parent.env
		c.mounts = mounts[i*len(copies) : (i+1)*len(copies)]
		c.Volumes = c.mounts
		a.sandboxes[id] = c
		children[i] = c.Sandbox
	}
	return created{map[string]any{"sandboxes": children}}, nil
}

// fileCall is a files endpoint: op gets the (woken) sandbox and the clean ?path=.
func (a *Agent) fileCall(op func(sb *sandbox, p string, r *http.Request) (any, *agentclient.Error)) call {
	return func(r *http.Request) (any, *agentclient.Error) {
		sb, err := a.live(r)
		var p string
		if err == nil {
			p, err = pathArg(r.URL.Query().Get("path"))
		}
		if err != nil {
			return nil, err
		}
		return op(sb, p, r)
	}
}

// bodyCall is a files endpoint whose paths come in a JSON body (mkdir, move): op gets the
// (woken) sandbox; the answer is 204.
func (a *Agent) bodyCall(body any, op func(sb *sandbox) *agentclient.Error) call {
	return func(r *http.Request) (any, *agentclient.Error) {
		err := decode(r, body)
		var sb *sandbox
		if err == nil {
			sb, err = a.live(r)
		}
		if err == nil {
			err = op(sb)
		}
		return nil, err
	}
}

// change cleans paths, refuses those under a read-only mount (EROFS on a real guest) and
// applies op to the clean ones.
func (sb *sandbox) change(op func(ps ...string) *agentclient.Error, paths ...string) *agentclient.Error {
	clean := make([]string, len(paths))
	for i, p := range paths {
		var err *agentclient.Error
		if clean[i], err = pathArg(p); err != nil {
			return err
		}
		for _, m := range sb.mounts {
			if m.ReadOnly && within(clean[i], m.MountPath) {
				return apiErr(403, "forbidden", "read-only file system: %s", clean[i])
			}
		}
	}
	var before memFS
	if len(sb.watches) > 0 {
		before = sb.fs.clone()
	}
	sb.moved = nil
	err := op(clean...)
	if err == nil && before != nil {
		sb.notify(before, sb.moved)
	}
	return err
}

func readFile(sb *sandbox, p string, _ *http.Request) (any, *agentclient.Error) { return sb.fs.read(p) }

func writeFile(sb *sandbox, p string, r *http.Request) (any, *agentclient.Error) {
	err := sb.change(func(ps ...string) *agentclient.Error {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return invalid("%v", err)
		}
		return sb.fs.write(p, b)
	}, p)
	st, _ := sb.fs.stat(p)
	return st, err
}

func removeFile(sb *sandbox, p string, r *http.Request) (any, *agentclient.Error) {
	return nil, sb.change(func(ps ...string) *agentclient.Error {
		return sb.fs.remove(p, r.URL.Query().Get("recursive") == "true")
	}, p)
}

func listFiles(sb *sandbox, p string, r *http.Request) (any, *agentclient.Error) {
	depth := 1
	if d := r.URL.Query().Get("depth"); d != "" {
		if depth, _ = strconv.Atoi(d); depth < 1 || depth > 10 {
			return nil, invalid("depth must be 1-10")
		}
	}
	entries, err := sb.fs.list(p, depth)
	return map[string]any{"entries": entries}, err
}

func statFile(sb *sandbox, p string, _ *http.Request) (any, *agentclient.Error) {
	if st, ok := sb.fs.stat(p); ok {
		return st, nil
	}
	return nil, notFound("no such file: %s", p)
}

func (a *Agent) mkdir(r *http.Request) (any, *agentclient.Error) {
	var req struct {
		Path string `json:"path"`
		User string `json:"user,omitempty"`
	}
	return a.bodyCall(&req, func(sb *sandbox) *agentclient.Error {
		return sb.change(func(ps ...string) *agentclient.Error { return sb.fs.mkdir(ps[0]) }, req.Path)
	})(r)
}

func (a *Agent) move(r *http.Request) (any, *agentclient.Error) {
	var req struct {
		From string `json:"from"`
		To   string `json:"to"`
		User string `json:"user,omitempty"`
	}
	return a.bodyCall(&req, func(sb *sandbox) *agentclient.Error {
		return sb.change(func(ps ...string) *agentclient.Error {
			err := sb.fs.move(ps[0], ps[1])
			if err == nil && ps[0] != ps[1] {
				sb.moved = &[2]string{ps[0], ps[1]}
			}
			return err
		}, req.From, req.To)
	})(r)
}

// metrics answers a running sandbox's figures: its size from the create, disk use from its files,
// and a CPU share that grows with the processes it runs. A hibernated one has none (as on a host).
func (a *Agent) metrics(r *http.Request) (any, *agentclient.Error) {
	sb, err := a.sandbox(r)
	if err != nil {
		return nil, err
	}
	if sb.State != agentclient.StateRunning {
		return nil, conflict("sandbox %s is %s", sb.ID, sb.State)
	}
	mem := int64(sb.MemoryMiB) << 20
	out := agentclient.SandboxMetrics{At: time.Now().UTC().Format(time.RFC3339Nano), VCPUs: sb.VCPUs,
		CPUUsedPct: min(100, float64(1+len(sb.procs))), MemTotalBytes: mem, MemUsedBytes: mem / 4, MemCacheBytes: mem / 8,
		DiskTotalBytes: 1 << 30, DiskUsedBytes: 64 << 20, HostCPUSeconds: 0.5, HostMemBytes: mem / 3}
	for _, n := range sb.fs {
		out.DiskUsedBytes += int64(len(n.data))
	}
	return out, nil
}
