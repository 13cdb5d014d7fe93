package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"

	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// RunCode runs code in a code context and returns the buffered execution.
func (c *Client) RunCode(ctx context.Context, id string, req v1.CodeRequest) (v1.CodeExecution, error) {
	return send[v1.CodeExecution](ctx, c, "POST", sbPath(id, "/code"), nil, req)
}

// RunCodeStream runs code, calling onEvent for each event as it arrives (end last), and returns
// the execution gathered from them.
func (c *Client) RunCodeStream(ctx context.Context, id string, req v1.CodeRequest, onEvent func(v1.CodeEvent)) (v1.CodeExecution, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return v1.CodeExecution{}, err
	}
	x := v1.NewCodeExecution()
	err = c.stream(ctx, sbPath(id, "/code"), b, "application/json", "code stream ended without an end event", 64<<20, func(line []byte, rid string) (bool, error) {
		var ev v1.CodeEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return false, fmt.Errorf("bad line in code stream: %w", err)
		}
		if ev.StreamError != nil {
			return true, streamError(ev.StreamError, rid)
		}
		if onEvent != nil {
			onEvent(ev)
		}
		x.Add(ev)
		return ev.End != nil, nil
	})
	return x, err
}

// CreateCodeContext starts a code context (its own kernel and variables).
func (c *Client) CreateCodeContext(ctx context.Context, id string, req v1.CreateCodeContextRequest) (v1.CodeContext, error) {
	return send[v1.CodeContext](ctx, c, "POST", sbPath(id, "/code/contexts"), nil, req)
}

// ListCodeContexts lists a sandbox's code contexts.
func (c *Client) ListCodeContexts(ctx context.Context, id string) ([]v1.CodeContext, error) {
	l, err := send[v1.CodeContextList](ctx, c, "GET", sbPath(id, "/code/contexts"), nil, nil)
	return l.Contexts, err
}

// DeleteCodeContext stops a code context.
func (c *Client) DeleteCodeContext(ctx context.Context, id, contextID string) error {
	return c.call(ctx, "DELETE", sbPath(id, "/code/contexts/"+url.PathEscape(contextID)), nil, nil, nil)
}

// InterruptCode interrupts the running execution of a context ("" is the default one).
func (c *Client) InterruptCode(ctx context.Context, id, contextID string) error {
	return c.call(ctx, "POST", sbPath(id, "/code/interrupt"), nil, v1.CodeInterruptRequest{ContextID: contextID}, nil)
}
