package main

import (
	"strconv"
	"strings"

	"github.com/pandastack/pandastack/internal/client"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
	"github.com/spf13/cobra"
)

func init() {
	rootCmd.AddCommand(hostsCmd())
}

var hostsPrinter = printer[v1.Host]{[]string{"ID", "STATE", "ACCEL", "SANDBOXES", "FREE_SLOTS", "MEM_FREE_MIB", "TEMPLATES", "URL"}, func(h v1.Host) []string {
	return []string{h.ID, h.State, h.Accel, strconv.FormatInt(h.Sandboxes, 10), strconv.FormatInt(h.FreeSlots, 10),
		strconv.FormatInt(h.MemMiBFree, 10), orDash(strings.Join(h.Templates, ",")), h.URL}
}}

// hostsCmd is `pandastack hosts list` (admin keys): the host agents and what runs on them.
func hostsCmd() *cobra.Command {
	cmd, f := group("hosts", "List the host agents and their sandboxes (admin keys); pin a create with `sandbox create --host ID`", "host")
	cmd.AddCommand(listCmd(f, hostsPrinter, "List the host agents, up or down, with their live sandboxes and free room", (*client.Client).ListHosts))
	return cmd
}
