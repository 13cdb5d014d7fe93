package main

import (
	"fmt"
	"os"
	"path/filepath"

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
	build.Flags().StringVar(&cacheDir, "cache-dir", image.CacheDir(), "image cache dir (default $PANDASTACK_IMAGE_CACHE, else "+image.DefaultCacheDir+")")
	build.Flags().StringVar(&guestAgent, "guest-agent", "", "pandastack-guest binary (default: next to this binary)")
	cmd.AddCommand(build)
	rootCmd.AddCommand(cmd)
}
