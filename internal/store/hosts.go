package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"hash/fnv"
	"slices"
	"strconv"
	"time"
)

// Host states.
const (
	HostUp   = "up"
	HostDown = "down"
)

// Host is a machine running `pandastack agent`, as last reported.
type Host struct {
	ID            string
	URL           string
	Token         string
	State         string
	Accel         string
	MemMiBTotal   int64
	MemMiBFree    int64
	SlotsTotal    int64
	SlotsUsed     int64
	Templates     []string // templates this host can run
	Baked         []string // the subset already baked (creates restore at once)
	RegisteredAt  time.Time
	LastHeartbeat time.Time
	// Draining: an operator drains the host: nothing new is placed there, and its hibernated
	// sandboxes with a published image wake on other hosts.
	Draining bool
	// ReadAt is when the host read the report it sent, at the earliest (written with the report;
	// zero: now): its slots_used counts the sandboxes it created before (ClaimSlot).
	ReadAt time.Time
	// HeardAt is when the report is written, as its writer's clock says (zero: the store's now):
	// never before it arrived. A stopped sandbox's credit (CreditSlots) asked for before ends.
	HeardAt time.Time
	// SlotsClaimed and SlotsFreed (ListHosts only) are what the store's claims say of the host
	// beyond SlotsUsed, every replica's: slots claimed by placements no report counts yet
	// (ClaimSlot), and sandboxes stopped since the report (CreditSlots).
	SlotsClaimed, SlotsFreed int64
}

// readAt is h.ReadAt in the store's units (now when not given).
func (s *Store) readAt(h Host) int64 { return s.orNow(h.ReadAt) }

// heardAt is h.HeardAt in the store's units (now when not given).
func (s *Store) heardAt(h Host) int64 { return s.orNow(h.HeardAt) }

// orNow is t in the store's units, now when t is zero.
func (s *Store) orNow(t time.Time) int64 {
	if t.IsZero() {
		return micros(s.now())
	}
	return micros(t)
}

const hostCols = `id, url, token, state, accel, mem_mib_total, mem_mib_free, slots_total, slots_used, templates, baked, registered_at, last_heartbeat, draining`

func scanHost(sc scanner) (Host, error) {
	var h Host
	var tmpl, baked string
	if err := sc.Scan(&h.ID, &h.URL, &h.Token, &h.State, &h.Accel, &h.MemMiBTotal, &h.MemMiBFree,
		&h.SlotsTotal, &h.SlotsUsed, &tmpl, &baked, timeCol(&h.RegisteredAt), timeCol(&h.LastHeartbeat), boolCol(&h.Draining)); err != nil {
		return Host{}, err
	}
	if err := json.Unmarshal([]byte(tmpl), &h.Templates); err != nil {
		return Host{}, err
	}
	if err := json.Unmarshal([]byte(baked), &h.Baked); err != nil {
		return Host{}, err
	}
	return h, nil
}

// UpsertHost records a registration or heartbeat: the host is up and its capacity is as given,
// LastHeartbeat is now. It returns the host's previous state ("" for a new host) so the caller can
// reconcile a host that comes back.
func (s *Store) UpsertHost(ctx context.Context, h Host) (prev string, err error) {
	now := micros(s.now())
	tmpl, err := json.Marshal(nonNil(h.Templates))
	if err != nil {
		return "", err
	}
	baked, err := json.Marshal(nonNil(h.Baked))
	if err != nil {
		return "", err
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		err := s.queryRow(ctx, tx, `SELECT state FROM hosts WHERE id = ?`, h.ID).Scan(&prev)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			prev = ""
			_, err = s.exec(ctx, tx, `INSERT INTO hosts (`+hostCols+`, report_hash, read_at, heard_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?)`,
				h.ID, h.URL, h.Token, HostUp, h.Accel, h.MemMiBTotal, h.MemMiBFree, h.SlotsTotal, h.SlotsUsed, string(tmpl), string(baked), now, now, ReportHash(h), s.readAt(h), s.heardAt(h))
			return err
		case err != nil:
			return err
		}
		_, err = s.exec(ctx, tx, `UPDATE hosts SET url = ?, token = ?, state = ?, accel = ?, mem_mib_total = ?, mem_mib_free = ?,
			slots_total = ?, slots_used = ?, templates = ?, baked = ?, last_heartbeat = ?, report_hash = ?, read_at = ?, heard_at = ? WHERE id = ?`,
			h.URL, h.Token, HostUp, h.Accel, h.MemMiBTotal, h.MemMiBFree, h.SlotsTotal, h.SlotsUsed, string(tmpl), string(baked), now, ReportHash(h), s.readAt(h), s.heardAt(h), h.ID)
		return err
	})
	return prev, err
}

