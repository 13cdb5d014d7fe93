// Command pandastack is PandaStack's single binary: the control plane (`server`), the host agent
// (`agent`), the all-in-one local mode (`up`) and the CLI verbs.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/pandastack/pandastack/internal/client"
	"github.com/pandastack/pandastack/internal/termtext"

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

func init() {
	rootCmd.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version (as --version does)",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, args []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "pandastack version %s\n", version)
		},
	})
	// Cobra's own complaints (unknown command, bad flag) go through main's one error printer.
	rootCmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return err })
}

func main() {
	cmd, err := rootCmd.ExecuteC()
	if err != nil {
		if f := cmd.Flags().Lookup("json"); f != nil && f.Value.String() == "true" {
			printErrorJSON(os.Stderr, err)
		} else {
			printError(os.Stderr, err)
		}
		os.Exit(exitCode(err))
	}
}

// printError prints a failure for a terminal, always as "error: …" (the CLI's one prefix):
// messages carry the server's and the guest's words (paths, names), so control characters are
// escaped.
func printError(w io.Writer, err error) {
	fmt.Fprintln(w, "error:", escapeLines(err.Error()))
}

// cliError is a failure as --json prints it (to stderr, one object): the API's code, message and
// request id; `unreachable` when the server did not answer, `cli` for the CLI's own refusals
// (flags, arguments, local files). RequestID is null when no request was answered.
type cliError struct {
	Code      string  `json:"code"`
	Message   string  `json:"message"`
	RequestID *string `json:"request_id"`
}

func printErrorJSON(w io.Writer, err error) {
	e := cliError{Code: "cli", Message: err.Error()}
	var ae *client.APIError
	var ce *client.ConnError
	switch {
	case errors.As(err, &ae):
		// The API's own message, with the CLI's context (an id it was acting on) kept.
		e.Code, e.Message, e.RequestID = ae.Code, strings.Replace(err.Error(), ae.Error(), ae.Message, 1), &ae.RequestID
	case errors.As(err, &ce):
		e.Code = "unreachable"
	}
	b, _ := json.Marshal(e)
	fmt.Fprintln(w, termtext.EscapeJSON(string(b)))
}

// exitCoder lets a command choose its exit status (e.g. exec passes the guest's exit code through).
type exitCoder interface{ ExitCode() int }

func exitCode(err error) int {
	if ec, ok := err.(exitCoder); ok {
		return ec.ExitCode()
	}
	return 1
}
