package template

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Recipe is a spec with its From chain flattened: everything a host needs to build and bake it.
type Recipe struct {
	Name  string
	Suite string
	Apt   []string // sorted, unique
	Npm   []string // sorted, unique
	// Layers hold each template's files and steps, the oldest ancestor first.
	Layers       []Layer
	Env          map[string]string
	Start, Ready string
	ReadyTimeout time.Duration
	VCPUs        int
	MemoryMiB    int
	DiskMiB      int
	// Volume is the data volume baked with the template (the newest in the From chain that has
	// one), or nil.
	Volume *DataVolume
}

// Layer is one template's own files and steps.
type Layer struct {
	Template string   `json:"template"`
	Files    []File   `json:"files,omitempty"`
	Steps    []string `json:"steps,omitempty"`
}

// Lookup finds a template by name (the catalog, or a team's own).
type Lookup func(name string) (Spec, bool)

// Resolve validates spec and flattens its From chain.
func Resolve(spec Spec, lookup Lookup) (Recipe, error) {
	if err := spec.Validate(); err != nil {
		return Recipe{}, err
	}
	chain := []Spec{spec}
	seen := map[string]bool{spec.Name: true}
	for cur := spec; !strings.HasPrefix(cur.From, "debian:"); {
		parent, ok := lookup(cur.From)
		if !ok {
			return Recipe{}, fmt.Errorf("template %s: from %q: no such template", cur.Name, cur.From)
		}
		if seen[parent.Name] || len(chain) > maxFromDepth {
			return Recipe{}, fmt.Errorf("template %s: from %q makes a loop or a chain deeper than %d", spec.Name, cur.From, maxFromDepth)
		}
		if err := parent.Validate(); err != nil {
			return Recipe{}, err
		}
		seen[parent.Name] = true
		chain = append(chain, parent)
		cur = parent
	}
	r := Recipe{Name: spec.Name, Env: map[string]string{}}
	apt, npm := map[string]bool{}, map[string]bool{}
	for i := len(chain) - 1; i >= 0; i-- { // oldest ancestor first: children override
		s := chain[i]
		if i == len(chain)-1 {
			r.Suite = strings.TrimPrefix(s.From, "debian:")
		}
		for _, p := range s.Apt {
			apt[p] = true
		}
		for _, p := range s.Npm {
			npm[p] = true
		}
		if len(s.Files) > 0 || len(s.Steps) > 0 {
			r.Layers = append(r.Layers, Layer{Template: s.Name, Files: s.Files, Steps: s.Steps})
		}
		for k, v := range s.Env {
			r.Env[k] = v
		}
		if s.Start != "" {
			r.Start, r.Ready, r.ReadyTimeout = s.Start, s.Ready, 0
		}
		if s.ReadyTimeoutSeconds > 0 {
			r.ReadyTimeout = time.Duration(s.ReadyTimeoutSeconds) * time.Second
		}
		r.VCPUs = pick(s.VCPUs, r.VCPUs)
		r.MemoryMiB = pick(s.MemoryMiB, r.MemoryMiB)
		r.DiskMiB = pick(s.DiskMiB, r.DiskMiB)
		if s.Volume != nil {
			v := *s.Volume
			v.FS = "ext4"
			r.Volume = &v
		}
	}
	if r.ReadyTimeout == 0 {
		r.ReadyTimeout = DefaultReadyWait * time.Second
	}
	r.VCPUs = pick(r.VCPUs, DefaultVCPUs)
	r.MemoryMiB = pick(r.MemoryMiB, DefaultMemoryMiB)
	r.DiskMiB = pick(r.DiskMiB, DefaultDiskMiB)
	r.Apt, r.Npm = sortedKeys(apt), sortedKeys(npm)
	return r, nil
}

func pick(v, fallback int) int {
	if v != 0 {
		return v
	}
	return fallback
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// BuildHash identifies what the build VM makes from the packed image: the files, steps, npm
// scripts and env. Two recipes with the same hash (and the same packed image) share a build.
func (r Recipe) BuildHash() string {
	vol := r.Volume
	if vol != nil && vol.Ephemeral { // who keeps a sandbox's copy is not in the image
		v := *vol
		v.Ephemeral = false
		vol = &v
	}
	data, _ := json.Marshal(struct {
		Layers []Layer
		Npm    []string
		Env    map[string]string
		Volume *DataVolume `json:",omitempty"` // the build steps write to it
	}{r.Layers, r.Npm, r.Env, vol})
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// NeedsBuildVM reports whether anything must run inside a build microVM.
func (r Recipe) NeedsBuildVM() bool { return len(r.Layers) > 0 || len(r.Npm) > 0 }
