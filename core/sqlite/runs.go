package sqlite

import (
	"fmt"
	"strings"
)

// The runs tables (storage "Runs"): record_runs, one row per record that
// this engine wrote, and run_contexts, one row per distinct run context.
// The first write of runs creates both (as the first claim creates the
// claims table): until then a database has the original's schema, and
// its reads find no runs.
//
// A record's runs row is keyed by the record's rowid, not by its key: the
// rowids of new records grow, so a record_many appends its runs at the
// end of the table's b-tree, where rows keyed by the records' random keys
// went to a random page each, and a batch of a thousand journaled and
// rewrote hundreds of pages (twice the time of the records themselves).
// The row also holds the key and update_date of the record it describes,
// and a read takes it only if both match: an overwrite keeps the rowid
// and changes the date; a VACUUM by another tool may renumber the
// records' rowids (the table has no INTEGER PRIMARY KEY), which detaches
// runs (they are no longer found) but never attaches them to another
// record.
const (
	RunsTable       = "record_runs"
	ContextsTable   = "run_contexts"
	createRunsTable = `CREATE TABLE IF NOT EXISTS record_runs (
    rec          INTEGER PRIMARY KEY,
    key          TEXT NOT NULL,
    update_date  TEXT NOT NULL,
    runs_json    TEXT NOT NULL
)`
	createContextsTable = `CREATE TABLE IF NOT EXISTS run_contexts (
    fingerprint  TEXT PRIMARY KEY,
    context_json TEXT NOT NULL
) WITHOUT ROWID`
	// upsertRuns stores runs (?1) for the record of key ?2 dated ?3, at
	// its rowid.
	upsertRuns = `INSERT INTO record_runs (rec, key, update_date, runs_json)
  SELECT rowid, key, update_date, ?1 FROM records WHERE key = ?2 AND update_date = ?3
  ON CONFLICT(rec) DO UPDATE SET key = excluded.key, update_date = excluded.update_date, runs_json = excluded.runs_json`
	insertContext = "INSERT OR IGNORE INTO run_contexts (fingerprint, context_json) VALUES (?, ?)"
	deleteRuns    = "DELETE FROM record_runs WHERE rec = (SELECT rowid FROM records WHERE key = ?)"
	// runsOfR is the runs of the record r: those of its record_runs row
	// if that describes it, else ''.
	runsOfR = "coalesce((SELECT u.runs_json FROM record_runs u WHERE u.rec = r.rowid AND u.key = r.key AND u.update_date = r.update_date), '')"
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

// The states of a database's runs tables, as a DB last saw them.
const (
	runsUnseen  = iota // not looked at, or absent when last looked
	runsKnown          // both, of this engine's layout
	runsForeign        // a table of one of their names with other columns
)

// runsLayoutSQL counts the runs tables' columns of this engine's layout,
// and all their columns: equal and non-zero is runsKnown.
const runsLayoutSQL = `SELECT
  (SELECT count(*) FROM pragma_table_info('record_runs') WHERE name IN ('rec', 'key', 'update_date', 'runs_json')) +
  (SELECT count(*) FROM pragma_table_info('run_contexts') WHERE name IN ('fingerprint', 'context_json')),
  (SELECT count(*) FROM pragma_table_info('record_runs')) + (SELECT count(*) FROM pragma_table_info('run_contexts'))`

// runsLayout looks at the runs tables: absent (runsUnseen), both of this
// engine's layout, or otherwise foreign: a table of another shape (a
// version of this engine before the layout settled, or one that anyone
// who may write the file planted), whose reads and writes would fail
// every lookup and record. A foreign table only switches runs off: reads
// find none, writes store none. Once known or foreign the state is
// remembered (no writer drops a table) until a transaction rolls back
// (which may have created them); until then every read looks again,
// since another process may create them at any time.
func (d *DB) runsLayout() (int, error) {
	if d.runs != runsUnseen {
		return d.runs, nil
	}
	var ours, all int
	if err := d.queryRow(runsLayoutSQL).Scan(&ours, &all); err != nil {
		return runsUnseen, err
	}
	switch {
	case all == 0:
		return runsUnseen, nil
	case ours == 6 && all == 6:
		d.runs = runsKnown
	default:
		d.runs = runsForeign
	}
	return d.runs, nil
}

// ForeignRuns reports whether the database has runs tables of another
// shape (see runsLayout), for a notice at open.
func (d *DB) ForeignRuns() (bool, error) {
	l, err := d.runsLayout()
	return l == runsForeign, err
}

// hasRuns reports whether the database has the runs tables, of this
// engine's layout.
func (d *DB) hasRuns() (bool, error) {
	l, err := d.runsLayout()
	return l == runsKnown, err
}

// Contexts returns the context JSON of those fingerprints that are stored.
func (d *DB) Contexts(fingerprints []string) (map[string]string, error) {
	out := map[string]string{}
	if ok, err := d.hasRuns(); err != nil || !ok || len(fingerprints) == 0 {
		return out, err
	}
	for len(fingerprints) > 0 {
		n := min(len(fingerprints), maxClaimVars)
		args := make([]any, n)
		for i, f := range fingerprints[:n] {
			args[i] = f
		}
		fingerprints = fingerprints[n:]
		if err := d.contextsInto(out, "SELECT fingerprint, context_json FROM run_contexts WHERE fingerprint IN (?"+
			strings.Repeat(", ?", n-1)+")", args...); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// AllContexts returns every stored run context by fingerprint.
func (d *DB) AllContexts() (map[string]string, error) {
	out := map[string]string{}
	if ok, err := d.hasRuns(); err != nil || !ok {
		return out, err
	}
	return out, d.contextsInto(out, "SELECT fingerprint, context_json FROM run_contexts")
}

// contextsInto adds the (fingerprint, context_json) rows of query to out.
func (d *DB) contextsInto(out map[string]string, query string, args ...any) error {
	return eachRow(d, func(sc scanner) (kv [2]string, err error) {
		err = sc.Scan(&kv[0], &kv[1])
		return kv, err
	}, func(kv [2]string) error {
		out[kv[0]] = kv[1]
		return nil
	}, query, args...)
}

// ensureRuns creates the runs tables in the transaction unless present,
// and reports whether runs can be written (not with foreign tables).
func (tx *Tx) ensureRuns() (bool, error) {
	switch l, err := tx.d.runsLayout(); {
	case err != nil:
		return false, err
	case l == runsKnown:
		return true, nil
	case l == runsForeign:
		return false, nil
	}
	for _, ddl := range []string{createRunsTable, createContextsTable} {
		if _, err := tx.Exec(ddl); err != nil {
			return false, err
		}
	}
	tx.d.runs = runsUnseen // look again: another table of one of the names may have been there
	ok, err := tx.d.hasRuns()
	return ok, err
}

// PutRuns stores the runs of the record of key dated updateDate (nothing
// with foreign runs tables: see runsLayout).
func (tx *Tx) PutRuns(key, updateDate, runs string) error {
	if ok, err := tx.ensureRuns(); err != nil || !ok {
		return err
	}
	_, err := tx.exec(upsertRuns, runs, key, updateDate)
	return err
}

// PutContext stores a run context unless its fingerprint is stored.
func (tx *Tx) PutContext(fingerprint, contextJSON string) error {
	if ok, err := tx.ensureRuns(); err != nil || !ok {
		return err
	}
	_, err := tx.exec(insertContext, fingerprint, contextJSON)
	return err
}
