// Package template describes the machines sandboxes are made from: a spec (YAML or JSON, see
// docs/templates.md) names a Debian suite or another template to start from, the Debian and npm
// packages to add, files, build steps, env, and a start command with its ready check. A
// template fixes vCPUs, RAM and disk at bake time: a template with more RAM is another bake.
package template

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// Spec is a template as a user writes it.
type Spec struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// From is where the template starts: "debian:trixie", "debian:bookworm", or the name of a
	// catalog template, whose packages, files, steps and start command come first.
	From  string   `json:"from,omitempty"`
	Apt   []string `json:"apt,omitempty"` // Debian packages, installed on the host by debootstrap (trusted)
	Npm   []string `json:"npm,omitempty"` // npm packages, installed globally (/usr/local); their scripts run in the build VM
	Files []File   `json:"files,omitempty"`
	// Steps are shell commands run in order as root inside the build microVM, never on the host.
	Steps []string          `json:"steps,omitempty"`
	Env   map[string]string `json:"env,omitempty"` // for the steps, the start command and every exec
	// Start is a command started (as root, in the background; `runuser -u user --` for the guest
	// user) before the snapshot is taken, so every sandbox restores with it already running.
	// Ready is a command the bake retries until it exits 0 (for at most ReadyTimeoutSeconds).
	Start               string `json:"start,omitempty"`
	Ready               string `json:"ready,omitempty"`
	ReadyTimeoutSeconds int    `json:"ready_timeout_seconds,omitempty"`
	VCPUs               int    `json:"vcpus,omitempty"`
	MemoryMiB           int    `json:"memory_mib,omitempty"`
	DiskMiB             int    `json:"disk_mib,omitempty"`
	// Volume is a data volume baked with the template: made empty, mounted before the build steps
	// and the start command run (so they can write to it), and snapshotted mounted. Every sandbox
	// made from the template gets its own copy of it, in its first volume slot, already mounted.
	Volume *DataVolume `json:"volume,omitempty"`
	// Aliases are other names that resolve to this template (catalog only).
	Aliases []string `json:"aliases,omitempty"`
	// Metadata is free-form information shown with the template (e.g. the PostgreSQL version).
	Metadata map[string]string `json:"metadata,omitempty"`
}

// File is a file put into the image by the build VM.
type File struct {
	Path          string `json:"path"`
	Content       string `json:"content,omitempty"`
	ContentBase64 string `json:"content_base64,omitempty"` // for binary files
	Mode          string `json:"mode,omitempty"`           // octal, default 0644
	User          string `json:"user,omitempty"`           // owner: root (default) or user
	// Src is read by the CLI from the spec's directory and sent as content; the API never reads
	// host paths.
	Src string `json:"src,omitempty"`
}

// DataVolume is a template's data volume (see Spec.Volume).
type DataVolume struct {
	SizeMiB   int    `json:"size_mib"`
	FS        string `json:"fs,omitempty"` // ext4 (the default and the only one)
	MountPath string `json:"mount_path"`
	// Ephemeral makes each sandbox's copy the sandbox's own: deleted when the sandbox is killed,
	// out of the team's volume list and quota (a plain sandbox of postgres-17 keeps no 3 GiB
	// volume behind). A service that owns the copy (a managed database) keeps it regardless. It
	// changes nothing in the image, so it is not part of the build hash.
	Ephemeral bool `json:"ephemeral,omitempty"`
}

// Limits on a template's data volume: a bake writes it, and every sandbox of the template is
// promised its size.
const (
	MinVolumeMiB = 16
	MaxVolumeMiB = 64 << 10
)

// volumeForbidden may not hold a template's data volume: they hold the guest's system (a volume
// under /var, such as /var/lib/postgresql, is fine; /var itself is not).
var volumeForbidden = []string{"/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/run", "/sbin", "/sys", "/tmp", "/usr"}

// check validates a data volume.
func (v DataVolume) check() error {
	if v.SizeMiB < MinVolumeMiB || v.SizeMiB > MaxVolumeMiB {
		return fmt.Errorf("volume.size_mib must be %d-%d, got %d", MinVolumeMiB, MaxVolumeMiB, v.SizeMiB)
	}
	if v.FS != "" && v.FS != "ext4" {
		return fmt.Errorf("volume.fs %q: only ext4 is supported", v.FS)
	}
	p := v.MountPath
	if !path.IsAbs(p) || path.Clean(p) != p || len(p) > 256 || strings.ContainsAny(p, "\x00\n") {
		return fmt.Errorf("volume.mount_path %q must be a clean absolute path of at most 256 bytes", p)
	}
	if p == "/" || p == "/var" || p == "/root" || p == "/home" {
		return fmt.Errorf("volume.mount_path %q would hide the guest's own files; use a directory below it, e.g. /var/lib/postgresql or /data", p)
	}
	for _, d := range volumeForbidden {
		if p == d || strings.HasPrefix(p, d+"/") {
			return fmt.Errorf("volume.mount_path %q is under the system directory %s; use e.g. /var/lib/<service> or /data", p, d)
		}
	}
	return nil
}

