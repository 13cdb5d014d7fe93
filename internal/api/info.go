package api

import (
	"net/http"

	"github.com/pandastack/pandastack/internal/network"
)

// InfoView is GET /v1/info: what this deployment enforces for every team.
type InfoView struct {
	Version string     `json:"version"`
	Egress  EgressInfo `json:"egress"`
}

// EgressInfo states the egress rules no team can change (docs/security.md).
type EgressInfo struct {
	// Blocked: never reached by any sandbox, whatever its policy or the operator's settings;
	// every host's sandbox links and the hosts' own addresses are blocked too.
	Blocked []RangeView `json:"blocked"`
	// Private: blocked unless listed in Open.
	Private []RangeView `json:"private"`
	// Open: private ranges the operator opened for all sandboxes (--egress-open).
	Open []string `json:"open"`
	// Also states the host-specific blocked destinations in words.
	Also []string `json:"also_blocked"`
}

// RangeView is one range and why it is special.
type RangeView struct {
	Range string `json:"range"`
	Why   string `json:"why"`
}

func rangeViews(rs []network.Range) []RangeView {
	out := make([]RangeView, len(rs))
	for i, r := range rs {
		out[i] = RangeView{Range: r.Prefix.String(), Why: r.Why}
	}
	return out
}

func (s *Server) info(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, InfoView{Version: s.cfg.Version, Egress: EgressInfo{
		Blocked: rangeViews(network.Blocked), Private: rangeViews(network.Private), Open: s.svc.EgressOpen(),
		Also: []string{"every sandbox link of every host (other sandboxes and their gateways)",
			"every address of the hosts themselves"},
	}})
}
