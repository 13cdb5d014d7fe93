package app

import (
	"context"
	"errors"
	"net"
	"net/http"

	"github.com/pandastack/pandastack/internal/hostagent"
	"github.com/pandastack/pandastack/internal/scheduler"
)

// AgentConfig configures a host agent run on its own (`agent`).
type AgentConfig struct {
	Agent   hostagent.Config // Token, DataDir and Logger included
	Network NetworkConfig
	Version string
	Addr    string // listen address of the agent API
	// ServerURL, when set, is a control plane to register with and heartbeat to, presenting
	// ServerToken; it reaches this agent at AdvertiseURL (default http://<listen address>).
	ServerURL, ServerToken, AdvertiseURL string
}

// RunAgent runs a host agent until ctx ends. Its sandboxes keep running after it returns; the
// next start re-adopts them.
func RunAgent(ctx context.Context, cfg AgentConfig) error {
	if cfg.Agent.Token == "" && !isLoopback(cfg.Addr) {
		return errors.New("an agent listening beyond loopback needs --token (or PANDASTACK_AGENT_TOKEN)")
	}
	var err error
	if cfg.Agent.Network, err = cfg.Network.Pool(cfg.Agent.DataDir); err != nil {
		return err
	}
	hostagent.Version = cfg.Version
	agent, err := hostagent.New(ctx, cfg.Agent)
	if err != nil {
		return err
	}
	defer agent.Close()
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	log := cfg.Agent.Logger
	log.Info("host agent listening", "addr", ln.Addr().String(), "data_dir", cfg.Agent.DataDir, "accel", agent.Accel())
	if cfg.ServerURL != "" {
		advertise := cfg.AdvertiseURL
		if advertise == "" {
			advertise = "http://" + ln.Addr().String()
		}
		go scheduler.RunRegistrar(ctx, scheduler.RegistrarConfig{ServerURL: cfg.ServerURL, ClusterToken: cfg.ServerToken,
			AgentURL: advertise, AgentToken: cfg.Agent.Token, LocalURL: "http://" + ln.Addr().String(), Logger: log,
			OnRegistered: func(r scheduler.Registered) {
				// The control plane's blob store, unless this agent was given its own.
				if err := agent.SetBlobStore(ctx, r.BlobStore); err != nil {
					log.Error("the control plane's blob store cannot be opened here: bakes stay on this host", "url", r.BlobStore, "err", err)
				}
			}})
	}
	srv := &http.Server{Handler: agent.Handler()}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
