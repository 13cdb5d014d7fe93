package agent

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pandastack/pandastack/internal/guest"
)

// usage reads the guest's figures: CPU ticks from /proc/stat, memory from /proc/meminfo, the root
// filesystem's size and use from statfs.
func usage() (guest.Usage, error) {
	var u guest.Usage
	if err := cpuTicks("/proc/stat", &u); err != nil {
		return u, err
	}
	mem, err := meminfo("/proc/meminfo")
	if err != nil {
		return u, err
	}
	u.MemTotal, u.MemAvailable = mem["MemTotal"], mem["MemAvailable"]
	u.MemCache = mem["Cached"] + mem["Buffers"]
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err != nil {
		return u, fmt.Errorf("statfs /: %w", err)
	}
	u.DiskTotal = int64(st.Blocks) * st.Bsize
	u.DiskUsed = int64(st.Blocks-st.Bfree) * st.Bsize
	return u, nil
}

// cpuTicks fills the CPU count and the summed ticks of the "cpu" line of a /proc/stat file:
// user nice system idle iowait irq softirq steal (guest time is already inside user).
func cpuTicks(file string, u *guest.Usage) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		if f[0] != "cpu" {
			u.CPUs++
			continue
		}
		for i, v := range f[1:] {
			if i >= 8 {
				break
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return fmt.Errorf("%s: bad cpu line %q", file, line)
			}
			u.CPUTotalTicks += n
			if i != 3 && i != 4 { // idle, iowait
				u.CPUBusyTicks += n
			}
		}
	}
	if u.CPUTotalTicks == 0 {
		return fmt.Errorf("%s: no cpu line", file)
	}
	return nil
}

// meminfo reads a /proc/meminfo file into bytes by key.
func meminfo(file string) (map[string]int64, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(line, ":")
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		if n, err := strconv.ParseInt(fs[0], 10, 64); err == nil {
			if len(fs) > 1 && fs[1] == "kB" {
				n <<= 10
			}
			out[k] = n
		}
	}
	return out, nil
}
