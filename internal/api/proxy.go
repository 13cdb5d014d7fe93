package api

import (
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
	"github.com/pandastack/pandastack/internal/store"
)

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
	if err := usable(sb); err != nil {
		proxyPage(w, http.StatusBadGateway, "Sandbox not running", err.Error()+".")
		return
	}
	h, err := s.store.GetHost(r.Context(), sb.HostID)
	if err != nil || h.State != store.HostUp {
		proxyPage(w, http.StatusBadGateway, "Sandbox unreachable", fmt.Sprintf("The host of sandbox %s is down.", id))
		return
	}
	c := s.sched.Client(h)
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
