package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/pandastack/pandastack/internal/client"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
	"github.com/spf13/cobra"
)

func init() {
	rootCmd.AddCommand(databaseCmd())
}

var databasesTable = printer[v1.Database]{[]string{"ID", "NAME", "STATE", "VERSION", "URI", "CREATED"}, func(d v1.Database) []string {
	return []string{d.ID, d.Name, d.State, d.Version, d.Connection.URI, d.CreatedAt}
}}

var backupsTable = printer[v1.DatabaseBackup]{[]string{"ID", "DATABASE", "SIZE_BYTES", "CREATED", "PUBLISHED"}, func(b v1.DatabaseBackup) []string {
	return []string{b.ID, b.DatabaseID, strconv.FormatInt(b.SizeBytes, 10), b.CreatedAt, strconv.FormatBool(b.Published)}
}}

// databaseCmd is `pandastack db create|list|get|delete|connect|query|branch|password|stats|logs|
// backup|backups|restore`.
func databaseCmd() *cobra.Command {
	cmd, f := group("db", "Managed PostgreSQL databases (each its own microVM, reached through the server's TLS router)", "database", "databases")

	var spec v1.DatabaseSpec
	var suspend int64
	var quiet bool
	create := &cobra.Command{
		Use:   "create --name NAME",
		Short: "Create a database: prints its connection string with the owner's password (shown once)",
		Example: `  pandastack db create --name shop
  pandastack db create --name vectors --extension vector --extension pg_trgm -q`,
		Args:    cobra.NoArgs,
		PreRunE: requireFlag("name"),
		RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("suspend-after") {
				spec.SuspendAfterSeconds = &suspend
			}
			d, err := c.CreateDatabase(ctx, spec)
			if err != nil {
				return err
			}
			if d.Note != "" {
				fmt.Fprintln(cmd.ErrOrStderr(), "note:", d.Note)
			}
			if quiet {
				fmt.Fprintln(cmd.OutOrStdout(), d.Connection.URI)
				return nil
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), d)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "id:        %s\nuri:       %s\npassword:  %s   (shown once: keep it)\n", d.ID, d.Connection.URI, d.Password)
			if d.Connection.HTTPURL != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "http_url:  %s\n", d.Connection.HTTPURL)
			}
			return nil
		}),
	}
	fl := create.Flags()
	fl.StringVar(&spec.Name, "name", "", "the database's name (a-z, 0-9, _, -); inside postgres - becomes _")
	fl.StringVar(&spec.Version, "version", "", `PostgreSQL version: 17 (default; "16" is an alias of 17)`)
	fl.StringArrayVar(&spec.Extensions, "extension", nil, "an extension to install now (repeatable): vector, pg_cron, pg_partman, hypopg, pg_repack, pgaudit, pg_trgm, pgcrypto, uuid-ossp, pg_stat_statements, citext, hstore")
	fl.Int64Var(&suspend, "suspend-after", 0, "seconds without a connection before it may be suspended (0: never; default 300)")
	fl.BoolVarP(&quiet, "quiet", "q", false, "print only the connection string (with the password)")

	list := listCmd(f, databasesTable, "List your team's databases", (*client.Client).ListDatabases)
	get := getCmd(f, databasesTable, "get ID", "Show a database (its connection string without the password)", (*client.Client).GetDatabase)
	del := f.deleteCmd("delete ID...", "Delete databases and their data", (*client.Client).DeleteDatabase)

	var params []string
	query := f.verb("query ID SQL", "Run one statement as the owner (the HTTP broker): prints the rows", cobra.ExactArgs(2),
		func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			ps := make([]any, len(params))
			for i, p := range params {
				ps[i] = p
			}
			res, err := c.QueryDatabase(ctx, args[0], args[1], ps...)
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), res)
			}
			return printQueryResult(cmd, res)
		})
	query.Flags().StringArrayVarP(&params, "param", "p", nil, "a value for $1, $2, … in order (text; repeatable)")

	var branchName string
	branch := getCmd(f, databasesTable, "branch ID --name NAME", "Branch a database: a copy-on-write fork of it now, with the same owner and password",
		func(c *client.Client, ctx context.Context, id string) (v1.Database, error) {
			return c.BranchDatabase(ctx, id, branchName)
		})
	branch.PreRunE = requireFlag("name")
	branch.Flags().StringVar(&branchName, "name", "", "the branch's name")
	password := f.verb("password ID", "Give the owner a new password: prints the new connection string (shown once)", cobra.ExactArgs(1),
		func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			d, err := c.RotateDatabasePassword(ctx, args[0])
			if err != nil {
				return err
			}
			return f.say(cmd, d, d.Connection.URI)
		})

	stats := f.verb("stats ID", "Show a database's size, sessions, transactions and uptime", cobra.ExactArgs(1),
		func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			st, err := c.DatabaseStats(ctx, args[0])
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), st)
			}
			return table(cmd.OutOrStdout(), []string{"SIZE_BYTES", "CONNECTIONS", "COMMITTED", "ROLLED_BACK", "UPTIME_S"},
				[][]string{{strconv.FormatInt(st.SizeBytes, 10), strconv.FormatInt(st.Connections, 10), strconv.FormatInt(st.TransactionsCommitted, 10),
					strconv.FormatInt(st.TransactionsRolledBack, 10), strconv.FormatInt(st.UptimeSeconds, 10)}})
		})
	var logBytes int
	logs := f.verb("logs ID", "Print the end of a database's postgres log", cobra.ExactArgs(1),
		func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			text, err := c.DatabaseLogs(ctx, args[0], logBytes)
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), text)
			return nil
		})
	logs.Flags().IntVar(&logBytes, "bytes", 0, "how much of the end (default 64 KiB, at most 1 MiB)")

	backup := f.verb("backup ID", "Back a database up now (a snapshot of its VM)", cobra.ExactArgs(1),
		func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			b, err := c.BackupDatabase(ctx, args[0])
			if err != nil {
				return err
			}
			return backupsTable.one(f, cmd, b)
		})
	backups := f.verb("backups ID", "List a database's backups, newest first", cobra.ExactArgs(1),
		func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			list, err := c.DatabaseBackups(ctx, args[0])
			if err != nil {
				return err
			}
			return backupsTable.print(f, cmd, list, false)
		})
	var restoreReq v1.RestoreRequest
	restore := getCmd(f, databasesTable, "restore ID --name NAME [--to-time RFC3339 | --backup BACKUP_ID]",
		"Restore into a NEW database: to an instant (WAL archive), a backup, or the newest backup",
		func(c *client.Client, ctx context.Context, id string) (v1.Database, error) {
			return c.RestoreDatabase(ctx, id, restoreReq)
		})
	restore.PreRunE = requireFlag("name")
	restore.Flags().StringVar(&restoreReq.Name, "name", "", "the new database's name")
	restore.Flags().StringVar(&restoreReq.ToTime, "to-time", "", "recover to this RFC 3339 instant (with a blob store: any instant after the first base backup; else the newest backup at or before it)")
	restore.Flags().StringVar(&restoreReq.BackupID, "backup", "", "this backup")

	var ca string
	connect := f.verb("connect ID [-- PSQL ARGS...]", "Open psql on a database through the router (asks for the password unless PGPASSWORD is set)", cobra.MinimumNArgs(1),
		func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			d, err := c.GetDatabase(ctx, args[0])
			if err != nil {
				return err
			}
			conninfo := psqlConninfo(d.Connection, ca)
			psql, err := exec.LookPath("psql")
			if err != nil {
				return fmt.Errorf("psql is not installed (apt-get install postgresql-client); connect with: %s", conninfo)
			}
			p := exec.CommandContext(ctx, psql, append([]string{conninfo}, args[1:]...)...)
			p.Stdin, p.Stdout, p.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()
			return p.Run()
		})
	connect.Flags().StringVar(&ca, "ca", "", "the router's CA file (up prints it): verify the server (sslmode=verify-full)")

	cmd.AddCommand(create, list, get, del, query, connect, branch, password, stats, logs, backup, backups, restore)
	return cmd
}

