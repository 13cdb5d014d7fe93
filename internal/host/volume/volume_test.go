package volume

import (
	"testing"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

func TestCheckAttach(t *testing.T) {
	held := map[string][]hostapi.VolumeAttachment{
		"vol_rw": {{SandboxID: "sb_a", MountPath: "/data"}},
		"vol_ro": {{SandboxID: "sb_a", MountPath: "/data", ReadOnly: true}},
	}
	attached := func(id string) []hostapi.VolumeAttachment { return held[id] }
	for _, c := range []struct {
		m  hostapi.VolumeMount
		ok bool
	}{
		{hostapi.VolumeMount{VolumeID: "vol_free", MountPath: "/x"}, true},
		{hostapi.VolumeMount{VolumeID: "vol_rw", MountPath: "/x", ReadOnly: true}, false},
		{hostapi.VolumeMount{VolumeID: "vol_ro", MountPath: "/x", ReadOnly: true}, true},
		{hostapi.VolumeMount{VolumeID: "vol_ro", MountPath: "/x"}, false},
	} {
		err := CheckAttach([]hostapi.VolumeMount{c.m}, attached)
		if (err == nil) != c.ok || (err != nil && !errdefs.Is(err, errdefs.Conflict)) {
			t.Errorf("%+v: %v", c.m, err)
		}
	}
}

// Mount paths are checked before any volume is looked up: no store is needed for a bad one.
func TestValidateMountsRefusesBadPaths(t *testing.T) {
	s := &Store{}
	for _, p := range []string{"", "data", "/", "/etc", "/usr/local/x", "/a\x00b"} {
		if _, err := s.ValidateMounts([]hostapi.VolumeMount{{VolumeID: "vol_a", MountPath: p}}, Slots); !errdefs.Is(err, errdefs.Invalid) {
			t.Errorf("mount path %q: %v", p, err)
		}
	}
	if _, err := s.ValidateMounts([]hostapi.VolumeMount{{VolumeID: "vol_a", MountPath: "/d"}}, 0); !errdefs.Is(err, errdefs.Conflict) {
		t.Errorf("a machine without slots: %v", err)
	}
	if _, err := s.ValidateMounts(make([]hostapi.VolumeMount, Slots+1), Slots); !errdefs.Is(err, errdefs.Invalid) {
		t.Errorf("more mounts than slots: %v", err)
	}
}
