package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/pandastack/pandastack/internal/client"
	"github.com/pandastack/pandastack/internal/termtext"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
	"github.com/spf13/cobra"
)

func init() { rootCmd.AddCommand(eventsCmd()) }

// eventsCmd is `pandastack events`: GET /v1/events until Ctrl-C (or the key is revoked).
func eventsCmd() *cobra.Command {
	var f apiFlags
	cmd := f.verb("events", "Follow your team's changes as they happen (sandboxes created, hibernated, woken, killed, lost; app deployments built, failed, switched to; processes that exited; every changing call)", cobra.NoArgs,
		func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			w := cmd.OutOrStdout()
			return c.Events(ctx, func(ev v1.Event) (bool, error) {
				switch {
				case f.json && ev.Type != "ping":
					b, err := json.Marshal(ev)
					if err != nil {
						return true, err
					}
					fmt.Fprintln(w, termtext.EscapeJSON(string(b)))
				case ev.Type == "sandbox" && ev.Sandbox != nil:
					sb := ev.Sandbox
					fmt.Fprintln(w, termtext.Escape(fmt.Sprintf("%s  %s  %-10s  %s  %s", ev.At, sb.ID, sb.State, sb.Host, sb.Error)))
				case ev.Type == "deployment" && ev.Deployment != nil:
					d := ev.Deployment
					fmt.Fprintln(w, termtext.Escape(fmt.Sprintf("%s  %s  %-10s  app %s  %s", ev.At, d.ID, d.State, d.AppID, d.Error)))
				case ev.Type == "change" && ev.Change != nil:
					c := ev.Change
					fmt.Fprintln(w, termtext.Escape(fmt.Sprintf("%s  %s  %s %s (%d)", ev.At, c.ResourceID, c.Method, c.Route, c.Status)))
				case ev.Type == "process.exited" && ev.Process != nil:
					p := ev.Process
					fmt.Fprintln(w, termtext.Escape(fmt.Sprintf("%s  %s  process %d %q exited %d %s", ev.At, p.SandboxID, p.Pid, p.Tag, p.ExitCode, p.Signal)))
				case ev.Database != nil:
					d := ev.Database
					fmt.Fprintln(w, termtext.Escape(fmt.Sprintf("%s  %s  %s %s %s", ev.At, d.ID, ev.Type, d.BackupID, d.Trigger)))
				}
				return false, nil
			})
		})
	f.register(cmd)
	return cmd
}
