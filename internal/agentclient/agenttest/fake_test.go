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

// TestTravelFake holds two fakes sharing a blob store to the two-host contract
// (TestSnapshotsTravelThroughBlobStore holds two real agents to it).
func TestTravelFake(t *testing.T) {
	blob := NewBlob()
	var targets []Target
	for _, id := range []string{"host-a", "host-b"} {
		a := New(id, "travel-token", "base")
		defer a.Close()
		a.UseBlob(blob)
		targets = append(targets, Target{Client: agentclient.New(a.URL(), a.Token), Template: "base"})
	}
	RunTravel(t, targets[0], targets[1], GuestChecks{})
}
