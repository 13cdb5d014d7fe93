package testenv

import "github.com/pandastack/pandastack/internal/template"

// VolumeTemplateName is VolumeTemplate's name.
const VolumeTemplateName = "test-data-volume"

// VolumeTemplatePath is where VolumeTemplate's data volume is mounted.
const VolumeTemplatePath = "/var/lib/testdata"

// VolumeTemplate is a small template baked with a data volume (tests of templates with one): its
// build step writes built (in VolumeTemplatePath/built) and its start command writes started
// (in .../started) before the snapshot, so every sandbox of it finds both in its copy.
func VolumeTemplate() template.Spec {
	return template.Spec{Name: VolumeTemplateName, From: "base",
		Volume: &template.DataVolume{SizeMiB: 64, MountPath: VolumeTemplatePath},
		Steps:  []string{"echo built > " + VolumeTemplatePath + "/built"},
		Start:  "echo started > " + VolumeTemplatePath + "/started; exec sleep infinity",
		Ready:  "test -s " + VolumeTemplatePath + "/started"}
}