// RefreshUpHost writes a report of a host that is known and up, in one statement; false (and
// nothing written) when the host is unknown or down: UpsertHost then.
func (s *Store) RefreshUpHost(ctx context.Context, h Host) (bool, error) {
	tmpl, err := json.Marshal(nonNil(h.Templates))
	if err != nil {
		return false, err
	}
	baked, err := json.Marshal(nonNil(h.Baked))
	if err != nil {
		return false, err
	}
	now := micros(s.now())
	res, err := s.exec(ctx, s.db, `UPDATE hosts SET url = ?, token = ?, accel = ?, mem_mib_total = ?, mem_mib_free = ?,
		slots_total = ?, slots_used = ?, templates = ?, baked = ?, last_heartbeat = ?, report_hash = ?, read_at = ?, heard_at = ? WHERE id = ? AND state = ?`,
		h.URL, h.Token, h.Accel, h.MemMiBTotal, h.MemMiBFree, h.SlotsTotal, h.SlotsUsed, string(tmpl), string(baked), now, ReportHash(h), s.readAt(h), s.heardAt(h), h.ID, HostUp)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// ReportHash fingerprints what a report writes to a host's row (everything but when it was
// heard): a heartbeat whose fingerprint is the row's changed nothing but the host's liveness
// (TouchHosts).
func ReportHash(h Host) string {
	f := fnv.New64a()
	for _, v := range []string{h.URL, h.Token, h.Accel, strconv.FormatInt(h.MemMiBTotal, 10), strconv.FormatInt(h.MemMiBFree, 10),
		strconv.FormatInt(h.SlotsTotal, 10), strconv.FormatInt(h.SlotsUsed, 10)} {
		f.Write([]byte(v))
		f.Write([]byte{0})
	}
	for _, list := range [][]string{h.Templates, h.Baked} {
		for _, t := range list {
			f.Write([]byte(t))
			f.Write([]byte{0})
		}
		f.Write([]byte{1})
	}
	return strconv.FormatUint(f.Sum64(), 16)
}

// HostReport is a host's id and the fingerprint of its report (ReportHash).
type HostReport struct{ ID, Hash string }

// TouchHosts records, in one statement, that the given hosts were heard at `at` and reported
// nothing new, read at readAt at the earliest: each row whose host is up and whose fingerprint is
// the report's gets `at` as its last heartbeat, and heardAt (zero: now) as when a report was last
// written (the write's time, as Host.HeardAt). It returns the ids it wrote; a host left out
// (down, unknown, or its row holds another report — one another replica wrote, say) needs its
// whole report written (RefreshUpHost).
func (s *Store) TouchHosts(ctx context.Context, at, readAt, heardAt time.Time, reports []HostReport) (map[string]bool, error) {
	pairs := make([][2]string, len(reports))
	for i, r := range reports {
		pairs[i] = [2]string{r.ID, r.Hash}
	}
	js, err := json.Marshal(pairs)
	if err != nil {
		return nil, err
	}
	// One statement text whatever the batch's size (one prepared statement per connection).
	q := `UPDATE hosts SET last_heartbeat = ?, read_at = MAX(read_at, ?), heard_at = ? WHERE state = 'up' AND (id, report_hash) IN
		(SELECT value->>0, value->>1 FROM json_each(?)) RETURNING id`
	if s.dialect == Postgres {
		q = `UPDATE hosts SET last_heartbeat = ?, read_at = GREATEST(read_at, ?), heard_at = ? WHERE state = 'up' AND (id, report_hash) IN
		(SELECT e->>0, e->>1 FROM json_array_elements(?::json) e) RETURNING id`
	}
	ids, err := queryAll(ctx, s, s.db, q, scanOne[string], micros(at), micros(readAt), s.orNow(heardAt), string(js))
	if err != nil {
		return nil, err
	}
	done := make(map[string]bool, len(ids))
	for _, id := range ids {
		done[id] = true
	}
	return done, nil
}

// ClaimSlot claims a slot of host hostID for a sandbox being placed there, shared by every
// replica on this store: false (nothing claimed) when the host's last report and the claims it
// does not count leave no slot. A claim counts until it expires, or, once answered
// (AnswerClaim), until a report read after the answer is written. A host reporting no slots is
// not checked.
func (s *Store) ClaimSlot(ctx context.Context, claimID, hostID string, now, expires time.Time) (bool, error) {
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if s.dialect == Postgres {
			// One claim of a host at a time (an advisory lock of this transaction, not the host's
			// row: heartbeats do not wait for claims): the count below is read after the claims
			// committed before this one took the lock. SQLite runs one writer at a time anyway.
			if _, err := s.exec(ctx, tx, `SELECT pg_advisory_xact_lock(?)`, lockKey("host claims "+hostID)); err != nil {
				return err
			}
		}
		res, err := s.exec(ctx, tx, `INSERT INTO host_claims (id, host_id, answered_at, expires_at)
			SELECT ?, h.id, 0, ? FROM hosts h WHERE h.id = ? AND (h.slots_total = 0 OR h.slots_used + 1 +
				(SELECT COALESCE(SUM(c.slots), 0) FROM host_claims c WHERE c.host_id = h.id AND c.expires_at > ?
					AND `+countingClaim+`) <= h.slots_total)`,
			claimID, micros(expires), hostID, micros(now))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n == 1, err
}

// countingClaim says whether host_claims row c still counts against its host h's last report: a
// claim (slots 1) until a report read after its answer; a stopped sandbox's credit (slots -1)
// until a report heard after it was stopped is written (heard_at: written with each report, at
// the write, so never before the report arrived; a credit ends at the earliest moment a report
// may count the sandbox gone, erring on the side of room taken).
const countingClaim = `(c.slots > 0 AND (c.answered_at = 0 OR c.answered_at > h.read_at) OR c.slots < 0 AND c.answered_at > h.heard_at)`

// SlotCredit is a sandbox its host stopped (CreditSlots): its slot is free from At, the moment it
// was asked to stop.
type SlotCredit struct {
	SandboxID, HostID string
	At, Expires       time.Time
}

// CreditSlots records that hosts stopped sandboxes, in one statement whatever their number: each
// gives its host's slot back to every replica's claims (ClaimSlot) and host lists (ListHosts'
// SlotsFreed) until a report heard after it is written, or it expires. A sandbox is credited
// once whoever stops it, however often (a kill racing the reaper's: its host answers both).
func (s *Store) CreditSlots(ctx context.Context, credits []SlotCredit) error {
	if len(credits) == 0 {
		return nil
	}
	rows := make([][4]any, len(credits))
	for i, c := range credits {
		rows[i] = [4]any{"freed:" + c.SandboxID, c.HostID, micros(c.At), micros(c.Expires)}
	}
	js, err := json.Marshal(rows)
	if err != nil {
		return err
	}
	q := `INSERT INTO host_claims (id, host_id, answered_at, expires_at, slots)
		SELECT value->>0, value->>1, value->>2, value->>3, -1 FROM json_each(?) WHERE true ON CONFLICT (id) DO NOTHING`
	if s.dialect == Postgres {
		q = `INSERT INTO host_claims (id, host_id, answered_at, expires_at, slots)
		SELECT e->>0, e->>1, (e->>2)::bigint, (e->>3)::bigint, -1 FROM json_array_elements(?::json) e ON CONFLICT (id) DO NOTHING`
	}
	_, err = s.exec(ctx, s.db, q, string(js))
	return err
}

// ClaimAnswer is how one claim's placement ended (AnswerClaims).
type ClaimAnswer struct {
	ID string
	// Placed: a sandbox was placed, and the claim keeps its slot until a report read after At
	// counts it; else nothing was placed and the claim ends now.
	Placed bool
	At     time.Time
}

// AnswerClaims ends the claims whose hosts answered, in one statement whatever their number
// (one statement text: one prepared statement per connection). A claim ended with nothing placed
// stops counting at once (its expiry is set to 0; DropEndedClaims deletes it).
func (s *Store) AnswerClaims(ctx context.Context, answers []ClaimAnswer) error {
	switch {
	case len(answers) == 0:
		return nil
	case len(answers) == 1 && !answers[0].Placed: // alone: by its key, without a JSON list
		_, err := s.exec(ctx, s.db, `UPDATE host_claims SET expires_at = 0 WHERE id = ?`, answers[0].ID)
		return err
	case len(answers) == 1:
		_, err := s.exec(ctx, s.db, `UPDATE host_claims SET answered_at = ? WHERE id = ?`, micros(answers[0].At), answers[0].ID)
		return err
	}
	rows := make([][3]any, len(answers))
	for i, a := range answers {
		rows[i] = [3]any{a.ID, micros(a.At), boolInt(a.Placed)}
	}
	js, err := json.Marshal(rows)
	if err != nil {
		return err
	}
	q := `UPDATE host_claims SET answered_at = CASE WHEN j.value->>2 = 1 THEN j.value->>1 ELSE answered_at END,
		expires_at = CASE WHEN j.value->>2 = 1 THEN expires_at ELSE 0 END
		FROM json_each(?) j WHERE host_claims.id = j.value->>0`
	if s.dialect == Postgres {
		q = `UPDATE host_claims SET answered_at = CASE WHEN e->>2 = '1' THEN (e->>1)::bigint ELSE answered_at END,
		expires_at = CASE WHEN e->>2 = '1' THEN expires_at ELSE 0 END
		FROM json_array_elements(?::json) e WHERE host_claims.id = e->>0`
	}
	_, err = s.exec(ctx, s.db, q, string(js))
	return err
}

// DropEndedClaims deletes the claims that no longer count (expired, or counted by a report).
func (s *Store) DropEndedClaims(ctx context.Context, now time.Time) error {
	_, err := s.exec(ctx, s.db, `DELETE FROM host_claims AS c WHERE c.expires_at <= ? OR c.answered_at > 0 AND NOT EXISTS
		(SELECT 1 FROM hosts h WHERE h.id = c.host_id AND `+countingClaim+`)`, micros(now))
	return err
}

// SetHostDraining starts (true) or ends a host's drain; ErrNotFound for an unknown host.
func (s *Store) SetHostDraining(ctx context.Context, id string, draining bool) error {
	res, err := s.exec(ctx, s.db, `UPDATE hosts SET draining = ? WHERE id = ?`, boolInt(draining), id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	return nil
}

// GetHost returns one host.
func (s *Store) GetHost(ctx context.Context, id string) (Host, error) {
	return queryOne(ctx, s, `SELECT `+hostCols+` FROM hosts WHERE id = ?`, scanHost, id)
}

// ListHosts returns every host, by id, with when its report was read and written (ReadAt,
// HeardAt) and the claims that report does not count (SlotsClaimed, SlotsFreed).
func (s *Store) ListHosts(ctx context.Context) ([]Host, error) {
	count := func(sign string) string {
		return `(SELECT COUNT(*) FROM host_claims c WHERE c.host_id = h.id AND c.slots ` + sign + ` 0 AND c.expires_at > ? AND ` + countingClaim + `)`
	}
	now := micros(s.now())
	return queryAll(ctx, s, s.db, `SELECT `+hostCols+`, read_at, heard_at, `+count(">")+`, `+count("<")+` FROM hosts h ORDER BY id`,
		func(sc scanner) (Host, error) {
			var readAt, heardAt time.Time
			var claimed, freed int64
			h, err := scanHost(extraCols{sc, []any{timeCol(&readAt), timeCol(&heardAt), &claimed, &freed}})
			h.ReadAt, h.HeardAt, h.SlotsClaimed, h.SlotsFreed = readAt, heardAt, claimed, freed
			return h, err
		}, now, now)
}

// extraCols scans more columns after the scanner's caller's.
type extraCols struct {
	scanner
	dest []any
}

func (e extraCols) Scan(dest ...any) error { return e.scanner.Scan(append(dest, e.dest...)...) }

// CountHostsByState returns how many hosts are in each state.
func (s *Store) CountHostsByState(ctx context.Context) (map[string]int64, error) {
	return s.countBy(ctx, `SELECT state, COUNT(*) FROM hosts GROUP BY state`)
}

// MarkStaleHostsDown marks down every up host whose last heartbeat is before staleBefore, and
// turns its running sandboxes, and its hibernated ones without a published image, into `lost`
// (with a reason). It returns the hosts it marked. Hosts named in spare are left up (the caller
// has heard from them since: their reports' writes have not landed).
//
// Each host is marked in a transaction of its own (its row, then its sandboxes'), in id order, and
// only while its row is still up and stale: a transaction holds one host row at a time, so the
// checks of two replicas and the heartbeats' batched writes (TouchHosts) cannot deadlock on hosts'
// rows (one transaction over every stale host did, with two servers on PostgreSQL under load), a
// heartbeat written since the read keeps its host up, and a host another replica marked first is
// not reported again.
func (s *Store) MarkStaleHostsDown(ctx context.Context, staleBefore time.Time, spare ...string) ([]Host, error) {
	stale, err := queryAll(ctx, s, s.db, `SELECT `+hostCols+` FROM hosts WHERE state = ? AND last_heartbeat < ? ORDER BY id`, scanHost, HostUp, micros(staleBefore))
	if err != nil {
		return nil, err
	}
	var marked []Host
	for _, h := range stale {
		if slices.Contains(spare, h.ID) {
			continue
		}
		down := false
		err := s.inTx(ctx, func(tx *sql.Tx) error {
			res, err := s.exec(ctx, tx, `UPDATE hosts SET state = ? WHERE id = ? AND state = ? AND last_heartbeat < ?`, HostDown, h.ID, HostUp, micros(staleBefore))
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return err
			}
			down = true
			return s.loseSandboxesOf(ctx, tx, h.ID, "host "+h.ID+" stopped sending heartbeats")
		})
		if err != nil {
			return marked, err
		}
		if down {
			h.State = HostDown
			marked = append(marked, h)
		}
	}
	return marked, nil
}

// MarkHostDown marks one host down and its live sandboxes lost (an operator's or a test's hand);
// a hibernated sandbox with a published image stays hibernated: it wakes on another host.
func (s *Store) MarkHostDown(ctx context.Context, id, reason string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := s.exec(ctx, tx, `UPDATE hosts SET state = ? WHERE id = ?`, HostDown, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		return s.loseSandboxesOf(ctx, tx, id, reason)
	})
}

