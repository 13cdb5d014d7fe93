package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/pandastack/pandastack/internal/client"
	"github.com/pandastack/pandastack/internal/network"
	"github.com/pandastack/pandastack/internal/termtext"
	"github.com/spf13/cobra"
)

func init() {
	var f apiFlags
	sb := &cobra.Command{
		Use:     "sandbox",
		Aliases: []string{"sandboxes", "sb"},
		Short:   "Create, list, exec in, move files in, fork, snapshot, hibernate and kill sandboxes",
	}
	f.register(sb)
	sb.AddCommand(sandboxCreateCmd(&f), sandboxListCmd(&f), sandboxGetCmd(&f), sandboxExecCmd(&f),
		sandboxKillCmd(&f), sandboxTTLCmd(&f), sandboxFilesCmd(&f), sandboxForkCmd(&f), sandboxSnapshotCmd(&f),
		sandboxStateCmd(&f, "hibernate", "Hibernate a sandbox: its memory goes to disk and its VM stops; any call wakes it",
			(*client.Client).Hibernate),
		sandboxStateCmd(&f, "wake", "Wake a hibernated sandbox (any exec or files call also does)", (*client.Client).Wake))
	rootCmd.AddCommand(sb)
}

func printSandboxes(f *apiFlags, cmd *cobra.Command, sbs []client.Sandbox, single bool) error {
	out := cmd.OutOrStdout()
	if f.json {
		if single {
			return printJSON(out, sbs[0])
		}
		return printJSON(out, sbs)
	}
	rows := make([][]string, 0, len(sbs))
	for _, s := range sbs {
		state := s.State
		if s.Error != "" {
			state += " (" + s.Error + ")"
		}
		rows = append(rows, []string{s.ID, s.Template, state, orDash(s.Host), s.CreatedAt, s.ExpiresAt, orDash(formatMetadata(s.Metadata))})
	}
	return table(out, []string{"ID", "TEMPLATE", "STATE", "HOST", "CREATED", "EXPIRES", "METADATA"}, rows)
}

func sandboxCreateCmd(f *apiFlags) *cobra.Command {
	var req client.CreateRequest
	var md, env, allow, deny, volumes []string
	var quiet, noInternet bool
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox from a template, or from a snapshot (--snapshot)",
		Example: `  pandastack sandbox create --template base --ttl 600 --metadata task=demo
  id=$(pandastack sandbox create --template base -q)
  pandastack sandbox create --snapshot snap_123
  pandastack sandbox create --no-internet --allow 10.1.0.0/16
  pandastack sandbox create --volume vol_123:/data --volume vol_456:/ref:ro`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			if req.SnapshotID != "" && !cmd.Flags().Changed("template") {
				req.Template = "" // the snapshot's own
			}
			if req.Metadata, err = parsePairs("metadata", md); err != nil {
				return err
			}
			if req.Env, err = parsePairs("env", env); err != nil {
				return err
			}
			if req.Volumes, err = parseVolumes(volumes); err != nil {
				return err
			}
			if noInternet || len(allow) > 0 || len(deny) > 0 {
				internet := !noInternet
				req.Egress = &network.Egress{Internet: &internet, Allow: allow, Deny: deny}
			}
			ctx, cancel := signalContext()
			defer cancel()
			s, err := c.CreateSandbox(ctx, req)
			if err != nil {
				return err
			}
			if quiet {
				fmt.Fprintln(cmd.OutOrStdout(), s.ID)
				return nil
			}
			return printSandboxes(f, cmd, []client.Sandbox{s}, true)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&req.Template, "template", "t", "base", "template name (see `pandastack template list`)")
	fl.StringVar(&req.SnapshotID, "snapshot", "", "start from this snapshot (memory and disk) instead of a fresh template; it runs on the snapshot's host")
	fl.Int64Var(&req.TTLSeconds, "ttl", 0, "seconds until the sandbox is killed (default: the server's, 300)")
	fl.StringArrayVarP(&md, "metadata", "m", nil, "KEY=VALUE metadata (repeatable)")
	fl.StringArrayVarP(&env, "env", "e", nil, "KEY=VALUE environment variable (repeatable)")
	fl.StringArrayVar(&volumes, "volume", nil, "VOLUME_ID:/path[:ro] mounts a volume (repeatable, at most 4); the sandbox runs on the volumes' host")
	fl.BoolVar(&noInternet, "no-internet", false, "egress: block the internet (only --allow destinations are reachable)")
	fl.StringArrayVar(&allow, "allow", nil, "egress: IPv4 CIDR the sandbox may reach (repeatable; never opens the always-blocked ranges: see GET /v1/info)")
	fl.StringArrayVar(&deny, "deny", nil, "egress: IPv4 CIDR the sandbox may not reach (repeatable; wins over --allow)")
	fl.BoolVarP(&quiet, "quiet", "q", false, "print only the new sandbox's id")
	return cmd
}

