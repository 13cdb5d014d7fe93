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

// Directory watch and archives (docs/files.md): `files watch`, `files upload-dir`,
// `files download-dir` (and `sandbox watch`, the same as `files watch`).

func watchCmd(f *apiFlags) *cobra.Command {
	var recursive bool
	cmd := f.verb("watch ID PATH", "Print a directory's changes as they happen (create, write, remove, rename) until Ctrl-C", cobra.ExactArgs(2),
		func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			w := cmd.OutOrStdout()
			return c.WatchFiles(ctx, args[0], args[1], recursive, func(ev v1.WatchEvent) (bool, error) {
				switch {
				case f.json:
					b, err := json.Marshal(ev)
					if err != nil {
						return true, err
					}
					fmt.Fprintln(w, termtext.EscapeJSON(string(b)))
				case ev.Type == "ready":
					fmt.Fprintln(cmd.ErrOrStderr(), termtext.Escape("watching "+ev.Path+" (Ctrl-C to stop)"))
				case ev.Type == "rename":
					fmt.Fprintln(w, termtext.Escape(fmt.Sprintf("rename  %s -> %s", ev.From, ev.Path)))
				case ev.Type == "overflow":
					fmt.Fprintln(w, termtext.Escape("overflow  "+ev.Message))
				default:
					fmt.Fprintln(w, termtext.Escape(fmt.Sprintf("%-6s  %s", ev.Type, ev.Path)))
				}
				return false, nil
			})
		})
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "watch the directories below too (new ones as they appear)")
	return cmd
}

func uploadDirCmd(f *apiFlags) *cobra.Command {
	return f.verb("upload-dir ID LOCAL_DIR REMOTE_DIR", "Copy a local directory into a sandbox (as a tar.gz; symlinks stay links)", cobra.ExactArgs(3),
		func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			res, err := c.UploadDir(ctx, args[0], args[1], args[2])
			if err != nil {
				return err
			}
			return f.say(cmd, res, termtext.Escape(fmt.Sprintf("unpacked %d entries (%d bytes) into %s", res.Entries, res.Bytes, args[2])))
		})
}

func downloadDirCmd(f *apiFlags) *cobra.Command {
	return f.verb("download-dir ID REMOTE_DIR LOCAL_DIR", "Copy a sandbox's directory to a local one (made if missing; nothing lands outside it)", cobra.ExactArgs(3),
		func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			n, err := c.DownloadDir(ctx, args[0], args[1], args[2])
			if err != nil {
				return err
			}
			return f.say(cmd, map[string]int{"entries": n}, termtext.Escape(fmt.Sprintf("copied %d entries into %s", n, args[2])))
		})
}
