package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/pandastack/pandastack/internal/client"
	"github.com/spf13/cobra"
)

func init() { rootCmd.AddCommand(infoCmd()) }

func infoCmd() *cobra.Command {
	var f apiFlags
	cmd := f.verb("info", "Show what this deployment enforces for every team (egress ranges no policy opens)", cobra.NoArgs, func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
		i, err := c.Info(ctx)
		if err != nil {
			return err
		}
		if f.json {
			return printJSON(cmd.OutOrStdout(), i)
		}
		w := cmd.OutOrStdout()
		fmt.Fprintf(w, "version %s\n\nEgress never reaches (whatever a policy says):\n", i.Version)
		for _, r := range i.Egress.Blocked {
			fmt.Fprintf(w, "  %-18s %s\n", r.Range, r.Why)
		}
		for _, a := range i.Egress.Also {
			fmt.Fprintf(w, "  %s\n", a)
		}
		fmt.Fprintf(w, "\nPrivate ranges, blocked unless the operator opened them:\n")
		for _, r := range i.Egress.Private {
			fmt.Fprintf(w, "  %-18s %s\n", r.Range, r.Why)
		}
		open := "none"
		if len(i.Egress.Open) > 0 {
			open = strings.Join(i.Egress.Open, ", ")
		}
		fmt.Fprintf(w, "\nOpened by the operator (--egress-open): %s\n", open)
		return nil
	})
	f.register(cmd)
	return cmd
}
