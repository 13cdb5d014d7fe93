package main

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/pandastack/pandastack/internal/client"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
	"github.com/spf13/cobra"
)

func init() {
	rootCmd.AddCommand(functionCmd(), scheduleCmd())
}

var functionsTable = printer[v1.Function]{[]string{"ID", "NAME", "VERSION", "STATE", "RUNTIME", "HANDLER", "UPDATED"}, func(f v1.Function) []string {
	return []string{f.ID, f.Name, strconv.FormatInt(f.Version, 10), f.State, f.Runtime, f.Handler, f.UpdatedAt}
}}

var functionRunsTable = printer[v1.FunctionRun]{[]string{"ID", "VERSION", "TRIGGER", "STATUS", "ATTEMPTS", "DURATION_MS", "CREATED", "ERROR"}, func(r v1.FunctionRun) []string {
	e := ""
	if r.Error != nil {
		e = r.Error.Type + ": " + r.Error.Message
	}
	return []string{r.ID, strconv.FormatInt(r.Version, 10), r.Trigger, r.Status, strconv.FormatInt(r.Attempts, 10),
		strconv.FormatInt(r.DurationMS, 10), r.CreatedAt, orDash(escapeLines(e))}
}}

// bundleOf is the bundle to deploy from path: a .zip or .tar.gz file as it is, or a directory
// zipped here.
func bundleOf(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return os.ReadFile(path)
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(path, p)
		if err != nil {
			return err
		}
		w, err := zw.Create(filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(w, f)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// payloadOf is --payload (JSON text) or the file --payload-file ("-": stdin).
func payloadOf(cmd *cobra.Command, text, file string) (json.RawMessage, error) {
	var b []byte
	switch {
	case file == "-":
		var err error
		if b, err = io.ReadAll(cmd.InOrStdin()); err != nil {
			return nil, err
		}
	case file != "":
		var err error
		if b, err = os.ReadFile(file); err != nil {
			return nil, err
		}
	case text != "":
		b = []byte(text)
	default:
		return nil, nil
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("the payload is not JSON")
	}
	return b, nil
}

// functionCmd is `pandastack fn deploy|invoke|logs|runs|list|get|versions|delete`.
func functionCmd() *cobra.Command {
	cmd, f := group("fn", "Deploy and invoke functions (each invocation: a fresh microVM from the version's warm snapshot)", "function", "functions")

	var spec v1.FunctionSpec
	var env, secrets []string
	var quiet bool
	deploy := &cobra.Command{
		Use:   "deploy PATH --name NAME --runtime python3|node --handler MODULE.FUNCTION",
		Short: "Deploy a directory, .zip or .tar.gz as a new version (baked before this returns)",
		Example: `  pandastack fn deploy ./hello --name hello --runtime python3 --handler main.handler
  pandastack fn deploy app.tar.gz --name api --runtime node --handler index.handler -e MODE=prod --secret TOKEN=$TOKEN`,
		Args:    cobra.ExactArgs(1),
		PreRunE: requireFlag("name"),
		RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			bundle, err := bundleOf(args[0])
			if err != nil {
				return err
			}
			if spec.Env, err = parsePairs("env", env); err != nil {
				return err
			}
			if spec.Secrets, err = parsePairs("secret", secrets); err != nil {
				return err
			}
			fn, err := c.DeployFunction(ctx, spec, bundle)
			if err != nil {
				return err
			}
			return quietID(f, cmd, functionsTable, quiet, fn.ID, fn)
		}),
	}
	fl := deploy.Flags()
	fl.StringVar(&spec.Name, "name", "", "the function's name (a-z, 0-9, -); deploying a name again makes a new version")
	fl.StringVar(&spec.Runtime, "runtime", "python3", "python3 (3.13) or node (20)")
	fl.StringVar(&spec.Handler, "handler", "main.handler", "module.function: main.handler is main.py's handler, index.handler index.mjs/.js's")
	fl.StringArrayVarP(&env, "env", "e", nil, "K=V in the handler's environment (repeatable)")
	fl.StringArrayVar(&secrets, "secret", nil, "K=V secret in the handler's environment, stored sealed and never shown (repeatable)")
	fl.Int64Var(&spec.TimeoutSeconds, "timeout", 0, "seconds an invocation may run (default 30, at most 900)")
	fl.Int64Var(&spec.MemoryMiB, "memory-mib", 0, "memory (at most the base template's, its default)")
	fl.Int64Var(&spec.MaxConcurrency, "max-concurrency", 0, "invocations at once (default 10)")
	fl.Int64Var(&spec.Retries, "retries", 0, "retries of a failed async invocation (0-10)")
	fl.BoolVarP(&quiet, "quiet", "q", false, "print only the function's id")

	var payload, payloadFile string
	var async bool
	invoke := &cobra.Command{
		Use:   "invoke ID [--payload JSON]",
		Short: "Invoke a function: prints its result (logs on stderr); exits 1 when it failed",
		Args:  cobra.ExactArgs(1),
		RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			p, err := payloadOf(cmd, payload, payloadFile)
			if err != nil {
				return err
			}
			run, err := c.Invoke(ctx, args[0], p, async)
			if err != nil {
				return err
			}
			if f.json || async {
				return printJSON(cmd.OutOrStdout(), run)
			}
			fmt.Fprint(cmd.ErrOrStderr(), run.Logs)
			if run.Error != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s%s: %s\n", run.Error.Traceback, run.Error.Type, run.Error.Message)
				return &exitError{code: 1, msg: "the function " + run.Status}
			}
			fmt.Fprintln(cmd.OutOrStdout(), string(run.Result))
			return nil
		}),
	}
	invoke.Flags().StringVarP(&payload, "payload", "p", "", "the event, as JSON")
	invoke.Flags().StringVar(&payloadFile, "payload-file", "", "read the event from a file (- for stdin)")
	invoke.Flags().BoolVar(&async, "async", false, "queue the invocation and print the run at once")

	logs := f.verb("logs ID [RUN_ID]", "Print a run's logs (default: the latest run)", cobra.RangeArgs(1, 2),
		func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			var run v1.FunctionRun
			if len(args) == 2 {
				r, err := c.FunctionRun(ctx, args[0], args[1])
				if err != nil {
					return err
				}
				run = r
			} else {
				runs, err := c.FunctionRuns(ctx, args[0], 1)
				if err != nil {
					return err
				}
				if len(runs) == 0 {
					return fmt.Errorf("function %s has no runs yet", args[0])
				}
				run = runs[0]
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), run)
			}
			fmt.Fprint(cmd.OutOrStdout(), run.Logs)
			if run.Error != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "%s%s: %s\n", run.Error.Traceback, run.Error.Type, run.Error.Message)
			}
			return nil
		})
	runs := runsCmd(f, functionRunsTable, "List a function's runs, newest first", (*client.Client).FunctionRuns)
	list := listCmd(f, functionsTable, "List your team's functions", (*client.Client).ListFunctions)
	get := getCmd(f, functionsTable, "get ID", "Show a function (its latest version)", (*client.Client).GetFunction)
	versions := f.verb("versions ID", "List a function's versions (JSON)", cobra.ExactArgs(1),
		func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			vs, err := c.FunctionVersions(ctx, args[0])
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), vs)
		})
	del := f.deleteCmd("delete ID...", "Delete functions with their versions and runs", (*client.Client).DeleteFunction)
	cmd.AddCommand(deploy, invoke, logs, runs, list, get, versions, del)
	return cmd
}

