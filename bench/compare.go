package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"

	"github.com/pandastack/pandastack/internal/hostagent"
	"github.com/pandastack/pandastack/internal/timing"
)

// stepSamples collects the steps of traced creates (timing marks of the sandbox manager, the
// runtime and the guest client), in the order first seen.
type stepSamples struct {
	order []string
	ms    map[string][]float64
}

// create is a sample: a create of base on a, traced; its latency is the trace's total.
func (s *stepSamples) create(ctx context.Context, a *hostagent.Agent) sample {
	return s.traced(ctx, func(ctx context.Context) (func() error, error) {
		info, err := a.Create(ctx, hostagent.CreateRequest{Template: "base"})
		return func() error { return settle(ctx, a, "base", a.Kill(info.ID)) }, err
	})
}

// traced is a sample of op run with a trace in its context: its latency is the trace's total
// (up to op's last mark), and each step is kept; then op's cleanup runs.
func (s *stepSamples) traced(ctx context.Context, op func(context.Context) (cleanup func() error, err error)) sample {
	return func() (float64, error) {
		tr := timing.NewTrace()
		cleanup, err := op(timing.With(ctx, tr))
		if err != nil {
			return 0, err
		}
		if s.ms == nil {
			s.ms = map[string][]float64{}
		}
		for _, st := range append(tr.Steps(), timing.Step{Name: "total", D: tr.Total()}) {
			if _, ok := s.ms[st.Name]; !ok {
				s.order = append(s.order, st.Name)
			}
			s.ms[st.Name] = append(s.ms[st.Name], ms(st.D))
		}
		return ms(tr.Total()), cleanup()
	}
}

func (s *stepSamples) p50(step string) float64 {
	if len(s.ms[step]) == 0 {
		return 0
	}
	return pct(s.ms[step], 50)
}

// compareSuite runs traced creates on the main agent and on a side agent (its own data dir,
// name) configured by set, interleaved, and prints each step's p50 on both; res gets
// <name>_create_p50_ms, <name>_main_create_p50_ms and <name>_over_main (side / main), the same
// for the guest_hello step, and each step's p50 on both. check, when set, runs on a sandbox of
// each side first.
func (b *bench) compareSuite(ctx context.Context, res map[string]float64, name string, set func(*hostagent.Config), creates int,
	check func(a *hostagent.Agent, side string) error) error {
	side, err := b.sideAgent(ctx, name, set)
	if err != nil {
		return err
	}
	defer side.Close()
	if check != nil {
		for _, s := range []struct {
			a    *hostagent.Agent
			name string
		}{{b.agent, "main"}, {side, name}} {
			if err := check(s.a, s.name); err != nil {
				return err
			}
		}
	}
	floor, err := b.minimalRestore(ctx)
	if err != nil {
		return err
	}
	var onMain, onSide stepSamples
	lat, err := interleaved(creates, onMain.create(ctx, b.agent), onSide.create(ctx, side), floor)
	if err != nil {
		return err
	}
	minimal := pct(lat[2], 50)
	fmt.Printf("\n%s: create steps, p50 over the creates that had the step (how many; main agent vs %s)\n", name, name)
	order := slices.DeleteFunc(slices.Clone(onMain.order), func(s string) bool { return s == "total" })
	for _, step := range onSide.order { // the side's own steps too, after the main agent's
		if !slices.Contains(order, step) && step != "total" {
			order = append(order, step)
		}
	}
	order = append(order, "total")
	for _, step := range order {
		fmt.Printf("  %-18s %8.2f (%2d) %8.2f (%2d) ms\n", step, onMain.p50(step), len(onMain.ms[step]), onSide.p50(step), len(onSide.ms[step]))
		if step != "total" { // the step table: <name>_step_<step>_p50_ms, <name>_main_step_<step>_p50_ms
			res[name+"_step_"+step+"_p50_ms"], res[name+"_main_step_"+step+"_p50_ms"] = onSide.p50(step), onMain.p50(step)
		}
	}
	for label, step := range map[string]string{"create": "total", "guest_hello": "guest_hello"} {
		res[name+"_"+label+"_p50_ms"], res[name+"_main_"+label+"_p50_ms"] = onSide.p50(step), onMain.p50(step)
		res[name+"_"+label+"_over_main"] = onSide.p50(step) / onMain.p50(step)
	}
	res[name+"_minimal_restore_p50_ms"] = minimal
	res[name+"_create_over_minimal_restore"], res[name+"_main_create_over_minimal_restore"] = onSide.p50("total")/minimal, onMain.p50("total")/minimal
	fmt.Printf("%s / main: create %.2f, guest_hello %.2f; create / minimal_restore (%.1f ms): main %.2f, %s %.2f\n", name,
		res[name+"_create_over_main"], res[name+"_guest_hello_over_main"], minimal,
		res[name+"_main_create_over_minimal_restore"], name, res[name+"_create_over_minimal_restore"])
	return nil
}

// runtimes are what the catalog's templates run, each checked with a small job.
var runtimes = []struct{ name, cmd string }{
	{"python", `python3 -c 'import hashlib, json, sqlite3, ssl; print(hashlib.sha256(b"x").hexdigest()[:8])'`},
	{"node", `node -e 'console.log(require("crypto").createHash("sha256").update("x").digest("hex").slice(0, 8))'`},
	{"bun", `bun -e 'console.log(1 + 1)'`},
	{"go", `go version`},
	{"gcc", `echo 'int main(){return 0;}' > /tmp/t.c && gcc -O2 /tmp/t.c -o /tmp/t && /tmp/t && echo ok`},
}

// runtimesWork runs each of runtimes in a sandbox on a and prints what works (a failure is
// reported, not an error: it is the finding).
func runtimesWork(a *hostagent.Agent, side string) error {
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	c := &apiClient{base: srv.URL}
	body, err := c.do("POST", "/v1/sandboxes", map[string]any{"template": "base"}, 201)
	if err != nil {
		return err
	}
	var sb struct{ ID string }
	json.Unmarshal(body, &sb)
	defer a.Kill(sb.ID)
	flags, _ := c.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": `grep -m1 -o -w -E 'avx2|avx|sse4_2|ssse3' /proc/cpuinfo | sort -u | tr '\n' ' '`}, 200)
	var fr struct{ Stdout string }
	json.Unmarshal(flags, &fr)
	fmt.Printf("%s: guest CPU has %s\n", side, fr.Stdout)
	for _, rt := range runtimes {
		out, err := c.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": rt.cmd, "timeout_seconds": 120}, 200)
		if err != nil {
			return err
		}
		var r struct {
			Stdout, Stderr string
			ExitCode       int `json:"exit_code"`
		}
		json.Unmarshal(out, &r)
		status := "ok"
		if r.ExitCode != 0 {
			status = fmt.Sprintf("FAILS (exit %d: %.200s)", r.ExitCode, r.Stderr)
		}
		fmt.Printf("  %-7s %s %s\n", rt.name, status, strings.TrimSpace(r.Stdout))
	}
	return nil
}

// cpuKey makes a CPU model a results key part ("qemu64", "max,-avx2" → "max_avx2").
func cpuKey(model string) string {
	return strings.Trim(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, strings.ToLower(model)), "_")
}
