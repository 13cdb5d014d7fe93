package client

import (
	"context"

	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// CreateWebhook makes a webhook (docs/events.md); the answer's Secret is shown this once.
func (c *Client) CreateWebhook(ctx context.Context, url string, events []string) (v1.Webhook, error) {
	return send[v1.Webhook](ctx, c, "POST", "/v1/webhooks", nil, v1.CreateWebhookRequest{URL: url, Events: events})
}

// ListWebhooks returns the team's webhooks, oldest first.
func (c *Client) ListWebhooks(ctx context.Context) ([]v1.Webhook, error) {
	out, err := send[v1.Webhooks](ctx, c, "GET", "/v1/webhooks", nil, nil)
	return out.Webhooks, err
}

// GetWebhook returns one webhook (without its secret).
func (c *Client) GetWebhook(ctx context.Context, id string) (v1.Webhook, error) {
	return send[v1.Webhook](ctx, c, "GET", objPath("/v1/webhooks", id), nil, nil)
}

// DeleteWebhook deletes a webhook and its deliveries.
func (c *Client) DeleteWebhook(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", objPath("/v1/webhooks", id), nil, nil, nil)
}

// WebhookDeliveries returns a webhook's deliveries, newest first (limit <= 0: the server's default).
func (c *Client) WebhookDeliveries(ctx context.Context, id string, limit int) ([]v1.WebhookDelivery, error) {
	out, err := send[v1.WebhookDeliveries](ctx, c, "GET", objPath("/v1/webhooks", id)+"/deliveries", limitQuery(limit), nil)
	return out.Deliveries, err
}
