package api

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/client"
	"github.com/pandastack/pandastack/internal/dbrouter"
	"github.com/pandastack/pandastack/internal/hostagent"
	"github.com/pandastack/pandastack/internal/network"
	"github.com/pandastack/pandastack/internal/network/nettest"
	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/testenv"
)

// Managed PostgreSQL on real microVMs: a create restores the baked postgres template; psql and
// pgx reach it through the SNI router with TLS, the broker answers with the API key and with
// Neon's /sql format.

type dbAnswer struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	State      string `json:"state"`
	Version    string `json:"version"`
	Password   string `json:"password"`
	Note       string `json:"note"`
	SandboxID  string `json:"sandbox_id"`
	Connection struct {
		URI       string `json:"uri"`
		PoolerURI string `json:"pooler_uri"`
		HTTPURL   string `json:"http_url"`
		Host      string `json:"host"`
		User      string `json:"user"`
		Database  string `json:"database"`
		Port      int    `json:"port"`
	} `json:"connection"`
}

// restoreDB restores database id (POST …/restore with body) into a new database and returns it;
// anything but 201 fails the test, saying what was restored.
func (cp *e2eCP) restoreDB(t *testing.T, id, body, what string) dbAnswer {
	t.Helper()
	code, b := cp.call(t, "POST", "/v1/databases/"+id+"/restore", []byte(body), "application/json")
	var d dbAnswer
	if json.Unmarshal(b, &d); code != 201 {
		t.Fatalf("%s: %d %s", what, code, b)
	}
	return d
}

// dbBackups is GET /v1/databases/{id}/backups as the tests read it.
type dbBackups struct {
	Backups []struct {
		ID        string
		Published bool
	}
}

// backupsOf lists database id's backups; anything but 200 fails the test.
func (cp *e2eCP) backupsOf(t *testing.T, id string) dbBackups {
	t.Helper()
	code, b := cp.call(t, "GET", "/v1/databases/"+id+"/backups", nil, "")
	var l dbBackups
	if err := json.Unmarshal(b, &l); err != nil || code != 200 {
		t.Fatalf("backups of %s: %d %s", id, code, b)
	}
	return l
}

// dbRouter starts the SNI router for cp on loopback and returns its port and CA file.
func dbRouter(t *testing.T, cp *e2eCP) (int, string) {
	t.Helper()
	tlsCfg, caPath, err := dbrouter.LoadOrCreateTLS(t.TempDir(), "db.localhost")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	r := dbrouter.New(dbrouter.Config{TLS: tlsCfg, Domain: cp.srv.Databases().Domain(), Dial: cp.srv.Databases().DialID,
		Active: cp.srv.Databases().Active, Logger: quietLogger()})
	go r.Serve(ln)
	port := ln.Addr().(*net.TCPAddr).Port
	cp.srv.Databases().SetRouterPort(port)
	return port, caPath
}

// pgConnect connects with pgx to the router on loopback; the host name stays the TLS name.
func pgConnect(ctx context.Context, connStr string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(connStr)
	if err != nil {
		return nil, err
	}
	cfg.LookupFunc = func(context.Context, string) ([]string, error) { return []string{"127.0.0.1"}, nil }
	return pgx.ConnectConfig(ctx, cfg)
}

