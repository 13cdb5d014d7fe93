package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/pandastack/pandastack/internal/hostagent"
	"github.com/pandastack/pandastack/internal/image"
	"github.com/pandastack/pandastack/internal/template"
	"github.com/spf13/cobra"
)

func init() {
	var cacheDir, guestAgent string
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build guest images ahead of time (an agent builds missing ones on first use)",
	}
	build := &cobra.Command{
		Use:   "build [NAME...]",
		Short: "Fetch and pack the host-side images of catalog templates (default: all); build steps run at the first bake",
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				args = template.CatalogNames()
			}
			if guestAgent == "" {
				if exe, err := os.Executable(); err == nil {
					guestAgent = filepath.Join(filepath.Dir(exe), "pandastack-guest")
				}
			}
			b := &image.Builder{CacheDir: cacheDir, GuestAgent: guestAgent,
				Log: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }}
			for _, name := range args {
				spec, ok := template.CatalogSpec(name)
				if !ok {
					return fmt.Errorf("unknown catalog template %q (known: %v)", name, template.CatalogNames())
				}
				recipe, err := template.Resolve(spec, template.CatalogSpec)
				if err != nil {
					return err
				}
				img, err := b.Build(cmd.Context(), hostagent.ImageSpec(recipe), nil)
				if err != nil {
					return fmt.Errorf("image %s: %w", name, err)
				}
				fmt.Printf("%s: %s\n", name, img.Rootfs)
			}
			return nil
		},
	}
	build.Flags().StringVar(&guestAgent, "guest-agent", "", "pandastack-guest binary (default: next to this binary)")
	cmd.AddCommand(build)

	var unusedFor time.Duration
	var dryRun bool
	prune := &cobra.Command{
		Use:   "prune",
		Short: "Remove rootfs and template build images not used for a while (templates keep copies of theirs)",
		Long: `Remove the image cache's rootfs and template build entries last used longer ago than
--unused-for. Baked templates and running sandboxes keep their own copies, so this costs at most
a rebuild of an image that is asked for again. (Entries superseded by a newer guest agent are
removed on their own once unused for ` + image.SupersededAfter.String() + `.)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if unusedFor < 0 {
				return fmt.Errorf("--unused-for must not be negative")
			}
			entries, err := image.Unused(cacheDir, time.Now().Add(-unusedFor))
			if err != nil {
				return fmt.Errorf("image cache %s: %w", cacheDir, err)
			}
			if !dryRun {
				entries = image.Remove(entries)
			}
			out := cmd.OutOrStdout()
			var total int64
			for _, e := range entries {
				total += e.Bytes
				fmt.Fprintf(out, "%s\t%s\tlast used %s\n", filepath.Base(e.Dir), humanBytes(e.Bytes), e.LastUsed.Format(time.RFC3339))
			}
			verb := "removed"
			if dryRun {
				verb = "would remove"
			}
			fmt.Fprintf(out, "%s %d entries, %s\n", verb, len(entries), humanBytes(total))
			return nil
		},
	}
	prune.Flags().DurationVar(&unusedFor, "unused-for", 7*24*time.Hour, "remove entries last used longer ago than this")
	prune.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be removed, remove nothing")
	cmd.AddCommand(prune)
	cmd.PersistentFlags().StringVar(&cacheDir, "cache-dir", image.CacheDir(), "image cache dir (default $PANDASTACK_IMAGE_CACHE, else "+image.DefaultCacheDir+")")
	rootCmd.AddCommand(cmd)
}
