// Package mcptools is PandaStack's MCP server (docs/mcp.md): one table of sandbox tools (create,
// exec, start and read processes, read/write/list files, fork, snapshot, hibernate, kill) served
// with the official Go MCP SDK over two transports: stdio (`pandastack mcp`, the tools call the
// /v1 API with the user's key through internal/client) and streamable HTTP (`/mcp` on the
// server, the tools call the server's own /v1 handler in-process with the caller's bearer key,
// so every tool call passes the same authentication, scopes, rate limit and audit as the /v1
// call it is).
package mcptools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pandastack/pandastack/internal/client"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Limits of the tools' answers, documented in docs/mcp.md.
const (
	// MaxReadBytes is the most of a file read_file returns (the rest is cut, Truncated set).
	MaxReadBytes = 1 << 20
	// MaxWriteBytes is the largest content write_file takes.
	MaxWriteBytes = 8 << 20
	// MaxOutputBytes is the most of a process's output one process_output call returns.
	MaxOutputBytes = 1 << 20
)

// ClientFor gives the API client a tool call acts through (its key is the caller's).
type ClientFor func(ctx context.Context, req *mcp.CallToolRequest) (*client.Client, error)

// NewServer is an MCP server with every tool of the table; each call acts through clientFor's
// client.
func NewServer(version string, clientFor ClientFor) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "pandastack", Title: "PandaStack sandboxes", Version: version},
		&mcp.ServerOptions{Instructions: "Tools to run code in PandaStack microVM sandboxes: create a sandbox, run commands in it (exec, or background processes whose output you read later), read and write its files, fork it, snapshot, hibernate and kill it. Sandboxes expire after their TTL unless kept alive."})
	for _, t := range tools {
		t.add(s, clientFor)
	}
	return s
}

// Names lists the tools' names in table order.
func Names() []string {
	out := make([]string, len(tools))
	for i, t := range tools {
		out[i] = t.name
	}
	return out
}

// tool is one row of the table: its name, description and how it is added to a server.
type tool struct {
	name string
	add  func(s *mcp.Server, clientFor ClientFor)
}

// def makes a row from a typed handler; the SDK derives the input and output schemas from In and
// Out (and validates arguments against the first).
func def[In, Out any](name, title, desc string, readOnly, destructive bool, fn func(ctx context.Context, c *client.Client, in In) (Out, error)) tool {
	return tool{name: name, add: func(s *mcp.Server, clientFor ClientFor) {
		ann := &mcp.ToolAnnotations{Title: title, ReadOnlyHint: readOnly}
		if !readOnly {
			ann.DestructiveHint = &destructive
		}
		mcp.AddTool(s, &mcp.Tool{Name: name, Title: title, Description: desc, Annotations: ann},
			func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
				var zero Out
				c, err := clientFor(ctx, req)
				if err != nil {
					return nil, zero, err
				}
				out, err := fn(ctx, c, in)
				if err != nil {
					return nil, zero, toolError(err)
				}
				return nil, out, nil
			})
	}}
}

// toolError is the message a failed call shows the model: the API's message and code.
func toolError(err error) error {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return fmt.Errorf("%s (%s, HTTP %d)", ae.Message, ae.Code, ae.Status)
	}
	return err
}

