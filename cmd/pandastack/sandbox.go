package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/pandastack/pandastack/internal/client"
	"github.com/pandastack/pandastack/internal/network"
	"github.com/pandastack/pandastack/internal/termtext"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func init() {
	sb, f := group("sandbox", "Create, list, exec in, move files in, fork, snapshot, hibernate and kill sandboxes", "sandboxes", "sb")
	sb.AddCommand(sandboxCreateCmd(f), sandboxListCmd(f), getCmd(f, sandboxes, "get ID", "Show one sandbox", (*client.Client).GetSandbox),
		sandboxExecCmd(f), sandboxCodeCmd(f), sandboxCodeContextCmd(f), sandboxStartCmd(f), sandboxPsCmd(f), sandboxLogsCmd(f), sandboxKillProcessCmd(f), sandboxShellCmd(f), watchCmd(f),
		getCmd(f, sandboxMetrics, "metrics ID", "Show a running sandbox's CPU, memory and disk use now (as its guest and its host see them)",
			(*client.Client).SandboxMetrics),
		sandboxKillCmd(f), sandboxTTLCmd(f), sandboxFilesCmd(f), sandboxForkCmd(f), sandboxSnapshotCmd(f),
		getCmd(f, sandboxes, "hibernate ID", "Hibernate a sandbox: its memory goes to disk and its VM stops; any call wakes it",
			(*client.Client).Hibernate),
		getCmd(f, sandboxes, "wake ID", "Wake a hibernated sandbox (any exec or files call also does)", (*client.Client).Wake))
	rootCmd.AddCommand(sb)
}

var sandboxMetrics = printer[client.SandboxMetrics]{
	header: []string{"VCPUS", "CPU%", "MEM USED", "MEM TOTAL", "DISK USED", "DISK TOTAL", "HOST CPU S", "HOST MEM"},
	row: func(m client.SandboxMetrics) []string {
		return []string{strconv.Itoa(m.VCPUs), strconv.FormatFloat(m.CPUUsedPct, 'f', 1, 64),
			humanBytes(m.MemUsedBytes), humanBytes(m.MemTotalBytes), humanBytes(m.DiskUsedBytes), humanBytes(m.DiskTotalBytes),
			strconv.FormatFloat(m.HostCPUSeconds, 'f', 1, 64), humanBytes(m.HostMemBytes)}
	},
}

var sandboxes = printer[client.Sandbox]{
	header: []string{"ID", "TEMPLATE", "STATE", "HOST", "CREATED", "EXPIRES", "METADATA"},
	row: func(s client.Sandbox) []string {
		state := s.State
		if s.Error != "" {
			state += " (" + s.Error + ")"
		}
		return []string{s.ID, s.Template, state, orDash(s.Host), s.CreatedAt, s.ExpiresAt, orDash(formatMetadata(s.Metadata))}
	},
}

