package main

// Shared plumbing of the API verbs (sandbox, template, keys, teams): connection flags, --json,
// tables, and turning API errors into the CLI's message and exit status.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/pandastack/pandastack/internal/client"
	"github.com/pandastack/pandastack/internal/termtext"
	"github.com/spf13/cobra"
)

// apiFlags are the connection and output flags every API verb group shares.
type apiFlags struct {
	baseURL string
	apiKey  string
	json    bool
}

func (f *apiFlags) register(cmd *cobra.Command) {
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.baseURL, "base-url", "", "server URL (default $PANDASTACK_BASE_URL, else "+client.DefaultBaseURL+")")
	pf.StringVar(&f.apiKey, "api-key", "", "API key (default $PANDASTACK_API_KEY, else $PANDASTACK_TOKEN)")
	pf.BoolVar(&f.json, "json", false, "print JSON instead of a table")
}

// group is a verb group (sandbox, template…): a command with the connection and output flags
// its verbs share.
func group(use, short string, aliases ...string) (*cobra.Command, *apiFlags) {
	f := &apiFlags{}
	cmd := &cobra.Command{Use: use, Aliases: aliases, Short: short}
	f.register(cmd)
	return cmd, f
}

// runFunc is a verb's body: an API client, a context that Ctrl-C ends, and cobra's arguments.
type runFunc = func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error

// verb is a command that runs body (see run).
func (f *apiFlags) verb(use, short string, args cobra.PositionalArgs, body runFunc) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Args: args, RunE: f.run(body)}
}

// eachID is the RunE of verbs that act on every ID argument in turn (kill, revoke, delete):
// it stops at the first failure and, for humans, prints "<done> ID" per success.
func (f *apiFlags) eachID(done string, call func(*client.Client, context.Context, string) error) func(*cobra.Command, []string) error {
	return f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
		for _, id := range args {
			if err := call(c, ctx, id); err != nil {
				return fmt.Errorf("%s: %w", id, err)
			}
			if !f.json {
				fmt.Fprintln(cmd.OutOrStdout(), done, id)
			}
		}
		return nil
	})
}

// deleteCmd is a `delete` (alias rm) verb of every ID argument.
func (f *apiFlags) deleteCmd(use, short string, call func(*client.Client, context.Context, string) error) *cobra.Command {
	return &cobra.Command{Use: use, Aliases: []string{"rm"}, Short: short, Args: cobra.MinimumNArgs(1), RunE: f.eachID("deleted", call)}
}

func (f *apiFlags) client() (*client.Client, error) {
	c := client.New(f.baseURL, f.apiKey)
	if c.APIKey == "" {
		return nil, fmt.Errorf("no API key: set PANDASTACK_API_KEY (or pass --api-key)")
	}
	return c, nil
}

// run adapts a verb's body to cobra: it gets an API client and a context that Ctrl-C ends.
func (f *apiFlags) run(fn runFunc) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, err := f.client()
		if err != nil {
			return err
		}
		ctx, cancel := signalContext()
		defer cancel()
		return fn(ctx, c, cmd, args)
	}
}

// requireFlag is a PreRunE that refuses a command run without the named flag (checked before
// anything else, the API key included).
func requireFlag(name string) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if !cmd.Flags().Changed(name) {
			return fmt.Errorf("--%s is required", name)
		}
		return nil
	}
}

// printer prints objects of one kind: JSON (one object when single, else an array), or a table.
type printer[T any] struct {
	header []string
	row    func(T) []string
}

func (p printer[T]) print(f *apiFlags, cmd *cobra.Command, items []T, single bool) error {
	out := cmd.OutOrStdout()
	if f.json {
		if single {
			return printJSON(out, items[0])
		}
		return printJSON(out, items)
	}
	rows := make([][]string, 0, len(items))
	for _, it := range items {
		rows = append(rows, p.row(it))
	}
	return table(out, p.header, rows)
}

// one prints a single object.
func (p printer[T]) one(f *apiFlags, cmd *cobra.Command, item T) error {
	return p.print(f, cmd, []T{item}, true)
}

