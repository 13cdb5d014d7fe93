package api

import (
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/guest"
)

// pty is GET /v1/sandboxes/{id}/pty: an interactive terminal over a WebSocket, served by the
// sandbox's host agent; the control plane checks the caller and the query, then passes the
// connection through (the key stays here: the host gets its own token).
func (s *Server) pty(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	err := onlyParams(q, "cmd", "user", "cwd", "cols", "rows", "ticket") // ticket: see ticketed
	for _, name := range []string{"cols", "rows"} {
		if v := q.Get(name); err == nil && v != "" {
			if n, perr := strconv.Atoi(v); perr != nil || n < 1 || n > guest.MaxTermSize {
				err = invalid("%s must be 1 to %d", name, guest.MaxTermSize)
			}
		}
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	sb, c, err := s.target(r)
	var base *url.URL
	if err == nil {
		base, err = url.Parse(c.BaseURL)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.svc.Touched(r.Context(), sb, c, nil)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = base.Scheme, base.Host
			pr.Out.URL.Path, pr.Out.URL.RawPath = "/v1/sandboxes/"+url.PathEscape(sb.ID)+"/pty", ""
			oq := pr.Out.URL.Query()
			oq.Del("ticket")
			pr.Out.URL.RawQuery = oq.Encode()
			pr.Out.Host = base.Host
			pr.Out.Header.Set("Authorization", "Bearer "+c.Token)
			pr.Out.Header.Del("Cookie")
			// The caller is authenticated here (a key or a ticket, never a cookie, so another
			// site's page cannot open a terminal as a user): the host's own Origin check, meant
			// for direct browser connections, must not see a browser's Origin (the console's).
			pr.Out.Header.Del("Origin")
		},
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.writeError(w, r, &agentclient.Unreachable{Err: err})
		},
	}
	rp.ServeHTTP(w, r)
}
