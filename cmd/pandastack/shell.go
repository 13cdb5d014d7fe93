package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/pandastack/pandastack/internal/client"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// sandboxShellCmd is `sandbox shell ID [-- COMMAND...]`: an interactive terminal in the sandbox,
// like `docker exec -it` (raw mode, the window's size followed, the program's exit status).
func sandboxShellCmd(f *apiFlags) *cobra.Command {
	var o client.TerminalOptions
	cmd := &cobra.Command{
		Use:   "shell ID [-- COMMAND...]",
		Short: "Open an interactive terminal in a sandbox (its user's login shell, or COMMAND); exits with its status",
		Long: `Open an interactive terminal in a sandbox, like docker exec -it: your terminal is put in raw
mode and its size is followed. Without COMMAND it runs the user's login shell; COMMAND's words
are joined into one shell command line. Closing the connection hangs the terminal up.`,
		Example: `  pandastack sandbox shell sb_123
  pandastack sandbox shell --user root sb_123 -- top`,
		Args: cobra.MinimumNArgs(1),
		RunE: f.run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			rest := args[1:]
			if len(rest) > 0 && rest[0] == "--" {
				rest = rest[1:]
			}
			o.Cmd, o.Cols, o.Rows = strings.Join(rest, " "), 0, 0
			in, out := cmd.InOrStdin(), cmd.OutOrStdout()
			fd := int(os.Stdin.Fd())
			_, terr := unix.IoctlGetTermios(fd, unix.TCGETS)
			tty := in == os.Stdin && terr == nil
			if tty {
				if ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ); err == nil && ws.Col > 0 && ws.Row > 0 {
					o.Cols, o.Rows = int(ws.Col), int(ws.Row)
				}
			}
			t, err := c.Terminal(ctx, args[0], o)
			if err != nil {
				return err
			}
			defer t.Close()
			if tty {
				restore, err := rawMode(fd)
				if err != nil {
					return err
				}
				defer restore()
				winch := make(chan os.Signal, 1)
				signal.Notify(winch, unix.SIGWINCH)
				defer signal.Stop(winch)
				go func() {
					for range winch {
						if ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ); err == nil {
							t.Resize(int(ws.Col), int(ws.Row))
						}
					}
				}()
			}
			go func() {
				io.Copy(t, in)
				if !tty {
					t.Write([]byte{4}) // ^D: the end of piped input
				}
			}()
			m, err := t.Wait(out)
			if err != nil {
				return err
			}
			if code := *m.ExitCode; code != 0 {
				return &exitError{code, fmt.Sprintf("the terminal's program exited with status %d", code)}
			}
			return nil
		}),
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false)
	fl.StringVar(&o.User, "user", "", "user to run as (default: the template's)")
	fl.StringVar(&o.Cwd, "cwd", "", "working directory")
	return cmd
}

// rawMode puts the terminal fd in raw mode (as cfmakeraw does) and returns how to restore it.
func rawMode(fd int) (func(), error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, err
	}
	return func() { unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}
