package main

import (
	"context"
	"fmt"

	"github.com/pandastack/pandastack/internal/client"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
	"github.com/spf13/cobra"
)

func init() { rootCmd.AddCommand(doctorCmd()) }

// doctorCmd is `pandastack doctor` (admin keys): what crashes left on the hosts, and its repair.
func doctorCmd() *cobra.Command {
	var f apiFlags
	var hosts []string
	var repair bool
	cmd := f.verb("doctor", "Find (and with --repair remove) what crashes left on the hosts: stray VMMs, directories, namespaces, cgroups, unrecorded sandboxes", cobra.NoArgs,
		func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if len(hosts) == 0 {
				all, err := c.ListHosts(ctx)
				if err != nil {
					return err
				}
				for _, h := range all {
					if h.State == "up" {
						hosts = append(hosts, h.ID)
					}
				}
			}
			var reports []v1.DoctorReport
			left := 0
			for _, h := range hosts {
				r, err := c.HostDoctor(ctx, h, repair)
				if err != nil {
					return fmt.Errorf("host %s: %w", h, err)
				}
				reports = append(reports, r)
				for _, fd := range r.Findings {
					if !fd.Repaired {
						left++
					}
				}
			}
			if f.json {
				if err := printJSON(cmd.OutOrStdout(), reports); err != nil {
					return err
				}
			} else if err := printDoctor(cmd, reports, len(hosts)); err != nil {
				return err
			}
			if left > 0 {
				return fmt.Errorf("%d leftovers remain (run with --repair to remove them)", left)
			}
			return nil
		})
	cmd.Flags().StringArrayVar(&hosts, "host", nil, "a host to examine (repeatable; default: every host that is up)")
	cmd.Flags().BoolVar(&repair, "repair", false, "remove what is found")
	cmd.Example = `  pandastack doctor                 # report, every host; exit status 1 if anything is found
  pandastack doctor --host vm-1 --repair`
	return cmd
}

func printDoctor(cmd *cobra.Command, reports []v1.DoctorReport, hosts int) error {
	var rows [][]string
	for _, r := range reports {
		for _, fd := range r.Findings {
			status := "found"
			switch {
			case fd.Error != "":
				status = "repair failed: " + fd.Error
			case fd.Repaired:
				status = "repaired"
			}
			rows = append(rows, []string{r.Host, fd.Kind, fd.Resource, fd.Detail, status})
		}
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintf(cmd.OutOrStdout(), "nothing left behind on %d host(s)\n", hosts)
		return err
	}
	return table(cmd.OutOrStdout(), []string{"HOST", "KIND", "RESOURCE", "DETAIL", "STATUS"}, rows)
}
