// Package faultpoint holds the test-only hooks of the fault-injection suite (internal/faults):
// named points in the server and the host agent where the suite stops a process so it can
// SIGKILL it at a known step of an operation, and the doctor's age threshold it lowers. Both are
// environment variables that nothing but the suite sets; unset, a point costs one string compare.
//
//	PANDASTACK_FAULT_PAUSE=NAME    at the point NAME the process writes
//	                               "faultpoint: paused at NAME" to stderr and blocks for ever
//	PANDASTACK_FAULT_HOLD=NAME:FILE at the point NAME the process writes
//	                               "faultpoint: held at NAME" and waits until FILE exists
//	PANDASTACK_DOCTOR_MIN_AGE=DUR  the doctor calls leftovers younger than DUR in flight, not
//	                               leftovers (default 10m, 20m for sandboxes); the suite sets
//	                               0 once nothing runs
package faultpoint

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// PauseEnv names the point to pause at.
const PauseEnv = "PANDASTACK_FAULT_PAUSE"

// MinAgeEnv overrides the doctor's age threshold.
const MinAgeEnv = "PANDASTACK_DOCTOR_MIN_AGE"

// HoldEnv names a point to wait at and the file that lets it go on.
const HoldEnv = "PANDASTACK_FAULT_HOLD"

var pauseAt = os.Getenv(PauseEnv)

var holdAt, holdFile, _ = strings.Cut(os.Getenv(HoldEnv), ":")

// Held is what a held process writes to stderr, followed by the point's name.
const Held = "faultpoint: held at "

// Paused is what a paused process writes to stderr, followed by the point's name.
const Paused = "faultpoint: paused at "

// Reach pauses the process for ever if it was told to pause at name, or holds it until the
// hold's file exists if it was told to hold there (test-only; see the package doc); otherwise it
// returns at once.
func Reach(name string) {
	if holdAt != "" && holdAt == name {
		fmt.Fprintln(os.Stderr, Held+name)
		for {
			if _, err := os.Stat(holdFile); err == nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if pauseAt == "" || pauseAt != name {
		return
	}
	fmt.Fprintln(os.Stderr, Paused+name)
	select {}
}

// DoctorMinAge is how old a leftover must be before the doctor reports it: def unless the suite
// set PANDASTACK_DOCTOR_MIN_AGE.
func DoctorMinAge(def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(MinAgeEnv)); err == nil && d >= 0 {
		return d
	}
	return def
}
