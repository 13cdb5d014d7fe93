package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTick is USER_HZ: /proc/<pid>/stat counts CPU time in 1/100 s on Linux.
const clockTick = 10 // ms

// cpuMs is a process's CPU time (user + system) in ms; with children, the CPU of its waited-for
// children too (PostgreSQL's postmaster reaps its backends, so their CPU lands there).
func cpuMs(pid int, children bool) float64 {
	f := statFields(pid)
	if len(f) < 15 {
		return 0
	}
	n := 2
	if children {
		n = 4
	}
	var t float64
	for _, s := range f[11 : 11+n] { // utime stime cutime cstime (fields 14-17)
		v, _ := strconv.ParseFloat(s, 64)
		t += v
	}
	return t * clockTick
}

// statFields are the fields of /proc/<pid>/stat after the command name (field 3 onward).
func statFields(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(data[i+1:]))
}

// rssMiB is a process's resident set.
func rssMiB(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// treeCPUMs is the CPU of pid, its reaped children and its live children (PostgreSQL: the
// postmaster and its backends, background workers included).
func treeCPUMs(pid int) float64 {
	t := cpuMs(pid, true)
	procs, _ := filepath.Glob("/proc/[0-9]*")
	want := strconv.Itoa(pid)
	for _, p := range procs {
		child, err := strconv.Atoi(filepath.Base(p))
		if err != nil {
			continue
		}
		if f := statFields(child); len(f) > 1 && f[1] == want {
			t += cpuMs(child, false)
		}
	}
	return t
}
