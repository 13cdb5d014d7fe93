package main

import (
	"context"
	"io"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestCLIMCPStdio: `pandastack mcp` speaks MCP on stdin/stdout (the Go SDK's client on the other
// end) and acts with the key of its environment, against a control plane with the fake host agent.
func TestCLIMCPStdio(t *testing.T) {
	useServer(t)

	serverIn, clientOut := io.Pipe()
	clientIn, serverOut := io.Pipe()
	cmd := mcpCmd()
	cmd.SetIn(serverIn)
	cmd.SetOut(serverOut)
	cmd.SetArgs(nil)
	done := make(chan error, 1)
	go func() { done <- cmd.Execute(); serverOut.Close() }()

	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
		Connect(ctx, &mcp.IOTransport{Reader: clientIn, Writer: clientOut}, nil)
	if err != nil {
		t.Fatal(err)
	}
	call := func(name string, args map[string]any) map[string]any {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %+v", name, err, res)
		}
		return res.StructuredContent.(map[string]any)
	}
	sb := call("create_sandbox", map[string]any{"template": "base"})
	id := sb["id"].(string)
	if out := call("exec", map[string]any{"sandbox_id": id, "cmd": "echo over stdio"}); out["stdout"] != "over stdio\n" {
		t.Fatalf("exec: %v", out)
	}
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"sandbox_id": "sb_doesnotexist0000000", "cmd": "true"}}); err != nil || !res.IsError {
		t.Fatalf("a missing sandbox: %v %+v", err, res)
	}
	call("kill_sandbox", map[string]any{"sandbox_id": id})
	cs.Close() // closes stdin: the command ends cleanly
	if err := <-done; err != nil {
		t.Fatalf("pandastack mcp: %v", err)
	}
}
