package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/pandastack/pandastack/internal/client"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
	"github.com/spf13/cobra"
)

func sandboxCodeCmd(f *apiFlags) *cobra.Command {
	var req v1.CodeRequest
	var timeout time.Duration
	var saveImages string
	cmd := &cobra.Command{
		Use:   "code ID [CODE | -]",
		Short: "Run Python (or JavaScript) in a sandbox's warm kernel (code-interpreter template); variables live on between calls",
		Long: `Run code in a code context of a sandbox made from the code-interpreter template. The code is
the argument, or stdin with "-"; --language javascript (js) runs it in the JavaScript context
(Node.js) instead of the Python one, --context in a context from "sandbox code-context create". Output streams as it is printed; text results follow (the value
of the last expression, tables as text); --save-images writes each PNG result (a matplotlib
chart) to DIR. An exception prints its traceback and exits 1. --json prints the buffered
execution as JSON.`,
		Example: `  pandastack sandbox code sb_123 'x = 21'
  pandastack sandbox code sb_123 'x * 2'
  echo 'import matplotlib.pyplot as plt; plt.plot([1, 3, 2]); plt.show()' | pandastack sandbox code --save-images out sb_123 -
  pandastack sandbox code --language js sb_123 'const xs = [1, 2, 3]; xs.map((x) => x * 2)'`,
		Args: cobra.RangeArgs(1, 2),
		RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			id := args[0]
			req.Code = "-"
			if len(args) == 2 {
				req.Code = args[1]
			}
			if req.Code == "-" {
				b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20+1))
				if err != nil {
					return err
				}
				req.Code = string(b)
			}
			req.TimeoutSeconds = nil
			if timeout != 0 {
				secs := timeout.Seconds()
				req.TimeoutSeconds = &secs
			}
			if f.json {
				x, err := c.RunCode(ctx, id, req)
				if err != nil {
					return err
				}
				return printJSON(cmd.OutOrStdout(), x)
			}
			stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
			images := 0
			var saveErr error
			x, err := c.RunCodeStream(ctx, id, req, func(ev v1.CodeEvent) {
				switch {
				case ev.Stdout != nil:
					io.WriteString(stdout, *ev.Stdout)
				case ev.Stderr != nil:
					io.WriteString(stderr, *ev.Stderr)
				case ev.Result != nil:
					r := ev.Result
					if r.PNG != "" && saveImages != "" {
						images++
						name, err := savePNG(saveImages, images, r.PNG)
						if err != nil && saveErr == nil {
							saveErr = err
						}
						if err == nil {
							fmt.Fprintf(stderr, "saved %s\n", name)
						}
					}
					if r.Text != "" {
						fmt.Fprintln(stdout, r.Text)
					}
				case ev.Error != nil:
					fmt.Fprintln(stderr, ev.Error.Traceback)
				}
			})
			switch {
			case err != nil:
				return err
			case saveErr != nil:
				return saveErr
			case x.Error != nil:
				return &exitError{1, fmt.Sprintf("%s: %s", x.Error.Name, x.Error.Value)}
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&req.ContextID, "context", "", "code context id (default: the sandbox's default context of the language)")
	cmd.Flags().StringVar(&req.Language, "language", "", "python (default) or javascript (js); a --context runs its own language")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "interrupt the code after this long (default 5m)")
	cmd.Flags().StringVar(&saveImages, "save-images", "", "write PNG results to this directory (image-1.png, ...)")
	return cmd
}

var codeContexts = printer[v1.CodeContext]{
	header: []string{"ID", "LANGUAGE", "CWD"},
	row:    func(c v1.CodeContext) []string { return []string{c.ID, c.Language, c.Cwd} },
}

// sandboxCodeContextCmd is `sandbox code-context create|list|delete`: a sandbox's code contexts
// (each its own kernel and variables).
func sandboxCodeContextCmd(f *apiFlags) *cobra.Command {
	cc := &cobra.Command{Use: "code-context", Aliases: []string{"code-contexts"},
		Short: "Create, list and delete a sandbox's code contexts (each a kernel with its own variables)"}
	var req v1.CreateCodeContextRequest
	create := f.verb("create ID", "Start a code context (warm: forked from the snapshot's kernel) and print it", cobra.ExactArgs(1),
		func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			x, err := c.CreateCodeContext(ctx, args[0], req)
			if err != nil {
				return err
			}
			return codeContexts.one(f, cmd, x)
		})
	create.Flags().StringVar(&req.Language, "language", "", "python (default) or javascript (js)")
	create.Flags().StringVar(&req.Cwd, "cwd", "", "the context's working directory (default /home/user)")
	list := f.verb("list ID", "List a sandbox's code contexts (default and default-javascript are made at bake time)", cobra.ExactArgs(1),
		func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			l, err := c.ListCodeContexts(ctx, args[0])
			if err != nil {
				return err
			}
			return codeContexts.print(f, cmd, l, false)
		})
	del := f.verb("delete ID CONTEXT...", "Stop code contexts (their variables are gone)", cobra.MinimumNArgs(2),
		func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			for _, cid := range args[1:] {
				if err := c.DeleteCodeContext(ctx, args[0], cid); err != nil {
					return fmt.Errorf("%s: %w", cid, err)
				}
				if !f.json {
					fmt.Fprintln(cmd.OutOrStdout(), "deleted", cid)
				}
			}
			return nil
		})
	del.Aliases = []string{"rm"}
	cc.AddCommand(create, list, del)
	return cc
}

func savePNG(dir string, n int, b64 string) (string, error) {
	data, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return "", fmt.Errorf("result %d: bad base64 image: %v", n, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	name := filepath.Join(dir, fmt.Sprintf("image-%d.png", n))
	return name, os.WriteFile(name, data, 0o644)
}