func sandboxCreateCmd(f *apiFlags) *cobra.Command {
	var req client.CreateRequest
	var md, env, allow, deny, volumes []string
	var quiet, noInternet, privatePorts, publicPorts bool
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox from a template, or from a snapshot (--snapshot)",
		Example: `  pandastack sandbox create --template base --ttl 600 --metadata task=demo
  id=$(pandastack sandbox create --template base -q)
  pandastack sandbox create --snapshot snap_123
  pandastack sandbox create --no-internet --allow 10.1.0.0/16
  pandastack sandbox create --volume vol_123:/data --volume vol_456:/ref:ro
  pandastack sandbox create --private-ports   # the port proxy then asks for the printed token`,
		Args: cobra.NoArgs,
		RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			var err error
			req.TTLSeconds = 0 // the server's default
			if cmd.Flags().Changed("ttl") {
				if req.TTLSeconds, err = wholeSeconds("--ttl", ttl); err != nil {
					return err
				}
				if req.TTLSeconds < 1 { // as the API refuses ttl_seconds 0 (here it would read as "not given")
					return fmt.Errorf("--ttl must be at least 1 second, got %s", ttl)
				}
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
			req.PublicPorts = nil // the server's default
			switch {
			case privatePorts && publicPorts:
				return fmt.Errorf("--private-ports and --public-ports contradict each other: give one")
			case privatePorts || publicPorts:
				req.PublicPorts = &publicPorts
			}
			s, err := c.CreateSandbox(ctx, req)
			if err != nil {
				return err
			}
			if s.TrafficToken != "" && !f.json {
				fmt.Fprintf(cmd.ErrOrStderr(), "ports are private: send header %s: %s (shown once)\n", v1.TrafficTokenHeader, s.TrafficToken)
			}
			return quietID(f, cmd, sandboxes, quiet, s.ID, s)
		}),
	}
	fl := cmd.Flags()
	fl.StringVarP(&req.Template, "template", "t", "base", "template name (see `pandastack template list`)")
	fl.StringVar(&req.SnapshotID, "snapshot", "", "start from this snapshot (memory and disk) instead of a fresh template; it runs on the snapshot's host (any host when the snapshot is published)")
	durationVar(fl, &ttl, "ttl", 0, "time until the sandbox is killed: seconds (600) or a duration (10m) (default: the server's, 300s)")
	fl.StringArrayVarP(&md, "metadata", "m", nil, "KEY=VALUE metadata (repeatable)")
	fl.StringArrayVarP(&env, "env", "e", nil, "KEY=VALUE environment variable (repeatable)")
	fl.StringArrayVar(&volumes, "volume", nil, "VOLUME_ID:/path[:ro] mounts a volume (repeatable, at most 4); the sandbox runs on the volumes' host")
	fl.BoolVar(&noInternet, "no-internet", false, "egress: block the internet (only --allow destinations are reachable)")
	fl.StringArrayVar(&allow, "allow", nil, "egress: IPv4 CIDR the sandbox may reach (repeatable; never opens the always-blocked ranges: see GET /v1/info)")
	fl.StringArrayVar(&deny, "deny", nil, "egress: IPv4 CIDR the sandbox may not reach (repeatable; wins over --allow)")
	fl.StringVar(&req.Host, "host", "", "admin keys: the one host to run on (see `pandastack hosts list`)")
	fl.BoolVar(&privatePorts, "private-ports", false, "the port proxy asks for the sandbox's traffic token (printed once, to stderr)")
	fl.BoolVar(&publicPorts, "public-ports", false, "anyone who knows the sandbox id reaches its ports (default unless the server runs with --private-ports)")
	fl.BoolVarP(&quiet, "quiet", "q", false, "print only the new sandbox's id")
	return cmd
}

func sandboxListCmd(f *apiFlags) *cobra.Command {
	var o client.ListOptions
	var md []string
	var pf pageFlags
	cmd := f.verb("list", "List sandboxes (all but killed ones, unless --state says otherwise)", cobra.NoArgs, func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
		var err error
		if o.Metadata, err = parsePairs("metadata", md); err != nil {
			return err
		}
		return listPages(f, &pf, cmd, sandboxes, func() ([]client.Sandbox, string, error) { return c.ListSandboxes(ctx, o) })
	})
	fl := cmd.Flags()
	fl.StringVar(&o.State, "state", "", "running, hibernated, killed, error, lost (comma-separated) or all")
	fl.StringArrayVarP(&md, "metadata", "m", nil, "KEY=VALUE metadata filter (repeatable; all must match)")
	pf.register(cmd, &o.Limit, &o.Cursor)
	return cmd
}

