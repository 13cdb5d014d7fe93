package testenv

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
)

// AgentCgroups lists the existing cgroup folders of a host agent with this data dir that runs as
// a child of this process (in its cgroup): pandastack/<hash of the data dir> under it, in each
// hierarchy.
func AgentCgroups(agentDir string) []string {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	h := sha256.Sum256([]byte(agentDir))
	name := filepath.Join("pandastack", hex.EncodeToString(h[:])[:12])
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		var roots []string
		switch f[1] {
		case "":
			roots = []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}
		case "cpu", "memory", "pids", "cpu,cpuacct", "cpuacct,cpu":
			roots = []string{filepath.Join("/sys/fs/cgroup", f[1])}
		}
		for _, r := range roots {
			d := filepath.Join(r, f[2], name)
			if _, err := os.Stat(d); err == nil {
				out = append(out, d)
			}
		}
	}
	return out
}