// nodeDBClients returns a directory holding the node clients' script (testdata/dbclients.mjs)
// beside node-postgres and @neondatabase/serverless from npm (installed once into the image cache).
func nodeDBClients(t *testing.T) string {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatal("the node clients' check needs node and npm (apt-get install nodejs npm)")
	}
	mods := filepath.Join(testenv.ImageCache(), "npm-dbclients-pg-8.23.1-neon-1.2.0")
	if _, err := os.Stat(filepath.Join(mods, "node_modules", "@neondatabase", "serverless", "package.json")); err != nil {
		tmp, err := os.MkdirTemp(testenv.ImageCache(), "npm-dbclients-tmp-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		os.WriteFile(filepath.Join(tmp, "package.json"), []byte(`{"private": true}`), 0o644)
		cmd := exec.Command(npm, "install", "--no-audit", "--no-fund", "pg@8.23.1", "@neondatabase/serverless@1.2.0")
		cmd.Dir = tmp
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm install: %v\n%s", err, out)
		}
		if err := os.Rename(tmp, mods); err != nil && !errors.Is(err, os.ErrExist) {
			if _, serr := os.Stat(mods); serr != nil {
				t.Fatal(err)
			}
		}
	}
	dir := t.TempDir()
	script, err := os.ReadFile("testdata/dbclients.mjs")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "dbclients.mjs"), script, 0o644)
	if err := os.Symlink(filepath.Join(mods, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func TestE2EDatabases(t *testing.T) {
	testenv.NeedVMs(t)
	nettest.NeedRoot(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	// The database's port is reached through the host's port path: the sandboxes need their network.
	prefix := nettest.NewPrefix()
	out := nettest.NewOutside(t, prefix)
	slots := nettest.FreeCIDR(t, 22)
	// Every database holds a copy of the template's 3 GiB data volume; seven of them promised in
	// full would not fit a test pool on a shared disk (docs/volumes.md, --volume-overcommit).
	const overcommit = 4
	host := startVMHostWith(t, func(c *hostagent.Config) {
		c.Network = &network.Config{CIDR: slots, Prefix: prefix, Ready: 2, DNS: out.Addr}
		c.BlobStore = "file://" + t.TempDir() // backups leave the host
		c.VolumeOvercommit = overcommit
	})
	host.bake(ctx, "postgres-17")
	// The control plane's store (archived WAL and base backups) is the hosts' (server --blob-store:
	// registering hosts are told it), where published backups are too.
	archive, err := blob.Open(ctx, host.cfg.BlobStore)
	if err != nil {
		t.Fatal(err)
	}
	cp := startCP(t, filepath.Join(t.TempDir(), "state.db"), scheduler.Config{}, Config{ProxyDomain: "localhost", PublicURL: "http://localhost:8080", Blob: archive}, host)
	port, caPath := dbRouter(t, cp)

	// Bad input is a clear 400; the alias 16 is taken with a note.
	for _, body := range []string{`{"name":"Bad Name"}`, `{"name":"x","version":"15"}`, `{"name":"x","extensions":["nope"]}`,
		`{"name":"x","memory_mib":999999}`, `{"name":"postgres"}`, `{"name":"x","suspend_after_seconds":-1}`} {
		if code, b := cp.call(t, "POST", "/v1/databases", []byte(body), "application/json"); code != 400 {
			t.Fatalf("%s: %d %s", body, code, b)
		}
	}
	start := time.Now()
	code, b := cp.call(t, "POST", "/v1/databases", []byte(`{"name":"shop-db","version":"16","extensions":["vector","pg_trgm"]}`), "application/json")
	var db dbAnswer
	if json.Unmarshal(b, &db); code != 201 || db.Password == "" || db.Version != "17" || !strings.Contains(db.Note, "alias") || db.State != "ready" {
		t.Fatalf("create: %d %s", code, b)
	}
	t.Logf("database created in %s", time.Since(start))
	// Its cluster is on its own volume, owned by the database.
	vol := cp.dbVolume(t, ctx, db.SandboxID)
	cp.plainPostgresSandbox(t, ctx, host)
	// A base backup at creation (in the background), published to the blob store.
	cp.srv.Databases().Wait()
	first := cp.backupsOf(t, db.ID)
	if len(first.Backups) != 1 || !first.Backups[0].Published {
		t.Fatalf("backups after the create: %+v", first)
	}
	// Its base backup (for restores to an instant, below) was streamed out of the VM in pieces:
	// none is left on the volume.
	if r, err := cp.client(cp.admin).Exec(ctx, db.SandboxID, client.ExecRequest{User: "root", TimeoutSeconds: client.Seconds(60),
		Cmd: `find /var/lib/postgresql/pitr/base -mindepth 1 | wc -l`}); err != nil || r.ExitCode != 0 || strings.TrimSpace(r.Stdout) != "0" {
		t.Fatalf("left of the base backup on the volume: %+v %v", r, err)
	}
	wantURI := "postgres://shop_db_owner:" + db.Password + "@" + db.ID + ".db.localhost:" + strconv.Itoa(port) + "/shop_db?sslmode=require"
	if db.Connection.URI != wantURI || db.Connection.HTTPURL != "http://"+db.ID+".db.localhost:8080/sql" {
		t.Fatalf("connection %+v, want uri %s", db.Connection, wantURI)
	}
	// The password is shown once.
	if code, b := cp.call(t, "GET", "/v1/databases/"+db.ID, nil, ""); code != 200 || strings.Contains(string(b), db.Password) {
		t.Fatalf("get: %d %s", code, b)
	}
	if code, b := cp.call(t, "GET", "/v1/databases", nil, ""); code != 200 || !strings.Contains(string(b), db.ID) || strings.Contains(string(b), db.Password) {
		t.Fatalf("list: %d %s", code, b)
	}

	// pgx through the router: sslmode=require (SSLRequest), verify-full with the CA, direct TLS.
	for _, extra := range []string{"", "&sslmode=verify-full&sslrootcert=" + caPath, "&sslnegotiation=direct&sslmode=verify-full&sslrootcert=" + caPath} {
		uri := strings.Replace(wantURI, "?sslmode=require", "?sslmode=require"+extra, 1)
		if extra != "" {
			uri = strings.Replace(wantURI, "?sslmode=require", "?"+strings.TrimPrefix(extra, "&"), 1)
		}
		c, err := pgConnect(ctx, uri)
		if err != nil {
			t.Fatalf("pgx %s: %v", extra, err)
		}
		var who, dbName, vec string
		if err := c.QueryRow(ctx, "select current_user, current_database(), '[1,2]'::vector::text").Scan(&who, &dbName, &vec); err != nil ||
			who != "shop_db_owner" || dbName != "shop_db" || vec != "[1,2]" {
			t.Fatalf("pgx %s: %v %s %s %s", extra, err, who, dbName, vec)
		}
		c.Close(ctx)
	}
	c, err := pgConnect(ctx, wantURI)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)

	// The pooler (<id>-pooler: PgBouncer, transaction mode, in the VM) with the same credentials;
	// its server connections come from the VM's loopback, direct ones do not.
	if db.Connection.PoolerURI != strings.Replace(wantURI, db.ID+".db.", db.ID+"-pooler.db.", 1) {
		t.Fatalf("pooler_uri %s", db.Connection.PoolerURI)
	}
	pc, err := pgConnect(ctx, db.Connection.PoolerURI)
	if err != nil {
		t.Fatalf("pooler: %v", err)
	}
	var viaPool, viaDirect string
	var n int
	if err := pc.QueryRow(ctx, "select host(inet_client_addr()), $1::int + 1", 41).Scan(&viaPool, &n); err != nil || viaPool != "127.0.0.1" || n != 42 {
		t.Fatalf("pooler: %v %q %d", err, viaPool, n)
	}
	pc.Close(ctx)
	if err := c.QueryRow(ctx, "select host(inet_client_addr())").Scan(&viaDirect); err != nil || viaDirect == "127.0.0.1" {
		t.Fatalf("direct: %v %q", err, viaDirect)
	}
	if _, err := c.Exec(ctx, "create table items (id int primary key, name text); insert into items values (1, 'apple'), (2, null)"); err != nil {
		t.Fatal(err)
	}

	// psql (libpq) with verify-full: the host name is the SNI, hostaddr the router.
	if psql, err := exec.LookPath("psql"); err == nil {
		cmd := exec.CommandContext(ctx, psql, "-X", "-At", "-c", "select name from items where id = 1",
			"host="+db.ID+".db.localhost hostaddr=127.0.0.1 port="+strconv.Itoa(port)+" user=shop_db_owner dbname=shop_db sslmode=verify-full sslrootcert="+caPath)
		cmd.Env = append(os.Environ(), "PGPASSWORD="+db.Password)
		if got, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(got)) != "apple" {
			t.Fatalf("psql: %v %s", err, got)
		}
		// Without SNI (an address as host): options=endpoint=<id>.
		cmd = exec.CommandContext(ctx, psql, "-X", "-At", "-c", "select count(*) from items",
			"host=127.0.0.1 port="+strconv.Itoa(port)+" user=shop_db_owner dbname=shop_db sslmode=require options=endpoint="+db.ID)
		cmd.Env = append(os.Environ(), "PGPASSWORD="+db.Password)
		if got, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(got)) != "2" {
			t.Fatalf("psql with endpoint option: %v %s", err, got)
		}
	} else {
		t.Log("no psql on this machine: libpq not tried")
	}

	// Refusals are PostgreSQL errors, not hangs.
	if _, err := pgConnect(ctx, strings.Replace(wantURI, db.Password, "wrong", 1)); sqlState(err) != "28P01" {
		t.Fatalf("wrong password: %v", err)
	}
	if _, err := pgConnect(ctx, strings.Replace(wantURI, db.ID, "db_nosuchdatabase0000", 1)); sqlState(err) != "08004" || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("unknown id: %v", err)
	}
	if _, err := pgConnect(ctx, strings.Replace(wantURI, db.ID+".db.localhost", "elsewhere.localhost", 1)); sqlState(err) != "08004" {
		t.Fatalf("malformed name: %v", err)
	}
	if _, err := pgConnect(ctx, strings.Replace(wantURI, "sslmode=require", "sslmode=disable", 1)); sqlState(err) != "28000" || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("plaintext: %v", err)
	}

	// A cancel request (plaintext, on a new connection) reaches the right database.
	sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = c.Exec(sctx, "select pg_sleep(600)")
	scancel()
	if err == nil {
		t.Fatal("pg_sleep(600) returned")
	}
	c2, err := pgConnect(ctx, wantURI)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close(ctx)
	waitFor(t, 2*time.Minute, "the cancelled sleep to end", func() bool {
		var n int
		return c2.QueryRow(ctx, "select count(*) from pg_stat_activity where query = 'select pg_sleep(600)' and state = 'active'").Scan(&n) == nil && n == 0
	})

	// The broker with the API key: text values, nulls, params, SQLSTATE on errors, size caps.
	code, b = cp.call(t, "POST", "/v1/databases/"+db.ID+"/query", []byte(`{"query":"select id, name, $1::int + 1 as n from items order by id","params":[41]}`), "application/json")
	if code != 200 || !strings.Contains(string(b), `"rows":[["1","apple","42"],["2",null,"42"]]`) || !strings.Contains(string(b), `"command":"SELECT","rowCount":2`) {
		t.Fatalf("query: %d %s", code, b)
	}
	code, b = cp.call(t, "POST", "/v1/databases/"+db.ID+"/query", []byte(`{"query":"select * from nope"}`), "application/json")
	if code != 400 || !strings.Contains(string(b), `"sqlstate":"42P01"`) {
		t.Fatalf("bad query: %d %s", code, b)
	}
	big, _ := json.Marshal(map[string]any{"query": "select $1::text", "params": []string{strings.Repeat("x", 11<<20)}})
	if code, b := cp.call(t, "POST", "/v1/databases/"+db.ID+"/query", big, "application/json"); code != 413 {
		t.Fatalf("oversized body: %d %s", code, b)
	}
	code, b = cp.call(t, "POST", "/v1/databases/"+db.ID+"/query", []byte(`{"query":"select repeat('x', 1048576) from generate_series(1, 12)"}`), "application/json")
	if code != 413 {
		t.Fatalf("oversized result: %d %.300s", code, b)
	}

	// Neon's /sql format at <id>.db.<domain>, the connection string as the credential.
	neon := func(conn string, body string, hdr map[string]string) (int, string) {
		req, _ := http.NewRequest("POST", cp.hs.URL+"/sql", bytes.NewReader([]byte(body)))
		req.Host = db.ID + ".db.localhost:8080"
		req.Header.Set("Neon-Connection-String", conn)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var buf bytes.Buffer
		buf.ReadFrom(res.Body)
		return res.StatusCode, buf.String()
	}
	if code, got := neon(wantURI, `{"query":"select name from items where id = $1","params":[1]}`, map[string]string{"Neon-Array-Mode": "true"}); code != 200 || !strings.Contains(got, `"rows":[["apple"]]`) {
		t.Fatalf("/sql: %d %s", code, got)
	}
	if code, got := neon(wantURI, `{"query":"select name from items where id = 1"}`, nil); code != 200 || !strings.Contains(got, `"rows":[{"name":"apple"}]`) {
		t.Fatalf("/sql objects: %d %s", code, got)
	}
	if code, got := neon(wantURI, `{"queries":[{"query":"insert into items values (3, 'pear')"},{"query":"select count(*) from items"}]}`, map[string]string{"Neon-Array-Mode": "true"}); code != 200 || !strings.Contains(got, `"rows":[["3"]]`) {
		t.Fatalf("/sql batch: %d %s", code, got)
	}
	if code, got := neon(strings.Replace(wantURI, db.Password, "wrong", 1), `{"query":"select 1"}`, nil); code != 401 {
		t.Fatalf("/sql wrong password: %d %s", code, got)
	}

	// node-postgres through the router (TLS verified), @neondatabase/serverless over /sql.
	nodeDir := nodeDBClients(t)
	cmd := exec.CommandContext(ctx, "node", filepath.Join(nodeDir, "dbclients.mjs"), wantURI, caPath, strconv.Itoa(port), cp.hs.URL)
	nout, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		errors.As(err, &ee)
		t.Fatalf("node clients: %v %s", err, ee.Stderr)
	}
	var nres struct {
		PG struct {
			N   int
			Who string
		}
		Neon []struct {
			Who string
			N   int
		}
		NeonTx    [][]map[string]any
		NeonError struct{ Code, Message string }
	}
	if err := json.Unmarshal(nout, &nres); err != nil || nres.PG.N != 42 || nres.PG.Who != "shop_db_owner" || len(nres.Neon) != 1 ||
		nres.Neon[0].Who != "neon" || nres.Neon[0].N != 42 || len(nres.NeonTx) != 2 || nres.NeonTx[1][0]["items"] != float64(3) ||
		nres.NeonError.Code != "42P01" {
		t.Fatalf("node clients: %v %s", err, nout)
	}

	// Another team sees none of it.
	code, b = cp.call(t, "POST", "/v1/teams", []byte(`{"name":"other"}`), "application/json")
	var tm struct{ Key struct{ Key string } }
	if json.Unmarshal(b, &tm); code != 201 || tm.Key.Key == "" {
		t.Fatalf("team: %d %s", code, b)
	}
	other := &e2eCP{hs: cp.hs, admin: tm.Key.Key}
	for _, m := range []struct{ method, path, body string }{{"GET", "/v1/databases/" + db.ID, ""}, {"DELETE", "/v1/databases/" + db.ID, ""},
		{"POST", "/v1/databases/" + db.ID + "/query", `{"query":"select 1"}`}} {
		if code, b := other.call(t, m.method, m.path, []byte(m.body), "application/json"); code != 404 {
			t.Fatalf("other team %s %s: %d %s", m.method, m.path, code, b)
		}
	}
	if code, b := other.call(t, "GET", "/v1/databases", nil, ""); code != 200 || strings.Contains(string(b), db.ID) {
		t.Fatalf("other team list: %d %s", code, b)
	}

	// A branch is a copy-on-write fork with the parent's credentials: writes stay on their side.
	code, b = cp.call(t, "POST", "/v1/databases/"+db.ID+"/branches", []byte(`{"name":"shop-dev"}`), "application/json")
	var br dbAnswer
	if json.Unmarshal(b, &br); code != 201 || br.Password != "" || br.ID == db.ID {
		t.Fatalf("branch: %d %s", code, b)
	}
	bc, err := pgConnect(ctx, strings.Replace(wantURI, db.ID, br.ID, 1))
	if err != nil {
		t.Fatalf("connect to the branch with the parent's password: %v", err)
	}
	if _, err := bc.Exec(ctx, "insert into items values (100, 'branch only')"); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Exec(ctx, "insert into items values (200, 'parent only')"); err != nil {
		t.Fatal(err)
	}
	var inBranch, inParent string
	bc.QueryRow(ctx, "select string_agg(id::text, ',' order by id) from items").Scan(&inBranch)
	c2.QueryRow(ctx, "select string_agg(id::text, ',' order by id) from items").Scan(&inParent)
	if inBranch != "1,2,3,100" || inParent != "1,2,3,200" {
		t.Fatalf("branch isolation: branch %s, parent %s", inBranch, inParent)
	}
	bc.Close(ctx)
	if bv := cp.dbVolume(t, ctx, br.SandboxID); bv.ID == vol.ID {
		t.Fatalf("the branch shares its parent's volume %s", vol.ID)
	}

	// Password rotation: the new one works, the old one no longer.
	code, b = cp.call(t, "POST", "/v1/databases/"+br.ID+"/password", nil, "")
	var rot dbAnswer
	if json.Unmarshal(b, &rot); code != 200 || rot.Password == "" || !strings.Contains(rot.Connection.URI, rot.Password) {
		t.Fatalf("rotate: %d %s", code, b)
	}
	if _, err := pgConnect(ctx, strings.Replace(wantURI, db.ID, br.ID, 1)); sqlState(err) != "28P01" {
		t.Fatalf("old password after rotation: %v", err)
	}
	if bc, err = pgConnect(ctx, rot.Connection.URI); err != nil {
		t.Fatalf("new password: %v", err)
	}
	bc.Close(ctx)
	if code, b := cp.call(t, "POST", "/v1/databases/"+br.ID+"/query", []byte(`{"query":"select count(*) from items"}`), "application/json"); code != 200 || !strings.Contains(string(b), `[["4"]]`) {
		t.Fatalf("broker after rotation: %d %s", code, b)
	}

	// Backups are snapshots of the VM; a restore is a new database as of the chosen backup.
	if _, err := c2.Exec(ctx, "insert into items values (300, 'before the backup')"); err != nil {
		t.Fatal(err)
	}
	code, b = cp.call(t, "POST", "/v1/databases/"+db.ID+"/backups", nil, "")
	var bk struct{ ID string }
	if json.Unmarshal(b, &bk); code != 201 || bk.ID == "" {
		t.Fatalf("backup: %d %s", code, b)
	}
	if _, err := c2.Exec(ctx, "insert into items values (400, 'after the backup')"); err != nil {
		t.Fatal(err)
	}
	if code, b := cp.call(t, "GET", "/v1/databases/"+db.ID+"/backups", nil, ""); code != 200 || !strings.Contains(string(b), bk.ID) {
		t.Fatalf("backups: %d %s", code, b)
	}
	if code, b := cp.call(t, "POST", "/v1/databases/"+db.ID+"/restore", []byte(`{"name":"too-early","to_time":"2001-01-01T00:00:00Z"}`), "application/json"); code != 400 {
		t.Fatalf("restore before any backup: %d %s", code, b)
	}
	rs := cp.restoreDB(t, db.ID, `{"name":"shop-restored"}`, "restore")
	if rs.ID == db.ID {
		t.Fatalf("restore answered the source database: %+v", rs)
	}
	rc, err := pgConnect(ctx, strings.Replace(wantURI, db.ID, rs.ID, 1))
	if err != nil {
		t.Fatalf("connect to the restored database: %v", err)
	}
	var restored string
	rc.QueryRow(ctx, "select string_agg(id::text, ',' order by id) from items").Scan(&restored)
	rc.Close(ctx)
	if restored != "1,2,3,200,300" {
		t.Fatalf("restored database has %s, want the rows of the backup's instant", restored)
	}
	if rv := cp.dbVolume(t, ctx, rs.SandboxID); rv.ID == vol.ID {
		t.Fatalf("the restored database shares its source's volume %s", vol.ID)
	}
	// A published backup restores when its host no longer has it (as on another host): the
	// host pulls it from the blob store. The creation backup predates the table.
	dirs, _ := filepath.Glob(filepath.Join(host.dir, "snapshots", first.Backups[0].ID))
	more, _ := filepath.Glob(filepath.Join(host.dir, "*", "snapshots", first.Backups[0].ID))
	dirs = append(dirs, more...)
	if len(dirs) != 1 {
		t.Fatalf("the creation backup's directory on the host: %v", dirs)
	}
	if err := os.RemoveAll(dirs[0]); err != nil {
		t.Fatal(err)
	}
	birth := cp.restoreDB(t, db.ID, `{"name":"shop-at-birth","backup_id":"`+first.Backups[0].ID+`"}`, "restore of a backup its host lost")
	if code, got := cp.call(t, "POST", "/v1/databases/"+birth.ID+"/query", []byte(`{"query":"select to_regclass('items') is null"}`), "application/json"); code != 200 || !strings.Contains(string(got), `[["t"]]`) {
		t.Fatalf("the database restored from its creation backup: %d %s", code, got)
	}
	// Point-in-time restore: WAL is archived (drained into the blob store) and a restore to an
	// instant between two commits replays a base backup up to it, into a NEW database.
	if _, err := c2.Exec(ctx, "create table pitr_rows as select generate_series(1, 5) as id"); err != nil {
		t.Fatal(err)
	}
	var instant time.Time // the database's own clock, after the create's commit
	if err := c2.QueryRow(ctx, "select clock_timestamp()").Scan(&instant); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Exec(ctx, "drop table pitr_rows"); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.srv.Databases().DrainWAL(ctx); err != nil {
		t.Fatalf("draining the archived WAL: %v", err)
	}
	// Segments are stored gzipped; this restore reads them as archived before compression came
	// (plain), the next one gzipped.
	var gz []string
	archive.List(ctx, "databases/"+db.ID+"/wal/", func(in blob.Info) error {
		if strings.HasSuffix(in.Key, ".gz") {
			gz = append(gz, in.Key)
		}
		return nil
	})
	if len(gz) == 0 {
		t.Fatal("no gzipped WAL segment in the archive")
	}
	for _, k := range gz {
		r, err := archive.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		plain, err := io.ReadAll(zr)
		r.Close()
		if err == nil {
			err = archive.Put(ctx, strings.TrimSuffix(k, ".gz"), bytes.NewReader(plain))
		}
		if err == nil {
			err = archive.Delete(ctx, k)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	start = time.Now()
	pitr := cp.restoreDB(t, db.ID, `{"name":"shop-pitr","to_time":"`+instant.UTC().Format(time.RFC3339Nano)+`"}`, "restore to an instant")
	t.Logf("restored to an instant in %s", time.Since(start))
	cp.dbVolume(t, ctx, pitr.SandboxID)
	pc2, err := pgConnect(ctx, strings.Replace(wantURI, db.ID, pitr.ID, 1))
	if err != nil {
		t.Fatalf("connect to the database restored to an instant: %v", err)
	}
	var rows int
	var inRecovery bool
	if err := pc2.QueryRow(ctx, "select (select count(*) from pitr_rows), pg_is_in_recovery()").Scan(&rows, &inRecovery); err != nil || rows != 5 || inRecovery {
		t.Fatalf("the database restored to %s: %d rows, in recovery %v (%v), want 5 and promoted", instant, rows, inRecovery, err)
	}
	var gone bool
	if err := c2.QueryRow(ctx, "select to_regclass('pitr_rows') is null").Scan(&gone); err != nil || !gone {
		t.Fatalf("the old database changed: table there %v (%v)", !gone, err)
	}
	// The restored database archives its own WAL from its base backup (taken at its birth) on. Its
	// VM lost (as with its host), a restore gets what was drained: a row whose segment the archiver
	// copied and the server drained is there.
	cp.srv.Databases().Wait()
	var seg, archived string
	if _, err := pc2.Exec(ctx, "insert into pitr_rows values (6)"); err != nil {
		t.Fatalf("the restored database takes writes: %v", err)
	}
	if err := pc2.QueryRow(ctx, "select clock_timestamp(), pg_walfile_name(pg_switch_wal())").Scan(&instant, &seg); err != nil {
		t.Fatal(err)
	}
	for archived < seg {
		if err := pc2.QueryRow(ctx, "select coalesce(last_archived_wal, '') from pg_stat_archiver").Scan(&archived); err != nil {
			t.Fatalf("waiting for the archiver to copy %s: %v", seg, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	pc2.Close(ctx)
	if _, err := cp.srv.Databases().DrainWAL(ctx); err != nil {
		t.Fatal(err)
	}
	if err := host.client().KillSandbox(ctx, pitr.SandboxID); err != nil {
		t.Fatal(err)
	}
	lost := cp.restoreDB(t, pitr.ID, `{"name":"shop-lost","to_time":"`+instant.UTC().Format(time.RFC3339Nano)+`"}`, "restore of a database whose VM is gone")
	if code, got := cp.call(t, "POST", "/v1/databases/"+lost.ID+"/query", []byte(`{"query":"select string_agg(id::text, ',' order by id) from pitr_rows"}`), "application/json"); code != 200 || !strings.Contains(string(got), `[["1,2,3,4,5,6"]]`) {
		t.Fatalf("the database restored from the archive of a lost VM: %d %s", code, got)
	}
	// The daily backups: every database (the branch and the restored ones too) had its base
	// backup when it was made, so a pass takes none.
	cp.srv.Databases().Wait()
	for pass, want := range []int{0} {
		if n, err := cp.srv.Databases().BackupDue(ctx); err != nil || n != want {
			t.Fatalf("scheduled backups pass %d: took %d (%v), want %d", pass+1, n, err, want)
		}
	}

	// Every extension offered: CREATE EXTENSION and one call (pg_cron lives in database postgres).
	q := func(id, sql string) string {
		body, _ := json.Marshal(map[string]any{"query": sql})
		code, b := cp.call(t, "POST", "/v1/databases/"+id+"/query", body, "application/json")
		if code != 200 {
			t.Fatalf("%s: %d %s", sql, code, b)
		}
		var r struct{ Rows [][]*string }
		json.Unmarshal(b, &r)
		if len(r.Rows) == 0 || len(r.Rows[0]) == 0 || r.Rows[0][0] == nil {
			return ""
		}
		return *r.Rows[0][0]
	}
	for _, c := range []struct{ ext, call, want string }{
		{"vector", "select '[1,2]'::vector <-> '[4,6]'", "5"},
		{"pg_trgm", "select similarity('abc', 'abc')", "1"},
		{"pgcrypto", "select encode(digest('x', 'sha256'), 'hex')", "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"},
		{"uuid-ossp", "select length(uuid_generate_v4()::text)", "36"},
		{"citext", "select 'A'::citext = 'a'", "t"},
		{"hstore", "select 'a=>1'::hstore -> 'a'", "1"},
		{"pg_stat_statements", "select count(*) > 0 from pg_stat_statements", "t"},
		{"hypopg", "select count(*) from hypopg_create_index('create index on items (name)')", "1"},
		{"pg_repack", "select repack.version() like 'pg_repack %'", "t"},
		{"pgaudit", "select current_setting('pgaudit.log')", "none"},
		{"pg_partman", "select count(*) from part_config", "0"},
	} {
		q(db.ID, `create extension if not exists "`+c.ext+`" cascade`)
		if got := q(db.ID, c.call); got != c.want {
			t.Errorf("%s: %s = %q, want %q", c.ext, c.call, got, c.want)
		}
	}
	cronConn, err := pgConnect(ctx, strings.Replace(wantURI, "/shop_db?", "/postgres?", 1))
	if err != nil {
		t.Fatal(err)
	}
	var job int64
	if _, err := cronConn.Exec(ctx, "create extension if not exists pg_cron"); err != nil {
		t.Fatal(err)
	}
	if err := cronConn.QueryRow(ctx, "select cron.schedule_in_database('tick', '* * * * *', 'select 1', 'shop_db')").Scan(&job); err != nil || job < 1 {
		t.Fatalf("pg_cron: %v %d", err, job)
	}
	cronConn.Close(ctx)

	// Stats and logs.
	if st, err := cp.client(cp.admin).DatabaseStats(ctx, db.ID); err != nil || st.SizeBytes < 1<<20 || st.Connections < 1 || st.TransactionsCommitted < 1 {
		t.Fatalf("stats: %v %+v", err, st)
	}
	if code, b := cp.call(t, "GET", "/v1/databases/"+db.ID+"/logs?bytes=100000", nil, ""); code != 200 || !strings.Contains(string(b), "no_such_table") {
		t.Fatalf("logs: %d %.2000s", code, b)
	}
	if code, _ := cp.call(t, "GET", "/v1/databases/"+db.ID+"/logs?bytes=0", nil, ""); code != 400 {
		t.Fatalf("logs?bytes=0: %d", code)
	}

	// The Go client's broker call.
	if res, err := cp.client(cp.admin).QueryDatabase(ctx, db.ID, "select $1::int * 2 as n", 21); err != nil || len(res.Rows) != 1 ||
		res.Rows[0].([]any)[0] != "42" {
		t.Fatalf("client query: %v %+v", err, res)
	}

	// Scale to zero: an idle database is suspended (its VM hibernated); a connection wakes it
	// with its data.
	code, b = cp.call(t, "POST", "/v1/databases", []byte(`{"name":"idle","suspend_after_seconds":1}`), "application/json")
	var idle dbAnswer
	if json.Unmarshal(b, &idle); code != 201 {
		t.Fatalf("create idle: %d %s", code, b)
	}
	ic, err := pgConnect(ctx, idle.Connection.URI)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ic.Exec(ctx, "create table kept (v text); insert into kept values ('before the nap')"); err != nil {
		t.Fatal(err)
	}
	ic.Close(ctx)
	idleVol := cp.dbVolume(t, ctx, idle.SandboxID)
	dbState := func(id string) string {
		_, b := cp.call(t, "GET", "/v1/databases/"+id, nil, "")
		var d dbAnswer
		json.Unmarshal(b, &d)
		return d.State
	}
	waitFor(t, 5*time.Minute, "the idle database to be suspended", func() bool {
		if _, err := cp.srv.Databases().SuspendIdle(ctx); err != nil {
			t.Fatal(err)
		}
		return dbState(idle.ID) == "suspended"
	})
	if dbState(db.ID) != "ready" {
		t.Fatal("a database that never idles (suspend_after_seconds 300, in use) was suspended")
	}
	wake := time.Now()
	ic, err = pgConnect(ctx, idle.Connection.URI)
	if err != nil {
		t.Fatalf("connect to a suspended database: %v", err)
	}
	var kept string
	if err := ic.QueryRow(ctx, "select v from kept").Scan(&kept); err != nil || kept != "before the nap" {
		t.Fatalf("after the wake: %v %q", err, kept)
	}
	t.Logf("a suspended database answered a new connection in %s", time.Since(wake))
	ic.Close(ctx)
	if st := dbState(idle.ID); st != "ready" {
		t.Fatalf("woken database is %s", st)
	}
	if v := cp.dbVolume(t, ctx, idle.SandboxID); v.ID != idleVol.ID {
		t.Fatalf("the woken database has volume %s, not its own %s", v.ID, idleVol.ID)
	}

	// Backups outlive their host: with host A's agent down, the backup taken there (published)
	// restores into a new database on host B, which shares A's blob store and has neither the
	// backup nor the postgres template. The server (restarted, polling B only) has not marked A
	// down (a long heartbeat timeout), so placement may still offer A, where the backup was
	// taken, first (when it has room): it does not answer and B takes the restore.
	c.Close(ctx)
	c2.Close(ctx)
	listed := cp.backupsOf(t, db.ID)
	published := false
	for _, x := range listed.Backups {
		published = published || x.ID == bk.ID && x.Published
	}
	if !published {
		t.Fatalf("backup %s is not published: %+v", bk.ID, listed)
	}
	cp.srv.Databases().Wait()
	admin := cp.admin
	cp.stop()
	host.stop()
	hostB := startVMHostWith(t, func(c *hostagent.Config) {
		c.Network = &network.Config{CIDR: nettest.FreeCIDR(t, 22), Prefix: nettest.NewPrefix(), Ready: 1, DNS: out.Addr}
		c.BlobStore = host.cfg.BlobStore
		c.VolumeOvercommit = overcommit
	})
	cp = startCP(t, cp.dbPath, scheduler.Config{HeartbeatTimeout: time.Hour}, Config{ProxyDomain: "localhost", Blob: archive}, hostB)
	cp.admin = admin
	port, _ = dbRouter(t, cp)
	start = time.Now()
	moved := cp.restoreDB(t, db.ID, `{"name":"shop-elsewhere","backup_id":"`+bk.ID+`"}`, "restore of a backup whose host is down")
	t.Logf("restored a backup of a host that is down on another host in %s", time.Since(start))
	if !hostB.running()[moved.SandboxID] {
		t.Fatalf("the restored database's VM %s is not running on host B", moved.SandboxID)
	}
	mc, err := pgConnect(ctx, "postgres://shop_db_owner:"+db.Password+"@"+moved.ID+".db.localhost:"+strconv.Itoa(port)+"/shop_db?sslmode=require")
	if err != nil {
		t.Fatalf("connect to the database restored on host B: %v", err)
	}
	if err := mc.QueryRow(ctx, "select string_agg(id::text, ',' order by id) from items").Scan(&restored); err != nil || restored != "1,2,3,200,300" {
		t.Fatalf("the database restored on host B has %q (%v), want the rows of the backup's instant", restored, err)
	}
	mc.Close(ctx)
	if mv := cp.dbVolume(t, ctx, moved.SandboxID); mv.HostID == vol.HostID {
		t.Fatalf("the database restored on host B has its volume on host %s, its source's", mv.HostID)
	}
	cp.srv.Databases().Wait() // its own first backup, taken on B

	// A restart of the server (a new control plane on the same store, a new router) and of the
	// host agent (a new agent on the same data dir adopts the running VM) loses no committed row.
	cp.stop()
	host.start()
	cp = startCP(t, cp.dbPath, scheduler.Config{}, Config{ProxyDomain: "localhost", Blob: archive}, host, hostB)
	cp.admin = admin
	port, _ = dbRouter(t, cp)
	wantURI = "postgres://shop_db_owner:" + db.Password + "@" + db.ID + ".db.localhost:" + strconv.Itoa(port) + "/shop_db?sslmode=require"
	c, err = pgConnect(ctx, wantURI)
	if err != nil {
		t.Fatalf("after a server and agent restart: %v", err)
	}
	var ids string
	if err := c.QueryRow(ctx, "select string_agg(id::text, ',' order by id) from items").Scan(&ids); err != nil || ids != "1,2,3,200,300,400" {
		t.Fatalf("after a server and agent restart: %v %q", err, ids)
	}
	c.Close(ctx)

	// Delete: gone, and its VM with it.
	if code, b := cp.call(t, "DELETE", "/v1/databases/"+db.ID, nil, ""); code != 204 {
		t.Fatalf("delete: %d %s", code, b)
	}
	if code, _ := cp.call(t, "GET", "/v1/databases/"+db.ID, nil, ""); code != 404 {
		t.Fatalf("get after delete: %d", code)
	}
	if _, err := pgConnect(ctx, wantURI); sqlState(err) != "08004" {
		t.Fatalf("connect after delete: %v", err)
	}
	// Its volume (its data) went with it, on its host too.
	if v, err := cp.st.GetVolume(ctx, vol.ID); err != nil || !v.Deleted {
		t.Fatalf("the deleted database's volume: %+v %v", v, err)
	}
	var ae *agentclient.Error
	if _, err := host.client().GetVolume(ctx, vol.ID); !errors.As(err, &ae) || ae.Status != 404 {
		t.Fatalf("the deleted database's volume on its host: %v", err)
	}
}

// plainPostgresSandbox checks that a plain sandbox of postgres-17 (not a database) gets a copy of
// the template's data volume that is its own (the template's volume is ephemeral): running
// postgres on it, not the team's to list, and deleted with the sandbox, on its host too.
func (cp *e2eCP) plainPostgresSandbox(t *testing.T, ctx context.Context, host *vmHost) {
	t.Helper()
	c := cp.client(cp.admin)
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{Template: "postgres-17", TTLSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	atts, err := cp.st.SandboxVolumes(ctx, sb.ID)
	if err != nil || len(atts) != 1 || atts[0].MountPath != "/var/lib/postgresql" {
		t.Fatalf("the volumes of a plain postgres-17 sandbox: %+v %v", atts, err)
	}
	v, err := cp.st.GetVolume(ctx, atts[0].VolumeID)
	if err != nil || v.Owner != store.OwnerSandbox || v.Deleted {
		t.Fatalf("the volume of a plain postgres-17 sandbox: %+v %v", v, err)
	}
	if code, b := cp.call(t, "GET", "/v1/volumes", nil, ""); code != 200 || strings.Contains(string(b), v.ID) {
		t.Fatalf("the team's volumes list a sandbox's own: %d %s", code, b)
	}
	r, err := c.Exec(ctx, sb.ID, client.ExecRequest{TimeoutSeconds: client.Seconds(60), Cmd: `psql -Atc 'select 40 + 2'`})
	if err != nil || r.ExitCode != 0 || strings.TrimSpace(r.Stdout) != "42" {
		t.Fatalf("psql in a plain postgres-17 sandbox: %+v %v", r, err)
	}
	if _, err := host.client().GetVolume(ctx, v.ID); err != nil {
		t.Fatalf("the sandbox's volume on its host: %v", err)
	}
	if err := c.KillSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := cp.st.GetVolume(ctx, v.ID); err != nil || !got.Deleted {
		t.Fatalf("the killed sandbox's volume: %+v %v", got, err)
	}
	var ae *agentclient.Error
	if _, err := host.client().GetVolume(ctx, v.ID); !errors.As(err, &ae) || ae.Status != 404 {
		t.Fatalf("the killed sandbox's volume on its host: %v", err)
	}
}

// dbVolume checks that a database's VM (sandboxID) has its cluster and WAL spool on a volume of
// its own — recorded, owned by the database, out of the team's volumes, mounted at
// /var/lib/postgresql — and returns that volume.
func (cp *e2eCP) dbVolume(t *testing.T, ctx context.Context, sandboxID string) store.Volume {
	t.Helper()
	cp.srv.Databases().Wait() // its first base backup made the WAL spool
	atts, err := cp.st.SandboxVolumes(ctx, sandboxID)
	if err != nil || len(atts) != 1 || atts[0].MountPath != "/var/lib/postgresql" || atts[0].ReadOnly {
		t.Fatalf("the volumes of database VM %s: %+v %v", sandboxID, atts, err)
	}
	v, err := cp.st.GetVolume(ctx, atts[0].VolumeID)
	if err != nil || v.Owner != store.OwnerDatabase || v.Deleted || v.SizeMiB < 1024 {
		t.Fatalf("the volume of database VM %s: %+v %v", sandboxID, v, err)
	}
	if code, b := cp.call(t, "GET", "/v1/volumes", nil, ""); code != 200 || strings.Contains(string(b), v.ID) {
		t.Fatalf("the team's volumes list the database's: %d %s", code, b)
	}
	if code, b := cp.call(t, "GET", "/v1/volumes/"+v.ID, nil, ""); code != 404 {
		t.Fatalf("the team got the database's volume: %d %s", code, b)
	}
	// In the VM: the cluster's and the spool's filesystem is the one mounted at
	// /var/lib/postgresql from a disk, not the root disk.
	r, err := cp.client(cp.admin).Exec(ctx, sandboxID, client.ExecRequest{User: "root", TimeoutSeconds: client.Seconds(60), // the cluster is postgres's
		Cmd: `awk '$2 == "/var/lib/postgresql" {print $1}' /proc/mounts; stat -c %m /var/lib/postgresql/17/main /var/lib/postgresql/pitr/wal /`})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("mounts in database VM %s: %+v %v", sandboxID, r, err)
	}
	got := r.Stdout
	if lines := strings.Fields(got); len(lines) != 4 || !strings.HasPrefix(lines[0], "/dev/") ||
		lines[1] != "/var/lib/postgresql" || lines[2] != "/var/lib/postgresql" || lines[3] != "/" {
		t.Fatalf("mounts in database VM %s: %q, want the cluster and the spool on the volume at /var/lib/postgresql", sandboxID, got)
	}
	return v
}