func sandboxListCmd(f *apiFlags) *cobra.Command {
	var o client.ListOptions
	var md []string
	var all bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List sandboxes (all but killed ones, unless --state says otherwise)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			if o.Metadata, err = parsePairs("metadata", md); err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			var sbs []client.Sandbox
			for {
				page, next, err := c.ListSandboxes(ctx, o)
				if err != nil {
					return err
				}
				sbs = append(sbs, page...)
				if next == "" || !all {
					if next != "" && !f.json {
						defer fmt.Fprintf(cmd.ErrOrStderr(), "(more: --all, or --cursor %s)\n", next)
					}
					break
				}
				o.Cursor = next
			}
			if sbs == nil {
				sbs = []client.Sandbox{}
			}
			return printSandboxes(f, cmd, sbs, false)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.State, "state", "", "running, hibernated, killed, error, lost (comma-separated) or all")
	fl.StringArrayVarP(&md, "metadata", "m", nil, "KEY=VALUE metadata filter (repeatable; all must match)")
	fl.IntVar(&o.Limit, "limit", 0, "page size (default 100, at most 1000)")
	fl.StringVar(&o.Cursor, "cursor", "", "continue from a previous page")
	fl.BoolVar(&all, "all", false, "follow pages to the end")
	return cmd
}

func sandboxGetCmd(f *apiFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show one sandbox",
		Args:  cobra.ExactArgs(1),
		RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			s, err := c.GetSandbox(ctx, args[0])
			if err != nil {
				return err
			}
			return printSandboxes(f, cmd, []client.Sandbox{s}, true)
		}),
	}
}

func sandboxExecCmd(f *apiFlags) *cobra.Command {
	var req client.ExecRequest
	var env []string
	var stdin bool
	cmd := &cobra.Command{
		Use:   "exec ID -- COMMAND [ARG...]",
		Short: "Run a command in a sandbox, streaming its output; exits with the command's status",
		Long: `Run a command in a sandbox. Output streams as it is produced and the CLI exits with the
command's exit status. One argument is a shell command line (run by the guest's shell); several
are a program and its arguments, run without a shell. With --json the result is buffered and
printed as JSON (exit status 0 unless the call itself failed).`,
		Example: `  pandastack sandbox exec sb_123 -- python -c 'print(2 ** 10)'
  pandastack sandbox exec sb_123 'ls /tmp | wc -l'
  echo hi | pandastack sandbox exec --stdin sb_123 -- cat`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			id, command := args[0], args[1:]
			if len(command) > 0 && command[0] == "--" {
				command = command[1:] // flag parsing stops at the id, so a "--" after it is still here
			}
			if len(command) == 0 {
				return fmt.Errorf("no command given: pandastack sandbox exec ID -- COMMAND [ARG...]")
			}
			if len(command) == 1 {
				req.Cmd, req.Cmd, req.Argv = "", command[0], nil
			} else {
				req.Cmd, req.Argv = "", command
			}
			if req.Env, err = parsePairs("env", env); err != nil {
				return err
			}
			req.Stdin = nil
			if stdin {
				b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 900<<10))
				if err != nil {
					return err
				}
				s := string(b)
				req.Stdin = &s
			}
			ctx, cancel := signalContext()
			defer cancel()
			if f.json {
				r, err := c.Exec(ctx, id, req)
				if err != nil {
					return err
				}
				return printJSON(cmd.OutOrStdout(), r)
			}
			stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
			r, err := c.ExecStream(ctx, id, req, func(stream, data string) {
				if stream == "stderr" {
					io.WriteString(stderr, data)
				} else {
					io.WriteString(stdout, data)
				}
			})
			if err != nil {
				return err
			}
			if r.TimedOut {
				return &exitError{124, fmt.Sprintf("command timed out after %d ms", r.DurationMS)}
			}
			if r.ExitCode != 0 {
				return &exitError{r.ExitCode, fmt.Sprintf("command exited with status %d", r.ExitCode)}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false) // everything after the sandbox id belongs to the command
	fl.Float64Var(&req.TimeoutSeconds, "timeout", 0, "seconds before the command is killed (default: the host's, 60)")
	fl.StringVar(&req.Cwd, "cwd", "", "working directory")
	fl.StringVar(&req.User, "user", "", "user to run as (default: the template's)")
	fl.StringArrayVarP(&env, "env", "e", nil, "KEY=VALUE environment variable (repeatable)")
	fl.BoolVar(&stdin, "stdin", false, "send this process's standard input (up to 900 KiB) to the command")
	return cmd
}

