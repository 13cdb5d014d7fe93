package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/pandastack/pandastack/internal/client"
	"github.com/pandastack/pandastack/internal/template"
	"github.com/pandastack/pandastack/internal/termtext"
	"github.com/spf13/cobra"
)

func humanMiB(n int) string {
	if n > 0 && n%1024 == 0 {
		return strconv.Itoa(n/1024) + " GiB"
	}
	return strconv.Itoa(n) + " MiB"
}

func humanBytes(n int64) string {
	if n <= 0 {
		return "-"
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f, i = f/1024, i+1
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}

func bakeTime(ms int64) string {
	if ms <= 0 {
		return "-"
	}
	return (time.Duration(ms) * time.Millisecond).Round(100 * time.Millisecond).String()
}

var templates = printer[client.Template]{[]string{"NAME", "OWNER", "VCPUS", "MEMORY", "DISK", "SIZE", "BAKE", "BAKED"}, func(t client.Template) []string {
	return []string{t.Name, orDash(t.Owner), strconv.Itoa(t.VCPUs), humanMiB(t.MemoryMiB), humanMiB(t.DiskMiB),
		humanBytes(t.SizeBytes), bakeTime(t.BakeMS), yesNo(t.Baked)}
}}

// readSpecFile reads a template spec and inlines each files[].src, read relative to the spec's
// directory (the API never reads paths on the server). "-" is stdin, with src relative to the
// working directory.
func readSpecFile(path string, stdin io.Reader) ([]byte, error) {
	var data []byte
	var err error
	dir := "."
	if path == "-" {
		data, err = io.ReadAll(io.LimitReader(stdin, template.MaxSpecBytes+1))
	} else {
		data, err = os.ReadFile(path)
		dir = filepath.Dir(path)
	}
	if err != nil {
		return nil, err
	}
	spec, err := template.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if err := template.ReadSrc(&spec, func(name string) ([]byte, error) {
		return os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
	}); err != nil {
		return nil, err
	}
	return spec.JSON(), nil
}

// templateCmd is `pandastack template list|get|build|delete`.
func templateCmd() *cobra.Command {
	cmd, f := group("template", "List the template catalog, and build and delete your team's own templates", "templates", "tpl")
	list := listCmd(f, templates, "List the catalog's templates and your team's", (*client.Client).Templates)
	get := getCmd(f, templates, "get NAME", "Show one template (your team's by that name, else the catalog's; aliases resolve)", (*client.Client).Template)
	var file string
	build := &cobra.Command{
		Use:   "build -f SPEC.yaml",
		Short: "Build a template for your team from a spec (progress goes to stderr)",
		Long: `Build a template for your team from a spec file (YAML or JSON; see docs/templates.md).
files[].src are read relative to the spec's directory and sent as content. The build log goes
to stderr as it comes; the template is printed when it is ready. Building a name again rebuilds
it. Ctrl-C cancels the build.`,
		Example: `  pandastack template build -f web.yaml
  pandastack sandbox create --template web`,
		Args: cobra.NoArgs,
		RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if file == "" {
				return fmt.Errorf("-f SPEC is required (a YAML or JSON template spec, - for stdin)")
			}
			spec, err := readSpecFile(file, cmd.InOrStdin())
			if err != nil {
				return err
			}
			log := cmd.ErrOrStderr()
			t, err := c.BuildTemplate(ctx, spec, func(line string) { fmt.Fprintln(log, termtext.Escape(line)) })
			if err != nil {
				return err
			}
			return templates.one(f, cmd, t)
		}),
	}
	build.Flags().StringVarP(&file, "file", "f", "", "the spec file (YAML or JSON; - reads stdin)")
	del := f.deleteCmd("delete NAME...", "Delete your team's templates (refused while sandboxes or snapshots use one)", (*client.Client).DeleteTemplate)
	cmd.AddCommand(list, get, build, del)
	return cmd
}
