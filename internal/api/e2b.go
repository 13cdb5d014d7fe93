package api

import (
	"context"
	"net/http"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/e2bcompat"
)

// E2BBackend is what the E2B facade (internal/e2bcompat) uses of this server: its services, and
// the checks and port proxy every create and proxied request goes through here too (quotas,
// env and metadata limits, private ports).
func (s *Server) E2BBackend() e2bcompat.Backend {
	return e2bcompat.Backend{Store: s.store, Sandboxes: s.svc, Templates: s.tmpl, Auth: s.auth,
		HoldQuota: s.holdSandboxQuota, TemplateSize: s.templateSize,
		CheckMetadata: validateMetadata, CheckEnv: validateEnv,
		Proxy: func(w http.ResponseWriter, r *http.Request, port int, sandboxID string) {
			s.proxy(w, r.WithContext(context.WithoutCancel(r.Context())), port, sandboxID)
		},
		// The E2B control API's calls take from their key's rate-limit buckets and are audited
		// as /v1 calls are (route "e2b <pattern>").
		Guard: func(method, pattern string, isCreate bool, writeErr func(http.ResponseWriter, *http.Request, error), h http.Handler) http.Handler {
			rt := route{method: method, path: "e2b " + pattern, access: apiKey}
			return s.limited(isCreate, writeErr, s.audited(rt, h))
		},
		// Data-plane calls (envd, the code interpreter) come with a sandbox's access token, not
		// a key: they take from one bucket per team of the same size, and the mutating ones
		// are audited on the sandbox with no key (route "e2b <what>").
		DataGuard: func(teamID, sandboxID, method, what string, mutating bool, writeErr func(http.ResponseWriter, *http.Request, error), h http.Handler) http.Handler {
			if mutating {
				h = s.auditedOn(route{method: method, path: "e2b " + what, access: apiKey}, sandboxID, h)
			}
			limited := s.limited(false, writeErr, h)
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				limited.ServeHTTP(w, r.WithContext(auth.WithIdentity(r.Context(), auth.Identity{TeamID: teamID})))
			})
		},
		MaxUploadBytes: s.cfg.MaxUploadBytes, MaxTTL: s.cfg.MaxTTL, Logger: s.log.With("part", "e2b")}
}
