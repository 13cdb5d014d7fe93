package agenttest

import (
	"testing"

	"github.com/pandastack/pandastack/internal/agentclient"
)

// TestContractFake holds the fake to the host-agent contract (TestContractHostAgent holds the
// real agent to the same checks).
func TestContractFake(t *testing.T) {
	a := New("host-contract", "contract-token", "base")
	defer a.Close()
	Run(t, Target{Client: agentclient.New(a.URL(), a.Token), Template: "base"})
}