// Inputs and outputs of the tools.
type (
	SandboxRef struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id (sb_…)"`
	}
	CreateIn struct {
		Template   string            `json:"template,omitempty" jsonschema:"template name (default: the server's default, e.g. base)"`
		TTLSeconds int64             `json:"ttl_seconds,omitempty" jsonschema:"seconds until the sandbox expires (default: the server's)"`
		Env        map[string]string `json:"env,omitempty" jsonschema:"environment variables of every command in the sandbox"`
		Metadata   map[string]string `json:"metadata,omitempty" jsonschema:"labels kept with the sandbox"`
	}
	// StartIn is a command: process_start's input, and exec's with more.
	StartIn struct {
		SandboxID string            `json:"sandbox_id" jsonschema:"the sandbox's id"`
		Cmd       string            `json:"cmd" jsonschema:"a shell command line (run by /bin/sh -c)"`
		Cwd       string            `json:"cwd,omitempty" jsonschema:"working directory"`
		Env       map[string]string `json:"env,omitempty" jsonschema:"extra environment variables"`
	}
	ExecIn struct {
		StartIn
		TimeoutSeconds float64 `json:"timeout_seconds,omitempty" jsonschema:"kill the command after this many seconds (default: the server's)"`
		Stdin          string  `json:"stdin,omitempty" jsonschema:"text given to the command's standard input"`
	}
	StartOut struct {
		Pid int `json:"pid" jsonschema:"the process id in the sandbox: read its output with process_output"`
	}
	OutputIn struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
		Pid       int    `json:"pid" jsonschema:"the process id process_start returned"`
		Offset    int64  `json:"offset,omitempty" jsonschema:"read from this offset of the output (the previous call's next; 0: from the start)"`
	}
	OutputOut struct {
		Stdout    string `json:"stdout"`
		Stderr    string `json:"stderr"`
		Next      int64  `json:"next" jsonschema:"offset to pass next time to read only newer output"`
		Running   bool   `json:"running"`
		ExitCode  *int   `json:"exit_code,omitempty"`
		Signal    string `json:"signal,omitempty"`
		Truncated bool   `json:"truncated,omitempty" jsonschema:"more output is there from next on"`
	}
	PathIn struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
		Path      string `json:"path" jsonschema:"an absolute path in the sandbox"`
	}
	ReadOut struct {
		Content   string `json:"content" jsonschema:"the file's text (invalid UTF-8 replaced)"`
		Size      int64  `json:"size"`
		Truncated bool   `json:"truncated,omitempty"`
	}
	WriteIn struct {
		PathIn
		Content string `json:"content" jsonschema:"the file's new text (parents of the path are made)"`
	}
	ListIn struct {
		PathIn
		Depth int `json:"depth,omitempty" jsonschema:"levels of the directory to list (default 1)"`
	}
	ListOut struct {
		Entries []v1.Stat `json:"entries"`
	}
	ForkIn struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the sandbox to fork (running)"`
		Count     int    `json:"count,omitempty" jsonschema:"how many copies (default 1)"`
	}
	SandboxesOut struct {
		Sandboxes []v1.Sandbox `json:"sandboxes"`
	}
	KillOut struct {
		Killed string `json:"killed" jsonschema:"the id of the sandbox killed"`
	}
)

