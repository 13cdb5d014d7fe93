package main

import (
	"context"
	"io"
	"log/slog"
	"net"

	"github.com/pandastack/pandastack/internal/app"
)

// startInProcess runs s as a control plane inside the bench (Config.InProcess), listening on addr.
func (r *run) startInProcess(ctx context.Context, s *server, addr string) error {
	cctx, cancel := context.WithCancel(ctx)
	cp, _, err := app.StartControlPlane(cctx, app.ControlPlaneConfig{DatabaseURL: r.db.url, ClusterToken: r.clusterToken,
		HeartbeatTimeout: r.cfg.HeartbeatTimeout, PresetKey: r.apiKey, ProxyDomain: "localhost", Version: "bench",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		cancel()
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		cancel()
		cp.Close()
		return err
	}
	go func() { cp.Serve(cctx, ln); cp.Close(); close(s.done) }()
	s.stop = func() { cancel(); <-s.done }
	return nil
}
