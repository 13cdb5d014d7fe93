package main

import (
	"context"
	"strconv"

	"github.com/pandastack/pandastack/internal/client"
	"github.com/spf13/cobra"
)

func init() {
	rootCmd.AddCommand(snapshotCmd())
}

var snapshots = printer[client.Snapshot]{[]string{"ID", "SANDBOX", "TEMPLATE", "SIZE_BYTES", "CREATED"}, func(s client.Snapshot) []string {
	return []string{s.ID, s.SandboxID, s.Template, strconv.FormatInt(s.SizeBytes, 10), s.CreatedAt}
}}

// snapshotCmd is `pandastack snapshot list|get|delete`; snapshots are taken with
// `pandastack sandbox snapshot ID` and used with `pandastack sandbox create --snapshot ID`.
func snapshotCmd() *cobra.Command {
	cmd, f := group("snapshot", "List, show and delete snapshots (take one with `sandbox snapshot ID`)", "snapshots", "snap")

	var o client.SnapshotListOptions
	var pf pageFlags
	list := f.verb("list", "List your team's snapshots, newest first", cobra.NoArgs, func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
		return listPages(f, &pf, cmd, snapshots, func() ([]client.Snapshot, string, error) { return c.ListSnapshots(ctx, o) })
	})
	list.Flags().StringVar(&o.SandboxID, "sandbox", "", "only snapshots of this sandbox")
	pf.register(list, &o.Limit, &o.Cursor)

	get := getCmd(f, snapshots, "get ID", "Show one snapshot", (*client.Client).GetSnapshot)
	del := f.deleteCmd("delete ID...", "Delete snapshots (sandboxes made from them keep running)", (*client.Client).DeleteSnapshot)
	cmd.AddCommand(list, get, del)
	return cmd
}
