package api

import (
	"context"
	"net/http"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/webhooks"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Webhooks (docs/events.md): thin handlers over internal/webhooks.

// maxWebhookBody bounds POST /v1/webhooks' body.
const maxWebhookBody = 16 << 10

func (s *Server) createWebhook(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	var req v1.CreateWebhookRequest
	if err := decodeJSONWithin(w, r, &req, false, maxWebhookBody, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	hook, err := s.webhooks.Create(r.Context(), id.TeamID, req)
	s.reply(w, r, http.StatusCreated, hook, err)
}

func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	list, err := s.webhooks.List(r.Context(), id.TeamID)
	s.reply(w, r, http.StatusOK, v1.Webhooks{Webhooks: list}, err)
}

// RunWebhooks records and sends webhook deliveries until ctx ends. Every replica runs it: each
// delivery is recorded once and sent by the replica that claims it.
func (s *Server) RunWebhooks(ctx context.Context) { s.webhooks.Run(ctx) }

// Webhooks is the server's webhook service.
func (s *Server) Webhooks() *webhooks.Service { return s.webhooks }
