// Package results holds what the benchmarks share: bench/results.json (flat keys, each run merged
// into what other benchmarks wrote) and percentiles.
package results

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// Merge writes res into the results file at path, keeping keys other benchmarks wrote. Values
// are rounded to two decimals; measured_at is the time of this write.
func Merge(path string, res map[string]float64) error {
	all := map[string]any{}
	if data, err := os.ReadFile(path); err == nil {
		json.Unmarshal(data, &all)
	}
	for k, v := range res {
		all[k] = float64(int64(v*100+0.5)) / 100
	}
	all["measured_at"] = time.Now().UTC().Format(time.RFC3339)
	data, _ := json.MarshalIndent(all, "", "  ")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// Pct is the p-th percentile of xs with linear interpolation (0 for none).
func Pct(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	k := (float64(len(s)) - 1) * p / 100
	f := int(k)
	if f+1 >= len(s) {
		return s[f]
	}
	return s[f] + (s[f+1]-s[f])*(k-float64(f))
}
