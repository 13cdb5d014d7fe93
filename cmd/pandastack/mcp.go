package main

import (
	"context"
	"errors"
	"io"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/pandastack/pandastack/internal/client"
	"github.com/pandastack/pandastack/internal/mcptools"
)

func init() { rootCmd.AddCommand(mcpCmd()) }

// mcpCmd is `pandastack mcp`: an MCP server on stdin/stdout (docs/mcp.md) whose tools call the
// API with the user's key, for MCP hosts that start their servers as commands.
func mcpCmd() *cobra.Command {
	var f apiFlags
	cmd := f.verb("mcp", "Serve PandaStack's sandbox tools to an MCP client on stdin/stdout (docs/mcp.md)", cobra.NoArgs,
		func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			srv := mcptools.NewServer(version, func(context.Context, *mcp.CallToolRequest) (*client.Client, error) { return c, nil })
			err := srv.Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(cmd.InOrStdin()), Writer: nopWriteCloser{cmd.OutOrStdout()}})
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return nil // the client closed stdin, or Ctrl-C
			}
			return err
		})
	f.register(cmd)
	return cmd
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
