package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/pandastack/pandastack/internal/client"
	"github.com/spf13/cobra"
)

func init() {
	rootCmd.AddCommand(volumeCmd())
}

// parseVolumes reads --volume VOLUME_ID:/path[:ro|:rw] flags.
func parseVolumes(specs []string) ([]client.VolumeMount, error) {
	var out []client.VolumeMount
	for _, s := range specs {
		parts := strings.Split(s, ":")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
			return nil, fmt.Errorf("--volume %q: want VOLUME_ID:/path or VOLUME_ID:/path:ro", s)
		}
		m := client.VolumeMount{VolumeID: parts[0], MountPath: parts[1]}
		if len(parts) == 3 {
			switch parts[2] {
			case "ro":
				m.ReadOnly = true
			case "rw":
			default:
				return nil, fmt.Errorf("--volume %q: the mode after the path is ro or rw, not %q", s, parts[2])
			}
		}
		out = append(out, m)
	}
	return out, nil
}

func formatAttachments(as []client.VolumeAttachment) string {
	var parts []string
	for _, a := range as {
		mode := "rw"
		if a.ReadOnly {
			mode = "ro"
		}
		parts = append(parts, a.SandboxID+":"+a.MountPath+":"+mode)
	}
	return strings.Join(parts, ",")
}

var volumes = printer[client.Volume]{[]string{"ID", "NAME", "SIZE_MIB", "HOST", "CREATED", "ATTACHED"}, func(v client.Volume) []string {
	return []string{v.ID, orDash(v.Name), strconv.FormatInt(v.SizeMiB, 10), orDash(v.HostID), v.CreatedAt, orDash(formatAttachments(v.Attachments))}
}}

// volumeCmd is `pandastack volume create|list|get|resize|delete`; volumes are mounted with
// `pandastack sandbox create --volume ID:/path[:ro]`.
func volumeCmd() *cobra.Command {
	cmd, f := group("volume", "Create, list, resize and delete volumes: persistent disks that outlive sandboxes", "volumes", "vol")

	var size int64
	var name string
	var quiet bool
	create := &cobra.Command{
		Use:   "create --size-mib N",
		Short: "Create a volume (mount it with `sandbox create --volume ID:/path`)",
		Example: `  vol=$(pandastack volume create --size-mib 1024 --name data -q)
  pandastack sandbox create --template base --volume "$vol:/data"`,
		Args:    cobra.NoArgs,
		PreRunE: requireFlag("size-mib"),
		RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			v, err := c.CreateVolume(ctx, size, name)
			if err != nil {
				return err
			}
			return quietID(f, cmd, volumes, quiet, v.ID, v)
		}),
	}
	create.Flags().Int64Var(&size, "size-mib", 0, "size in MiB (1 to 1048576)")
	create.Flags().StringVar(&name, "name", "", "a name for people (ids are what calls take)")
	create.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the volume's id")

	list := listCmd(f, volumes, "List your team's volumes, newest first", (*client.Client).ListVolumes)
	get := getCmd(f, volumes, "get ID", "Show one volume and the sandboxes that have it mounted", (*client.Client).GetVolume)
	var newSize int64
	resize := getCmd(f, volumes, "resize ID --size-mib N", "Grow a volume (refused while a sandbox has it mounted)",
		func(c *client.Client, ctx context.Context, id string) (client.Volume, error) {
			return c.ResizeVolume(ctx, id, newSize)
		})
	resize.PreRunE = requireFlag("size-mib")
	resize.Flags().Int64Var(&newSize, "size-mib", 0, "the new size in MiB (volumes only grow)")
	del := f.deleteCmd("delete ID...", "Delete volumes and their data (refused while a sandbox has one mounted)", (*client.Client).DeleteVolume)
	cmd.AddCommand(create, list, get, resize, del)
	return cmd
}
