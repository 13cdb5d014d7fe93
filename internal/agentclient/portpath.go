package agentclient

import "github.com/pandastack/pandastack/internal/wire/hostapi"

// PortPath splits a proxied request's path into sandbox, port and the application's path
// (hostapi.PortPath).
func PortPath(escaped string) (id, port, rest string, ok bool) { return hostapi.PortPath(escaped) }
