package api

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pandastack/pandastack/internal/mcptools"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// bearer adds a key to every request of an MCP client.
type bearer struct {
	key  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.next.RoundTrip(r)
}

// mcpSession connects the official Go MCP client to the server's /mcp with key.
func (e *env) mcpSession(key string) *mcp.ClientSession {
	e.t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: e.hs.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{key, http.DefaultTransport}}, DisableStandaloneSSE: true}, nil)
	if err != nil {
		e.t.Fatalf("connect /mcp: %v", err)
	}
	e.t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool, decoding its structured answer into out; it returns the error text of a
// failed call ("" when it succeeded).
func mcpCall(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String()
	}
	if out != nil {
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s: structured answer %s: %v", name, raw, err)
		}
	}
	return ""
}

// TestMCPOverHTTP: /mcp takes only a valid bearer key; its tools act as /v1 calls of that key
// (its team's sandboxes only, its scopes, audited like /v1).
func TestMCPOverHTTP(t *testing.T) {
	e := newEnv(t)
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	for _, key := range []string{"", "pds_wrongwrongwrongwrongwrongwrong"} {
		r := e.do("POST", "/mcp", key, init, "Content-Type", "application/json", "Accept", "application/json, text/event-stream")
		if r.status != 401 || r.errCode() == "" {
			t.Fatalf("key %q: /mcp answered %d %s, want a 401 error", key, r.status, r.body)
		}
	}

	cs := e.mcpSession(e.admin)
	tl, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tl.Tools {
		names = append(names, tool.Name)
	}
	want := mcptools.Names()
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("tools/list: %v, want %v", names, want)
	}

	var sb SandboxView
	if msg := mcpCall(t, cs, "create_sandbox", map[string]any{"template": "base"}, &sb); msg != "" || !strings.HasPrefix(sb.ID, "sb_") {
		t.Fatalf("create_sandbox: %q %+v", msg, sb)
	}
	var ex struct {
		Stdout   string `json:"stdout"`
		ExitCode int    `json:"exit_code"`
	}
	if msg := mcpCall(t, cs, "exec", map[string]any{"sandbox_id": sb.ID, "cmd": "echo hello mcp"}, &ex); msg != "" || ex.Stdout != "hello mcp\n" || ex.ExitCode != 0 {
		t.Fatalf("exec: %q %+v", msg, ex)
	}
	if msg := mcpCall(t, cs, "write_file", map[string]any{"sandbox_id": sb.ID, "path": "/tmp/note.txt", "content": "from mcp"}, nil); msg != "" {
		t.Fatalf("write_file: %s", msg)
	}
	var rd mcptools.ReadOut
	if msg := mcpCall(t, cs, "read_file", map[string]any{"sandbox_id": sb.ID, "path": "/tmp/note.txt"}, &rd); msg != "" || rd.Content != "from mcp" || rd.Size != 8 {
		t.Fatalf("read_file: %q %+v", msg, rd)
	}
	var ls mcptools.ListOut
	if msg := mcpCall(t, cs, "list_files", map[string]any{"sandbox_id": sb.ID, "path": "/tmp"}, &ls); msg != "" ||
		!slices.ContainsFunc(ls.Entries, func(s v1.Stat) bool { return s.Name == "note.txt" }) {
		t.Fatalf("list_files: %q %+v", msg, ls)
	}
	// Bad arguments are the tool's error, not a transport failure.
	if msg := mcpCall(t, cs, "exec", map[string]any{"sandbox_id": sb.ID}, nil); msg == "" {
		t.Fatal("exec without cmd succeeded")
	}

	// Another team sees nothing of it, exactly as through /v1.
	other := e.mustStatus(e.do("POST", "/v1/teams", e.admin, map[string]string{"name": "beta"}), 201).json(t)["key"].(map[string]any)["key"].(string)
	ocs := e.mcpSession(other)
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"exec", map[string]any{"sandbox_id": sb.ID, "cmd": "echo hi"}},
		{"read_file", map[string]any{"sandbox_id": sb.ID, "path": "/tmp/note.txt"}},
		{"kill_sandbox", map[string]any{"sandbox_id": sb.ID}},
	} {
		if msg := mcpCall(t, ocs, c.tool, c.args, nil); !strings.Contains(msg, "HTTP 404") {
			t.Fatalf("another team's %s: %q, want a 404", c.tool, msg)
		}
	}
	// A read-only key may open /mcp and read, not run commands.
	ro := e.mustStatus(e.do("POST", "/v1/keys", e.admin, map[string]any{"name": "ro", "scopes": []string{"read"}}), 201).json(t)["key"].(string)
	rcs := e.mcpSession(ro)
	if msg := mcpCall(t, rcs, "read_file", map[string]any{"sandbox_id": sb.ID, "path": "/tmp/note.txt"}, &rd); msg != "" || rd.Content != "from mcp" {
		t.Fatalf("read-only read_file: %q", msg)
	}
	if msg := mcpCall(t, rcs, "exec", map[string]any{"sandbox_id": sb.ID, "cmd": "echo hi"}, nil); !strings.Contains(msg, "HTTP 403") {
		t.Fatalf("read-only exec: %q, want a 403", msg)
	}

	var killed mcptools.KillOut
	if msg := mcpCall(t, cs, "kill_sandbox", map[string]any{"sandbox_id": sb.ID}, &killed); msg != "" || killed.Killed != sb.ID {
		t.Fatalf("kill_sandbox: %q", msg)
	}
	if st := e.mustStatus(e.do("GET", "/v1/sandboxes/"+sb.ID, e.admin, nil), 200).json(t)["state"]; st != "killed" {
		t.Fatalf("after kill_sandbox: %v", st)
	}
	// Tool calls are audited as the /v1 calls they are, with the MCP client's address.
	var audit v1.AuditPage
	json.Unmarshal(e.mustStatus(e.do("GET", "/v1/audit", e.admin, nil), 200).body, &audit)
	var seen []string
	for _, a := range audit.Entries {
		if a.ResourceID == sb.ID && a.Source == "127.0.0.1" {
			seen = append(seen, a.Method+" "+a.Route)
		}
	}
	for _, want := range []string{"POST /v1/sandboxes", "POST /v1/sandboxes/{id}/exec", "DELETE /v1/sandboxes/{id}"} {
		if !slices.Contains(seen, want) {
			t.Errorf("audit has no %s of the MCP calls: %v", want, seen)
		}
	}
}
