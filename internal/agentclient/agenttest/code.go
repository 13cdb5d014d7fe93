package agenttest

import (
	"encoding/json"
	"strconv"
)

// A toy code server behind the code-interpreter template's relay (`pandastack-code`, one JSON
// request on stdin, its answer lines on stdout; docs/code-interpreter.md): contexts are created,
// listed and deleted, and a run answers the id of the context it ran in, so a caller can tell
// which kernel ran its code. Sandboxes of other templates have no relay, as on a real host.

// codeContext is one context of the toy server.
type codeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// codeServer answers one relay request in sandbox sb.
func (sb *sandbox) codeServer(stdin string) []string {
	var req struct{ Op, Context, Cwd, Language string }
	if err := json.Unmarshal([]byte(stdin), &req); err != nil {
		return []string{`{"fail":{"kind":"invalid","message":"bad request"}}`}
	}
	if sb.code == nil {
		sb.code = []codeContext{{ID: "default", Language: "python", Cwd: "/home/user"}}
	}
	line := func(v any) []string { b, _ := json.Marshal(v); return []string{string(b)} }
	fail := func(kind, msg string) []string {
		return line(map[string]any{"fail": map[string]string{"kind": kind, "message": msg}})
	}
	find := func(id string) int {
		if id == "" {
			id = "default"
		}
		for i, c := range sb.code {
			if c.ID == id {
				return i
			}
		}
		return -1
	}
	switch req.Op {
	case "create":
		sb.codeSeq++
		c := codeContext{ID: "ctx" + strconv.Itoa(sb.codeSeq), Language: "python", Cwd: "/home/user"}
		if req.Language != "" {
			c.Language = req.Language
		}
		if req.Cwd != "" {
			c.Cwd = req.Cwd
		}
		sb.code = append(sb.code, c)
		return line(map[string]any{"context": c})
	case "list":
		return line(map[string]any{"contexts": sb.code})
	case "delete", "interrupt", "run":
		i := find(req.Context)
		switch {
		case i < 0:
			return fail("not_found", "context "+req.Context+" not found")
		case req.Op == "interrupt":
			return line(map[string]bool{"ok": true})
		case req.Op == "run":
			return append(line(map[string]any{"result": map[string]any{"text": sb.code[i].ID, "is_main_result": true}}),
				line(map[string]any{"end": map[string]int{"execution_count": 1}})...)
		case sb.code[i].ID == "default":
			return fail("invalid", "the default context cannot be deleted")
		}
		sb.code = append(sb.code[:i], sb.code[i+1:]...)
		return line(map[string]bool{"ok": true})
	}
	return fail("invalid", "unknown op "+req.Op)
}
