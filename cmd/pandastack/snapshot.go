package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/pandastack/pandastack/internal/client"
	"github.com/spf13/cobra"
)

func init() {
	rootCmd.AddCommand(snapshotCmd())
}

func printSnapshots(f *apiFlags, cmd *cobra.Command, sns []client.Snapshot, single bool) error {
	out := cmd.OutOrStdout()
	if f.json {
		if single {
			return printJSON(out, sns[0])
		}
		return printJSON(out, sns)
	}
	rows := make([][]string, 0, len(sns))
	for _, s := range sns {
		rows = append(rows, []string{s.ID, s.SandboxID, s.Template, strconv.FormatInt(s.SizeBytes, 10), s.CreatedAt})
	}
	return table(out, []string{"ID", "SANDBOX", "TEMPLATE", "SIZE_BYTES", "CREATED"}, rows)
}

// snapshotCmd is `pandastack snapshot list|get|delete`; snapshots are taken with
// `pandastack sandbox snapshot ID` and used with `pandastack sandbox create --snapshot ID`.
func snapshotCmd() *cobra.Command {
	var f apiFlags
	cmd := &cobra.Command{
		Use:     "snapshot",
		Aliases: []string{"snapshots", "snap"},
		Short:   "List, show and delete snapshots (take one with `sandbox snapshot ID`)",
	}
	f.register(cmd)

	var o client.SnapshotListOptions
	var all bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List your team's snapshots, newest first",
		Args:  cobra.NoArgs,
		RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			var sns []client.Snapshot
			for {
				page, next, err := c.ListSnapshots(ctx, o)
				if err != nil {
					return err
				}
				sns = append(sns, page...)
				if next == "" || !all {
					if next != "" && !f.json {
						defer fmt.Fprintf(cmd.ErrOrStderr(), "(more: --all, or --cursor %s)\n", next)
					}
					break
				}
				o.Cursor = next
			}
			if sns == nil {
				sns = []client.Snapshot{}
			}
			return printSnapshots(&f, cmd, sns, false)
		}),
	}
	fl := list.Flags()
	fl.StringVar(&o.SandboxID, "sandbox", "", "only snapshots of this sandbox")
	fl.IntVar(&o.Limit, "limit", 0, "page size (default 100, at most 1000)")
	fl.StringVar(&o.Cursor, "cursor", "", "continue from a previous page")
	fl.BoolVar(&all, "all", false, "follow pages to the end")

	get := &cobra.Command{
		Use:   "get ID",
		Short: "Show one snapshot",
		Args:  cobra.ExactArgs(1),
		RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			sn, err := c.GetSnapshot(ctx, args[0])
			if err != nil {
				return err
			}
			return printSnapshots(&f, cmd, []client.Snapshot{sn}, true)
		}),
	}
	del := &cobra.Command{
		Use:     "delete ID...",
		Aliases: []string{"rm"},
		Short:   "Delete snapshots (sandboxes made from them keep running)",
		Args:    cobra.MinimumNArgs(1),
		RunE:    f.eachID("deleted", (*client.Client).DeleteSnapshot),
	}
	cmd.AddCommand(list, get, del)
	return cmd
}
