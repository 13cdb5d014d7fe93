package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/pandastack/pandastack/internal/client"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
	"github.com/spf13/cobra"
)

func init() { rootCmd.AddCommand(infoCmd(), usageCmd()) }

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

func usageCmd() *cobra.Command {
	var f apiFlags
	cmd := f.verb("usage", "Show your team's use against its quotas (sandboxes, volumes, databases, apps, functions, snapshots)", cobra.NoArgs, func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
		u, err := c.Usage(ctx)
		return showUsage(cmd, &f, u, err)
	})
	f.register(cmd)
	return cmd
}

// showUsage prints a usage answer as --json or a table (or returns the call's error).
func showUsage(cmd *cobra.Command, f *apiFlags, u v1.Usage, err error) error {
	if err != nil {
		return err
	}
	if f.json {
		return printJSON(cmd.OutOrStdout(), u)
	}
	printUsage(cmd, u)
	return nil
}

func printUsage(cmd *cobra.Command, u v1.Usage) {
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "team %s\n%-12s %10s %10s\n", u.TeamID, "QUOTA", "USED", "LIMIT")
	for _, it := range []struct {
		name string
		v    v1.UsageItem
	}{{"sandboxes", u.Sandboxes}, {"vcpus", u.VCPUs}, {"memory_mib", u.MemoryMiB}, {"volumes", u.Volumes}, {"volume_mib", u.VolumeMiB},
		{"databases", u.Databases}, {"apps", u.Apps}, {"functions", u.Functions}, {"snapshot_mib", u.SnapshotMiB}} {
		limit := "none"
		if it.v.Limit != nil {
			limit = strconv.FormatInt(*it.v.Limit, 10)
		}
		fmt.Fprintf(w, "%-12s %10d %10s\n", it.name, it.v.Used, limit)
	}
}