// Limits on what one spec may carry (the API reads specs from the network).
const (
	MaxSpecBytes     = 16 << 20
	MaxFileBytes     = 4 << 20
	MaxFilesBytes    = 12 << 20
	MaxFiles         = 256
	MaxSteps         = 64
	MaxStepBytes     = 16 << 10
	MaxPackages      = 256
	MaxReadyTimeout  = 900
	DefaultReadyWait = 60
	maxFromDepth     = 8
)

// Defaults for a template that starts from a Debian suite and says nothing about its size.
const (
	DefaultVCPUs     = 1
	DefaultMemoryMiB = 512
	// MinMemoryMiB is the smallest guest memory a template may have.
	MinMemoryMiB   = 128
	DefaultDiskMiB = 2048
)

// Suites are the Debian releases a template can start from.
var Suites = []string{"trixie", "bookworm"}

var (
	nameRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	aptRE     = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]{0,99}$`)
	npmRE     = regexp.MustCompile(`^(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]{0,213}(@[A-Za-z0-9.^~<>=*|_ +-]{1,64})?$`)
	envKeyRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	forbidden = []string{"/proc", "/sys", "/dev", "/run", "/tmp", "/usr/local/bin/pandastack-guest"}
)

// Parse reads a spec from YAML or JSON (JSON is YAML). Unknown fields are errors: a typo must
// not silently build something else.
func Parse(data []byte) (Spec, error) {
	var s Spec
	if len(data) > MaxSpecBytes {
		return s, fmt.Errorf("spec is %d bytes; the limit is %d", len(data), MaxSpecBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return s, fmt.Errorf("spec is empty")
	}
	if err := yaml.UnmarshalStrict(data, &s); err != nil {
		return s, fmt.Errorf("spec: %v", err)
	}
	return s, nil
}

// ValidName reports whether n can name a template.
func ValidName(n string) bool { return nameRE.MatchString(n) }

// Validate checks a spec's own fields and limits (not what From names: see Resolve).
func (s Spec) Validate() error {
	if !nameRE.MatchString(s.Name) {
		return fmt.Errorf("template name %q: use 1-63 lowercase letters, digits and dashes, starting with a letter or digit", s.Name)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("template %s: %s", s.Name, fmt.Sprintf(format, args...))
	}
	if s.From == "" {
		return bad(`"from" is required: a Debian suite (debian:trixie, debian:bookworm) or a catalog template such as base`)
	}
	if strings.HasPrefix(s.From, "debian:") {
		if !isSuite(strings.TrimPrefix(s.From, "debian:")) {
			return bad("from %q: unknown Debian suite (use one of %v)", s.From, Suites)
		}
	} else if !nameRE.MatchString(s.From) {
		return bad("from %q is neither debian:SUITE nor a template name", s.From)
	}
	if len(s.Apt) > MaxPackages || len(s.Npm) > MaxPackages {
		return bad("at most %d apt and %d npm packages", MaxPackages, MaxPackages)
	}
	for _, p := range s.Apt {
		if !aptRE.MatchString(p) {
			return bad("apt package %q is not a Debian package name", p)
		}
	}
	for _, p := range s.Npm {
		if !npmRE.MatchString(p) {
			return bad("npm package %q: give a registry package name, optionally @version (no URLs, paths or git specs)", p)
		}
	}
	if len(s.Files) > MaxFiles {
		return bad("at most %d files", MaxFiles)
	}
	total := 0
	for i, f := range s.Files {
		data, err := f.Data()
		if err != nil {
			return bad("files[%d] (%s): %v", i, f.Path, err)
		}
		total += len(data)
		if err := f.check(); err != nil {
			return bad("files[%d]: %v", i, err)
		}
	}
	if total > MaxFilesBytes {
		return bad("files hold %d bytes; the limit is %d (put large data in a build step or a volume)", total, MaxFilesBytes)
	}
	if len(s.Steps) > MaxSteps {
		return bad("at most %d steps", MaxSteps)
	}
	for i, st := range s.Steps {
		if strings.TrimSpace(st) == "" || len(st) > MaxStepBytes {
			return bad("steps[%d] must be a non-empty command of at most %d bytes", i, MaxStepBytes)
		}
	}
	if len(s.Env) > 64 {
		return bad("at most 64 env variables")
	}
	for k, v := range s.Env {
		if !envKeyRE.MatchString(k) || len(v) > 4096 || strings.ContainsRune(v, 0) {
			return bad("env %q: names are letters, digits and _, values at most 4096 bytes", k)
		}
	}
	if len(s.Start) > MaxStepBytes || len(s.Ready) > MaxStepBytes {
		return bad("start and ready must be at most %d bytes", MaxStepBytes)
	}
	if s.Ready != "" && s.Start == "" {
		return bad("a ready check needs a start command")
	}
	if s.ReadyTimeoutSeconds < 0 || s.ReadyTimeoutSeconds > MaxReadyTimeout {
		return bad("ready_timeout_seconds must be 1-%d", MaxReadyTimeout)
	}
	switch {
	case s.VCPUs != 0 && (s.VCPUs < 1 || s.VCPUs > 16):
		return bad("vcpus must be 1-16")
	case s.MemoryMiB != 0 && (s.MemoryMiB < MinMemoryMiB || s.MemoryMiB > 65536):
		return bad("memory_mib must be %d-65536", MinMemoryMiB)
	case s.DiskMiB != 0 && (s.DiskMiB < 1024 || s.DiskMiB > 1<<20):
		return bad("disk_mib must be 1024-1048576")
	}
	if s.Volume != nil {
		if err := s.Volume.check(); err != nil {
			return bad("%v", err)
		}
	}
	for _, a := range s.Aliases {
		if !nameRE.MatchString(a) {
			return bad("alias %q is not a valid template name", a)
		}
	}
	if len(s.Description) > 1024 || len(s.Metadata) > 32 {
		return bad("description is at most 1024 bytes and metadata at most 32 entries")
	}
	return nil
}

func isSuite(s string) bool {
	for _, x := range Suites {
		if s == x {
			return true
		}
	}
	return false
}

// Data is the file's bytes.
func (f File) Data() ([]byte, error) {
	if f.Src != "" {
		return nil, fmt.Errorf("src %q was not read: the CLI reads src files (pandastack template build -f), the API takes content", f.Src)
	}
	if f.Content != "" && f.ContentBase64 != "" {
		return nil, fmt.Errorf("give content or content_base64, not both")
	}
	if f.ContentBase64 == "" {
		if len(f.Content) > MaxFileBytes {
			return nil, fmt.Errorf("%d bytes; the limit is %d", len(f.Content), MaxFileBytes)
		}
		return []byte(f.Content), nil
	}
	if base64.StdEncoding.DecodedLen(len(f.ContentBase64)) > MaxFileBytes+3 {
		return nil, fmt.Errorf("more than %d bytes", MaxFileBytes)
	}
	data, err := base64.StdEncoding.DecodeString(f.ContentBase64)
	if err != nil {
		return nil, fmt.Errorf("content_base64: %v", err)
	}
	return data, nil
}

// FileMode is the file's permission bits.
func (f File) FileMode() uint32 {
	if f.Mode == "" {
		return 0o644
	}
	m, _ := strconv.ParseUint(f.Mode, 8, 32)
	return uint32(m)
}

func (f File) check() error {
	if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" || len(f.Path) > 1024 {
		return fmt.Errorf("path %q must be a clean absolute file path", f.Path)
	}
	for _, p := range forbidden {
		if f.Path == p || strings.HasPrefix(f.Path, p+"/") {
			return fmt.Errorf("path %q: %s is not part of the image", f.Path, p)
		}
	}
	if f.Mode != "" {
		if m, err := strconv.ParseUint(f.Mode, 8, 32); err != nil || m > 0o7777 {
			return fmt.Errorf("%s: mode %q is not an octal permission like 0644", f.Path, f.Mode)
		}
	}
	if f.User != "" && f.User != "root" && f.User != "user" {
		return fmt.Errorf("%s: user must be root or user", f.Path)
	}
	return nil
}

// JSON is the spec as canonical JSON (what the control plane stores and sends to hosts).
func (s Spec) JSON() []byte {
	data, _ := json.Marshal(s)
	return data
}
