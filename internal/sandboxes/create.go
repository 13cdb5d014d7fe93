package sandboxes

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/faultpoint"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/network"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/timing"
)

// CreateTimeout bounds one create on a host: the first create of a template bakes it, which can
// take minutes on a software-emulated CPU.
const CreateTimeout = 15 * time.Minute

// CreateParams is a validated create. Exactly one of Template (with AgentTemplate) or Snapshot
// says what the sandbox starts from.
type CreateParams struct {
	// Template is the name recorded (and shown); AgentTemplate the one its host knows it by (a
	// team template's agent name, a catalog alias's canonical name). For a snapshot both are the
	// snapshot's template (AgentTemplate may be a team template's agent name: its memory size).
	Template, AgentTemplate string
	// TemplateHost is set for a team template: only that host has it.
	TemplateHost string
	// Snapshot, when set, is the caller's snapshot the sandbox starts from: on its host, or on any
	// host when it is published.
	Snapshot *store.Snapshot
	// Volumes are the caller's volumes to attach (SandboxID not set); the sandbox runs on their
	// host. With a template that has a data volume they go in the slots after its copy.
	Volumes []store.VolumeAttachment
	// AttachOwner is the owner of Volumes: "" the team's own; a service attaches volumes it owns
	// (store.OwnerDatabase: a database's volume given back to a new VM of it).
	AttachOwner string
	Env         map[string]string
	Egress      *network.Egress
	Metadata    map[string]string
	TTLSeconds  int64 // 0: the default
	// Host, when set, is the one host the sandbox may run on (an operator's pin).
	Host string
	// TrafficTokenHash makes the sandbox's ports private: the port proxy asks for the token
	// whose auth.Hash this is. "": public ports.
	TrafficTokenHash string
	// Owner marks a sandbox a control-plane service made for its own use (store.OwnerFunction):
	// it and its snapshots stay out of the team's plain lists. "": the team's own.
	Owner string
	// VolumeOwner owns the volumes the host makes for the sandbox (copies of its template's data
	// volume or of its snapshot's volumes): store.OwnerDatabase for a database's. "": the team's.
	VolumeOwner string
}

