package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/splice"
)

// databasesSuite runs a real agent and server with the databases' router and measures, in the
// same run: database creates (restore of the baked postgres template + owner set-up) against
// sandbox creates of the same template, and a new connection + SELECT 1 through the router (TLS,
// SNI) against the same through the host agent's tunnel straight to the VM's postgres, with TLS
// (the VM's own certificate, its handshake on the guest's CPU) and without: router_over_direct and
// router_over_direct_plain are the router's cost against each; pgbench TPS through the router,
// the pooler and directly (pgbenchTPS); branch, backup and restore times.
func databasesSuite(ctx context.Context, res map[string]float64, guestAgent, imageCache string, rounds int) error {
	dbAddr := freeAddr()
	cl, err := startCluster(guestAgent, imageCache, "10.196.0.0/20", "--db-addr", dbAddr)
	if err != nil {
		return err
	}
	defer cl.stop()
	if err := bakePostgres(cl); err != nil {
		return err
	}
	n := 0
	createDB := cl.public.createTimed("/v1/databases", func() any { n++; return map[string]any{"name": fmt.Sprintf("bench%d", n)} })
	createSB := cl.public.createTimed("/v1/sandboxes", func() any { return map[string]any{"template": "postgres-17"} })
	lat, err := interleaved(rounds, createDB, createSB)
	if err != nil {
		return fmt.Errorf("%w (logs in %s)", err, cl.dir)
	}
	res["db_create_p50_ms"], res["db_create_p99_ms"] = pct(lat[0], 50), pct(lat[0], 99)
	res["db_sandbox_create_p50_ms"], res["db_sandbox_create_p99_ms"] = pct(lat[1], 50), pct(lat[1], 99)
	res["db_create_over_sandbox_create"] = res["db_create_p50_ms"] / res["db_sandbox_create_p50_ms"]

	// Connect latency: one database, many connections each way.
	body, err := cl.public.do("POST", "/v1/databases", map[string]any{"name": "conn", "suspend_after_seconds": 0}, 201)
	if err != nil {
		return err
	}
	var db struct {
		ID, Password string
		SandboxID    string `json:"sandbox_id"`
		Connection   struct {
			URI       string
			PoolerURI string `json:"pooler_uri"`
		}
	}
	json.Unmarshal(body, &db)
	viaRouter, err := routerConfig(cl, dbAddr, db.Connection.URI)
	if err != nil {
		return err
	}
	direct := viaRouter.Copy()
	agent := agentclient.New(cl.direct.base, strings.TrimPrefix(cl.direct.auth, "Bearer "))
	direct.TLSConfig.InsecureSkipVerify = true // the VM's snakeoil certificate
	direct.DialFunc = func(ctx context.Context, _, _ string) (net.Conn, error) {
		return agent.DialPort(ctx, db.SandboxID, 5432)
	}
	viaPooler, err := routerConfig(cl, dbAddr, db.Connection.PoolerURI)
	if err != nil {
		return err
	}
	plain := direct.Copy() // the floor: the tunnel without TLS
	plain.TLSConfig, plain.Fallbacks = nil, nil
	connect := func(cfg *pgx.ConnConfig) sample {
		return timed(func() error {
			c, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				return err
			}
			defer c.Close(ctx)
			var one int
			return c.QueryRow(ctx, "select 1").Scan(&one)
		})
	}
	lat, err = interleaved(rounds*5, connect(viaRouter), connect(direct), connect(plain), connect(viaPooler))
	if err != nil {
		return err
	}
	res["db_connect_pooler_p50_ms"] = pct(lat[3], 50)
	res["db_connect_direct_plain_p50_ms"] = pct(lat[2], 50)
	res["db_connect_router_over_direct_plain"] = pct(lat[0], 50) / res["db_connect_direct_plain_p50_ms"]
	res["db_connect_router_p50_ms"], res["db_connect_router_p99_ms"] = pct(lat[0], 50), pct(lat[0], 99)
	res["db_connect_direct_p50_ms"], res["db_connect_direct_p99_ms"] = pct(lat[1], 50), pct(lat[1], 99)
	res["db_connect_router_over_direct"] = res["db_connect_router_p50_ms"] / res["db_connect_direct_p50_ms"]

	if err := pgbenchTPS(ctx, res, db.ID, db.Password, dbAddr, func(ctx context.Context) (net.Conn, error) {
		return agent.DialPort(ctx, db.SandboxID, 5432)
	}); err != nil {
		return err
	}

	// Branch (a fork of the VM), backup (a snapshot) and restore (a new database from it).
	k := 0
	// newDB times a POST to path that makes a database (a branch, a restore) named prefix and a
	// number, with the fields more adds, then deletes that database (untimed).
	newDB := func(path, prefix string, more func() map[string]any) func() (float64, error) {
		return func() (float64, error) {
			k++
			req := more()
			req["name"] = fmt.Sprintf("%s%d", prefix, k)
			t := time.Now()
			body, err := cl.public.do("POST", path, req, 201)
			d := ms(time.Since(t))
			if err != nil {
				return 0, err
			}
			var made struct{ ID string }
			json.Unmarshal(body, &made)
			_, err = cl.public.do("DELETE", "/v1/databases/"+made.ID, nil, 204)
			return d, err
		}
	}
	branch := newDB("/v1/databases/"+db.ID+"/branches", "br", func() map[string]any { return map[string]any{} })
	var backupID string
	backup := timed(func() error {
		body, err := cl.public.do("POST", "/v1/databases/"+db.ID+"/backups", nil, 201)
		var b struct{ ID string }
		json.Unmarshal(body, &b)
		backupID = b.ID
		return err
	})
	restore := newDB("/v1/databases/"+db.ID+"/restore", "rs", func() map[string]any { return map[string]any{"backup_id": backupID} })
	lat, err = interleaved(rounds, branch, backup, restore)
	if err != nil {
		return err
	}
	for i, name := range []string{"db_branch", "db_backup", "db_restore"} {
		res[name+"_p50_ms"], res[name+"_p99_ms"] = pct(lat[i], 50), pct(lat[i], 99)
	}
	return nil
}

