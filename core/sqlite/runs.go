package sqlite

import (
	"fmt"
	"strings"
)

// The runs tables (storage "Runs"): record_runs, one row per record that
// this engine wrote, and run_contexts, one row per distinct run context.
// The first write of runs creates both (as the first claim creates the
// claims table): until then a database has the original's schema, and
// its reads find no runs. Both are WITHOUT ROWID: one b-tree each, where
// a rowid table keyed by text keeps two, so that a record's write
// journals one page more, not two.
const (
	RunsTable       = "record_runs"
	ContextsTable   = "run_contexts"
	createRunsTable = `CREATE TABLE IF NOT EXISTS record_runs (
    key          TEXT PRIMARY KEY,
    update_date  TEXT NOT NULL,
    runs_json    TEXT NOT NULL
) WITHOUT ROWID`
	createContextsTable = `CREATE TABLE IF NOT EXISTS run_contexts (
    fingerprint  TEXT PRIMARY KEY,
    context_json TEXT NOT NULL
) WITHOUT ROWID`
	upsertRuns = `INSERT INTO record_runs (key, update_date, runs_json) VALUES (?, ?, ?)
  ON CONFLICT(key) DO UPDATE SET update_date = excluded.update_date, runs_json = excluded.runs_json`
	insertContext = "INSERT OR IGNORE INTO run_contexts (fingerprint, context_json) VALUES (?, ?)"
	deleteRuns    = "DELETE FROM record_runs WHERE key = ?"
	// runsOfR is the runs of the record r: those of its record_runs row
	// if that describes it (the same update_date), else ''.
	runsOfR = "coalesce((SELECT u.runs_json FROM record_runs u WHERE u.key = r.key AND u.update_date = r.update_date), '')"
)

// runsSQL is a read of records in its two forms: without the runs ([0],
// for a database without record_runs, whose records have none) and with.
type runsSQL [2]string

// withRuns makes a runsSQL of format, whose one %s is the runs column.
func withRuns(format string) runsSQL {
	return runsSQL{fmt.Sprintf(format, "''"), fmt.Sprintf(format, runsOfR)}
}

// where is q with clause appended to both forms.
func (q runsSQL) where(clause string) runsSQL { return runsSQL{q[0] + clause, q[1] + clause} }

// pick is the form of q this database can run.
func (d *DB) pick(q runsSQL) (string, error) {
	ok, err := d.hasRuns()
	if ok {
		return q[1], err
	}
	return q[0], err
}

// hasRuns reports whether the database has the record_runs table (and so
// run_contexts, created with it). Once seen it is remembered (no writer
// drops it) until a transaction rolls back (which may have created it);
// until then every read looks again, since another process may create it
// at any time.
func (d *DB) hasRuns() (bool, error) {
	if d.runsTables {
		return true, nil
	}
	ok, err := d.hasTable(RunsTable)
	d.runsTables = ok && err == nil
	return ok, err
}

// Contexts returns the context JSON of those fingerprints that are stored.
func (d *DB) Contexts(fingerprints []string) (map[string]string, error) {
	out := map[string]string{}
	if ok, err := d.hasTable(ContextsTable); err != nil || !ok || len(fingerprints) == 0 {
		return out, err
	}
	for len(fingerprints) > 0 {
		n := min(len(fingerprints), maxClaimVars)
		args := make([]any, n)
		for i, f := range fingerprints[:n] {
			args[i] = f
		}
		fingerprints = fingerprints[n:]
		err := eachRow(d, func(sc scanner) (kv [2]string, err error) {
			err = sc.Scan(&kv[0], &kv[1])
			return kv, err
		}, func(kv [2]string) error {
			out[kv[0]] = kv[1]
			return nil
		}, "SELECT fingerprint, context_json FROM run_contexts WHERE fingerprint IN (?"+strings.Repeat(", ?", n-1)+")", args...)
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ensureRuns creates the runs tables in the transaction unless present.
func (tx *Tx) ensureRuns() error {
	if tx.d.runsTables {
		return nil // both: they are created together
	}
	for _, ddl := range []string{createRunsTable, createContextsTable} {
		if _, err := tx.Exec(ddl); err != nil {
			return err
		}
	}
	tx.d.runsTables = true // until a rollback (Tx)
	return nil
}

// PutRuns stores the runs of the record of key dated updateDate.
func (tx *Tx) PutRuns(key, updateDate, runs string) error {
	if err := tx.ensureRuns(); err != nil {
		return err
	}
	_, err := tx.exec(upsertRuns, key, updateDate, runs)
	return err
}

// PutContext stores a run context unless its fingerprint is stored.
func (tx *Tx) PutContext(fingerprint, contextJSON string) error {
	if err := tx.ensureRuns(); err != nil {
		return err
	}
	_, err := tx.exec(insertContext, fingerprint, contextJSON)
	return err
}
