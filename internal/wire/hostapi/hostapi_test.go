package hostapi

import (
	"encoding/json"
	"testing"
	"time"
)

// The answers that were Go maps once keep a map's key order (sorted), so they stay byte-identical.
func TestMapShapedAnswersKeepKeyOrder(t *testing.T) {
	for name, v := range map[string]any{
		"health": Health{Accel: "tcg", OK: true, Version: "dev"},
		"info": Info{Accel: "tcg", HostID: "h", MaxMemoryMiB: 1, MaxVCPUs: 2, MemMiBCommitLimit: 3, MemMiBCommitted: 4,
			MemMiBFree: 5, MemMiBTotal: 6, MemMiBWatermark: 7, MemoryOvercommit: 1.5, PoolMiBFree: 8, PoolMiBTotal: 9,
			SlotsTotal: 10, SlotsUsed: 11, Templates: []Template{}},
		"exec end": ExecEnd{DurationMS: 1, ExitCode: 2, Signal: "KILL", TimedOut: true},
		"error":    ErrorBody{Error: ErrorDetail{Code: "c", Message: "m"}},
	} {
		got, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(got, &m); err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(m)
		if string(got) != string(want) {
			t.Errorf("%s: %s, a map gives %s", name, got, want)
		}
	}
}

func TestTimeIsWhatATimeMarshalsTo(t *testing.T) {
	at := time.Date(2026, 11, 24, 20, 31, 25, 123456000, time.UTC)
	want, _ := json.Marshal(at)
	if got, _ := json.Marshal(Time(at)); string(got) != string(want) {
		t.Errorf("Time: %s, want %s", got, want)
	}
}
