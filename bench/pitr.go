package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// pitrSuite measures a restore to an instant (docs/databases.md) of a database of about mib MiB:
// a real agent and server with a file blob store (WAL archive and base backups). The database is
// filled to half the size, backed up (snapshot + pg_basebackup into the store), filled to the
// whole size (WAL to replay after the base), an instant noted, a table dropped after it; then
// POST …/restore {to_time} is timed (flush of the source's WAL, new VM, base laid down, WAL
// placed, replay, promote) and the restored database checked. It records the sizes (database,
// base, WAL archived and how well gzip did on it), each phase's time, and the restore time per
// GiB of database (linear extrapolation: the restore moves and replays bytes), and the machine's
// load average when the restore answered.
func pitrSuite(ctx context.Context, res map[string]float64, guestAgent, imageCache string, mib int) error {
	blobDir, err := os.MkdirTemp("/var/tmp", "pandastack-bench-pitr-blob-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(blobDir)
	dbAddr := freeAddr()
	cl, err := startCluster(guestAgent, imageCache, "10.197.16.0/20", "--db-addr", dbAddr, "--blob-store", "file://"+blobDir)
	if err != nil {
		return err
	}
	defer cl.stop()
	if err := bakePostgres(cl); err != nil {
		return err
	}
	body, err := cl.public.do("POST", "/v1/databases", map[string]any{"name": "pitr", "suspend_after_seconds": 0}, 201)
	if err != nil {
		return err
	}
	dbID, uri, conn, err := connectMade(ctx, cl, dbAddr, body, "")
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	// Rows of ~1 KiB (stored inline, not TOASTed): 64 MiB per statement.
	const rowsPer64MiB = 64 << 10 * 15 / 16
	fill := func(table string, mib int) (time.Duration, error) {
		t := time.Now()
		if _, err := conn.Exec(ctx, "create table if not exists "+table+" (id bigint, pad text)"); err != nil {
			return 0, err
		}
		for done := 0; done < mib; done += 64 {
			if _, err := conn.Exec(ctx, fmt.Sprintf("insert into %s select g, repeat(md5(g::text || random()::text), 31) from generate_series(%d, %d) g",
				table, done/64*rowsPer64MiB, (done/64+1)*rowsPer64MiB-1)); err != nil {
				return 0, err
			}
		}
		return time.Since(t), nil
	}
	half := max(mib/2/64*64, 64)
	d1, err := fill("fill1", half)
	if err != nil {
		return err
	}
	t := time.Now()
	if _, err := cl.public.do("POST", "/v1/databases/"+dbID+"/backups", nil, 201); err != nil {
		return err
	}
	backupMS := ms(time.Since(t))
	fmt.Printf("pitr: filled %d MiB in %s, backup (snapshot + base) in %.0f ms\n", half, d1, backupMS)
	d2, err := fill("fill2", max(mib-half, 64))
	if err != nil {
		return err
	}
	var size int64
	var rows int64
	var instant time.Time
	if err := conn.QueryRow(ctx, "select pg_database_size(current_database()), (select count(*) from fill1) + (select count(*) from fill2), clock_timestamp()").Scan(&size, &rows, &instant); err != nil {
		return err
	}
	fmt.Printf("pitr: filled %d MiB more in %s; database %d MiB, %d rows at %s\n", max(mib-half, 64), d2, size>>20, rows, instant)
	if _, err := conn.Exec(ctx, "drop table fill2"); err != nil { // after the instant: not in the restore
		return err
	}
	t = time.Now()
	body, err = cl.public.do("POST", "/v1/databases/"+dbID+"/restore", map[string]any{"name": "pitr-restored", "to_time": instant.UTC().Format(time.RFC3339Nano)}, 201)
	if err != nil {
		return err
	}
	restoreMS := ms(time.Since(t))
	load := loadAvg() // other work on the machine: the restore's time swings with it
	fmt.Printf("pitr: restored to the instant in %.0f ms (load average %.1f)\n", restoreMS, load)
	_, _, rc, err := connectMade(ctx, cl, dbAddr, body, uri) // the source's credentials
	if err != nil {
		return err
	}
	defer rc.Close(ctx)
	var got int64
	if err := rc.QueryRow(ctx, "select (select count(*) from fill1) + (select count(*) from fill2)").Scan(&got); err != nil || got != rows {
		return fmt.Errorf("the restored database has %d rows (%v), want %d", got, err, rows)
	}

	// What the archive holds: base backups and WAL (gzipped, against 16 MiB a segment).
	var baseBytes, walBytes, walSegments int64
	filepath.Walk(filepath.Join(blobDir, "databases", dbID), func(p string, info os.FileInfo, err error) error {
		switch {
		case err != nil || info.IsDir():
		case strings.Contains(p, "/base/"):
			baseBytes += info.Size()
		case strings.Contains(p, "/wal/") && strings.HasSuffix(p, ".gz"):
			walBytes += info.Size()
			walSegments++
		}
		return nil
	})
	gib := float64(size) / (1 << 30)
	res["db_pitr_database_mib"] = float64(size) / (1 << 20)
	res["db_pitr_fill_mib_per_s"] = float64(half+max(mib-half, 64)) / (d1 + d2).Seconds()
	res["db_pitr_backup_ms"] = backupMS
	res["db_pitr_base_mib"] = float64(baseBytes) / (1 << 20)
	res["db_pitr_wal_segments"] = float64(walSegments)
	if walSegments > 0 {
		res["db_pitr_wal_gzip_ratio"] = float64(walBytes) / float64(walSegments*16<<20)
	}
	res["db_pitr_restore_ms"] = restoreMS
	res["db_pitr_restore_ms_per_gib"] = restoreMS / gib
	res["db_pitr_load_avg_1m"] = load
	return nil
}

// connectMade connects through cl's router to the database a create or restore answered (body):
// with the URI answered (a create's, which has the password), or with the source's (from, with
// the password) for the new database's id. It returns the id and the URI used.
func connectMade(ctx context.Context, cl *cluster, dbAddr string, body []byte, from string) (string, string, *pgx.Conn, error) {
	var db struct {
		ID         string
		Connection struct{ URI string }
	}
	json.Unmarshal(body, &db)
	uri := db.Connection.URI
	if from != "" {
		u, _ := url.Parse(from)
		u.Host = strings.Replace(u.Host, strings.SplitN(u.Hostname(), ".", 2)[0], db.ID, 1)
		uri = u.String()
	}
	cfg, err := routerConfig(cl, dbAddr, uri)
	if err != nil {
		return "", "", nil, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	return db.ID, uri, conn, err
}
