package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/client"
	"github.com/spf13/cobra"
)

// Background processes (docs/processes.md): start, ps, logs, kill-process.

var processes = printer[client.Process]{
	header: []string{"PID", "TAG", "STATE", "EXIT", "STARTED", "USER", "COMMAND"},
	row: func(p client.Process) []string {
		exit := "-"
		if p.ExitCode != nil {
			exit = strconv.Itoa(*p.ExitCode)
			if p.Signal != "" {
				exit += " (" + p.Signal + ")"
			}
		}
		command := p.Cmd
		if command == "" {
			command = strings.Join(p.Argv, " ")
		}
		return []string{strconv.Itoa(p.Pid), orDash(p.Tag), p.State, exit, p.StartedAt, p.User, command}
	},
}

func sandboxStartCmd(f *apiFlags) *cobra.Command {
	var req client.StartProcessRequest
	var cf commandFlags
	var pty string
	cmd := &cobra.Command{
		Use:   "start ID -- COMMAND [ARG...]",
		Short: "Start a background process in a sandbox and print its pid (it runs on without this CLI)",
		Long: `Start a background process. The sandbox's guest agent owns it: it runs on after this command
returns, while nobody reads its output, across hibernate and wake, and in forks. Read its output with
"sandbox logs", list it with "sandbox ps", stop it with "sandbox kill-process".`,
		Example: `  pid=$(pandastack sandbox start sb_123 -- python3 -m http.server 8000)
  pandastack sandbox logs -f sb_123 "$pid"`,
		Args: commandArgs("start"),
		RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			id, err := cf.parse(args, &req.Cmd, &req.Argv, &req.Env, &req.Cwd, &req.User)
			if err != nil {
				return err
			}
			if pty != "" {
				size, err := parseTermSize(pty)
				if err != nil {
					return err
				}
				req.PTY = &size
			}
			pid, err := c.StartProcess(ctx, id, req)
			if err != nil {
				return err
			}
			return f.say(cmd, map[string]int{"pid": pid}, strconv.Itoa(pid))
		}),
	}
	fl := cmd.Flags()
	cf.register(fl)
	fl.BoolVar(&req.Stdin, "stdin", false, "keep a pipe to its stdin open (write with the API's …/stdin)")
	fl.StringVar(&req.Tag, "tag", "", "a label listed with the process (sandbox ps)")
	fl.StringVar(&pty, "pty", "", "run it on a terminal of its own of COLSxROWS (e.g. 120x40; its stdin types into it)")
	return cmd
}

// parseTermSize reads COLSxROWS.
func parseTermSize(s string) (client.TermSize, error) {
	var t client.TermSize
	if n, err := fmt.Sscanf(s, "%dx%d", &t.Cols, &t.Rows); err != nil || n != 2 || t.Cols < 1 || t.Rows < 1 {
		return t, fmt.Errorf("--pty %q: want COLSxROWS, e.g. 120x40", s)
	}
	return t, nil
}

func sandboxPsCmd(f *apiFlags) *cobra.Command {
	return f.verb("ps ID", "List a sandbox's background processes (running, and the last 32 that exited)", cobra.ExactArgs(1),
		func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			ps, err := c.ListProcesses(ctx, args[0])
			if err != nil {
				return err
			}
			return processes.print(f, cmd, ps, false)
		})
}

// pidVerb is a verb of one process: ID PID (checked) and body.
func (f *apiFlags) pidVerb(use, short string, body func(ctx context.Context, c *client.Client, cmd *cobra.Command, id string, pid int) error) *cobra.Command {
	return f.verb(use, short, cobra.ExactArgs(2), func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
		pid, err := strconv.Atoi(args[1])
		if err != nil || pid <= 0 {
			return fmt.Errorf("PID %q is not a process id (see `pandastack sandbox ps ID`)", args[1])
		}
		return body(ctx, c, cmd, args[0], pid)
	})
}

func sandboxLogsCmd(f *apiFlags) *cobra.Command {
	var follow bool
	var offset int64
	cmd := f.pidVerb("logs ID PID", "Print a background process's output (the last 1 MiB is kept); -f follows it until it exits",
		func(ctx context.Context, c *client.Client, cmd *cobra.Command, id string, pid int) error {
			stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
			next := offset
			for retries := 0; ; {
				end, err := c.ProcessOutput(ctx, id, pid, next, follow, func(ev client.ProcessEvent) {
					if ev.Stderr != nil {
						io.WriteString(stderr, *ev.Stderr)
					} else {
						io.WriteString(stdout, *ev.Stdout)
					}
					next, retries = *ev.Next, 0
				})
				var ae *client.APIError
				if err != nil && follow && ctx.Err() == nil && !(errors.As(err, &ae) && ae.Status != 200) && retries < 5 {
					// The stream dropped (a hibernation, a restart): go on from where it stopped.
					retries++
					time.Sleep(time.Duration(retries) * 500 * time.Millisecond)
					continue
				}
				if err != nil {
					return err
				}
				if follow && end.ExitCode != nil && *end.ExitCode != 0 {
					return &exitError{*end.ExitCode, fmt.Sprintf("process %d exited with status %d", pid, *end.ExitCode)}
				}
				return nil
			}
		})
	fl := cmd.Flags()
	fl.BoolVarP(&follow, "follow", "f", false, "wait for more output until the process exits (then exit with its status)")
	fl.Int64Var(&offset, "offset", 0, "start at this byte offset of the output")
	return cmd
}

func sandboxKillProcessCmd(f *apiFlags) *cobra.Command {
	var sig string
	cmd := f.pidVerb("kill-process ID PID", "Kill a background process and its whole tree, or send it a signal (--signal)",
		func(ctx context.Context, c *client.Client, cmd *cobra.Command, id string, pid int) error {
			if sig != "" {
				if err := c.SignalProcess(ctx, id, pid, sig); err != nil {
					return err
				}
				if !f.json {
					fmt.Fprintf(cmd.OutOrStdout(), "sent %s to %d\n", strings.ToUpper(sig), pid)
				}
				return nil
			}
			p, err := c.KillProcess(ctx, id, pid)
			if err != nil {
				return err
			}
			return processes.one(f, cmd, p)
		})
	cmd.Flags().StringVarP(&sig, "signal", "s", "", "send this signal to its process group instead: TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP, CONT")
	return cmd
}
