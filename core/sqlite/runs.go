package sqlite

import (
	"fmt"
	"strings"

	"github.com/tirastore/tirastore/core/runctx"
)

// The runs tables (storage "Runs"): record_runs, one row per record
// whose runs are its own (appended by a re-measurement, merged, or
// imported), record_run_batches, one row per record or record_many (the
// run its records were measured in), and run_contexts, one row per
// distinct run context. The first write of runs creates them (as the
// first claim creates the claims table): until then a database has the
// original's schema, and its reads find no runs.
//
// A record's runs row is keyed by the record's rowid, not by its key: the
// rowids of new records grow, so rows keyed by them are appended at the
// end of the table's b-tree, where rows keyed by the records' random keys
// went to a random page each. The row also holds the key and update_date
// of the record it describes, and a read takes it only if both match: an
// overwrite keeps the rowid and changes the date; a VACUUM by another
// tool may renumber the records' rowids (the table has no INTEGER
// PRIMARY KEY), which detaches runs (they are no longer found) but never
// attaches them to another record.
//
// A batch row holds, once, the run of the records a write inserted, the
// rowids first to last, dated by that write: what a per-record row would
// hold but for each record's count of times (runctx.RunsHead and
// RunTail), which a read takes from the record's own execution_times. A
// record_many of a thousand records writes one row instead of a
// thousand, which cost a third of the records' own write. A read takes
// the batch row whose range holds the record's rowid and whose date is
// the record's update_date, the one date of that write's transaction:
// after an overwrite (a new date) or a renumbering VACUUM that moved the
// record into another write's range, it does not match, as above. A
// record's own row, when it matches, comes first.
const (
	RunsTable       = "record_runs"        // a record's own runs, named in notices
	RunBatchesTable = "record_run_batches" // the run of a write's new records, named in notices
	ContextsTable   = "run_contexts"       // run contexts by fingerprint, named in notices
	createRunsTable = `CREATE TABLE IF NOT EXISTS record_runs (
    rec          INTEGER PRIMARY KEY,
    key          TEXT NOT NULL,
    update_date  TEXT NOT NULL,
    runs_json    TEXT NOT NULL
)`
	createBatchesTable = `CREATE TABLE IF NOT EXISTS record_run_batches (
    first        INTEGER PRIMARY KEY,
    last         INTEGER NOT NULL,
    update_date  TEXT NOT NULL,
    run_tail     TEXT NOT NULL
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
	// putBatch stores the run tail ?4 of the records of rowids ?1 to ?2
	// dated ?3. A row of the same first rowid is of records deleted since
	// (a rowid is reused only after the largest is deleted): replaced.
	putBatch      = "INSERT OR REPLACE INTO record_run_batches (first, last, update_date, run_tail) VALUES (?, ?, ?, ?)"
	insertContext = "INSERT OR IGNORE INTO run_contexts (fingerprint, context_json) VALUES (?, ?)"
	deleteRuns    = "DELETE FROM record_runs WHERE rec = (SELECT rowid FROM records WHERE key = ?)"
	// ownRunsOfR is the runs of the record r of its own record_runs row,
	// if that describes it.
	ownRunsOfR = "(SELECT u.runs_json FROM record_runs u WHERE u.rec = r.rowid AND u.key = r.key AND u.update_date = r.update_date)"
	// batchRunsOfR is the runs of the record r of the batch row whose
	// range holds it, if dated as r: RunsHead, r's count of times (its
	// result_json, valid JSON as the batch's writer wrote it, checked as
	// the date is), the tail.
	batchRunsOfR = `(SELECT '` + runctx.RunsHead + `' || coalesce(json_array_length(r.result_json, '$.execution_times'), 0) || b.run_tail
    FROM record_run_batches b
    WHERE b.first = (SELECT max(first) FROM record_run_batches WHERE first <= r.rowid)
      AND b.last >= r.rowid AND b.update_date = r.update_date AND json_valid(r.result_json, 2))`
)

// runsSQL is a read of records in its three forms: without the runs
// ([noRuns], for a database without the runs tables, whose records have
// none), with the records' own rows ([ownRuns], before the batches table
// exists), and with both ([batchRuns]).
type runsSQL [3]string

// withRuns makes a runsSQL of format, whose one %s is the runs column.
func withRuns(format string) runsSQL {
	return runsSQL{
		fmt.Sprintf(format, "''"),
		fmt.Sprintf(format, "coalesce("+ownRunsOfR+", '')"),
		fmt.Sprintf(format, "coalesce("+ownRunsOfR+", "+batchRunsOfR+", '')"),
	}
}

// where is q with clause appended to every form.
func (q runsSQL) where(clause string) runsSQL {
	for i := range q {
		q[i] += clause
	}
	return q
}

// pick is the form of q this database can run.
func (d *DB) pick(q runsSQL) (string, error) {
	l, err := d.runsLayout()
	switch l {
	case runsBatched:
		return q[2], err
	case runsKnown:
		return q[1], err
	}
	return q[0], err
}

// The states of a database's runs tables, as a DB last saw them.
const (
	runsUnseen  = iota // not looked at, or absent when last looked
	runsKnown          // record_runs and run_contexts of this engine's layout, no batches table
	runsBatched        // the three, of this engine's layout
	runsForeign        // a table of one of their names with other columns
)

// runsLayoutSQL counts the runs tables' columns of this engine's layout,
// all their columns, and the batches table's columns: equal and
// non-zero is runsKnown or, with the batches table's four, runsBatched.
const runsLayoutSQL = `SELECT
  (SELECT count(*) FROM pragma_table_info('record_runs') WHERE name IN ('rec', 'key', 'update_date', 'runs_json')) +
  (SELECT count(*) FROM pragma_table_info('run_contexts') WHERE name IN ('fingerprint', 'context_json')) +
  (SELECT count(*) FROM pragma_table_info('record_run_batches') WHERE name IN ('first', 'last', 'update_date', 'run_tail')),
  (SELECT count(*) FROM pragma_table_info('record_runs')) + (SELECT count(*) FROM pragma_table_info('run_contexts')) +
  (SELECT count(*) FROM pragma_table_info('record_run_batches')),
  (SELECT count(*) FROM pragma_table_info('record_run_batches'))`

// runsLayout looks at the runs tables: absent (runsUnseen), of this
// engine's layout with or without the batches table, or otherwise
// foreign: a table of another shape (a version of this engine before
// the layout settled, or one that anyone who may write the file
// planted), whose reads and writes would fail every lookup and record.
// A foreign table only switches runs off: reads find none, writes store
// none. Once batched or foreign the state is remembered (no writer drops
// a table) until a transaction rolls back (which may have created them);
// until then every read looks again, since another process may create
// them (the batches table too: a database whose runs an earlier version
// wrote gains it at this version's first write) at any time.
func (d *DB) runsLayout() (int, error) {
	if d.runs == runsBatched || d.runs == runsForeign {
		return d.runs, nil
	}
	var ours, all, batches int
	if err := d.queryRow(runsLayoutSQL).Scan(&ours, &all, &batches); err != nil {
		return runsUnseen, err
	}
	switch {
	case all == 0:
		d.runs = runsUnseen
	case ours == 6 && all == 6 && batches == 0:
		d.runs = runsKnown
	case ours == 10 && all == 10:
		d.runs = runsBatched
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
	return l == runsKnown || l == runsBatched, err
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
	case l == runsBatched:
		return true, nil
	case l == runsForeign:
		return false, nil
	}
	for _, ddl := range []string{createRunsTable, createBatchesTable, createContextsTable} {
		if _, err := tx.Exec(ddl); err != nil {
			return false, err
		}
	}
	tx.d.runs = runsUnseen // look again: another table of one of the names may have been there
	l, err := tx.d.runsLayout()
	return l == runsBatched, err
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

// PutRunBatch stores the run tail of the records of rowids first to
// last, dated updateDate (nothing with foreign runs tables).
func (tx *Tx) PutRunBatch(first, last int64, updateDate, tail string) error {
	if ok, err := tx.ensureRuns(); err != nil || !ok {
		return err
	}
	_, err := tx.exec(putBatch, first, last, updateDate, tail)
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
