package sqlite

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tirastore/tirastore/core/storage"
)

// newOriginalDB creates a database as the original did: its CREATE TABLE
// statements (SchemaDDL) and meta rows, no index.
func newOriginalDB(t *testing.T, name string) (*DB, string) {
	t.Helper()
	db, path := openEmpty(t, name)
	err := db.Tx(func(tx *Tx) error {
		for _, ddl := range SchemaDDL() {
			if _, err := tx.Exec(ddl); err != nil {
				return err
			}
		}
		_, err := tx.Exec(`INSERT INTO db_meta (key, value) VALUES ('schema_version', '2'), ('cpu_model', 'cpu'),
  ('slurm_cpus', 'N/A'), ('created_at', '2026-01-01T00:00:00+00:00')`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return db, path
}

// master is sqlite_master, one "type name tbl_name sql" line per row, sorted.
func master(t *testing.T, db *DB) []string {
	t.Helper()
	rows, err := db.query("SELECT type, name, tbl_name, coalesce(sql, '<NULL>') FROM sqlite_master")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var typ, name, tbl, ddl string
		if err := rows.Scan(&typ, &name, &tbl, &ddl); err != nil {
			t.Fatal(err)
		}
		out = append(out, strings.Join([]string{typ, name, tbl, ddl}, " | "))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// withRow is rows (sorted) with row added, sorted.
func withRow(rows []string, row string) []string {
	out := append(slices.Clone(rows), row)
	slices.Sort(out)
	return out
}

// The index SQLite stores for IndexDDL, as sqlite_master holds it (without
// "IF NOT EXISTS" and the trailing ";\n").
const wantIndexRow = "index | idx_records_program_hash_creation_date | records | " +
	"CREATE INDEX idx_records_program_hash_creation_date\n    ON records (program_hash, creation_date)"

// Init's sqlite_master is the original's plus the index row and nothing
// else: the tables' rows (and their primary-key autoindexes) are the same.
func TestSchemaIsTheOriginalsPlusOneIndex(t *testing.T) {
	t.Parallel()
	ours, _ := newDB(t, "new.db")
	orig, _ := newOriginalDB(t, "orig.db")
	got, base := master(t, ours), master(t, orig)
	want := withRow(base, wantIndexRow)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("sqlite_master of Init:\n%s\nwant the original's plus the index:\n%s",
			strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(base) != 6 { // three tables, their primary keys' autoindexes
		t.Fatalf("original-style sqlite_master:\n%s", strings.Join(base, "\n"))
	}
}

// EnsureIndexes on a database the original created adds the index once; on
// one that has it, it writes nothing (the file is byte for byte the same,
// and it succeeds on a connection that refuses writes).
func TestEnsureIndexesOnOriginalDB(t *testing.T) {
	t.Parallel()
	db, path := newOriginalDB(t, "orig.db")
	fillPrograms(t, db, 1, 50)
	before := master(t, db)
	if created, err := db.EnsureIndexes(); err != nil || !created {
		t.Fatalf("first EnsureIndexes = %v, %v; want created", created, err)
	}
	after := master(t, db)
	if want := withRow(before, wantIndexRow); !reflect.DeepEqual(after, want) {
		t.Fatalf("after EnsureIndexes:\n%s\nwant:\n%s", strings.Join(after, "\n"), strings.Join(want, "\n"))
	}
	var check string
	if err := db.queryRow("PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check: %q, %v", check, err)
	}
	file, _ := os.ReadFile(path)
	if err := db.Pragma("PRAGMA query_only = ON"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if created, err := db.EnsureIndexes(); err != nil || created {
			t.Fatalf("EnsureIndexes with the index present = %v, %v; want a no-op", created, err)
		}
	}
	if again, _ := os.ReadFile(path); !bytes.Equal(file, again) {
		t.Fatal("EnsureIndexes changed the file although the index was present")
	}
	if _, err := os.Stat(path + "-journal"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("journal left: %v", err)
	}

	// Negative control: with the index missing, it does write (and so
	// fails on that connection).
	orig2, _ := newOriginalDB(t, "orig2.db")
	if err := orig2.Pragma("PRAGMA query_only = ON"); err != nil {
		t.Fatal(err)
	}
	if created, err := orig2.EnsureIndexes(); err == nil || created {
		t.Fatalf("EnsureIndexes of a missing index on a query-only connection = %v, %v; want an error", created, err)
	}

	// A database Init created has it already.
	ours, _ := newDB(t, "new.db")
	if created, err := ours.EnsureIndexes(); err != nil || created {
		t.Fatalf("EnsureIndexes after Init = %v, %v; want a no-op", created, err)
	}
}

// rec is one record as written, in write order.
type rec struct {
	key, hash, schedule, result, date string
}

// fillPrograms writes programs and records into db with creation_date ties,
// several programs of one name, programs without records, and keys,
// schedules and hashes whose orders differ from the write order (the rowid
// order). It returns the programs and the records in write order.
func fillPrograms(t *testing.T, db *DB, seed int64, perProgram int) ([]storage.Program, []rec) {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	var progs []storage.Program
	for i, name := range []string{"conv", "blur", "conv", "empty", "blur", "conv", "alone", "empty2"} {
		progs = append(progs, storage.Program{
			Hash: fmt.Sprintf("%064x", rng.Uint64()), Name: name,
			Source: fmt.Sprintf("// program %d\n%s", i, strings.Repeat("x", rng.Intn(5000))),
		})
	}
	var recs []rec
	err := db.Tx(func(tx *Tx) error {
		for _, p := range progs {
			if err := tx.PutProgram(p); err != nil {
				return err
			}
		}
		for i := range perProgram * 6 {
			p := progs[[]int{0, 1, 2, 4, 5, 6}[rng.Intn(6)]]
			r := rec{key: fmt.Sprintf("%064x", rng.Uint64()), hash: p.Hash,
				schedule: fmt.Sprintf("S%06d", rng.Intn(1000000)), result: fmt.Sprintf(`{"i":%d}`, i),
				// few distinct dates: many ties
				date: fmt.Sprintf("2026-01-01T00:00:0%d+00:00", rng.Intn(4))}
			if _, err := tx.PutRecord(&storage.Record{Key: r.key, ProgramHash: r.hash, Schedule: r.schedule,
				ResultJSON: r.result, Hostname: "h", Username: "u", CreationDate: r.date, UpdateDate: r.date}, false); err != nil {
				return err
			}
			recs = append(recs, r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return progs, recs
}

type programResults struct {
	P       storage.Program
	Results []storage.ScheduleResult
}

func eachProgram(t *testing.T, db *DB) []programResults {
	t.Helper()
	var out []programResults
	if err := db.EachProgram(func(p storage.Program, rs []storage.ScheduleResult) error {
		if rs == nil {
			t.Errorf("%s: nil results", p.Hash)
		}
		out = append(out, programResults{p, rs})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// perProgram is what export read before EachProgram: AllPrograms, then
// ProgramResults of each.
func perProgram(t *testing.T, db *DB) []programResults {
	t.Helper()
	all, err := db.AllPrograms()
	if err != nil {
		t.Fatal(err)
	}
	var out []programResults
	for _, p := range all {
		rs, err := db.ProgramResults(p.Hash)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, programResults{p, append([]storage.ScheduleResult{}, rs...)})
	}
	return out
}

func eachRecordOf(t *testing.T, db *DB, hash string) []*storage.Record {
	t.Helper()
	var out []*storage.Record
	if err := db.EachRecordOf(hash, func(r *storage.Record) error { out = append(out, r); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestEachProgramMatchesPerProgramReads: EachProgram returns what
// AllPrograms + ProgramResults return, and EachRecordOf what
// RecordsByProgram returns, on a database without the index (as the
// original creates it) and with it. Records of equal creation_date come in
// write (rowid) order from all of them, with or without the index: the
// order the export of the original has.
func TestEachProgramMatchesPerProgramReads(t *testing.T) {
	t.Parallel()
	orig, _ := newOriginalDB(t, "orig.db")
	ours, _ := newDB(t, "new.db")
	var outputs [][]programResults
	for _, c := range []struct {
		name string
		db   *DB
	}{{"original schema, no index", orig}, {"Init, with the index", ours}} {
		t.Run(c.name, func(t *testing.T) {
			db := c.db
			progs, recs := fillPrograms(t, db, 7, 400)
			// An overwrite keeps the row (and its rowid); a delete and
			// re-insert moves the record to the end of the rowid order.
			moved := recs[3]
			err := db.Tx(func(tx *Tx) error {
				if _, err := tx.PutRecord(&storage.Record{Key: recs[5].key, ProgramHash: recs[5].hash, Schedule: recs[5].schedule,
					ResultJSON: `{"over":1}`, Hostname: "h2", Username: "u2", CreationDate: "ignored", UpdateDate: "later"}, true); err != nil {
					return err
				}
				if _, err := tx.DeleteRecord(moved.key); err != nil {
					return err
				}
				_, err := tx.PutRecord(&storage.Record{Key: moved.key, ProgramHash: moved.hash, Schedule: moved.schedule,
					ResultJSON: moved.result, Hostname: "h", Username: "u", CreationDate: moved.date, UpdateDate: moved.date}, false)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			recs[5].result = `{"over":1}`
			recs = append(append(recs[:3:3], recs[4:]...), moved)

			got, old := eachProgram(t, db), perProgram(t, db)
			if !reflect.DeepEqual(got, old) {
				t.Fatalf("EachProgram differs from AllPrograms + ProgramResults")
			}
			outputs = append(outputs, got)

			// The expected order, from the write order alone: programs by
			// (name, hash), records by date, ties in write order.
			slices.SortStableFunc(recs, func(a, b rec) int { return strings.Compare(a.date, b.date) })
			want := slices.Clone(progs)
			slices.SortFunc(want, func(a, b storage.Program) int {
				return cmpOr(strings.Compare(a.Name, b.Name), strings.Compare(a.Hash, b.Hash))
			})
			if len(got) != len(want) {
				t.Fatalf("%d programs, want %d", len(got), len(want))
			}
			ties := 0
			for i, p := range want {
				if got[i].P != p {
					t.Fatalf("program %d: %+v, want %+v", i, got[i].P, p)
				}
				var rs []storage.ScheduleResult
				var keys []string
				for j, r := range recs {
					if r.hash == p.Hash {
						rs = append(rs, storage.ScheduleResult{Schedule: r.schedule, ResultJSON: r.result})
						keys = append(keys, r.key)
						if j > 0 && recs[j-1].date == r.date && recs[j-1].hash == r.hash {
							ties++
						}
					}
				}
				if len(rs) == 0 {
					rs = []storage.ScheduleResult{}
				}
				if !reflect.DeepEqual(got[i].Results, rs) {
					t.Fatalf("%s %s: results not in (creation_date, write order)", p.Name, p.Hash[56:])
				}

				viaEach := eachRecordOf(t, db, p.Hash)
				viaSlice, err := db.RecordsByProgram(p.Hash)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(viaEach, viaSlice) {
					t.Fatalf("%s: EachRecordOf differs from RecordsByProgram", p.Hash[56:])
				}
				var gotKeys []string
				for _, r := range viaEach {
					if r.ProgramName != p.Name || r.SourceCode != p.Source || r.ProgramHash != p.Hash {
						t.Fatalf("record %s joined with %q/%d bytes", r.Key, r.ProgramName, len(r.SourceCode))
					}
					gotKeys = append(gotKeys, r.Key)
				}
				if !slices.Equal(gotKeys, keys) {
					t.Fatalf("%s: EachRecordOf not in (creation_date, write order)", p.Hash[56:])
				}
			}
			if ties < 100 {
				t.Fatalf("only %d ties in creation_date: the test proves nothing", ties)
			}
			if n := len(eachRecordOf(t, db, "no such program")); n != 0 {
				t.Fatalf("EachRecordOf of a missing program: %d records", n)
			}
		})
	}
	if len(outputs) == 2 && !reflect.DeepEqual(outputs[0], outputs[1]) {
		t.Fatal("the same writes give different exports with and without the index")
	}
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// plan is the EXPLAIN QUERY PLAN of query: "parent detail" lines.
func plan(t *testing.T, db *DB, query string, args ...any) []string {
	t.Helper()
	rows, err := db.query("EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d %s", parent, detail))
	}
	return out
}

func mentions(lines []string, s string) bool {
	return slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, s) })
}

// The streaming reads use the index, and EachProgram's statement sorts no
// more than one program's records at a time: no sort of the whole result
// at the top level, only of the programs (inside the CTE) and of the last
// ORDER BY terms within one program. Also the old per-program reads find
// the index once it exists.
func TestStreamingReadsUseTheIndex(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t, "p.db")
	fillPrograms(t, db, 3, 50)
	idx := "USING INDEX " + RecordsProgramIndex
	if err := db.Tx(func(tx *Tx) error { _, err := tx.ensureRuns(); return err }); err != nil {
		t.Fatal(err)
	}

	// sortsWhole: a sort at the top level beyond the last ORDER BY terms
	// (those within one program).
	sortsWhole := func(p []string) bool {
		return slices.ContainsFunc(p, func(l string) bool {
			return strings.HasPrefix(l, "0 ") && strings.Contains(l, "TEMP B-TREE") && !strings.Contains(l, "LAST 2 TERMS")
		})
	}
	each := plan(t, db, eachProgramSQL[1])
	if !mentions(each, idx) || !mentions(each, "MATERIALIZE o") {
		t.Fatalf("EachProgram plan:\n%s", strings.Join(each, "\n"))
	}
	if sortsWhole(each) {
		t.Fatalf("EachProgram sorts more than one program's records:\n%s", strings.Join(each, "\n"))
	}
	// Control of sortsWhole: a read ordered by a column no index has.
	if p := plan(t, db, "SELECT schedule FROM records ORDER BY result_json"); !sortsWhole(p) {
		t.Fatalf("a sort of the whole result not seen:\n%s", strings.Join(p, "\n"))
	}
	of := plan(t, db, recordsOfSQL[1], "h")
	if !mentions(of, idx) || mentions(of, "TEMP B-TREE") {
		t.Fatalf("EachRecordOf plan:\n%s", strings.Join(of, "\n"))
	}
	for _, q := range []string{
		"SELECT schedule, result_json FROM records WHERE program_hash = ? ORDER BY creation_date",
		selectJoined[1] + " WHERE r.program_hash = ? ORDER BY r.creation_date",
	} {
		if p := plan(t, db, q, "h"); !mentions(p, idx) || mentions(p, "TEMP B-TREE") {
			t.Fatalf("%s:\n%s", q, strings.Join(p, "\n"))
		}
	}
	// Negative control: without the index the same checks fail.
	if _, err := db.exec("DROP INDEX " + RecordsProgramIndex); err != nil {
		t.Fatal(err)
	}
	if p := plan(t, db, eachProgramSQL[1]); mentions(p, idx) {
		t.Fatalf("EachProgram plan without the index mentions it:\n%s", strings.Join(p, "\n"))
	}
	if p := plan(t, db, recordsOfSQL[1], "h"); mentions(p, idx) || !mentions(p, "TEMP B-TREE") {
		t.Fatalf("EachRecordOf plan without the index:\n%s", strings.Join(p, "\n"))
	}
}

// Both streaming reads run in the caller's transaction when one is open
// (they see its writes), start their own otherwise, and stop at fn's
// first error, which they return as is.
func TestStreamingReadsTransactionsAndErrors(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t, "t.db")
	progs, _ := fillPrograms(t, db, 5, 20)
	stop := errors.New("stop")
	calls := 0
	if err := db.EachProgram(func(storage.Program, []storage.ScheduleResult) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("EachProgram with a failing fn: %v after %d calls", err, calls)
	}
	calls = 0
	if err := db.EachRecordOf(progs[0].Hash, func(*storage.Record) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("EachRecordOf with a failing fn: %v after %d calls", err, calls)
	}

	err := db.Tx(func(tx *Tx) error {
		p := storage.Program{Hash: "uncommitted", Name: "aaa-first", Source: "s"}
		if err := tx.PutProgram(p); err != nil {
			return err
		}
		if _, err := tx.PutRecord(&storage.Record{Key: "k", ProgramHash: p.Hash, Schedule: "S", ResultJSON: "{}",
			Hostname: "h", Username: "u", CreationDate: "d", UpdateDate: "d"}, false); err != nil {
			return err
		}
		var first storage.Program
		var n int
		if err := db.EachProgram(func(p storage.Program, rs []storage.ScheduleResult) error {
			if n == 0 {
				first = p
			}
			n++
			return nil
		}); err != nil {
			return err
		}
		if first.Hash != p.Hash || n != len(progs)+1 {
			t.Errorf("EachProgram inside Tx: first %+v of %d", first, n)
		}
		recs := 0
		if err := db.EachRecordOf(p.Hash, func(*storage.Record) error { recs++; return nil }); err != nil {
			return err
		}
		if recs != 1 {
			t.Errorf("EachRecordOf inside Tx: %d records", recs)
		}
		return stop // roll back
	})
	if !errors.Is(err, stop) {
		t.Fatal(err)
	}
	if err := db.Read(func() error {
		return db.EachProgram(func(p storage.Program, _ []storage.ScheduleResult) error {
			if p.Hash == "uncommitted" {
				t.Error("rolled-back program listed")
			}
			return nil
		})
	}); err != nil {
		t.Fatalf("EachProgram inside Read: %v", err)
	}
	// The connection is outside any transaction afterwards.
	if err := db.Tx(func(tx *Tx) error { return nil }); err != nil {
		t.Fatalf("a transaction after the reads: %v", err)
	}

	empty, _ := newDB(t, "empty.db")
	if err := empty.EachProgram(func(storage.Program, []storage.ScheduleResult) error {
		t.Error("fn called on an empty database")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// The reads export and get_program_records made before EachProgram and
// EachRecordOf, kept as the oracles of these tests.

// RecordsByProgram returns a program's records ordered by creation_date.
func (d *DB) RecordsByProgram(programHash string) ([]*storage.Record, error) {
	rows, err := d.query(selectJoined[0]+" WHERE r.program_hash = ? ORDER BY r.creation_date", programHash)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*storage.Record
	for rows.Next() {
		r, err := scanJoined(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// AllPrograms returns every program ordered by (program_name, program_hash),
// the export order.
func (d *DB) AllPrograms() ([]storage.Program, error) {
	return d.programs("SELECT program_hash, program_name, source_code FROM programs ORDER BY program_name, program_hash")
}

// ProgramResults returns a program's (schedule, result_json) pairs ordered by
// creation_date, as the export lists them.
func (d *DB) ProgramResults(programHash string) ([]storage.ScheduleResult, error) {
	rows, err := d.query("SELECT schedule, result_json FROM records WHERE program_hash = ? ORDER BY creation_date", programHash)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []storage.ScheduleResult
	for rows.Next() {
		var s storage.ScheduleResult
		if err := rows.Scan(&s.Schedule, &s.ResultJSON); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
