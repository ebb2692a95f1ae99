package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tirastore/tirastore/core/limits"
	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/tuning"
)

// RecordColumns are the records table's columns (the original's schema,
// createRecords), in the order of RecordFields: every statement that lists
// them is built from this list, core/postgres's too (its table has the same
// columns, and a backup copies them into this one).
var RecordColumns = []string{"key", "program_hash", "schedule", "result_json", "hostname", "username",
	"creation_date", "update_date", "source_project"}

// RecordFields are the fields of r in the order of RecordColumns: where a
// row of them is scanned.
func RecordFields(r *storage.Record) []any {
	return []any{&r.Key, &r.ProgramHash, &r.Schedule, &r.ResultJSON, &r.Hostname, &r.Username,
		&r.CreationDate, &r.UpdateDate, &r.SourceProject}
}

// RecordValues is r as the arguments of a statement with a parameter per
// column of RecordColumns, in their order.
func RecordValues(r *storage.Record) []any {
	args := RecordFields(r)
	for i, p := range args {
		args[i] = *p.(*string) // every column is text
	}
	return args
}

// UpsertSet is an upsert's SET clause for columns (ON CONFLICT ... DO
// UPDATE SET, which SQLite and PostgreSQL share): each column but keep
// gets the inserted row's value (excluded).
func UpsertSet(columns []string, keep ...string) string {
	var set []string
	for _, c := range columns {
		if !slices.Contains(keep, c) {
			set = append(set, c+" = excluded."+c)
		}
	}
	return strings.Join(set, ", ")
}

var (
	// recordColumns and recordColumnsOfR list the columns, bare and of
	// the alias r.
	recordColumns    = strings.Join(RecordColumns, ", ")
	recordColumnsOfR = "r." + strings.Join(RecordColumns, ", r.")
	// recordOverwrite is what an overwrite replaces: every column but the
	// key and creation_date (see PutRecord).
	recordOverwrite = UpsertSet(RecordColumns, "key", "creation_date")
)

// The joined read is an inner join, as in the original: a record whose
// program row is missing is not found.
const joinPrograms = `
  FROM records r JOIN programs p ON r.program_hash = p.program_hash`

var (
	selectJoined = withRuns("SELECT " + recordColumnsOfR + ", p.program_name, p.source_code, %s" + joinPrograms)
	// selectLookup keeps the inner join, which the programs table's key
	// index alone answers, but not the program's name and source: a lookup
	// returns neither, and a source (often tens of kilobytes, in overflow
	// pages) would otherwise be read and copied for every record, and kept
	// with every entry of the store's result cache. It reads the record's
	// runs (runs.go), which the cache keeps with it.
	selectLookup = withRuns("SELECT " + recordColumnsOfR + ", '', '', %s" + joinPrograms)
	lookupSQL    = selectLookup.where(" WHERE r.key = ?")
	// lookupProgramSQL is LookupProgram's read: every record of a program
	// as lookup reads each (the inner join, no name or source).
	lookupProgramSQL = selectLookup.where(" WHERE r.program_hash = ?")
	// recordsOfSQL is EachRecordOf's read of a program's records.
	recordsOfSQL = withRuns("SELECT " + recordColumnsOfR + `, %s
  FROM records r WHERE r.program_hash = ? ORDER BY r.creation_date, r.rowid`)
)

// recordsAfterSQL is RecordsAfter's read: the next rows by rowid, which
// the table's own b-tree is ordered by, with the program's name.
var recordsAfterSQL = "SELECT r.rowid, " + recordColumnsOfR + ", p.program_name" + joinPrograms + `
  WHERE r.rowid > ? ORDER BY r.rowid LIMIT ?`

// RecordsAfter lists up to limit records after the rowid after, by rowid,
// with their program's name (storage.Reader).
func (d *DB) RecordsAfter(after int64, limit int) ([]storage.SeqRecord, error) {
	return allRows(d, func(sc scanner) (r storage.SeqRecord, err error) {
		err = sc.Scan(append(append([]any{&r.Seq}, RecordFields(&r.Record)...), &r.ProgramName)...)
		return r, err
	}, recordsAfterSQL, after, limit)
}

func scanJoined(sc scanner) (*storage.Record, error) {
	var r storage.Record
	err := sc.Scan(append(RecordFields(&r), &r.ProgramName, &r.SourceCode, &r.Runs)...)
	return &r, err
}

