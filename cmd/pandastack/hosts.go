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
	state := h.State
	if h.Draining {
		state += ",draining"
	}
	return []string{h.ID, state, h.Accel, strconv.FormatInt(h.Sandboxes, 10), strconv.FormatInt(h.FreeSlots, 10),
		strconv.FormatInt(h.MemMiBFree, 10), orDash(strings.Join(h.Templates, ",")), h.URL}
}}

var drainPrinter = printer[v1.DrainReport]{[]string{"HOST", "MOVED", "KEPT"}, func(r v1.DrainReport) []string {
	kept := make([]string, len(r.Kept))
	for i, k := range r.Kept {
		kept[i] = k.SandboxID + " (" + k.Reason + ")"
	}
	return []string{r.Host, strconv.Itoa(r.Moved), orDash(strings.Join(kept, "; "))}
}}

// hostsCmd is `pandastack hosts list` (admin keys): the host agents and what runs on them.
func hostsCmd() *cobra.Command {
	cmd, f := group("hosts", "List and drain the host agents (admin keys); pin a create with `sandbox create --host ID`", "host")
	cmd.AddCommand(listCmd(f, hostsPrinter, "List the host agents, up or down, with their live sandboxes and free room", (*client.Client).ListHosts),
		getCmd(f, drainPrinter, "drain ID", "Place nothing new on a host and hibernate its sandboxes: each wakes on another host on its next call (needs a blob store; docs/multi-host.md)", (*client.Client).DrainHost),
		&cobra.Command{Use: "undrain ID...", Short: "End a host's drain: sandboxes are placed there again", Args: cobra.MinimumNArgs(1),
			RunE: f.eachID("undrained", (*client.Client).UndrainHost)})
	return cmd
}