// psqlConninfo is libpq's conninfo for a database: its host name as the TLS name, and for a
// *.localhost name the loopback address (libpq does not resolve those everywhere).
func psqlConninfo(c v1.DatabaseConnection, ca string) string {
	kv := []string{"host=" + c.Host, "port=" + strconv.Itoa(c.Port), "user=" + c.User, "dbname=" + c.Database, "sslmode=require"}
	if strings.HasSuffix(c.Host, ".localhost") {
		kv = append(kv, "hostaddr=127.0.0.1")
	}
	if ca != "" {
		kv[4] = "sslmode=verify-full"
		kv = append(kv, "sslrootcert="+ca)
	}
	if u, err := url.Parse(c.URI); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok {
			kv = append(kv, "password="+pw)
		}
	}
	return strings.Join(kv, " ")
}

// printQueryResult prints a result as a table (NULL as an empty cell) and its command tag.
func printQueryResult(cmd *cobra.Command, res v1.QueryResult) error {
	if len(res.Fields) > 0 {
		head := make([]string, len(res.Fields))
		for i, f := range res.Fields {
			head[i] = f.Name
		}
		rows := make([][]string, 0, len(res.Rows))
		for _, r := range res.Rows {
			vals, _ := r.([]any)
			row := make([]string, len(vals))
			for i, v := range vals {
				if v != nil {
					row[i] = escapeLines(fmt.Sprint(v))
				}
			}
			rows = append(rows, row)
		}
		if err := table(cmd.OutOrStdout(), head, rows); err != nil {
			return err
		}
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "%s %d\n", res.Command, res.RowCount)
	return nil
}
