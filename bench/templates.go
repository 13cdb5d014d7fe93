package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/pandastack/pandastack/internal/template"
)

// templateSuite: per catalog template, its root filesystem size, cold bake time and create p50,
// and the largest template's create p50 against base's (creates interleaved across templates so
// all see the same load). Builds every catalog template the first time: tens of minutes.
func (b *bench) templateSuite(ctx context.Context, res map[string]float64, creates int) error {
	names := template.CatalogNames()
	largest, largestSize := "", int64(0)
	for _, name := range names {
		info, err := b.agent.EnsureTemplate(ctx, name, progress)
		if err != nil {
			return fmt.Errorf("template %s: %w", name, err)
		}
		size := allocatedBytes(filepath.Join(info.Dir, "disk.img"))
		res["template_"+name+"_rootfs_mib"] = float64(size >> 20)
		res["template_"+name+"_cold_bake_ms"] = float64(info.BakeMS)
		if size > largestSize {
			largest, largestSize = name, size
		}
	}
	lat := map[string][]float64{}
	for i := 0; i < creates; i++ {
		for _, name := range names {
			d, id, err := b.create(name)
			if err != nil {
				return fmt.Errorf("create %s: %w", name, err)
			}
			lat[name] = append(lat[name], d)
			b.agent.Kill(id)
		}
	}
	for _, name := range names {
		res["template_"+name+"_create_p50_ms"] = pct(lat[name], 50)
		res["template_"+name+"_create_p99_ms"] = pct(lat[name], 99)
	}
	res["template_largest_over_base_create"] = res["template_"+largest+"_create_p50_ms"] / res["template_base_create_p50_ms"]
	fmt.Printf("largest template: %s (%d MiB rootfs); create p50 %.0f ms vs base %.0f ms: ratio %.2f (target <= 1.3)\n",
		largest, largestSize>>20, res["template_"+largest+"_create_p50_ms"], res["template_base_create_p50_ms"], res["template_largest_over_base_create"])
	return nil
}

// allocatedBytes is the space a (sparse) file really takes.
func allocatedBytes(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}