// getRecordSQL reads one record joined with its program (inner join, as in
// the original), by key: what get returns, and the original's lookup read,
// with the record's runs.
var getRecordSQL = selectJoined.where(" WHERE r.key = ?")

// Get returns the record with its program, or nil when there is none.
func (d *DB) Get(key string) (*storage.Record, error) { return d.getRecord(getRecordSQL, key) }

// Lookup is Get without the program's name and source (see selectLookup):
// nil when the record or its program row is missing.
func (d *DB) Lookup(key string) (*storage.Record, error) { return d.getRecord(lookupSQL, key) }

// getRecord runs q, one of the by-key reads, for key: at once on a
// database known to have the runs tables, else in one read transaction
// with the look for them (pick), so that the read costs one transaction
// either way.
func (d *DB) getRecord(q runsSQL, key string) (rec *storage.Record, err error) {
	if d.runs == runsKnown {
		return d.getRecordBy(q[1], key)
	}
	err = d.inRead(func() error {
		query, err := d.pick(q)
		if err == nil {
			rec, err = d.getRecordBy(query, key)
		}
		return err
	})
	return rec, err
}

// getRecordBy runs query for key.
func (d *DB) getRecordBy(query, key string) (*storage.Record, error) {
	st, err := d.stmt(query)
	if err != nil {
		return nil, err
	}
	r, err := scanJoined(st.QueryRow(key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

// LookupProgram calls fn for every record of a program, each as Lookup
// returns it (none when the program row is missing), in one read.
func (d *DB) LookupProgram(programHash string, fn func(*storage.Record) error) error {
	return d.inRead(func() error {
		query, err := d.pick(lookupProgramSQL)
		if err != nil {
			return err
		}
		return eachRow(d, scanJoined, fn, query, programHash)
	})
}

// CountRecordsOf counts a program's records (from the program_hash index).
func (d *DB) CountRecordsOf(programHash string) (int64, error) {
	return d.count("SELECT COUNT(*) FROM records WHERE program_hash = ?", programHash)
}

// Contains reports whether a record exists (no join, as in the original).
func (d *DB) Contains(key string) (bool, error) {
	st, err := d.stmt("SELECT 1 FROM records WHERE key = ?")
	if err != nil {
		return false, err
	}
	var one int
	err = st.QueryRow(key).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// ProgramsAfter lists up to limit programs that come after (name, hash)
// in (program_name, program_hash) order.
func (d *DB) ProgramsAfter(name, hash string, limit int) ([]storage.Program, error) {
	return d.programs(`SELECT program_hash, program_name, source_code FROM programs
  WHERE (program_name, program_hash) > (?, ?) ORDER BY program_name, program_hash LIMIT ?`, name, hash, limit)
}

// ProgramsByName returns every source version recorded under a name,
// ordered by program_hash.
func (d *DB) ProgramsByName(name string) ([]storage.Program, error) {
	return d.programs("SELECT program_hash, program_name, source_code FROM programs WHERE program_name = ? ORDER BY program_hash", name)
}

func (d *DB) programs(query string, args ...any) ([]storage.Program, error) {
	var out []storage.Program
	err := eachRow(d, func(sc scanner) (p storage.Program, err error) {
		err = sc.Scan(&p.Hash, &p.Name, &p.Source)
		return p, err
	}, func(p storage.Program) error {
		out = append(out, p)
		return nil
	}, query, args...)
	return out, err
}

// eachProgramSQL lists every program in export order, each followed by its
// records in creation order, as one statement: the programs' (name, hash,
// rowid), few and small, are sorted first (the MATERIALIZED CTE), then each
// program's records are read from RecordsProgramIndex in its order. The
// query plan then sorts nothing but the programs: the records of one
// program at a time at most (SQLite cannot prove the CTE's rows distinct,
// so it keeps a sort of the last ORDER BY terms within each program, over
// rows that the index already delivers in that order). The ORDER BY, not
// the plan, defines the order: without the index the result is the same,
// read through an automatic index SQLite builds for the statement.
//
// Ties in creation_date are in rowid order, the order of the per-program
// "ORDER BY creation_date" of ProgramResults with and without the index
// (TestEachProgramMatchesPerProgramReads). A program without records comes
// once, with r.rowid NULL. The source is not in this statement: selected
// here it would be read and copied once per record.
var eachProgramSQL = withRuns(`WITH o(hash, name, id) AS MATERIALIZED (
    SELECT program_hash, program_name, rowid FROM programs ORDER BY program_name, program_hash, rowid)
SELECT o.id, o.hash, o.name, r.rowid IS NOT NULL, coalesce(r.schedule, ''), coalesce(r.result_json, ''), %s
  FROM o LEFT JOIN records r ON r.program_hash = o.hash
  ORDER BY o.name, o.hash, o.id, r.creation_date, r.rowid`)

// programSourceSQL reads the source of the program of eachProgramSQL's
// current row, once per program.
const programSourceSQL = "SELECT source_code FROM programs WHERE rowid = ?"

// EachProgram calls fn for every program in export order (program_name,
// then program_hash) with its (schedule, result_json) pairs ordered by
// creation_date, ties in rowid order: what AllPrograms and then
// ProgramResults of each program return, from one ordered scan (see
// eachProgramSQL) inside one read transaction (the caller's, if one is
// open). Rows stream from the cursor and only one program's results are in
// memory at a time; a program without records comes with an empty,
// non-nil list. results is fn's to keep. An error from fn stops the scan
// and is returned as is.
func (d *DB) EachProgram(fn func(p storage.Program, results []storage.ScheduleResult) error) error {
	return d.inRead(func() error {
		src, err := d.stmt(programSourceSQL)
		if err != nil {
			return err
		}
		query, err := d.pick(eachProgramSQL)
		if err != nil {
			return err
		}
		rows, err := d.query(query)
		if err != nil {
			return err
		}
		defer rows.Close()
		var (
			cur     storage.Program
			curID   int64
			started bool
			results []storage.ScheduleResult
		)
		for rows.Next() {
			var (
				id  int64
				p   storage.Program
				has bool
				sr  storage.ScheduleResult
			)
			if err := rows.Scan(&id, &p.Hash, &p.Name, &has, &sr.Schedule, &sr.ResultJSON, &sr.Runs); err != nil {
				return err
			}
			if !started || id != curID {
				if started {
					if err := fn(cur, results); err != nil {
						return err
					}
				}
				if err := src.QueryRow(id).Scan(&p.Source); err != nil {
					return err
				}
				cur, curID, started = p, id, true
				results = make([]storage.ScheduleResult, 0, max(cap(results), 1))
			}
			if has {
				results = append(results, sr)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if started {
			return fn(cur, results)
		}
		return nil
	})
}

// EachRecordOf calls fn for every record of a program, joined with its
// program row, ordered by creation_date, ties in rowid order: what
// RecordsByProgram returns, streamed from the cursor inside one read
// transaction (the caller's, if one is open). The program's name and source
// are read once and shared by every record rather than read per row. A
// program whose row is missing has no records here (the inner join of
// RecordsByProgram). Each *Record is fn's to keep; an error from fn stops
// the scan and is returned as is.
func (d *DB) EachRecordOf(programHash string, fn func(*storage.Record) error) error {
	return d.inRead(func() error {
		var name, source string
		err := d.queryRow("SELECT program_name, source_code FROM programs WHERE program_hash = ?", programHash).Scan(&name, &source)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		query, err := d.pick(recordsOfSQL)
		if err != nil {
			return err
		}
		return eachRow(d, func(sc scanner) (*storage.Record, error) {
			r := &storage.Record{ProgramName: name, SourceCode: source}
			return r, sc.Scan(append(RecordFields(r), &r.Runs)...)
		}, fn, query, programHash)
	})
}

// PutProgram inserts a program unless its hash is present: the first name
// stored for a hash wins. A large source is not copied to be bound (see
// "Large texts").
func (tx *Tx) PutProgram(p storage.Program) error {
	if len(p.Source) >= tuning.UncopiedSource {
		return withText(p.Source, func(token int64, ok bool) error {
			var err error
			if ok {
				_, err = tx.exec(insertProgramText, p.Hash, p.Name, token)
			} else {
				_, err = tx.exec(insertProgram, p.Hash, p.Name, p.Source)
			}
			return err
		})
	}
	_, err := tx.exec(insertProgram, p.Hash, p.Name, p.Source)
	return err
}

// One statement per record: insert-if-absent, or with overwrite an upsert
// that replaces program_hash, schedule, result_json, hostname, username,
// update_date and source_project and keeps creation_date (the original's
// SELECT, then UPDATE or INSERT, in one step). OR IGNORE resolves only the
// primary-key conflict here: no column is ever NULL, and foreign-key
// violations are not ignorable.
const (
	insertProgram     = "INSERT OR IGNORE INTO programs (program_hash, program_name, source_code) VALUES (?, ?, ?)"
	insertProgramText = "INSERT OR IGNORE INTO programs (program_hash, program_name, source_code) VALUES (?, ?, tirastore_text(?))"
	deleteRecord      = "DELETE FROM records WHERE key = ?"
)

var (
	insertRecord = "INSERT OR IGNORE INTO records (" + recordColumns + ") VALUES (" + recordParams + ")"
	upsertRecord = "INSERT INTO records (" + recordColumns + ") VALUES (" + recordParams + `)
  ON CONFLICT(key) DO UPDATE SET ` + recordOverwrite
	recordParams = strings.Repeat("?, ", len(RecordColumns)-1) + "?"
)

// PutRecord inserts r, or with overwrite replaces an existing row's
// program_hash, schedule, result_json, hostname, username, update_date and
// source_project while keeping its creation_date. It reports whether a
// write happened. r.CreationDate is used as both dates of a new row.
func (tx *Tx) PutRecord(r *storage.Record, overwrite bool) (bool, error) {
	q := insertRecord
	if overwrite {
		q = upsertRecord
	}
	return tx.changed(q, RecordValues(r)...)
}

// InsertRecord writes r unless its key is stored, and returns its rowid
// and whether it wrote (PutRecord without overwrite, for a write that
// stores its records' run once: PutRunBatch).
func (tx *Tx) InsertRecord(r *storage.Record) (rowid int64, inserted bool, err error) {
	res, err := tx.exec(insertRecord, RecordValues(r)...)
	if err != nil {
		return 0, false, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return 0, false, err
	}
	rowid, err = res.LastInsertId()
	return rowid, err == nil, err
}

// DeleteRecord removes a record, and its runs, and reports whether it
// existed.
func (tx *Tx) DeleteRecord(key string) (bool, error) {
	if ok, err := tx.d.hasRuns(); err != nil {
		return false, err
	} else if ok {
		if _, err := tx.exec(deleteRuns, key); err != nil {
			return false, err
		}
	}
	return tx.changed(deleteRecord, key)
}

// CountRecords is the number of rows in records.
func (d *DB) CountRecords() (int64, error) { return d.count("SELECT COUNT(*) FROM records") }

// CountPrograms is the number of rows in programs.
func (d *DB) CountPrograms() (int64, error) { return d.count("SELECT COUNT(*) FROM programs") }

func (d *DB) count(query string, args ...any) (n int64, err error) {
	err = d.queryRow(query, args...).Scan(&n)
	return n, err
}

// legalOf is the original's json_extract(result_json, '$.is_legal') (1, 0
// or NULL; SQLite accepts the NaN and Infinity tokens of Python's JSON),
// NULL for a result_json that is not JSON, where json_extract would fail
// the whole statement. CASE evaluates json_extract only for valid JSON
// (JSON5, the text json_extract accepts).
const legalOf = "CASE WHEN json_valid(%[1]s, 2) THEN json_extract(%[1]s, '$.is_legal') END"

// unreadable is 1 for a result_json that is not JSON or not a JSON object
// (what core.ParseResult refuses, so what the export leaves out), else 0.
const unreadable = "CASE WHEN json_valid(result_json, 2) THEN json_type(result_json) <> 'object' ELSE 1 END"

// Summary computes the counts with the original's queries, a record whose
// result_json is not JSON or not an object counted as Unreadable.
func (d *DB) Summary() (*storage.Summary, error) {
	var s storage.Summary
	var err error
	if err = d.queryRow(fmt.Sprintf(`SELECT COUNT(*), COALESCE(SUM(l = 1), 0), COALESCE(SUM(l = 0), 0),
       COALESCE(SUM(%s), 0)
  FROM (SELECT result_json, %s AS l FROM records)`, unreadable, fmt.Sprintf(legalOf, "result_json"))).Scan(
		&s.Total, &s.Legal, &s.Illegal, &s.Unreadable); err != nil {
		return nil, err
	}
	if s.Programs, err = d.CountPrograms(); err != nil {
		return nil, err
	}
	if s.SourceProjects, err = d.strings("SELECT DISTINCT source_project FROM records"); err != nil {
		return nil, err
	}
	if s.Users, err = d.strings("SELECT DISTINCT username FROM records"); err != nil {
		return nil, err
	}
	return &s, nil
}

// ProgramSummaries counts the records of every program in one grouped
// scan, by name then hash.
func (d *DB) ProgramSummaries() ([]storage.ProgramSummary, error) {
	return allRows(d, func(sc scanner) (p storage.ProgramSummary, err error) {
		err = sc.Scan(&p.Hash, &p.Name, &p.Records, &p.Legal, &p.FirstDate, &p.LastDate)
		return p, err
	}, `SELECT p.program_hash, p.program_name, COUNT(r.key),
       COALESCE(SUM(`+fmt.Sprintf(legalOf, "r.result_json")+` = 1), 0),
       COALESCE(MIN(r.creation_date), ''), COALESCE(MAX(r.creation_date), '')
  FROM programs p LEFT JOIN records r ON r.program_hash = p.program_hash
  GROUP BY p.program_hash ORDER BY p.program_name, p.program_hash`)
}

// CheckTables runs PRAGMA integrity_check (up to 100 messages) and counts
// orphan records and records whose result_json is not JSON.
func (d *DB) CheckTables() (*storage.TableCheck, error) {
	var c storage.TableCheck
	var err error
	if c.Integrity, err = d.strings("PRAGMA integrity_check(100)"); err != nil {
		return nil, err
	}
	if len(c.Integrity) != 1 || c.Integrity[0] != "ok" {
		c.Orphans, c.BadResults, c.DeepCount = -1, -1, -1 // not counted: reads of a damaged file may fail anywhere
		return &c, nil
	}
	if c.Orphans, err = d.count(`SELECT COUNT(*) FROM records r
  WHERE NOT EXISTS (SELECT 1 FROM programs p WHERE p.program_hash = r.program_hash)`); err != nil {
		return nil, err
	}
	// As JSON5 text: the NaN and Infinity of the original's results pass.
	if c.BadResults, err = d.count("SELECT COUNT(*) FROM records WHERE " + unreadable); err != nil {
		return nil, err
	}
	if err := d.checkDepths(&c); err != nil {
		return nil, err
	}
	return &c, nil
}

// checkDepths counts the stored values nested deeper than
// limits.MaxValueDepth. Each level takes two characters, so only values
// longer than twice the limit are read (a canonical result_json, the
// common case, is shorter unless it holds dozens of times).
func (d *DB) checkDepths(c *storage.TableCheck) error {
	if err := d.scanDepths(c, "record", "SELECT '', key, result_json FROM records WHERE length(result_json) > ? ORDER BY rowid"); err != nil {
		return err
	}
	l, err := d.configLayout()
	if err != nil || l == configNone {
		return err
	}
	return d.scanDepths(c, "config", "SELECT namespace, key, value_json FROM "+l.source()+
		" WHERE length(value_json) > ?"+l.order())
}

// scanDepths is checkDepths of the values of kind that query selects
// (namespace, key, text), those longer than twice the limit.
func (d *DB) scanDepths(c *storage.TableCheck, kind, query string) error {
	return eachRow(d, func(sc scanner) (v [3]string, err error) {
		err = sc.Scan(&v[0], &v[1], &v[2])
		return v, err
	}, func(v [3]string) error {
		ns, key, text := v[0], v[1], v[2]
		if kind == "config" {
			key = storage.ConfigName(ns, key)
		}
		c.CheckDepth(kind, key, text)
		return nil
	}, query, 2*limits.MaxValueDepth)
}

// Keys lists record keys by creation_date; limit > 0 paginates.
func (d *DB) Keys(limit, offset int64) ([]string, error) {
	if limit > 0 {
		return d.strings("SELECT key FROM records ORDER BY creation_date LIMIT ? OFFSET ?", limit, offset)
	}
	return d.strings("SELECT key FROM records ORDER BY creation_date")
}

func (d *DB) strings(query string, args ...any) ([]string, error) {
	return allRows(d, func(sc scanner) (s string, err error) {
		err = sc.Scan(&s)
		return s, err
	}, query, args...)
}