// Create places a sandbox, asks its host to start it and records it running. From a template it
// tries the next candidate host when one is full or does not answer (a published snapshot's host
// first, where its files are); from a snapshot that is not published, or with volumes, only one
// host can start it. The work runs detached from ctx's cancellation, so a caller
// that goes away cannot leave a VM running that the store does not know.
func (s *Service) Create(ctx context.Context, teamID string, p CreateParams) (store.Sandbox, error) {
	own := timing.From(ctx) == nil // a caller's trace (a function invocation's) has these steps too
	ctx, tr := timing.Ensure(ctx)
	var copies []VolumeCopy
	var err error
	if p.Snapshot != nil {
		copies, err = s.SnapshotVolumes(ctx, *p.Snapshot)
		if err == nil && len(copies) > 0 && len(p.Volumes) > 0 {
			err = errdefs.Conflictf("snapshot %s restores with copies of its %d volumes: a sandbox made from it takes no other volumes", p.Snapshot.ID, len(copies))
		}
		if err != nil {
			return store.Sandbox{}, err
		}
	} else {
		copies = s.TemplateVolumes(p.AgentTemplate, p.Template)
	}
	hosts, mem, err := s.place(ctx, teamID, p)
	if err != nil {
		return store.Sandbox{}, err
	}
	timing.Mark(ctx, "place")
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CreateTimeout)
	defer cancel()
	sbID := auth.NewID("sb_")
	areq := agentclient.CreateRequest{ID: sbID, Template: p.AgentTemplate, Env: s.withGuestCAEnv(p.Env), Egress: p.Egress, EgressOpen: s.egressOpen}
	rec := store.Sandbox{ID: sbID, TeamID: teamID, Template: p.Template, Metadata: p.Metadata, TTLSeconds: p.TTLSeconds,
		TrafficTokenHash: p.TrafficTokenHash, Owner: p.Owner}
	if p.Snapshot != nil {
		areq.Template, areq.SnapshotID = "", p.Snapshot.ID
		rec.Template, rec.SnapshotID = p.Snapshot.Template, p.Snapshot.ID
	}
	vols := make([]store.VolumeAttachment, len(p.Volumes))
	for i, v := range p.Volumes {
		v.SandboxID = sbID
		vols[i] = v
		areq.Volumes = append(areq.Volumes, agentclient.VolumeMount{VolumeID: v.VolumeID, MountPath: v.MountPath, ReadOnly: v.ReadOnly})
	}
	var host store.Host
	var made agentclient.Sandbox
	err = s.tryHosts("a sandbox", hosts, []string{"capacity"}, func(h store.Host) error {
		made, err = s.createOn(ctx, h, mem, areq)
		if err != nil {
			return err
		}
		host = h
		return nil
	})
	if err != nil {
		return store.Sandbox{}, err
	}
	faultpoint.Reach("server.create.started") // the VM runs, its record is not written yet
	made.ID = sbID
	source := host.ID + "/template/" + p.AgentTemplate
	if p.Snapshot != nil {
		source = host.ID + "/snapshot/" + p.Snapshot.ID
	}
	if err := s.installGuestCA(ctx, s.sched.Client(host), sbID, source); err != nil {
		if p.Snapshot != nil { // a snapshot's guest may be the team's doing (a full disk): it still starts
			s.log.Warn("sandbox restored without the extra CA certificates", "sandbox", sbID, "snapshot", p.Snapshot.ID, "err", err)
		} else {
			s.dropUnrecorded(ctx, s.sched.Client(host), host.ID, []agentclient.Sandbox{made}, vols)
			return store.Sandbox{}, err
		}
	}
	timing.Mark(ctx, "host_create")
	rec.HostID = host.ID
	out, err := s.record(ctx, host, rec, vols, made, copies, p.VolumeOwner)
	timing.Mark(ctx, "sandbox_record")
	if own && err == nil && s.log.Enabled(ctx, slog.LevelDebug) {
		s.log.Debug("sandbox created", append([]any{"sandbox", sbID, "host", host.ID}, tr.LogArgs()...)...)
	}
	if errors.Is(err, store.ErrNotFound) && len(vols) > 0 {
		err = errdefs.NotFoundf("a volume of this sandbox was deleted meanwhile")
	}
	return out, InUse(err, "another create took it meanwhile")
}

// place returns the candidate hosts of a create, best first, and the guest memory to reserve.
func (s *Service) place(ctx context.Context, teamID string, p CreateParams) ([]store.Host, int64, error) {
	hostID := p.TemplateHost // a team template: only its host has it
	if p.Snapshot != nil && !p.Snapshot.Published {
		hostID = p.Snapshot.HostID // the only host that keeps the snapshot
	}
	if len(p.Volumes) > 0 {
		volHost, err := s.resolveVolumes(ctx, teamID, p.AttachOwner, p.Volumes)
		if err != nil {
			return nil, 0, err
		}
		switch {
		case p.Snapshot != nil && !p.Snapshot.Published && p.Snapshot.HostID != volHost:
			return nil, 0, errdefs.Conflictf("snapshot %s is on host %s but the volumes are on %s: a sandbox runs where its volumes are", p.Snapshot.ID, p.Snapshot.HostID, volHost)
		case p.Snapshot == nil && p.TemplateHost != "" && p.TemplateHost != volHost:
			return nil, 0, errdefs.Conflictf("template %s is on host %s but the volumes are on %s: a sandbox runs where its volumes are", p.Template, p.TemplateHost, volHost)
		}
		hostID = volHost
	}
	if p.Host != "" {
		if hostID != "" && hostID != p.Host {
			return nil, 0, errdefs.Conflictf("this sandbox can only run on host %s (where its snapshot, team template or volumes are), not on %s", hostID, p.Host)
		}
		hostID = p.Host
	}
	mem := s.sched.TemplateMemMiB(ctx, p.AgentTemplate)
	if hostID == "" {
		hosts, err := s.sched.Place(ctx, p.AgentTemplate)
		if p.Snapshot != nil { // published: where it was taken first, it need not be pulled there
			hosts = firstIfAmong(hosts, p.Snapshot.HostID)
		}
		return hosts, mem, err
	}
	h, err := s.sched.PlaceOn(ctx, hostID, 1, mem)
	if err == nil && p.Snapshot == nil && p.TemplateHost == "" && !slices.Contains(h.Templates, p.AgentTemplate) {
		err = errdefs.Capacityf("host %s cannot run template %s (it has %s)", h.ID, p.AgentTemplate, strings.Join(h.Templates, ", "))
	}
	return []store.Host{h}, mem, err
}

