package agenttest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/template"
)

// The template build API of the real agent (internal/hostagent/build.go), without VMs: a build
// "runs" each step by printing it, and a step that is exactly `false` or `exit N` (N ≠ 0) fails
// it with build_failed, as a failing step fails the real build. Nothing changes on a failed
// build.

// BuiltSpec returns the spec a template was built from through the API (as the agent got it).
func (a *Agent) BuiltSpec(name string) (template.Spec, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.built[name]
	return s, ok
}

// SandboxTemplate returns the template a sandbox on this host was created from ("" if none).
func (a *Agent) SandboxTemplate(id string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if sb, ok := a.sandboxes[id]; ok {
		return sb.Template
	}
	return ""
}

// HoldBuilds makes builds stop after their first progress line until release is called (to see
// progress arrive while a build is still running). release may be called more than once.
func (a *Agent) HoldBuilds() (release func()) {
	ch := make(chan struct{})
	a.mu.Lock()
	a.buildGate = ch
	a.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			if a.buildGate == ch {
				a.buildGate = nil
			}
			a.mu.Unlock()
			close(ch)
		})
	}
}

func (a *Agent) knows(name string) (agentclient.Template, bool) {
	for _, t := range a.templates {
		if t.Name == name {
			return t, true
		}
	}
	return agentclient.Template{}, false
}

func (a *Agent) buildTemplate(w http.ResponseWriter, r *http.Request) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 2*template.MaxSpecBytes))
	if err != nil {
		writeErr(w, 400, "invalid_request", "spec: "+err.Error())
		return
	}
	spec, err := template.Parse(data)
	if err == nil {
		err = spec.Validate()
	}
	if err != nil {
		writeErr(w, 400, "invalid_request", err.Error())
		return
	}
	if _, ok := template.CatalogSpec(spec.Name); ok {
		writeErr(w, 409, "conflict", "template "+spec.Name+" is a catalog template: pick another name")
		return
	}
	a.mu.Lock()
	_, wasBuilt := a.built[spec.Name]
	_, known := a.knows(spec.Name)
	parent, parentKnown := a.knows(spec.From)
	gate := a.buildGate
	a.mu.Unlock()
	if known && !wasBuilt {
		writeErr(w, 409, "conflict", "template "+spec.Name+" is defined by this agent's configuration")
		return
	}
	if !strings.HasPrefix(spec.From, "debian:") && !parentKnown {
		writeErr(w, 400, "invalid_request", fmt.Sprintf("template %s: from %q: no such template", spec.Name, spec.From))
		return
	}
	a.mu.Lock()
	maxCPU, maxMem := a.maxVCPUs, a.memTotal/2
	a.mu.Unlock()
	if int64(spec.VCPUs) > maxCPU || int64(spec.MemoryMiB) > maxMem { // like the real agent's limits
		writeErr(w, 400, "invalid_request", fmt.Sprintf("template %s is larger than this host's limits (max_vcpus %d, max_memory_mib %d)", spec.Name, maxCPU, maxMem))
		return
	}

	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(200)
	enc := json.NewEncoder(w)
	send := func(v any) {
		enc.Encode(v)
		http.NewResponseController(w).Flush()
	}
	send(map[string]string{"progress": "building template " + spec.Name + " from " + spec.From})
	if gate != nil {
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
	}
	for i, st := range spec.Steps {
		send(map[string]string{"progress": fmt.Sprintf("step %d/%d: %s", i+1, len(spec.Steps), st)})
		if st == "false" || strings.HasPrefix(st, "exit ") && st != "exit 0" {
			send(map[string]any{"error": map[string]string{"code": "build_failed",
				"message": fmt.Sprintf("template %s: step %d failed (exit 1): %s", spec.Name, i+1, st)}})
			return
		}
	}
	t := agentclient.Template{Name: spec.Name, Baked: true, VCPUs: pick(spec.VCPUs, parent.VCPUs, 1),
		MemoryMiB: pick(spec.MemoryMiB, parent.MemoryMiB, 512), DiskMiB: pick(spec.DiskMiB, parent.DiskMiB, 2048),
		BakeMS: 1234, SizeBytes: 64 << 20, Description: spec.Description, Metadata: spec.Metadata, Built: true}
	a.mu.Lock()
	a.built[spec.Name] = spec
	kept := a.templates[:0]
	for _, old := range a.templates {
		if old.Name != spec.Name {
			kept = append(kept, old)
		}
	}
	a.templates = append(kept, t)
	a.mu.Unlock()
	send(map[string]string{"progress": "baked " + spec.Name})
	send(map[string]any{"template": t})
}

func pick(vs ...int) int {
	for _, v := range vs {
		if v > 0 {
			return v
		}
	}
	return 0
}

func (a *Agent) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.knows(name); !ok {
		writeErr(w, 404, "not_found", "template "+name+" not found")
		return
	}
	if _, ok := a.built[name]; !ok {
		writeErr(w, 409, "conflict", "template "+name+" is a catalog or configured template: it cannot be deleted")
		return
	}
	for _, sb := range a.sandboxes {
		if sb.Template == name {
			writeErr(w, 409, "conflict", "template "+name+" is used by sandbox "+sb.ID)
			return
		}
	}
	for _, sn := range a.snapshots {
		if !sn.deleted && sn.Template == name {
			writeErr(w, 409, "conflict", "template "+name+" is used by snapshot "+sn.ID)
			return
		}
	}
	delete(a.built, name)
	kept := a.templates[:0]
	for _, t := range a.templates {
		if t.Name != name {
			kept = append(kept, t)
		}
	}
	a.templates = kept
	w.WriteHeader(204)
}
