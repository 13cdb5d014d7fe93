// Package template names the machines sandboxes are made from. A template fixes the guest image,
// vCPUs, RAM and disk size at bake time: a template with more RAM is another bake.
package template

import (
	"fmt"
	"regexp"
)

// Spec is a template's machine.
type Spec struct {
	Name      string `json:"name"`
	Image     string `json:"image"` // guest image: "base"
	VCPUs     int    `json:"vcpus"`
	MemoryMiB int    `json:"memory_mib"`
	DiskMiB   int    `json:"disk_mib"`
}

// Catalog is the built-in set. One vCPU by default: under TCG each vCPU is a host thread, and a
// small host runs many sandboxes.
var Catalog = map[string]Spec{
	"base":             {Name: "base", Image: "base", VCPUs: 1, MemoryMiB: 512, DiskMiB: 2048},
	"code-interpreter": {Name: "code-interpreter", Image: "code-interpreter", VCPUs: 1, MemoryMiB: 1024, DiskMiB: 4096},
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// Validate checks a spec's fields and limits.
func (s Spec) Validate() error {
	switch {
	case !nameRE.MatchString(s.Name):
		return fmt.Errorf("template name %q: use 1-63 lowercase letters, digits and dashes", s.Name)
	case s.Image != "base" && s.Image != "code-interpreter":
		return fmt.Errorf("template %s: unknown image %q", s.Name, s.Image)
	case s.VCPUs < 1 || s.VCPUs > 16:
		return fmt.Errorf("template %s: vcpus must be 1-16", s.Name)
	case s.MemoryMiB < 128 || s.MemoryMiB > 65536:
		return fmt.Errorf("template %s: memory_mib must be 128-65536", s.Name)
	case s.DiskMiB < 1024 || s.DiskMiB > 1<<20:
		return fmt.Errorf("template %s: disk_mib must be 1024-1048576", s.Name)
	}
	return nil
}