func sandboxKillCmd(f *apiFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "kill ID...",
		Short: "Kill sandboxes (killing a killed one is fine)",
		Args:  cobra.MinimumNArgs(1),
		RunE:  f.eachID("killed", (*client.Client).KillSandbox),
	}
}

func sandboxTTLCmd(f *apiFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "ttl ID SECONDS",
		Short: "Make a sandbox expire SECONDS from now (refresh or extend its TTL)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			secs, err := strconv.ParseInt(args[1], 10, 64)
			if err != nil {
				return fmt.Errorf("SECONDS must be an integer: %q", args[1])
			}
			ctx, cancel := signalContext()
			defer cancel()
			s, err := c.SetTTL(ctx, args[0], secs)
			if err != nil {
				return err
			}
			return printSandboxes(f, cmd, []client.Sandbox{s}, true)
		},
	}
}

func sandboxForkCmd(f *apiFlags) *cobra.Command {
	var count int
	var quiet bool
	cmd := &cobra.Command{
		Use:   "fork ID",
		Short: "Fork a sandbox: children that start from its exact memory and files, then diverge",
		Long: `Fork a sandbox into COUNT children (1-16). Each child starts from the parent's running
processes, memory and files at one instant, then goes its own way; the parent keeps running.
Children live on the parent's host, belong to its team, copy its metadata and get a fresh TTL
from the parent's ttl_seconds.`,
		Example: `  pandastack sandbox fork sb_123 --count 3
  for id in $(pandastack sandbox fork sb_123 -n 4 -q); do pandastack sandbox exec "$id" -- ./try.sh & done`,
		Args: cobra.ExactArgs(1),
		RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			kids, err := c.Fork(ctx, args[0], count)
			if err != nil {
				return err
			}
			if quiet {
				for _, k := range kids {
					fmt.Fprintln(cmd.OutOrStdout(), k.ID)
				}
				return nil
			}
			return printSandboxes(f, cmd, kids, false)
		}),
	}
	cmd.Flags().IntVarP(&count, "count", "n", 1, "how many children (1-16)")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the children's ids, one a line")
	return cmd
}

func sandboxSnapshotCmd(f *apiFlags) *cobra.Command {
	var quiet bool
	cmd := &cobra.Command{
		Use:   "snapshot ID",
		Short: "Snapshot a sandbox (memory and disk); it keeps running. Create from it with --snapshot",
		Args:  cobra.ExactArgs(1),
		RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			sn, err := c.CreateSnapshot(ctx, args[0])
			if err != nil {
				return err
			}
			if quiet {
				fmt.Fprintln(cmd.OutOrStdout(), sn.ID)
				return nil
			}
			return printSnapshots(f, cmd, []client.Snapshot{sn}, true)
		}),
	}
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the snapshot's id")
	return cmd
}

// sandboxStateCmd is hibernate or wake: one call, the sandbox printed after it.
func sandboxStateCmd(f *apiFlags, name, short string, call func(*client.Client, context.Context, string) (client.Sandbox, error)) *cobra.Command {
	return &cobra.Command{
		Use:   name + " ID",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			s, err := call(c, ctx, args[0])
			if err != nil {
				return err
			}
			return printSandboxes(f, cmd, []client.Sandbox{s}, true)
		}),
	}
}