var schedulesTable = printer[v1.Schedule]{[]string{"ID", "NAME", "CRON", "TIMEZONE", "TARGET", "ENABLED", "NEXT"}, func(s v1.Schedule) []string {
	target := s.FunctionID
	if target == "" {
		target = s.Template + ": " + s.Cmd
	}
	return []string{s.ID, orDash(s.Name), s.Cron, s.Timezone, escapeLines(target), strconv.FormatBool(s.Enabled), orDash(s.NextRunAt)}
}}

var scheduleRunsTable = printer[v1.ScheduleRun]{[]string{"ID", "TRIGGER", "SCHEDULED_FOR", "STATUS", "SANDBOX/RUN", "ERROR"}, func(r v1.ScheduleRun) []string {
	return []string{r.ID, r.Trigger, r.ScheduledFor, r.Status, orDash(r.SandboxID + r.FunctionRunID), orDash(escapeLines(r.Error))}
}}

// scheduleCmd is `pandastack schedule create|list|get|pause|resume|trigger|runs|delete`.
func scheduleCmd() *cobra.Command {
	cmd, f := group("schedule", "Cron schedules of functions or of commands in fresh sandboxes", "schedules", "cron")

	var req v1.CreateScheduleRequest
	var payload string
	var paused, quiet bool
	create := &cobra.Command{
		Use:   "create --cron EXPR (--function ID | --template T --cmd CMD)",
		Short: "Create a schedule (5-field cron or @hourly-style macro, in --timezone)",
		Example: `  pandastack schedule create --cron '30 2 * * *' --timezone Europe/Berlin --function fn_abc --payload '{"report": "daily"}'
  pandastack schedule create --cron @hourly --template base --cmd 'curl -fsS https://example.com/ping'`,
		Args:    cobra.NoArgs,
		PreRunE: requireFlag("cron"),
		RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			p, err := payloadOf(cmd, payload, "")
			if err != nil {
				return err
			}
			req.Payload = p
			if paused {
				off := false
				req.Enabled = &off
			}
			sc, err := c.CreateSchedule(ctx, req)
			if err != nil {
				return err
			}
			return quietID(f, cmd, schedulesTable, quiet, sc.ID, sc)
		}),
	}
	fl := create.Flags()
	fl.StringVar(&req.Name, "name", "", "a name for people")
	fl.StringVar(&req.Cron, "cron", "", "minute hour day-of-month month day-of-week, or @hourly, @daily, @weekly, @monthly, @yearly")
	fl.StringVar(&req.Timezone, "timezone", "", "IANA time zone the expression is read in (default UTC)")
	fl.StringVar(&req.FunctionID, "function", "", "the function to invoke")
	fl.StringVar(&payload, "payload", "", "the function's event, as JSON")
	fl.StringVar(&req.Template, "template", "", "run --cmd in a fresh sandbox of this template")
	fl.StringVar(&req.Cmd, "cmd", "", "the shell command to run")
	fl.Int64Var(&req.TimeoutSeconds, "timeout", 0, "the command's timeout in seconds (default 3600)")
	fl.StringVar(&req.Overlap, "overlap", "", "while the previous run still runs: skip (default), queue or allow")
	fl.StringVar(&req.Missed, "missed", "", "instants not run on time (server down, DST gap): skip (default) or run_once")
	fl.BoolVar(&paused, "paused", false, "create it paused")
	fl.BoolVarP(&quiet, "quiet", "q", false, "print only the schedule's id")

	list := listCmd(f, schedulesTable, "List your team's schedules", (*client.Client).ListSchedules)
	get := getCmd(f, schedulesTable, "get ID", "Show a schedule", (*client.Client).GetSchedule)
	pause := getCmd(f, schedulesTable, "pause ID", "Pause a schedule", (*client.Client).PauseSchedule)
	resume := getCmd(f, schedulesTable, "resume ID", "Resume a schedule (instants while it was paused are not run)", (*client.Client).ResumeSchedule)
	trigger := getCmd(f, scheduleRunsTable, "trigger ID", "Run a schedule now", (*client.Client).TriggerSchedule)
	runs := runsCmd(f, scheduleRunsTable, "List a schedule's runs, newest first", (*client.Client).ScheduleRuns)
	del := f.deleteCmd("delete ID...", "Delete schedules and their runs", (*client.Client).DeleteSchedule)
	cmd.AddCommand(create, list, get, pause, resume, trigger, runs, del)
	return cmd
}

// runsCmd is a `runs ID` verb: the runs of one function or schedule, newest first.
func runsCmd[T any](f *apiFlags, p printer[T], short string, call func(*client.Client, context.Context, string, int) ([]T, error)) *cobra.Command {
	return f.verb("runs ID", short, cobra.ExactArgs(1), func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
		rs, err := call(c, ctx, args[0], 0)
		if err != nil {
			return err
		}
		return p.print(f, cmd, append([]T{}, rs...), false)
	})
}
