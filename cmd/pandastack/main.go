// Command pandastack is PandaStack's single binary: the control plane (`server`), the host agent
// (`agent`), the all-in-one local mode (`up`) and the CLI verbs.
package main

import (
	"fmt"
	"io"
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
		printError(os.Stderr, err)
		os.Exit(exitCode(err))
	}
}

// printError prints a failure for a terminal: messages carry the server's and the guest's words
// (paths, names), so control characters are escaped.
func printError(w io.Writer, err error) {
	fmt.Fprintln(w, "error:", escapeLines(err.Error()))
}

// exitCoder lets a command choose its exit status (e.g. exec passes the guest's exit code through).
type exitCoder interface{ ExitCode() int }

func exitCode(err error) int {
	if ec, ok := err.(exitCoder); ok {
		return ec.ExitCode()
	}
	return 1
}
