package api

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/codeinterp"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// A sandbox with private ports answers its port proxy only to requests that carry its traffic
// token: in the header, in the query parameter (a link a browser can open; the proxy then sets
// the cookie, so the page's own requests carry it too), or in the cookie. The proxy removes
// all three before the request reaches the sandbox.
const (
	TrafficTokenHeader = v1.TrafficTokenHeader
	TrafficTokenParam  = v1.TrafficTokenParam
	trafficTokenCookie = v1.TrafficTokenParam
	trafficTokenPrefix = "pdt_"
)

// trafficToken makes the token of a new sandbox whose create asked for public (nil: the
// server's default): "" and "" for public ports.
func (s *Server) trafficToken(public *bool) (token, hash string, err error) {
	if public != nil && *public || public == nil && !s.cfg.PrivatePorts {
		return "", "", nil
	}
	if token, err = auth.NewSecret(trafficTokenPrefix); err != nil {
		return "", "", err
	}
	return token, auth.Hash(token), nil
}

// takeTrafficToken removes the traffic token from r (header, query, cookie) and returns it and
// whether it came in the query.
func takeTrafficToken(r *http.Request) (token string, fromQuery bool) {
	if q := r.URL.Query(); q.Has(TrafficTokenParam) {
		token, fromQuery = q.Get(TrafficTokenParam), true
		q.Del(TrafficTokenParam)
		r.URL.RawQuery = q.Encode()
	}
	if h := r.Header.Get(TrafficTokenHeader); h != "" && token == "" {
		token = h
	}
	r.Header.Del(TrafficTokenHeader)
	var kept []string
	for _, c := range r.Cookies() {
		if c.Name == trafficTokenCookie {
			if token == "" {
				token = c.Value
			}
			continue
		}
		kept = append(kept, c.String())
	}
	r.Header.Del("Cookie")
	if len(kept) > 0 {
		r.Header.Set("Cookie", strings.Join(kept, "; "))
	}
	return token, fromQuery
}

// trafficAllowed checks a private sandbox's token in constant time.
func trafficAllowed(sb store.Sandbox, token string) bool {
	if sb.TrafficTokenHash == "" {
		return true
	}
	return token != "" && subtle.ConstantTimeCompare([]byte(auth.Hash(token)), []byte(sb.TrafficTokenHash)) == 1
}

// proxyHost matches the first label of a port host name: "<port>-<sandbox id>".
var proxyHost = regexp.MustCompile(`^([0-9]{1,5})-(sb_[a-z0-9]{1,60})$`)

// portTarget reads "<port>-<id>.<domain>[:port]" from a Host header; ok is false for any other
// host (the API itself).
func (s *Server) portTarget(host string) (port int, id string, ok bool) {
	d := s.cfg.ProxyDomain
	if d == "" {
		return 0, "", false
	}
	if h, _, found := strings.Cut(host, ":"); found {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	label, ok := strings.CutSuffix(host, "."+d)
	if !ok {
		return 0, "", false
	}
	m := proxyHost.FindStringSubmatch(label)
	if m == nil {
		return 0, "", false
	}
	port, _ = strconv.Atoi(m[1])
	return port, m[2], true
}

// proxy forwards a request for <port>-<id>.<domain> to the sandbox's host agent, which forwards it
// to that port in the guest (HTTP and WebSocket, streamed both ways) and wakes a hibernated
// sandbox first. The host name is the capability, as with the other sandbox clouds: the request
// carries no API key (its Authorization header belongs to the app and passes through).
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, port int, id string) {
	if port < 1 || port > 65535 {
		proxyPage(w, http.StatusBadRequest, "Bad port", fmt.Sprintf("Port %d is not a TCP port (1-65535).", port))
		return
	}
	if port == codeinterp.Port { // it runs code: only the API's callers (with a key) reach it
		proxyPage(w, http.StatusForbidden, "Reserved port", fmt.Sprintf(
			"Port %d is the code interpreter's: it is reached through the API (POST /v1/sandboxes/%s/code), not by host name.", port, id))
		return
	}
	sb, err := s.store.GetSandbox(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		proxyPage(w, http.StatusBadGateway, "No such sandbox", fmt.Sprintf("There is no sandbox %s.", id))
		return
	}
	if err != nil {
		proxyPage(w, http.StatusBadGateway, "Proxy error", "The sandbox could not be looked up; try again.")
		s.log.Error("proxy: sandbox lookup", "sandbox", id, "err", err)
		return
	}
	token, fromQuery := takeTrafficToken(r)
	if !trafficAllowed(sb, token) {
		proxyPage(w, http.StatusUnauthorized, "Private sandbox port", fmt.Sprintf(
			"The ports of sandbox %s are private: send its traffic token in the %s header or the %s query parameter.",
			id, TrafficTokenHeader, TrafficTokenParam))
		return
	}
	if sb.TrafficTokenHash != "" && fromQuery {
		http.SetCookie(w, &http.Cookie{Name: trafficTokenCookie, Value: token, Path: "/", HttpOnly: true,
			Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode})
	}
	if err := usable(sb); err != nil {
		proxyPage(w, http.StatusBadGateway, "Sandbox not running", err.Error()+".")
		return
	}
	s.forward(w, r, sb, port)
}

// forward sends r to port in sandbox sb through its host agent (which wakes it if hibernated).
// Through the sandbox service: a hibernated sandbox of a down or draining host wakes on another.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, sb store.Sandbox, port int) {
	id := sb.ID
	c, err := s.svc.Client(r.Context(), sb)
	if err != nil {
		proxyPage(w, http.StatusBadGateway, "Sandbox unreachable", fmt.Sprintf("Sandbox %s cannot be reached: %v.", id, err))
		return
	}
	base, err := url.Parse(c.BaseURL)
	if err != nil {
		proxyPage(w, http.StatusBadGateway, "Proxy error", "The sandbox's host has a bad address.")
		return
	}
	prefix := "/v1/sandboxes/" + id + "/ports/" + strconv.Itoa(port)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = base.Scheme, base.Host
			pr.Out.URL.Path = prefix + pr.In.URL.Path
			pr.Out.URL.RawPath = ""
			if pr.In.URL.RawPath != "" {
				pr.Out.URL.RawPath = prefix + pr.In.URL.RawPath
			}
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Set(agentclient.ProxyTokenHeader, c.Token)
			pr.SetXForwarded()
		},
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			proxyPage(w, http.StatusBadGateway, "Sandbox unreachable", "The sandbox's host did not answer: "+err.Error())
		},
	}
	rp.ServeHTTP(w, r)
}

// proxyPage answers a proxied request that cannot reach the sandbox: a short page for a browser,
// the same words for curl.
func proxyPage(w http.ResponseWriter, status int, title, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	fmt.Fprintf(w, "<!doctype html><title>%[1]s</title><h1>%[1]s</h1><p>%[2]s</p><p><small>PandaStack proxy, HTTP %[3]d</small></p>\n",
		html.EscapeString(title), html.EscapeString(msg), status)
}