// bakePostgres bakes postgres-17 on cl's host and waits until its server sees it.
func bakePostgres(cl *cluster) error {
	if _, err := cl.direct.do("POST", "/v1/templates/postgres-17/bake", nil, 200); err != nil {
		return err
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if _, err := cl.public.do("GET", "/v1/templates/postgres-17", nil, 200); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("server never saw postgres-17 (see %s)", cl.dir)
		}
	}
}

// routerConfig is a pgx configuration for a database's uri through cl's router at dbAddr, its
// certificate verified with the cluster's CA.
func routerConfig(cl *cluster, dbAddr, uri string) (*pgx.ConnConfig, error) {
	ca := filepath.Join(cl.dir, "db-tls", "ca.pem")
	cfg, err := pgx.ParseConfig(strings.Replace(uri, "sslmode=require", "sslmode=verify-full&sslrootcert="+ca, 1))
	if err != nil {
		return nil, err
	}
	routerHost, _, _ := net.SplitHostPort(dbAddr)
	cfg.LookupFunc = func(context.Context, string) ([]string, error) { return []string{routerHost}, nil }
	return cfg, nil
}

// pgbenchTPS runs the host's pgbench (TPC-B-like, 4 clients, 10 s) against the database through
// the router (TLS terminated on the host), through the pooler (router + PgBouncer in the VM) and
// directly (a loopback listener spliced to the agent's tunnel: no router, no TLS), interleaved,
// and records each way's median TPS and the ratios against direct.
func pgbenchTPS(ctx context.Context, res map[string]float64, id, password, routerAddr string, dial func(context.Context) (net.Conn, error)) error {
	pgbench, err := exec.LookPath("pgbench")
	if err != nil {
		return fmt.Errorf("the pgbench figures need pgbench on the host (apt-get install postgresql-client): %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	tunnel := func(c net.Conn) {
		defer c.Close()
		if up, err := dial(ctx); err == nil {
			splice.Join(c, nil, up)
			up.Close()
		}
	}
	go func() {
		for c, err := ln.Accept(); err == nil; c, err = ln.Accept() {
			go tunnel(c)
		}
	}()
	rHost, rPort, _ := net.SplitHostPort(routerAddr)
	if rHost == "" {
		rHost = "127.0.0.1"
	}
	_, dPort, _ := net.SplitHostPort(ln.Addr().String())
	conninfo := map[string]string{
		"router": fmt.Sprintf("host=%s.db.localhost hostaddr=%s port=%s sslmode=require", id, rHost, rPort),
		"pooler": fmt.Sprintf("host=%s-pooler.db.localhost hostaddr=%s port=%s sslmode=require", id, rHost, rPort),
		"direct": fmt.Sprintf("host=127.0.0.1 port=%s sslmode=disable", dPort),
	}
	run := func(way string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, pgbench, append(args, "-U", "conn_owner", "-d", conninfo[way]+" dbname=conn")...)
		cmd.Env = append(os.Environ(), "PGPASSWORD="+password)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("pgbench %s: %v\n%s", way, err, out)
		}
		return string(out), nil
	}
	if _, err := run("direct", "-i", "-s", "1", "-q"); err != nil {
		return err
	}
	tps := regexp.MustCompile(`tps = ([0-9.]+)`)
	way := func(name string, extra ...string) sample {
		return func() (float64, error) {
			out, err := run(name, append([]string{"-n", "-c", "4", "-j", "2", "-T", "10"}, extra...)...)
			if err != nil {
				return 0, err
			}
			m := tps.FindStringSubmatch(out)
			if m == nil {
				return 0, fmt.Errorf("pgbench %s: no tps in %s", name, out)
			}
			return strconv.ParseFloat(m[1], 64)
		}
	}
	// The pooler is in transaction mode: pgbench's default simple protocol works through it.
	lat, err := interleaved(3, way("router"), way("pooler"), way("direct"))
	if err != nil {
		return err
	}
	for i, name := range []string{"router", "pooler", "direct"} {
		res["db_pgbench_"+name+"_tps_p50"] = pct(lat[i], 50)
	}
	res["db_pgbench_router_over_direct"] = res["db_pgbench_router_tps_p50"] / res["db_pgbench_direct_tps_p50"]
	res["db_pgbench_pooler_over_direct"] = res["db_pgbench_pooler_tps_p50"] / res["db_pgbench_direct_tps_p50"]
	return nil
}
