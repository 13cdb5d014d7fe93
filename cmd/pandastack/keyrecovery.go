package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"time"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/client"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
	"github.com/spf13/cobra"
)

// recoverAdminKey is `keys create --admin --data-dir DIR` (or --database-url): an admin key of
// the default team written to the store directly, for an operator who has lost every admin key.
// It is root's only (the store's files are root's anyway, and the check says so plainly), and it
// is audited: the key's name says who made it and when, a log line on stderr says so too, and with
// a data dir a line is appended to DIR/audit.log.
func recoverAdminKey(cmd *cobra.Command, admin bool, name, dataDir, databaseURL string) (client.Key, error) {
	switch {
	case !admin:
		return client.Key{}, errors.New("--data-dir and --database-url make admin keys only (the recovery of a lost admin key): add --admin; other keys are made through the API")
	case dataDir != "" && databaseURL != "":
		return client.Key{}, errors.New("give --data-dir or --database-url, not both")
	case os.Geteuid() != 0:
		return client.Key{}, errors.New("keys create --data-dir writes the store directly and is for root only: run it as root on the store's machine")
	}
	audit := io.Writer(io.Discard)
	if dataDir != "" {
		databaseURL = filepath.Join(dataDir, "state.db")
		if _, err := os.Stat(databaseURL); err != nil {
			return client.Key{}, fmt.Errorf("%s has no state.db: is it the data dir of pandastack up? (%v)", dataDir, err)
		}
		// Opened first: a key that could not be audited is not made.
		f, err := os.OpenFile(filepath.Join(dataDir, "audit.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return client.Key{}, err
		}
		defer f.Close()
		audit = f
	}
	who := "uid 0"
	if u := os.Getenv("SUDO_USER"); u != "" {
		who += " (sudo by " + u + ")"
	} else if u, err := user.Current(); err == nil {
		who += " (" + u.Username + ")"
	}
	now := time.Now().UTC()
	if name == "" {
		name = "local recovery by " + who + " at " + now.Format(time.RFC3339)
	}
	ctx := context.Background()
	st, err := store.Open(ctx, databaseURL)
	if err != nil {
		return client.Key{}, err
	}
	defer st.Close()
	k, secret, err := auth.RecoverAdminKey(ctx, st, name)
	if err != nil {
		return client.Key{}, err
	}
	const event = "admin key created locally, in the store directly (keys create --admin)"
	attrs := []any{"key_id", k.ID, "prefix", k.Prefix, "team", k.TeamID, "by", who}
	slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)).Warn(event, attrs...)
	slog.New(slog.NewJSONHandler(audit, nil)).Warn(event, attrs...)
	return v1.Key{ID: k.ID, Name: k.Name, Prefix: k.Prefix, Admin: k.Admin, TeamID: k.TeamID,
		CreatedAt: v1.Timestamp(k.CreatedAt), Key: secret, Scopes: auth.EffectiveScopes(k)}, nil
}
