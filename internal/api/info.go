package api

import (
	"net/http"

	"github.com/pandastack/pandastack/internal/network"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

func (s *Server) info(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, v1.Info{Version: s.cfg.Version, Egress: v1.EgressInfo{
		Blocked: rangeViews(network.Blocked), Private: rangeViews(network.Private), Open: s.svc.EgressOpen(),
		Also: []string{"every sandbox link of every host (other sandboxes and their gateways)",
			"every address of the hosts themselves"},
	}, ProxyDomain: s.cfg.ProxyDomain})
}
