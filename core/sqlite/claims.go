package sqlite

import (
	"strings"

	"github.com/tirastore/tirastore/core/storage"
)

// The claims table: one row per schedule being measured (storage.Claim),
// keyed by the record key the measurement will be stored under. It is
// created by the first claim (a database that never saw one has no such
// table and every read finds it empty); the original library never looks
// at it, so its workers go on measuring and recording beside claimers.
// Versions before the Slurm cluster was recorded made the table without
// slurm_cluster: it reads as "" there, and the first claim of this
// version adds the column (older versions name their columns, so they
// go on reading and writing the table).
const (
	ClaimTable       = "claims"
	createClaimTable = `CREATE TABLE IF NOT EXISTS claims (
    key            TEXT PRIMARY KEY,
    program_hash   TEXT NOT NULL,
    program_name   TEXT NOT NULL,
    schedule       TEXT NOT NULL,
    token          TEXT NOT NULL,
    hostname       TEXT NOT NULL,
    pid            INTEGER NOT NULL,
    start_time     INTEGER NOT NULL,
    boot_id        TEXT NOT NULL,
    pid_ns         INTEGER NOT NULL,
    slurm_job_id   TEXT NOT NULL,
    username       TEXT NOT NULL,
    lease          REAL NOT NULL,
    renewals       INTEGER NOT NULL,
    claimed_at     TEXT NOT NULL,
    renewed_at     TEXT NOT NULL,
    slurm_cluster  TEXT NOT NULL DEFAULT ''
)`
	addClaimCluster = `ALTER TABLE claims ADD COLUMN slurm_cluster TEXT NOT NULL DEFAULT ''`
	// maxClaimVars bounds the keys of one GetClaims statement (SQLite's
	// default limit of bound variables is 999 in old builds).
	maxClaimVars = 500
	claimColumns = `key, program_hash, program_name, schedule, token, hostname, pid, start_time, boot_id,
    pid_ns, slurm_job_id, username, lease, renewals, claimed_at, renewed_at, slurm_cluster`
)

// claimLayout is the shape of a database's claims table.
type claimLayout int

const (
	claimsNone        claimLayout = iota // no table yet: every read finds nothing
	claimsNoCluster                      // made before slurm_cluster
	claimsWithCluster                    // the current one
)

// claimLayout tells whether the claims table exists and whether it has
// slurm_cluster, in one statement.
func (d *DB) claimLayout() (claimLayout, error) {
	var cols, cluster int
	err := d.queryRow(`SELECT count(*), count(CASE WHEN name = 'slurm_cluster' THEN 1 END)
  FROM pragma_table_info('claims', 'main')`).Scan(&cols, &cluster)
	switch {
	case err != nil || cols == 0:
		return claimsNone, err
	case cluster == 0:
		return claimsNoCluster, nil
	}
	return claimsWithCluster, nil
}

// source is what a read selects claims from: the table, or an old one's
// rows with no cluster.
func (l claimLayout) source() string {
	if l == claimsNoCluster {
		return `(SELECT *, '' AS slurm_cluster FROM claims)`
	}
	return ClaimTable
}

func scanClaim(sc scanner) (*storage.Claim, error) {
	var c storage.Claim
	err := sc.Scan(&c.Key, &c.ProgramHash, &c.ProgramName, &c.Schedule, &c.Token, &c.Hostname, &c.PID,
		&c.StartTime, &c.BootID, &c.PIDNS, &c.SlurmJobID, &c.Username, &c.LeaseSeconds, &c.Renewals,
		&c.ClaimedAt, &c.RenewedAt, &c.SlurmCluster)
	return &c, err
}

// GetClaims returns the claims of keys that exist, by key.
func (d *DB) GetClaims(keys []string) (map[string]*storage.Claim, error) {
	out := make(map[string]*storage.Claim)
	l, err := d.claimLayout()
	if err != nil || l == claimsNone || len(keys) == 0 {
		return out, err
	}
	for len(keys) > 0 {
		n := min(len(keys), maxClaimVars)
		args := make([]any, n)
		for i, k := range keys[:n] {
			args[i] = k
		}
		err := eachRow(d, scanClaim, func(c *storage.Claim) error {
			out[c.Key] = c
			return nil
		}, "SELECT "+claimColumns+" FROM "+l.source()+" WHERE key IN (?"+strings.Repeat(", ?", n-1)+")", args...)
		if err != nil {
			return nil, err
		}
		keys = keys[n:]
	}
	return out, nil
}

// EachClaim calls fn for every claim, oldest first.
func (d *DB) EachClaim(fn func(*storage.Claim) error) error {
	l, err := d.claimLayout()
	if err != nil || l == claimsNone {
		return err
	}
	return eachRow(d, scanClaim, fn, "SELECT "+claimColumns+" FROM "+l.source()+" ORDER BY claimed_at, key")
}

// PutClaim inserts c, replacing the claim of its key (a takeover),
// creating the table on first use (adding slurm_cluster to an old one).
func (tx *Tx) PutClaim(c *storage.Claim) error {
	l, err := tx.d.claimLayout()
	if err != nil {
		return err
	}
	switch l {
	case claimsNone:
		_, err = tx.exec(createClaimTable)
	case claimsNoCluster:
		_, err = tx.exec(addClaimCluster)
	}
	if err != nil {
		return err
	}
	_, err = tx.exec("INSERT OR REPLACE INTO claims ("+claimColumns+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
		c.Key, c.ProgramHash, c.ProgramName, c.Schedule, c.Token, c.Hostname, c.PID, c.StartTime, c.BootID,
		c.PIDNS, c.SlurmJobID, c.Username, c.LeaseSeconds, c.Renewals, c.ClaimedAt, c.RenewedAt, c.SlurmCluster)
	return err
}

// DeleteClaim removes the claim of key if token still names it, and
// reports whether it did.
func (tx *Tx) DeleteClaim(key, token string) (bool, error) {
	if ok, err := tx.d.hasTable(ClaimTable); err != nil || !ok {
		return false, err
	}
	return tx.changed("DELETE FROM claims WHERE key = ? AND token = ?", key, token)
}

// DeleteClaimOfKey deletes the claim on key, whatever its token (token is
// ignored: DeleteClaim's signature), and reports whether there was one.
func (tx *Tx) DeleteClaimOfKey(key, _ string) (bool, error) {
	if ok, err := tx.d.hasTable(ClaimTable); err != nil || !ok {
		return false, err
	}
	return tx.changed("DELETE FROM claims WHERE key = ?", key)
}

// RenewClaims counts a renewal, dated at, of every claim of refs that
// its token still names, and returns those it renewed.
func (tx *Tx) RenewClaims(refs []storage.ClaimRef, at string) ([]storage.ClaimRef, error) {
	if ok, err := tx.d.hasTable(ClaimTable); err != nil || !ok {
		return nil, err
	}
	var renewed []storage.ClaimRef
	for _, r := range refs {
		ok, err := tx.changed("UPDATE claims SET renewals = renewals + 1, renewed_at = ? WHERE key = ? AND token = ?", at, r.Key, r.Token)
		if err != nil {
			return nil, err
		}
		if ok {
			renewed = append(renewed, r)
		}
	}
	return renewed, nil
}
