package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pandastack/pandastack/internal/client"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

func init() { rootCmd.AddCommand(webhookCmd()) }

var webhooksTable = printer[v1.Webhook]{[]string{"ID", "URL", "EVENTS", "CREATED"}, func(w v1.Webhook) []string {
	return []string{w.ID, escapeLines(w.URL), strings.Join(w.Events, ","), w.CreatedAt}
}}

var deliveriesTable = printer[v1.WebhookDelivery]{[]string{"ID", "EVENT", "STATE", "ATTEMPTS", "STATUS", "ERROR", "CREATED"}, func(d v1.WebhookDelivery) []string {
	status := "-"
	if d.StatusCode != 0 {
		status = strconv.Itoa(d.StatusCode)
	}
	return []string{d.ID, d.Event, d.State, strconv.Itoa(d.Attempts), status, orDash(escapeLines(d.Error)), d.CreatedAt}
}}

// webhookCmd is `pandastack webhook create|list|get|delete|deliveries` (docs/events.md).
func webhookCmd() *cobra.Command {
	cmd, f := group("webhook", "Signed HTTP deliveries of your team's events (sandbox created, hibernated, woken, killed, expired, lost; changes)", "webhooks")
	var events []string
	create := &cobra.Command{
		Use:     "create URL --events TYPE[,TYPE…]",
		Short:   "Create a webhook; its signing secret is printed once",
		Example: "  pandastack webhook create https://example.com/hooks/pandastack --events sandbox.killed,sandbox.ttl_expired\n  pandastack webhook create http://127.0.0.1:9000/hook --events '*'",
		Args:    cobra.ExactArgs(1),
		PreRunE: requireFlag("events"),
		RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			w, err := c.CreateWebhook(ctx, args[0], events)
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), w)
			}
			if err := webhooksTable.one(f, cmd, w); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "\nSigning secret (shown this once; verify PandaStack-Signature with it, docs/events.md):\n  %s\n", w.Secret)
			return nil
		}),
	}
	create.Flags().StringSliceVar(&events, "events", nil, "event types: sandbox.created, sandbox.woken, sandbox.hibernated, sandbox.killed, sandbox.ttl_expired, sandbox.lost, sandbox.error, template.built, process.exited, database.backed_up, database.suspended, database.restarted, change, or * for all")
	list := listCmd(f, webhooksTable, "List your team's webhooks", (*client.Client).ListWebhooks)
	get := getCmd(f, webhooksTable, "get ID", "Show a webhook", (*client.Client).GetWebhook)
	deliveries := runsCmd(f, deliveriesTable, "List a webhook's deliveries, newest first", (*client.Client).WebhookDeliveries)
	deliveries.Use = "deliveries ID"
	del := f.deleteCmd("delete ID...", "Delete webhooks and their deliveries", (*client.Client).DeleteWebhook)
	cmd.AddCommand(create, list, get, deliveries, del)
	return cmd
}
