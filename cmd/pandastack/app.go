package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/apps/detect"
	"github.com/pandastack/pandastack/internal/bundle"
	"github.com/pandastack/pandastack/internal/client"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
	"github.com/spf13/cobra"
)

func init() {
	rootCmd.AddCommand(appCmd())
}

var appsTable = printer[v1.App]{[]string{"ID", "NAME", "BRANCH", "LIVE", "URL", "UPDATED"}, func(a v1.App) []string {
	return []string{a.ID, a.Name, a.Branch, orDash(a.LiveDeploymentID), orDash(a.URL), a.UpdatedAt}
}}

var deploymentsTable = printer[v1.Deployment]{[]string{"ID", "STATE", "SOURCE", "COMMIT", "FRAMEWORK", "BUILD_MS", "CREATED", "URL", "ERROR"}, func(d v1.Deployment) []string {
	return []string{d.ID, d.State, d.Source, orDash(d.Commit[:min(12, len(d.Commit))]), orDash(d.Plan.Framework),
		strconv.FormatInt(d.BuildMS, 10), d.CreatedAt, orDash(d.URL), orDash(escapeLines(d.Error))}
}}

var previewsTable = printer[v1.AppPreview]{[]string{"SLUG", "BRANCH", "DEPLOYMENT", "URL"}, func(p v1.AppPreview) []string {
	return []string{p.Slug, p.Branch, p.DeploymentID, orDash(p.URL)}
}}

// appSpecFlags are the settings create and update share.
type appSpecFlags struct {
	spec         v1.AppSpec
	build        v1.AppBuild
	env, secrets []string
	suspendAfter int64
}

func (a *appSpecFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&a.spec.Branch, "branch", "", "the branch a git push deploys (default main)")
	fl.StringArrayVarP(&a.env, "env", "e", nil, "K=V in the app's environment (repeatable)")
	fl.StringArrayVar(&a.secrets, "secret", nil, "K=V secret in the app's environment, stored sealed, redacted from logs (repeatable; replaces all secrets)")
	fl.StringVar(&a.build.Framework, "framework", "", "next, vite, cra, node, static or python (default: detected)")
	fl.StringVar(&a.build.Install, "install", "", "install command (default: detected)")
	fl.StringVar(&a.build.Build, "build", "", "build command (default: detected)")
	fl.StringVar(&a.build.Start, "start", "", "start command; the app must listen on $PORT (default: detected)")
	fl.IntVar(&a.build.Port, "port", 0, "the port the app listens on, given as $PORT (default 8080)")
	fl.Int64Var(&a.suspendAfter, "suspend-after", 0, "hibernate the instance after this many seconds without a request (0: never)")
	fl.Int64Var(&a.spec.HealthTimeoutSeconds, "health-timeout", 0, "seconds a new release has to answer its health check (default 60)")
	fl.Int64Var(&a.spec.DrainTimeoutSeconds, "drain-timeout", 0, "seconds the old instance may finish its requests after a switch (default 30)")
	fl.Int64Var(&a.spec.MemoryMiB, "memory-mib", 0, "memory (at most the base template's, its default)")
}

// resolve fills the spec from the flags that were set.
func (a *appSpecFlags) resolve(cmd *cobra.Command) (v1.AppSpec, error) {
	sp := a.spec
	var err error
	if sp.Env, err = parsePairs("env", a.env); err != nil {
		return sp, err
	}
	if sp.Secrets, err = parsePairs("secret", a.secrets); err != nil {
		return sp, err
	}
	for _, name := range []string{"framework", "install", "build", "start", "port"} {
		if cmd.Flags().Changed(name) {
			b := a.build
			sp.Build = &b
		}
	}
	if cmd.Flags().Changed("suspend-after") {
		sp.SuspendAfterSeconds = &a.suspendAfter
	}
	return sp, nil
}

