package v1

// Webhooks (docs/events.md): POST /v1/webhooks and the objects of /v1/webhooks/….

// CreateWebhookRequest is the body of POST /v1/webhooks: where to send which event types ("*":
// every type).
type CreateWebhookRequest struct {
	URL    string   `json:"url"`
	Events []string `json:"events"`
}

// Webhook is an endpoint of the team. Secret (whsec_…) is shown once, in the create's answer.
type Webhook struct {
	ID        string   `json:"id"`
	URL       string   `json:"url"`
	Events    []string `json:"events"`
	CreatedAt string   `json:"created_at"`
	Secret    string   `json:"secret,omitempty"`
}

// Webhooks is GET /v1/webhooks.
type Webhooks struct {
	Webhooks []Webhook `json:"webhooks"`
}

// WebhookDelivery is one event sent (or being sent) to a webhook: State pending (NextAttemptAt
// is the next try), succeeded or failed (every attempt failed); StatusCode and Error are the last
// attempt's.
type WebhookDelivery struct {
	ID            string `json:"id"`
	WebhookID     string `json:"webhook_id"`
	Event         string `json:"event"`
	State         string `json:"state"`
	Attempts      int    `json:"attempts"`
	StatusCode    int    `json:"status_code,omitempty"`
	Error         string `json:"error,omitempty"`
	NextAttemptAt string `json:"next_attempt_at,omitempty"`
	CreatedAt     string `json:"created_at"`
	UpdatedAt     string `json:"updated_at"`
}

// WebhookDeliveries is GET /v1/webhooks/{id}/deliveries: newest first.
type WebhookDeliveries struct {
	Deliveries []WebhookDelivery `json:"deliveries"`
}

// WebhookEvent is the JSON body a webhook receives: the event's type and time and, for sandbox
// events, the sandbox; for "change", the call. The delivery's id, the event type and the
// signature are in the headers (docs/events.md).
type WebhookEvent struct {
	Type      string    `json:"type"`
	At        string    `json:"at"`
	WebhookID string    `json:"webhook_id"`
	Sandbox   *Sandbox  `json:"sandbox,omitempty"`
	Template  *Template `json:"template,omitempty"` // template.built: the team template as built
	Change    *Change   `json:"change,omitempty"`
	// Process is a "process.exited" event's process.
	Process *ProcessExit `json:"process,omitempty"`
	// Deployment is a "deployment.*" event's app deployment, as GET …/deployments/{id} shows it.
	Deployment *Deployment `json:"deployment,omitempty"`
	// Database is a "database.backed_up", "database.suspended" or "database.restarted" event's
	// database.
	Database *DatabaseEvent `json:"database,omitempty"`
}