func sandboxExecCmd(f *apiFlags) *cobra.Command {
	var req client.ExecRequest
	var timeout time.Duration
	var cf commandFlags
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
		Args: commandArgs("exec"),
		RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			id, err := cf.parse(args, &req.Cmd, &req.Argv, &req.Env, &req.Cwd, &req.User)
			if err != nil {
				return err
			}
			req.Stdin, req.TimeoutSeconds = nil, nil
			if timeout != 0 { // 0 means the host's default
				secs := timeout.Seconds()
				req.TimeoutSeconds = &secs
			}
			if stdin {
				b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 900<<10))
				if err != nil {
					return err
				}
				s := string(b)
				req.Stdin = &s
			}
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
		}),
	}
	fl := cmd.Flags()
	durationVar(fl, &timeout, "timeout", 0, "time before the command is killed: seconds (30) or a duration (5m) (default: the host's, 60s)")
	cf.register(fl)
	fl.BoolVar(&stdin, "stdin", false, "send this process's standard input (up to 900 KiB) to the command")
	return cmd
}

// commandArgs checks the arguments of a verb that runs a command: ID -- COMMAND [ARG...].
func commandArgs(verb string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		command := args[min(1, len(args)):]
		if len(command) > 0 && command[0] == "--" {
			command = command[1:] // flag parsing stops at the id, so a "--" after it is still here
		}
		switch {
		case len(args) == 0:
			return fmt.Errorf("missing sandbox id and command: pandastack sandbox %s ID -- COMMAND [ARG...]", verb)
		case len(command) == 0:
			return fmt.Errorf("missing command: pandastack sandbox %s ID -- COMMAND [ARG...]", verb)
		}
		return nil
	}
}

// commandFlags are what exec and start take besides the command: --cwd, --user and --env.
type commandFlags struct {
	cwd, user string
	env       []string
}

func (cf *commandFlags) register(fl *pflag.FlagSet) {
	fl.SetInterspersed(false) // everything after the sandbox id belongs to the command
	fl.StringVar(&cf.cwd, "cwd", "", "working directory")
	fl.StringVar(&cf.user, "user", "", "user to run as (default: the template's)")
	fl.StringArrayVarP(&cf.env, "env", "e", nil, "KEY=VALUE environment variable (repeatable)")
}

// parse fills a request from checked arguments (commandArgs) and the flags, and returns the
// sandbox id: one argument is a shell command line (cmd), several a program and its arguments.
func (cf *commandFlags) parse(args []string, cmd *string, argv *[]string, env *map[string]string, cwd, user *string) (string, error) {
	id, command := args[0], args[1:]
	if command[0] == "--" {
		command = command[1:]
	}
	*cmd, *argv = "", command
	if len(command) == 1 {
		*cmd, *argv = command[0], nil
	}
	*cwd, *user = cf.cwd, cf.user
	var err error
	*env, err = parsePairs("env", cf.env)
	return id, err
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
	return f.verb("ttl ID TTL", "Make a sandbox expire TTL from now, in seconds (600) or a duration (10m): refresh or extend it", cobra.ExactArgs(2), func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
		d, err := parseDuration(args[1])
		if err != nil {
			return fmt.Errorf("TTL %w", err)
		}
		secs, err := wholeSeconds("TTL", d)
		if err != nil {
			return err
		}
		s, err := c.SetTTL(ctx, args[0], secs)
		if err != nil {
			return err
		}
		return sandboxes.one(f, cmd, s)
	})
}

