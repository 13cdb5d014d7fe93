// Command pandastack is PandaStack's single binary: the control plane (`server`), the host agent
// (`agent`), the all-in-one local mode (`up`) and the CLI verbs.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

var rootCmd = &cobra.Command{
	Use:           "pandastack",
	Short:         "PandaStack: microVM sandboxes for AI agents",
	SilenceUsage:  true,
	SilenceErrors: true,
	Version:       version,
}

func main() {
	if err := rootCmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(exitCode(err))
	}
}

// exitCoder lets a command choose its exit status (e.g. exec passes the guest's exit code through).
type exitCoder interface{ ExitCode() int }

func exitCode(err error) int {
	if ec, ok := err.(exitCoder); ok {
		return ec.ExitCode()
	}
	return 1
}
