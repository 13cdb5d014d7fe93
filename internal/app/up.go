package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/hostagent"
)

// UpConfig configures `up`: a control plane and one local host agent in one process, both under
// DataDir (state.db and agent/).
type UpConfig struct {
	DataDir string
	Addr    string   // listen address of the API
	Bake    []string // templates to bake in the background once up
	// ControlPlane's DatabaseURL and Agents are filled in here; PresetKey is the operator's key;
	// its Version is the agent's too (one binary).
	ControlPlane ControlPlaneConfig
	Agent        hostagent.Config // DataDir, Token and Logger are filled in here
	Network      NetworkConfig
}

// Stack is a running `up`: the API listener, the local agent and its server, the control plane.
type Stack struct {
	CP      *ControlPlane
	URL     string // base URL a local client uses
	DataDir string // absolute
	// Key is the admin key to show: made by this start, or the operator's preset one when the store
	// knows it (KeyPreset); empty when neither (a restart without a key given).
	Key       string
	KeyPreset bool
	// KeyRejected: the operator gave a key (PANDASTACK_API_KEY) that is not one of this data
	// dir's; KeyRecovery is the command that makes one.
	KeyRejected bool
	KeyRecovery string

	cfg        UpConfig
	log        *slog.Logger
	ln         net.Listener
	agent      *hostagent.Agent
	agentSrv   *http.Server
	agentURL   string
	agentToken string
}

// StartUp starts `up`'s parts; Serve then answers the API and Close stops them in reverse order.
func StartUp(ctx context.Context, cfg UpConfig) (_ *Stack, err error) {
	log := cfg.ControlPlane.Logger
	s := &Stack{cfg: cfg, log: log}
	defer func() {
		if err != nil {
			s.Close() // what did start, e.g. the listener taken first
		}
	}()
	if s.DataDir, err = filepath.Abs(cfg.DataDir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(s.DataDir, 0o700); err != nil {
		return nil, err
	}
	// Take the API port first: a clash should fail before anything slow starts.
	if s.ln, err = net.Listen("tcp", cfg.Addr); err != nil {
		return nil, err
	}
	s.URL = BaseURL(s.ln.Addr().String())

	// The agent is reached on loopback only, with a token made for this run.
	if s.agentToken, err = auth.RandomString(32, "0123456789abcdefghijklmnopqrstuvwxyz"); err != nil {
		return nil, err
	}
	acfg := cfg.Agent
	acfg.DataDir = filepath.Join(s.DataDir, "agent")
	acfg.Token = s.agentToken
	acfg.Logger = log.With("part", "agent")
	if acfg.Network, err = cfg.Network.Pool(acfg.DataDir); err != nil {
		return nil, err
	}
	hostagent.Version = cfg.ControlPlane.Version
	if s.agent, err = hostagent.New(ctx, acfg); err != nil {
		return nil, fmt.Errorf("host agent: %w", err)
	}
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.agentURL = "http://" + aln.Addr().String()
	s.agentSrv = &http.Server{Handler: s.agent.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go s.agentSrv.Serve(aln)

	o := cfg.ControlPlane
	o.DatabaseURL = filepath.Join(s.DataDir, "state.db")
	o.PublicURL = s.URL
	if o.DBTLSDir == "" {
		o.DBTLSDir = filepath.Join(s.DataDir, "db-tls")
	}
	s.KeyRecovery = "pandastack keys create --admin --data-dir " + s.DataDir
	o.KeyRecovery = s.KeyRecovery
	o.Agents = []string{s.agentURL + "=" + s.agentToken}
	o.WebhookLoopback = true // a single-machine setup: a receiver on this machine
	if o.BlobStore == "" {
		o.BlobStore = "file://" + filepath.Join(s.DataDir, "blobs")
	}
	cp, key, err := StartControlPlane(ctx, o)
	if err != nil {
		return nil, err
	}
	s.CP = cp

	// A key the operator supplied is theirs already: the banner (often a log) names it by its
	// prefix only. A key made here is printed in full, once.
	s.Key = key
	switch {
	case o.PresetKey == "":
	case cp.PresetKeyOK:
		s.Key, s.KeyPreset = o.PresetKey, true
	default:
		s.KeyRejected = true
	}
	if err := os.WriteFile(PIDFile(s.DataDir), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return nil, err
	}
	return s, nil
}

// PIDFile is where a running `up` records its process id, for `pandastack down`. It exists while
// that `up` runs; one left behind by a killed `up` names a process that is gone, or is not `up`.
func PIDFile(dataDir string) string { return filepath.Join(dataDir, "up.pid") }

// Serve bakes the configured templates in the background and answers the API until ctx ends.
func (s *Stack) Serve(ctx context.Context) error {
	if len(s.cfg.Bake) > 0 {
		go s.prebake(ctx, s.cfg.Bake)
	}
	err := s.CP.Serve(ctx, s.ln)
	s.log.Info("shutting down; running sandboxes keep running and are re-adopted at the next start")
	return err
}

// Close stops what StartUp started, last first; the agent's VMs keep running for the next start.
func (s *Stack) Close() {
	if b, err := os.ReadFile(PIDFile(s.DataDir)); err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(os.Getpid()) {
		os.Remove(PIDFile(s.DataDir))
	}
	if s.CP != nil {
		s.CP.Close()
	}
	if s.agentSrv != nil {
		s.agentSrv.Close()
	}
	if s.agent != nil {
		if err := s.agent.Close(); err != nil {
			s.log.Warn("host agent: shutting down", "err", err)
		}
	}
	if s.ln != nil {
		s.ln.Close()
	}
}

// BaseURL turns a listen address into the URL a local client uses.
func BaseURL(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "http://" + listen
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// prebake asks the local agent to bake templates now, so the first create restores a snapshot
// instead of waiting for a cold boot; then it refreshes the scheduler's view of the host.
func (s *Stack) prebake(ctx context.Context, names []string) {
	c := agentclient.New(s.agentURL, s.agentToken)
	for _, name := range names {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		start := time.Now()
		resp, err := c.Raw(ctx, "POST", "/v1/templates/"+name+"/bake", nil, nil, -1, nil)
		if err == nil {
			var b []byte
			b, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && strings.Contains(string(b), `"error"`) {
				err = errors.New(strings.TrimSpace(lastLine(string(b))))
			}
		}
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("pre-baking a template failed; its first create will try again", "template", name, "err", err)
			}
			continue
		}
		s.log.Info("template ready", "template", name, "took", time.Since(start).Round(time.Millisecond))
	}
	s.CP.Scheduler.PollStatic(ctx)
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
