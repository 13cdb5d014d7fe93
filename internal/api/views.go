package api

import (
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/network"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/template"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// The public objects are internal/wire/v1's; this file turns records into them.

// list converts records to their views; never null on the wire.
func list[R, V any](recs []R, view func(R) V) []V {
	out := make([]V, 0, len(recs))
	for _, r := range recs {
		out = append(out, view(r))
	}
	return out
}

// cursor is a page's next_cursor: null at the end.
func cursor(next string) *string {
	if next == "" {
		return nil
	}
	return &next
}

func viewOf(sb store.Sandbox) v1.Sandbox {
	v := v1.Sandbox{ID: sb.ID, Template: sb.Template, State: sb.State, CreatedAt: v1.Timestamp(sb.CreatedAt),
		ExpiresAt: v1.Timestamp(sb.ExpiresAt), Metadata: sb.Metadata, Host: sb.HostID, ForkOf: sb.ForkOf, SnapshotID: sb.SnapshotID,
		PublicPorts: sb.TrafficTokenHash == ""}
	if sb.State == store.StateError || sb.State == store.StateLost {
		v.Error = sb.Error
	}
	v.Metadata = orEmptyMap(v.Metadata)
	return v
}

func snapshotViewOf(sn store.Snapshot) v1.Snapshot {
	return v1.Snapshot{ID: sn.ID, SandboxID: sn.SandboxID, Template: sn.Template, CreatedAt: v1.Timestamp(sn.CreatedAt), SizeBytes: sn.SizeBytes,
		Published: sn.Published}
}

func volumeViewOf(v store.Volume) v1.Volume {
	return v1.Volume{ID: v.ID, Name: v.Name, SizeMiB: v.SizeMiB, HostID: v.HostID, CreatedAt: v1.Timestamp(v.CreatedAt),
		Attachments: list(v.Attachments, func(a store.VolumeAttachment) v1.VolumeAttachment {
			return v1.VolumeAttachment{SandboxID: a.SandboxID, MountPath: a.MountPath, ReadOnly: a.ReadOnly}
		})}
}

// optTime is a nullable timestamp: null for the zero time.
func optTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := v1.Timestamp(t)
	return &s
}

func keyView(k store.APIKey, secret string) v1.Key {
	return v1.Key{ID: k.ID, Name: k.Name, Prefix: k.Prefix + "…", Admin: k.Admin, TeamID: k.TeamID,
		CreatedAt: v1.Timestamp(k.CreatedAt), Key: secret, Scopes: auth.EffectiveScopes(k),
		RevokedAt: optTime(k.RevokedAt), ExpiresAt: optTime(k.ExpiresAt)}
}

func rangeViews(rs []network.Range) []v1.Range {
	out := make([]v1.Range, len(rs))
	for i, r := range rs {
		out[i] = v1.Range{Range: r.Prefix.String(), Why: r.Why}
	}
	return out
}

func catalogView(t store.Template, up []store.Host) v1.Template {
	v := v1.Template{Name: t.Name, Owner: v1.OwnerCatalog, Description: t.Description, VCPUs: t.VCPUs,
		MemoryMiB: t.MemoryMiB, DiskMiB: t.DiskMiB, SizeBytes: t.SizeBytes, BakeMS: t.BakeMS, Aliases: t.Aliases, Metadata: t.Metadata}
	for _, h := range up {
		v.Available = v.Available || slices.Contains(h.Templates, t.Name)
		v.Baked = v.Baked || slices.Contains(h.Baked, t.Name)
	}
	return fillView(v)
}

func teamView(t store.TeamTemplate, up []store.Host) v1.Template {
	v := v1.Template{Name: t.Name, Owner: v1.OwnerTeam, Description: t.Description, VCPUs: t.VCPUs, MemoryMiB: t.MemoryMiB,
		DiskMiB: t.DiskMiB, SizeBytes: t.SizeBytes, BakeMS: t.BakeMS, CreatedAt: v1.Timestamp(t.CreatedAt), UpdatedAt: v1.Timestamp(t.UpdatedAt)}
	if spec, err := template.Parse([]byte(t.Spec)); err == nil {
		v.Metadata = spec.Metadata
	}
	for _, h := range up {
		if h.ID == t.HostID {
			v.Available = slices.Contains(h.Templates, t.AgentName)
			v.Baked = slices.Contains(h.Baked, t.AgentName)
		}
	}
	return fillView(v)
}

// fillView makes aliases and metadata empty rather than null.
func fillView(v v1.Template) v1.Template {
	v.Aliases, v.Metadata = orEmpty(v.Aliases), orEmptyMap(v.Metadata)
	return v
}

// ndjson writes an NDJSON answer, starting it (200) with the first line and flushing each line.
type ndjson struct {
	w       http.ResponseWriter
	started bool
}

func (n *ndjson) send(v any) {
	if !n.started {
		n.w.Header().Set("Content-Type", "application/x-ndjson")
		n.w.WriteHeader(http.StatusOK)
		n.started = true
	}
	enc := json.NewEncoder(n.w)
	enc.SetEscapeHTML(false)
	enc.Encode(v) // a client gone away is seen by the caller's context
	http.NewResponseController(n.w).Flush()
}

// builtTemplateView is a team template as a template.built event shows it (no host state).
func builtTemplateView(t store.TeamTemplate) v1.Template { return teamView(t, nil) }
