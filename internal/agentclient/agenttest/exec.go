package agenttest

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
)

// The fake's exec interprets one toy command per call (no pipes, quoting or `;`):
//
//	echo WORDS [>&2]      WORDS and a newline (on stderr with >&2)
//	printenv NAME         the variable (exec env over create env); exit 1 if unset. `env NAME` too
//	pwd                   the cwd (default /home/user, the default user's home)
//	cat                   stdin back
//	exit N, true, false   the exit code
//	sleep SECONDS         bounded by the timeout: a timed-out command is killed (exit 137)
//	inc                   adds one to the sandbox's memory counter and prints it
//	lines N               N stdout lines, 20 ms apart (for streaming tests)
//
// Unknown commands fail as on the real agent: a shell line exits 127, an argv is a 404.

// Exec limits, the real agent's.
const (
	defaultExecTimeout = 60 * time.Second
	maxExecTimeout     = 24 * time.Hour
)

// run is what one exec does: its output in order, then its end.
type run struct {
	out      []chunk
	gap      time.Duration // between chunks
	sleep    time.Duration
	exit     int
	timedOut bool
}

type chunk struct{ stream, data string }

func validateExec(req *agentclient.ExecRequest) *agentclient.Error {
	badName := func(k string) bool { return k == "" || len(k) > 256 || strings.ContainsAny(k, "=\x00") }
	for _, c := range []struct {
		bad  bool
		what string
	}{
		{req.Cmd == "" && len(req.Argv) == 0, "exec needs cmd (a shell string) or argv"},
		{req.Cmd != "" && len(req.Argv) > 0, "exec takes cmd or argv, not both"},
		{req.TimeoutSeconds != nil && (*req.TimeoutSeconds <= 0 || *req.TimeoutSeconds > maxExecTimeout.Seconds()),
			fmt.Sprintf("timeout_seconds must be > 0 and <= %d", int(maxExecTimeout.Seconds()))},
		{len(req.Env) > 256, "env has more than 256 entries"},
		{slices.ContainsFunc(slices.Collect(maps.Keys(req.Env)), badName), "an env name is not valid"},
	} {
		if c.bad {
			return invalid("%s", c.what)
		}
	}
	return nil
}

// interpret plans req in sb (a.mu held: `inc` changes the guest).
func (sb *sandbox) interpret(req agentclient.ExecRequest) (run, *agentclient.Error) {
	cwd := "/home/user"
	if req.Cwd != "" {
		p, ok := absPath(req.Cwd)
		switch {
		case !ok:
			return run{}, invalid("cwd must be absolute")
		case sb.fs.isFile(p):
			return run{}, invalid("cwd %s is not a directory", p)
		case !sb.fs.isDir(p):
			return run{}, notFound("cwd %s does not exist", p)
		}
		cwd = p
	}
	line, stream := req.Cmd, "stdout"
	if line == "" {
		line = strings.Join(req.Argv, " ")
	}
	if l, ok := strings.CutSuffix(line, " >&2"); ok {
		line, stream = l, "stderr"
	}
	var x run
	say := func(s string) { x.out = append(x.out, chunk{stream, s}) }
	verb, arg, _ := strings.Cut(line, " ")
	switch verb {
	case "echo":
		say(arg + "\n")
	case "printenv", "env":
		v, ok := req.Env[arg]
		if !ok {
			v, ok = sb.env[arg]
		}
		if ok {
			say(v + "\n")
		} else {
			x.exit = 1
		}
	case "pwd":
		say(cwd + "\n")
	case "cat":
		if req.Stdin != nil {
			say(*req.Stdin)
		}
	case "exit":
		x.exit, _ = strconv.Atoi(arg)
	case "true":
	case "false":
		x.exit = 1
	case "sleep":
		s, _ := strconv.ParseFloat(arg, 64)
		x.sleep = time.Duration(s * float64(time.Second))
	case "inc":
		sb.counter++
		say(strconv.Itoa(sb.counter) + "\n")
	case "pandastack-code":
		if sb.Template != "code-interpreter" || req.Stdin == nil {
			return run{}, notFound("executable %q not found in PATH", verb)
		}
		for _, l := range sb.codeServer(*req.Stdin) {
			say(l + "\n")
		}
	case "lines":
		n, _ := strconv.Atoi(arg)
		for i := 1; i <= n; i++ {
			say(fmt.Sprintf("line %d\n", i))
		}
		x.gap = 20 * time.Millisecond
	default:
		if len(req.Argv) > 0 {
			return run{}, notFound("executable %q not found in PATH", verb)
		}
		x.out, x.exit = []chunk{{"stderr", "/bin/sh: 1: " + verb + ": not found\n"}}, 127
	}
	timeout := defaultExecTimeout
	if req.TimeoutSeconds != nil {
		timeout = time.Duration(*req.TimeoutSeconds * float64(time.Second))
	}
	if x.sleep > timeout {
		x.sleep, x.exit, x.timedOut = timeout, 128+9, true // SIGKILL
	}
	return x, nil
}

func (a *Agent) exec(w http.ResponseWriter, r *http.Request) {
	var req agentclient.ExecRequest
	err := decode(r, &req)
	if err == nil {
		err = validateExec(&req)
	}
	var x run
	if err == nil {
		a.mu.Lock()
		var sb *sandbox
		if sb, err = a.live(r); err == nil {
			x, err = sb.interpret(req)
		}
		a.mu.Unlock()
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	start := time.Now()
	select {
	case <-time.After(x.sleep):
	case <-r.Context().Done():
		return
	}
	end := map[string]any{"exit_code": x.exit, "timed_out": x.timedOut}
	if x.timedOut {
		end["signal"] = "SIGKILL"
	}
	if !strings.Contains(r.Header.Get("Accept"), "application/x-ndjson") {
		res := map[string]string{"stdout": "", "stderr": ""}
		for _, c := range x.out {
			time.Sleep(x.gap)
			res[c.stream] += c.data
		}
		end["stdout"], end["stderr"], end["duration_ms"] = res["stdout"], res["stderr"], time.Since(start).Milliseconds()
		writeJSON(w, 200, end)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(200)
	enc := json.NewEncoder(w)
	for _, c := range x.out {
		enc.Encode(map[string]string{c.stream: c.data})
		http.NewResponseController(w).Flush()
		time.Sleep(x.gap)
	}
	end["duration_ms"] = time.Since(start).Milliseconds()
	enc.Encode(end)
}