func sandboxFilesCmd(f *apiFlags) *cobra.Command {
	files := &cobra.Command{Use: "files", Short: "Read, write, list and move files in a sandbox"}
	run := func(n int, use, short string, fn func(cmd *cobra.Command, c *client.Client, args []string) error) *cobra.Command {
		return &cobra.Command{Use: use, Short: short, Args: cobra.ExactArgs(n), RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			return fn(cmd, c, args)
		}}
	}
	var outFile string
	read := run(2, "read ID PATH", "Print a file (or save it with -o)", func(cmd *cobra.Command, c *client.Client, args []string) error {
		ctx, cancel := signalContext()
		defer cancel()
		body, _, err := c.ReadFile(ctx, args[0], args[1])
		if err != nil {
			return err
		}
		defer body.Close()
		var w io.Writer = cmd.OutOrStdout()
		if outFile != "" && outFile != "-" {
			fh, err := os.Create(outFile)
			if err != nil {
				return err
			}
			defer fh.Close()
			w = fh
		}
		_, err = io.Copy(w, body)
		return err
	})
	read.Flags().StringVarP(&outFile, "output", "o", "", "write to this local file instead of stdout")

	write := &cobra.Command{
		Use:   "write ID PATH [LOCAL_FILE|-]",
		Short: "Write a file (from a local file, or stdin); parents are created",
		Args:  cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			var r io.Reader = cmd.InOrStdin()
			size := int64(-1)
			if len(args) == 3 && args[2] != "-" {
				fh, err := os.Open(args[2])
				if err != nil {
					return err
				}
				defer fh.Close()
				if st, err := fh.Stat(); err == nil && st.Mode().IsRegular() {
					size = st.Size()
				}
				r = fh
			}
			ctx, cancel := signalContext()
			defer cancel()
			st, err := c.WriteFile(ctx, args[0], args[1], r, size)
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), st)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%d bytes)\n", termtext.Escape(orDash(st.Path)), st.Size)
			return nil
		},
	}

	printStats := func(cmd *cobra.Command, sts []client.Stat) error {
		if f.json {
			return printJSON(cmd.OutOrStdout(), sts)
		}
		rows := make([][]string, 0, len(sts))
		for _, s := range sts {
			name := s.Path
			if s.Target != "" {
				name += " -> " + s.Target
			}
			rows = append(rows, []string{s.Type, s.Mode, strconv.FormatInt(s.Size, 10), s.MTime, name})
		}
		return table(cmd.OutOrStdout(), []string{"TYPE", "MODE", "SIZE", "MODIFIED", "PATH"}, rows)
	}
	var depth int
	list := run(2, "list ID PATH", "List a directory", func(cmd *cobra.Command, c *client.Client, args []string) error {
		ctx, cancel := signalContext()
		defer cancel()
		sts, err := c.ListFiles(ctx, args[0], args[1], depth)
		if err != nil {
			return err
		}
		if sts == nil {
			sts = []client.Stat{}
		}
		return printStats(cmd, sts)
	})
	list.Aliases = []string{"ls"}
	list.Flags().IntVar(&depth, "depth", 1, "how many levels to descend (1-10)")

	stat := run(2, "stat ID PATH", "Describe a path", func(cmd *cobra.Command, c *client.Client, args []string) error {
		ctx, cancel := signalContext()
		defer cancel()
		st, err := c.StatFile(ctx, args[0], args[1])
		if err != nil {
			return err
		}
		if f.json {
			return printJSON(cmd.OutOrStdout(), st)
		}
		return printStats(cmd, []client.Stat{st})
	})
	mkdir := run(2, "mkdir ID PATH", "Create a directory and its parents", func(cmd *cobra.Command, c *client.Client, args []string) error {
		ctx, cancel := signalContext()
		defer cancel()
		return c.Mkdir(ctx, args[0], args[1])
	})
	var recursive bool
	rm := run(2, "rm ID PATH", "Remove a file (or a directory with -r)", func(cmd *cobra.Command, c *client.Client, args []string) error {
		ctx, cancel := signalContext()
		defer cancel()
		return c.Remove(ctx, args[0], args[1], recursive)
	})
	rm.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove a directory and everything in it")
	mv := run(3, "mv ID FROM TO", "Move or rename a path", func(cmd *cobra.Command, c *client.Client, args []string) error {
		ctx, cancel := signalContext()
		defer cancel()
		return c.Move(ctx, args[0], args[1], args[2])
	})
	files.AddCommand(read, write, list, stat, mkdir, rm, mv)
	return files
}