// loseSandboxesOf turns the live sandboxes of a host marked down into `lost` with reason: its
// running ones, and its hibernated ones without a published image (one with an image stays
// hibernated: it wakes on another host).
func (s *Store) loseSandboxesOf(ctx context.Context, tx *sql.Tx, hostID, reason string) error {
	_, err := s.exec(ctx, tx, `UPDATE sandboxes SET state = ?, error = ?, updated_at = ?
		WHERE host_id = ? AND (state = ? OR state = ? AND hibernated_image = '')`,
		StateLost, reason, micros(s.now()), hostID, StateRunning, StateHibernated)
	return err
}

// hostsSchema is the hosts table's part of each migration.
var hostsSchema = []schemaStep{
	{1, []string{
		// token is the host agent's bearer secret: the control plane must present it, so it is
		// kept as given (unlike API keys, which are only ever verified).
		`CREATE TABLE hosts (
			id             TEXT PRIMARY KEY,
			url            TEXT NOT NULL,
			token          TEXT NOT NULL DEFAULT '',
			state          TEXT NOT NULL,
			accel          TEXT NOT NULL DEFAULT '',
			mem_mib_total  BIGINT NOT NULL DEFAULT 0,
			mem_mib_free   BIGINT NOT NULL DEFAULT 0,
			slots_total    BIGINT NOT NULL DEFAULT 0,
			slots_used     BIGINT NOT NULL DEFAULT 0,
			templates      TEXT NOT NULL DEFAULT '[]',
			baked          TEXT NOT NULL DEFAULT '[]',
			registered_at  BIGINT NOT NULL,
			last_heartbeat BIGINT NOT NULL
		)`,
	}},
	{15, []string{
		// An operator's drain: no new placements; hibernated sandboxes wake elsewhere.
		`ALTER TABLE hosts ADD COLUMN draining INTEGER NOT NULL DEFAULT 0`,
	}},
	{25, []string{
		// The fingerprint of the report the row holds (ReportHash): a heartbeat that reports the
		// same only moves last_heartbeat, batched with others (TouchHosts).
		`ALTER TABLE hosts ADD COLUMN report_hash TEXT NOT NULL DEFAULT ''`,
		// When the host read that report, at the earliest: the claims answered before are counted.
		`ALTER TABLE hosts ADD COLUMN read_at BIGINT NOT NULL DEFAULT 0`,
		// Slots claimed by placements on any replica and not yet counted by a report (ClaimSlot).
		`CREATE TABLE host_claims (
			id          TEXT PRIMARY KEY,
			host_id     TEXT NOT NULL,
			answered_at BIGINT NOT NULL DEFAULT 0,
			expires_at  BIGINT NOT NULL
		)`,
		`CREATE INDEX host_claims_host ON host_claims (host_id)`,
	}},
	{28, []string{
		// A sandbox stopped gives its slot back (slots -1, answered_at: when it was asked to stop)
		// until a report heard after that is written (CreditSlots).
		`ALTER TABLE host_claims ADD COLUMN slots INTEGER NOT NULL DEFAULT 1`,
		// When the row's report was last written (each report write sets it to the write's time).
		`ALTER TABLE hosts ADD COLUMN heard_at BIGINT NOT NULL DEFAULT 0`,
	}},
}
