package main

import (
	"context"
	"fmt"
	"time"
)

// firstExecSuite: what the first exec after a create costs (TCG translates every fresh code path
// again in each restored VM: the translation cache is the VMM's, not in the snapshot), against
// the same exec once warm, and `true` run through `sh -c` against argv. Each round creates a
// sandbox through the API, times its first exec, then the same exec again, and kills it; the
// kinds are interleaved. Reports (create + first exec) / create.
func (b *bench) firstExecSuite(ctx context.Context, res map[string]float64, creates int) error {
	kinds := []struct {
		name string
		body map[string]any
	}{
		{"sh_true", map[string]any{"cmd": "true"}},
		{"argv_true", map[string]any{"argv": []string{"true"}}},
		{"python", map[string]any{"cmd": "python -c 'print(1)'"}},
	}
	var ops []sample
	warm := make([][]float64, len(kinds))
	var creates2 []float64
	for i, k := range kinds {
		ops = append(ops, func() (float64, error) {
			c, id, err := b.create("base")
			if err != nil {
				return 0, err
			}
			defer b.agent.Kill(id)
			creates2 = append(creates2, c)
			var first float64
			for j := range 2 {
				t := time.Now()
				if err := b.post("/v1/sandboxes/"+id+"/exec", k.body, 200); err != nil {
					return 0, err
				}
				if j == 0 {
					first = ms(time.Since(t))
				} else {
					warm[i] = append(warm[i], ms(time.Since(t)))
				}
			}
			return first, nil
		})
	}
	lat, err := interleaved(creates, ops...)
	if err != nil {
		return err
	}
	create := pct(creates2, 50)
	res["firstexec_create_p50_ms"] = create
	fmt.Printf("\nfirst exec after a create (create p50 %.1f ms):\n", create)
	for i, k := range kinds {
		first, again := pct(lat[i], 50), pct(warm[i], 50)
		res["firstexec_"+k.name+"_first_p50_ms"], res["firstexec_"+k.name+"_warm_p50_ms"] = first, again
		res["create_plus_first_"+k.name+"_over_create"] = (create + first) / create
		fmt.Printf("  %-10s first %7.1f ms, again %6.1f ms, (create + first) / create %.2f\n", k.name, first, again, (create+first)/create)
	}
	return nil
}