func sandboxForkCmd(f *apiFlags) *cobra.Command {
	var count int
	var quiet bool
	var host string
	cmd := &cobra.Command{
		Use:   "fork ID",
		Short: "Fork a sandbox: children that start from its exact memory and files, then diverge",
		Long: `Fork a sandbox into COUNT children (1-16). Each child starts from the parent's running
processes, memory and files at one instant, then goes its own way; the parent keeps running.
Children live on the parent's host (or, for admin keys, --host: another host when the hosts share
a blob store), belong to its team, copy its metadata and get a fresh TTL from the parent's
ttl_seconds.`,
		Example: `  pandastack sandbox fork sb_123 --count 3
  for id in $(pandastack sandbox fork sb_123 -n 4 -q); do pandastack sandbox exec "$id" -- ./try.sh & done`,
		Args: cobra.ExactArgs(1),
		RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			kids, err := c.ForkTo(ctx, args[0], count, host)
			if err != nil {
				return err
			}
			if quiet {
				for _, k := range kids {
					fmt.Fprintln(cmd.OutOrStdout(), k.ID)
				}
				return nil
			}
			return sandboxes.print(f, cmd, kids, false)
		}),
	}
	cmd.Flags().IntVarP(&count, "count", "n", 1, "how many children (1-16)")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the children's ids, one a line")
	cmd.Flags().StringVar(&host, "host", "", "admin keys: the host the children run on (default: the parent's; another needs a shared blob store)")
	return cmd
}

func sandboxSnapshotCmd(f *apiFlags) *cobra.Command {
	var quiet bool
	cmd := f.verb("snapshot ID", "Snapshot a sandbox (memory and disk); it keeps running. Create from it with --snapshot", cobra.ExactArgs(1), func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
		sn, err := c.CreateSnapshot(ctx, args[0])
		if err != nil {
			return err
		}
		return quietID(f, cmd, snapshots, quiet, sn.ID, sn)
	})
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the snapshot's id")
	return cmd
}

var stats = printer[client.Stat]{
	header: []string{"TYPE", "MODE", "SIZE", "MODIFIED", "PATH"},
	row: func(s client.Stat) []string {
		name := s.Path
		if s.Target != "" {
			name += " -> " + s.Target
		}
		return []string{s.Type, s.Mode, strconv.FormatInt(s.Size, 10), s.MTime, name}
	},
}

func sandboxFilesCmd(f *apiFlags) *cobra.Command {
	files := &cobra.Command{Use: "files", Short: "Read, write, list and move files in a sandbox"}
	var outFile string
	read := f.verb("read ID PATH", "Print a file (or save it with -o)", cobra.ExactArgs(2), func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
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

	write := f.verb("write ID PATH [LOCAL_FILE|-]", "Write a file (from a local file, or stdin); parents are created", cobra.RangeArgs(2, 3), func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
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
		st, err := c.WriteFile(ctx, args[0], args[1], r, size)
		if err != nil {
			return err
		}
		return f.say(cmd, st, fmt.Sprintf("wrote %s (%d bytes)", termtext.Escape(orDash(st.Path)), st.Size))
	})

	var depth int
	list := f.verb("list ID PATH", "List a directory", cobra.ExactArgs(2), func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
		sts, err := c.ListFiles(ctx, args[0], args[1], depth)
		if err != nil {
			return err
		}
		if sts == nil {
			sts = []client.Stat{}
		}
		return stats.print(f, cmd, sts, false)
	})
	list.Aliases = []string{"ls"}
	list.Flags().IntVar(&depth, "depth", 1, "how many levels to descend (1-10)")

	stat := f.verb("stat ID PATH", "Describe a path", cobra.ExactArgs(2), func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
		st, err := c.StatFile(ctx, args[0], args[1])
		if err != nil {
			return err
		}
		return stats.one(f, cmd, st)
	})
	mkdir := f.verb("mkdir ID PATH", "Create a directory and its parents", cobra.ExactArgs(2), func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
		return c.Mkdir(ctx, args[0], args[1])
	})
	var recursive bool
	rm := f.verb("rm ID PATH", "Remove a file (or a directory with -r)", cobra.ExactArgs(2), func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
		return c.Remove(ctx, args[0], args[1], recursive)
	})
	rm.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove a directory and everything in it")
	mv := f.verb("mv ID FROM TO", "Move or rename a path", cobra.ExactArgs(3), func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
		return c.Move(ctx, args[0], args[1], args[2])
	})
	files.AddCommand(read, write, list, stat, mkdir, rm, mv, watchCmd(f), uploadDirCmd(f), downloadDirCmd(f))
	return files
}
