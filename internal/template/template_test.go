package template

import (
	"strings"
	"testing"
)

func TestCatalog(t *testing.T) {
	names := CatalogNames()
	for _, want := range []string{"base", "code-interpreter", "agent", "browser", "postgres-17", "claude-agent"} {
		if _, ok := CatalogSpec(want); !ok {
			t.Errorf("catalog lacks %s (has %v)", want, names)
		}
	}
	for _, alias := range []string{"postgres-16", "postgres"} {
		if got := Canonical(alias); got != "postgres-17" {
			t.Errorf("Canonical(%s) = %s, want postgres-17", alias, got)
		}
	}
	for _, n := range names {
		spec, _ := CatalogSpec(n)
		r, err := Resolve(spec, CatalogSpec)
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		if r.Suite != "trixie" {
			t.Errorf("%s: suite %q", n, r.Suite)
		}
	}
	ci, _ := CatalogSpec("code-interpreter")
	r, _ := Resolve(ci, CatalogSpec)
	if !contains(r.Apt, "python3-numpy") || !contains(r.Apt, "git") || !contains(r.Npm, "bun@1.4.5") {
		t.Errorf("code-interpreter should have base's packages and its own: apt %v npm %v", r.Apt, r.Npm)
	}
	if r.MemoryMiB != 1024 || r.VCPUs != 1 {
		t.Errorf("code-interpreter size %d vCPU %d MiB", r.VCPUs, r.MemoryMiB)
	}
	ca, _ := CatalogSpec("claude-agent")
	if len(ca.Files) != 1 || !strings.Contains(ca.Files[0].Content, "claude-agent-sdk") {
		t.Errorf("claude-agent's worker was not read from its src: %+v", ca.Files)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestParseAndValidate(t *testing.T) {
	good := "name: web\nfrom: base\nsteps: ['echo hi > /srv/x']\nstart: python3 -m http.server 8000\nready: curl -sf localhost:8000\n"
	s, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Resolve(s, CatalogSpec)
	if err != nil {
		t.Fatal(err)
	}
	if r.Start == "" || r.ReadyTimeout.Seconds() != DefaultReadyWait || len(r.Layers) != 1 || r.DiskMiB != 4096 {
		t.Errorf("recipe %+v", r)
	}
	// JSON is accepted too.
	if _, err := Parse([]byte(`{"name": "j", "from": "debian:trixie"}`)); err != nil {
		t.Errorf("json: %v", err)
	}
	bad := map[string]string{
		"unknown field":  "name: x\nfrom: base\npackages: [vim]\n",
		"bad name":       "name: Web_App\nfrom: base\n",
		"no from":        "name: x\n",
		"bad suite":      "name: x\nfrom: debian:sid\n",
		"npm url":        "name: x\nfrom: base\nnpm: ['https://evil.example/x.tgz']\n",
		"apt option":     "name: x\nfrom: base\napt: ['--allow-unauthenticated']\n",
		"relative path":  "name: x\nfrom: base\nfiles: [{path: etc/x, content: hi}]\n",
		"proc path":      "name: x\nfrom: base\nfiles: [{path: /proc/x, content: hi}]\n",
		"bad mode":       "name: x\nfrom: base\nfiles: [{path: /etc/x, content: hi, mode: rwx}]\n",
		"unread src":     "name: x\nfrom: base\nfiles: [{path: /etc/x, src: ./x}]\n",
		"ready no start": "name: x\nfrom: base\nready: 'true'\n",
		"small disk":     "name: x\nfrom: base\ndisk_mib: 100\n",
		"empty step":     "name: x\nfrom: base\nsteps: ['  ']\n",
		"not yaml":       "name: [x\n",
		"empty":          "  \n",
	}
	for what, text := range bad {
		s, err := Parse([]byte(text))
		if err == nil {
			err = s.Validate()
		}
		if err == nil {
			t.Errorf("%s: accepted", what)
		}
	}
	// From must exist and must not loop.
	loopA := Spec{Name: "a", From: "b"}
	loopB := Spec{Name: "b", From: "a"}
	lookup := func(n string) (Spec, bool) {
		switch n {
		case "a":
			return loopA, true
		case "b":
			return loopB, true
		}
		return CatalogSpec(n)
	}
	if _, err := Resolve(loopA, lookup); err == nil || !strings.Contains(err.Error(), "loop") {
		t.Errorf("loop: %v", err)
	}
	if _, err := Resolve(Spec{Name: "c", From: "nope"}, lookup); err == nil || !strings.Contains(err.Error(), "no such template") {
		t.Errorf("missing from: %v", err)
	}
}

func TestDataVolume(t *testing.T) {
	base := "name: db\nfrom: debian:trixie\n"
	for _, tc := range []struct{ vol, err string }{
		{"volume: {size_mib: 64, mount_path: /var/lib/postgresql}", ""},
		{"volume: {size_mib: 64, fs: ext4, mount_path: /data}", ""},
		{"volume: {size_mib: 8, mount_path: /data}", "volume.size_mib must be 16-65536, got 8"},
		{"volume: {size_mib: 100000, mount_path: /data}", "volume.size_mib must be 16-65536"},
		{"volume: {size_mib: 64, mount_path: /data, fs: xfs}", `volume.fs "xfs": only ext4`},
		{"volume: {size_mib: 64, mount_path: data}", "must be a clean absolute path"},
		{"volume: {size_mib: 64, mount_path: /data/../etc}", "must be a clean absolute path"},
		{"volume: {size_mib: 64, mount_path: /}", "would hide the guest's own files"},
		{"volume: {size_mib: 64, mount_path: /var}", "would hide the guest's own files"},
		{"volume: {size_mib: 64, mount_path: /etc/postgresql}", "under the system directory /etc"},
		{"volume: {size_mib: 64, mount_path: /usr}", "under the system directory /usr"},
		{"volume: {size_mib: 64, mount_path: /data, owner: x}", "unknown field"},
	} {
		s, err := Parse([]byte(base + tc.vol))
		if err == nil {
			err = s.Validate()
		}
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.vol, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: got %v, want an error with %q", tc.vol, err, tc.err)
		}
	}
	// A child inherits its parent's volume; the build hash of a template without one is as before.
	parent, _ := Parse([]byte(base + "volume: {size_mib: 64, mount_path: /data}\nsteps: [echo hi > /data/x]"))
	child, _ := Parse([]byte("name: db2\nfrom: db\n"))
	r, err := Resolve(child, func(n string) (Spec, bool) { return parent, n == "db" })
	if err != nil || r.Volume == nil || *r.Volume != (DataVolume{SizeMiB: 64, FS: "ext4", MountPath: "/data"}) {
		t.Fatalf("child recipe volume %+v, %v", r.Volume, err)
	}
	noVol, _ := Parse([]byte(base + "steps: [echo hi > /data/x]"))
	rp, _ := Resolve(parent, CatalogSpec)
	rn, _ := Resolve(noVol, CatalogSpec)
	if rp.BuildHash() == rn.BuildHash() {
		t.Error("a volume does not change the build hash: the build steps write to it")
	}
	// Ephemeral says who keeps a sandbox's copy, not what is in the image: same build hash.
	eph, err := Parse([]byte(base + "volume: {size_mib: 64, mount_path: /data, ephemeral: true}\nsteps: [echo hi > /data/x]"))
	if err != nil || eph.Volume == nil || !eph.Volume.Ephemeral {
		t.Fatalf("ephemeral volume %+v, %v", eph.Volume, err)
	}
	re, _ := Resolve(eph, CatalogSpec)
	if re.BuildHash() != rp.BuildHash() || !re.Volume.Ephemeral {
		t.Errorf("ephemeral: build hash %s, want %s; recipe volume %+v", re.BuildHash(), rp.BuildHash(), re.Volume)
	}
	if pg, ok := CatalogSpec("postgres-17"); !ok || pg.Volume == nil || !pg.Volume.Ephemeral {
		t.Errorf("postgres-17's data volume is not ephemeral: a plain sandbox of it would leave a 3 GiB team volume behind")
	}
}
