package hostagent

import "github.com/pandastack/pandastack/internal/wire/hostapi"

// The API's bodies are internal/wire/hostapi's; these names are for the benchmarks (bench/),
// which drive an Agent in-process, and the control plane's end-to-end tests.
type (
	SandboxInfo   = hostapi.Sandbox
	CreateRequest = hostapi.CreateRequest
	VolumeMount   = hostapi.VolumeMount
)

// MaxForkCount bounds one fork call (hostapi.MaxForkCount).
const MaxForkCount = hostapi.MaxForkCount
