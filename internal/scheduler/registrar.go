package scheduler

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/defaults"
)

// Paths of the control plane's internal host API (authenticated with the cluster token).
const (
	RegisterPath  = "/internal/v1/hosts/register"
	HeartbeatPath = "/internal/v1/hosts/heartbeat"
)

// RegistrarConfig configures the agent side of registration: `pandastack agent --server URL
// --server-token T` runs a Registrar next to its HTTP server.
type RegistrarConfig struct {
	// ServerURL is the control plane's base URL; ClusterToken authenticates to its internal API.
	ServerURL    string
	ClusterToken string
	// AgentURL is the URL the control plane should use to reach this agent (advertised), and
	// AgentToken the bearer token the agent expects.
	AgentURL   string
	AgentToken string
	// LocalURL is where the registrar itself reads the agent's /v1/info (default AgentURL).
	LocalURL string
	// Interval between heartbeats (default 5 s: three per default heartbeat timeout).
	Interval time.Duration
	Logger   *slog.Logger
	// HTTP is the client for the server calls (default: 10 s timeout).
	HTTP *http.Client
	// OnRegistered, if set, is given the server's answer to each registration (what the control
	// plane tells its hosts: the blob store, the heartbeat timeout).
	OnRegistered func(Registered)
}

// Registered is the control plane's answer to a registration.
type Registered struct {
	HostID                  string  `json:"host_id"`
	HeartbeatTimeoutSeconds float64 `json:"heartbeat_timeout_seconds"`
	// BlobStore is where the control plane keeps artifacts (a URL without credentials; the host
	// brings its own, e.g. AWS_ACCESS_KEY_ID), or "" when artifacts stay on their host.
	BlobStore string `json:"blob_store,omitempty"`
}

// RunRegistrar registers the agent and heartbeats until ctx ends. Failures are logged and
// retried; a server that forgot the host (404) gets a fresh registration.
func RunRegistrar(ctx context.Context, cfg RegistrarConfig) error {
	if cfg.ServerURL == "" || cfg.AgentURL == "" {
		return errors.New("registrar: ServerURL and AgentURL are required")
	}
	defaults.Positive(&cfg.Interval, DefaultHeartbeatTimeout/3)
	cfg.LocalURL = cmp.Or(cfg.LocalURL, cfg.AgentURL)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	local := agentclient.New(cfg.LocalURL, cfg.AgentToken)
	registered, failing := false, false
	var exits int64 // the agent's process-exits cursor: moved on once the server took a report
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	for {
		err := func() error {
			ictx, cancel := context.WithTimeout(ctx, cfg.Interval+5*time.Second)
			defer cancel()
			asked := time.Now()
			info, err := local.Info(ictx)
			if err != nil {
				return fmt.Errorf("read own agent info: %w", err)
			}
			reg := RegistrationFromInfo(info, cfg.AgentURL, cfg.AgentToken)
			next := AddProcessExits(ictx, local, &reg, exits)
			var ans Registered
			post := func(path string) (int, error) {
				reg.ReadMsAgo = time.Since(asked).Milliseconds() + 1 // rounded up: the report is at least this old
				return postJSON(ictx, cfg.HTTP, strings.TrimRight(cfg.ServerURL, "/")+path, cfg.ClusterToken, reg, &ans)
			}
			path := HeartbeatPath
			if !registered {
				path = RegisterPath
			}
			status, err := post(path)
			if status == http.StatusNotFound && path == HeartbeatPath {
				registered = false
				status, err = post(RegisterPath)
			}
			if err != nil {
				return err
			}
			exits = next
			if !registered {
				cfg.Logger.Info("registered with the control plane", "server", cfg.ServerURL, "host", reg.HostID, "advertised_url", cfg.AgentURL)
				if cfg.OnRegistered != nil {
					cfg.OnRegistered(ans)
				}
			}
			registered = true
			return nil
		}()
		if err != nil && !failing && ctx.Err() == nil {
			cfg.Logger.Warn("heartbeat to the control plane failed (will retry)", "server", cfg.ServerURL, "err", err)
		} else if err == nil && failing {
			cfg.Logger.Info("heartbeats reach the control plane again", "server", cfg.ServerURL)
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// postJSON posts body as JSON and reads a 2xx answer into out (if not nil; at most 64 KiB).
func postJSON(ctx context.Context, c *http.Client, url, token string, body, out any) (int, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		if out != nil {
			if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(out); err != nil {
				return resp.StatusCode, fmt.Errorf("%s answered %s with a body that is not the expected JSON: %w", url, resp.Status, err)
			}
		}
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, fmt.Errorf("%s answered %s: %s", url, resp.Status, bytes.TrimSpace(msg))
}
