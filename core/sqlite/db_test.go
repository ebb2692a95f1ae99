package sqlite

import (
	"errors"
	"os"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"

	"github.com/tirastore/tirastore/core/storage"
)

// openEmpty opens a new empty database file, closed when the test ends.
func openEmpty(t *testing.T, name string) (*DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	db, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, path
}

// newDB creates a database as this engine does (Init).
func newDB(t *testing.T, name string) (*DB, string) {
	t.Helper()
	db, path := openEmpty(t, name)
	if err := db.Init("cpu", "N/A", "2026-01-01T00:00:00+00:00"); err != nil {
		t.Fatal(err)
	}
	return db, path
}

// The stored DDL must be the original's, so that sqlite_master of a new
// database is identical whichever library created it. SQLite drops
// "IF NOT EXISTS" and the trailing ";\n" when it stores the statement.
func TestSchemaTextIsTheOriginals(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t, "c.db")
	want := map[string]string{
		"db_meta":  "CREATE TABLE db_meta (\n    key   TEXT PRIMARY KEY,\n    value TEXT NOT NULL\n)",
		"programs": "CREATE TABLE programs (\n    program_hash    TEXT PRIMARY KEY,\n    program_name    TEXT NOT NULL,\n    source_code     TEXT NOT NULL\n)",
	}
	rows, err := db.query("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name, ddl string
		if err := rows.Scan(&name, &ddl); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
		if w, ok := want[name]; ok && ddl != w {
			t.Errorf("%s: got %q want %q", name, ddl, w)
		}
		if name == "records" && !strings.Contains(ddl, "program_hash       TEXT NOT NULL REFERENCES programs(program_hash),") {
			t.Errorf("records DDL: %q", ddl)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"db_meta", "programs", "records"}) {
		t.Fatalf("tables %v, want the original's three", names)
	}
	for key, val := range map[string]string{"schema_version": "2", "cpu_model": "cpu", "slurm_cpus": "N/A"} {
		if v, ok, err := db.Meta(key); v != val || !ok || err != nil {
			t.Errorf("meta %s = %q %v %v", key, v, ok, err)
		}
	}
	// Init is idempotent and keeps the first values.
	if err := db.Init("other", "8", "x"); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := db.Meta("cpu_model"); v != "cpu" {
		t.Errorf("Init overwrote cpu_model: %q", v)
	}
}

func TestPutRecordOverwriteKeepsCreationDate(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t, "c.db")
	put := func(result, stamp string, overwrite bool) bool {
		var wrote bool
		err := db.Tx(func(tx *Tx) (err error) {
			if err = tx.PutProgram(storage.Program{Hash: "h", Name: "first", Source: "s"}); err != nil {
				return err
			}
			wrote, err = tx.PutRecord(&storage.Record{Key: "k", ProgramHash: "h", Schedule: "S", ResultJSON: result,
				Hostname: "n", Username: "u", CreationDate: stamp, UpdateDate: stamp, SourceProject: "p"}, overwrite)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return wrote
	}
	if !put("{}", "t1", false) || put("{}", "t2", false) || !put(`{"x":1}`, "t3", true) {
		t.Fatal("unexpected write results")
	}
	r, err := db.Get("k")
	if err != nil || r == nil {
		t.Fatal(r, err)
	}
	if r.CreationDate != "t1" || r.UpdateDate != "t3" || r.ResultJSON != `{"x":1}` || r.ProgramName != "first" {
		t.Fatalf("%+v", r)
	}
	if err := db.Tx(func(tx *Tx) error {
		_, err := tx.PutRecord(&storage.Record{Key: "k2", ProgramHash: "missing"}, false)
		return err
	}); !IsConstraint(err) {
		t.Fatalf("foreign key not enforced: %v", err)
	}
}

// A transaction is statements on the DB's one connection (see Tx): an error
// from fn, a COMMIT that fails and a panic in fn must all leave nothing
// written and the connection outside any transaction, ready for the next.
func TestTxRollsBack(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t, "tx.db")
	put := func(tx *Tx, key, program string) error {
		_, err := tx.PutRecord(&storage.Record{Key: key, ProgramHash: program, Schedule: "S", ResultJSON: "{}",
			Hostname: "n", Username: "u", CreationDate: "t", UpdateDate: "t"}, false)
		return err
	}
	boom := errors.New("boom")
	err := db.Tx(func(tx *Tx) error {
		if err := tx.PutProgram(storage.Program{Hash: "h", Name: "p", Source: "s"}); err != nil {
			return err
		}
		if err := put(tx, "k1", "h"); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Tx: %v, want fn's error", err)
	}
	// A deferred foreign-key violation fails at COMMIT, and SQLite keeps
	// the transaction open after that failure.
	err = db.Tx(func(tx *Tx) error {
		if _, err := tx.Exec("PRAGMA defer_foreign_keys = ON"); err != nil {
			return err
		}
		return put(tx, "k2", "missing")
	})
	if !IsConstraint(err) {
		t.Fatalf("COMMIT of a deferred FK violation: %v, want a constraint error", err)
	}
	if err := db.Tx(func(tx *Tx) error {
		if err := tx.PutProgram(storage.Program{Hash: "h", Name: "p", Source: "s"}); err != nil {
			return err
		}
		return put(tx, "k3", "h")
	}); err != nil {
		t.Fatalf("the next transaction: %v", err)
	}
	// fn panics: the transaction is rolled back before the panic leaves Tx.
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not reach the caller")
			}
		}()
		db.Tx(func(tx *Tx) error {
			if err := put(tx, "k4", "h"); err != nil {
				return err
			}
			panic("bug")
		})
	}()
	if err := db.Tx(func(tx *Tx) error { return put(tx, "k5", "h") }); err != nil {
		t.Fatalf("the transaction after a panic: %v", err)
	}
	for key, want := range map[string]bool{"k1": false, "k2": false, "k3": true, "k4": false, "k5": true} {
		if ok, err := db.Contains(key); err != nil || ok != want {
			t.Errorf("Contains(%s) = %v, %v; want %v", key, ok, err, want)
		}
	}
}