// tools is the table, in the order tools/list shows them.
var tools = []tool{
	def("create_sandbox", "Create sandbox", "Create a new sandbox (a microVM) from a template and return it; use its id with the other tools.", false, false,
		func(ctx context.Context, c *client.Client, in CreateIn) (v1.Sandbox, error) {
			return c.CreateSandbox(ctx, client.CreateRequest{Template: in.Template, TTLSeconds: in.TTLSeconds, Env: in.Env, Metadata: in.Metadata})
		}),
	def("exec", "Run a command", "Run a shell command in a sandbox and wait for it: its stdout, stderr and exit code.", false, true,
		func(ctx context.Context, c *client.Client, in ExecIn) (v1.ExecResult, error) {
			req := client.ExecRequest{Cmd: in.Cmd, Cwd: in.Cwd, Env: in.Env}
			if in.TimeoutSeconds > 0 {
				req.TimeoutSeconds = client.Seconds(in.TimeoutSeconds)
			}
			if in.Stdin != "" {
				req.Stdin = &in.Stdin
			}
			return c.Exec(ctx, in.SandboxID, req)
		}),
	def("process_start", "Start a background process", "Start a command in the background (a server, a long job) and return its pid at once; read its output with process_output.", false, true,
		func(ctx context.Context, c *client.Client, in StartIn) (StartOut, error) {
			pid, err := c.StartProcess(ctx, in.SandboxID, client.StartProcessRequest{Cmd: in.Cmd, Cwd: in.Cwd, Env: in.Env})
			return StartOut{Pid: pid}, err
		}),
	def("process_output", "Read process output", "Read a background process's output from an offset without waiting: what it printed so far, whether it still runs, its exit code once it exited.", true, false,
		readOutput),
	def("read_file", "Read a file", fmt.Sprintf("Read a text file of a sandbox (at most %d bytes).", MaxReadBytes), true, false,
		readFile),
	def("write_file", "Write a file", fmt.Sprintf("Write a text file in a sandbox (at most %d bytes), replacing it.", MaxWriteBytes), false, true,
		func(ctx context.Context, c *client.Client, in WriteIn) (v1.Stat, error) {
			if len(in.Content) > MaxWriteBytes {
				return v1.Stat{}, fmt.Errorf("content is %d bytes: at most %d", len(in.Content), MaxWriteBytes)
			}
			return c.WriteFile(ctx, in.SandboxID, in.Path, strings.NewReader(in.Content), int64(len(in.Content)))
		}),
	def("list_files", "List a directory", "List a directory of a sandbox: names, types, sizes.", true, false,
		func(ctx context.Context, c *client.Client, in ListIn) (ListOut, error) {
			depth := in.Depth
			if depth <= 0 {
				depth = 1
			}
			e, err := c.ListFiles(ctx, in.SandboxID, in.Path, depth)
			return ListOut{Entries: e}, err
		}),
	def("fork_sandbox", "Fork a sandbox", "Copy a running sandbox (memory, processes and files) into new sandboxes, e.g. to try alternatives in parallel.", false, false,
		func(ctx context.Context, c *client.Client, in ForkIn) (SandboxesOut, error) {
			n := in.Count
			if n <= 0 {
				n = 1
			}
			sbs, err := c.Fork(ctx, in.SandboxID, n)
			return SandboxesOut{Sandboxes: sbs}, err
		}),
	def("snapshot_sandbox", "Snapshot a sandbox", "Save a sandbox's state as a snapshot that new sandboxes can start from.", false, false,
		func(ctx context.Context, c *client.Client, in SandboxRef) (v1.Snapshot, error) {
			return c.CreateSnapshot(ctx, in.SandboxID)
		}),
	def("hibernate_sandbox", "Hibernate a sandbox", "Pause a sandbox to disk (it costs nothing while hibernated); any later call wakes it.", false, false,
		func(ctx context.Context, c *client.Client, in SandboxRef) (v1.Sandbox, error) {
			return c.Hibernate(ctx, in.SandboxID)
		}),
	def("kill_sandbox", "Kill a sandbox", "Kill a sandbox for good: its files and processes are gone.", false, true,
		func(ctx context.Context, c *client.Client, in SandboxRef) (KillOut, error) {
			return KillOut{Killed: in.SandboxID}, c.KillSandbox(ctx, in.SandboxID)
		}),
}

// readOutput is process_output: the output from in.Offset, not following, at most MaxOutputBytes.
func readOutput(ctx context.Context, c *client.Client, in OutputIn) (OutputOut, error) {
	var stdout, stderr strings.Builder
	out := OutputOut{Next: in.Offset}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	end, err := c.ProcessOutput(ctx, in.SandboxID, in.Pid, in.Offset, false, func(ev client.ProcessEvent) {
		if out.Truncated {
			return
		}
		if stdout.Len()+stderr.Len() >= MaxOutputBytes {
			out.Truncated = true
			cancel() // the rest is read next time, from Next
			return
		}
		if ev.Stdout != nil {
			stdout.WriteString(*ev.Stdout)
		}
		if ev.Stderr != nil {
			stderr.WriteString(*ev.Stderr)
		}
		if ev.Next != nil {
			out.Next = *ev.Next
		}
	})
	out.Stdout, out.Stderr = stdout.String(), stderr.String()
	if out.Truncated {
		out.Running = true
		return out, nil
	}
	if err != nil {
		return OutputOut{}, err
	}
	if end.Next != nil {
		out.Next = *end.Next
	}
	out.Running, out.ExitCode, out.Signal = end.Running, end.ExitCode, end.Signal
	return out, nil
}

// readFile is read_file: at most MaxReadBytes of the file, as text.
func readFile(ctx context.Context, c *client.Client, in PathIn) (ReadOut, error) {
	rc, size, err := c.ReadFile(ctx, in.SandboxID, in.Path)
	if err != nil {
		return ReadOut{}, err
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, io.LimitReader(rc, MaxReadBytes+1)); err != nil {
		return ReadOut{}, err
	}
	out := ReadOut{Size: size}
	b := buf.Bytes()
	if len(b) > MaxReadBytes {
		b, out.Truncated = b[:MaxReadBytes], true
	}
	if !utf8.Valid(b) {
		b = []byte(strings.ToValidUTF8(string(b), "\uFFFD"))
	}
	out.Content = string(b)
	if size < 0 {
		out.Size = int64(buf.Len())
	}
	return out, nil
}
