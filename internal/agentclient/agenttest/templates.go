package agenttest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
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
func (a *Agent) BuiltSpec(name string) (s template.Spec, ok bool) {
	a.with(func() { s, ok = a.built[name] })
	return s, ok
}

// HoldBuilds makes builds stop after their first progress line until release is called (to see
// progress arrive while a build is still running). release may be called more than once.
func (a *Agent) HoldBuilds() (release func()) {
	ch := make(chan struct{})
	a.with(func() { a.buildGate = ch })
	var once sync.Once
	return func() {
		once.Do(func() {
			a.with(func() {
				if a.buildGate == ch {
					a.buildGate = nil
				}
			})
			close(ch)
		})
	}
}

func (a *Agent) listTemplates(*http.Request) (any, *agentclient.Error) {
	return map[string]any{"templates": a.templates}, nil
}

// dropTemplate removes name from the list.
func (a *Agent) dropTemplate(name string) {
	a.templates = slices.DeleteFunc(a.templates, func(t agentclient.Template) bool { return t.Name == name })
}

// checkBuild reads the spec and refuses it before the build stream starts (a plain status, as
// on the real agent). It returns the parent template (zero from debian:) and the HoldBuilds gate.
func (a *Agent) checkBuild(w http.ResponseWriter, r *http.Request) (spec template.Spec, parent agentclient.Template, gate chan struct{}, err *agentclient.Error) {
	data, rerr := io.ReadAll(http.MaxBytesReader(w, r.Body, 2*template.MaxSpecBytes))
	if rerr != nil {
		return spec, parent, nil, invalid("spec: %v", rerr)
	}
	if spec, rerr = template.Parse(data); rerr == nil {
		rerr = spec.Validate()
	}
	_, catalog := template.CatalogSpec(spec.Name)
	a.with(func() {
		_, wasBuilt := a.built[spec.Name]
		maxCPU, maxMem := a.maxVCPUs, a.memTotal/2
		if gate = a.buildGate; a.knows(spec.From) {
			parent = a.template(spec.From)
		}
		switch {
		case rerr != nil:
			err = invalid("%v", rerr)
		case catalog:
			err = conflict("template %s is a catalog template: pick another name", spec.Name)
		case a.knows(spec.Name) && !wasBuilt:
			err = conflict("template %s is defined by this agent's configuration", spec.Name)
		case !strings.HasPrefix(spec.From, "debian:") && !a.knows(spec.From):
			err = invalid("template %s: from %q: no such template", spec.Name, spec.From)
		case int64(spec.VCPUs) > maxCPU || int64(spec.MemoryMiB) > maxMem: // like the real agent's limits
			err = invalid("template %s is larger than this host's limits (max_vcpus %d, max_memory_mib %d)", spec.Name, maxCPU, maxMem)
		}
	})
	return spec, parent, gate, err
}

func (a *Agent) buildTemplate(w http.ResponseWriter, r *http.Request) {
	spec, parent, gate, err := a.checkBuild(w, r)
	if err != nil {
		writeErr(w, err)
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
	a.with(func() {
		a.built[spec.Name] = spec
		a.dropTemplate(spec.Name)
		a.templates = append(a.templates, t)
	})
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

func (a *Agent) deleteTemplate(r *http.Request) (any, *agentclient.Error) {
	name := r.PathValue("name")
	_, built := a.built[name]
	var err *agentclient.Error
	switch {
	case !a.knows(name):
		err = notFound("template %s not found", name)
	case !built:
		err = conflict("template %s is a catalog or configured template: it cannot be deleted", name)
	}
	for _, sb := range a.sandboxes {
		if err == nil && sb.Template == name {
			err = conflict("template %s is used by sandbox %s", name, sb.ID)
		}
	}
	for _, sn := range a.snapshots {
		if err == nil && !sn.deleted && sn.Template == name {
			err = conflict("template %s is used by snapshot %s", name, sn.ID)
		}
	}
	if err != nil {
		return nil, err
	}
	delete(a.built, name)
	a.dropTemplate(name)
	return nil, nil
}