// appCmd is `pandastack app create|list|get|update|delete|deploy|plan|logs|deployments|rollback|github|env|secrets|preview`.
func appCmd() *cobra.Command {
	cmd, f := group("app", "Git-deployed apps: build in a microVM, release as a snapshot, serve at <name>.apps.<domain>", "apps")

	var create appSpecFlags
	var quiet bool
	createCmd := &cobra.Command{
		Use:     "create NAME",
		Short:   "Create an app (its name is its host name: <name>.apps.<domain>)",
		Example: `  pandastack app create web -e MODE=prod --secret API_TOKEN=$TOKEN`,
		Args:    cobra.ExactArgs(1),
		RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			sp, err := create.resolve(cmd)
			if err != nil {
				return err
			}
			sp.Name = args[0]
			a, err := c.CreateApp(ctx, sp)
			if err != nil {
				return err
			}
			return quietID(f, cmd, appsTable, quiet, a.ID, a)
		}),
	}
	create.register(createCmd)
	createCmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the app's id")

	var update appSpecFlags
	updateCmd := &cobra.Command{
		Use:   "update APP",
		Short: "Change an app's settings (from its next deploy)",
		Args:  cobra.ExactArgs(1),
		RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			sp, err := update.resolve(cmd)
			if err != nil {
				return err
			}
			a, err := c.UpdateApp(ctx, args[0], sp)
			if err != nil {
				return err
			}
			return appsTable.one(f, cmd, a)
		}),
	}
	update.register(updateCmd)

	var detach, clean bool
	var branch string
	deploy := &cobra.Command{
		Use:   "deploy APP [DIR]",
		Short: "Upload DIR (default .; .gitignore respected) and deploy it; follows the build logs until it is live or failed",
		Args:  cobra.RangeArgs(1, 2),
		RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 2 {
				dir = args[1]
			}
			archive, err := bundle.Pack(dir)
			if err != nil {
				return err
			}
			d, err := c.DeployApp(ctx, args[0], archive, client.DeployOptions{Branch: branch, Clean: clean})
			if err != nil {
				return err
			}
			if detach || f.json {
				return deploymentsTable.one(f, cmd, d)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "deployment %s (%s: %s)\n", d.ID, d.Plan.Framework, d.Plan.Start)
			if err := c.DeploymentLogs(ctx, args[0], d.ID, true, cmd.OutOrStdout()); err != nil {
				return err
			}
			for d.State != "live" && d.State != "failed" {
				if d, err = c.Deployment(ctx, args[0], d.ID); err != nil {
					return err
				}
				time.Sleep(200 * time.Millisecond)
			}
			if d.State == "failed" {
				return &exitError{code: 1, msg: "deployment " + d.ID + " failed: " + d.Error}
			}
			return nil
		}),
	}
	deploy.Flags().BoolVarP(&detach, "detach", "d", false, "print the queued deployment and return")
	deploy.Flags().BoolVar(&clean, "clean", false, "skip the build cache: build in a new base sandbox and run the install")
	deploy.Flags().StringVar(&branch, "branch", "", "deploy as this branch: another than the app's is its preview at <app>--<branch>.apps.<domain>")

	var ghBranch, ghTokenFile string
	github := &cobra.Command{
		Use:   "github APP OWNER/REPO",
		Short: "Connect an app to a GitHub repository: prints the webhook URL and secret to add there (push events, application/json)",
		Args:  cobra.ExactArgs(2),
		RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			token, err := readTokenFile(cmd, ghTokenFile)
			if err != nil {
				return err
			}
			h, err := c.ConnectGitHub(ctx, args[0], args[1], ghBranch, token)
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), h)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Add a webhook to github.com/%s (Settings → Webhooks): content type application/json, push events.\n"+
				"  Payload URL: %s\n  Secret:      %s   (shown once)\nPushes to %s deploy the app; other branches their previews.\n",
				h.Repo, h.WebhookURL, h.Secret, h.Branch)
			return nil
		}),
	}
	github.Flags().StringVar(&ghBranch, "branch", "", "the branch that deploys the app (default: the app's)")
	github.Flags().StringVar(&ghTokenFile, "token-file", "", "a private repository: FILE (- for stdin) holds a token that reads it (GitHub personal access or installation token)")

	var planBuild appSpecFlags
	plan := &cobra.Command{
		Use:   "plan [DIR]",
		Short: "Show how DIR (default .) would be built and started: framework, package manager, commands, port (read here, nothing runs)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			archive, err := bundle.Pack(dir)
			if err != nil {
				return err
			}
			files, err := bundle.Read(archive)
			if err != nil {
				return err
			}
			tree := detect.Files{}
			for _, fl := range files {
				tree[fl.Name] = fl.Data
			}
			p := detect.Detect(tree, planBuild.build)
			if f.json {
				return printJSON(cmd.OutOrStdout(), p)
			}
			w := cmd.OutOrStdout()
			abs, _ := filepath.Abs(dir)
			fmt.Fprintf(w, "source:          %s\nfound:           %s\nframework:       %s\npackage manager: %s\ninstall:         %s\nbuild:           %s\nstart:           %s\nport:            %d\n",
				abs, orDash(strings.Join(p.Found, ", ")), orDash(p.Framework), orDash(p.PackageManager), orDash(p.Install), orDash(p.Build), orDash(p.Start), p.Port)
			if p.Problem != "" {
				fmt.Fprintln(w, "problem:        ", p.Problem)
				return &exitError{code: 1, msg: "no plan"}
			}
			return nil
		},
	}
	planBuild.register(plan)

	var follow, build bool
	var depID string
	logs := &cobra.Command{
		Use:   "logs APP",
		Short: "Print the live instances' output (each line labelled [sb_…]), or with --build a deployment's build logs (default: the latest)",
		Args:  cobra.ExactArgs(1),
		RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if !build && depID == "" {
				return c.AppLogs(ctx, args[0], follow, cmd.OutOrStdout())
			}
			if depID == "" {
				ds, err := c.Deployments(ctx, args[0], 1)
				if err != nil {
					return err
				}
				if len(ds) == 0 {
					return fmt.Errorf("app %s has no deployments yet", args[0])
				}
				depID = ds[0].ID
			}
			return c.DeploymentLogs(ctx, args[0], depID, follow, cmd.OutOrStdout())
		}),
	}
	logs.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new output")
	logs.Flags().BoolVar(&build, "build", false, "the build logs of the latest deployment")
	logs.Flags().StringVar(&depID, "deployment", "", "the build logs of this deployment")

	rollback := f.verb("rollback APP DEPLOYMENT", "Serve an earlier deployment's release again (no rebuild)", cobra.ExactArgs(2),
		func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			d, err := c.RollbackApp(ctx, args[0], args[1])
			if err != nil {
				return err
			}
			return deploymentsTable.one(f, cmd, d)
		})
	deployments := f.verb("deployments APP", "List an app's deployments, newest first", cobra.ExactArgs(1),
		func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			ds, err := c.Deployments(ctx, args[0], 0)
			if err != nil {
				return err
			}
			return deploymentsTable.print(f, cmd, ds, false)
		})
	// env|secrets set|unset: PATCH set_env / set_secrets / unset, the other variables kept.
	var vars []*cobra.Command
	for _, v := range []struct{ name, what string }{{"env", "environment variables"}, {"secrets", "secrets (sealed, redacted from logs)"}} {
		g := &cobra.Command{Use: v.name, Short: "Set or unset the app's " + v.what + " (from its next deploy)"}
		set := f.verb("set APP KEY=VALUE...", "Add or change "+v.what+", keeping the others", cobra.MinimumNArgs(2),
			func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
				pairs, err := parsePairs(v.name, args[1:])
				if err != nil {
					return err
				}
				sp := v1.AppSpec{SetEnv: pairs}
				if v.name == "secrets" {
					sp = v1.AppSpec{SetSecrets: pairs}
				}
				a, err := c.UpdateApp(ctx, args[0], sp)
				if err != nil {
					return err
				}
				return appsTable.one(f, cmd, a)
			})
		unset := f.verb("unset APP KEY...", "Remove "+v.what+" by name", cobra.MinimumNArgs(2),
			func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
				a, err := c.GetApp(ctx, args[0])
				if err != nil {
					return err
				}
				for _, k := range args[1:] { // the API's unset takes either: keep each verb to its own
					if _, inEnv := a.Env[k]; inEnv != (v.name == "env") || !inEnv && !slices.Contains(a.SecretNames, k) {
						return fmt.Errorf("%s is not in the %s of app %s", k, v.name, a.Name)
					}
				}
				a, err = c.UpdateApp(ctx, args[0], v1.AppSpec{Unset: args[1:]})
				if err != nil {
					return err
				}
				return appsTable.one(f, cmd, a)
			})
		g.AddCommand(set, unset)
		vars = append(vars, g)
	}
	preview := &cobra.Command{Use: "preview", Short: "An app's branch previews (<app>--<slug>.apps.<domain>)"}
	preview.AddCommand(f.verb("list APP", "List an app's previews", cobra.ExactArgs(1),
		func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			ps, err := c.AppPreviews(ctx, args[0])
			if err != nil {
				return err
			}
			return previewsTable.print(f, cmd, ps, false)
		}),
		&cobra.Command{Use: "delete APP BRANCH...", Short: "Delete previews (by branch or slug): their route, instance; their releases stay for a rollback",
			Args: cobra.MinimumNArgs(2), RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
				for _, b := range args[1:] {
					if err := c.DeleteAppPreview(ctx, args[0], b); err != nil {
						return err
					}
					if !f.json {
						fmt.Fprintln(cmd.OutOrStdout(), "deleted", b)
					}
				}
				return nil
			})})
	list := listCmd(f, appsTable, "List your team's apps", (*client.Client).ListApps)
	get := getCmd(f, appsTable, "get APP", "Show an app", (*client.Client).GetApp)
	del := f.deleteCmd("delete APP...", "Delete apps with their instances, releases and deployments", (*client.Client).DeleteApp)
	cmd.AddCommand(createCmd, updateCmd, deploy, plan, logs, rollback, deployments, github, list, get, del, preview)
	cmd.AddCommand(vars...)
	return cmd
}

// readTokenFile reads a token from file (- for stdin; "" for none), trimmed: never a flag's
// value, which process lists show.
func readTokenFile(cmd *cobra.Command, file string) (string, error) {
	var b []byte
	var err error
	switch file {
	case "":
		return "", nil
	case "-":
		b, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), 64<<10))
	default:
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