// Transactions and reads start no goroutine (database/sql's transactions
// start one each; see Tx): an operation must not wake a second thread.
// Not parallel: it counts the goroutines the whole process creates.
func TestTxStartsNoGoroutine(t *testing.T) {
	db, _ := newDB(t, "g.db")
	sample := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	created := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	const n = 100
	before := created()
	for i := range n {
		if err := db.Tx(func(tx *Tx) error {
			return tx.PutProgram(storage.Program{Hash: string(rune('a' + i%26)), Name: "p", Source: "s"})
		}); err != nil {
			t.Fatal(err)
		}
		if err := db.Read(func() error { _, err := db.Lookup("k"); return err }); err != nil {
			t.Fatal(err)
		}
	}
	// A few goroutines may come from elsewhere in the process (the race
	// detector, the runtime); one per operation may not.
	if got := created() - before; got > n/10 {
		t.Fatalf("%d goroutines created by %d transactions and %d reads", got, n, n)
	}
}

// File names with URI metacharacters must name the file itself.
func TestOpenOddFileNames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"a?b.db", "a#b.db", "a%20b.db", "sp ace.db", "ünï.db"} {
		_, path := newDB(t, name)
		if _, err := os.Stat(path); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		entries, _ := os.ReadDir(filepath.Dir(path))
		if len(entries) != 1 {
			t.Errorf("%s: stray files %v", name, entries)
		}
	}
}

func TestNotADatabaseIsClassified(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.db")
	os.WriteFile(path, []byte(strings.Repeat("garbage!", 512)), 0o666)
	db, err := Open(path, nil)
	if err == nil {
		_, err = db.HasTables()
		db.Close()
	}
	if !IsNotDatabase(err) {
		t.Fatalf("got %v", err)
	}
}

// TestLookupReads: Lookup and ProgramChunk return what Get returns of a
// record except the program's name and source, which they do not read;
// they keep the inner join (a record whose program row is missing, which
// only a database written with foreign keys off can hold, is not found by
// them, as by Get, while Contains, which never joined, finds it).
func TestLookupReads(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t, "l.db")
	long := strings.Repeat("int x; // a long program source\n", 2000)
	err := db.Tx(func(tx *Tx) error {
		if err := tx.PutProgram(storage.Program{Hash: "h", Name: "prog", Source: long}); err != nil {
			return err
		}
		for _, k := range []string{"k1", "k2"} {
			if _, err := tx.PutRecord(&storage.Record{Key: k, ProgramHash: "h", Schedule: "S-" + k, ResultJSON: "{}",
				Hostname: "n", Username: "u", CreationDate: "c", UpdateDate: "d", SourceProject: "p"}, false); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	full, err := db.Get("k1")
	if err != nil || full == nil || full.SourceCode != long || full.ProgramName != "prog" {
		t.Fatalf("Get: %v, %v", full, err)
	}
	want := *full
	want.ProgramName, want.SourceCode = "", ""
	got, err := db.Lookup("k1")
	if err != nil || got == nil || *got != want {
		t.Fatalf("Lookup = %+v, %v; want %+v", got, err, want)
	}
	var inTx *storage.Record
	if err := db.Read(func() (err error) { inTx, err = db.Lookup("k1"); return err }); err != nil || inTx == nil || *inTx != want {
		t.Fatalf("Reader.Lookup = %+v, %v; want %+v", inTx, err, want)
	}

	// An orphan record: its program row is gone.
	if err := db.Pragma("PRAGMA foreign_keys=OFF"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.exec("INSERT INTO records VALUES ('k3', 'gone', 'S', '{}', 'n', 'u', 'c', 'd', 'p')"); err != nil {
		t.Fatal(err)
	}
	if r, err := db.Get("k3"); err != nil || r != nil {
		t.Fatalf("Get of an orphan: %+v, %v; want nil", r, err)
	}
	if r, err := db.Lookup("k3"); err != nil || r != nil {
		t.Fatalf("Lookup of an orphan: %+v, %v; want nil", r, err)
	}
	if ok, err := db.Contains("k3"); err != nil || !ok {
		t.Fatalf("Contains of an orphan: %v, %v; want true", ok, err)
	}
}

// TestRecordColumnsAreTheTables: the one list every records statement is
// built from (RecordColumns) is the records table's columns, in the
// order of its DDL, so that a column added to one and not the other fails
// here rather than in a statement.
func TestRecordColumnsAreTheTables(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t, "c.db")
	cols, err := db.strings("SELECT name FROM pragma_table_info('records', 'main') ORDER BY cid")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cols, RecordColumns) {
		t.Fatalf("records has %v, RecordColumns says %v", cols, RecordColumns)
	}
	var r storage.Record
	if n := len(RecordFields(&r)); n != len(cols) {
		t.Fatalf("RecordFields has %d fields for %d columns", n, len(cols))
	}
}
