package store

import (
	"context"
	"encoding/json"
	"time"
)

// Webhooks (internal/webhooks, docs/events.md): a team's endpoints, each with the event types it
// takes and its signing secret (sealed: internal/sealed), and their deliveries. A delivery is
// recorded once per (webhook, event) whichever replica saw the event first (the unique index),
// and sent by the replica that claims it (a lease), so replicas share the work.

// Delivery states.
const (
	DeliveryPending   = "pending"
	DeliverySucceeded = "succeeded"
	DeliveryFailed    = "failed"
)

// Webhook is an endpoint of a team.
type Webhook struct {
	ID, TeamID, URL string
	Events          []string
	// SealedSecret is the signing secret as internal/sealed stores it.
	SealedSecret string
	CreatedAt    time.Time
}

// Delivery is one event sent (or to send) to one webhook.
type Delivery struct {
	ID, WebhookID, TeamID string
	// EventKey names the event (unique per webhook); EventType is its type; Payload the body sent.
	EventKey, EventType, Payload string
	State                        string
	Attempts                     int
	// NextAt is when the next attempt is due; LeaseUntil, while a replica sends it.
	NextAt, LeaseUntil time.Time
	// StatusCode and Error are the last attempt's answer (0, "": none yet).
	StatusCode int
	Error      string
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

var webhooksSchema = []schemaStep{
	{18, []string{
		`CREATE TABLE webhooks (
			id TEXT PRIMARY KEY, team_id TEXT NOT NULL REFERENCES teams(id), url TEXT NOT NULL,
			events TEXT NOT NULL, secret TEXT NOT NULL, created_at BIGINT NOT NULL
		)`,
		`CREATE INDEX webhooks_team ON webhooks (team_id, created_at, id)`,
		`CREATE TABLE webhook_deliveries (
			id TEXT PRIMARY KEY, webhook_id TEXT NOT NULL, team_id TEXT NOT NULL, event_key TEXT NOT NULL,
			event_type TEXT NOT NULL, payload TEXT NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
			next_at BIGINT NOT NULL, lease_until BIGINT NOT NULL DEFAULT 0, status_code INTEGER NOT NULL DEFAULT 0,
			error TEXT NOT NULL DEFAULT '', created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL
		)`,
		`CREATE UNIQUE INDEX webhook_deliveries_event ON webhook_deliveries (webhook_id, event_key)`,
		`CREATE INDEX webhook_deliveries_due ON webhook_deliveries (state, next_at)`,
		`CREATE INDEX webhook_deliveries_hook ON webhook_deliveries (webhook_id, created_at, id)`,
	}},
}

const webhookCols = `id, team_id, url, events, secret, created_at`

func scanWebhook(sc scanner) (Webhook, error) {
	var w Webhook
	var events string
	if err := sc.Scan(&w.ID, &w.TeamID, &w.URL, &events, &w.SealedSecret, timeCol(&w.CreatedAt)); err != nil {
		return w, err
	}
	return w, json.Unmarshal([]byte(events), &w.Events)
}

const deliveryCols = `id, webhook_id, team_id, event_key, event_type, payload, state, attempts, next_at, lease_until, status_code, error, created_at, updated_at`

func scanDelivery(sc scanner) (Delivery, error) {
	var d Delivery
	err := sc.Scan(&d.ID, &d.WebhookID, &d.TeamID, &d.EventKey, &d.EventType, &d.Payload, &d.State, &d.Attempts,
		timeCol(&d.NextAt), timeCol(&d.LeaseUntil), &d.StatusCode, &d.Error, timeCol(&d.CreatedAt), timeCol(&d.UpdatedAt))
	return d, err
}

// CreateWebhook records a new webhook.
func (s *Store) CreateWebhook(ctx context.Context, w Webhook) error {
	events, _ := json.Marshal(nonNil(w.Events))
	_, err := s.exec(ctx, s.db, `INSERT INTO webhooks (`+webhookCols+`) VALUES (?, ?, ?, ?, ?, ?)`,
		w.ID, w.TeamID, w.URL, string(events), w.SealedSecret, micros(w.CreatedAt))
	return conflictOr(err)
}

// ListWebhooks returns teamID's webhooks, oldest first; "" for every team's.
func (s *Store) ListWebhooks(ctx context.Context, teamID string) ([]Webhook, error) {
	if teamID == "" {
		return queryAll(ctx, s, s.db, `SELECT `+webhookCols+` FROM webhooks ORDER BY created_at, id`, scanWebhook)
	}
	return queryAll(ctx, s, s.db, `SELECT `+webhookCols+` FROM webhooks WHERE team_id = ? ORDER BY created_at, id`, scanWebhook, teamID)
}

// CountWebhooks counts teamID's webhooks.
func (s *Store) CountWebhooks(ctx context.Context, teamID string) (int, error) {
	var n int
	err := s.queryRow(ctx, s.db, `SELECT COUNT(*) FROM webhooks WHERE team_id = ?`, teamID).Scan(&n)
	return n, err
}

// GetWebhook returns a webhook of teamID (ErrNotFound for another team's).
func (s *Store) GetWebhook(ctx context.Context, teamID, id string) (Webhook, error) {
	return queryOne(ctx, s, `SELECT `+webhookCols+` FROM webhooks WHERE id = ? AND team_id = ?`, scanWebhook, id, teamID)
}

// DeleteWebhook deletes a webhook of teamID and its deliveries.
func (s *Store) DeleteWebhook(ctx context.Context, teamID, id string) error {
	if err := s.ownedRow(ctx, "webhooks", teamID, id); err != nil {
		return err
	}
	_, err := s.exec(ctx, s.db, `DELETE FROM webhook_deliveries WHERE webhook_id = ?`, id)
	if err == nil {
		_, err = s.exec(ctx, s.db, `DELETE FROM webhooks WHERE id = ? AND team_id = ?`, id, teamID)
	}
	return err
}

// EnqueueDelivery records d unless its webhook has its event already; it reports whether it did.
func (s *Store) EnqueueDelivery(ctx context.Context, d Delivery) (bool, error) {
	res, err := s.exec(ctx, s.db, `INSERT INTO webhook_deliveries (`+deliveryCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (webhook_id, event_key) DO NOTHING`,
		d.ID, d.WebhookID, d.TeamID, d.EventKey, d.EventType, d.Payload, d.State, d.Attempts, micros(d.NextAt), 0,
		d.StatusCode, d.Error, micros(d.CreatedAt), micros(d.UpdatedAt))
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// ClaimDeliveries claims up to limit pending deliveries due at now whose lease (if any) passed,
// leasing them until until; each is claimed by one replica only.
func (s *Store) ClaimDeliveries(ctx context.Context, now, until time.Time, limit int) ([]Delivery, error) {
	due, err := queryAll(ctx, s, s.db, `SELECT `+deliveryCols+` FROM webhook_deliveries WHERE state = ? AND next_at <= ? AND lease_until < ?
		ORDER BY next_at, id LIMIT ?`, scanDelivery, DeliveryPending, micros(now), micros(now), limit)
	if err != nil {
		return nil, err
	}
	return claimEach(ctx, s, due, func(d *Delivery) (string, []any) {
		old := micros(d.LeaseUntil)
		d.LeaseUntil = fromMicros(micros(until))
		return `UPDATE webhook_deliveries SET lease_until = ? WHERE id = ? AND state = ? AND lease_until = ?`,
			[]any{micros(until), d.ID, DeliveryPending, old}
	})
}

// FinishAttempt records an attempt's outcome (d's State, Attempts, NextAt, StatusCode, Error,
// UpdatedAt) and releases the lease.
func (s *Store) FinishAttempt(ctx context.Context, d Delivery) error {
	_, err := s.exec(ctx, s.db, `UPDATE webhook_deliveries SET state = ?, attempts = ?, next_at = ?, lease_until = 0,
		status_code = ?, error = ?, updated_at = ? WHERE id = ?`,
		d.State, d.Attempts, micros(d.NextAt), d.StatusCode, d.Error, micros(d.UpdatedAt), d.ID)
	return err
}

// ListDeliveries returns a webhook's deliveries, newest first, at most limit.
func (s *Store) ListDeliveries(ctx context.Context, teamID, webhookID string, limit int) ([]Delivery, error) {
	return queryAll(ctx, s, s.db, `SELECT `+deliveryCols+` FROM webhook_deliveries WHERE webhook_id = ? AND team_id = ?
		ORDER BY created_at DESC, id DESC LIMIT ?`, scanDelivery, webhookID, teamID, limit)
}

// PruneDeliveries deletes finished deliveries last changed before before; it returns how many.
func (s *Store) PruneDeliveries(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.exec(ctx, s.db, `DELETE FROM webhook_deliveries WHERE state <> ? AND updated_at < ?`, DeliveryPending, micros(before))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
