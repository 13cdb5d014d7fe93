package agentclient

import "strings"

// PortPath splits a proxied request's escaped path, /v1/sandboxes/{id}/ports/{port}{rest}, into
// its parts; rest is the application's path exactly as the client sent it ("//etc", "/a/../b",
// "%2F" stay as they are) and "/" when empty. Agents route proxied requests with it before their
// ServeMux, which would clean such a path and redirect the client to the internal route.
func PortPath(escaped string) (id, port, rest string, ok bool) {
	s, ok := strings.CutPrefix(escaped, "/v1/sandboxes/")
	if !ok {
		return "", "", "", false
	}
	id, s, ok = strings.Cut(s, "/")
	if !ok || id == "" {
		return "", "", "", false
	}
	s, ok = strings.CutPrefix(s, "ports/")
	if !ok {
		return "", "", "", false
	}
	port, rest, _ = strings.Cut(s, "/")
	if port == "" {
		return "", "", "", false
	}
	return id, port, "/" + rest, true
}