// getCmd is a verb that calls the API with its one argument and prints the object it answers
// (get, hibernate, wake; with a flag as well: branch, restore, resize).
func getCmd[T any](f *apiFlags, p printer[T], use, short string, call func(*client.Client, context.Context, string) (T, error)) *cobra.Command {
	return f.verb(use, short, cobra.ExactArgs(1), func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
		v, err := call(c, ctx, args[0])
		if err != nil {
			return err
		}
		return p.one(f, cmd, v)
	})
}

// listCmd is a `list` verb of an unpaged collection.
func listCmd[T any](f *apiFlags, p printer[T], short string, call func(*client.Client, context.Context) ([]T, error)) *cobra.Command {
	return f.verb("list", short, cobra.NoArgs, func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
		vs, err := call(c, ctx)
		if err != nil {
			return err
		}
		if vs == nil {
			vs = []T{}
		}
		return p.print(f, cmd, vs, false)
	})
}

// pageFlags are a paged list's --limit, --cursor and --all.
type pageFlags struct {
	limit  *int
	cursor *string
	all    bool
}

func (pf *pageFlags) register(cmd *cobra.Command, limit *int, cursor *string) {
	pf.limit, pf.cursor = limit, cursor
	fl := cmd.Flags()
	fl.IntVar(limit, "limit", 0, "page size (default 100, at most 1000)")
	fl.StringVar(cursor, "cursor", "", "continue from a previous page")
	fl.BoolVar(&pf.all, "all", false, "follow pages to the end")
}

// listPages prints one page (every page with --all) that page fetches from the cursor on; a page
// left unread is mentioned on stderr after the table.
func listPages[T any](f *apiFlags, pf *pageFlags, cmd *cobra.Command, p printer[T], page func() ([]T, string, error)) error {
	items := []T{}
	for {
		got, next, err := page()
		if err != nil {
			return err
		}
		items = append(items, got...)
		if next == "" || !pf.all {
			err := p.print(f, cmd, items, false)
			if next != "" && !f.json {
				fmt.Fprintf(cmd.ErrOrStderr(), "(more: --all, or --cursor %s)\n", next)
			}
			return err
		}
		*pf.cursor = next
	}
}

// quietID prints only an id when quiet, else the object.
func quietID[T any](f *apiFlags, cmd *cobra.Command, p printer[T], quiet bool, id string, v T) error {
	if quiet {
		fmt.Fprintln(cmd.OutOrStdout(), id)
		return nil
	}
	return p.one(f, cmd, v)
}

// signalContext ends on Ctrl-C so a long exec or transfer stops cleanly.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// say prints v as JSON with --json, else the line.
func (f *apiFlags) say(cmd *cobra.Command, v any, line string) error {
	if f.json {
		return printJSON(cmd.OutOrStdout(), v)
	}
	fmt.Fprintln(cmd.OutOrStdout(), line)
	return nil
}

// printJSON prints v indented; characters that could drive a terminal (escape sequences, C1,
// bidi overrides) leave as \u escapes, which decode to the same values.
func printJSON(w io.Writer, v any) error {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := io.WriteString(w, termtext.EscapeJSON(b.String()))
	return err
}

// table prints rows under a header, aligned. Cells are escaped: names, metadata, paths and
// states come from users and guests and must not reach the terminal raw.
func table(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	line := func(cells []string) {
		esc := make([]string, len(cells))
		for i, c := range cells {
			esc[i] = termtext.Escape(c)
		}
		fmt.Fprintln(tw, strings.Join(esc, "\t"))
	}
	line(header)
	for _, r := range rows {
		line(r)
	}
	return tw.Flush()
}

// escapeLines is termtext.Escape for multi-line text such as an error: its newlines stay.
func escapeLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = termtext.Escape(l)
	}
	return strings.Join(lines, "\n")
}

// parsePairs reads repeated K=V flags into a map.
func parsePairs(flag string, pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--%s %q: expected KEY=VALUE", flag, p)
		}
		m[k] = v
	}
	return m, nil
}

func formatMetadata(md map[string]string) string {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + md[k]
	}
	return strings.Join(parts, ",")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// exitError carries a status to main (through its exitCoder) with a message.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }
func (e *exitError) ExitCode() int { return e.code }
