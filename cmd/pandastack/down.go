package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pandastack/pandastack/internal/app"
	"github.com/spf13/cobra"
)

func init() {
	var dataDir string
	var killSandboxes bool
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop the local `pandastack up` of --data-dir; --kill-sandboxes also ends every sandbox",
		Long: `Stop the pandastack up that runs on --data-dir (it records itself in DATA_DIR/up.pid) and
wait until it has stopped.

Plain down stops the control plane and the host agent but leaves the sandboxes' VMs running: the
next up re-adopts them, files and memory intact. With --kill-sandboxes, up first kills every
sandbox of every team (their VMs end, their memory and disk return to the pool, their records say
killed), then stops, releasing the disk pool.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			pid, err := runningUp(dataDir)
			if err != nil {
				return err
			}
			if pid == 0 {
				if killSandboxes {
					return fmt.Errorf("no pandastack up runs on %s, so its sandboxes cannot be killed: start it (pandastack up --data-dir %s) and run down --kill-sandboxes again", dataDir, dataDir)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "no pandastack up runs on %s: nothing to stop\n", dataDir)
				return nil
			}
			sig, what := syscall.SIGTERM, "its sandboxes keep running; the next up re-adopts them"
			if killSandboxes {
				sig, what = syscall.SIGUSR2, "every sandbox was killed"
			}
			if err := syscall.Kill(pid, sig); err != nil {
				return fmt.Errorf("stopping pandastack up (pid %d): %w", pid, err)
			}
			for deadline := time.Now().Add(wait); alive(pid); time.Sleep(100 * time.Millisecond) {
				if time.Now().After(deadline) {
					return fmt.Errorf("pandastack up (pid %d) has not stopped after %s: its log says what it is waiting for", pid, wait)
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pandastack up (pid %d) stopped; %s\n", pid, what)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", defaultDataDir(), "the data dir of the up to stop (default $PANDASTACK_DATA_DIR)")
	f.BoolVar(&killSandboxes, "kill-sandboxes", false, "kill every sandbox first (VMs end, the pool is freed)")
	durationVar(f, &wait, "wait", 5*time.Minute, "how long to wait for up to stop")
	rootCmd.AddCommand(cmd)
}

// runningUp is the pid of the `up` running on dataDir, 0 if none: no pid file, or one a
// killed up left behind (its pid gone, or reused by another program).
func runningUp(dataDir string) (int, error) {
	b, err := os.ReadFile(app.PIDFile(dataDir))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%s does not hold a process id", app.PIDFile(dataDir))
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	args := strings.Split(string(cmdline), "\x00")
	if err != nil || !alive(pid) || len(args) < 2 || args[1] != "up" {
		return 0, nil
	}
	return pid, nil
}

// alive reports whether pid is a process that has not exited (a zombie has).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	// "pid (comm) state …": comm may hold spaces and parentheses, the state follows the last ')'.
	after := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return err == nil && len(after) > 0 && after[0] != "Z"
}
