package auth

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/pandastack/pandastack/internal/store"
)

// Scope names: what a key may call. A key holds one or more; a call is allowed when any of them
// covers it. Admin-only calls (teams, admin keys, the audit log) also need an admin key.
const (
	ScopeAll       = "all"       // every route of the key's team (keys made without scopes)
	ScopeRead      = "read"      // GET on every /v1 route
	ScopeSandboxes = "sandboxes" // every call on /v1/sandboxes and below (exec, files, fork, …)
	ScopeAdmin     = "admin"     // everything: the key is an admin key
)

// TerminalRoute is the interactive terminal's route: a GET, as every WebSocket upgrade, that
// runs commands, so it needs the sandboxes scope (and is audited) like a POST.
const TerminalRoute = "/v1/sandboxes/{id}/pty"

// MCPRoute is the MCP server's streamable HTTP endpoint (docs/mcp.md). Opening it needs only the
// read scope: each tool call is a /v1 call that needs its own route's scope.
const MCPRoute = "/mcp"

// Scopes lists the scope names a key may be given.
var Scopes = []string{ScopeAll, ScopeRead, ScopeSandboxes, ScopeAdmin}

// EffectiveScopes is what a stored key may call: its scopes, or for a key made without any,
// admin (admin keys) or all.
func EffectiveScopes(k store.APIKey) []string {
	switch {
	case len(k.Scopes) > 0:
		return k.Scopes
	case k.Admin:
		return []string{ScopeAdmin}
	}
	return []string{ScopeAll}
}

// NeededScope is the narrowest scope that covers method on route (a route pattern such as
// /v1/sandboxes/{id}); any broader one covers it too.
func NeededScope(method, route string) string {
	switch {
	case route == TerminalRoute: // a GET (a WebSocket upgrade) that runs commands
		return ScopeSandboxes
	case method == http.MethodGet || method == http.MethodHead || route == MCPRoute:
		return ScopeRead
	case route == "/v1/sandboxes" || strings.HasPrefix(route, "/v1/sandboxes/"):
		return ScopeSandboxes
	}
	return ScopeAll
}

// Allow reports whether scopes let a key call method on route: nil, or an error (kind
// Forbidden) that names the scope it lacks.
func Allow(scopes []string, method, route string) error {
	need := NeededScope(method, route)
	sandboxRoute := route == "/v1/sandboxes" || strings.HasPrefix(route, "/v1/sandboxes/")
	for _, s := range scopes {
		if s == ScopeAdmin || s == ScopeAll || s == need || (s == ScopeSandboxes && sandboxRoute) {
			return nil
		}
	}
	return forbidden(fmt.Sprintf("this key lacks the scope %q that %s %s needs (its scopes: %s)", need, method, route, strings.Join(scopes, ", ")))
}

// ParseScopes checks requested scope names, dropping repeats; admin reports whether they make
// an admin key.
func ParseScopes(in []string) (out []string, admin bool, err error) {
	for _, s := range in {
		if !slices.Contains(Scopes, s) {
			return nil, false, fmt.Errorf("unknown scope %q: use %s", s, strings.Join(Scopes, ", "))
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
		admin = admin || s == ScopeAdmin
	}
	return out, admin, nil
}