// createOn creates req on host h under a reservation of memMiB there, kept when the host made it.
func (s *Service) createOn(ctx context.Context, h store.Host, memMiB int64, req agentclient.CreateRequest) (agentclient.Sandbox, error) {
	done, err := s.sched.Reserve(h.ID, memMiB)
	if err != nil {
		return agentclient.Sandbox{}, err
	}
	made, err := s.sched.Client(h).CreateSandbox(ctx, req)
	done(err == nil)
	return made, err
}

// firstIfAmong moves the host with id to the front of hosts, if it is among them.
func firstIfAmong(hosts []store.Host, id string) []store.Host {
	i := slices.IndexFunc(hosts, func(h store.Host) bool { return h.ID == id })
	if i > 0 {
		h := hosts[i]
		hosts = slices.Insert(slices.Delete(hosts, i, i+1), 0, h)
	}
	return hosts
}

// record stores a sandbox its host has just started (made: running, created now, expiring after
// its ttl policy), with its volumes (checked again as they are recorded), and the copies of a
// snapshot's volumes (or of its template's data volume) its host made for it. When the store
// fails the VM is killed (an unrecorded VM is a leak), and the copies are deleted (never the
// volumes the caller attached). The copies are owned by volumeOwner ("": the team's).
func (s *Service) record(ctx context.Context, h store.Host, sb store.Sandbox, vols []store.VolumeAttachment, made agentclient.Sandbox, copies []VolumeCopy, volumeOwner string) (store.Sandbox, error) {
	now := s.clock()
	sb.State, sb.CreatedAt, sb.ExpiresAt = store.StateRunning, now, now.Add(s.TTL(sb.TTLSeconds))
	madeCopies := withoutAttached(made, vols)
	newVols, atts, err := s.copiedVolumes(sb.TeamID, h.ID, []agentclient.Sandbox{madeCopies}, copies, volumeOwner)
	// Volumes nobody asked for: the copy of a template's data volume the host made before this
	// control plane heard of the volume (no quota was held for it). Dropped, not recorded.
	unasked := len(copies) == 0 && len(madeCopies.Volumes) > 0
	if err == nil && unasked {
		err = errdefs.Capacityf("template %s has a data volume its host has not reported yet; try again", sb.Template)
	}
	var out []store.Sandbox
	if err == nil {
		out, err = s.store.CreateSandboxesWithVolumes(ctx, []store.Sandbox{sb}, newVols, append(vols, atts...))
	}
	if err != nil {
		s.dropUnrecorded(ctx, s.sched.Client(h), h.ID, []agentclient.Sandbox{made}, vols)
		return store.Sandbox{}, err
	}
	return out[0], nil
}

// withoutAttached is made with only the volumes its host made for it (copies), not those of
// attached.
func withoutAttached(made agentclient.Sandbox, attached []store.VolumeAttachment) agentclient.Sandbox {
	made.Volumes = slices.DeleteFunc(slices.Clone(made.Volumes), func(m agentclient.VolumeMount) bool {
		return slices.ContainsFunc(attached, func(a store.VolumeAttachment) bool { return a.VolumeID == m.VolumeID })
	})
	return made
}
