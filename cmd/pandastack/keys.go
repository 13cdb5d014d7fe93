package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/client"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/termtext"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
	"github.com/spf13/cobra"
)

func init() {
	rootCmd.AddCommand(templateCmd(), keysCmd(), teamsCmd())
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

var keys = printer[client.Key]{
	header: []string{"ID", "NAME", "PREFIX", "ADMIN", "SCOPES", "CREATED", "EXPIRES", "STATE"},
	row: func(k client.Key) []string {
		state := "active"
		if k.RevokedAt != nil {
			state = "revoked " + *k.RevokedAt
		}
		expires := "never"
		if k.ExpiresAt != nil {
			expires = *k.ExpiresAt
		}
		return []string{k.ID, orDash(k.Name), k.Prefix, yesNo(k.Admin), strings.Join(k.Scopes, ","), k.CreatedAt, expires, state}
	},
}

func keysCmd() *cobra.Command {
	cmd, f := group("keys", "Create, list and revoke API keys of your team", "key")
	var name, dataDir, databaseURL string
	var admin, e2b bool
	var scopes []string
	var expires string
	printKey := func(cmd *cobra.Command, k client.Key) error {
		if f.json {
			return printJSON(cmd.OutOrStdout(), k)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s\n", k.Key)
		fmt.Fprintf(cmd.ErrOrStderr(), "key %s created; the secret above is shown only once\n", k.ID)
		return nil
	}
	create := f.verb("create", "Create an API key (its secret is shown once)", cobra.NoArgs, func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
		at, err := expiryTime(expires, time.Now())
		if err != nil {
			return err
		}
		k, err := c.CreateKeyWith(ctx, v1.CreateKeyRequest{Name: name, Admin: admin, Scopes: scopes, ExpiresAt: at, E2B: e2b})
		if err != nil {
			return err
		}
		return printKey(cmd, k)
	})
	create.Long = `Create an API key of your team through the API (an admin key needs an admin key).

Lost every admin key? On the machine of the store, as root, --data-dir DIR (the data dir of
pandastack up) or --database-url (pandastack server's store) makes an admin key of the default
team by writing to the store directly, with no API key and no running server needed; it is
recorded in the key's name, in the log on stderr and, with --data-dir, in DIR/audit.log.`
	create.Example = `  pandastack keys create --name ci
  pandastack keys create --name agent --scope sandboxes --expires 24h   # sandbox calls only, for a day
  pandastack keys create --name dashboard --scope read                  # GET only
  pandastack keys create --name agents --e2b                            # for the E2B SDKs (docs/e2b.md)
  sudo pandastack keys create --admin --data-dir /var/lib/pandastack     # recovery, on the machine`
	api := create.RunE
	create.RunE = func(cmd *cobra.Command, args []string) error {
		if dataDir == "" && databaseURL == "" {
			return api(cmd, args)
		}
		if len(scopes) > 0 || expires != "" || e2b {
			return errors.New("--scope, --expires and --e2b are for keys made through the API; a recovered admin key has neither")
		}
		k, err := recoverAdminKey(cmd, admin, name, dataDir, databaseURL)
		if err != nil {
			return err
		}
		return printKey(cmd, k)
	}
	create.Flags().StringVar(&name, "name", "", "a label for the key")
	create.Flags().BoolVar(&admin, "admin", false, "make an admin key (needs an admin key, or --data-dir as root)")
	create.Flags().StringSliceVar(&scopes, "scope", nil, "limit the key: all (default), read (GET only), sandboxes (sandbox calls only), admin; repeatable or comma-separated")
	create.Flags().BoolVar(&e2b, "e2b", false, "make a key of the E2B-compatible API (e2b_ + 40 hex; set it as E2B_API_KEY, see docs/e2b.md)")
	create.Flags().StringVar(&expires, "expires", "", "when the key stops working: a duration from now (24h, 720h) or an RFC 3339 time")
	create.Flags().StringVar(&dataDir, "data-dir", "", "recovery: make the key in this up data dir's store directly (root, on its machine)")
	create.Flags().StringVar(&databaseURL, "database-url", "", "recovery: make the key in this store directly (SQLite path or postgres:// URL; root)")
	list := listCmd(f, keys, "List your team's keys (prefixes only)", (*client.Client).ListKeys)
	revoke := &cobra.Command{
		Use:   "revoke KEY_ID...",
		Short: "Revoke keys (by id, as `keys list` shows)",
		Args:  cobra.MinimumNArgs(1),
		RunE:  f.eachID("revoked", (*client.Client).RevokeKey),
	}
	cmd.AddCommand(create, list, revoke)
	return cmd
}

func teamsCmd() *cobra.Command {
	cmd, f := group("teams", "Create teams (admin keys only)", "team")
	create := f.verb("create NAME", "Create a team and print its first key (shown once)", cobra.ExactArgs(1), func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
		t, k, err := c.CreateTeam(ctx, args[0])
		if err != nil {
			return err
		}
		if f.json {
			return printJSON(cmd.OutOrStdout(), map[string]any{"team": t, "key": k})
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s\n", k.Key)
		fmt.Fprintf(cmd.ErrOrStderr(), "team %s (%s) created; its first key is above and is shown only once\n", termtext.Escape(t.Name), t.ID)
		return nil
	})
	limits := make([]int64, len(quotaHelp))
	quota := f.verb("quota TEAM_ID", "Set a team's own limits over the server's --quota-* defaults (admin keys)", cobra.ExactArgs(1), func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
		var q v1.QuotaRequest
		for i, field := range q.Limits() {
			if cmd.Flags().Changed(quotaFlag(i)) { // a limit left out takes the server's default
				*field = &limits[i]
			}
		}
		u, err := c.SetQuota(ctx, args[0], q)
		return showUsage(cmd, f, u, err)
	})
	for i, help := range quotaHelp {
		quota.Flags().Int64Var(&limits[i], quotaFlag(i), 0, help+" (0: no limit; left out: the server's default)")
	}
	cmd.AddCommand(create, quota)
	return cmd
}

// expiryTime turns --expires (a duration from now, or an RFC 3339 time) into expires_at ("" for
// never).
func expiryTime(v string, now time.Time) (string, error) {
	if v == "" {
		return "", nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		if d <= 0 {
			return "", fmt.Errorf("--expires %s: give a positive duration", v)
		}
		return now.Add(d).UTC().Format(time.RFC3339), nil
	}
	if _, err := time.Parse(time.RFC3339, v); err != nil {
		return "", fmt.Errorf("--expires %q: give a duration (24h) or an RFC 3339 time (2030-01-02T15:04:05Z)", v)
	}
	return v, nil
}

// quotaHelp says what each flag of teams quota limits, in the order of v1.QuotaRequest.Limits.
var quotaHelp = []string{"running and hibernated sandboxes at once", "their vCPUs together", "their memory together, MiB",
	"volumes", "the volumes' sizes together, MiB", "databases", "apps", "functions", "the snapshots' sizes together, MiB"}

// quotaFlag is the name of teams quota's flag of the i-th limit (memory_mib: --memory-mib).
func quotaFlag(i int) string { return strings.ReplaceAll(store.QuotaNames[i], "_", "-") }
